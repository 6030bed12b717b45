"""bench/conftest.py's summary rows: the bandwidth probe every share is taken of."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from bench.conftest import PROBE_OP, _rows

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
