"""The benchmark summary: after a run with ``--benchmark-enable``, a table of op, dtype, median, effective GB/s,
its share of the memory-bandwidth probe and the speedup over torch autograd, also written to
``bench/results.json``. Nothing is printed or written when benchmarks are disabled (the default addopts).

The benchmarks put ``op``, ``dtype`` and ``bytes`` (what the op must move) in their ``extra_info``; GB/s here is
bytes / median time / 1e9, the probe's GB/s is the triad's (2 reads + 1 write counted).
"""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path
from typing import Any

import numba

RESULTS = Path(__file__).with_name("results.json")
PROBE_OP = "bandwidth probe"
TORCH_OP = "torch autograd"


def _rows(config: Any) -> list[dict[str, Any]]:
    bs = getattr(config, "_benchmarksession", None)
    if bs is None or bs.disabled:
        return []
    rows = []
    for bench in bs.benchmarks:
        info = bench.extra_info
        if "op" not in info or "bytes" not in info or not bench:
            continue
        median = float(bench.stats.median)
        rows.append({"op": info["op"], "dtype": info["dtype"], "shape": info.get("shape"), "group": bench.group,
                     "test": bench.fullname, "median_ms": median * 1e3, "rounds": int(bench.stats.rounds),
                     "bytes": int(info["bytes"]), "gbs": info["bytes"] / median / 1e9, "timed": info.get("timed")})
    probe = next((r["gbs"] for r in rows if r["op"] == PROBE_OP), None)
    torch_ms = {r["dtype"]: r["median_ms"] for r in rows if r["op"] == TORCH_OP}
    for r in rows:
        r["pct_of_probe"] = 100.0 * r["gbs"] / probe if probe else None
        t = torch_ms.get(r["dtype"]) if r["op"] != PROBE_OP else None
        r["speedup_vs_torch"] = t / r["median_ms"] if t else None
    order = {"tilesim": 0, "numpy float64": 1, TORCH_OP: 2, PROBE_OP: 3}
    rows.sort(key=lambda r: (r["op"] == PROBE_OP, r["dtype"], order.get(r["op"], 9), r["op"]))
    return rows


def _fmt(v: float | None, spec: str, unit: str) -> str:
    return "-" if v is None else format(v, spec) + unit


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: Any) -> None:
    rows = _rows(config)
    if not rows:
        return
    tr = terminalreporter
    tr.write_sep("=", "bench summary")
    head = f"{'op':<16} {'dtype':<6} {'median ms':>10} {'GB/s':>7} {'% probe':>8} {'vs torch':>9}"
    tr.write_line(head)
    tr.write_line("-" * len(head))
    for r in rows:
        pct, speedup = _fmt(r["pct_of_probe"], ".1f", "%"), _fmt(r["speedup_vs_torch"], ".2f", "x")
        tr.write_line(f"{r['op']:<16} {r['dtype']:<6} {r['median_ms']:>10.2f} {r['gbs']:>7.2f} {pct:>8} {speedup:>9}")
    tr.write_line("GB/s = bytes the op must move (read dy, x, rstd, gamma; write dx, dgamma) / median; probe = "
                  "triad, 2 reads + 1 write; vs torch = torch median / this median (> 1: faster than torch "
                  "autograd's backward)")
    payload = {"host": {"machine": platform.machine(), "cpus": os.cpu_count(), "python": platform.python_version(),
                        "numba_threads": numba.config.NUMBA_NUM_THREADS},
               "rows": rows}
    RESULTS.write_text(json.dumps(payload, indent=2) + "\n")
    tr.write_line(f"written to {RESULTS}")
