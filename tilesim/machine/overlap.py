"""Checked mode's operand-overlap rule: which overlaps of an instruction's destination with a source its API allows.

The rule is one, stated for the vector instructions' high-dimension (level-0) form in ``SIMD-API/通用说明和约束.md``
(通用地址重叠约束), and each family's page either refers to it, narrows it, or says nothing, which counts as allowing
no overlap ("API中没有描述地址重叠约束的，视为不支持"). An instruction walks its operands repeat by repeat, each
operand in 32 B blocks at its block and repeat strides; for a destination and one source:

- **within a repeat** the two overlap 100% or not at all: a 32 B block the repeat writes is either none of the
  source's blocks of that repeat, or the one that feeds the same lanes (the same block of the repeat). Operands of
  two widths cannot overlap lane for lane, and the page does not say what they may do; here a lane of dst may lie
  only on source lanes of its own or earlier lanes, in the order the lanes run. That takes the Casts in place that
  Huawei's A2 kernels run (the narrow type at the start of the wide one's bytes, narrowing; at their end,
  widening: RmsNormGrad's ``Cast2FloatIf`` widens a b16 row landed in the upper half of its fp32 buffer, and with
  a row of colValAlign lanes, not a multiple of 64, a repeat's dst lies on part of its own source) and refuses the
  widening in place from the start, which ``Cast.md`` warns may go wrong. A reduction's results may lie on the
  source of their own repeat, which it has read before it writes them;
- **across repeats** no block an earlier repeat writes is a source block of a later repeat (the later repeat would
  read what the earlier one wrote); the only exception is Add, Sub, Mul, Max and Min in half, int32 or float, for
  the second source alone, with ``src1RepStride`` or ``dstRepStride`` 0 (the accumulate idiom ``Add(work, src,
  work, 64, R, {1, 1, 1, 0, 8, 0})``).

A count-form call is the same instruction in counter mode (A2): repeats of 256 B of the wider type, block stride 1,
so it may work in place (dst == src) or on operands apart, and a destination behind its source by whole repeats.
The families declare their rule where they call it:

- binary, binary with a scalar, unary, Copy (:mod:`~tilesim.machine.vector`): the rule above, with Add, Sub, Mul,
  Max and Min's exception for src1;
- Cast and Axpy (:mod:`~tilesim.machine.convert`): the rule above (``Cast.md``: a widening Cast in place may give
  wrong results, which is its across-repeat part); Axpy with half src and float dst: no overlap (``Axpy.md``);
- WholeReduce*, BlockReduce*, PairReduceSum (:mod:`~tilesim.machine.reduce`): the rule above, a repeat's results as
  its destination; ReduceSum / Max / Min: the rule above for the sharedTmpBuffer, its first pass's destination;
  dst, written last, may overlap src and the sharedTmpBuffer (``ReduceSum.md``);
- Select (:mod:`~tilesim.machine.compare`): the rule above for src0 and src1; none with selMask (another type);
- Compare, CompareScalar (silent), Brcb and Gather (``Brcb.md``, ``Gather.md``: src and dst not in the same
  memory): no overlap; Transpose: dst == src or none (``Transpose.md``: src and dst may be one tensor);
- Broadcast, a high-level API: none, but the overlaps its v220 implementation runs
  (:mod:`~tilesim.machine.rearrange`);
- Duplicate: no source.

Blocks are followed as the instruction's mask and strides place them (a block with no lane on is not touched), a
finding names the first conflicting block. A broken rule is a finding of kind ``API rule broken``
(:data:`tilesim.core.records.ERR_API_RULE`, rule RULE_OVERLAP), and the instruction is not executed; none of this is
compiled into the fast build.
"""

from __future__ import annotations

import numpy as np

from tilesim.core.records import ERR_API_RULE, RULE_OVERLAP, checked_only, plan_of, report
from tilesim.jit import njit

# The rule a family applies to one source (the caller picks it; see the module's table).
SAME = 0  # the general rule
ACCUMULATE = 1  # the general rule without its across-repeat part (Add/Sub/Mul/Max/Min's src1 exception)
NONE = 2  # no overlap at all
# The source a finding names (tilesim.checks.violations words them).
SOURCE_NAMES = ("src", "src0", "src1", "selMask", "srcOffset", "sharedTmpBuffer")
SRC, SRC0, SRC1, SEL_MASK, SRC_OFFSET, WORK = range(len(SOURCE_NAMES))
# What the finding found (tilesim.checks.violations words them).
PARTIAL, FORWARD, ANY, LANE = 1, 2, 3, 4


@njit(cache=True)
def overlap_extra(op, kind, which, r, r2, bd, bs):
    """A RULE_OVERLAP finding's extra word: the rule, the instruction's code, what was found, which source, the
    repeat that writes and the one that reads (clamped to 16 bits), the blocks of each (3 bits)."""
    return (np.int64(RULE_OVERLAP) | (np.int64(op) << 8) | (np.int64(kind) << 16) | (np.int64(which) << 20)
            | (min(np.int64(r), np.int64(0xFFFF)) << 24) | (min(np.int64(r2), np.int64(0xFFFF)) << 40)
            | ((np.int64(bd) & 7) << 56) | ((np.int64(bs) & 7) << 60))


@njit(cache=True)
def _found(core, d, at, nbytes, op, kind, which, r, r2, bd, bs):
    report(core, ERR_API_RULE, d.buf, at - plan_of(core)[d.buf, 0], nbytes, overlap_extra(op, kind, which, r, r2,
                                                                                          bd, bs))
    return False


@checked_only(True)
def apart(core, op, which, d, d_bytes, s, s_bytes):
    """Checked mode: ``[d, d + d_bytes)`` and ``[s, s + s_bytes)`` share no byte, where instruction ``op`` (its code)
    allows no overlap of its destination with source ``which``."""
    if core.checks and d.addr < s.addr + s_bytes and s.addr < d.addr + d_bytes and d_bytes > 0 and s_bytes > 0:
        return _found(core, d, max(d.addr, s.addr), min(d.addr + d_bytes, s.addr + s_bytes) - max(d.addr, s.addr),
                      op, ANY, which, 0, 0, 0, 0)
    return True


@njit(cache=True)
def block_bits(lo, hi, lanes, epb):
    """The blocks of a repeat (a bit each) holding a lane the mask (lo, hi) turns on among the first ``lanes``,
    ``epb`` lanes a block."""
    m = np.int64(0)
    for b in range(8):
        first = b * epb
        if first >= lanes:
            break
        for e in range(first, min(first + epb, lanes)):
            word = lo if e < 64 else hi
            if (word >> np.uint64(e % 64)) & np.uint64(1):
                m |= np.int64(1) << b
                break
    return m


@njit(cache=True, inline="always")
def _end(repeat, blk, rep):
    """Bytes from an operand's start to the end of the last block its walk can touch."""
    return ((repeat - 1) * rep + 7 * blk) * 32 + 32


@njit(cache=True, inline="always")
def _on(bits, last, r, repeat, b):
    return (((last if r == repeat - 1 else bits) >> b) & 1) != 0


@njit(cache=True, inline="always")
def _first_on(bits, last, repeat, b, lo_r, hi_r):
    """The first repeat in [lo_r, hi_r] whose block ``b`` is on (-1: none)."""
    if lo_r > hi_r:
        return np.int64(-1)
    if lo_r < repeat - 1 and (bits >> b) & 1:
        return np.int64(lo_r)
    if hi_r == repeat - 1 and (last >> b) & 1:
        return np.int64(repeat - 1)
    return np.int64(-1)


@njit(cache=True)
def _later_lane(bd, b, d_sz, s_sz):
    """Whether a lane of destination block ``bd`` of a repeat lies on a lane of source block ``b`` of the same
    repeat that comes later (operands of two widths sharing one 32 B block)."""
    for e in range(32 // d_sz):
        if b * (32 // s_sz) + (e * d_sz + d_sz - 1) // s_sz > bd * (32 // d_sz) + e:
            return True
    return False


@njit(cache=True)
def _hit(a, r, bd, s, s_blk, s_rep, s_bits, s_last, repeat, rule, d_sz, s_sz):
    """How the destination block at UB address ``a`` (repeat ``r``, block ``bd``; -1 for a reduction's results)
    meets the source's blocks: (what, the source's repeat, its block), what being 0 (nothing wrong), ANY (rule
    NONE: a shared block), FORWARD (a later repeat reads it), PARTIAL (the same repeat reads it for other lanes,
    one width) or LANE (the same repeat reads it for a later lane, two widths)."""
    for b in range(8):
        if not ((s_bits | s_last) >> b) & 1:
            continue
        base = s.addr + b * s_blk * 32
        if s_rep == 0:
            if base != a:
                continue
            first, final = np.int64(0), repeat - 1  # every repeat reads it
        else:
            off = a - base
            if off < 0 or off % (s_rep * 32):
                continue
            first = final = off // (s_rep * 32)
            if first >= repeat:
                continue
        if rule == NONE:
            r2 = _first_on(s_bits, s_last, repeat, b, first, final)
            if r2 >= 0:
                return ANY, r2, np.int64(b)
            continue
        if rule == SAME:
            r2 = _first_on(s_bits, s_last, repeat, b, max(first, r + 1), final)
            if r2 >= 0:
                return FORWARD, r2, np.int64(b)
        if bd >= 0 and first <= r <= final and _on(s_bits, s_last, r, repeat, b):
            if d_sz == s_sz and b != bd:
                return PARTIAL, r, np.int64(b)
            if d_sz != s_sz and _later_lane(bd, b, d_sz, s_sz):
                return LANE, r, np.int64(b)
    return np.int64(0), r, np.int64(-1)


@checked_only(True)
def walk_ok(core, op, which, rule, d, d_sz, d_blk, d_rep, s, s_sz, s_blk, s_rep, lo, hi, repeat, tail, per):
    """Checked mode: instruction ``op`` (its code) writing ``d`` and reading source ``which`` from ``s`` keeps
    ``rule`` (SAME, ACCUMULATE or NONE): ``repeat`` repeats of ``per`` lanes (the last ``tail`` when > 0), the
    lanes the mask (lo, hi) turns on; each operand's lane k of repeat r at ``(r * rep + k // (32 / sz) * blk) * 32
    + k % (32 / sz) * sz`` bytes from its start (strides in 32 B blocks)."""
    if not core.checks or repeat <= 0:
        return True
    d_end, s_end = _end(repeat, d_blk, d_rep), _end(repeat, s_blk, s_rep)
    if d.addr >= s.addr + s_end or s.addr >= d.addr + d_end:
        return True
    last = tail if tail > 0 else per
    d_bits, d_last = block_bits(lo, hi, per, 32 // d_sz), block_bits(lo, hi, last, 32 // d_sz)
    s_bits, s_last = block_bits(lo, hi, per, 32 // s_sz), block_bits(lo, hi, last, 32 // s_sz)
    if (rule != NONE and d_sz == s_sz and d.addr == s.addr and d_blk == s_blk and d_rep == s_rep and d_bits == s_bits
            and d_last == s_last):  # in place, lane for lane: the repeats must not read each other's blocks
        if repeat == 1 or rule == ACCUMULATE:
            return True
        low, high = np.int64(8), np.int64(-1)
        for b in range(8):
            if ((d_bits | d_last) >> b) & 1:
                low, high = min(low, np.int64(b)), np.int64(b)
        if d_rep > (high - low) * d_blk:
            return True
    for r in range(repeat):
        bits = d_last if r == repeat - 1 else d_bits
        for bd in range(8):
            if not (bits >> bd) & 1:
                continue
            a = d.addr + (r * d_rep + bd * d_blk) * 32
            what, r2, bs = _hit(a, r, bd, s, s_blk, s_rep, s_bits, s_last, repeat, rule, d_sz, s_sz)
            if what:
                return _found(core, d, a, 32, op, what, which, r, r2, bd, bs)
    return True


@checked_only(True)
def results_ok(core, op, which, rule, d, d_step, d_bytes, s, s_sz, s_blk, s_rep, lo, hi, repeat, tail, per):
    """Checked mode: :func:`walk_ok` for an instruction that writes ``d_bytes`` of results per repeat, ``d_step``
    bytes apart (a reduction: repeat r's results at ``d + r * d_step``), reading source ``which`` as a walk. A
    repeat's results may lie on its own source (a reduction writes them once it has read the repeat), not on a
    later repeat's."""
    if not core.checks or repeat <= 0 or d_bytes <= 0:
        return True
    d_end, s_end = (repeat - 1) * d_step + d_bytes, _end(repeat, s_blk, s_rep)
    if d.addr >= s.addr + s_end or s.addr >= d.addr + d_end:
        return True
    last = tail if tail > 0 else per
    s_bits, s_last = block_bits(lo, hi, per, 32 // s_sz), block_bits(lo, hi, last, 32 // s_sz)
    for r in range(repeat):
        a0 = d.addr + r * d_step
        a1 = a0 + d_bytes
        for a in range(a0 - a0 % 32, a1, 32):
            what, r2, bs = _hit(a, r, np.int64(-1), s, s_blk, s_rep, s_bits, s_last, repeat, rule, s_sz, s_sz)
            if what:
                return _found(core, d, max(a, a0), min(a + 32, a1) - max(a, a0), op, what, which, r, r2, 0, bs)
    return True


@checked_only(True)
def count_ok(core, op, which, rule, d, d_sz, s, s_sz, n):
    """Checked mode: :func:`walk_ok` for a count-form instruction of ``n`` elements: one instruction in counter
    mode, repeats of 256 B of the wider type, each operand contiguous (a repeat's lanes, then the next's)."""
    if not core.checks or n <= 0:
        return True
    if rule == NONE:
        return apart(core, op, which, d, n * d_sz, s, n * s_sz)
    d_stop, s_stop = d.addr + n * d_sz, s.addr + n * s_sz
    if d.addr >= s_stop or s.addr >= d_stop or (d.addr == s.addr and d_sz == s_sz):
        return True  # apart, or in place lane for lane (each repeat reads only its own blocks)
    per = 256 // max(d_sz, s_sz)
    if d_sz != s_sz:  # two widths: no lane may lie on a later lane's source (in a later repeat: FORWARD)
        i, j = _lane_pair(d.addr, d_sz, s.addr, s_sz, n)
        if i < 0:
            return True
        a = max(d.addr + i * d_sz, s.addr + j * s_sz)
        return _found(core, d, a, min(d.addr + (i + 1) * d_sz, s.addr + (j + 1) * s_sz) - a, op,
                      FORWARD if j // per > i // per else LANE, which, i // per, j // per,
                      i % per * d_sz // 32, j % per * s_sz // 32)
    for r in range((n + per - 1) // per):
        d0, d1 = d.addr + r * 256, d.addr + min((r + 1) * per, n) * d_sz
        s0, s1 = s.addr + r * 256, s.addr + min((r + 1) * per, n) * s_sz
        if s1 < s_stop and d0 < s_stop and s1 < d1:  # a later repeat's source within this repeat's dst
            a = max(d0, s1)
            return _found(core, d, a, 32, op, FORWARD, which, r, (a - s.addr) // 256, (a - d0) // 32,
                          (a - s.addr) % 256 // 32)
        if d0 < s1 and s0 < d1 and d0 != s0:
            a = max(d0, s0)
            return _found(core, d, a, 32, op, PARTIAL, which, r, r, (a - d0) // 32, (a - s0) // 32)
    return True


@njit(cache=True)
def _lane_pair(d, d_sz, s, s_sz, n):
    """Operands of two widths, ``n`` lanes each, contiguous from ``d`` and ``s`` (32 B aligned): the first lane
    ``i`` of dst that lies on a later lane ``j`` of src (j > i), as (i, j), or (-1, -1). Src lane j lies in dst lane
    (s - d + j * s_sz) // d_sz, which falls behind j ever more (widening) or less (narrowing) as j grows, so the last
    (first) src lane on dst tells whether there is one."""
    if s_sz < d_sz:  # widening: the last src lane that lies on dst
        j = min(n - 1, (n * d_sz - (s - d) + s_sz - 1) // s_sz - 1)
    else:  # narrowing: the first one
        j = max(np.int64(0), (d - s + s_sz - 1) // s_sz)
    if j < 0 or j >= n:
        return np.int64(-1), np.int64(-1)
    at = s - d + j * s_sz  # src lane j's first byte, from dst's start
    if at < 0 or at >= n * d_sz or at // d_sz >= j:
        return np.int64(-1), np.int64(-1)
    for i in range(n):  # there is one: the first, in the order the lanes run
        lo, hi = d - s + i * d_sz, d - s + (i + 1) * d_sz  # dst lane i's bytes, from src's start
        first, last = max(lo // s_sz, i + 1), min((hi - 1) // s_sz, n - 1)
        if lo < n * s_sz and hi > 0 and first <= last:
            return np.int64(i), np.int64(first)
    return np.int64(-1), np.int64(-1)


@checked_only(True)
def blocks_apart(core, op, which, d, d_blk, d_rep, repeat, s, s_bytes):
    """Checked mode: none of the 8 blocks of each of ``repeat`` repeats of ``d`` (strides in 32 B blocks) shares a
    byte with ``[s, s + s_bytes)``, where instruction ``op`` allows no overlap (Brcb)."""
    if not core.checks or repeat <= 0 or s_bytes <= 0:
        return True
    if d.addr >= s.addr + s_bytes or s.addr >= d.addr + _end(repeat, d_blk, d_rep):
        return True
    for r in range(repeat):
        for b in range(8):
            a = d.addr + (r * d_rep + b * d_blk) * 32
            if a < s.addr + s_bytes and s.addr < a + 32:
                return _found(core, d, a, 32, op, ANY, which, r, (a - s.addr) // 32, b, 0)
    return True
