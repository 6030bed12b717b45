"""Data movement between GM and UB: DataCopy (contiguous or in strided rows), DataCopyPad, InitOutput and the
atomic-add copy-out.

Kernels move data only through these, so the MTE2/MTE3 byte counts are what the kernel really moves.
GM tensors are :class:`GlobalTensor` ``(tag, data)`` with a flat array; offsets and lengths are in elements of
that array's dtype (fp16/bf16 travel as uint16 bits).
"""

from __future__ import annotations

from numba import njit

from .device import (
    ATOMIC_BYTES,
    ERR_DATACOPY_GAP,
    ERR_DATACOPY_LEN,
    ERR_UB_ALIGN,
    MTE2_BYTES,
    MTE2_PAD_BYTES,
    MTE2_XFERS,
    MTE3_BYTES,
    MTE3_XFERS,
    gm_ok,
    report,
    ub_ok,
)
from .ub import BLOCK


@njit(cache=True)
def _datacopy_ok(core, t, nbytes, gap):
    """A block of ``nbytes`` at ``t`` with ``gap`` bytes to the next one in GM: all whole 32 B blocks."""
    if not core.checks:
        return True
    ok = True
    if nbytes % BLOCK != 0:
        report(core, ERR_DATACOPY_LEN, t.buf, t.addr - core.plan[t.buf, 0], nbytes, BLOCK)
        ok = False
    if gap % BLOCK != 0:
        report(core, ERR_DATACOPY_GAP, t.buf, t.addr - core.plan[t.buf, 0], nbytes, gap)
        ok = False
    if t.addr % BLOCK != 0:
        report(core, ERR_UB_ALIGN, t.buf, t.addr - core.plan[t.buf, 0], nbytes, BLOCK)
        ok = False
    return ok


@njit(cache=True)
def data_copy_rows(core, dst, src, src_off, rows, row_len, src_stride):
    """DataCopy GM to UB with DataCopyParams: ``rows`` blocks (blockCount) of ``row_len`` elements (blockLen),
    ``src_stride`` elements apart in GM (their starts; srcStride is the gap), packed back to back in UB
    (dstStride 0). Every length, gap and address is a whole number of 32 B blocks (checked mode enforces it)."""
    isz = src.data.itemsize
    nbytes = rows * row_len * isz
    if core.checks:
        if not (_datacopy_ok(core, dst, row_len * isz, (src_stride - row_len) * isz)
                and ub_ok(core, dst, nbytes) and gm_ok(core, src, src_off, row_len)
                and gm_ok(core, src, src_off + (rows - 1) * src_stride, row_len)):
            return
    d = core.ub[dst.addr:dst.addr + nbytes].view(src.data.dtype)
    s = src.data
    for r in range(rows):
        g = src_off + r * src_stride
        d[r * row_len:(r + 1) * row_len] = s[g:g + row_len]
    core.cnt[MTE2_BYTES] += nbytes
    core.cnt[MTE2_XFERS] += 1


@njit(cache=True)
def data_copy_rows_out(core, dst, dst_off, src, rows, row_len, dst_stride):
    """DataCopy UB to GM with DataCopyParams: ``rows`` blocks of ``row_len`` elements read back to back from UB,
    written ``dst_stride`` elements apart in GM (dstStride is the gap); whole 32 B blocks throughout."""
    isz = dst.data.itemsize
    nbytes = rows * row_len * isz
    if core.checks:
        if not (_datacopy_ok(core, src, row_len * isz, (dst_stride - row_len) * isz)
                and ub_ok(core, src, nbytes) and gm_ok(core, dst, dst_off, row_len)
                and gm_ok(core, dst, dst_off + (rows - 1) * dst_stride, row_len)):
            return
    s = core.ub[src.addr:src.addr + nbytes].view(dst.data.dtype)
    d = dst.data
    for r in range(rows):
        g = dst_off + r * dst_stride
        d[g:g + row_len] = s[r * row_len:(r + 1) * row_len]
    core.cnt[MTE3_BYTES] += nbytes
    core.cnt[MTE3_XFERS] += 1


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
    isz = src.data.itemsize
    row_bytes = row_len * isz
    pitch = (row_bytes + BLOCK - 1) // BLOCK * BLOCK + BLOCK * dst_gap
    if core.checks:
        last = src_off + (rows - 1) * src_stride
        if not (ub_ok(core, dst, rows * pitch - BLOCK * dst_gap) and gm_ok(core, src, src_off, row_len)
                and gm_ok(core, src, last, row_len)):
            return
    per_row = pitch // isz
    filled = per_row - BLOCK * dst_gap // isz
    d = core.ub[dst.addr:dst.addr + rows * pitch - BLOCK * dst_gap].view(src.data.dtype)
    s = src.data
    pv = s.dtype.type(pad_value)
    for r in range(rows):
        o = r * per_row
        g = src_off + r * src_stride
        d[o:o + row_len] = s[g:g + row_len]
        for k in range(row_len, filled):
            d[o + k] = pv
    core.cnt[MTE2_BYTES] += rows * row_bytes
    core.cnt[MTE2_PAD_BYTES] += rows * (filled * isz - row_bytes)
    core.cnt[MTE2_XFERS] += 1


@njit(cache=True)
def data_copy_pad_out(core, dst, dst_off, src, rows, row_len, dst_stride):
    """DataCopyPad UB to GM: ``rows`` rows of ``row_len`` elements read from UB rows 32 B apart; only the
    ``row_len`` elements of each row reach GM, ``dst_stride`` elements apart."""
    isz = dst.data.itemsize
    row_bytes = row_len * isz
    pitch = (row_bytes + BLOCK - 1) // BLOCK * BLOCK
    if core.checks:
        last = dst_off + (rows - 1) * dst_stride
        if not (ub_ok(core, src, (rows - 1) * pitch + row_bytes) and gm_ok(core, dst, dst_off, row_len)
                and gm_ok(core, dst, last, row_len)):
            return
    per_row = pitch // isz
    s = core.ub[src.addr:src.addr + rows * pitch].view(dst.data.dtype)
    d = dst.data
    for r in range(rows):
        g = dst_off + r * dst_stride
        d[g:g + row_len] = s[r * per_row:r * per_row + row_len]
    core.cnt[MTE3_BYTES] += rows * row_bytes
    core.cnt[MTE3_XFERS] += 1


@njit(cache=True)
def init_output(core, dst, dst_off, n, value):
    """InitOutput: fill ``n`` GM elements with ``value`` (the NPU does it from a UB buffer through MTE3)."""
    if not gm_ok(core, dst, dst_off, n):
        return
    dst.data[dst_off:dst_off + n] = value
    core.cnt[MTE3_BYTES] += n * dst.data.itemsize
    core.cnt[MTE3_XFERS] += 1


@njit(cache=True)
def atomic_add_pad_out(core, acc, acc_off, src, row_len):
    """SetAtomicAdd + DataCopyPad UB to GM of one fp32 row: ``acc[acc_off:+row_len] += src``.

    ``acc`` is where this core's adds land. For a GM tensor that several cores add into, pass this core's row
    of an :class:`AtomicTarget` shadow: the launcher merges the rows into the tensor after the phase, in core
    order, so the result is the same whatever the host thread count. For a region only this core touches
    (its own workspace slice), pass the GM tensor itself.
    """
    if not (ub_ok(core, src, row_len * 4) and gm_ok(core, acc, acc_off, row_len)):
        return
    s = core.ub[src.addr:src.addr + row_len * 4].view(acc.data.dtype)
    d = acc.data
    for k in range(row_len):
        d[acc_off + k] += s[k]
    core.cnt[MTE3_BYTES] += row_len * 4
    core.cnt[ATOMIC_BYTES] += row_len * 4
    core.cnt[MTE3_XFERS] += 1
