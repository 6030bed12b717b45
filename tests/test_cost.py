"""The cost model (tilesim.cost.model) on hand-computed schedules, its monotonicity, the recording it reads, and the
Chrome trace it feeds."""

from __future__ import annotations

import json
import tracemalloc
from dataclasses import replace

import numpy as np
import pytest
import tilesim.kernels as kernels
import tilesim.tiling as tiling
from hypothesis import given, settings
from hypothesis import strategies as st
from tilesim.tiling.rms_norm_grad import SPLIT_D

import tilesim
from tilesim.core.pipes import LANE_MTE2, LANE_MTE3, LANE_NAMES, LANE_SCALAR, LANE_VECTOR
from tilesim.core.records import (
    LOG_FIELDS,
    MTE2_BYTES,
    MTE3_BYTES,
    N_COUNTERS,
    SCALAR_ACCESS,
    SET_FLAGS,
    VEC_BINARY,
    WAIT_FLAGS,
)
from tilesim.core.timeline import l2_hit
from tilesim.core.ub import UbPlan
from tilesim.core.vec_kinds import KIND_OF, VEC_CLASSES, VEC_KINDS, vec_kind
from tilesim.cost.model import estimate, estimate_all, estimated
from tilesim.cost.params import CostParams, cost_params
from tilesim.cost.trace import chrome_trace
from tilesim.runtime import host_threads, launch
from tilesim.runtime.report import RunReport, scheduled

# Round figures, so that schedules can be worked out by hand: 1 GHz (a cycle is a ns), 1 GB/s per MTE (a byte
# is a cycle), no launch or SyncAll cost unless a test sets one.
P = CostParams(family="test", clock_ghz=1.0, gm_bandwidth_gbs=1e9, mte2_core_gbs=1.0, mte3_core_gbs=1.0,
               mte2_latency_cycles=100.0, mte3_latency_cycles=50.0, mte_burst_cycles=0.0, l2_read_rate=0.0,
               vec_startup_cycles=dict.fromkeys(VEC_CLASSES, 10.0),
               vec_repeat_cycles=dict.fromkeys(VEC_KINDS, (2.0, 2.0)),
               scalar_issue_cycles=1.0, get_value_cycles=6.0, sync_all_us=0.0, launch_us=0.0)

X, Z = 0, 1  # UB buffers of the hand-made logs: an input queue and an output queue


SLOTS = 4  # per buffer of :func:`report`'s plan


def slot(buf: int, k: int) -> int:
    """The log's name of slot ``k`` of buffer ``buf`` of :func:`report`'s plan (1 KiB slots, SLOTS per buffer)."""
    assert 0 <= k < SLOTS
    return buf << 32 | (buf * SLOTS * 1024 + k * 1024)


def mte2(dst: int, nbytes: int, gm: int = 0) -> list[int]:
    return [LANE_MTE2, MTE2_BYTES, nbytes, 1, dst, -1, -1, gm, 0, nbytes, nbytes]


def vec(dst: int, src: int, reps: int) -> list[int]:
    return [LANE_VECTOR, VEC_BINARY, reps, 1, dst, src, src, -1, 0, 0, 0]


def mte3(src: int, nbytes: int, gm: int = 1) -> list[int]:
    return [LANE_MTE3, MTE3_BYTES, nbytes, 1, -1, src, -1, gm, 0, nbytes, nbytes]


def tiles(n: int, buffer_num: int, in_bytes: int = 1000, reps: int = 4, out_bytes: int = 1000) -> list[list[int]]:
    """CopyIn, Compute, CopyOut of ``n`` tiles through queues of ``buffer_num`` slots."""
    log = []
    for i in range(n):
        k = i % buffer_num
        log += [mte2(slot(X, k), in_bytes), vec(slot(Z, k), slot(X, k), reps), mte3(slot(Z, k), out_bytes)]
    return log


def report(*phases: list[list[list[int]]], soc: str = "Ascend910B1", in_bytes: int = 0,
           out_bytes: int = 0) -> RunReport:
    """A recorded report of ``phases``, each a list of per-core instruction lists, over GM inputs of ``in_bytes``
    and outputs of ``out_bytes`` (0: unknown, no L2)."""
    cores = len(phases[0])
    logs = [np.array([ins for ph in phases for ins in ph[c]], np.int64).reshape(-1, LOG_FIELDS) for c in range(cores)]
    ends = np.cumsum([[len(ph[c]) for c in range(cores)] for ph in phases], axis=0)
    counters = np.zeros((cores, N_COUNTERS), np.int64)
    for c, log in enumerate(logs):
        for p, col in ((LANE_MTE2, MTE2_BYTES), (LANE_MTE3, MTE3_BYTES)):
            counters[c, col] = log[log[:, 0] == p, 2].sum()
    plan = UbPlan(capacity=196608)
    plan.add("x", 1024, SLOTS)
    plan.add("z", 1024, SLOTS)
    return RunReport(op="hand", soc=soc, tiling=None, ub_plan=plan, block_dim=cores, counters=counters,
                     workspace_size=0, checks=False, wall_s=0.0, gm_names=["in", "out"], log=logs, phase_ends=ends,
                     gm_in_bytes=in_bytes, gm_out_bytes=out_bytes)


def cycles(rep: RunReport, p: CostParams = P) -> float:
    return estimate(rep, p).total_us * 1e3


def test_one_tile_is_the_sum_of_its_stages():
    # CopyIn issued at 1: 100 latency + 1000 B = ends 1101; Compute waits for it: 4 repeats x 2 + 10 start-up
    # = 1119; CopyOut: 50 + 1000 = 2169.
    e = estimate(report([tiles(1, 1)]), P)
    assert e.total_us * 1e3 == pytest.approx(2169)
    assert [s.pipe for s in e.stages] == ["MTE2", "VECTOR", "MTE3"]
    assert [round(s.end_us * 1e3) for s in e.stages] == [1101, 1109, 2169]  # the pipe free again
    assert e.pipe_us[0] * 1e3 == pytest.approx([1100, 8, 1050, 0])
    assert e.bottleneck == "MTE2"
    assert e.core_table().splitlines()[1].split()[:2] == ["0", "2.17"] and "slowest" in e.core_table()


def test_two_tiles_one_buffer_waits_for_the_slot_two_buffers_do_not():
    # One buffer: CopyIn 2 waits for Compute 1 to release X (1119): 2219; Compute 2 2237; CopyOut 2 waits for it
    # and for CopyOut 1 (2169): 3287. Two buffers: CopyIn 2 starts when MTE2 is free (1101): 2201; Compute 2219;
    # CopyOut 2 3269.
    assert cycles(report([tiles(2, 1)])) == pytest.approx(3287)
    assert cycles(report([tiles(2, 2)])) == pytest.approx(3269)


def test_double_buffering_reaches_the_slowest_stage_in_steady_state():
    # Compute-bound tiles: 10-byte transfers, 500 repeats (1000 cycles each). With two buffers every CopyIn after
    # the first hides behind a Compute; with one, each waits for the Compute before it.
    n = 20
    one = cycles(report([tiles(n, 1, 10, 500, 10)]))
    two = cycles(report([tiles(n, 2, 10, 500, 10)]))
    assert two < one
    steady = n * 1000  # the vector pipe busy without a gap
    assert steady <= two <= steady + 2 * (110 + 60 + 10) + n * 2  # plus fill, drain and issue
    assert one >= n * (110 + 1000 + 10)  # CopyIn and Compute add up


def test_vector_start_up_overlaps_back_to_back():
    # Three independent 4-repeat instructions: the pipe takes one every 8 cycles, the last result 10 later.
    log = [vec(slot(Z, k), slot(X, k), 4) for k in range(3)]
    assert cycles(report([log])) == pytest.approx(1 + 3 * 8 + 10)
    # A chain (each reads the last one's result) pays the start-up each time.
    chain = [vec(slot(Z, 0), slot(X, 0), 4), vec(slot(X, 0), slot(Z, 0), 4), vec(slot(Z, 0), slot(X, 0), 4)]
    assert cycles(report([chain])) == pytest.approx(1 + 3 * 18)


def test_scalar_access_stalls_issue():
    # GetValue of Compute's result (done at 1 + 18 = 19): 6 cycles, issue resumes at 25, the next instruction
    # issues at 26.
    log = [vec(slot(Z, 0), slot(X, 0), 4), [LANE_SCALAR, SCALAR_ACCESS, 1, 1, -1, slot(Z, 0), -1, -1, 0, 0, 0],
           vec(slot(Z, 1), slot(X, 1), 4)]
    e = estimate(report([log]), P)
    assert e.total_us * 1e3 == pytest.approx(26 + 18)


def test_the_critical_path_names_the_bottleneck_not_the_busiest_pipe():
    # One tile: issue 1 (SCALAR), CopyIn 1100, Compute 18 after it, CopyOut 1050 after that: the whole span.
    e = estimate(report([tiles(1, 1)]), P)
    assert e.path_us[0] * 1e3 == pytest.approx([1100, 18, 1050, 1])
    # A 4000 B CopyIn (MTE2 busy 4100 cycles) beside 300 links of a chain: a 1-repeat vector instruction (2 + 10
    # start-up) whose result GetValue reads (6), which holds the issue of the next link. MTE2 is the busiest pipe,
    # the chain is the span, and the chain is VECTOR's start-ups and occupancy more than the scalar unit's.
    chain = [mte2(slot(X, 3), 4000)]
    for _ in range(300):
        chain += [vec(slot(Z, 0), slot(X, 0), 1), [LANE_SCALAR, SCALAR_ACCESS, 1, 1, -1, slot(Z, 0), -1, -1, 0, 0, 0]]
    e = estimate(report([chain]), P)
    assert e.pipe_us[0].argmax() == LANE_MTE2 and e.core_us[0] * 1e3 > 4100
    assert e.bottleneck == "VECTOR"
    assert e.path_us[0] * 1e3 == pytest.approx([0, 300 * 12, 0, 300 * 6 + 301])
    assert e.path_us[0].sum() == pytest.approx(e.core_us[0])


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 6), bn=st.integers(1, 2), in_b=st.integers(32, 4096), reps=st.integers(1, 300),
       out_b=st.integers(32, 4096), cores=st.integers(1, 3))
def test_a_cores_critical_path_adds_up_to_its_span(n, bn, in_b, reps, out_b, cores):
    e = estimate(report([tiles(n + c, bn, in_b, reps, out_b) for c in range(cores)]), P)
    np.testing.assert_allclose(e.path_us.sum(axis=1), e.core_us, rtol=1e-12)


def test_load_imbalance_and_the_slowest_core():
    e = estimate(report([tiles(2, 2), tiles(1, 2)]), P)
    assert e.core_us * 1e3 == pytest.approx([3269, 2169])
    assert e.total_us * 1e3 == pytest.approx(3269)
    assert e.slowest_core == 0
    assert e.imbalance == pytest.approx(3269 / ((3269 + 2169) / 2))


def test_phases_are_separated_by_sync_all_and_the_launch_pays_its_overhead():
    p = replace(P, sync_all_us=1.0, launch_us=5.0)
    # Phase 0: core 0 one tile (2169), core 1 nothing; phase 1: both one tile.
    e = estimate(report([tiles(1, 1), []], [tiles(1, 1), tiles(1, 1)]), p)
    assert e.phase_us == pytest.approx([2.169, 2.169])
    assert e.total_us == pytest.approx(5.0 + 2.169 + 1.0 + 2.169)


def test_cores_share_gm_bandwidth_and_mte2_mte3_split_a_cores_share():
    p = replace(P, gm_bandwidth_gbs=2.0, mte2_core_gbs=100.0, mte3_core_gbs=100.0)
    # Two cores moving data: 1 GB/s each; a core that only reads gets all of it.
    e = estimate(report([[mte2(slot(X, 0), 1000)], [mte2(slot(X, 0), 1000)]]), p)
    assert e.total_us * 1e3 == pytest.approx(1 + 100 + 1000)
    # Equal bytes in and out: half the share each.
    one = estimate(report([[mte2(slot(X, 0), 1000), mte3(slot(Z, 0), 1000)]]), replace(p, gm_bandwidth_gbs=1.0))
    assert one.pipe_us[0] * 1e3 == pytest.approx([100 + 2000, 0, 50 + 2000, 0])


def test_a_vector_instruction_takes_its_kinds_cycles_for_its_element_size():
    # msKPP's figures: Exp 4 cycles a repeat on fp16, 2 on fp32; Div 4 on both.
    p = replace(P, vec_repeat_cycles={**P.vec_repeat_cycles, "VEXP": (4.0, 2.0), "VDIV": (4.0, 4.0)})

    def one(instruction: str, size: int) -> float:
        row = vec(slot(Z, 0), slot(X, 0), 100)
        row[3] = vec_kind(instruction, size)
        return cycles(report([[row]]), p)

    assert one("Exp", 2) == pytest.approx(1 + 400 + 10)
    assert one("Exp", 4) == pytest.approx(1 + 200 + 10)
    assert one("Div", 4) == one("Div", 2) == pytest.approx(1 + 400 + 10)
    assert one("Add", 2) == pytest.approx(1 + 200 + 10)


def test_every_kind_is_an_instruction_the_machine_emulates_and_the_log_carries_it(rms_inputs):
    from tilesim.machine.hazard import INSTRUCTIONS

    assert set(KIND_OF) <= set(INSTRUCTIONS) and set(KIND_OF.values()) == set(VEC_KINDS)
    _, runs = tilesim.recorded(lambda: kernels.rms_norm_grad(*rms_inputs))  # fp32
    log = runs[0].log[0]
    codes = set(log[(log[:, 0] == LANE_VECTOR) & (log[:, 1] >= VEC_BINARY) & (log[:, 1] < SCALAR_ACCESS), 3].tolist())
    assert vec_kind("Mul", 4) in codes and all(0 <= c < 2 * len(VEC_KINDS) and c % 2 == 1 for c in codes)


def sync(pipe: int, cls: int, key: int) -> list[int]:
    """A SetFlag / WaitFlag (``cls``) on ``pipe`` of flag ``key`` (event * 8 + id), as tilesim.core.records logs it."""
    return [pipe, cls, 0, 0, -1, -1, -1, -1, key, 0, 0]


def test_the_scalar_unit_waits_for_a_vector_result_through_the_kernels_own_flags():
    # Vector: issued at 1, 100 repeats x 2 + 10 start-up: its result at 211. SetFlag(V_S) fires then; the scalar
    # unit's WaitFlag(V_S) holds the issue of the CopyIn after it until 211: 212 + 100 + 1000.
    key = 5
    work = [vec(slot(Z, 0), slot(X, 0), 100)]
    synced = work + [sync(LANE_VECTOR, SET_FLAGS, key), sync(LANE_SCALAR, WAIT_FLAGS, key), mte2(slot(X, 1), 1000)]
    assert cycles(report([synced])) == pytest.approx(212 + 1100)
    # Without the pair the CopyIn is issued at 2 and overlaps the vector instruction.
    assert cycles(report([work + [mte2(slot(X, 1), 1000)]])) == pytest.approx(2 + 1100)


def test_the_l2_serves_re_reads_and_warm_inputs_where_the_tensors_fit():
    # 1 GB/s of HBM (a byte a cycle); the L2 reads at 2 GB/s on the chip (Ascend910B1: 24 AI cores).
    p = replace(P, mte2_core_gbs=100.0, gm_bandwidth_gbs=1.0, l2_read_rate=2.0 / 24)
    twice = [[mte2(slot(X, 0), 1000), mte2(slot(X, 1), 1000)]]  # the input's 1000 B, read twice
    # No L2: two transfers of 100 + 1000 cycles, back to back.
    assert cycles(report(twice), p) == pytest.approx(1 + 2 * 1100)
    # Half the reads are re-reads: 1000 B at 1 B/cycle and 1000 at 2, spread over both transfers (750 each).
    assert cycles(report(twice, in_bytes=1000, out_bytes=1000), p) == pytest.approx(1 + 2 * 850)
    # Warm: every read from the L2.
    assert estimate(report(twice, in_bytes=1000), p, l2_warm=True).total_us * 1e3 == pytest.approx(1 + 2 * 600)
    # Tensors larger than the L2 (Ascend310P3: 16 MiB) get nothing from it, warm or not.
    big = report(twice, soc="Ascend310P3", in_bytes=20 << 20)
    assert estimate(big, p, l2_warm=True).total_us * 1e3 == pytest.approx(1 + 2 * 1100)


def test_l2_hits_are_counted_per_launch():
    assert l2_hit(1000, 0, 2000, 1 << 20, False) == 0.5
    assert l2_hit(1000, 0, 1000, 1 << 20, False) == 0.0  # each byte read once: cold
    assert l2_hit(1000, 0, 1000, 1 << 20, True) == 1.0
    assert l2_hit(1 << 20, 1, 4 << 20, 1 << 20, True) == 0.0  # does not fit
    assert l2_hit(0, 0, 1000, 1 << 20, True) == 0.0  # tensors unknown


def test_a_read_of_gm_waits_for_this_cores_write_of_it():
    log = [mte3(slot(Z, 0), 1000, gm=0), mte2(slot(X, 0), 1000, gm=0)]
    e = estimate(report([log]), P)
    assert e.total_us * 1e3 == pytest.approx(1 + 1050 + 1100)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 8), in_b=st.integers(32, 4096), reps=st.integers(1, 300), out_b=st.integers(32, 4096),
       grow=st.integers(0, 2), extra=st.integers(1, 5000))
def test_more_work_is_never_cheaper_and_two_buffers_never_slower(n, in_b, reps, out_b, grow, extra):
    base = tiles(n, 1, in_b, reps, out_b)
    more = [list(ins) for ins in base]
    more[grow][2] += extra  # more bytes or repeats for one instruction of the first tile
    assert cycles(report([more])) >= cycles(report([base]))
    assert cycles(report([tiles(n, 2, in_b, reps, out_b)])) <= cycles(report([base])) + 1e-9


@pytest.mark.usefixtures("launches_as_asked")  # a checked launch always logs (pytest --tilesim-checks)
def test_an_unrecorded_report_is_refused():
    dy = np.ones((8, 64), np.float32)
    with tilesim.capture() as runs:
        kernels.rms_norm_grad(dy, dy, np.ones(8, np.float32), np.ones(64, np.float32))
    with pytest.raises(ValueError, match="no instruction log"):
        estimate(runs[0])


@pytest.fixture(scope="module")
def rms_inputs():
    rng = np.random.default_rng(0)
    x = rng.uniform(-2, 2, (96, 2048)).astype(np.float32)
    dy = rng.standard_normal((96, 2048)).astype(np.float32)
    rstd = (1 / np.sqrt(np.mean(x * x, axis=1) + 1e-6)).astype(np.float32)
    return dy, x, rstd, rng.uniform(0.5, 1.5, 2048).astype(np.float32)


def test_the_log_holds_what_the_counters_count(rms_inputs):
    _, runs = tilesim.recorded(lambda: kernels.rms_norm_grad(*rms_inputs))
    r = runs[0]
    for c in range(r.block_dim):
        log = r.log[c]
        for pipe, col in ((LANE_MTE2, MTE2_BYTES), (LANE_MTE3, MTE3_BYTES)):
            assert log[log[:, 0] == pipe, 2].sum() == r.counters[c, col]
        assert (log[:, 0] == LANE_VECTOR).any()
    assert r.phase_ends.shape == (2, r.block_dim)  # zero dgamma, SyncAll, the rows
    assert (r.phase_ends[-1] == [len(x) for x in r.log]).all()


@pytest.mark.usefixtures("launches_as_asked")  # a checked launch reruns itself when its log is full
def test_a_log_that_outgrows_its_room_is_rerun_whole(rms_inputs, monkeypatch):
    monkeypatch.setattr(launch, "LOG_ROOM", 8)
    monkeypatch.setattr(launch, "_log_room", {})
    with tilesim.capture(log=True) as runs:
        kernels.rms_norm_grad(*rms_inputs)
    need = runs[0].log_needed
    assert runs[0].log is None and need > 8
    out, runs = tilesim.recorded(lambda: kernels.rms_norm_grad(*rms_inputs))
    assert max(len(x) for x in runs[0].log) == need
    np.testing.assert_array_equal(out[0], kernels.rms_norm_grad(*rms_inputs)[0])


@pytest.mark.usefixtures("launches_as_asked")
def test_the_log_room_is_remembered_per_tiling_not_per_op(rms_inputs, monkeypatch):
    """A recorded 1-core tiling needs a long log per core; a 48-core tiling of the same op recorded next must not
    be given that room for each of its cores (it asked for gigabytes at production shapes)."""
    monkeypatch.setattr(launch, "_log_room", {})
    host_threads.release_scratch()  # the log buffer an earlier test on this worker grew is not this test's
    one = tiling.rms_norm_grad(*rms_inputs, core_num=1, tiling_key=SPLIT_D, ub_factor=64)
    tilesim.recorded(lambda: kernels.rms_norm_grad(*rms_inputs, tiling=one))
    assert list(launch._log_room) == [("rms_norm_grad", 1, one)]
    assert launch._log_room["rms_norm_grad", 1, one] > 8 * launch.LOG_ROOM
    many = tiling.rms_norm_grad(*rms_inputs)
    with tilesim.capture(log=True) as runs:
        kernels.rms_norm_grad(*rms_inputs, tiling=many)
    assert runs[0].block_dim == 48 and runs[0].log is not None
    log = host_threads._buffers.pool["log"]
    assert log.nbytes < 48 * 2 * launch.LOG_ROOM * LOG_FIELDS * 8  # not 48 x 1-core's room


# ----------------------------------------------------------------------------------------------------------------
# launches that schedule themselves while they run (tilesim.cost.model.estimated)

SMALL = {"rms_norm_grad": (50, 200), "group_norm_backward": (3, 64, 36), "swiglu_grad": (26, 200),
         "layer_norm_grad": (50, 200), "nsa_compress_grad": (256, 4, 32), "add_tail": (999, 7)}


@pytest.mark.parametrize("op", sorted(SMALL))
@pytest.mark.usefixtures("launches_as_asked")  # a checked launch logs instead
def test_a_launch_scheduled_while_it_runs_matches_its_recorded_log(op):
    """Every candidate of every op, and of the example written on the programming model (whose UB plan exists only
    once its kernel has run): the estimate made while the kernel runs is the log's replay, bit for bit (the same
    step, the same state, the same MTE rates from the fast run's counters as from the log)."""
    from tilesim.kernels.op_specs import OPS

    from examples.add_tail import OPS as EXAMPLE

    spec = {**OPS, **EXAMPLE}[op]
    soc = tilesim.get_soc("Ascend910B1")
    inputs = spec.make_inputs(SMALL[op], spec.dtypes[-1], 0)
    for c in spec.candidates(inputs, soc):
        def call(c=c):
            return spec.run(inputs, c.tiling, soc)

        rec, logged = tilesim.recorded(call)
        out, online = estimated(call)
        for a, b in zip(rec, out, strict=True):
            np.testing.assert_array_equal(a, b)
        for x, y in zip(estimate_all(logged, stages=False), online, strict=True):
            assert (x.total_us, x.phase_us) == (y.total_us, y.phase_us), c.params
            np.testing.assert_array_equal(x.core_us, y.core_us)
            np.testing.assert_array_equal(x.pipe_us, y.pipe_us)
            assert y.stages == []


@pytest.mark.usefixtures("launches_as_asked")
def test_a_scheduled_launch_keeps_no_log(rms_inputs):
    """Memory does not grow with the instructions: a tiling issuing twenty times the instructions of another
    allocates no more while it schedules itself (tracemalloc sees numpy's allocations)."""
    peaks, issued = [], []
    for t in (tiling.rms_norm_grad(*rms_inputs), tiling.rms_norm_grad(*rms_inputs, core_num=1, tiling_key=SPLIT_D,
                                                                       ub_factor=64)):
        def call(t=t):
            return kernels.rms_norm_grad(*rms_inputs, tiling=t)

        with tilesim.capture() as fast:
            out = call()
        _, rec = tilesim.recorded(call)
        issued.append(sum(len(x) for x in rec[0].log))
        tracemalloc.start()
        with scheduled(fast, cost_params) as runs:
            call()
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        assert runs[0].log is None and runs[0].schedule is not None and out[0].nbytes < peaks[-1]
    assert issued[1] > 20 * issued[0]
    assert peaks[1] < peaks[0] + 64 * 1024 < issued[1] * LOG_FIELDS * 8


@pytest.mark.usefixtures("launches_as_asked")
def test_a_call_scheduled_by_another_calls_fast_run_is_refused(rms_inputs):
    with tilesim.capture() as fast:
        kernels.rms_norm_grad(*rms_inputs, tiling=tiling.rms_norm_grad(*rms_inputs, core_num=4))
    with pytest.raises(RuntimeError, match="must launch exactly as the captured one"):
        estimated(lambda: kernels.rms_norm_grad(*rms_inputs), fast)
    with pytest.raises(RuntimeError, match="more kernels than the fast run"):
        estimated(lambda: kernels.rms_norm_grad(*rms_inputs), [])


@pytest.mark.usefixtures("launches_as_asked")
def test_a_scheduled_report_refuses_other_figures(rms_inputs):
    with tilesim.capture() as fast:
        kernels.rms_norm_grad(*rms_inputs)
    with scheduled(fast, cost_params) as runs:
        kernels.rms_norm_grad(*rms_inputs)
    assert estimate(runs[0]).total_us > 0
    with pytest.raises(ValueError, match=r"need its instruction log \(tilesim.recorded\)"):
        estimate(runs[0], replace(cost_params("Ascend910B1"), launch_us=0.0))
    with pytest.raises(ValueError, match="l2_warm=False"):
        estimate(runs[0], l2_warm=True)


@pytest.mark.usefixtures("launches_as_asked")
def test_warm_inputs_scheduled_while_the_launch_runs_match_the_log(rms_inputs):
    """l2_warm gives the same estimate both ways, and a shorter one than cold (the inputs fit the L2)."""

    def call():
        return kernels.rms_norm_grad(*rms_inputs)

    _, logged = tilesim.recorded(call)
    _, warm = estimated(call, l2_warm=True)
    _, cold = estimated(call)
    replayed = estimate_all(logged, stages=False, l2_warm=True)
    assert [e.total_us for e in replayed] == [e.total_us for e in warm]
    assert warm[0].total_us < cold[0].total_us


def test_recording_does_not_change_the_results(rms_inputs):
    plain = kernels.rms_norm_grad(*rms_inputs)
    rec, _ = tilesim.recorded(lambda: kernels.rms_norm_grad(*rms_inputs))
    for a, b in zip(plain, rec, strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_second_buffer_never_slows_a_real_kernel(rms_inputs):
    est = {}
    for bn in (1, 2):
        t = tiling.rms_norm_grad(*rms_inputs, buffer_num=bn)
        _, runs = tilesim.recorded(lambda t=t: kernels.rms_norm_grad(*rms_inputs, tiling=t))
        est[bn] = estimate(runs[0])
    assert est[2].total_us <= est[1].total_us
    assert est[2].ub_used > est[1].ub_used


def test_every_soc_family_has_sourced_figures():
    for name in tilesim.list_socs():
        p = cost_params(name)
        assert p.clock_ghz > 0 and p.gm_bandwidth_gbs > 0
        assert set(p.vec_repeat_cycles) == set(VEC_KINDS) and set(p.vec_startup_cycles) == set(VEC_CLASSES)
        assert all(len(c) == 2 and min(c) > 0 for c in p.vec_repeat_cycles.values())
        fields = {f for f in p.__dataclass_fields__ if f not in ("family", "sources", "estimates", "fitted")}
        assert fields <= set(p.sources), f"{name}: no source for {fields - set(p.sources)}"
        assert p.estimates <= fields and p.fitted <= fields and not p.estimates & p.fitted
        assert all(p.sources[f].startswith("fitted:") for f in p.fitted)


def test_the_trace_has_a_process_per_core_and_a_lane_per_pipe(rms_inputs):
    _, runs = tilesim.recorded(lambda: kernels.rms_norm_grad(*rms_inputs))
    e = estimate(runs[0])
    doc = json.loads(json.dumps(chrome_trace([e])))
    ev = doc["traceEvents"]
    procs = {x["pid"]: x["args"]["name"] for x in ev if x["ph"] == "M" and x["name"] == "process_name"}
    assert procs == {c: f"core {c}" for c in range(e.block_dim)}
    lanes = {(x["pid"], x["tid"]): x["args"]["name"] for x in ev if x["ph"] == "M" and x["name"] == "thread_name"}
    assert lanes == {(c, i): p for c in range(e.block_dim) for i, p in enumerate(LANE_NAMES)}
    spans = [x for x in ev if x["ph"] == "X"]
    assert len(spans) == len(e.stages) > 0
    assert all(x["dur"] >= 0 and 0 <= x["ts"] <= e.total_us + 1e-9 and (x["pid"], x["tid"]) in lanes for x in spans)
    for (c, i), _name in lanes.items():  # a pipe's stages never overlap: it runs its instructions in order
        lane = sorted((x["ts"], x["ts"] + x["dur"]) for x in spans if x["pid"] == c and x["tid"] == i)
        assert all(a[1] <= b[0] + 1e-9 for a, b in zip(lane, lane[1:], strict=False))
