"""aclnnRmsNorm on the emulated AI Core, kernels on tilesim's programming model: every A2 mode of ops-nn (NORMAL,
SPLIT_D, MERGE_N, SINGLE_ROW) against untiled float64 math, torch's rms_norm and a float32 numpy statement of the
kernels' instruction order (bit for bit), over fp32, fp16, bf16 and the mixed fp32-gamma cases, ranks, SoCs,
hand-made tilings and special values; the tiling against figures worked out by hand from ``rms_norm_tiling.cpp``;
the plan each kernel places; the syncs a row or pass issues; checked mode in both auto-sync settings; the
explorer's candidates.

The statement of the instruction order (:func:`emulate`): ReduceSumHalfInterval folds the tail past the largest
power of two onto the head, halves to 64 lanes, then WholeReduceSum adds adjacent pairs level by level (masked
lanes +0); ReduceSumMultiN adds each row's 64-lane slices into a zeroed row of 64 (the tail lanes masked), then
the same tree; SPLIT_D adds its tiles' sums in tile order on the scalar unit; rstd = 1 / sqrt(sum · (1/D) + ε) in
float32, step by step; y = (x · rstd) · gamma in float32, rounded to nearest even.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch
from bitwise import assert_bitwise
from tilesim.kernels import reference as ref
from tilesim.kernels import rms_norm
from tilesim.kernels.op_specs import OPS
from tilesim.kernels.rms_norm import run as run_kernel
from tilesim.tiling.common import replace
from tilesim.tiling.rms_norm import (
    MODE_MERGE_N,
    MODE_NORMAL,
    MODE_SINGLE_ROW,
    MODE_SPLIT_D,
    _split_d_ub_factor,
    ub_plan,
)
from tilesim.tiling.rms_norm import rms_norm as make_tiling

import tilesim
from tilesim.precision import Expected, compare, judge

F32, F16, BF16 = np.float32, np.float16, ml_dtypes.bfloat16
B1, B93 = "Ascend910B1", "Ascend910_9391"
EPS = 1e-6

# --------------------------------------------------------------------------------------------------------------
# helpers


def make(rng, shape, n_gamma=1, dtype=F32, gamma_dtype=F32, scale=2.0):
    x = rng.uniform(-scale, scale, shape).astype(dtype)
    gamma = rng.uniform(-1.5, 1.5, shape[len(shape) - n_gamma:]).astype(gamma_dtype)
    return x, gamma


def _tree64(lanes):
    """WholeReduceSum of up to 64 lanes a row: adjacent pairs, level by level, in float32 (absent lanes +0)."""
    a = np.zeros((lanes.shape[0], 64), np.float32)
    a[:, :lanes.shape[1]] = lanes
    while a.shape[1] > 1:
        a = a[:, 0::2] + a[:, 1::2]
    return a[:, 0]


def _half_interval(v):
    """ReduceSumHalfInterval of each row of ``v``."""
    v = v.copy()
    n = v.shape[1]
    if n > 64:
        body = 1 << (n.bit_length() - 1)
        tail = n - body
        if tail:
            v[:, :tail] = v[:, :tail] + v[:, body:body + tail]
        while body > 64:
            body //= 2
            v[:, :body] = v[:, :body] + v[:, body:2 * body]
        v = v[:, :64]
    return _tree64(v)


def _multi_n(v):
    """ReduceSumMultiN of each row of ``v``: 64-lane slices into a zeroed row, the tail masked, then the tree."""
    n = v.shape[1]
    tmp = np.zeros((v.shape[0], 64), np.float32)
    e = 0
    while e + 64 <= n:
        tmp = tmp + v[:, e:e + 64]
        e += 64
    if n % 64:
        tmp[:, :n % 64] = tmp[:, :n % 64] + v[:, e:]
    return _tree64(tmp)


def emulate(x, gamma, t, eps=EPS):
    """(y, rstd) of the kernel of ``t``'s mode, in float32 numpy, instruction by instruction."""
    f = np.float32
    d = gamma.size
    x32 = x.astype(f).reshape(-1, d)
    sq = x32 * x32
    with np.errstate(invalid="ignore", over="ignore"):
        if t.tiling_key == MODE_MERGE_N:
            s = _multi_n(sq)
        elif t.tiling_key == MODE_SPLIT_D:
            s = np.zeros(x32.shape[0], f)
            for j in range(0, d, t.ub_factor):
                s = s + _half_interval(sq[:, j:j + t.ub_factor])
        else:
            s = _half_interval(sq)
        r = f(1.0) / np.sqrt(s * (f(1.0) / f(d)) + f(eps))
        y = (x32 * r[:, None]) * gamma.astype(f).reshape(1, -1)
    lead = x.shape[:x.ndim - gamma.ndim]
    return y.astype(x.dtype).reshape(x.shape), r.reshape(lead + (1,) * gamma.ndim)


def torch_rms_norm(x, gamma, eps=EPS):
    xt = torch.from_numpy(x.astype(np.float64))
    return torch.nn.functional.rms_norm(xt, tuple(gamma.shape), torch.from_numpy(gamma.astype(np.float64)),
                                        eps).numpy()


def run(x, gamma, **kw):
    """The op under capture: (y, rstd, its single RunReport)."""
    with tilesim.capture() as runs:
        y, r = rms_norm(x, gamma, **kw)
    assert len(runs) == 1
    return y, r, runs[0]


def check_all(x, gamma, **kw):
    y, r, rep = run(x, gamma, **kw)
    t = rep.tiling
    gy, gr = ref.rms_norm(x, gamma, kw.get("epsilon", EPS))
    assert y.dtype == x.dtype and y.shape == x.shape and r.dtype == np.float32 and r.shape == gr.shape
    for out, golden, what in ((y, gy, "y vs reference"), (r, gr, "rstd vs reference"),
                              (y, torch_rms_norm(x, gamma, kw.get("epsilon", EPS)), "y vs torch")):
        p = compare(out, golden)
        assert p.ok, f"{what}: {p}"
    ey, er = emulate(x, gamma, t, kw.get("epsilon", EPS))
    assert_bitwise(y, ey, "y vs the kernels' instruction order")
    assert_bitwise(r, er, "rstd vs the kernels' instruction order")
    return y, r, rep


# (id, shape, n_gamma, x dtype, gamma dtype, soc, tiling overrides, mode). Each (mode, x dtype, gamma dtype) is a
# kernel compiled on its own, in the fast build and in the checked one. The mixed fp32-gamma cases, here and in the
# tests below, take bf16 x in NORMAL and SPLIT_D and fp16 x in MERGE_N (each mode's fp16 and bf16 y, rounded as
# its type is, run in the b16 cases), and both in SINGLE_ROW, which only mixed dtypes reach: 5 kernels, not 7.
CASES = [
    ("normal-fp32-batches", (70, 100), 1, F32, F32, B93, dict(core_num=1), MODE_NORMAL),
    ("normal-fp16", (37, 1000), 1, F16, F16, B93, {}, MODE_NORMAL),
    ("normal-bf16-2001", (9, 2001), 1, BF16, BF16, B1, {}, MODE_NORMAL),
    ("normal-fp32-D1", (50, 1), 1, F32, F32, B93, {}, MODE_NORMAL),
    ("normal-mix-910_93", (7, 1000), 1, BF16, F32, B93, {}, MODE_NORMAL),
    ("normal-mix-bf16", (5, 3000), 1, BF16, F32, B1, {}, MODE_NORMAL),
    ("normal-mix-D16", (5, 16), 1, BF16, F32, B93, {}, MODE_NORMAL),
    ("split_d-fp32", (3, 12300), 1, F32, F32, B1, {}, MODE_SPLIT_D),
    ("split_d-fp16", (2, 13000), 1, F16, F16, B1, {}, MODE_SPLIT_D),
    ("split_d-mix", (2, 14000), 1, BF16, F32, B1, {}, MODE_SPLIT_D),
    ("split_d-tile-groups", (3, 5000), 1, F32, F32, B1, dict(mode=1, ub_factor=64), MODE_SPLIT_D),
    ("split_d-batches", (130, 300), 1, BF16, BF16, B1, dict(core_num=1, mode=1, ub_factor=128), MODE_SPLIT_D),
    ("merge_n-fp32", (37, 128), 1, F32, F32, B1, {}, MODE_MERGE_N),
    ("merge_n-bf16", (37, 100), 1, BF16, BF16, B1, {}, MODE_MERGE_N),
    ("merge_n-mix", (37, 100), 1, F16, F32, B1, {}, MODE_MERGE_N),
    ("merge_n-passes", (600, 64), 1, F16, F16, B1, dict(core_num=1), MODE_MERGE_N),
    ("merge_n-D1", (9, 1), 1, F32, F32, B1, {}, MODE_MERGE_N),
    ("merge_n-full-passes", (700, 100), 1, F32, F32, B1, dict(core_num=1), MODE_MERGE_N),
    ("merge_n-255-rows", (800, 16), 1, F16, F16, B1, dict(core_num=1), MODE_MERGE_N),
    ("single_row-fp16", (3, 13000), 1, F16, F32, B1, {}, MODE_SINGLE_ROW),
    ("single_row-bf16-batches", (66, 13900), 1, BF16, F32, B1, dict(core_num=1), MODE_SINGLE_ROW),
]


# --------------------------------------------------------------------------------------------------------------
# numerics


@pytest.mark.parametrize("shape,n_gamma,dtype,gamma_dtype,soc,overrides,mode", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_modes_against_untiled_math_torch_and_instruction_order(rng, shape, n_gamma, dtype, gamma_dtype, soc,
                                                                overrides, mode):
    x, gamma = make(rng, shape, n_gamma, dtype, gamma_dtype)
    t = make_tiling(x, gamma, soc=soc, **overrides)
    assert t.tiling_key == mode
    _, _, rep = check_all(x, gamma, soc=soc, tiling=t if overrides else None)
    assert rep.tiling == t and rep.op == "rms_norm" and rep.block_dim == t.block_dim and rep.soc == soc


@pytest.mark.parametrize("shape,n_gamma,dtype", [((64,), 1, F32), ((3, 5, 40), 1, F16), ((2, 3, 4, 40), 2, F32),
                                                 ((2, 3, 4, 8), 3, BF16), ((6, 2, 2, 2, 2, 2, 2, 3), 7, F32)])
def test_ranks_and_the_shape_of_rstd(rng, shape, n_gamma, dtype):
    """rstd keeps x's leading axes and has 1 for each axis gamma covers (InferShape4RmsNorm)."""
    x, gamma = make(rng, shape, n_gamma, dtype, dtype)
    _, r, _ = check_all(x, gamma)
    assert r.shape == shape[:len(shape) - n_gamma] + (1,) * n_gamma


@pytest.mark.parametrize("eps", [0.0, 1e-3, 0.5])
def test_epsilon(rng, eps):
    x, gamma = make(rng, (20, 300), 1, F16, F16)
    check_all(x, gamma, epsilon=eps)
    assert make_tiling(x, gamma, eps).epsilon == float(np.float32(eps))


def test_the_instruction_order_statement_can_fail(rng):
    """The bitwise comparisons can fail: the sums of MERGE_N and NORMAL differ somewhere on the same x."""
    x, gamma = make(rng, (64, 1000))
    r_merge = rms_norm(x, gamma)[1]
    t_normal = make_tiling(x, gamma, mode=MODE_NORMAL)
    r_normal = rms_norm(x, gamma, tiling=t_normal)[1]
    assert_bitwise(r_normal, emulate(x, gamma, t_normal)[1])
    assert np.any(r_merge != r_normal)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("mode,dtype", [(MODE_NORMAL, F32), (MODE_MERGE_N, BF16), (MODE_SPLIT_D, F16)])
def test_special_values(rng, mode, dtype):
    """NaN in a row makes the row's rstd and y NaN; inf makes rstd 0 (1 / sqrt(inf)) and y NaN where x is inf,
    0 elsewhere; a row of zeros has rstd 1/sqrt(ε); other rows are untouched."""
    x, gamma = make(rng, (8, 96), 1, dtype, dtype)
    x[1, 5], x[2, 7], x[3] = np.nan, np.inf, 0
    t = make_tiling(x, gamma, mode=mode, **(dict(ub_factor=64) if mode == MODE_SPLIT_D else {}))
    y, r = rms_norm(x, gamma, tiling=t)
    ey, er = emulate(x, gamma, t)
    assert_bitwise(y, ey)
    assert_bitwise(r, er)
    assert np.isnan(r[1]).all() and np.isnan(y[1].astype(F32)).all()
    assert r[2, 0] == 0 and np.isnan(float(y[2, 7])) and (y[2, :7].astype(F32) == 0).all()
    assert r[3, 0] == np.float32(1.0) / np.sqrt(np.float32(EPS))
    p = compare(y[4:], ref.rms_norm(x[4:], gamma)[0])
    assert p.ok, p


# --------------------------------------------------------------------------------------------------------------
# the tiling


# Worked by hand from Tiling4RmsNorm and CalMixDtypeTiling (Ascend910B1: 48 cores; ubSize 196608 − 1024 = 195584):
HAND = [
    # fp16 [4096, 1024]: numColAlign 1024 <= 2000 on 910B: MERGE_N, rowFactor 195584 // (1024·16 + 260) = 11;
    # blockFactor ceil(4096 / 48) = 86 on 48 cores, the last 4096 − 47·86 = 54; rows loops ceil(86/11) = 8 (tail 9),
    # ceil(54/11) = 5 (tail 10); mulLoop 16, dstRepStride 128; 4096 rows > 512: not is_performance
    (B1, (4096, 1024), F16, F16, dict(tiling_key=2, row_factor=11, ub_factor=11264, block_factor=86, block_dim=48,
                                      last_block_factor=54, row_loop=8, row_tail=9, last_block_row_loop=5,
                                      last_block_row_tail=10, mul_loop=16, mul_tail=0, dst_rep_stride=128,
                                      is_performance=0, num_col_align=1024)),
    # bf16 [256, 4096]: numColAlign 4096 > 2000, <= 12288: NORMAL, ubFactor 12288; blockFactor ceil(256/48) = 6,
    # blockDim ceil(256/6) = 43, the last 256 − 42·6 = 4; rank 2, 256 <= 512 rows, 4096 <= 5120 cols: performance
    (B1, (256, 4096), BF16, BF16, dict(tiling_key=0, row_factor=64, ub_factor=12288, block_factor=6, block_dim=43,
                                       last_block_factor=4, is_performance=1, row_loop=1, row_tail=6)),
    # fp32 [64, 12288]: 12288 > 10240: SPLIT_D over ceil(12288/10240) = 2 tiles: ceil(12288 / 32)·16 = 6144
    (B1, (64, 12288), F32, F32, dict(tiling_key=1, ub_factor=6144, row_factor=64, block_factor=2, block_dim=32,
                                     last_block_factor=2)),
    # fp32 [100, 10241]: numColAlign 10248 > 10240: 2 tiles of ceil(10241/32)·16 = 5136 (the tail 5105 >= 16)
    (B1, (100, 10241), F32, F32, dict(tiling_key=1, ub_factor=5136, num_col_align=10248, block_factor=3,
                                      block_dim=34, last_block_factor=1)),
    # fp32 [100, 2000]: MERGE_N, 195584 // (2000·16 + 260) = 6 rows a pass; [100, 2001]: numColAlign 2008: NORMAL
    (B1, (100, 2000), F32, F32, dict(tiling_key=2, row_factor=6, ub_factor=12000, mul_loop=31, mul_tail=16,
                                     dst_rep_stride=250)),
    (B1, (100, 2001), F32, F32, dict(tiling_key=0, ub_factor=10240, num_col_align=2008)),
    # 910_93 is not SocVersion::ASCEND910B: no MERGE_N, no is_performance
    (B93, (256, 1024), F16, F16, dict(tiling_key=0, ub_factor=12288, is_performance=0)),
    # mixed (CalMixDtypeTiling, numColAlign to 16): 2000 on 910B MERGE_N, 195584 // (16·2000 + 288) = 6 rows;
    # 12000: NORMAL (16·12000 + 512 < 195584), ubFactor = numColAlign; 13000 (13008): SINGLE_ROW
    # (14·13008 + 512 < 195584); 14000: SPLIT_D, (195584 − 2560) // 16 = 12064
    (B1, (8, 2000), F16, F32, dict(tiling_key=2, row_factor=6, ub_factor=12000, is_mix_dtype=1)),
    (B1, (8, 12000), BF16, F32, dict(tiling_key=0, row_factor=64, ub_factor=12000)),
    (B1, (8, 13000), F16, F32, dict(tiling_key=3, row_factor=64, ub_factor=13008, num_col_align=13008)),
    (B1, (8, 14000), BF16, F32, dict(tiling_key=1, row_factor=64, ub_factor=12064)),
    (B93, (8, 2000), F16, F32, dict(tiling_key=0, ub_factor=2000)),
]


@pytest.mark.parametrize("soc,shape,dtype,gamma_dtype,want", HAND, ids=[f"{h[0]}-{h[1]}-{h[2].__name__}-"
                                                                       f"{h[3].__name__}" for h in HAND])
def test_official_tiling_matches_hand_worked_figures(soc, shape, dtype, gamma_dtype, want):
    t = make_tiling(np.empty(shape, dtype), np.empty(shape[-1:], gamma_dtype), soc=soc)
    assert {k: getattr(t, k) for k in want} == want
    assert t.workspace_size == 256 + 16 * 1024 * 1024 and t.is_nddma == 1 and t.normal_flag == 0
    assert t.avg_factor == float(np.float32(1.0) / np.float32(shape[-1])) and t.epsilon == float(np.float32(EPS))


@pytest.mark.parametrize("shape,gshape,dtype,soc,perf", [
    ((512, 8, 1024), (1024,), F16, B1, 1), ((512, 9, 1024), (1024,), F16, B1, 0), ((513, 1024), (1024,), BF16, B1, 0),
    ((512, 5120), (5120,), BF16, B1, 1), ((512, 5121), (5121,), BF16, B1, 0), ((8, 4, 64), (4, 64), F16, B1, 0),
    ((8, 64), (64,), F32, B1, 0), ((8, 64), (64,), F16, B93, 0), ((2, 2, 2, 64), (64,), F16, B1, 0)])
def test_is_performance(shape, gshape, dtype, soc, perf):
    """isPerformance: b16 (not mixed) x of rank 2 (at most 512 rows) or 3 (512, then 8), gamma of rank 1, at most
    5120 columns, on 910B."""
    assert make_tiling(np.empty(shape, dtype), np.empty(gshape, dtype), soc=soc).is_performance == perf


def test_split_d_column_tile_shrinks_past_a_short_tail():
    """ceil(numCol / (tiles·16))·16, less 16 while numCol % ubFactor is in (0, 16); none left is a failure."""
    assert _split_d_ub_factor(12288, 10240) == 6144
    assert _split_d_ub_factor(50000, 12288) == 10000  # 5 tiles of 10000, no tail
    assert _split_d_ub_factor(10241, 10240) == 5136
    assert _split_d_ub_factor(145, 48) == 32  # 4 tiles: ceil(145 / 64)·16 = 48 leaves 1; 32 leaves 17
    with pytest.raises(tilesim.AclnnError) as e:  # 2 tiles: 32 leaves 1, 16 leaves 1, then nothing is left
        _split_d_ub_factor(33, 32)
    assert e.value.status == 561002 and "split" in e.value.message


@pytest.mark.parametrize("soc", [B1, "Ascend910B3", B93])
@pytest.mark.parametrize("dtype,gamma_dtype", [(F32, F32), (F16, F16), (BF16, BF16), (F16, F32), (BF16, F32)])
@pytest.mark.parametrize("cols", [1, 15, 16, 100, 1024, 1999, 2000, 2001, 5000, 10240, 10241, 12288, 12289, 13000,
                                  14000, 40000])
def test_every_official_plan_fits_and_covers_the_rows(soc, dtype, gamma_dtype, cols):
    spec = tilesim.get_soc(soc)
    for rows in (1, 47, 48, 1000):
        t = make_tiling(np.empty((rows, cols), dtype), np.empty((cols,), gamma_dtype), soc=soc)
        assert ub_plan(t, spec).check().used <= spec.ub_size - 1024 + 32
        assert sum(t.rows_of_core(c) for c in range(t.block_dim)) == rows
        assert 1 <= t.last_block_factor <= t.block_factor and t.block_dim <= spec.core_num_aiv
        for n, loop, tail in ((t.block_factor, t.row_loop, t.row_tail),
                              (t.last_block_factor, t.last_block_row_loop, t.last_block_row_tail)):
            assert (loop - 1) * t.row_factor + tail == n and 1 <= tail <= t.row_factor
        if t.tiling_key == MODE_SPLIT_D:
            assert t.ub_factor % 16 == 0 and t.ub_factor < t.num_col_align
        else:
            assert t.ub_factor >= t.num_col_align
        if t.tiling_key == MODE_MERGE_N:
            assert t.num_col_align <= 2000 and t.ub_factor == t.row_factor * t.num_col_align
            assert spec.short_soc == "Ascend910B"


def test_a_core_count_round_trips():
    """check_tiling recomputes a tiling from its block_dim as the core count: that gives the same split."""
    for rows in range(1, 400):
        for cores in range(1, 49):
            t = make_tiling(np.empty((rows, 64), F32), np.empty((64,), F32), core_num=cores)
            assert make_tiling(np.empty((rows, 64), F32), np.empty((64,), F32), core_num=t.block_dim) == t


@pytest.mark.parametrize("dtype,gamma_dtype,shape,mode", [(F32, F32, (70, 100), MODE_NORMAL),
                                                          (BF16, BF16, (3, 12300), MODE_SPLIT_D),
                                                          (F16, F16, (37, 100), MODE_MERGE_N),
                                                          (F32, F32, (37, 100), MODE_MERGE_N),
                                                          (BF16, F32, (3, 13000), MODE_SINGLE_ROW)])
def test_the_kernel_places_the_host_plan(rng, dtype, gamma_dtype, shape, mode):
    """What the kernel's InitBuffer calls placed is the host's ub_plan, buffer for buffer, offsets included."""
    x, gamma = make(rng, shape, 1, dtype, gamma_dtype)
    t = make_tiling(x, gamma, soc=B93 if mode == MODE_NORMAL else B1)
    assert t.tiling_key == mode
    _, _, rep = run(x, gamma, soc=B93 if mode == MODE_NORMAL else B1)
    host = ub_plan(t, tilesim.get_soc(B1))
    assert [(b.name, b.nbytes, b.buffer_num, b.offset) for b in rep.ub_plan.buffers] == \
        [(b.name, b.nbytes, b.buffer_num, b.offset) for b in host.buffers]


# --------------------------------------------------------------------------------------------------------------
# what the kernels issue


def _folds(n):
    """ReduceSumHalfInterval's Adds (each with its PipeBarrier) for ``n`` lanes."""
    if n <= 64:
        return 0
    body = 1 << (n.bit_length() - 1)
    return int(n > body) + (body // 64).bit_length() - 1


@pytest.mark.parametrize("dtype,gamma_dtype,shape,per_row_barriers", [(F16, F16, (37, 1000), 6),
                                                                      (F32, F32, (70, 100), 3),
                                                                      (BF16, F32, (40, 5000), 5)])
def test_normal_issues_ops_nn_syncs_per_row(rng, dtype, gamma_dtype, shape, per_row_barriers):
    """NORMAL per row: 7 SetFlags (EnQue and FreeTensor of x and y; V_S in ReduceSumHalfInterval and in Compute;
    S_V), 7 waits counted with the AllocTensor waits from the second row on, PipeBarrier<PIPE_V>s: fp32 3, b16 6,
    mixed 5, plus one per fold Add; per batch of rstd 2 SetFlags, per core 2 (gamma)."""
    x, gamma = make(rng, shape, 1, dtype, gamma_dtype)
    t = make_tiling(x, gamma, soc=B93, core_num=1 if shape[0] == 70 else None)
    assert t.tiling_key == MODE_NORMAL
    _, _, rep = run(x, gamma, soc=B93, tiling=t)
    rows = np.array([t.rows_of_core(c) for c in range(t.block_dim)])
    batches = -(-rows // t.row_factor)
    np.testing.assert_array_equal(rep.counter("set_flags"), 7 * rows + 2 * batches + 2)
    np.testing.assert_array_equal(rep.counter("pipe_barriers"), (per_row_barriers + _folds(shape[1])) * rows)
    assert rep.total("mte2_bytes") == x.nbytes + gamma.nbytes * t.block_dim
    assert rep.total("mte3_bytes") == x.nbytes + 4 * shape[0]
    assert rep.total("mte2_transfers") == shape[0] + t.block_dim
    assert rep.total("mte3_transfers") == shape[0] + batches.sum()


def test_merge_n_issues_ops_nn_syncs_per_pass(rng):
    """MERGE_N, bf16 [37, 100] (a row a core): 6 SetFlags a pass (EnQue and FreeTensor of x, rstd, y) and 3 a core
    (gamma's MTE2_V by hand, its EnQue and FreeTensor); PipeBarrier<PIPE_V>: 2 (x²) + 3 (ReduceSumMultiN: after
    Duplicate, the one whole slice, the tail) + 1 + 4 (rstd) + 1 (Brcb) + 2 (x·rstd: 64 lanes, the tail) + 1 + 2
    (·gamma) + 1 (Cast) + 1, and gamma's Cast once."""
    x, gamma = make(rng, (37, 100), 1, BF16, BF16)
    _, _, rep = run(x, gamma)
    assert rep.tiling.tiling_key == MODE_MERGE_N and rep.block_dim == 37
    assert (rep.counter("set_flags") == 9).all()
    assert (rep.counter("pipe_barriers") == 19).all()
    assert rep.total("vec_reduce") > 0 and rep.total("vec_dup") > 0


# --------------------------------------------------------------------------------------------------------------
# SoCs, hand-made tilings, the API


def test_910_socs_agree_bitwise_in_the_mode_they_pick(rng):
    x, gamma = make(rng, (300, 3000), 1, BF16, BF16)  # NORMAL everywhere: numColAlign above 2000
    outs = [run(x, gamma, soc=soc) for soc in (B1, "Ascend910B3", B93)]
    assert [o[2].block_dim for o in outs] == [43, 38, 43]  # 300 rows: 7 a core on 48 cores, 8 on 40
    assert [o[2].tiling.tiling_key for o in outs] == [MODE_NORMAL] * 3
    for y, r, _ in outs[1:]:
        assert_bitwise(y, outs[0][0], "y across 910 SoCs")
        assert_bitwise(r, outs[0][1], "rstd across 910 SoCs")


USER_CASES = [
    ((70, 300), F32, F32, [dict(core_num=1), dict(core_num=5), dict(mode=MODE_NORMAL, row_factor=8),
                           dict(mode=MODE_NORMAL, row_factor=1, core_num=2), dict(row_factor=8),
                           dict(mode=MODE_SPLIT_D, ub_factor=64), dict(mode=MODE_SPLIT_D, ub_factor=304),
                           dict(mode=MODE_NORMAL, ub_factor=304)]),
    ((40, 1000), F16, F32, [dict(core_num=3), dict(mode=MODE_SINGLE_ROW), dict(row_factor=8, core_num=4)]),
    ((40, 1000), BF16, F32, [dict(mode=MODE_NORMAL), dict(mode=MODE_SPLIT_D, ub_factor=256, core_num=7)]),
]


@pytest.mark.parametrize("shape,dtype,gamma_dtype,overrides", USER_CASES, ids=["fp32", "mixed-fp16", "mixed-bf16"])
def test_hand_made_tilings_run_their_mode(rng, shape, dtype, gamma_dtype, overrides):
    """Every tiling of the free choices gives its mode's instruction order, bit for bit; the core count and the
    batch size change nothing."""
    x, gamma = make(rng, shape, 1, dtype, gamma_dtype)
    for kw in overrides:
        t = make_tiling(x, gamma, **kw)
        assert t != make_tiling(x, gamma), kw
        y, r, rep = run(x, gamma, tiling=t)
        assert rep.tiling == t and rep.block_dim == t.block_dim
        ey, er = emulate(x, gamma, t)
        assert_bitwise(y, ey, f"y, tiling {kw}")
        assert_bitwise(r, er, f"rstd, tiling {kw}")


def test_overrides_are_checked():
    x, g = np.empty((40, 1000), F32), np.empty((1000,), F32)
    for kw, words in ((dict(mode=MODE_SINGLE_ROW), "mixed"), (dict(mode=7), "mode"),
                      (dict(mode=MODE_SPLIT_D, ub_factor=100), "multiple of 16"),
                      (dict(mode=MODE_SPLIT_D, row_factor=32), "64"), (dict(mode=MODE_NORMAL, ub_factor=999), "row"),
                      (dict(ub_factor=1000), "row_factor x numColAlign"), (dict(row_factor=0), "at least 1"),
                      (dict(mode=MODE_NORMAL, row_factor=100000), "UB plan"), (dict(core_num=49), "core_num")):
        with pytest.raises(tilesim.AclnnError) as e:
            make_tiling(x, g, **kw)
        assert e.value.status == 561002 and words in e.value.message, (kw, e.value.message)
    with pytest.raises(tilesim.AclnnError) as e:
        make_tiling(np.empty((4, 2048), F32), np.empty((2048,), F32), mode=MODE_MERGE_N)
    assert e.value.status == 561002 and "uint8" in e.value.message


def test_a_tiling_from_another_problem_is_refused(rng):
    x, gamma = make(rng, (8, 64))
    for bad, field in ((replace(make_tiling(x, gamma), num_row=9), "tiling.num_row"),
                       (make_tiling(x, gamma, 1e-3), "tiling.epsilon"),
                       (replace(make_tiling(x, gamma), row_loop=2), "tiling.row_loop"),
                       (make_tiling(np.empty((8, 64), F16), np.empty((64,), F16)), "tiling.is_performance"),
                       (replace(make_tiling(x, gamma), dtype_key=1), "tiling.dtype_key")):
        with pytest.raises(tilesim.AclnnError) as e:
            rms_norm(x, gamma, tiling=bad)
        assert e.value.status == 561002 and field in e.value.message, e.value.message


def test_out_is_written_and_returned(rng):
    x, gamma = make(rng, (10, 40), 1, BF16, BF16)
    y, r = np.full((10, 40), 7, BF16), np.full((10, 1), 7, F32)
    ry, rr = rms_norm(x, gamma, out=(y, r))
    assert ry is y and rr is r
    ey, er = emulate(x, gamma, make_tiling(x, gamma))
    assert_bitwise(y, ey)
    assert_bitwise(r, er)


def test_non_contiguous_inputs_are_read_as_their_values(rng):
    base, gbase = make(rng, (12, 128))
    x, gamma = base[::2, ::2], gbase[::2]
    assert not x.flags.c_contiguous and not gamma.flags.c_contiguous
    y, r = rms_norm(x, gamma)
    ey, er = emulate(np.ascontiguousarray(x), np.ascontiguousarray(gamma), make_tiling(x, gamma))
    assert_bitwise(y, ey)
    assert_bitwise(r, er)


def test_empty_x_gives_empty_outputs_without_a_launch():
    for shape, gshape in (((0, 64), (64,)), ((4, 0, 8), (8,)), ((0, 2, 3), (2, 3))):
        x = np.empty(shape, F16)
        with tilesim.capture() as runs:
            y, r = rms_norm(x, np.ones(gshape, F16))
        assert runs == [] and y.shape == shape and y.dtype == F16
        assert r.shape == shape[:len(shape) - len(gshape)] + (1,) * len(gshape) and r.dtype == F32


# --------------------------------------------------------------------------------------------------------------
# checked mode: BiSheng's auto-sync on and off

CHECKED = [("normal-fp16", (37, 1000), F16, F16, B93, {}), ("normal-fp32-batches", (70, 100), F32, F32, B93,
                                                              dict(core_num=1)),
           ("normal-mix", (5, 3000), BF16, F32, B1, {}),
           ("split_d-groups", (3, 5000), F32, F32, B1, dict(mode=1, ub_factor=64)),
           ("split_d-mix", (2, 14000), BF16, F32, B1, {}), ("merge_n-fp32", (37, 128), F32, F32, B1, {}),
           ("merge_n-bf16", (37, 100), BF16, BF16, B1, {}), ("merge_n-passes", (600, 64), F16, F16, B1,
                                                              dict(core_num=1)),
           ("merge_n-mix-aligned", (300, 128), F16, F32, B1, dict(core_num=2)),
           ("single_row", (3, 13000), F16, F32, B1, {}),
           # masked tail repeats whose unused blocks lie past the buffer (a MERGE_N pass of row_factor rows,
           # numColAlign not a multiple of 64; a row of 16 floats under WholeReduceSum): in bounds, as CPU-debug
           # bounds a masked repeat by its last enabled lane
           ("merge_n-unaligned-full-passes", (200, 100), F32, F32, B1, dict(core_num=1, row_factor=16)),
           ("merge_n-255-rows", (800, 16), F16, F16, B1, dict(core_num=1)),
           ("normal-mix-D16", (5, 16), BF16, F32, B93, {})]


@pytest.mark.parametrize("shape,dtype,gamma_dtype,soc,overrides", [c[1:] for c in CHECKED],
                         ids=[c[0] for c in CHECKED])
def test_checked_clean_with_and_without_auto_sync(rng, shape, dtype, gamma_dtype, soc, overrides):
    """The kernels write every V-V barrier and their V_S / S_V / MTE2_V syncs themselves, as ops-nn does, so they
    are clean with the compiler's auto-sync off as well as on; checked results are the fast bits."""
    x, gamma = make(rng, shape, 1, dtype, gamma_dtype)
    spec = tilesim.get_soc(soc)
    t = make_tiling(x, gamma, soc=soc, **overrides)
    fy, fr = emulate(x, gamma, t)
    for auto_sync in (True, False):
        y, r = np.full(x.shape, 7, dtype), np.full(fr.shape, 7, F32)
        rep = run_kernel(t, spec, x, gamma, y, r, None, True, auto_sync=auto_sync)
        assert rep.checks
        assert_bitwise(y, fy, f"y, checked, auto_sync={auto_sync}")
        assert_bitwise(r, fr, f"rstd, checked, auto_sync={auto_sync}")


# --------------------------------------------------------------------------------------------------------------
# the explorer's view


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
def test_every_candidate_passes_within_its_rounding_bound(dtype):
    """kernels.op_specs' RmsNorm spec at a small shape (D 200: masked tails): the official tiling first and once,
    several core counts, modes and tiles, every candidate within the standard and the op's rounding bound."""
    spec = OPS["rms_norm"]
    soc = tilesim.get_soc(B1)
    inputs = spec.make_inputs((26, 200), dtype, 0)
    cands = spec.candidates(inputs, soc)
    assert cands[0].official and sum(c.official for c in cands) == 1
    assert len({c.tiling for c in cands}) == len(cands)
    assert {c.params["mode"] for c in cands} >= {"NORMAL", "SPLIT_D", "MERGE_N"}
    assert len({c.params["block_dim"] for c in cands}) >= 2 and len({c.params["tile"] for c in cands}) >= 3
    golden, bounds = spec.reference(inputs), spec.bounds(inputs)
    for c in cands:
        outs = spec.run(inputs, c.tiling, soc)
        for out, g, b in zip(outs, golden, bounds, strict=True):
            j = judge(out, Expected.of(g, np.dtype(out.dtype).name, b))
            assert j.verdict == "pass" and j.excess < 1, f"{c.params}: {j}"
    big = spec.candidates(spec.make_inputs(spec.default_shape, dtype, 0), soc)
    assert 5 <= len(big) <= 90
