"""Torch CPU tensors in and out of the op functions (:mod:`tilesim.interop`): the same bits as the numpy call, no
copies on the way in, the caller's ``out=`` tensors returned as themselves, and the tensor rules refused with
161002 before anything is written."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tilesim.kernels import aclnn, op_specs, reference

import tilesim
from tilesim import kernels, tiling
from tilesim.interop import to_numpy, to_torch
from tilesim.precision import compare

SMALL = {"rms_norm_grad": (8, 96), "group_norm_backward": (2, 16, 24), "swiglu_grad": (8, 128), "swiglu": (8, 128),
         "rms_norm": (8, 96), "softmax": (8, 96), "layer_norm_grad": (8, 96), "nsa_compress_grad": (64, 2, 32)}


def tensors(inputs: dict) -> dict:
    return {k: to_torch(v) if isinstance(v, np.ndarray) else v for k, v in inputs.items()}


def bits(a: np.ndarray | torch.Tensor) -> bytes:
    return (to_numpy(a, "a") if isinstance(a, torch.Tensor) else a).tobytes()


def cases() -> list[tuple[str, str]]:
    """Each op in bf16 where it takes it (fp16 where not), and fp32 for two."""
    b16 = [(op, "bf16" if "bf16" in op_specs.OPS[op].dtypes else "fp16") for op in SMALL]
    return b16 + [("swiglu", "fp32"), ("rms_norm_grad", "fp32")]


@pytest.mark.parametrize(("op", "dtype"), cases())
def test_tensors_give_the_arrays_bits(op: str, dtype: str) -> None:
    inputs = op_specs.OPS[op].make_inputs(SMALL[op], dtype, 0)
    want = getattr(kernels, op)(**inputs)
    given = tensors(inputs)
    before = {k: bits(v) for k, v in given.items() if isinstance(v, torch.Tensor)}
    got = getattr(kernels, op)(**given)
    want, got = (want, got) if isinstance(want, tuple) else ((want,), (got,))
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert isinstance(g, torch.Tensor) and tuple(g.shape) == w.shape
        assert bits(g) == bits(w)
    assert {k: bits(v) for k, v in given.items() if isinstance(v, torch.Tensor)} == before


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_no_copy_either_way(dtype: torch.dtype) -> None:
    t = torch.arange(48, dtype=dtype).reshape(6, 8)
    a = to_numpy(t, "t")
    assert a.ctypes.data == t.data_ptr() and a.shape == (6, 8)
    assert to_torch(a).data_ptr() == t.data_ptr() and to_torch(a).dtype == dtype
    assert np.array_equal(a.astype(np.float32), t.float().numpy())


def test_out_tensors_are_returned_as_themselves() -> None:
    inputs = tensors(op_specs.rms_norm_grad_inputs((8, 96), "bf16"))
    dx = torch.full((8, 96), 7.0, dtype=torch.bfloat16)
    dgamma = torch.full((96,), 7.0)
    got = kernels.rms_norm_grad(**inputs, out=(dx, dgamma))
    assert got[0] is dx and got[1] is dgamma
    want = kernels.rms_norm_grad(**inputs)
    assert bits(dx) == bits(want[0]) and bits(dgamma) == bits(want[1])
    y = torch.empty(8, 64, dtype=torch.bfloat16)
    x = torch.randn(8, 128, dtype=torch.bfloat16)
    assert kernels.swiglu(x, out=y) is y and bits(y) == bits(kernels.swiglu(x))


def test_a_numpy_out_with_tensor_inputs_is_the_callers_array() -> None:
    x = torch.randn(8, 128)
    y = np.empty((8, 64), np.float32)
    assert kernels.swiglu(x, out=y) is y


@pytest.mark.parametrize("bad", ["requires_grad", "transposed", "meta"])
def test_refused_out_tensors_stay_as_they_were(bad: str) -> None:
    x = torch.randn(8, 128)
    if bad == "requires_grad":
        out = torch.full((8, 64), 7.0, requires_grad=True)
    elif bad == "transposed":
        out = torch.full((64, 8), 7.0).t()
    else:
        out = torch.empty(8, 64, device="meta")
    with pytest.raises(tilesim.AclnnError) as e:
        kernels.swiglu(x, out=out)
    assert e.value.status == tilesim.ACLNN_ERR_PARAM_INVALID and "out" in str(e.value)
    if bad != "meta":
        assert bool((out.detach() == 7.0).all())


def test_a_tensor_off_the_cpu_is_refused_by_name() -> None:
    with pytest.raises(tilesim.AclnnError, match="x: a torch tensor must be on the CPU, got device meta") as e:
        kernels.swiglu(torch.empty(8, 128, device="meta"))
    assert e.value.status == tilesim.ACLNN_ERR_PARAM_INVALID


def test_views_and_autograd_tensors_are_read_as_values() -> None:
    base = torch.randn(128, 8, requires_grad=True)
    x = base.t()  # not contiguous, and part of a graph
    got = kernels.swiglu(x)
    assert not got.requires_grad
    assert bits(got) == bits(kernels.swiglu(x.detach().contiguous().numpy()))


def test_tilings_read_tensors_as_arrays() -> None:
    inputs = op_specs.rms_norm_grad_inputs((8, 96), "bf16")
    assert tiling.rms_norm_grad(**tensors(inputs)) == tiling.rms_norm_grad(**inputs)
    x = op_specs.swiglu_inputs((8, 128), "fp16")["x"]
    assert tiling.swiglu(to_torch(x)) == tiling.swiglu(x)


def test_reference_and_the_standard_take_tensors(ascend_close) -> None:  # type: ignore[no-untyped-def]
    inputs = tensors(op_specs.swiglu_grad_inputs((8, 128), "bf16"))
    dx = kernels.swiglu_grad(**inputs)
    golden = reference.swiglu_grad(**inputs)
    assert isinstance(golden, torch.Tensor) and golden.dtype == torch.float64
    assert compare(dx, golden).ok
    ascend_close(dx, golden)


def test_the_aclnn_form_writes_output_tensors() -> None:
    inputs = tensors(op_specs.rms_norm_grad_inputs((8, 96), "bf16"))
    dx, dgamma = torch.zeros(8, 96, dtype=torch.bfloat16), torch.zeros(96)
    status, size, executor = aclnn.rms_norm_grad_get_workspace_size(*inputs.values(), dx, dgamma)
    assert status == tilesim.ACLNN_SUCCESS, aclnn.get_recent_err_msg()
    assert aclnn.rms_norm_grad(torch.empty(size, dtype=torch.uint8), size, executor) == tilesim.ACLNN_SUCCESS
    want = kernels.rms_norm_grad(**inputs)
    assert bits(dx) == bits(want[0]) and bits(dgamma) == bits(want[1])


def test_the_aclnn_form_refuses_a_tensor_off_the_cpu_with_a_status() -> None:
    x = torch.empty(8, 128, device="meta")
    status, size, executor = aclnn.swi_glu_get_workspace_size(x, -1, torch.empty(8, 64))
    assert (status, size, executor) == (tilesim.ACLNN_ERR_PARAM_INVALID, 0, None)
    assert aclnn.get_recent_err_msg() == "x: a torch tensor must be on the CPU, got device meta"


def test_a_negative_view_is_read_as_the_values_it_shows() -> None:
    # torch._neg_view flips a bit, not the memory: a bf16 one went through an int16 view, which torch refuses
    for dtype in (torch.bfloat16, torch.float32):
        x = torch.randn(8, 128).to(dtype)
        got = kernels.swiglu(torch._neg_view(x))
        assert bits(got) == bits(kernels.swiglu(-x))


def test_a_negative_view_as_out_is_refused() -> None:
    # its memory holds the negated values: a write through a resolved copy would be lost
    x = torch.randn(8, 128, dtype=torch.bfloat16)
    mem = torch.full((8, 64), 7.0, dtype=torch.bfloat16)
    with pytest.raises(tilesim.AclnnError, match="out: .*negative or conjugate view") as e:
        kernels.swiglu(x, out=torch._neg_view(mem))
    assert e.value.status == tilesim.ACLNN_ERR_PARAM_INVALID
    assert bool((mem == 7.0).all())


@pytest.mark.parametrize("make", [lambda t: t.to_sparse(), lambda t: t.to_sparse_csr(),
                                  lambda t: t.to(torch.float8_e4m3fn)],
                         ids=["sparse_coo", "sparse_csr", "float8"])
def test_tensors_numpy_has_no_form_of_are_refused_by_name(make) -> None:  # type: ignore[no-untyped-def]
    x = make(torch.randn(8, 128))
    y = np.full((8, 64), 7, np.float32)
    with pytest.raises(tilesim.AclnnError, match="^\\[161002\\] x: ") as e:
        kernels.swiglu(x, out=y)
    assert e.value.status == tilesim.ACLNN_ERR_PARAM_INVALID
    assert (y == 7).all()
    status, size, executor = aclnn.swi_glu_get_workspace_size(x, -1, y)
    assert (status, size, executor) == (tilesim.ACLNN_ERR_PARAM_INVALID, 0, None)
