"""The reductions and their broadcast partner, as on A2 (Atlas A2, dav_c220), sources in
``../shared/reference/ascendc-model.md`` §3.2 and §3.6 (asc-devkit: ``MV/归约计算/*.md``, the deprecated names'
pages in DKold, and ``impl/basic_api/dav_c220/kernel_operator_vec_reduce_impl.h``).

Per repeat (the level-0 walk of :mod:`tilesim.machine.vector`: 8 blocks of 32 B, a lane mask given as a count, a
``(mask[0], mask[1])`` pattern or :data:`~tilesim.machine.vector.MASK_PLACEHOLDER` for the mask register; in
counter mode the register's low word, the given mask's too, is a total count):

- ``whole_reduce_sum / _max / _min(dst, src, mask, repeat_times, dst_rep_stride, src_blk_stride,
  src_rep_stride[, order])`` (WholeReduceSum / Max / Min, now ReduceRepeat): one result per repeat. Max and Min
  write by :class:`ReduceOrder`: [value, index], [index, value], [value] or [index], the index the lane's
  position in its repeat as integer bits in a T slot (uint16 for half, uint32 for float), ONLY_INDEX always a
  uint32. dstRepStride counts results: sizeof(T) (Sum, ONLY_VALUE), 2·sizeof(T) (value and index), 4 B
  (ONLY_INDEX); dst is aligned to that unit.
- ``block_reduce_sum / _max / _min(dst, src, repeat_times, mask, dst_rep_stride, src_blk_stride, src_rep_stride)``
  (BlockReduce*, now ReduceDataBlock; repeat before mask, as the API has them): one result per 32 B block, eight
  per repeat; dstRepStride in 16 B (half) / 32 B (float), the dst alignment too. A block with no lane on is not
  written (A2; 310B and 950 fill it).
- ``pair_reduce_sum(dst, src, repeat_times, mask, dst_rep_stride, src_blk_stride, src_rep_stride)``
  (PairReduceSum, now ReducePairElem): ``dst[k] = src[2k] + src[2k+1]``; dstRepStride in 128 B; a pair with both
  lanes off is not written (A2).

Over a whole tensor, the result in ``dst[0]`` (Max / Min with ``cal_index``: the index in ``dst[1]``, integer bits
in a T slot, the element offset from ``src``, the first of equal values):

- ``reduce_sum(dst, src, work, count)``: on A2 one ``vcadd`` in counter mode with the accumulate flag: a tree in
  each repeat, then the repeats' sums added in order (方式一; ``work`` is not used). The call leaves the mask all
  ones in normal mode, as the count forms of :mod:`tilesim.machine.vector` do.
- ``reduce_sum(dst, src, work, mask, repeat_times, src_rep_stride)``: a tree in each repeat into ``work``, then a
  tree of the repeat sums (方式二): ``vcadd`` in counter mode over them, 64 (float) or 128 (half) at a time, and
  one more over those. Past 64² (float) or 128² (half) repeats that last step would have more sums than a repeat
  has lanes, which the API does not handle; tilesim goes on by groups of a repeat until one value is left.
- ``reduce_max / reduce_min(dst, src, work, count[, cal_index])`` and ``(..., mask, repeat_times,
  src_rep_stride[, cal_index])``: the extreme, the first of equal values (in repeat order, then lane order; the
  index is ``repeat * src_rep_stride * 32 / sizeof(T) + lane``, as the API reconstructs it). ``repeat_times`` of
  the Reduce* level-0 form may exceed 255.

``brcb(dst, src, repeat_times, BrcbRepeatParams(dst_blk_stride, dst_rep_stride))`` (Brcb, ``MV/数据填充/Brcb.md``;
here rather than in a module of its own, as the reductions' partner in softmax): repeat i reads ``src[8i..8i+7]``
and fills 32 B block j at ``(i * dst_rep_stride + j * dst_blk_stride) * 32`` with ``src[8i+j]`` (dst_blk_stride 0
counts as 1); b16 and b32 types. It takes no mask and resets the mask register to all ones (``ResetMask``).

Zero repeats, count or mask is no instruction (A2). The reductions take half and float, Brcb int16, uint16, half,
bfloat16, int32, uint32, float; another type stops the kernel when it runs, and so do tensors of different types
(each API has one T for dst, src and the sharedTmpBuffer).

Arithmetic (the ``vcadd`` trees: adjacent pairs, then pairs of those, ``ReduceDataBlock.md`` 关键特性说明): half
rounds every addition to half, as the saturation example of ``ReduceDataBlock.md`` shows (60000 + 60000 overflows
at the first level), and the count form's running sum too; float adds in float. Half does not saturate (the
non-saturating mode ``ReduceDataBlock.md`` gives as the half default): an overflow is ±inf.

Choices where the documentation is silent: a masked-off lane enters a sum as +0 (so the sum of lanes that are all
-0 is +0 unless every lane of the tree is on); a masked-off lane takes no part in a Max / Min; Max and Min
propagate NaN (the first NaN wins, its bits unchanged); -0 and +0 are equal (the first one wins); the count form's
running sum starts from the first repeat's sum (not from +0); an index past 65535 keeps its low 16 bits in a half
slot (``ReduceMax.md``: half indices only up to 65535); ReduceSum's result is written by PIPE_V (on the NPU the
scalar unit stores it after a V_S sync inside the API, a detail the hazard check does not need). A level-0
call's mask goes through the mask register as :mod:`tilesim.machine.vector`'s level-0 forms' does (it stays there;
in counter mode its low word is the total count).

Checked mode: repeat_times in [0, 255] (Whole / Block / Pair / Brcb; the Reduce* level-0 form only not negative);
src and ``work`` 32 B aligned, dst at its instruction's alignment (a misaligned operand is reported with its offset
past a 32 B boundary); every source lane the instruction uses written before (a reduction uses its source's
values: masked-off lanes and the gaps a stride leaves are not read); ``work`` (but the Sum count form's, unused)
at least the size ``ReduceSum.md`` / ``ReduceMax.md`` give (in elements, with per = 32 / sizeof(T) and R =
repeat_times, or for the count forms max(count // elements-per-repeat, 1): Sum ceil(R / per)·per; Max / Min
ceil(2R / per)·per, with the index the sum of the rounds' aligned outputs); dst's results and the scribbled
``work`` count as written, Brcb's blocks take their source element's state; the overlap rule
(:mod:`tilesim.machine.overlap`): a repeat's results may be written over its own source (in place) but not over a
later repeat's, likewise the Reduce* first pass into ``work``; Reduce*'s dst, written last, may overlap src and
``work`` (``ReduceSum.md``); Brcb's src and dst apart (``Brcb.md``). Counters: VEC_REDUCE, the 256 B
repeats of the source (the count forms: its bytes); Brcb VEC_DUP, the 256 B repeats of dst. Each call is one
instruction to the pipe-hazard check (``work`` written).
"""

from __future__ import annotations

from collections import namedtuple
from enum import IntEnum

import numpy as np
from numba import carray
from numba.extending import overload

from tilesim.core.pipes import LANE_VECTOR
from tilesim.core.records import (
    ERR_API_TMP,
    ERR_VEC_ALIGN,
    VEC_DUP,
    VEC_REDUCE,
    at,
    checked_only,
    count_vector,
    flow_lanes,
    plan_of,
    report,
    rows_span,
    ub_ok,
    ub_rows_in,
    ub_rows_out,
    vec_in,
    vec_ok,
    vec_out,
)
from tilesim.core.vec_kinds import vec_kind
from tilesim.jit import INLINE_OPTIONS, OVERLOAD_OPTIONS, njit
from tilesim.jit.intrinsics import address_as_pointer, pair_tree_sum_f32
from tilesim.machine.dtypes import ALL
from tilesim.machine.hazard import hz_access, hz_instruction, hz_level0, op_code
from tilesim.machine.overlap import SAME, SRC, WORK, blocks_apart, results_ok
from tilesim.machine.pipe import FAULT_DTYPE, fault
from tilesim.machine.tensor import X_MASK_HI, X_MASK_LO, core_of, ctx_words, plan_tensor
from tilesim.machine.vector import (
    LOOP_OPTIONS,
    MarkerType,
    lane_on,
    last_lane,
    level0_mask,
    load,
    marker,
    mask_span,
    mixed_fault,
    mixed_types,
    op_name,
    params_ok,
    reset_mask,
    span,
    store,
)


class ReduceOrder(IntEnum):
    """ReduceOrder: where WholeReduceMax / Min put the value and the index of each repeat's result."""

    ORDER_VALUE_INDEX = 0
    ORDER_INDEX_VALUE = 1
    ORDER_ONLY_VALUE = 2
    ORDER_ONLY_INDEX = 3


_VALUE_INDEX, _INDEX_VALUE, _ONLY_VALUE, _ONLY_INDEX = (int(o) for o in ReduceOrder)

BrcbRepeatParams = namedtuple("BrcbRepeatParams", ["dst_blk_stride", "dst_rep_stride"], defaults=(1, 8))
BrcbRepeatParams.__doc__ = """BrcbRepeatParams(dstBlkStride, dstRepStride): Brcb's dst strides in 32 B blocks
(the struct's other fields are reserved)."""

_F = ("half", "float")
_BRCB = ("int16_t", "uint16_t", "half", "bfloat16_t", "int32_t", "uint32_t", "float")
_ALL_ON = 0xFFFFFFFFFFFFFFFF


def _fault_code(name: str, dt: object) -> int:
    """FAULT_DTYPE's detail: the instruction's hazard code * 100 + the element type's index."""
    return op_code(name) * 100 + list(ALL).index(dt)


def _family(name: str) -> tuple[str, str]:
    """An instruction's family (Whole, Block, Pair, Reduce) and kind (Sum, Max, Min)."""
    return name[:-3].replace("Reduce", "") or "Reduce", name[-3:]


# ---------------------------------------------------------------------------------------------------------------
# Checked mode


@checked_only(True)
def _src_in(core, t, lo, hi, repeat, blk, rep, tail, sz):
    """Checked mode: every byte of the source lanes a level-0 walk uses was written (the lanes on, in runs of
    adjacent bytes; the gaps between strided blocks and the lanes off are not read)."""
    if not core.checks:
        return True
    epb = 32 // sz
    start = end = np.int64(-1)
    for r in range(repeat):
        last = tail if (tail > 0 and r == repeat - 1) else 8 * epb
        for b in range(8):
            base = t.addr + (r * rep + b * blk) * 32
            for e in range(epb):
                lane = b * epb + e
                if lane < last and lane_on(lo, hi, lane):
                    a = base + e * sz
                    if a != end:
                        if end > start and not ub_rows_in(core, at(t, start - t.addr), 1, end - start, 0):
                            return False
                        start = a
                    end = a + sz
    return end <= start or ub_rows_in(core, at(t, start - t.addr), 1, end - start, 0)


@checked_only(True)
def _aligned(core, t, nbytes, align):
    """Checked mode: a reduction's dst at its instruction's alignment (``align`` bytes)."""
    if core.checks and t.addr % align:
        report(core, ERR_VEC_ALIGN, t.buf, t.addr - plan_of(core)[t.buf, 0], nbytes, t.addr % 32)
        return False
    return True


@njit(cache=True, inline="always")
def _dst_ok(core, t, nbytes, align, op):
    """A reduction's dst (instruction ``op``): in checked mode at its instruction's alignment (``align`` bytes);
    inside its buffer (:func:`tilesim.core.records.ub_ok`)."""
    return _aligned(core, t, nbytes, align) and ub_ok(core, t, nbytes, op)


@checked_only(True)
def _holds(core, t, have, need):
    """Checked mode: the sharedTmpBuffer (``have`` bytes from its start) holds the ``need`` bytes the API's
    size rule asks for."""
    if core.checks and have < need:
        report(core, ERR_API_TMP, t.buf, t.addr - plan_of(core)[t.buf, 0], have, need)
        return False
    return True


@njit(cache=True, inline="always")
def _work_ok(core, t, have, need, op):
    """The sharedTmpBuffer of instruction ``op``: in checked mode it holds the ``need`` bytes the API asks for
    (:func:`_holds`), 32 B aligned; the instruction scribbles on them, so they count as written
    (:func:`tilesim.core.records.vec_out`)."""
    return _holds(core, t, have, need) and vec_out(core, t, need, op)


@checked_only(None)
def _wrote(core, t, off, nbytes):
    """Checked mode: a result of ``nbytes`` at ``off`` bytes into ``t`` is written (inside the span its
    instruction checked)."""
    if core.checks:
        ub_rows_out(core, at(t, off), 1, nbytes, nbytes)


@njit(cache=True)
def _tmp_elems(kind, first, index, sz):
    """The sharedTmpBuffer's minimum in elements (``ReduceSum.md``, ``ReduceMax.md`` 关键特性说明): ``kind`` 0
    Sum, else Max / Min; ``first`` the first round's repeats; ``index``: Max / Min with calIndex."""
    per_blk, per_rep = 32 // sz, 256 // sz
    if kind == 0:
        return (first + per_blk - 1) // per_blk * per_blk
    out1 = 2 * first
    start2 = (out1 + per_blk - 1) // per_blk * per_blk
    if not index:
        return start2
    out2 = (out1 + per_rep - 1) // per_rep * 2
    end2 = (out2 + per_blk - 1) // per_blk * per_blk
    if out2 <= 2:
        return start2 + end2
    out3 = (out2 + per_rep - 1) // per_rep * 2
    return start2 + end2 + (out3 + per_blk - 1) // per_blk * per_blk


# ---------------------------------------------------------------------------------------------------------------
# The walk


def _dst_step(op, dt, order):  # type: ignore[no-untyped-def]
    """Bytes of dst one dstRepStride unit stands for (Whole Max / Min: by ``order``)."""


@overload(_dst_step, jit_options=OVERLOAD_OPTIONS, inline="always")
def _dst_step_impl(op, dt, order):  # type: ignore[no-untyped-def]
    family, kind = _family(op_name(op))
    sz = dt.dt.size
    if family == "Pair":
        return lambda op, dt, order: np.int64(128)
    if family == "Block":
        return lambda op, dt, order: np.int64(8 * sz)
    if kind == "Sum" or family == "Reduce":
        return lambda op, dt, order: np.int64(sz)
    return lambda op, dt, order: np.int64(4 if order == _ONLY_INDEX else sz if order == _ONLY_VALUE else 2 * sz)


@njit(cache=True, inline="always")
def _better(x, best, have, is_max):
    """Whether ``x`` replaces ``best`` (``have``: there is one): NaN wins, then the larger (smaller); a tie keeps
    the earlier one."""
    if not have:
        return True
    if best != best:
        return False
    if x != x:
        return True
    return x > best if is_max else x < best


_ONES = np.uint64(0xFFFFFFFFFFFFFFFF)


# _lane, _pair and _block_sum are inlined by LLVM (forceinline), not in Numba's IR (inline="always"), whose
# translation of the 8 block sums' 64 lanes at each call would make _f32_sums' compile many times longer; left to
# LLVM's size threshold, each would be a call once a kernel's function grew past it.
@njit(cache=True, forceinline=True)
def _lane(x, e, bits, first):
    """Lane ``first + e`` of a repeat (``x`` its block): its value if on in ``bits``, else +0."""
    return x[e] if (bits >> np.uint64(first + e)) & np.uint64(1) else np.float32(0)


@njit(cache=True, forceinline=True)
def _pair(x, e, bits, first):
    return _lane(x, e, bits, first) + _lane(x, e + 1, bits, first)


@njit(cache=True, forceinline=True)
def _block_sum(x, bits, first):
    """The 8 lanes of a 32 B block summed as the hardware's adjacent pairs, level by level."""
    return (_pair(x, 0, bits, first) + _pair(x, 2, bits, first)) + (_pair(x, 4, bits, first)
                                                                    + _pair(x, 6, bits, first))


@njit(cache=True, forceinline=True)
def _f32_sums(src, blk, dst, group, bits, repeat, src_rep, dst_rep):
    """``repeat`` repeats of a float sum from address ``src`` (blocks ``blk`` bytes apart, repeats ``src_rep``)
    into ``dst`` (repeats ``dst_rep`` apart), the lanes on the bits of ``bits`` (the others add as +0): each
    repeat's 8 block sums (BlockReduceSum, ``group`` 8), 32 pair sums (PairReduceSum, 2) or sum (WholeReduceSum,
    64), in the pair tree's order (a Whole sum's upper levels pair the block sums). A group with no lane on is
    not written. A Whole sum is :func:`tilesim.jit.intrinsics.pair_tree_sum_f32` (the tree as vector shuffles and
    adds); the Block and Pair sums written out."""
    for r in range(repeat):
        _f32_repeat(src + r * src_rep, blk, dst + r * dst_rep, group, bits)


@njit(cache=True, inline="always")
def _f32_repeat(src, blk, dst, group, bits):
    out = carray(address_as_pointer(dst, np.float32), 32)
    if group == 64:
        if bits:
            out[0] = pair_tree_sum_f32(src, blk, bits)
        return
    if group == 2:
        for b in range(8):
            x = carray(address_as_pointer(src + b * blk, np.float32), 8)
            for i in range(4):
                if (bits >> np.uint64(8 * b + 2 * i)) & np.uint64(3):
                    out[4 * b + i] = _pair(x, 2 * i, bits, 8 * b)
        return
    s0 = _block_sum(carray(address_as_pointer(src, np.float32), 8), bits, 0)
    s1 = _block_sum(carray(address_as_pointer(src + blk, np.float32), 8), bits, 8)
    s2 = _block_sum(carray(address_as_pointer(src + 2 * blk, np.float32), 8), bits, 16)
    s3 = _block_sum(carray(address_as_pointer(src + 3 * blk, np.float32), 8), bits, 24)
    s4 = _block_sum(carray(address_as_pointer(src + 4 * blk, np.float32), 8), bits, 32)
    s5 = _block_sum(carray(address_as_pointer(src + 5 * blk, np.float32), 8), bits, 40)
    s6 = _block_sum(carray(address_as_pointer(src + 6 * blk, np.float32), 8), bits, 48)
    s7 = _block_sum(carray(address_as_pointer(src + 7 * blk, np.float32), 8), bits, 56)
    sums = (s0, s1, s2, s3, s4, s5, s6, s7)
    for b in range(8):
        if (bits >> np.uint64(8 * b)) & np.uint64(0xFF):
            out[b] = sums[b]


def _walk(op, dst, src, lo, hi, repeat, src_blk, src_rep, tail, dst_rep, order):  # type: ignore[no-untyped-def]
    """The hardware reductions' walk: ``repeat`` repeats of ``src`` (block and repeat strides in 32 B blocks,
    lanes by the mask (lo, hi), the last repeat ``tail`` lanes long when > 0), each cut into groups (Whole and
    Reduce: the repeat, Block: a block, Pair: two lanes) reduced to one result. Whole, Block and Pair write each
    group's result to dst (``dst_rep`` units of :func:`_dst_step` apart by repeat); Reduce folds them all (a Sum
    in order, a Max / Min keeping the first extreme). Returns the fold: (result as stored, its repeat, its lane,
    whether any lane was on)."""


@overload(_walk, jit_options={**LOOP_OPTIONS, "forceinline": True})
def _walk_impl(op, dst, src, lo, hi, repeat, src_blk, src_rep, tail, dst_rep, order):  # type: ignore[no-untyped-def]
    # inlined into the instruction, as the float sums' loops are short enough for a call to be a good part of them
    family, kind = _family(op_name(op))
    dt = src.dtype.dt
    lanes = 256 // dt.size
    group = 2 if family == "Pair" else lanes // 8 if family == "Block" else lanes
    f32 = dt.name == "float"

    def sums(op, dst, src, lo, hi, repeat, src_blk, src_rep, tail, dst_rep, order):  # type: ignore[no-untyped-def]
        # Whole, Block and Pair sums of floats, written out (b32 lanes take mask[0] alone)
        core = core_of(src)
        step = _dst_step(op, dt, order)
        whole = repeat - 1 if tail > 0 else repeat  # then the last repeat has its first ``tail`` lanes
        cut = lo & ((np.uint64(1) << np.uint64(tail)) - np.uint64(1)) if tail > 0 else lo
        _f32_sums(core.base + src.addr, src_blk * 32, core.base + dst.addr, group, lo, whole, src_rep * 32,
                  dst_rep * step)
        if tail > 0:
            _f32_sums(core.base + src.addr + whole * src_rep * 32, src_blk * 32,
                      core.base + dst.addr + whole * dst_rep * step, group, cut, 1, 0, 0)
        if core.checks:
            pd = plan_tensor(dst)
            for r in range(repeat):
                bits = cut if r == whole else lo
                for g in range(lanes // group):
                    if (bits >> np.uint64(g * group)) & (_ONES >> np.uint64(64 - group)):
                        _wrote(core, pd, r * dst_rep * step + g * 4, 4)
        return store(dt, np.float32(0)), np.int64(0), np.int64(0), False

    def folded_sum(op, dst, src, lo, hi, repeat, src_blk, src_rep, tail, dst_rep, order):  # type: ignore[no-untyped-def]
        # ReduceSum of floats: the repeats' trees added in order (one with no lane on adds nothing)
        core = core_of(src)
        whole = repeat - 1 if tail > 0 else repeat
        cut = lo & ((np.uint64(1) << np.uint64(tail)) - np.uint64(1)) if tail > 0 else lo
        acc = np.float32(0)
        found = False
        for r in range(repeat):
            bits = cut if r == whole else lo
            if bits:
                x = pair_tree_sum_f32(core.base + src.addr + r * src_rep * 32, src_blk * 32, bits)
                acc = x if not found else acc + x
                found = True
        return store(dt, acc), np.int64(0), np.int64(0), found

    if f32 and kind == "Sum":
        return folded_sum if family == "Reduce" else sums
    return lambda op, dst, src, lo, hi, repeat, src_blk, src_rep, tail, dst_rep, order: _any_walk(
        op, dst, src, lo, hi, repeat, src_blk, src_rep, tail, dst_rep, order)


def _any_walk(op, dst, src, lo, hi, repeat, src_blk, src_rep, tail, dst_rep, order):  # type: ignore[no-untyped-def]
    """:func:`_walk` of any type and kind, lane by lane."""


@overload(_any_walk, jit_options=LOOP_OPTIONS)
def _any_walk_impl(op, dst, src, lo, hi, repeat, src_blk, src_rep, tail, dst_rep, order):  # type: ignore[no-untyped-def]
    family, kind = _family(op_name(op))
    dt = src.dtype.dt
    st, sz = dt.storage, dt.size
    epb = 32 // sz
    lanes = 8 * epb
    group = 2 if family == "Pair" else epb if family == "Block" else lanes
    is_sum, is_max, fold = kind == "Sum", kind == "Max", family == "Reduce"
    whole_mm = family == "Whole" and not is_sum
    idx_t = np.uint16 if sz == 2 else np.uint32

    def walk(op, dst, src, lo, hi, repeat, src_blk, src_rep, tail, dst_rep, order):  # type: ignore[no-untyped-def]
        core = core_of(src)
        pd = plan_tensor(dst)
        step = _dst_step(op, dt, order)
        v = np.empty(lanes, np.float32)
        raw = np.empty(lanes, st)
        on = np.zeros(lanes, np.bool_)
        acc = best = np.float32(0)
        best_raw = raw[0]
        best_r = best_lane = np.int64(0)
        found = False
        for r in range(repeat):
            last = tail if (tail > 0 and r == repeat - 1) else lanes
            for b in range(8):
                x = carray(address_as_pointer(core.base + src.addr + (r * src_rep + b * src_blk) * 32, st), epb)
                for e in range(epb):
                    lane = b * epb + e
                    a = lane < last and lane_on(lo, hi, lane)
                    on[lane] = a
                    v[lane] = np.float32(0)
                    if a:
                        raw[lane] = x[e]
                        v[lane] = load(dt, x[e])
            for g in range(lanes // group):
                o = g * group
                any_on = False
                for k in range(o, o + group):
                    any_on = any_on or on[k]
                if not any_on:
                    continue  # nothing written for it (A2)
                off = r * dst_rep * step + g * sz
                if is_sum:
                    w = group
                    while w > 1:  # adjacent pairs, level by level, each sum in T
                        w //= 2
                        for i in range(w):
                            v[o + i] = load(dt, store(dt, v[o + 2 * i] + v[o + 2 * i + 1]))
                    if fold:
                        acc = v[o] if not found else load(dt, store(dt, acc + v[o]))
                        found = True
                    else:
                        carray(address_as_pointer(core.base + dst.addr + off, st), 1)[0] = store(dt, v[o])
                        _wrote(core, pd, off, sz)
                    continue
                k_best = o
                have = False
                for k in range(o, o + group):
                    if on[k] and _better(v[k], v[k_best], have, is_max):
                        k_best = k
                        have = True
                if fold:
                    if _better(v[k_best], best, found, is_max):
                        best, best_raw, best_r, best_lane = v[k_best], raw[k_best], r, k_best
                        found = True
                elif whole_mm:
                    at_ = core.base + dst.addr + r * dst_rep * step
                    if order == _ONLY_INDEX:
                        carray(address_as_pointer(at_, np.uint32), 1)[0] = np.uint32(k_best)
                    elif order == _ONLY_VALUE:
                        carray(address_as_pointer(at_, st), 1)[0] = raw[k_best]
                    else:
                        vi = order != _INDEX_VALUE
                        carray(address_as_pointer(at_ + (0 if vi else sz), st), 1)[0] = raw[k_best]
                        carray(address_as_pointer(at_ + (sz if vi else 0), idx_t), 1)[0] = idx_t(k_best)
                    _wrote(core, pd, r * dst_rep * step, step)
                else:
                    carray(address_as_pointer(core.base + dst.addr + off, st), 1)[0] = raw[k_best]
                    _wrote(core, pd, off, sz)
        if is_sum:
            return store(dt, acc), np.int64(0), np.int64(0), found
        return best_raw, best_r, best_lane, found
    return walk


def _result(dst, value, index, with_index):  # type: ignore[no-untyped-def]
    """ReduceSum / Max / Min's result: ``dst[0] = value`` (as stored); ``with_index``: ``dst[1]`` = the index's
    integer bits (uint16 in a half slot, uint32 in a float one)."""


@overload(_result, jit_options=OVERLOAD_OPTIONS)
def _result_impl(dst, value, index, with_index):  # type: ignore[no-untyped-def]
    st, sz = dst.dtype.dt.storage, dst.dtype.dt.size
    idx_t = np.uint16 if sz == 2 else np.uint32

    def put(dst, value, index, with_index):  # type: ignore[no-untyped-def]
        core = core_of(dst)
        carray(address_as_pointer(core.base + dst.addr, st), 1)[0] = value
        _wrote(core, plan_tensor(dst), 0, sz)
        if with_index:
            carray(address_as_pointer(core.base + dst.addr + sz, idx_t), 1)[0] = idx_t(index)
            _wrote(core, plan_tensor(dst), sz, sz)
    return put


def _cal_index(rest):  # type: ignore[no-untyped-def]
    """The optional calIndex argument (the arguments after the form's own): False when absent."""


@overload(_cal_index, jit_options=OVERLOAD_OPTIONS, inline="always")
def _cal_index_impl(rest):  # type: ignore[no-untyped-def]
    if len(rest) == 0:
        return lambda rest: False
    return lambda rest: bool(rest[0])


# ---------------------------------------------------------------------------------------------------------------
# The families


def repeat_op(op, dst, src, mask, repeat, dst_rep, src_blk, src_rep, order):  # type: ignore[no-untyped-def]
    """One WholeReduce*, BlockReduce* or PairReduceSum instruction (``order``: Whole Max / Min's ReduceOrder)."""


@overload(repeat_op, jit_options=INLINE_OPTIONS)
def _repeat_op(op, dst, src, mask, repeat, dst_rep, src_blk, src_rep, order):  # type: ignore[no-untyped-def]
    name = op_name(op)
    family, kind = _family(name)
    dt = src.dtype.dt
    mixed = mixed_types(name, ("dst", dst), ("src", src))
    if mixed is not None:
        return lambda op, dst, src, mask, repeat, dst_rep, src_blk, src_rep, order: mixed_fault(dst.ctx, mixed)
    if dt.name not in _F:  # a run-time stop, so that a branch not taken may hold it
        code = _fault_code(name, dt)
        return lambda op, dst, src, mask, repeat, dst_rep, src_blk, src_rep, order: fault(
            ctx_words(dst.ctx), FAULT_DTYPE, np.int64(-1), code)
    sz = dt.size
    lanes = 256 // sz
    group = 2 if family == "Pair" else 32 // sz if family == "Block" else lanes
    whole, pair = family == "Whole", family == "Pair"
    code = op_code(name)
    vkind = vec_kind(name, sz)

    def level0(op, dst, src, mask, repeat, dst_rep, src_blk, src_rep, order):  # type: ignore[no-untyped-def]
        core = core_of(src)
        ps, pd = plan_tensor(src), plan_tensor(dst)
        if not params_ok(core, pd, np.int64(repeat), 1):
            return
        lo, hi, n, tail = level0_mask(src.ctx, mask, repeat, lanes)
        if n <= 0 or (lo == 0 and (hi == 0 or lanes <= 64)):
            return  # a NOP on A2: dst is not written (b32 lanes take only mask[0])
        top = last_lane(lo, hi, np.int64(0), lanes)  # the span of dst, for checked mode and the hazard check
        o = np.int64(order)
        ds, sb, sr = np.int64(dst_rep), np.int64(src_blk), np.int64(src_rep)
        step = _dst_step(op, dt, o)
        src_bytes = mask_span(n, sb, sr, last_lane(lo, hi, tail, lanes), tail, sz, lanes)
        out = (top // group) * sz + (step if whole else sz)  # a repeat's results, from its first
        dst_bytes = rows_span(n, out, ds * step)  # a result row a repeat
        if not (vec_ok(core, ps, src_bytes, code) and _src_in(core, ps, lo, hi, n, sb, sr, tail, sz)
                and _dst_ok(core, pd, dst_bytes, 32 if pair else step, code)
                and results_ok(core, code, SRC, SAME, pd, ds * step, out, ps, sz, sb, sr, lo, hi, n, tail, lanes)):
            return
        hz_level0(core, code, pd, 1, 8, dst_bytes, ps, sb, sr, src_bytes, ps, 1, 8, 0, n)
        _walk(op, dst, src, lo, hi, n, sb, sr, tail, ds, o)
        count_vector(core, VEC_REDUCE, vkind, n * 256, pd, ps, ps)
    return level0


_WHOLE_SUM = marker("WholeReduceSum")


def reduce_op(op, dst, src, work, args):  # type: ignore[no-untyped-def]
    """One ReduceSum / ReduceMax / ReduceMin: ``args`` is (count[, cal_index]) or (mask, repeat_times,
    src_rep_stride[, cal_index])."""


@overload(reduce_op, jit_options=INLINE_OPTIONS)
def _reduce_op(op, dst, src, work, args):  # type: ignore[no-untyped-def]
    name = op_name(op)
    kind = _family(name)[1]
    dt = src.dtype.dt
    mixed = mixed_types(name, ("dst", dst), ("src", src), ("sharedTmpBuffer", work))
    if mixed is not None:
        return lambda op, dst, src, work, args: mixed_fault(dst.ctx, mixed)
    if dt.name not in _F:
        code = _fault_code(name, dt)
        return lambda op, dst, src, work, args: fault(ctx_words(dst.ctx), FAULT_DTYPE, np.int64(-1), code)
    st, sz = dt.storage, dt.size
    per, epb = 256 // sz, 32 // sz
    is_sum = kind == "Sum"
    code = op_code(name)
    vkind = vec_kind(name, sz)
    if len(args) <= (1 if is_sum else 2):
        def count_form(op, dst, src, work, args):  # type: ignore[no-untyped-def]
            n = np.int64(args[0])
            with_index = _cal_index(args[1:])
            if is_sum:  # ReduceSumImpl's counter mode ends in normal mode with the mask all ones
                reset_mask(ctx_words(src.ctx))
            if n <= 0:
                return
            core = core_of(src)
            ps, pd = plan_tensor(src), plan_tensor(dst)
            out = 2 * sz if with_index else sz
            if not (vec_in(core, ps, n * sz, code) and _dst_ok(core, pd, out, out, code)):
                return
            if not is_sum:  # Sum's count form leaves the sharedTmpBuffer alone on A2
                need = _tmp_elems(1, max(n // per, 1), with_index, sz) * sz
                reps = (n + per - 1) // per  # the first pass: each repeat's [value, index] into the sharedTmpBuffer
                if not (_work_ok(core, plan_tensor(work), work.nbytes, need, code)
                        and results_ok(core, code, WORK, SAME, plan_tensor(work), 2 * sz, 2 * sz, ps, sz, np.int64(1),
                                       np.int64(8), np.uint64(_ALL_ON), np.uint64(_ALL_ON), reps,
                                       n - (reps - 1) * per if n % per else np.int64(0), per)):
                    return
                hz_access(core, LANE_VECTOR, code, work.buf, work.addr, need, True, work.gen >= 0)
            hz_instruction(core, LANE_VECTOR, code, pd, out, ps, n * sz, ps, 0)
            value, r, lane, _ = _walk(op, dst, src, np.uint64(_ALL_ON), np.uint64(_ALL_ON), (n + per - 1) // per,
                                      np.int64(1), np.int64(8), n % per, np.int64(0), np.int64(0))
            _result(dst, value, r * per + lane, with_index)
            count_vector(core, VEC_REDUCE, vkind, n * sz, pd, ps, ps)
        return count_form
    if len(args) not in (3, 4) or (is_sum and len(args) == 4) or isinstance(args[0], MarkerType):
        return None

    def level0(op, dst, src, work, args):  # type: ignore[no-untyped-def]
        with_index = _cal_index(args[3:])
        core = core_of(src)
        ps, pd, pw = plan_tensor(src), plan_tensor(dst), plan_tensor(work)
        lo, hi, n, _ = level0_mask(src.ctx, args[0], args[1], per)
        sr = np.int64(args[2])
        if not params_ok(core, pd, min(n, 0), 1):  # no 255 limit here: only a negative count is wrong
            return
        if n <= 0 or (lo == 0 and (hi == 0 or per <= 64)):
            return
        out = 2 * sz if with_index else sz
        src_bytes = mask_span(n, 1, sr, last_lane(lo, hi, np.int64(0), per), np.int64(0), sz, per)
        need = _tmp_elems(0 if is_sum else 1, n, with_index, sz) * sz
        first = sz if is_sum else 2 * sz  # the first pass's result of each repeat, into the sharedTmpBuffer
        if not (vec_ok(core, ps, src_bytes, code) and _src_in(core, ps, lo, hi, n, 1, sr, 0, sz)
                and _dst_ok(core, pd, out, out, code) and _work_ok(core, pw, work.nbytes, need, code)
                and results_ok(core, code, WORK, SAME, pw, first, first, ps, sz, np.int64(1), sr, lo, hi, n,
                               np.int64(0), per)):
            return
        hz_access(core, LANE_VECTOR, code, work.buf, work.addr, need, True, work.gen >= 0)
        hz_instruction(core, LANE_VECTOR, code, pd, out, ps, src_bytes, ps, 0)
        if is_sum:  # each repeat's sum into work, then trees of per of them until one is left (work[0])
            _walk(_WHOLE_SUM, work, src, lo, hi, n, np.int64(1), sr, np.int64(0), np.int64(1), np.int64(0))
            m = n
            while m > 1:
                g = (m + per - 1) // per
                _walk(_WHOLE_SUM, work, work, np.uint64(_ALL_ON), np.uint64(_ALL_ON), g, np.int64(1),
                      np.int64(8), m % per, np.int64(1), np.int64(0))
                m = g
            _result(dst, carray(address_as_pointer(core.base + work.addr, st), 1)[0], 0, False)
        else:
            value, r, lane, _ = _walk(op, dst, src, lo, hi, n, np.int64(1), sr, np.int64(0), np.int64(0),
                                      np.int64(0))
            _result(dst, value, r * sr * epb + lane, with_index)
        count_vector(core, VEC_REDUCE, vkind, n * 256, pd, ps, ps)
    return level0


def brcb_op(dst, src, repeat, params):  # type: ignore[no-untyped-def]
    """One Brcb instruction."""


@overload(brcb_op, jit_options=INLINE_OPTIONS)
def _brcb_op(dst, src, repeat, params):  # type: ignore[no-untyped-def]
    dt = dst.dtype.dt
    mixed = mixed_types("Brcb", ("dst", dst), ("src", src))
    if mixed is not None:
        return lambda dst, src, repeat, params: mixed_fault(dst.ctx, mixed)
    if dt.name not in _BRCB:
        code = _fault_code("Brcb", dt)
        return lambda dst, src, repeat, params: fault(ctx_words(dst.ctx), FAULT_DTYPE, np.int64(-1), code)
    st, sz = dt.storage, dt.size
    epb = 32 // sz
    code = op_code("Brcb")
    vkind = vec_kind("Brcb", sz)

    def brcb_(dst, src, repeat, params):  # type: ignore[no-untyped-def]
        w = ctx_words(dst.ctx)
        w[X_MASK_LO] = -1  # ResetMask
        w[X_MASK_HI] = -1
        core = core_of(dst)
        ps, pd = plan_tensor(src), plan_tensor(dst)
        n = np.int64(repeat)
        db, dr = np.int64(params.dst_blk_stride), np.int64(params.dst_rep_stride)
        db = db if db != 0 else np.int64(1)
        if not params_ok(core, pd, n, 1) or n <= 0:
            return
        src_bytes, dst_bytes = n * 8 * sz, span(n, db, dr)
        if not (vec_ok(core, ps, src_bytes, code) and vec_ok(core, pd, dst_bytes, code)  # Brcb.md: src and dst apart
                and blocks_apart(core, code, SRC, pd, db, dr, n, ps, src_bytes)):
            return
        hz_level0(core, code, pd, db, dr, dst_bytes, ps, 1, 8, src_bytes, ps, 1, 8, 0, n)
        s = carray(address_as_pointer(core.base + src.addr, st), 8 * n)
        for i in range(n):
            for j in range(8):
                off = (i * dr + j * db) * 32
                d = carray(address_as_pointer(core.base + dst.addr + off, st), epb)
                x = s[8 * i + j]
                for e in range(epb):
                    d[e] = x
                flow_lanes(core, at(pd, off), at(ps, (8 * i + j) * sz), epb, sz, sz, 0)
        count_vector(core, VEC_DUP, vkind, n * 256, pd, ps, ps)
    return brcb_


# ---------------------------------------------------------------------------------------------------------------
# The instructions


def _instruction(name: str, attr: str, form: str):  # type: ignore[no-untyped-def]
    op = marker(name)
    family = _family(name)[0]

    def stub(dst, src, *args):  # type: ignore[no-untyped-def]
        raise TypeError(f"{name} is device code: call it from a kernel")

    @overload(stub, jit_options=INLINE_OPTIONS)
    def _typed(dst, src, *args):  # type: ignore[no-untyped-def]
        if family == "Reduce":
            return lambda dst, src, *args: reduce_op(op, dst, src, args[0], args[1:])
        if family == "Whole":
            if len(args) == 5:
                return lambda dst, src, *args: repeat_op(op, dst, src, args[0], args[1], args[2], args[3], args[4],
                                                         _VALUE_INDEX)
            return lambda dst, src, *args: repeat_op(op, dst, src, args[0], args[1], args[2], args[3], args[4],
                                                     args[5])
        return lambda dst, src, *args: repeat_op(op, dst, src, args[1], args[0], args[2], args[3], args[4], 0)

    stub.__name__ = stub.__qualname__ = attr
    stub.__doc__ = f"{name}({form})."
    return stub


_REDUCE = "dst, src, work, count or mask, repeat_times, src_rep_stride"
_WHOLE = "dst, src, mask, repeat_times, dst_rep_stride, src_blk_stride, src_rep_stride"
_BLOCK = "dst, src, repeat_times, mask, dst_rep_stride, src_blk_stride, src_rep_stride"
reduce_sum = _instruction("ReduceSum", "reduce_sum", _REDUCE)
reduce_max = _instruction("ReduceMax", "reduce_max", _REDUCE + "[, cal_index]")
reduce_min = _instruction("ReduceMin", "reduce_min", _REDUCE + "[, cal_index]")
whole_reduce_sum = _instruction("WholeReduceSum", "whole_reduce_sum", _WHOLE)
whole_reduce_max = _instruction("WholeReduceMax", "whole_reduce_max", _WHOLE + "[, order]")
whole_reduce_min = _instruction("WholeReduceMin", "whole_reduce_min", _WHOLE + "[, order]")
block_reduce_sum = _instruction("BlockReduceSum", "block_reduce_sum", _BLOCK)
block_reduce_max = _instruction("BlockReduceMax", "block_reduce_max", _BLOCK)
block_reduce_min = _instruction("BlockReduceMin", "block_reduce_min", _BLOCK)
pair_reduce_sum = _instruction("PairReduceSum", "pair_reduce_sum", _BLOCK)


def brcb(dst, src, repeat_times, params):  # type: ignore[no-untyped-def]
    """Brcb(dst, src, repeatTime, BrcbRepeatParams): block j of repeat i of dst filled with ``src[8i + j]``."""
    raise TypeError("Brcb is device code: call it from a kernel")


@overload(brcb, jit_options=INLINE_OPTIONS)
def _brcb(dst, src, repeat_times, params):  # type: ignore[no-untyped-def]
    return lambda dst, src, repeat_times, params: brcb_op(dst, src, repeat_times, params)
