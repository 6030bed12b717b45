"""Reductions in the NPU's summation order.

``whole_reduce_sum`` is vcadd (WholeReduceSum): within one 256 B repeat the lanes are summed as an
adjacent-pair binary tree, masked lanes counting as 0. The norm kernels' helpers (norm_common/reduce_common.h)
build on it: ``reduce_sum_half_interval`` folds a row onto its head by halves before the last vcadd, and
``reduce_sum_multi_n`` accumulates 64-lane chunks of every row before one vcadd per row.
"""

from __future__ import annotations

import numpy as np

from .device import (
    VEC_BINARY,
    VEC_DUP,
    VEC_REDUCE,
    at,
    count_vector,
    f32,
    flow_lanes,
    ub_ok,
    ub_out,
    ub_rows_in,
    vec_in,
    vec_ok,
    vec_out,
)
from .jit import njit

LANES = 64  # fp32 lanes in one 256 B repeat
MAX_REPEAT = 255  # repeatTimes one vector instruction takes


@njit(cache=True)
def _tree8(v, o, count):
    """Adjacent-pair tree over lanes ``o .. o + 7`` of ``v``, lanes at or past ``count`` 0."""
    z = np.float32(0)
    a0 = v[o] if o < count else z
    a1 = v[o + 1] if o + 1 < count else z
    a2 = v[o + 2] if o + 2 < count else z
    a3 = v[o + 3] if o + 3 < count else z
    a4 = v[o + 4] if o + 4 < count else z
    a5 = v[o + 5] if o + 5 < count else z
    a6 = v[o + 6] if o + 6 < count else z
    a7 = v[o + 7] if o + 7 < count else z
    return ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7))


@njit(cache=True)
def _tree64(v, o, count):
    """Adjacent-pair tree over ``v[o:o + count]`` (count <= 64), the other lanes 0: the tree of the eight 8-lane
    trees, which is the same sum in the same order, in registers (no scratch array per call)."""
    v = v[o:]
    p0, p1, p2, p3 = _tree8(v, 0, count), _tree8(v, 8, count), _tree8(v, 16, count), _tree8(v, 24, count)
    p4, p5, p6, p7 = _tree8(v, 32, count), _tree8(v, 40, count), _tree8(v, 48, count), _tree8(v, 56, count)
    return ((p0 + p1) + (p2 + p3)) + ((p4 + p5) + (p6 + p7))


@njit(cache=True)
def whole_reduce_sum(core, t, count):
    """vcadd over ``count`` <= 64 fp32 lanes of ``t``; returns the sum."""
    if not vec_in(core, t, 4 * count):
        return np.float32(0)
    count_vector(core, VEC_REDUCE, 4 * count, t, t, t)
    return _tree64(f32(core, t, count), 0, count)


@njit(cache=True)
def _pairs(dst, src, n):
    """``dst[k] = src[2k] + src[2k + 1]`` for k < n: one level of adjacent-pair sums (a loop LLVM vectorises)."""
    for k in range(n):
        dst[k] = src[2 * k] + src[2 * k + 1]


@njit(cache=True)
def _trees_full(s, d, repeat):
    """``d[r]`` = the adjacent-pair tree of the 64 lanes of repeat ``r`` of ``s``, for every r at once: six
    levels of pairwise sums over the whole span (a pair never straddles two repeats), the same sums in the same
    order as :func:`_tree64`, level by level rather than repeat by repeat."""
    w = np.empty(48 * repeat, np.float32)  # one allocation: the two levels' buffers side by side
    a, b = w[:32 * repeat], w[32 * repeat:]
    _pairs(a, s, 32 * repeat)
    _pairs(b, a, 16 * repeat)
    _pairs(a, b, 8 * repeat)
    _pairs(b, a, 4 * repeat)
    _pairs(a, b, 2 * repeat)
    _pairs(d, a, repeat)


@njit(cache=True)
def whole_reduce_sums(core, dst, src, count, repeat):
    """One WholeReduceSum of ``repeat`` (<= 255) repeats, source repeats 256 B apart, results 4 B apart:
    ``dst[r]`` = vcadd over the first ``count`` <= 64 lanes of repeat ``r`` of ``src``. ``dst`` may lie in
    ``src`` at or before the repeat it takes (result r is written after repeat r is read, as the pipe does)."""
    span = 256 * (repeat - 1) + 4 * count
    if not (vec_ok(core, src, span) and ub_rows_in(core, src, repeat, 4 * count, 256)
            and ub_out(core, dst, 4 * repeat)):  # a reduction's result needs no 32 B alignment
        return
    s, d = f32(core, src, span // 4), f32(core, dst, repeat)
    if count == LANES and repeat > 1:
        _trees_full(s, d, repeat)
    else:
        for r in range(repeat):
            d[r] = _tree64(s, r * LANES, count)
    count_vector(core, VEC_REDUCE, 256 * repeat, dst, src, src)


@njit(cache=True)
def reduce_level(core, dst, src, count):
    """One level of a repeat-wise sum: ``dst[k]`` = vcadd over 64-lane repeat ``k`` of ``src[0:count]``, the
    last repeat over the ``count % 64`` lanes left, as WholeReduceSum instructions of at most 255 repeats and
    one for the tail (LayerNormGrad's ReduceSumImpl, ReduceSum's first steps); returns the partials' count."""
    full, tail = count // LANES, count % LANES
    for j in range(0, full, MAX_REPEAT):
        whole_reduce_sums(core, at(dst, 4 * j), at(src, 256 * j), LANES, min(MAX_REPEAT, full - j))
    if tail:
        whole_reduce_sums(core, at(dst, 4 * full), at(src, 256 * full), tail, 1)
    return full + (tail > 0)


@njit(cache=True)
def block_reduce_sum(core, dst, src, n_blocks):
    """BlockReduceSum: ``dst[b]`` = the sum of the 8 fp32 lanes of 32 B block ``b`` of ``src``, as an
    adjacent-pair tree (the order vcadd uses within a repeat)."""
    if not (vec_ok(core, src, 32 * n_blocks) and ub_ok(core, dst, 4 * n_blocks)):
        return
    flow_lanes(core, dst, src, n_blocks, 4, 32, 1)  # a block's sum is as defined as its eight lanes
    d, s = f32(core, dst, n_blocks), f32(core, src, 8 * n_blocks)
    for b in range(n_blocks):
        o = 8 * b
        d[b] = ((s[o] + s[o + 1]) + (s[o + 2] + s[o + 3])) + ((s[o + 4] + s[o + 5]) + (s[o + 6] + s[o + 7]))
    count_vector(core, VEC_REDUCE, 32 * n_blocks, dst, src, src)


@njit(cache=True)
def _fold(head, rest, n):
    """``head[i] += rest[i]``: two views, so that the loop indexes from 0 and vectorises."""
    for i in range(n):
        head[i] = head[i] + rest[i]


@njit(cache=True)
def reduce_sum_half_interval(core, t, count):
    """ReduceSumHalfInterval: sum of ``t[0:count]``, computed in place (``t`` is clobbered).

    Above 64 elements, the part past the largest power of two is added onto the head, then the body is halved
    onto itself down to 64 lanes, then one vcadd.
    """
    if count <= LANES:
        return whole_reduce_sum(core, t, count)
    if not vec_in(core, t, 4 * count):
        return np.float32(0)
    v = f32(core, t, count)
    body = 1
    while body * 2 <= count:
        body *= 2
    tail = count - body
    if tail > 0:
        _fold(v[:tail], v[body:body + tail], tail)
        count_vector(core, VEC_BINARY, 4 * tail, t, t, t)
    while body > LANES:
        body //= 2
        _fold(v[:body], v[body:2 * body], body)
        count_vector(core, VEC_BINARY, 4 * body, t, t, t)
    return whole_reduce_sum(core, t, LANES)


@njit(cache=True)
def reduce_sum_multi_n(core, dst, src, tmp, rows, cols, cols_align):
    """ReduceSumMultiN: ``dst[r] = sum(src[r, 0:cols])`` for rows of pitch ``cols_align``; ``tmp`` holds
    rows x 64 lane accumulators (chunks added in column order, the tail chunk on its first lanes only)."""
    if not (ub_ok(core, src, 4 * rows * cols_align) and ub_rows_in(core, src, rows, 4 * cols, 4 * cols_align)
            and vec_out(core, tmp, 4 * rows * LANES) and ub_out(core, dst, 4 * rows)):
        return
    acc = f32(core, tmp, rows * LANES)
    s = f32(core, src, rows * cols_align)
    acc[:] = np.float32(0)
    count_vector(core, VEC_DUP, 4 * rows * LANES, tmp, tmp, tmp)
    full = cols // LANES
    for k in range(full + 1):
        w = LANES if k < full else cols - full * LANES
        if w == 0:
            break
        for r in range(rows):
            a = r * LANES
            b = r * cols_align + k * LANES
            for i in range(w):
                acc[a + i] = acc[a + i] + s[b + i]
        count_vector(core, VEC_BINARY, 256 * rows, tmp, tmp, src)
    reduce_level(core, dst, tmp, LANES * rows)  # one vcadd per row's accumulators, 255 rows an instruction


@njit(cache=True)
def reduce_sum(core, dst, src, work, count):
    """ReduceSum (the tensor API with a work tensor): vcadd over each 64-lane repeat of ``src[0:count]`` into
    ``work``, then vcadd over those partials, level by level, until one value is left; it lands in ``dst[0]``
    and is returned. ``dst``, ``src`` and ``work`` may be one tensor (partial k only overwrites lanes an earlier
    repeat has consumed)."""
    if not (vec_in(core, src, 4 * count) and ub_out(core, dst, 4)):
        return np.float32(0)
    if count <= LANES:
        s = whole_reduce_sum(core, src, count)
    else:
        level = src
        while count > 1:
            count = reduce_level(core, work, level, count)
            level = work
        s = f32(core, work, 1)[0]
    f32(core, dst, 1)[0] = s
    return s
