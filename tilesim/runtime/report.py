"""A launch's report (:class:`RunReport`), and the scopes in which launches report and record: :func:`capture`,
:func:`scheduled`, :func:`recorded`.

A scope belongs to the thread that opens it: the launches that thread starts inside the block (the op calls it
makes) see it; launches on other threads do not. A launch reads its scope once, when it starts
(:class:`tilesim.runtime.launch.Launch`).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from tilesim.core.records import COUNTER_NAMES
from tilesim.core.ub import UbPlan

if TYPE_CHECKING:  # the cost model hands its figures to the launches it schedules; the runtime imports none of it
    from tilesim.cost.params import CostParams
    from tilesim.soc import SocSpec


@dataclass
class RunReport:
    """One kernel launch: its tiling, UB plan (with offsets), per-core counters, wall time; when recorded
    (``capture(log=True)``), every core's instruction log (``tilesim.core.records`` L_* fields) and where each SyncAll
    phase ends in it."""

    op: str
    soc: str
    tiling: Any
    ub_plan: UbPlan
    block_dim: int
    counters: np.ndarray  # [block_dim, N_COUNTERS]
    workspace_size: int
    checks: bool
    wall_s: float
    gm_names: list[str] = field(default_factory=list)
    gm_in_bytes: int = 0  # the GM inputs' bytes (the workspace aside)
    gm_out_bytes: int = 0  # the GM outputs' bytes
    log: list[np.ndarray] | None = None  # per core: [instructions, LOG_FIELDS]
    phase_ends: np.ndarray | None = None  # [phases, block_dim]: each core's log length at the end of each phase
    log_needed: int = 0  # when the log did not fit: the room per core a rerun needs
    # captured: [run_cores calls, block_dim, N_COUNTERS], the counters at the end of each run_cores
    phase_counters: np.ndarray | None = None
    # scheduled while it ran (:func:`scheduled`): [phases, block_dim, PHASE_WORDS] cycles, each pipe's busy time,
    # the core's span, then the span's critical path by pipe, per phase (tilesim.core.timeline), and the figures it was
    # scheduled with
    schedule: np.ndarray | None = None
    schedule_params: CostParams | None = None
    schedule_l2_warm: bool = False

    def counter(self, name: str) -> np.ndarray:
        """Per-core values of one counter (see ``tilesim.core.records.COUNTER_NAMES``)."""
        return self.counters[:, COUNTER_NAMES.index(name)]

    def total(self, name: str) -> int:
        """One counter summed over the cores."""
        return int(self.counter(name).sum())

    def __str__(self) -> str:
        t = self.tiling
        lines = [f"{self.op} on {self.soc}: block_dim {self.block_dim}, tiling_key {getattr(t, 'tiling_key', '-')}, "
                 f"workspace {self.workspace_size} B, checks {'on' if self.checks else 'off'}, "
                 f"wall {self.wall_s * 1e3:.2f} ms",
                 "UB plan:", self.ub_plan.table(), "counters (total / max core):"]
        for i, n in enumerate(COUNTER_NAMES):
            col = self.counters[:, i]
            if col.any():
                lines.append(f"  {n:<16}{int(col.sum()):>14}{int(col.max()):>14}")
        return "\n".join(lines)


class _Scope(threading.local):
    """The calling thread's scopes: the report lists of the :func:`capture` blocks it is in, whether one of them
    asked for logs, and inside :func:`scheduled` the fast reports of the launches to come, the cost model's figures and
    whether the inputs are warm in the L2. The class attributes are every thread's defaults: a missing attribute of a
    plain threading.local costs an AttributeError (about a microsecond) per look-up."""

    sinks: list[list[RunReport]] = []  # never mutated: capture assigns a new list
    log = False
    schedule: deque[RunReport] | None = None
    params_of: Callable[[SocSpec], CostParams] | None = None
    l2_warm = False


_scope = _Scope()


def sinks() -> list[list[RunReport]]:
    """The report lists of the :func:`capture` blocks the calling thread is in (innermost last)."""
    return _scope.sinks


def logging() -> bool:
    """Whether the calling thread is inside a ``capture(log=True)``: its launches record instruction logs."""
    return _scope.log


def scheduling() -> bool:
    """Whether the calling thread is inside :func:`scheduled`: its launches schedule themselves while they run."""
    return _scope.schedule is not None


def schedule_params(soc: SocSpec) -> CostParams:
    """Inside :func:`scheduled`: the cost model's figures for ``soc``."""
    assert _scope.params_of is not None, "schedule_params outside tilesim.runtime.report.scheduled"
    return _scope.params_of(soc)


def l2_warm() -> bool:
    """Inside :func:`scheduled`: whether each launch's inputs are in the L2 from the previous run of the call."""
    return _scope.l2_warm


def next_fast_report(op: str, block_dim: int) -> RunReport:
    """Inside :func:`scheduled`: the fast report of the next launch, which must be this one's (``op`` on
    ``block_dim`` cores)."""
    queue = _scope.schedule
    if not queue:
        raise RuntimeError(f"{op}: this call launches more kernels than the fast run it is scheduled by")
    fast = queue.popleft()
    if fast.op != op or fast.block_dim != block_dim or fast.phase_counters is None:
        raise RuntimeError(f"{op} on {block_dim} cores: the fast run's launch here was {fast.op} on "
                           f"{fast.block_dim} cores{'' if fast.phase_counters is not None else ', not captured'}: "
                           f"a scheduled call must launch exactly as the captured one did")
    return fast


@contextmanager
def capture(log: bool = False) -> Iterator[list[RunReport]]:
    """Collect the :class:`RunReport` of every launch in the block: ``with tilesim.capture() as runs: ...``.
    With ``log=True`` the launches record their instruction logs, which the cost model needs (see
    :func:`recorded`: a log that did not fit is reported, not cut short)."""
    runs: list[RunReport] = []
    _scope.sinks = sinks() + [runs]
    prev = logging()
    _scope.log = prev or log
    try:
        yield runs
    finally:
        _scope.sinks = [s for s in sinks() if s is not runs]
        _scope.log = prev


@contextmanager
def scheduled(fast: Sequence[RunReport], params_of: Callable[[SocSpec], CostParams],
              l2_warm: bool = False) -> Iterator[list[RunReport]]:
    """Collect the reports of the launches in the block (as :func:`capture`), each of which schedules itself on
    the cost model while it runs, instruction by instruction, without a log, with the figures ``params_of`` gives for
    its SoC (the cost model hands them: ``tilesim.cost.model.estimated``, which turns the reports into estimates, passes
    :func:`tilesim.cost.params.cost_params`). The k-th launch takes its phases' MTE bytes from the k-th report of
    ``fast``, a :func:`capture` of the same call (the model shares GM bandwidth by the bytes each core moves in a phase,
    which must be known before the phase is scheduled). ``l2_warm``: each launch's inputs are in the L2 from the
    previous run of the call (:func:`tilesim.core.timeline.l2_hit`). A launch that logs (checked mode,
    :func:`recorded`) is left to its log."""
    prev = _scope.schedule, _scope.params_of, _scope.l2_warm
    _scope.schedule, _scope.params_of, _scope.l2_warm = deque(fast), params_of, l2_warm
    try:
        with capture() as runs:
            yield runs
    finally:
        _scope.schedule, _scope.params_of, _scope.l2_warm = prev


def recorded(call: Callable[[], Any]) -> tuple[Any, list[RunReport]]:
    """``call()``'s result and the recorded reports of its launches, complete: a launch whose log outgrew the
    room made for it is run again with the room it turned out to need (the op remembers it)."""
    for _ in range(3):
        with capture(log=True) as runs:
            out = call()
        if all(r.log is not None for r in runs):
            return out, runs
    raise RuntimeError(f"instruction logs of {[r.op for r in runs if r.log is None]} did not fit after 3 tries")
