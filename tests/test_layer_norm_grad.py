"""kernels.layer_norm_grad, the multi-core layer-norm backward on the LayerNormGrad and LayerNormGradBeta APIs:
against untiled float64 math and torch's native_layer_norm_backward (in float64 from the same rounded inputs, and
in the op's own precision with fp32 statistics), over both dtypes, aligned and unaligned H, ranks 1 to 8, one
row, fewer rows than cores, tail cores and tail tiles, both tmp modes, isReuseSource, large-mean inputs,
hand-made tilings, checked mode, ``out=``, the run report's counters, host thread counts and the aclnn form.
"""

from __future__ import annotations

import numba
import numpy as np
import pytest
import tilesim.tiling as tiling
import torch
from bitwise import assert_bitwise, bits
from tilesim.kernels import aclnn, layer_norm_grad
from tilesim.kernels import reference as ref
from tilesim.tiling.common import align_up, ceil_div
from tilesim.tiling.layer_norm_grad import LANES, SYS_WORKSPACE, TMP

import tilesim
from tilesim.precision import compare

DT = {"float32": np.float32, "float16": np.float16}
ISZ = {"float32": 4, "float16": 2}
EPS = 1e-5
NAMES = ("pd_x", "pd_gamma", "pd_beta")

# --------------------------------------------------------------------------------------------------------------
# helpers


def ln_inputs(rng, shape, dtype="float32", offset=0.0, trailing=False):
    """dy, x, variance, mean, gamma in ``dtype``: x ~ offset + N(0, 1), dy ~ N(0, 1), gamma ~ U(-1.5, 1.5); mean
    and (biased) variance from the rounded x in float64, then rounded to ``dtype``. ``trailing`` gives the
    statistics a trailing axis of 1."""
    dt = DT[dtype]
    x = (offset + rng.standard_normal(shape)).astype(dt)
    dy = rng.standard_normal(shape).astype(dt)
    gamma = rng.uniform(-1.5, 1.5, shape[-1]).astype(dt)
    x64 = x.astype(np.float64)
    mean, var = x64.mean(-1, keepdims=trailing), x64.var(-1, keepdims=trailing)
    return dy, x, var.astype(dt), mean.astype(dt), gamma


def _stats(x, var, mean):
    lead = x.shape[:-1] + (1,)
    return np.asarray(var).reshape(lead), np.asarray(mean).reshape(lead)


def torch64(dy, x, var, mean, gamma, eps=EPS):
    """aten native_layer_norm_backward in float64 on the same (rounded) inputs, rstd = (var + eps)^-1/2."""
    var, mean = _stats(x, var, mean)
    f = [torch.from_numpy(np.asarray(a, np.float64)) for a in (dy, x, mean, 1.0 / np.sqrt(var.astype(np.float64)
                                                                                           + eps), gamma)]
    bias = torch.zeros_like(f[4])  # a None bias with output_mask[2] raises on CPU
    out = torch.ops.aten.native_layer_norm_backward(f[0], f[1], [x.shape[-1]], f[2], f[3], f[4], bias, [True] * 3)
    return [o.numpy() for o in out]


def torch_lowp(dy, x, var, mean, gamma, eps=EPS):
    """The same op in the inputs' precision, statistics (mean, rstd), gamma and bias in fp32: what torch on CPU
    computes for the same half or float inputs. Only its pd_x is used for half (numerics.md: its dγ, dβ are not
    an oracle)."""
    var, mean = _stats(x, var, mean)
    f32 = np.float32
    rstd = (f32(1.0) / np.sqrt(var.astype(f32) + f32(eps))).astype(f32)
    t = [torch.from_numpy(np.ascontiguousarray(a)) for a in (dy, x, mean.astype(f32), rstd, gamma.astype(f32))]
    out = torch.ops.aten.native_layer_norm_backward(t[0], t[1], [x.shape[-1]], t[2], t[3], t[4],
                                                    torch.zeros_like(t[4]), [True] * 3)
    return [o.numpy() for o in out]


def assert_all_bitwise(outs, others, what):
    for name, a, b in zip(NAMES, outs, others, strict=True):
        assert_bitwise(a, b, f"{what}: {name}")


def check_all(outs, golden, dtype, what):
    for name, o, g in zip(NAMES, outs, golden, strict=True):
        p = compare(o, g, dtype)
        assert p.ok, f"{what}: {name}: {p}"


def run(*args, **kw):
    """The op under capture: (outputs, its single RunReport)."""
    with tilesim.capture() as runs:
        outs = layer_norm_grad(*args, **kw)
    assert len(runs) == 1
    return outs, runs[0]


def tiles(t):
    """Per core, the row counts of its UB tiles, in order, from the tiling alone."""
    out = []
    for c in range(t.block_dim):
        n = t.rows_of_core(c)
        out.append([t.ub_rows] * (n // t.ub_rows) + ([n % t.ub_rows] if n % t.ub_rows else []))
    assert sum(sum(c) for c in out) == t.rows
    return out


# --------------------------------------------------------------------------------------------------------------
# numerics


SHAPES = [
    (16,),  # rank 1: one row, aligned
    (17,),  # one row, unaligned
    (5, 16),  # rows < cores
    (5, 17),
    (3, 4, 33),  # rank 3, unaligned
    (7, 64),
    (2, 3, 1000),  # aligned for fp32 (125 blocks of 32 B), unaligned for fp16 (62.5)
    (3, 4096),  # one row per tile: two do not fit the UB with their temporaries
    (2, 4464),  # the largest H whose one row fits (4465 is refused: test_layer_norm_grad_errors.py)
    (100, 17),  # three rows per core, one on the tail core
    (200, 64),  # several rows per core, every core full
]


@pytest.mark.parametrize("dtype", list(DT))
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_against_untiled_math_and_torch(rng, dtype, shape):
    args = ln_inputs(rng, shape, dtype)
    t = tiling.layer_norm_grad(*args)
    assert (t.rows, t.h) == (int(np.prod(shape[:-1])), shape[-1])
    assert t.h_align == align_up(shape[-1], 32 // ISZ[dtype])
    outs, rep = run(*args)
    assert rep.tiling == t and rep.block_dim == t.block_dim
    assert [o.dtype for o in outs] == [np.dtype(DT[dtype])] * 3
    assert outs[0].shape == shape and outs[1].shape == outs[2].shape == (shape[-1],)
    gold = ref.layer_norm_grad(*args, EPS)
    check_all(outs, gold, dtype, "vs reference")
    check_all(outs, torch64(*args), dtype, "vs torch float64")
    # pd_x against torch in the same precision (flash-attn's rule): ours errs at most twice as much, plus an
    # ulp of the result's scale for the cases where torch happens to round every element the same way
    low = torch_lowp(*args)
    scale = float(np.abs(gold[0]).max())
    ours_err = np.abs(outs[0].astype(np.float64) - gold[0]).max()
    torch_err = np.abs(low[0].astype(np.float64) - gold[0]).max()
    assert ours_err <= 2 * torch_err + np.finfo(DT[dtype]).eps * scale, (ours_err, torch_err)


def test_shapes_cover_what_they_claim():
    """One row, fewer rows than cores, a tail core, several rows per tile, aligned and unaligned H per dtype."""
    seen = set()
    for dtype in DT:
        for shape in SHAPES:
            t = tiling.layer_norm_grad(*ln_inputs(np.random.default_rng(0), shape, dtype))
            seen.add((dtype, t.h == t.h_align))
            if len(shape) == 1:
                assert (t.rows, t.block_dim, t.ub_rows) == (1, 1, 1)
            if shape == (5, 16):
                assert (t.block_dim, t.block_factor, t.tail_rows) == (5, 1, 1)
            if shape == (100, 17):
                assert (t.block_dim, t.block_factor, t.tail_rows, t.ub_rows) == (34, 3, 1, 3)
            if shape == (200, 64):
                assert (t.block_dim, t.block_factor, t.tail_rows) == (40, 5, 5)
            if shape in ((3, 4096), (2, 4464)):
                assert t.ub_rows == 1
    assert seen == {(d, a) for d in DT for a in (True, False)}


@pytest.mark.parametrize("dtype", list(DT))
@pytest.mark.parametrize("shape,stat_shape", [
    ((33,), ()), ((33,), (1,)),  # rank 1: the statistics a scalar or [1]
    ((6, 40), (6, 1)),
    ((2, 3, 24), (2, 3, 1)),
    ((1, 2, 1, 2, 1, 2, 3, 20), (1, 2, 1, 2, 1, 2, 3)),  # rank 8
])
def test_ranks_and_statistics_shapes(rng, dtype, shape, stat_shape):
    dy, x, var, mean, gamma = ln_inputs(rng, shape, dtype)
    var, mean = var.reshape(stat_shape), mean.reshape(stat_shape)
    outs = layer_norm_grad(dy, x, var, mean, gamma)
    assert outs[0].shape == shape
    check_all(outs, ref.layer_norm_grad(dy, x, var, mean, gamma, EPS), dtype, "vs reference")
    check_all(outs, torch64(dy, x, var, mean, gamma), dtype, "vs torch float64")
    # the same problem with the statistics with (or without) the trailing 1 gives the same bits
    lead = shape[:-1]
    alt = lead + (1,) if stat_shape == lead else lead
    assert_all_bitwise(layer_norm_grad(dy, x, var.reshape(alt), mean.reshape(alt), gamma), outs, "stat shape")


@pytest.mark.parametrize("dtype", list(DT))
def test_epsilon(rng, dtype):
    """epsilon enters rstd: a small variance makes it matter; epsilon 0 works too."""
    dy, x, var, mean, gamma = ln_inputs(rng, (9, 48), dtype)
    small = (var * DT[dtype](1e-3)).astype(DT[dtype])
    for eps in (0.0, 1e-5, 1e-3):
        outs = layer_norm_grad(dy, x, small, mean, gamma, epsilon=eps)
        check_all(outs, ref.layer_norm_grad(dy, x, small, mean, gamma, eps), dtype, f"epsilon {eps}")
    a = layer_norm_grad(dy, x, small, mean, gamma, epsilon=1e-5)[0]
    b = layer_norm_grad(dy, x, small, mean, gamma, epsilon=1e-3)[0]
    assert np.any(bits(a) != bits(b))


def test_fewer_rows_than_cores(rng):
    """5 rows on 48 cores: five cores of one row each, nothing launched for the rest."""
    args = ln_inputs(rng, (5, 200), "float32")
    outs, rep = run(*args)
    t = rep.tiling
    assert (t.block_dim, t.block_factor, t.tail_rows, t.ub_rows) == (5, 1, 1, 1)
    assert rep.block_dim == 5 and rep.counters.shape[0] == 5
    # per core: the workspace rows cleared, one tile (two atomic adds, pd_x), then the 8 final tasks of H = 200
    # (4 column blocks, gamma and beta) round-robin: two on cores 0-2, one on cores 3 and 4
    assert list(rep.counter("mte3_transfers")) == [1 + 3 + 2] * 3 + [1 + 3 + 1] * 2
    assert list(rep.counter("atomic_bytes")) == [2 * 200 * 4] * 5
    check_all(outs, ref.layer_norm_grad(*args, EPS), "float32", "vs reference")


# --------------------------------------------------------------------------------------------------------------
# tails, tiles and hand-made tilings


TILE_CASES = [
    # (dtype, shape, tiling overrides, expected (block_dim, block_factor, tail_rows, ub_rows))
    ("float32", (100, 64), dict(core_num=3, ub_rows=5), (3, 34, 32, 5)),  # 7 tiles, last of 4; tail core 2 rows
    ("float32", (100, 17), dict(core_num=3, ub_rows=5), (3, 34, 32, 5)),  # the same, unaligned H
    ("float16", (100, 17), dict(core_num=3, ub_rows=5), (3, 34, 32, 5)),
    ("float16", (61, 1000), dict(core_num=4, ub_rows=3), (4, 16, 13, 3)),
    ("float32", (61, 1000), dict(core_num=4, ub_rows=3), (4, 16, 13, 3)),
    ("float32", (37, 33), dict(core_num=1), (1, 37, 37, 37)),
    ("float32", (37, 33), dict(core_num=1, ub_rows=1), (1, 37, 37, 1)),
    ("float16", (37, 33), dict(core_num=3, ub_rows=2), (3, 13, 11, 2)),
    ("float32", (37, 33), dict(core_num=3, ub_rows=1), (3, 13, 11, 1)),
    ("float32", (37, 4096), dict(core_num=5), (5, 8, 5, 1)),  # one row per tile: H = 4096 fits only one
    ("float32", (48, 512), dict(ub_rows=1), (48, 1, 1, 1)),
]


@pytest.mark.parametrize("dtype,shape,kw,expect", TILE_CASES, ids=[f"{c[0]}-{c[1]}-{c[2]}" for c in TILE_CASES])
def test_tail_cores_and_tail_tiles(rng, dtype, shape, kw, expect):
    """pd_x of a row depends on that row alone: bitwise the official run's. pd_gamma and pd_beta are summed per
    tile, per core and over the cores, so the tiling changes their summation order: within the standard."""
    args = ln_inputs(rng, shape, dtype)
    official = layer_norm_grad(*args)
    t = tiling.layer_norm_grad(*args, **kw)
    assert (t.block_dim, t.block_factor, t.tail_rows, t.ub_rows) == expect
    per_core = tiles(t)
    outs, rep = run(*args, tiling=t)
    assert rep.tiling == t and rep.block_dim == t.block_dim
    assert_bitwise(outs[0], official[0], "pd_x vs the official tiling")
    gold = ref.layer_norm_grad(*args, EPS)
    check_all(outs, gold, dtype, f"tiling {kw}")
    assert list(rep.counter("atomic_bytes")) == [2 * t.h_align * 4 * len(c) for c in per_core]
    checked = layer_norm_grad(*args, tiling=t, checks=True)
    assert_all_bitwise(checked, outs, "checked vs fast")


def test_tile_cases_reach_partial_tiles():
    """The cases above have partial last tiles on full cores and on the tail core (all three API tilings)."""
    kinds = set()
    for dtype, shape, kw, _ in TILE_CASES:
        t = tiling.layer_norm_grad(*ln_inputs(np.random.default_rng(0), shape, dtype), **kw)
        per_core = tiles(t)
        if any(len(c) > 1 and c[-1] < t.ub_rows for c in per_core[:-1]):
            kinds.add("full core")
            assert t.lng[1].s_length == t.block_factor % t.ub_rows
        if len(per_core[-1]) > 1 and per_core[-1][-1] < t.ub_rows:
            kinds.add("tail core")
            assert t.lng[2].s_length == t.tail_rows % t.ub_rows
            assert t.beta[2].bs_length == t.tail_rows % t.ub_rows
    assert kinds == {"full core", "tail core"}


@pytest.mark.parametrize("dtype", list(DT))
@pytest.mark.parametrize("kw", [dict(core_num=1), dict(core_num=3), dict(ub_rows=1), dict(ub_rows=2),
                                dict(core_num=3, ub_rows=2), dict(core_num=48)], ids=str)
def test_hand_made_tilings_meet_the_standard(rng, dtype, kw):
    args = ln_inputs(rng, (50, 72), dtype)
    t = tiling.layer_norm_grad(*args, **kw)
    if "core_num" in kw:
        assert t.block_factor == ceil_div(50, kw["core_num"]) and t.block_dim == ceil_div(50, t.block_factor)
    if "ub_rows" in kw:
        assert t.ub_rows == kw["ub_rows"]
    outs, rep = run(*args, tiling=t)
    assert rep.tiling == t
    check_all(outs, ref.layer_norm_grad(*args, EPS), dtype, f"tiling {kw}")
    assert_bitwise(outs[0], layer_norm_grad(*args)[0], "pd_x vs the official tiling")


# --------------------------------------------------------------------------------------------------------------
# tmp modes and isReuseSource


@pytest.mark.parametrize("dtype,shape", [("float32", (37, 64)), ("float32", (64, 17)), ("float32", (9, 4096)),
                                         ("float16", (37, 1000)), ("float16", (5, 33))])
def test_framework_tmp_gives_the_shared_bits(rng, dtype, shape):
    """Where the temporaries live does not change a single instruction: bitwise the same."""
    args = ln_inputs(rng, shape, dtype)
    shared, rep_s = run(*args)
    framework, rep_f = run(*args, tmp="framework")
    ts, tf = rep_s.tiling, rep_f.tiling
    assert (ts.tmp_mode, tf.tmp_mode) == (0, 1) and tf.tiling_key == ts.tiling_key + 2
    assert rep_s.ub_plan.buffers[TMP].nbytes == ts.region_bytes
    # PopStackBuffer: the tmp buffer is all the UB the plan leaves, at least what the APIs need
    assert rep_f.ub_plan.buffers[TMP].nbytes == tf.region_bytes >= ts.region_bytes
    stack_end = rep_f.ub_plan.buffers[TMP].offset + tf.region_bytes
    assert rep_f.ub_plan.capacity - 32 < stack_end <= rep_f.ub_plan.capacity
    assert_all_bitwise(framework, shared, "framework vs shared tmp")
    check_all(framework, ref.layer_norm_grad(*args, EPS), dtype, "framework tmp")


@pytest.mark.parametrize("shape", [(37, 64), (64, 17), (9, 4096), (5, 33), (1, 1000)], ids=str)
@pytest.mark.parametrize("tmp", ["shared", "framework"])
def test_reuse_source_gives_the_same_bits(rng, shape, tmp):
    """isReuseSource (float only) computes x1 = dy·γ in dy's and x2 = x − μ in x's buffer instead of
    temporaries, and the kernel reloads dy from GM for the Beta: the same instructions on the same values, so
    pd_x, pd_gamma and pd_beta are bitwise those of isReuseSource=False. The APIs need fewer temporaries
    (4 instead of 6 per element for LayerNormGrad), so a tile can hold more rows."""
    args = ln_inputs(rng, shape, "float32")
    plain, rep0 = run(*args, tmp=tmp)
    reused, rep1 = run(*args, tmp=tmp, is_reuse_source=True)
    t0, t1 = rep0.tiling, rep1.tiling
    assert (t0.is_reuse_source, t1.is_reuse_source) == (0, 1) and t1.tiling_key == t0.tiling_key + 1
    assert t1.lng_bytes * 6 * t0.ub_rows == t0.lng_bytes * 4 * t1.ub_rows
    assert (t1.block_dim, t1.ub_rows) == (t0.block_dim, t0.ub_rows)  # the same tiles, the same summation order
    check_all(reused, ref.layer_norm_grad(*args, EPS), "float32", "isReuseSource")
    assert_all_bitwise(reused, plain, "isReuseSource vs not")
    # dy read twice per tile; the other GM reads do not depend on the tile size
    assert rep1.total("mte2_bytes") - rep0.total("mte2_bytes") == args[0].nbytes


def test_reuse_source_fits_more_rows_per_tile(rng):
    args = ln_inputs(rng, (48 * 12, 1024), "float32")
    plain = tiling.layer_norm_grad(*args)
    reused = tiling.layer_norm_grad(*args, is_reuse_source=True)
    assert reused.ub_rows > plain.ub_rows
    outs = layer_norm_grad(*args, is_reuse_source=True)
    check_all(outs, ref.layer_norm_grad(*args, EPS), "float32", "isReuseSource")
    assert_bitwise(outs[0], layer_norm_grad(*args)[0], "pd_x")


# --------------------------------------------------------------------------------------------------------------
# large means


@pytest.mark.parametrize("shape", [(37, 64), (37, 1000), (9, 4096), (64, 17), (5, 33), (1, 129)], ids=str)
def test_large_mean_fp32_no_worse_than_torch(rng, shape):
    """x = 100 + randn with fp32 statistics. The API centres first (x − μ, then the sums over H), torch's CPU
    backward sums over raw x and subtracts the mean's share afterwards, so ours loses fewer digits: its max
    absolute error is at most torch float32's on the same inputs, for pd_x and pd_gamma. pd_beta = Σ dy does not
    involve x; there only the summation order differs, so it is judged by the standard alone.

    The strict MARE (1e-7 floor) can exceed the fp32 threshold here: pd_x is a difference of O(1) terms that
    cancels to near zero on some elements, so its relative error there is large although its absolute error is
    at the fp32 rounding of the terms. The standard as tilesim.precision applies it (the floor at the tensor's
    scale) passes."""
    args = ln_inputs(rng, shape, "float32", offset=100.0)
    ours = layer_norm_grad(*args)
    gold = ref.layer_norm_grad(*args, EPS)
    check_all(ours, gold, "float32", "vs reference")
    theirs = torch_lowp(*args)
    for name, o, th, g in list(zip(NAMES, ours, theirs, gold, strict=True))[:2]:
        e_ours, e_torch = np.abs(o - g).max(), np.abs(th.astype(np.float64) - g).max()
        assert e_ours <= e_torch, f"{name}: ours {e_ours:.3g}, torch float32 {e_torch:.3g}"


def api_formula(dy, x, var, mean, gamma, h_align, pad, eps=EPS):
    """pd_x as LayerNormGrad computes it, in float64, on rows stored ``h_align`` wide: dy and gamma zero-padded,
    x padded with ``pad`` (None: the row's mean). Its pd_mean keeps the term pd_var·(1/H)·Σ −2(x − μ) over the
    stored H, which the closed form drops (0 when μ is the mean of the row)."""
    h = x.shape[-1]
    d, xx, g = (np.asarray(a, np.float64).reshape(-1, h) for a in (dy, x, gamma))
    m, v = (np.asarray(a, np.float64).reshape(-1, 1) for a in (mean, var))
    extra = h_align - h
    d = np.pad(d, ((0, 0), (0, extra)))
    g = np.pad(g.reshape(-1), (0, extra))
    xs = np.concatenate([xx, np.broadcast_to(m if pad is None else pad, (xx.shape[0], extra))], axis=1)
    r = 1.0 / np.sqrt(v + eps)
    x1, x2 = d * g, xs - m
    pd_var = (-0.5 * x1 * x2 * r ** 3).sum(1, keepdims=True)
    pd_mean = (-x1 * r).sum(1, keepdims=True) + pd_var / h * (-2.0 * x2).sum(1, keepdims=True)
    return (x1 * r + pd_var * 2.0 / h * x2 + pd_mean / h)[:, :h].reshape(x.shape)


def test_large_mean_unaligned_h_needs_the_mean_padding(rng):
    """Unaligned H: x is padded with the row's mean so that the API's Σ(x − μ) over the stored H (it sums all
    h_align columns) adds nothing for the padding. With zero padding the same formula adds 2μ per padded column
    to pd_mean's second term and fails the standard by far at μ = 100; the kernel meets it, and its transfers
    show the per-row padded copies of x."""
    args = ln_inputs(rng, (24, 17), "float32", offset=100.0)
    t = tiling.layer_norm_grad(*args)
    assert t.h_align - t.h == 7
    gold = ref.layer_norm_grad(*args, EPS)
    assert compare(api_formula(*args, t.h_align, None).astype(np.float32), gold[0]).ok
    assert not compare(api_formula(*args, t.h_align, 0.0).astype(np.float32), gold[0]).ok
    outs, rep = run(*args)
    check_all(outs, gold, "float32", "vs reference")
    # the pad bytes of dy and x (7 columns of 24 rows each), gamma per core, variance and mean per tile, and the
    # final tasks' workspace rows (one 17-column task each for pd_gamma and pd_beta)
    per_core = tiles(t)
    stats_pad = sum(2 * (align_up(n * 4, 32) - n * 4) for c in per_core for n in c)
    final_pad = 2 * t.block_dim * (align_up(t.h * 4, 32) - t.h * 4)
    assert rep.total("mte2_pad_bytes") == 2 * 24 * 7 * 4 + t.block_dim * 7 * 4 + stats_pad + final_pad
    # x row by row: per tile dy, variance, mean in one transfer each, x in one per row; gamma; the two tasks
    n_tiles = sum(len(c) for c in per_core)
    assert rep.total("mte2_transfers") == 3 * n_tiles + 24 + t.block_dim + 2


def test_large_mean_fp16_runs_and_is_finite(rng):
    """fp16 statistics cannot hold a mean of 100 to better than 1/32: the result is inherently inexact, so only
    that it runs and stays finite is checked."""
    args = ln_inputs(rng, (37, 100), "float16", offset=100.0)
    outs = layer_norm_grad(*args)
    for name, o in zip(NAMES, outs, strict=True):
        assert np.isfinite(o.astype(np.float32)).all(), name


# --------------------------------------------------------------------------------------------------------------
# checked mode, out=, inputs


CHECKED_CASES = [
    ("float32", (100, 17), {}, {}),
    ("float16", (2, 3, 1000), {}, {}),
    ("float32", (3, 4096), {}, dict(tmp="framework")),
    ("float32", (37, 64), {}, dict(is_reuse_source=True)),
    ("float16", (61, 1000), dict(core_num=4, ub_rows=3), {}),
    ("float32", (17,), {}, {}),
]


@pytest.mark.parametrize("dtype,shape,over,kw", CHECKED_CASES, ids=[f"{c[0]}-{c[1]}-{c[2]}-{c[3]}"
                                                                    for c in CHECKED_CASES])
def test_checked_mode_is_clean_and_bitwise_the_same(rng, dtype, shape, over, kw, tilesim_checks):
    args = ln_inputs(rng, shape, dtype)
    t = tiling.layer_norm_grad(*args, **kw, **over) if over else None
    fast, rep_fast = run(*args, tiling=t, **kw)
    checked, rep = run(*args, tiling=t, checks=True, **kw)
    assert rep.checks and rep_fast.checks == tilesim_checks  # pytest --tilesim-checks makes every run checked
    assert_all_bitwise(checked, fast, "checked vs fast")
    np.testing.assert_array_equal(rep.counters, rep_fast.counters)


@pytest.mark.parametrize("dtype", list(DT))
def test_out_is_written_in_place_and_inputs_untouched(rng, dtype):
    args = ln_inputs(rng, (5, 6, 33), dtype)
    before = [a.copy() for a in args]
    expect = layer_norm_grad(*args)
    for checks in (False, True):
        out = (np.full((5, 6, 33), 3, DT[dtype]), np.full(33, 3, DT[dtype]), np.full(33, 3, DT[dtype]))
        res = layer_norm_grad(*args, out=out, checks=checks)
        assert all(r is o for r, o in zip(res, out, strict=True))
        assert_all_bitwise(out, expect, "out=")
        # one of them given, the others made
        res = layer_norm_grad(*args, out=(None, out[1], None), checks=checks)
        assert res[1] is out[1] and res[0] is not out[0]
        assert_all_bitwise(res, expect, "partial out=")
    for a, b in zip(args, before, strict=True):
        assert_bitwise(a, b, "input")
    with pytest.raises(tilesim.AclnnError) as e:
        layer_norm_grad(*args, out=(np.zeros((5, 6, 33), np.float64), None, None))
    assert e.value.status == 161002 and "pd_x" in e.value.message
    with pytest.raises(tilesim.AclnnError) as e:
        layer_norm_grad(*args, out=(None, None, np.zeros(32, DT[dtype])))
    assert e.value.status == 161002 and "pd_beta" in e.value.message


def test_non_contiguous_inputs(rng):
    dy, x, var, mean, gamma = ln_inputs(rng, (40, 24), "float16")
    expect = layer_norm_grad(dy, x, var, mean, gamma)
    xf, dyf = np.asfortranarray(x), np.asfortranarray(dy)
    gs = np.repeat(gamma, 2)[::2]
    assert not xf.flags.c_contiguous and not gs.flags.c_contiguous
    assert_all_bitwise(layer_norm_grad(dyf, xf, var, mean, gs), expect, "non-contiguous inputs")


# --------------------------------------------------------------------------------------------------------------
# the run report


REPORT_CASES = [
    ("float32", (100, 64), {}, {}),
    ("float32", (100, 17), {}, {}),
    ("float16", (100, 17), {}, {}),
    ("float16", (2, 3, 1000), {}, {}),
    ("float32", (5, 200), {}, {}),
    ("float32", (33,), {}, {}),
    ("float32", (100, 17), dict(core_num=3, ub_rows=5), {}),
    ("float16", (61, 1000), dict(core_num=4, ub_rows=3), {}),
    ("float32", (61, 130), dict(core_num=4, ub_rows=3), dict(is_reuse_source=True)),
    ("float32", (37, 4096), {}, dict(tmp="framework")),
]


@pytest.mark.parametrize("dtype,shape,over,kw", REPORT_CASES, ids=[f"{c[0]}-{c[1]}-{c[2]}-{c[3]}"
                                                                   for c in REPORT_CASES])
def test_run_report_counts(rng, dtype, shape, over, kw):
    """Every GM transfer of the kernel, derived from the tiling: per core, gamma once and per tile dy, x (row by
    row when H is unaligned), variance, mean (and dy again with isReuseSource); the workspace rows cleared, two
    atomic adds of h_align fp32 per tile, pd_x out; after SyncAll, 64-column tasks round-robin over the cores
    read block_dim workspace rows and write pd_gamma or pd_beta."""
    args = ln_inputs(rng, shape, dtype)
    t = tiling.layer_norm_grad(*args, **kw, **over)
    outs, rep = run(*args, tiling=t if over else None, **kw)
    assert rep.op == "layer_norm_grad" and rep.soc == "Ascend910B1" and rep.tiling == t
    assert rep.block_dim == t.block_dim and rep.counters.shape[0] == t.block_dim
    assert rep.workspace_size == t.workspace_size == SYS_WORKSPACE + 2 * t.block_dim * t.h_align * 4
    isz, h, hp, bd = ISZ[dtype], t.h, t.h_align, t.block_dim
    reuse = kw.get("is_reuse_source", False)
    per_core = tiles(t)
    n_tasks = 2 * ceil_div(h, LANES)
    widths = [min(LANES, h - (k // 2) * LANES) for k in range(n_tasks)]
    exp = {k: np.zeros(bd, np.int64) for k in ("mte2_bytes", "mte2_transfers", "mte2_pad_bytes", "mte3_bytes",
                                                 "mte3_transfers", "atomic_bytes")}

    def blk(nbytes):
        return align_up(nbytes, 32) - nbytes

    for c in range(bd):
        e = {k: 0 for k in exp}
        e["mte2_bytes"] += h * isz  # gamma
        e["mte2_pad_bytes"] += (hp - h) * isz
        e["mte2_transfers"] += 1
        e["mte3_bytes"] += 2 * hp * 4  # the core's workspace rows cleared
        e["mte3_transfers"] += 1
        for n in per_core[c]:
            loads = 3 if reuse else 2  # dy (twice with reuse) and x
            e["mte2_bytes"] += loads * n * h * isz + 2 * n * isz
            e["mte2_pad_bytes"] += loads * n * (hp - h) * isz + 2 * blk(n * isz)
            e["mte2_transfers"] += (loads - 1) + (1 if h == hp else n) + 2
            e["atomic_bytes"] += 2 * hp * 4
            e["mte3_bytes"] += 2 * hp * 4 + n * h * isz
            e["mte3_transfers"] += 3
        for w in widths[c::bd]:
            e["mte2_bytes"] += bd * w * 4
            e["mte2_pad_bytes"] += bd * blk(w * 4)
            e["mte2_transfers"] += 1
            e["mte3_bytes"] += w * isz
            e["mte3_transfers"] += 1
        for k in exp:
            exp[k][c] = e[k]
    for k, v in exp.items():
        np.testing.assert_array_equal(rep.counter(k), v, err_msg=k)
    # the totals the brief states in closed form
    n_tiles = sum(len(c) for c in per_core)
    assert rep.total("atomic_bytes") == 2 * hp * 4 * n_tiles
    out_bytes = sum(o.nbytes for o in outs)
    assert rep.total("mte3_bytes") == out_bytes + 2 * bd * hp * 4 + rep.total("atomic_bytes")
    assert (rep.total("vec_cast") > 0) == (dtype == "float16")
    assert "layer_norm_grad" in str(rep)


# --------------------------------------------------------------------------------------------------------------
# host threads, the aclnn form


def test_bit_identical_across_host_thread_counts(rng):
    cases = [(ln_inputs(rng, (100, 17), "float32"), {}), (ln_inputs(rng, (61, 1000), "float16"), {}),
             (ln_inputs(rng, (200, 64), "float32"), dict(is_reuse_source=True))]
    before = numba.get_num_threads()
    results = {}
    try:
        for n in sorted({1, min(2, numba.config.NUMBA_NUM_THREADS)}):
            numba.set_num_threads(n)
            results[n] = [layer_norm_grad(*args, **kw) for args, kw in cases]
    finally:
        numba.set_num_threads(before)
    assert numba.get_num_threads() == before
    for outs in results.values():
        for a, b in zip(outs, results[1], strict=True):
            assert_all_bitwise(a, b, "thread counts")


@pytest.mark.parametrize("dtype,shape,kw", [("float32", (100, 17), {}), ("float16", (2, 3, 1000), {}),
                                            ("float32", (9, 4096), dict(tmp="framework", is_reuse_source=True)),
                                            ("float32", (33,), {})])
def test_aclnn_two_phase_matches_the_op(rng, dtype, shape, kw):
    args = ln_inputs(rng, shape, dtype)
    before = [a.copy() for a in args]
    out = (np.full(shape, 7, DT[dtype]), np.full(shape[-1], 7, DT[dtype]), np.full(shape[-1], 7, DT[dtype]))
    st, ws, ex = aclnn.layer_norm_grad_get_workspace_size(*args, EPS, *out, **kw)
    t = tiling.layer_norm_grad(*args, **kw)
    assert (st, ws) == (0, t.workspace_size) and ex.tiling == t and ex.op == "layer_norm_grad"
    assert aclnn.get_recent_err_msg() == ""
    assert aclnn.layer_norm_grad(np.empty(ws - 1, np.uint8), ws - 1, ex) == 161002
    assert "workspace" in aclnn.get_recent_err_msg()
    assert all(np.all(o.astype(np.float64) == 7) for o in out)  # a refused run writes nothing
    with tilesim.capture() as runs:
        assert aclnn.layer_norm_grad(np.zeros(ws, np.uint8), ws, ex) == 0
    assert len(runs) == 1 and runs[0].tiling == t
    assert aclnn.get_recent_err_msg() == ""
    assert_all_bitwise(out, layer_norm_grad(*args, **kw), "aclnn vs op")
    # the executor runs again on a dirty workspace (it clears its own rows) with the same bits
    dirty = np.full(ws, 0x5A, np.uint8)
    assert aclnn.layer_norm_grad(dirty, ws, ex) == 0
    assert_all_bitwise(out, layer_norm_grad(*args, **kw), "aclnn on a dirty workspace")
    for a, b in zip(args, before, strict=True):
        assert_bitwise(a, b, "input")

