"""aclnnGroupNormBackward: the GroupNormGrad kernel of ops-nn (``norm/group_norm_grad/op_kernel/group_norm_grad.h``,
the DAV_2201 kernel ``GroupNormGrad<T, isDeterministic>`` that ``group_norm_grad.cpp`` instantiates per tiling key)
on tilesim's programming model, the op-level decomposition aclnn uses on the other SoCs, and the host op API.

The kernel, call for call (its function names in the docstrings below):

- Init: ``Init_Output_GM`` on core 0 (InitOutput of what the atomic adds land in: the outputs for fp32 with
  N <= 2, C floats of the workspace for b16 with N <= 2, the workspace rows and for fp32 the outputs with N > 2),
  ``Init_Unified_Buffer`` (the mode's queues and TBufs), SyncAll.
- Process: per task (n, g) ``[start_task_id, +cur_core_task_num)`` the UB mode's loop: 0 (CopyIn_Mode_0,
  Compute_Mode_0: the group resident; a channel whose start is not 32 B aligned re-read from GM, into in_temp_x /
  in_temp_dy for its sums and into the group buffers at the aligned offset before it for its dx, in the uncentred
  form), 1 (Compute_Mode_1: a channel at a time), 2 (Compute_Mode_2: two channels a pass in two buffers of each
  queue), 3 (Compute_Mode_3: a channel in HxW chunks, CopyIn_x, compute_dgamma, Copyout_dgamma, the chunk sums
  added with Kahan compensation), 5 (CopyIn_Mode_0, Compute_Mode_5: HxW = 1). Each computes the channel sums Σdy
  and Σdy·x̂ (x̂ = x·rstd − mean·rstd, ``Adds_Muls_template``; the sums by ``ReduceSum_template``: Copy and Adds
  folding from 128 repeats down to one, ReduceSum of 64, GetValue), hands them to ``Mode_Selection``, and for dx
  ``Mul_ReduceSum_template`` (c1 = Σγ·Σdy / D and c2 = Σγ·Σdy·x̂ / D by ReduceSum's count form) and dx =
  rstd·(γ·dy − c1 − c2·x̂) in the mode's own operation order. b16 lands in a T TBuf and is cast (CAST_NONE) to
  fp32 (``Custom_DataCopy_In``) and goes out cast with CAST_ROUND (``Custom_DataCopy_Out``).
- ``Mode_Selection``: the C_G sums by SetAtomicAdd DataCopyPad (``fp32_dgamma_dbeta2GM``) into the outputs (fp32,
  N <= 2), C floats of the workspace (b16, N = 2), or workspace row n / 2 (N > 2: two addends an address); b16
  with N = 1 casts and writes them (``non_fp32_dgamma_dbeta2GM``).
- ``pipe.Reset()``, then the second stage after a SyncAll: the deterministic fp32 reduction
  (``reduce_dgamma_dbeta_WSP2GM``: two halves of the cores fold the workspace rows of a channel slice,
  ``reduce_axis_n_WSP2UB``, and add them atomically into the zeroed outputs), the deterministic b16 one
  (``reduce_cast_dgamma_dbeta_WSP2GM``: every row, then the cast), or b16 with N = 2 the cast of the fp32 sums
  (``cast_dgamma_dbeta_WSP2GM``). fp32 with N <= 2 has no second stage and no second SyncAll.

The PipeBarriers, SetFlag / WaitFlag pairs (event ids from FetchEventID where ops-nn takes them so) and queue calls
are ops-nn's, in its places; the op is built with BiSheng's auto-sync on, which inserts the V-V barriers and the
syncs with PIPE_S that ops-nn leaves out. The atomic adds land in core order; at most two addends meet at an
address besides the zeros, so the sums are the NPU's in any order.

Where this differs from ops-nn on purpose:

- Compute_Mode_5: ops-nn's atomic DataCopyPad of dgamma (``fp32_dgamma_dbeta2GM``) reads the buffer the Mul just
  wrote with only an S_MTE3 pair between them (the PipeBarrier<PIPE_ALL> comes before the Mul): a V to MTE3 race.
  Here a SetFlag / WaitFlag<V_MTE3> pair follows the Mul.
- ``Custom_DataCopy_Out`` for b16: ops-nn sets MTE3_V with EVENT_ID0 while the FreeTensor of out_queue_dbeta
  (a VECOUT queue: its MTE3_V id 0 pending until the next AllocTensor) still holds it, in modes 1, 2, 3 and 5: a
  SetFlag on a flag already set. Here that id comes from FetchEventID (V_MTE3 keeps EVENT_ID0, which is free).
- ``TBuf::Get<T>(count)`` of a count that is not a whole number of 32 B blocks: here Get<T>() of the whole TBuf
  (the copies and casts touch ``count`` elements either way).
- One InitBuffer order per kernel, so that the buffer names in reports are right whatever the mode: a buffer a
  mode does not place (in_temp_x / in_temp_dy with aligned channels; the stage-2 reduce queues of the b16 cast
  with N = 2) is placed with 0 bytes, where it leaves every offset as ops-nn's; fp32 mode 3 places
  temp_queue_HXW after the dgamma / dbeta queues (Init_Unified_Buffer_FP32_MODE_3 has it before them: two
  offsets differ, no size).

Numerics beside ops-nn's: ``ReduceSum``'s count form adds its repeats' sums in order, as A2 does, so with C/G >
192 (four or more repeats) c1 and c2, and about one ulp of dx, are those of that order.

Only DAV_2201 (910B, 910_93) runs this kernel. aclnn decomposes the op on the others (the 910 training series and
310P): dx from BatchNorm backward over [1, N·G, D] of dy·γ with var = 1/rstd² − 1e-5, dgamma and dbeta from
ReduceSum ops, each op rounding to the tensors' dtype (:func:`decomposed`).
"""

from __future__ import annotations

from collections import namedtuple
from typing import Any

import numpy as np
from numba.extending import overload
from tilesim.tiling.common import dtype_name, shape_of
from tilesim.tiling.group_norm_backward import (
    DETERMINISTIC_KEY,
    MODE_0,
    MODE_1,
    MODE_2,
    MODE_3,
    MODE_5,
    SPLIT_COUNT,
    SYS_WORKSPACE,
    GroupNormBackwardTiling,
    check_args,
    check_tiling,
)
from tilesim.tiling.group_norm_backward import group_norm_backward as make_tiling

from tilesim import machine as asc  # AscendC::
from tilesim.errors import invalid
from tilesim.interop import accepts_torch
from tilesim.jit import OVERLOAD_OPTIONS, njit
from tilesim.runtime.host_threads import workspace
from tilesim.runtime.launcher import kernel, launch
from tilesim.runtime.report import RunReport
from tilesim.soc import DEFAULT_SOC, SocSpec, get_soc

from .common import NUMPY_DTYPE, outputs, to_float

GM_NAMES = ["gradOut", "mean", "rstd", "input", "gamma", "gradInput", "gradGammaOut", "gradBetaOut"]
MASK = 64  # ReduceSum_template: floats a repeat
MAX_LEN = 128  # ReduceSum_template folds from 128 repeats down
FLOAT_PER_BLOCK = 8
DX_EPS = 1e-5  # the decomposition's eps (GradInputProcess)

Buffers = namedtuple("Buffers", ["in_queue_dy", "in_queue_x", "in_queue_gamma", "out_queue_dgamma", "out_queue_dbeta",
                                 "temp_queue_hxw", "in_temp_x", "in_temp_dy", "in_tbuf_dy_t", "in_tbuf_x_t",
                                 "in_tbuf_gamma_t", "out_tbuf_dgamma_t", "out_tbuf_dbeta_t"])
Buffers.__doc__ = "Init_Unified_Buffer's queues and TBufs (the T TBufs None in the float kernel)."
Gm = namedtuple("Gm", ["dy", "mean", "rstd", "x", "gamma", "dx", "dgamma", "dbeta", "dgamma_ws", "dbeta_ws"])
Gm.__doc__ = "The GM tensors: the op's, and the two halves of the user workspace (dgamma's, dbeta's), float."


# ---------------------------------------------------------------------------------------------------------------
# tools_func


@njit(cache=True)
def _sync(ctx, pipe, event):
    """A SetFlag / WaitFlag pair of ``event`` back to back, its id from FetchEventID."""
    ev = pipe.fetch_event_id(event)
    asc.set_flag(ctx, event, ev)
    asc.wait_flag(ctx, event, ev)


@njit(cache=True)
def _get_mean_rstd(ctx, g, task):
    """Get_Mean_Rstd: the task's mean and rstd by GetValue from GM, then PipeBarrier<PIPE_ALL>."""
    mean = np.float32(to_float(g.mean.dtype, g.mean.get_value(task)))
    rstd = np.float32(to_float(g.rstd.dtype, g.rstd.get_value(task)))
    asc.pipe_barrier(ctx, asc.PIPE_ALL)
    return mean, rstd


def _copy_in(ctx, dst, tbuf, src, count):  # type: ignore[no-untyped-def]
    """Custom_DataCopy_In: DataCopyPad of ``count`` elements (DataCopyPadExtParams{false, 0, 0, 0}); b16 lands in
    the T TBuf ``tbuf``, PipeBarrier<PIPE_ALL>, Cast to ``dst`` with CAST_NONE (exact)."""


@overload(_copy_in, jit_options=OVERLOAD_OPTIONS)
def _copy_in_impl(ctx, dst, tbuf, src, count):  # type: ignore[no-untyped-def]
    if src.dtype.dt.size == 4:
        def fp32(ctx, dst, tbuf, src, count):  # type: ignore[no-untyped-def]
            asc.data_copy_pad(dst, src, asc.DataCopyExtParams(1, count * 4, 0, 0),
                              asc.DataCopyPadExtParams(False, 0, 0, 0))
        return fp32

    def b16(ctx, dst, tbuf, src, count):  # type: ignore[no-untyped-def]
        temp = tbuf.get(src.dtype)
        asc.data_copy_pad(temp, src, asc.DataCopyExtParams(1, count * 2, 0, 0),
                          asc.DataCopyPadExtParams(False, 0, 0, 0))
        asc.pipe_barrier(ctx, asc.PIPE_ALL)
        asc.cast(dst, temp, asc.CAST_NONE, count)
    return b16


def _copy_out(ctx, pipe, dst, src, tbuf, count):  # type: ignore[no-untyped-def]
    """Custom_DataCopy_Out: fp32 by DataCopyPad as it is; b16 Cast with CAST_ROUND into the T TBuf ``tbuf``,
    SetFlag / WaitFlag<V_MTE3> (EVENT_ID0), DataCopyPad, SetFlag / WaitFlag<MTE3_V> (an id from FetchEventID:
    ops-nn's EVENT_ID0 may be held by a FreeTensor)."""


@overload(_copy_out, jit_options=OVERLOAD_OPTIONS)
def _copy_out_impl(ctx, pipe, dst, src, tbuf, count):  # type: ignore[no-untyped-def]
    if dst.dtype.dt.size == 4:
        def fp32(ctx, pipe, dst, src, tbuf, count):  # type: ignore[no-untyped-def]
            asc.data_copy_pad(dst, src, asc.DataCopyParams(1, count * 4, 0, 0))
        return fp32

    def b16(ctx, pipe, dst, src, tbuf, count):  # type: ignore[no-untyped-def]
        temp = tbuf.get(dst.dtype)
        asc.cast(temp, src, asc.CAST_ROUND, count)
        asc.set_flag(ctx, asc.HardEvent.V_MTE3, 0)
        asc.wait_flag(ctx, asc.HardEvent.V_MTE3, 0)
        asc.data_copy_pad(dst, temp, asc.DataCopyParams(1, count * 2, 0, 0))
        _sync(ctx, pipe, asc.HardEvent.MTE3_V)
    return b16


@njit(cache=True)
def _adds_muls(dst, src, adds_scalar, muls_scalar, count):
    """Adds_Muls_template: Muls by ``muls_scalar``, then Adds ``adds_scalar`` (two roundings, no fused
    multiply-add; ops-nn passes dst = src)."""
    asc.muls(dst, src, muls_scalar, count)
    asc.adds(dst, src, adds_scalar, count)


@njit(cache=True)
def _reduce_sum_template(dst, src, work, count, mode):
    """ReduceSum_template: with ``mode`` and more than 64 elements, Copy the first ``start`` repeats (the largest
    ``start`` of 128, 64, ... 1 below the count) and Add the rest onto them, then Add each lower half onto the
    head (the mask register as the count form left it), ReduceSum of 64; else ReduceSum of ``count``. The result
    by GetValue(0). Past 16384 elements the first Add writes beyond the folded head and those lanes are lost, as
    on the NPU; the tilings keep HxW chunks below it on 192 KiB UBs."""
    if mode and count > MASK:
        first = True
        start = MAX_LEN
        while start >= 1:
            inner = start * MASK
            if count > inner and first:
                asc.copy(dst, src, MASK, start, asc.CopyRepeatParams(1, 1, 8, 8))
                asc.add(dst, src[inner], dst, count - inner)
                count = inner
                first = False
            elif count > inner:
                asc.add(dst, dst[inner], dst, asc.MASK_PLACEHOLDER, start, asc.BinaryRepeatParams(1, 1, 1, 8, 8, 8))
                count = inner
            start >>= 1
        asc.reduce_sum(dst, dst, work, MASK)
    else:
        asc.reduce_sum(dst, src, work, count)
    return dst.get_value(0)


@njit(cache=True)
def _mul_reduce_sum_template(t, dbeta_local, dgamma_local, gamma_local):
    """Mul_ReduceSum_template: the sums scaled by γ in place, then c1 = ReduceSum(γ·Σdy) / D and
    c2 = ReduceSum(γ·Σdy·x̂) / D (D = C_G·HxW)."""
    cg = t.c_g
    asc.mul(dbeta_local, gamma_local, dbeta_local, cg)
    asc.mul(dgamma_local, gamma_local, dgamma_local, cg)
    d = np.float32(t.c_g * t.hxw)
    c1 = np.float32(_reduce_sum_template(dbeta_local, dbeta_local, dbeta_local, cg, False) / d)
    c2 = np.float32(_reduce_sum_template(dgamma_local, dgamma_local, dgamma_local, cg, False) / d)
    return c1, c2


@njit(cache=True)
def _load_gamma(ctx, pipe, t, b, g, task):
    """The group's γ: AllocTensor of in_queue_gamma, Custom_DataCopy_In, SetFlag / WaitFlag<MTE2_V>."""
    gamma_local = b.in_queue_gamma.alloc_tensor(asc.float32)
    _copy_in(ctx, gamma_local, b.in_tbuf_gamma_t, g.gamma[(task % t.g) * t.c_g], t.c_g)
    _sync(ctx, pipe, asc.HardEvent.MTE2_V)
    return gamma_local


@njit(cache=True)
def _fp32_dgamma_dbeta2gm(ctx, pipe, t, ch, dgamma_out, dgamma_ub, dbeta_out, dbeta_ub):
    """fp32_dgamma_dbeta2GM: S_MTE3, then under SetAtomicAdd<float> the C_G sums of dbeta, then dgamma, each
    followed by an MTE3_V pair."""
    _sync(ctx, pipe, asc.HardEvent.S_MTE3)
    asc.set_atomic_add(ctx, asc.float32)
    params = asc.DataCopyParams(1, t.c_g * 4, 0, 0)
    if t.dbeta_is_require:
        asc.data_copy_pad(dbeta_out[ch], dbeta_ub, params)
        _sync(ctx, pipe, asc.HardEvent.MTE3_V)
    if t.dgamma_is_require:
        asc.data_copy_pad(dgamma_out[ch], dgamma_ub, params)
        _sync(ctx, pipe, asc.HardEvent.MTE3_V)
    asc.set_atomic_none(ctx)


@njit(cache=True)
def _non_fp32_dgamma_dbeta2gm(ctx, pipe, t, b, ch, g, dgamma_ub, dbeta_ub):
    """non_fp32_dgamma_dbeta2GM (b16, N = 1): S_MTE3, then dbeta and dgamma each Cast with CAST_ROUND into its T
    TBuf, V_MTE3, DataCopyPad."""
    _sync(ctx, pipe, asc.HardEvent.S_MTE3)
    params = asc.DataCopyParams(1, t.c_g * 2, 0, 0)
    if t.dbeta_is_require:
        dbeta_temp = b.out_tbuf_dbeta_t.get(g.dbeta.dtype)
        asc.cast(dbeta_temp, dbeta_ub, asc.CAST_ROUND, t.c_g)
        _sync(ctx, pipe, asc.HardEvent.V_MTE3)
        asc.data_copy_pad(g.dbeta[ch], dbeta_temp, params)
    if t.dgamma_is_require:
        dgamma_temp = b.out_tbuf_dgamma_t.get(g.dgamma.dtype)
        asc.cast(dgamma_temp, dgamma_ub, asc.CAST_ROUND, t.c_g)
        _sync(ctx, pipe, asc.HardEvent.V_MTE3)
        asc.data_copy_pad(g.dgamma[ch], dgamma_temp, params)


def _mode_selection(ctx, pipe, t, b, g, task, dgamma_ub, dbeta_ub):  # type: ignore[no-untyped-def]
    """Mode_Selection: where a task's C_G sums go (by ``T`` and isDeterministic)."""


@overload(_mode_selection, jit_options=OVERLOAD_OPTIONS)
def _mode_selection_impl(ctx, pipe, t, b, g, task, dgamma_ub, dbeta_ub):  # type: ignore[no-untyped-def]
    if g.types[g.fields.index("dgamma")].dtype.dt.size == 4:  # g: the Numba type of a Gm
        def fp32(ctx, pipe, t, b, g, task, dgamma_ub, dbeta_ub):  # type: ignore[no-untyped-def]
            if t.tiling_key < DETERMINISTIC_KEY:
                _fp32_dgamma_dbeta2gm(ctx, pipe, t, (task % t.g) * t.c_g, g.dgamma, dgamma_ub, g.dbeta, dbeta_ub)
            else:
                ch = ((task // t.g) // SPLIT_COUNT * t.g + task % t.g) * t.c_g
                _fp32_dgamma_dbeta2gm(ctx, pipe, t, ch, g.dgamma_ws, dgamma_ub, g.dbeta_ws, dbeta_ub)
        return fp32

    def b16(ctx, pipe, t, b, g, task, dgamma_ub, dbeta_ub):  # type: ignore[no-untyped-def]
        if t.tiling_key < DETERMINISTIC_KEY:
            ch = (task % t.g) * t.c_g
            if t.n == 1:
                _non_fp32_dgamma_dbeta2gm(ctx, pipe, t, b, ch, g, dgamma_ub, dbeta_ub)
            else:
                _fp32_dgamma_dbeta2gm(ctx, pipe, t, ch, g.dgamma_ws, dgamma_ub, g.dbeta_ws, dbeta_ub)
        else:
            ch = ((task // t.g) // SPLIT_COUNT * t.g + task % t.g) * t.c_g
            _fp32_dgamma_dbeta2gm(ctx, pipe, t, ch, g.dgamma_ws, dgamma_ub, g.dbeta_ws, dbeta_ub)
    return b16


# ---------------------------------------------------------------------------------------------------------------
# MODE0 and MODE5


@njit(cache=True)
def _copy_in_mode_0(ctx, pipe, t, b, g, task):
    """CopyIn_Mode_0: the group's dy and x (EnQue each), x̂ in x's buffer after the MTE2_V and S_V waits; the task's
    mean and rstd."""
    epg = t.c_g * t.hxw
    offset = task * epg
    dy_local = b.in_queue_dy.alloc_tensor(asc.float32)
    _copy_in(ctx, dy_local, b.in_tbuf_dy_t, g.dy[offset], epg)
    b.in_queue_dy.enque(dy_local)
    x_local = b.in_queue_x.alloc_tensor(asc.float32)
    _copy_in(ctx, x_local, b.in_tbuf_x_t, g.x[offset], epg)
    mte2_v = pipe.fetch_event_id(asc.HardEvent.MTE2_V)
    asc.set_flag(ctx, asc.HardEvent.MTE2_V, mte2_v)
    mean, rstd = _get_mean_rstd(ctx, g, task)
    _sync(ctx, pipe, asc.HardEvent.S_V)
    asc.wait_flag(ctx, asc.HardEvent.MTE2_V, mte2_v)
    _adds_muls(x_local, x_local, np.float32(-1.0) * mean * rstd, rstd, epg)
    b.in_queue_x.enque(x_local)
    return mean, rstd


@njit(cache=True)
def _compute_mode_0(ctx, pipe, t, b, g, task, mean, rstd):
    """Compute_Mode_0: the channel sums (an unaligned channel from in_temp_x / in_temp_dy), Mode_Selection, then
    per channel dx into temp_queue_HXW and out (an unaligned channel re-read at the aligned offset before it)."""
    hxw, cg = t.hxw, t.c_g
    epg = cg * hxw
    dy_local = b.in_queue_dy.deque(asc.float32)
    x_local = b.in_queue_x.deque(asc.float32)
    temp_1_local = b.out_queue_dbeta.alloc_tensor(asc.float32)
    temp_2_local = b.out_queue_dgamma.alloc_tensor(asc.float32)
    temp_hxw_local = b.temp_queue_hxw.alloc_tensor(asc.float32)
    neg_mr = np.float32(-1.0) * mean * rstd
    for ci in range(cg):
        co = ci * hxw
        if co % FLOAT_PER_BLOCK == 0:
            temp1 = _reduce_sum_template(temp_hxw_local, dy_local[co], temp_hxw_local, hxw, True)
            temp_1_local.set_value(ci, temp1)
            _sync(ctx, pipe, asc.HardEvent.S_V)
            asc.mul(temp_hxw_local, x_local[co], dy_local[co], hxw)
            temp2 = _reduce_sum_template(temp_hxw_local, temp_hxw_local, temp_hxw_local, hxw, True)
            temp_2_local.set_value(ci, temp2)
        else:
            gm_offset = task * epg + co
            unalign_channel_x = b.in_temp_x.get(asc.float32)
            unalign_channel_dy = b.in_temp_dy.get(asc.float32)
            _copy_in(ctx, unalign_channel_x, b.in_tbuf_x_t, g.x[gm_offset], hxw)
            _copy_in(ctx, unalign_channel_dy, b.in_tbuf_dy_t, g.dy[gm_offset], hxw)
            _sync(ctx, pipe, asc.HardEvent.MTE2_V)
            _adds_muls(unalign_channel_x, unalign_channel_x, neg_mr, rstd, hxw)
            temp1 = _reduce_sum_template(temp_hxw_local, unalign_channel_dy, temp_hxw_local, hxw, True)
            asc.mul(temp_hxw_local, unalign_channel_x, unalign_channel_dy, hxw)
            temp2 = _reduce_sum_template(temp_hxw_local, temp_hxw_local, temp_hxw_local, hxw, True)
            asc.pipe_barrier(ctx, asc.PIPE_ALL)
            temp_1_local.set_value(ci, temp1)
            temp_2_local.set_value(ci, temp2)
    b.temp_queue_hxw.free_tensor(temp_hxw_local)
    _mode_selection(ctx, pipe, t, b, g, task, temp_2_local, temp_1_local)
    if t.dx_is_require:
        gamma_local = _load_gamma(ctx, pipe, t, b, g, task)
        c1, c2 = _mul_reduce_sum_template(t, temp_1_local, temp_2_local, gamma_local)
        t_per_block = 32 // asc.size_of(g.dy.dtype)
        for ci in range(cg):
            co = ci * hxw
            gm_offset = task * epg + co
            gamma = gamma_local.get_value(ci)
            s_v = pipe.fetch_event_id(asc.HardEvent.S_V)
            asc.set_flag(ctx, asc.HardEvent.S_V, s_v)
            if co % t_per_block == 0:
                _adds_muls(x_local[co], x_local[co], rstd * c1, rstd * c2, hxw)
                asc.wait_flag(ctx, asc.HardEvent.S_V, s_v)
                asc.muls(dy_local[co], dy_local[co], rstd * gamma, hxw)
                temp_hxw_local = b.temp_queue_hxw.alloc_tensor(asc.float32)
                asc.sub(temp_hxw_local, dy_local[co], x_local[co], hxw)
                _sync(ctx, pipe, asc.HardEvent.V_MTE3)
            else:
                offset = co // t_per_block * t_per_block
                asc.pipe_barrier(ctx, asc.PIPE_ALL)
                _copy_in(ctx, x_local[offset], b.in_tbuf_x_t, g.x[gm_offset], hxw)
                _copy_in(ctx, dy_local[offset], b.in_tbuf_dy_t, g.dy[gm_offset], hxw)
                _sync(ctx, pipe, asc.HardEvent.MTE2_V)
                _adds_muls(x_local[offset], x_local[offset], rstd * c1 - mean * rstd * rstd * c2, rstd * rstd * c2,
                           hxw)
                asc.wait_flag(ctx, asc.HardEvent.S_V, s_v)
                asc.muls(dy_local[offset], dy_local[offset], rstd * gamma, hxw)
                temp_hxw_local = b.temp_queue_hxw.alloc_tensor(asc.float32)
                asc.sub(temp_hxw_local, dy_local[offset], x_local[offset], hxw)
                asc.pipe_barrier(ctx, asc.PIPE_ALL)
                _sync(ctx, pipe, asc.HardEvent.V_MTE3)
            _copy_out(ctx, pipe, g.dx[gm_offset], temp_hxw_local, b.in_tbuf_dy_t, hxw)
            b.temp_queue_hxw.free_tensor(temp_hxw_local)
        b.in_queue_gamma.free_tensor(gamma_local)
    b.out_queue_dbeta.free_tensor(temp_1_local)
    b.out_queue_dgamma.free_tensor(temp_2_local)
    b.in_queue_dy.free_tensor(dy_local)
    b.in_queue_x.free_tensor(x_local)


@njit(cache=True)
def _compute_mode_5(ctx, pipe, t, b, g, task, mean, rstd):
    """Compute_Mode_5 (HxW = 1): Σdy is dy (a UB-to-UB DataCopy), Σdy·x̂ one Mul; then dx over the C_G channels."""
    cg = t.c_g
    dy_local = b.in_queue_dy.deque(asc.float32)
    x_local = b.in_queue_x.deque(asc.float32)
    temp_1_local = b.out_queue_dbeta.alloc_tensor(asc.float32)
    temp_2_local = b.out_queue_dgamma.alloc_tensor(asc.float32)
    asc.data_copy(temp_1_local, dy_local, (cg + FLOAT_PER_BLOCK - 1) // FLOAT_PER_BLOCK * FLOAT_PER_BLOCK)
    asc.pipe_barrier(ctx, asc.PIPE_ALL)
    asc.mul(temp_2_local, x_local, dy_local, cg)
    _sync(ctx, pipe, asc.HardEvent.V_MTE3)  # not in ops-nn: the Mul's result is what Mode_Selection copies out
    _mode_selection(ctx, pipe, t, b, g, task, temp_2_local, temp_1_local)
    if t.dx_is_require:
        gamma_local = _load_gamma(ctx, pipe, t, b, g, task)
        asc.mul(dy_local, dy_local, gamma_local, cg)
        c1, c2 = _mul_reduce_sum_template(t, temp_1_local, temp_2_local, gamma_local)
        b.out_queue_dbeta.free_tensor(temp_1_local)
        b.out_queue_dgamma.free_tensor(temp_2_local)
        b.in_queue_gamma.free_tensor(gamma_local)
        _adds_muls(x_local, x_local, rstd * c1, rstd * c2, cg)
        asc.muls(dy_local, dy_local, rstd, cg)
        temp_hxw_local = b.temp_queue_hxw.alloc_tensor(asc.float32)
        asc.sub(temp_hxw_local, dy_local, x_local, cg)
        b.in_queue_dy.free_tensor(dy_local)
        b.in_queue_x.free_tensor(x_local)
        _sync(ctx, pipe, asc.HardEvent.V_MTE3)
        _copy_out(ctx, pipe, g.dx[task * cg], temp_hxw_local, b.in_tbuf_dy_t, cg)
        _sync(ctx, pipe, asc.HardEvent.MTE3_MTE2)
        b.temp_queue_hxw.free_tensor(temp_hxw_local)
    else:
        b.out_queue_dbeta.free_tensor(temp_1_local)
        b.out_queue_dgamma.free_tensor(temp_2_local)
        b.in_queue_dy.free_tensor(dy_local)
        b.in_queue_x.free_tensor(x_local)


# ---------------------------------------------------------------------------------------------------------------
# MODE1, MODE2


@njit(cache=True)
def _dx_channel(ctx, pipe, t, b, g, x_local, dy_local, temp_hxw_queue, offset, count, gamma, rstd, adds, muls):
    """The dx of one channel (or HxW chunk) in modes 1-3 after its copy-in: γ·dy − (x·(rstd·c2) − (mean·rstd·c2 −
    c1)), FreeTensor x, times rstd into temp_queue_HXW, FreeTensor dy, V_MTE3, Custom_DataCopy_Out, FreeTensor."""
    asc.muls(dy_local, dy_local, gamma, count)
    _adds_muls(x_local, x_local, adds, muls, count)
    asc.sub(dy_local, dy_local, x_local, count)
    b.in_queue_x.free_tensor(x_local)
    temp_hxw_local = temp_hxw_queue.alloc_tensor(asc.float32)
    asc.muls(temp_hxw_local, dy_local, rstd, count)
    b.in_queue_dy.free_tensor(dy_local)
    _sync(ctx, pipe, asc.HardEvent.V_MTE3)
    _copy_out(ctx, pipe, g.dx[offset], temp_hxw_local, b.in_tbuf_dy_t, count)
    temp_hxw_queue.free_tensor(temp_hxw_local)


@njit(cache=True)
def _compute_mode_1(ctx, pipe, t, b, g, task, mean, rstd):
    """Compute_Mode_1: a channel at a time, its sums, then (Mode_Selection between) its dx."""
    hxw, cg = t.hxw, t.c_g
    base_offset = task * cg * hxw
    temp_1_local = b.out_queue_dbeta.alloc_tensor(asc.float32)
    temp_2_local = b.out_queue_dgamma.alloc_tensor(asc.float32)
    for ci in range(cg):
        offset = base_offset + ci * hxw
        dy_local = b.in_queue_dy.alloc_tensor(asc.float32)
        _copy_in(ctx, dy_local, b.in_tbuf_dy_t, g.dy[offset], hxw)
        x_local = b.in_queue_x.alloc_tensor(asc.float32)
        _copy_in(ctx, x_local, b.in_tbuf_x_t, g.x[offset], hxw)
        _sync(ctx, pipe, asc.HardEvent.MTE2_V)
        temp_hxw_local = b.temp_queue_hxw.alloc_tensor(asc.float32)
        temp1 = _reduce_sum_template(temp_hxw_local, dy_local, temp_hxw_local, hxw, True)
        _adds_muls(x_local, x_local, np.float32(-1.0) * mean * rstd, rstd, hxw)
        asc.mul(temp_hxw_local, x_local, dy_local, hxw)
        b.in_queue_x.free_tensor(x_local)
        b.in_queue_dy.free_tensor(dy_local)
        temp2 = _reduce_sum_template(temp_hxw_local, temp_hxw_local, temp_hxw_local, hxw, True)
        b.temp_queue_hxw.free_tensor(temp_hxw_local)
        temp_1_local.set_value(ci, temp1)
        temp_2_local.set_value(ci, temp2)
    _mode_selection(ctx, pipe, t, b, g, task, temp_2_local, temp_1_local)
    if not t.dx_is_require:
        b.out_queue_dbeta.free_tensor(temp_1_local)
        b.out_queue_dgamma.free_tensor(temp_2_local)
        return
    gamma_local = _load_gamma(ctx, pipe, t, b, g, task)
    c1, c2 = _mul_reduce_sum_template(t, temp_1_local, temp_2_local, gamma_local)
    b.out_queue_dbeta.free_tensor(temp_1_local)
    b.out_queue_dgamma.free_tensor(temp_2_local)
    adds, muls = np.float32(-1.0) * (mean * rstd * c2 - c1), rstd * c2
    for ci in range(cg):
        offset = base_offset + ci * hxw
        gamma = gamma_local.get_value(ci)
        s_v = pipe.fetch_event_id(asc.HardEvent.S_V)
        asc.set_flag(ctx, asc.HardEvent.S_V, s_v)
        x_local = b.in_queue_x.alloc_tensor(asc.float32)
        _copy_in(ctx, x_local, b.in_tbuf_x_t, g.x[offset], hxw)
        dy_local = b.in_queue_dy.alloc_tensor(asc.float32)
        _copy_in(ctx, dy_local, b.in_tbuf_dy_t, g.dy[offset], hxw)
        _sync(ctx, pipe, asc.HardEvent.MTE2_V)
        asc.wait_flag(ctx, asc.HardEvent.S_V, s_v)
        _dx_channel(ctx, pipe, t, b, g, x_local, dy_local, b.temp_queue_hxw, offset, hxw, gamma, rstd, adds, muls)
    b.in_queue_gamma.free_tensor(gamma_local)


@njit(cache=True)
def _mode_2_sums(ctx, pipe, t, b, g, task, mean, rstd, x_local, dy_local, temp_hxw_local, temp_1_local,
                 temp_2_local, first, n):
    """Compute_Mode_2's sums of ``n`` (2, or 1 for an odd C_G's last) channels from channel ``first``: both copied in,
    MTE2_V, each step over the channels before the next."""
    hxw = t.hxw
    base_offset = task * t.c_g * hxw
    for i in range(n):
        offset = base_offset + (first + i) * hxw
        _copy_in(ctx, dy_local[i], b.in_tbuf_dy_t, g.dy[offset], hxw)
        _copy_in(ctx, x_local[i], b.in_tbuf_x_t, g.x[offset], hxw)
    _sync(ctx, pipe, asc.HardEvent.MTE2_V)
    # the pair's sums in scalars (channel 0's and 1's), not a heap array a pair
    dy_sum_0 = _reduce_sum_template(temp_hxw_local[0], dy_local[0], temp_hxw_local[0], hxw, True)
    dy_sum_1 = dy_sum_0
    if n == 2:
        dy_sum_1 = _reduce_sum_template(temp_hxw_local[1], dy_local[1], temp_hxw_local[1], hxw, True)
    for i in range(n):
        _adds_muls(x_local[i], x_local[i], np.float32(-1.0) * mean * rstd, rstd, hxw)
    for i in range(n):
        asc.mul(temp_hxw_local[i], x_local[i], dy_local[i], hxw)
    xdy_sum_0 = _reduce_sum_template(temp_hxw_local[0], temp_hxw_local[0], temp_hxw_local[0], hxw, True)
    xdy_sum_1 = xdy_sum_0
    if n == 2:
        xdy_sum_1 = _reduce_sum_template(temp_hxw_local[1], temp_hxw_local[1], temp_hxw_local[1], hxw, True)
    temp_1_local.set_value(first, dy_sum_0)
    temp_2_local.set_value(first, xdy_sum_0)
    if n == 2:
        temp_1_local.set_value(first + 1, dy_sum_1)
        temp_2_local.set_value(first + 1, xdy_sum_1)


@njit(cache=True)
def _compute_mode_2(ctx, pipe, t, b, g, task, mean, rstd):
    """Compute_Mode_2: two channels a pass in the two buffers of each queue (an odd C_G's last channel alone),
    their sums, Mode_Selection, then their dx the same way."""
    hxw, cg = t.hxw, t.c_g
    x_local = [b.in_queue_x.alloc_tensor(asc.float32), b.in_queue_x.alloc_tensor(asc.float32)]
    dy_local = [b.in_queue_dy.alloc_tensor(asc.float32), b.in_queue_dy.alloc_tensor(asc.float32)]
    temp_hxw_local = [b.temp_queue_hxw.alloc_tensor(asc.float32), b.temp_queue_hxw.alloc_tensor(asc.float32)]
    rest = cg // 2 * 2
    base_offset = task * cg * hxw
    temp_1_local = b.out_queue_dbeta.alloc_tensor(asc.float32)
    temp_2_local = b.out_queue_dgamma.alloc_tensor(asc.float32)
    for ci in range(cg // 2):
        _mode_2_sums(ctx, pipe, t, b, g, task, mean, rstd, x_local, dy_local, temp_hxw_local, temp_1_local,
                     temp_2_local, ci * 2, 2)
    if cg != rest:
        _mode_2_sums(ctx, pipe, t, b, g, task, mean, rstd, x_local, dy_local, temp_hxw_local, temp_1_local,
                     temp_2_local, rest, 1)
    b.temp_queue_hxw.free_tensor(temp_hxw_local[0])
    b.temp_queue_hxw.free_tensor(temp_hxw_local[1])
    b.in_queue_dy.free_tensor(dy_local[0])
    b.in_queue_dy.free_tensor(dy_local[1])
    b.in_queue_x.free_tensor(x_local[0])
    b.in_queue_x.free_tensor(x_local[1])
    _mode_selection(ctx, pipe, t, b, g, task, temp_2_local, temp_1_local)
    if not t.dx_is_require:
        b.out_queue_dgamma.free_tensor(temp_2_local)
        b.out_queue_dbeta.free_tensor(temp_1_local)
        return
    gamma_local = _load_gamma(ctx, pipe, t, b, g, task)
    c1, c2 = _mul_reduce_sum_template(t, temp_1_local, temp_2_local, gamma_local)
    b.out_queue_dgamma.free_tensor(temp_2_local)
    b.out_queue_dbeta.free_tensor(temp_1_local)
    adds, muls = np.float32(-1.0) * (mean * rstd * c2 - c1), rstd * c2
    gamma = np.zeros(2, np.float32)
    for first in range(0, cg, 2):
        n = 2 if first < rest else 1
        for i in range(n):
            gamma[i] = gamma_local.get_value(first + i)
        s_v = pipe.fetch_event_id(asc.HardEvent.S_V)
        asc.set_flag(ctx, asc.HardEvent.S_V, s_v)
        for i in range(n):
            x_local[i] = b.in_queue_x.alloc_tensor(asc.float32)
            dy_local[i] = b.in_queue_dy.alloc_tensor(asc.float32)
            _copy_in(ctx, x_local[i], b.in_tbuf_x_t, g.x[base_offset + (first + i) * hxw], hxw)
            _copy_in(ctx, dy_local[i], b.in_tbuf_dy_t, g.dy[base_offset + (first + i) * hxw], hxw)
        _sync(ctx, pipe, asc.HardEvent.MTE2_V)
        asc.wait_flag(ctx, asc.HardEvent.S_V, s_v)
        for i in range(n):
            _dx_channel(ctx, pipe, t, b, g, x_local[i], dy_local[i], b.temp_queue_hxw,
                        base_offset + (first + i) * hxw, hxw, gamma[i], rstd, adds, muls)
    b.in_queue_gamma.free_tensor(gamma_local)


# ---------------------------------------------------------------------------------------------------------------
# MODE3


@njit(cache=True)
def _copy_in_x(ctx, pipe, b, g, corr1, temp1, offset, count):
    """CopyIn_x: dy and x of a chunk in (x EnQue'd), MTE2_V, Σdy of the chunk added to ``temp1`` with Kahan
    compensation ``corr1``, dy EnQue'd."""
    x_local = b.in_queue_x.alloc_tensor(asc.float32)
    dy_local = b.in_queue_dy.alloc_tensor(asc.float32)
    _copy_in(ctx, dy_local, b.in_tbuf_dy_t, g.dy[offset], count)
    _copy_in(ctx, x_local, b.in_tbuf_x_t, g.x[offset], count)
    b.in_queue_x.enque(x_local)
    _sync(ctx, pipe, asc.HardEvent.MTE2_V)
    temp_hxw_local = b.temp_queue_hxw.alloc_tensor(asc.float32)
    adjusted = _reduce_sum_template(temp_hxw_local, dy_local, temp_hxw_local, count, True) - corr1
    total = adjusted + temp1
    corr1 = (total - temp1) - adjusted
    b.temp_queue_hxw.free_tensor(temp_hxw_local)
    b.in_queue_dy.enque(dy_local)
    return corr1, total


@njit(cache=True)
def _compute_dgamma(t, b, mean, rstd, count):
    """compute_dgamma: x̂ over the whole chunk buffer (tail or not), dy·x̂ into temp_queue_HXW (EnQue'd)."""
    x_local = b.in_queue_x.deque(asc.float32)
    _adds_muls(x_local, x_local, np.float32(-1.0) * mean * rstd, rstd, t.mode2_ub_capacity_ele)
    temp_hxw_local = b.temp_queue_hxw.alloc_tensor(asc.float32)
    dy_local = b.in_queue_dy.deque(asc.float32)
    asc.mul(temp_hxw_local, x_local, dy_local, count)
    b.temp_queue_hxw.enque(temp_hxw_local)
    b.in_queue_dy.free_tensor(dy_local)
    b.in_queue_x.free_tensor(x_local)


@njit(cache=True)
def _copyout_dgamma(b, corr2, temp2, count):
    """Copyout_dgamma: Σdy·x̂ of the chunk added to ``temp2`` with Kahan compensation ``corr2``."""
    temp_hxw_local = b.temp_queue_hxw.deque(asc.float32)
    adjusted = _reduce_sum_template(temp_hxw_local, temp_hxw_local, temp_hxw_local, count, True) - corr2
    total = adjusted + temp2
    corr2 = (total - temp2) - adjusted
    b.temp_queue_hxw.free_tensor(temp_hxw_local)
    return corr2, total


@njit(cache=True)
def _compute_mode_3(ctx, pipe, t, b, g, task, mean, rstd):
    """Compute_Mode_3: each channel in chunks of mode2_ub_capacity_ele (the last mode2_ub_tail_num), its sums
    over the chunks, Mode_Selection, then the chunks' dx."""
    hxw, cg = t.hxw, t.c_g
    cap, iters = t.mode2_ub_capacity_ele, t.mode2_ub_iteration_num
    temp_1_local = b.out_queue_dbeta.alloc_tensor(asc.float32)
    temp_2_local = b.out_queue_dgamma.alloc_tensor(asc.float32)
    zero = np.float32(0.0)
    temp1 = temp2 = corr1 = corr2 = zero
    for it in range(cg * iters):
        offset = task * cg * hxw + it // iters * hxw + it % iters * cap
        count = cap if it % iters != iters - 1 else t.mode2_ub_tail_num
        corr1, temp1 = _copy_in_x(ctx, pipe, b, g, corr1, temp1, offset, count)
        _compute_dgamma(t, b, mean, rstd, count)
        corr2, temp2 = _copyout_dgamma(b, corr2, temp2, count)
        if it % iters == iters - 1:
            temp_1_local.set_value(it // iters, temp1)
            temp_2_local.set_value(it // iters, temp2)
            temp1 = temp2 = corr1 = corr2 = zero
    _mode_selection(ctx, pipe, t, b, g, task, temp_2_local, temp_1_local)
    if not t.dx_is_require:
        b.out_queue_dbeta.free_tensor(temp_1_local)
        b.out_queue_dgamma.free_tensor(temp_2_local)
        return
    gamma_local = _load_gamma(ctx, pipe, t, b, g, task)
    c1, c2 = _mul_reduce_sum_template(t, temp_1_local, temp_2_local, gamma_local)
    b.out_queue_dbeta.free_tensor(temp_1_local)
    b.out_queue_dgamma.free_tensor(temp_2_local)
    adds, muls = np.float32(-1.0) * (mean * rstd * c2 - c1), rstd * c2
    for it in range(cg * iters):
        offset = task * cg * hxw + it // iters * hxw + it % iters * cap
        count = cap if it % iters != iters - 1 else t.mode2_ub_tail_num
        gamma = gamma_local.get_value(it // iters)
        s_v = pipe.fetch_event_id(asc.HardEvent.S_V)
        asc.set_flag(ctx, asc.HardEvent.S_V, s_v)
        x_local = b.in_queue_x.alloc_tensor(asc.float32)
        dy_local = b.in_queue_dy.alloc_tensor(asc.float32)
        _copy_in(ctx, x_local, b.in_tbuf_x_t, g.x[offset], count)
        _copy_in(ctx, dy_local, b.in_tbuf_dy_t, g.dy[offset], count)
        _sync(ctx, pipe, asc.HardEvent.MTE2_V)
        asc.wait_flag(ctx, asc.HardEvent.S_V, s_v)
        _dx_chunk_mode_3(ctx, pipe, b, g, x_local, dy_local, offset, count, gamma, rstd, adds, muls)
    b.in_queue_gamma.free_tensor(gamma_local)


@njit(cache=True)
def _dx_chunk_mode_3(ctx, pipe, b, g, x_local, dy_local, offset, count, gamma, rstd, adds, muls):
    """Compute_Mode_3's dx of a chunk: as modes 1 and 2, but temp_queue_HXW is allocated before x and dy are
    freed."""
    asc.muls(dy_local, dy_local, gamma, count)
    _adds_muls(x_local, x_local, adds, muls, count)
    asc.sub(dy_local, dy_local, x_local, count)
    temp_hxw_local = b.temp_queue_hxw.alloc_tensor(asc.float32)
    asc.muls(temp_hxw_local, dy_local, rstd, count)
    b.in_queue_x.free_tensor(x_local)
    b.in_queue_dy.free_tensor(dy_local)
    _sync(ctx, pipe, asc.HardEvent.V_MTE3)
    _copy_out(ctx, pipe, g.dx[offset], temp_hxw_local, b.in_tbuf_dy_t, count)
    b.temp_queue_hxw.free_tensor(temp_hxw_local)


# ---------------------------------------------------------------------------------------------------------------
# Process, the second stages, the kernels


@njit(cache=True)
def _process(ctx, pipe, t, b, g):
    """Process's task loop in the tiling's UB mode (Tiling_key)."""
    c = asc.get_block_idx(ctx)
    if c < t.tail_core:
        start, num = c * t.task_num_per_core, t.task_num_per_core
    else:
        start, num = c * t.task_num_per_tail_core + t.tail_core, t.task_num_per_tail_core
    mode = t.ub_mode
    for task in range(start, start + num):
        if mode == MODE_0 or mode == MODE_5:
            mean, rstd = _copy_in_mode_0(ctx, pipe, t, b, g, task)
            if mode == MODE_0:
                _compute_mode_0(ctx, pipe, t, b, g, task, mean, rstd)
            else:
                _compute_mode_5(ctx, pipe, t, b, g, task, mean, rstd)
        else:
            mean, rstd = _get_mean_rstd(ctx, g, task)
            if mode == MODE_1:
                _compute_mode_1(ctx, pipe, t, b, g, task, mean, rstd)
            elif mode == MODE_2:
                _compute_mode_2(ctx, pipe, t, b, g, task, mean, rstd)
            else:
                _compute_mode_3(ctx, pipe, t, b, g, task, mean, rstd)


@njit(cache=True)
def _init_output_gm(ctx, t, g):
    """Init_Output_GM (core 0): zero what the first stage's atomic adds land in, and for fp32 with N > 2 the
    outputs the second stage's land in."""
    if asc.get_block_idx(ctx) != 0:
        return
    det = t.tiling_key >= DETERMINISTIC_KEY
    fp32 = asc.size_of(g.dgamma.dtype) == 4
    if det or not fp32:
        asc.init_output(g.dgamma_ws, t.work_space_size if det else t.c, 0.0)
        asc.init_output(g.dbeta_ws, t.work_space_size if det else t.c, 0.0)
    if fp32:
        asc.init_output(g.dgamma, t.c, 0.0)
        asc.init_output(g.dbeta, t.c, 0.0)


@njit(cache=True)
def _init_unified_buffer(ctx, pipe, t, b16):
    """Init_Unified_Buffer: the mode's queues (two buffers each of dy, x and temp_queue_HXW in mode 2) and, for b16,
    the T TBufs; in_temp_x / in_temp_dy where a channel start can be unaligned in mode 0 (else 0 bytes). The
    float kernel leaves the T TBufs out (``b16`` False), the b16 kernel places them between, in ops-nn's order."""
    epb = 16 if b16 else 8
    mode, cg, hxw = t.ub_mode, t.c_g, t.hxw
    if mode == MODE_0:
        main = (cg * hxw + epb - 1) // epb * epb
    elif mode == MODE_3:
        main = (t.mode2_ub_capacity_ele + epb - 1) // epb * epb
    elif mode == MODE_5:
        main = (cg + epb - 1) // epb * epb
    else:
        main = (hxw + epb - 1) // epb * epb
    nbuf = 2 if mode == MODE_2 else 1
    cg_space = (cg + epb - 1) // epb * epb
    temp_space = 0
    if mode == MODE_0 and not (hxw % FLOAT_PER_BLOCK == 0 or cg == 1):
        temp_space = (hxw + epb - 1) // epb * epb * 4
    t_bytes = 2 if b16 else 0
    in_queue_dy = pipe.init_buffer(asc.TQue(asc.VECIN, 1), nbuf, main * 4)
    in_tbuf_dy_t = pipe.init_buffer(asc.TBuf(asc.VECCALC), main * t_bytes)
    in_queue_x = pipe.init_buffer(asc.TQue(asc.VECIN, 1), nbuf, main * 4)
    in_temp_x = pipe.init_buffer(asc.TBuf(asc.VECCALC), temp_space if b16 else 0)
    in_temp_dy = pipe.init_buffer(asc.TBuf(asc.VECCALC), temp_space if b16 else 0)
    in_tbuf_x_t = pipe.init_buffer(asc.TBuf(asc.VECCALC), main * t_bytes)
    in_queue_gamma = pipe.init_buffer(asc.TQue(asc.VECIN, 1), 1, cg_space * 4)
    in_tbuf_gamma_t = pipe.init_buffer(asc.TBuf(asc.VECCALC), cg_space * t_bytes)
    mode3_fp32 = mode == MODE_3 and not b16  # Init_Unified_Buffer_FP32_MODE_3: temp_queue_HXW before the sums
    temp_queue_hxw_fp32_mode3 = pipe.init_buffer(asc.TQue(asc.VECOUT, 1), nbuf, main * 4 if mode3_fp32 else 0)
    out_tbuf_dgamma_t = pipe.init_buffer(asc.TBuf(asc.VECCALC), cg_space * t_bytes)
    out_tbuf_dbeta_t = pipe.init_buffer(asc.TBuf(asc.VECCALC), cg_space * t_bytes)
    out_queue_dgamma = pipe.init_buffer(asc.TQue(asc.VECOUT, 1), 1, cg_space * 4)
    out_queue_dbeta = pipe.init_buffer(asc.TQue(asc.VECOUT, 1), 1, cg_space * 4)
    temp_queue_hxw = pipe.init_buffer(asc.TQue(asc.VECOUT, 1), nbuf, 0 if mode3_fp32 else main * 4)
    in_temp_x_fp32 = pipe.init_buffer(asc.TBuf(asc.VECCALC), 0 if b16 else temp_space)
    in_temp_dy_fp32 = pipe.init_buffer(asc.TBuf(asc.VECCALC), 0 if b16 else temp_space)
    if not b16:
        in_temp_x, in_temp_dy = in_temp_x_fp32, in_temp_dy_fp32
    if mode3_fp32:
        temp_queue_hxw = temp_queue_hxw_fp32_mode3
    return Buffers(in_queue_dy, in_queue_x, in_queue_gamma, out_queue_dgamma, out_queue_dbeta, temp_queue_hxw,
                   in_temp_x, in_temp_dy, in_tbuf_dy_t, in_tbuf_x_t, in_tbuf_gamma_t, out_tbuf_dgamma_t,
                   out_tbuf_dbeta_t)


@njit(cache=True)
def _init_buffer_4_stage2(pipe, t, b16, det):
    """After pipe.Reset: Initbuffer4stage2_mode1 (fp32, N > 2: the two sums' queues, coreBatchParts rows of each),
    Initbuffer4stage2_mode2 (b16, N > 2: the same and the two T TBufs) or Initbuffer4stage2_mode0 (b16, N = 2: a
    row of each and the T TBufs; the sums' queues 0 bytes)."""
    cast = t.cast_ele_num
    sums = cast * 4 if det else 0
    rows = t.core_batch_parts * cast * 4 if det else cast * 4
    t_bytes = cast * 2 if b16 else 0
    cal_queue_dgamma_reduce = pipe.init_buffer(asc.TQue(asc.VECIN, 1), 1, sums)
    cal_queue_dbeta_reduce = pipe.init_buffer(asc.TQue(asc.VECIN, 1), 1, sums)
    in_queue_dgamma_channel = pipe.init_buffer(asc.TQue(asc.VECIN, 1), 1, rows)
    in_queue_dbeta_channel = pipe.init_buffer(asc.TQue(asc.VECIN, 1), 1, rows)
    out_tbuf_dgamma_channel_t = pipe.init_buffer(asc.TBuf(asc.VECCALC), t_bytes)
    out_tbuf_dbeta_channel_t = pipe.init_buffer(asc.TBuf(asc.VECCALC), t_bytes)
    return (cal_queue_dgamma_reduce, cal_queue_dbeta_reduce, in_queue_dgamma_channel, in_queue_dbeta_channel,
            out_tbuf_dgamma_channel_t, out_tbuf_dbeta_channel_t)


@njit(cache=True)
def _reduce_axis_n_wsp2ub(ctx, pipe, t, que, ws, rows, count, dst_local):
    """reduce_axis_n_WSP2UB: ``rows`` workspace rows of ``count`` channels (C apart) into UB rows castEleNum apart,
    MTE2_V, folded by halves (the upper half onto the lower, a PipeBarrier<PIPE_V> before and after each Add), then
    added onto ``dst_local``."""
    cast = t.cast_ele_num
    vec_in_local = que.alloc_tensor(asc.float32)
    asc.data_copy_pad(vec_in_local, ws, asc.DataCopyExtParams(rows, count * 4, (t.c - count) * 4,
                                                             (cast - count) // FLOAT_PER_BLOCK),
                      asc.DataCopyPadExtParams(False, 0, 0, 0))
    _sync(ctx, pipe, asc.HardEvent.MTE2_V)
    end = mid = rows
    while mid >= 2:
        mid >>= 1
        end -= mid
        asc.pipe_barrier(ctx, asc.PIPE_V)
        asc.add(vec_in_local, vec_in_local[end * cast], vec_in_local, mid * cast)
        asc.pipe_barrier(ctx, asc.PIPE_V)
        mid = end
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.add(dst_local, vec_in_local, dst_local, count)
    que.free_tensor(vec_in_local)


@njit(cache=True)
def _reduce_rows(ctx, pipe, t, s2, g, start, ch, count, axis):
    """The loop of reduce_dgamma_dbeta_WSP2GM and reduce_cast_dgamma_dbeta_WSP2GM: the sums zeroed (Duplicate,
    PipeBarrier<PIPE_V>), then ``axis`` workspace rows from row offset ``start``, coreBatchParts at a time."""
    cal_dgamma, cal_dbeta, in_dgamma, in_dbeta = s2[0], s2[1], s2[2], s2[3]
    dbeta_sum_local = cal_dbeta.alloc_tensor(asc.float32)
    dgamma_sum_local = cal_dgamma.alloc_tensor(asc.float32)
    asc.duplicate(dbeta_sum_local, 0.0, t.cast_ele_num)
    asc.duplicate(dgamma_sum_local, 0.0, t.cast_ele_num)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    parts = t.core_batch_parts
    loops = (axis + parts - 1) // parts
    for li in range(loops):
        loop_offset = li * parts * t.c
        rows = parts if li < loops - 1 else (axis % parts if axis % parts else parts)
        if t.dgamma_is_require:
            _reduce_axis_n_wsp2ub(ctx, pipe, t, in_dgamma, g.dgamma_ws[start + loop_offset + ch], rows, count,
                                  dgamma_sum_local)
        if t.dbeta_is_require:
            _reduce_axis_n_wsp2ub(ctx, pipe, t, in_dbeta, g.dbeta_ws[start + loop_offset + ch], rows, count,
                                  dbeta_sum_local)
    return dgamma_sum_local, dbeta_sum_local


@njit(cache=True)
def _reduce_dgamma_dbeta_wsp2gm(ctx, pipe, t, s2, g, start, ch, count, axis):
    """reduce_dgamma_dbeta_WSP2GM (fp32, N > 2): a half's rows of a channel slice summed, V_MTE3, each sum added
    atomically into the zeroed output."""
    dgamma_sum_local, dbeta_sum_local = _reduce_rows(ctx, pipe, t, s2, g, start, ch, count, axis)
    _sync(ctx, pipe, asc.HardEvent.V_MTE3)
    params = asc.DataCopyExtParams(1, count * 4, 0, 0)
    if t.dgamma_is_require:
        asc.set_atomic_add(ctx, asc.float32)
        asc.data_copy_pad(g.dgamma[ch], dgamma_sum_local, params)
        asc.set_atomic_none(ctx)
    s2[0].free_tensor(dgamma_sum_local)
    if t.dbeta_is_require:
        asc.set_atomic_add(ctx, asc.float32)
        asc.data_copy_pad(g.dbeta[ch], dbeta_sum_local, params)
        asc.set_atomic_none(ctx)
    s2[1].free_tensor(dbeta_sum_local)


@njit(cache=True)
def _reduce_cast_dgamma_dbeta_wsp2gm(ctx, pipe, t, s2, g, ch, count, axis):
    """reduce_cast_dgamma_dbeta_WSP2GM (b16, N > 2): every row of a channel slice summed, PipeBarrier<PIPE_ALL>,
    each sum out by Custom_DataCopy_Out (the cast)."""
    dgamma_sum_local, dbeta_sum_local = _reduce_rows(ctx, pipe, t, s2, g, 0, ch, count, axis)
    asc.pipe_barrier(ctx, asc.PIPE_ALL)
    if t.dgamma_is_require:
        _copy_out(ctx, pipe, g.dgamma[ch], dgamma_sum_local, s2[4], count)
    s2[0].free_tensor(dgamma_sum_local)
    if t.dbeta_is_require:
        _copy_out(ctx, pipe, g.dbeta[ch], dbeta_sum_local, s2[5], count)
    s2[1].free_tensor(dbeta_sum_local)


@njit(cache=True)
def _cast_dgamma_dbeta_wsp2gm(ctx, pipe, t, s2, g, ch, count):
    """cast_dgamma_dbeta_WSP2GM (b16, N = 2): each fp32 sum of the slice in, MTE2_V, Cast with CAST_ROUND into its
    T TBuf, FreeTensor, V_MTE3, out."""
    for req, ws, que, tbuf, out in ((t.dgamma_is_require, g.dgamma_ws, s2[2], s2[4], g.dgamma),
                                    (t.dbeta_is_require, g.dbeta_ws, s2[3], s2[5], g.dbeta)):
        if req:
            local = que.alloc_tensor(asc.float32)
            asc.data_copy_pad(local, ws[ch], asc.DataCopyExtParams(1, count * 4, 0, 0),
                              asc.DataCopyPadExtParams(False, 0, 0, 0))
            temp = tbuf.get(out.dtype)
            _sync(ctx, pipe, asc.HardEvent.MTE2_V)
            asc.cast(temp, local, asc.CAST_ROUND, count)
            que.free_tensor(local)
            _sync(ctx, pipe, asc.HardEvent.V_MTE3)
            asc.data_copy_pad(out[ch], temp, asc.DataCopyExtParams(1, count * 2, 0, 0))


@njit(cache=True)
def _stage2(ctx, pipe, t, g, b16):
    """Process after pipe.Reset: SyncAll and the second stage of ``GroupNormGrad<T, isDeterministic>``; fp32 with
    N <= 2 has none."""
    c = asc.get_block_idx(ctx)
    det = t.tiling_key >= DETERMINISTIC_KEY
    s2_cores, cast = t.stage2_core_used, t.cast_ele_num
    if not det:
        if not b16:
            return
        asc.sync_all(ctx)
        if t.n != 1 and c < s2_cores:
            s2 = _init_buffer_4_stage2(pipe, t, b16, det)
            _cast_dgamma_dbeta_wsp2gm(ctx, pipe, t, s2, g, c * cast, cast if c < s2_cores - 1 else t.tail_cast_num)
        return
    asc.sync_all(ctx)
    s2 = _init_buffer_4_stage2(pipe, t, b16, det)
    half_rows = (t.n + SPLIT_COUNT - 1) // SPLIT_COUNT
    if b16:
        if c < s2_cores:
            _reduce_cast_dgamma_dbeta_wsp2gm(ctx, pipe, t, s2, g, c * cast,
                                             cast if c < s2_cores - 1 else t.tail_cast_num, half_rows)
        return
    first = (half_rows + SPLIT_COUNT - 1) // SPLIT_COUNT  # the first half's rows; the second half the rest
    if c < SPLIT_COUNT * s2_cores:
        way, part = c // s2_cores, c % s2_cores
        count = cast if part < s2_cores - 1 else t.tail_cast_num
        start, axis = (0, first) if way == 0 else (first * t.c, half_rows - first)
        _reduce_dgamma_dbeta_wsp2gm(ctx, pipe, t, s2, g, start, part * cast, count, axis)


@kernel
def group_norm_grad_kernel(ctx, t, dy, mean, rstd, x, gamma, dx, dgamma, dbeta):
    """``GroupNormGrad<T, isDeterministic>`` (T the element type of dy, isDeterministic N > 2: tiling key dtype +
    10): the constructor (Init_Output_GM, Init_Unified_Buffer, SyncAll), then Process."""
    b16 = asc.size_of(dy.dtype) == 2
    ws = asc.get_user_workspace(ctx).reinterpret_cast(asc.float32)
    g = Gm(dy, mean, rstd, x, gamma, dx, dgamma, dbeta, ws, ws[t.work_space_size])
    pipe = asc.TPipe(ctx)
    _init_output_gm(ctx, t, g)
    b = _init_unified_buffer(ctx, pipe, t, b16)
    asc.sync_all(ctx)
    _process(ctx, pipe, t, b, g)
    pipe.reset()
    _stage2(ctx, pipe, t, g, b16)


def run(t: GroupNormBackwardTiling, spec: SocSpec, dy: np.ndarray, x: np.ndarray, mean: np.ndarray,
        rstd: np.ndarray, gamma: np.ndarray, dx: np.ndarray, dgamma: np.ndarray, dbeta: np.ndarray, ws: np.ndarray,
        checks: bool | None = None) -> RunReport:
    """Launch the kernel on arrays already validated (outputs C-contiguous, in the op's dtype; ``dx`` empty when not
    asked for). ``ws`` is the whole workspace the tiling asks for; the kernel gets the user part after the
    library's 16 MiB (GetUserWorkspace), which tilesim does not emulate."""
    user = ws[SYS_WORKSPACE:SYS_WORKSPACE + 2 * t.work_space_size * 4]
    return launch(group_norm_grad_kernel, t, *(np.ascontiguousarray(a) for a in (dy, mean, rstd, x, gamma)), dx,
                  dgamma, dbeta, block_dim=t.block_dim, outputs=3, soc=spec, checks=checks, workspace=user,
                  op="group_norm_backward", gm_names=GM_NAMES)


def decomposed(dy: np.ndarray, x: np.ndarray, mean: np.ndarray, rstd: np.ndarray, gamma: np.ndarray, n: int, c: int,
               hxw: int, group: int, mask: tuple[bool, bool, bool]) -> tuple[Any, Any, Any]:
    """What aclnnGroupNormBackward runs where the GroupNormGrad kernel does not (not DAV_2201): l0 ops, each
    rounding its result to the tensors' dtype (fp32 or fp16), emulated op by op on whole tensors.

    - dx: Mul(dy, γ), then BatchNorm training backward (BNTrainingUpdateGrad + BNTrainingReduceGrad, fp32 inside)
      over [1, N·G, D] with weight 1, the group mean, and var = Sub(Div(1, Mul(rstd, rstd)), 1e-5), from which
      BatchNorm takes invstd = 1/sqrt(var + 1e-5) again.
    - dgamma: Mul(dy, Mul(Sub(x, mean), rstd)), ReduceSum over HxW, then over N.
    - dbeta: ReduceSum of dy over HxW, then over N.

    The ReduceSums accumulate in fp32 (numpy's pairwise order, not the TBE ops' own) and round once.
    """
    cg = c // group
    dy3, x3 = dy.reshape(n, c, hxw), x.reshape(n, c, hxw)
    m_c = np.repeat(mean.reshape(n, group), cg, axis=1)[:, :, None]
    r_c = np.repeat(rstd.reshape(n, group), cg, axis=1)[:, :, None]
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):  # inf and NaN are what the NPU gives
        return _decomposed_ops(dy3, x3, mean, rstd, gamma, m_c, r_c, n, c, hxw, group, mask, dy.shape)


def _decomposed_ops(dy3: np.ndarray, x3: np.ndarray, mean: np.ndarray, rstd: np.ndarray, gamma: np.ndarray,
                    m_c: np.ndarray, r_c: np.ndarray, n: int, c: int, hxw: int, group: int,
                    mask: tuple[bool, bool, bool], shape: tuple[int, ...]) -> tuple[Any, Any, Any]:
    dt, f32, cg = dy3.dtype, np.float32, c // group
    dx = dgamma = dbeta = None
    if mask[0]:
        dyg = (dy3 * gamma.reshape(1, c, 1)).astype(dt)
        var = (np.ones_like(rstd) / (rstd * rstd).astype(dt)).astype(dt)
        var = (var - dt.type(DX_EPS)).astype(dt).reshape(n * group, 1).astype(f32)
        invstd = f32(1) / np.sqrt(var + f32(DX_EPS))
        g_dy = dyg.reshape(n * group, -1).astype(f32)
        g_x = x3.reshape(n * group, -1).astype(f32)
        xc = g_x - mean.reshape(n * group, 1).astype(f32)
        m = f32(cg * hxw)
        diff_scale = np.sum(g_dy * xc * invstd, axis=1, dtype=f32, keepdims=True)
        diff_offset = np.sum(g_dy, axis=1, dtype=f32, keepdims=True)
        dx = (invstd * (g_dy - diff_offset / m - xc * invstd * diff_scale / m)).astype(dt).reshape(shape)
    if mask[1]:
        xhat = ((x3 - m_c).astype(dt) * r_c).astype(dt)
        prod = (dy3 * xhat).astype(dt)
        dgamma = np.sum(np.sum(prod, axis=2, dtype=f32).astype(dt), axis=0, dtype=f32).astype(dt)
    if mask[2]:
        dbeta = np.sum(np.sum(dy3, axis=2, dtype=f32).astype(dt), axis=0, dtype=f32).astype(dt)
    return dx, dgamma, dbeta


@accepts_torch(arrays=("grad_out", "input", "mean", "rstd", "gamma"))
def group_norm_backward(grad_out: Any, input: Any, mean: Any, rstd: Any, gamma: Any, N: int, C: int,  # noqa: N803
                        HxW: int, group: int, output_mask: Any = (True, True, True), *,  # noqa: N803
                        soc: str | SocSpec = DEFAULT_SOC, tiling: GroupNormBackwardTiling | None = None,
                        checks: bool | None = None, out: tuple[Any, Any, Any] | None = None
                        ) -> tuple[np.ndarray | None, np.ndarray | None, np.ndarray | None]:
    """aclnnGroupNormBackward: ``(grad_input, grad_gamma, grad_beta)``, each None where ``output_mask`` is False.

    grad_input has input's shape, grad_gamma and grad_beta gamma's shape ([C] when gamma is None, which means
    ones); all in grad_out's dtype. mean and rstd hold N·group values. On 910B/910_93 the tiled kernel runs
    (``tiling`` runs a hand-made GroupNormBackwardTiling, checked first; ``checks=True`` is checked mode);
    on the other SoCs aclnn's decomposition does (:func:`decomposed`). ``out`` = three arrays (or Nones) to
    write into. Errors raise :class:`tilesim.AclnnError`; nothing is written on error. Empty inputs return
    without computing, as aclnn does: arrays passed in ``out`` are left as they are, new ones are zeros.
    """
    spec = get_soc(soc)
    check_args(grad_out, input, mean, rstd, gamma, N, C, HxW, group, output_mask, None, spec)
    mask = tuple(bool(m) for m in output_mask)
    dtype = dtype_name(grad_out)
    s_gamma = shape_of(gamma) if gamma is not None else (C,)
    specs = [(name, shape, dtype) if on else None for name, shape, on in
             zip(("gradInput", "gradGammaOut", "gradBetaOut"), (shape_of(input), s_gamma, s_gamma), mask, strict=True)]
    if N * C * HxW == 0:
        if tiling is not None:
            raise invalid("tiling", "empty inputs launch no kernel")
        return tuple(outputs(out, *specs, fill=0))
    t = None
    if spec.arch == 220:
        args = (grad_out, input, mean, rstd, gamma, N, C, HxW, group, mask)
        t = make_tiling(*args, soc=spec) if tiling is None else check_tiling(tiling, *args, soc=spec)
    elif tiling is not None:
        raise invalid("tiling", f"{spec.name} does not run the GroupNormGrad kernel (DAV_2201 only): aclnn "
                                "decomposes the op there, so there is no tiling to choose")
    res = outputs(out, *specs)
    execute(t, spec, grad_out, input, mean, rstd, gamma, N, C, HxW, group, mask, res,
            workspace(t.workspace_size) if t is not None else None, checks)
    return tuple(res)


def execute(t: GroupNormBackwardTiling | None, spec: SocSpec, grad_out: Any, input: Any, mean: Any, rstd: Any,
            gamma: Any, N: int, C: int, HxW: int, group: int, mask: tuple[bool, bool, bool],  # noqa: N803
            res: list[np.ndarray | None], ws: np.ndarray | None, checks: bool | None = None) -> None:
    """Compute into ``res`` (the three outputs, None where masked off), arguments already validated: the
    kernel with tiling ``t`` on ``ws``, or the decomposition when ``t`` is None. In checked mode the launch
    writes temporaries, copied into ``res`` only when it ran clean."""
    dt = NUMPY_DTYPE[dtype_name(grad_out)]
    g = gamma if gamma is not None else np.ones(C, dt)
    if t is None:
        vals = decomposed(*(np.asarray(a) for a in (grad_out, input, mean, rstd, g)), N, C, HxW, group, mask)
        for r, v in zip(res, vals, strict=True):
            if r is not None:
                r[...] = v.reshape(r.shape)
        return
    dx, dgamma, dbeta = (r if r is not None else np.empty(0 if i == 0 else C, dt)  # masked off: computed, dropped
                         for i, r in enumerate(res))
    run(t, spec, grad_out, input, mean, rstd, g, dx, dgamma, dbeta, ws, checks)


__all__ = ["decomposed", "execute", "group_norm_backward", "group_norm_grad_kernel", "run"]
