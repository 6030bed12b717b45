"""Data movement between GM and UB: DataCopy (contiguous or in strided rows), DataCopyPad, InitOutput and the
atomic-add copy-out.

Kernels move data only through these, so the MTE2/MTE3 byte counts are what the kernel really moves.
GM tensors are :class:`GlobalTensor` ``(tag, data, isz)``: the tensor's bytes and its element size; offsets and
lengths are in elements. The movers copy bytes, as the MTEs do, so one compiled kernel serves every dtype.
"""

from __future__ import annotations

import numpy as np

from .device import (
    count_mte3,
    gm_f32,
    gm_ok,
    ub_in,
    ub_view,
)
from .jit import njit
from .machine.movers import _ub_aligned, add_rows, gm_to_ub, ub_to_gm, ub_to_ub  # noqa: F401
from .machine.movers import fill_gm as init_output  # noqa: F401
from .ub import BLOCK


@njit(cache=True)
def data_copy_rows(core, dst, src, src_off, rows, row_len, src_stride):
    """DataCopy GM to UB with DataCopyParams: ``rows`` blocks (blockCount) of ``row_len`` elements (blockLen),
    ``src_stride`` elements apart in GM (their starts; srcStride is the gap), packed back to back in UB
    (dstStride 0). Every length, gap and address is a whole number of 32 B blocks (checked mode enforces it)."""
    isz = src.isz
    gm_to_ub(core, dst, src, src_off * isz, rows, row_len * isz, src_stride * isz, row_len * isz, 0, row_len * isz, 0,
             True)


@njit(cache=True)
def data_copy_rows_out(core, dst, dst_off, src, rows, row_len, dst_stride):
    """DataCopy UB to GM with DataCopyParams: ``rows`` blocks of ``row_len`` elements read back to back from UB,
    written ``dst_stride`` elements apart in GM (dstStride is the gap); whole 32 B blocks throughout."""
    isz = dst.isz
    ub_to_gm(core, dst, dst_off * isz, src, rows, row_len * isz, dst_stride * isz, row_len * isz, True)


@njit(cache=True)
def data_copy(core, dst, src, src_off, n):
    """DataCopy GM to UB: ``n`` contiguous elements, a whole number of 32 B blocks."""
    data_copy_rows(core, dst, src, src_off, 1, n, n)


@njit(cache=True)
def data_copy_out(core, dst, dst_off, src, n):
    """DataCopy UB to GM: ``n`` contiguous elements, a whole number of 32 B blocks."""
    data_copy_rows_out(core, dst, dst_off, src, 1, n, n)


@njit(cache=True)
def data_copy_pad(core, dst, src, src_off, rows, row_len, src_stride, pad_value, dst_gap=0):
    """DataCopyPad GM to UB: ``rows`` rows of ``row_len`` elements, ``src_stride`` elements apart in GM.

    In UB each row starts on a 32 B boundary and is filled up to it with ``pad_value`` (isPad with paddingValue),
    then ``dst_gap`` further 32 B blocks are skipped (DataCopyExtParams.dstStride), so the rows land
    ``align_up(row_len * itemsize, 32) + 32 * dst_gap`` bytes apart.
    """
    isz = src.isz
    row_bytes = row_len * isz
    filled = (row_bytes + BLOCK - 1) // BLOCK * BLOCK
    gm_to_ub(core, dst, src, src_off * isz, rows, row_bytes, src_stride * isz, filled + BLOCK * dst_gap, 0, filled,
             pad_value, False)


@njit(cache=True)
def data_copy_pad_out(core, dst, dst_off, src, rows, row_len, dst_stride):
    """DataCopyPad UB to GM: ``rows`` rows of ``row_len`` elements read from UB rows 32 B apart; only the
    ``row_len`` elements of each row reach GM, ``dst_stride`` elements apart."""
    isz = dst.isz
    row_bytes = row_len * isz
    ub_to_gm(core, dst, dst_off * isz, src, rows, row_bytes, dst_stride * isz, (row_bytes + BLOCK - 1) // BLOCK * BLOCK,
             False)


@njit(cache=True)
def atomic_add_pad_out(core, acc, acc_off, src, row_len):
    """SetAtomicAdd + DataCopyPad UB to GM of one fp32 row: ``acc[acc_off:+row_len] += src``.

    ``acc`` is where this core's adds land. For a GM tensor that several cores add into, pass this core's row
    of an :class:`AtomicTarget` shadow: the launcher merges the rows into the tensor after the phase, in core
    order, so the result is the same whatever the host thread count. For a region only this core touches
    (its own workspace slice), pass the GM tensor itself.
    """
    if not (_ub_aligned(core, src, row_len * 4) and ub_in(core, src, row_len * 4)
            and gm_ok(core, acc, acc_off, row_len)):
        return
    s = ub_view(core, src.addr, row_len, np.float32)
    d = gm_f32(acc)[acc_off:acc_off + row_len]  # indexed from 0, so that the loop vectorises
    for k in range(row_len):
        d[k] += s[k]
    count_mte3(core, acc, src, acc_off, 1, row_len, row_len, True)
