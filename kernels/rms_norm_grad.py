"""aclnnRmsNormGrad: the A2 kernels of ops-nn's ``norm/rms_norm_grad/op_kernel`` (``rms_norm_grad.cpp`` dispatches
on the tiling key) on tilesim's programming model, and the op API.

dx = rstd · (dy·g − x·rstd · mean(dy·g·x·rstd)), dgamma = Σ_rows dy·x·rstd, in fp32; dx in dy's dtype (fp16
rounded with CAST_NONE, bf16 with CAST_RINT: both to nearest even), dgamma fp32. Each core takes rows
``[GetBlockIdx() · block_factor, +rows)``, the last core ``core_calc_tail`` when it is set. Every copy is
DataCopyPad; b16 inputs land in the upper half of an fp32-sized buffer and ``Cast2FloatIf`` widens them in place.
A ``PipeBarrier<PIPE_V>`` follows each vector step as ops-nn writes them, and the scalar work has ops-nn's own
``SetFlag/WaitFlag<V_S>`` and ``<S_V>`` (ids from ``FetchEventID``): the kernels are clean in checked mode with
BiSheng's auto-sync off as well as on. The kernels:

- split-N (tiling key 1, ``RmsNormGradSplitNHighPrecision``, ``rms_norm_grad_split_n_high_precision.h``): gamma
  in once, cast to fp32; dgamma summed in a UB tile over the core's rows. With colValAlign > 640 a row at a time
  (``Compute``: V_S, GetValue of rstd, S_V, Muls, Mul, Add into dgamma, Mul gamma, Mul,
  ``ReduceSumHalfInterval`` (reduce_common.h: Add folds, WholeReduceSum, V_S, GetValue), S_V, Muls, Sub, Muls,
  [Cast]); otherwise ``ubFactor`` rows at once (``ComputeSmallD``: BroadCast of rstd, of gamma and of the means,
  ``ReduceSumMultiN``). The non-deterministic kernel zeroes dgamma on core 0 (InitOutput) and SyncAlls in Init;
  each core adds its dgamma tile by ``SetAtomicAdd`` at the end.
- split-D (tiling key 2, ``RmsNormGradSplitDHighPrecision``, ``rms_norm_grad_split_d_high_precision.h``): rows
  in batches of 32 (``ROW_FACTOR_SPLIT_D``, their rstd in one copy); per batch two passes over the column tiles of
  ``ub_factor``: ``ComputeFormer`` (dgamma of the tile, atomic-added out after the batch's rows, and the row
  sums of dy·g·x·rstd into ``meanTmpBuf``, SetValue after ReduceSumHalfInterval, added into ``meanBuf`` per tile),
  then ``ComputeLatter`` (dx). Init zeroes dgamma (core 0) or, deterministic, the core's workspace row, then
  SyncAll.
- deterministic (``fixed_output``): each core's dgamma goes to its workspace row (plain copy in split-N, atomic
  adds of its tiles in split-D), SyncAll, then ``FinalProcessDeterministic`` (rms_norm_grad_common.h): 64-column
  tasks round-robin over the cores, each ``dCopyIn`` (all block_dim rows of the task, 64 floats apart; V_MTE2 from
  AllocEventID), ``dCompute`` (MTE2_V and MTE3_V, Duplicate, one level-0 Add of a repeat per row into one 64-lane
  accumulator, rows added in core order), ``dCopyOut`` (V_MTE3).

The atomic adds land in core order (:mod:`tilesim.machine.atomic`), as the cores' turns come: each add is one
float addition into dgamma in GM. Split-D adds a core's tile once per 32-row batch, so for a core after core 0
with more than 32 rows dgamma is (((d + b0) + b1) + ...) in core order, the NPU's order of adds (not a core's
batches summed first and added once, an order the NPU cannot take).

Every kernel has a SyncAll, so a launch runs its cores as coroutines on the host threads
(:func:`tilesim.runtime.host_threads.run_synced`).

Where this differs from ops-nn on purpose:

- Every SoC runs the A2 (``__CCE_AICORE__ == 220``) build: 310P's DataCopy paths with scalar tail writes and
  SyncAll through a GM workspace, its deterministic AddDgamma on core 0 and 910's whole-reduce kernels
  (``rms_norm_grad_whole_reduce_{n,d}.h``) are not emulated; the same sums in the same order as far as dgamma
  goes, and 310P's split-N small-D path (A2 only in ops-nn) is taken on 310P as well.
- Split-D's deterministic final sum reads block_dim rows of 64 floats into the dy and x queue buffers, which ops-nn
  sizes ``ubFactor`` floats: a hand-made tiling with ``ub_factor < 64 · block_dim`` would overflow them on the NPU;
  here (as in split-N, where ops-nn sizes them for it) they hold both.
- ``dCompute`` offsets the source of its second and later 255-row Adds by 255 elements, not 255 rows: harmless as
  block_dim is at most 48 (one Add); written here as ops-nn has it.
- The chunked deterministic split-D (``need_chunk``, inputs of 500 MiB and more) is refused
  (:func:`check_supported`). The final sum's DataCopyPad (right padding, isPad false) leaves its padding
  undefined on the NPU: here it holds 0 and checked mode takes it as never written (the Adds mask it off).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba.extending import overload
from tilesim.tiling.common import FP32, dtype_name, shape_of
from tilesim.tiling.rms_norm_grad import (
    ROW_FACTOR_SPLIT_D,
    SMALL_D_THRESHOLD,
    SPLIT_N,
    SYS_WORKSPACE,
    RmsNormGradTiling,
    check_tiling,
    ub_plan,
)
from tilesim.tiling.rms_norm_grad import rms_norm_grad as make_tiling

from tilesim import machine as asc  # AscendC::
from tilesim.errors import tiling_error
from tilesim.interop import accepts_torch
from tilesim.jit import OVERLOAD_OPTIONS, njit
from tilesim.runtime.host_threads import workspace
from tilesim.runtime.launcher import kernel, launch
from tilesim.runtime.report import RunReport
from tilesim.soc import DEFAULT_SOC, SocSpec, get_soc

from .common import outputs
from .device import reduce_sum_half_interval, reduce_sum_multi_n

GM_NAMES = ["dy", "x", "rstd", "gamma", "dx", "dgamma"]
COL_TEMPLATE = 64  # columns of one deterministic final-sum task
FLOAT_ALIGN = 8
MAX_REPEAT_TIMES = 255
B32_REPEAT_STRIDE = 8


def _dx_round_mode(dtype):  # type: ignore[no-untyped-def]
    """The rounding of dx: CAST_NONE for half, CAST_RINT for bfloat16 (float never casts)."""


@overload(_dx_round_mode, jit_options=OVERLOAD_OPTIONS)
def _dx_round_mode_impl(dtype):  # type: ignore[no-untyped-def]
    mode = asc.CAST_NONE if dtype.dt.name == "half" else asc.CAST_RINT
    return lambda dtype: mode


def _cast2float_if(ctx, cast_local, dtype, src_offset, count):  # type: ignore[no-untyped-def]
    """Cast2FloatIf<T>: b16 T at element ``src_offset`` of the buffer widened in place to fp32, PipeBarrier<V>."""


@overload(_cast2float_if, jit_options=OVERLOAD_OPTIONS)
def _cast2float_if_impl(ctx, cast_local, dtype, src_offset, count):  # type: ignore[no-untyped-def]
    if dtype.dt.size == 4:
        return lambda ctx, cast_local, dtype, src_offset, count: None

    def widen(ctx, cast_local, dtype, src_offset, count):  # type: ignore[no-untyped-def]
        asc.cast(cast_local, cast_local.reinterpret_cast(dtype)[src_offset], asc.CAST_NONE, count)
        asc.pipe_barrier(ctx, asc.PIPE_V)
    return widen


def _cast_dx(ctx, dx_local, dtype, count):  # type: ignore[no-untyped-def]
    """The b16 Cast of dx in place (CastAndPrepareDxOutput, and Compute's own), PipeBarrier<V>; float: nothing."""


@overload(_cast_dx, jit_options=OVERLOAD_OPTIONS)
def _cast_dx_impl(ctx, dx_local, dtype, count):  # type: ignore[no-untyped-def]
    if dtype.dt.size == 4:
        return lambda ctx, dx_local, dtype, count: None

    def narrow(ctx, dx_local, dtype, count):  # type: ignore[no-untyped-def]
        asc.cast(dx_local.reinterpret_cast(dtype), dx_local, _dx_round_mode(dtype), count)
        asc.pipe_barrier(ctx, asc.PIPE_V)
    return narrow


@njit(cache=True)
def _copy_in_pad(dst, src, rows, count, b16_offset):
    """DataCopyPad of ``rows`` rows of ``count`` elements (DataCopyPadExtParams{true, 0, 0, 0}); a b16 tensor
    lands at element ``b16_offset``, the upper half of its fp32-sized buffer."""
    sz = asc.size_of(src.dtype)
    asc.data_copy_pad(dst[b16_offset if sz == 2 else 0], src, asc.DataCopyExtParams(rows, count * sz, 0, 0),
                      asc.DataCopyPadExtParams(True, 0, 0, 0))


@njit(cache=True)
def _copy_out_pad(dst, src, rows, count):
    """DataCopyPad to GM of ``rows`` rows of ``count`` elements."""
    asc.data_copy_pad(dst, src, asc.DataCopyExtParams(rows, count * asc.size_of(dst.dtype), 0, 0))


# ---------------------------------------------------------------------------------------------------------------
# FinalProcessDeterministic: rms_norm_grad_common.h


@njit(cache=True)
def _final_process_deterministic(ctx, pipe, col_align, block_num, col, out_offset, chunk_size, buffer1, buffer2,
                                 workspace_gm_ori, dgamma_gm):
    """FinalProcessDeterministic: task ``k · blockNum + GetBlockIdx()`` of the ceil(colAlign / 64) column tasks,
    each dCopyIn, dCompute, dCopyOut."""
    colcycle_count = (col_align + COL_TEMPLATE - 1) // COL_TEMPLATE
    per_block = (colcycle_count + block_num - 1) // block_num
    col_size = COL_TEMPLATE
    for block_task in range(per_block):
        task = block_task * block_num + asc.get_block_idx(ctx)
        if task >= colcycle_count:
            break
        if task == colcycle_count - 1:
            col_size = col - COL_TEMPLATE * task
        # dCopyIn: the task's columns of every core's row, 64 floats apart in UB
        right_pad = FLOAT_ALIGN - col_size % FLOAT_ALIGN if col_size % FLOAT_ALIGN else 0
        ev = pipe.alloc_event_id(asc.HardEvent.V_MTE2)
        asc.set_flag(ctx, asc.HardEvent.V_MTE2, ev)
        asc.wait_flag(ctx, asc.HardEvent.V_MTE2, ev)
        pipe.release_event_id(asc.HardEvent.V_MTE2, ev)
        asc.data_copy_pad(buffer1, workspace_gm_ori[task * COL_TEMPLATE],
                          asc.DataCopyExtParams(block_num, col_size * 4, (chunk_size - col_size) * 4,
                                                (COL_TEMPLATE - col_size) // FLOAT_ALIGN),
                          asc.DataCopyPadExtParams(False, 0, right_pad, 0))
        # dCompute: the rows added in core order into one accumulator (dst repeat stride 0)
        ev = pipe.alloc_event_id(asc.HardEvent.MTE2_V)
        asc.set_flag(ctx, asc.HardEvent.MTE2_V, ev)
        asc.wait_flag(ctx, asc.HardEvent.MTE2_V, ev)
        pipe.release_event_id(asc.HardEvent.MTE2_V, ev)
        ev = pipe.alloc_event_id(asc.HardEvent.MTE3_V)
        asc.set_flag(ctx, asc.HardEvent.MTE3_V, ev)
        asc.wait_flag(ctx, asc.HardEvent.MTE3_V, ev)
        pipe.release_event_id(asc.HardEvent.MTE3_V, ev)
        asc.duplicate(buffer2, 0.0, COL_TEMPLATE)
        asc.pipe_barrier(ctx, asc.PIPE_V)
        params = asc.BinaryRepeatParams(1, 1, 1, 0, B32_REPEAT_STRIDE, 0)
        row_repeat = (block_num + MAX_REPEAT_TIMES - 1) // MAX_REPEAT_TIMES
        repeat = MAX_REPEAT_TIMES
        for i in range(row_repeat):
            if i == row_repeat - 1:
                repeat = block_num - (row_repeat - 1) * MAX_REPEAT_TIMES
            asc.add(buffer2, buffer1[i * MAX_REPEAT_TIMES], buffer2, col_size, repeat, params)
            asc.pipe_barrier(ctx, asc.PIPE_V)
        # dCopyOut
        ev = pipe.alloc_event_id(asc.HardEvent.V_MTE3)
        asc.set_flag(ctx, asc.HardEvent.V_MTE3, ev)
        asc.wait_flag(ctx, asc.HardEvent.V_MTE3, ev)
        pipe.release_event_id(asc.HardEvent.V_MTE3, ev)
        asc.data_copy_pad(dgamma_gm[out_offset + task * COL_TEMPLATE], buffer2,
                          asc.DataCopyParams(1, col_size * 4, 0, 0))


@njit(cache=True)
def _do_deter(ctx, pipe, t, in_que_x, in_que_dy, workspace_gm_ori, dgamma_gm):
    """doDeter / doDeterminCompute after the SyncAll: the final sum with the x and dy queue buffers as its two
    buffers."""
    buffer1 = in_que_x.alloc_tensor(asc.float32)
    buffer2 = in_que_dy.alloc_tensor(asc.float32)
    _final_process_deterministic(ctx, pipe, t.col_val_align, t.block_dim, t.col, 0, t.col_val_align, buffer1,
                                 buffer2, workspace_gm_ori, dgamma_gm)
    in_que_x.free_tensor(buffer1)
    in_que_dy.free_tensor(buffer2)


@njit(cache=True)
def _copy_dgamma_out(ctx, out_que_dgamma, out_gm, count):
    """CopyDgammaOut / CopyDgammaOutCommon: DeQue, SetAtomicAdd<float>, DataCopyPad of ``count`` floats,
    SetAtomicNone, FreeTensor."""
    dgamma_out = out_que_dgamma.deque(asc.float32)
    asc.set_atomic_add(ctx, asc.float32)
    _copy_out_pad(out_gm, dgamma_out, 1, count)
    asc.set_atomic_none(ctx)
    out_que_dgamma.free_tensor(dgamma_out)


# ---------------------------------------------------------------------------------------------------------------
# split-N: rms_norm_grad_split_n_high_precision.h


@njit(cache=True)
def _split_n_copy_in(t, in_que_rstd, in_que_x, in_que_dy, rstd_gm, x_gm, dy_gm, row, calc_len):
    """CopyIn: ``calc_len`` rows' rstd, x and dy (b16 at element calcLen · colValAlign), each EnQue'd."""
    rstd = in_que_rstd.alloc_tensor(asc.float32)
    x_local = in_que_x.alloc_tensor(x_gm.dtype)
    dy = in_que_dy.alloc_tensor(dy_gm.dtype)
    _copy_in_pad(rstd, rstd_gm[row], 1, calc_len, 0)
    _copy_in_pad(x_local, x_gm[row * t.col], calc_len, t.col, calc_len * t.col_val_align)
    _copy_in_pad(dy, dy_gm[row * t.col], calc_len, t.col, calc_len * t.col_val_align)
    in_que_rstd.enque(rstd)
    in_que_x.enque(x_local)
    in_que_dy.enque(dy)


@njit(cache=True)
def _split_n_copy_out(t, out_que_dx, dx_gm, row, calc_len):
    """CopyOut: DeQue dx, DataCopyPad of ``calc_len`` rows, FreeTensor."""
    dx = out_que_dx.deque(dx_gm.dtype)
    _copy_out_pad(dx_gm[row * t.col], dx, calc_len, t.col)
    out_que_dx.free_tensor(dx)


@njit(cache=True)
def _split_n_compute(ctx, pipe, t, in_que_rstd, in_que_x, in_que_dy, out_que_dx, gamma_local, dgamma_local, dtype):
    """Compute: one row (colValAlign > 640)."""
    cva = t.col_val_align
    rstd_local = in_que_rstd.deque(asc.float32)
    ev_vs = pipe.fetch_event_id(asc.HardEvent.V_S)
    asc.set_flag(ctx, asc.HardEvent.V_S, ev_vs)
    asc.wait_flag(ctx, asc.HardEvent.V_S, ev_vs)
    rstd_value = rstd_local.get_value(0)
    ev_sv = pipe.fetch_event_id(asc.HardEvent.S_V)
    asc.set_flag(ctx, asc.HardEvent.S_V, ev_sv)
    in_que_rstd.free_tensor(rstd_local)
    x_local = in_que_x.deque(asc.float32)
    _cast2float_if(ctx, x_local, dtype, cva, cva)
    asc.wait_flag(ctx, asc.HardEvent.S_V, ev_sv)
    asc.muls(x_local, x_local, rstd_value, cva)
    asc.pipe_barrier(ctx, asc.PIPE_V)

    dy_local = in_que_dy.deque(asc.float32)
    _cast2float_if(ctx, dy_local, dtype, cva, cva)
    dx_local = out_que_dx.alloc_tensor(asc.float32)
    asc.mul(dx_local, dy_local, x_local, cva)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.add(dgamma_local, dgamma_local, dx_local, cva)
    asc.mul(dy_local, dy_local, gamma_local, cva)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.mul(dx_local, dy_local, x_local, cva)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    sum_value = reduce_sum_half_interval(ctx, pipe, dx_local, t.col)
    mean_value = sum_value * np.float32(t.avg_factor)
    ev_sv2 = pipe.fetch_event_id(asc.HardEvent.S_V)
    asc.set_flag(ctx, asc.HardEvent.S_V, ev_sv2)
    asc.wait_flag(ctx, asc.HardEvent.S_V, ev_sv2)
    asc.muls(dx_local, x_local, mean_value, cva)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.sub(dx_local, dy_local, dx_local, cva)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.muls(dx_local, dx_local, rstd_value, cva)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    _cast_dx(ctx, dx_local, dtype, cva)
    in_que_x.free_tensor(x_local)
    in_que_dy.free_tensor(dy_local)
    out_que_dx.enque(dx_local)


@njit(cache=True)
def _split_n_compute_small_d(ctx, t, calc_len, in_que_rstd, in_que_x, in_que_dy, out_que_dx, tmp_buf,
                             tmp_mean_buf, gamma_local, dgamma_local, dtype):
    """ComputeSmallD: ``calc_len`` rows at once (colValAlign <= 640)."""
    cva = t.col_val_align
    element_num = cva * calc_len
    nd_shape, n1_shape, d1_shape = (calc_len, cva), (calc_len, 1), (1, cva)
    tmp_reduce_buf = tmp_buf.get(asc.float32)
    rstd_local = in_que_rstd.deque(asc.float32)
    dx_local = out_que_dx.alloc_tensor(asc.float32)
    shared_tmp = tmp_reduce_buf.reinterpret_cast(asc.uint8)
    asc.broadcast(dx_local, rstd_local, nd_shape, n1_shape, 1, shared_tmp)
    asc.pipe_barrier(ctx, asc.PIPE_V)

    x_local = in_que_x.deque(asc.float32)
    _cast2float_if(ctx, x_local, dtype, element_num, element_num)
    asc.mul(x_local, x_local, dx_local, element_num)  # x · rstd
    asc.pipe_barrier(ctx, asc.PIPE_V)

    dy_local = in_que_dy.deque(asc.float32)
    _cast2float_if(ctx, dy_local, dtype, element_num, element_num)
    asc.mul(dx_local, dy_local, x_local, element_num)  # dgamma's terms, a row at a time into dgamma
    asc.pipe_barrier(ctx, asc.PIPE_V)
    for i in range(calc_len):
        asc.add(dgamma_local, dx_local[i * cva], dgamma_local, cva)
        asc.pipe_barrier(ctx, asc.PIPE_V)

    asc.broadcast(dx_local, gamma_local, nd_shape, d1_shape, 0, shared_tmp)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.mul(dy_local, dy_local, dx_local, element_num)  # dy · gamma
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.mul(dx_local, dy_local, x_local, element_num)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    tmp_mean_local = tmp_mean_buf.get(asc.float32)
    reduce_sum_multi_n(ctx, tmp_mean_local, dx_local, tmp_reduce_buf, calc_len, t.col, cva)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.muls(tmp_mean_local, tmp_mean_local, np.float32(t.avg_factor), calc_len)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.broadcast(dx_local, tmp_mean_local, nd_shape, n1_shape, 1, shared_tmp)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.mul(dx_local, x_local, dx_local, element_num)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.sub(dx_local, dy_local, dx_local, element_num)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.broadcast(dy_local, rstd_local, nd_shape, n1_shape, 1, shared_tmp)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    in_que_rstd.free_tensor(rstd_local)
    asc.mul(dx_local, dx_local, dy_local, element_num)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    _cast_dx(ctx, dx_local, dtype, element_num)
    in_que_x.free_tensor(x_local)
    in_que_dy.free_tensor(dy_local)
    out_que_dx.enque(dx_local)


@njit(cache=True)
def _split_n_sub_process(ctx, pipe, t, loop_idx, calc_len, rstd_gm, x_gm, dy_gm, dx_gm, in_que_rstd, in_que_x,
                         in_que_dy, out_que_dx, tmp_buf, tmp_mean_buf, gamma_local, dgamma_local):
    """SubProcess: UB tile ``loop_idx`` of ``calc_len`` rows, a row at a time or (small D) all at once."""
    row = loop_idx * t.ub_factor
    if t.col_val_align > SMALL_D_THRESHOLD:
        for i in range(calc_len):
            _split_n_copy_in(t, in_que_rstd, in_que_x, in_que_dy, rstd_gm, x_gm, dy_gm, row + i, 1)
            _split_n_compute(ctx, pipe, t, in_que_rstd, in_que_x, in_que_dy, out_que_dx, gamma_local, dgamma_local,
                             dy_gm.dtype)
            _split_n_copy_out(t, out_que_dx, dx_gm, row + i, 1)
    else:
        _split_n_copy_in(t, in_que_rstd, in_que_x, in_que_dy, rstd_gm, x_gm, dy_gm, row, calc_len)
        _split_n_compute_small_d(ctx, t, calc_len, in_que_rstd, in_que_x, in_que_dy, out_que_dx, tmp_buf,
                                 tmp_mean_buf, gamma_local, dgamma_local, dy_gm.dtype)
        _split_n_copy_out(t, out_que_dx, dx_gm, row, calc_len)


@kernel
def rms_norm_grad_split_n_kernel(ctx, t, dy, x, rstd, gamma, dx, dgamma):
    """``RmsNormGradSplitNHighPrecision<T_DY, T_GAMMA>`` (tiling key 1): Init, then Process."""
    # Init: InitVar, InitInputGmBuffer, InitOutputGmBuffer (core 0 zeroes dgamma unless deterministic)
    idx = asc.get_block_idx(ctx)
    det = t.fixed_output == 1
    cva, nb = t.col_val_align, t.buffer_num
    off = idx * t.block_factor
    dy_gm, x_gm, dx_gm, rstd_gm = dy[off * t.col], x[off * t.col], dx[off * t.col], rstd[off]
    if not det and idx == 0:
        asc.init_output(dgamma, t.col, 0.0)
    # InitInputQue, InitOutputQue, InitTmpBuffer; the queues hold block_dim rows of 64 floats for doDeter too
    buffer_len_size = max(t.ub_factor * cva, t.block_dim * COL_TEMPLATE) * 4
    rstd_len = (t.ub_factor + FLOAT_ALIGN - 1) // FLOAT_ALIGN * FLOAT_ALIGN if t.data_type == 0 else \
        (t.ub_factor + 15) // 16 * 16
    pipe = asc.TPipe(ctx)
    in_que_dy = pipe.init_buffer(asc.TQue(asc.VECIN, 1), nb, buffer_len_size)
    in_que_x = pipe.init_buffer(asc.TQue(asc.VECIN, 1), nb, buffer_len_size)
    in_que_rstd = pipe.init_buffer(asc.TQue(asc.VECIN, 1), nb, rstd_len * 4)
    in_que_gamma = pipe.init_buffer(asc.TQue(asc.VECIN, 1), 1, cva * 4)
    out_que_dx = pipe.init_buffer(asc.TQue(asc.VECOUT, 1), nb, buffer_len_size)
    out_que_dgamma = pipe.init_buffer(asc.TQue(asc.VECOUT, 1), 1, cva * 4)
    small_d = cva <= SMALL_D_THRESHOLD
    tmp_buf = pipe.init_buffer(asc.TBuf(asc.VECCALC), t.ub_factor * COL_TEMPLATE * 4 if small_d else 0)
    tmp_mean_buf = pipe.init_buffer(asc.TBuf(asc.VECCALC), t.ub_factor * 4 if small_d else 0)
    workspace_gm_ori = asc.get_user_workspace(ctx).reinterpret_cast(asc.float32)
    if not det:
        asc.sync_all(ctx)

    # Process: CopyGammaIn, Cast2FloatIf, dgamma zeroed, the UB tiles, dgamma out
    gamma_in = in_que_gamma.alloc_tensor(gamma.dtype)
    _copy_in_pad(gamma_in, gamma, 1, t.col, cva)
    in_que_gamma.enque(gamma_in)
    gamma_local = in_que_gamma.deque(asc.float32)
    _cast2float_if(ctx, gamma_local, gamma.dtype, cva, cva)
    dgamma_local = out_que_dgamma.alloc_tensor(asc.float32)
    asc.duplicate(dgamma_local, 0.0, cva)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    if t.core_calc_tail == 0 or idx < t.block_dim - 1:
        loop, num, tail = t.ub_calc_loop, t.ub_calc_num, t.ub_calc_tail
    else:
        loop, num, tail = t.ub_calc_tail_loop, t.ub_calc_tail_num, t.ub_calc_tail_tail
    for i in range(loop if tail == 0 else loop - 1):
        _split_n_sub_process(ctx, pipe, t, i, num, rstd_gm, x_gm, dy_gm, dx_gm, in_que_rstd, in_que_x, in_que_dy,
                             out_que_dx, tmp_buf, tmp_mean_buf, gamma_local, dgamma_local)
    if tail != 0:
        _split_n_sub_process(ctx, pipe, t, loop - 1, tail, rstd_gm, x_gm, dy_gm, dx_gm, in_que_rstd, in_que_x,
                             in_que_dy, out_que_dx, tmp_buf, tmp_mean_buf, gamma_local, dgamma_local)
    in_que_gamma.free_tensor(gamma_local)
    out_que_dgamma.enque(dgamma_local)
    if det:
        dgamma_out = out_que_dgamma.deque(asc.float32)  # CopyDgammaOutWorkspace: the core's workspace row
        _copy_out_pad(workspace_gm_ori[idx * cva], dgamma_out, 1, t.col)
        out_que_dgamma.free_tensor(dgamma_out)
        asc.sync_all(ctx)
        _do_deter(ctx, pipe, t, in_que_x, in_que_dy, workspace_gm_ori, dgamma)
    else:
        _copy_dgamma_out(ctx, out_que_dgamma, dgamma, t.col)


# ---------------------------------------------------------------------------------------------------------------
# split-D: rms_norm_grad_split_d_high_precision.h


@njit(cache=True)
def _sync_v_s(ctx, pipe):
    """SyncEventV_S: SetFlag / WaitFlag<V_S> with an id from FetchEventID."""
    ev = pipe.fetch_event_id(asc.HardEvent.V_S)
    asc.set_flag(ctx, asc.HardEvent.V_S, ev)
    asc.wait_flag(ctx, asc.HardEvent.V_S, ev)


@njit(cache=True)
def _sync_s_v(ctx, pipe):
    """SyncEventS_V: SetFlag / WaitFlag<S_V> with an id from FetchEventID."""
    ev = pipe.fetch_event_id(asc.HardEvent.S_V)
    asc.set_flag(ctx, asc.HardEvent.S_V, ev)
    asc.wait_flag(ctx, asc.HardEvent.S_V, ev)


@njit(cache=True)
def _split_d_copy_gamma_in(t, in_que_gamma, gamma, j, calc_col):
    """CopyGammaIn: column tile ``j`` of gamma (DataCopyWithOffset: b16 at element ubFactor), EnQue."""
    gamma_local = in_que_gamma.alloc_tensor(gamma.dtype)
    _copy_in_pad(gamma_local, gamma[j * t.ub_factor], 1, calc_col, t.ub_factor)
    in_que_gamma.enque(gamma_local)


@njit(cache=True)
def _split_d_copy_in(t, in_que_x, in_que_dy, x_gm, dy_gm, row, j, calc_col):
    """CopyIn: column tile ``j`` of row ``row`` of x and of dy, EnQue'd."""
    x_local = in_que_x.alloc_tensor(x_gm.dtype)
    dy_local = in_que_dy.alloc_tensor(dy_gm.dtype)
    at = row * t.col + j * t.ub_factor
    _copy_in_pad(x_local, x_gm[at], 1, calc_col, t.ub_factor)
    _copy_in_pad(dy_local, dy_gm[at], 1, calc_col, t.ub_factor)
    in_que_x.enque(x_local)
    in_que_dy.enque(dy_local)


@njit(cache=True)
def _compute_former(ctx, pipe, t, i_inner, rstd_value, calc_len, in_que_x, in_que_dy, mean_tmp_buf, gamma_local,
                    dgamma, dtype):
    """ComputeFormer: dgamma += dy · x · rstd; the row's sum of dy · g · x · rstd into meanTmpBuf[iInner]."""
    x_local = in_que_x.deque(asc.float32)
    _cast2float_if(ctx, x_local, dtype, t.ub_factor, calc_len)
    asc.muls(x_local, x_local, rstd_value, calc_len)  # x · rstd
    asc.pipe_barrier(ctx, asc.PIPE_V)
    dy_local = in_que_dy.deque(asc.float32)
    _cast2float_if(ctx, dy_local, dtype, t.ub_factor, calc_len)
    asc.mul(x_local, dy_local, x_local, calc_len)  # dy · x · rstd
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.add(dgamma, dgamma, x_local, calc_len)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.mul(x_local, x_local, gamma_local, calc_len)  # dy · gamma · x · rstd
    asc.pipe_barrier(ctx, asc.PIPE_V)
    sum_value = reduce_sum_half_interval(ctx, pipe, x_local, calc_len)
    mean_tmp_local = mean_tmp_buf.get(asc.float32)
    mean_tmp_local.set_value(i_inner, sum_value)
    _sync_s_v(ctx, pipe)
    in_que_x.free_tensor(x_local)
    in_que_dy.free_tensor(dy_local)


@njit(cache=True)
def _compute_latter(ctx, t, rstd_value, mean_value, calc_len, in_que_x, in_que_dy, out_que_dx, gamma_local, dtype):
    """ComputeLatter: dx = (dy · gamma − x · rstd · mean) · rstd, [Cast], EnQue."""
    x_local = in_que_x.deque(asc.float32)
    _cast2float_if(ctx, x_local, dtype, t.ub_factor, calc_len)
    asc.muls(x_local, x_local, rstd_value, calc_len)  # x · rstd
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.muls(x_local, x_local, mean_value, calc_len)  # x · rstd · mean
    dy_local = in_que_dy.deque(asc.float32)
    _cast2float_if(ctx, dy_local, dtype, t.ub_factor, calc_len)
    asc.mul(dy_local, dy_local, gamma_local, calc_len)  # dy · gamma
    asc.pipe_barrier(ctx, asc.PIPE_V)
    dx_local = out_que_dx.alloc_tensor(asc.float32)
    asc.sub(dx_local, dy_local, x_local, calc_len)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.muls(dx_local, dx_local, rstd_value, calc_len)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    _cast_dx(ctx, dx_local, dtype, calc_len)
    in_que_x.free_tensor(x_local)
    in_que_dy.free_tensor(dy_local)
    out_que_dx.enque(dx_local)


@njit(cache=True)
def _loop_col_before_reduce(ctx, pipe, t, i_outer, j, calc_row, calc_col, rstd_local, x_gm, dy_gm, gamma,
                            dgamma_out_gm, in_que_x, in_que_dy, in_que_gamma, out_que_dgamma, mean_buf, mean_tmp_buf):
    """loopColProcessBeforeReduce: column tile ``j`` over the batch's rows: its dgamma atomic-added out, the
    rows' partial sums added into meanBuf."""
    _split_d_copy_gamma_in(t, in_que_gamma, gamma, j, calc_col)
    gamma_local = in_que_gamma.deque(asc.float32)
    _cast2float_if(ctx, gamma_local, gamma.dtype, t.ub_factor, calc_col)
    dgamma = out_que_dgamma.alloc_tensor(asc.float32)
    asc.duplicate(dgamma, 0.0, calc_col)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    for i_inner in range(calc_row):
        _split_d_copy_in(t, in_que_x, in_que_dy, x_gm, dy_gm, i_outer * ROW_FACTOR_SPLIT_D + i_inner, j, calc_col)
        _sync_v_s(ctx, pipe)
        rstd_value = rstd_local.get_value(i_inner)
        _sync_s_v(ctx, pipe)
        _compute_former(ctx, pipe, t, i_inner, rstd_value, calc_col, in_que_x, in_que_dy, mean_tmp_buf, gamma_local,
                        dgamma, dy_gm.dtype)
    in_que_gamma.free_tensor(gamma_local)
    out_que_dgamma.enque(dgamma)
    _copy_dgamma_out(ctx, out_que_dgamma, dgamma_out_gm[j * t.ub_factor], calc_col)
    mean_tmp_local = mean_tmp_buf.get(asc.float32)
    mean_local = mean_buf.get(asc.float32)
    asc.add(mean_local, mean_local, mean_tmp_local, calc_row)
    asc.pipe_barrier(ctx, asc.PIPE_V)


@njit(cache=True)
def _loop_col_after_reduce(ctx, pipe, t, i_outer, j, calc_row, calc_col, rstd_local, x_gm, dy_gm, gamma, dx_gm,
                           in_que_x, in_que_dy, in_que_gamma, out_que_dx, mean_buf):
    """loopColProcessAfterReduce: column tile ``j`` of dx for the batch's rows, each CopyDxOut."""
    _split_d_copy_gamma_in(t, in_que_gamma, gamma, j, calc_col)
    gamma_local = in_que_gamma.deque(asc.float32)
    _cast2float_if(ctx, gamma_local, gamma.dtype, t.ub_factor, calc_col)
    mean_local = mean_buf.get(asc.float32)
    for i_inner in range(calc_row):
        row = i_outer * ROW_FACTOR_SPLIT_D + i_inner
        _split_d_copy_in(t, in_que_x, in_que_dy, x_gm, dy_gm, row, j, calc_col)
        _sync_v_s(ctx, pipe)
        rstd_value = rstd_local.get_value(i_inner)
        mean_value = mean_local.get_value(i_inner)
        _sync_s_v(ctx, pipe)
        _compute_latter(ctx, t, rstd_value, mean_value, calc_col, in_que_x, in_que_dy, out_que_dx, gamma_local,
                        dy_gm.dtype)
        dx = out_que_dx.deque(dx_gm.dtype)  # CopyDxOut
        _copy_out_pad(dx_gm[row * t.col + j * t.ub_factor], dx, 1, calc_col)
        out_que_dx.free_tensor(dx)
    in_que_gamma.free_tensor(gamma_local)


@njit(cache=True)
def _split_d_sub_process(ctx, pipe, t, i_outer, calc_row, rstd_gm, x_gm, dy_gm, gamma, dx_gm, dgamma_out_gm,
                         in_que_x, in_que_dy, in_que_rstd, in_que_gamma, out_que_dx, out_que_dgamma, mean_buf,
                         mean_tmp_buf):
    """SubProcess: a batch of ``calc_row`` rows: CopyRstdIn, meanBuf zeroed, calcBeforeLoop, calcAfterLoop."""
    loop_main_col, tail_col = t.col // t.ub_factor, t.col % t.ub_factor
    rstd_in = in_que_rstd.alloc_tensor(asc.float32)  # CopyRstdIn
    _copy_in_pad(rstd_in, rstd_gm[i_outer * ROW_FACTOR_SPLIT_D], 1, calc_row, 0)
    in_que_rstd.enque(rstd_in)
    rstd_local = in_que_rstd.deque(asc.float32)
    mean_local = mean_buf.get(asc.float32)
    asc.duplicate(mean_local, 0.0, calc_row)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    for j in range(loop_main_col + (1 if tail_col > 0 else 0)):  # calcBeforeLoop
        _loop_col_before_reduce(ctx, pipe, t, i_outer, j, calc_row, t.ub_factor if j < loop_main_col else tail_col,
                                rstd_local, x_gm, dy_gm, gamma, dgamma_out_gm, in_que_x, in_que_dy, in_que_gamma,
                                out_que_dgamma, mean_buf, mean_tmp_buf)
    asc.muls(mean_local, mean_local, np.float32(t.avg_factor), calc_row)  # calcAfterLoop
    asc.pipe_barrier(ctx, asc.PIPE_V)
    for j in range(loop_main_col + (1 if tail_col > 0 else 0)):
        _loop_col_after_reduce(ctx, pipe, t, i_outer, j, calc_row, t.ub_factor if j < loop_main_col else tail_col,
                               rstd_local, x_gm, dy_gm, gamma, dx_gm, in_que_x, in_que_dy, in_que_gamma, out_que_dx,
                               mean_buf)
    in_que_rstd.free_tensor(rstd_local)


@kernel
def rms_norm_grad_split_d_kernel(ctx, t, dy, x, rstd, gamma, dx, dgamma):
    """``RmsNormGradSplitDHighPrecision<T_DY, T_GAMMA>`` (tiling key 2, without the chunked path): Init, then
    Process (ProcessMain)."""
    # Init: core 0 zeroes dgamma, or (deterministic) each core its workspace row (InitWorkspaceBuffers); SyncAll
    idx = asc.get_block_idx(ctx)
    det = t.fixed_output == 1
    workspace_gm_ori = asc.get_user_workspace(ctx).reinterpret_cast(asc.float32)
    workspace_gm = workspace_gm_ori[idx * t.col_val_align]
    if not det and idx == 0:
        asc.init_output(dgamma, t.col, 0.0)
    if det:
        asc.init_output(workspace_gm, t.col_val_align, 0.0)
    asc.sync_all(ctx)
    # InitGmBuffer, InitUB; the dy and x buffers hold block_dim rows of 64 floats for the final sum too
    off = idx * t.block_factor
    dy_gm, x_gm, dx_gm, rstd_gm = dy[off * t.col], x[off * t.col], dx[off * t.col], rstd[off]
    buffer_len_size = t.ub_factor * 4
    pipe = asc.TPipe(ctx)
    in_que_dy = pipe.init_buffer(asc.TQue(asc.VECIN, 1), t.buffer_num,
                                 max(buffer_len_size, t.block_dim * COL_TEMPLATE * 4))
    in_que_x = pipe.init_buffer(asc.TQue(asc.VECIN, 1), t.buffer_num,
                                max(buffer_len_size, t.block_dim * COL_TEMPLATE * 4))
    in_que_rstd = pipe.init_buffer(asc.TQue(asc.VECIN, 1), 1, ROW_FACTOR_SPLIT_D * 4)
    in_que_gamma = pipe.init_buffer(asc.TQue(asc.VECIN, 1), 1, buffer_len_size)
    out_que_dx = pipe.init_buffer(asc.TQue(asc.VECOUT, 1), t.buffer_num, buffer_len_size)
    out_que_dgamma = pipe.init_buffer(asc.TQue(asc.VECOUT, 1), 1, buffer_len_size)
    mean_buf = pipe.init_buffer(asc.TBuf(asc.VECCALC), ROW_FACTOR_SPLIT_D * 4)
    mean_tmp_buf = pipe.init_buffer(asc.TBuf(asc.VECCALC), ROW_FACTOR_SPLIT_D * 4)

    # Process: ProcessMain over the core's rows in batches of 32
    rows = t.core_calc_tail if (t.core_calc_tail != 0 and idx == t.block_dim - 1) else t.block_factor
    dgamma_out_gm = workspace_gm if det else dgamma
    loop_main_outer, tail_outer = rows // ROW_FACTOR_SPLIT_D, rows % ROW_FACTOR_SPLIT_D
    for i_outer in range(loop_main_outer + (1 if tail_outer > 0 else 0)):
        _split_d_sub_process(ctx, pipe, t, i_outer, ROW_FACTOR_SPLIT_D if i_outer < loop_main_outer else tail_outer,
                             rstd_gm, x_gm, dy_gm, gamma, dx_gm, dgamma_out_gm, in_que_x, in_que_dy, in_que_rstd,
                             in_que_gamma, out_que_dx, out_que_dgamma, mean_buf, mean_tmp_buf)
    if det:  # doDeterminCompute
        asc.sync_all(ctx)
        _do_deter(ctx, pipe, t, in_que_x, in_que_dy, workspace_gm_ori, dgamma)


KERNELS = {SPLIT_N: rms_norm_grad_split_n_kernel, 2: rms_norm_grad_split_d_kernel}


def check_supported(t: RmsNormGradTiling) -> None:
    """The kernels here are the non-chunked ones; the chunked deterministic split-D (inputs >= 500 MiB on 910B)
    would need a workspace layout tilesim does not emulate yet, so it is refused rather than run out of bounds."""
    if t.need_chunk:
        raise tiling_error("deterministic", f"the chunked deterministic split-D kernel (need_chunk, chunk_size "
                                            f"{t.chunk_size}) is not emulated by tilesim yet")


def run(t: RmsNormGradTiling, spec: SocSpec, dy: np.ndarray, x: np.ndarray, rstd: np.ndarray, gamma: np.ndarray,
        dx: np.ndarray, dgamma: np.ndarray, ws: np.ndarray | None, checks: bool | None = None,
        auto_sync: bool | None = None) -> RunReport:
    """Launch the kernel of the tiling key on arrays already validated: the device part of the op
    (``aclnnRmsNormGrad``). ``ws`` is the tiling's workspace (its 16 MiB and the user part); ``auto_sync`` is
    BiSheng's ``--cce-auto-sync`` for checked mode."""
    check_supported(t)
    ub_plan(t, spec).check()
    user_ws = None if ws is None else np.asarray(ws).reshape(-1).view(np.uint8)[SYS_WORKSPACE:t.workspace_size]
    return launch(KERNELS[t.tiling_key], t, np.ascontiguousarray(dy), np.ascontiguousarray(x),
                  np.ascontiguousarray(rstd), np.ascontiguousarray(gamma), dx, dgamma.reshape(-1),
                  block_dim=t.block_dim, outputs=2, soc=spec, checks=checks, workspace=user_ws, op="rms_norm_grad",
                  gm_names=GM_NAMES, auto_sync=auto_sync)


@accepts_torch(arrays=("dy", "x", "rstd", "gamma"))
def rms_norm_grad(dy: Any, x: Any, rstd: Any, gamma: Any, *, soc: str | SocSpec = DEFAULT_SOC,
                  deterministic: bool = False, tiling: RmsNormGradTiling | None = None, checks: bool | None = None,
                  out: tuple[np.ndarray | None, np.ndarray | None] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """aclnnRmsNormGrad: ``(dx, dgamma)`` from dy, x, rstd and gamma, computed by the tiled kernel.

    dx has dy's shape and dtype; dgamma has gamma's shape and is float32. ``tiling`` runs a TilingData made
    with ``tiling.rms_norm_grad(..., core_num=..., ub_factor=..., buffer_num=...)`` (checked first);
    ``checks=True`` runs checked mode; ``out=(dx, dgamma)`` writes into existing arrays.
    Errors raise :class:`tilesim.AclnnError` with the aclnn status; inputs are never modified, and nothing
    is written on error.
    """
    spec = get_soc(soc)
    args = (dy, x, rstd, gamma)
    t = (make_tiling(*args, soc=spec, deterministic=deterministic) if tiling is None
         else check_tiling(tiling, *args, soc=spec, deterministic=deterministic))
    check_supported(t)
    ub_plan(t, spec).check()
    dx, dgamma = outputs(out, ("dx", shape_of(dy), dtype_name(dy)), ("dgamma", shape_of(gamma), FP32))
    run(t, spec, dy, x, rstd, gamma, dx, dgamma, workspace(t.workspace_size), checks)
    return dx, dgamma


__all__ = ["check_supported", "rms_norm_grad", "rms_norm_grad_split_d_kernel", "rms_norm_grad_split_n_kernel",
           "run"]
