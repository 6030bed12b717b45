"""The MTEs' byte movers behind DataCopy, DataCopyPad, InitOutput and the atomic adds (:mod:`.datacopy`,
:mod:`.atomic`): rows of bytes between GM and UB, DataCopyPad's padding and dummy bytes, the checks of their
layout and bounds, and their MTE2/MTE3 counts.

GM tensors are :class:`tilesim.core.records.GmView` ``(tag, addr, nbytes, isz)`` views: the tensor's bytes and its
element size; offsets and pitches here are in bytes. The movers copy bytes, as the MTEs do, whatever the element type.
"""

from __future__ import annotations

import numpy as np
from numba import carray

from tilesim.core.records import (
    ERR_DATACOPY_GAP,
    ERR_DATACOPY_LEN,
    ERR_UB_ALIGN,
    NO_TENSOR,
    VEC_DUP,
    at,
    checked_only,
    count_mte2,
    count_mte3,
    count_vector,
    flow1,
    gm_f32,
    gm_ok,
    gm_u16,
    plan_of,
    report,
    rows_span,
    ub_ok,
    ub_rows_in,
    ub_rows_out,
    ub_rows_unwritten,
    ub_view,
)
from tilesim.core.ub import BLOCK
from tilesim.core.vec_kinds import vec_kind
from tilesim.jit import njit
from tilesim.jit.intrinsics import (
    address_as_pointer,
    bf16_nearest_bits,
    bf16_widen_bits,
    copy_bytes,
    f32_as_u32,
    fp16_nearest_bits,
    fp16_widen_bits,
    stream_line,
    u32_as_f32,
)
from tilesim.machine.hazard import op_code

_DATA_COPY, _DATA_COPY_PAD = op_code("DataCopy"), op_code("DataCopyPad")

# GM tensors at least this large are written with non-temporal stores: they outgrow the host's caches, so a
# cached store would first read each line from memory (a third more traffic for a kernel's output) and evict the
# UB tiles the next instruction reads. Smaller ones (workspaces, atomic targets) are read back soon: cached.
STREAM_TENSOR_BYTES = 8 << 20
STREAM_RUN_BYTES = 256  # shorter runs are mostly the partial lines at their ends


@njit(cache=True)
def _streams(g, nbytes):
    return g.nbytes >= STREAM_TENSOR_BYTES and nbytes >= STREAM_RUN_BYTES


@njit(cache=True)
def _write_gm(dst, src, nbytes, stream):
    """``nbytes`` from host address ``src`` to GM address ``dst``; with ``stream``, the whole 64 B lines of the
    destination by non-temporal stores (:func:`tilesim.jit.intrinsics.stream_line`). Another host thread sees them
    once this one has run a store fence: :func:`tilesim.runtime.host_threads.run_cores` runs one after each thread's
    cores."""
    if not stream:
        copy_bytes(dst, src, nbytes)
        return
    head = min(-dst % 64, nbytes)
    lines = (nbytes - head) // 64
    copy_bytes(dst, src, head)
    for k in range(lines):
        stream_line(dst + head + 64 * k, src + head + 64 * k)
    done = head + 64 * lines
    copy_bytes(dst + done, src + done, nbytes - done)


@njit(cache=True)
def _fill(core, addr, start, stop, isz, bits):
    """Elements ``start .. stop - 1`` of the ``isz``-byte elements at UB ``addr`` set to the element whose bytes are
    the low ``isz`` bytes of ``bits`` (:func:`tilesim.machine.vector.element_bits`)."""
    n = stop - start
    if isz == 4:
        w = ub_view(core, addr + 4 * start, n, np.uint32)
        v32 = np.uint32(bits & np.uint64(0xFFFFFFFF))
        for k in range(n):
            w[k] = v32
    elif isz == 2:
        h = ub_view(core, addr + 2 * start, n, np.uint16)
        v16 = np.uint16(bits & np.uint64(0xFFFF))
        for k in range(n):
            h[k] = v16
    elif isz == 1:
        b = ub_view(core, addr + start, n, np.uint8)
        v8 = np.uint8(bits & np.uint64(0xFF))
        for k in range(n):
            b[k] = v8
    else:
        q = ub_view(core, addr + 8 * start, n, np.uint64)
        for k in range(n):
            q[k] = bits


@checked_only(True)
def whole_blocks(core, t, nbytes):
    """DataCopy's count form: ``nbytes`` at ``t`` whole 32 B blocks. Checked mode reports the rest, which the NPU
    drops silently (the caller moves the length rounded down, as the NPU does)."""
    if core.checks and nbytes % BLOCK != 0:
        report(core, ERR_DATACOPY_LEN, t.buf, t.addr - plan_of(core)[t.buf, 0], nbytes, BLOCK)
        return False
    return True


@checked_only(True)
def _datacopy_ok(core, t, nbytes, gap):
    """A block of ``nbytes`` at ``t`` with ``gap`` bytes to the next one in GM: at a 32 B-aligned UB address, the
    gap whole 32 B blocks (the lengths are: :func:`whole_blocks`)."""
    if not core.checks:
        return True
    ok = True
    if gap % BLOCK != 0:
        report(core, ERR_DATACOPY_GAP, t.buf, t.addr - plan_of(core)[t.buf, 0], nbytes, gap)
        ok = False
    if t.addr % BLOCK != 0:
        report(core, ERR_UB_ALIGN, t.buf, t.addr - plan_of(core)[t.buf, 0], nbytes, BLOCK)
        ok = False
    return ok


@checked_only(True)
def _ub_aligned(core, t, nbytes):
    """DataCopyPad's UB address, like DataCopy's, starts a 32 B block (its GM side and lengths may be anything)."""
    if core.checks and t.addr % BLOCK != 0:
        report(core, ERR_UB_ALIGN, t.buf, t.addr - plan_of(core)[t.buf, 0], nbytes, BLOCK)
        return False
    return True


@njit(cache=True, inline="always")
def _layout_ok(core, t, rows, row_b, gm_pitch, ub_pitch, whole):
    """A transfer worth making, laid out as its form requires: DataCopy's whole 32 B blocks (``whole``) or
    DataCopyPad's UB rows on 32 B (both checked mode's); False for no rows or bytes (a NOP)."""
    if whole and not _datacopy_ok(core, t, row_b, gm_pitch - row_b):
        return False
    if not whole and not _ub_aligned(core, t, rows * ub_pitch):
        return False
    return rows > 0 and row_b > 0


@njit(cache=True, inline="always")
def _gm_rows_ok(core, g, off, rows, n, gm_pitch):
    """The first and the last of ``rows`` rows of ``n`` elements, ``gm_pitch`` bytes apart from GM byte ``off``,
    inside the tensor."""
    return gm_ok(core, g, off // g.isz, n) and gm_ok(core, g, (off + (rows - 1) * gm_pitch) // g.isz, n)


@njit(cache=True)
def _element_at(core, addr, isz):
    """The ``isz``-byte element at UB ``addr``, its bytes in a uint64 (as :func:`_fill` takes them)."""
    if isz == 4:
        return np.uint64(ub_view(core, addr, 1, np.uint32)[0])
    if isz == 2:
        return np.uint64(ub_view(core, addr, 1, np.uint16)[0])
    if isz == 1:
        return np.uint64(ub_view(core, addr, 1, np.uint8)[0])
    return ub_view(core, addr, 1, np.uint64)[0]


@njit(cache=True)
def gm_to_ub(core, dst, g, off, rows, row_b, gm_pitch, ub_pitch, left_b, right_b, pad, is_pad, whole):
    """The MTE2 mover: ``rows`` rows of ``row_b`` bytes from GM byte ``off`` of ``g`` (``gm_pitch`` apart) to UB
    rows ``ub_pitch`` apart from ``dst``, each row's data ``left_b`` bytes in, ``left_b`` and ``right_b`` bytes
    of padding around it filled with ``pad`` (the element's bytes: :func:`tilesim.machine.vector.element_bits`)
    and the row then filled to its 32 B end with dummy bytes. ``whole``: DataCopy (rows and GM gaps in whole
    32 B blocks: no padding), else DataCopyPad (any lengths; the UB rows start on 32 B).

    As ``DataCopyPad（GMToUB非对齐数据搬运）.md`` (参数解释, 示例2) has it, the dummy bytes repeat the row's first
    element when there is no padding, else they are ``pad`` with ``is_pad`` and undefined without it, as the
    padding is (tilesim writes ``pad`` there). Checked mode's shadow takes the undefined bytes and the dummy
    bytes as never written: a kernel may compute on them (the results are carried as unwritten), not use them."""
    isz = g.isz
    n = row_b // isz
    end = left_b + row_b
    filled_b = (end + right_b + BLOCK - 1) // BLOCK * BLOCK
    if not _layout_ok(core, dst, rows, row_b, gm_pitch, ub_pitch, whole):
        return
    # a row's data runs past its fill with a negative right padding, and starts before the row with a negative left
    # one (-1, refused: Ascend C's paddings are unsigned)
    reach = max(filled_b, left_b + row_b) if left_b >= 0 else np.int64(-1)
    if not (ub_ok(core, dst, rows_span(rows, reach, ub_pitch), _DATA_COPY if whole else _DATA_COPY_PAD)
            and ub_rows_out(core, dst, rows, filled_b, ub_pitch) and _gm_rows_ok(core, g, off, rows, n, gm_pitch)):
        return
    no_pads = left_b == 0 and right_b == 0
    if not is_pad:  # the padding and the dummy bytes: undefined
        ub_rows_unwritten(core, dst, rows, 0, left_b, ub_pitch)
        ub_rows_unwritten(core, dst, rows, end, filled_b - end, ub_pitch)
    elif no_pads:  # the dummy bytes: the first element's, a value no kernel means to use
        ub_rows_unwritten(core, dst, rows, end, filled_b - end, ub_pitch)
    for r in range(rows):
        o = dst.addr + r * ub_pitch
        copy_bytes(core.base + o + left_b, g.addr + off + r * gm_pitch, row_b)
        if left_b:
            _fill(core, o, 0, left_b // isz, isz, pad)
        if filled_b > end:
            _fill(core, o, end // isz, filled_b // isz, isz, _element_at(core, o, isz) if no_pads else pad)
    count_mte2(core, dst, g, off // isz, rows, n, gm_pitch // isz, rows * (filled_b - row_b))


@njit(cache=True)
def out_ok(core, g, off, src, rows, row_b, gm_pitch, ub_pitch, whole):
    """An MTE3 copy's checks: its layout, its UB rows (read: written before, in checked mode), its GM rows."""
    return (_layout_ok(core, src, rows, row_b, gm_pitch, ub_pitch, whole)
            and ub_ok(core, src, rows_span(rows, row_b, ub_pitch), _DATA_COPY if whole else _DATA_COPY_PAD)
            and ub_rows_in(core, src, rows, row_b, ub_pitch)
            and _gm_rows_ok(core, g, off, rows, row_b // g.isz, gm_pitch))


@njit(cache=True)
def ub_to_gm(core, g, off, src, rows, row_b, gm_pitch, ub_pitch, whole):
    """The MTE3 mover: ``rows`` rows of ``row_b`` bytes from UB rows ``ub_pitch`` apart from ``src`` to GM byte
    ``off`` of ``g``, ``gm_pitch`` apart (``whole`` as for :func:`gm_to_ub`)."""
    isz = g.isz
    n = row_b // isz
    if not out_ok(core, g, off, src, rows, row_b, gm_pitch, ub_pitch, whole):
        return
    stream = _streams(g, row_b)
    for r in range(rows):
        _write_gm(g.addr + off + r * gm_pitch, core.base + src.addr + r * ub_pitch, row_b, stream)
    count_mte3(core, g, src, off // isz, rows, n, gm_pitch // isz, False)

@njit(cache=True)
def add_rows(d, s, rows, n, d_pitch, s_pitch, kind):
    """``rows`` rows of ``n`` elements from address ``s`` (``s_pitch`` bytes apart) added into those at ``d``
    (``d_pitch`` apart), as SetAtomicAdd<T> adds (``kind``: 0 float, 1 half, 2 bfloat16, 3 int32, 4 int16,
    5 int8; a b16 sum is rounded to nearest even, an int sum wraps)."""
    for r in range(rows):
        dr, sr = d + r * d_pitch, s + r * s_pitch
        if kind == 0:
            _add_into(carray(address_as_pointer(dr, np.float32), n), carray(address_as_pointer(sr, np.float32), n))
        elif kind == 3:
            _add_into(carray(address_as_pointer(dr, np.int32), n), carray(address_as_pointer(sr, np.int32), n))
        elif kind == 4:
            _add_into(carray(address_as_pointer(dr, np.int16), n), carray(address_as_pointer(sr, np.int16), n))
        elif kind == 5:
            _add_into(carray(address_as_pointer(dr, np.int8), n), carray(address_as_pointer(sr, np.int8), n))
        else:
            _add_b16(carray(address_as_pointer(dr, np.uint16), n), carray(address_as_pointer(sr, np.uint16), n),
                     kind == 2)


@njit(cache=True)
def _add_into(d, s):
    for k in range(d.size):
        d[k] += s[k]


@njit(cache=True)
def _add_b16(d, s, bf16):
    for k in range(d.size):
        if bf16:
            v = u32_as_f32(bf16_widen_bits(d[k])) + u32_as_f32(bf16_widen_bits(s[k]))
            d[k] = np.uint16(bf16_nearest_bits(f32_as_u32(v), False))
        else:
            v = u32_as_f32(fp16_widen_bits(d[k])) + u32_as_f32(fp16_widen_bits(s[k]))
            d[k] = np.uint16(fp16_nearest_bits(f32_as_u32(v), False))


_UB_COPY = vec_kind("DataCopy", 1)  # a UB-to-UB DataCopy on the vector pipe: a copy's throughput


@njit(cache=True)
def ub_to_ub(core, dst, src, rows, row_b, src_pitch, dst_pitch):
    """DataCopy from UB to UB (``copy_ubuf_to_ubuf``, on the vector pipe): ``rows`` rows of ``row_b`` bytes (whole
    32 B blocks), ``src_pitch`` and ``dst_pitch`` apart; the two may not overlap (undefined on the NPU too)."""
    if not (_datacopy_ok(core, src, row_b, src_pitch - row_b) and _datacopy_ok(core, dst, row_b, dst_pitch - row_b)):
        return
    if rows <= 0 or row_b <= 0:
        return
    if not (ub_ok(core, src, rows_span(rows, row_b, src_pitch), _DATA_COPY)
            and ub_ok(core, dst, rows_span(rows, row_b, dst_pitch), _DATA_COPY)):
        return
    for r in range(rows):  # the bytes' shadow state goes with them (a copy of padding is no use of it)
        flow1(core, at(dst, r * dst_pitch), at(src, r * src_pitch), row_b)
        copy_bytes(core.base + dst.addr + r * dst_pitch, core.base + src.addr + r * src_pitch, row_b)
    count_vector(core, VEC_DUP, _UB_COPY, rows * row_b, dst, src, src)


@njit(cache=True)
def fill_gm(core, dst, dst_off, n, value):
    """InitOutput: fill ``n`` GM elements with ``value`` (a float for fp32 tensors, the bits for b16 ones; the
    NPU does it from a UB buffer through MTE3)."""
    if not gm_ok(core, dst, dst_off, n):
        return
    if dst.isz == 4:
        gm_f32(dst)[dst_off:dst_off + n] = np.float32(value)
    else:
        gm_u16(dst)[dst_off:dst_off + n] = np.uint16(value)
    count_mte3(core, dst, NO_TENSOR, dst_off, 1, n, n, False)

