"""TPipe.Reset (``tilesim.machine.pipe``, ``kernel_tpipe_impl.h``): the WaitFlag of each free queue buffer's pending
FreeTensor event, the pool back to UB offset 0 (the buffers placed after it lie over the earlier ones, as
GroupNormGrad's second stage does after its first), the event ids free again; counted in fast mode, ordered in
checked mode."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

import tilesim
from tilesim import machine as asc
from tilesim.core.timeline import QUEUE
from tilesim.cost.model import estimate_all, estimated
from tilesim.runtime.launcher import kernel, launch

N = 64


@dataclass(frozen=True)
class Case:
    frees: int  # queue buffers freed before the Reset (0, 1 or 2 of the two)
    taken: int  # event ids of V_S taken by AllocEventID before the Reset


@kernel
def reset_kernel(ctx, t, x, y, ids):
    """Stage 1: a VECIN queue of two buffers, ``t.frees`` of them used and freed, a TBuf; Reset; stage 2: a queue
    placed again from offset 0 copies x + 1 out; ``ids`` gets the V_S id AllocEventID gives after the Reset."""
    pipe = asc.TPipe(ctx)
    q = pipe.init_buffer(asc.TQue(asc.VECIN, 1), 2, N * 4)
    tmp = pipe.init_buffer(asc.TBuf(asc.VECCALC), N * 4)
    asc.duplicate(tmp.get(asc.float32), 0.0, N)
    for _ in range(t.frees):
        a = q.alloc_tensor(asc.float32)
        asc.data_copy(a, x, N)
        q.enque(a)
        a = q.deque(asc.float32)
        q.free_tensor(a)
    for _ in range(t.taken):
        pipe.alloc_event_id(asc.HardEvent.V_S)
    pipe.reset()
    q2 = pipe.init_buffer(asc.TQue(asc.VECOUT, 1), 1, N * 4)
    qi = pipe.init_buffer(asc.TQue(asc.VECIN, 1), 1, N * 4)
    a = qi.alloc_tensor(asc.float32)
    asc.data_copy(a, x, N)
    qi.enque(a)
    a = qi.deque(asc.float32)
    b = q2.alloc_tensor(asc.float32)
    asc.adds(b, a, 1.0, N)
    q2.enque(b)
    qi.free_tensor(a)
    b = q2.deque(asc.float32)
    asc.data_copy(y, b, N)
    q2.free_tensor(b)
    ev = pipe.alloc_event_id(asc.HardEvent.V_S)
    ids.set_value(0, ev)


def _run(frees: int, taken: int, checks: bool) -> tuple[np.ndarray, np.ndarray, object]:
    x = np.arange(N, dtype=np.float32)
    y, ids = np.zeros(N, np.float32), np.full(8, -1, np.int32)
    rep = launch(reset_kernel, Case(frees, taken), x, y, ids, block_dim=1, outputs=2, checks=checks)
    return y, ids, rep


@pytest.mark.parametrize("checks", [False, True])
@pytest.mark.parametrize("frees", [0, 1, 2])
def test_reset_waits_for_each_freed_buffer_and_places_from_zero(frees: int, checks: bool) -> None:
    y, ids, rep = _run(frees, 3, checks)
    np.testing.assert_array_equal(y, np.arange(N, dtype=np.float32) + 1)
    assert ids[0] == 0  # the ids AllocEventID took before the Reset are free again
    # stage 1: each buffer freed one EnQue, one FreeTensor (set) and one DeQue (wait), and one wait in the Reset;
    # stage 2: the two EnQues, FreeTensors and DeQues
    assert rep.total("set_flags") == 2 * frees + 4
    assert rep.total("wait_flags") == frees + frees + 2
    placed = [(b.name, b.offset, b.nbytes, b.buffer_num) for b in rep.ub_plan.buffers]
    assert placed == [("q", 0, N * 4, 2), ("tmp", 2 * N * 4, N * 4, 1), ("q2", 0, N * 4, 1), ("qi", N * 4, N * 4, 1)]


@kernel
def staged_kernel(ctx, t, x, y):
    """More vector instructions than a core queues before it schedules them (tilesim.core.timeline.QUEUE), then SyncAll,
    Reset and a second stage whose buffers come after: while the first stage runs, the core's plan has fewer rows
    than the launch's."""
    pipe = asc.TPipe(ctx)
    tmp = pipe.init_buffer(asc.TBuf(asc.VECCALC), N * 4)
    a = tmp.get(asc.float32)
    asc.data_copy(a, x, N)
    asc.pipe_barrier(ctx, asc.PIPE_ALL)
    for _ in range(t.frees):
        asc.adds(a, a, 1.0, N)
    asc.sync_all(ctx)
    pipe.reset()
    q = pipe.init_buffer(asc.TQue(asc.VECIN, 1), 1, N * 4)
    q2 = pipe.init_buffer(asc.TQue(asc.VECOUT, 1), 1, N * 4)
    b = q.alloc_tensor(asc.float32)
    asc.data_copy(b, x, N)
    q.enque(b)
    b = q.deque(asc.float32)
    c = q2.alloc_tensor(asc.float32)
    asc.adds(c, b, 1.0, N)
    q2.enque(c)
    q.free_tensor(b)
    c = q2.deque(asc.float32)
    asc.data_copy(y, c, N)
    q2.free_tensor(c)


@pytest.mark.usefixtures("launches_as_asked")
def test_a_launch_scheduled_while_it_runs_places_its_state_by_the_launchs_plan() -> None:
    """A core that schedules its queue before its TPipe has placed every buffer finds its state where the launch
    laid it out (after the slot bases of the whole plan), and the estimate is the log's replay."""
    x = np.arange(N, dtype=np.float32)

    def call():  # type: ignore[no-untyped-def]
        y = np.zeros(N, np.float32)
        launch(staged_kernel, Case(3 * QUEUE, 0), x, y, block_dim=2)
        return (y,)

    rec, logged = tilesim.recorded(call)
    out, online = estimated(call)
    np.testing.assert_array_equal(rec[0], out[0])
    np.testing.assert_array_equal(out[0], x + 1)
    for a, b in zip(estimate_all(logged, stages=False), online, strict=True):
        assert (a.total_us, a.phase_us) == (b.total_us, b.phase_us)
        np.testing.assert_array_equal(a.core_us, b.core_us)
