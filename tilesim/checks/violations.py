"""Checked mode's findings, as msSanitizer reports them: what went wrong, where, on which core, in which phase.

The device side (``tilesim.core.records.report``) records each core's violations in its err row; the race detector
(``tilesim.checks.races``) finds conflicts between cores from the instruction logs. This module turns both into
:class:`Violation` records and their messages.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tilesim.core.pipes import LANE_LETTERS
from tilesim.core.records import (
    E_BYTES,
    E_EXTRA,
    E_INSTR,
    E_KIND,
    E_OFFSET,
    E_TAG,
    ERR_API_RULE,
    ERR_API_TMP,
    ERR_CLOBBERED,
    ERR_DATACOPY_GAP,
    ERR_DATACOPY_LEN,
    ERR_DOUBLE_SET,
    ERR_FIELDS,
    ERR_GM_OOB,
    ERR_RAW,
    ERR_STALE,
    ERR_UB_ALIGN,
    ERR_UB_OOB,
    ERR_UNINIT,
    ERR_UNPAIRED_SET,
    ERR_VEC_ALIGN,
    ERR_VEC_PARAM,
    ERR_WAIT_UNSET,
    ERR_WAR,
    ERR_WAW,
    MAX_REPORTS,
    RULE_CMP_COUNT,
    RULE_OVERLAP,
    RULE_SCRATCH,
)
from tilesim.machine.hazard import INSTRUCTIONS
from tilesim.machine.overlap import ANY, FORWARD, PARTIAL, SOURCE_NAMES, WORK
from tilesim.machine.sync import EVENT_DST, EVENT_SRC, HardEvent

KIND_NAMES = {ERR_DATACOPY_LEN: "misaligned DataCopy length", ERR_UB_OOB: "UB out of bounds",
              ERR_GM_OOB: "GM out of bounds", ERR_UB_ALIGN: "misaligned DataCopy address",
              ERR_DATACOPY_GAP: "misaligned DataCopy stride", ERR_API_TMP: "temporary buffer too small",
              ERR_VEC_ALIGN: "misaligned vector operand", ERR_STALE: "use after free",
              ERR_UNINIT: "uninitialised read", ERR_CLOBBERED: "read of a reused source",
              ERR_VEC_PARAM: "invalid repeat parameters", ERR_RAW: "pipe hazard (RAW)", ERR_WAR: "pipe hazard (WAR)",
              ERR_WAW: "pipe hazard (WAW)", ERR_WAIT_UNSET: "WaitFlag with no SetFlag", ERR_DOUBLE_SET: "SetFlag twice",
              ERR_UNPAIRED_SET: "unpaired SetFlag", ERR_API_RULE: "API rule broken"}
_GM_KINDS = {ERR_GM_OOB}
_SYNC_KINDS = {ERR_WAIT_UNSET, ERR_DOUBLE_SET, ERR_UNPAIRED_SET}
_HAZARDS = {ERR_RAW: "reads", ERR_WAR: "writes", ERR_WAW: "writes"}
# what orders each pair of pipes besides a SetFlag / WaitFlag of their event
_QUEUE_SYNC = {("MTE2", "V"): " or DeQue", ("V", "MTE3"): " or DeQue", ("V", "MTE2"): " or FreeTensor/AllocTensor",
               ("MTE3", "V"): " or FreeTensor/AllocTensor"}


def _hazard(kind: int, where: str, offset: int, nbytes: int, extra: int) -> str:
    """A pipe hazard's sentence: ``extra`` is the instruction | the other's << 8 | pipe << 16 | other pipe << 18 |
    a queue's tensor << 20."""
    op, other_op, q, p, queued = extra & 255, (extra >> 8) & 255, (extra >> 16) & 3, (extra >> 18) & 3, extra >> 20
    mine, theirs = LANE_LETTERS[q], LANE_LETTERS[p]
    did = {ERR_RAW: "written", ERR_WAR: "read", ERR_WAW: "written"}[kind]
    sync = (f"no PipeBarrier<PIPE_{mine}>" if p == q
            else f"no {theirs}_{mine} sync{_QUEUE_SYNC.get((theirs, mine), '') if queued else ''}")
    return (f"{mine} ({INSTRUCTIONS[op]}) {_HAZARDS[kind]} {where}[{offset}:{offset + nbytes}] (bytes) {did} by "
            f"{theirs} ({INSTRUCTIONS[other_op]}) with {sync} between them")


_RULE = "通用地址重叠约束"
# why an instruction allows no overlap at all (tilesim.machine.overlap's table)
_NO_OVERLAP = {"Brcb": "Brcb.md does not allow src and dst in the same memory",
               "Gather": "Gather.md does not allow src and dst in the same memory",
               "Axpy": "Axpy.md allows no overlap with half src and float dst",
               "Transpose": "Transpose.md allows src and dst as one tensor only",
               "Select": "selMask is of another type, which cannot overlap dst 100% (" + _RULE + ")"}


def _overlap(op: str, extra: int) -> str:
    """A RULE_OVERLAP finding's sentence (``extra``: tilesim.machine.overlap.overlap_extra's word)."""
    kind, which = (extra >> 16) & 15, (extra >> 20) & 15
    r, r2, bd, bs = (extra >> 24) & 0xFFFF, (extra >> 40) & 0xFFFF, (extra >> 56) & 7, (extra >> 60) & 7
    src = SOURCE_NAMES[which] if which < len(SOURCE_NAMES) else "a source"
    head = (f"{op}'s sharedTmpBuffer (its first pass's destination) overlaps src" if which == WORK
            else f"{op}'s destination overlaps a source it reads ({src})")
    if kind == ANY:
        why = _NO_OVERLAP.get(op, f"its API states no overlap rule, so allows none ({_RULE})")
        return f"{head}: {why}"
    if kind == PARTIAL:
        return (f"{head} partly within repeat {r}: dst block {bd} is {src}'s block {bs}; within a repeat the two "
                f"must overlap 100% or not at all ({_RULE})")
    if kind == FORWARD:
        return (f"{head} across repeats: repeat {r2} reads block {bs} of its {src}, which repeat {r} writes (its "
                f"block {bd}); a later repeat must not read what an earlier one wrote ({_RULE}: only Add, Sub, Mul, "
                f"Max and Min in half, int32 or float may, on src1 with a src1 or dst repeat stride of 0)")
    return (f"{head} within repeat {r}: dst block {bd} lies on {src}'s block {bs} and writes over lanes the repeat "
            f"reads after it; of two widths, a lane of dst may lie only on source lanes of its own or earlier lanes "
            f"({_RULE} asks one width for a 100% overlap; Cast.md: a widening Cast in place may go wrong)")


def _sync_detail(kind: int, event: int, event_id: int) -> str:
    name = HardEvent(event).name if 0 <= event < len(HardEvent) else str(event)
    call = f"<HardEvent::{name}>({event_id})"
    if kind == ERR_WAIT_UNSET:
        return f"WaitFlag{call} with no SetFlag of that event and id before it: the NPU waits for ever (a wrong id?)"
    if kind == ERR_DOUBLE_SET:
        return f"SetFlag{call} on a flag set and not waited for: undefined on the NPU (a later PipeBarrier hangs)"
    src, dst = (LANE_LETTERS[EVENT_SRC[event]], LANE_LETTERS[EVENT_DST[event]]) if 0 <= event < len(HardEvent) \
        else ("?", "?")
    return (f"Unpaired set_flag instructions detected from PIPE_{src} to PIPE_{dst}: SetFlag{call} never waited "
            f"for")


@dataclass(frozen=True)
class Violation:
    """One finding: its kind, the kernel, core, SyncAll phase and instruction (index in the core's log, -1 when
    not known), the buffer or tensor, the byte offset and size, and a sentence saying what the rule is."""

    kind: str
    kernel: str
    core: int
    phase: int
    instruction: int
    memory: str  # 'UB buffer "x"' or 'GM tensor "dy"'
    offset: int
    nbytes: int
    detail: str

    def __str__(self) -> str:
        at = f", instruction {self.instruction}" if self.instruction >= 0 else ""
        return (f"{self.kind}: {self.detail} [{self.kernel}, core {self.core}, phase {self.phase}{at}; "
                f"{self.memory}, offset {self.offset}, {self.nbytes} B]")

    def mssanitizer(self) -> str:
        """The report laid out as msSanitizer prints one."""
        at = f" (instruction {self.instruction} of the core)" if self.instruction >= 0 else ""
        return "\n".join([f"====== ERROR: {self.kind}: {self.detail}",
                          f"======    at offset {self.offset} of {self.memory}, {self.nbytes} B",
                          f"======    in kernel {self.kernel}, block {self.core} (core {self.core}), "
                          f"phase {self.phase}{at}"])


def _detail(kind: int, nbytes: int, extra: int, stack: bool) -> str:
    if kind == ERR_DATACOPY_LEN:
        return f"DataCopy of {nbytes} B: not a whole number of 32 B blocks (the NPU moves {nbytes // 32 * 32} B)"
    if kind == ERR_DATACOPY_GAP:
        return f"DataCopy rows {extra} B apart in GM: the gap is not a whole number of 32 B blocks"
    if kind == ERR_UB_ALIGN:
        return "DataCopy's UB address is not 32 B aligned"
    if kind == ERR_VEC_ALIGN:
        return f"a vector instruction's operand is {extra} B past a 32 B boundary (it must be aligned)"
    if kind == ERR_API_TMP:
        if stack:
            return (f"the framework's temporary needs {extra} B, more than the {nbytes} B of UB the plan leaves "
                    f"free")
        return f"the sharedTmpBuffer holds {nbytes} B, less than the {extra} B the API's tiling (stackBufferSize) uses"
    if kind == ERR_VEC_PARAM:
        return (f"repeat_times {nbytes} (it must be in [0, 255]) with dst block stride {extra} (0 is undefined on "
                f"the NPU)")
    if kind == ERR_API_RULE:
        rule, op = extra & 255, INSTRUCTIONS[(extra >> 8) & 255]
        if rule == RULE_OVERLAP:
            return _overlap(op, extra)
        if rule == RULE_CMP_COUNT:
            return (f"{op} of {nbytes} B of source: count * sizeof(T) must be a multiple of 256 B (A2 compares only "
                    f"the whole 256 B repeats and leaves the rest of dst unwritten)")
        if rule == RULE_SCRATCH:
            return (f"{op} (modes 1 and 2) writes its {nbytes} B of scratch at the top 8 KiB of UB (TMP_UB_OFFSET), "
                    f"where this buffer lies: the plan must leave the top 8 KiB free (Select.md)")
    if kind == ERR_UB_OOB:
        return f"the access leaves the LocalTensor (slot of {extra} B)"
    if kind == ERR_GM_OOB:
        return f"the access leaves the tensor ({extra} B)"
    if kind == ERR_STALE and extra & 0xFFFFFFFF == 0xFFFFFFFE:  # the slot's generation -2: freed
        return f"a LocalTensor of allocation {(extra + 2) >> 32} used after its FreeTensor"
    if kind == ERR_STALE:
        return (f"a LocalTensor of tile {extra >> 32} used after its queue slot was allocated to tile "
                f"{extra & 0xFFFFFFFF} (FreeTensor, then AllocTensor or DeQue of a later tile)")
    if kind in (ERR_UNINIT, ERR_CLOBBERED):
        first, bad = extra >> 32, extra & 0xFFFFFFFF
        what = ("UB never written" if kind == ERR_UNINIT
                else "a source an API with isReuseSource used as scratch, not written since")
        return f"read of {bad} B of {what}, the first {first} B into the access"
    return f"violation {kind}"


def from_cores(kernel: str, err: np.ndarray, buffers: list[str], stack: set[int], gm_names: list[str],
               err_ends: np.ndarray) -> tuple[list[Violation], int]:
    """The violations the cores recorded (each core's first MAX_REPORTS), and how many they found in all.
    ``err_ends[p, c]``: how many core ``c`` had found by the end of phase ``p``."""
    out = []
    total = int(err[:, 0].sum())
    for c in np.flatnonzero(err[:, 0]).tolist():
        for k in range(min(int(err[c, 0]), MAX_REPORTS)):
            rec = err[c, 1 + k * ERR_FIELDS:1 + (k + 1) * ERR_FIELDS]
            kind, tag, instr = int(rec[E_KIND]), int(rec[E_TAG]), int(rec[E_INSTR])
            offset, nbytes, extra = int(rec[E_OFFSET]), int(rec[E_BYTES]), int(rec[E_EXTRA])
            name = buffers[tag] if 0 <= tag < len(buffers) else str(tag)
            if kind in _GM_KINDS:
                memory = f'GM tensor "{gm_names[tag] if 0 <= tag < len(gm_names) else tag}"'
            elif kind in _SYNC_KINDS:
                memory = "the flags"
            else:
                memory = f'UB buffer "{name}"'
            if kind in _HAZARDS:
                detail = _hazard(kind, name, offset, nbytes, extra)
            elif kind in _SYNC_KINDS:
                detail = _sync_detail(kind, tag, offset)
            else:
                detail = _detail(kind, nbytes, extra, tag in stack)
            phase = int(np.searchsorted(err_ends[:, c], k, side="right")) if err_ends.size else 0
            out.append(Violation(KIND_NAMES.get(kind, str(kind)), kernel, c, phase, instr, memory, offset, nbytes,
                                 detail))
    return out, total
