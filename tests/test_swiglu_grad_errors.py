"""Every input aclnnSwiGluGrad forbids: the documented status, a message naming the parameter and the rule,
nothing written to the caller's arrays, through both the op API and the two-phase aclnn form; bad hand-made
tilings; the executor's own checks; and the boundary cases that must work."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import tilesim.kernels as kernels
import tilesim.tiling as tiling
from refusals import assert_refused
from tilesim.kernels import aclnn

from tilesim import AclnnError
from tilesim.precision import compare

F32, F16, BF16 = np.float32, np.float16, ml_dtypes.bfloat16
MIB = 1024 * 1024


def a(shape, dtype=F32, seed=0):
    """Random data in [-3, 3], so that an unchanged array is told from one that was written."""
    return np.random.default_rng(seed).uniform(-3, 3, shape).astype(dtype)


def good(shape=(4, 64), dtype=F32, dim=-1):
    x = a(shape, dtype, 1)
    d = dim % len(shape)
    y_shape = shape[:d] + (shape[d] // 2,) + shape[d + 1:]
    return dict(y_grad=a(y_shape, dtype, 2), x=x, dim=dim)


GOOD = good()

# (name, changes to GOOD, soc, status, words the message must contain)
CASES = [
    ("yGrad None", dict(y_grad=None), "Ascend910B1", 161001, ["yGrad", "None"]),
    ("x None", dict(x=None), "Ascend910B1", 161001, ["x", "None"]),
    ("both None", dict(y_grad=None, x=None), "Ascend910B1", 161001, ["yGrad"]),
    ("x float64", dict(y_grad=a((4, 32), np.float64), x=a((4, 64), np.float64)), "Ascend910B1", 161002,
     ["x", "float64", "supported"]),
    ("x int32", dict(y_grad=a((4, 32), np.int32), x=a((4, 64), np.int32)), "Ascend910B1", 161002, ["x", "int32"]),
    ("x float64, yGrad float32", dict(x=a((4, 64), np.float64)), "Ascend910B1", 161002, ["x", "float64"]),
    ("bf16 on 310P", good(dtype=BF16), "Ascend310P3", 161002, ["x", "bfloat16", "Ascend310P3"]),
    ("yGrad fp16, x fp32", dict(y_grad=a((4, 32), F16)), "Ascend910B1", 161002, ["yGrad", "float16", "float32"]),
    ("yGrad fp32, x bf16", dict(x=a((4, 64), BF16)), "Ascend910B1", 161002, ["yGrad", "float32", "bfloat16"]),
    ("dim = ndim", dict(dim=2), "Ascend910B1", 161002, ["dim", "2", "[-2, 1]"]),
    ("dim = -ndim - 1", dict(dim=-3), "Ascend910B1", 161002, ["dim", "-3", "[-2, 1]"]),
    ("dim 1.0", dict(dim=1.0), "Ascend910B1", 161002, ["dim", "integer", "float"]),
    ("dim True", dict(dim=True), "Ascend910B1", 161002, ["dim", "integer", "bool"]),
    ("dim None", dict(dim=None), "Ascend910B1", 161002, ["dim", "integer"]),
    ("dim '1'", dict(dim="1"), "Ascend910B1", 161002, ["dim", "integer", "str"]),
    ("odd split axis", dict(y_grad=a((4, 31)), x=a((4, 63))), "Ascend910B1", 161002, ["x", "odd", "63", "even"]),
    ("odd split axis 0", dict(y_grad=a((1, 64)), x=a((3, 64)), dim=0), "Ascend910B1", 161002,
     ["x", "axis 0", "odd size 3"]),
    ("odd split axis, even product", dict(y_grad=a((2, 3, 4)), x=a((2, 3, 4)), dim=1), "Ascend910B1", 161002,
     ["x", "axis 1", "odd size 3"]),
    ("yGrad not halved", dict(y_grad=a((4, 64))), "Ascend910B1", 161002, ["yGrad", "[4, 64]", "[4, 32]", "halved"]),
    ("yGrad halved on the wrong axis", dict(dim=0), "Ascend910B1", 161002, ["yGrad", "axis 0", "[2, 64]"]),
    ("yGrad rank differs", dict(y_grad=a((4, 32, 1))), "Ascend910B1", 161002, ["yGrad", "[4, 32, 1]"]),
    ("yGrad rows differ", dict(y_grad=a((5, 32))), "Ascend910B1", 161002, ["yGrad", "[5, 32]"]),
    ("x rank 0", dict(y_grad=a(()), x=a(())), "Ascend910B1", 161002, ["x", "rank 0", "[1, 8]"]),
    ("x rank 9", dict(y_grad=a((1,) * 8 + (32,)), x=a((1,) * 8 + (64,))), "Ascend910B1", 161002,
     ["x", "rank 9", "[1, 8]"]),
    ("x empty", dict(y_grad=a((0, 32)), x=a((0, 64))), "Ascend910B1", 161002, ["x", "empty"]),
    ("x empty split axis", dict(y_grad=a((4, 0)), x=a((4, 0))), "Ascend910B1", 161002, ["x", "empty"]),
    ("yGrad empty", dict(y_grad=a((4, 0))), "Ascend910B1", 161002, ["yGrad", "empty"]),
    ("910A: no kernel", {}, "Ascend910A", 561003, ["Ascend910A", "kernel"]),
    ("910ProB: no kernel", {}, "Ascend910ProB", 561003, ["Ascend910ProB", "kernel"]),
    ("310P colLen 96 B", dict(y_grad=a((4, 24)), x=a((4, 48))), "Ascend310P3", 561002, ["colLen 24", "64 B"]),
    ("310P fp16 colLen 32 B", good((4, 32), F16), "Ascend310P3", 561002, ["colLen 16", "64 B"]),
    ("310P colLen over axes", dict(y_grad=a((4, 3, 2)), x=a((4, 6, 2)), dim=1), "Ascend310P3", 561002,
     ["colLen 6", "64 B"]),
    ("unknown SoC", {}, "Ascend999", 161002, ["Ascend999", "Ascend910B1"]),
]


def out_like(args):
    x = args["x"]
    return np.full((4, 64) if x is None else x.shape, 7, F32 if x is None else x.dtype)


def assert_all_7(o):
    assert np.all(o.astype(np.float64) == 7), "out was written"


@pytest.mark.parametrize("name,change,soc,status,words", CASES, ids=[c[0] for c in CASES])
def test_bad_input(name, change, soc, status, words):
    args = {**GOOD, **change}
    out = out_like(args)
    assert_refused(lambda: kernels.swiglu_grad(args["y_grad"], args["x"], args["dim"], soc=soc, out=out),
                   lambda: aclnn.swi_glu_grad_get_workspace_size(args["y_grad"], args["x"], args["dim"], out, soc=soc),
                   status, words, [v for v in args.values() if isinstance(v, np.ndarray)], [out])


def test_good_call_clears_recent_error():
    out = np.empty_like(GOOD["x"])
    assert aclnn.swi_glu_grad_get_workspace_size(None, GOOD["x"], -1, out)[0] == 161001
    assert aclnn.get_recent_err_msg() != ""
    st, ws, ex = aclnn.swi_glu_grad_get_workspace_size(GOOD["y_grad"], GOOD["x"], -1, out)
    assert (st, ws) == (0, 16 * MIB) and ex is not None
    assert aclnn.get_recent_err_msg() == ""


# --- out arrays ---------------------------------------------------------------------------------------------------

def test_aclnn_out_checks():
    y, x = GOOD["y_grad"], GOOD["x"]
    assert aclnn.swi_glu_grad_get_workspace_size(y, x, -1, None) == (161001, 0, None)
    assert "out" in aclnn.get_recent_err_msg() and "None" in aclnn.get_recent_err_msg()
    bad = np.full((4, 64), 7, F16)
    assert aclnn.swi_glu_grad_get_workspace_size(y, x, -1, bad) == (161002, 0, None)
    assert "out" in aclnn.get_recent_err_msg() and "float16" in aclnn.get_recent_err_msg()
    # the wrong shape: _check_output makes it a tiling error, as for every op's aclnn form
    bad = np.full((4, 32), 7, F32)
    assert aclnn.swi_glu_grad_get_workspace_size(y, x, -1, bad) == (561002, 0, None)
    assert "out" in aclnn.get_recent_err_msg() and "[4, 32]" in aclnn.get_recent_err_msg()
    strided = np.full((4, 128), 7, F32)
    assert aclnn.swi_glu_grad_get_workspace_size(y, x, -1, strided[:, ::2]) == (161002, 0, None)
    assert "C-contiguous" in aclnn.get_recent_err_msg()
    ro = np.full((4, 64), 7, F32)
    ro.flags.writeable = False
    assert aclnn.swi_glu_grad_get_workspace_size(y, x, -1, ro) == (161002, 0, None)
    for o in (bad, strided, ro):
        assert_all_7(o)


@pytest.mark.parametrize("make", [
    lambda: np.full((4, 63), 7, F32), lambda: np.full((4, 32), 7, F32), lambda: np.full((4, 64, 1), 7, F32),
    lambda: np.full((4, 64), 7, F16), lambda: np.full((4, 64), 7, np.float64),
    lambda: np.full((4, 128), 7, F32)[:, ::2],
], ids=["cols", "halved", "rank", "fp16", "fp64", "strided"])
def test_op_bad_out_array_writes_nothing(make):
    out = make()
    with pytest.raises(AclnnError) as e:
        kernels.swiglu_grad(GOOD["y_grad"], GOOD["x"], out=out)
    assert e.value.status == 161002 and "out" in e.value.message
    assert_all_7(out)


def test_op_out_not_an_array():
    with pytest.raises(AclnnError) as e:
        kernels.swiglu_grad(GOOD["y_grad"], GOOD["x"], out=[[7.0] * 64] * 4)
    assert e.value.status == 161002 and "out" in e.value.message


# --- hand-made tilings ----------------------------------------------------------------------------------------------

BIG = good((64, 2 * 4096))  # colLen 4096 fp32, aligned
UNALIGNED = good((4, 2 * 40001), F16)  # colLen 40001: rows more than 65535 B apart, one row per tile


def official(args):
    return tiling.swiglu_grad(args["y_grad"], args["x"], args["dim"])


# (name, args, changes, words)
BAD_TILINGS = [
    ("row_len", BIG, dict(row_len=63), ["tiling.row_len", "63", "64"]),
    ("col_len", BIG, dict(col_len=2048), ["tiling.col_len"]),
    ("tiling_key", BIG, dict(tiling_key=1), ["tiling.tiling_key"]),
    ("block_dim 0", BIG, dict(block_dim=0), ["tiling.block_dim", "[1, 48]"]),
    ("block_dim 49", BIG, dict(block_dim=49), ["tiling.block_dim", "[1, 48]"]),
    ("base_col_len not 32 B", BIG, dict(base_col_len=100, base_row_len=1), ["tiling.base_col_len", "32 B"]),
    ("base_col_len above colLen", BIG, dict(base_col_len=4104, base_row_len=1), ["tiling.base_col_len", "4096"]),
    ("base_row_len 4096", BIG, dict(base_row_len=4096, base_col_len=8), ["tiling.base_row_len", "4095"]),
    ("base_row_len 0", BIG, dict(base_row_len=0), ["tiling.base_row_len"]),
    ("is_double_buffer 2", BIG, dict(is_double_buffer=2), ["tiling.is_double_buffer"]),
    ("tile too large for UB", BIG, dict(base_row_len=64, base_col_len=4096, block_dim=1), ["UB plan needs", "196608"]),
    ("single buffer too large", BIG, dict(base_row_len=2, base_col_len=4096, is_double_buffer=0, block_dim=32),
     ["UB plan"]),
    ("rows over the stride limit", UNALIGNED, dict(base_row_len=2), ["tiling.base_row_len", "stride"]),
]


@pytest.mark.parametrize("name,args,change,words", BAD_TILINGS, ids=[c[0] for c in BAD_TILINGS])
def test_bad_hand_made_tiling(name, args, change, words):
    t = tiling.replace(official(args), **change)
    before = {k: v.copy() for k, v in args.items() if isinstance(v, np.ndarray)}
    out = np.full(args["x"].shape, 7, args["x"].dtype)
    with pytest.raises(AclnnError) as e:
        kernels.swiglu_grad(args["y_grad"], args["x"], args["dim"], tiling=t, out=out)
    assert e.value.status == 561002, e.value.message
    for w in words:
        assert w in e.value.message, e.value.message
    assert_all_7(out)
    for k, v in before.items():
        np.testing.assert_array_equal(args[k], v)


def test_good_hand_made_tiling_runs():
    args = good((10, 2 * 300))
    t = tiling.swiglu_grad(args["y_grad"], args["x"], -1, core_num=7, buffer_num=1, base_row_len=3,
                           base_col_len=128)
    assert (t.block_dim, t.total_tile_num, t.is_double_buffer) == (7, 4 * 3, 0)
    res = kernels.swiglu_grad(args["y_grad"], args["x"], tiling=t, checks=True)
    assert np.array_equal(res, kernels.swiglu_grad(args["y_grad"], args["x"]))
    assert compare(res, kernels.reference.swiglu_grad(args["y_grad"], args["x"])).ok


# --- the executor -------------------------------------------------------------------------------------------------

def test_aclnn_two_phase():
    y, x = GOOD["y_grad"], GOOD["x"]
    out = np.full(x.shape, 7, F32)
    st, ws, ex = aclnn.swi_glu_grad_get_workspace_size(y, x, -1, out)
    assert (st, ws) == (0, 16 * MIB) and ex.tiling == tiling.swiglu_grad(y, x)
    assert aclnn.swi_glu_grad(np.empty(ws - 1, np.uint8), ws - 1, ex) == 161002
    assert "workspace" in aclnn.get_recent_err_msg()
    assert aclnn.swi_glu_grad(np.empty(ws, np.uint8), ws - 1, ex) == 161002  # the size argument counts too
    assert aclnn.swi_glu_grad(np.empty(ws, np.float32), ws, ex) == 161002
    assert aclnn.swi_glu_grad(None, ws, ex) == 161001
    assert "workspace" in aclnn.get_recent_err_msg()
    assert aclnn.swi_glu_grad(np.empty(ws, np.uint8), ws, None) == 161001
    assert "executor" in aclnn.get_recent_err_msg()
    other = aclnn.rms_norm_grad_get_workspace_size(a((4, 64)), a((4, 64)), a((4,)), a((64,)), np.empty((4, 64), F32),
                                                   np.empty(64, F32))[2]
    assert aclnn.swi_glu_grad(np.empty(other.workspace_size, np.uint8), other.workspace_size, other) == 161002
    assert "rms_norm_grad" in aclnn.get_recent_err_msg()
    assert_all_7(out)  # failed runs write nothing
    assert aclnn.swi_glu_grad(np.empty(ws, np.uint8), ws, ex) == 0
    assert aclnn.get_recent_err_msg() == ""
    np.testing.assert_array_equal(out, kernels.swiglu_grad(y, x))
    assert compare(out, kernels.reference.swiglu_grad(y, x)).ok
    np.testing.assert_array_equal(y, GOOD["y_grad"])


@pytest.mark.parametrize("dtype", [F16, BF16])
def test_aclnn_two_phase_b16(dtype):
    args = good((6, 2 * 40), dtype, dim=0)
    out = np.full(args["x"].shape, 7, dtype)
    st, ws, ex = aclnn.swi_glu_grad_get_workspace_size(args["y_grad"], args["x"], 0, out)
    assert st == 0 and ex.tiling.tiling_key == (1 if dtype == F16 else 27)
    assert aclnn.swi_glu_grad(np.empty(ws, np.uint8), ws, ex) == 0
    assert compare(out, kernels.reference.swiglu_grad(args["y_grad"], args["x"], 0)).ok


# --- the boundaries that work -----------------------------------------------------------------------------------

@pytest.mark.parametrize("shape,dim", [
    ((4, 6, 10), -3), ((4, 6, 10), 2), ((4, 6, 10), 1), ((4, 6, 10), -1),
    ((64,), 0), ((64,), -1), ((2,), 0),
    ((1, 2, 1, 2, 1, 2, 3, 64), -1), ((2, 1, 2, 1, 2, 1, 2, 5), 0), ((2, 1, 2, 1, 2, 1, 2, 5), -8),
    ((3, 5, 2), -1), ((3, 4, 17), np.int64(1)),
], ids=lambda v: str(v))
def test_boundary_successes(shape, dim):
    args = good(shape, dim=int(dim))
    before = {k: v.copy() for k, v in args.items() if isinstance(v, np.ndarray)}
    res = kernels.swiglu_grad(args["y_grad"], args["x"], dim, checks=True)
    assert res.shape == shape and res.dtype == F32
    assert compare(res, kernels.reference.swiglu_grad(args["y_grad"], args["x"], int(dim))).ok
    for k, v in before.items():
        np.testing.assert_array_equal(args[k], v)
    out = np.full(shape, 7, F32)
    st, ws, ex = aclnn.swi_glu_grad_get_workspace_size(args["y_grad"], args["x"], dim, out)
    assert st == 0 and aclnn.swi_glu_grad(np.empty(ws, np.uint8), ws, ex) == 0
    np.testing.assert_array_equal(out, res)


def test_310p_legal_shape_runs():
    args = good((4, 2 * 32), F16)  # colLen 32 fp16: 64 B
    res = kernels.swiglu_grad(args["y_grad"], args["x"], soc="Ascend310P3", checks=True)
    assert compare(res, kernels.reference.swiglu_grad(args["y_grad"], args["x"])).ok
