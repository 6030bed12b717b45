"""The NPU cost model: estimated AI Core time of a launch, scheduled from the instructions the emulation recorded.

Input is a recorded :class:`~tilesim.launch.RunReport` (``tilesim.recorded(...)`` or ``capture(log=True)``): per
core, every DataCopy, vector instruction and scalar access in issue order, with its bytes or 256 B repeats and
the UB queue slots it writes and reads. Nothing here knows an op's formulas.

The model, per core and per SyncAll phase:

- **Durations.** MTE2/MTE3: a GM latency, a cost per further row (burst), and the bytes over the core's
  share of GM bandwidth: the chip's GM bandwidth over the cores moving data in the phase, split between the
  core's MTE2 and MTE3 in proportion to the bytes each moves, each within its per-core limit.
  VECTOR: 256 B repeats times the class's cycles per repeat hold the pipe, and the result comes a start-up
  delay later (back-to-back instructions overlap their delays, as the pipe does). SCALAR (GetValue/SetValue):
  a fixed cost. Figures per SoC family in :mod:`tilesim.cost_params`.
- **Issue.** The scalar unit issues instructions in program order, ``scalar_issue_cycles`` apart, into one
  in-order queue per pipe. A scalar access stalls issue until it has finished (the value is needed).
- **Dependencies.** An instruction starts when its pipe is free, it has been issued, the last write of every
  queue slot it reads has finished (RAW), and the last write and reads of the slot it writes have finished
  (WAW, WAR); an MTE2 read of a GM tensor waits for this core's last MTE3 write to it. These are the waits the
  TQue EnQue/DeQue and FreeTensor flags insert, at queue-slot granularity. So ``buffer_num`` gives its overlap
  by itself: with one buffer, CopyIn of tile i+1 waits for Compute of tile i to free the slot (the stages add);
  with two, it fills the other slot meanwhile (steady state is the slowest stage, plus fill and drain).
- **Kernel time.** Each phase ends when its slowest core does; phases are separated by a SyncAll; the launch
  adds its overhead once.

Every relation above is a max or a sum of durations, so a longer transfer or one more dependency never makes the
estimate shorter, and a second buffer (fewer slot conflicts) never makes it longer.

Not modelled: a slot is free once its last reader has finished, where the NPU frees it at FreeTensor (a kernel
that frees late runs a little slower than estimated); UB bank conflicts; L2 hits (every GM byte costs GM
bandwidth); dtype-dependent vector throughput.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .cost_params import VEC_CLASSES, CostParams, cost_params
from .device import (
    L_AMOUNT,
    L_BURSTS,
    L_CLASS,
    L_GM,
    L_PIPE,
    L_READ0,
    L_READ1,
    L_WRITE,
    MTE2_PAD_BYTES,
    PIPE_MTE2,
    PIPE_MTE3,
    PIPE_NAMES,
    PIPE_SCALAR,
    PIPE_VECTOR,
    VEC_BINARY,
)
from .jit import njit
from .launch import RunReport
from .soc import get_soc

N_PIPES = len(PIPE_NAMES)


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
    pipe_us: np.ndarray  # [block_dim, N_PIPES]: time each pipe of each core is busy
    ub_used: int
    ub_size: int
    pad_bytes: int  # zero fill DataCopyPad wrote to reach 32 B
    gm_bytes: int  # MTE2 + MTE3 bytes
    stages: list[Stage] = field(repr=False, default_factory=list)
    tiling: Any = field(repr=False, default=None)

    @property
    def slowest_core(self) -> int:
        return int(np.argmax(self.core_us))

    @property
    def bottleneck(self) -> str:
        """The pipe busiest on the slowest core: where shortening work shortens the kernel."""
        return PIPE_NAMES[int(np.argmax(self.pipe_us[self.slowest_core]))]

    @property
    def imbalance(self) -> float:
        """Slowest core over the mean of the cores that ran anything (1.0: perfectly balanced)."""
        busy = self.core_us[self.core_us > 0]
        return float(busy.max() / busy.mean()) if busy.size else 1.0

    @property
    def ub_utilisation(self) -> float:
        return self.ub_used / self.ub_size

    def summary(self) -> dict[str, Any]:
        """The figures of the run as plain values (for tables, CSV and JSON)."""
        c = self.slowest_core
        return {"est_us": round(self.total_us, 3), "bottleneck": self.bottleneck,
                "imbalance": round(self.imbalance, 3), "ub_util": round(self.ub_utilisation, 3),
                "pad_bytes": self.pad_bytes, "phases": len(self.phase_us),
                **{f"{p.lower()}_us": round(float(self.pipe_us[c, i]), 3) for i, p in enumerate(PIPE_NAMES)}}

    def core_table(self) -> str:
        """Per core: busy span and the time each pipe is busy (µs), the slowest core marked."""
        head = f"{'core':>5} {'span':>9}" + "".join(f" {p:>9}" for p in PIPE_NAMES)
        rows = [head]
        for c in range(self.block_dim):
            mark = " <- slowest" if c == self.slowest_core else ""
            rows.append(f"{c:>5} {self.core_us[c]:>9.2f}" + "".join(f" {v:>9.2f}" for v in self.pipe_us[c]) + mark)
        return "\n".join(rows)

    def __str__(self) -> str:
        c = self.slowest_core
        busy = ", ".join(f"{p} {self.pipe_us[c, i]:.2f}" for i, p in enumerate(PIPE_NAMES))
        return (f"{self.op} on {self.soc}: estimated {self.total_us:.2f} µs on {self.block_dim} cores "
                f"({len(self.phase_us)} phase{'s' if len(self.phase_us) > 1 else ''}, launch {self.launch_us:.1f} µs); "
                f"slowest core {c}: {self.core_us[c]:.2f} µs, pipes busy (µs) {busy}; bottleneck {self.bottleneck}; "
                f"imbalance {self.imbalance:.2f}; UB {self.ub_used}/{self.ub_size} B ({self.ub_utilisation:.0%}); "
                f"padding {self.pad_bytes} B of {self.gm_bytes} B moved")


def durations(log: np.ndarray, p: CostParams, mte_gbs: float) -> tuple[np.ndarray, np.ndarray]:
    """``(occupancy, latency)`` in cycles of each logged instruction, with ``mte_gbs`` the core's share of GM
    bandwidth: how long it keeps its pipe from taking the next instruction, and how long until its result is
    there. They differ for vector instructions only: the next one issues once the repeats of this one have
    entered the pipe, and the start-up delay shows only to an instruction that waits for the result."""
    pipe, cls, amount = log[:, L_PIPE], log[:, L_CLASS], log[:, L_AMOUNT].astype(np.float64)
    vec_col = np.clip(cls - VEC_BINARY, 0, len(VEC_CLASSES) - 1)
    per_repeat = np.array([p.vec_repeat_cycles[c] for c in VEC_CLASSES])[vec_col]
    startup = np.array([p.vec_startup_cycles[c] for c in VEC_CLASSES])[vec_col]
    latency = np.where(pipe == PIPE_MTE2, p.mte2_latency_cycles, p.mte3_latency_cycles)
    mte = latency + (log[:, L_BURSTS] - 1).clip(0) * p.mte_burst_cycles + amount / mte_gbs * p.clock_ghz
    vec = amount * per_repeat
    occupancy = np.where(pipe == PIPE_VECTOR, vec, np.where(pipe == PIPE_SCALAR, p.get_value_cycles, mte))
    return occupancy, occupancy + np.where(pipe == PIPE_VECTOR, startup, 0.0)


def _timed(part: np.ndarray, p: CostParams, share: float) -> tuple[np.ndarray, np.ndarray]:
    """:func:`durations` of one core's phase, its GM share ``share`` (GB/s) split between MTE2 and MTE3 in
    proportion to the bytes each moves (they draw on the same GM bandwidth), each within its per-core limit."""
    pipe, amount = part[:, L_PIPE], part[:, L_AMOUNT]
    b2, b3 = int(amount[pipe == PIPE_MTE2].sum()), int(amount[pipe == PIPE_MTE3].sum())
    moved = max(b2 + b3, 1)
    occ, lat = durations(part, p, min(p.mte2_core_gbs, share * max(b2, 1) / moved))
    out = pipe == PIPE_MTE3
    if out.any():
        occ[out], lat[out] = durations(part[out], p, min(p.mte3_core_gbs, share * max(b3, 1) / moved))
    return occ, lat


def _slots(refs: np.ndarray, plan: np.ndarray) -> np.ndarray:
    """The queue slot each logged UB tensor (``buffer << 32 | address``) lies in, as ``buffer * 2**32 + slot``:
    the unit the TQue flags synchronise on (-1 stays -1)."""
    buf = np.where(refs < 0, 0, refs >> 32)
    addr = refs & 0xFFFFFFFF
    k = (addr - plan[buf, 0]) // np.maximum(plan[buf, 1], 1)
    return np.where(refs < 0, -1, (buf << 32) + k)


def _dense(ids: np.ndarray) -> tuple[np.ndarray, int]:
    """Slot or tensor ids renumbered 0..k-1 (-1 stays -1), for the scheduler's tables."""
    flat = ids.reshape(-1)
    uniq, inv = np.unique(flat, return_inverse=True)
    out = inv.astype(np.int64)
    if uniq.size and uniq[0] == -1:
        out -= 1
        return out.reshape(ids.shape), uniq.size - 1
    return out.reshape(ids.shape), uniq.size


@njit(cache=True, host=True)
def schedule(pipe, write, read0, read1, gm, occ, lat, t0, issue, n_slots, n_gm):
    """Start and end cycle of each instruction of one core's phase (see the module docstring), from ``t0``:
    instruction i holds its pipe for ``occ[i]`` cycles and has its result ``lat[i]`` cycles after it starts."""
    n = pipe.size
    start = np.empty(n)
    end = np.empty(n)
    pipe_free = np.full(4, t0)
    w_end = np.full(max(n_slots, 1), t0)
    r_end = np.full(max(n_slots, 1), t0)
    gm_w = np.full(max(n_gm, 1), t0)
    issued = t0
    for i in range(n):
        issued += issue
        t = max(issued, pipe_free[pipe[i]])
        for r in (read0[i], read1[i]):
            if r >= 0:
                t = max(t, w_end[r])
        w = write[i]
        if w >= 0:
            t = max(t, max(w_end[w], r_end[w]))
        g = gm[i]
        if g >= 0 and pipe[i] == PIPE_MTE2:
            t = max(t, gm_w[g])
        e = t + lat[i]
        start[i] = t
        end[i] = e
        pipe_free[pipe[i]] = t + occ[i]
        for r in (read0[i], read1[i]):
            if r >= 0:
                r_end[r] = max(r_end[r], e)
        if w >= 0:
            w_end[w] = e
            r_end[w] = e
        if g >= 0 and pipe[i] == PIPE_MTE3:
            gm_w[g] = e
        if pipe[i] == PIPE_SCALAR:
            issued = e
    return start, end


def _stage_name(pipe: int, gm_tags: np.ndarray, gm_names: list[str]) -> str:
    if pipe == PIPE_VECTOR:
        return "Compute"
    if pipe == PIPE_SCALAR:
        return "Scalar"
    names = sorted({gm_names[g] if 0 <= g < len(gm_names) else f"gm{g}" for g in gm_tags.tolist() if g >= 0})
    return ("CopyIn " if pipe == PIPE_MTE2 else "CopyOut ") + ", ".join(names)


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
        out.append(Stage(core, phase, PIPE_NAMES[p], name, float(t0[k]), float(t1[k]), b - a, int(amount[k])))
    return out


def estimate(report: RunReport, params: CostParams | None = None, stages: bool = True) -> Estimate:
    """The estimated NPU time of one recorded launch (``params``: the SoC family's figures by default)."""
    if report.log is None:
        raise ValueError(f"{report.op}: the report has no instruction log; run the op under tilesim.recorded(...) "
                         f"or tilesim.capture(log=True)")
    spec = get_soc(report.soc)
    p = cost_params(spec) if params is None else params
    hz = p.clock_ghz * 1e3  # cycles per µs
    bd = report.block_dim
    logs = report.log
    ends = report.phase_ends
    plan = report.ub_plan.as_array()
    pipe_cyc = np.zeros((bd, N_PIPES))
    core_cyc = np.zeros(bd)
    phase_us: list[float] = []
    all_stages: list[Stage] = []
    t0 = p.launch_us * hz
    for ph in range(ends.shape[0]):
        lo = ends[ph - 1] if ph else np.zeros(bd, np.int64)
        hi = ends[ph]
        parts = [logs[c][lo[c]:hi[c]] for c in range(bd)]
        movers = sum(1 for x in parts if ((x[:, L_PIPE] == PIPE_MTE2) | (x[:, L_PIPE] == PIPE_MTE3)).any())
        share = p.gm_bandwidth_gbs / max(movers, 1)
        phase_end = t0
        for c, part in enumerate(parts):
            if part.shape[0] == 0:
                continue
            occ, lat = _timed(part, p, share)
            slots, n_slots = _dense(_slots(part[:, [L_WRITE, L_READ0, L_READ1]], plan))
            gm, n_gm = _dense(part[:, L_GM])
            start, end = schedule(part[:, L_PIPE], slots[:, 0], slots[:, 1], slots[:, 2], gm, occ, lat, t0,
                                  p.scalar_issue_cycles, n_slots, n_gm)
            phase_end = max(phase_end, float(end.max()))
            core_cyc[c] += float(end.max()) - t0
            np.add.at(pipe_cyc[c], part[:, L_PIPE], occ)
            if stages:
                all_stages += _stages(c, ph, part, start, start + occ, hz, report.gm_names)
        phase_us.append((phase_end - t0) / hz)
        t0 = phase_end + (p.sync_all_us * hz if ph + 1 < ends.shape[0] else 0.0)
    total = t0 / hz
    counters = report.counters
    gm_bytes = int(report.total("mte2_bytes") + report.total("mte3_bytes"))
    return Estimate(op=report.op, soc=report.soc, block_dim=bd, total_us=total, phase_us=phase_us,
                    launch_us=p.launch_us, sync_all_us=p.sync_all_us, core_us=core_cyc / hz, pipe_us=pipe_cyc / hz,
                    ub_used=report.ub_plan.used, ub_size=spec.ub_size,
                    pad_bytes=int(counters[:, MTE2_PAD_BYTES].sum()), gm_bytes=gm_bytes, stages=all_stages,
                    tiling=report.tiling)


def estimate_all(reports: list[RunReport], params: CostParams | None = None,
                 stages: bool = True) -> list[Estimate]:
    """One estimate per recorded launch (an op call that launches more than one kernel has more than one)."""
    return [estimate(r, params, stages) for r in reports]


def total_us(estimates: list[Estimate]) -> float:
    """The estimated time of an op call: its launches run one after the other."""
    return sum(e.total_us for e in estimates)
