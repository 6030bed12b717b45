"""The race detector (tilesim.checks.races) on hand-made logs whose races are known, against a brute-force search on
random ones, and on every shipped kernel, which must show none."""

from __future__ import annotations

import numpy as np
import pytest
from tilesim.kernels.op_specs import OPS

import tilesim
from tilesim.checks.races import Race, find_races
from tilesim.core.pipes import LANE_MTE2, LANE_MTE3, LANE_SCALAR, LANE_VECTOR
from tilesim.core.records import (
    ATOMIC_BYTES,
    LOG_FIELDS,
    MTE2_BYTES,
    MTE3_BYTES,
    N_COUNTERS,
    SCALAR_ACCESS,
    VEC_BINARY,
)
from tilesim.core.ub import UbPlan
from tilesim.runtime.report import RunReport

A, B = 0, 1  # GM tensor tags of the hand-made reports
NAMES = ["a", "b"]


def gm(pipe: int, cls: int, off: int, row: int, bursts: int = 1, stride: int | None = None, tag: int = A) -> list[int]:
    """A log row moving ``bursts`` rows of ``row`` bytes of GM tensor ``tag`` from byte ``off``, ``stride``
    bytes apart (contiguous by default)."""
    return [pipe, cls, bursts * row, bursts, -1, -1, -1, tag, off, row, row if stride is None else stride]


def read(off: int, row: int, **kw: int) -> list[int]:
    return gm(LANE_MTE2, MTE2_BYTES, off, row, **kw)


def write(off: int, row: int, **kw: int) -> list[int]:
    return gm(LANE_MTE3, MTE3_BYTES, off, row, **kw)


def atomic(off: int, row: int, **kw: int) -> list[int]:
    return gm(LANE_MTE3, ATOMIC_BYTES, off, row, **kw)


def get_value(off: int, isz: int = 4, tag: int = A) -> list[int]:
    """GlobalTensor.GetValue: a scalar read of one element."""
    return gm(LANE_SCALAR, SCALAR_ACCESS, off, isz, tag=tag)


VECTOR = [LANE_VECTOR, VEC_BINARY, 4, 1, 0, 0, 0, -1, 0, 0, 0]  # no GM access: ignored


def report(*phases: list[list[list[int]]]) -> RunReport:
    """A recorded report of ``phases``, each a list of per-core log rows (tilesim.core.records's L_* fields)."""
    cores = len(phases[0])
    logs = [np.array([ins for ph in phases for ins in ph[c]], np.int64).reshape(-1, LOG_FIELDS) for c in range(cores)]
    ends = np.cumsum([[len(ph[c]) for c in range(cores)] for ph in phases], axis=0).reshape(-1, cores)
    return RunReport(op="hand", soc="Ascend910B1", tiling=None, ub_plan=UbPlan(capacity=196608), block_dim=cores,
                     counters=np.zeros((cores, N_COUNTERS), np.int64), workspace_size=0, checks=True, wall_s=0.0,
                     gm_names=NAMES, log=logs, phase_ends=ends)


def races_of(*phases: list[list[list[int]]]) -> list[Race]:
    races, total = find_races(report(*phases), limit=1000)
    assert total == len(races)
    return races


def test_two_cores_writing_the_same_bytes_race_over_exactly_the_overlap():
    (r,) = races_of([[VECTOR, write(0, 64)], [write(32, 96)]])
    assert r == Race(kind="write-write", phase=0, tag=A, tensor="a", offset=32, size=32, core_a=0, index_a=1,
                     pipe_a="MTE3", core_b=1, index_b=0, pipe_b="MTE3")


@pytest.mark.parametrize("write_first", [True, False])
def test_a_write_and_another_cores_read_race_whichever_starts_first(write_first):
    w, rd = (write(0, 64), read(16, 16)) if write_first else (write(16, 16), read(0, 64))
    (r,) = races_of([[w], [rd]])
    assert (r.kind, r.offset, r.size) == ("write-read", 16, 16)
    assert (r.core_a, r.pipe_a, r.core_b, r.pipe_b) == (0, "MTE3", 1, "MTE2")  # the writer first
    (r,) = races_of([[rd], [w]])
    assert (r.core_a, r.core_b) == (1, 0)


def test_a_scalar_read_of_gm_races_with_a_write():
    (r,) = races_of([[write(0, 64)], [VECTOR, get_value(8)]])
    assert (r.kind, r.offset, r.size, r.core_b, r.index_b, r.pipe_b) == ("write-read", 8, 4, 1, 1, "SCALAR")


def test_a_core_never_races_with_itself_and_reads_never_race():
    own = [write(0, 64), read(0, 64), write(16, 16), atomic(0, 64), get_value(4)]
    assert races_of([own, [read(64, 64), get_value(64)], [write(128, 32)]]) == []
    assert races_of([[read(0, 64)], [read(0, 64), get_value(8)], [read(8, 8)]]) == []


def test_different_phases_and_different_tensors_do_not_race():
    assert races_of([[write(0, 64)], []], [[], [read(0, 64), write(0, 64)]]) == []
    assert races_of([[write(0, 64, tag=A)], [write(0, 64, tag=B), read(0, 64, tag=B)]]) == []
    # core 0's write races with core 1's only in the phase both run it
    races = races_of([[write(0, 64)], [read(64, 64)]], [[write(0, 64)], [write(0, 64)]])
    assert [(r.phase, r.kind) for r in races] == [(1, "write-write")]


def test_atomic_adds_race_with_plain_accesses_of_another_core_but_not_with_each_other():
    assert races_of([[atomic(0, 64)], [atomic(0, 64)], [atomic(32, 64)]]) == []
    (r,) = races_of([[write(0, 64)], [atomic(32, 64)]])
    assert (r.kind, r.offset, r.size, r.core_a, r.core_b) == ("atomic-write", 32, 32, 1, 0)
    (r,) = races_of([[atomic(0, 64)], [read(60, 8)]])
    assert (r.kind, r.offset, r.size, r.core_a, r.core_b) == ("atomic-read", 60, 4, 0, 1)
    kinds = {r.kind for r in races_of([[atomic(0, 64)], [atomic(0, 64)], [read(0, 8), write(16, 8)]])}
    assert kinds == {"atomic-read", "atomic-write"}


def test_strided_rows_that_interleave_do_not_race_and_overlapping_ones_do():
    # core 0 writes rows 0, 2, 4, ... of 32 B, core 1 rows 1, 3, 5, ...
    even, odd = write(0, 32, bursts=8, stride=64), write(32, 32, bursts=8, stride=64)
    assert races_of([[even], [odd]]) == []
    shifted = write(16, 32, bursts=8, stride=64)  # each of its rows overlaps one of core 0's by 16 B
    races = races_of([[even], [shifted]])
    assert [(r.offset, r.size) for r in races] == [(16 + 64 * k, 16) for k in range(8)]
    # a read whose rows overlap each other (stride below the row) is their union: [0, 7 * 8 + 32)
    (r,) = races_of([[read(0, 32, bursts=8, stride=8)], [write(84, 16)]])
    assert (r.offset, r.size) == (84, 4)


def test_a_long_interval_of_the_sweeping_core_does_not_hide_another_cores():
    # core 0's read [0, 100) ends furthest; its own write [15, 16) must still meet core 1's read [10, 20)
    (r,) = races_of([[read(0, 100), write(15, 1)], [read(10, 10)]])
    assert (r.kind, r.offset, r.size, r.core_a, r.index_a, r.core_b, r.index_b) == ("write-read", 15, 1, 0, 1, 1, 0)


def test_limit_keeps_the_first_races_in_phase_tensor_offset_order_and_counts_all():
    phase0 = [[write(k * 64, 32, tag=t) for t in (B, A) for k in (3, 1, 2, 0)], [read(0, 256, tag=B), read(0, 256)]]
    phase1 = [[write(0, 32)], [write(0, 32)]]
    rep = report(phase0, phase1)
    races, total = find_races(rep, limit=5)
    assert total == 9
    assert [(r.phase, r.tensor, r.offset) for r in races] == [(0, "a", 0), (0, "a", 64), (0, "a", 128),
                                                              (0, "a", 192), (0, "b", 0)]
    assert find_races(rep, limit=0) == ([], 9)
    assert find_races(rep, limit=100)[0][-1].phase == 1


def test_offsets_too_far_apart_for_one_sort_key_sort_all_the_same():
    far = 1 << 62
    races = races_of([[read(0, 8), write(far, 64)], [write(far + 32, 64), write(4, 8)]])
    assert [(r.kind, r.offset, r.size) for r in races] == [("write-read", 4, 4), ("write-write", far + 32, 32)]


def test_describe_names_the_kind_phase_tensor_bytes_cores_rows_and_pipes():
    (r,) = races_of([[VECTOR, write(0, 64)], [get_value(8)]])
    line = r.describe()
    assert "\n" not in line
    for part in ("write-read", "phase 0", "tensor a", "[8, 12)", "core 0 writes", "log row 1", "MTE3",
                 "core 1 reads", "log row 0", "SCALAR"):
        assert part in line


def test_an_unrecorded_report_is_refused():
    rep = report([[write(0, 32)]])
    rep.log = None
    with pytest.raises(ValueError, match="instruction log"):
        find_races(rep)


CLASS = {MTE2_BYTES: "read", MTE3_BYTES: "write", ATOMIC_BYTES: "atomic"}
KIND = {("write", "write"): "write-write", ("write", "read"): "write-read", ("read", "write"): "write-read",
        ("atomic", "write"): "atomic-write", ("write", "atomic"): "atomic-write", ("atomic", "read"): "atomic-read",
        ("read", "atomic"): "atomic-read"}


def accesses(phases: list[list[list[list[int]]]]) -> dict[tuple[int, int], tuple[int, int, int, int, str]]:
    """(core, log row) -> (phase, tag, start, end, class) of one-row accesses."""
    out = {}
    for p, ph in enumerate(phases):
        for c in range(len(ph)):
            row0 = sum(len(q[c]) for q in phases[:p])
            out.update({(c, row0 + i): (p, ins[7], ins[8], ins[8] + ins[9], CLASS[ins[1]])
                        for i, ins in enumerate(ph[c])})
    return out


def brute_force(acc: dict[tuple[int, int], tuple[int, int, int, int, str]]) -> list[tuple[int, int, int, str]]:
    """(phase, tag, offset, kind) of every racing access, comparing all pairs: an access races, once per kind,
    when another core's conflicting access in its phase and tensor starts before it (or at the same byte, earlier
    in core and log order) and ends after its start."""
    out = set()
    for (c, i), (p, tag, s, _, k) in acc.items():
        for (c2, i2), (p2, tag2, s2, e2, k2) in acc.items():
            if (p2, tag2) == (p, tag) and c2 != c and (k, k2) in KIND and (s2, c2, i2) < (s, c, i) and e2 > s:
                out.add((c, i, p, tag, s, KIND[k, k2]))
    return sorted(x[2:] for x in out)


def test_agrees_with_a_brute_force_search_on_random_logs():
    rng = np.random.default_rng(7)
    make = (read, write, atomic)
    for _ in range(300):
        cores, n_phases = int(rng.integers(2, 5)), int(rng.integers(1, 3))
        phases = [[[make[rng.integers(3)](int(rng.integers(0, 96)), int(rng.integers(1, 24)),
                                          tag=int(rng.integers(2))) for _ in range(rng.integers(0, 6))]
                   for _ in range(cores)] for _ in range(n_phases)]
        races, total = find_races(report(*phases), limit=1000)
        acc = accesses(phases)
        assert total == len(races)
        assert sorted((r.phase, r.tag, r.offset, r.kind) for r in races) == brute_force(acc)
        for r in races:  # each names two real accesses of distinct cores that overlap in exactly its range
            pa, ta, sa, ea, ka = acc[r.core_a, r.index_a]
            pb, tb, sb, eb, kb = acc[r.core_b, r.index_b]
            assert r.core_a != r.core_b and pa == pb == r.phase and ta == tb == r.tag
            assert (r.offset, r.offset + r.size) == (max(sa, sb), min(ea, eb)) and r.size > 0
            assert r.kind == KIND[ka, kb] and r.kind.startswith(ka)


@pytest.mark.parametrize("name", list(OPS))
def test_shipped_kernels_have_no_races(name):
    """The official tiling at the default shape, and the op's last swept candidate (another split or mode), in bf16
    where the op takes it, else in its first dtype. A recorded launch runs the checked build of its kernel; those
    compiled per dtype (RmsNorm's, SwiGlu's, SoftMax's) are the ones tests/test_explore.py's sweeps record, in the
    same dtypes, so that each compiles once."""
    spec = OPS[name]
    soc = tilesim.get_soc(tilesim.DEFAULT_SOC)
    inputs = spec.make_inputs(spec.default_shape, "bf16" if "bf16" in spec.dtypes else spec.dtypes[0], 0)
    cands = spec.candidates(inputs, soc)
    assert cands[0].official and not cands[-1].official
    for cand in (cands[0], cands[-1]):
        _, runs = tilesim.recorded(lambda cand=cand: spec.run(inputs, cand.tiling, soc))
        for rep in runs:
            races, total = find_races(rep)
            assert total == 0, f"{name} {cand.params}: {total} races, " + "; ".join(r.describe() for r in races)
