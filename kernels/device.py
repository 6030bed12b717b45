"""Device helpers that more than one op's kernel uses, each as the Huawei kernel it mirrors has it: y's rounding
(``y_round_mode``), the fp32 row sums of ops-nn's ``reduce_common.h`` (ReduceSumHalfInterval, ReduceSumMultiN),
and the GLU family's tile walk and row copies (SwiGlu's and SwiGluGrad's). The op modules import them from here,
never from one another; their host-side helpers are :mod:`kernels.common`."""

from __future__ import annotations

from numba.extending import overload

from tilesim import machine as asc  # AscendC::
from tilesim.jit import OVERLOAD_OPTIONS, njit

NUM_PER_REP_FP32 = 64  # floats in a 256 B repeat
NUM_PER_BLK_FP32 = 8  # floats in a 32 B block
MAX_REPEAT = 255  # MAX_REPEAT_TIMES


def y_round_mode(dtype):  # type: ignore[no-untyped-def]
    """The rounding of y: CAST_NONE for half, CAST_RINT otherwise (bfloat16; float never casts)."""


@overload(y_round_mode, jit_options=OVERLOAD_OPTIONS)
def _y_round_mode_impl(dtype):  # type: ignore[no-untyped-def]
    mode = asc.CAST_NONE if dtype.dt.name == "half" else asc.CAST_RINT
    return lambda dtype: mode


# ---------------------------------------------------------------------------------------------------------------
# reduce_common.h


@njit(cache=True)
def _find_power_two(n):
    """findPowerTwo: the largest power of two not above ``n``."""
    p = 1
    while p * 2 <= n:
        p *= 2
    return p


@njit(cache=True)
def _fold_to_repeat(ctx, src, count):
    """ReduceSumHalfInterval's Add folds: the tail past the largest power of two onto the head, then halves down
    to 64 lanes, each with its PipeBarrier<PIPE_V>; then the mask for WholeReduceSum (64 lanes, or ``count``)."""
    if count > NUM_PER_REP_FP32:
        body = _find_power_two(count)
        tail = count - body
        if tail > 0:
            asc.add(src, src, src[body], tail)
            asc.pipe_barrier(ctx, asc.PIPE_V)
        while body > NUM_PER_REP_FP32:
            body = body // 2
            asc.add(src, src, src[body], body)
            asc.pipe_barrier(ctx, asc.PIPE_V)
        asc.set_vector_mask(ctx, NUM_PER_REP_FP32)
    else:
        asc.set_vector_mask(ctx, count)


@njit(cache=True)
def reduce_sum_half_interval(ctx, pipe, src, count):
    """``float ReduceSumHalfInterval(src, count)``: the folds, ``WholeReduceSum<float, false>`` into src[0], V_S
    (an id from FetchEventID), GetValue(0)."""
    _fold_to_repeat(ctx, src, count)
    asc.whole_reduce_sum(src, src, asc.MASK_PLACEHOLDER, 1, 0, 1, 0)
    ev = pipe.fetch_event_id(asc.HardEvent.V_S)
    asc.set_flag(ctx, asc.HardEvent.V_S, ev)
    asc.wait_flag(ctx, asc.HardEvent.V_S, ev)
    return src.get_value(0)


@njit(cache=True)
def reduce_sum_half_interval_to(ctx, dst, src, count):
    """``ReduceSumHalfInterval(dst, src, count)``: the folds, WholeReduceSum into dst[0], PipeBarrier<PIPE_V>."""
    _fold_to_repeat(ctx, src, count)
    asc.whole_reduce_sum(dst, src, asc.MASK_PLACEHOLDER, 1, 0, 1, 0)
    asc.pipe_barrier(ctx, asc.PIPE_V)


@njit(cache=True)
def _reduce_pre_repeat(ctx, dst, src, tmp, elem_num, num_last_dim, tail_count, repeat, rep_stride):
    """ReduceSumForSmallReduceDimPreRepeat: ``tmp[r] += src[r, e:e + 64]`` for whole 64-lane slices of every row
    (a row per repeat, src's repeat stride a row), a masked Add for the tail lanes, then WholeReduceSum of each
    row's 64 partial sums into ``dst[r]``."""
    params = asc.BinaryRepeatParams(1, 1, 1, NUM_PER_BLK_FP32, rep_stride, NUM_PER_BLK_FP32)
    e = 0
    while e + NUM_PER_REP_FP32 <= num_last_dim:
        asc.add(tmp, src[e], tmp, elem_num, repeat, params)
        asc.pipe_barrier(ctx, asc.PIPE_V)
        e += NUM_PER_REP_FP32
    if tail_count != 0:
        asc.add(tmp, src[e], tmp, tail_count, repeat, params)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.set_vector_mask(ctx, NUM_PER_REP_FP32)
    asc.whole_reduce_sum(dst, tmp, asc.MASK_PLACEHOLDER, repeat, 1, 1, NUM_PER_BLK_FP32)


@njit(cache=True)
def reduce_sum_multi_n(ctx, dst, src, tmp, num_row, num_col, num_col_align):
    """ReduceSumMultiN (with ReduceSumForSmallReduceDim): the sum of each of ``num_row`` rows of ``num_col``
    (rows numColAlign apart) into ``dst[r]``, 255 rows an instruction; ``tmp`` holds 64 floats a row."""
    tail_count = num_col % NUM_PER_REP_FP32
    rep_stride = num_col_align // NUM_PER_BLK_FP32
    asc.duplicate(tmp, 0.0, num_row * NUM_PER_REP_FP32)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    if num_row // MAX_REPEAT == 0:
        _reduce_pre_repeat(ctx, dst, src, tmp, NUM_PER_REP_FP32, num_col, tail_count, num_row, rep_stride)
        return
    r = 0
    while r + MAX_REPEAT <= num_row:
        _reduce_pre_repeat(ctx, dst[r], src[r * num_col_align], tmp[r * NUM_PER_REP_FP32], NUM_PER_REP_FP32, num_col,
                           tail_count, MAX_REPEAT, rep_stride)
        r += MAX_REPEAT
    if num_row % MAX_REPEAT != 0:
        _reduce_pre_repeat(ctx, dst[r], src[r * num_col_align], tmp[r * NUM_PER_REP_FP32], NUM_PER_REP_FP32, num_col,
                           tail_count, num_row % MAX_REPEAT, rep_stride)


# ---------------------------------------------------------------------------------------------------------------
# the GLU family (SwiGlu, SwiGluGrad)


@njit(cache=True)
def tile_length(t, sz):
    """SwigluSingleTilingKernel.tileLength: elements of one queue buffer, rows of baseColLen padded to 32 B when
    colLen is not aligned (DataCopyPad lands every row on a block boundary)."""
    m = 32 // sz
    col = t.base_col_len if t.is_32b_aligned == 1 else (t.base_col_len + m - 1) // m * m
    return t.base_row_len * col


@njit(cache=True)
def total_tiles(t):
    """totalTileNum: rowTileNum · colTileNum, tails included."""
    return ((t.row_len + t.base_row_len - 1) // t.base_row_len) * ((t.col_len + t.base_col_len - 1) // t.base_col_len)


@njit(cache=True)
def tile_param(t, tile, sz):
    """CaclOneTileParam: tile ``tile``'s compute length (curCalLen), the offsets of its A and B in x and of its y,
    and its copy parameters (CaclOneTileCopyParam: blockLen and the strides in 32 B blocks when colLen is aligned,
    in bytes otherwise; no stride for a single row)."""
    col, br, bc = t.col_len, t.base_row_len, t.base_col_len
    col_tiles = (col + bc - 1) // bc
    r_tile, c_tile = tile // col_tiles, tile % col_tiles
    rows = br if r_tile < t.row_len // br else t.row_len % br
    cols = bc if c_tile < col // bc else col % bc
    off_a = r_tile * br * 2 * col + c_tile * bc
    off_c = r_tile * br * col + c_tile * bc
    m = 32 // sz
    if t.is_32b_aligned == 1:
        unit, cal = 32, rows * cols
    else:
        unit, cal = 1, rows * ((cols + m - 1) // m * m)
    blen = cols * sz // unit
    split = asc.DataCopyParams(rows, blen, 0 if rows == 1 else (2 * col - cols) * sz // unit, 0)
    indep = asc.DataCopyParams(rows, blen, 0, 0 if rows == 1 else (col - cols) * sz // unit)
    return cal, off_a, off_a + col, off_c, split, indep


@njit(cache=True)
def copy_in_rows(t, queue, src, params):
    """One queue's CopyIn of the GLU family's kernels: AllocTensor, rows from GM ``src`` by DataCopy (colLen 32 B
    aligned) or DataCopyPad (isPad false), EnQue."""
    lt = queue.alloc_tensor(src.dtype)
    if t.is_32b_aligned == 1:
        asc.data_copy(lt, src, params)
    else:
        asc.data_copy_pad(lt, src, params, asc.DataCopyPadExtParams(False, 0, 0, 0))
    queue.enque(lt)


@njit(cache=True)
def copy_out_rows(t, queue, dst, params):
    """One queue's CopyOut of the GLU family's kernels: DeQue, rows to GM ``dst`` by DataCopy or DataCopyPad,
    FreeTensor."""
    lt = queue.deque(dst.dtype)
    if t.is_32b_aligned == 1:
        asc.data_copy(dst, lt, params)
    else:
        asc.data_copy_pad(dst, lt, params)
    queue.free_tensor(lt)


__all__ = ["copy_in_rows", "copy_out_rows", "reduce_sum_half_interval", "reduce_sum_half_interval_to",
           "reduce_sum_multi_n", "tile_length", "tile_param", "total_tiles", "y_round_mode"]
