"""Casts between fp32 and the 16-bit float formats, as bit manipulation that Numba compiles.

Numba on the CPU has neither float16 nor bfloat16, so b16 values travel as uint16 bits. The round modes are the
Ascend ``RoundMode`` ones; CAST_NONE narrows like CAST_RINT (round to nearest, ties to even), which is what the
NPU does for fp32 to fp16 and what ``numpy``/``ml_dtypes`` do. Widening (b16 to fp32) is exact.
Overflow follows IEEE 754 for each direction: modes that round away from zero give inf, the others the largest
finite value.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from tilesim.jit import njit
from tilesim.jit.intrinsics import (
    BLOCK_LANES,
    bf16_nearest_bits,
    bf16_nearest_block,
    bf16_widen_bits,
    bf16_widen_block,
    fp16_nearest_bits,
    fp16_nearest_block,
    fp16_widen_bits,
    fp16_widen_block,
)

# Ascend C RoundMode, in the enum's order.
CAST_NONE = 0
CAST_RINT = 1
CAST_FLOOR = 2
CAST_CEIL = 3
CAST_ROUND = 4
CAST_TRUNC = 5
CAST_ODD = 6
ROUND_MODES = {"CAST_NONE": CAST_NONE, "CAST_RINT": CAST_RINT, "CAST_FLOOR": CAST_FLOOR, "CAST_CEIL": CAST_CEIL,
               "CAST_ROUND": CAST_ROUND, "CAST_TRUNC": CAST_TRUNC, "CAST_ODD": CAST_ODD}

# The 16-bit formats a kernel can hold in GM and UB (0: fp32).
KIND_FP16 = 1
KIND_BF16 = 2


@njit(cache=True)
def round_shift(mag, shift, mode, neg):
    """``mag >> shift`` rounded by RoundMode ``mode`` (``neg``: the value's sign, for FLOOR and CEIL): the one
    rounding of every cast (:mod:`tilesim.machine.convert` too). mag >= 0 and shift >= 1; a shift past 40 rounds as
    40 does, which is right for mag < 2**39."""
    if shift > 40:
        shift = 40
    q = mag >> shift
    rem = mag & ((np.int64(1) << shift) - 1)
    half = np.int64(1) << (shift - 1)
    if mode == CAST_RINT or mode == CAST_NONE:
        if rem > half or (rem == half and (q & 1) == 1):
            q += 1
    elif mode == CAST_ROUND:
        if rem >= half:
            q += 1
    elif mode == CAST_FLOOR:
        if neg and rem != 0:
            q += 1
    elif mode == CAST_CEIL:
        if (not neg) and rem != 0:
            q += 1
    elif mode == CAST_ODD:
        if rem != 0:
            q |= 1
    return q


@njit(cache=True)
def _overflows_to_inf(mode, neg):
    if mode == CAST_FLOOR:
        return neg
    if mode == CAST_CEIL:
        return not neg
    return mode == CAST_RINT or mode == CAST_NONE or mode == CAST_ROUND


@njit(cache=True, host=True)
def f32_bits_to_bf16(u, mode):
    """fp32 bits (uint32 as int64) to bf16 bits. NaN becomes 0x7FC0 / 0xFFC0, as in ml_dtypes."""
    u = np.int64(u) & 0xFFFFFFFF
    sign = (u >> 16) & 0x8000
    a = u & 0x7FFFFFFF
    if a > 0x7F800000:
        return np.uint16(sign | 0x7FC0)
    if a == 0x7F800000:
        return np.uint16(sign | 0x7F80)
    q = round_shift(a, 16, mode, sign != 0)
    if q >= 0x7F80 and not _overflows_to_inf(mode, sign != 0):
        q = 0x7F7F
    return np.uint16(sign | q)


@njit(cache=True, host=True)
def f32_bits_to_fp16(u, mode):
    """fp32 bits (uint32 as int64) to fp16 bits, bit-identical to numpy's ``astype(float16)`` (NaN included)."""
    u = np.int64(u) & 0xFFFFFFFF
    sign = (u >> 16) & 0x8000
    a = u & 0x7FFFFFFF
    neg = sign != 0
    if a > 0x7F800000:  # NaN keeps its top payload bits and stays a NaN, as numpy does
        q = 0x7C00 | ((a & 0x7FFFFF) >> 13)
        return np.uint16(sign | (q + 1 if q == 0x7C00 else q))
    if a == 0x7F800000:
        return np.uint16(sign | 0x7C00)
    e = a >> 23
    if e < 113:  # below the smallest normal fp16 (2**-14): subnormal result, in units of 2**-24
        if e == 0:
            m = a & 0x7FFFFF
            e = 1
        else:
            m = (a & 0x7FFFFF) | 0x800000
        q = round_shift(m, 126 - e, mode, neg)
    else:
        q = round_shift(a - (112 << 23), 13, mode, neg)
    if q >= 0x7C00:
        q = 0x7C00 if _overflows_to_inf(mode, neg) else 0x7BFF
    return np.uint16(sign | q)


@njit(cache=True)
def f32_bits_to_bf16_nearest(u, away):
    """:func:`f32_bits_to_bf16` for CAST_RINT / CAST_NONE (``away`` False) and CAST_ROUND (``away`` True), bit
    for bit, without branches and in 32-bit lanes (:func:`tilesim.jit.intrinsics.bf16_nearest_bits`), so that the
    loops calling it vectorise fully."""
    return bf16_nearest_bits(u, away)


@njit(cache=True)
def f32_bits_to_fp16_nearest(u, away):
    """:func:`f32_bits_to_fp16` for CAST_RINT / CAST_NONE (``away`` False) and CAST_ROUND (``away`` True), bit
    for bit, without branches (every case computed, then selected) and in 32-bit lanes
    (:func:`tilesim.jit.intrinsics.fp16_nearest_bits`)."""
    return fp16_nearest_bits(u, away)


@njit(cache=True, host=True)
def bf16_to_f32_bits(h):
    """bf16 bits to fp32 bits, exactly (:func:`tilesim.jit.intrinsics.bf16_widen_bits`)."""
    return bf16_widen_bits(h)


@njit(cache=True, host=True)
def fp16_to_f32_bits(h):
    """Exact, without branches, in 32-bit lanes (:func:`tilesim.jit.intrinsics.fp16_widen_bits`)."""
    return fp16_widen_bits(h)


@njit(cache=True, host=True)
def b16_to_f32_bits(h, kind):
    """16-bit float bits of the format ``kind`` (KIND_BF16 or KIND_FP16) to fp32 bits, exactly."""
    if kind == KIND_BF16:
        return bf16_to_f32_bits(h)
    return fp16_to_f32_bits(h)


@njit(cache=True, host=True)
def f32_bits_to_b16(u, kind, mode):
    """fp32 bits to the bits of the 16-bit format ``kind`` (KIND_BF16 or KIND_FP16), rounded by the
    RoundMode ``mode`` (CAST_NONE narrows as CAST_RINT)."""
    if mode == CAST_RINT or mode == CAST_NONE or mode == CAST_ROUND:
        if kind == KIND_BF16:
            return f32_bits_to_bf16_nearest(u, mode == CAST_ROUND)
        return f32_bits_to_fp16_nearest(u, mode == CAST_ROUND)
    if kind == KIND_BF16:
        return f32_bits_to_bf16(u, mode)
    return f32_bits_to_fp16(u, mode)


@njit(cache=True)
def narrow_into(src, tmp, m, kind, mode):
    """``tmp[k] = f32_bits_to_b16(src[k], kind, mode)`` for k < m (the arrays must not overlap), one loop per
    case so that each vectorises (indices from a ``range(m)`` are provably non-negative, so Numba adds no
    wraparound test that would stop it)."""
    if mode == CAST_RINT or mode == CAST_NONE:
        if kind == KIND_BF16:
            for k in range(m):
                tmp[k] = f32_bits_to_bf16_nearest(src[k], False)
        else:
            for k in range(m):
                tmp[k] = f32_bits_to_fp16_nearest(src[k], False)
    elif mode == CAST_ROUND:
        if kind == KIND_BF16:
            for k in range(m):
                tmp[k] = f32_bits_to_bf16_nearest(src[k], True)
        else:
            for k in range(m):
                tmp[k] = f32_bits_to_fp16_nearest(src[k], True)
    else:
        for k in range(m):
            tmp[k] = f32_bits_to_b16(src[k], kind, mode)


@njit(cache=True)
def widen_into(src, tmp, m, kind):
    """``tmp[k] = b16_to_f32_bits(src[k], kind)`` for k < m (the arrays must not overlap), one loop per kind."""
    if kind == KIND_BF16:
        for k in range(m):
            tmp[k] = bf16_to_f32_bits(src[k])
    else:
        for k in range(m):
            tmp[k] = fp16_to_f32_bits(src[k])


@njit(cache=True)
def _run(dst_addr, dst_size, src_addr, src_size, i, m):
    """The longest run of elements from ``i`` (at most ``m``, halving; 0 below 8) whose destination bytes do not
    overlap their source bytes: a loop over such a run gives the in-order loop's results and vectorises."""
    while m >= 8:
        d0 = dst_addr + dst_size * i
        s0 = src_addr + src_size * i
        if d0 + dst_size * m <= s0 or s0 + src_size * m <= d0:
            return m
        m //= 2
    return 0


@njit(cache=True)
def _narrow_blocks(src, dst, n, kind, away):
    """:func:`narrow_bits` rounding to nearest where no element's write reaches a later element's source (the
    in-place narrowing the kernels do, disjoint arrays): BLOCK_LANES lanes read, then written, at a time, which
    gives the in-order loop's results there and, unlike a loop over overlapping arrays, is vector code."""
    da, sa = np.int64(dst.ctypes.data), np.int64(src.ctypes.data)
    full = n // BLOCK_LANES * BLOCK_LANES
    # a constant ``away`` in each loop, so that LLVM drops the rounding it does not take (fp16: the formulas
    # where the hardware conversion serves)
    if kind == KIND_BF16 and away:
        for i in range(0, full, BLOCK_LANES):
            bf16_nearest_block(da + 2 * i, sa + 4 * i, True)
    elif kind == KIND_BF16:
        for i in range(0, full, BLOCK_LANES):
            bf16_nearest_block(da + 2 * i, sa + 4 * i, False)
    elif away:
        for i in range(0, full, BLOCK_LANES):
            fp16_nearest_block(da + 2 * i, sa + 4 * i, True)
    else:
        for i in range(0, full, BLOCK_LANES):
            fp16_nearest_block(da + 2 * i, sa + 4 * i, False)
    for k in range(full, n):
        dst[k] = f32_bits_to_b16(src[k], kind, CAST_ROUND if away else CAST_RINT)


@njit(cache=True)
def _widen_blocks(src, dst, n, kind):
    """:func:`widen_bits` where no element's write reaches a later element's source (the kernels' widening from
    the upper half of the destination, disjoint arrays), as :func:`_narrow_blocks`."""
    da, sa = np.int64(dst.ctypes.data), np.int64(src.ctypes.data)
    full = n // BLOCK_LANES * BLOCK_LANES
    if kind == KIND_BF16:
        for i in range(0, full, BLOCK_LANES):
            bf16_widen_block(da + 4 * i, sa + 2 * i)
    else:
        for i in range(0, full, BLOCK_LANES):
            fp16_widen_block(da + 4 * i, sa + 2 * i)
    for k in range(full, n):
        dst[k] = b16_to_f32_bits(src[k], kind)


@njit(cache=True, host=True)
def narrow_bits(src, dst, n, kind, mode):
    """``dst[i] = f32_bits_to_b16(src[i], kind, mode)`` for i < n, with the in-order loop's results whatever the
    overlap (the kernels narrow in place). Rounding to nearest where no write reaches a later source (in place at
    one address, disjoint): vector blocks (:func:`_narrow_blocks`). Otherwise in runs whose destination does not
    overlap their source: one run when the arrays are disjoint; runs that double from a few scalar elements."""
    da, sa = np.int64(dst.ctypes.data), np.int64(src.ctypes.data)
    if sa >= da or sa + 4 * n <= da:  # no element's write reaches a later element's source: blocks will do
        if mode == CAST_RINT or mode == CAST_NONE or mode == CAST_ROUND:
            _narrow_blocks(src, dst, n, kind, mode == CAST_ROUND)
            return
    i = 0
    while i < n:
        m = _run(da, 2, sa, 4, i, n - i)
        if m:
            narrow_into(src[i:i + m], dst[i:i + m], m, kind, mode)
        else:
            m = min(8, n - i)
            for k in range(i, i + m):
                dst[k] = f32_bits_to_b16(src[k], kind, mode)
        i += m


@njit(cache=True, host=True)
def widen_bits(src, dst, n, kind):
    """``dst[i] = b16_to_f32_bits(src[i], kind)`` for i < n, exactly: in vector blocks where no write reaches a
    later source (the kernels widen from the upper half of the destination's bytes; disjoint arrays), otherwise in
    runs as in :func:`narrow_bits`."""
    da, sa = np.int64(dst.ctypes.data), np.int64(src.ctypes.data)
    if sa >= da + 2 * n - 2 or sa + 2 * n <= da:  # no element's write reaches a later element's source
        _widen_blocks(src, dst, n, kind)
        return
    i = 0
    while i < n:
        m = _run(da, 4, sa, 2, i, n - i)
        if m:
            widen_into(src[i:i + m], dst[i:i + m], m, kind)
        else:
            m = min(8, n - i)
            for k in range(i, i + m):
                dst[k] = b16_to_f32_bits(src[k], kind)
        i += m


@njit(cache=True, parallel=True, host=True)
def _narrow(src_bits, dst, kind, mode):
    for i in prange(src_bits.size):
        dst[i] = f32_bits_to_b16(src_bits[i], kind, mode)


@njit(cache=True, parallel=True, host=True)
def _widen(src, dst_bits, kind):
    for i in prange(src.size):
        dst_bits[i] = b16_to_f32_bits(src[i], kind)


def _kind(name: str) -> int:
    return {"bfloat16": KIND_BF16, "float16": KIND_FP16}[name]


def narrow(x: np.ndarray, to: str, mode: int = CAST_RINT) -> np.ndarray:
    """fp32 array to ``to`` ("bfloat16" or "float16") bits (uint16), rounded by ``mode``: the compiled cast."""
    src = np.ascontiguousarray(x, dtype=np.float32).reshape(-1).view(np.uint32)
    out = np.empty(src.size, np.uint16)
    _narrow(src, out, _kind(to), mode)
    return out.reshape(np.shape(x))


def widen(bits: np.ndarray, frm: str) -> np.ndarray:
    """``frm`` bits (uint16) to fp32, exactly: the compiled cast."""
    src = np.ascontiguousarray(bits, dtype=np.uint16).reshape(-1)
    out = np.empty(src.size, np.uint32)
    _widen(src, out, _kind(frm))
    return out.view(np.float32).reshape(np.shape(bits))
