"""aclnnRmsNorm: the A2 kernels of ops-nn's ``norm/rms_norm/op_kernel`` (``rms_norm.cpp`` dispatches on the tiling
key) on tilesim's programming model, and the op API.

y = x · rstd · gamma, rstd = 1 / sqrt(mean(x²) + ε) over the columns gamma covers, computed in fp32; y in x's
dtype (fp16 rounded with CAST_NONE, bf16 with CAST_RINT: both to nearest even), rstd fp32. Each core takes rows
``[GetBlockIdx() · block_factor, +rows)``, the last core ``last_block_factor``. The queues hold one buffer each
(BUFFER_NUM = 1, depth 1); every copy is DataCopyPad of whole rows (``DataCopyCustom`` on A2: DataCopyParams with
blockLen in bytes, no padding asked), so a row lands on a 32 B boundary. A ``PipeBarrier<PIPE_V>`` follows each
vector step as ops-nn writes them, and the scalar work has ops-nn's own ``SetFlag/WaitFlag<V_S>`` and ``<S_V>``
(event ids from ``FetchEventID``): the kernels are clean in checked mode with BiSheng's auto-sync off as well as
on. The modes:

- NORMAL (``KernelRmsNorm``, ``rms_norm.h``): gamma copied in once; per row CopyIn, [Cast to fp32], Mul (x²),
  ``ReduceSumHalfInterval`` (the tail past the largest power of two folded onto the head with Add, halved with
  Add down to 64 lanes, the mask set, WholeReduceSum, V_S, GetValue), the scalar ``1 / sqrt(sum · (1/numCol) +
  ε)``, SetValue into the rstd batch, S_V, Muls, Mul gamma (b16: gamma cast to fp32 each row, or fp32 gamma as
  is), [Cast], CopyOut; each batch of ``row_factor`` rows' rstd copied out after it.
- SPLIT_D (``KernelRmsNormSplitD``, ``rms_norm_split_d.h``, the A2 ``ComputeFormerPrecision`` path), for rows
  longer than a UB tile: per row of a 64-row batch the column tiles' squares summed by ``ReduceSumHalfInterval``
  into a slot each of ``sum_buf`` and, 64 tiles at a time, added up in fp32 on the scalar unit (GetValue after
  V_S); SetValue; then for the batch Muls (1/numCol), Adds ε, Sqrt, Duplicate 1, Div; then per column tile (the
  last, shorter one first) gamma in and per row x in again, GetValue of its rstd, [Cast], Muls, Mul gamma,
  [Cast], out.
- MERGE_N (``KernelRmsNormMergeN``, ``rms_norm_merge_n.h``), rows of at most 2000 columns on 910B: gamma in once
  (b16 gamma into ``sqx_buf`` with a hand-written MTE2_V sync, cast to fp32 into its queue); per pass of up to
  ``row_factor`` rows one DataCopyPad of all of them, [Cast], Mul, ``ReduceSumMultiN`` (Duplicate 0, 64-lane Adds
  with a row per repeat, repeat stride numColAlign / 8, a masked Add for the tail, WholeReduceSum a row per
  repeat), Muls (1/numCol), Adds ε, Sqrt, Duplicate 1, Div, rstd out; then ``Brcb`` of rstd to a block per row and
  level-0 Muls by it and by gamma (a zero repeat stride re-reads gamma for every row), 64 lanes and the tail lanes
  at a time; [Cast]; out.
- SINGLE_ROW (``KernelRmsNormSingleRow``, ``rms_norm_single_row.h``), mixed dtypes with rows too long for
  NORMAL: x lands in a buffer of fp32 width, is widened to ``x_buf_fp32`` and squared in its own buffer; the rest
  as NORMAL with fp32 gamma.

Where this differs from ops-nn on purpose:

- MERGE_N: ops-nn takes the Brcb path only with ``is_performance``; otherwise it calls the high-level
  ``BroadCast<float, 2, 0>`` on gamma (once) and ``BroadCast<float, 2, 1>`` on rstd and then count-form Muls. On A2
  BroadCast along the rows is Brcb and counter-mode ``Copy`` (``broadcast_v220_impl.h``), down the columns
  Duplicate and a strided uint16 ``Or`` with zeros (``broadcast_common_utils.h``), and the machine has no Or, so
  every MERGE_N pass here takes the Brcb path: the same products in the same order, bit for bit (fp32 x, which has
  no fp32 copy of x, multiplies x's queue buffer into ``sqx`` and Brcb's rstd sits in ``tmp_buf``).
- MERGE_N: ops-nn passes the row count as Brcb's repeatTime, but a Brcb repeat takes 8 source elements: it reads
  8x the rows' rstd (past the rstd buffer) and writes 8x the blocks (past ``sqx_buf`` when numColAlign < 64),
  harmless on the NPU as nothing reads them. Here repeatTime is ceil(rows / 8), the repeats that cover the rows.
- MERGE_N: ops-nn reads rstdLocal (Brcb, or BroadCast) after CopyOutRstd freed it (nothing reallocates it before
  the next pass); here its FreeTensor comes after the Brcb, so checked mode's use-after-free check stays clean.
- A buffer ops-nn allocates only for b16 x (``x_fp32_buf``) is placed with 0 bytes for fp32 x, so that each
  kernel's buffer ids are fixed.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba.extending import overload
from tilesim.tiling.common import FP32, dtype_name
from tilesim.tiling.rms_norm import (
    MODE_MERGE_N,
    MODE_NORMAL,
    MODE_SINGLE_ROW,
    MODE_SPLIT_D,
    RmsNormTiling,
    check_args,
    check_tiling,
    out_shapes,
    ub_plan,
)
from tilesim.tiling.rms_norm import rms_norm as make_tiling

from tilesim import machine as asc  # AscendC::
from tilesim.errors import tiling_error
from tilesim.interop import accepts_torch
from tilesim.jit import OVERLOAD_OPTIONS, njit
from tilesim.runtime.host_threads import workspace
from tilesim.runtime.launcher import kernel, launch
from tilesim.runtime.report import RunReport
from tilesim.soc import DEFAULT_SOC, SocSpec, get_soc

from .common import outputs
from .device import (
    MAX_REPEAT,
    NUM_PER_BLK_FP32,
    NUM_PER_REP_FP32,
    reduce_sum_half_interval,
    reduce_sum_half_interval_to,
    reduce_sum_multi_n,
    y_round_mode,
)

GM_NAMES = ["x", "gamma", "y", "rstd"]
BRCB_ROWS = 240  # doPerformanceRstd: rows per Brcb call


# ---------------------------------------------------------------------------------------------------------------
# rms_norm_base.h


@njit(cache=True)
def _copy_in(dst, src, count):
    """DataCopyCustom, GM to UB on A2: ``count`` elements of one row by DataCopyPad (DataCopyPadParams{})."""
    asc.data_copy_pad(dst, src, asc.DataCopyParams(1, count * asc.size_of(src.dtype), 0, 0),
                      asc.DataCopyPadExtParams(False, 0, 0, 0))


@njit(cache=True)
def _copy_out(dst, src, count):
    """DataCopyCustom, UB to GM on A2: exactly ``count`` elements by DataCopyPad."""
    asc.data_copy_pad(dst, src, asc.DataCopyParams(1, count * asc.size_of(dst.dtype), 0, 0))


@njit(cache=True)
def _rstd_of_sums(ctx, rstd_local, ones, num, avg_factor, epsilon):
    """rstd = 1 / sqrt(sum · avg + ε) by vector instructions (SPLIT_D's ComputeRstd, MERGE_N's Compute): Muls,
    Adds, Sqrt, Duplicate 1 into ``ones``, Div."""
    asc.muls(rstd_local, rstd_local, avg_factor, num)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.adds(rstd_local, rstd_local, epsilon, num)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.sqrt(rstd_local, rstd_local, num)
    asc.duplicate(ones, 1.0, num)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.div(rstd_local, ones, rstd_local, num)
    asc.pipe_barrier(ctx, asc.PIPE_V)


@njit(cache=True)
def _scalar_rstd(sum_sq, avg_factor, epsilon):
    """The scalar unit's ``1 / sqrt(reduceOut * avg_factor + epsilon)``, in float."""
    return np.float32(1.0) / np.sqrt(sum_sq * np.float32(avg_factor) + np.float32(epsilon))


@njit(cache=True)
def _copy_out_rstd(out_queue_rstd, rstd_gm, num):
    """CopyOutRstd on A2: DeQue, DataCopyPad of ``num`` floats, FreeTensor."""
    r = out_queue_rstd.deque(asc.float32)
    _copy_out(rstd_gm, r, num)
    out_queue_rstd.free_tensor(r)


# ---------------------------------------------------------------------------------------------------------------
# NORMAL: rms_norm.h


def _normal_square(ctx, in_queue_x, x_local, x32, sqx, n):  # type: ignore[no-untyped-def]
    """Compute's step 1: sqx = x² (fp32 x in its queue buffer; b16 x cast to the fp32 copy first, its queue
    buffer freed)."""


@overload(_normal_square, jit_options=OVERLOAD_OPTIONS)
def _normal_square_impl(ctx, in_queue_x, x_local, x32, sqx, n):  # type: ignore[no-untyped-def]
    if x_local.dtype.dt.size == 4:
        def fp32(ctx, in_queue_x, x_local, x32, sqx, n):  # type: ignore[no-untyped-def]
            asc.mul(sqx, x_local, x_local, n)
        return fp32

    def b16(ctx, in_queue_x, x_local, x32, sqx, n):  # type: ignore[no-untyped-def]
        asc.cast(x32, x_local, asc.CAST_NONE, n)
        asc.pipe_barrier(ctx, asc.PIPE_V)
        in_queue_x.free_tensor(x_local)
        asc.mul(sqx, x32, x32, n)
    return b16


def _normal_scale(in_queue_x, x_local, x32, sqx, rstd_value, n):  # type: ignore[no-untyped-def]
    """Compute's step 3: sqx = x · rstd (fp32 x from its queue buffer, then freed; b16 from the fp32 copy)."""


@overload(_normal_scale, jit_options=OVERLOAD_OPTIONS)
def _normal_scale_impl(in_queue_x, x_local, x32, sqx, rstd_value, n):  # type: ignore[no-untyped-def]
    if x_local.dtype.dt.size == 4:
        def fp32(in_queue_x, x_local, x32, sqx, rstd_value, n):  # type: ignore[no-untyped-def]
            asc.muls(sqx, x_local, rstd_value, n)
            in_queue_x.free_tensor(x_local)
        return fp32
    return lambda in_queue_x, x_local, x32, sqx, rstd_value, n: asc.muls(sqx, x32, rstd_value, n)


def _normal_mul_gamma_cast(ctx, out_queue_y, sqx, x32, gamma_local, n, dtype):  # type: ignore[no-untyped-def]
    """ComputeMulGammaCast: y = sqx · gamma (fp32 x); b16: sqx · gamma in fp32 (b16 gamma cast into the fp32 copy
    of x first; fp32 gamma as is), then Cast to T; EnQue y."""


@overload(_normal_mul_gamma_cast, jit_options=OVERLOAD_OPTIONS)
def _normal_mul_gamma_cast_impl(ctx, out_queue_y, sqx, x32, gamma_local, n, dtype):  # type: ignore[no-untyped-def]
    if dtype.dt.size == 4:
        def fp32(ctx, out_queue_y, sqx, x32, gamma_local, n, dtype):  # type: ignore[no-untyped-def]
            y_local = out_queue_y.alloc_tensor(dtype)
            asc.mul(y_local, sqx, gamma_local, n)
            out_queue_y.enque(y_local)
        return fp32

    def b16(ctx, out_queue_y, sqx, x32, gamma_local, n, dtype):  # type: ignore[no-untyped-def]
        y_local = out_queue_y.alloc_tensor(dtype)
        _mul_gamma(ctx, x32, sqx, gamma_local, n)
        asc.pipe_barrier(ctx, asc.PIPE_V)
        asc.cast(y_local, sqx, y_round_mode(dtype), n)
        out_queue_y.enque(y_local)
    return b16


@njit(cache=True)
def _normal_compute(ctx, pipe, t, i_i, in_queue_x, out_queue_y, x_fp32_buf, sqx_buf, gamma_local, rstd_local,
                    dtype):
    """KernelRmsNorm::Compute for row ``i_i`` of the batch."""
    n = t.num_col
    ev_vs = pipe.fetch_event_id(asc.HardEvent.V_S)
    ev_sv = pipe.fetch_event_id(asc.HardEvent.S_V)
    x_local = in_queue_x.deque(dtype)
    sqx = sqx_buf.get(asc.float32)
    x32 = x_fp32_buf.get(asc.float32)
    _normal_square(ctx, in_queue_x, x_local, x32, sqx, n)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    reduce_out = reduce_sum_half_interval(ctx, pipe, sqx, n)
    asc.set_flag(ctx, asc.HardEvent.V_S, ev_vs)
    asc.wait_flag(ctx, asc.HardEvent.V_S, ev_vs)
    rstd_value = _scalar_rstd(reduce_out, np.float32(1.0) / np.float32(n), t.epsilon)
    rstd_local.set_value(i_i, rstd_value)
    asc.set_flag(ctx, asc.HardEvent.S_V, ev_sv)
    asc.wait_flag(ctx, asc.HardEvent.S_V, ev_sv)
    _normal_scale(in_queue_x, x_local, x32, sqx, rstd_value, n)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    _normal_mul_gamma_cast(ctx, out_queue_y, sqx, x32, gamma_local, n, dtype)
    asc.pipe_barrier(ctx, asc.PIPE_V)


@kernel
def rms_norm_normal_kernel(ctx, t, x, gamma, y, rstd):
    """``KernelRmsNorm<T, T_GAMMA>`` (tiling key 0): Init, then Process (gamma once, rows in batches of
    ``row_factor``, each batch's rstd copied out after its rows)."""
    sz, gsz = asc.size_of(x.dtype), asc.size_of(gamma.dtype)
    idx, blocks = asc.get_block_idx(ctx), asc.get_block_num(ctx)
    row_work = t.block_factor if idx < blocks - 1 else t.num_row - (blocks - 1) * t.block_factor
    x_gm, y_gm = x[idx * t.block_factor * t.num_col], y[idx * t.block_factor * t.num_col]
    rstd_gm = rstd[idx * t.block_factor]
    pipe = asc.TPipe(ctx)
    in_queue_x = pipe.init_buffer(asc.TQue(asc.VECIN, 1), 1, t.ub_factor * sz)
    in_queue_gamma = pipe.init_buffer(asc.TQue(asc.VECIN, 1), 1, t.ub_factor * gsz)
    out_queue_y = pipe.init_buffer(asc.TQue(asc.VECOUT, 1), 1, t.ub_factor * sz)
    out_queue_rstd = pipe.init_buffer(asc.TQue(asc.VECOUT, 1), 1, t.row_factor * 4)
    x_fp32_buf = pipe.init_buffer(asc.TBuf(asc.VECCALC), t.ub_factor * 4 if sz == 2 else 0)
    sqx_buf = pipe.init_buffer(asc.TBuf(asc.VECCALC), t.ub_factor * 4)
    reduce_fp32_buf = pipe.init_buffer(asc.TBuf(asc.VECCALC), NUM_PER_REP_FP32 * 4)  # noqa: F841  (ops-nn's)
    g = in_queue_gamma.alloc_tensor(gamma.dtype)  # CopyInGamma
    _copy_in(g, gamma, t.num_col)
    in_queue_gamma.enque(g)
    gamma_local = in_queue_gamma.deque(gamma.dtype)
    i_o_max = (row_work + t.row_factor - 1) // t.row_factor
    row_tail = row_work - (i_o_max - 1) * t.row_factor
    for i_o in range(i_o_max):  # SubProcess
        calc_row_num = t.row_factor if i_o < i_o_max - 1 else row_tail
        rstd_local = out_queue_rstd.alloc_tensor(asc.float32)
        for i_i in range(calc_row_num):
            gm_bias = (i_o * t.row_factor + i_i) * t.num_col
            x_local = in_queue_x.alloc_tensor(x.dtype)  # CopyIn
            _copy_in(x_local, x_gm[gm_bias], t.num_col)
            in_queue_x.enque(x_local)
            _normal_compute(ctx, pipe, t, i_i, in_queue_x, out_queue_y, x_fp32_buf, sqx_buf, gamma_local,
                            rstd_local, x.dtype)
            y_local = out_queue_y.deque(x.dtype)  # CopyOutY
            _copy_out(y_gm[gm_bias], y_local, t.num_col)
            out_queue_y.free_tensor(y_local)
        out_queue_rstd.enque(rstd_local)
        _copy_out_rstd(out_queue_rstd, rstd_gm[i_o * t.row_factor], calc_row_num)
    in_queue_gamma.free_tensor(gamma_local)


# ---------------------------------------------------------------------------------------------------------------
# SPLIT_D: rms_norm_split_d.h


@njit(cache=True)
def _split_d_copy_in(in_queue_x, x_gm, num_col, ub_factor, row, j, num):
    """CopyIn: ``num`` columns of column tile ``j`` of row ``row``."""
    x_local = in_queue_x.alloc_tensor(x_gm.dtype)
    _copy_in(x_local, x_gm[row * num_col + j * ub_factor], num)
    in_queue_x.enque(x_local)


def _split_d_square(ctx, in_queue_x, x_local, x_fp32_buf, sqx, num):  # type: ignore[no-untyped-def]
    """ComputeSumPrecision's first step: sqx = x² ([Cast], the queue buffer freed)."""


@overload(_split_d_square, jit_options=OVERLOAD_OPTIONS)
def _split_d_square_impl(ctx, in_queue_x, x_local, x_fp32_buf, sqx, num):  # type: ignore[no-untyped-def]
    if x_local.dtype.dt.size == 4:
        def fp32(ctx, in_queue_x, x_local, x_fp32_buf, sqx, num):  # type: ignore[no-untyped-def]
            asc.mul(sqx, x_local, x_local, num)
            in_queue_x.free_tensor(x_local)
        return fp32

    def b16(ctx, in_queue_x, x_local, x_fp32_buf, sqx, num):  # type: ignore[no-untyped-def]
        x32 = x_fp32_buf.get(asc.float32)
        asc.cast(x32, x_local, asc.CAST_NONE, num)
        in_queue_x.free_tensor(x_local)
        asc.pipe_barrier(ctx, asc.PIPE_V)
        asc.mul(sqx, x32, x32, num)
    return b16


@njit(cache=True)
def _split_d_sum(ctx, in_queue_x, x_fp32_buf, sqx_buf, sum_local, num, dtype):
    """ComputeSumPrecision: [Cast], Mul (x²), ReduceSumHalfInterval into ``sum_local[0]``."""
    x_local = in_queue_x.deque(dtype)
    sqx = sqx_buf.get(asc.float32)
    _split_d_square(ctx, in_queue_x, x_local, x_fp32_buf, sqx, num)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    reduce_sum_half_interval_to(ctx, sum_local, sqx, num)
    asc.pipe_barrier(ctx, asc.PIPE_V)


@njit(cache=True)
def _split_d_former(ctx, pipe, t, i_outer, calc_row_num, j_tail, j_outer_max, j_inner_tail, in_queue_x, x_gm,
                    x_fp32_buf, sqx_buf, sum_buf, rstd_local):
    """ComputeFormerPrecision: each row's sum of squares, tile sums added on the scalar unit 64 tiles at a time,
    SetValue into rstd_local."""
    ev_vs = pipe.fetch_event_id(asc.HardEvent.V_S)
    ev_sv = pipe.fetch_event_id(asc.HardEvent.S_V)
    sum_local = sum_buf.get(asc.float32)
    uf, dtype = t.ub_factor, x_gm.dtype
    for i_inner in range(calc_row_num):
        reduce_out = np.float32(0.0)
        row = i_outer * NUM_PER_REP_FP32 + i_inner
        for j_outer in range(j_outer_max - 1):  # 1. whole groups of 64 column tiles
            for j_inner in range(NUM_PER_REP_FP32):
                _split_d_copy_in(in_queue_x, x_gm, t.num_col, uf, row, j_outer * NUM_PER_REP_FP32 + j_inner, uf)
                _split_d_sum(ctx, in_queue_x, x_fp32_buf, sqx_buf, sum_local[j_inner * NUM_PER_BLK_FP32], uf, dtype)
            asc.set_flag(ctx, asc.HardEvent.V_S, ev_vs)
            asc.wait_flag(ctx, asc.HardEvent.V_S, ev_vs)
            for j_inner in range(NUM_PER_REP_FP32):
                reduce_out += sum_local.get_value(j_inner * NUM_PER_BLK_FP32)
            asc.set_flag(ctx, asc.HardEvent.S_V, ev_sv)
            asc.wait_flag(ctx, asc.HardEvent.S_V, ev_sv)
        offset = (j_outer_max - 1) * NUM_PER_REP_FP32
        for j_inner in range(j_inner_tail - 1):  # 2. the last group's whole tiles
            _split_d_copy_in(in_queue_x, x_gm, t.num_col, uf, row, offset + j_inner, uf)
            _split_d_sum(ctx, in_queue_x, x_fp32_buf, sqx_buf, sum_local[j_inner * NUM_PER_BLK_FP32], uf, dtype)
        asc.set_flag(ctx, asc.HardEvent.V_S, ev_vs)
        asc.wait_flag(ctx, asc.HardEvent.V_S, ev_vs)
        for j_inner in range(j_inner_tail - 1):
            reduce_out += sum_local.get_value(j_inner * NUM_PER_BLK_FP32)
        asc.set_flag(ctx, asc.HardEvent.S_V, ev_sv)
        asc.wait_flag(ctx, asc.HardEvent.S_V, ev_sv)
        _split_d_copy_in(in_queue_x, x_gm, t.num_col, uf, row, offset + j_inner_tail - 1, j_tail)  # 3. the last
        _split_d_sum(ctx, in_queue_x, x_fp32_buf, sqx_buf, sum_local, j_tail, dtype)
        asc.set_flag(ctx, asc.HardEvent.V_S, ev_vs)
        asc.wait_flag(ctx, asc.HardEvent.V_S, ev_vs)
        reduce_out += sum_local.get_value(0)
        rstd_local.set_value(i_inner, reduce_out)
        asc.set_flag(ctx, asc.HardEvent.S_V, ev_sv)
        asc.wait_flag(ctx, asc.HardEvent.S_V, ev_sv)


def _split_d_y(ctx, x_local, x_fp32_buf, y_local, sqx, gamma_local, rstd_value, num):  # type: ignore[no-untyped-def]
    """ComputeY's arithmetic: y = x · rstd · gamma for one column tile (b16: in fp32, b16 gamma cast into the fp32
    copy of x, then Cast to T)."""


@overload(_split_d_y, jit_options=OVERLOAD_OPTIONS)
def _split_d_y_impl(ctx, x_local, x_fp32_buf, y_local, sqx, gamma_local, rstd_value, num):  # type: ignore[no-untyped-def]
    if x_local.dtype.dt.size == 4:
        def fp32(ctx, x_local, x_fp32_buf, y_local, sqx, gamma_local, rstd_value, num):  # type: ignore[no-untyped-def]
            asc.muls(sqx, x_local, rstd_value, num)
            asc.pipe_barrier(ctx, asc.PIPE_V)
            asc.mul(y_local, sqx, gamma_local, num)
        return fp32

    def b16(ctx, x_local, x_fp32_buf, y_local, sqx, gamma_local, rstd_value, num):  # type: ignore[no-untyped-def]
        asc.cast(sqx, x_local, asc.CAST_NONE, num)
        asc.pipe_barrier(ctx, asc.PIPE_V)
        asc.muls(sqx, sqx, rstd_value, num)
        asc.pipe_barrier(ctx, asc.PIPE_V)
        _mul_gamma(ctx, x_fp32_buf.get(asc.float32), sqx, gamma_local, num)
        asc.pipe_barrier(ctx, asc.PIPE_V)
        asc.cast(y_local, sqx, y_round_mode(y_local.dtype), num)
    return b16


def _mul_gamma(ctx, x32, sqx, gamma_local, num):  # type: ignore[no-untyped-def]
    """sqx ·= gamma: fp32 gamma as is (IS_MIX_DTYPE), b16 gamma cast into ``x32`` (the fp32 copy of x, dead by
    then) first."""


@overload(_mul_gamma, jit_options=OVERLOAD_OPTIONS)
def _mul_gamma_impl(ctx, x32, sqx, gamma_local, num):  # type: ignore[no-untyped-def]
    if gamma_local.dtype.dt.size == 4:
        return lambda ctx, x32, sqx, gamma_local, num: asc.mul(sqx, sqx, gamma_local, num)

    def b16(ctx, x32, sqx, gamma_local, num):  # type: ignore[no-untyped-def]
        asc.cast(x32, gamma_local, asc.CAST_NONE, num)
        asc.pipe_barrier(ctx, asc.PIPE_V)
        asc.mul(sqx, sqx, x32, num)
    return b16


@njit(cache=True)
def _split_d_compute_y(ctx, pipe, i_i, in_queue_x, out_queue_y, x_fp32_buf, sqx_buf, gamma_local, rstd_local, num,
                       dtype):
    """ComputeY: the row's rstd by GetValue, y = x · rstd · gamma for one column tile."""
    ev_vs = pipe.fetch_event_id(asc.HardEvent.V_S)
    ev_sv = pipe.fetch_event_id(asc.HardEvent.S_V)
    x_local = in_queue_x.deque(dtype)
    sqx = sqx_buf.get(asc.float32)
    asc.set_flag(ctx, asc.HardEvent.V_S, ev_vs)
    asc.wait_flag(ctx, asc.HardEvent.V_S, ev_vs)
    rstd_value = rstd_local.get_value(i_i)
    asc.set_flag(ctx, asc.HardEvent.S_V, ev_sv)
    asc.wait_flag(ctx, asc.HardEvent.S_V, ev_sv)
    y_local = out_queue_y.alloc_tensor(dtype)
    _split_d_y(ctx, x_local, x_fp32_buf, y_local, sqx, gamma_local, rstd_value, num)
    in_queue_x.free_tensor(x_local)
    out_queue_y.enque(y_local)
    asc.pipe_barrier(ctx, asc.PIPE_V)


@njit(cache=True)
def _split_d_latter(ctx, pipe, t, i_o, calc_row_num, j, num, in_queue_gamma, in_queue_x, out_queue_y, x_fp32_buf,
                    sqx_buf, rstd_local, x_gm, y_gm, gamma):
    """ComputeLatter: column tile ``j`` (``num`` columns) of gamma, then of every row of the batch."""
    g = in_queue_gamma.alloc_tensor(gamma.dtype)  # CopyInGamma
    _copy_in(g, gamma[j * t.ub_factor], num)
    in_queue_gamma.enque(g)
    gamma_local = in_queue_gamma.deque(gamma.dtype)
    for i_i in range(calc_row_num):
        row = i_o * NUM_PER_REP_FP32 + i_i
        _split_d_copy_in(in_queue_x, x_gm, t.num_col, t.ub_factor, row, j, num)
        _split_d_compute_y(ctx, pipe, i_i, in_queue_x, out_queue_y, x_fp32_buf, sqx_buf, gamma_local, rstd_local,
                           num, x_gm.dtype)
        y_local = out_queue_y.deque(x_gm.dtype)  # CopyOutY
        _copy_out(y_gm[row * t.num_col + j * t.ub_factor], y_local, num)
        out_queue_y.free_tensor(y_local)
    in_queue_gamma.free_tensor(gamma_local)


@kernel
def rms_norm_split_d_kernel(ctx, t, x, gamma, y, rstd):
    """``KernelRmsNormSplitD<T, T_GAMMA>`` (tiling key 1): Init, then Process (batches of 64 rows: the sums,
    rstd, then y tile by tile, the last tile first)."""
    sz, gsz = asc.size_of(x.dtype), asc.size_of(gamma.dtype)
    idx, blocks = asc.get_block_idx(ctx), asc.get_block_num(ctx)
    row_work = t.block_factor if idx < blocks - 1 else t.num_row - (blocks - 1) * t.block_factor
    x_gm, y_gm = x[idx * t.block_factor * t.num_col], y[idx * t.block_factor * t.num_col]
    rstd_gm = rstd[idx * t.block_factor]
    row_factor = NUM_PER_REP_FP32
    pipe = asc.TPipe(ctx)
    in_queue_gamma = pipe.init_buffer(asc.TQue(asc.VECIN, 1), 1, t.ub_factor * gsz)
    in_queue_x = pipe.init_buffer(asc.TQue(asc.VECIN, 1), 1, t.ub_factor * sz)
    out_queue_rstd = pipe.init_buffer(asc.TQue(asc.VECOUT, 1), 1, row_factor * 4)
    out_queue_y = pipe.init_buffer(asc.TQue(asc.VECOUT, 1), 1, t.ub_factor * sz)
    x_fp32_buf = pipe.init_buffer(asc.TBuf(asc.VECCALC), t.ub_factor * 4 if sz == 2 else 0)
    sum_buf = pipe.init_buffer(asc.TBuf(asc.VECCALC), row_factor * NUM_PER_BLK_FP32 * 4)
    sqx_buf = pipe.init_buffer(asc.TBuf(asc.VECCALC), t.ub_factor * 4)
    reduce_fp32_buf = pipe.init_buffer(asc.TBuf(asc.VECCALC), NUM_PER_REP_FP32 * 4)
    i_outer_max = (row_work + row_factor - 1) // row_factor
    row_tail = row_work - (i_outer_max - 1) * row_factor
    j_max = (t.num_col + t.ub_factor - 1) // t.ub_factor
    j_tail = t.num_col - (j_max - 1) * t.ub_factor
    j_factor = t.ub_factor * row_factor
    j_outer_max = (t.num_col + j_factor - 1) // j_factor
    j_outer_tail = t.num_col - (j_outer_max - 1) * j_factor
    j_inner_max = (j_outer_tail + t.ub_factor - 1) // t.ub_factor
    for i_outer in range(i_outer_max):  # SubProcess
        calc_row_num = row_factor if i_outer < i_outer_max - 1 else row_tail
        rstd_local = out_queue_rstd.alloc_tensor(asc.float32)
        asc.duplicate(rstd_local, 0.0, (calc_row_num + NUM_PER_BLK_FP32 - 1) // NUM_PER_BLK_FP32 * NUM_PER_BLK_FP32)
        asc.pipe_barrier(ctx, asc.PIPE_V)
        _split_d_former(ctx, pipe, t, i_outer, calc_row_num, j_tail, j_outer_max, j_inner_max, in_queue_x, x_gm,
                        x_fp32_buf, sqx_buf, sum_buf, rstd_local)
        _rstd_of_sums(ctx, rstd_local, reduce_fp32_buf.get(asc.float32), calc_row_num, t.avg_factor, t.epsilon)
        _split_d_latter(ctx, pipe, t, i_outer, calc_row_num, j_max - 1, j_tail, in_queue_gamma, in_queue_x,
                        out_queue_y, x_fp32_buf, sqx_buf, rstd_local, x_gm, y_gm, gamma)
        for j in range(j_max - 1):
            _split_d_latter(ctx, pipe, t, i_outer, calc_row_num, j, t.ub_factor, in_queue_gamma, in_queue_x,
                            out_queue_y, x_fp32_buf, sqx_buf, rstd_local, x_gm, y_gm, gamma)
        out_queue_rstd.enque(rstd_local)
        _copy_out_rstd(out_queue_rstd, rstd_gm[i_outer * row_factor], calc_row_num)


# ---------------------------------------------------------------------------------------------------------------
# MERGE_N: rms_norm_merge_n.h


@njit(cache=True)
def _brcb_rows(ctx, dst, src, rows):
    """doPerformanceRstd: ``src[r]`` to the 8 floats of block r of ``dst``, 240 rows a Brcb (ceil(rows / 8)
    repeats: see the module's notes)."""
    loops = rows // BRCB_ROWS
    tail = rows - loops * BRCB_ROWS
    for r in range(loops):
        asc.brcb(dst[r * BRCB_ROWS * NUM_PER_BLK_FP32], src[r * BRCB_ROWS], BRCB_ROWS // NUM_PER_BLK_FP32,
                 asc.BrcbRepeatParams(1, NUM_PER_BLK_FP32))
        asc.pipe_barrier(ctx, asc.PIPE_V)
    if tail > 0:
        asc.brcb(dst[loops * BRCB_ROWS * NUM_PER_BLK_FP32], src[loops * BRCB_ROWS],
                 (tail + NUM_PER_BLK_FP32 - 1) // NUM_PER_BLK_FP32, asc.BrcbRepeatParams(1, NUM_PER_BLK_FP32))
        asc.pipe_barrier(ctx, asc.PIPE_V)


@njit(cache=True)
def _mul_repeat(ctx, t, dst, src1, src2, rows, is_rstd):
    """mulRepeat: ``rows`` rows (a repeat each, numColAlign / 8 blocks apart) of src1 times src2, 64 lanes and
    then the tail lanes at a time: src2 a block per row (rstd from Brcb: block stride 0, repeat stride 1) or one row
    for every row (gamma: repeat stride 0)."""
    drs = t.dst_rep_stride
    if is_rstd:
        params = asc.BinaryRepeatParams(1, 1, 0, drs, drs, 1)
    else:
        params = asc.BinaryRepeatParams(1, 1, 1, drs, drs, 0)
    for m in range(t.mul_loop):
        asc.mul(dst[m * NUM_PER_REP_FP32], src1[m * NUM_PER_REP_FP32], src2 if is_rstd else src2[m * NUM_PER_REP_FP32],
                NUM_PER_REP_FP32, rows, params)
        asc.pipe_barrier(ctx, asc.PIPE_V)
    if t.mul_tail > 0:
        o = t.mul_loop * NUM_PER_REP_FP32
        asc.mul(dst[o], src1[o], src2 if is_rstd else src2[o], t.mul_tail, rows, params)
        asc.pipe_barrier(ctx, asc.PIPE_V)


@njit(cache=True)
def _repeat_by_row(ctx, t, dst, src1, src2, rows, is_rstd):
    """repeatByRow: :func:`_mul_repeat` 255 rows at a time."""
    loops = rows // MAX_REPEAT
    tail = rows - loops * MAX_REPEAT
    for r in range(loops):
        o2 = r * MAX_REPEAT * NUM_PER_BLK_FP32 if is_rstd else 0
        o1 = r * MAX_REPEAT * t.num_col_align
        _mul_repeat(ctx, t, dst[o1], src1[o1], src2[o2], MAX_REPEAT, is_rstd)
    if tail > 0:
        o2 = loops * MAX_REPEAT * NUM_PER_BLK_FP32 if is_rstd else 0
        o1 = loops * MAX_REPEAT * t.num_col_align
        _mul_repeat(ctx, t, dst[o1], src1[o1], src2[o2], tail, is_rstd)


def _merge_n_square(ctx, in_queue_x, x_local, x32, sqx, en):  # type: ignore[no-untyped-def]
    """Compute's step 1: sqx = x² over the pass (b16: Cast to the fp32 copy, the queue buffer freed, Mul)."""


@overload(_merge_n_square, jit_options=OVERLOAD_OPTIONS)
def _merge_n_square_impl(ctx, in_queue_x, x_local, x32, sqx, en):  # type: ignore[no-untyped-def]
    if x_local.dtype.dt.size == 4:
        return lambda ctx, in_queue_x, x_local, x32, sqx, en: asc.mul(sqx, x_local, x_local, en)

    def b16(ctx, in_queue_x, x_local, x32, sqx, en):  # type: ignore[no-untyped-def]
        asc.cast(x32, x_local, asc.CAST_NONE, en)
        in_queue_x.free_tensor(x_local)
        asc.pipe_barrier(ctx, asc.PIPE_V)
        asc.mul(sqx, x32, x32, en)
    return b16


def _merge_n_y(ctx, t, rows, in_queue_x, out_queue_y, out_queue_rstd, x_local, x32, sqx, tmp, rstd_local,
               gamma_local):  # type: ignore[no-untyped-def]
    """Compute's step 4 and ComputeMulGammaCast on ops-nn's Brcb (is_performance) path: rstd to a block per row,
    x ·= rstd row by row, then · gamma, [Cast], EnQue y; rstd's FreeTensor after its Brcb. b16 works in the fp32
    copy of x with Brcb's rstd in sqx, as ops-nn; fp32 (which ops-nn only takes through BroadCast) multiplies x's
    queue buffer into sqx with Brcb's rstd in tmp."""


@overload(_merge_n_y, jit_options=OVERLOAD_OPTIONS)
def _merge_n_y_impl(ctx, t, rows, in_queue_x, out_queue_y, out_queue_rstd, x_local, x32, sqx, tmp, rstd_local,
                    gamma_local):  # type: ignore[no-untyped-def]
    dtype = x_local.dtype.dt
    if dtype.size == 4:
        def fp32(ctx, t, rows, in_queue_x, out_queue_y, out_queue_rstd, x_local, x32, sqx, tmp, rstd_local,
                 gamma_local):  # type: ignore[no-untyped-def]
            _brcb_rows(ctx, tmp, rstd_local, rows)
            out_queue_rstd.free_tensor(rstd_local)
            _repeat_by_row(ctx, t, sqx, x_local, tmp, rows, True)
            in_queue_x.free_tensor(x_local)
            asc.pipe_barrier(ctx, asc.PIPE_V)
            y_local = out_queue_y.alloc_tensor(dtype)
            _repeat_by_row(ctx, t, y_local, sqx, gamma_local, rows, False)
            asc.pipe_barrier(ctx, asc.PIPE_V)
            out_queue_y.enque(y_local)
        return fp32

    def b16(ctx, t, rows, in_queue_x, out_queue_y, out_queue_rstd, x_local, x32, sqx, tmp, rstd_local,
            gamma_local):  # type: ignore[no-untyped-def]
        _brcb_rows(ctx, sqx, rstd_local, rows)
        out_queue_rstd.free_tensor(rstd_local)
        _repeat_by_row(ctx, t, x32, x32, sqx, rows, True)
        asc.pipe_barrier(ctx, asc.PIPE_V)
        y_local = out_queue_y.alloc_tensor(dtype)
        _repeat_by_row(ctx, t, x32, x32, gamma_local, rows, False)
        asc.cast(y_local, x32, y_round_mode(dtype), rows * t.num_col_align)
        asc.pipe_barrier(ctx, asc.PIPE_V)
        out_queue_y.enque(y_local)
    return b16


@njit(cache=True)
def _merge_n_compute(ctx, t, i_o, calc_row_num, gamma_local, in_queue_x, out_queue_y, out_queue_rstd, x_fp32_buf,
                     sqx_buf, tmp_buf, rstd_gm, dtype):
    """KernelRmsNormMergeN::Compute and ComputeMulGammaCast for a pass of ``calc_row_num`` rows."""
    en = calc_row_num * t.num_col_align
    x_local = in_queue_x.deque(dtype)
    sqx = sqx_buf.get(asc.float32)
    tmp = tmp_buf.get(asc.float32)
    x32 = x_fp32_buf.get(asc.float32)
    _merge_n_square(ctx, in_queue_x, x_local, x32, sqx, en)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    rstd_local = out_queue_rstd.alloc_tensor(asc.float32)
    reduce_sum_multi_n(ctx, rstd_local, sqx, tmp, calc_row_num, t.num_col, t.num_col_align)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    _rstd_of_sums(ctx, rstd_local, tmp, calc_row_num, t.avg_factor, t.epsilon)
    out_queue_rstd.enque(rstd_local)
    rstd_local = out_queue_rstd.deque(asc.float32)  # CopyOutRstd, its FreeTensor after the Brcb
    _copy_out(rstd_gm[i_o * t.row_factor], rstd_local, calc_row_num)
    _merge_n_y(ctx, t, calc_row_num, in_queue_x, out_queue_y, out_queue_rstd, x_local, x32, sqx, tmp, rstd_local,
               gamma_local)
    asc.pipe_barrier(ctx, asc.PIPE_V)


def _merge_n_gamma(ctx, pipe, in_queue_gamma, sqx_buf, gamma, n):  # type: ignore[no-untyped-def]
    """CopyInGamma: gamma to its queue in fp32, EnQue'd. b16 gamma lands in sqx_buf (a TBuf: a hand-written
    MTE2_V sync, an id from FetchEventID) and is cast into the queue buffer."""


@overload(_merge_n_gamma, jit_options=OVERLOAD_OPTIONS)
def _merge_n_gamma_impl(ctx, pipe, in_queue_gamma, sqx_buf, gamma, n):  # type: ignore[no-untyped-def]
    if gamma.dtype.dt.size == 4:
        def fp32(ctx, pipe, in_queue_gamma, sqx_buf, gamma, n):  # type: ignore[no-untyped-def]
            pipe.fetch_event_id(asc.HardEvent.MTE2_V)
            gamma_in = in_queue_gamma.alloc_tensor(asc.float32)
            _copy_in(gamma_in, gamma, n)
            in_queue_gamma.enque(gamma_in)
        return fp32

    def b16(ctx, pipe, in_queue_gamma, sqx_buf, gamma, n):  # type: ignore[no-untyped-def]
        ev = pipe.fetch_event_id(asc.HardEvent.MTE2_V)
        gamma_local = in_queue_gamma.alloc_tensor(asc.float32)
        gamma_in = sqx_buf.get(gamma.dtype)
        _copy_in(gamma_in, gamma, n)
        asc.set_flag(ctx, asc.HardEvent.MTE2_V, ev)
        asc.wait_flag(ctx, asc.HardEvent.MTE2_V, ev)
        asc.cast(gamma_local, gamma_in, asc.CAST_NONE, n)
        asc.pipe_barrier(ctx, asc.PIPE_V)
        in_queue_gamma.enque(gamma_local)
    return b16


@kernel
def rms_norm_merge_n_kernel(ctx, t, x, gamma, y, rstd):
    """``KernelRmsNormMergeN<T, T_GAMMA>`` (tiling key 2): Init, then Process (gamma once, in fp32; passes of
    ``row_factor`` rows: one copy in, the row sums, rstd, y, one copy out)."""
    sz = asc.size_of(x.dtype)
    idx, blocks = asc.get_block_idx(ctx), asc.get_block_num(ctx)
    last = idx == blocks - 1
    row_loop = t.last_block_row_loop if last else t.row_loop
    row_tail = t.last_block_row_tail if last else t.row_tail
    x_gm, y_gm = x[idx * t.block_factor * t.num_col], y[idx * t.block_factor * t.num_col]
    rstd_gm = rstd[idx * t.block_factor]
    pipe = asc.TPipe(ctx)
    in_queue_x = pipe.init_buffer(asc.TQue(asc.VECIN, 1), 1, t.ub_factor * sz)
    in_queue_gamma = pipe.init_buffer(asc.TQue(asc.VECIN, 1), 1, t.ub_factor * 4)
    out_queue_y = pipe.init_buffer(asc.TQue(asc.VECOUT, 1), 1, t.ub_factor * sz)
    out_queue_rstd = pipe.init_buffer(asc.TQue(asc.VECOUT, 1), 1, t.row_factor * 4)
    x_fp32_buf = pipe.init_buffer(asc.TBuf(asc.VECCALC), t.ub_factor * 4 if sz == 2 else 0)
    sqx_buf = pipe.init_buffer(asc.TBuf(asc.VECCALC), t.ub_factor * 4)
    tmp_buf = pipe.init_buffer(asc.TBuf(asc.VECCALC), t.row_factor * NUM_PER_REP_FP32 * 4)
    aligned = t.num_col == t.num_col_align
    _merge_n_gamma(ctx, pipe, in_queue_gamma, sqx_buf, gamma, t.num_col)
    gamma_local = in_queue_gamma.deque(asc.float32)
    for i_o in range(row_loop):  # DoMainCompute
        calc_row_num = t.row_factor if i_o < row_loop - 1 else row_tail
        gm_bias = i_o * t.row_factor * t.num_col
        x_local = in_queue_x.alloc_tensor(x.dtype)  # CopyIn
        if aligned:
            _copy_in(x_local, x_gm[gm_bias], calc_row_num * t.num_col)
        else:
            asc.data_copy_pad(x_local, x_gm[gm_bias], asc.DataCopyParams(calc_row_num, t.num_col * sz, 0, 0),
                              asc.DataCopyPadExtParams(False, 0, 0, 0))
        in_queue_x.enque(x_local)
        _merge_n_compute(ctx, t, i_o, calc_row_num, gamma_local, in_queue_x, out_queue_y, out_queue_rstd,
                         x_fp32_buf, sqx_buf, tmp_buf, rstd_gm, x.dtype)
        y_local = out_queue_y.deque(x.dtype)  # CopyOutY
        if aligned:
            _copy_out(y_gm[gm_bias], y_local, calc_row_num * t.num_col)
        else:
            asc.data_copy_pad(y_gm[gm_bias], y_local, asc.DataCopyParams(calc_row_num, t.num_col * sz, 0, 0))
        out_queue_y.free_tensor(y_local)
    in_queue_gamma.free_tensor(gamma_local)


# ---------------------------------------------------------------------------------------------------------------
# SINGLE_ROW: rms_norm_single_row.h


@njit(cache=True)
def _single_row_compute(ctx, pipe, t, i_i, in_queue_x, out_queue_y, x_buf_fp32, gamma_local, rstd_local, dtype):
    """ComputeMixDtype for row ``i_i`` of the batch: x widened into x_buf_fp32, squared into its own buffer."""
    n = t.num_col
    ev_vs = pipe.fetch_event_id(asc.HardEvent.V_S)
    ev_sv = pipe.fetch_event_id(asc.HardEvent.S_V)
    x32 = x_buf_fp32.get(asc.float32)
    x_local = in_queue_x.deque(asc.float32)
    asc.cast(x32, x_local.reinterpret_cast(dtype), asc.CAST_NONE, n)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.mul(x_local, x32, x32, n)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    reduce_out = reduce_sum_half_interval(ctx, pipe, x_local, n)
    in_queue_x.free_tensor(x_local)
    asc.set_flag(ctx, asc.HardEvent.V_S, ev_vs)
    asc.wait_flag(ctx, asc.HardEvent.V_S, ev_vs)
    rstd_value = _scalar_rstd(reduce_out, np.float32(1.0) / np.float32(n), t.epsilon)
    rstd_local.set_value(i_i, rstd_value)
    asc.set_flag(ctx, asc.HardEvent.S_V, ev_sv)
    asc.wait_flag(ctx, asc.HardEvent.S_V, ev_sv)
    asc.muls(x32, x32, rstd_value, n)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.mul(x32, x32, gamma_local, n)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    y_local = out_queue_y.alloc_tensor(dtype)
    asc.cast(y_local, x32, y_round_mode(dtype), n)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    out_queue_y.enque(y_local)


@kernel
def rms_norm_single_row_kernel(ctx, t, x, gamma, y, rstd):
    """``KernelRmsNormSingleRow<T, float>`` (tiling key 3, mixed dtypes only): Init, then Process."""
    sz, gsz = asc.size_of(x.dtype), asc.size_of(gamma.dtype)
    idx, blocks = asc.get_block_idx(ctx), asc.get_block_num(ctx)
    row_work = t.block_factor if idx != blocks - 1 else t.num_row - (blocks - 1) * t.block_factor
    x_gm, y_gm = x[idx * t.block_factor * t.num_col], y[idx * t.block_factor * t.num_col]
    rstd_gm = rstd[idx * t.block_factor]
    row_factor = NUM_PER_REP_FP32
    pipe = asc.TPipe(ctx)
    in_queue_x = pipe.init_buffer(asc.TQue(asc.VECIN, 1), 1, t.ub_factor * gsz)
    in_queue_gamma = pipe.init_buffer(asc.TQue(asc.VECIN, 1), 1, t.ub_factor * gsz)
    out_queue_y = pipe.init_buffer(asc.TQue(asc.VECOUT, 1), 1, t.ub_factor * sz)
    out_queue_rstd = pipe.init_buffer(asc.TQue(asc.VECOUT, 1), 1, row_factor * 4)
    x_buf_fp32 = pipe.init_buffer(asc.TBuf(asc.VECCALC), t.ub_factor * 4)
    reduce_buf_fp32 = pipe.init_buffer(asc.TBuf(asc.VECCALC), NUM_PER_REP_FP32 * 4)  # noqa: F841  (ops-nn's)
    if sz == 2 and gsz == 4:  # IS_MIX_DTYPE: the kernel does nothing else
        g = in_queue_gamma.alloc_tensor(gamma.dtype)  # CopyInGamma
        _copy_in(g, gamma, t.num_col)
        in_queue_gamma.enque(g)
        gamma_local = in_queue_gamma.deque(gamma.dtype)
        i_o_max = (row_work + row_factor - 1) // row_factor
        row_tail = row_work - (i_o_max - 1) * row_factor
        for i_o in range(i_o_max):  # SubProcess
            calc_row_num = row_factor if i_o < i_o_max - 1 else row_tail
            rstd_local = out_queue_rstd.alloc_tensor(asc.float32)
            for i_i in range(calc_row_num):
                gm_bias = (i_o * row_factor + i_i) * t.num_col
                x_local = in_queue_x.alloc_tensor(asc.float32)  # CopyIn: x in the buffer's first half
                _copy_in(x_local.reinterpret_cast(x.dtype), x_gm[gm_bias], t.num_col)
                in_queue_x.enque(x_local)
                _single_row_compute(ctx, pipe, t, i_i, in_queue_x, out_queue_y, x_buf_fp32, gamma_local,
                                    rstd_local, x.dtype)
                y_local = out_queue_y.deque(x.dtype)  # CopyOutY
                _copy_out(y_gm[gm_bias], y_local, t.num_col)
                out_queue_y.free_tensor(y_local)
            out_queue_rstd.enque(rstd_local)
            _copy_out_rstd(out_queue_rstd, rstd_gm[i_o * row_factor], calc_row_num)
        in_queue_gamma.free_tensor(gamma_local)


# ---------------------------------------------------------------------------------------------------------------
# the op

KERNELS = {MODE_NORMAL: rms_norm_normal_kernel, MODE_SPLIT_D: rms_norm_split_d_kernel,
           MODE_MERGE_N: rms_norm_merge_n_kernel, MODE_SINGLE_ROW: rms_norm_single_row_kernel}


def run(t: RmsNormTiling, spec: SocSpec, x: np.ndarray, gamma: np.ndarray, y: np.ndarray, rstd: np.ndarray,
        ws: np.ndarray | None, checks: bool | None = None, auto_sync: bool | None = None) -> RunReport:
    """Launch the kernel of the tiling key on arrays already validated: the device part of the op. ``auto_sync``
    is BiSheng's ``--cce-auto-sync`` for checked mode (off: the V-V and V-S syncs are the kernel's own to write).
    The workspace the tiling asks for (256 B + 16 MiB) is passed and not touched."""
    return launch(KERNELS[t.tiling_key], t, np.ascontiguousarray(x), np.ascontiguousarray(gamma), y, rstd,
                  block_dim=t.block_dim, outputs=2, soc=spec, checks=checks, workspace=ws, op="rms_norm",
                  gm_names=GM_NAMES, auto_sync=auto_sync)


@accepts_torch(arrays=("x", "gamma"))
def rms_norm(x: Any, gamma: Any, *, epsilon: float = 1e-6, soc: str | SocSpec = DEFAULT_SOC,
             tiling: RmsNormTiling | None = None, checks: bool | None = None,
             out: tuple[np.ndarray | None, np.ndarray | None] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """aclnnRmsNorm: ``(y, rstd)``, y = x · rstd · gamma in x's dtype and x's shape, rstd = 1 / sqrt(mean(x²) + ε)
    over the last axes gamma covers, float32, of x's leading axes with 1 for each of gamma's (InferShape4RmsNorm),
    computed by the tiled kernel of the tiling's mode. An empty x gives empty outputs without a launch.

    ``tiling`` runs a TilingData made with ``tiling.rms_norm.rms_norm(x, gamma, epsilon, core_num=..., mode=...,
    row_factor=..., ub_factor=...)`` (checked first); ``checks=True`` runs checked mode; ``out=(y, rstd)`` writes
    into existing arrays. Errors raise :class:`tilesim.AclnnError` with the aclnn status; inputs are never
    modified, and nothing is written on error. A non-contiguous x or gamma is copied first (AutoContiguous).
    """
    spec = get_soc(soc)
    rows, _ = check_args(x, gamma, epsilon, spec)
    y_shape, rstd_shape = out_shapes(x, gamma)
    t = None
    if rows:
        eps = float(epsilon)
        t = make_tiling(x, gamma, eps, soc=spec) if tiling is None else check_tiling(tiling, x, gamma, eps, soc=spec)
        ub_plan(t, spec).check()
    elif tiling is not None:
        raise tiling_error("tiling", f"x {list(np.shape(x))} is empty: there is nothing to tile")
    y, r = outputs(out, ("y", y_shape, dtype_name(x)), ("rstd", rstd_shape, FP32))
    if t is not None:
        run(t, spec, x, gamma, y, r, workspace(t.workspace_size), checks)
    return y, r


__all__ = ["KERNELS", "rms_norm", "rms_norm_merge_n_kernel", "rms_norm_normal_kernel", "rms_norm_single_row_kernel",
           "rms_norm_split_d_kernel", "run"]
