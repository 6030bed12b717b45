"""aclnnSoftmax: a kernel of tilesim's own around the Ascend C high-level ``SoftMax`` API for an axis whose elements
are contiguous, and one on the basic vector instructions for any other axis (the [A, R, B] kernel, below), written
on tilesim's programming model as a user's kernel on A2 would be (ops-nn's Ascend C SoftmaxV2 kernel is registered
for the 950 only; the A2 binary's source is not public), and the op API.

**The outer kernel and its tiling are tilesim's** (:mod:`tiling.softmax`). x is [rows, cols] in GM; each core takes
its rows (``block_rows``, one more on the first ``former_num`` cores) in tiles of ``tile_rows``:
- CopyIn: DataCopyPad of the tile's rows (``cols`` elements each) into the VECIN queue, each row padded with zeros
  to ``cols_align`` (32 B: the API's srcK must be aligned); EnQue.
- Compute: DeQue x, AllocTensor y, then ``SoftMax<T>(y, x, sharedTmpBuffer, tiling, {m, cols_align, m, cols})``
  (:func:`softmax_rows`) with the tmp TBuf as the sharedTmpBuffer; FreeTensor x; EnQue y. bfloat16, which the API
  does not take, is :func:`softmax_bf16_kernel`: Cast to fp32, ``SoftMax<float>`` in place, one Cast back
  (CAST_RINT, as ops-nn's b16 SoftmaxV2 kernels round).
- CopyOut: DeQue; DataCopyPad of the ``cols`` real elements of each row to GM; FreeTensor.
The padding is computed on (it never enters a max or a sum: the reductions mask it off) and never written back.

**The API's steps and its tiling function are asc-devkit's** (mirror-cann/asc-devkit, the A2 build:
``impl/adv_api/detail/activation/softmax/membase/v220/softmax_impl.h`` ``SoftMaxNDImpl`` / ``SingleSoftMaxImpl``,
``…/v220/softmax_common_impl/softmax_common_nd_reduce.h`` ``NewReduceMaxLastNDImpl`` / ``NewReduceSumLastNDImpl``,
``…/v220/softmax_common_impl/softmax_common_broadcast.h`` ``AlignedBroadCastImpl``,
``…/softmax_common/softmax_common_arithmetic.h`` and ``softmax_common_reduce.h``, and the kernel-side
``SoftMaxTilingFunc`` of ``…/softmax_common/softmax_tiling_func.h``), mirrored call for call in the order the NPU
build (not CPU-debug) issues them, with every PipeBarrier<PIPE_V>, SetMaskCount / SetMaskNorm, SetVectorMask and
ResetMask of theirs, the mask-register (``isSetMask = false``) forms as :data:`~tilesim.machine.MASK_PLACEHOLDER`,
and their uint8 casts. Per pass of ``reduce_m`` rows (float work, 64 lanes a repeat):
- half: Cast to fp32 (CAST_NONE) into the tmp; float works in place in y.
- ReduceMax over each row of ``cols`` (the padding masked off): cols < 64: WholeReduceMax with mask cols, a repeat a
  row (repStride cols_align/8); otherwise a per-row fold into 64 lanes: [64, 128) a Copy of the first 64;
  [128, 512) Max of the first two 64-wide blocks with repeat = rows, then Max of each further block (rows as
  repeats, or per row with the later blocks as repeats accumulating into the same 64: dst = src1, repStride 0);
  from 512 BlockReduceMax of the first 512 (8 repeats) and the accumulating Max of the rest; the tail past the
  last whole 64 by a Max masked to it; then BlockReduceMax 64 → 8 → 1 in counter mode (one row:
  WholeReduceMax of 8 repeats at repStride 0, which writes the max 8 times).
- Broadcast each row's max to 8 floats (16 with the host tiling of half: ``reduce_k``) by Brcb, then a counter-mode
  Copy back (unless one row longer than 64 already holds 8 copies).
- Sub: counter mode, cols_align < 192: one Sub per 32 B column block with rows as blocks (blkStride
  cols_align/8, repStride cols_align) and the max block re-read (src1 blkStride reduce_k/8); otherwise one Sub a
  row of count cols_align with src1 strides 0. Exp over the pass. ReduceSum as ReduceMax (Add, BlockReduceSum,
  WholeReduceSum). Div as Sub. half: Cast back with CAST_ROUND (``FLOAT2HALF_ROUND_MODE`` of v220: ties away from
  zero).
The API re-computes its tiling from the tmp's size when the shape it is given is not the tiling's (a core's last,
shorter tile): :func:`kernel_tiling_func` (with sizeof(float) for the reduce block: ``reduce_k`` 8 even for half).

The vector ``Copy`` (vcopy; ``FirstBlockCopyImpl`` and ``AlignedBroadCastImpl``) and the UB-to-UB ``DataCopy`` of
one 32 B block (``BasicBlockReduce*Impl`` and ``AlignedBroadCastImpl`` with 16-float rows and one row) are the
machine's ``asc.copy`` and ``asc.data_copy`` between LocalTensors.

**Non-finite rows**, as the emulated instructions give them (tilesim.machine's Max and the reductions propagate NaN,
its documented choice where Huawei's docs are silent): a row of all -inf has max -inf, so x − max is NaN and the row
is NaN; a +inf makes its own lane inf − inf = NaN, so the sum and the whole row are NaN; a NaN gives a NaN max and a
NaN row; -inf beside finite values gives 0 there. Large finite values are exact (x − max ≤ 0).

**Syncs.** The API's PipeBarrier<PIPE_V>s are the only V-V syncs (BiSheng's auto-sync adds none where they suffice);
``SoftMaxNDImpl`` has none between two full passes, where the next pass only overwrites what the last one read (a
write after read within PIPE_V, which in-order issue keeps). **Checked mode reports what the NPU would not** for
some shapes, from two rules of tilesim.machine (reported to the project, not worked around here):
- a level-0 operand is bounded by its last repeat's 8 whole blocks at its block stride, where asc-tools' CPU-debug
  check (``CalculateVectorMaxOffset``) stops at the last lane the mask enables: the masked WholeReduce (cols < 64)
  and tail fold (cols % 64 ≠ 0) of a pass's last row, and the column-block Sub / Div (cols_align < 192) of a pass
  whose rows are not a multiple of 8, then "leave" a queue buffer or the tmp they stay inside on the NPU;
- the pipe-hazard check records a strided operand as one contiguous span, so with auto-sync off the column-block
  Sub / Div (one instruction per 32 B column, disjoint blocks) and AlignedBroadCastImpl's two interleaved Brcbs
  (16-float rows: half with the host tiling, rows ≥ 2 a pass) look like unordered writes of the same bytes.

**The [A, R, B] kernel** (:func:`softmax_arb_kernel`, :class:`tiling.softmax.SoftmaxArbTiling`), for an axis R with
elements after it (B > 1): x as [A, R, B]; a tile is one A index and a chunk of B, its R rows ``B`` elements apart in
GM. CopyIn is a DataCopyPad of R rows (a GM gap between them, each padded in UB to 32 B); the reductions run across
the rows of the tile, element by element (:func:`fold_rows`: Max / Add of the first half of the rows with the
second, halved until one row is left), then x − max, Exp and the division by the sum row are level-0 Sub / Div
with the row re-read at repStride 0 (:func:`bcast_rows`). When R does not fit the UB it comes in loads of
``tile_r`` rows, over three passes: the max (each load folded, then Max into a running row), the sum (x − max, Exp,
Add folds), then the normalisation and CopyOut. Half and bfloat16 (:func:`softmax_arb_b16_kernel`) are widened
into an fp32 TBuf and y is cast back once with CAST_RINT. Every V-V dependence has its PipeBarrier<PIPE_V>.

**The split-row kernel** (:func:`softmax_long_kernel`, :class:`tiling.softmax.SoftmaxLongTiling`), for last-axis
rows the SoftMax API cannot take in one pass (past its uint8 fold, 16895 elements, or past the UB beside its tmp):
a row at a time in loads of ``tile_cols`` elements, over three passes. The max: each load's 64-float rows folded by
fold_rows, its tail by a masked Max, then a Max into a running 64-float row; WholeReduceMax; the scalar unit reads
the max after a V_S sync (and an S_V one after). The sum: Adds of −max, Exp, the Add folds, WholeReduceSum. Then
Duplicate of the sum into a row and, load by load, Adds, Exp, the level-0 Div by that row, CopyOut. b16
(:func:`softmax_long_b16_kernel`) widens each load into an fp32 TBuf and casts y back once with CAST_RINT.
"""

from __future__ import annotations

from collections import namedtuple
from typing import Any

import numpy as np
from numba.core import types
from numba.extending import overload
from tilesim.tiling.common import BF16, dtype_name
from tilesim.tiling.softmax import FP64, SoftmaxArbTiling, SoftmaxLongTiling, check_args, check_tiling
from tilesim.tiling.softmax import softmax as make_tiling

from tilesim import machine as asc  # AscendC::
from tilesim.errors import tiling_error
from tilesim.interop import accepts_torch
from tilesim.jit import OVERLOAD_OPTIONS, njit
from tilesim.runtime.host_threads import workspace
from tilesim.runtime.launcher import kernel, launch
from tilesim.runtime.report import RunReport
from tilesim.soc import DEFAULT_SOC, SocSpec, get_soc

from .common import output

GM_NAMES = ["x", "y"]
FLOAT_REPEAT = 64  # FLOAT_REPEAT_SIZE: floats a repeat
FLOAT_BLK = 8  # FLOAT_NUM_PER_BLK: floats a 32 B block
HALF_REPEAT = 128  # HALF_REPEAT_SIZE
MAX_REPEAT = 255  # MAX_REPEAT_TIMES
MAX_REPEAT_STRIDE = 255 * 8  # SOFTMAX_MAX_REPEAT_STRIDE: a row past this many floats cannot be a uint8 repStride
BIG_BLOCK = 512  # SOFTMAX_FLOAT_SPECIAL_BLOCKREDUCE_LEN
SUB_DIV_COLS = 192  # SOFTMAX_SUB_DIV_ROW_COLUMN_SIZE
BRCB_ROWS = 8  # BRCB_BROADCAST_NUMBER
FULL = np.uint64(0xFFFFFFFFFFFFFFFF)
ONLY_VALUE = int(asc.ReduceOrder.ORDER_ONLY_VALUE)
PH = asc.MASK_PLACEHOLDER

ApiTiling = namedtuple("ApiTiling", ["src_m", "src_k", "split_m", "split_k", "split_size", "reduce_m", "reduce_k",
                                     "reduce_size", "range_m", "tail_m", "tail_split_size"])
ApiTiling.__doc__ = "The SoftMax API's tiling inside the kernel (the fields SoftMaxNDImpl reads)."


@njit(cache=True, inline="always")
def _u8(v):
    """``(uint8_t)v``, as the API casts its repeat counts."""
    return v & 255


@njit(cache=True)
def kernel_tiling_func(work_size, m, k, ori_m, sz):
    """SoftMaxTilingFunc (kernel side, ``softmax_tiling_func.h``) as SoftMaxImpl calls it for a shape other than the
    tiling's: ``workLocal.GetSize()`` floats of tmp, {m, k, ori_m, k}, sizeof(T) and sizeof(float) (so the reduce
    block is 8 floats whatever T). ``CalculateNDSplitM``: b16 ``work / (8 + k + 64)``, float ``work / (8 + 64)``
    rows, at most m; cut to a multiple of 8 when fewer than ori_m and more than 8."""
    epb = 32 // 4
    reduce_m = work_size // (epb + k + FLOAT_REPEAT) if sz == 2 else work_size // (epb + FLOAT_REPEAT)
    reduce_m = min(reduce_m, m)
    if ori_m > reduce_m > BRCB_ROWS:
        reduce_m = reduce_m // BRCB_ROWS * BRCB_ROWS
    reduce_m = min(reduce_m, ori_m)
    tail = ori_m % reduce_m
    return ApiTiling(m, k, reduce_m, k, reduce_m * k, reduce_m, epb, reduce_m * epb, ori_m // reduce_m, tail,
                     tail * k)


@njit(cache=True, inline="always")
def _reset_mask(ctx):
    """ResetMask: the mask register all ones."""
    asc.set_vector_mask(ctx, FULL, FULL)


@njit(cache=True)
def _fold(is_max, dst, a, b, mask, repeat, params):
    """Max (ReduceMax's folds) or Add (ReduceSum's), level-0."""
    if is_max:
        asc.max_(dst, a, b, mask, repeat, params)
    else:
        asc.add(dst, a, b, mask, repeat, params)


@njit(cache=True)
def _whole_reduce(is_max, dst, src, mask, repeat, dst_rep, src_blk, src_rep):
    """WholeReduceMax (ORDER_ONLY_VALUE) or WholeReduceSum."""
    if is_max:
        asc.whole_reduce_max(dst, src, mask, repeat, dst_rep, src_blk, src_rep, ONLY_VALUE)
    else:
        asc.whole_reduce_sum(dst, src, mask, repeat, dst_rep, src_blk, src_rep)


@njit(cache=True)
def _block_reduce(is_max, dst, src, repeat, mask, dst_rep, src_blk, src_rep):
    """BlockReduceMax or BlockReduceSum."""
    if is_max:
        asc.block_reduce_max(dst, src, repeat, mask, dst_rep, src_blk, src_rep)
    else:
        asc.block_reduce_sum(dst, src, repeat, mask, dst_rep, src_blk, src_rep)


# ---------------------------------------------------------------------------------------------------------------
# asc-devkit's SoftMax (v220), step by step


@njit(cache=True)
def _split_reduce(is_max, dst, src, m, src_k, mask, split_num):
    """ReduceMaxLastNDSplitImpl / ReduceSumLastNDSplitImpl: one WholeReduce a row (rows as repeats, 255 at a
    time), ``mask`` lanes from block ``split_num`` of 64, the results one after another."""
    rng, tail = m // MAX_REPEAT, m % MAX_REPEAT
    rs = src_k // FLOAT_BLK
    for i in range(rng):
        _whole_reduce(is_max, dst[i * MAX_REPEAT], src[split_num * FLOAT_REPEAT + i * MAX_REPEAT * src_k], mask,
                      MAX_REPEAT, 1, 1, rs)
    if tail != 0:
        _whole_reduce(is_max, dst[rng * MAX_REPEAT], src[split_num * FLOAT_REPEAT + rng * MAX_REPEAT * src_k], mask,
                      tail, 1, 1, rs)


@njit(cache=True)
def _first_block_copy(dst, src, m, src_k, dst_rep, src_rep):
    """FirstBlockCopyImpl (the NPU build): each row's first 64 floats into dst, rows as repeats."""
    rng, tail = m // MAX_REPEAT, m % MAX_REPEAT
    for i in range(rng):
        asc.copy(dst[i * MAX_REPEAT * FLOAT_REPEAT], src[i * MAX_REPEAT * src_k], PH, MAX_REPEAT,
                 asc.CopyRepeatParams(1, 1, dst_rep, src_rep))
    if tail != 0:
        asc.copy(dst[rng * MAX_REPEAT * FLOAT_REPEAT], src[rng * MAX_REPEAT * src_k], PH, tail,
                 asc.CopyRepeatParams(1, 1, dst_rep, src_rep))


@njit(cache=True)
def _tail_fold(is_max, dst, src, m, src_k, mask, src_rep, split_count):
    """TailMaxImpl / TailAddImpl (float): fold each row's last ``mask`` elements (after ``split_count`` blocks of
    64) into its 64 lanes; per row when a row is longer than a uint8 repStride reaches, else rows as repeats."""
    start = FLOAT_REPEAT * split_count
    if src_k > MAX_REPEAT_STRIDE:
        for i in range(m):
            _fold(is_max, dst[i * FLOAT_REPEAT], dst[i * FLOAT_REPEAT], src[start + i * src_k], mask, 1,
                  asc.BinaryRepeatParams(1, 1, 1, 8, 8, 8))
    else:
        rng, tail = m // MAX_REPEAT, m % MAX_REPEAT
        for i in range(rng):
            o = i * MAX_REPEAT * FLOAT_REPEAT
            _fold(is_max, dst[o], dst[o], src[start + i * MAX_REPEAT * src_k], mask, MAX_REPEAT,
                  asc.BinaryRepeatParams(1, 1, 1, 8, 8, _u8(src_rep)))
        if tail != 0:
            o = rng * MAX_REPEAT * FLOAT_REPEAT
            _fold(is_max, dst[o], dst[o], src[start + rng * MAX_REPEAT * src_k], mask, tail,
                  asc.BinaryRepeatParams(1, 1, 1, 8, 8, _u8(src_rep)))


@njit(cache=True)
def _next_block(ctx, is_max, dst, src, split_m, src_rep, split_block, src_k):
    """NextBlockMaxImpl / NextBlockAddImpl (the NPU build): fold blocks 2 .. split_block-1 of each row into its 64
    lanes: rows as repeats when there are more rows than blocks, else per row with the blocks as repeats
    accumulating into the row's 64 lanes (dst = src1, their repStrides 0)."""
    if split_m > split_block:
        for i in range(2, split_block):
            asc.pipe_barrier(ctx, asc.PIPE_V)
            _fold(is_max, dst, dst, src[FLOAT_REPEAT * i], PH, split_m, asc.BinaryRepeatParams(1, 1, 1, 8, 8, src_rep))
    else:
        asc.pipe_barrier(ctx, asc.PIPE_V)
        for j in range(split_m):
            _fold(is_max, dst[j * FLOAT_REPEAT], src[HALF_REPEAT + j * src_k], dst[j * FLOAT_REPEAT], PH,
                  _u8(split_block - 2), asc.BinaryRepeatParams(1, 1, 1, 0, 8, 0))


@njit(cache=True)
def _big_block_reduce(ctx, is_max, dst, src, split_block, split_m, split_k):
    """BigBlockReduceMax / BigBlockReduceSum: per row, BlockReduce of the first 512 floats (8 repeats) into its 64
    lanes, then the row's further 64-wide blocks folded in as repeats of one accumulating instruction."""
    for i in range(split_m):
        _block_reduce(is_max, dst[FLOAT_REPEAT * i], src[i * split_k], FLOAT_BLK, PH, 1, 1, 8)
    remain = _u8(split_block - FLOAT_BLK)
    if remain == 0:
        return
    asc.pipe_barrier(ctx, asc.PIPE_V)
    for j in range(split_m):
        _fold(is_max, dst[j * FLOAT_REPEAT], src[BIG_BLOCK + j * split_k], dst[j * FLOAT_REPEAT], PH, remain,
              asc.BinaryRepeatParams(1, 1, 1, 0, 8, 0))


@njit(cache=True)
def _basic_block_reduce(ctx, is_max, dst, src, m, reduce_k):
    """BasicBlockReduceMaxImpl / BasicBlockReduceSumImpl: each row's 64 lanes to one value. One row: WholeReduce of
    8 repeats at repStride 0 (the value 8 times; 16 by a copy of the block for 16-float rows); more: BlockReduce
    64 → 8 in place, then 8 → 1, in counter mode."""
    if m == 1:
        _whole_reduce(is_max, dst, src, PH, 8, 1, 1, 0)
        if reduce_k == 2 * FLOAT_BLK:
            asc.pipe_barrier(ctx, asc.PIPE_V)
            asc.data_copy(dst[FLOAT_BLK], dst, FLOAT_BLK)  # UB to UB, one block
    else:
        asc.set_mask_count(ctx)
        asc.set_vector_mask(ctx, m * FLOAT_REPEAT)
        _block_reduce(is_max, src, src, 1, PH, 1, 1, 8)
        asc.pipe_barrier(ctx, asc.PIPE_V)
        asc.set_vector_mask(ctx, m * FLOAT_BLK)
        _block_reduce(is_max, dst, src, 1, PH, 1, 1, 8)
        asc.set_mask_norm(ctx)
        _reset_mask(ctx)


@njit(cache=True)
def _aligned_broadcast(ctx, dst, tmp, m, dst_k):
    """AlignedBroadCastImpl: each row's value (dst[r]) to its ``dst_k`` floats by Brcb into ``tmp`` (16-float rows:
    two Brcbs of block stride 2, or for one row a Brcb and a copy of its block), then a counter-mode Copy back."""
    repeat = (m + BRCB_ROWS - 1) // BRCB_ROWS
    if dst_k == BRCB_ROWS * 2:
        if m != 1:
            asc.brcb(tmp, dst, _u8(repeat), asc.BrcbRepeatParams(2, BRCB_ROWS * 2))
            asc.brcb(tmp[BRCB_ROWS], dst, _u8(repeat), asc.BrcbRepeatParams(2, BRCB_ROWS * 2))
        else:
            asc.brcb(tmp, dst, _u8(repeat), asc.BrcbRepeatParams(1, BRCB_ROWS))
            asc.pipe_barrier(ctx, asc.PIPE_V)
            asc.data_copy(tmp[FLOAT_BLK], tmp, FLOAT_BLK)  # UB to UB, one block
    else:
        asc.brcb(tmp, dst, _u8(repeat), asc.BrcbRepeatParams(1, BRCB_ROWS))
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.set_mask_count(ctx)
    asc.set_vector_mask(ctx, m * dst_k)
    asc.copy(dst, tmp, PH, 1, asc.CopyRepeatParams(1, 1, 8, 8))
    asc.set_mask_norm(ctx)
    _reset_mask(ctx)


@njit(cache=True)
def reduce_last_nd(ctx, is_max, dst, src, tmp, m, k, src_k, dst_k):
    """NewReduceMaxLastNDImpl / NewReduceSumLastNDImpl (with the broadcast): ``dst`` gets each of the ``m`` rows'
    max (sum) of its first ``k`` floats, ``dst_k`` copies a row; rows are ``src_k`` floats apart in ``src``;
    ``tmp`` holds 64 floats a row."""
    split_count, tail_k = k // FLOAT_REPEAT, k % FLOAT_REPEAT
    rs = src_k // FLOAT_BLK
    if k < FLOAT_REPEAT:
        _split_reduce(is_max, dst, src, m, src_k, k, 0)
        _reset_mask(ctx)
    else:
        if k >= BIG_BLOCK:
            _big_block_reduce(ctx, is_max, tmp, src, split_count, m, src_k)
        elif k >= HALF_REPEAT:
            _fold(is_max, tmp, src, src[FLOAT_REPEAT], PH, _u8(m), asc.BinaryRepeatParams(1, 1, 1, 8, _u8(rs), _u8(rs)))
            _next_block(ctx, is_max, tmp, src, _u8(m), _u8(rs), split_count, src_k)
        else:
            _first_block_copy(tmp, src, m, src_k, 8, _u8(rs))
        if tail_k != 0:
            asc.pipe_barrier(ctx, asc.PIPE_V)
            _tail_fold(is_max, tmp, src, m, src_k, tail_k, rs, split_count)
            _reset_mask(ctx)
        asc.pipe_barrier(ctx, asc.PIPE_V)
        _basic_block_reduce(ctx, is_max, dst, tmp, m, dst_k)
    if m != 1 or k <= FLOAT_REPEAT:
        asc.pipe_barrier(ctx, asc.PIPE_V)
        _aligned_broadcast(ctx, dst, tmp, m, dst_k)


@njit(cache=True)
def generic_nd(ctx, is_div, dst, src0, src1, m, src_k, reduce_k):
    """GenericSubNDImpl / GenericDivNDImpl: ``dst = src0 − (or /) src1`` with src1 a row's broadcast block, in
    counter mode: rows shorter than 192 floats one instruction per 32 B column block (rows as the blocks of a
    repeat), longer ones one instruction a row (src1's strides 0 re-read its block)."""
    asc.set_mask_count(ctx)
    if src_k < SUB_DIV_COLS:
        blk = _u8(src_k // FLOAT_BLK)
        rblk = _u8(reduce_k // FLOAT_BLK)
        asc.set_vector_mask(ctx, m * FLOAT_BLK)
        for j in range(blk):
            p = asc.BinaryRepeatParams(blk, blk, rblk, _u8(src_k), _u8(src_k), _u8(reduce_k))
            if is_div:
                asc.div(dst[j * FLOAT_BLK], src0[j * FLOAT_BLK], src1, PH, 1, p)
            else:
                asc.sub(dst[j * FLOAT_BLK], src0[j * FLOAT_BLK], src1, PH, 1, p)
    else:
        asc.set_vector_mask(ctx, src_k)
        for j in range(m):
            p = asc.BinaryRepeatParams(1, 1, 0, 8, 8, 0)
            if is_div:
                asc.div(dst[j * src_k], src0[j * src_k], src1[j * reduce_k], PH, 1, p)
            else:
                asc.sub(dst[j * src_k], src0[j * src_k], src1[j * reduce_k], PH, 1, p)
    asc.set_mask_norm(ctx)
    _reset_mask(ctx)


@njit(cache=True)
def _single_softmax_half(ctx, dst, src, work, api, offset, split, m, k):
    """SingleSoftMaxImpl (half): widen into the tmp (tmpBuffer0: a pass's rows; tmpBuffer1: its reduce results;
    tmpBuffer2: 64 floats a row), softmax in fp32 there, narrow into dst with CAST_ROUND."""
    tmp0 = work
    tmp1 = work[api.split_size]
    tmp2 = work[api.split_size + api.reduce_size]
    asc.cast(tmp0, src[offset], asc.CAST_NONE, split)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    reduce_last_nd(ctx, True, tmp1, tmp0, tmp2, m, k, api.split_k, api.reduce_k)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    generic_nd(ctx, False, tmp0, tmp0, tmp1, m, api.src_k, api.reduce_k)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.exp(tmp0, tmp0, split)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    reduce_last_nd(ctx, False, tmp1, tmp0, tmp2, m, k, api.split_k, api.reduce_k)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    generic_nd(ctx, True, tmp0, tmp0, tmp1, m, api.src_k, api.reduce_k)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.cast(dst[offset], tmp0, asc.CAST_ROUND, split)


@njit(cache=True)
def _single_softmax_float(ctx, dst, src, work, api, offset, split, m, k):
    """SingleSoftMaxImpl (float, isReuseSource false): the max and sum into the tmp (tmpBuffer0: reduce results,
    tmpBuffer1: 64 floats a row), x − max, Exp and the division in dst."""
    tmp0 = work
    tmp1 = work[api.reduce_size]
    d = dst[offset]
    reduce_last_nd(ctx, True, tmp0, src[offset], tmp1, m, k, api.split_k, api.reduce_k)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    generic_nd(ctx, False, d, src[offset], tmp0, m, api.src_k, api.reduce_k)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.exp(d, d, split)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    reduce_last_nd(ctx, False, tmp0, d, tmp1, m, k, api.split_k, api.reduce_k)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    generic_nd(ctx, True, d, d, tmp0, m, api.src_k, api.reduce_k)


@njit(cache=True)
def softmax_rows(ctx, dst, src, shared_tmp, t, m):
    """``SoftMax<T>(dst, src, sharedTmpBuffer, tiling, {m, cols_align, m, cols})``, the A2 implementation:
    SoftMaxImpl (the tiling re-computed from the tmp's size when m rows are not the tiling's srcM) and
    SoftMaxNDImpl (``range_m`` passes of ``split_m`` rows, then one of ``tail_m``, each a SingleSoftMaxImpl; a
    PipeBarrier<PIPE_V> only before the tail pass)."""
    work = shared_tmp.reinterpret_cast(asc.float32)
    sz = asc.size_of(src.dtype)
    if m != t.src_m or t.cols_align != t.src_k:
        api = kernel_tiling_func(work.get_size(), m, t.cols_align, m, sz)
    else:
        api = ApiTiling(t.src_m, t.src_k, t.split_m, t.split_k, t.split_size, t.reduce_m, t.reduce_k, t.reduce_size,
                        t.range_m, t.tail_m, t.tail_split_size)
    asc.set_mask_norm(ctx)
    _reset_mask(ctx)
    offset = 0
    split = api.split_size
    rows = api.split_m
    asc.pipe_barrier(ctx, asc.PIPE_V)
    for i in range(api.range_m + 1):
        if sz == 2:
            _single_softmax_half(ctx, dst, src, work, api, offset, split, rows, t.cols)
        else:
            _single_softmax_float(ctx, dst, src, work, api, offset, split, rows, t.cols)
        offset += api.split_size
        if i == api.range_m - 1:
            if api.tail_m == 0:
                break
            offset = api.range_m * api.split_size
            split = api.tail_split_size
            rows = api.tail_m
            asc.pipe_barrier(ctx, asc.PIPE_V)


# ---------------------------------------------------------------------------------------------------------------
# tilesim's kernel around it


@kernel
def softmax_kernel(ctx, t, x, y):
    """Init (the x and y queues of buffer_num tiles, the tmp TBuf), then the core's rows tile by tile: CopyIn,
    Compute (the SoftMax API), CopyOut."""
    sz = asc.size_of(x.dtype)
    pipe = asc.TPipe(ctx)
    in_queue_x = pipe.init_buffer(asc.TQue(asc.VECIN, 1), t.buffer_num, t.tile_rows * t.cols_align * sz)
    out_queue_y = pipe.init_buffer(asc.TQue(asc.VECOUT, 1), t.buffer_num, t.tile_rows * t.cols_align * sz)
    tmp_buf = pipe.init_buffer(asc.TBuf(asc.VECCALC), t.tmp_size)
    c = asc.get_block_idx(ctx)
    start = c * t.block_rows + min(c, t.former_num)
    n = t.block_rows + (1 if c < t.former_num else 0)
    for r0 in range(start, start + n, t.tile_rows):
        m = min(t.tile_rows, start + n - r0)
        rows = asc.DataCopyExtParams(m, t.cols * sz, 0, 0)
        xl = in_queue_x.alloc_tensor(x.dtype)  # CopyIn: rows padded with zeros to cols_align
        asc.data_copy_pad(xl, x[r0 * t.cols], rows, asc.DataCopyPadExtParams(True, 0, t.cols_align - t.cols, 0))
        in_queue_x.enque(xl)
        xl = in_queue_x.deque(x.dtype)  # Compute
        yl = out_queue_y.alloc_tensor(x.dtype)
        softmax_rows(ctx, yl, xl, tmp_buf.get(asc.uint8), t, m)
        in_queue_x.free_tensor(xl)
        out_queue_y.enque(yl)
        yl = out_queue_y.deque(x.dtype)  # CopyOut: the cols real elements of each row
        asc.data_copy_pad(y[r0 * t.cols], yl, rows)
        out_queue_y.free_tensor(yl)


@kernel
def softmax_bf16_kernel(ctx, t, x, y):
    """The kernel for bfloat16 x, which the SoftMax API does not take: as :func:`softmax_kernel`, with Compute
    widening the tile into an fp32 TBuf (Cast, CAST_NONE: exact), ``SoftMax<float>`` in place there (the API lets
    src and dst share their space) and one Cast back into the y tile with CAST_RINT (round to nearest, ties to
    even: the fp32-to-b16 rounding of ops-nn's b16 SoftmaxV2 kernels), so y is rounded once."""
    pipe = asc.TPipe(ctx)
    in_queue_x = pipe.init_buffer(asc.TQue(asc.VECIN, 1), t.buffer_num, t.tile_rows * t.cols_align * 2)
    out_queue_y = pipe.init_buffer(asc.TQue(asc.VECOUT, 1), t.buffer_num, t.tile_rows * t.cols_align * 2)
    cast_buf = pipe.init_buffer(asc.TBuf(asc.VECCALC), t.tile_rows * t.cols_align * 4)
    tmp_buf = pipe.init_buffer(asc.TBuf(asc.VECCALC), t.tmp_size)
    c = asc.get_block_idx(ctx)
    start = c * t.block_rows + min(c, t.former_num)
    n = t.block_rows + (1 if c < t.former_num else 0)
    xf = cast_buf.get(asc.float32)
    for r0 in range(start, start + n, t.tile_rows):
        m = min(t.tile_rows, start + n - r0)
        rows = asc.DataCopyExtParams(m, t.cols * 2, 0, 0)
        xl = in_queue_x.alloc_tensor(x.dtype)  # CopyIn
        asc.data_copy_pad(xl, x[r0 * t.cols], rows, asc.DataCopyPadExtParams(True, 0, t.cols_align - t.cols, 0))
        in_queue_x.enque(xl)
        xl = in_queue_x.deque(x.dtype)  # Compute
        asc.cast(xf, xl, asc.CAST_NONE, m * t.cols_align)
        in_queue_x.free_tensor(xl)
        asc.pipe_barrier(ctx, asc.PIPE_V)
        softmax_rows(ctx, xf, xf, tmp_buf.get(asc.uint8), t, m)
        asc.pipe_barrier(ctx, asc.PIPE_V)
        yl = out_queue_y.alloc_tensor(x.dtype)
        asc.cast(yl, xf, asc.CAST_RINT, m * t.cols_align)
        out_queue_y.enque(yl)
        yl = out_queue_y.deque(x.dtype)  # CopyOut
        asc.data_copy_pad(y[r0 * t.cols], yl, rows)
        out_queue_y.free_tensor(yl)


# ---------------------------------------------------------------------------------------------------------------
# the b16 kernels' widening: chosen as Numba types the call (``if constexpr`` on whether x is fp32), so the fp32
# kernels' code holds none of its steps and the b16 kernels' none of the fp32 ones


def widen(ctx, queue, xl, xf, count):  # type: ignore[no-untyped-def]
    """The fp32 tile a load is computed in: ``xl`` itself when ``xf`` is None (fp32 x); else Cast(xf, xl,
    CAST_NONE, count), PipeBarrier<PIPE_V>, FreeTensor(xl), and ``xf``."""


@overload(widen, jit_options=OVERLOAD_OPTIONS)
def _widen_impl(ctx, queue, xl, xf, count):  # type: ignore[no-untyped-def]
    if isinstance(xf, types.NoneType):
        return lambda ctx, queue, xl, xf, count: xl

    def impl(ctx, queue, xl, xf, count):  # type: ignore[no-untyped-def]
        asc.cast(xf, xl, asc.CAST_NONE, count)
        asc.pipe_barrier(ctx, asc.PIPE_V)
        queue.free_tensor(xl)
        return xf
    return impl


def release(queue, xl, xf):  # type: ignore[no-untyped-def]
    """FreeTensor(xl) once a load's Compute is done with it: fp32 x (``xf`` None) only, b16 x's was freed when
    :func:`widen` cast it."""


@overload(release, jit_options=OVERLOAD_OPTIONS)
def _release_impl(queue, xl, xf):  # type: ignore[no-untyped-def]
    if isinstance(xf, types.NoneType):
        return lambda queue, xl, xf: queue.free_tensor(xl)
    return lambda queue, xl, xf: None


def y_tile(queue, xf, dtype):  # type: ignore[no-untyped-def]
    """The tile a load's y is computed into: AllocTensor of the y queue for fp32 x (``xf`` None), else ``xf``
    (computed in place there, then :func:`narrow`)."""


@overload(y_tile, jit_options=OVERLOAD_OPTIONS)
def _y_tile_impl(queue, xf, dtype):  # type: ignore[no-untyped-def]
    if isinstance(xf, types.NoneType):
        return lambda queue, xf, dtype: queue.alloc_tensor(dtype)
    return lambda queue, xf, dtype: xf


def narrow(ctx, queue, ys, xf, dtype, count):  # type: ignore[no-untyped-def]
    """The y tile to EnQue: ``ys`` for fp32 x (``xf`` None); else PipeBarrier<PIPE_V>, AllocTensor of the y
    queue and Cast(yl, xf, CAST_RINT, count) into it."""


@overload(narrow, jit_options=OVERLOAD_OPTIONS)
def _narrow_impl(ctx, queue, ys, xf, dtype, count):  # type: ignore[no-untyped-def]
    if isinstance(xf, types.NoneType):
        return lambda ctx, queue, ys, xf, dtype, count: ys

    def impl(ctx, queue, ys, xf, dtype, count):  # type: ignore[no-untyped-def]
        asc.pipe_barrier(ctx, asc.PIPE_V)
        yl = queue.alloc_tensor(dtype)
        asc.cast(yl, xf, asc.CAST_RINT, count)
        return yl
    return impl


# ---------------------------------------------------------------------------------------------------------------
# tilesim's [A, R, B] kernel: a normalised axis that is not the last contiguous one


@njit(cache=True)
def _copy_rows(ctx, dst, src, count):
    """Copy of ``count`` floats, the vector Copy in counter mode (as AlignedBroadCastImpl copies)."""
    asc.set_mask_count(ctx)
    asc.set_vector_mask(ctx, count)
    asc.copy(dst, src, PH, 1, asc.CopyRepeatParams(1, 1, 8, 8))
    asc.set_mask_norm(ctx)
    _reset_mask(ctx)


@njit(cache=True)
def fold_rows(ctx, is_max, work, src, n, rs):
    """The max (sum) over ``n`` rows of ``rs`` floats in ``src``, element by element: rows 0 .. h-1 with rows
    h .. 2h-1 (h = n // 2) by one Max (Add) into ``work``, an odd last row folded into work's first, then work
    halved in place the same way until one row is left. Returns the tensor whose first row holds the result
    (``src`` itself for one row)."""
    if n == 1:
        return src
    h = n // 2
    _fold_count(is_max, work, src, src[h * rs], h * rs)
    if n % 2 == 1:
        asc.pipe_barrier(ctx, asc.PIPE_V)
        _fold_count(is_max, work, work, src[(n - 1) * rs], rs)
    n = h
    while n > 1:
        asc.pipe_barrier(ctx, asc.PIPE_V)
        h = n // 2
        _fold_count(is_max, work, work, work[(n - h) * rs], h * rs)
        n -= h
    return work


@njit(cache=True)
def _fold_count(is_max, dst, a, b, count):
    """Max or Add, count form."""
    if is_max:
        asc.max_(dst, a, b, count)
    else:
        asc.add(dst, a, b, count)


@njit(cache=True)
def bcast_rows(is_div, dst, src, row, n, rs):
    """``dst = src − row`` (or ``/ row``) for each of ``n`` rows of ``rs`` floats: level-0, a repeat a row, one
    instruction per 64-float column group and 255 rows, ``row`` re-read by src1's repStride 0."""
    rep = _u8(rs // FLOAT_BLK)
    for g in range(0, rs, FLOAT_REPEAT):
        lanes = min(FLOAT_REPEAT, rs - g)
        for r0 in range(0, n, MAX_REPEAT):
            k = min(MAX_REPEAT, n - r0)
            p = asc.BinaryRepeatParams(1, 1, 1, rep, rep, 0)
            if is_div:
                asc.div(dst[r0 * rs + g], src[r0 * rs + g], row[g], lanes, k, p)
            else:
                asc.sub(dst[r0 * rs + g], src[r0 * rs + g], row[g], lanes, k, p)


@njit(cache=True)
def _arb_tile(t, tile, sz):
    """(GM offset of the tile's first element, its B elements, its UB row stride in elements)."""
    ai = tile // t.b_chunks
    bc = tile - ai * t.b_chunks
    bw = min(t.tile_b, t.b - bc * t.tile_b)
    blk = 32 // sz
    return ai * t.r * t.b + bc * t.tile_b, bw, (bw + blk - 1) // blk * blk


@njit(cache=True)
def _arb_copy_in(t, queue, x, off, r0, m, bw, rs, dtype):
    """CopyIn: ``m`` R rows from row ``r0`` of the tile, ``bw`` elements each (a GM gap of B − bw between them),
    each padded with zeros to ``rs`` in UB."""
    sz = asc.size_of(dtype)
    xl = queue.alloc_tensor(dtype)
    asc.data_copy_pad(xl, x[off + r0 * t.b], asc.DataCopyExtParams(m, bw * sz, (t.b - bw) * sz, 0),
                      asc.DataCopyPadExtParams(True, 0, rs - bw, 0))
    queue.enque(xl)


@njit(cache=True)
def _arb_copy_out(t, queue, y, off, r0, m, bw, dtype):
    """CopyOut: the ``bw`` real elements of each of ``m`` R rows to GM."""
    sz = asc.size_of(dtype)
    yl = queue.deque(dtype)
    asc.data_copy_pad(y[off + r0 * t.b], yl, asc.DataCopyExtParams(m, bw * sz, 0, (t.b - bw) * sz))
    queue.free_tensor(yl)


@njit(cache=True)
def _arb_stat(ctx, is_max, acc, part, first, rs):
    """The running max (sum) row of a split R: the first load's, then Max (Add) of each further one."""
    if first:
        _copy_rows(ctx, acc, part, rs)
    else:
        _fold_count(is_max, acc, acc, part, rs)


@njit(cache=True)
def _arb_normalise(ctx, dst, src, mx, sm, work, m, rs, full):
    """x − max, Exp, then (``full``: the sum of this load, which is all of R) the division by the sum row: the
    whole of a load's Compute after its max is known, ``dst`` its fp32 y (``src`` may be it)."""
    bcast_rows(False, dst, src, mx, m, rs)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.exp(dst, dst, m * rs)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    if full:
        s = fold_rows(ctx, False, work, dst, m, rs)
        asc.pipe_barrier(ctx, asc.PIPE_V)
        bcast_rows(True, dst, dst, s, m, rs)
    else:
        bcast_rows(True, dst, dst, sm, m, rs)


@njit(cache=True)
def _arb_process(ctx, t, x, y, in_queue_x, out_queue_y, xf, work, mx, sm):
    """Process() of the [A, R, B] kernels: the core's tiles (an A index and a chunk of B), each over its R rows.
    All of R in one load: CopyIn; the max row by :func:`fold_rows`; x − max (:func:`bcast_rows`), Exp, the sum
    row by fold_rows, the division; CopyOut. R in several loads: a pass for the max (each load folded, then Max
    into the running row), one for the sum (x − max, Exp and Add folds in the load), one to normalise and copy
    out. ``xf`` is None for fp32 x (computed in the queues' tiles), else the fp32 TBuf each b16 load is widened
    into (:func:`widen`, :func:`narrow`)."""
    c = asc.get_block_idx(ctx)
    first = c * t.block_tiles + min(c, t.former_num)
    for tile in range(first, first + t.block_tiles + (1 if c < t.former_num else 0)):
        off, bw, rs = _arb_tile(t, tile, asc.size_of(x.dtype))
        if t.r_chunks > 1:
            for p in range(2):  # the max, then the sum
                for k in range(t.r_chunks):
                    r0 = k * t.tile_r
                    m = min(t.tile_r, t.r - r0)
                    _arb_copy_in(t, in_queue_x, x, off, r0, m, bw, rs, x.dtype)
                    xl = in_queue_x.deque(x.dtype)
                    xs = widen(ctx, in_queue_x, xl, xf, m * rs)
                    if p == 1:
                        bcast_rows(False, xs, xs, mx, m, rs)
                        asc.pipe_barrier(ctx, asc.PIPE_V)
                        asc.exp(xs, xs, m * rs)
                        asc.pipe_barrier(ctx, asc.PIPE_V)
                    part = fold_rows(ctx, p == 0, work, xs, m, rs)
                    asc.pipe_barrier(ctx, asc.PIPE_V)
                    _arb_stat(ctx, p == 0, mx[p * t.b_align], part, k == 0, rs)
                    asc.pipe_barrier(ctx, asc.PIPE_V)
                    release(in_queue_x, xl, xf)
        for k in range(t.r_chunks):
            r0 = k * t.tile_r
            m = min(t.tile_r, t.r - r0)
            _arb_copy_in(t, in_queue_x, x, off, r0, m, bw, rs, x.dtype)
            xl = in_queue_x.deque(x.dtype)  # Compute
            xs = widen(ctx, in_queue_x, xl, xf, m * rs)
            ys = y_tile(out_queue_y, xf, x.dtype)
            if t.r_chunks == 1:
                mrow = fold_rows(ctx, True, work, xs, m, rs)
                asc.pipe_barrier(ctx, asc.PIPE_V)
                _arb_normalise(ctx, ys, xs, mrow, sm, work, m, rs, True)
            else:
                _arb_normalise(ctx, ys, xs, mx, sm, work, m, rs, False)
            release(in_queue_x, xl, xf)
            out_queue_y.enque(narrow(ctx, out_queue_y, ys, xf, x.dtype, m * rs))
            _arb_copy_out(t, out_queue_y, y, off, r0, m, bw, x.dtype)


@kernel
def softmax_arb_kernel(ctx, t, x, y):
    """[A, R, B] softmax over R, fp32: Init (the x and y queues, the fold TBuf, the max / sum rows), then
    :func:`_arb_process`, computing in the queues' tiles."""
    pipe = asc.TPipe(ctx)
    nbytes = t.tile_r * t.b_align * 4
    in_queue_x = pipe.init_buffer(asc.TQue(asc.VECIN, 1), t.buffer_num, nbytes)
    out_queue_y = pipe.init_buffer(asc.TQue(asc.VECOUT, 1), t.buffer_num, nbytes)
    fold_buf = pipe.init_buffer(asc.TBuf(asc.VECCALC), (t.tile_r + 1) // 2 * t.b_align * 4)
    stat_buf = pipe.init_buffer(asc.TBuf(asc.VECCALC), 2 * t.b_align * 4)
    work = fold_buf.get(asc.float32)
    mx = stat_buf.get(asc.float32)
    _arb_process(ctx, t, x, y, in_queue_x, out_queue_y, None, work, mx, mx[t.b_align])


@kernel
def softmax_arb_b16_kernel(ctx, t, x, y):
    """[A, R, B] softmax over R for half and bfloat16: Init as :func:`softmax_arb_kernel`'s with an fp32 TBuf
    that each load is widened into (Cast, CAST_NONE) and computed in, then :func:`_arb_process`, y cast back once
    (CAST_RINT: round to nearest, ties to even, as ops-nn's b16 SoftmaxV2 kernels round) into the y tile."""
    pipe = asc.TPipe(ctx)
    n16 = t.tile_r * t.b_align * 2
    in_queue_x = pipe.init_buffer(asc.TQue(asc.VECIN, 1), t.buffer_num, n16)
    out_queue_y = pipe.init_buffer(asc.TQue(asc.VECOUT, 1), t.buffer_num, n16)
    cast_buf = pipe.init_buffer(asc.TBuf(asc.VECCALC), n16 * 2)
    fold_buf = pipe.init_buffer(asc.TBuf(asc.VECCALC), (t.tile_r + 1) // 2 * t.b_align * 4)
    stat_buf = pipe.init_buffer(asc.TBuf(asc.VECCALC), 2 * t.b_align * 4)
    xf = cast_buf.get(asc.float32)
    work = fold_buf.get(asc.float32)
    mx = stat_buf.get(asc.float32)
    _arb_process(ctx, t, x, y, in_queue_x, out_queue_y, xf, work, mx, mx[t.b_align])


# ---------------------------------------------------------------------------------------------------------------
# tilesim's split-row kernel: rows the SoftMax API cannot take in one pass


@njit(cache=True)
def _long_fold(ctx, is_max, acc, work, xs, length, first):
    """Fold a load of ``length`` floats into the running 64-float row ``acc`` (the load's first: copied): its
    whole 64-float rows by :func:`fold_rows`, its last ``length % 64`` elements by a Max (Add) masked to them,
    then a Max (Add) into acc; a load shorter than 64 straight into acc, masked (acc first filled with Max's
    (Add's) identity, -inf (0), when it is the row's only load)."""
    full = length // FLOAT_REPEAT
    tail = length - full * FLOAT_REPEAT
    if full > 0:
        part = fold_rows(ctx, is_max, work, xs, full, FLOAT_REPEAT)
        if tail > 0:
            asc.pipe_barrier(ctx, asc.PIPE_V)
            _fold(is_max, part, part, xs[full * FLOAT_REPEAT], tail, 1, asc.BinaryRepeatParams(1, 1, 1, 8, 8, 8))
        asc.pipe_barrier(ctx, asc.PIPE_V)
        _arb_stat(ctx, is_max, acc, part, first, FLOAT_REPEAT)
    else:
        if first:  # a row shorter than 64: its lanes past the row start as Max's (Add's) identity
            asc.duplicate(acc, np.float32(-np.inf) if is_max else np.float32(0.0), FLOAT_REPEAT)
            asc.pipe_barrier(ctx, asc.PIPE_V)
        _fold(is_max, acc, acc, xs, tail, 1, asc.BinaryRepeatParams(1, 1, 1, 8, 8, 8))


@njit(cache=True)
def _long_scalar(ctx, pipe, is_max, red, acc):
    """The row's max (sum) from its 64-float row: WholeReduceMax (Sum) into ``red``, read by the scalar unit after
    a V_S SetFlag / WaitFlag, and an S_V one after the read (the next row's reduce writes ``red`` again)."""
    _whole_reduce(is_max, red, acc, FLOAT_REPEAT, 1, 1, 1, 8)
    ev = pipe.fetch_event_id(asc.HardEvent.V_S)
    asc.set_flag(ctx, asc.HardEvent.V_S, ev)
    asc.wait_flag(ctx, asc.HardEvent.V_S, ev)
    v = red.get_value(0)
    ev = pipe.fetch_event_id(asc.HardEvent.S_V)
    asc.set_flag(ctx, asc.HardEvent.S_V, ev)
    asc.wait_flag(ctx, asc.HardEvent.S_V, ev)
    return v


@njit(cache=True)
def _long_normalise(ctx, dst, src, neg_max, srow, la, length):
    """x − max (Adds of the negated max), Exp, then the division by the sum row (``srow``, 64 copies of the sum)
    of a load of ``length`` elements (``la``: aligned), into ``dst``."""
    asc.adds(dst, src, neg_max, la)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.exp(dst, dst, la)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    full = length // FLOAT_REPEAT
    tail = length - full * FLOAT_REPEAT
    bcast_rows(True, dst, dst, srow, full, FLOAT_REPEAT)
    if tail > 0:
        o = full * FLOAT_REPEAT
        asc.div(dst[o], dst[o], srow, tail, 1, asc.BinaryRepeatParams(1, 1, 1, 8, 8, 0))


@njit(cache=True)
def _long_copy_in(t, queue, x, off, length, dtype):
    """CopyIn: one load of ``length`` elements of a row, padded with zeros to 32 B."""
    sz = asc.size_of(dtype)
    blk = 32 // sz
    xl = queue.alloc_tensor(dtype)
    asc.data_copy_pad(xl, x[off], asc.DataCopyExtParams(1, length * sz, 0, 0),
                      asc.DataCopyPadExtParams(True, 0, (length + blk - 1) // blk * blk - length, 0))
    queue.enque(xl)


@njit(cache=True)
def _long_copy_out(queue, y, off, length, dtype):
    """CopyOut: the ``length`` real elements of a load."""
    yl = queue.deque(dtype)
    asc.data_copy_pad(y[off], yl, asc.DataCopyExtParams(1, length * asc.size_of(dtype), 0, 0))
    queue.free_tensor(yl)


@njit(cache=True)
def _long_process(ctx, pipe, t, x, y, in_queue_x, out_queue_y, xf, work, acc):
    """Process() of the split-row kernels: the core's rows, each in ``c_chunks`` loads over three passes: the max
    (each load folded into a running 64-float row: :func:`_long_fold`; WholeReduceMax; the scalar read after a
    V_S sync), the sum (Adds of −max, Exp, the Add folds; WholeReduceSum), then Duplicate of the sum into a row
    and, load by load, Adds, Exp and the division (level-0 Div, the sum row re-read at repStride 0) and CopyOut.
    ``acc`` holds the running row, the sum row and the reduce block. ``xf`` is None for fp32 x (computed in the
    queues' tiles), else the fp32 TBuf each b16 load is widened into (:func:`widen`, :func:`narrow`)."""
    srow = acc[FLOAT_REPEAT]
    red = acc[2 * FLOAT_REPEAT]
    blk = 32 // asc.size_of(x.dtype)
    c = asc.get_block_idx(ctx)
    start = c * t.block_rows + min(c, t.former_num)
    neg_max = np.float32(0.0)
    for row in range(start, start + t.block_rows + (1 if c < t.former_num else 0)):
        base = row * t.cols
        for p in range(2):  # the max, then the sum
            for k in range(t.c_chunks):
                c0 = k * t.tile_cols
                ln = min(t.tile_cols, t.cols - c0)
                la = (ln + blk - 1) // blk * blk
                _long_copy_in(t, in_queue_x, x, base + c0, ln, x.dtype)
                xl = in_queue_x.deque(x.dtype)
                xs = widen(ctx, in_queue_x, xl, xf, la)
                if p == 1:
                    asc.adds(xs, xs, neg_max, la)
                    asc.pipe_barrier(ctx, asc.PIPE_V)
                    asc.exp(xs, xs, la)
                    asc.pipe_barrier(ctx, asc.PIPE_V)
                _long_fold(ctx, p == 0, acc, work, xs, ln, k == 0)
                asc.pipe_barrier(ctx, asc.PIPE_V)
                release(in_queue_x, xl, xf)
            v = _long_scalar(ctx, pipe, p == 0, red, acc)
            if p == 0:
                neg_max = -v
            else:
                asc.duplicate(srow, v, FLOAT_REPEAT)
                asc.pipe_barrier(ctx, asc.PIPE_V)
        for k in range(t.c_chunks):
            c0 = k * t.tile_cols
            ln = min(t.tile_cols, t.cols - c0)
            la = (ln + blk - 1) // blk * blk
            _long_copy_in(t, in_queue_x, x, base + c0, ln, x.dtype)
            xl = in_queue_x.deque(x.dtype)  # Compute
            xs = widen(ctx, in_queue_x, xl, xf, la)
            ys = y_tile(out_queue_y, xf, x.dtype)
            _long_normalise(ctx, ys, xs, neg_max, srow, la, ln)
            release(in_queue_x, xl, xf)
            out_queue_y.enque(narrow(ctx, out_queue_y, ys, xf, x.dtype, la))
            _long_copy_out(out_queue_y, y, base + c0, ln, x.dtype)


@kernel
def softmax_long_kernel(ctx, t, x, y):
    """Split-row softmax, fp32: Init (the x and y queues, the fold TBuf, the stat TBuf: running row, sum row and
    reduce block), then :func:`_long_process`, computing in the queues' tiles."""
    pipe = asc.TPipe(ctx)
    in_queue_x = pipe.init_buffer(asc.TQue(asc.VECIN, 1), t.buffer_num, t.tile_cols * 4)
    out_queue_y = pipe.init_buffer(asc.TQue(asc.VECOUT, 1), t.buffer_num, t.tile_cols * 4)
    fold_buf = pipe.init_buffer(asc.TBuf(asc.VECCALC), (t.tile_cols // FLOAT_REPEAT + 1) // 2 * FLOAT_REPEAT * 4)
    stat_buf = pipe.init_buffer(asc.TBuf(asc.VECCALC), (2 * FLOAT_REPEAT + FLOAT_BLK) * 4)
    work = fold_buf.get(asc.float32)
    acc = stat_buf.get(asc.float32)
    _long_process(ctx, pipe, t, x, y, in_queue_x, out_queue_y, None, work, acc)


@kernel
def softmax_long_b16_kernel(ctx, t, x, y):
    """Split-row softmax for half and bfloat16: Init as :func:`softmax_long_kernel`'s with an fp32 TBuf that each
    load is widened into (Cast, CAST_NONE) and computed in, then :func:`_long_process`, y cast back once
    (CAST_RINT) into the y tile."""
    pipe = asc.TPipe(ctx)
    in_queue_x = pipe.init_buffer(asc.TQue(asc.VECIN, 1), t.buffer_num, t.tile_cols * 2)
    out_queue_y = pipe.init_buffer(asc.TQue(asc.VECOUT, 1), t.buffer_num, t.tile_cols * 2)
    cast_buf = pipe.init_buffer(asc.TBuf(asc.VECCALC), t.tile_cols * 4)
    fold_buf = pipe.init_buffer(asc.TBuf(asc.VECCALC), (t.tile_cols // FLOAT_REPEAT + 1) // 2 * FLOAT_REPEAT * 4)
    stat_buf = pipe.init_buffer(asc.TBuf(asc.VECCALC), (2 * FLOAT_REPEAT + FLOAT_BLK) * 4)
    xf = cast_buf.get(asc.float32)
    work = fold_buf.get(asc.float32)
    acc = stat_buf.get(asc.float32)
    _long_process(ctx, pipe, t, x, y, in_queue_x, out_queue_y, xf, work, acc)


def run(t: Any, spec: SocSpec, x: np.ndarray, y: np.ndarray, ws: np.ndarray | None,
        checks: bool | None = None, auto_sync: bool | None = None) -> RunReport:
    """Launch the kernel of the tiling (x's dtype) on arrays already validated (x any layout, y C-contiguous of
    x's shape): the device part of the op. ``auto_sync`` is BiSheng's ``--cce-auto-sync`` for checked mode. The
    workspace is passed and not touched."""
    if isinstance(t, SoftmaxArbTiling):
        k = softmax_arb_kernel if t.itemsize == 4 else softmax_arb_b16_kernel
    elif isinstance(t, SoftmaxLongTiling):
        k = softmax_long_kernel if t.itemsize == 4 else softmax_long_b16_kernel
    else:
        k = softmax_bf16_kernel if t.dtype == BF16 else softmax_kernel
    return launch(k, t, np.ascontiguousarray(x), y, block_dim=t.block_dim, soc=spec, checks=checks,
                  workspace=ws, op="softmax", gm_names=GM_NAMES, auto_sync=auto_sync)


def ai_cpu_softmax(x: Any, dim: int) -> np.ndarray:
    """float64 softmax as SoftmaxV2's AI CPU kernel computes it (ops-nn ``op_kernel_aicpu/softmax_v2_aicpu.cpp``,
    which aclnn's l0op::SoftmaxV2 launches for a dtype no AI Core kernel takes): for each position outside the
    axis, the max along it, e = exp(x − max), the sum of e added in the axis' order, its reciprocal, then e times
    the reciprocal. A 0-d x is 1. ``exp`` is numpy's, which may differ from the AI CPU's libm in the last bit."""
    xx = np.asarray(x, np.float64)
    if xx.ndim == 0:
        return np.ones((), np.float64)
    v = np.moveaxis(xx, dim, 0)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        e = np.exp(v - v.max(axis=0))
        s = np.zeros(e.shape[1:], np.float64)
        for i in range(e.shape[0]):
            s += e[i]
        return np.moveaxis(e * (1.0 / s), 0, dim)


@accepts_torch(arrays=("x",))
def softmax(x: Any, dim: int = -1, *, soc: str | SocSpec = DEFAULT_SOC, tiling: Any = None,
            checks: bool | None = None, out: np.ndarray | None = None) -> np.ndarray:
    """aclnnSoftmax along ``dim`` (any axis, negative counting from the end: the kernel on the A2 SoftMax API for
    an axis whose elements are contiguous, the [A, R, B] kernel otherwise; see :mod:`tiling.softmax`); y in x's
    dtype and shape (fp32, fp16, bf16). float64, which no AI Core kernel takes (aclnn runs it on the AI CPU), is
    computed on the host as the AI CPU kernel does (:func:`ai_cpu_softmax`), without a launch: no run report, no
    tiling. An empty x gives an empty y of its dtype without a launch, whatever the dtype (aclnnSoftmax returns
    before its dtype checks).

    ``tiling`` runs a TilingData made with ``tiling.softmax(x, dim, core_num=..., tile_rows=..., buffer_num=...,
    tmp_size=..., tile_b=..., tile_cols=...)`` (checked first); ``checks=True`` runs checked mode; ``out`` writes
    into an existing array. Errors raise :class:`tilesim.AclnnError` with the aclnn status; inputs are never
    modified and nothing is written on error. A non-contiguous x is copied first (aclnn's Contiguous)."""
    spec = get_soc(soc)
    rows, cols = check_args(x, dim, out, spec)
    t = None
    if rows * cols and dtype_name(x) == FP64:
        if tiling is not None:
            raise tiling_error("tiling", "float64 runs on the AI CPU (SoftmaxV2's AI CPU kernel): there is no AI "
                                         "Core kernel to tile")
        y = output(out, "out", tuple(np.shape(x)), FP64)
        y[...] = ai_cpu_softmax(x, int(dim))
        return y
    if rows * cols:
        t = make_tiling(x, dim, soc=spec) if tiling is None else check_tiling(tiling, x, dim, soc=spec)
    elif tiling is not None:
        raise tiling_error("tiling", f"x {list(np.shape(x))} is empty: there is nothing to tile")
    y = output(out, "out", tuple(np.shape(x)), dtype_name(x))
    if t is not None:
        run(t, spec, x, y, workspace(t.workspace_size), checks)
    return y


__all__ = ["ai_cpu_softmax", "bcast_rows", "fold_rows", "kernel_tiling_func", "reduce_last_nd", "run", "softmax",
           "softmax_arb_b16_kernel", "softmax_arb_kernel", "softmax_bf16_kernel", "softmax_kernel",
           "softmax_long_b16_kernel", "softmax_long_kernel", "softmax_rows"]
