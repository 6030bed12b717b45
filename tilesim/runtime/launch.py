"""Host side of one kernel launch: its records (per-core UB arenas, counters, error rows, the instruction log or the
live schedule), where it writes its outputs, and its end: the report, the violations found, the race check.

:func:`tilesim.runtime.launcher.launch` calls :func:`prepare`, runs the loop over cores it generated for the kernel
on the host threads (:mod:`tilesim.runtime.host_threads`), ending each SyncAll phase with :meth:`Launch.end_phase`,
then calls :func:`finish`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from tilesim.checks import races, violations
from tilesim.core import timeline
from tilesim.core.records import (
    CHECKED_BUILD,
    FAST_BUILD,
    LOG_COUNT,
    LOG_FIELDS,
    MTE2_BYTES,
    MTE2_XFERS,
    MTE3_BYTES,
    MTE3_XFERS,
    N_COUNTERS,
    REC_AT,
    REC_MODE,
    REC_SCHEDULE,
    SCHED_BASE,
    SCHED_CACHE,
    SCHED_GMS,
    SCHED_QUEUE,
    SCHED_SLOTS,
    SHADOW_COL,
    UNWRITTEN,
    err_width,
    schedule_queue,
)
from tilesim.core.ub import UbPlan
from tilesim.errors import CheckError
from tilesim.jit import njit
from tilesim.runtime import interrupt, report
from tilesim.runtime.host_threads import page_aligned, scratch
from tilesim.runtime.report import RunReport
from tilesim.soc import SocSpec

if TYPE_CHECKING:  # the figures come from the cost model, through report.scheduled
    from tilesim.cost.params import CostParams

_POISON = 0xFF  # never-written UB reads as NaN (fp32 and b16), as stale UB would read as garbage


class _Arenas(threading.local):
    """Each host thread's UB arenas: a launch runs on the thread that calls it and owns its arenas while it runs,
    so that launches from several Python threads at once share nothing they write. (Class attributes as the
    defaults: a missing attribute of a plain threading.local costs an AttributeError per look-up.)"""

    by_ub_size: dict[int, np.ndarray] | None = None  # see arena
    ub_views: dict[tuple[int, int, int, int], np.ndarray] | None = None  # the pool threads' UBs: see thread_ub


_arenas = _Arenas()
_lock = threading.Lock()


def arena(soc: SocSpec, block_dim: int) -> np.ndarray:
    """The calling thread's per-core UB arenas, ``[block_dim, ub_size]`` uint8, kept across its launches like the
    real UB (in a fast launch with :attr:`Launch.phase_local_ub`, row k·(rows // threads) is host thread k's UB
    instead). A guard row follows the last one, so that a fast-mode kernel overrunning its UB (what checked mode
    reports) corrupts emulated memory, as on the NPU, rather than the host process's."""
    arenas = _arenas.by_ub_size
    if arenas is None:
        arenas = _arenas.by_ub_size = {}
    a = arenas.get(soc.ub_size)
    if a is None or a.shape[0] < block_dim + 1:
        _arenas.ub_views = None  # they keep the old arena alive
        a = page_aligned((max(block_dim, soc.core_num_aiv) + 1, soc.ub_size), np.uint8, _POISON)
        arenas[soc.ub_size] = a
    return a


@dataclass
class Launch:
    """What one launch needs on the host, and what it reports afterwards."""

    op: str
    soc: SocSpec
    tiling: Any
    plan: UbPlan
    block_dim: int
    checks: bool
    gm_names: list[str]
    # No core reads UB it wrote in an earlier phase or launch (every phase loads what it computes on). A launch
    # of the fast build then gives each host thread one UB for all the cores it runs (:func:`run_cores`): a small
    # call's cores stay in the host's L2 instead of each touching a UB of its own. The checked build keeps a UB
    # per core (a recording launch too: one compile of its core loop serves both); a checked launch holds the
    # kernel to the promise: each phase starts with its UB shadow unwritten, so that such a read is reported as a
    # read of UB never written.
    phase_local_ub: bool = False
    gm_bytes: tuple[int, int] = (0, 0)  # bytes of the GM inputs and of the outputs (the cost model's L2)
    stop_at: int = 0  # the address of its stop word (tilesim.runtime.interrupt), which the launcher gives the cores
    arena: np.ndarray = field(init=False)
    plan_array: np.ndarray = field(init=False)
    counters: np.ndarray = field(init=False)
    err: np.ndarray = field(init=False)
    t0: float = field(init=False)
    log_room: int = field(init=False)  # instructions per core the log holds; 0 when not logging
    recording: bool = field(init=False)  # the cores count their instructions: a log or a schedule follows
    phase_ends: list[np.ndarray] = field(init=False)  # per SyncAll phase: each core's instruction count at its end
    err_ends: list[np.ndarray] = field(init=False)  # per SyncAll phase: each core's violations found by its end
    # Under capture(): the counters at the end of every run_cores (a phase or not), for a launch that schedules
    # itself later (:func:`scheduled`) to know each phase's MTE bytes before it runs
    snapshots: list[np.ndarray] | None = field(init=False)
    # A launch that schedules itself: each core's cost-model state (a view into its counter row), its figures,
    # each run_cores' MTE rates per core (from the fast run's snapshots), the phases' spans and pipe times so far
    state: np.ndarray | None = field(init=False)
    params: CostParams | None = field(init=False)
    l2_warm: bool = field(init=False)
    rates: np.ndarray | None = field(init=False)
    schedule: list[np.ndarray] = field(init=False)
    calls: int = field(init=False)

    def __post_init__(self) -> None:
        self.arena = arena(self.soc, self.block_dim)
        self.plan_array = self.plan.as_array()
        self.phase_ends, self.err_ends, self.schedule = [], [], []
        self.snapshots = [] if report.sinks() else None
        self.state = self.params = self.rates = None
        self.l2_warm = False
        self.calls = 0
        # checked mode logs too: its race check reads the GM accesses, its reports name instructions
        self.log_room = _log_room.get(_room_key(self), LOG_ROOM) if (report.logging() or self.checks) else 0
        if self.log_room:  # megabytes of log: this thread's buffer, reused (a fresh one page-faults on every 4 KiB
            # the cores log into, which cost more than the kernel); the counters, the instruction counts and the
            # mode (REC_LOG) start at 0, and no entry past a core's count is read
            self.counters = scratch("log", (self.block_dim, REC_AT + self.log_room * LOG_FIELDS), np.int64)
            self.counters[:, :REC_AT] = 0
        elif report.scheduling():
            self._schedule_like(report.next_fast_report(self.op, self.block_dim))
        else:
            self.counters = np.zeros((self.block_dim, N_COUNTERS), np.int64)
        self.recording = self.counters.shape[1] > N_COUNTERS
        shape = (self.block_dim, err_width(self.checks, self.soc.ub_size))  # checked mode: the UB shadow too
        # only the shadow's passes gain from the page; fast mode's few columns would pay for aligning them every launch
        self.err = page_aligned(shape, np.int64, 0) if self.checks else np.zeros(shape, np.int64)
        self.t0 = time.perf_counter()

    def _schedule_like(self, fast: RunReport) -> None:
        """Schedule this launch while it runs, with the MTE rates of each phase worked out from ``fast``'s
        snapshots (the same launch run before under :func:`capture`): the counter rows get each core's state. A
        kernel whose TPipe places its buffers as it runs (:func:`tilesim.runtime.launcher.launch`) has no plan before it
        runs: it takes ``fast``'s."""
        if not self.plan.buffers:
            self.plan, self.plan_array = fast.ub_plan, fast.ub_plan.as_array()
        base, n_slots = timeline.slot_bases(self.plan_array)
        head = REC_AT + SCHED_BASE + len(base)
        queue = head + timeline.state_words(n_slots, MAX_GM_TAGS)
        self.counters = np.zeros((self.block_dim, queue + timeline.QUEUE * timeline.LOG_FIELDS), np.int64)
        self.counters[:, REC_MODE] = REC_SCHEDULE
        self.counters[:, REC_AT + SCHED_SLOTS] = n_slots
        self.counters[:, REC_AT + SCHED_GMS] = MAX_GM_TAGS
        self.counters[:, REC_AT + SCHED_QUEUE] = queue
        self.counters[:, REC_AT + SCHED_CACHE:REC_AT + SCHED_BASE] = timeline.new_slot_cache()
        self.counters[:, REC_AT + SCHED_BASE:head] = base
        self.state = self.counters[:, head:queue].view(np.float64)
        self.params = report.schedule_params(self.soc)
        timeline.set_params(self.state[0], self.params)
        self.state[1:, timeline.F_LAT2:timeline.F_TABLES] = self.state[0, timeline.F_LAT2:timeline.F_TABLES]
        hit = timeline.l2_hit(fast.gm_in_bytes, fast.gm_out_bytes, fast.total("mte2_bytes"), self.soc.l2_size,
                              report.l2_warm())
        self.l2_warm = report.l2_warm()
        self.rates = phase_rates(fast.phase_counters, self.params, hit,
                                 timeline.l2_read_gbs(self.params, self.soc.ai_core_cnt))
        self._set_rates()

    def _set_rates(self) -> None:
        if self.calls < len(self.rates):
            self.state[:, timeline.F_RATE2] = self.rates[self.calls, :, 0]
            self.state[:, timeline.F_RATE3] = self.rates[self.calls, :, 1]

    @property
    def core_checks(self) -> bool | None:
        """What the core loop hands each core's context (:func:`tilesim.runtime.launcher.enter_core`), which selects the
        build the kernel runs (:func:`tilesim.core.records.checks_field`): None for the fast build, which neither checks
        nor records; else the checked build, with its checks on in checked mode (True) and off in a launch that
        only records (False: a log, or its own schedule)."""
        return None if self.build == FAST_BUILD else bool(self.checks)

    @property
    def build(self) -> str:
        """The name of the build the launch runs (:func:`tilesim.core.records.build_of`'s names)."""
        return CHECKED_BUILD if self.checks or self.recording else FAST_BUILD

    def thread_ub(self, k: int, n: int) -> np.ndarray:
        """Host thread k's (of n) UB in a fast launch with :attr:`phase_local_ub`: one arena row, seen by every core
        (a view with row stride 0). The threads' rows are spread over the arena, so that (with two rows or more
        per thread) a core overrunning its UB writes into rows no thread uses, not into another thread's UB."""
        a = self.arena
        key = (id(a), self.block_dim, k, n)  # a cached view keeps its arena, so the id is not reused meanwhile
        views = _arenas.ub_views
        if views is None:
            views = _arenas.ub_views = {}
        view = views.get(key)
        if view is None:  # as_strided costs more than a small core's work; two rows at least: a (1, ub) view would
            # be C-contiguous, to Numba another array type and so another compile of the kernel
            view = views[key] = np.lib.stride_tricks.as_strided(a[k * (a.shape[0] // n)],
                                                                 (max(self.block_dim, 2), a.shape[1]), (0, 1))
        return view

    def end_phase(self) -> None:
        """SyncAll: note where each core's instruction count and violations stand (when recording, a phase in
        which no core issued or failed anything is no phase: a host helper's run_cores between phases); a launch
        that schedules itself keeps each core's span and pipe times and starts the next phase's timeline."""
        ends = self.counters[:, LOG_COUNT].copy() if self.recording else None
        errs = self.err[:, 0].copy()
        if self.snapshots is not None:
            self.snapshots.append(self.counters[:, :N_COUNTERS].copy())
        if self.phase_local_ub and self.checks:
            self.err[:, SHADOW_COL:] = UNWRITTEN
        if (ends is None or not self.phase_ends or (ends != self.phase_ends[-1]).any()
                or (errs != self.err_ends[-1]).any()):  # a phase whose only instruction failed is a phase
            if ends is not None:
                self.phase_ends.append(ends)
            self.err_ends.append(errs)
            if self.state is not None:
                _schedule_queues(self.counters, self.plan_array)
                self.schedule.append(self.state[:, timeline.PHASE_RESULT].copy())
        if self.state is not None:
            timeline.reset(self.state)
            self.calls += 1
            self._set_rates()


LOG_ROOM = 4096  # instructions per core a logging launch first makes room for
LOG_ROOMS_KEPT = 256
# The room a launch of an op with a tiling and block_dim turned out to need, for its next logged run (a rerun of an
# overflowing checked call, a sweep's trace). Keyed by the tiling, not the op alone: the room one core of a tiling
# needs says nothing of another tiling's, and sized for every core of the next launch it could ask for gigabytes.
_log_room: dict[tuple[Any, ...], int] = {}
MAX_GM_TAGS = 64  # GM tensors a launch that schedules itself tells apart (a kernel's GM_NAMES index them)


def _room_key(launch: Launch) -> tuple[Any, ...] | None:
    key = (launch.op, launch.block_dim, launch.tiling)
    try:
        hash(key)
    except TypeError:  # a tiling that is not a frozen dataclass: start from LOG_ROOM every time
        return None
    return key


def phase_rates(snapshots: np.ndarray, p: CostParams, hit: float = 0.0, l2_gbs: float = 0.0) -> np.ndarray:
    """``[run_cores calls, cores, 2]``: each core's MTE2 and MTE3 rate (GB/s) in each run_cores call of a launch,
    from the counters ``snapshots`` taken at the end of each (:attr:`RunReport.phase_counters`):
    :func:`tilesim.core.timeline.mte_rates` of its bytes in and out, shared with the cores that moved data, ``hit`` of
    the reads from the L2 (``l2_gbs``)."""
    delta = np.diff(snapshots, axis=0, prepend=np.zeros_like(snapshots[:1]))
    movers = ((delta[:, :, MTE2_XFERS] + delta[:, :, MTE3_XFERS]) > 0).sum(axis=1, keepdims=True)
    return np.stack(timeline.mte_rates(delta[:, :, MTE2_BYTES], delta[:, :, MTE3_BYTES], movers, p, hit, l2_gbs),
                    axis=-1)


@njit(cache=True, host=True)
def _schedule_queues(counters, plan):
    """The end of a phase: every core's queued instructions scheduled (:func:`tilesim.core.records.schedule_queue`)."""
    for c in range(counters.shape[0]):
        schedule_queue(counters.ctypes.data + c * counters.strides[0], plan)


def prepare(op: str, soc: SocSpec, tiling: Any, plan: UbPlan, block_dim: int, checks: bool,
            gm_names: list[str], phase_local_ub: bool = False, gm_bytes: tuple[int, int] = (0, 0)) -> Launch:
    """A launch about to run on this thread (its records made, its stop word taken): :func:`finish` ends it."""
    return Launch(op, soc, tiling, plan, block_dim, checks, gm_names, phase_local_ub, gm_bytes,
                  interrupt.stop_word())


def write_targets(outs: Sequence[np.ndarray | None], checks: bool,
                  inputs: Sequence[Any] = ()) -> list[np.ndarray | None]:
    """Where a launch writes each of ``outs`` (None stays None): the array itself, or this host thread's reused
    temporary of its shape and dtype when the run is checked (a violation must leave the caller's arrays as they
    were) or an output overlaps one of ``inputs`` (the kernel would read what it had written). A temporary starts
    as its output is, as GM holds what the caller's array held (a kernel that adds into it, or writes part of it,
    sees the rest). :func:`copy_back` moves the results in."""
    if not checks and not _overlap(outs, inputs):
        return list(outs)
    temps = [None if o is None else scratch(f"output {k}", o.shape, o.dtype) for k, o in enumerate(outs)]
    for o, t in zip(outs, temps, strict=True):
        if o is not None:
            np.copyto(t, o)
    return temps


def shares_memory(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether arrays ``a`` and ``b`` may share memory. Distinct arrays that own their memory (the usual case) are
    told apart without ``np.may_share_memory``, whose calls (one per pair) a small call would pay for."""
    owners = a.base is None and a.flags.owndata and b.base is None and b.flags.owndata
    return (a is b or not owners) and np.may_share_memory(a, b)


def _overlap(outs: Sequence[np.ndarray | None], inputs: Sequence[Any]) -> bool:
    """Whether an output may share memory with an input array."""
    ins = [i for i in inputs if isinstance(i, np.ndarray)]
    return any(shares_memory(o, i) for o in outs if o is not None for i in ins)


def copy_back(outs: Sequence[np.ndarray | None], targets: Sequence[np.ndarray | None]) -> None:
    """The results of a launch into :func:`write_targets`'s temporaries, into the caller's arrays."""
    for o, t in zip(outs, targets, strict=True):
        if o is not None and t is not o:
            o[...] = t


class LogOverflow(RuntimeError):
    """A checked launch's log outgrew the room made for it: its race check could not see every access. The room
    it needed is remembered; :func:`run_checked` runs the call again."""


def run_checked(call: Callable[[], Any]) -> Any:
    """``call()`` (an op's checked launch into scratch outputs), again when its log did not fit."""
    for _ in range(3):
        try:
            return call()
        except LogOverflow:
            continue
    raise RuntimeError("checked mode: the instruction log did not fit after 3 tries")


def finish(launch: Launch, workspace_size: int = 0) -> RunReport:
    """Turn the launch's records into a report (kept by :func:`capture`); raise CheckError on violations (the
    cores' own and, in checked mode, races between cores), LogOverflow when a checked launch's log did not fit."""
    wall = time.perf_counter() - launch.t0
    rep = RunReport(op=launch.op, soc=launch.soc.name, tiling=launch.tiling, ub_plan=launch.plan,
                    block_dim=launch.block_dim,  # the counters of a launch without a log are its own array
                    counters=launch.counters[:, :N_COUNTERS].copy() if launch.recording else launch.counters,
                    workspace_size=workspace_size, checks=launch.checks, wall_s=wall, gm_names=list(launch.gm_names),
                    gm_in_bytes=launch.gm_bytes[0], gm_out_bytes=launch.gm_bytes[1])
    sinks = report.sinks()
    if launch.log_room:
        _attach_log(rep, launch, keep=bool(sinks))
    if launch.snapshots is not None:
        rep.phase_counters = np.array(launch.snapshots, np.int64).reshape(-1, launch.block_dim, N_COUNTERS)
    if launch.state is not None:
        if launch.calls != len(launch.rates):
            raise RuntimeError(f"{launch.op}: {launch.calls} run_cores calls, the fast run it is scheduled by made "
                               f"{len(launch.rates)}: a scheduled call must launch exactly as the captured one did")
        rep.schedule = np.array(launch.schedule, np.float64).reshape(-1, launch.block_dim, timeline.PHASE_WORDS)
        rep.schedule_params = launch.params
        rep.schedule_l2_warm = launch.l2_warm
    found: list[Any] = []
    total = 0
    if np.count_nonzero(launch.err[:, 0]):  # not .any(): numpy's Python wrapper costs microseconds
        found, total = violations.from_cores(
            launch.op, launch.err, launch.plan.names(), {i for i, b in enumerate(launch.plan.buffers) if b.stack},
            launch.gm_names, np.array(launch.err_ends or [launch.err[:, 0]], np.int64).reshape(-1, launch.block_dim))
    if launch.checks:
        if rep.log is None:
            raise LogOverflow(f"{launch.op}: the checked launch's log needs {rep.log_needed} entries per core")
        more, n = races.violations(rep)
        found += more
        total += n
    for sink in sinks:
        sink.append(rep)
    if found:
        raise CheckError(found, total)
    return rep


def _attach_log(rep: RunReport, launch: Launch, keep: bool) -> None:
    """Give a recorded launch's report its instruction log, or, when a core issued more than the log held, say
    how much room a rerun needs (and make that room for the op's next recorded launch)."""
    issued = launch.counters[:, LOG_COUNT]
    need = int(issued.max(initial=0))
    if need > launch.log_room:
        key = _room_key(launch)
        if key is not None:
            with _lock:  # launches on other threads may be trimming it too
                _log_room[key] = need
                while len(_log_room) > LOG_ROOMS_KEPT:
                    del _log_room[next(iter(_log_room))]
        rep.log_needed = need
        return
    body = launch.counters[:, REC_AT:].reshape(launch.block_dim, launch.log_room, LOG_FIELDS)
    # views into the reused buffer while only the launch's own checks read them; copies once a report is kept
    rep.log = [body[c, :issued[c]] if not keep else body[c, :issued[c]].copy() for c in range(launch.block_dim)]
    rep.phase_ends = np.array(launch.phase_ends or [issued], np.int64).reshape(-1, launch.block_dim)


