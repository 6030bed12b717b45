"""What every benchmark stores in pytest-benchmark's ``extra_info``, read back by the summary table."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

import tilesim

VECTOR_COUNTERS = tuple(n for n in tilesim.COUNTER_NAMES if n.startswith("vec_"))  # the repeats, by class
REPEAT_BYTES = 256  # one vector repeat


def record(benchmark: Any, op: str, dtype: str, nbytes: int, timed: str, **problem: Any) -> None:
    """Fill ``extra_info`` (``problem``: the shape and the op's own sizes); called after the benchmark ran, so the
    median is known when timing was enabled."""
    info = benchmark.extra_info
    info.update(op=op, dtype=dtype, bytes=nbytes, timed=timed, **problem)
    if benchmark.stats is not None:  # None when benchmarks are disabled
        median = benchmark.stats.stats.median
        info["median_s"] = median
        info["gbs"] = nbytes / median / 1e9


def kernel_traffic(call: Callable[[], Any]) -> dict[str, int]:
    """What the emulated kernel itself moved in ``call()``, from the counters of its launches: ``gm_bytes``, GM
    read by MTE2 plus GM written by MTE3 (atomic adds included), and ``ub_bytes``, the UB its vector
    instructions covered (256 B a repeat, every class). Beside the bytes the op must move they tell the two
    limits apart: a kernel that moves more GM than the op needs (workspace round trips, a second read of an
    input) and the passes over UB that the emulation runs one by one."""
    with tilesim.capture() as runs:
        call()
    return {"gm_bytes": sum(r.total("mte2_bytes") + r.total("mte3_bytes") for r in runs),
            "ub_bytes": REPEAT_BYTES * sum(r.total(n) for r in runs for n in VECTOR_COUNTERS)}


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
