"""The cores of a SyncAll launch as coroutines on the host threads.

A kernel that calls SyncAll cannot run its cores one after another: each keeps its state (locals, queues, UB)
across the barrier. Here each host thread runs its share of the cores as user contexts (glibc's ``makecontext`` /
``swapcontext``), each on a stack of its own: a core that must wait (for the gate, its atomic-add turn, the
release of a SyncAll) switches to its thread's scheduler, which switches to the lowest core of the thread that can
go on, or sleeps on the word the lowest waiting core waits for when none can. A switch costs one system call
(glibc saves the signal mask), less than the thread wake that a core on a host thread of its own would cost at
each wait.

The core's C entry (``entry_<build>`` of the generated core loop, :mod:`tilesim.runtime.launcher`) rebuilds the loop's
arguments from the launch's argument record and runs ``cores(c, c + 1, ...)``.
"""

from __future__ import annotations

import numpy as np
from numba import carray

from tilesim.jit import njit
from tilesim.jit.intrinsics import (
    UCONTEXT_BYTES,
    address_as_pointer,
    atomic_add,
    atomic_load,
    futex_wait,
    get_ucontext,
    make_ucontext,
    swap_ucontext,
)
from tilesim.machine.waits import (
    ENDED,
    FAILED,
    J_ARGS,
    J_AT,
    J_CORE,
    J_OWN,
    J_SCHED,
    J_STATE,
    J_STOP_A,
    J_STOP_B,
    J_TARGET,
    J_WAITERS,
    JOB_WORDS,
    NEW,
    WAITING,
)

STACK_BYTES = 1 << 20  # a core's stack
IDLE_SLEEP_US = 1000  # a scheduler whose cores all wait sleeps on the first one's word, at most this long


@njit(cache=True)
def _can_go_on(j):
    if j[J_STATE] == NEW:
        return True
    if j[J_STATE] != WAITING:
        return False
    return atomic_load(j[J_AT]) >= j[J_TARGET] or atomic_load(j[J_STOP_A]) != 0 or (
        j[J_STOP_B] != 0 and atomic_load(j[J_STOP_B]) != 0)


@njit(cache=True, nogil=True, host=True)
def run_coroutines(jobs, contexts, stacks, entry, args_at, cores):
    """Run ``cores`` (this host thread's, rising) of a launch to their end as coroutines: ``entry`` the C entry's
    address, ``args_at`` the argument record's; ``jobs`` (a row each, JOB_WORDS), ``contexts`` (UCONTEXT_BYTES
    each, and the scheduler's after them) and ``stacks`` (a row each) this thread's."""
    n = cores.size
    sched = contexts.ctypes.data + n * UCONTEXT_BYTES
    for i in range(n):
        j = jobs[i]
        j[:] = 0
        j[J_OWN] = contexts.ctypes.data + i * UCONTEXT_BYTES
        j[J_SCHED] = sched
        j[J_ARGS] = args_at
        j[J_CORE] = cores[i]
        get_ucontext(j[J_OWN])
        u = carray(address_as_pointer(j[J_OWN], np.int64), 5)  # uc_link, then uc_stack: ss_sp, ss_flags, ss_size
        u[1] = sched
        u[2] = stacks.ctypes.data + i * stacks.shape[1]
        u[3] = 0
        u[4] = stacks.shape[1]
        make_ucontext(j[J_OWN], entry, jobs.ctypes.data + i * JOB_WORDS * 8)
    left = n
    while left > 0:
        ran = False
        for i in range(n):
            j = jobs[i]
            if _can_go_on(j):
                swap_ucontext(sched, j[J_OWN])
                if j[J_STATE] == ENDED or j[J_STATE] == FAILED:
                    left -= 1
                ran = True
                break  # the lowest core that can go on, each time
        if not ran:
            for i in range(n):
                j = jobs[i]
                if j[J_STATE] == WAITING:
                    atomic_add(j[J_WAITERS], 1)
                    v = atomic_load(j[J_AT])
                    if v < j[J_TARGET]:
                        futex_wait(j[J_AT], v, IDLE_SLEEP_US)
                    atomic_add(j[J_WAITERS], -1)
                    break
