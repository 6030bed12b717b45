"""The order in which the cores' atomic adds into GM land (copies under SetAtomicAdd), on any host threads.

On the NPU the atomic adds of several cores into one GM address land in an order nobody fixes, and a float sum
rounds differently in each. tilesim takes one: core order, phase by phase (a SyncAll ends a phase), each core's
adds in its program order: the order of cores run one after another.

A core adds at once when its turn has come (every core before it has finished the phase). Until then its adds go
to its log (destination, element count, type, data), which it replays when its turn comes, at the latest when it
ends the phase: a core finishes a phase only after its adds have landed. Each host thread runs its cores in
rising order, so the first unfinished core never waits; the others wait at most at their phase's end, by when
their neighbours on the other threads are about done too. A log that fills up makes its core wait for its turn
there. A core before it that stopped (a fault) ends a wait.
"""

from __future__ import annotations

import numpy as np
from numba import carray

from tilesim.jit import njit
from tilesim.jit.intrinsics import address_as_pointer, atomic_load, copy_bytes, store_fence
from tilesim.machine.movers import add_rows
from tilesim.machine.tensor import (
    CTX_WORDS,
    X_ALOG_AT,
    X_ALOG_SIZE,
    X_ALOG_USED,
    X_ARRIVED,
    X_ATOMIC_TURN,
    X_FAULT,
    X_IDX,
    X_SYNC_GEN,
)
from tilesim.machine.waits import finished_phase, wait_finished

LOG_ROW_BYTES = 8 << 20  # a core's log: adds it makes before its turn, beyond which it waits for its turn
DONE = np.int64(1) << 30  # added to X_ARRIVED when a core ends: every phase of it finished (below 2**31: the
# word's low half, which a futex watches, changes)
_HEADER = 24  # a log entry: destination address, element count, type (then the data, padded to 8 B)
_ISZ = (4, 2, 2, 4, 2, 1)  # bytes of the atomic types: float, half, bfloat16, int32, int16, int8


@njit(cache=True)
def _turn_came(w, wait):
    """Whether every core before this one has finished the phase (waiting for it with ``wait``)."""
    p = w[X_SYNC_GEN] + 1
    if w[X_ATOMIC_TURN] == p:
        return True
    row0 = w.ctypes.data - w[X_IDX] * (CTX_WORDS * 8)
    for j in range(w[X_IDX]):
        at = row0 + j * (CTX_WORDS * 8)
        if atomic_load(at + X_ARRIVED * 8) < p and not atomic_load(at + X_FAULT * 8):
            if not wait:
                return False
            wait_finished(w, j, p)
    w[X_ATOMIC_TURN] = p
    return True


@njit(cache=True)
def _replay(w):
    """The logged adds, in the order they were made; the log emptied."""
    at, end = w[X_ALOG_AT], w[X_ALOG_AT] + w[X_ALOG_USED]
    while at < end:
        head = carray(address_as_pointer(at, np.int64), 3)
        add_rows(head[0], at + _HEADER, 1, head[1], 0, 0, head[2])
        at += _HEADER + (head[1] * _ISZ[head[2]] + 7) // 8 * 8
    w[X_ALOG_USED] = 0


@njit(cache=True)
def atomic_rows(w, d, s, rows, n, d_pitch, s_pitch, kind):
    """``rows`` rows of ``n`` elements of atomic type ``kind`` from address ``s`` (``s_pitch`` bytes apart) added
    into GM at ``d`` (``d_pitch`` apart): now if this core's turn has come, else into its log."""
    row_bytes = n * _ISZ[kind]
    if rows > 1 and d_pitch == row_bytes and s_pitch == row_bytes:  # one run: one entry, one add
        n, rows = n * rows, 1
        row_bytes = n * _ISZ[kind]
    if _turn_came(w, False):
        if w[X_ALOG_USED]:
            _replay(w)
        add_rows(d, s, rows, n, d_pitch, s_pitch, kind)
        return
    entry = _HEADER + (row_bytes + 7) // 8 * 8
    for r in range(rows):
        if w[X_ALOG_USED] + entry > w[X_ALOG_SIZE]:
            _turn_came(w, True)
            _replay(w)
            add_rows(d + r * d_pitch, s + r * s_pitch, rows - r, n, d_pitch, s_pitch, kind)
            return
        at = w[X_ALOG_AT] + w[X_ALOG_USED]
        head = carray(address_as_pointer(at, np.int64), 3)
        head[0], head[1], head[2] = d + r * d_pitch, n, kind
        copy_bytes(at + _HEADER, s + r * s_pitch, row_bytes)
        w[X_ALOG_USED] += entry


@njit(cache=True)
def finish_phase(w, step):
    """The end of this core's phase (``step`` 1: it reached a SyncAll; DONE: it ended): its logged adds land,
    after waiting for its turn, and the cores after it learn it has finished."""
    if w[X_ALOG_USED]:
        _turn_came(w, True)
        _replay(w)
    store_fence()
    finished_phase(w, step)
