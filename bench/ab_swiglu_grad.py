"""Paired A/B of SwiGluGrad on the older primitives (``kernels.swiglu_grad``, old) against the same kernel on the
programming model (``kernels.swiglu_grad_model``, new), in this tree: ``python -m bench.ab_swiglu_grad [ROUNDS]``.

The shapes of ``bench/test_bench_swiglu_grad.py`` (x [8192, 8192], y_grad [8192, 4096], dim -1; its inputs), fp32
and bf16, each op into its own preallocated output, in fast mode; milliseconds per call. Both ops live in one tree
under different names, so one process holds both and alternates them (the order flipping every round), where
:mod:`bench.ab_small` needs a worker per tree: the two share the inputs' pages, the Numba thread pool and the
machine's drift from one call to the next, and the 2 cores are never shared between them. Each case's figure is the
median of the paired ratios new/old, beside each op's fastest and median batch (ROUNDS batches, default 10).
"""

from __future__ import annotations

import functools
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np

from bench.test_bench_swiglu_grad import COLS, DIM, ROWS, inputs
from kernels.swiglu_grad import swiglu_grad as old_swiglu_grad
from kernels.swiglu_grad_model import swiglu_grad as new_swiglu_grad

DTYPES = ["fp32", "bf16"]
BATCH_S = 0.05  # a batch repeats the call until it lasts this long (one call at these shapes)


def _calls(dtype: str) -> list[tuple[Callable[[], object], int]]:
    """(call, calls per batch) of the old and the new op on the bench's inputs, each into its own output, warmed
    (compiled or loaded from the Numba cache) and checked bit for bit against the other."""
    dy, x = inputs(dtype)
    made = []
    for op in (old_swiglu_grad, new_swiglu_grad):
        out = np.empty_like(x)
        call = functools.partial(op, dy, x, DIM, checks=False, out=out)
        call()
        t = time.perf_counter()
        call()
        made.append((call, out, max(1, int(BATCH_S / max(1e-6, time.perf_counter() - t)))))
    assert np.array_equal(made[0][1].view(np.uint8), made[1][1].view(np.uint8)), f"{dtype}: old and new differ"
    return [(call, n) for call, _, n in made]


def _batch(call: Callable[[], object], n: int) -> float:
    t = time.perf_counter()
    for _ in range(n):
        call()
    return (time.perf_counter() - t) / n * 1e3


def main(rounds: int = 10) -> None:
    print(f"ms per call, {rounds} rounds; x [{ROWS}, {COLS}], dim {DIM}; old kernels.swiglu_grad, new "
          "kernels.swiglu_grad_model")
    for dtype in DTYPES:
        calls = _calls(dtype)
        times: list[list[float]] = [[], []]
        for r in range(rounds):
            for k in ((0, 1) if r % 2 == 0 else (1, 0)):
                times[k].append(_batch(*calls[k]))
        ratio = statistics.median(b / a for a, b in zip(*times, strict=True))
        a, b = times
        print(f"{dtype:6s} old min {min(a):7.1f} median {statistics.median(a):7.1f} | new min {min(b):7.1f} "
              f"median {statistics.median(b):7.1f} | new/old {ratio:.3f}", flush=True)


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:2]))
