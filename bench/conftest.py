"""The benchmark summary: after a run with ``--benchmark-enable``, a table of kernel, op, dtype, median, effective
GB/s, its share of the memory-bandwidth probe and the speedups over torch and over numpy, also written to
``bench/results.json``. Nothing is printed or written when benchmarks are disabled (the default addopts).

The benchmarks put ``op``, ``dtype`` and ``bytes`` (what the op must move) in their ``extra_info``; GB/s here is
bytes / median time / 1e9, the probe's GB/s is the triad's (2 reads + 1 write counted). The kernel is the first
word of the benchmark group; speedups compare rows of one group (one kernel, dtype and shape), torch's row being
the op named ``torch ...``, numpy's ``numpy ...``. Files may share the probe: only its first run is kept.
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
TORCH_OP = "torch"  # prefix of the torch baseline's op name ("torch autograd", "torch aten")
NUMPY_OP = "numpy"  # prefix of the numpy baseline's op name


def _rows(config: Any) -> list[dict[str, Any]]:
    bs = getattr(config, "_benchmarksession", None)
    if bs is None or bs.disabled:
        return []
    rows = []
    for bench in bs.benchmarks:
        info = bench.extra_info
        if "op" not in info or "bytes" not in info or not bench:
            continue
        probe = info["op"] == PROBE_OP
        if probe and any(r["op"] == PROBE_OP for r in rows):
            continue
        median = float(bench.stats.median)
        kernel = "-" if probe else (bench.group or "").split(" ")[0]
        rows.append({"kernel": kernel, "op": info["op"], "dtype": info["dtype"], "shape": info.get("shape"),
                     "group": bench.group, "test": bench.fullname, "median_ms": median * 1e3,
                     "rounds": int(bench.stats.rounds), "bytes": int(info["bytes"]),
                     "gbs": info["bytes"] / median / 1e9, "timed": info.get("timed")})
    probe = next((r["gbs"] for r in rows if r["op"] == PROBE_OP), None)
    torch_ms = {r["group"]: r["median_ms"] for r in rows if r["op"].startswith(TORCH_OP)}
    numpy_ms = {r["group"]: r["median_ms"] for r in rows if r["op"].startswith(NUMPY_OP)}
    for r in rows:
        r["pct_of_probe"] = 100.0 * r["gbs"] / probe if probe else None
        t, n = (None, None) if r["op"] == PROBE_OP else (torch_ms.get(r["group"]), numpy_ms.get(r["group"]))
        r["speedup_vs_torch"] = t / r["median_ms"] if t else None
        r["speedup_vs_numpy"] = n / r["median_ms"] if n else None

    def order(op: str) -> int:
        return 0 if op == "tilesim" else 1 if op.startswith(NUMPY_OP) else 2 if op.startswith(TORCH_OP) else 9

    rows.sort(key=lambda r: (r["op"] == PROBE_OP, r["kernel"], r["dtype"], order(r["op"]), r["op"]))
    return rows


def _fmt(v: float | None, spec: str, unit: str) -> str:
    return "-" if v is None else format(v, spec) + unit


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: Any) -> None:
    rows = _rows(config)
    if not rows:
        return
    tr = terminalreporter
    tr.write_sep("=", "bench summary")
    kw = max(len("kernel"), *(len(r["kernel"]) for r in rows))
    head = (f"{'kernel':<{kw}} {'op':<16} {'dtype':<6} {'median ms':>10} {'GB/s':>7} {'% probe':>8} {'vs torch':>9} "
            f"{'vs numpy':>9}")
    tr.write_line(head)
    tr.write_line("-" * len(head))
    for r in rows:
        pct = _fmt(r["pct_of_probe"], ".1f", "%")
        vt, vn = _fmt(r["speedup_vs_torch"], ".2f", "x"), _fmt(r["speedup_vs_numpy"], ".2f", "x")
        tr.write_line(f"{r['kernel']:<{kw}} {r['op']:<16} {r['dtype']:<6} {r['median_ms']:>10.2f} {r['gbs']:>7.2f} "
                      f"{pct:>8} {vt:>9} {vn:>9}")
    tr.write_line("GB/s = bytes the op must move (each input read once, each output written once; see each bench's "
                  "op_bytes) / median; probe = triad, 2 reads + 1 write; vs torch / vs numpy = that baseline's "
                  "median / this median, same kernel, dtype and shape (> 1: faster)")
    payload = {"host": {"machine": platform.machine(), "cpus": os.cpu_count(), "python": platform.python_version(),
                        "numba_threads": numba.config.NUMBA_NUM_THREADS},
               "rows": rows}
    RESULTS.write_text(json.dumps(payload, indent=2) + "\n")
    tr.write_line(f"written to {RESULTS}")
