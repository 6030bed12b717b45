"""Every input kernels.layer_norm_grad refuses: the status, a message naming the parameter and the rule, nothing
written to the caller's arrays, the inputs unchanged, through both the op API and the two-phase aclnn form;
tiling overrides out of range; bad hand-made tilings; and the boundary cases that must work."""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest
import tilesim.kernels as kernels
import tilesim.tiling as tiling
from tilesim.kernels import aclnn

from tilesim import AclnnError
from tilesim.precision import compare

F32, F16, BF16 = np.float32, np.float16, ml_dtypes.bfloat16
EPS = 1e-5


def a(shape, dtype=F32, seed=0, lo=-3.0, hi=3.0):
    """Random data in [lo, hi], so that an unchanged array is told from one that was written."""
    return np.random.default_rng(seed).uniform(lo, hi, shape).astype(dtype)


def good(shape=(4, 64), dtype=F32):
    """Valid arguments: the statistics those of x (from the rounded x in float64), so that the results can be
    judged against the closed form, which assumes that mean is the row mean of x."""
    x = a(shape, dtype, 2)
    x64 = x.astype(np.float64)
    if x.size:
        var, mean = x64.var(-1), x64.mean(-1)
    else:  # empty shapes: statistics of the right shape
        var = mean = np.ones(shape[:-1])
    return dict(dy=a(shape, dtype, 1), x=x, variance=var.astype(dtype), mean=mean.astype(dtype),
                gamma=a(shape[-1:], dtype, 5))


GOOD = good()
GOOD16 = good(dtype=F16)


def as_dtype(args, dtype):
    return {k: v.astype(dtype) for k, v in args.items()}


# (name, changes to GOOD, keyword arguments, status, words the message must contain)
CASES = [
    ("dy None", dict(dy=None), {}, 161001, ["dy", "None"]),
    ("x None", dict(x=None), {}, 161001, ["x", "None"]),
    ("variance None", dict(variance=None), {}, 161001, ["variance", "None"]),
    ("mean None", dict(mean=None), {}, 161001, ["mean", "None"]),
    ("gamma None", dict(gamma=None), {}, 161001, ["gamma", "None"]),
    ("all None", dict(dy=None, x=None, variance=None, mean=None, gamma=None), {}, 161001, ["dy"]),
    ("bf16", as_dtype(GOOD, BF16), {}, 161002, ["x", "bfloat16", "float32 or float16"]),
    ("float64", as_dtype(GOOD, np.float64), {}, 161002, ["x", "float64", "float32 or float16"]),
    ("int32", as_dtype(GOOD, np.int32), {}, 161002, ["x", "int32"]),
    ("x float64 only", dict(x=GOOD["x"].astype(np.float64)), {}, 161002, ["x", "float64"]),
    ("dy fp16, x fp32", dict(dy=GOOD["dy"].astype(F16)), {}, 161002, ["dy", "float16", "float32"]),
    ("variance fp16", dict(variance=GOOD["variance"].astype(F16)), {}, 161002, ["variance", "float16"]),
    ("mean fp16", dict(mean=GOOD["mean"].astype(F16)), {}, 161002, ["mean", "float16"]),
    ("gamma fp16", dict(gamma=GOOD["gamma"].astype(F16)), {}, 161002, ["gamma", "float16", "float32"]),
    ("fp16 gamma fp32", {**GOOD16, "gamma": GOOD["gamma"]}, {}, 161002, ["gamma", "float32", "float16"]),
    ("fp16 mean fp32", {**GOOD16, "mean": GOOD["mean"]}, {}, 161002, ["mean", "float32", "float16"]),
    ("dy shape", dict(dy=a((4, 32))), {}, 161002, ["dy", "[4, 32]", "[4, 64]"]),
    ("dy transposed", dict(dy=a((64, 4))), {}, 161002, ["dy", "[64, 4]"]),
    ("dy rank", dict(dy=a((1, 4, 64))), {}, 161002, ["dy", "[1, 4, 64]"]),
    ("gamma [32]", dict(gamma=a((32,))), {}, 161002, ["gamma", "[32]", "[64]"]),
    ("gamma [1, 64]", dict(gamma=a((1, 64))), {}, 161002, ["gamma", "[1, 64]", "[H]"]),
    ("gamma [4, 64]", dict(gamma=a((4, 64))), {}, 161002, ["gamma", "[4, 64]"]),
    ("variance [3]", dict(variance=a((3,))), {}, 161002, ["variance", "[3]", "[4]"]),
    ("variance [4, 2]", dict(variance=a((4, 2))), {}, 161002, ["variance", "[4, 2]", "trailing 1"]),
    ("variance [4, 64]", dict(variance=a((4, 64))), {}, 161002, ["variance", "[4, 64]"]),
    ("variance scalar", dict(variance=a(())), {}, 161002, ["variance", "[]"]),
    ("mean [1, 4]", dict(mean=a((1, 4))), {}, 161002, ["mean", "[1, 4]"]),
    ("mean [4, 1, 1]", dict(mean=a((4, 1, 1))), {}, 161002, ["mean", "[4, 1, 1]"]),
    ("rank 0", dict(dy=a(()), x=a(()), variance=a(()), mean=a(()), gamma=a(())), {}, 161002,
     ["x", "rank 0", "[1, 8]"]),
    ("rank 9", good((1,) * 8 + (16,)), {}, 161002, ["x", "rank 9", "[1, 8]"]),
    ("empty rows", good((0, 64)), {}, 161002, ["x", "[0, 64]", "empty"]),
    ("empty H", good((4, 0)), {}, 161002, ["x", "[4, 0]", "empty"]),
    ("empty middle axis", good((2, 0, 8)), {}, 161002, ["x", "empty"]),
    ("epsilon negative", {}, dict(epsilon=-1e-5), 161002, ["epsilon", "-1e-05", "non-negative"]),
    ("epsilon -inf", {}, dict(epsilon=-np.inf), 161002, ["epsilon", "non-negative"]),
    ("epsilon NaN", {}, dict(epsilon=float("nan")), 161002, ["epsilon", "nan", "non-negative"]),
    ("epsilon a string", {}, dict(epsilon="small"), 161002, ["epsilon", "number", "str"]),
    ("epsilon None", {}, dict(epsilon=None), 161002, ["epsilon", "number", "NoneType"]),
    ("epsilon a list", {}, dict(epsilon=[1e-5]), 161002, ["epsilon", "number", "list"]),
    ("isReuseSource with half", GOOD16, dict(is_reuse_source=True), 161002, ["is_reuse_source", "float only"]),
    ("tmp unknown", {}, dict(tmp="local"), 161002, ["tmp", "'local'", "shared", "framework"]),
    ("tmp None", {}, dict(tmp=None), 161002, ["tmp", "None"]),
    ("H too large fp32", good((2, 40000)), {}, 161002, ["x", "H = 40000", "does not fit the UB", "one row"]),
    ("H too large fp16", good((2, 40000), F16), {}, 161002, ["x", "H = 40000", "does not fit the UB"]),
    ("H just too large fp32", good((2, 4465)), {}, 161002, ["x", "H = 4465", "does not fit the UB"]),
    ("H just too large fp16", good((2, 4465), F16), {}, 161002, ["x", "H = 4465", "does not fit the UB"]),
    ("H just too large with isReuseSource", good((2, 5457)), dict(is_reuse_source=True), 161002,
     ["x", "H = 5457", "does not fit the UB"]),
    ("H too large, framework tmp", good((1, 8000)), dict(tmp="framework"), 161002,
     ["x", "H = 8000", "framework tmp"]),
    ("unknown SoC", {}, dict(soc="Ascend999"), 161002, ["Ascend999"]),
]


def outs_for(args):
    """Output arrays prefilled with 7 in the shapes and dtype a good call would write."""
    x = args["x"] if isinstance(args["x"], np.ndarray) and args["x"].ndim >= 1 else GOOD["x"]
    dt = x.dtype if x.dtype in (np.dtype(F32), np.dtype(F16)) else np.dtype(F32)
    return (np.full(x.shape, 7, dt), np.full(x.shape[-1:], 7, dt), np.full(x.shape[-1:], 7, dt))


def assert_all_7(outs):
    for o in outs:
        assert np.all(o.astype(np.float64) == 7), "an out array was written"


def call(args, **kw):
    return kernels.layer_norm_grad(args["dy"], args["x"], args["variance"], args["mean"], args["gamma"], **kw)


@pytest.mark.parametrize("name,change,kw,status,words", CASES, ids=[c[0] for c in CASES])
def test_bad_input(name, change, kw, status, words):
    args = {**GOOD, **change}
    before = {k: v.copy() for k, v in args.items() if isinstance(v, np.ndarray)}
    outs = outs_for(args)
    with pytest.raises(AclnnError) as e:
        call(args, out=outs, **kw)
    assert e.value.status == status, e.value.message
    for w in words:
        assert w in e.value.message, e.value.message
    assert_all_7(outs)
    for k, v in before.items():
        np.testing.assert_array_equal(args[k], v)
    # the tiling alone refuses the same way
    with pytest.raises(AclnnError) as e2:
        tiling.layer_norm_grad(args["dy"], args["x"], args["variance"], args["mean"], args["gamma"],
                               **{"epsilon": EPS, **kw})
    assert (e2.value.status, e2.value.message) == (status, e.value.message)
    # the two-phase form: the same status and message, no executor
    epsilon = kw.get("epsilon", EPS)
    rest = {k: v for k, v in kw.items() if k != "epsilon"}
    res = aclnn.layer_norm_grad_get_workspace_size(args["dy"], args["x"], args["variance"], args["mean"],
                                                   args["gamma"], epsilon, *outs, **rest)
    assert res == (status, 0, None)
    assert aclnn.get_recent_err_msg() == e.value.message
    assert_all_7(outs)
    for k, v in before.items():
        np.testing.assert_array_equal(args[k], v)


@pytest.mark.parametrize("h,kw", [(4465, {}), (5457, dict(is_reuse_source=True))])
def test_h_too_large_message_states_more_than_the_ub(h, kw):
    """'one row does not fit the UB ...: it needs N B': N exceeds the 196608 B UB."""
    with pytest.raises(AclnnError) as e:
        call(good((2, h)), **kw)
    n = int(re.search(r"needs (\d+) B", e.value.message).group(1))
    assert n > 196608 and "196608 B" in e.value.message, e.value.message


@pytest.mark.parametrize("epsilon", ["1e-5", True], ids=["numeric string", "bool"])
def test_epsilon_must_be_a_real_number(epsilon):
    with pytest.raises(AclnnError) as e:
        call(GOOD, epsilon=epsilon)
    assert e.value.status == 161002 and "epsilon" in e.value.message


def test_good_call_clears_recent_error():
    outs = outs_for(GOOD)
    assert aclnn.layer_norm_grad_get_workspace_size(None, GOOD["x"], GOOD["variance"], GOOD["mean"],
                                                    GOOD["gamma"], EPS, *outs)[0] == 161001
    assert aclnn.get_recent_err_msg() != ""
    st, ws, ex = aclnn.layer_norm_grad_get_workspace_size(*GOOD.values(), EPS, *outs)
    assert st == 0 and ws == tiling.layer_norm_grad(*GOOD.values()).workspace_size and ex is not None
    assert aclnn.get_recent_err_msg() == ""
    assert_all_7(outs)  # nothing written before the executor runs


# --- out arrays ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("index,bad", [
    (0, lambda: np.full((4, 64), 7, F16)), (0, lambda: np.full((4, 63), 7, F32)),
    (0, lambda: np.full((4, 128), 7, F32)[:, ::2]), (1, lambda: np.full((64,), 7, np.float64)),
    (1, lambda: np.full((1, 64), 7, F32)), (2, lambda: np.full((32,), 7, F32)),
], ids=["pd_x fp16", "pd_x shape", "pd_x strided", "pd_gamma fp64", "pd_gamma 2-D", "pd_beta shape"])
def test_op_bad_out_array_writes_nothing(index, bad):
    outs = list(outs_for(GOOD))
    outs[index] = bad()
    with pytest.raises(AclnnError) as e:
        call(GOOD, out=tuple(outs))
    assert e.value.status == 161002
    assert ("pd_x", "pd_gamma", "pd_beta")[index] in e.value.message and "out" in e.value.message
    assert_all_7(outs)


def test_aclnn_out_checks():
    outs = outs_for(GOOD)
    args = list(GOOD.values())
    assert aclnn.layer_norm_grad_get_workspace_size(*args, EPS, None, outs[1], outs[2]) == (161001, 0, None)
    assert "pd_x" in aclnn.get_recent_err_msg()
    assert aclnn.layer_norm_grad_get_workspace_size(*args, EPS, outs[0], outs[1], None) == (161001, 0, None)
    assert "pd_beta" in aclnn.get_recent_err_msg()
    bad = np.full(64, 7, F16)
    assert aclnn.layer_norm_grad_get_workspace_size(*args, EPS, outs[0], bad, outs[2]) == (161002, 0, None)
    assert "pd_gamma" in aclnn.get_recent_err_msg() and "float16" in aclnn.get_recent_err_msg()
    # the wrong shape: _check_output makes it a tiling error, as for every op's aclnn form
    bad = np.full(63, 7, F32)
    assert aclnn.layer_norm_grad_get_workspace_size(*args, EPS, outs[0], outs[1], bad) == (561002, 0, None)
    assert "pd_beta" in aclnn.get_recent_err_msg() and "[63]" in aclnn.get_recent_err_msg()
    ro = np.full((4, 64), 7, F32)
    ro.flags.writeable = False
    assert aclnn.layer_norm_grad_get_workspace_size(*args, EPS, ro, outs[1], outs[2]) == (161002, 0, None)
    assert "C-contiguous" in aclnn.get_recent_err_msg()
    assert_all_7(outs + (ro,))


# --- tiling overrides -----------------------------------------------------------------------------------------------

BIG = good((64, 4096))  # one row per tile (H = 4096 fp32 fits once)
SMALL = good((40, 72))


@pytest.mark.parametrize("args,kw,words", [
    (SMALL, dict(core_num=0), ["core_num", "0", "[1, 48]"]),
    (SMALL, dict(core_num=49), ["core_num", "49", "[1, 48]"]),
    (SMALL, dict(core_num=-1), ["core_num", "-1"]),
    (SMALL, dict(core_num=8, ub_rows=0), ["ub_rows", "0", "[1, 5]"]),
    (SMALL, dict(core_num=8, ub_rows=6), ["ub_rows", "6", "[1, 5]", "rows per core"]),
    (SMALL, dict(ub_rows=2), ["ub_rows", "2", "[1, 1]"]),  # 40 rows on 48 cores: one row each
    (BIG, dict(core_num=1, ub_rows=2), ["ub_rows", "2 rows of H = 4096", "do not fit the UB"]),
    (BIG, dict(core_num=1, ub_rows=64), ["ub_rows", "64 rows", "do not fit the UB"]),
    (BIG, dict(core_num=1, ub_rows=2, tmp="framework"), ["ub_rows", "do not fit the UB"]),
], ids=lambda v: str(v) if isinstance(v, dict) else None)
def test_tiling_overrides_out_of_range(args, kw, words):
    with pytest.raises(AclnnError) as e:
        tiling.layer_norm_grad(*args.values(), **kw)
    assert e.value.status == 561002, e.value.message
    for w in words:
        assert w in e.value.message, e.value.message


def test_tiling_overrides_at_their_limits_work():
    t = tiling.layer_norm_grad(*SMALL.values(), core_num=48)
    assert (t.block_dim, t.block_factor) == (40, 1)
    t = tiling.layer_norm_grad(*SMALL.values(), core_num=8, ub_rows=5)
    assert (t.block_dim, t.block_factor, t.ub_rows) == (8, 5, 5)
    t = tiling.layer_norm_grad(*BIG.values(), core_num=1, ub_rows=1)
    assert t.ub_rows == 1 and t.block_dim == 1
    res = kernels.layer_norm_grad(*BIG.values(), tiling=t)
    gold = kernels.reference.layer_norm_grad(*BIG.values(), EPS)
    assert all(compare(r, g).ok for r, g in zip(res, gold, strict=True))


# --- hand-made tilings ----------------------------------------------------------------------------------------------

TILED = good((100, 64))  # 34 cores of 3 rows, the tail core 1 row


def official(args=TILED, **kw):
    return tiling.layer_norm_grad(*args.values(), **kw)


# (name, changes, words)
BAD_TILINGS = [
    ("rows", dict(rows=99), ["tiling.rows", "99", "100"]),
    ("h", dict(h=63), ["tiling.h", "63", "64"]),
    ("h_align", dict(h_align=72), ["tiling.h_align", "72"]),
    ("data_type", dict(data_type=1), ["tiling.data_type"]),
    ("tmp_mode", dict(tmp_mode=1), ["tiling.tmp_mode"]),
    ("is_reuse_source", dict(is_reuse_source=1), ["tiling.is_reuse_source"]),
    ("block_dim 0", dict(block_dim=0), ["tiling.block_dim", "0", "[1, 48]"]),
    ("block_dim 49", dict(block_dim=49), ["tiling.block_dim", "49", "[1, 48]"]),
    ("block_dim one short", dict(block_dim=33), ["tiling.block_factor", "is 3", "give 4"]),
    ("block_factor 0", dict(block_factor=0), ["tiling.block_factor"]),
    ("block_factor too large", dict(block_factor=4), ["tiling.block_factor", "is 4", "give 3"]),
    ("tail_rows 0", dict(tail_rows=0), ["tiling.tail_rows", "is 0", "give 1"]),
    # covers the 100 rows, but the tail core would hold more than block_factor
    ("tail_rows above block_factor", dict(block_dim=33, tail_rows=4), ["tiling.block_factor"]),
    ("ub_rows 0", dict(ub_rows=0), ["tiling.ub_rows", "0", "[1, 3]"]),
    ("ub_rows above block_factor", dict(ub_rows=4), ["tiling.ub_rows", "4"]),
]


@pytest.mark.parametrize("name,change,words", BAD_TILINGS, ids=[c[0] for c in BAD_TILINGS])
@pytest.mark.parametrize("checks", [False, True], ids=["fast", "checked"])
def test_bad_hand_made_tiling(name, change, words, checks):
    t = tiling.replace(official(), **change)
    before = {k: v.copy() for k, v in TILED.items()}
    outs = outs_for(TILED)
    with pytest.raises(AclnnError) as e:
        call(TILED, tiling=t, out=outs, checks=checks)
    assert e.value.status == 561002, e.value.message
    for w in words:
        assert w in e.value.message, e.value.message
    assert_all_7(outs)
    for k, v in before.items():
        np.testing.assert_array_equal(TILED[k], v)


@pytest.mark.parametrize("change", [dict(block_factor=4, block_dim=25, tail_rows=4), dict(ub_rows=1),
                                    dict(block_factor=5, block_dim=20, tail_rows=5)], ids=str)
def test_hand_made_split_with_stale_api_tilings_is_refused_or_correct(change):
    """A hand-made tiling that covers the rows consistently must either be refused (561002) or compute the
    right result; here its API tilings (made for 3-row tiles, 1 on the tail core) no longer fit its tiles."""
    t = tiling.replace(official(), **change)
    outs = outs_for(TILED)
    try:
        res = call(TILED, tiling=t, out=outs, checks=True)
    except AclnnError as e:
        assert e.status == 561002, e.message
        assert_all_7(outs)
        return
    gold = kernels.reference.layer_norm_grad(*TILED.values(), EPS)
    for name, r, g in zip(("pd_x", "pd_gamma", "pd_beta"), res, gold, strict=True):
        assert compare(r, g).ok, f"{name}: {compare(r, g)}"


def test_good_hand_made_tilings_run():
    """replace() with the fields a tiling made for that split would have: accepted, within the standard."""
    gold = kernels.reference.layer_norm_grad(*TILED.values(), EPS)
    for kw in (dict(core_num=1), dict(core_num=3, ub_rows=2), dict(ub_rows=1)):
        t = official(**kw)
        res = call(TILED, tiling=t, checks=True)
        assert all(compare(r, g).ok for r, g in zip(res, gold, strict=True)), kw
    # a derived field that disagrees with the split is refused, even one the device does not read or a workspace
    # larger than the split needs: every derived field is what the free choices give
    t = official()
    for change in (dict(lng_bytes=t.lng_bytes + 32), dict(workspace_size=t.workspace_size - 4),
                   dict(workspace_size=t.workspace_size + 4096)):
        with pytest.raises(AclnnError) as e:
            call(TILED, tiling=tiling.replace(t, **change))
        assert e.value.status == 561002 and next(iter(change)) in e.value.message


# --- the executor -------------------------------------------------------------------------------------------------


def test_aclnn_executor_checks():
    outs = outs_for(GOOD)
    st, ws, ex = aclnn.layer_norm_grad_get_workspace_size(*GOOD.values(), EPS, *outs)
    assert st == 0
    assert aclnn.layer_norm_grad(None, ws, ex) == 161001
    assert "workspace" in aclnn.get_recent_err_msg()
    assert aclnn.layer_norm_grad(np.empty(ws, np.uint8), ws, None) == 161001
    assert "executor" in aclnn.get_recent_err_msg()
    assert aclnn.layer_norm_grad(np.empty(ws - 1, np.uint8), ws - 1, ex) == 161002
    assert aclnn.layer_norm_grad(np.empty(ws, np.uint8), ws - 1, ex) == 161002  # the size argument counts too
    assert aclnn.layer_norm_grad(np.empty(ws // 4, np.float32), ws, ex) == 161002
    assert "workspace" in aclnn.get_recent_err_msg()
    other = aclnn.rms_norm_grad_get_workspace_size(a((4, 64)), a((4, 64)), a((4,)), a((64,)), np.empty((4, 64), F32),
                                                   np.empty(64, F32))[2]
    assert aclnn.layer_norm_grad(np.empty(other.workspace_size, np.uint8), other.workspace_size, other) == 161002
    assert "rms_norm_grad" in aclnn.get_recent_err_msg()
    assert_all_7(outs)  # failed runs write nothing
    assert aclnn.layer_norm_grad(np.empty(ws, np.uint8), ws, ex) == 0
    assert aclnn.get_recent_err_msg() == ""
    expect = call(GOOD)
    for o, r in zip(outs, expect, strict=True):
        np.testing.assert_array_equal(o, r)


# --- the boundaries that work -----------------------------------------------------------------------------------


@pytest.mark.parametrize("shape,stat_shape,dtype,kw", [
    ((16,), (), F32, {}), ((16,), (1,), F16, {}), ((1, 1), (1,), F32, {}), ((3, 1), (3, 1), F16, {}),
    ((1,) * 7 + (16,), (1,) * 7, F32, {}), ((2, 4464), (2,), F32, {}),  # the largest H that fits
    ((2, 4464), (2,), F16, dict(tmp="framework")), ((2, 5456), (2,), F32, dict(is_reuse_source=True)),
    ((4, 64), (4,), F32, dict(epsilon=0.0)),
    ((4, 64), (4,), F32, dict(epsilon=np.float32(1e-3))), ((4, 64), (4,), F32, dict(is_reuse_source=True)),
    ((4, 64), (4,), F16, dict(is_reuse_source=False)),
], ids=lambda v: str(v))
def test_boundary_successes(shape, stat_shape, dtype, kw):
    args = good(shape, dtype)
    args["variance"] = args["variance"].reshape(stat_shape)
    args["mean"] = args["mean"].reshape(stat_shape)
    before = {k: v.copy() for k, v in args.items()}
    res = call(args, checks=True, **kw)
    assert res[0].shape == shape and res[1].shape == (shape[-1],) and all(r.dtype == dtype for r in res)
    gold = kernels.reference.layer_norm_grad(*args.values(), float(kw.get("epsilon", EPS)))
    for r, g in zip(res, gold, strict=True):
        assert compare(r, g).ok, compare(r, g)
    for k, v in before.items():
        np.testing.assert_array_equal(args[k], v)
    outs = outs_for(args)
    epsilon = kw.get("epsilon", EPS)
    rest = {k: v for k, v in kw.items() if k != "epsilon"}
    st, ws, ex = aclnn.layer_norm_grad_get_workspace_size(*args.values(), epsilon, *outs, **rest)
    assert st == 0 and aclnn.layer_norm_grad(np.empty(ws, np.uint8), ws, ex) == 0
    for o, r in zip(outs, res, strict=True):
        np.testing.assert_array_equal(o, r)
