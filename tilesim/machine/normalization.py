"""The Ascend C high-level normalization APIs LayerNormGrad and LayerNormGradBeta on tilesim's programming model:
device functions a kernel calls on LocalTensors in its UB, as it calls ``AscendC::LayerNormGrad``.

They mirror asc-devkit's A2 code call for call (``impl/adv_api/detail/normalization/layernormgrad/
layernormgrad_common_impl.h`` and ``layernormgradbeta_common_impl.h``, the ``__NPU_ARCH__ == 2201`` branches), with
its PipeBarrier<PIPE_V>s, its counter-mode (SetMaskCount, SetVectorMask, MASK_PLACEHOLDER) instructions and its
scalar reads:
- BroadcastLastDimImpl (a row's value along H: μ, the powers of var + ε, pd_var·2/H, pd_mean/H) is
  BrcbLastDimImpl: one Brcb per 32 B column block of H over the rows in groups of 8 (dstBlkStride H/8,
  dstRepStride H), a PipeBarrier after each; the rows past the last group of 8 by DuplicateLastDimImpl: a
  SetFlag / WaitFlag V_S, a GetValue of each row's value, a Duplicate of H of it per row.
- ReduceSumImpl: per row, WholeReduceSum over its 64-lane repeats (255 per instruction, the tail lanes one more),
  then over those partials, level by level; DoOneDiv: a one-block Duplicate of 1 and a Div that re-reads it
  (src0 strides 0), in counter mode.
- LayerNormGradBeta runs in counter mode: a Mul over the chunk, then ReduceSumFirstN (an Adds of 0 to clear on
  the first chunk, then an Add per row), half widened into and summed in the temporaries, cast back per chunk.

The temporaries are the ``shared_tmp_buffer`` (a uint8 LocalTensor: a TBuf of the kernel's) or, passing None (the
prototype without sharedTmpBuffer), :func:`tilesim.machine.pop_stack_buffer`'s: all UB the kernel's TPipe left
free. ``ASCENDC_ASSERT(sharedTmpBuffer.GetSize() >= tiling.stackBufferSize)``: checked mode reports a short buffer
and skips the API; fast mode runs it regardless, as a release build does. The tiling is the namedtuple the
launcher makes of ``tiling.layer_norm_grad_api``'s dataclasses. T is half or float (the tensors' dtype);
``is_reuse_source`` is isReuseSource (float only), with which the APIs really compute in their sources:
LayerNormGrad leaves dy·γ-based partials in ``input_dy`` and x − mean in ``input_x``, LayerNormGradBeta leaves
dy·resForGamma in ``res_for_gamma`` (checked mode reports a later read of them).

Reproduced as the code has it, quirks included:
- LayerNormGrad sums Σ(−2(x − μ)) over the stored H, so zero padding past originalH adds 2μ per padded column
  to pd_mean's second term (exact only when the padding holds the row's mean, or μ = 0).
- LayerNormGradBeta walks the rows of a chunk ``originalH`` apart and adds ``originalH`` columns: with padding
  (originalH < H) it reads the wrong rows, and columns past originalH of the outputs are left as they were.
- ``epsilon`` is a T: the caller passes half's value for half (1e-5 becomes 1.0014e-5).

Where this differs from asc-devkit: the A2 code runs on every SoC. Built for 310P (``__NPU_ARCH__`` 2002)
BroadcastLastDimImpl is DuplicateLastDimImpl for all the rows (a GetValue and a Duplicate each, no Brcb); the
values are the same, the counters and the scalar reads are not.
"""

from __future__ import annotations

import numpy as np
from numba import types
from numba.extending import overload

from tilesim import machine as asc
from tilesim.core.records import ERR_API_TMP, checked_only, clobber, plan_of, report
from tilesim.jit import OVERLOAD_OPTIONS, njit
from tilesim.jit.intrinsics import u32_as_f32
from tilesim.machine.sync import fetch_id, pipe_barrier_run
from tilesim.machine.tensor import core_of, ctx_words, plan_tensor

PH = asc.MASK_PLACEHOLDER
BRCB_BROADCAST_NUMBER = 8  # rows a Brcb repeat takes (one 32 B block each)
MAX_REPEAT_TIMES = 255
BRCB_MAX_REPEAT_SIZE = BRCB_BROADCAST_NUMBER * MAX_REPEAT_TIMES
ONE_REPEAT_FLOAT_SIZE = 64
MAX_REPEAT_FLOAT_SIZE = ONE_REPEAT_FLOAT_SIZE * MAX_REPEAT_TIMES
_V_S = int(asc.HardEvent.V_S)


@checked_only(True)
def _tmp_ok(core, tmp, need):
    """ASCENDC_ASSERT(sharedTmpBuffer.GetSize() >= need): checked mode reports a short buffer (the API is then
    skipped)."""
    have = tmp.nbytes
    if have < need and core.checks:
        report(core, ERR_API_TMP, tmp.buf, tmp.addr - plan_of(core)[tmp.buf, 0], have, need)
        return False
    return True


def tmp_buffer(ctx, tmp):  # type: ignore[no-untyped-def]
    """The sharedTmpBuffer, or (None) the framework's: PopStackBuffer<uint8_t, TPosition::LCM>."""


@overload(tmp_buffer, jit_options=OVERLOAD_OPTIONS)
def _tmp_buffer_typed(ctx, tmp):  # type: ignore[no-untyped-def]
    if isinstance(tmp, types.NoneType):
        return lambda ctx, tmp: asc.pop_stack_buffer(ctx, asc.uint8)
    return lambda ctx, tmp: tmp


@njit(cache=True)
def _reused(t, n):
    """isReuseSource: checked mode marks ``n`` floats of source ``t`` as the API's scratch."""
    clobber(core_of(t), plan_tensor(t), 4 * n)


# ---------------------------------------------------------------------------------------------------------------
# LayerNormGrad


@njit(cache=True)
def _duplicate_last_dim(ctx, dst, src, bs, h):
    """DuplicateLastDimImpl: each row's value read by GetValue (after a V_S sync: the vector unit wrote it) and
    Duplicated along its H."""
    w = ctx_words(ctx.ctx)
    ev = fetch_id(w, _V_S)  # GetTPipePtr()->FetchEventID(HardEvent::V_S)
    asc.set_flag(ctx, asc.HardEvent.V_S, ev)
    asc.wait_flag(ctx, asc.HardEvent.V_S, ev)
    for j in range(bs):  # scalarList[j] = src[j].GetValue(0), eight at a time, then the Duplicates
        v = src[j].get_value(0)
        asc.duplicate(dst[j * h], v, h)


@njit(cache=True)
def _broadcast_last_dim(ctx, dst, src, bs, h):
    """DuplicateTensor: BroadcastLastDimImpl (BrcbLastDimImpl on A2) of ``bs`` rows to ``h`` columns, then a
    PipeBarrier<PIPE_V>."""
    line_round = h // BRCB_BROADCAST_NUMBER
    row_round, row_tail = bs // BRCB_BROADCAST_NUMBER, bs % BRCB_BROADCAST_NUMBER
    times, tail_times = row_round // MAX_REPEAT_TIMES, row_round % MAX_REPEAT_TIMES
    params = asc.BrcbRepeatParams(line_round, h)
    if row_round == 0:  # nothing to Brcb: the loop issues its PipeBarriers alone
        pipe_barrier_run(ctx, asc.PIPE_V, line_round)
    else:
        for i in range(line_round):
            for j in range(times):
                asc.brcb(dst[i * BRCB_BROADCAST_NUMBER + j * BRCB_MAX_REPEAT_SIZE * h], src[j * BRCB_MAX_REPEAT_SIZE],
                         MAX_REPEAT_TIMES, params)
            if tail_times > 0:
                asc.brcb(dst[i * BRCB_BROADCAST_NUMBER + times * BRCB_MAX_REPEAT_SIZE * h],
                         src[times * BRCB_MAX_REPEAT_SIZE], tail_times, params)
            asc.pipe_barrier(ctx, asc.PIPE_V)
    if row_tail != 0:
        done = bs - row_tail
        _duplicate_last_dim(ctx, dst[done * h], src[done], row_tail, h)
        asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.pipe_barrier(ctx, asc.PIPE_V)


@njit(cache=True)
def _reduce_sum(ctx, dst, src, cal, h):
    """ReduceSumImpl: row i's sum of its ``h`` floats into ``dst[i]``, its partials in the row's span of ``dst``."""
    for i in range(cal // h):
        total = h
        row = i * h
        s = src
        while total > 1:
            reps, tail = total // ONE_REPEAT_FLOAT_SIZE, total % ONE_REPEAT_FLOAT_SIZE
            blocks, block_tail = reps // MAX_REPEAT_TIMES, reps % MAX_REPEAT_TIMES
            for j in range(blocks):
                asc.whole_reduce_sum(dst[row + j * MAX_REPEAT_TIMES], s[row + j * MAX_REPEAT_FLOAT_SIZE],
                                     ONE_REPEAT_FLOAT_SIZE, MAX_REPEAT_TIMES, 1, 1, 8)
            asc.pipe_barrier(ctx, asc.PIPE_V)
            if block_tail > 0:
                d = dst[i] if total == ONE_REPEAT_FLOAT_SIZE else dst[row + blocks * MAX_REPEAT_TIMES]
                asc.whole_reduce_sum(d, s[row + blocks * MAX_REPEAT_FLOAT_SIZE], ONE_REPEAT_FLOAT_SIZE, block_tail,
                                     1, 1, 8)
                asc.pipe_barrier(ctx, asc.PIPE_V)
            if tail > 0:
                d = dst[i] if total < ONE_REPEAT_FLOAT_SIZE else dst[row + reps]
                asc.whole_reduce_sum(d, s[row + reps * ONE_REPEAT_FLOAT_SIZE], tail, 1, 1, 1, 8)
                asc.pipe_barrier(ctx, asc.PIPE_V)
            total = (total + ONE_REPEAT_FLOAT_SIZE - 1) // ONE_REPEAT_FLOAT_SIZE
            s = dst


@njit(cache=True)
def _do_one_div(ctx, dst, one, src, n):
    """DoOneDiv: dst = 1 / src over ``n`` floats, in counter mode: one block of ones, a Div re-reading it."""
    asc.set_mask_count(ctx)
    asc.set_vector_mask(ctx, 8)
    asc.duplicate(one, 1.0, PH, 1, 1, 8)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.set_vector_mask(ctx, n)
    asc.div(dst, one, src, PH, 1, asc.BinaryRepeatParams(1, 0, 1, 8, 0, 8))
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.set_mask_norm(ctx)


@njit(cache=True)
def _compute_pd_var(ctx, var, eps, st, t, tmp, x1, x2, cal, noh):
    """ComputePdVar: pd_var = Σ −0.5·x1·x2·(var + ε)^−1.5, the power by Mul, Mul, Sqrt and DoOneDiv."""
    h = t.h_length
    bsh, pvar = st[t.tmp_tensor_bsh_pos], st[t.pd_var_tensor_pos]
    asc.adds(tmp, var, eps, noh)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.mul(bsh, tmp, tmp, noh)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.mul(tmp, bsh, tmp, noh)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.sqrt(tmp, tmp, noh)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    _do_one_div(ctx, tmp, bsh, tmp, noh)
    _broadcast_last_dim(ctx, bsh, tmp, noh, h)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.mul(bsh, x2, bsh, cal)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.mul(bsh, x1, bsh, cal)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.muls(bsh, bsh, -0.5, cal)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    _reduce_sum(ctx, pvar, bsh, cal, h)
    asc.pipe_barrier(ctx, asc.PIPE_V)


@njit(cache=True)
def _compute_pd_mean(ctx, var, res, eps, st, t, tmp, x1, x2, cal, noh, back):
    """ComputePdMean: r = (var + ε)^−0.5; resForGamma = x2·r; x3 = x1·r; pd_mean = Σ −x3 + pd_var·(1/H)·Σ −2·x2
    (over the stored H)."""
    h = t.h_length
    bsh, pvar, pmean = st[t.tmp_tensor_bsh_pos], st[t.pd_var_tensor_pos], st[t.pd_mean_tensor_pos]
    x3 = st[t.x3_tensor_pos]
    asc.adds(tmp, var, eps, noh)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.sqrt(tmp, tmp, noh)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    _do_one_div(ctx, tmp, bsh, tmp, noh)
    _broadcast_last_dim(ctx, bsh, tmp, noh, h)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.mul(res, x2, bsh, cal)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.mul(x3, x1, bsh, cal)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.muls(bsh, x3, -1.0, cal)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    _reduce_sum(ctx, pmean, bsh, cal, h)
    asc.muls(bsh, x2, -2.0, cal)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    _reduce_sum(ctx, tmp, bsh, cal, h)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.muls(tmp, tmp, back, noh)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.mul(tmp, pvar, tmp, noh)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.add(pmean, pmean, tmp, noh)
    asc.pipe_barrier(ctx, asc.PIPE_V)


@njit(cache=True)
def _compute_pd_x(ctx, pd_x, st, t, x1, x2, cal, noh, back, back2):
    """ComputePdX: pd_x = x3 + pd_var·(2/H)·x2 + pd_mean·(1/H)."""
    h = t.h_length
    bsh, pvar, pmean = st[t.tmp_tensor_bsh_pos], st[t.pd_var_tensor_pos], st[t.pd_mean_tensor_pos]
    asc.muls(pvar, pvar, back2, noh)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    _broadcast_last_dim(ctx, bsh, pvar, noh, h)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.mul(x1, bsh, x2, cal)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.muls(pmean, pmean, back, noh)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    _broadcast_last_dim(ctx, bsh, pmean, noh, h)
    asc.add(x1, x1, bsh, cal)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.add(pd_x, x1, st[t.x3_tensor_pos], cal)
    asc.pipe_barrier(ctx, asc.PIPE_V)


@njit(cache=True)
def _compute_pd_x1_x2(ctx, dy, gamma, x, mean, st, t, x1, x2, cal, noh):
    """ComputePdX1 (x1 = dy·γ, row by row) and ComputePdX2 (x2 = x − μ, μ broadcast along H), fp32."""
    h = t.h_length
    for i in range(noh):
        asc.mul(x1[i * h], dy[i * h], gamma, h)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    bsh = st[t.tmp_tensor_bsh_pos]
    _broadcast_last_dim(ctx, bsh, mean, noh, h)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.sub(x2, x, bsh, cal)
    asc.pipe_barrier(ctx, asc.PIPE_V)


@njit(cache=True)
def _lng_process_float(ctx, dy, x, var, mean, gamma, pd_x, res, eps, st, t, cal, noh, reuse, back, back2):
    """ComputeProcess<float>: GetTmpTensor (tmpTensor is outputPdX; x1, x2 are dy and x with isReuseSource)."""
    x1 = dy if reuse else st[t.x1_tensor_pos]
    x2 = x if reuse else st[t.x2_tensor_pos]
    _compute_pd_x1_x2(ctx, dy, gamma, x, mean, st, t, x1, x2, cal, noh)
    _compute_pd_var(ctx, var, eps, st, t, pd_x, x1, x2, cal, noh)
    _compute_pd_mean(ctx, var, res, eps, st, t, pd_x, x1, x2, cal, noh, back)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    _compute_pd_x(ctx, pd_x, st, t, x1, x2, cal, noh, back, back2)
    if reuse:  # the caller's dy and x now hold the API's scratch
        _reused(dy, cal)
        _reused(x, cal)


@njit(cache=True)
def _lng_process_half(ctx, dy, x, var, mean, gamma, pd_x, res, eps, st, t, cal, noh, back, back2):
    """ComputeProcess<half>: the sources widened into tmpTensor1 / tmpTensor2, the float steps, pd_x (computed
    in tmpTensor) and resForGamma (in tmpTensor2) cast back with CAST_NONE."""
    h = t.h_length
    tmp, t1, t2 = st[t.tmp_tensor_pos], st[t.tmp_tensor1_pos], st[t.tmp_tensor2_pos]
    asc.cast(t1, dy, asc.CAST_NONE, cal)
    asc.cast(t2, gamma, asc.CAST_NONE, h)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    x1, x2 = st[t.x1_tensor_pos], st[t.x2_tensor_pos]
    for i in range(noh):  # ComputePdX1
        asc.mul(x1[i * h], t1[i * h], t2, h)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.cast(t1, x, asc.CAST_NONE, cal)
    asc.cast(t2, mean, asc.CAST_NONE, noh)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    bsh = st[t.tmp_tensor_bsh_pos]  # ComputePdX2
    _broadcast_last_dim(ctx, bsh, t2, noh, h)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.sub(x2, t1, bsh, cal)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.cast(t1, var, asc.CAST_NONE, noh)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    _compute_pd_var(ctx, t1, eps, st, t, tmp, x1, x2, cal, noh)
    _compute_pd_mean(ctx, t1, t2, eps, st, t, tmp, x1, x2, cal, noh, back)
    _compute_pd_x(ctx, tmp, st, t, x1, x2, cal, noh, back, back2)
    asc.cast(pd_x, tmp, asc.CAST_NONE, cal)
    asc.cast(res, t2, asc.CAST_NONE, cal)
    asc.pipe_barrier(ctx, asc.PIPE_V)


def layer_norm_grad(ctx, output_pd_x, res_for_gamma, input_dy, input_x, input_variance, input_mean, input_gamma,
                    shared_tmp_buffer, epsilon, tiling, is_reuse_source):  # type: ignore[no-untyped-def]
    """LayerNormGrad<T, isReuseSource>(outputPdX, resForGamma, inputDy, inputX, inputVariance, inputMean,
    inputGamma, sharedTmpBuffer, epsilon, tiling): [B, S, H] sources, [B, S] variance and mean, [H] gamma, all
    T; ``loop_num`` chunks of ``one_cal_size`` elements, then the tail. ``shared_tmp_buffer`` None: the
    prototype without it (PopStackBuffer)."""
    raise TypeError("LayerNormGrad is device code: call it from a kernel")


@overload(layer_norm_grad, jit_options=OVERLOAD_OPTIONS)
def _layer_norm_grad(ctx, output_pd_x, res_for_gamma, input_dy, input_x, input_variance, input_mean, input_gamma,
                     shared_tmp_buffer, epsilon, tiling, is_reuse_source):  # type: ignore[no-untyped-def]
    half = input_dy.dtype.dt.size == 2

    def impl(ctx, output_pd_x, res_for_gamma, input_dy, input_x, input_variance, input_mean, input_gamma,
             shared_tmp_buffer, epsilon, tiling, is_reuse_source):  # type: ignore[no-untyped-def]
        t = tiling
        tmp = tmp_buffer(ctx, shared_tmp_buffer)
        if not _tmp_ok(core_of(tmp), tmp, t.stack_buffer_size):
            return
        st = tmp.reinterpret_cast(asc.float32)
        eps = np.float32(epsilon)
        back = u32_as_f32(t.last_dim_value_back)  # 1/originalH and 2/originalH, stored as float bits
        back2 = u32_as_f32(t.last_dim_value_back_mul_two)
        off0 = 0
        off1 = 0
        for k in range(t.loop_num + (1 if t.tail_size != 0 else 0)):
            cal, noh = (t.one_cal_size, t.noh_cal_size) if k < t.loop_num else (t.tail_size, t.noh_tail_size)
            if half:
                _lng_process_half(ctx, input_dy[off0], input_x[off0], input_variance[off1], input_mean[off1],
                                  input_gamma, output_pd_x[off0], res_for_gamma[off0], eps, st, t, cal, noh, back,
                                  back2)
            else:
                _lng_process_float(ctx, input_dy[off0], input_x[off0], input_variance[off1], input_mean[off1],
                                   input_gamma, output_pd_x[off0], res_for_gamma[off0], eps, st, t, cal, noh,
                                   is_reuse_source, back, back2)
            off0 += t.one_cal_size
            off1 += t.noh_cal_size
    return impl


# ---------------------------------------------------------------------------------------------------------------
# LayerNormGradBeta


@njit(cache=True)
def _reduce_sum_first_n(ctx, dst, src, bs, h, clear):
    """ReduceSumFirstN<isClearDst>: dst (+)= Σ of ``bs`` rows of ``h`` floats, rows ``h`` apart, in counter mode;
    ``clear`` starts from row 0 (Adds 0) instead of dst's contents."""
    asc.set_vector_mask(ctx, h)
    start = 0
    if clear:
        asc.adds(dst, src, 0.0, PH, 1, asc.UnaryRepeatParams(1, 1, 8, 8))
        start = 1
        asc.pipe_barrier(ctx, asc.PIPE_V)
    for i in range(start, bs):
        asc.add(dst, src[i * h], dst, PH, 1, asc.BinaryRepeatParams(1, 1, 1, 8, 8, 8))
        asc.pipe_barrier(ctx, asc.PIPE_V)


@njit(cache=True)
def _beta_process_float(ctx, res, dy, pd_gamma, pd_beta, rtmp, bsh, bs, h, clear):
    """ComputeProcess (float): rtmp = dy·resForGamma, then the row sums into the outputs."""
    asc.set_vector_mask(ctx, bsh)
    asc.mul(rtmp, dy, res, PH, 1, asc.BinaryRepeatParams(1, 1, 1, 8, 8, 8))
    asc.pipe_barrier(ctx, asc.PIPE_V)
    _reduce_sum_first_n(ctx, pd_gamma, rtmp, bs, h, clear)
    _reduce_sum_first_n(ctx, pd_beta, dy, bs, h, clear)


@njit(cache=True)
def _beta_process_half(ctx, res, dy, pd_gamma, pd_beta, rtmp, gtmp, btmp, dytmp, bsh, bs, h, clear):
    """ComputeProcess (half): dy and resForGamma widened into the temporaries, the float step into
    gammaTemp / betaTemp, both cast back (CAST_NONE) into the outputs."""
    asc.set_vector_mask(ctx, bsh)
    asc.cast(dytmp, dy, asc.CAST_NONE, PH, 1, asc.UnaryRepeatParams(1, 1, 8, 4))
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.cast(rtmp, res, asc.CAST_NONE, PH, 1, asc.UnaryRepeatParams(1, 1, 8, 4))
    asc.pipe_barrier(ctx, asc.PIPE_V)
    _beta_process_float(ctx, rtmp, dytmp, gtmp, btmp, rtmp, bsh, bs, h, clear)
    asc.set_vector_mask(ctx, h)
    asc.cast(pd_gamma, gtmp, asc.CAST_NONE, PH, 1, asc.UnaryRepeatParams(1, 1, 4, 8))
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.cast(pd_beta, btmp, asc.CAST_NONE, PH, 1, asc.UnaryRepeatParams(1, 1, 4, 8))
    asc.pipe_barrier(ctx, asc.PIPE_V)


def layer_norm_grad_beta(ctx, output_pd_gamma, output_pd_beta, res_for_gamma, input_dy, shared_tmp_buffer, tiling,
                         is_reuse_source):  # type: ignore[no-untyped-def]
    """LayerNormGradBeta<T, isReuseSource>(outputPdGamma, outputPdBeta, resForGamma, inputDy, sharedTmpBuffer,
    tiling): pd_gamma = Σ_rows dy·resForGamma and pd_beta = Σ_rows dy over [B, S, H], chunk by chunk
    (``loop_round`` of ``one_cal_size`` elements, then the tail), rows ``original_h_length`` apart as the code
    walks them. ``shared_tmp_buffer`` None: the prototype without it (PopStackBuffer)."""
    raise TypeError("LayerNormGradBeta is device code: call it from a kernel")


@overload(layer_norm_grad_beta, jit_options=OVERLOAD_OPTIONS)
def _layer_norm_grad_beta(ctx, output_pd_gamma, output_pd_beta, res_for_gamma, input_dy, shared_tmp_buffer, tiling,
                          is_reuse_source):  # type: ignore[no-untyped-def]
    half = input_dy.dtype.dt.size == 2

    def impl(ctx, output_pd_gamma, output_pd_beta, res_for_gamma, input_dy, shared_tmp_buffer, tiling,
             is_reuse_source):  # type: ignore[no-untyped-def]
        t = tiling
        tmp = tmp_buffer(ctx, shared_tmp_buffer)
        if not _tmp_ok(core_of(tmp), tmp, 4 * t.stack_buffer_size):
            return
        st = tmp.reinterpret_cast(asc.float32)
        h = t.original_h_length
        gtmp, btmp, dytmp = st[t.gamma_temp_tensor_pos], st[t.beta_temp_tensor_pos], st[t.input_dy_tmp_tensor_pos]
        reuse = is_reuse_source and not half
        asc.set_mask_count(ctx)
        rounds = t.loop_round + (1 if t.input_tail_size > 0 else 0)
        for r in range(rounds):
            off = r * t.one_cal_size if r < t.loop_round else t.input_tail_pos
            bsh, bs = (t.bsh_cur_length, t.bs_cur_length) if r < t.loop_round else (t.input_tail_size,
                                                                                     t.bs_tail_size)
            res, dy = res_for_gamma[off], input_dy[off]
            if half:
                _beta_process_half(ctx, res, dy, output_pd_gamma, output_pd_beta, st[t.res_for_gamma_tmp_tensor_pos],
                                   gtmp, btmp, dytmp, bsh, bs, h, r == 0)
            else:
                rtmp = res if reuse else st[t.res_for_gamma_tmp_tensor_pos]
                _beta_process_float(ctx, res, dy, output_pd_gamma, output_pd_beta, rtmp, bsh, bs, h, r == 0)
                if reuse:
                    _reused(rtmp, bsh)
        asc.set_mask_norm(ctx)
        asc.set_vector_mask(ctx, np.uint64(0xFFFFFFFFFFFFFFFF), np.uint64(0xFFFFFFFFFFFFFFFF))  # ResetMask
    return impl
