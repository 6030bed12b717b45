"""Host side of a kernel launch: per-core arenas and counters, the workspace, atomic targets, the run report.

:func:`tilesim.runtime.launcher.launch` calls :func:`prepare`, then runs the loop over cores it generated for the
kernel: with :func:`run_cores` (ranges of cores on the host threads, returning when every core has finished), or with
:func:`run_synced` for a kernel that calls SyncAll (the cores as coroutines that wait for each other there); then
:func:`finish`.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numba
import numpy as np

from tilesim.checks import violations
from tilesim.core import timeline
from tilesim.core.records import (
    CHECKED_BUILD,
    COUNTER_NAMES,
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
from tilesim.cost.params import CostParams, cost_params
from tilesim.errors import CheckError
from tilesim.jit import njit
from tilesim.jit.intrinsics import UCONTEXT_BYTES, store_fence
from tilesim.machine import waits
from tilesim.machine.atomic import DONE
from tilesim.machine.tensor import X_ARRIVED, X_STOP_AT
from tilesim.runtime import interrupt
from tilesim.runtime.coroutines import STACK_BYTES, run_coroutines
from tilesim.runtime.excinfo import rebuilt
from tilesim.soc import SocSpec

_POISON = 0xFF  # never-written UB reads as NaN (fp32 and b16), as stale UB would read as garbage
PAGE = 4096


def page_aligned(shape: int | tuple[int, ...], dtype: Any, fill: Any = None) -> np.ndarray:
    """A new array whose data starts on a 4 KiB page. numpy's large arrays start 16 B past one (malloc's header),
    so a 32 B-aligned UB tile mapped there straddles the host's 64 B cache lines: every other 32 B vector access
    (every 64 B one) splits across two lines, which slows every emulated instruction."""
    dtype = np.dtype(dtype)
    n = math.prod(shape if isinstance(shape, tuple) else (shape,)) * dtype.itemsize
    raw = np.zeros(n + PAGE, np.uint8) if fill == 0 else np.empty(n + PAGE, np.uint8)  # zeros: calloc's pages
    off = -raw.ctypes.data % PAGE
    a = raw[off:off + n].view(dtype).reshape(shape)
    if fill is not None and fill != 0:
        a.fill(fill)
    return a


class _ThreadState(threading.local):
    """What each host thread keeps: the launch under way, the serial choice of :func:`host_threads`, the sinks and
    the log flag of :func:`capture`, its reused buffers and UB arenas. A launch runs on the thread that calls it
    and owns what that thread keeps while it runs, so that launches from several Python threads at once share
    nothing they write. The class attributes are every thread's defaults: a missing attribute of a plain
    threading.local costs an AttributeError (about a microsecond) per look-up."""

    launch: Launch | None = None
    serial = False
    sinks: list[list[RunReport]] = []  # never mutated: capture assigns a new list
    log = False
    pool: dict[str, np.ndarray] | None = None
    arenas: dict[int, np.ndarray] | None = None  # by UB size: see arena
    ub_views: dict[tuple[int, int, int, int], np.ndarray] | None = None  # the pool threads' UBs: see _thread_ub
    schedule: deque[RunReport] | None = None  # inside :func:`scheduled`: the fast reports of the launches to come
    l2_warm = False  # inside :func:`scheduled`: the inputs are in the L2 from the previous run of the call


_local = _ThreadState()
_lock = threading.Lock()


def arena(soc: SocSpec, block_dim: int) -> np.ndarray:
    """The calling thread's per-core UB arenas, ``[block_dim, ub_size]`` uint8, kept across its launches like the
    real UB (in a fast launch with :attr:`Launch.phase_local_ub`, row k·(rows // threads) is host thread k's UB
    instead). A guard row follows the last one, so that a fast-mode kernel overrunning its UB (what checked mode
    reports) corrupts emulated memory, as on the NPU, rather than the host process's."""
    arenas = _local.arenas
    if arenas is None:
        arenas = _local.arenas = {}
    a = arenas.get(soc.ub_size)
    if a is None or a.shape[0] < block_dim + 1:
        _local.ub_views = None  # they keep the old arena alive
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
    # No core reads UB it wrote in an earlier phase or launch (every phase loads what it computes on). A fast
    # launch then gives each host thread one UB for all the cores it runs (:func:`run_cores`): a small call's
    # cores stay in the host's L2 instead of each touching a UB of its own. A checked launch keeps a UB per core
    # and holds the kernel to the promise: each phase starts with its UB shadow unwritten, so that such a read
    # is reported as a read of UB never written.
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
        self.snapshots = [] if _sinks() else None
        self.state = self.params = self.rates = None
        self.l2_warm = False
        self.calls = 0
        # checked mode logs too: its race check reads the GM accesses, its reports name instructions
        self.log_room = _log_room.get(_room_key(self), LOG_ROOM) if (_recording() or self.checks) else 0
        if self.log_room:  # megabytes of log: this thread's buffer, reused (a fresh one page-faults on every 4 KiB
            # the cores log into, which cost more than the kernel); the counters, the instruction counts and the
            # mode (REC_LOG) start at 0, and no entry past a core's count is read
            self.counters = scratch("log", (self.block_dim, REC_AT + self.log_room * LOG_FIELDS), np.int64)
            self.counters[:, :REC_AT] = 0
        elif _local.schedule is not None:
            self._schedule_like(_next_fast_report(self.op, self.block_dim))
        else:
            self.counters = np.zeros((self.block_dim, N_COUNTERS), np.int64)
        self.recording = self.counters.shape[1] > N_COUNTERS
        shape = (self.block_dim, err_width(self.checks, self.soc.ub_size))  # checked mode: the UB shadow too
        # only the shadow's passes gain from the page; fast mode's few columns would pay for aligning them every launch
        self.err = page_aligned(shape, np.int64, 0) if self.checks else np.zeros(shape, np.int64)
        self.t0 = time.perf_counter()
        _local.launch = self

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
        self.params = cost_params(self.soc)
        timeline.set_params(self.state[0], self.params)
        self.state[1:, timeline.F_LAT2:timeline.F_TABLES] = self.state[0, timeline.F_LAT2:timeline.F_TABLES]
        hit = timeline.l2_hit(fast.gm_in_bytes, fast.gm_out_bytes, fast.total("mte2_bytes"), self.soc.l2_size,
                              _local.l2_warm)
        self.l2_warm = _local.l2_warm
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


def _next_fast_report(op: str, block_dim: int) -> RunReport:
    """The fast report of the next launch inside :func:`scheduled`, which must be this one's."""
    queue = _local.schedule
    if not queue:
        raise RuntimeError(f"{op}: this call launches more kernels than the fast run it is scheduled by")
    fast = queue.popleft()
    if fast.op != op or fast.block_dim != block_dim or fast.phase_counters is None:
        raise RuntimeError(f"{op} on {block_dim} cores: the fast run's launch here was {fast.op} on "
                           f"{fast.block_dim} cores{'' if fast.phase_counters is not None else ', not captured'}: "
                           f"a scheduled call must launch exactly as the captured one did")
    return fast


def prepare(op: str, soc: SocSpec, tiling: Any, plan: UbPlan, block_dim: int, checks: bool,
            gm_names: list[str], phase_local_ub: bool = False, gm_bytes: tuple[int, int] = (0, 0)) -> Launch:
    """A launch about to run on this thread (its records made, its stop word taken): :func:`finish` ends it, and
    :func:`abandon` one that raised."""
    return Launch(op, soc, tiling, plan, block_dim, checks, gm_names, phase_local_ub, gm_bytes,
                  interrupt.stop_word())


def abandon(launch: Launch) -> None:
    """A launch that raised: no longer this thread's launch under way (its records are dropped)."""
    if _local.launch is launch:
        _local.launch = None


_forced_checks = [False]


def force_checks(on: bool) -> None:
    """Run every launch in checked mode whatever its caller asks (``pytest --tilesim-checks`` sets it)."""
    _forced_checks[0] = bool(on)


def checks_enabled(checks: bool | None) -> bool:
    """Whether an op call runs checked: always under :func:`force_checks`; ``None`` follows the TILESIM_CHECKS
    environment variable; otherwise ``checks``. An op API decides with this before it launches."""
    if _forced_checks[0]:
        return True
    return os.environ.get("TILESIM_CHECKS", "") not in ("", "0") if checks is None else bool(checks)


SERIAL_BELOW = 1 << 20  # GM bytes below which a launch runs its cores on one host thread

_pool: ThreadPoolExecutor | None = None


def run_cores(cores: Callable[..., None], block_dim: int, *args: Any) -> None:
    """One SyncAll phase: ``cores(first, last, *args)`` over contiguous ranges of the ``block_dim`` cores, one
    range per host thread (``numba.get_num_threads()``; the calling thread takes the first), returning when
    every core has finished. ``cores`` is the ``@njit(nogil=True)`` loop over the kernel's per-core body that the
    launcher generates, so the threads run in parallel; the split does not change the results (each core writes
    its own rows and shadows).

    Host threads rather than a ``prange``: a parallel=True function's gufunc recompiles the whole call tree (seconds
    of compile time per kernel) and wakes Numba's thread pool on every launch.
    """
    global _pool
    n = _thread_count(block_dim)
    if n == 1:  # no store fence: a thread sees its own stores, and a later reader on another thread takes a lock
        cores(0, block_dim, *_thread_ub(args, 0, 1))
        _end_phase()
        return
    if _pool is None:
        with _lock:
            if _pool is None:
                _pool = ThreadPoolExecutor(max_workers=numba.config.NUMBA_NUM_THREADS, thread_name_prefix="tilesim")
    cuts = [block_dim * k // n for k in range(n + 1)]
    stop_at = _local.launch.stop_at if _local.launch is not None else 0
    # not under _lock (as run_synced's jobs are): these jobs wait for nothing, so no launch's jobs wait behind them
    futures = [_pool.submit(_run_fenced, cores, cuts[k], cuts[k + 1], *_thread_ub(args, k, n)) for k in range(1, n)]
    try:
        _run_fenced(cores, cuts[0], cuts[1], *_thread_ub(args, 0, n))
    except KeyboardInterrupt:  # raised by a handler of the program's own once this thread's cores ended
        interrupt.request(stop_at)
        raise
    finally:
        _join(futures, stop_at)
    _end_phase()


def _join(futures: list[Future[Any]], stop_at: int) -> None:
    """Wait until every one of a launch's pool threads (``futures``) has ended, whatever KeyboardInterrupts come
    meanwhile: each asks the launch's cores to stop (its stop word at ``stop_at``), and the first is raised once
    all have, so that nothing of the launch writes after the interrupt reaches the caller. Then the first
    exception a pool thread raised, as ``Future.result`` raises it."""
    caught: KeyboardInterrupt | None = None
    for f in futures:
        while True:
            try:
                f.exception()  # waits (one lock, where concurrent.futures.wait builds a waiter per call)
                break
            except KeyboardInterrupt as e:
                caught = caught or e
                interrupt.request(stop_at)
    if caught is not None:
        raise caught
    for f in futures:
        f.result()


def _thread_count(block_dim: int) -> int:
    """How many host threads :func:`run_cores` spreads ``block_dim`` cores over."""
    return 1 if _local.serial else max(1, min(numba.get_num_threads(), block_dim))


_orders: dict[tuple[int, int], np.ndarray] = {}


def interleaved(block_dim: int) -> np.ndarray:
    """The core at each position of :func:`run_cores`'s split of ``block_dim`` cores that deals the cores to the
    host threads in turn (thread k runs cores k, k + n, ... as far as its share goes), for a ``cores`` loop that
    runs core ``order[i]`` at position i. On the NPU the cores stream GM side by side; run core by core, each
    thread's stream jumps by a whole core's stride, and neighbouring cores on the two threads at once keep the
    host's memory streams closer together than a block of cores each."""
    n = _thread_count(block_dim)
    order = _orders.get((block_dim, n))
    if order is None:
        cuts = [block_dim * k // n for k in range(n + 1)]
        at, order, c = cuts[:-1], np.empty(block_dim, np.int64), 0
        while c < block_dim:
            for k in range(n):
                if c < block_dim and at[k] < cuts[k + 1]:
                    order[at[k]], at[k], c = c, at[k] + 1, c + 1
        _orders[(block_dim, n)] = order
    return order


class SyncAllMismatch(RuntimeError):
    """Cores of a launch that cannot all reach the same SyncAll: some wait at it, others have ended (the NPU
    hangs)."""


class CoresRaised(RuntimeError):
    """Cores of a SyncAll launch that ended with an exception (among them those that gave a SyncAll up because
    another core stopped): ``raised`` has each one's exception and where it was raised
    (:func:`tilesim.runtime.excinfo.rebuilt`), by core."""

    def __init__(self, raised: dict[int, tuple[BaseException, str]]) -> None:
        super().__init__(f"cores {sorted(raised)} raised an exception in compiled code")
        self.raised = raised


def run_synced(entry: int, block_dim: int, bar: np.ndarray, contexts: np.ndarray, record: np.ndarray) -> None:
    """A kernel with SyncAll (:func:`tilesim.machine.sync.sync_all`): its cores as coroutines on the host threads
    (:mod:`tilesim.runtime.coroutines`), host thread k of n running cores k, k + n, ... through the generated C entry at
    ``entry`` with the argument record ``record``, and a phase ended (as :func:`run_cores` ends one) each time
    every core waits at the next SyncAll, which then releases them. ``bar``: the barrier words the cores see
    (BAR_WORDS of :mod:`tilesim.machine.waits`, set here): a core goes on with a phase once the core n before it
    has finished it, so the cores run in order as in :func:`run_cores`; ``contexts``: the cores' context blocks.
    Raises :class:`SyncAllMismatch` when the cores cannot all reach a SyncAll, :class:`CoresRaised` with the
    exceptions of the cores that raised (a core that stopped on a fault also leaves its fault word, which the
    launcher reports instead)."""
    global _pool
    n = _thread_count(block_dim)
    bar[:] = 0
    bar[waits.BAR_GATE] = n
    at = bar.ctypes.data
    if _pool is None:
        with _lock:
            if _pool is None:
                _pool = ThreadPoolExecutor(max_workers=numba.config.NUMBA_NUM_THREADS, thread_name_prefix="tilesim")
    jobs = [np.zeros((len(range(k, block_dim, n)), waits.JOB_WORDS), np.int64) for k in range(n)]

    def host(k: int) -> None:
        mine = np.arange(k, block_dim, n, dtype=np.int64)
        ctxs = thread_buffer("coroutine contexts", (mine.size + 1) * UCONTEXT_BYTES)[:(mine.size + 1) * UCONTEXT_BYTES]
        stacks = thread_buffer("coroutine stacks", mine.size * STACK_BYTES)[:mine.size * STACK_BYTES].reshape(
            mine.size, STACK_BYTES)
        run_coroutines(jobs[k], ctxs, stacks, entry, record.ctypes.data, mine)

    with _lock:  # a launch's schedulers queued together: each waits for the others, so none may wait behind
        futures = [_pool.submit(host, k) for k in range(n)]  # another launch's
    g, stuck, rung = 0, None, -1
    try:
        while bar[waits.BAR_EXITED] < block_dim:
            if not bar[waits.BAR_ABORT]:
                waiting = int(bar[waits.BAR_ARRIVED]) - g * block_dim
                if waiting == block_dim:
                    _end_phase()
                    g += 1
                    waits.release(at)
                    continue
                # the others will never come (the abort read after the count: a core that raised sets it before
                # it counts as ended)
                if waiting > 0 and waiting + int(bar[waits.BAR_EXITED]) == block_dim and not bar[waits.BAR_ABORT]:
                    stuck = (g, np.flatnonzero(contexts[:block_dim, X_ARRIVED] >= DONE).tolist())
                    waits.give_up(at)
            rung = waits.listen(at, rung, 100_000)  # asleep till a core arrives or ends (a timeout: Ctrl-C)
    except KeyboardInterrupt:
        interrupt.request(int(contexts[0, X_STOP_AT]))  # the cores stop within an instruction
        waits.give_up(at)
        raise
    except BaseException:
        waits.give_up(at)
        raise
    finally:
        try:
            _join(futures, int(contexts[0, X_STOP_AT]))
        finally:
            raised = _raised(jobs)
    if stuck is not None:
        raise SyncAllMismatch(f"cores {stuck[1]} ended without reaching SyncAll number {stuck[0] + 1}, where the "
                              f"other cores wait (the NPU hangs)")
    if raised:
        raise CoresRaised(raised)
    _end_phase()


def _raised(jobs: list[np.ndarray]) -> dict[int, tuple[BaseException, str]]:
    """By core, the exception of each core of a SyncAll launch that ended with one, and where it was raised, rebuilt
    from the launch's job records (:func:`tilesim.runtime.excinfo.rebuilt`): once, after the cores have ended, which
    frees what a raise with values computed at run time allocated."""
    return {int(row[waits.J_CORE]): rebuilt(int(row[waits.J_STATUS]), int(row[waits.J_EXCINFO]))
            for j in jobs for row in j[j[:, waits.J_STATE] == waits.FAILED]}


def _thread_ub(args: tuple[Any, ...], k: int, n: int) -> tuple[Any, ...]:
    """``args``, with the arena of a fast launch with :attr:`Launch.phase_local_ub` replaced by host thread k's
    (of n) UB: one arena row, seen by every core (a view with row stride 0). The threads' rows are spread over
    the arena, so that (with two rows or more per thread) a core overrunning its UB writes into rows no thread
    uses, not into another thread's UB."""
    launch = _local.launch
    if launch is None or not launch.phase_local_ub or launch.checks:
        return args
    a = launch.arena
    key = (id(a), launch.block_dim, k, n)  # a cached view keeps its arena, so the id is not reused meanwhile
    views = _local.ub_views
    if views is None:
        views = _local.ub_views = {}
    view = views.get(key)
    if view is None:  # as_strided costs more than a small core's work; two rows at least: a (1, ub) view would
        # be C-contiguous, to Numba another array type and so another compile of the kernel
        view = views[key] = np.lib.stride_tricks.as_strided(a[k * (a.shape[0] // n)],
                                                                 (max(launch.block_dim, 2), a.shape[1]), (0, 1))
    for i, x in enumerate(args):  # the arena comes early: this is a microsecond cheaper than rebuilding all
        if x is a:
            return (*args[:i], view, *args[i + 1:])
    return args


@njit(cache=True, nogil=True, host=True)
def _store_fence():
    store_fence()


def _run_fenced(cores: Callable[..., None], first: int, last: int, *args: Any) -> None:
    """``cores(first, last, *args)``, then a store fence: the copy-outs' non-temporal stores
    (:func:`tilesim.machine.movers._write_gm`) are visible to the other host threads after the phase."""
    try:
        cores(first, last, *args)
    finally:
        _store_fence()


def _end_phase() -> None:
    launch = _local.launch
    if launch is not None:
        launch.end_phase()


class _HostThreads:
    """The context manager of :func:`host_threads` (a class: a generator-based one costs microseconds a call)."""

    __slots__ = ("serial", "prev")

    def __init__(self, gm: tuple[np.ndarray, ...]) -> None:
        self.serial = sum([a.nbytes for a in gm]) < SERIAL_BELOW

    def __enter__(self) -> int:
        self.prev = _local.serial
        _local.serial = self.serial
        return 1 if self.serial else numba.get_num_threads()

    def __exit__(self, *exc: object) -> None:
        _local.serial = self.prev


def host_threads(*gm: np.ndarray) -> _HostThreads:
    """Run the launcher inside this block: :func:`run_cores` keeps every core on the calling thread when the GM
    tensors ``gm`` hold less than :data:`SERIAL_BELOW` bytes, and otherwise spreads them over the caller's thread
    count (``numba.get_num_threads()``). The block gets the thread count its launches use.

    Waking a second thread for a parallel region costs tens of microseconds on an idle host and milliseconds
    on a busy one, more than a small kernel takes. The results do not depend on the thread count (each core
    writes its own rows and shadows). The choice is this thread's own and is undone on leaving the block; it
    does not touch Numba's thread count (setting it and putting it back cost more than a small kernel's core)."""
    return _HostThreads(gm)


def thread_buffer(name: str, nbytes: int) -> np.ndarray:
    """This host thread's buffer ``name``, at least ``nbytes`` long, kept across launches: a fresh allocation of
    a large buffer costs a page fault per 4 KiB page the kernel touches (the kernel zeroing each page first),
    which for a large workspace costs more than the kernel's own work."""
    pool = _local.pool
    if pool is None:
        pool = _local.pool = {}
    buf = pool.get(name)
    if buf is None or buf.size < nbytes:
        buf = pool[name] = page_aligned(max(nbytes, 1), np.uint8)
    return buf[:nbytes]


def workspace(size: int) -> np.ndarray:
    """A GM workspace of ``size`` bytes, with whatever an earlier launch left in it, as on the NPU (kernels
    initialise what they read). One buffer per host thread, reused: see :func:`release_scratch`."""
    return thread_buffer("workspace", size)


def scratch(name: str, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """This host thread's reused buffer ``name`` as an array of ``shape`` and ``dtype``, holding whatever its last
    use left: for temporaries a launch writes whole (checked mode's outputs), which would otherwise page-fault
    on every 4 KiB, from every host thread at once."""
    dt = np.dtype(dtype)
    return thread_buffer(name, math.prod(shape) * dt.itemsize).view(dt).reshape(shape)


def release_scratch() -> None:
    """Free this host thread's reused workspace, coroutine and temporary buffers (they are kept for the next
    launch)."""
    _local.pool = {}


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
    _local.launch = None
    rep = RunReport(op=launch.op, soc=launch.soc.name, tiling=launch.tiling, ub_plan=launch.plan,
                    block_dim=launch.block_dim,  # the counters of a launch without a log are its own array
                    counters=launch.counters[:, :N_COUNTERS].copy() if launch.recording else launch.counters,
                    workspace_size=workspace_size, checks=launch.checks, wall_s=wall, gm_names=list(launch.gm_names),
                    gm_in_bytes=launch.gm_bytes[0], gm_out_bytes=launch.gm_bytes[1])
    sinks = _sinks()
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
        for hook in _race_checks:
            more, n = hook(rep)
            found += more
            total += n
    for sink in sinks:
        sink.append(rep)
    if found:
        raise CheckError(found, total)
    return rep


# Checks of a whole checked launch, run by finish on its report: each returns (violations, how many in all).
_race_checks: list[Callable[[RunReport], tuple[list[Any], int]]] = []


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


def _sinks() -> list[list[RunReport]]:
    return _local.sinks


def _recording() -> bool:
    return _local.log


@contextmanager
def capture(log: bool = False) -> Iterator[list[RunReport]]:
    """Collect the :class:`RunReport` of every launch in the block: ``with tilesim.capture() as runs: ...``.
    With ``log=True`` the launches record their instruction logs, which the cost model needs (see
    :func:`recorded`: a log that did not fit is reported, not cut short)."""
    runs: list[RunReport] = []
    _local.sinks = _sinks() + [runs]
    prev = _recording()
    _local.log = prev or log
    try:
        yield runs
    finally:
        _local.sinks = [s for s in _sinks() if s is not runs]
        _local.log = prev


@contextmanager
def scheduled(fast: Sequence[RunReport], l2_warm: bool = False) -> Iterator[list[RunReport]]:
    """Collect the reports of the launches in the block (as :func:`capture`), each of which schedules itself on
    the cost model while it runs, instruction by instruction, without a log: ``tilesim.cost.model.estimated`` turns
    them into estimates. The k-th launch takes its phases' MTE bytes from the k-th report of ``fast``, a
    :func:`capture` of the same call (the model shares GM bandwidth by the bytes each core moves in a phase, which
    must be known before the phase is scheduled). ``l2_warm``: each launch's inputs are in the L2 from the
    previous run of the call (:func:`tilesim.core.timeline.l2_hit`). A launch that logs (checked mode,
    :func:`recorded`) is left to its log."""
    prev, prev_warm = _local.schedule, _local.l2_warm
    _local.schedule, _local.l2_warm = deque(fast), l2_warm
    try:
        with capture() as runs:
            yield runs
    finally:
        _local.schedule, _local.l2_warm = prev, prev_warm


def recorded(call: Callable[[], Any]) -> tuple[Any, list[RunReport]]:
    """``call()``'s result and the recorded reports of its launches, complete: a launch whose log outgrew the
    room made for it is run again with the room it turned out to need (the op remembers it)."""
    for _ in range(3):
        with capture(log=True) as runs:
            out = call()
        if all(r.log is not None for r in runs):
            return out, runs
    raise RuntimeError(f"instruction logs of {[r.op for r in runs if r.log is None]} did not fit after 3 tries")
