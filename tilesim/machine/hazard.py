"""Checked mode's pipe-hazard check: each UB access recorded per 32 B granule with its pipe and instruction, each
pipe's vector clock, and the flags the syncs set (the model: :mod:`tilesim.machine.sync`).

An instruction calls :func:`hz_access` (or :func:`hz_rows`) for each operand, then :func:`hz_issue` for its pipe.
Outside the checked build all of it compiles to nothing.
"""

from __future__ import annotations

import numpy as np
from numba import carray

from tilesim.core.pipes import LANE_SCALAR, LANE_VECTOR
from tilesim.core.records import (
    ERR_DOUBLE_SET,
    ERR_RAW,
    ERR_UNPAIRED_SET,
    ERR_WAIT_UNSET,
    ERR_WAR,
    ERR_WAW,
    HZ_CLOCK,
    HZ_EVENTS,
    HZ_FLAG_WORDS,
    HZ_FLAGS,
    HZ_GRANULE,
    HZ_GRANULE_WORDS,
    HZ_IDS,
    HZ_ISSUED,
    HZ_MANUAL_SYNC,
    HZ_SCRATCH,
    HZ_WORDS,
    checked_only,
    hazard_col,
    plan_of,
    report,
)
from tilesim.jit import njit
from tilesim.jit.intrinsics import address_as_pointer

# The instructions, as the hazard check names them (a code each, in the records; append, never reorder: the codes
# are compiled into cached kernels).
INSTRUCTIONS = ("DataCopy", "DataCopyPad", "GetValue", "SetValue", "Add", "Sub", "Mul", "Div", "Max", "Min", "Adds",
                "Muls", "Maxs", "Mins", "Exp", "Ln", "Abs", "Sqrt", "Rsqrt", "Reciprocal", "Relu", "Duplicate", "Axpy",
                "Cast", "Compare", "CompareScalar", "Select", "ReduceSum", "ReduceMax", "ReduceMin", "WholeReduceSum",
                "WholeReduceMax", "WholeReduceMin", "BlockReduceSum", "BlockReduceMax", "BlockReduceMin",
                "PairReduceSum", "Brcb", "Gather", "Transpose", "GatherMask", "LeakyRelu", "Not", "And", "Or",
                "SetAtomicAdd", "Copy", "Broadcast", "InitOutput")


def op_code(name: str) -> int:
    """The hazard check's code of an instruction (its Ascend C name)."""
    return INSTRUCTIONS.index(name)



# ---------------------------------------------------------------------------------------------------------------
# Checked mode's state


@njit(cache=True, inline="always")
def _hz(core):
    """The core's pipe-hazard state (:data:`tilesim.core.records.HZ_WORDS` words, then the granules)."""
    n = HZ_WORDS + core.ub_size // HZ_GRANULE * HZ_GRANULE_WORDS
    return carray(address_as_pointer(core.err_at + hazard_col(core.ub_size) * 8, np.int64), n)


@njit(cache=True, inline="always")
def _ordered(h, p, i, q):
    """Whether instruction ``i`` of pipe ``p`` is known done before pipe ``q``'s next instruction."""
    if p == q:
        return p == LANE_SCALAR or h[HZ_CLOCK + q * 4 + q] > i
    return h[HZ_CLOCK + q * 4 + p] > i


@njit(cache=True, inline="always")
def _auto(p, q):
    """The pairs BiSheng's auto-sync orders itself: V-V, and PIPE_S with any other pipe."""
    return (p == LANE_VECTOR and q == LANE_VECTOR) or ((p == LANE_SCALAR) != (q == LANE_SCALAR))


@njit(cache=True)
def _join(h, clock_at, q):
    """Pipe ``q`` waits for the clock at ``clock_at`` (4 words); a wait of the scalar unit holds the issue of
    every later instruction, so every pipe learns it."""
    for r in range(4):
        if q == LANE_SCALAR or r == q:
            for p in range(4):
                c = HZ_CLOCK + r * 4 + p
                v = h[clock_at + p]
                if v > h[c]:
                    h[c] = v


@njit(cache=True)
def _snapshot(h, p, at):
    """Pipe ``p``'s clock with all its own instructions so far: what a SetFlag on it carries (into ``at``)."""
    for k in range(4):
        h[at + k] = h[HZ_CLOCK + p * 4 + k]
    h[at + p] = h[HZ_ISSUED + p]


@checked_only(False)
def hz_access(core, q, op, buf, addr, nbytes, write, queued, quiet=False):
    """Checked mode: instruction ``op`` (:data:`INSTRUCTIONS`) of pipe ``q`` reads (or ``write``\\ s) UB bytes
    ``[addr, addr + nbytes)`` of plan buffer ``buf`` (``queued``: through a queue's tensor, not a TBuf's). Reports
    the first hazard of the access (one with another pipe before one within the pipe) unless ``quiet``, records
    the access, and returns whether it found one. Call it for each operand, then :func:`hz_issue`."""
    if not core.checks or nbytes <= 0 or addr < 0 or addr + nbytes > core.ub_size:
        return False
    h = _hz(core)
    i = h[HZ_ISSUED + q]
    manual = h[HZ_MANUAL_SYNC] != 0
    kind = np.int64(0)
    other = other_op = first = last = np.int64(-1)
    for g in range(addr // HZ_GRANULE, (addr + nbytes + HZ_GRANULE - 1) // HZ_GRANULE):
        at = HZ_WORDS + g * HZ_GRANULE_WORDS
        k = np.int64(0)
        p = o = np.int64(-1)
        wr = h[at]
        if wr:
            p, pi = wr & 3, (wr >> 10) - 1
            if not (p == q and pi == i) and not _ordered(h, p, pi, q):
                k = ERR_WAW if write else ERR_RAW
                o = (wr >> 2) & 255
        if write and (k == 0 or p == q):
            for r in range(4):
                rd = h[at + 1 + r]
                if rd and r != q and not _ordered(h, r, (rd >> 8) - 1, q):
                    k, p, o = ERR_WAR, np.int64(r), rd & 255
                    break
        if k and not manual and _auto(p, q):  # the compiler's sync, where the dependence is
            _snapshot(h, p, HZ_SCRATCH)
            _join(h, HZ_SCRATCH, q)
            k = 0
        if k:
            if kind == 0:
                kind, other, other_op, first = k, p, o, g
            if k == kind and p == other:
                last = g
        if write:
            h[at] = ((i + 1) << 10) | (np.int64(op) << 2) | q
        else:
            h[at + 1 + q] = ((i + 1) << 8) | np.int64(op)
    if kind and not quiet:
        lo = max(first * HZ_GRANULE, addr)
        hi = min((last + 1) * HZ_GRANULE, addr + nbytes)
        start = plan_of(core)[buf, 0] if 0 <= buf < core.plan_rows else 0
        report(core, kind, buf, lo - start, hi - lo, np.int64(op) | (other_op << 8) | (np.int64(q) << 16)
               | (other << 18) | (np.int64(queued) << 20))
    return kind != 0


@checked_only(False)
def hz_rows(core, q, op, buf, addr, rows, row_bytes, pitch, write, queued, quiet=False):
    """:func:`hz_access` of ``rows`` rows of ``row_bytes``, ``pitch`` bytes apart (a DataCopy's UB side); whether
    it found a hazard."""
    if not core.checks:
        return False
    if row_bytes == pitch or rows == 1:
        return hz_access(core, q, op, buf, addr, (rows - 1) * pitch + row_bytes, write, queued, quiet)
    found = False
    for r in range(rows):
        found |= hz_access(core, q, op, buf, addr + r * pitch, row_bytes, write, queued, quiet or found)
    return found


@checked_only(None)
def hz_issue(core, q):
    """Checked mode: pipe ``q`` has issued an instruction (after its :func:`hz_access` calls)."""
    if core.checks:
        _hz(core)[HZ_ISSUED + q] += 1


@checked_only(None)
def hz_set(core, ev, k, by, src):
    """Checked mode: SetFlag of event ``ev``, id ``k`` (``by``: 1 the kernel's own, 2 a queue call's) carries pipe
    ``src``'s clock; a flag already set and not waited for is reported (ERR_DOUBLE_SET)."""
    if not core.checks:
        return
    h = _hz(core)
    f = HZ_FLAGS + (ev * HZ_IDS + k) * HZ_FLAG_WORDS
    if h[f] != 0:
        report(core, ERR_DOUBLE_SET, ev, k, 0, h[f])
    h[f] = by
    _snapshot(h, src, f + 1)


@checked_only(None)
def hz_wait(core, ev, k, dst):
    """Checked mode: WaitFlag of event ``ev``, id ``k``: pipe ``dst`` learns the clock its SetFlag carried and
    the flag is cleared; a flag never set is reported (ERR_WAIT_UNSET: the NPU would wait for ever)."""
    if not core.checks:
        return
    h = _hz(core)
    f = HZ_FLAGS + (ev * HZ_IDS + k) * HZ_FLAG_WORDS
    if h[f] == 0:
        report(core, ERR_WAIT_UNSET, ev, k, 0, 0)
        return
    _join(h, f + 1, dst)
    h[f] = 0


@checked_only(None)
def hz_barrier(core, q):
    """Checked mode: PipeBarrier of pipe ``q``: the pipe's next instructions are ordered after every one it issued
    before (``q`` -1, PIPE_ALL: every pipe's after every pipe's)."""
    if not core.checks:
        return
    h = _hz(core)
    for r in range(4):
        if q < 0 or r == q:
            for p in range(4):
                if q < 0 or p == q:
                    h[HZ_CLOCK + r * 4 + p] = max(h[HZ_CLOCK + r * 4 + p], h[HZ_ISSUED + p])


@checked_only(None)
def hz_end(core):
    """Checked mode, at the kernel's end: each SetFlag of the kernel's own that nothing waited for."""
    if not core.checks:
        return
    h = _hz(core)
    for ev in range(HZ_EVENTS):
        for k in range(HZ_IDS):
            if h[HZ_FLAGS + (ev * HZ_IDS + k) * HZ_FLAG_WORDS] == 1:
                report(core, ERR_UNPAIRED_SET, ev, k, 0, 0)




@checked_only(None)
def hz_instruction(core, q, op, dst, dst_bytes, a, a_bytes, b, b_bytes):
    """Checked mode: one instruction of pipe ``q`` that reads ``a_bytes`` of LocalTensor ``a`` and ``b_bytes`` of
    ``b`` and writes ``dst_bytes`` of ``dst`` (machine tensors, :func:`tilesim.machine.tensor.plan_tensor`; a
    size of 0 for an operand it does not have), recorded and then issued; its first hazard is reported."""
    if not core.checks:
        return
    found = hz_access(core, q, op, a.buf, a.addr, a_bytes, False, a.gen >= 0)
    found |= hz_access(core, q, op, b.buf, b.addr, b_bytes, False, b.gen >= 0, found)
    hz_access(core, q, op, dst.buf, dst.addr, dst_bytes, True, dst.gen >= 0, found)
    hz_issue(core, q)


@checked_only(None)
def hz_level0(core, op, dst, d_blk, d_rep, d_end, a, a_blk, a_rep, a_end, b, b_blk, b_rep, b_end, repeat):
    """Checked mode: a level-0 vector instruction of ``repeat`` repeats: each operand's 32 B blocks as its block
    and repeat strides place them (``*_end``: the bytes to the end of the last lane it touches; 0 for an operand it
    does not have), reads then the write, recorded and issued; its first hazard is reported. Blocks, not the span
    they lie in: two instructions writing interleaved blocks (Brcb, a per-column Sub) touch different bytes."""
    if not core.checks:
        return
    found = _operand_blocks(core, op, a, a_blk, a_rep, a_end, repeat, False, False)
    found |= _operand_blocks(core, op, b, b_blk, b_rep, b_end, repeat, False, found)
    _operand_blocks(core, op, dst, d_blk, d_rep, d_end, repeat, True, found)
    hz_issue(core, LANE_VECTOR)


@njit(cache=True)
def _operand_blocks(core, op, t, blk, rep, end, repeat, write, quiet):
    if end <= 0:
        return False
    if blk == 1 and (rep == 8 or repeat == 1):  # the blocks are contiguous
        return hz_access(core, LANE_VECTOR, op, t.buf, t.addr, end, write, t.gen >= 0, quiet)
    found = False
    for r in range(repeat):
        for k in range(8):
            off = (r * rep + k * blk) * 32
            if off < end:
                found |= hz_access(core, LANE_VECTOR, op, t.buf, t.addr + off, min(32, end - off), write,
                                   t.gen >= 0, quiet or found)
    return found
