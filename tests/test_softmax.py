"""aclnnSoftmax on the emulated AI Core, tilesim's kernel around the A2 SoftMax API on the programming model: the
tiled kernel against untiled float64 math, torch's softmax and a float32 numpy statement of the API's instruction
order (bit for bit), over both dtypes, every reduction path of the API (cols below 64, [64, 128), [128, 512), from
512, with and without a masked tail), one row and many, several SoCs, hand-made tilings (several API passes a tile,
a tail pass, the re-computed tiling of a short tile), non-finite rows; bf16 (widened, the float API, rounded once);
the [A, R, B] kernel for other axes and the split-row kernel for long rows against float64 math, torch and numpy
statements of their own instruction order; the API's tiling helpers and the op's tiling against figures worked out
by hand; what each tile issues; checked mode in both auto-sync settings; the explorer's candidates.

The statement of the order takes exp from ``tilesim.numerics.expf.exp_values`` (the emulated Exp's own values) and the
half rounding from ``tilesim.numerics.b16.narrow`` with CAST_ROUND (the API's FLOAT2HALF_ROUND_MODE on v220).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch
from bitwise import assert_bitwise, bits
from tilesim.kernels import reference as ref
from tilesim.kernels import softmax
from tilesim.kernels.op_specs import OPS
from tilesim.kernels.softmax import kernel_tiling_func
from tilesim.kernels.softmax import run as run_kernel
from tilesim.tiling.common import align_up
from tilesim.tiling.softmax import (
    get_soft_max_max_tmp_size,
    get_soft_max_min_tmp_size,
    soft_max_tiling_func,
    ub_plan,
)
from tilesim.tiling.softmax import softmax as make_tiling

import tilesim
from tilesim.numerics.b16 import CAST_RINT, CAST_ROUND, narrow
from tilesim.numerics.expf import exp_values
from tilesim.precision import Expected, compare, judge

DT = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
DTYPES = ["float32", "float16"]
SOC = tilesim.get_soc("Ascend910B1")

# --------------------------------------------------------------------------------------------------------------
# helpers


def make_x(rng, shape, dtype="float32", scale=3.0):
    return (rng.standard_normal(shape) * scale).astype(DT[dtype])


def _tree(v):
    """Adjacent pairs, level by level (WholeReduceSum over 64 lanes = BlockReduceSum 64 → 8 → 1)."""
    while v.shape[1] > 1:
        v = v[:, 0::2] + v[:, 1::2]
    return v[:, 0]


def api_row_sums(e):
    """Each row's sum of e [rows, cols] (float32) in the order of NewReduceSumLastNDImpl: cols < 64 one masked
    WholeReduceSum (masked lanes +0); else a fold into 64 lanes: [64, 128) the first block; [128, 512) block 0 +
    block 1, then each further block added; from 512 the 8-lane block sums of the first 512, then each further block;
    the tail past the last whole block added to the first lanes; then the 64-lane tree."""
    k = e.shape[1]
    whole, tail = k // 64, k % 64
    if k < 64:
        acc = np.zeros((e.shape[0], 64), np.float32)
        acc[:, :k] = e
        return _tree(acc)
    if k >= 512:
        acc = np.stack([_tree(e[:, 8 * q:8 * q + 8]) for q in range(64)], axis=1)
        for i in range(8, whole):
            acc = e[:, 64 * i:64 * i + 64] + acc
    elif k >= 128:
        acc = e[:, :64] + e[:, 64:128]
        for i in range(2, whole):
            acc = acc + e[:, 64 * i:64 * i + 64]
    else:
        acc = e[:, :64].copy()
    if tail:
        acc[:, :tail] = acc[:, :tail] + e[:, 64 * whole:64 * whole + tail]
    return _tree(acc)


def emulate(x, dim=-1):
    """The API in float32 numpy, instruction by instruction along the last axis: m = max (NaN wins), e =
    Exp(x − m), y = e / (the API's row sum); half widened exactly and y rounded with CAST_ROUND; bfloat16 widened
    exactly, the float API run on it and y rounded once with CAST_RINT."""
    k = x.shape[dim] if x.ndim else 1
    x2 = np.ascontiguousarray(x).astype(np.float32).reshape(-1, k)
    with np.errstate(invalid="ignore", over="ignore"):
        e = exp_values(np.ascontiguousarray(x2 - np.max(x2, axis=1, keepdims=True)))
        y = e / api_row_sums(e)[:, None]
    if x.dtype == np.float16:
        return narrow(y, "float16", CAST_ROUND).view(np.float16).reshape(x.shape)
    if x.dtype == ml_dtypes.bfloat16:
        return narrow(y, "bfloat16", CAST_RINT).view(ml_dtypes.bfloat16).reshape(x.shape)
    return y.reshape(x.shape)


def torch_softmax(x, dim=-1):
    """float64 torch.softmax."""
    return torch.softmax(torch.from_numpy(np.asarray(x, np.float64)), dim).numpy()


def assert_precise(out, golden, what):
    p = compare(out, golden)
    assert p.ok, f"{what}: {p}"


def run(x, dim=-1, **kw):
    """The op under capture: (output, its single RunReport)."""
    with tilesim.capture() as runs:
        out = softmax(x, dim, **kw)
    assert len(runs) == 1
    return out, runs[0]


def check_all(x, dim=-1, **kw):
    out, rep = run(x, dim, **kw)
    assert out.dtype == x.dtype and out.shape == x.shape
    assert_precise(out, ref.softmax(x, dim), "vs reference")
    assert_precise(out, torch_softmax(x, dim), "vs torch")
    assert_bitwise(out, emulate(x, dim), "vs the API's instruction order")
    return out, rep


# --------------------------------------------------------------------------------------------------------------
# numerics

COLS = [1, 7, 31, 33, 64, 100, 128, 200, 511, 512, 513, 1000, 2048, 4095]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cols", COLS)
@pytest.mark.parametrize("rows", [1, 37])
def test_against_untiled_math_torch_and_instruction_order(rng, dtype, cols, rows):
    x = make_x(rng, (rows, cols), dtype)
    _, rep = check_all(x)
    t = make_tiling(x)
    assert rep.tiling == t and rep.op == "softmax" and rep.block_dim == t.block_dim == min(rows, 48)
    assert (t.rows, t.cols, t.cols_align) == (rows, cols, align_up(cols, 32 // x.itemsize))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,dim", [((4, 5, 6), -1), ((4, 5, 6), 2), ((4, 6, 1), 1), ((2, 6, 1, 1), -3),
                                       ((3, 1, 5), 1), ((70,), 0), ((), 0), ((), -1), ((1, 2, 1, 2, 1, 2, 1, 9), 7)])
def test_axes_whose_elements_are_contiguous(rng, dtype, shape, dim):
    """The last axis, an axis followed only by axes of size 1, an axis of size 1 (each element its own row: 1, or
    NaN for a non-finite one), a 1-d and a 0-d x: the kernel on the reshaped rows."""
    x = make_x(rng, shape, dtype)
    out, _ = run(x, dim)
    assert out.shape == shape and out.dtype == x.dtype
    golden = ref.softmax(x, dim)
    assert_precise(out, golden, "vs reference")
    assert_precise(out, torch_softmax(x, dim), "vs torch")
    d = dim % max(len(shape), 1)
    rows_view = x.reshape(-1, shape[d] if shape else 1)
    assert_bitwise(out, emulate(rows_view).reshape(shape), "vs the API's order on the reshaped rows")


@pytest.mark.parametrize("shape", [(221, 2), (20, 100), (7, 4001)])
def test_bf16_is_computed_in_fp32_and_rounded_once(rng, shape):
    """bfloat16 (the SoftMax API takes half and float): widened exactly, the float API's steps, y rounded once with
    CAST_RINT, in checked mode too; the widened tile is a TBuf of the UB plan and the API's tiling is float's."""
    x = make_x(rng, shape, "bfloat16")
    out, rep = check_all(x)
    t = rep.tiling
    assert t.dtype == "bfloat16" and t.tiling_key == 27 and t.cols_align % 16 == 0 and t.reduce_k == 8
    assert rep.ub_plan.names() == ["in_queue_x", "out_queue_y", "cast_buf", "tmp_buf"]
    np.testing.assert_array_equal(rep.counter("vec_cast") > 0, True)
    y = np.full(shape, 7, x.dtype)
    run_kernel(t, SOC, x, y, None, True, auto_sync=False)
    assert_bitwise(y, out, "checked, auto_sync off")


def _fold(v):
    """fold_rows over axis 0 of v [n, ...] (float32): rows 0 .. h-1 plus rows h .. 2h-1, an odd last row added
    to the first, then halved in place (rows 0 .. h-1 plus rows n-h .. n-1) until one row is left."""
    n = v.shape[0]
    if n == 1:
        return v[0]
    h = n // 2
    w = v[:h] + v[h:2 * h]
    if n % 2:
        w[0] = w[0] + v[n - 1]
    n = h
    while n > 1:
        h = n // 2
        w[:h] = w[:h] + w[n - h:n]
        n -= h
    return w[0]


def emulate_arb(x, dim, tile_r):
    """The [A, R, B] kernel in float32 numpy: m = max over R (NaN wins; order-free), e = Exp(x − m), the sum
    folded over each load of tile_r rows and the loads added in order, y = e / sum; b16 widened exactly and y
    rounded once with CAST_RINT."""
    x3 = np.moveaxis(np.asarray(x).astype(np.float32), dim, 0)
    with np.errstate(invalid="ignore", over="ignore"):
        e = exp_values(np.ascontiguousarray(x3 - np.max(x3, axis=0)))
        s = _fold(e[:tile_r].copy())
        for r0 in range(tile_r, e.shape[0], tile_r):
            s = s + _fold(e[r0:r0 + tile_r].copy())
        y = np.moveaxis(e / s, 0, dim)
    if x.dtype == np.float32:
        return y
    return narrow(np.ascontiguousarray(y), x.dtype.name, CAST_RINT).view(x.dtype).reshape(x.shape)


# (shape, dim, dtype, overrides, what): ops-nn's example and the op_api UT's [2, 3] dim 0, ST shapes, B cut into
# chunks with a shorter last one, R in several loads (the max, sum and normalise passes)
ARB = [
    ((4, 2), 0, "float32", {}, "ops-nn's example"),
    ((2, 3), 0, "float16", {}, "the op_api UT"),
    ((3, 5, 122), -2, "float32", {}, "B in chunks, the last shorter"),
    ((20, 1024), 0, "bfloat16", {}, "ST bf16, B in chunks"),
    ((9, 301, 5), 1, "float32", dict(tile_rows=37, core_num=2), "R in 9 loads"),
    ((2, 300, 40), -2, "bfloat16", dict(tile_rows=64, tile_b=16), "R in 5 loads, B in 3 chunks"),
]


@pytest.mark.parametrize("shape,dim,dtype,kw,what", ARB, ids=[c[4] for c in ARB])
def test_an_axis_that_is_not_the_last(rng, shape, dim, dtype, kw, what):
    """The [A, R, B] kernel: against float64 math and torch, bit for bit against its instruction order, and (with
    overrides) split as asked; the host's UB plan is what the kernel placed."""
    x = make_x(rng, shape, dtype)
    t = make_tiling(x, dim, **kw)
    out, rep = run(x, dim, tiling=t)
    assert out.dtype == x.dtype and out.shape == shape and rep.tiling == t
    assert_precise(out, ref.softmax(x, dim), "vs reference")
    assert_precise(out, torch_softmax(x, dim), "vs torch")
    assert_bitwise(out, emulate_arb(x, dim, t.tile_r), "vs the [A, R, B] kernel's order")
    d = dim % len(shape)
    assert (t.a, t.r, t.b) == (int(np.prod(shape[:d])), shape[d], int(np.prod(shape[d + 1:])))
    assert [(b.name, b.nbytes, b.buffer_num) for b in rep.ub_plan.buffers] == \
        [(b.name, b.nbytes, b.buffer_num) for b in ub_plan(t, SOC).buffers]
    if kw:
        assert (t.r_chunks > 1) == ("tile_rows" in kw) and t != make_tiling(x, dim)


def test_arb_checked_clean_with_and_without_auto_sync(rng):
    """The [A, R, B] kernel's PipeBarriers and queues order every dependence: a split R with b16 casts and a full
    load of fp32 run checked clean with BiSheng's auto-sync off, to the fast bits."""
    for shape, dim, dtype, kw in (((5, 301, 40), 1, "bfloat16", dict(tile_rows=37, core_num=2)),
                                  ((63, 7, 6), 0, "float32", {})):
        x = make_x(rng, shape, dtype)
        t = make_tiling(x, dim, **kw)
        fast = softmax(x, dim, tiling=t)
        for auto_sync in (True, False):
            y = np.full(shape, 7, x.dtype)
            assert run_kernel(t, SOC, x, y, None, True, auto_sync=auto_sync).checks
            assert_bitwise(y, fast, f"checked, auto_sync={auto_sync}")


def emulate_long(x, tile_cols):
    """The split-row kernel in float32 numpy, row by row: m = max, e = Exp(x − m), each load's sum folded as
    fold_rows folds its 64-float rows with its tail added to the first lanes, the loads added into a running
    64-float row (the first copied; a row's only load shorter than 64 added to zeros), WholeReduceSum's tree
    over the 64 lanes, y = e / sum; b16 widened exactly and y rounded once with CAST_RINT."""
    x2 = np.asarray(x).astype(np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        e = exp_values(np.ascontiguousarray(x2 - np.max(x2, axis=1, keepdims=True)))
    acc = np.zeros((e.shape[0], 64), np.float32)
    for k, c0 in enumerate(range(0, e.shape[1], tile_cols)):
        c = e[:, c0:c0 + tile_cols]
        full, tail = divmod(c.shape[1], 64)
        if full:
            part = _fold(np.moveaxis(c[:, :64 * full].reshape(-1, full, 64), 1, 0).copy())
            part[:, :tail] = part[:, :tail] + c[:, 64 * full:]
            acc = part.copy() if k == 0 else acc + part
        else:
            acc[:, :tail] = acc[:, :tail] + c
    y = e / _tree(acc)[:, None]
    if x.dtype == np.float32:
        return y
    return narrow(y, x.dtype.name, CAST_RINT).view(x.dtype).reshape(x.shape)


@pytest.mark.parametrize("shape,dtype,tile_cols", [((7, 100003), "float32", None), ((2, 16896), "float16", None),
                                                   ((3, 1000), "float32", 256), ((3, 1000), "bfloat16", 128),
                                                   ((2, 40), "float32", 64)])
def test_rows_the_api_cannot_take_in_one_pass(rng, shape, dtype, tile_cols):
    """The split-row kernel: rows past the API's uint8 fold or the UB (the official tiling), and shorter rows in
    loads of ``tile_cols`` (a tail in each load, a load shorter than 64, one row of one load): a pass for the max,
    one for the sum, one to normalise; against float64 math, torch and its instruction order."""
    x = make_x(rng, shape, dtype)
    t = make_tiling(x, tile_cols=tile_cols)
    out, rep = run(x, tiling=t)
    assert type(t).__name__ == "SoftmaxLongTiling" and rep.tiling == t and t.c_chunks == -(-shape[1] // t.tile_cols)
    assert t.c_chunks > 1 or shape[1] < 64
    assert_precise(out, ref.softmax(x), "vs reference")
    assert_precise(out, torch_softmax(x), "vs torch")
    assert_bitwise(out, emulate_long(x, t.tile_cols), "vs the split-row kernel's order")
    assert rep.ub_plan.used <= SOC.ub_size and rep.total("mte2_bytes") == 3 * x.nbytes


def test_split_row_checked_clean_with_and_without_auto_sync(rng):
    """The split-row kernel's syncs (PipeBarriers, V_S before the scalar reads the max and sum, S_V after) order
    every dependence with BiSheng's auto-sync off."""
    x = make_x(rng, (3, 1000), "bfloat16")
    t = make_tiling(x, tile_cols=128)
    fast = softmax(x, tiling=t)
    for auto_sync in (True, False):
        y = np.full(x.shape, 7, x.dtype)
        assert run_kernel(t, SOC, x, y, None, True, auto_sync=auto_sync).checks
        assert_bitwise(y, fast, f"checked, auto_sync={auto_sync}")


def test_a_strided_x_is_made_contiguous_first(rng):
    """The op_api UT's strided [5, 4] view over [4, 5] storage, along each axis: the values of the view, as aclnn's
    Contiguous step copies them before the kernel."""
    base = make_x(rng, (4, 5))
    x = base.T
    assert not x.flags.c_contiguous
    for dim in (0, 1, -1):
        assert_bitwise(softmax(x, dim), softmax(np.ascontiguousarray(x), dim), f"dim {dim}")
        assert_precise(softmax(x, dim), ref.softmax(x, dim), f"dim {dim}")


def test_the_instruction_order_statement_can_fail(rng):
    """The bitwise comparisons can fail: a sequential row sum (numpy's pairwise sum, or a plain loop) differs from
    the API's folds somewhere in a long row."""
    x = make_x(rng, (37, 1000))
    out = softmax(x)
    x32 = x.astype(np.float32)
    e = exp_values(np.ascontiguousarray(x32 - x32.max(axis=1, keepdims=True)))
    seq = np.zeros(37, np.float32)
    for j in range(1000):
        seq += e[:, j]
    assert np.any(bits(out) != bits(e / seq[:, None]))
    assert_bitwise(out, emulate(x))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cols", [5, 100, 700])
def test_non_finite_rows(rng, dtype, cols):
    """A row of all -inf, a row with one +inf, one with a NaN: NaN throughout (the max is -inf, inf or NaN);
    -inf beside finite values gives 0 there; huge and equal logits are exact. torch agrees on every row."""
    big = {"float32": 3.0e38, "float16": 65504.0}[dtype]
    x = make_x(rng, (8, cols), dtype)
    x[0] = -np.inf
    x[1, cols // 2] = np.inf
    x[2, cols - 1] = np.nan
    x[3, ::2] = -np.inf
    x[4] = big
    x[5, 0], x[5, 1:] = big, -big
    x[6] = 0.0
    out = softmax(x)
    assert_bitwise(out, emulate(x), "vs the API's instruction order")
    y = out.astype(np.float64)
    assert np.isnan(y[:3]).all()
    assert (y[3, ::2] == 0).all() and (y[3, 1::2] >= 0).all() and abs(y[3].sum() - 1) < 0.05
    np.testing.assert_allclose(y[4], 1.0 / cols, rtol=1e-3)
    assert y[5, 0] == 1 and (y[5, 1:] == 0).all()
    t = torch_softmax(x)
    np.testing.assert_array_equal(np.isnan(y), np.isnan(t))
    fin = ~np.isnan(t)
    assert_precise(np.where(fin, y, 0).astype(x.dtype), np.where(fin, t, 0), "finite rows vs torch")
    assert_precise(out[3:], ref.softmax(x[3:]), "finite rows vs reference")


# --------------------------------------------------------------------------------------------------------------
# the tiling


def test_api_host_helpers_match_hand_worked_figures():
    """SoftMaxTilingFunc and the tmp sizes (A2): (32/sizeof + srcK + 64) floats a row; baseM rounded to 8 below
    srcM; AdjustToBasicBlockBaseM for srcM % 8 = 0 and srcK % 64 = 0 halves 64 rows of 1024 down to 8."""
    assert get_soft_max_max_tmp_size((37, 112), 2) == 37 * (16 + 112 + 64) * 4 == 28416
    assert get_soft_max_min_tmp_size((37, 112), 2) == 768 and get_soft_max_min_tmp_size((5, 64), 4) == 544
    t = soft_max_tiling_func((64, 1024), 4, 64 * 1096 * 4)
    assert (t.reduce_m, t.split_m, t.range_m, t.tail_m, t.split_size, t.reduce_k, t.reduce_size) == \
        (8, 8, 8, 0, 8192, 8, 64)
    assert (t.src_m, t.src_k, t.src_size, t.out_max_m, t.out_max_k, t.out_max_size) == (64, 1024, 65536, 64, 8, 512)
    t = soft_max_tiling_func((37, 112), 2, 1000)  # 250 floats: one row of 16 + 112 + 64 a pass
    assert (t.reduce_m, t.range_m, t.tail_m, t.reduce_k, t.reduce_size) == (1, 37, 0, 16, 16)
    t = soft_max_tiling_func((30, 64), 4, 6528)  # 12 rows fit: 8 (a multiple of 8), 3 passes and 6 rows
    assert (t.reduce_m, t.range_m, t.tail_m, t.tail_split_size, t.tail_reduce_size) == (8, 3, 6, 384, 48)
    t = soft_max_tiling_func((20, 200), 4, 21760)  # every row at once; 20 is not a multiple of 8: no adjustment
    assert (t.reduce_m, t.range_m, t.tail_m) == (20, 1, 0)


def test_api_kernel_tiling_func_matches_hand_worked_figures():
    """The kernel-side SoftMaxTilingFunc (a short tile): 8-float reduce rows even for half, float rows need only
    8 + 64 floats of tmp, a multiple of 8 below the tile's rows."""
    f = kernel_tiling_func.py_func
    t = f(1000, 5, 112, 5, 2)  # 1000 // (8 + 112 + 64) = 5
    assert (t.reduce_m, t.range_m, t.tail_m, t.reduce_k, t.reduce_size, t.split_size) == (5, 1, 0, 8, 40, 560)
    t = f(1000, 20, 104, 20, 4)  # 1000 // 72 = 13: 8
    assert (t.reduce_m, t.range_m, t.tail_m, t.tail_split_size) == (8, 2, 4, 416)


# Worked by hand on Ascend910B1 (48 cores, 196608 B; a row costs 2·buffer_num·cols_align·sizeof + the API's
# (32/sizeof + cols_align + 64)·4 B):
# - fp32 [4096, 1024]: 86 rows a core; 15 rows fit single-buffered, fewer than 86: double buffers, 9 rows.
# - fp16 [37, 100]: a row a core, single-buffered; the API's 16-float reduce rows.
# - fp32 [4096, 64]: 186 rows fit single-buffered: the core's 86 in one tile.
# - fp16 [768, 1024]: 16 rows a core fit (23) single-buffered, but the API's tiling takes 16 x 1024 in two
#   passes (AdjustToBasicBlockBaseM: 16 · 1024 ≥ 16384): the tile is cut to its 8, double-buffered.
HAND = [
    ("float32", (4096, 1024), dict(block_dim=48, former_num=16, block_rows=85, tile_rows=9, buffer_num=2,
                                   tmp_size=9 * 1096 * 4, reduce_m=9, range_m=1, reduce_k=8, tiling_key=0)),
    ("float16", (37, 100), dict(block_dim=37, former_num=0, block_rows=1, tile_rows=1, buffer_num=1,
                                tmp_size=768, cols_align=112, reduce_m=1, range_m=1, reduce_k=16, tiling_key=1)),
    ("float32", (4096, 64), dict(block_dim=48, tile_rows=86, buffer_num=1, tmp_size=86 * 136 * 4, reduce_m=86)),
    ("float16", (768, 1024), dict(block_dim=48, block_rows=16, tile_rows=8, buffer_num=2, tmp_size=8 * 1104 * 4,
                                  reduce_m=8, range_m=1)),
]


@pytest.mark.parametrize("dtype,shape,want", HAND, ids=[f"{h[0]}-{h[1]}" for h in HAND])
def test_official_tiling_matches_hand_worked_figures(dtype, shape, want):
    t = make_tiling(np.empty(shape, DT[dtype]))
    assert {k: getattr(t, k) for k in want} == want
    assert t.workspace_size == 16 * 1024 * 1024
    assert t.softmax_tiling == soft_max_tiling_func((t.tile_rows, t.cols_align), t.itemsize, t.tmp_size)


@pytest.mark.parametrize("soc", ["Ascend910B1", "Ascend910B3", "Ascend910_9391"])
@pytest.mark.parametrize("dtype,shape", [("float32", (300, 1024)), ("float16", (7, 3, 4095)), ("float16", (3000, 64)),
                                         ("float32", (2, 16000)), ("float16", (5, 16895)), ("float32", (100, 300))])
def test_rows_covered_once_and_the_plan_fits(soc, dtype, shape):
    spec = tilesim.get_soc(soc)
    t = make_tiling(np.empty(shape, DT[dtype]), soc=spec)
    assert t.block_dim == min(t.rows, spec.core_num_aiv)
    covered = np.zeros(t.rows, np.int8)
    for c in range(t.block_dim):
        first, n = t.rows_of_core(c)
        for r0 in range(first, first + n, t.tile_rows):
            covered[r0:min(r0 + t.tile_rows, first + n)] += 1
    assert (covered == 1).all()
    assert ub_plan(t, spec).check().used <= spec.ub_size
    assert t.range_m == 1 and t.tail_m == 0  # the official tile is one pass of the API
    assert t.tile_rows <= (255 if 128 <= t.cols < 512 else 2040)


@pytest.mark.parametrize("dtype,shape", [("float32", (480, 1024)), ("float16", (37, 100)), ("float32", (4096, 64))])
def test_the_kernel_places_the_host_plan(rng, dtype, shape):
    """What the kernel's InitBuffer calls placed is the host's ub_plan, buffer for buffer, offsets included."""
    _, rep = run(make_x(rng, shape, dtype))
    host = ub_plan(rep.tiling, SOC)
    assert host.names() == ["in_queue_x", "out_queue_y", "tmp_buf"]
    assert [(b.name, b.nbytes, b.buffer_num, b.offset) for b in rep.ub_plan.buffers] == \
        [(b.name, b.nbytes, b.buffer_num, b.offset) for b in host.buffers]


# --------------------------------------------------------------------------------------------------------------
# what each tile issues


@pytest.mark.parametrize("dtype", DTYPES)
def test_each_tile_issues_the_apis_syncs_and_instructions(rng, dtype):
    """[480, 1024]: ten rows a core, one tile, one pass of the API. 15 PipeBarrier<PIPE_V> (SoftMaxNDImpl's, 5 in
    each reduction of a row from 512 elements with several rows: the fold, the 64 → 8 → 1, the broadcast's two, and
    one after each of max, Sub, Exp and sum), half 17 (one after each Cast but the last); 4 SetFlags (EnQue and
    FreeTensor of x and y); Exp once over the pass, half's two Casts over the same bytes; the bytes of x in and of y
    out."""
    x = make_x(rng, (480, 1024), dtype)
    _, rep = run(x)
    t = rep.tiling
    assert t.tile_rows == 10 and t.block_dim == 48
    np.testing.assert_array_equal(rep.counter("pipe_barriers"), 15 if dtype == "float32" else 17)
    np.testing.assert_array_equal(rep.counter("set_flags"), 4)
    np.testing.assert_array_equal(rep.counter("vec_unary"), 10 * 1024 * 4 // 256)  # 256 B repeats
    np.testing.assert_array_equal(rep.counter("vec_cast"), 2 * 10 * 1024 * 4 // 256 if dtype == "float16" else 0)
    assert (rep.counter("vec_reduce") > 0).all() and (rep.counter("vec_div") > 0).all()
    assert rep.total("mte2_bytes") == x.nbytes and rep.total("mte3_bytes") == x.nbytes
    assert rep.total("mte2_transfers") == rep.total("mte3_transfers") == 48


# --------------------------------------------------------------------------------------------------------------
# SoCs, hand-made tilings


@pytest.mark.parametrize("dtype,cols", [("float32", 1024), ("float16", 100), ("float32", 33)])
def test_910_socs_agree_bitwise(rng, dtype, cols):
    x = make_x(rng, (600, cols), dtype)
    outs, dims = [], []
    for soc in ("Ascend910B1", "Ascend910B3", "Ascend910_9391"):
        out, rep = run(x, soc=soc)
        assert rep.soc == soc and rep.tiling == make_tiling(x, soc=soc)
        outs.append(out)
        dims.append(rep.block_dim)
    assert dims == [48, 40, 48]
    assert_bitwise(outs[0], emulate(x))
    for o in outs[1:]:
        assert_bitwise(o, outs[0], "across 910 SoCs")


def _min_tmp(x, rows=1):
    ca = align_up(x.shape[-1], 32 // x.itemsize)
    return rows * get_soft_max_min_tmp_size((1, ca), x.itemsize)


USER_CASES = [  # (dtype, shape, overrides, what they exercise)
    ("float32", (37, 1000), dict(core_num=1), "one core: 9-row tiles, double-buffered, a 1-row tile re-tiled"),
    ("float32", (37, 1000), dict(core_num=3, tile_rows=5, buffer_num=1), "several tiles a core, one buffer"),
    ("float32", (37, 1000), dict(core_num=1, tile_rows=13, buffer_num=1, tmp_rows=3), "4 passes and a tail pass"),
    ("float16", (37, 100), dict(core_num=2, tile_rows=16, tmp_rows=1), "a pass a row: 16-float reduce rows, one row"),
    ("float16", (37, 100), dict(core_num=1, tile_rows=30, tmp_rows=9), "passes of 8, 8, 8, 6; a 7-row tile re-tiled "
                                                                        "by the kernel (8-float reduce rows)"),
    ("float16", (64, 1024), dict(core_num=4, tile_rows=16, buffer_num=1), "AdjustToBasicBlockBaseM: 2 passes of 8"),
    ("float32", (50, 31), dict(core_num=5, tile_rows=4, tmp_rows=2), "cols < 64 over several passes"),
    ("float32", (64, 300), dict(core_num=2, tile_rows=24, tmp_rows=9), "cols in [128, 512) over several passes"),
]


@pytest.mark.parametrize("dtype,shape,kw,what", USER_CASES, ids=[c[3] for c in USER_CASES])
def test_hand_made_tilings_give_the_same_bits(rng, dtype, shape, kw, what):
    """A row's result does not depend on how the rows are split over cores, tiles and the API's passes."""
    x = make_x(rng, shape, dtype)
    want = softmax(x)
    assert_bitwise(want, emulate(x))
    kw = dict(kw)
    if "tmp_rows" in kw:
        kw["tmp_size"] = _min_tmp(x, kw.pop("tmp_rows"))
    t = make_tiling(x, **kw)
    assert t != make_tiling(x)
    out, rep = run(x, tiling=t)
    assert rep.tiling == t and rep.block_dim == t.block_dim
    assert_bitwise(out, want, f"tiling {kw}")


def test_out_is_written_and_returned(rng):
    x = make_x(rng, (10, 40), "float16")
    out = np.full((10, 40), 7, x.dtype)
    assert softmax(x, out=out) is out
    assert_bitwise(out, emulate(x))


def test_non_contiguous_x_is_read_as_its_values(rng):
    base = make_x(rng, (12, 64))
    x = base[::2]
    assert not x.flags.c_contiguous
    assert_bitwise(softmax(x), emulate(np.ascontiguousarray(x)))
    xt = make_x(rng, (24, 10)).T  # the last axis of x.T is strided in memory: read as its values
    assert_bitwise(softmax(xt), emulate(np.ascontiguousarray(xt)))


def test_empty_x_gives_an_empty_y_without_a_launch():
    for shape, dim in (((0, 64), -1), ((4, 0), -1), ((4, 0, 8), 0)):
        x = np.empty(shape, np.float16)
        with tilesim.capture() as runs:
            y = softmax(x, dim)
        assert runs == [] and y.dtype == x.dtype and y.shape == shape


# --------------------------------------------------------------------------------------------------------------
# checked mode: BiSheng's auto-sync on and off

CLEAN = [  # every row-length path, one and several rows a pass, strided Brcbs and per-column Subs included
    ("float32", (50, 31), {}), ("float32", (2, 1000), {}), ("float16", (20, 100), {}), ("float16", (96, 2048), {}),
    ("float32", (384, 128), {}), ("float32", (96, 2048), {}), ("float32", (2, 4095), {}), ("float32", (40, 256), {}),
    ("float32", (5, 192), {}), ("float16", (3, 513), {}), ("float16", (17, 3000), {}),
    ("float16", (16, 1024), dict(core_num=1, tmp_rows=1)),
    ("float32", (64, 1024), dict(core_num=1, tile_rows=16, buffer_num=1, tmp_rows=3)),
]


@pytest.mark.parametrize("dtype,shape,kw", CLEAN, ids=[f"{c[0]}-{c[1]}-{len(c[2])}" for c in CLEAN])
def test_checked_clean_with_and_without_auto_sync(rng, dtype, shape, kw):
    """The API writes every V-V barrier a dependence needs and the kernel's queues order the other pipes, so the
    launch is clean with the compiler's auto-sync off as well as on (several API passes a tile included);
    checked results are the fast bits."""
    x = make_x(rng, shape, dtype)
    fast = softmax(x)
    kw = dict(kw)
    if "tmp_rows" in kw:
        kw["tmp_size"] = _min_tmp(x, kw.pop("tmp_rows"))
    t = make_tiling(x, **kw)
    for auto_sync in (True, False):
        y = np.full(fast.shape, 7, x.dtype)
        rep = run_kernel(t, SOC, x, y, None, True, auto_sync=auto_sync)
        assert rep.checks
        assert_bitwise(y, fast, f"checked, auto_sync={auto_sync}")


# --------------------------------------------------------------------------------------------------------------
# the explorer's view


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_every_candidate_passes_within_its_rounding_bound(dtype):
    """kernels.op_specs' softmax spec at a small shape with tails: the official tiling first and once, params uniform,
    several core counts and tiles, every candidate within the standard and the op's rounding bound."""
    spec = OPS["softmax"]
    inputs = spec.make_inputs((50, 100), dtype, 0)
    cands = spec.candidates(inputs, SOC)
    assert cands[0].official and sum(c.official for c in cands) == 1
    assert len({c.tiling for c in cands}) == len(cands)
    assert len({c.params["block_dim"] for c in cands}) >= 2 and len({c.params["tile"] for c in cands}) >= 2
    assert all(set(c.params) == {"block_dim", "buffer_num", "tile"} for c in cands)
    (golden,), (bound,) = spec.reference(inputs), spec.bounds(inputs)
    for c in cands:
        (out,) = spec.run(inputs, c.tiling, SOC)
        j = judge(out, Expected.of(golden, np.dtype(out.dtype).name, bound))
        assert j.verdict == "pass" and j.excess < 1, f"{c.params}: {j}"
    big = spec.candidates(spec.make_inputs(spec.default_shape, dtype, 0), SOC)
    assert 5 <= len(big) <= 90


@pytest.mark.parametrize("shape,dtype,dim,kind", [((6, 50, 10), "bf16", 1, "SoftmaxArbTiling"),
                                                  ((2, 17000), "fp16", -1, "SoftmaxLongTiling")])
def test_the_other_kernels_candidates_pass_within_their_rounding_bound(shape, dtype, dim, kind):
    """The explorer sweeps the [A, R, B] kernel's R rows a load and the split-row kernel's elements a load, over
    core counts and buffer counts; every candidate within the standard and the op's rounding bound."""
    spec = OPS["softmax"]
    inputs = spec.make_inputs(shape, dtype, 0, dim=dim)
    cands = spec.candidates(inputs, SOC)
    assert cands[0].official and type(cands[0].tiling).__name__ == kind
    assert len({c.params["tile"] for c in cands}) >= 3 and len({c.params["block_dim"] for c in cands}) >= 2
    (golden,), (bound,) = spec.reference(inputs), spec.bounds(inputs)
    for c in cands:
        assert type(c.tiling).__name__ == kind
        (out,) = spec.run(inputs, c.tiling, SOC)
        j = judge(out, Expected.of(golden, np.dtype(out.dtype).name, bound))
        assert j.verdict == "pass" and j.excess < 1, f"{c.params}: {j}"
