"""Every input aclnnRmsNormGrad forbids: the documented status, a message naming the parameter and the rule,
nothing written to the caller's arrays, through both the op API and the two-phase aclnn form."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import tilesim.kernels as kernels
from tilesim.kernels import aclnn

from tilesim import AclnnError

F32, F16, BF16 = np.float32, np.float16, ml_dtypes.bfloat16


def a(shape, dtype=F32):
    return np.ones(shape, dtype)


GOOD = dict(dy=a((4, 64)), x=a((4, 64)), rstd=a((4,)), gamma=a((64,)))

# (name, changes to GOOD, soc, status, words the message must contain)
CASES = [
    ("dy None", dict(dy=None), "Ascend910B1", 161001, ["dy"]),
    ("x None", dict(x=None), "Ascend910B1", 161001, ["x"]),
    ("rstd None", dict(rstd=None), "Ascend910B1", 161001, ["rstd"]),
    ("gamma None", dict(gamma=None), "Ascend910B1", 161001, ["gamma"]),
    ("dy float64", dict(dy=a((4, 64), np.float64), x=a((4, 64), np.float64)), "Ascend910B1", 161002, ["dy", "float64"]),
    ("dy int32", dict(dy=a((4, 64), np.int32), x=a((4, 64), np.int32)), "Ascend910B1", 161002, ["dy", "int32"]),
    ("x dtype differs", dict(x=a((4, 64), F16)), "Ascend910B1", 161002, ["x", "float16"]),
    ("rstd fp16", dict(rstd=a((4,), F16)), "Ascend910B1", 161002, ["rstd", "float32"]),
    ("gamma fp16 with fp32 dy", dict(gamma=a((64,), F16)), "Ascend910B1", 161002, ["gamma"]),
    ("gamma bf16 with fp16 dy", dict(dy=a((4, 64), F16), x=a((4, 64), F16), gamma=a((64,), BF16)), "Ascend910B1",
     161002, ["gamma"]),
    ("bf16 on 310P", dict(dy=a((4, 64), BF16), x=a((4, 64), BF16)), "Ascend310P3", 161002, ["bfloat16", "310P"]),
    ("fp32 gamma with fp16 dy on 310P", dict(dy=a((4, 64), F16), x=a((4, 64), F16)), "Ascend310P3", 161002,
     ["gamma"]),
    ("x rank 9", dict(dy=a((1,) * 8 + (64,)), x=a((1,) * 8 + (64,)), rstd=a((1,) * 8)), "Ascend910B1", 561002,
     ["x", "rank 9"]),
    ("gamma rank 0", dict(gamma=a(())), "Ascend910B1", 561002, ["gamma", "rank 0"]),
    ("gamma rank above x", dict(gamma=a((1, 4, 64))), "Ascend910B1", 561002, ["gamma", "rank"]),
    ("dy rank differs", dict(dy=a((1, 4, 64))), "Ascend910B1", 561002, ["dy", "rank"]),
    ("dy shape differs", dict(dy=a((5, 64))), "Ascend910B1", 561002, ["dy", "shape"]),
    ("last axis 0", dict(dy=a((4, 0)), x=a((4, 0)), gamma=a((0,))), "Ascend910B1", 561002, ["last axis"]),
    ("rstd not leading dims", dict(rstd=a((5,))), "Ascend910B1", 561002, ["rstd"]),
    ("rstd too few dims, x axis not 1", dict(dy=a((4, 3, 64)), x=a((4, 3, 64)), rstd=a((4,)), gamma=a((64,))),
     "Ascend910B1", 561002, ["axis 1", "must be 1"]),
    ("gamma not trailing dims", dict(gamma=a((32,))), "Ascend910B1", 561002, ["gamma", "last"]),
    ("numel(rstd) != rows", dict(rstd=a((4, 2))), "Ascend910B1", 561002, ["rstd", "numel"]),
    ("empty tensor", dict(dy=a((0, 64)), x=a((0, 64)), rstd=a((0,))), "Ascend910B1", 561002, ["empty"]),
    ("910 D not multiple of 64", dict(dy=a((4, 100)), x=a((4, 100)), gamma=a((100,))), "Ascend910A", 561002,
     ["64", "910"]),
    ("310P last axis under 32 B", dict(dy=a((4, 7)), x=a((4, 7)), gamma=a((7,))), "Ascend310P3", 561002, ["32 B"]),
]


@pytest.mark.parametrize("name,change,soc,status,words", CASES, ids=[c[0] for c in CASES])
def test_bad_input(name, change, soc, status, words):
    args = {**GOOD, **change}
    inputs = {k: (None if v is None else v.copy()) for k, v in args.items()}
    dx_shape = args["dy"].shape if args["dy"] is not None else (4, 64)
    dx = np.full(dx_shape, 7, args["dy"].dtype if args["dy"] is not None else F32)
    dgamma = np.full(args["gamma"].shape if args["gamma"] is not None else (64,), 7, F32)
    with pytest.raises(AclnnError) as e:
        kernels.rms_norm_grad(args["dy"], args["x"], args["rstd"], args["gamma"], soc=soc, out=(dx, dgamma))
    assert e.value.status == status, e.value.message
    for w in words:
        assert w in e.value.message, e.value.message
    assert np.all(dx.astype(np.float64) == 7) and np.all(dgamma == 7)
    for k, v in args.items():
        if v is not None:
            np.testing.assert_array_equal(v, inputs[k])
    st, ws, ex = aclnn.rms_norm_grad_get_workspace_size(args["dy"], args["x"], args["rstd"], args["gamma"], dx,
                                                        dgamma, soc=soc)
    assert (st, ws, ex) == (status, 0, None)
    assert aclnn.get_recent_err_msg() == e.value.message


def test_unknown_soc():
    with pytest.raises(AclnnError) as e:
        kernels.rms_norm_grad(**GOOD, soc="Ascend999")
    assert e.value.status == 161002 and "Ascend910B1" in e.value.message


def test_bad_out_arrays():
    for bad in ((a((4, 63)), a((64,))), (a((4, 64), F16), a((64,))), (a((4, 64)), a((64,), F16))):
        with pytest.raises(AclnnError) as e:
            kernels.rms_norm_grad(**GOOD, out=bad)
        assert e.value.status == 161002


def test_aclnn_two_phase():
    dx, dgamma = np.empty((4, 64), F32), np.empty(64, F32)
    st, ws, ex = aclnn.rms_norm_grad_get_workspace_size(GOOD["dy"], GOOD["x"], GOOD["rstd"], GOOD["gamma"], dx,
                                                        dgamma)
    assert st == 0 and ws == 16 * 1024 * 1024 + 8 * 4 * 4
    assert aclnn.rms_norm_grad(np.empty(ws - 1, np.uint8), ws - 1, ex) == 161002
    assert aclnn.rms_norm_grad(None, ws, ex) == 161001
    assert aclnn.rms_norm_grad(np.empty(ws, np.uint8), ws, None) == 161001
    assert aclnn.rms_norm_grad(np.empty(ws, np.uint8), ws, ex) == 0
    rdx, rdgamma = kernels.rms_norm_grad(**GOOD)
    np.testing.assert_array_equal(dx, rdx)
    np.testing.assert_array_equal(dgamma, rdgamma)
    # Output checks of the first phase: null 161001, dtype 161002, shape 561002.
    assert aclnn.rms_norm_grad_get_workspace_size(*GOOD.values(), None, dgamma)[0] == 161001
    assert aclnn.rms_norm_grad_get_workspace_size(*GOOD.values(), dx.astype(F16), dgamma)[0] == 161002
    assert aclnn.rms_norm_grad_get_workspace_size(*GOOD.values(), dx, dgamma[:32])[0] == 561002
    st, ws, ex = aclnn.rms_norm_grad_get_workspace_size(*GOOD.values(), dx, dgamma, deterministic=True)
    assert st == 0 and ws == 16 * 1024 * 1024 + (64 + 8) * 4 * 4 and ex.tiling.fixed_output == 1


def test_chunked_deterministic_tiling_is_refused_not_run():
    class Spec:  # 48 x 2**21 fp32 (768 MiB): the tiling chunks; no data is needed to see the refusal
        def __init__(self, shape):
            self.shape, self.dtype = shape, np.dtype(np.float32)

    from tilesim.kernels.rms_norm_grad import check_supported
    from tilesim.tiling import rms_norm_grad as make

    t = make(Spec((48, 2 ** 21)), Spec((48, 2 ** 21)), Spec((48,)), Spec((2 ** 21,)), deterministic=True)
    with pytest.raises(AclnnError) as e:
        check_supported(t)
    assert e.value.status == 561002 and "chunk" in e.value.message
