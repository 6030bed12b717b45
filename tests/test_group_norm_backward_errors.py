"""Every input aclnnGroupNormBackward forbids (``check_args`` of tiling/group_norm_backward.py, in aclnn's order):
the status, a message naming the parameter and the rule, nothing written to the caller's arrays, through the op
API and the two-phase aclnn form; empty inputs; hand-made tilings and tiling overrides the op refuses."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import tilesim.kernels as kernels
import tilesim.tiling as tiling
from tilesim.kernels import aclnn, reference
from tilesim.tiling.common import replace

from tilesim import AclnnError

F32, F16, BF16 = np.float32, np.float16, ml_dtypes.bfloat16
N, C, HXW, G = 2, 8, 16, 2
SENTINEL = 7.0
NAMES = ("grad_out", "input", "mean", "rstd", "gamma")


def inputs(n=N, c=C, hxw=HXW, group=G, dtype=F32, seed=0):
    """dy, x, mean, rstd, gamma as the forward would give them: mean and rstd per (n, group) in float64, cast."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-2, 2, (n, c, hxw)).astype(dtype)
    dy = rng.uniform(-2, 2, (n, c, hxw)).astype(dtype)
    x64 = x.astype(np.float64).reshape(n, group, -1)
    mean = x64.mean(axis=2).astype(dtype)
    rstd = (1.0 / np.sqrt(x64.var(axis=2) + 1e-5)).astype(dtype)
    gamma = rng.uniform(-1.5, 1.5, c).astype(dtype)
    return dict(grad_out=dy, input=x, mean=mean, rstd=rstd, gamma=gamma, N=n, C=c, HxW=hxw, group=group,
                output_mask=(True, True, True))


def z(shape, dtype=F32):
    """A zero-stride stand-in: the checks read only shape and dtype, so big shapes cost nothing."""
    return np.broadcast_to(np.zeros((), dtype), shape)


def shape_only(n, c, hxw, group, dtype=F32):
    return dict(grad_out=z((n, c, hxw), dtype), input=z((n, c, hxw), dtype), mean=z((n, group), dtype),
                rstd=z((n, group), dtype), gamma=z((c,), dtype), N=n, C=c, HxW=hxw, group=group,
                output_mask=(True, True, True))


def call_op(args, **kw):
    return kernels.group_norm_backward(*(args[k] for k in NAMES), args["N"], args["C"], args["HxW"], args["group"],
                                       args["output_mask"], **kw)


def call_ws(args, outs, soc="Ascend910B1"):
    return aclnn.group_norm_backward_get_workspace_size(*(args[k] for k in NAMES), args["N"], args["C"],
                                                        args["HxW"], args["group"], args["output_mask"], *outs,
                                                        soc=soc)


def call_tiling(args, **kw):
    return tiling.group_norm_backward(*(args[k] for k in NAMES), args["N"], args["C"], args["HxW"], args["group"],
                                      args["output_mask"], **kw)


def out_dtype(args):
    dy = args["grad_out"]
    if dy is not None and np.dtype(dy.dtype) in (np.dtype(F32), np.dtype(F16), np.dtype(BF16)):
        return dy.dtype
    return F32


def sentinels(args):
    """(gradInput, gradGammaOut, gradBetaOut) filled with the sentinel, shaped as a good call would write them
    (read-only zero-stride views for the big shapes, which fail before anything is written)."""
    dt = out_dtype(args)
    x = args["input"]
    dx_shape = x.shape if x is not None else (args["N"], args["C"], args["HxW"])
    c = args["C"] if isinstance(args["C"], int) and args["C"] > 0 else C

    def full(shape):
        if int(np.prod(shape)) > 10 ** 5:
            return np.broadcast_to(np.full((), SENTINEL, dt), shape)
        return np.full(shape, SENTINEL, dt)

    return full(dx_shape), full((c,)), full((c,))


def untouched(*arrays):
    return all(a is None or np.all(a.astype(np.float64) == SENTINEL) for a in arrays)


def assert_error(e, status, words):
    assert e.status == status, e.message
    for w in words:
        assert w in e.message, e.message


def a(shape, dtype=F32):
    return np.ones(shape, dtype)


def big_cg():  # C/group = 8001 > 8000
    return shape_only(1, 8001, 1, 1)


def big_c():  # C = 240064 > 240000 with C/group = 7502
    return shape_only(1, 240064, 1, 32)


def all_bf16():
    return inputs(dtype=BF16)


def dtype_all(dt):
    return lambda: {**inputs(), **{k: v.astype(dt) for k, v in inputs().items() if k in NAMES}}


# (id, base args, changes to them, soc, status, words the message must contain)
CASES = [
    ("gradOut None", inputs, dict(grad_out=None), "Ascend910B1", 161001, ["gradOut", "nullptr"]),
    ("input None", inputs, dict(input=None), "Ascend910B1", 161001, ["input", "nullptr"]),
    ("mean None", inputs, dict(mean=None), "Ascend910B1", 161001, ["mean", "nullptr"]),
    ("rstd None", inputs, dict(rstd=None), "Ascend910B1", 161001, ["rstd", "nullptr"]),
    ("outputMask None", inputs, dict(output_mask=None), "Ascend910B1", 161002, ["outputMask", "null"]),
    ("outputMask length 2", inputs, dict(output_mask=(True, True)), "Ascend910B1", 161002,
     ["outputMask", "length must be 3", "got 2"]),
    ("outputMask length 4", inputs, dict(output_mask=(True,) * 4), "Ascend910B1", 161002,
     ["outputMask", "length must be 3", "got 4"]),
    ("outputMask empty", inputs, dict(output_mask=()), "Ascend910B1", 161002, ["outputMask", "length must be 3"]),
    ("gradOut float64", dtype_all(np.float64), {}, "Ascend910B1", 161002, ["gradOut", "float64", "supported"]),
    ("gradOut int32", dtype_all(np.int32), {}, "Ascend910B1", 161002, ["gradOut", "int32", "supported"]),
    ("gradOut float64 alone", inputs, dict(grad_out=a((N, C, HXW), np.float64)), "Ascend910B1", 161002,
     ["gradOut", "float64"]),
    ("bf16 on Ascend910A", all_bf16, {}, "Ascend910A", 161002, ["gradOut", "bfloat16", "Ascend910A"]),
    ("bf16 on Ascend310P3", all_bf16, {}, "Ascend310P3", 161002, ["gradOut", "bfloat16", "Ascend310P3"]),
    ("input fp16", inputs, dict(input=a((N, C, HXW), F16)), "Ascend910B1", 161002,
     ["input", "float16", "gradOut's dtype float32"]),
    ("mean fp16", inputs, dict(mean=a((N, G), F16)), "Ascend910B1", 161002, ["mean", "float16", "gradOut"]),
    ("rstd bf16", inputs, dict(rstd=a((N, G), BF16)), "Ascend910B1", 161002, ["rstd", "bfloat16", "gradOut"]),
    ("gamma fp16", inputs, dict(gamma=a((C,), F16)), "Ascend910B1", 161002, ["gamma", "float16", "gradOut"]),
    ("gamma bf16 with fp16 gradOut", dtype_all(F16), dict(gamma=a((C,), BF16)), "Ascend910B1", 161002,
     ["gamma", "bfloat16", "gradOut's dtype float16"]),
    ("mean fp32 with fp16 gradOut on 910A", dtype_all(F16), dict(mean=a((N, G))), "Ascend910A", 161002,
     ["mean", "float32", "gradOut's dtype float16"]),
    ("group 0", inputs, dict(group=0), "Ascend910B1", 161002, ["group", "greater than 0", "got 0"]),
    ("group negative", inputs, dict(group=-2), "Ascend910B1", 161002, ["group", "greater than 0", "got -2"]),
    ("C not divisible by group", inputs, dict(group=3), "Ascend910B1", 161002, ["C", "divisible by group"]),
    ("C not divisible by group on 910A", inputs, dict(group=3), "Ascend910A", 161002, ["C", "divisible by group"]),
    ("C/group > 8000 910B1", big_cg, {}, "Ascend910B1", 161002, ["group", "8001", "8000", "Ascend910B1"]),
    ("C/group > 8000 910_9391", big_cg, {}, "Ascend910_9391", 161002, ["group", "8000", "Ascend910_9391"]),
    ("C > 240000 910B1", big_c, {}, "Ascend910B1", 161002, ["C", "240000", "240064", "Ascend910B1"]),
    ("C > 240000 910_9391", big_c, {}, "Ascend910_9391", 161002, ["C", "240000", "Ascend910_9391"]),
    ("gradOut rank 9", inputs, dict(grad_out=a((1,) * 6 + (N, C, HXW))), "Ascend910B1", 161002,
     ["gradOut", "rank 9", "8"]),
    ("gradOut numel", inputs, dict(grad_out=a((N, C, HXW - 1))), "Ascend910B1", 161002,
     ["gradOut", "numel 240", "N * C * HxW = 256"]),
    ("input numel", inputs, dict(input=a((N, C, HXW + 1))), "Ascend910B1", 161002,
     ["input", "numel 272", "N * C * HxW = 256"]),
    ("N disagrees with the arrays", inputs, dict(N=3), "Ascend910B1", 161002, ["gradOut", "N * C * HxW = 384"]),
    ("mean numel", inputs, dict(mean=a((N, G + 1))), "Ascend910B1", 161002, ["mean", "numel 6", "N * group = 4"]),
    ("rstd numel", inputs, dict(rstd=a((N,))), "Ascend910B1", 161002, ["rstd", "numel 2", "N * group = 4"]),
    ("gamma numel", inputs, dict(gamma=a((C - 1,))), "Ascend910B1", 161002, ["gamma", "numel 7", "C = 8"]),
    ("gamma numel on 310P", inputs, dict(gamma=a((2 * C,))), "Ascend310P3", 161002, ["gamma", "numel 16", "C = 8"]),
]


@pytest.mark.parametrize("name,base,change,soc,status,words", CASES, ids=[c[0] for c in CASES])
def test_bad_input(name, base, change, soc, status, words):
    args = {**base(), **change}
    saved = {k: np.array(v, copy=True) for k, v in args.items() if k in NAMES and v is not None}
    outs = sentinels(args)
    with pytest.raises(AclnnError) as e:
        call_op(args, soc=soc, out=outs)
    assert_error(e.value, status, words)
    assert untouched(*outs)
    for k, v in saved.items():
        np.testing.assert_array_equal(args[k], v)
    # the tiling checks the same arguments first, with the same result
    with pytest.raises(AclnnError) as et:
        call_tiling(args, soc=soc)
    assert (et.value.status, et.value.message) == (status, e.value.message)
    # the two-phase form: the same status and message, no executor, nothing written
    st, ws, ex = call_ws(args, outs, soc=soc)
    assert (st, ws, ex) == (status, 0, None)
    assert aclnn.get_recent_err_msg() == e.value.message
    assert untouched(*outs)


def test_good_call_clears_recent_error():
    args = inputs()
    assert call_ws({**args, "group": 0}, sentinels(args))[0] == 161002
    assert aclnn.get_recent_err_msg()
    outs = sentinels(args)
    st, ws, ex = call_ws(args, outs)
    assert st == 0 and aclnn.get_recent_err_msg() == ""
    assert aclnn.group_norm_backward(np.empty(ws, np.uint8), ws, ex) == 0
    want = call_op(args)
    for o, w in zip(outs, want, strict=True):
        np.testing.assert_array_equal(o, w)


# --- the two-phase form: the outputs ------------------------------------------------------------------------------

@pytest.mark.parametrize("i,name", [(0, "gradInput"), (1, "gradGammaOut"), (2, "gradBetaOut")])
def test_aclnn_required_output_none(i, name):
    # the code's 161002 (the doc says 161001)
    args = inputs()
    outs = list(sentinels(args))
    outs[i] = None
    st, ws, ex = call_ws(args, outs)
    assert (st, ws, ex) == (161002, 0, None)
    msg = aclnn.get_recent_err_msg()
    assert name in msg and "must not be null" in msg and f"outputMask[{i}]" in msg, msg
    assert untouched(*outs)


@pytest.mark.parametrize("mask", [(False, True, True), (True, False, True), (True, True, False),
                                  (False, False, True), (False, False, False)])
def test_aclnn_masked_off_output_may_be_none(mask):
    args = {**inputs(), "output_mask": mask}
    outs = [None if not m else o for m, o in zip(mask, sentinels(args), strict=True)]
    st, ws, ex = call_ws(args, outs)
    assert st == 0, aclnn.get_recent_err_msg()
    assert aclnn.group_norm_backward(np.empty(ws, np.uint8), ws, ex) == 0
    want = call_op(args)
    for m, o, w in zip(mask, outs, want, strict=True):
        if m:
            np.testing.assert_array_equal(o, w)
        else:
            assert o is None and w is None


def test_aclnn_masked_off_output_is_not_checked():
    args = {**inputs(), "output_mask": (True, False, True)}
    dx, _, db = sentinels(args)
    st, _, _ = call_ws(args, (dx, a((3,), F16), db))
    assert st == 0, aclnn.get_recent_err_msg()


OUT_CASES = [
    ("gradInput fp16", 0, lambda: a((N, C, HXW), F16), 161002, ["gradInput", "float16", "gradOut's dtype float32"]),
    ("gradGammaOut bf16", 1, lambda: a((C,), BF16), 161002, ["gradGammaOut", "bfloat16", "gradOut"]),
    ("gradBetaOut float64", 2, lambda: a((C,), np.float64), 161002, ["gradBetaOut", "float64", "gradOut"]),
    ("gradInput shape", 0, lambda: a((N, C, HXW - 1)), 161002, ["gradInput", "shape [2, 8, 15]", "[2, 8, 16]"]),
    ("gradInput reshaped", 0, lambda: a((N, C * HXW)), 161002, ["gradInput", "shape [2, 128]", "[2, 8, 16]"]),
    ("gradGammaOut shape", 1, lambda: a((C - 1,)), 161002, ["gradGammaOut", "shape [7]", "[8]"]),
    ("gradBetaOut shape", 2, lambda: a((1, C)), 161002, ["gradBetaOut", "shape [1, 8]", "[8]"]),
]


@pytest.mark.parametrize("name,i,make,status,words", OUT_CASES, ids=[c[0] for c in OUT_CASES])
def test_aclnn_bad_output(name, i, make, status, words):
    args = inputs()
    outs = list(sentinels(args))
    outs[i] = make()
    outs[i][...] = SENTINEL
    st, ws, ex = call_ws(args, outs)
    assert (st, ws, ex) == (status, 0, None)
    msg = aclnn.get_recent_err_msg()
    for w in words:
        assert w in msg, msg
    assert untouched(*outs)


def test_aclnn_second_phase_errors_write_nothing():
    args = inputs(n=4)
    outs = sentinels(args)
    st, ws, ex = call_ws(args, outs)
    assert st == 0 and ws == 16 * 1024 * 1024 + 2 * 2 * C * 4
    assert aclnn.group_norm_backward(np.empty(ws - 1, np.uint8), ws - 1, ex) == 161002
    assert "workspace" in aclnn.get_recent_err_msg()
    assert aclnn.group_norm_backward(None, ws, ex) == 161001
    assert aclnn.group_norm_backward(np.empty(ws, np.uint8), ws, None) == 161001
    assert aclnn.group_norm_backward(np.empty(ws, np.float32), ws, ex) == 161002
    assert untouched(*outs)
    assert aclnn.group_norm_backward(np.empty(ws, np.uint8), ws, ex) == 0
    assert not untouched(*outs)


# --- op API: out= ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("i,bad,name", [(0, a((N, C, HXW - 1)), "gradInput"), (1, a((C,), F16), "gradGammaOut"),
                                        (2, a((C + 1,)), "gradBetaOut")])
def test_op_bad_out_array_writes_nothing(i, bad, name):
    args = inputs()
    outs = list(sentinels(args))
    bad = bad.copy()
    bad[...] = SENTINEL
    outs[i] = bad
    with pytest.raises(AclnnError) as e:
        call_op(args, out=tuple(outs))
    assert_error(e.value, 161002, [name, "out array"])
    assert untouched(*outs)


# --- empty inputs ------------------------------------------------------------------------------------------------

def empty_args(dtype=F32):
    return dict(grad_out=a((2, 4, 0), dtype), input=a((2, 4, 0), dtype), mean=a((2, 2), dtype),
                rstd=a((2, 2), dtype), gamma=a((4,), dtype), N=2, C=4, HxW=0, group=2, output_mask=(True, True, True))


@pytest.mark.parametrize("dtype,soc", [(F32, "Ascend910B1"), (F16, "Ascend910B1"), (BF16, "Ascend910B1"),
                                       (F32, "Ascend910A"), (F16, "Ascend310P3")])
def test_empty_input_op_api(dtype, soc):
    args = empty_args(dtype)
    dx, dg, db = call_op(args, soc=soc)
    assert dx.shape == (2, 4, 0) and dx.dtype == np.dtype(dtype)
    for r in (dg, db):
        assert r.shape == (4,) and r.dtype == np.dtype(dtype) and np.all(r.astype(np.float64) == 0)
    outs = (np.full((2, 4, 0), SENTINEL, dtype), np.full(4, SENTINEL, dtype), np.full(4, SENTINEL, dtype))
    got = call_op(args, soc=soc, out=outs)
    assert all(g is o for g, o in zip(got, outs, strict=True))
    assert untouched(*outs)
    dx, dg, db = call_op({**args, "output_mask": (False, True, False)}, soc=soc)
    assert dx is None and db is None and np.all(dg.astype(np.float64) == 0)


@pytest.mark.parametrize("soc", ["Ascend910B1", "Ascend910A"])
def test_empty_input_aclnn(soc):
    args = empty_args()
    outs = (np.full((2, 4, 0), SENTINEL, F32), np.full(4, SENTINEL, F32), np.full(4, SENTINEL, F32))
    st, ws, ex = call_ws(args, outs, soc=soc)
    assert (st, ws) == (0, 0) and ex is not None
    assert aclnn.group_norm_backward(None, 0, ex) == 0
    assert untouched(*outs)


def test_empty_input_other_shapes():
    # N = 0 and C = 0 are empty too
    for n, c, g in ((0, 4, 2), (2, 0, 2)):
        args = dict(grad_out=a((n, c, 16)), input=a((n, c, 16)), mean=a((n, g)), rstd=a((n, g)), gamma=a((c,)),
                    N=n, C=c, HxW=16, group=g, output_mask=(True, True, True))
        dx, dg, db = call_op(args)
        assert dx.shape == (n, c, 16) and dg.shape == db.shape == (c,)
        assert call_ws(args, (np.empty((n, c, 16), F32), np.empty(c, F32), np.empty(c, F32)))[:2] == (0, 0)


def test_empty_input_tiling_refused():
    with pytest.raises(AclnnError) as e:
        call_tiling(empty_args())
    assert_error(e.value, 561002, ["input", "empty", "HxW = 0"])


def test_empty_input_with_tiling_argument():
    t = call_tiling(inputs(n=2, c=4, hxw=16, group=2))
    with pytest.raises(AclnnError) as e:
        call_op(empty_args(), tiling=t)
    assert_error(e.value, 161002, ["tiling", "empty"])


def test_empty_input_still_checked():
    with pytest.raises(AclnnError) as e:
        call_op({**empty_args(), "mean": a((2, 3))})
    assert_error(e.value, 161002, ["mean", "N * group"])


# --- C/group > 8000 where the op is decomposed --------------------------------------------------------------------

def test_910a_large_c_per_group_runs_the_decomposition():
    args = inputs(n=1, c=8001, hxw=2, group=1)
    with pytest.raises(AclnnError):
        call_op(args, soc="Ascend910B1")
    dx, dg, db = call_op(args, soc="Ascend910A")
    want = reference.group_norm_backward(*(args[k] for k in NAMES), 1, 8001, 2, 1)
    for got, w in zip((dx, dg, db), want, strict=True):
        assert got.shape == w.shape and got.dtype == np.dtype(F32)
        np.testing.assert_allclose(got, w, rtol=1e-4, atol=1e-5)
    st, ws, ex = call_ws(args, sentinels(args), soc="Ascend910A")
    assert (st, ws) == (0, 0), aclnn.get_recent_err_msg()


# --- hand-made tilings ------------------------------------------------------------------------------------------

def official(args, soc="Ascend910B1"):
    return call_tiling(args, soc=soc)


def mode1_args():  # C/G = 4, HxW = 12000 fp32: one channel per UB load (mode 1)
    return shape_only(1, 8, 12000, 2)


BAD_TILINGS = [
    ("a task left uncovered", inputs, lambda t: replace(t, block_dim=t.block_dim - 1),
     ["tiling.task_num_per_core", "is 1", "give 2"]),
    ("tasks covered twice", inputs, lambda t: replace(t, task_num_per_core=2, task_num_per_tail_core=2),
     ["tiling.task_num_per_core", "is 2", "give 1"]),
    ("tail core count off", lambda: inputs(n=3, group=2), lambda t: replace(t, block_dim=3, task_num_per_core=2,
                                                                             task_num_per_tail_core=2, tail_core=2),
     ["tiling.tail_core", "is 2", "give 3"]),
    ("block_dim 0", inputs, lambda t: replace(t, block_dim=0), ["block_dim", "must be in [1, 48]"]),
    ("mode 5 for HxW 16", inputs, lambda t: replace(t, ub_mode=5), ["ub_mode", "HxW = 1"]),
    ("mode 0 for HxW 1", lambda: inputs(hxw=1), lambda t: replace(t, ub_mode=0), ["ub_mode", "mode 5"]),
    ("mode 0 not fitting", mode1_args, lambda t: replace(t, ub_mode=0), ["ub_mode", "does not fit"]),
    ("mode 2 not fitting", mode1_args, lambda t: replace(t, ub_mode=2), ["ub_mode", "do not fit"]),
    ("mode 3 without chunks", inputs, lambda t: replace(t, ub_mode=3), ["mode3_capacity", "multiple of 64"]),
    ("mode 3 chunk not a multiple of 64", inputs,
     lambda t: replace(t, ub_mode=3, mode2_ub_capacity_ele=16, mode2_ub_iteration_num=1, mode2_ub_tail_num=16),
     ["mode3_capacity", "multiple of 64", "got 16"]),
    ("mode 3 wrong iteration count", inputs,
     lambda t: replace(t, ub_mode=3, mode2_ub_capacity_ele=64, mode2_ub_iteration_num=2, mode2_ub_tail_num=16),
     ["tiling.mode2_ub_iteration_num", "is 2", "give 1"]),
    ("mode 3 wrong tail", lambda: inputs(hxw=100), lambda t: replace(t, ub_mode=3, mode2_ub_capacity_ele=64,
                                                                      mode2_ub_iteration_num=2, mode2_ub_tail_num=64),
     ["tiling.mode2_ub_tail_num", "is 64", "give 36"]),
    ("mode 2 fields claimed in mode 0", inputs, lambda t: replace(t, mode2_ub_capacity_ele=64),
     ["tiling.mode2_ub_capacity_ele", "is 64", "give 0"]),
    ("mode 1 capacity wrong", inputs, lambda t: replace(t, mode1_ub_cap_c_num=t.mode1_ub_cap_c_num + 1),
     ["mode1_ub_cap_c_num"]),
    ("mode 1 iteration wrong", mode1_args, lambda t: replace(t, mode1_ub_iter_c_num=1), ["mode1_ub_iter_c_num"]),
    ("tiling key", inputs, lambda t: replace(t, tiling_key=t.tiling_key + 10), ["tiling_key"]),
    ("another problem", inputs, lambda t: replace(t, hxw=8), ["hxw"]),
    ("mask flipped", inputs, lambda t: replace(t, dbeta_is_require=False), ["dbeta_is_require"]),
    ("workspace too small", lambda: inputs(n=4), lambda t: replace(t, workspace_size=t.workspace_size - 4),
     ["workspace_size"]),
    ("stage-2 slice", lambda: inputs(n=4), lambda t: replace(t, cast_ele_num=128), ["cast_ele_num", "is 128"]),
    ("stage-2 rows", lambda: inputs(n=4), lambda t: replace(t, core_batch_parts=0), ["core_batch_parts"]),
    ("stage 2 on the wrong core count", lambda: inputs(n=4, c=256, group=2),
     lambda t: replace(t, block_dim=4, task_num_per_core=2, task_num_per_tail_core=2, tail_core=4),
     ["tiling.stage2_core_used", "is 4", "give 2"]),
    ("fp32 deterministic on one core", lambda: inputs(n=3),
     lambda t: replace(t, block_dim=1, task_num_per_core=6, task_num_per_tail_core=6, tail_core=1),
     ["core_num", "2 cores"]),
]


@pytest.mark.parametrize("name,base,change,words", BAD_TILINGS, ids=[c[0] for c in BAD_TILINGS])
def test_bad_hand_made_tiling(name, base, change, words):
    args = base()
    t = change(official(args))
    outs = sentinels(args)
    with pytest.raises(AclnnError) as e:
        call_op(args, tiling=t, out=outs)
    assert_error(e.value, 561002, words)
    assert untouched(*outs)


def test_hand_made_tiling_unknown_ub_mode_is_a_tiling_error():
    args = inputs()
    with pytest.raises(AclnnError) as e:
        call_op(args, tiling=replace(official(args), ub_mode=4))
    assert_error(e.value, 561002, ["ub_mode"])


def test_hand_made_tiling_more_blocks_than_cores():
    args = inputs(n=4)
    t = replace(official(args), block_dim=100, task_num_per_core=1, task_num_per_tail_core=0, tail_core=8)
    with pytest.raises(AclnnError) as e:
        call_op(args, tiling=t)
    assert_error(e.value, 561002, ["block_dim"])


@pytest.mark.parametrize("name,change", [
    ("two cores", lambda t: replace(t, block_dim=2, task_num_per_core=4, task_num_per_tail_core=4, tail_core=2)),
    ("three cores, uneven", lambda t: replace(t, block_dim=3, task_num_per_core=3, task_num_per_tail_core=2,
                                              tail_core=2)),
    ("mode 1", lambda t: replace(t, ub_mode=1)),
    ("mode 3 in 64-element chunks", lambda t: replace(t, ub_mode=3, mode2_ub_capacity_ele=64,
                                                      mode2_ub_iteration_num=1, mode2_ub_tail_num=16)),
])
def test_good_hand_made_tiling_runs(name, change):
    # the control of the cases above: consistent hand-made tilings are accepted and compute the same gradients
    args = inputs(n=4)
    t = change(official(args))
    got = call_op(args, tiling=t)
    want = call_op(args)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_tiling_argument_on_910a():
    args = inputs()
    t = official(args)
    outs = sentinels(args)
    with pytest.raises(AclnnError) as e:
        call_op(args, soc="Ascend910A", tiling=t, out=outs)
    assert_error(e.value, 161002, ["tiling", "Ascend910A", "DAV_2201"])
    assert untouched(*outs)
    with pytest.raises(AclnnError) as e:
        call_op(args, soc="Ascend310P3", tiling=t)
    assert_error(e.value, 161002, ["tiling", "Ascend310P3"])


# --- tiling overrides the tiling refuses --------------------------------------------------------------------------

@pytest.mark.parametrize("n", [3, 4, 7])
def test_tiling_fp32_deterministic_needs_two_cores(n):
    with pytest.raises(AclnnError) as e:
        call_tiling(inputs(n=n), core_num=1)
    assert_error(e.value, 561002, ["core_num", "2 cores", "got 1"])
    assert call_tiling(inputs(n=n), core_num=2).block_dim == 2
    assert call_tiling(inputs(n=2), core_num=1).block_dim == 1  # N <= 2: no stage 2
    assert call_tiling(inputs(n=n, dtype=F16), core_num=1).block_dim == 1  # b16 stage 2 runs on any core count


def test_tiling_core_num_not_positive():
    for k in (0, -1):
        with pytest.raises(AclnnError) as e:
            call_tiling(inputs(), core_num=k)
        assert_error(e.value, 561002, ["core_num", "must be in [1, 48]"])


def test_tiling_core_num_above_the_socs_cores():
    with pytest.raises(AclnnError) as e:
        call_tiling(shape_only(50, 8, 16, 2), core_num=100)
    assert_error(e.value, 561002, ["core_num"])


def test_tiling_ub_mode_0_that_does_not_fit():
    args = mode1_args()
    assert call_tiling(args).ub_mode == 1
    with pytest.raises(AclnnError) as e:
        call_tiling(args, ub_mode=0)
    assert_error(e.value, 561002, ["ub_mode", "mode 0", "does not fit"])


def test_tiling_ub_mode_5_only_for_hxw_1():
    with pytest.raises(AclnnError) as e:
        call_tiling(inputs(), ub_mode=5)
    assert_error(e.value, 561002, ["ub_mode", "HxW = 1"])
    with pytest.raises(AclnnError) as e:
        call_tiling(inputs(hxw=1), ub_mode=0)
    assert_error(e.value, 561002, ["ub_mode", "mode 5"])


@pytest.mark.parametrize("dtype,cap,unit", [(F32, 100, 64), (F32, 32, 64), (F32, 0, 64), (F32, -64, 64),
                                            (F16, 64, 128), (BF16, 192, 128), (F32, 10 ** 6, 64)])
def test_tiling_mode3_capacity_refused(dtype, cap, unit):
    args = inputs(dtype=dtype)
    assert call_tiling(args, ub_mode=3, mode3_capacity=2 * unit).mode2_ub_capacity_ele == 2 * unit
    with pytest.raises(AclnnError) as e:
        call_tiling(args, ub_mode=3, mode3_capacity=cap)
    assert_error(e.value, 561002, ["mode3_capacity", f"multiple of {unit}", f"got {cap}"])


def test_tiling_mode3_capacity_outside_mode_3():
    with pytest.raises(AclnnError) as e:
        call_tiling(inputs(), mode3_capacity=64)
    assert_error(e.value, 161002, ["mode3_capacity", "ub_mode 3 only"])
