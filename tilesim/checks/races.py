"""Races between cores inside one SyncAll phase, found in a recorded launch's instruction log (checked mode).

On the NPU the cores of one phase run with no order between them: only SyncAll orders one core's GM accesses
against another's. So two cores writing the same GM bytes in one phase, or one writing what another reads, give
a result that depends on timing, though the emulator (which runs the cores in some order) may well print the
right numbers. Atomic adds into the same bytes commute, so they are exempt from one another; but an atomic add
and another core's plain write of those bytes is a race (the write may land before or after the add), and so is
an atomic add and another core's read (the read may see a partial sum). A core never races with itself: its
accesses are ordered by its own pipe barriers, which this detector does not judge.

The log's GM rows (``tilesim.core.records``: L_GM >= 0) are reads (LANE_MTE2, and LANE_SCALAR GetValue), writes
(LANE_MTE3 of class MTE3_BYTES, and LANE_SCALAR SetValue, logged with that class) and atomic adds (LANE_MTE3 of class
ATOMIC_BYTES). An access covers L_BURSTS rows of L_GM_ROW bytes from byte L_GM_OFF, L_GM_STRIDE bytes from one row's
start to the next. The accesses are expanded into byte intervals with numpy (an access whose rows touch or overlap
is one interval), sorted by (phase, tensor, start), and swept once: an interval races with an earlier one of another
core, of a conflicting class, that ends after it starts. Per class the sweep keeps the two largest ends *from
distinct cores*: with only the largest, a long interval of the sweeping core itself would hide another core's
shorter one.

Each racing interval is reported once per kind, against the conflicting interval of another core that reaches
furthest; so the total counts racing accesses (rows of strided ones), not pairs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from tilesim.checks.violations import Violation
from tilesim.core.pipes import LANE_MTE2, LANE_MTE3, LANE_NAMES, LANE_SCALAR
from tilesim.core.records import (
    ATOMIC_BYTES,
    L_BURSTS,
    L_CLASS,
    L_GM,
    L_GM_OFF,
    L_GM_ROW,
    L_GM_STRIDE,
    L_PIPE,
    MTE3_BYTES,
)
from tilesim.jit import njit

if TYPE_CHECKING:  # the launch calls the race check with its report: checked mode sits below the runtime
    from tilesim.runtime.report import RunReport

READ, WRITE, ATOMIC = 0, 1, 2  # access classes
KINDS = ("write-write", "write-read", "atomic-write", "atomic-read")
# The race kind of an interval of class row against an earlier one of class column (-1: no race). The kind's
# first word names the side reported first (:class:`Race` ``core_a``).
_CONFLICT = np.array([[-1, 1, 3],
                      [1, 0, 2],
                      [3, 2, -1]], np.int64)
_VERB = {"read": "reads", "write": "writes", "atomic": "atomic-adds to"}


@dataclass(frozen=True)
class Race:
    """Two cores' accesses to the same GM bytes in one SyncAll phase, at least one a plain write, or an atomic
    add against a plain access. Side a is the one the kind names first (the writer of a write-read, the atomic
    add of an atomic-*); ``index_*`` is the access's row in its core's log (``RunReport.log[core]``), so it can be
    found with the rest of that core's instructions."""

    kind: str
    phase: int
    tag: int
    tensor: str
    offset: int  # bytes from the tensor's start: the first byte both touch
    size: int  # bytes of that overlapping range (one range: a strided access may overlap in others too)
    core_a: int
    index_a: int
    pipe_a: str
    core_b: int
    index_b: int
    pipe_b: str

    def describe(self) -> str:
        """One line naming everything: the kind, the phase, the tensor and bytes, each side's core, log row and
        pipe, and what it does."""
        a, b = self.kind.split("-")
        return (f"{self.kind} race in phase {self.phase} on GM tensor {self.tensor} (tag {self.tag}) bytes "
                f"[{self.offset}, {self.offset + self.size}) ({self.size} B): core {self.core_a} {_VERB[a]} them "
                f"(log row {self.index_a}, {self.pipe_a}), core {self.core_b} {_VERB[b]} them (log row "
                f"{self.index_b}, {self.pipe_b}), with no SyncAll between")


def find_races(report: RunReport, limit: int = 16) -> tuple[list[Race], int]:
    """The first ``limit`` races of a recorded launch, in (phase, tensor, byte offset) order, and how many there
    are in all (racing accesses, once per kind: see the module's docstring)."""
    if report.log is None or report.phase_ends is None:
        raise ValueError(f"{report.op}: races are found in the instruction log, which this report lacks; run the "
                         f"op under tilesim.recorded(...)")
    acc = _accesses(report)
    if acc["tag"].size == 0:
        return [], 0
    group = acc["phase"] * (int(acc["tag"].max()) + 1) + acc["tag"]
    start, end, owner = _intervals(acc)
    order = _order(group[owner], start)
    found = np.empty((max(limit, 0), 4), np.int64)
    total = _sweep(order, owner, start, end, group, acc["core"], acc["cls"], _CONFLICT, found)
    races = []
    for x, y, kind, stop in found[:min(total, limit)]:
        ax, ay = owner[x], owner[y]
        # side a is the class the kind names first: the higher class (atomic > write > read); the earlier on a tie
        a, b = (ax, ay) if acc["cls"][ax] > acc["cls"][ay] else (ay, ax)
        tag = int(acc["tag"][ax])
        races.append(Race(kind=KINDS[kind], phase=int(acc["phase"][ax]), tag=tag,
                          tensor=report.gm_names[tag] if tag < len(report.gm_names) else f"#{tag}",
                          offset=int(start[x]), size=int(stop - start[x]),
                          core_a=int(acc["core"][a]), index_a=int(acc["index"][a]), pipe_a=LANE_NAMES[acc["pipe"][a]],
                          core_b=int(acc["core"][b]), index_b=int(acc["index"][b]), pipe_b=LANE_NAMES[acc["pipe"][b]]))
    return races, int(total)


_FIELDS = ("phase", "tag", "core", "index", "pipe", "cls", "off", "row", "stride", "bursts")


def _accesses(report: RunReport) -> dict[str, np.ndarray]:
    """Every GM access of every core, in core then log order: its phase, tensor tag, core, log row, pipe, class
    and where (byte offset, row bytes, stride, rows). Empty accesses are dropped (they touch nothing)."""
    ends = report.phase_ends
    out = np.empty((len(_FIELDS), sum(log.shape[0] for log in report.log)), np.int64)
    ends_by_core = np.ascontiguousarray(ends.T)
    k = 0
    for c, log in enumerate(report.log):  # one compiled pass per core (a checked launch runs this every time)
        k = _core_accesses(log, c, ends_by_core[c], out, k)
    return {name: out[j, :k] for j, name in enumerate(_FIELDS)}


@njit(cache=True, host=True)
def _core_accesses(log, c, ends, out, k):
    """Core ``c``'s GM accesses from its log into columns ``k ..`` of ``out`` (rows as ``_FIELDS``); returns the
    next free column. An access's phase is the number of phase ends at or before its log row."""
    phase = 0
    for i in range(log.shape[0]):
        if log[i, L_GM] < 0 or log[i, L_BURSTS] <= 0 or log[i, L_GM_ROW] <= 0:
            continue
        pipe, what = log[i, L_PIPE], log[i, L_CLASS]
        if pipe == LANE_MTE2 or (pipe == LANE_SCALAR and what != MTE3_BYTES):
            cls = READ
        elif (pipe == LANE_MTE3 or pipe == LANE_SCALAR) and what == MTE3_BYTES:
            cls = WRITE
        elif pipe == LANE_MTE3 and what == ATOMIC_BYTES:
            cls = ATOMIC
        else:
            continue
        while phase < ends.size and ends[phase] <= i:
            phase += 1
        out[0, k], out[1, k], out[2, k], out[3, k], out[4, k] = phase, log[i, L_GM], c, i, pipe
        out[5, k], out[6, k], out[7, k], out[8, k] = cls, log[i, L_GM_OFF], log[i, L_GM_ROW], log[i, L_GM_STRIDE]
        out[9, k] = log[i, L_BURSTS]
        k += 1
    return k


def _intervals(acc: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The accesses as byte intervals [start, end) and the access each comes from. An access whose rows touch or
    overlap (stride between 0 and the row) is one interval; the rows of a strided one are an interval each."""
    off, row, stride, bursts = acc["off"], acc["row"], acc["stride"], acc["bursts"]
    whole = (bursts == 1) | ((stride >= 0) & (stride <= row))
    span = np.where(whole, (bursts - 1) * stride + row, row)
    n = np.where(whole, 1, bursts)
    owner = np.repeat(np.arange(n.size), n)
    r = np.arange(owner.size) - np.repeat(np.cumsum(n) - n, n)  # the row of a strided access, 0 for a whole one
    start = off[owner] + r * stride[owner]
    return start, start + span[owner], owner


def _order(group: np.ndarray, start: np.ndarray) -> np.ndarray:
    """The intervals sorted by (group, start), ties in core then log order (a stable sort of the order they come
    in), so that the races and their count are the same on every run. One int64 key where both fit (a stable
    argsort of it takes a third of lexsort's time), lexsort where not."""
    lo = int(start.min())
    bits = (int(start.max()) - lo).bit_length()
    if bits + int(group.max()).bit_length() <= 62:
        return np.argsort((group << bits) | (start - lo), kind="stable")
    return np.lexsort((start, group))


@njit(cache=True, host=True)
def _sweep(order, owner, start, end, group, core, cls, conflict, found):
    """The intervals in ``order`` (by group, then start): for each, the conflicting earlier interval of another core
    that ends furthest past its start, per conflicting class. Writes the first ``found.shape[0]`` as (interval,
    partner, kind, end of the overlap) and returns how many there are."""
    top_end = np.empty((3, 2), np.int64)  # per class: the largest end, and the largest of another core
    top_core = np.empty((3, 2), np.int64)
    top_at = np.empty((3, 2), np.int64)
    total = 0
    prev = -1
    for i in order:
        a = owner[i]
        g, s, c, k = group[a], start[i], core[a], cls[a]
        if g != prev:
            top_core[:] = -1
            prev = g
        for y in range(3):
            kind = conflict[k, y]
            j = 0 if top_core[y, 0] != c else 1
            if kind < 0 or top_core[y, j] < 0 or top_end[y, j] <= s:
                continue
            if total < found.shape[0]:
                found[total, 0] = i
                found[total, 1] = top_at[y, j]
                found[total, 2] = kind
                found[total, 3] = min(end[i], top_end[y, j])
            total += 1
        e = end[i]
        if top_core[k, 0] == c:  # the leader grows; the runner-up is another core's and stays
            if e > top_end[k, 0]:
                top_end[k, 0], top_at[k, 0] = e, i
        elif top_core[k, 0] < 0 or e > top_end[k, 0]:  # a new leader; the old one is another core's
            top_end[k, 1], top_core[k, 1], top_at[k, 1] = top_end[k, 0], top_core[k, 0], top_at[k, 0]
            top_end[k, 0], top_core[k, 0], top_at[k, 0] = e, c, i
        elif top_core[k, 1] < 0 or e > top_end[k, 1]:  # the runner-up: the largest end of a core not the leader's
            top_end[k, 1], top_core[k, 1], top_at[k, 1] = e, c, i
    return total


def violations(report: RunReport) -> tuple[list[Violation], int]:
    """Checked mode's view of the races of a launch: one :class:`Violation` each (side a's core and
    instruction), and how many there are in all."""
    races, total = find_races(report)
    return [Violation(f"race ({r.kind})", report.op, r.core_a, r.phase, r.index_a, f'GM tensor "{r.tensor}"',
                      r.offset, r.size, r.describe()) for r in races], total
