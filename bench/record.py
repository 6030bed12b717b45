"""What every benchmark stores in pytest-benchmark's ``extra_info``, read back by the summary table."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from time import perf_counter
from typing import Any

import torch

import tilesim

VECTOR_COUNTERS = tuple(n for n in tilesim.COUNTER_NAMES if n.startswith("vec_"))  # the repeats, by class
REPEAT_BYTES = 256  # one vector repeat
PAIRED_ROUNDS = (5, 15)  # the paired comparison's rounds: at least, at most
PAIRED_BUDGET_S = 8.0  # rounds beyond the least while they fit in this

_fast_calls: dict[str, Callable[[], Any]] = {}  # tilesim's fast call, by benchmark group


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


def remember_fast(benchmark: Any, call: Callable[[], Any]) -> None:
    """Keep tilesim's fast call of this benchmark's group (one kernel, dtype and shape) for :func:`pair_with_fast`,
    when timing is on."""
    if benchmark.stats is not None:
        _fast_calls[benchmark.group] = call


def pair_with_fast(benchmark: Any, baseline: Callable[[], Any]) -> None:
    """After a baseline's own timing: time it against the group's tilesim call in pairs, one call of each back to
    back, the order flipping every round, and store the median over the rounds of baseline time / tilesim time in
    ``extra_info["paired_speedup"]`` (> 1: tilesim faster). The two medians of pytest-benchmark are taken minutes
    apart, over which this VM's speed moves by up to 3x; within a pair it barely moves, so the ratio of one round
    is the two calls' and the median drops the rounds the VM disturbed. Each timed call follows an untimed one of
    the same function, as in pytest-benchmark's loop: right after torch, its OpenMP threads still spin on the
    cores (tilesim ran up to 1.2x slower), and after an idle gap a 12 ms call ran up to 1.6x slower. Nothing when
    timing is off or tilesim's fast call did not run in this session."""
    ours = _fast_calls.pop(benchmark.group, None)  # its arrays are freed after
    if benchmark.stats is None or ours is None:
        return
    lo, hi = PAIRED_ROUNDS
    ratios: list[float] = []
    spent = 0.0
    while len(ratios) < lo or (len(ratios) < hi and spent * (len(ratios) + 1) / len(ratios) <= PAIRED_BUDGET_S):
        times = {}
        start = perf_counter()
        for name, call in (("ours", ours), ("base", baseline))[::1 if len(ratios) % 2 == 0 else -1]:
            call()
            t = perf_counter()
            call()
            times[name] = perf_counter() - t
        ratios.append(times["base"] / times["ours"])
        spent += perf_counter() - start
    benchmark.extra_info.update(paired_speedup=statistics.median(ratios), paired_rounds=len(ratios))
