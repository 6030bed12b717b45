"""Odd input to the op functions and their aclnn two-phase forms: every call either runs or raises
:class:`tilesim.AclnnError` with an aclnn status and a message naming the parameter, writes nothing on error, and
never raises anything else. Array-likes are read as numpy reads them (their dtype still one of the op's), ``out=``
is checked whole (its length, its arrays' memory), a hand-made tiling field by field against what its free choices
derive, integer parameters as integers. A property test throws odd values at every parameter of every op."""

from __future__ import annotations

import dataclasses
import math
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from refusals import assert_refused
from tilesim.kernels import aclnn, layer_norm_grad_beta, op_specs

from tilesim import AclnnError, kernels, tiling

STATUSES = {161001, 161002, 561002, 561003, 361001}


@dataclass(frozen=True)
class Op:
    """An op function with small valid arguments (by name), its input tensors with the names its messages use,
    its outputs' shapes and dtype, and its aclnn form (``aclnn(args, outs)``; None where it has none)."""

    fn: Callable[..., Any]
    make: Callable[[], dict[str, Any]]
    tensors: dict[str, str]
    outs: tuple[tuple[tuple[int, ...], Any], ...]
    aclnn: Callable[[dict[str, Any], list[Any]], Any] | None = None
    tiling: Callable[..., Any] | None = None

    def args(self, **changes: Any) -> dict[str, Any]:
        return {**self.make(), **changes}

    def sevens(self) -> list[np.ndarray]:
        return [np.full(s, 7, dt) for s, dt in self.outs]


F32, F16 = np.float32, np.float16
GN_MASK = (True, True, True)
OPS: dict[str, Op] = {
    "rms_norm_grad": Op(
        kernels.rms_norm_grad, lambda: op_specs.rms_norm_grad_inputs((4, 64), "fp32"),
        {"dy": "dy", "x": "x", "rstd": "rstd", "gamma": "gamma"}, (((4, 64), F32), ((64,), F32)),
        lambda a, o: aclnn.rms_norm_grad_get_workspace_size(a["dy"], a["x"], a["rstd"], a["gamma"], *o),
        tiling.rms_norm_grad),
    "group_norm_backward": Op(
        kernels.group_norm_backward, lambda: op_specs.group_norm_backward_inputs((2, 8, 16), "fp32"),
        {"grad_out": "gradOut", "input": "input", "mean": "mean", "rstd": "rstd", "gamma": "gamma"},
        (((2, 8, 16), F32), ((8,), F32), ((8,), F32)),
        lambda a, o: aclnn.group_norm_backward_get_workspace_size(
            a["grad_out"], a["input"], a["mean"], a["rstd"], a["gamma"], a["N"], a["C"], a["HxW"], a["group"],
            a.get("output_mask", GN_MASK), *o),
        tiling.group_norm_backward),
    "swiglu_grad": Op(
        kernels.swiglu_grad, lambda: op_specs.swiglu_grad_inputs((4, 64), "fp32"), {"y_grad": "yGrad", "x": "x"},
        (((4, 64), F32),), lambda a, o: aclnn.swi_glu_grad_get_workspace_size(a["y_grad"], a["x"], a["dim"], *o),
        tiling.swiglu_grad),
    "swiglu": Op(
        kernels.swiglu, lambda: op_specs.swiglu_inputs((4, 64), "fp32"), {"x": "x"}, (((4, 32), F32),),
        lambda a, o: aclnn.swi_glu_get_workspace_size(a["x"], a["dim"], *o), tiling.swiglu),
    "softmax": Op(
        kernels.softmax, lambda: op_specs.softmax_inputs((4, 64), "fp32"), {"x": "x"}, (((4, 64), F32),),
        lambda a, o: aclnn.softmax_get_workspace_size(a["x"], a["dim"], *o), tiling.softmax),
    "rms_norm": Op(
        kernels.rms_norm, lambda: op_specs.rms_norm_inputs((4, 64), "fp32"), {"x": "x", "gamma": "gamma"},
        (((4, 64), F32), ((4, 1), F32)),
        lambda a, o: aclnn.rms_norm_get_workspace_size(a["x"], a["gamma"], a["epsilon"], *o), tiling.rms_norm),
    "layer_norm_grad": Op(
        kernels.layer_norm_grad, lambda: op_specs.layer_norm_grad_inputs((4, 64), "fp32"),
        {"dy": "dy", "x": "x", "variance": "variance", "mean": "mean", "gamma": "gamma"},
        (((4, 64), F32), ((64,), F32), ((64,), F32)),
        lambda a, o: aclnn.layer_norm_grad_get_workspace_size(a["dy"], a["x"], a["variance"], a["mean"], a["gamma"],
                                                              a["epsilon"], *o),
        tiling.layer_norm_grad),
    "nsa_compress_grad": Op(
        kernels.nsa_compress_grad, lambda: op_specs.nsa_compress_grad_inputs((64, 2, 16), "fp16", seqs=2),
        {"output_grad": "outputGrad", "input": "input", "weight": "weight"}, (((64, 2, 16), F16), ((32, 2), F16)),
        lambda a, o: aclnn.nsa_compress_grad_get_workspace_size(
            a["output_grad"], a["input"], a["weight"], a["act_seq_len"], a["compress_block_size"],
            a["compress_stride"], 0, "TND", *o),
        tiling.nsa_compress_grad),
    "layer_norm_grad_beta": Op(
        layer_norm_grad_beta,
        lambda: {k: np.random.default_rng(i).uniform(-1, 1, (1, 4, 64)).astype(F32)
                 for i, k in enumerate(("res_for_gamma", "dy"))},
        {"res_for_gamma": "resForGamma", "dy": "inputDy"}, (((64,), F32), ((64,), F32))),
}
TILED = [k for k, op in OPS.items() if op.tiling is not None]
MULTI = [k for k, op in OPS.items() if len(op.outs) > 1]


def out_arg(op: Op, outs: list[Any]) -> Any:
    """``out=`` as the op takes it: the array of a single-output op, a tuple otherwise."""
    return outs[0] if len(op.outs) == 1 else tuple(outs)


def official(op: Op, args: dict[str, Any]) -> Any:
    return op.tiling(**args)


def refused(name: str, **changes: Any) -> tuple[Callable[[], Any], Callable[[], Any], list[np.ndarray], dict]:
    """The op call and the aclnn call with ``changes``, on fresh 7-filled outputs: for :func:`assert_refused`."""
    op = OPS[name]
    args, outs = op.args(**changes), op.sevens()
    return (lambda: op.fn(**args, out=out_arg(op, outs)), lambda: op.aclnn(args, outs), outs, args)


# ------------------------------------------------------------------------------------------------------------------
# array-likes


@pytest.mark.parametrize(("name", "param"), [(k, p) for k, op in OPS.items() for p in op.tensors])
def test_a_list_of_python_floats_is_float64_and_refused_by_name(name: str, param: str) -> None:
    op = OPS[name]
    args, outs = op.args(), op.sevens()
    args[param] = args[param].tolist()
    with pytest.raises(AclnnError) as e:
        op.fn(**args, out=out_arg(op, outs))
    assert e.value.status == 161002 and op.tensors[param] in e.value.message and "float64" in e.value.message
    assert all((o == 7).all() for o in outs)
    if op.aclnn is not None:
        status, size, executor = op.aclnn(args, outs)
        assert (status, size, executor) == (161002, 0, None) and aclnn.get_recent_err_msg() == e.value.message


@pytest.mark.parametrize("name", list(OPS))
def test_an_array_like_of_the_ops_dtype_is_read_as_its_array(name: str) -> None:
    # a list of rows (each an array of the op's dtype) is what np.asarray makes an array of that dtype
    op = OPS[name]
    args = op.args()
    want = op.fn(**args)
    param = next(iter(op.tensors))
    got = op.fn(**{**args, param: list(args[param])})
    for g, w in zip(*((r,) if isinstance(r, np.ndarray) else r for r in (got, want)), strict=True):
        np.testing.assert_array_equal(g.view(np.uint8), w.view(np.uint8))


@pytest.mark.parametrize("value", [[[1.0, 2.0], [3.0]], "abc", {"a": 1}, object()],
                         ids=["ragged", "str", "dict", "object"])
def test_what_numpy_cannot_read_as_numbers_is_refused_by_name(value: Any) -> None:
    call, ws, outs, _ = refused("softmax", x=value)
    assert_refused(call, ws, 161002, ["x: must be an array or tensor", type(value).__name__], [], outs)


# ------------------------------------------------------------------------------------------------------------------
# out=


@pytest.mark.parametrize("name", MULTI)
def test_out_of_the_wrong_length_is_refused(name: str) -> None:
    op = OPS[name]
    outs = op.sevens()
    for out in (tuple(outs[:-1]), (*outs, None), outs[0], 3):
        with pytest.raises(AclnnError) as e:
            op.fn(**op.args(), out=out)
        assert e.value.status == 161002 and e.value.message.startswith(f"out: must be None or a tuple of {len(outs)}")
    assert all((o == 7).all() for o in outs)


@pytest.mark.parametrize("name", [k for k in OPS if k not in MULTI])
def test_out_of_a_single_output_op_is_an_array(name: str) -> None:
    op = OPS[name]
    o = op.sevens()[0]
    for out in ((o,), [o], o.tolist()):
        with pytest.raises(AclnnError) as e:
            op.fn(**op.args(), out=out)
        assert e.value.status == 161002 and "out" in e.value.message and "numpy array" in e.value.message
    assert (o == 7).all()


def overlapping(op: Op, i: int, j: int) -> list[np.ndarray]:
    """7-filled outputs where i and j are views of one buffer (both at its start)."""
    outs = op.sevens()
    (si, dt), (sj, _) = op.outs[i], op.outs[j]
    buf = np.full(max(math.prod(si), math.prod(sj)), 7, dt)
    outs[i], outs[j] = buf[:math.prod(si)].reshape(si), buf[:math.prod(sj)].reshape(sj)
    return outs


# (op, the two outputs, their names) for every op with two outputs of one dtype
SHARED = [("rms_norm_grad", 0, 1, "dx", "dgamma", "dxOut", "dgammaOut"),
          ("group_norm_backward", 1, 2, "gradGammaOut", "gradBetaOut", "gradGammaOut", "gradBetaOut"),
          ("group_norm_backward", 0, 2, "gradInput", "gradBetaOut", "gradInput", "gradBetaOut"),
          ("rms_norm", 0, 1, "y", "rstd", "yOut", "rstdOut"),
          ("layer_norm_grad", 1, 2, "pd_gamma", "pd_beta", "pd_gamma", "pd_beta"),
          ("nsa_compress_grad", 0, 1, "inputGrad", "weightGrad", "inputGrad", "weightGrad"),
          ("layer_norm_grad_beta", 0, 1, "outputPdGamma", "outputPdBeta", None, None)]


@pytest.mark.parametrize(("name", "i", "j", "a", "b", "aa", "ab"), SHARED,
                         ids=[f"{c[0]}-{c[3]}-{c[4]}" for c in SHARED])
def test_outputs_that_share_memory_are_refused_naming_both(name: str, i: int, j: int, a: str, b: str,
                                                          aa: str | None, ab: str | None) -> None:
    op = OPS[name]
    args = op.args()
    outs = overlapping(op, i, j)
    with pytest.raises(AclnnError) as e:
        op.fn(**args, out=out_arg(op, outs))
    assert e.value.status == 161002
    assert e.value.message == f"{b}: shares memory with {a}: each output needs its own memory"
    assert all((o == 7).all() for o in outs)
    if op.aclnn is not None:
        assert op.aclnn(args, outs) == (161002, 0, None)
        assert aclnn.get_recent_err_msg() == f"{ab}: shares memory with {aa}: each output needs its own memory"
        assert all((o == 7).all() for o in outs)


@pytest.mark.parametrize("checks", [False, True], ids=["fast", "checked"])
def test_an_output_over_an_input_is_computed_as_if_apart(checks: bool) -> None:
    # the launch computes into temporaries when an output overlaps an input: the kernel never reads what it wrote
    op = OPS["rms_norm_grad"]
    args = op.args()
    want = op.fn(**args)
    dy = args["dy"].copy()
    dx, dgamma = op.fn(**{**args, "dy": dy}, out=(dy, None), checks=checks)
    assert dx is dy
    np.testing.assert_array_equal(dx, want[0])
    np.testing.assert_array_equal(dgamma, want[1])
    x = OPS["softmax"].args()["x"]
    want = kernels.softmax(x)
    got = kernels.softmax(x, out=x, checks=checks)
    assert got is x
    np.testing.assert_array_equal(got, want)


# ------------------------------------------------------------------------------------------------------------------
# tiling=


@pytest.mark.parametrize("name", TILED)
def test_a_tiling_of_another_class_is_refused(name: str) -> None:
    op = OPS[name]
    another = OPS["swiglu" if name == "softmax" else "softmax"]
    want = type(official(op, op.args()))
    for bad in ({}, {"block_dim": 1}, object(), 3, official(another, another.args())):
        outs = op.sevens()
        with pytest.raises(AclnnError) as e:
            op.fn(**op.args(), tiling=bad, out=out_arg(op, outs))
        assert e.value.status == 561002, e.value.message
        assert e.value.message.startswith(f"tiling: must be a {want.__module__}.{want.__qualname__}"), e.value.message
        assert all((o == 7).all() for o in outs)


def changed(v: Any) -> Any:
    """A value of ``v``'s type that differs from it."""
    if isinstance(v, bool):
        return not v
    if isinstance(v, int):
        return v + 1
    if isinstance(v, float):
        return v * 2 + 1
    if isinstance(v, str):
        return v + "x"
    if isinstance(v, tuple):
        return (dataclasses.replace(v[0], **{dataclasses.fields(v[0])[0].name: changed(
            getattr(v[0], dataclasses.fields(v[0])[0].name))}), *v[1:])
    raise AssertionError(type(v))


@pytest.mark.parametrize("name", TILED)
def test_every_derived_field_is_checked(name: str) -> None:
    # a field no free choice sets, changed alone: refused, naming it with its value and the derived one
    op = OPS[name]
    args = op.args()
    t = official(op, args)
    carriers = set(t.choice_fields().values())
    outs = op.sevens()
    for f in dataclasses.fields(t):
        if f.name in carriers:
            continue
        v = getattr(t, f.name)
        with pytest.raises(AclnnError) as e:
            op.fn(**args, tiling=dataclasses.replace(t, **{f.name: changed(v)}), out=out_arg(op, outs))
        assert e.value.status == 561002 and e.value.message.startswith(f"tiling.{f.name}: is "), e.value.message
        assert f"give {v!r}" in e.value.message, e.value.message
    assert all((o == 7).all() for o in outs)


@pytest.mark.parametrize("name", TILED)
def test_a_field_of_another_type_is_refused_by_name(name: str) -> None:
    op = OPS[name]
    args = op.args()
    t = official(op, args)
    outs = op.sevens()
    for bad in ("3", None, 2.5, np.array([1, 2]), [1]):
        with pytest.raises(AclnnError) as e:
            op.fn(**args, tiling=dataclasses.replace(t, block_dim=bad), out=out_arg(op, outs))
        assert e.value.status == 561002 and e.value.message.startswith("tiling.block_dim: must be an integer, got ")
    assert all((o == 7).all() for o in outs)


def test_rms_norm_grad_derived_fields_that_used_to_run() -> None:
    # avg_factor changed ran and computed with it; fixed_output flipped ran the deterministic kernel on a
    # workspace sized for the other one (a GM out-of-bounds error inside the kernel)
    op = OPS["rms_norm_grad"]
    args = op.args()
    for det in (False, True):
        t = tiling.rms_norm_grad(**args, deterministic=det)
        for change, field in ((dict(avg_factor=t.avg_factor * 2), "avg_factor"),
                              (dict(fixed_output=1 - t.fixed_output), "fixed_output")):
            outs = op.sevens()
            with pytest.raises(AclnnError) as e:
                op.fn(**args, deterministic=det, tiling=tiling.replace(t, **change), out=tuple(outs))
            assert e.value.status == 561002 and e.value.message.startswith(f"tiling.{field}: is "), e.value.message
            assert all((o == 7).all() for o in outs)


def test_a_huge_count_is_a_mismatch_not_a_loop() -> None:
    # the task count of a hand-edited GroupNormBackward tiling is compared, not enumerated (2**31 tasks: 21 GB)
    op = OPS["group_norm_backward"]
    args = op.args(**op_specs.group_norm_backward_inputs((1, 8, 16), "fp32", groups=1))
    t = official(op, args)
    assert t.block_dim == 1
    for count in (2**22, 2**31):
        tracemalloc.start()
        try:
            with pytest.raises(AclnnError) as e:
                op.fn(**args, tiling=dataclasses.replace(t, task_num_per_core=count, task_num_per_tail_core=count))
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 4 << 20, f"{peak} B traced for a task count of {count}"
        assert e.value.status == 561002 and e.value.message.startswith(f"tiling.task_num_per_core: is {count} but")


# ------------------------------------------------------------------------------------------------------------------
# integer and flag parameters


@pytest.mark.parametrize(("change", "words"), [
    (dict(act_seq_len=[32.0, 64.0]), ["actSeqLen", "integers", "float64"]),
    (dict(act_seq_len=[32, float("nan")]), ["actSeqLen", "integers"]),
    (dict(act_seq_len=["32", "64"]), ["actSeqLen", "integers"]),
    (dict(act_seq_len=[[32, 64]]), ["actSeqLen", "1-D", "[1, 2]"]),
    (dict(act_seq_len=[]), ["actSeqLen", "empty"]),
    (dict(act_seq_len=[True, True]), ["actSeqLen", "integers"]),
    (dict(compress_block_size=32.0), ["compressBlockSize", "integer", "float"]),
    (dict(compress_stride="16"), ["compressStride", "integer", "str"]),
    (dict(compress_stride=None), ["compressStride", "integer"]),
], ids=str)
def test_nsa_integer_parameters(change: dict[str, Any], words: list[str]) -> None:
    call, ws, outs, args = refused("nsa_compress_grad", **change)
    assert_refused(call, ws, 161002, words, [args["input"]], outs)


@pytest.mark.parametrize(("change", "words"), [
    (dict(N=2.0), ["N", "integer", "float"]), (dict(C="8"), ["C", "integer", "str"]),
    (dict(HxW=None), ["HxW", "integer"]), (dict(group=float("nan")), ["group", "integer"]),
    (dict(N=-2, C=-8), ["N", "negative"]), (dict(output_mask=("yes", True, True)), ["outputMask[0]", "True or False"]),
    (dict(output_mask=3), ["outputMask", "sequence"]),
], ids=str)
def test_group_norm_backward_integer_parameters(change: dict[str, Any], words: list[str]) -> None:
    call, ws, outs, args = refused("group_norm_backward", **change)
    assert_refused(call, ws, 161002, words, [args["input"]], outs)


@pytest.mark.parametrize(("name", "change", "param"), [
    ("rms_norm_grad", dict(deterministic="no"), "deterministic"),
    ("layer_norm_grad", dict(is_reuse_source=1), "is_reuse_source"),
    ("softmax", dict(checks="no"), "checks"), ("group_norm_backward", dict(checks=2), "checks"),
    ("layer_norm_grad_beta", dict(checks="yes"), "checks"), ("layer_norm_grad_beta", dict(tmp_bytes=1e4), "tmp_bytes"),
], ids=str)
def test_flags_are_bools(name: str, change: dict[str, Any], param: str) -> None:
    op = OPS[name]
    outs = op.sevens()
    with pytest.raises(AclnnError) as e:
        op.fn(**op.args(**change), out=out_arg(op, outs))
    assert e.value.status == 161002 and e.value.message.startswith(f"{param}: must be "), e.value.message
    assert all((o == 7).all() for o in outs)


# ------------------------------------------------------------------------------------------------------------------
# empty inputs, huge shapes


@pytest.mark.parametrize("dtype", [np.int8, np.float64, ml_dtypes.bfloat16, F32])
def test_an_empty_softmax_input_of_any_dtype_gives_an_empty_output(dtype: Any) -> None:
    # aclnnSoftmax returns for an empty self before it checks dtypes
    x = np.zeros((0, 64), dtype)
    y = kernels.softmax(x)
    assert y.shape == (0, 64) and y.dtype == np.dtype(dtype)
    assert aclnn.softmax_get_workspace_size(x, -1, np.zeros((0, 64), dtype))[:2] == (0, 0)


def test_a_shape_too_large_to_allocate_writes_nothing() -> None:
    # 2**43 rows of 64 floats (2**51 B, past any address space): refused or a MemoryError, before any write
    op = OPS["rms_norm_grad"]
    args = op.args()
    big = (2**43, 64)
    huge = {k: np.broadcast_to(args[k].reshape(-1)[:1], big if k in ("dy", "x") else big[:1])
            for k in ("dy", "x", "rstd")}
    dgamma = np.full(64, 7, F32)
    with pytest.raises((AclnnError, MemoryError)):
        op.fn(**{**args, **huge}, out=(None, dgamma))
    assert (dgamma == 7).all()


# ------------------------------------------------------------------------------------------------------------------
# the property: odd values anywhere


def tensor_values(a: np.ndarray) -> list[Any]:
    dt = a.dtype
    return [None, a.tolist(), 1.5, np.asarray(a.reshape(-1)[0]), a.astype(np.int8), a.astype(np.float64),
            a.astype(bool), a.astype(np.complex64), a.astype(object), "abc", {}, np.repeat(a, 2, -1)[..., ::2],
            np.zeros((0, *a.shape[1:]), dt), np.zeros((0,), np.int8), a.T, a[..., :1], a.reshape(-1),
            np.broadcast_to(a, (2, *a.shape))]


INTS = [None, 1.5, float("nan"), float("inf"), -1, 0, 1, 2**31, 2**63, 2**70, "3", True, [3], np.float64(2.0),
        np.uint8(255), np.int64(-(2**40))]
REALS = [None, float("nan"), float("inf"), -1.0, "1e-6", True, [1e-6], np.float16(1e-3), 0, 2**70, np.int8(1)]
OPTIONS = {
    "soc": [123, None, "x", 1.5, "Ascend310P3", "Ascend910A", "Ascend910B3", "Ascend910_9391"],
    "checks": ["yes", 2, [], None, np.True_, True, 0.0],
    "deterministic": ["yes", 1, None, np.True_, True],
    "is_reuse_source": ["yes", 1, None, True],
    "tmp": ["x", None, 3, "framework"],
    "tmp_bytes": [-1, 0, 1.5, 2**40, "1"],
    "layout": ["BSND", None, 3, b"TND"],
    "act_seq_len_type": [1, 0.0, None, "0", True],
    "output_mask": [None, (True,), ("yes",) * 3, (1, 1, 1), np.array([True] * 3), (False,) * 3, "abc", 3,
                    (True, False, True)],
}


def odd_values(name: str, param: str, value: Any) -> list[Any]:
    op = OPS[name]
    if param in op.tensors:
        return tensor_values(value)
    if param == "act_seq_len":
        v = list(value)
        return [[1.5], [float("nan")], ["32"], [v], [], np.array(v, float), np.array(v, np.int8), tuple(v),
                [-x for x in v], v[::-1], [*v, 2**70], 64, None]
    if param in OPTIONS:
        return OPTIONS[param]
    if isinstance(value, float):
        return REALS
    return INTS


def out_values(op: Op) -> list[Any]:
    outs = op.sevens()
    o0 = outs[0]
    ro = o0.copy()
    ro.flags.writeable = False
    wrong = [np.full(o.shape, 7, np.float64) for o in outs]
    return [tuple(outs[:-1]), [*outs], 3, (o0, *outs[1:]) if len(outs) == 1 else (o0, o0, *outs[2:]),
            ro if len(outs) == 1 else (ro, *outs[1:]), wrong[0] if len(outs) == 1 else tuple(wrong),
            np.repeat(o0, 2, -1)[..., ::2] if len(outs) == 1 else (np.repeat(o0, 2, -1)[..., ::2], *outs[1:]),
            np.asarray(7.0, o0.dtype)]


def tiling_values(op: Op, args: dict[str, Any]) -> list[Any]:
    t = official(op, args)
    res: list[Any] = [{}, object(), 3, "t", official(OPS["swiglu"], OPS["swiglu"].args())]
    for f in dataclasses.fields(t):
        for v in (0, -1, 2**31, 2**70, 1.5, float("nan"), "x", None, np.array([1]), True):
            res.append(dataclasses.replace(t, **{f.name: v}))
    return res


def mutations(name: str) -> list[tuple[str, int]]:
    """Every (parameter, index of an odd value) of an op; :func:`odd_value` makes the value afresh."""
    op = OPS[name]
    args = op.make()
    res = [(p, i) for p, v in args.items() for i in range(len(odd_values(name, p, v)))]
    res += [(p, i) for p in ("soc", "checks") for i in range(len(OPTIONS[p]))]
    if op.tiling is not None:
        res += [("tiling", i) for i in range(len(tiling_values(op, args)))]
    res += [("out", i) for i in range(len(out_values(op)))]
    return res


def odd_value(name: str, param: str, i: int, args: dict[str, Any]) -> Any:
    op = OPS[name]
    if param == "tiling":
        return tiling_values(op, args)[i]
    if param == "out":
        return out_values(op)[i]
    if param in ("soc", "checks"):
        return OPTIONS[param][i]
    return odd_values(name, param, args[param])[i]


# what the aclnn calls here leave out (they pass the tensors, the integer parameters and GroupNormBackward's mask)
NOT_IN_ACLNN = {"soc", "tiling", "checks", "out", "deterministic", "tmp", "is_reuse_source", "act_seq_len_type",
                "layout", "tmp_bytes"}


def arrays_in(v: Any) -> list[np.ndarray]:
    if isinstance(v, np.ndarray):
        return [v]
    if isinstance(v, tuple | list):
        return [a for x in v for a in arrays_in(x)]
    return []


@pytest.mark.parametrize("name", list(OPS))
@settings(max_examples=30, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_odd_values_are_run_or_refused_with_a_status(name: str, data: st.DataObject) -> None:
    op = OPS[name]
    picks = data.draw(st.lists(st.sampled_from(mutations(name)), min_size=1, max_size=2, unique_by=lambda m: m[0]))
    args = op.make()
    before = {k: np.array(v, copy=True) for k, v in args.items() if isinstance(v, np.ndarray)}
    changes = {p: odd_value(name, p, i, args) for p, i in picks}
    outs = op.sevens()
    kw = {"out": out_arg(op, outs), **changes}
    given_outs = outs if "out" not in changes else [a for a in arrays_in(changes["out"]) if a.flags.writeable]
    sevens = [a.copy() for a in given_outs]
    call = {**args, **kw}
    try:
        op.fn(**call)
    except AclnnError as e:
        assert e.status in STATUSES, e
        for a, s in zip(given_outs, sevens, strict=True):
            assert np.array_equal(a, s, equal_nan=True), f"{picks}: an output was written before: {e}"
    for k, v in before.items():
        np.testing.assert_array_equal(args[k], v)
    if op.aclnn is None or NOT_IN_ACLNN & changes.keys():
        return
    outs = op.sevens()
    status, size, executor = op.aclnn({**args, **changes}, outs)
    if status == 0:
        assert aclnn.get_recent_err_msg() == ""
        run = getattr(aclnn, {"swiglu": "swi_glu", "swiglu_grad": "swi_glu_grad"}.get(name, name))
        status = run(np.empty(size, np.uint8), size, executor)
    if status:
        assert status in STATUSES, (status, aclnn.get_recent_err_msg())
        assert all((o == 7).all() for o in outs), f"{picks}: the aclnn form wrote an output before its error"
