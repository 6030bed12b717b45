"""The pipes and their synchronization: PipeBarrier, SetFlag / WaitFlag of a HardEvent and an event id, the
event-id pools of the TPipe, and checked mode's pipe-hazard check.

An AI Core's vector side runs four pipes side by side: the scalar unit (PIPE_S, which also issues every
instruction, in program order), the vector unit (PIPE_V), MTE2 (GM to UB) and MTE3 (UB to GM). A pipe runs its own
instructions in order but lets them overlap; nothing orders two pipes but a sync (``核内同步能力概述.md``):

- ``pipe_barrier(ctx, PIPE_V)``: PipeBarrier<pipe>: the pipe's later instructions wait until its earlier ones
  are done (PIPE_ALL: every pipe's). Not allowed on PIPE_S.
- ``set_flag(ctx, HardEvent.V_S, id)`` / ``wait_flag(ctx, HardEvent.V_S, id)``: SetFlag fires when the source
  pipe's earlier instructions are done; WaitFlag holds the destination pipe until the flag is set, then clears it.
  A wait on PIPE_S holds the scalar unit, and with it the issue of everything after.
- The queue calls are syncs too (``kernel_tquebind_impl.h``): EnQue sets MTE2_V (VECIN) or V_MTE3 (VECOUT) with an
  id from the event's pool and DeQue waits for it; FreeTensor sets V_MTE2 / MTE3_V and the AllocTensor that takes
  the buffer again waits for it. A TBuf has none.
- ``pipe.alloc_event_id(HardEvent.V_S)``, ``release_event_id``, ``fetch_event_id``: each HardEvent's pool of 8
  ids (A2), shared with the queues, lowest free id first.
- ``sync_all(ctx)``: SyncAll, the barrier of all the launch's cores (each core's pipes drained first). A kernel
  that calls it runs its cores as coroutines on the host threads (:mod:`tilesim.runtime.coroutines`), each thread its
  cores in order, a core that waits switching to the next (:mod:`tilesim.machine.waits`); the launch ends a
  phase at each SyncAll (checked mode's race check between cores and the cost model take phases as they took
  the shipped kernels'). Cores that do not all reach the same SyncAll would hang the NPU: the launch stops with a
  KernelError naming them.

Fast mode counts the syncs (``pipe_barriers``, ``set_flags``, ``wait_flags``) and keeps the pools; the rest is
checked mode's. There, every UB access is recorded per 32 B granule with the pipe and the instruction that made
it, and each pipe keeps a vector clock of the instructions of every pipe it knows to be done (a barrier, a wait,
a queue call move it). An access to bytes another pipe wrote (RAW), or a write to bytes another pipe read (WAR) or
wrote (WAW), that no sync orders after the other is a finding, as msSanitizer's racecheck reports one: "V (Add)
reads x[0:4096] written by MTE2 (DataCopyPad) with no MTE2_V sync or DeQue between them". Within one pipe RAW and
WAW need a PipeBarrier (V on A2; MTE2 and MTE3 onto overlapping UB); a pipe's WAR is taken as ordered (it reads its
operands in issue order). So is anything after a scalar access: the scalar unit runs in order.

BiSheng's ``--cce-auto-sync`` (on by default; ``launch(..., auto_sync=False)`` turns it off) inserts the V-V
barriers and the syncs between PIPE_S and the other pipes itself: with it on, a hazard between those pipes is not
a finding, and the sync the compiler would insert is applied where the dependence is. The hazards between V, MTE2
and MTE3, and every hazard on TBuf memory an MTE touches, are the author's in either setting. The synccheck
findings come too: a WaitFlag with no SetFlag of its event and id (the NPU waits for ever: a wrong event id), a
SetFlag on a flag already set, and a kernel's SetFlag never waited for.
"""

from __future__ import annotations

from enum import IntEnum

import numpy as np
from numba import types
from numba.extending import overload

from tilesim.core.pipes import LANE_LETTERS, LANE_OF_PIPE, LANE_SCALAR, PIPE_ALL
from tilesim.core.records import HZ_EVENTS, PIPE_BARRIERS, SET_FLAGS, WAIT_FLAGS, count_sync, counters_of
from tilesim.jit import OVERLOAD_OPTIONS, njit
from tilesim.machine.atomic import finish_phase
from tilesim.machine.hazard import hz_barrier, hz_set, hz_wait
from tilesim.machine.tensor import (
    N_EVENT_POOLS,
    X_BLOCK_NUM,
    X_CORO,
    X_EVT_POOL,
    X_SYNC_AT,
    X_SYNC_GEN,
    KernelContextType,
    core_of,
    ctx_words,
    fault,
)
from tilesim.machine.waits import arrive, await_release, gate


class HardEvent(IntEnum):
    """HardEvent: SRC_DST, the destination pipe waits for the source (the AIV's, ``HardEventAiv`` of
    ``kernel_event.h``)."""

    MTE2_V = 0
    V_MTE2 = 1
    MTE3_V = 2
    V_MTE3 = 3
    V_V = 4
    MTE3_MTE2 = 5
    MTE2_MTE3 = 6
    S_V = 7
    V_S = 8
    S_MTE2 = 9
    MTE2_S = 10
    S_MTE3 = 11
    MTE3_S = 12


assert len(HardEvent) <= min(HZ_EVENTS, N_EVENT_POOLS)
# Each event's source and destination lane (tilesim.core.pipes).
EVENT_SRC = tuple(LANE_LETTERS.index(e.name.split("_")[0]) for e in HardEvent)
EVENT_DST = tuple(LANE_LETTERS.index(e.name.split("_")[1]) for e in HardEvent)
EVENT_IDS = 8  # QUE_MAX_EVENT on A2 (2201)

# ---------------------------------------------------------------------------------------------------------------
# The event-id pools (every build: a kernel computes with the ids)

FAULT_EVENT_POOL = 10  # tilesim.machine.pipe's FAULT_* numbering: AllocEventID with every id taken
FAULT_EVENT_ID = 11  # an event id outside [0, 8), or PipeBarrier on PIPE_S or a pipe not on the AIV
FAULT_SYNC_ALL = 13  # SyncAll in a launch that did not expect it (detail -1), or given up (another core stopped)


@njit(cache=True)
def _stop(w, kind, detail):
    fault(w, kind, np.int64(-1), detail)


@njit(cache=True)
def alloc_id(w, ev):
    """AllocEventID: the lowest free id of event ``ev``'s pool, now taken."""
    m = w[X_EVT_POOL + ev]
    for k in range(EVENT_IDS):
        if not (m >> k) & 1:
            w[X_EVT_POOL + ev] = m | (np.int64(1) << k)
            return np.int64(k)
    _stop(w, FAULT_EVENT_POOL, ev)
    return np.int64(-1)


@njit(cache=True)
def release_id(w, ev, k):
    """ReleaseEventID: id ``k`` of event ``ev`` free again."""
    w[X_EVT_POOL + ev] &= ~(np.int64(1) << k)


@njit(cache=True)
def fetch_id(w, ev):
    """FetchEventID: the lowest free id of event ``ev``, not taken."""
    m = w[X_EVT_POOL + ev]
    for k in range(EVENT_IDS):
        if not (m >> k) & 1:
            return np.int64(k)
    _stop(w, FAULT_EVENT_POOL, ev)
    return np.int64(-1)


@njit(cache=True)
def set_event(core, w, ev, k, by):
    """SetFlag of event ``ev``, id ``k``: counted, and in checked mode the flag set with the source's clock
    (``by``: 1 the kernel's own, 2 a queue call's)."""
    if k < 0 or k >= EVENT_IDS:
        _stop(w, FAULT_EVENT_ID, k)
    count_sync(core, EVENT_SRC[ev], SET_FLAGS, ev * EVENT_IDS + k)
    hz_set(core, ev, k, by, EVENT_SRC[ev])


@njit(cache=True)
def wait_event(core, w, ev, k):
    """WaitFlag of event ``ev``, id ``k``: counted, and in checked mode the destination pipe waits."""
    if k < 0 or k >= EVENT_IDS:
        _stop(w, FAULT_EVENT_ID, k)
    count_sync(core, EVENT_DST[ev], WAIT_FLAGS, ev * EVENT_IDS + k)
    hz_wait(core, ev, k, EVENT_DST[ev])


# ---------------------------------------------------------------------------------------------------------------
# The kernel's calls


def set_flag(ctx, event, event_id):  # type: ignore[no-untyped-def]
    """SetFlag<event>(eventId): ``event`` a :class:`HardEvent`, ``event_id`` 0 to 7."""


def wait_flag(ctx, event, event_id):  # type: ignore[no-untyped-def]
    """WaitFlag<event>(eventId)."""


def pipe_barrier(ctx, pipe):  # type: ignore[no-untyped-def]
    """PipeBarrier<pipe>: PIPE_V, PIPE_MTE2, PIPE_MTE3 or PIPE_ALL."""


@overload(set_flag, jit_options=OVERLOAD_OPTIONS)
def _set_flag(ctx, event, event_id):  # type: ignore[no-untyped-def]
    if not isinstance(ctx, KernelContextType):
        return None
    return lambda ctx, event, event_id: set_event(core_of(ctx), ctx_words(ctx.ctx), np.int64(event),
                                                  np.int64(event_id), 1)


@overload(wait_flag, jit_options=OVERLOAD_OPTIONS)
def _wait_flag(ctx, event, event_id):  # type: ignore[no-untyped-def]
    if not isinstance(ctx, KernelContextType):
        return None
    return lambda ctx, event, event_id: wait_event(core_of(ctx), ctx_words(ctx.ctx), np.int64(event),
                                                   np.int64(event_id))


@njit(cache=True)
def _barrier(core, w, pipe):
    if pipe == PIPE_ALL:
        q = np.int64(-1)
    else:
        q = LANE_OF_PIPE[pipe] if 0 <= pipe < len(LANE_OF_PIPE) else np.int64(-1)
        if q < 0 or q == LANE_SCALAR:
            _stop(w, FAULT_EVENT_ID, 100 + pipe)
    count_sync(core, q if q >= 0 else LANE_SCALAR, PIPE_BARRIERS, q)
    hz_barrier(core, q)


@overload(pipe_barrier, jit_options=OVERLOAD_OPTIONS)
def _pipe_barrier(ctx, pipe):  # type: ignore[no-untyped-def]
    if not isinstance(ctx, KernelContextType):
        return None
    return lambda ctx, pipe: _barrier(core_of(ctx), ctx_words(ctx.ctx), np.int64(pipe))


def pipe_barrier_run(ctx, pipe, n):  # type: ignore[no-untyped-def]
    """``n`` PipeBarrier<pipe> with nothing issued between them: an Ascend C API's loop whose body issued only its
    barrier (LayerNormGrad's BrcbLastDimImpl for fewer than 8 rows: one a 32 B column block of H). The fast build
    counts them at once (the same counts); the checked build issues each, for the log and the check."""


@overload(pipe_barrier_run, jit_options=OVERLOAD_OPTIONS)
def _pipe_barrier_run(ctx, pipe, n):  # type: ignore[no-untyped-def]
    if not isinstance(ctx, KernelContextType):
        return None
    if isinstance(ctx.checks, types.NoneType):
        def counted(ctx, pipe, n):  # type: ignore[no-untyped-def]
            if n > 0:
                core = core_of(ctx)
                _barrier(core, ctx_words(ctx.ctx), np.int64(pipe))
                counters_of(core)[PIPE_BARRIERS] += n - 1
        return counted

    def issued(ctx, pipe, n):  # type: ignore[no-untyped-def]
        core = core_of(ctx)
        for _ in range(n):
            _barrier(core, ctx_words(ctx.ctx), np.int64(pipe))
    return issued


@njit(cache=True)
def _sync_all(core, w):
    hz_barrier(core, -1)
    bar = w[X_SYNC_AT]
    if bar == 0:
        _stop(w, FAULT_SYNC_ALL, -1)
    finish_phase(w, 1)  # its atomic adds land, and the cores after it may make theirs of this phase
    g = w[X_SYNC_GEN]
    w[X_SYNC_GEN] = g + 1
    arrive(bar, w[X_BLOCK_NUM])
    if not (gate(w) and await_release(bar, g, w[X_CORO])):  # its predecessor's next phase first: then the
        # release is past
        _stop(w, FAULT_SYNC_ALL, g)


@njit(cache=True)
def enter_phase(w):
    """A core of a SyncAll launch at its start: its turn, behind the cores before it
    (:func:`tilesim.machine.waits.gate`); stopped if one of them stopped or the launch gave up."""
    if not gate(w):
        _stop(w, FAULT_SYNC_ALL, w[X_SYNC_GEN])


def sync_all(ctx):  # type: ignore[no-untyped-def]
    """SyncAll(): wait until every core of the launch has reached this SyncAll."""


@overload(sync_all, jit_options=OVERLOAD_OPTIONS)
def _sync_all_typed(ctx):  # type: ignore[no-untyped-def]
    if not isinstance(ctx, KernelContextType):
        return None
    return lambda ctx: _sync_all(core_of(ctx), ctx_words(ctx.ctx))
