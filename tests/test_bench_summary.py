"""bench/conftest.py's summary rows: the bandwidth probe every share is taken of, the paired comparison with torch."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from bench import record
from bench.conftest import PASS_OP, PROBE1_OP, PROBE_OP, _rows, _targets

MIB = 1 << 20


def _bench(op: str, median_s: float, nbytes: int, group: str) -> SimpleNamespace:
    stats = SimpleNamespace(median=median_s, min=median_s, rounds=5)
    return SimpleNamespace(extra_info={"op": op, "dtype": "fp32", "bytes": nbytes}, stats=stats, group=group,
                           fullname=f"bench/{group}::{op}")


def test_the_probe_is_its_fastest_run_and_every_share_is_taken_of_it():
    probe_bytes = 768 * MIB
    runs = [_bench(PROBE_OP, t, probe_bytes, "probe") for t in (0.080, 0.040, 0.060)]  # 10, 20, 13.4 GB/s
    op = _bench("tilesim", 0.010, 100 * MIB, "rms_norm_grad fp32 [4096, 4096]")
    config = SimpleNamespace(_benchmarksession=SimpleNamespace(disabled=False, benchmarks=[runs[0], op, *runs[1:]]))
    rows = _rows(config)
    probes = [r for r in rows if r["op"] == PROBE_OP]
    assert len(probes) == 1 and probes[0]["median_ms"] == pytest.approx(40.0)
    assert probes[0]["info"]["probe_runs"] == 3
    assert probes[0]["info"]["probe_gbs"] == [round(probe_bytes / t / 1e9, 2) for t in (0.080, 0.040, 0.060)]
    (r,) = [r for r in rows if r["op"] == "tilesim"]
    assert r["pct_of_probe"] == pytest.approx(100.0 * (100 * MIB / 0.010) / (probe_bytes / 0.040))


def test_the_torch_target_is_judged_on_the_paired_ratio_where_there_is_one():
    """The medians say torch is faster (a slow VM while tilesim's rounds ran); the paired rounds say tilesim is:
    the target takes the paired figure, the table keeps both."""
    group = "layer_norm_grad fp16 [4096, 4096]"
    ours = _bench("tilesim", 0.030, 100 * MIB, group)
    torch_row = _bench("torch aten", 0.010, 100 * MIB, group)
    torch_row.extra_info.update(paired_speedup=1.25, paired_rounds=9)
    other = _bench("tilesim", 0.030, 100 * MIB, "rms_norm_grad fp32 [4096, 4096]")
    other_torch = _bench("torch autograd", 0.060, 100 * MIB, "rms_norm_grad fp32 [4096, 4096]")
    config = SimpleNamespace(_benchmarksession=SimpleNamespace(disabled=False,
                                                               benchmarks=[ours, torch_row, other, other_torch]))
    rows = _rows(config)
    (r,) = [r for r in rows if r["group"] == group and r["op"] == "tilesim"]
    assert r["speedup_vs_torch"] == pytest.approx(1 / 3) and r["paired_vs_torch"] == 1.25
    (t,) = [r for r in rows if r["op"] == "torch aten"]
    assert t["paired_vs_torch"] is None  # shown on tilesim's row only
    targets = {(x["subject"].split()[0], x["target"]): x for x in _targets(rows)}
    assert targets[("layer_norm_grad", "vs torch, paired")]["pass"] is True
    assert ("layer_norm_grad", "vs torch") not in targets
    assert targets[("rms_norm_grad", "vs torch")]["value"] == pytest.approx(2.0)  # no pairing: the medians


def test_pair_with_fast_alternates_the_calls_and_keeps_the_median_ratio(monkeypatch):
    """A fake clock that each call advances: tilesim's call by 1, the baseline's by 3, but for one round the VM
    disturbed (its timed baseline call takes 30). The median ratio is 3; each timed call follows an untimed one of
    the same function; the order flips every round; the rounds stop at the budget; nothing is stored without
    timing or without tilesim's call."""
    clock = [0.0]
    order = []
    monkeypatch.setattr(record, "perf_counter", lambda: clock[0])

    def timed(name, cost):
        def call():
            order.append(name)
            clock[0] += cost(len(order))
        return call

    bench = SimpleNamespace(stats=object(), group="g", extra_info={})
    record.remember_fast(bench, timed("ours", lambda k: 1.0))
    record.pair_with_fast(bench, timed("base", lambda k: 30.0 if k == 6 else 3.0))  # round 2's timed base call
    assert bench.extra_info["paired_speedup"] == 3.0
    rounds = bench.extra_info["paired_rounds"]
    lo, hi = record.PAIRED_ROUNDS
    assert rounds == lo and len(order) == 4 * rounds  # 8 s a round: the least, already past the budget
    assert order[:8] == ["ours", "ours", "base", "base", "base", "base", "ours", "ours"]
    quick = SimpleNamespace(stats=object(), group="q", extra_info={})
    record.remember_fast(quick, timed("ours", lambda k: 0.001))
    record.pair_with_fast(quick, timed("base", lambda k: 0.003))  # 8 ms a round: up to the cap
    assert quick.extra_info["paired_rounds"] == hi and quick.extra_info["paired_speedup"] == pytest.approx(3.0)

    off = SimpleNamespace(stats=None, group="g", extra_info={})
    record.pair_with_fast(off, timed("base", lambda k: 3.0))
    alone = SimpleNamespace(stats=object(), group="no tilesim call", extra_info={})
    record.pair_with_fast(alone, timed("base", lambda k: 3.0))
    assert "paired_speedup" not in off.extra_info and "paired_speedup" not in alone.extra_info


def test_the_floor_takes_each_thread_s_share_of_the_repeats_and_the_gm_bytes():
    """A kernel row with its own traffic gets the least time its emulation can take: per host thread, its share
    of 20 M repeats at 2 ns plus its share of 300 MB at the one-thread probe's 20 GB/s, and never less than the
    300 MB at the probe's 30 GB/s; the share of the probe at that time is its floor %, and a share target above it
    is marked. The host rows keep their fastest runs; the vector pass has no share of the probe."""
    import numba

    probe = _bench(PROBE_OP, 0.100, 3_000_000_000, "probe")  # 30 GB/s
    probe1 = _bench(PROBE1_OP, 0.150, 3_000_000_000, "probe")  # 20 GB/s
    passes = [_bench(PASS_OP, t, 100_000 * 256, "vector pass") for t in (0.0004, 0.0002)]  # 100 k repeats
    for p in passes:
        p.extra_info["repeats"] = 100_000  # the faster run: 2 ns a repeat
    op = _bench("tilesim", 0.050, 200_000_000, "rms_norm_grad bf16 [4096, 4096]")
    op.extra_info.update(gm_bytes=300_000_000, ub_bytes=256 * 20_000_000)
    config = SimpleNamespace(_benchmarksession=SimpleNamespace(
        disabled=False, benchmarks=[passes[0], probe, probe1, op, passes[1]]))
    rows = _rows(config)
    (p,) = [r for r in rows if r["op"] == PASS_OP]
    assert p["median_ms"] == pytest.approx(0.2) and p["pct_of_probe"] is None
    (r,) = [r for r in rows if r["op"] == "tilesim"]
    threads = numba.config.NUMBA_NUM_THREADS
    floor_s = max((20_000_000 * 2e-9 + 0.015) / threads, 0.010)  # at most 8 threads: 10 ms, 67 %; 2: 27.5 ms
    assert r["floor_ms"] == pytest.approx(floor_s * 1e3)
    assert r["floor_pct"] == pytest.approx(100 * 200_000_000 / floor_s / 30e9)
    assert r["of_floor"] == pytest.approx(floor_s / 0.050)
    (share,) = [t for t in _targets(rows) if t["target"] == "% of probe"]
    assert share["pass"] is False and f"floor {r['floor_pct']:.1f}%" in share["limit_shown"]
    assert share["beyond_floor"] == (r["floor_pct"] < 50.0) == ("< target" in share["limit_shown"])
