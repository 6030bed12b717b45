"""What every benchmark stores in pytest-benchmark's ``extra_info``, read back by the summary table."""

from __future__ import annotations

from typing import Any


def record(benchmark: Any, op: str, dtype: str, nbytes: int, timed: str, **problem: Any) -> None:
    """Fill ``extra_info`` (``problem``: the shape and the op's own sizes); called after the benchmark ran, so the
    median is known when timing was enabled."""
    info = benchmark.extra_info
    info.update(op=op, dtype=dtype, bytes=nbytes, timed=timed, **problem)
    if benchmark.stats is not None:  # None when benchmarks are disabled
        median = benchmark.stats.stats.median
        info["median_s"] = median
        info["gbs"] = nbytes / median / 1e9
