"""Checked mode's pipe-hazard check (tilesim.machine.sync): one fixture kernel per hazard class, each found by kind
and place, and the same kernel with its sync found clean; BiSheng's auto-sync as the switch that decides whose the
V-V and V-S syncs are."""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np
import pytest

import examples.add_tail as add_tail_mod
import tilesim.runtime.launcher
from tilesim import CheckError, options
from tilesim import machine as asc
from tilesim.core import pipes
from tilesim.runtime.launcher import KernelError, kernel, launch

N = 64  # fp32 elements: 256 B, a repeat


@dataclass(frozen=True)
class Case:
    case: int  # which fixture
    synced: int  # 1: with the sync the fixture is about


@kernel
def fixtures(ctx, t, x, z):
    """Each case copies x in, computes, copies z out, with one sync left out unless ``t.synced``. The first buffer
    is a TBuf whose init_buffer is part of a chain (no target of its own): the buffers after it keep their names."""
    pipe = asc.TPipe(ctx)
    tc = pipe.init_buffer(asc.TBuf(asc.VECCALC), N * 4).get(asc.float32)
    qi = pipe.init_buffer(asc.TQue(asc.VECIN, 1), 1, N * 4)
    qo = pipe.init_buffer(asc.TQue(asc.VECOUT, 1), 1, N * 4)
    tb = pipe.init_buffer(asc.TBuf(asc.VECCALC), 2 * N * 4)
    c, synced = t.case, t.synced == 1
    core = asc.get_block_idx(ctx)
    x, z = x[core * 2 * N], z[core * N]  # each core its own part
    if c == 1:  # MTE2 -> V: the vector unit reads the tile without the DeQue
        a = qi.alloc_tensor(asc.float32)
        asc.data_copy(a, x, N)
        if synced:
            qi.enque(a)
            a = qi.deque(asc.float32)
        b = qo.alloc_tensor(asc.float32)
        asc.adds(b, a, 1.0, N)
        qo.enque(b)
        b = qo.deque(asc.float32)
        asc.data_copy(z, b, N)
        qo.free_tensor(b)
        qi.free_tensor(a)
    elif c == 2:  # V -> MTE3: the copy-out without EnQue / DeQue
        a = qi.alloc_tensor(asc.float32)
        asc.data_copy(a, x, N)
        qi.enque(a)
        a = qi.deque(asc.float32)
        b = qo.alloc_tensor(asc.float32)
        asc.muls(b, a, 2.0, N)
        if synced:
            qo.enque(b)
            b = qo.deque(asc.float32)
        asc.data_copy(z, b, N)
        qo.free_tensor(b)
        qi.free_tensor(a)
    elif c == 3:  # MTE3 -> MTE2: a tile copied straight back out, its slot refilled for the next tile
        ev = pipe.alloc_event_id(asc.HardEvent.MTE2_MTE3)
        back = pipe.alloc_event_id(asc.HardEvent.MTE3_MTE2)
        for k in range(2):
            a = qi.alloc_tensor(asc.float32)
            if synced and k > 0:
                asc.wait_flag(ctx, asc.HardEvent.MTE3_MTE2, back)
            asc.data_copy(a, x[k * N // 2], N // 2)
            asc.set_flag(ctx, asc.HardEvent.MTE2_MTE3, ev)
            asc.wait_flag(ctx, asc.HardEvent.MTE2_MTE3, ev)
            asc.data_copy(z[k * N // 2], a, N // 2)
            if synced and k == 0:
                asc.set_flag(ctx, asc.HardEvent.MTE3_MTE2, back)
            qi.free_tensor(a)
        pipe.release_event_id(asc.HardEvent.MTE2_MTE3, ev)
        pipe.release_event_id(asc.HardEvent.MTE3_MTE2, back)
    elif c == 4:  # MTE2 -> MTE2 onto overlapping UB: the second copy may land first
        w = tb.get(asc.float32)
        asc.data_copy(w, x, N)
        if synced:
            asc.pipe_barrier(ctx, asc.PIPE_MTE2)
        asc.data_copy(w[N // 2], x[N], N // 2)
        asc.set_flag(ctx, asc.HardEvent.MTE2_MTE3, 0)
        asc.wait_flag(ctx, asc.HardEvent.MTE2_MTE3, 0)
        asc.data_copy(z, w, N)
    elif c == 5:  # a TBuf written by MTE2, read by V: no queue orders them, only a flag
        w = tb.get(asc.float32)
        asc.data_copy(w, x, N)
        if synced:
            asc.set_flag(ctx, asc.HardEvent.MTE2_V, 0)
            asc.wait_flag(ctx, asc.HardEvent.MTE2_V, 0)
        b = qo.alloc_tensor(asc.float32)
        asc.exp(b, w, N)
        qo.enque(b)
        b = qo.deque(asc.float32)
        asc.data_copy(z, b, N)
        qo.free_tensor(b)
    elif c == 6 or c == 7:  # V -> S (a scalar read of a vector result) and V -> V: the compiler's, or the author's
        a = qi.alloc_tensor(asc.float32)
        asc.data_copy(a, x, N)
        qi.enque(a)
        a = qi.deque(asc.float32)
        b = qo.alloc_tensor(asc.float32)
        asc.adds(b, a, 1.0, N)
        if c == 6:
            if synced:
                asc.set_flag(ctx, asc.HardEvent.V_S, 0)
                asc.wait_flag(ctx, asc.HardEvent.V_S, 0)
            s = b.get_value(0)
            if synced:
                asc.set_flag(ctx, asc.HardEvent.S_V, 0)
                asc.wait_flag(ctx, asc.HardEvent.S_V, 0)
            asc.muls(b, b, s, N)
        else:
            if synced:
                asc.pipe_barrier(ctx, asc.PIPE_V)
            asc.muls(b, b, 3.0, N)
        qo.enque(b)
        b = qo.deque(asc.float32)
        asc.data_copy(z, b, N)
        qo.free_tensor(b)
        qi.free_tensor(a)
    elif c == 8:  # a SetFlag nothing waits for
        asc.set_flag(ctx, asc.HardEvent.V_MTE2, 3)
        if synced:
            asc.wait_flag(ctx, asc.HardEvent.V_MTE2, 3)
    elif c == 9:  # a wrong event id: the wait is for an id never set (on the NPU it waits for ever)
        asc.set_flag(ctx, asc.HardEvent.S_MTE3, 1)
        asc.wait_flag(ctx, asc.HardEvent.S_MTE3, 1 if synced else 2)
    elif c == 10:  # SetFlag twice on one flag before its wait
        asc.set_flag(ctx, asc.HardEvent.MTE3_V, 0)
        if synced:
            asc.wait_flag(ctx, asc.HardEvent.MTE3_V, 0)
        asc.set_flag(ctx, asc.HardEvent.MTE3_V, 0)
        asc.wait_flag(ctx, asc.HardEvent.MTE3_V, 0)
    elif c == 11:  # an event id out of range stops the kernel (CPU-debug asserts)
        asc.set_flag(ctx, asc.HardEvent.V_S, 8 if not synced else 7)
        asc.wait_flag(ctx, asc.HardEvent.V_S, 7)
    elif c == 12:  # case 5 on the chained TBuf: a finding names it, not the queue placed after it
        asc.data_copy(tc, x, N)
        if synced:
            asc.set_flag(ctx, asc.HardEvent.MTE2_V, 0)
            asc.wait_flag(ctx, asc.HardEvent.MTE2_V, 0)
        b = qo.alloc_tensor(asc.float32)
        asc.exp(b, tc, N)
        qo.enque(b)
        b = qo.deque(asc.float32)
        asc.data_copy(z, b, N)
        qo.free_tensor(b)


# case -> (the first finding's kind, buffer or "the flags", byte offset, bytes, words of its sentence, needs auto-sync
# off); each core finds it (the accesses after it are not reported again), and in FOLLOWS what follows from it
FINDINGS = {
    1: ("pipe hazard (RAW)", 'UB buffer "qi"', 0, 256, "V (Adds) reads qi[0:256] (bytes) written by MTE2 (DataCopy) "
        "with no MTE2_V sync or DeQue between them", False),
    2: ("pipe hazard (RAW)", 'UB buffer "qo"', 0, 256, "MTE3 (DataCopy) reads qo[0:256] (bytes) written by V (Muls) "
        "with no V_MTE3 sync or DeQue between them", False),
    3: ("pipe hazard (WAR)", 'UB buffer "qi"', 0, 128, "MTE2 (DataCopy) writes qi[0:128] (bytes) read by MTE3 "
        "(DataCopy) with no MTE3_MTE2 sync between them", False),
    4: ("pipe hazard (WAW)", 'UB buffer "tb"', 128, 128, "MTE2 (DataCopy) writes tb[128:256] (bytes) written by MTE2 "
        "(DataCopy) with no PipeBarrier<PIPE_MTE2> between them", False),
    5: ("pipe hazard (RAW)", 'UB buffer "tb"', 0, 256, "V (Exp) reads tb[0:256] (bytes) written by MTE2 (DataCopy) "
        "with no MTE2_V sync between them", False),
    6: ("pipe hazard (RAW)", 'UB buffer "qo"', 0, 4, "S (GetValue) reads qo[0:4] (bytes) written by V (Adds) with "
        "no V_S sync between them", True),
    7: ("pipe hazard (RAW)", 'UB buffer "qo"', 0, 256, "V (Muls) reads qo[0:256] (bytes) written by V (Adds) with "
        "no PipeBarrier<PIPE_V> between them", True),
    8: ("unpaired SetFlag", "the flags", 3, 0, "Unpaired set_flag instructions detected from PIPE_V to PIPE_MTE2: "
        "SetFlag<HardEvent::V_MTE2>(3) never waited for", False),
    9: ("WaitFlag with no SetFlag", "the flags", 2, 0, "WaitFlag<HardEvent::S_MTE3>(2) with no SetFlag of that event "
        "and id before it", False),
    10: ("SetFlag twice", "the flags", 0, 0, "SetFlag<HardEvent::MTE3_V>(0) on a flag set and not waited for",
         False),
    12: ("pipe hazard (RAW)", 'UB buffer "tc"', 0, 256, "V (Exp) reads tc[0:256] (bytes) written by MTE2 (DataCopy) "
         "with no MTE2_V sync between them", False),
}


FOLLOWS = {
    6: ["pipe hazard (RAW)"],  # with auto-sync off the V-V barrier before Muls is the kernel's too
    9: ["unpaired SetFlag"],  # the SetFlag of id 1 is left waiting
}


def _run(case: int, synced: int, auto_sync: bool | None) -> np.ndarray:
    """Core 1's z (its x: core 0's, 2 N on)."""
    x = np.tile(np.arange(2 * N, dtype=np.float32) / 16, 2)
    z = np.zeros(2 * N, np.float32)
    launch(fixtures, Case(case, synced), x, z, block_dim=2, checks=True, auto_sync=auto_sync)
    np.testing.assert_array_equal(z[:N], z[N:])
    return z[N:]


@pytest.mark.parametrize("case", sorted(FINDINGS))
def test_each_hazard_is_found_by_kind_and_place(case: int) -> None:
    kind, memory, offset, nbytes, words, manual = FINDINGS[case]
    with pytest.raises(CheckError) as e:
        _run(case, 0, auto_sync=not manual)
    v = e.value.violations[0]
    assert (v.kind, v.memory, v.offset, v.nbytes) == (kind, memory, offset, nbytes), str(v)
    assert words in v.detail, v.detail
    for core in (0, 1):
        found = [w for w in e.value.violations if w.core == core]
        assert [w.kind for w in found] == [kind, *FOLLOWS.get(case, [])], e.value.reports


@pytest.mark.parametrize("case", sorted(FINDINGS))
def test_the_kernel_with_its_sync_is_clean(case: int) -> None:
    _run(case, 1, auto_sync=False)


@pytest.mark.parametrize("case", [6, 7])
def test_auto_sync_takes_the_v_v_and_v_s_syncs_on_itself(case: int) -> None:
    z = _run(case, 0, auto_sync=True)
    x = np.arange(N, dtype=np.float32) / 16
    np.testing.assert_array_equal(z, (x + 1) * (1 if case == 6 else 3))


def test_auto_sync_left_to_the_options_follows_them() -> None:
    """A launch's ``auto_sync=None`` is the options' (on by default), which a scope turns off."""
    _run(7, 0, auto_sync=None)
    with options.scope(auto_sync=False), pytest.raises(CheckError) as e:
        _run(7, 0, auto_sync=None)
    assert [v.kind for v in e.value.violations] == ["pipe hazard (RAW)"] * 2  # each core's


def test_an_event_id_out_of_range_stops_the_kernel() -> None:
    with pytest.raises(KernelError, match="8: an event id must be 0 to 7"):
        _run(11, 0, auto_sync=True)
    _run(11, 1, auto_sync=True)


def test_fast_mode_counts_the_syncs_and_the_queue_calls_syncs() -> None:
    x = np.arange(2 * N, dtype=np.float32)
    z = np.zeros(N, np.float32)
    rep = launch(fixtures, Case(6, 1), x, z, block_dim=1)
    np.testing.assert_array_equal(z, x[:N] + 1)
    # EnQue and FreeTensor set a flag each (qi: 1 + 1, qo: 1 + 1), and the kernel its V_S and S_V; the two DeQues
    # and the kernel wait (4), and no AllocTensor found a freed buffer
    assert (rep.total("set_flags"), rep.total("wait_flags"), rep.total("pipe_barriers")) == (6, 4, 0)
    assert rep.ub_plan.names() == ["tc", "qi", "qo", "tb"]  # the chained TBuf's name, the others' their own


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16])
@pytest.mark.parametrize("auto_sync", [True, False])
def test_the_worked_example_is_clean_in_either_setting(dtype: type, auto_sync: bool) -> None:
    """examples/add_tail.py has the queues' syncs and its own PipeBarrier<PIPE_V>s: nothing to find, with two
    buffers a queue (the ping-pong's slot reuse) and a tail."""
    x = np.linspace(-2, 2, 3 * 1000 + 7).astype(dtype)
    t = add_tail_mod.add_tail_tiling(x, core_num=3, tile_len=512, buffer_num=2)
    z = np.zeros_like(x)
    launch(add_tail_mod.add_tail_kernel, t, x, x, z, block_dim=t.block_dim, checks=True, auto_sync=auto_sync)
    np.testing.assert_array_equal(z, add_tail_mod.add_tail(x, x))


@kernel
def atomic_rows(ctx, t, x, z):
    """Every core adds its row of x into z, under SetAtomicAdd<T> (z's own type)."""
    pipe = asc.TPipe(ctx)
    q = pipe.init_buffer(asc.TQue(asc.VECIN, 1), 1, N * 4)
    c = asc.get_block_idx(ctx)
    a = q.alloc_tensor(x.dtype)
    asc.data_copy(a, x[c * N], N)
    asc.set_flag(ctx, asc.HardEvent.MTE2_MTE3, 0)
    asc.wait_flag(ctx, asc.HardEvent.MTE2_MTE3, 0)
    asc.set_atomic_add(ctx, x.dtype)
    asc.data_copy(z, a, N)
    asc.set_atomic_none(ctx)
    q.free_tensor(a)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16, np.int32])
def test_set_atomic_add_adds_every_core_into_gm(dtype: type) -> None:
    cores = 5
    x = (np.arange(cores * N) % 7 - 3).astype(dtype)
    z = np.ones(N, dtype)
    rep = launch(atomic_rows, Case(0, 0), x, z, block_dim=cores, checks=True)
    want = 1 + x.astype(np.float64).reshape(cores, N).sum(axis=0)  # small integers: exact in every type
    np.testing.assert_array_equal(z.astype(np.float64), want)
    assert rep.total("atomic_bytes") == cores * N * np.dtype(dtype).itemsize


@kernel
def atomic_chunks(ctx, t, x, z):
    """Core c adds rows c·K ... c·K + K − 1 of x (K = t.case) into z in turn, under SetAtomicAdd<float>; with
    ``t.synced``, a SyncAll halfway."""
    pipe = asc.TPipe(ctx)
    q = pipe.init_buffer(asc.TQue(asc.VECIN, 1), 1, N * 4)
    c, k_rows = asc.get_block_idx(ctx), t.case
    asc.set_atomic_add(ctx, asc.float32)
    for k in range(k_rows):
        if t.synced == 1 and k == k_rows // 2:
            asc.sync_all(ctx)
        a = q.alloc_tensor(asc.float32)
        asc.data_copy(a, x[(c * k_rows + k) * N], N)
        asc.set_flag(ctx, asc.HardEvent.MTE2_MTE3, 0)
        asc.wait_flag(ctx, asc.HardEvent.MTE2_MTE3, 0)
        asc.data_copy(z, a, N)
        asc.set_flag(ctx, asc.HardEvent.MTE3_MTE2, 0)
        asc.wait_flag(ctx, asc.HardEvent.MTE3_MTE2, 0)
        q.free_tensor(a)
    asc.set_atomic_none(ctx)


def _adds_in_order(z: np.ndarray, rows: np.ndarray, phases: list[range]) -> np.ndarray:
    """z plus the rows of each phase, core after core, each core's rows in turn, in fp32 (the NPU's adds)."""
    acc = z.copy()
    for cores_rows in phases:
        for r in cores_rows:
            acc = (acc + rows[r]).astype(np.float32)
    return acc


@pytest.mark.parametrize("log_bytes", [None, 4096])
@pytest.mark.parametrize("synced", [0, 1])
@pytest.mark.parametrize("checks", [False, True])
def test_atomic_adds_land_in_core_order_on_every_host_thread(synced: int, checks: bool, log_bytes: int | None,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The order of fp32 adds shows in the bits: the cores' adds land core after core (in each SyncAll phase),
    as when the cores run one after another, though the launch (1 MiB of GM) runs on all the host threads; also
    with logs of 4 KiB, which fill up after 15 adds and make the core wait for its turn there."""
    if log_bytes:
        monkeypatch.setattr(tilesim.runtime.launcher, "LOG_ROW_BYTES", log_bytes)
    cores, k_rows = 8, 512
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((cores * k_rows, N)) * 10.0 ** rng.integers(-4, 8, (cores * k_rows, 1)))
    x = x.astype(np.float32)
    z0 = rng.standard_normal(N).astype(np.float32)
    half = k_rows // 2
    if synced:
        phases = [[r for c in range(cores) for r in range(c * k_rows, c * k_rows + half)],
                  [r for c in range(cores) for r in range(c * k_rows + half, (c + 1) * k_rows)]]
    else:
        phases = [list(range(cores * k_rows))]
    want = _adds_in_order(z0, x, phases)
    assert not np.array_equal(want, _adds_in_order(z0, x, [list(range(cores * k_rows))[::-1]]))  # order shows
    z = z0.copy()
    rep = launch(atomic_chunks, Case(k_rows, synced), x, z, block_dim=cores, checks=checks)
    np.testing.assert_array_equal(z, want)
    assert rep.total("atomic_bytes") == x.nbytes


def test_pipe_t_values_and_lanes_name_the_same_pipes():
    """A kernel passes CCE's pipe_t (PIPE_MTE2 is 4); the records index lanes (LANE_MTE2 is 0): each pipe_t of the
    AIV maps to the lane of its own name, and the others to none."""
    assert (asc.PIPE_S, asc.PIPE_V, asc.PIPE_MTE2, asc.PIPE_MTE3, asc.PIPE_ALL) == (0, 1, 4, 5, 6)
    for pipe_t, letter, name in ((asc.PIPE_S, "S", "SCALAR"), (asc.PIPE_V, "V", "VECTOR"),
                                 (asc.PIPE_MTE2, "MTE2", "MTE2"), (asc.PIPE_MTE3, "MTE3", "MTE3")):
        lane = pipes.LANE_OF_PIPE[pipe_t]
        assert (pipes.LANE_LETTERS[lane], pipes.LANE_NAMES[lane]) == (letter, name)
    assert [pipes.LANE_OF_PIPE[p] for p in (pipes.PIPE_M, pipes.PIPE_MTE1, pipes.PIPE_ALL)] == [-1, -1, -1]
    assert sorted(pipes.LANE_OF_PIPE[p] for p in (asc.PIPE_S, asc.PIPE_V, asc.PIPE_MTE2, asc.PIPE_MTE3)) == \
        list(range(pipes.N_LANES))
