"""The Ascend C high-level normalization APIs LayerNormGrad and LayerNormGradBeta (asc-devkit
``impl/adv_api/detail/normalization/layernormgrad/layernormgrad{,beta}_common_impl.h``, the non-950 code) as
device functions a kernel calls on LocalTensors in its UB.

Each takes the temporaries as a ``sharedTmpBuffer`` LocalTensor and its size in bytes: a buffer of the kernel's
own UB plan, or, for the prototype without one, the buffer ``PopStackBuffer`` hands out (all UB the plan left
free: give the plan a last buffer with :meth:`tilesim.ub.UbPlan.add_stack` and pass that). The tiling is the
namedtuple of ``tiling.layer_norm_grad_api.device_tiling``. ``kind`` is 0 for float and ``KIND_FP16`` for half
(computed in fp32, cast back with CAST_NONE); ``reuse`` is isReuseSource (float only), with which the APIs
really compute in their sources: LayerNormGrad leaves dy·γ-based partials in ``dy`` and x − mean in ``x``,
LayerNormGradBeta leaves dy·resForGamma in ``res_for_gamma``.

Reproduced as the code has it, quirks included:
- LayerNormGrad sums Σ(−2(x − μ)) over the stored H, so zero padding past originalH adds 2μ per padded column
  to pd_mean's second term (exact only when the padding holds the row's mean, or μ = 0).
- LayerNormGradBeta walks the rows of a chunk ``originalH`` apart and adds ``originalH`` columns: with padding
  (originalH < H) it reads the wrong rows, and columns past originalH of the outputs are left as they were.
- Half takes ``epsilon`` as a half: 1e-5 becomes 1.0014e-5 before it is added to the variance.
"""

from __future__ import annotations

import numpy as np

from .cast import CAST_NONE
from .device import ERR_API_TMP, at, checked_only, clobber, plan_of, report
from .intrinsics import u32_as_f32
from .jit import njit
from .reduce import LANES, reduce_level
from .vector import add, adds, broadcast_col, cast_from_f32, cast_to_f32, div, duplicate, mul, muls, sqrt, sub


@checked_only(True)
def _tmp_ok(core, tmp, tmp_bytes, need):
    """ASCENDC_ASSERT(sharedTmpBuffer.GetSize() >= tiling.stackBufferSize): checked mode reports a short buffer
    and skips the API; fast mode runs it regardless, as a release build does."""
    if tmp_bytes < need and core.checks:
        report(core, ERR_API_TMP, tmp.buf, tmp.addr - plan_of(core)[tmp.buf, 0], tmp_bytes, need)
        return False
    return True


@njit(cache=True)
def _row_sums(core, dst, src, cal, h):
    """ReduceSumImpl: per row of ``h`` elements, WholeReduceSum over its 64-lane repeats (255 per instruction, the
    tail lanes one more), then over those partials (written into the row's span of ``dst``), level by level;
    row i's sum lands in ``dst[i]``."""
    for i in range(cal // h):
        total = h
        level, row = at(src, 4 * i * h), at(dst, 4 * i * h)
        while total > 1:
            total = reduce_level(core, at(dst, 4 * i) if total <= LANES else row, level, total)
            level = row


@njit(cache=True)
def _one_over(core, dst, ones, src, n):
    """DoOneDiv: dst = 1 / src over ``n`` values (a Duplicate of ones into ``ones``, then Div)."""
    duplicate(core, ones, 1.0, n)
    div(core, dst, ones, src, n)


@njit(cache=True)
def _lng_stats(core, var, res, tmp, st, t, cal, noh, eps, x1, x2, back, back2):
    """ComputePdVar, ComputePdMean and ComputePdX on fp32 x1 = dy·γ and x2 = x − μ: resForGamma into ``res``,
    pd_x into ``tmp`` (outputPdX itself for float, the stack's tmp tensor for half), per-row values in ``tmp``
    on the way."""
    h = t.h_length
    bsh, pvar, pmean = at(st, 4 * t.tmp_tensor_bsh_pos), at(st, 4 * t.pd_var_tensor_pos), \
        at(st, 4 * t.pd_mean_tensor_pos)
    x3 = at(st, 4 * t.x3_tensor_pos)
    # pd_var = Σ −0.5·x1·x2·(var + ε)^−1.5, the power by Mul, Mul, Sqrt and 1/·
    adds(core, tmp, var, eps, noh)
    mul(core, bsh, tmp, tmp, noh)
    mul(core, tmp, bsh, tmp, noh)
    sqrt(core, tmp, tmp, noh)
    _one_over(core, tmp, bsh, tmp, noh)
    broadcast_col(core, bsh, tmp, noh, h)
    mul(core, bsh, x2, bsh, cal)
    mul(core, bsh, x1, bsh, cal)
    muls(core, bsh, bsh, -0.5, cal)
    _row_sums(core, pvar, bsh, cal, h)
    # r = (var + ε)^−0.5; resForGamma = x2·r; pd_mean = Σ −x1·r + pd_var·(1/H)·Σ −2·x2 (over the stored H)
    adds(core, tmp, var, eps, noh)
    sqrt(core, tmp, tmp, noh)
    _one_over(core, tmp, bsh, tmp, noh)
    broadcast_col(core, bsh, tmp, noh, h)
    mul(core, res, x2, bsh, cal)
    mul(core, x3, x1, bsh, cal)
    muls(core, bsh, x3, -1.0, cal)
    _row_sums(core, pmean, bsh, cal, h)
    muls(core, bsh, x2, -2.0, cal)
    _row_sums(core, tmp, bsh, cal, h)
    muls(core, tmp, tmp, back, noh)
    mul(core, tmp, pvar, tmp, noh)
    add(core, pmean, pmean, tmp, noh)
    # pd_x = x3 + pd_var·(2/H)·x2 + pd_mean·(1/H)
    muls(core, pvar, pvar, back2, noh)
    broadcast_col(core, bsh, pvar, noh, h)
    mul(core, x1, bsh, x2, cal)
    muls(core, pmean, pmean, back, noh)
    broadcast_col(core, bsh, pmean, noh, h)
    add(core, x1, x1, bsh, cal)
    add(core, tmp, x1, x3, cal)


@njit(cache=True)
def _x1_x2(core, dy, x, mean, gamma, st, t, cal, noh, x1, x2):
    """ComputePdX1 (x1 = dy·γ, row by row) and ComputePdX2 (x2 = x − μ, μ broadcast along H) on fp32."""
    h = t.h_length
    for i in range(noh):
        mul(core, at(x1, 4 * i * h), at(dy, 4 * i * h), gamma, h)
    bsh = at(st, 4 * t.tmp_tensor_bsh_pos)
    broadcast_col(core, bsh, mean, noh, h)
    sub(core, x2, x, bsh, cal)


@njit(cache=True)
def _lng_chunk(core, dy, x, var, mean, gamma, pd_x, res, st, t, cal, noh, eps, kind, reuse, back, back2):
    """ComputeProcess<float> or ComputeProcess<half> on one chunk of ``noh`` rows (``cal`` = noh·H)."""
    if kind == 0:
        x1 = dy if reuse else at(st, 4 * t.x1_tensor_pos)  # GetTmpTensor: reuse computes in dy and x
        x2 = x if reuse else at(st, 4 * t.x2_tensor_pos)
        _x1_x2(core, dy, x, mean, gamma, st, t, cal, noh, x1, x2)
        _lng_stats(core, var, res, pd_x, st, t, cal, noh, eps, x1, x2, back, back2)
        if reuse:  # the caller's dy and x now hold the API's scratch
            clobber(core, dy, 4 * cal)
            clobber(core, x, 4 * cal)
        return
    h = t.h_length
    tmp, t1, t2 = at(st, 4 * t.tmp_tensor_pos), at(st, 4 * t.tmp_tensor1_pos), at(st, 4 * t.tmp_tensor2_pos)
    x1, x2 = at(st, 4 * t.x1_tensor_pos), at(st, 4 * t.x2_tensor_pos)
    cast_to_f32(core, t1, dy, cal, kind)
    cast_to_f32(core, t2, gamma, h, kind)
    for i in range(noh):
        mul(core, at(x1, 4 * i * h), at(t1, 4 * i * h), t2, h)
    cast_to_f32(core, t1, x, cal, kind)
    cast_to_f32(core, t2, mean, noh, kind)
    bsh = at(st, 4 * t.tmp_tensor_bsh_pos)
    broadcast_col(core, bsh, t2, noh, h)
    sub(core, x2, t1, bsh, cal)
    cast_to_f32(core, t1, var, noh, kind)
    _lng_stats(core, t1, t2, tmp, st, t, cal, noh, eps, x1, x2, back, back2)
    cast_from_f32(core, pd_x, tmp, cal, kind, CAST_NONE)
    cast_from_f32(core, res, t2, cal, kind, CAST_NONE)


@njit(cache=True)
def layer_norm_grad(core, pd_x, res_for_gamma, dy, x, variance, mean, gamma, tmp, tmp_bytes, epsilon, t, kind,
                    reuse):
    """LayerNormGrad<T, isReuseSource>(outputPdX, resForGamma, inputDy, inputX, inputVariance, inputMean,
    inputGamma, sharedTmpBuffer, epsilon, tiling): [B, S, H] sources, [B, S] variance and mean, [H] gamma, all
    T; ``loop_num`` chunks of ``one_cal_size`` elements and a tail. ``epsilon`` is the T value the kernel
    passes (for half, the caller rounds it to half first: the API's parameter is a T)."""
    if not _tmp_ok(core, tmp, tmp_bytes, t.stack_buffer_size):
        return
    isz = 4 if kind == 0 else 2
    eps = np.float32(epsilon)
    back = u32_as_f32(t.last_dim_value_back)  # 1/originalH and 2/originalH, stored as float bits
    back2 = u32_as_f32(t.last_dim_value_back_mul_two)
    off0 = 0
    off1 = 0
    for _ in range(t.loop_num):
        _lng_chunk(core, at(dy, isz * off0), at(x, isz * off0), at(variance, isz * off1), at(mean, isz * off1),
                   gamma, at(pd_x, isz * off0), at(res_for_gamma, isz * off0), tmp, t, t.one_cal_size,
                   t.noh_cal_size, eps, kind, reuse, back, back2)
        off0 += t.one_cal_size
        off1 += t.noh_cal_size
    if t.tail_size != 0:
        _lng_chunk(core, at(dy, isz * off0), at(x, isz * off0), at(variance, isz * off1), at(mean, isz * off1),
                   gamma, at(pd_x, isz * off0), at(res_for_gamma, isz * off0), tmp, t, t.tail_size,
                   t.noh_tail_size, eps, kind, reuse, back, back2)


@njit(cache=True)
def _sum_first_n(core, dst, src, bs, h, clear):
    """ReduceSumFirstN: dst (+)= Σ of ``bs`` rows of ``h`` elements, rows ``h`` apart; ``clear`` starts from
    row 0 (Adds 0) instead of dst's contents."""
    start = 0
    if clear:
        adds(core, dst, src, 0.0, h)
        start = 1
    for i in range(start, bs):
        add(core, dst, at(src, 4 * i * h), dst, h)


@njit(cache=True)
def _beta_chunk(core, res, dy, pd_gamma, pd_beta, rtmp, gtmp, btmp, dytmp, bsh, bs, oh, kind, clear):
    """ComputeProcess of LayerNormGradBeta: rtmp = dy·resForGamma, then the row sums into the outputs (half:
    widened into the stack, summed into fp32 gammaTemp/betaTemp, cast back after every chunk)."""
    if kind == 0:
        mul(core, rtmp, dy, res, bsh)
        _sum_first_n(core, pd_gamma, rtmp, bs, oh, clear)
        _sum_first_n(core, pd_beta, dy, bs, oh, clear)
        return
    cast_to_f32(core, dytmp, dy, bsh, kind)
    cast_to_f32(core, rtmp, res, bsh, kind)
    mul(core, rtmp, dytmp, rtmp, bsh)
    _sum_first_n(core, gtmp, rtmp, bs, oh, clear)
    _sum_first_n(core, btmp, dytmp, bs, oh, clear)
    cast_from_f32(core, pd_gamma, gtmp, oh, kind, CAST_NONE)
    cast_from_f32(core, pd_beta, btmp, oh, kind, CAST_NONE)


@njit(cache=True)
def layer_norm_grad_beta(core, pd_gamma, pd_beta, res_for_gamma, dy, tmp, tmp_bytes, t, kind, reuse):
    """LayerNormGradBeta<T, isReuseSource>(outputPdGamma, outputPdBeta, resForGamma, inputDy, sharedTmpBuffer,
    tiling): pd_gamma = Σ_rows dy·resForGamma and pd_beta = Σ_rows dy over [B, S, H], ``loop_round`` chunks of
    ``one_cal_size`` elements and a tail; rows ``original_h_length`` apart, as the code walks them."""
    if not _tmp_ok(core, tmp, tmp_bytes, 4 * t.stack_buffer_size):
        return
    isz = 4 if kind == 0 else 2
    oh = t.original_h_length
    gtmp, btmp = at(tmp, 4 * t.gamma_temp_tensor_pos), at(tmp, 4 * t.beta_temp_tensor_pos)
    dytmp = at(tmp, 4 * t.input_dy_tmp_tensor_pos)
    reuse_res = reuse and kind == 0
    for r in range(t.loop_round):
        off = r * t.one_cal_size
        rtmp = at(res_for_gamma, isz * off) if reuse_res else at(tmp, 4 * t.res_for_gamma_tmp_tensor_pos)
        _beta_chunk(core, at(res_for_gamma, isz * off), at(dy, isz * off), pd_gamma, pd_beta, rtmp, gtmp, btmp,
                    dytmp, t.bsh_cur_length, t.bs_cur_length, oh, kind, r == 0)
        if reuse_res:
            clobber(core, rtmp, 4 * t.bsh_cur_length)
    if t.input_tail_size > 0:
        off = t.input_tail_pos
        rtmp = at(res_for_gamma, isz * off) if reuse_res else at(tmp, 4 * t.res_for_gamma_tmp_tensor_pos)
        _beta_chunk(core, at(res_for_gamma, isz * off), at(dy, isz * off), pd_gamma, pd_beta, rtmp, gtmp, btmp,
                    dytmp, t.input_tail_size, t.bs_tail_size, oh, kind, t.loop_round == 0)
        if reuse_res:
            clobber(core, rtmp, 4 * t.input_tail_size)
