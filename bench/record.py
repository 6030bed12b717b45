"""What every benchmark stores in pytest-benchmark's ``extra_info``, read back by the summary table."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch


def record(benchmark: Any, op: str, dtype: str, nbytes: int, timed: str, **problem: Any) -> None:
    """Fill ``extra_info`` (``problem``: the shape and the op's own sizes); called after the benchmark ran, so the
    median is known when timing was enabled."""
    info = benchmark.extra_info
    info.update(op=op, dtype=dtype, bytes=nbytes, timed=timed, **problem)
    if benchmark.stats is not None:  # None when benchmarks are disabled
        median = benchmark.stats.stats.median
        info["median_s"] = median
        info["gbs"] = nbytes / median / 1e9


@contextmanager
def torch_threads(n: int = 2) -> Iterator[None]:
    """torch on ``n`` threads inside the block (the machine's two cores, as tilesim's launches use), its previous
    thread count restored after."""
    threads = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
