"""Every input aclnnSoftmax forbids (``op_api/aclnn_softmax.cpp``, ``docs/aclnnSoftmax.md``) and every one tilesim's
kernel on the SoftMax API refuses (``tiling/softmax.py``): the documented status, a message naming the parameter and
the rule, nothing written to the caller's arrays and the inputs unchanged, through both the op API and the
two-phase aclnn form; bad hand-made tilings and overrides; the executor's own checks; and the boundary cases that
must work, the empty x among them."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import tilesim.kernels as kernels
from refusals import assert_refused
from tilesim.kernels import aclnn
from tilesim.tiling.common import replace
from tilesim.tiling.softmax import get_soft_max_min_tmp_size
from tilesim.tiling.softmax import softmax as make_tiling
from tilesim.tiling.swiglu import swiglu as swiglu_tiling

import tilesim
from tilesim import AclnnError
from tilesim.precision import compare

F32, F16, BF16 = np.float32, np.float16, ml_dtypes.bfloat16
MIB = 1024 * 1024


def a(shape, dtype=F32, seed=0):
    """Random data in [-3, 3], so that an unchanged array is told from one that was written."""
    return np.asarray(np.random.default_rng(seed).uniform(-3, 3, shape)).astype(dtype)


GOOD_X = a((4, 64), F32, 1)


def full7(shape, dtype=F32):
    return np.full(shape, 7, dtype)


# (name, x, dim, out (None: x's shape and dtype, or [4, 64] fp32), soc, status, words the message must contain)
CASES = [
    ("x None", None, -1, None, "Ascend910B1", 161001, ["x", "None"]),
    ("x int32", a((4, 64), np.int32), -1, None, "Ascend910B1", 161002, ["x", "int32", "supported"]),
    ("out fp16 for fp32 x", GOOD_X, -1, full7((4, 64), F16), "Ascend910B1", 161002, ["out", "float16", "x's"]),
    ("out bf16 for fp16 x", a((4, 64), F16), -1, full7((4, 64), BF16), "Ascend910B1", 161002, ["out", "bfloat16"]),
    ("out int8", GOOD_X, -1, full7((4, 64), np.int8), "Ascend910B1", 161002, ["out", "int8", "not supported"]),
    ("dim = ndim", GOOD_X, 2, None, "Ascend910B1", 161002, ["dim", "2", "[-2, 1]"]),
    ("dim = -ndim - 1", GOOD_X, -3, None, "Ascend910B1", 161002, ["dim", "-3", "[-2, 1]"]),
    ("dim 1 of a 0-d x", a(()), 1, None, "Ascend910B1", 161002, ["dim", "[-1, 0]"]),
    ("dim 1.0", GOOD_X, 1.0, None, "Ascend910B1", 161002, ["dim", "integer", "float"]),
    ("dim True", GOOD_X, True, None, "Ascend910B1", 161002, ["dim", "integer", "bool"]),
    ("dim None", GOOD_X, None, None, "Ascend910B1", 161002, ["dim", "integer"]),
    ("dim '1'", GOOD_X, "1", None, "Ascend910B1", 161002, ["dim", "integer", "str"]),
    ("x rank 9", a((1,) * 8 + (64,)), -1, None, "Ascend910B1", 161002, ["x", "rank 9", "8"]),
    ("out shape", GOOD_X, -1, full7((4, 32)), "Ascend910B1", 161002, ["out", "shape", "[4, 32]", "[4, 64]"]),
    ("out rank", GOOD_X, -1, full7((4, 64, 1)), "Ascend910B1", 161002, ["out", "shape", "[4, 64, 1]"]),
    ("310P: no kernel", GOOD_X, -1, None, "Ascend310P3", 561003, ["Ascend310P3", "kernel", "v220"]),
    ("910A: no kernel", GOOD_X, -1, None, "Ascend910A", 561003, ["Ascend910A", "kernel"]),
    ("unknown SoC", GOOD_X, -1, None, "Ascend999", 161002, ["Ascend999", "Ascend910B1"]),
]


def out_for(x, out):
    if out is not None:
        return out
    if x is None or x.dtype not in (F32, F16, BF16, np.float64):
        return full7((4, 64))
    return full7(x.shape, x.dtype)


def assert_all_7(o):
    assert np.all(o.astype(np.float64) == 7), "out was written"


@pytest.mark.parametrize("name,x,dim,out,soc,status,words", CASES, ids=[c[0] for c in CASES])
def test_bad_input(name, x, dim, out, soc, status, words):
    out = out_for(x, out)
    assert_refused(lambda: kernels.softmax(x, dim, soc=soc, out=out),
                   lambda: aclnn.softmax_get_workspace_size(x, dim, out, soc=soc), status, words, [x], [out])


def test_float64_is_the_ai_cpus_without_a_launch():
    """float64 has no AI Core kernel (aclnn's l0op::SoftmaxV2 sends it to the AI CPU): computed on the host as
    SoftmaxV2's AI CPU kernel does, through both forms, with no launch, no tiling and no workspace; a tiling is
    refused (nothing to tile)."""
    x = a((3, 5, 122), np.float64, 8)
    with tilesim.capture() as runs:
        y = kernels.softmax(x, 1)
    assert runs == [] and y.dtype == np.float64
    np.testing.assert_allclose(y, kernels.reference.softmax(x, 1), rtol=1e-14, atol=0)
    assert kernels.softmax(np.float64(3.0)) == 1.0
    out = full7((3, 5, 122), np.float64)
    st, ws, ex = aclnn.softmax_get_workspace_size(x, -2, out)
    assert (st, ws, ex.tiling) == (0, 0, None) and aclnn.softmax(None, 0, ex) == 0
    np.testing.assert_array_equal(out, y)
    with pytest.raises(AclnnError) as e:
        make_tiling(x, 1)
    assert e.value.status == 561002 and "AI CPU" in e.value.message
    with pytest.raises(AclnnError) as e:
        kernels.softmax(x, 1, tiling=make_tiling(a((3, 5, 122)), 1))
    assert e.value.status == 561002 and "AI CPU" in e.value.message


def test_good_call_clears_recent_error():
    out = np.empty((4, 64), F32)
    assert aclnn.softmax_get_workspace_size(None, -1, out)[0] == 161001
    assert aclnn.get_recent_err_msg() != ""
    st, ws, ex = aclnn.softmax_get_workspace_size(GOOD_X, -1, out)
    assert (st, ws) == (0, 16 * MIB) and ex is not None
    assert aclnn.get_recent_err_msg() == ""


# --- out arrays ---------------------------------------------------------------------------------------------------

def test_aclnn_out_checks():
    assert aclnn.softmax_get_workspace_size(GOOD_X, -1, None) == (161001, 0, None)
    assert "out" in aclnn.get_recent_err_msg() and "None" in aclnn.get_recent_err_msg()
    strided = full7((4, 128))
    assert aclnn.softmax_get_workspace_size(GOOD_X, -1, strided[:, ::2]) == (161002, 0, None)
    assert "C-contiguous" in aclnn.get_recent_err_msg()
    ro = full7((4, 64))
    ro.flags.writeable = False
    assert aclnn.softmax_get_workspace_size(GOOD_X, -1, ro) == (161002, 0, None)
    assert_all_7(strided)
    assert_all_7(ro)


@pytest.mark.parametrize("make", [
    lambda: full7((4, 63)), lambda: full7((64, 4)), lambda: full7((4, 64), F16), lambda: full7((4, 64), np.float64),
    lambda: full7((4, 128))[:, ::2],
], ids=["cols", "transposed", "fp16", "fp64", "strided"])
def test_op_bad_out_array_writes_nothing(make):
    out = make()
    with pytest.raises(AclnnError) as e:
        kernels.softmax(GOOD_X, out=out)
    assert e.value.status == 161002 and "out" in e.value.message
    assert_all_7(out)


def test_op_out_not_an_array():
    with pytest.raises(AclnnError) as e:
        kernels.softmax(GOOD_X, out=[[7.0] * 64] * 4)
    assert e.value.status == 161002 and "out" in e.value.message


# --- hand-made tilings ----------------------------------------------------------------------------------------------

BIG = a((96, 1000), F32, 3)
HALF = a((37, 100), F16, 4)

# (name, x, changes, words)
BAD_TILINGS = [
    ("rows", BIG, dict(rows=95), ["tiling.rows", "95", "96"]),
    ("cols", BIG, dict(cols=1008), ["tiling.cols"]),
    ("cols_align", BIG, dict(cols_align=1008), ["tiling.cols_align"]),
    ("itemsize", BIG, dict(itemsize=2), ["tiling.itemsize"]),
    ("tiling_key", HALF, dict(tiling_key=0), ["tiling.tiling_key"]),
    ("workspace_size", BIG, dict(workspace_size=0), ["tiling.workspace_size"]),
    ("block_dim 0", BIG, dict(block_dim=0), ["tiling.block_dim", "[1, 48]"]),
    ("block_dim 49", BIG, dict(block_dim=49), ["tiling.block_dim", "[1, 48]"]),
    ("block_dim above the rows", HALF, dict(block_dim=38), ["tiling.block_dim", "is 38", "give 37"]),
    ("former_num", BIG, dict(block_dim=40), ["tiling.former_num", "16"]),
    ("tile_rows 0", BIG, dict(tile_rows=0), ["tiling.tile_rows", "[1, 2]"]),
    ("tile_rows above a core's rows", BIG, dict(tile_rows=3), ["tiling.tile_rows"]),
    ("buffer_num 3", BIG, dict(buffer_num=3), ["tiling.buffer_num", "1 or 2"]),
    ("tmp_size below one row", BIG, dict(tmp_size=4288 - 32), ["tiling.tmp_size", "4288"]),
    ("tmp_size not whole blocks", BIG, dict(tmp_size=8580), ["tiling.tmp_size", "32"]),
    ("the API's tiling", BIG, dict(reduce_m=1), ["tiling.reduce_m"]),
    ("the API's tiling for another tmp", BIG, dict(tmp_size=4288), ["tiling.split_m"]),
    ("range_m", HALF, dict(range_m=2), ["tiling.range_m"]),
]


@pytest.mark.parametrize("name,x,change,words", BAD_TILINGS, ids=[c[0] for c in BAD_TILINGS])
def test_bad_hand_made_tiling(name, x, change, words):
    t = replace(make_tiling(x), **change)
    before = x.copy()
    out = full7(x.shape, x.dtype)
    with pytest.raises(AclnnError) as e:
        kernels.softmax(x, tiling=t, out=out)
    assert e.value.status == 561002, e.value.message
    for w in words:
        assert w in e.value.message, e.value.message
    assert_all_7(out)
    np.testing.assert_array_equal(x, before)


def test_a_tiling_of_another_op_or_for_an_empty_x_is_refused():
    with pytest.raises(AclnnError) as e:
        kernels.softmax(GOOD_X, tiling=swiglu_tiling(GOOD_X))
    assert e.value.status == 561002 and "SoftmaxOpTiling" in e.value.message and "SwiGluTiling" in e.value.message
    with pytest.raises(AclnnError) as e:
        kernels.softmax(np.empty((0, 64), F32), tiling=make_tiling(GOOD_X))
    assert e.value.status == 561002 and "empty" in e.value.message
    with pytest.raises(AclnnError) as e:
        make_tiling(np.empty((0, 64), F32))
    assert e.value.status == 561002 and "empty" in e.value.message


@pytest.mark.parametrize("kw,words", [
    (dict(core_num=0), ["core_num", "[1, 48]"]), (dict(core_num=49), ["core_num"]),
    (dict(buffer_num=3), ["buffer_num", "1 or 2"]), (dict(tile_rows=0), ["tile_rows", "[1, 2]"]),
    (dict(core_num=1, tile_rows=300), ["tile_rows", "[1, 96]"]),
    (dict(core_num=1, tile_rows=30, buffer_num=2), ["UB plan needs", "196608"]),
    (dict(tmp_size=100), ["tmp_size: 100", "4288"]),
    (dict(tile_cols=100), ["tile_cols", "multiple of 64"]), (dict(tile_cols=1088), ["tile_cols", "[64, 1024]"]),
    (dict(tile_cols=256, tile_rows=2), ["tile_rows", "split-row"]), (dict(tile_b=8), ["tile_b", "contiguous"]),
], ids=lambda v: str(v))
def test_bad_overrides(kw, words):
    with pytest.raises(AclnnError) as e:
        make_tiling(BIG, **kw)
    assert e.value.status == 561002
    for w in words:
        assert w in e.value.message, e.value.message


def test_tile_rows_past_the_apis_uint8_repeats_are_refused():
    """cols in [128, 512): a pass's rows are a uint8 repeat count, so a tile holds at most 255 rows (refused before
    the UB plan, which no such tile fits anyway)."""
    x = np.empty((600, 128), F16)
    assert make_tiling(x, core_num=2, tile_rows=100, buffer_num=1).tile_rows == 100
    with pytest.raises(AclnnError) as e:
        make_tiling(x, core_num=2, tile_rows=256, buffer_num=1)
    assert e.value.status == 561002 and "tile_rows" in e.value.message and "[1, 255]" in e.value.message


def test_good_hand_made_tiling_runs():
    x = a((30, 300), F32, 5)
    t = make_tiling(x, core_num=4, tile_rows=3, buffer_num=1, tmp_size=2 * get_soft_max_min_tmp_size((1, 304), 4))
    assert (t.block_dim, t.former_num, t.block_rows, t.reduce_m, t.range_m, t.tail_m) == (4, 2, 7, 2, 1, 1)
    res = kernels.softmax(x, tiling=t)
    assert np.array_equal(res, kernels.softmax(x))
    assert compare(res, kernels.reference.softmax(x)).ok


# --- the executor -------------------------------------------------------------------------------------------------

def test_aclnn_two_phase():
    out = full7((4, 64))
    st, ws, ex = aclnn.softmax_get_workspace_size(GOOD_X, -1, out)
    assert (st, ws) == (0, 16 * MIB) and ex.tiling == make_tiling(GOOD_X)
    assert aclnn.softmax(np.empty(ws - 1, np.uint8), ws - 1, ex) == 161002
    assert "workspace" in aclnn.get_recent_err_msg()
    assert aclnn.softmax(np.empty(ws, np.uint8), ws - 1, ex) == 161002  # the size argument counts too
    assert aclnn.softmax(np.empty(ws, np.float32), ws, ex) == 161002
    assert aclnn.softmax(None, ws, ex) == 161001
    assert "workspace" in aclnn.get_recent_err_msg()
    assert aclnn.softmax(np.empty(ws, np.uint8), ws, None) == 161001
    assert "executor" in aclnn.get_recent_err_msg()
    other = aclnn.swi_glu_get_workspace_size(GOOD_X, -1, np.empty((4, 32), F32))[2]
    assert aclnn.softmax(np.empty(other.workspace_size, np.uint8), other.workspace_size, other) == 161002
    assert "swi_glu" in aclnn.get_recent_err_msg()
    assert_all_7(out)  # failed runs write nothing
    assert aclnn.softmax(np.empty(ws, np.uint8), ws, ex) == 0
    assert aclnn.get_recent_err_msg() == ""
    np.testing.assert_array_equal(out, kernels.softmax(GOOD_X))


def test_aclnn_two_phase_fp16_and_a_contiguous_axis():
    x = a((6, 40, 1), F16, 6)
    out = full7((6, 40, 1), F16)
    st, ws, ex = aclnn.softmax_get_workspace_size(x, 1, out)
    assert st == 0 and ex.tiling.tiling_key == 1 and (ex.tiling.rows, ex.tiling.cols) == (6, 40)
    assert aclnn.softmax(np.empty(ws, np.uint8), ws, ex) == 0
    np.testing.assert_array_equal(out, kernels.softmax(x, 1))


def test_aclnn_empty_x_needs_no_workspace():
    x = np.empty((0, 64), F16)
    st, ws, ex = aclnn.softmax_get_workspace_size(x, -1, np.empty((0, 64), F16))
    assert (st, ws) == (0, 0) and ex.tiling is None
    assert aclnn.softmax(None, 0, ex) == 0
    # aclnn returns before its dtype, dim and shape checks for an empty self
    assert aclnn.softmax_get_workspace_size(np.empty((0, 64), BF16), 5, np.empty((3,), F32))[0] == 0
    assert aclnn.softmax_get_workspace_size(x, -1, None)[0] == 161001  # but not before the None checks


# --- the boundaries that work -----------------------------------------------------------------------------------

@pytest.mark.parametrize("shape,dim", [
    ((4, 6, 10), -1), ((4, 6, 10), 2), ((4, 6, 1), 1), ((4, 6, 1), -2), ((4, 1, 6), 1), ((4, 1, 6), -2),
    ((64,), 0), ((64,), -1), ((), 0), ((), -1), ((1, 2, 1, 2, 1, 2, 3, 64), -1), ((3, 4, 17), np.int64(2)),
    ((1, 1), 0), ((5, 16895), -1), ((0, 64), -1), ((4, 0), 0), ((2, 0, 3), 1), ((4, 64), 0), ((4, 6, 8), 1),
    ((2, 3, 2, 1), -3),
], ids=lambda v: str(v))
def test_boundary_successes(shape, dim):
    x = a(shape, F16 if shape == (5, 16895) else F32, 7)
    before = x.copy()
    res = kernels.softmax(x, dim)
    assert res.shape == shape and res.dtype == x.dtype
    assert compare(res, kernels.reference.softmax(x, int(dim))).ok
    np.testing.assert_array_equal(x, before)
    out = full7(shape, x.dtype)
    st, ws, ex = aclnn.softmax_get_workspace_size(x, dim, out)
    assert st == 0 and aclnn.softmax(np.empty(ws, np.uint8) if ws else None, ws, ex) == 0
    np.testing.assert_array_equal(out if x.size else res, res)
