"""The NPU cost model: estimated AI Core time of a launch, scheduled from the instructions the emulation recorded.

The schedule is made per core in issue order (:func:`tilesim.core.timeline.run`): every DataCopy, vector instruction
and scalar access with its bytes or 256 B repeats and the UB queue slots it writes and reads. Either while the
kernel runs (:func:`estimated`: each core queues a few dozen instructions at a time, no log, so it costs one more
run of the call and no memory per instruction), or afterwards from a recorded log (:func:`estimate` of a
``tilesim.recorded(...)`` report, which also places each instruction for a trace). Both give the same estimate.
Nothing here knows an op's formulas.

The model, per core and per SyncAll phase:

- **Durations.** MTE2/MTE3: a GM latency, then the bytes over the core's share of GM bandwidth (the chip's GM
  bandwidth over the cores moving data in the phase, split between the core's MTE2 and MTE3 in proportion to the
  bytes each moves, each within its per-core limit) or, for a transfer of many short rows (bursts), a least time
  per row, whichever is longer.
  VECTOR: 256 B repeats times the cycles per repeat of the instruction's kind and element size
  (:func:`tilesim.core.vec_kinds.vec_kind`) hold the pipe, and the result comes its class's start-up delay later
  (back-to-back instructions overlap their delays, as the pipe does). SCALAR (GetValue/SetValue): a fixed cost.
  Figures per SoC family in :mod:`tilesim.cost.params`.
- **L2.** Where a launch's GM tensors fit the L2 (``SocSpec.l2_size``), its re-reads (read bytes beyond its
  inputs' bytes) come from the L2, at the L2's read bandwidth shared likewise; with ``l2_warm`` (the inputs left
  there by the previous run of the same call) every read does. Writes go to HBM (:func:`tilesim.core.timeline.l2_hit`,
  :func:`tilesim.core.timeline.mte_rates`). The share is the launch's, the same for every core.
- **Issue.** The scalar unit issues instructions in program order, ``scalar_issue_cycles`` apart, into one
  in-order queue per pipe. A scalar access stalls issue until it has finished (the value is needed).
- **Dependencies.** An instruction starts when its pipe is free, it has been issued, the last write of every
  queue slot it reads has finished (RAW), and the last write and reads of the slot it writes have finished
  (WAW, WAR); an MTE2 read of a GM tensor waits for this core's last MTE3 write to it. These are the waits the
  TQue EnQue/DeQue and FreeTensor flags insert, at queue-slot granularity. So ``buffer_num`` gives its overlap
  by itself: with one buffer, CopyIn of tile i+1 waits for Compute of tile i to free the slot (the stages add);
  with two, it fills the other slot meanwhile (steady state is the slowest stage, plus fill and drain).
- **Syncs.** A kernel on :mod:`tilesim.machine` logs its syncs, those its queue calls make included: a SetFlag
  fires when the instructions its pipe issued before it are done, results included; the WaitFlag holds its pipe
  until then, and a wait of the scalar unit holds the issue of everything after it; PipeBarrier holds its pipe
  until the pipe's earlier instructions are done (PIPE_ALL: every pipe). With one buffer, the next CopyIn so waits
  for the whole Compute of the tile before (FreeTensor's V_MTE2), not only for the instruction that read the slot.
- **Kernel time.** Each phase ends when its slowest core does; phases are separated by a SyncAll; the launch
  adds its overhead once.

Every relation above is a max or a sum of durations, so a longer transfer or one more dependency never makes the
estimate shorter, and a second buffer (fewer slot conflicts) never makes it longer.

Not modelled: a slot is free once its last reader has finished, where the NPU frees it at FreeTensor (a kernel
that frees late runs a little slower than estimated); UB bank conflicts; which bytes a re-read reads (a launch's
re-reads are counted, not located, so a kernel that reads more than its L2 holds gets no hits).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tilesim.core import timeline
from tilesim.core.pipes import LANE_MTE2, LANE_MTE3, LANE_NAMES, LANE_SCALAR, LANE_VECTOR, N_LANES
from tilesim.core.records import (
    L_AMOUNT,
    L_CLASS,
    L_GM,
    L_PIPE,
    MTE2_PAD_BYTES,
    PIPE_BARRIERS,
    VEC_BINARY,
)
from tilesim.cost.params import CostParams, cost_params
from tilesim.runtime.launch import MAX_GM_TAGS
from tilesim.runtime.report import RunReport, capture, scheduled
from tilesim.soc import get_soc


@dataclass(frozen=True)
class Stage:
    """A run of consecutive instructions of one pipe on one core (a tile's CopyIn, Compute or CopyOut): one
    timeline event, from its first instruction's start to its last one's release of the pipe (a pipe's stages
    never overlap). Times in µs from the start of the launch."""

    core: int
    phase: int
    pipe: str
    name: str
    start_us: float
    end_us: float
    instructions: int
    amount: int  # bytes (MTE2, MTE3), 256 B repeats (VECTOR), accesses (SCALAR)


@dataclass
class Estimate:
    """The estimated NPU time of one launch, and where it goes."""

    op: str
    soc: str
    block_dim: int
    total_us: float  # launch overhead + every phase + the SyncAlls between them
    phase_us: list[float]  # each phase: its slowest core
    launch_us: float
    sync_all_us: float
    core_us: np.ndarray  # [block_dim]: each core's busy span, summed over phases
    pipe_us: np.ndarray  # [block_dim, N_LANES]: time each pipe of each core is busy
    path_us: np.ndarray  # [block_dim, N_LANES]: each core's critical path, the time of it each pipe holds
    ub_used: int
    ub_size: int
    pad_bytes: int  # padding and dummy bytes DataCopyPad wrote to reach 32 B
    gm_bytes: int  # MTE2 + MTE3 bytes
    stages: list[Stage] = field(repr=False, default_factory=list)
    tiling: Any = field(repr=False, default=None)

    @property
    def slowest_core(self) -> int:
        """The core whose estimated time is the kernel's."""
        return int(np.argmax(self.core_us))

    @property
    def bottleneck(self) -> str:
        """The pipe that holds the most of the slowest core's critical path (the longest chain of instructions,
        each waiting for the one before it, that ends at the core's last result; the scalar unit's issue and its
        accesses count as SCALAR): where shortening work shortens the kernel. Not always the busiest pipe: a chain
        of vector results read by GetValue is VECTOR and SCALAR, however long the transfers beside it."""
        return LANE_NAMES[int(np.argmax(self.path_us[self.slowest_core]))]

    @property
    def imbalance(self) -> float:
        """Slowest core over the mean of the cores that ran anything (1.0: perfectly balanced)."""
        busy = self.core_us[self.core_us > 0]
        return float(busy.max() / busy.mean()) if busy.size else 1.0

    @property
    def ub_utilisation(self) -> float:
        """The share of the UB the plan places."""
        return self.ub_used / self.ub_size

    def summary(self) -> dict[str, Any]:
        """The figures of the run as plain values (for tables, CSV and JSON)."""
        c = self.slowest_core
        return {"est_us": round(self.total_us, 3), "bottleneck": self.bottleneck,
                "imbalance": round(self.imbalance, 3), "ub_util": round(self.ub_utilisation, 3),
                "pad_bytes": self.pad_bytes, "phases": len(self.phase_us),
                **{f"{p.lower()}_us": round(float(self.pipe_us[c, i]), 3) for i, p in enumerate(LANE_NAMES)}}

    def core_table(self) -> str:
        """Per core: busy span and the time each pipe is busy (µs), the slowest core marked."""
        head = f"{'core':>5} {'span':>9}" + "".join(f" {p:>9}" for p in LANE_NAMES)
        rows = [head]
        for c in range(self.block_dim):
            mark = " <- slowest" if c == self.slowest_core else ""
            rows.append(f"{c:>5} {self.core_us[c]:>9.2f}" + "".join(f" {v:>9.2f}" for v in self.pipe_us[c]) + mark)
        return "\n".join(rows)

    def __str__(self) -> str:
        c = self.slowest_core
        busy = ", ".join(f"{p} {self.pipe_us[c, i]:.2f}" for i, p in enumerate(LANE_NAMES))
        return (f"{self.op} on {self.soc}: estimated {self.total_us:.2f} µs on {self.block_dim} cores "
                f"({len(self.phase_us)} phase{'s' if len(self.phase_us) > 1 else ''}, launch {self.launch_us:.1f} µs); "
                f"slowest core {c}: {self.core_us[c]:.2f} µs, pipes busy (µs) {busy}; bottleneck {self.bottleneck}; "
                f"imbalance {self.imbalance:.2f}; UB {self.ub_used}/{self.ub_size} B ({self.ub_utilisation:.0%}); "
                f"padding {self.pad_bytes} B of {self.gm_bytes} B moved")


def _replay_log(report: RunReport, p: CostParams, stages: bool,
                l2_warm: bool) -> tuple[np.ndarray, list[tuple[int, int, np.ndarray, np.ndarray, np.ndarray]]]:
    """Schedule a recorded launch's log: ``[phases, block_dim, PHASE_WORDS]`` (each pipe's busy cycles, the core's
    span, then its critical path by pipe, per phase) and, with ``stages``, each core's phase with its instructions'
    starts and pipe releases (cycles from the phase's start)."""
    spec = get_soc(report.soc)
    hit = timeline.l2_hit(report.gm_in_bytes, report.gm_out_bytes, report.total("mte2_bytes"), spec.l2_size,
                          l2_warm)
    l2_gbs = timeline.l2_read_gbs(p, spec.ai_core_cnt)
    plan = report.ub_plan.as_array()
    base, n_slots = timeline.slot_bases(plan)
    cache = timeline.new_slot_cache()
    f = np.zeros(timeline.state_words(n_slots, MAX_GM_TAGS))
    timeline.set_params(f, p)
    ends, bd = report.phase_ends, report.block_dim
    out = np.zeros((ends.shape[0], bd, timeline.PHASE_WORDS))
    kept = []
    for ph in range(ends.shape[0]):
        lo = ends[ph - 1] if ph else np.zeros(bd, np.int64)
        parts = [report.log[c][lo[c]:ends[ph, c]] for c in range(bd)]
        moved = [np.bincount(x[:, L_PIPE], weights=x[:, L_AMOUNT], minlength=N_LANES) for x in parts]
        # a core that moved data: a sync on an MTE pipe (a SetFlag, a PresetFlag's) is logged on that pipe but moves
        # nothing, and the live schedule counts movers by their transfers (tilesim.runtime.launch.phase_rates)
        movers = sum(1 for x in parts if (((x[:, L_PIPE] == LANE_MTE2) | (x[:, L_PIPE] == LANE_MTE3))
                                          & (x[:, L_CLASS] < PIPE_BARRIERS)).any())
        for c, part in enumerate(parts):
            if part.shape[0] == 0:
                continue
            timeline.reset(f)
            f[timeline.F_RATE2], f[timeline.F_RATE3] = timeline.mte_rates(
                int(moved[c][LANE_MTE2]), int(moved[c][LANE_MTE3]), movers, p, hit, l2_gbs)
            start, free = (np.empty(part.shape[0]), np.empty(part.shape[0])) if stages else (np.empty(0),) * 2
            timeline.run(f, plan, base, cache, n_slots, MAX_GM_TAGS, part, part.shape[0], VEC_BINARY, PIPE_BARRIERS,
                         start, free)
            out[ph, c] = f[timeline.PHASE_RESULT]
            if stages:
                kept.append((c, ph, part, start, free))
    return out, kept


def _stage_name(pipe: int, gm_tags: np.ndarray, gm_names: list[str]) -> str:
    if pipe == LANE_VECTOR:
        return "Compute"
    if pipe == LANE_SCALAR:
        return "Scalar"
    names = sorted({gm_names[g] if 0 <= g < len(gm_names) else f"gm{g}" for g in gm_tags.tolist() if g >= 0})
    return ("CopyIn " if pipe == LANE_MTE2 else "CopyOut ") + ", ".join(names)


def _stages(core: int, phase: int, log: np.ndarray, start: np.ndarray, busy_end: np.ndarray, hz: float,
            gm_names: list[str]) -> list[Stage]:
    pipe = log[:, L_PIPE]
    first = np.r_[0, np.flatnonzero(np.diff(pipe)) + 1]
    last = np.r_[first[1:], pipe.size]
    t0 = np.minimum.reduceat(start, first) / hz
    t1 = np.maximum.reduceat(busy_end, first) / hz
    amount = np.add.reduceat(log[:, L_AMOUNT], first)
    gm = log[:, L_GM]
    one_tensor = np.minimum.reduceat(gm, first) == np.maximum.reduceat(gm, first)
    names: dict[tuple[int, int], str] = {}
    out = []
    for k, (a, b) in enumerate(zip(first.tolist(), last.tolist(), strict=True)):
        p = int(pipe[a])
        key = (p, int(gm[a])) if one_tensor[k] else None
        name = names.get(key) if key else None
        if name is None:
            name = _stage_name(p, gm[a:b], gm_names)
            if key:
                names[key] = name
        out.append(Stage(core, phase, LANE_NAMES[p], name, float(t0[k]), float(t1[k]), b - a, int(amount[k])))
    return out


def estimate(report: RunReport, params: CostParams | None = None, stages: bool = True,
             l2_warm: bool = False) -> Estimate:
    """The estimated NPU time of one launch, recorded (``tilesim.recorded``: its log is scheduled now, with
    ``params``, the SoC family's figures by default; ``stages`` keeps each core's CopyIn/Compute/CopyOut for a
    trace) or scheduled while it ran (:func:`estimated`: with its SoC's figures, and no stages). ``l2_warm``: the
    launch's inputs are in the L2 from the previous run of the call (where its GM tensors fit the L2)."""
    spec = get_soc(report.soc)
    p = cost_params(spec) if params is None else params
    kept: list[tuple[int, int, np.ndarray, np.ndarray, np.ndarray]] = []
    if report.log is not None:
        phases, kept = _replay_log(report, p, stages, l2_warm)
    elif report.schedule is not None:
        if p != report.schedule_params or l2_warm != report.schedule_l2_warm:
            raise ValueError(f"{report.op}: the launch was scheduled while it ran with {report.schedule_params.family}"
                             f"'s figures and l2_warm={report.schedule_l2_warm}; other figures or another L2 need "
                             f"its instruction log (tilesim.recorded)")
        phases = report.schedule
    else:
        raise ValueError(f"{report.op}: the report has no instruction log; run the op under tilesim.recorded(...) "
                         f"or tilesim.capture(log=True), or estimate it with tilesim.cost.model.estimated(...)")
    hz = p.clock_ghz * 1e3  # cycles per µs
    spans = phases[:, :, N_LANES]
    starts = np.empty(len(phases))  # each phase's start, from the launch's
    t = p.launch_us * hz
    for ph in range(len(phases)):
        starts[ph] = t
        t += max(0.0, float(spans[ph].max(initial=0.0))) + (p.sync_all_us * hz if ph + 1 < len(phases) else 0.0)
    phase_us = [max(0.0, float(s.max(initial=0.0))) / hz for s in spans]
    all_stages: list[Stage] = []
    for c, ph, part, start, free in kept:
        all_stages += _stages(c, ph, part, starts[ph] + start, starts[ph] + free, hz, report.gm_names)
    counters = report.counters
    gm_bytes = int(report.total("mte2_bytes") + report.total("mte3_bytes"))
    return Estimate(op=report.op, soc=report.soc, block_dim=report.block_dim, total_us=t / hz, phase_us=phase_us,
                    launch_us=p.launch_us, sync_all_us=p.sync_all_us, core_us=spans.sum(axis=0) / hz,
                    pipe_us=phases[:, :, :N_LANES].sum(axis=0) / hz,
                    path_us=phases[:, :, N_LANES + 1:].sum(axis=0) / hz, ub_used=report.ub_plan.used,
                    ub_size=spec.ub_size, pad_bytes=int(counters[:, MTE2_PAD_BYTES].sum()), gm_bytes=gm_bytes,
                    stages=all_stages, tiling=report.tiling)


def estimate_all(reports: list[RunReport], params: CostParams | None = None, stages: bool = True,
                 l2_warm: bool = False) -> list[Estimate]:
    """One estimate per recorded launch (an op call that launches more than one kernel has more than one)."""
    return [estimate(r, params, stages, l2_warm) for r in reports]


def estimated(call: Callable[[], Any], fast: Sequence[RunReport] | None = None,
              l2_warm: bool = False) -> tuple[Any, list[Estimate]]:
    """``call()``'s result and the estimated NPU time of each of its launches, scheduled while the call runs (no
    instruction log: memory does not grow with the instructions; the scheduled run costs a little more than a fast
    one, up to about twice it for tilings of many tiny instructions).
    The model needs each phase's MTE bytes before it schedules the phase: ``fast`` are the reports of the same call
    made under :func:`tilesim.capture` (the explorer times that run); without them the call runs once more first.
    No stages: a trace needs the log of :func:`tilesim.recorded`. ``l2_warm``: as for :func:`estimate`."""
    if fast is None:
        with capture() as fast:
            call()
    with scheduled(fast, cost_params, l2_warm) as runs:
        out = call()
    return out, estimate_all(runs, stages=False, l2_warm=l2_warm)


def total_us(estimates: list[Estimate]) -> float:
    """The estimated time of an op call: its launches run one after the other."""
    return sum(e.total_us for e in estimates)
