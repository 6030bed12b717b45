"""How one host thread waits for another: asleep on the word it waits for (a futex), not spinning.

A launch's cores on two host threads wait for each other (an atomic add's turn); a SyncAll launch's cores, run
as coroutines on the host threads (:mod:`tilesim.runtime.coroutines`), switch to their thread's scheduler instead of
sleeping, and the scheduler sleeps on the word of its first waiting core when none can go on. A thread's
waiter that spins (``sched_yield``) takes turns from the cores at work; one that naps wakes late or often. Here a
waiter counts itself in the word's waiter count, checks the word once more, and sleeps on it; the thread that
advances the word wakes the sleepers, with a system call only when the count says someone sleeps (both sides'
atomics are sequentially consistent, so either the waiter sees the new value or the advancer sees the waiter).
The words are int64 whose low 32 bits change at every advance (the futex compares those). A wait also ends when
a stop word is set: the core it waits for stopped, or the launch gave up. Whoever sets one wakes the sleepers it
concerns (a core that stops wakes those waiting for it and for the release, and they stop in turn; the launching
thread that gives up wakes the release's); a sleep lasts at most 128 ms all the same, so that a stop nobody
woke a sleeper for is seen. A core waiting behind the gate for a whole phase sleeps until its predecessor wakes
it: a sleep cut into short naps would wake it many times a call, each a context switch taken from the cores at
work.

The SyncAll barrier's words (:func:`tilesim.runtime.host_threads.run_synced` owns them): cores arrived at SyncAlls in
all, SyncAlls released, cores ended, an abort (a core stopped, or the cores cannot all reach the next SyncAll), the
cores a phase runs at once (:func:`gate`), sleepers on the release, and the launch's bell (rung when the launching
thread, asleep on it, has something to do) with its sleepers. A core behind the gate waits for its predecessor alone,
which cannot have finished the next phase before the release: so only the first cores wait on the release word.
"""

from __future__ import annotations

import numpy as np
from numba import carray

from tilesim.jit import njit
from tilesim.jit.intrinsics import address_as_pointer, atomic_add, atomic_load, futex_wait, futex_wake, swap_ucontext
from tilesim.machine.tensor import CTX_WORDS, X_ARRIVED, X_CORO, X_FAULT, X_IDX, X_SYNC_AT, X_SYNC_GEN, X_WAITERS

BAR_ARRIVED, BAR_RELEASED, BAR_EXITED, BAR_ABORT, BAR_GATE, BAR_RELEASE_WAITERS, BAR_BELL, BAR_BELL_WAITERS = range(8)
BAR_WORDS = 8
SLEEP_US = 128_000  # a wait's sleeps are at most this long: how late a stop nobody woke it for is seen

# A core run as a coroutine (tilesim.runtime.coroutines) has a job record: its context and its scheduler's (ucontext_t
# addresses), its state, what it waits for (the word, the target, the word's waiter count, the two stop words),
# the launch's argument record, its core index, and how it ended (Numba's status and the address of the exception
# it raised: tilesim.runtime.excinfo)
J_OWN, J_SCHED, J_STATE, J_AT, J_TARGET, J_WAITERS, J_STOP_A, J_STOP_B, J_ARGS, J_CORE, J_STATUS, J_EXCINFO = range(12)
JOB_WORDS = 16
NEW, RUNNING, WAITING, ENDED, FAILED = 0, 1, 2, 3, 4


@njit(cache=True)
def wait_until(at, target, waiters, stop_a, stop_b, coro):
    """Sleep until the int64 at address ``at`` reaches ``target`` (True), or the word at ``stop_a`` or ``stop_b``
    (an address, 0: none) is set first (False). ``waiters``: the address of the word's waiter count. A core run as
    a coroutine (``coro``: its job record) switches to its scheduler instead, which switches back once it can go
    on."""
    if coro:
        j = carray(address_as_pointer(coro, np.int64), JOB_WORDS)
        while True:
            if atomic_load(at) >= target:
                return True
            if atomic_load(stop_a) or (stop_b != 0 and atomic_load(stop_b)):
                return False
            j[J_AT], j[J_TARGET], j[J_WAITERS], j[J_STOP_A], j[J_STOP_B] = at, target, waiters, stop_a, stop_b
            j[J_STATE] = WAITING
            swap_ucontext(j[J_OWN], j[J_SCHED])
            j[J_STATE] = RUNNING
    while True:
        if atomic_load(at) >= target:
            return True
        if atomic_load(stop_a) or (stop_b != 0 and atomic_load(stop_b)):
            return False
        atomic_add(waiters, 1)
        v = atomic_load(at)
        if v < target:
            futex_wait(at, v, SLEEP_US)
        atomic_add(waiters, -1)


@njit(cache=True)
def advance(at, step, waiters):
    """Add ``step`` to the int64 at ``at`` and wake whoever sleeps on it (``waiters``: its waiter count)."""
    atomic_add(at, step)
    if atomic_load(waiters):
        futex_wake(at)


@njit(cache=True)
def gate(w):
    """The start of a core's phase in a SyncAll launch (its start, or a SyncAll's release): sleep until the core
    BAR_GATE places before it has finished this phase. So a phase runs as many cores at once as the launch has host
    threads, in core order, as a launch without SyncAll runs them: the others sleep instead of taking the host's
    cores and caches from the ones at work, and the cores whose atomic adds come next are the ones running. A
    core before it that stopped, or an abort, ends the wait (False)."""
    bar = w[X_SYNC_AT]
    if bar == 0:
        return True
    n = atomic_load(bar + BAR_GATE * 8)
    if n <= 0 or w[X_IDX] < n:
        return True
    at = w.ctypes.data - n * (CTX_WORDS * 8)  # the context block of core X_IDX - n
    return wait_until(at + X_ARRIVED * 8, w[X_SYNC_GEN] + 1, at + X_WAITERS * 8, at + X_FAULT * 8, bar + BAR_ABORT * 8,
                      w[X_CORO])


@njit(cache=True)
def finished_phase(w, step):
    """This core's X_ARRIVED advanced by ``step`` (it finished a phase), the cores waiting for that woken."""
    advance(w.ctypes.data + X_ARRIVED * 8, step, w.ctypes.data + X_WAITERS * 8)


@njit(cache=True)
def wait_finished(w, j, p):
    """Sleep until core ``j`` (of this core's launch) has finished ``p`` phases, or has stopped."""
    at = w.ctypes.data + (j - w[X_IDX]) * (CTX_WORDS * 8)
    bar = w[X_SYNC_AT]
    wait_until(at + X_ARRIVED * 8, p, at + X_WAITERS * 8, at + X_FAULT * 8, bar + BAR_ABORT * 8 if bar else 0,
               w[X_CORO])


@njit(cache=True)
def _ring_if_due(bar, block_dim):
    """Wake the launching thread if it has something to do: every core that has not ended waits at the SyncAll
    (the phase ends, or the cores cannot all reach it), or the launch gave up."""
    waiting = atomic_load(bar + BAR_ARRIVED * 8) - atomic_load(bar + BAR_RELEASED * 8) * block_dim
    if waiting + atomic_load(bar + BAR_EXITED * 8) >= block_dim or atomic_load(bar + BAR_ABORT * 8):
        advance(bar + BAR_BELL * 8, 1, bar + BAR_BELL_WAITERS * 8)


@njit(cache=True)
def arrive(bar, block_dim):
    """A core at a SyncAll: counted."""
    atomic_add(bar + BAR_ARRIVED * 8, 1)
    _ring_if_due(bar, block_dim)


@njit(cache=True)
def await_release(bar, g, coro):
    """Sleep until SyncAll number ``g`` + 1 is released (True), or the launch gives up (False)."""
    return wait_until(bar + BAR_RELEASED * 8, g + 1, bar + BAR_RELEASE_WAITERS * 8, bar + BAR_ABORT * 8, 0, coro)


@njit(cache=True)
def leave(bar, block_dim, failed, arrived):
    """A core has ended (``failed``: with an exception, which gives the launch up): counted. A failed core wakes
    whoever sleeps on its X_ARRIVED word (``arrived``: its address) and on the release: they see the stop."""
    if failed:
        atomic_add(bar + BAR_ABORT * 8, 1)
        futex_wake(arrived)
        futex_wake(bar + BAR_RELEASED * 8)
    atomic_add(bar + BAR_EXITED * 8, 1)
    _ring_if_due(bar, block_dim)


# The launching thread's side (called from Python; nogil so that the cores' threads run meanwhile)

@njit(cache=True, nogil=True, host=True)
def give_up(bar):
    """The launch given up (the cores cannot all reach the next SyncAll, or the launching thread was
    interrupted): the threads asleep on the release woken to see it."""
    atomic_add(bar + BAR_ABORT * 8, 1)
    futex_wake(bar + BAR_RELEASED * 8)


@njit(cache=True, nogil=True, host=True)
def release(bar):
    """The next SyncAll released: its waiting cores woken."""
    advance(bar + BAR_RELEASED * 8, 1, bar + BAR_RELEASE_WAITERS * 8)


@njit(cache=True, nogil=True, host=True)
def listen(bar, rung, timeout_us):
    """Sleep until the bell has rung more than ``rung`` times, or ``timeout_us`` passed; the bell's count."""
    at = bar + BAR_BELL * 8
    waiters = bar + BAR_BELL_WAITERS * 8
    atomic_add(waiters, 1)
    v = atomic_load(at)
    if v <= rung:
        futex_wait(at, v, timeout_us)
    atomic_add(waiters, -1)
    return atomic_load(at)

