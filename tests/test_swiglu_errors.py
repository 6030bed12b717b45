"""Every input aclnnSwiGlu forbids (``docs/aclnnSwiGlu.md``, the op's registration and its tiling): the documented
status, a message naming the parameter and the rule, nothing written to the caller's arrays and the inputs
unchanged, through both the op API and the two-phase aclnn form; bad hand-made tilings; the executor's own checks;
and the boundary cases that must work, the empty x among them."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import tilesim.kernels as kernels
from refusals import assert_refused
from tilesim.kernels import aclnn
from tilesim.tiling.common import replace
from tilesim.tiling.swiglu import swiglu as make_tiling
from tilesim.tiling.swiglu_grad import swiglu_grad as grad_tiling

from tilesim import AclnnError
from tilesim import machine as asc
from tilesim.precision import compare

F32, F16, BF16 = np.float32, np.float16, ml_dtypes.bfloat16
MIB = 1024 * 1024


def a(shape, dtype=F32, seed=0):
    """Random data in [-3, 3], so that an unchanged array is told from one that was written."""
    return np.random.default_rng(seed).uniform(-3, 3, shape).astype(dtype)


GOOD_X = a((4, 64), F32, 1)

# (name, x, dim, soc, status, words the message must contain)
CASES = [
    ("x None", None, -1, "Ascend910B1", 161001, ["x", "None"]),
    ("x float64", a((4, 64), np.float64), -1, "Ascend910B1", 161002, ["x", "float64", "supported"]),
    ("x int32", a((4, 64), np.int32), -1, "Ascend910B1", 161002, ["x", "int32"]),
    ("x int8", a((4, 64), np.int8), -1, "Ascend910B1", 161002, ["x", "int8"]),
    ("bf16 on 310P", a((4, 64), BF16), -1, "Ascend310P3", 161002, ["x", "bfloat16", "Ascend310P3"]),
    ("dim = ndim", GOOD_X, 2, "Ascend910B1", 161002, ["dim", "2", "[-2, 1]"]),
    ("dim = -ndim - 1", GOOD_X, -3, "Ascend910B1", 161002, ["dim", "-3", "[-2, 1]"]),
    ("dim 1.0", GOOD_X, 1.0, "Ascend910B1", 161002, ["dim", "integer", "float"]),
    ("dim True", GOOD_X, True, "Ascend910B1", 161002, ["dim", "integer", "bool"]),
    ("dim None", GOOD_X, None, "Ascend910B1", 161002, ["dim", "integer"]),
    ("dim '1'", GOOD_X, "1", "Ascend910B1", 161002, ["dim", "integer", "str"]),
    ("odd split axis", a((4, 63)), -1, "Ascend910B1", 161002, ["x", "odd", "63", "even"]),
    ("odd split axis 0", a((3, 64)), 0, "Ascend910B1", 161002, ["x", "axis 0", "odd size 3"]),
    ("odd split axis, even product", a((2, 3, 4)), 1, "Ascend910B1", 161002, ["x", "axis 1", "odd size 3"]),
    ("odd split axis, empty x", a((0, 3)), -1, "Ascend910B1", 161002, ["x", "odd size 3"]),
    ("x rank 0", a(()), -1, "Ascend910B1", 161002, ["x", "rank 0", "[1, 8]"]),
    ("x rank 9", a((1,) * 8 + (64,)), -1, "Ascend910B1", 161002, ["x", "rank 9", "[1, 8]"]),
    ("310P empty x", a((0, 64)), -1, "Ascend310P3", 161002, ["x", "empty", "Ascend310P3"]),
    ("910A: no kernel", GOOD_X, -1, "Ascend910A", 561003, ["Ascend910A", "kernel"]),
    ("910ProB: no kernel", GOOD_X, -1, "Ascend910ProB", 561003, ["Ascend910ProB", "kernel"]),
    ("310P colLen 96 B", a((4, 48)), -1, "Ascend310P3", 561002, ["colLen 24", "96 B", "64 B"]),
    ("310P fp16 colLen 32 B", a((4, 32), F16), -1, "Ascend310P3", 561002, ["colLen 16", "64 B"]),
    ("310P colLen over axes", a((4, 6, 2)), 1, "Ascend310P3", 561002, ["colLen 6", "64 B"]),
    ("unknown SoC", GOOD_X, -1, "Ascend999", 161002, ["Ascend999", "Ascend910B1"]),
]


def out_for(x, dim):
    """An out array of the y x would give (x's shape, split axis halved), filled with 7."""
    if x is None or not isinstance(dim, int) or isinstance(dim, bool) or x.ndim == 0 or not -x.ndim <= dim < x.ndim:
        return np.full((4, 32), 7, F32)
    s = list(x.shape)
    s[dim] //= 2
    return np.full(s, 7, x.dtype if x.dtype in (F32, F16, BF16) else F32)


def assert_all_7(o):
    assert np.all(o.astype(np.float64) == 7), "out was written"


@pytest.mark.parametrize("name,x,dim,soc,status,words", CASES, ids=[c[0] for c in CASES])
def test_bad_input(name, x, dim, soc, status, words):
    out = out_for(x, dim)
    assert_refused(lambda: kernels.swiglu(x, dim, soc=soc, out=out),
                   lambda: aclnn.swi_glu_get_workspace_size(x, dim, out, soc=soc), status, words, [x], [out])


def test_good_call_clears_recent_error():
    out = np.empty((4, 32), F32)
    assert aclnn.swi_glu_get_workspace_size(None, -1, out)[0] == 161001
    assert aclnn.get_recent_err_msg() != ""
    st, ws, ex = aclnn.swi_glu_get_workspace_size(GOOD_X, -1, out)
    assert (st, ws) == (0, 16 * MIB) and ex is not None
    assert aclnn.get_recent_err_msg() == ""


# --- out arrays ---------------------------------------------------------------------------------------------------

def test_aclnn_out_checks():
    assert aclnn.swi_glu_get_workspace_size(GOOD_X, -1, None) == (161001, 0, None)
    assert "out" in aclnn.get_recent_err_msg() and "None" in aclnn.get_recent_err_msg()
    bad = np.full((4, 32), 7, F16)
    assert aclnn.swi_glu_get_workspace_size(GOOD_X, -1, bad) == (161002, 0, None)
    assert "out" in aclnn.get_recent_err_msg() and "float16" in aclnn.get_recent_err_msg()
    # the wrong shape: _check_output makes it a tiling error, as for every op's aclnn form
    for shape in ((4, 64), (2, 64), (4, 32, 1)):
        bad = np.full(shape, 7, F32)
        assert aclnn.swi_glu_get_workspace_size(GOOD_X, -1, bad) == (561002, 0, None)
        assert "out" in aclnn.get_recent_err_msg() and str(list(shape)) in aclnn.get_recent_err_msg()
        assert_all_7(bad)
    strided = np.full((4, 64), 7, F32)
    assert aclnn.swi_glu_get_workspace_size(GOOD_X, -1, strided[:, ::2]) == (161002, 0, None)
    assert "C-contiguous" in aclnn.get_recent_err_msg()
    ro = np.full((4, 32), 7, F32)
    ro.flags.writeable = False
    assert aclnn.swi_glu_get_workspace_size(GOOD_X, -1, ro) == (161002, 0, None)
    assert_all_7(strided)
    assert_all_7(ro)


@pytest.mark.parametrize("make", [
    lambda: np.full((4, 31), 7, F32), lambda: np.full((4, 64), 7, F32), lambda: np.full((4, 32, 1), 7, F32),
    lambda: np.full((4, 32), 7, F16), lambda: np.full((4, 32), 7, np.float64),
    lambda: np.full((4, 64), 7, F32)[:, ::2],
], ids=["cols", "not halved", "rank", "fp16", "fp64", "strided"])
def test_op_bad_out_array_writes_nothing(make):
    out = make()
    with pytest.raises(AclnnError) as e:
        kernels.swiglu(GOOD_X, out=out)
    assert e.value.status == 161002 and "out" in e.value.message
    assert_all_7(out)


def test_op_out_not_an_array():
    with pytest.raises(AclnnError) as e:
        kernels.swiglu(GOOD_X, out=[[7.0] * 32] * 4)
    assert e.value.status == 161002 and "out" in e.value.message


# --- hand-made tilings ----------------------------------------------------------------------------------------------

BIG = a((64, 2 * 4096), F32, 3)  # colLen 4096 fp32, aligned
UNALIGNED = a((4, 2 * 40001), F16, 4)  # colLen 40001: rows more than 65535 B apart, one row per tile

# (name, x, changes, words)
BAD_TILINGS = [
    ("row_len", BIG, dict(row_len=63), ["tiling.row_len", "63", "64"]),
    ("col_len", BIG, dict(col_len=2048), ["tiling.col_len"]),
    ("tiling_key", BIG, dict(tiling_key=1), ["tiling.tiling_key"]),
    ("round_mode", BIG, dict(round_mode=asc.CAST_NONE), ["tiling.round_mode"]),
    ("block_dim 0", BIG, dict(block_dim=0), ["tiling.block_dim", "[1, 48]"]),
    ("block_dim 49", BIG, dict(block_dim=49), ["tiling.block_dim", "[1, 48]"]),
    ("base_col_len not 32 B", BIG, dict(base_col_len=100, base_row_len=1), ["tiling.base_col_len", "32 B"]),
    ("base_col_len above colLen", BIG, dict(base_col_len=4104, base_row_len=1), ["tiling.base_col_len", "4096"]),
    ("base_row_len 4096", BIG, dict(base_row_len=4096, base_col_len=8), ["tiling.base_row_len", "4095"]),
    ("base_row_len 0", BIG, dict(base_row_len=0), ["tiling.base_row_len"]),
    ("is_double_buffer 2", BIG, dict(is_double_buffer=2), ["tiling.is_double_buffer"]),
    ("tile too large for UB", BIG, dict(base_row_len=64, base_col_len=4096), ["UB plan needs", "196608"]),
    ("single buffer too large", BIG, dict(base_row_len=4, base_col_len=4096, is_double_buffer=0), ["UB plan"]),
    ("rows over the stride limit", UNALIGNED, dict(base_row_len=2), ["tiling.base_row_len", "stride"]),
]


@pytest.mark.parametrize("name,x,change,words", BAD_TILINGS, ids=[c[0] for c in BAD_TILINGS])
def test_bad_hand_made_tiling(name, x, change, words):
    t = replace(make_tiling(x), **change)
    before = x.copy()
    out = np.full((x.shape[0], x.shape[1] // 2), 7, x.dtype)
    with pytest.raises(AclnnError) as e:
        kernels.swiglu(x, tiling=t, out=out)
    assert e.value.status == 561002, e.value.message
    for w in words:
        assert w in e.value.message, e.value.message
    assert_all_7(out)
    np.testing.assert_array_equal(x, before)


def test_a_tiling_of_another_op_or_for_an_empty_x_is_refused():
    g = grad_tiling(np.empty((64, 4096), F32), BIG)  # SwiGluGrad's TilingData: the same fields, another kernel
    with pytest.raises(AclnnError) as e:
        kernels.swiglu(BIG, tiling=g)
    assert e.value.status == 561002 and "SwiGluTiling" in e.value.message and "SwiGluGradTiling" in e.value.message
    with pytest.raises(AclnnError) as e:
        kernels.swiglu(np.empty((0, 64), F32), tiling=make_tiling(GOOD_X))
    assert e.value.status == 561002 and "empty" in e.value.message
    with pytest.raises(AclnnError) as e:
        make_tiling(np.empty((0, 64), F32))
    assert e.value.status == 561002 and "empty" in e.value.message


@pytest.mark.parametrize("kw,words", [
    (dict(core_num=0), ["core_num", "[1, 48]"]), (dict(core_num=49), ["core_num"]),
    (dict(buffer_num=3), ["buffer_num", "1 or 2"]), (dict(base_col_len=0), ["base_col_len"]),
    (dict(base_row_len=2, base_col_len=100), ["base_col_len: 100", "32 B"]),
    (dict(base_row_len=64, base_col_len=4096), ["UB plan needs"]),
], ids=lambda v: str(v))
def test_bad_overrides(kw, words):
    with pytest.raises(AclnnError) as e:
        make_tiling(BIG, **kw)
    assert e.value.status == 561002
    for w in words:
        assert w in e.value.message, e.value.message


def test_good_hand_made_tiling_runs():
    x = a((10, 2 * 300), F32, 5)
    t = make_tiling(x, core_num=7, buffer_num=1, base_row_len=3, base_col_len=128)
    assert (t.block_dim, t.total_tile_num, t.is_double_buffer) == (7, 4 * 3, 0)
    res = kernels.swiglu(x, tiling=t, checks=True)
    assert np.array_equal(res, kernels.swiglu(x))
    assert compare(res, kernels.reference.swiglu(x)).ok


# --- the executor -------------------------------------------------------------------------------------------------

def test_aclnn_two_phase():
    out = np.full((4, 32), 7, F32)
    st, ws, ex = aclnn.swi_glu_get_workspace_size(GOOD_X, -1, out)
    assert (st, ws) == (0, 16 * MIB) and ex.tiling == make_tiling(GOOD_X)
    assert aclnn.swi_glu(np.empty(ws - 1, np.uint8), ws - 1, ex) == 161002
    assert "workspace" in aclnn.get_recent_err_msg()
    assert aclnn.swi_glu(np.empty(ws, np.uint8), ws - 1, ex) == 161002  # the size argument counts too
    assert aclnn.swi_glu(np.empty(ws, np.float32), ws, ex) == 161002
    assert aclnn.swi_glu(None, ws, ex) == 161001
    assert "workspace" in aclnn.get_recent_err_msg()
    assert aclnn.swi_glu(np.empty(ws, np.uint8), ws, None) == 161001
    assert "executor" in aclnn.get_recent_err_msg()
    other = aclnn.swi_glu_grad_get_workspace_size(a((4, 32)), GOOD_X, -1, np.empty((4, 64), F32))[2]
    assert aclnn.swi_glu(np.empty(other.workspace_size, np.uint8), other.workspace_size, other) == 161002
    assert "swi_glu_grad" in aclnn.get_recent_err_msg()
    assert_all_7(out)  # failed runs write nothing
    assert aclnn.swi_glu(np.empty(ws, np.uint8), ws, ex) == 0
    assert aclnn.get_recent_err_msg() == ""
    np.testing.assert_array_equal(out, kernels.swiglu(GOOD_X))
    assert compare(out, kernels.reference.swiglu(GOOD_X)).ok


@pytest.mark.parametrize("dtype", [F16, BF16])
def test_aclnn_two_phase_b16(dtype):
    x = a((6, 2 * 40), dtype, 6)
    out = np.full((3, 80), 7, dtype)
    st, ws, ex = aclnn.swi_glu_get_workspace_size(x, 0, out)
    assert st == 0 and ex.tiling.tiling_key == (1 if dtype == F16 else 27)
    assert aclnn.swi_glu(np.empty(ws, np.uint8), ws, ex) == 0
    assert compare(out, kernels.reference.swiglu(x, 0)).ok
    np.testing.assert_array_equal(out, kernels.swiglu(x, 0))


def test_aclnn_empty_x_needs_no_workspace():
    x = np.empty((0, 64), F16)
    out = np.empty((0, 32), F16)
    st, ws, ex = aclnn.swi_glu_get_workspace_size(x, -1, out)
    assert (st, ws) == (0, 0) and ex.tiling is None
    assert aclnn.swi_glu(None, 0, ex) == 0
    assert aclnn.swi_glu_get_workspace_size(x, -1, np.empty((0, 64), F16))[0] == 561002  # y's shape still checked


# --- the boundaries that work -----------------------------------------------------------------------------------

@pytest.mark.parametrize("shape,dim", [
    ((4, 6, 10), -3), ((4, 6, 10), 2), ((4, 6, 10), 1), ((4, 6, 10), -1),
    ((64,), 0), ((64,), -1), ((2,), 0),
    ((1, 2, 1, 2, 1, 2, 3, 64), -1), ((2, 1, 2, 1, 2, 1, 2, 5), 0), ((2, 1, 2, 1, 2, 1, 2, 5), -8),
    ((3, 5, 2), -1), ((3, 4, 17), np.int64(1)), ((0, 64), -1), ((4, 0), 1), ((2, 0, 3), 0),
], ids=lambda v: str(v))
def test_boundary_successes(shape, dim):
    x = a(shape, F32, 7)
    before = x.copy()
    res = kernels.swiglu(x, dim, checks=True)
    d = int(dim) % len(shape)
    assert res.shape == shape[:d] + (shape[d] // 2,) + shape[d + 1:] and res.dtype == F32
    assert compare(res, kernels.reference.swiglu(x, int(dim))).ok
    np.testing.assert_array_equal(x, before)
    out = np.full(res.shape, 7, F32)
    st, ws, ex = aclnn.swi_glu_get_workspace_size(x, dim, out)
    assert st == 0 and aclnn.swi_glu(np.empty(ws, np.uint8), ws, ex) == 0
    np.testing.assert_array_equal(out, res)


def test_310p_legal_shape_runs():
    x = a((4, 2 * 32), F16, 8)  # colLen 32 fp16: 64 B
    res = kernels.swiglu(x, soc="Ascend310P3", checks=True)
    assert compare(res, kernels.reference.swiglu(x)).ok
