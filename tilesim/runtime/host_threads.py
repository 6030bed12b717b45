"""The host threads a launch runs its cores on, and the buffers each host thread keeps.

A launch hands :func:`run_cores` (ranges of cores, returning when every core has finished) or :func:`run_synced`
(a kernel that calls SyncAll: the cores as coroutines that wait for each other there) everything they need: the
thread count (:func:`thread_count`), each thread's arguments, the launch's stop word and what to do at the end of a
SyncAll phase. Nothing here knows the launch.

Host threads rather than a ``prange``: a parallel=True function's gufunc recompiles the whole call tree (seconds of
compile time per kernel) and wakes Numba's thread pool on every launch.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numba
import numpy as np

from tilesim.jit import njit
from tilesim.jit.intrinsics import UCONTEXT_BYTES, store_fence
from tilesim.machine import waits
from tilesim.machine.atomic import DONE
from tilesim.machine.tensor import X_ARRIVED
from tilesim.runtime import interrupt
from tilesim.runtime.coroutines import STACK_BYTES, run_coroutines
from tilesim.runtime.excinfo import rebuilt

PAGE = 4096
SERIAL_BELOW = 1 << 20  # GM bytes below which a launch runs its cores on one host thread

_pool: ThreadPoolExecutor | None = None
_lock = threading.Lock()


class _Buffers(threading.local):
    """Each host thread's reused buffers by name (a class attribute as the default: a missing attribute of a plain
    threading.local costs an AttributeError, about a microsecond, per look-up)."""

    pool: dict[str, np.ndarray] | None = None


_buffers = _Buffers()


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


def thread_buffer(name: str, nbytes: int) -> np.ndarray:
    """This host thread's buffer ``name``, at least ``nbytes`` long, kept across launches: a fresh allocation of
    a large buffer costs a page fault per 4 KiB page the kernel touches (the kernel zeroing each page first),
    which for a large workspace costs more than the kernel's own work."""
    pool = _buffers.pool
    if pool is None:
        pool = _buffers.pool = {}
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
    _buffers.pool = {}


def thread_count(n: int, nbytes: int) -> int:
    """How many host threads a launch of ``n`` cores (or a parallel map of ``n`` chunks) over ``nbytes`` of GM
    runs on: one below :data:`SERIAL_BELOW` bytes, else the caller's thread count (``numba.get_num_threads()``),
    at most one per core.

    Waking a second thread for a parallel region costs tens of microseconds on an idle host and milliseconds
    on a busy one, more than a small kernel takes. The results do not depend on the thread count (each core
    writes its own rows and shadows)."""
    return 1 if nbytes < SERIAL_BELOW else max(1, min(numba.get_num_threads(), n))


def _the_pool() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        with _lock:
            if _pool is None:
                _pool = ThreadPoolExecutor(max_workers=numba.config.NUMBA_NUM_THREADS, thread_name_prefix="tilesim")
    return _pool


def run_cores(cores: Callable[..., None], block_dim: int, args: tuple[Any, ...], threads: int = 1,
              args_of: Callable[[int, int], tuple[Any, ...]] | None = None, stop_at: int = 0) -> None:
    """One SyncAll phase: ``cores(first, last, *args)`` over ``threads`` contiguous ranges of the ``block_dim``
    cores, one range per host thread (the calling thread takes the first), returning when every core has finished.
    ``args_of(k, threads)``: host thread k's arguments instead of ``args`` (a UB of its own). ``stop_at``: the
    launch's stop word, set when a KeyboardInterrupt comes while the other threads run. ``cores`` is the
    ``@njit(nogil=True)`` loop over the kernel's per-core body that the launcher generates, so the threads run in
    parallel; the split does not change the results (each core writes its own rows and shadows)."""
    if threads <= 1:  # no store fence: a thread sees its own stores, and a later reader on another thread takes a lock
        cores(0, block_dim, *(args if args_of is None else args_of(0, 1)))
        return
    pool = _the_pool()
    cuts = [block_dim * k // threads for k in range(threads + 1)]
    mine = args if args_of is None else args_of(0, threads)
    # not under _lock (as run_synced's jobs are): these jobs wait for nothing, so no launch's jobs wait behind them
    futures = [pool.submit(_run_fenced, cores, cuts[k], cuts[k + 1],
                           *(args if args_of is None else args_of(k, threads))) for k in range(1, threads)]
    try:
        _run_fenced(cores, cuts[0], cuts[1], *mine)
    except KeyboardInterrupt:  # raised by a handler of the program's own once this thread's cores ended
        interrupt.request(stop_at)
        raise
    finally:
        _join(futures, stop_at)


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


_orders: dict[tuple[int, int], np.ndarray] = {}


def interleaved(block_dim: int, threads: int) -> np.ndarray:
    """The core at each position of :func:`run_cores`'s split of ``block_dim`` cores over ``threads`` host threads
    that deals the cores to the threads in turn (thread k runs cores k, k + n, ... as far as its share goes), for
    a ``cores`` loop that runs core ``order[i]`` at position i. On the NPU the cores stream GM side by side; run
    core by core, each thread's stream jumps by a whole core's stride, and neighbouring cores on the two threads at
    once keep the host's memory streams closer together than a block of cores each."""
    order = _orders.get((block_dim, threads))
    if order is None:
        n = threads
        cuts = [block_dim * k // n for k in range(n + 1)]
        at, order, c = cuts[:-1], np.empty(block_dim, np.int64), 0
        while c < block_dim:
            for k in range(n):
                if c < block_dim and at[k] < cuts[k + 1]:
                    order[at[k]], at[k], c = c, at[k] + 1, c + 1
        _orders[(block_dim, threads)] = order
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


def run_synced(entry: int, block_dim: int, threads: int, bar: np.ndarray, contexts: np.ndarray, record: np.ndarray,
               end_phase: Callable[[], None], stop_at: int = 0) -> None:
    """A kernel with SyncAll (:func:`tilesim.machine.sync.sync_all`): its cores as coroutines on ``threads`` host
    threads (:mod:`tilesim.runtime.coroutines`), host thread k of n running cores k, k + n, ... through the
    generated C entry at ``entry`` with the argument record ``record``, and ``end_phase()`` called (as after a
    :func:`run_cores`) each time every core waits at the next SyncAll, which then releases them, and at the end.
    ``bar``: the barrier words the cores see (BAR_WORDS of :mod:`tilesim.machine.waits`, set here): a core goes on
    with a phase once the core n before it has finished it, so the cores run in order as in :func:`run_cores`;
    ``contexts``: the cores' context blocks; ``stop_at``: the launch's stop word. Raises :class:`SyncAllMismatch`
    when the cores cannot all reach a SyncAll, :class:`CoresRaised` with the exceptions of the cores that raised (a
    core that stopped on a fault also leaves its fault word, which the launcher reports instead)."""
    n = threads
    bar[:] = 0
    bar[waits.BAR_GATE] = n
    at = bar.ctypes.data
    pool = _the_pool()
    jobs = [np.zeros((len(range(k, block_dim, n)), waits.JOB_WORDS), np.int64) for k in range(n)]

    def host(k: int) -> None:
        mine = np.arange(k, block_dim, n, dtype=np.int64)
        ctxs = thread_buffer("coroutine contexts", (mine.size + 1) * UCONTEXT_BYTES)[:(mine.size + 1) * UCONTEXT_BYTES]
        stacks = thread_buffer("coroutine stacks", mine.size * STACK_BYTES)[:mine.size * STACK_BYTES].reshape(
            mine.size, STACK_BYTES)
        run_coroutines(jobs[k], ctxs, stacks, entry, record.ctypes.data, mine)

    with _lock:  # a launch's schedulers queued together: each waits for the others, so none may wait behind
        futures = [pool.submit(host, k) for k in range(n)]  # another launch's
    g, stuck, rung = 0, None, -1
    try:
        while bar[waits.BAR_EXITED] < block_dim:
            if not bar[waits.BAR_ABORT]:
                waiting = int(bar[waits.BAR_ARRIVED]) - g * block_dim
                if waiting == block_dim:
                    end_phase()
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
        interrupt.request(stop_at)  # the cores stop within an instruction
        waits.give_up(at)
        raise
    except BaseException:
        waits.give_up(at)
        raise
    finally:
        try:
            _join(futures, stop_at)
        finally:
            raised = _raised(jobs)
    if stuck is not None:
        raise SyncAllMismatch(f"cores {stuck[1]} ended without reaching SyncAll number {stuck[0] + 1}, where the "
                              f"other cores wait (the NPU hangs)")
    if raised:
        raise CoresRaised(raised)
    end_phase()


def _raised(jobs: list[np.ndarray]) -> dict[int, tuple[BaseException, str]]:
    """By core, the exception of each core of a SyncAll launch that ended with one, and where it was raised, rebuilt
    from the launch's job records (:func:`tilesim.runtime.excinfo.rebuilt`): once, after the cores have ended, which
    frees what a raise with values computed at run time allocated."""
    return {int(row[waits.J_CORE]): rebuilt(int(row[waits.J_STATUS]), int(row[waits.J_EXCINFO]))
            for j in jobs for row in j[j[:, waits.J_STATE] == waits.FAILED]}
