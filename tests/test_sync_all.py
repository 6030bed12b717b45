"""SyncAll inside a kernel (tilesim.machine.sync.sync_all): the cores meet, what one wrote to GM before it is what
another reads after it, each SyncAll ends a phase for the reports, checked mode and the cost model, and cores that
cannot all reach the same SyncAll stop the launch instead of hanging it."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import tilesim
from tilesim import machine as asc
from tilesim.cost.model import estimate
from tilesim.runtime.launcher import KernelError, kernel, launch

N = 64


@dataclass(frozen=True)
class Case:
    case: int  # 0: correct; 1: core 1 skips the SyncAll; 2: core 1 stops (DeQue of an empty queue) before it;
    # after it, the last core raises 3: a ValueError of constants, 4: one of values known when it runs, where the
    # others wait at a second SyncAll


@kernel
def two_phases(ctx, t, x, parts, total):
    """Phase 1: each core copies x + its index into its row of ``parts``. Phase 2: the last core sums the rows."""
    pipe = asc.TPipe(ctx)
    q = pipe.init_buffer(asc.TQue(asc.VECIN, 1), 2, N * 4)
    qo = pipe.init_buffer(asc.TQue(asc.VECOUT, 1), 1, N * 4)
    c, n = asc.get_block_idx(ctx), asc.get_block_num(ctx)
    a = q.alloc_tensor(asc.float32)
    asc.data_copy(a, x, N)
    q.enque(a)
    a = q.deque(asc.float32)
    b = qo.alloc_tensor(asc.float32)
    asc.adds(b, a, c * 1.0, N)
    qo.enque(b)
    b = qo.deque(asc.float32)
    asc.data_copy(parts[c * N], b, N)
    qo.free_tensor(b)
    q.free_tensor(a)
    if t.case == 2 and c == 1:
        q.deque(asc.float32)
    if not (t.case == 1 and c == 1):
        asc.sync_all(ctx)
    if t.case >= 3:  # the last core raises; the others wait for it at the next SyncAll
        if c == n - 1:
            if t.case == 3:
                raise ValueError("the last part is not ready")
            raise ValueError("part", c, n * 10)
        asc.sync_all(ctx)
    if c == n - 1:
        s = qo.alloc_tensor(asc.float32)
        asc.duplicate(s, 0.0, N)
        for r in range(n):
            p = q.alloc_tensor(asc.float32)
            asc.data_copy(p, parts[r * N], N)
            q.enque(p)
            p = q.deque(asc.float32)
            asc.pipe_barrier(ctx, asc.PIPE_V)
            asc.add(s, s, p, N)
            q.free_tensor(p)
        qo.enque(s)
        s = qo.deque(asc.float32)
        asc.data_copy(total, s, N)
        qo.free_tensor(s)


def _run(case: int, cores: int = 4, checks: bool = True) -> tuple[np.ndarray, tilesim.RunReport]:
    x = np.arange(N, dtype=np.float32)
    parts, total = np.zeros(cores * N, np.float32), np.zeros(N, np.float32)
    rep = launch(two_phases, Case(case), x, parts, total, block_dim=cores, outputs=2, checks=checks)
    return total, rep


@pytest.mark.parametrize("checks", [False, True])
def test_what_a_core_wrote_before_sync_all_another_reads_after_it(checks: bool) -> None:
    total, rep = _run(0, checks=checks)
    np.testing.assert_array_equal(total, 4 * np.arange(N, dtype=np.float32) + (0 + 1 + 2 + 3))
    assert rep.total("mte3_bytes") == (4 + 1) * N * 4


def test_each_sync_all_ends_a_phase_for_the_cost_model() -> None:
    _, reports = tilesim.recorded(lambda: _run(0, checks=False))
    e = estimate(reports[0])
    assert len(e.phase_us) == 2
    assert e.total_us > sum(e.phase_us)  # the launch and the SyncAll between the phases


def test_cores_that_cannot_all_reach_the_sync_all_stop_the_launch() -> None:
    with pytest.raises(KernelError, match=r"cores \[1\] ended without reaching SyncAll number 1"):
        _run(1, checks=False)


def test_a_core_that_stops_before_the_sync_all_is_the_one_reported() -> None:
    with pytest.raises(KernelError, match="core 1, q: DeQue of an empty queue"):
        _run(2, checks=False)
    total, _ = _run(0, cores=3, checks=False)  # and the next launch runs
    np.testing.assert_array_equal(total, 3 * np.arange(N, dtype=np.float32) + 3)


_RAISES = {3: ('raise ValueError("the last part is not ready")', "the last part is not ready"),
           4: ('raise ValueError("part", c, n * 10)', "('part', 3, 40)")}  # on 4 cores


@pytest.mark.parametrize("checks", [False, True])
@pytest.mark.parametrize(("case", "cores"), [(3, 4), (4, 4), (3, 1)])
def test_an_exception_a_core_raises_reaches_the_caller_as_it_is(checks: bool, case: int, cores: int) -> None:
    """The exception the kernel raised after a SyncAll, its type and message (constant or computed), blamed on the
    core that raised it, not on the cores that gave the SyncAll up because it stopped."""
    statement, message = _RAISES[case]
    with pytest.raises(ValueError) as raised:
        _run(case, cores=cores, checks=checks)
    assert str(raised.value) == message
    line = next(i for i, text in enumerate(Path(__file__).read_text().splitlines(), 1) if text.strip() == statement)
    assert raised.value.__notes__ == [f"two_phases, core {cores - 1} raised this at {__file__}, line {line}"]
    total, _ = _run(0, cores=3, checks=checks)  # and the next launch runs
    np.testing.assert_array_equal(total, 3 * np.arange(N, dtype=np.float32) + 3)


def test_launches_from_several_threads_at_once_all_finish() -> None:
    """A launch's cores run as coroutines on the host threads' pool, one scheduler a host thread, each waiting for
    the others at a SyncAll: launches made at once from several Python threads must not queue one launch's
    schedulers behind another's (two host threads each: 1 MiB of GM)."""
    x = np.arange(N, dtype=np.float32)
    results: list[np.ndarray | None] = [None] * 3

    def calls(i: int) -> None:
        parts, total = np.zeros(1 << 18, np.float32), np.zeros(N, np.float32)
        for _ in range(5):
            launch(two_phases, Case(0), x, parts, total, block_dim=48, outputs=2)
        results[i] = total

    threads = [threading.Thread(target=calls, args=(i,)) for i in range(3)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=300)
    assert not any(th.is_alive() for th in threads)
    for r in results:
        np.testing.assert_array_equal(r, 48 * x + sum(range(48)))
