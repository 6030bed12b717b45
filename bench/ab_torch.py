"""Paired: each op called with torch CPU tensors against the same call with numpy arrays over the same memory:
``python -m bench.ab_torch [ROUNDS]``.

What a tensor costs is its crossing (:mod:`tilesim.interop`: a numpy view of each tensor, a tensor over each
result), a fixed part per call. The small inputs show it against a call's own fixed part; one large input shows it
against a real call. Batches of calls of the two kinds take turns (the order flipping every round); each op's
figure is the median of the paired ratios tensors/arrays, beside each kind's median batch.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import tilesim.kernels as kernels
from tilesim.kernels import op_specs

from tilesim.interop import to_torch

# (op, shape, dtype, calls per batch)
CASES = [("rms_norm_grad", (8, 128), "fp32", 100), ("swiglu_grad", (8, 256), "fp32", 100),
         ("layer_norm_grad", (8, 128), "fp32", 100), ("group_norm_backward", (2, 8, 16), "fp32", 100),
         ("rms_norm", (8, 128), "bf16", 100), ("swiglu", (8, 256), "bf16", 100), ("softmax", (8, 128), "fp16", 100),
         ("swiglu_grad", (2048, 8192), "bf16", 2)]


def _batch(call: Callable[[], Any], n: int) -> float:
    t = time.perf_counter()
    for _ in range(n):
        call()
    return (time.perf_counter() - t) / n * 1e6


def main(rounds: int = 30) -> None:
    import torch  # noqa: F401  (imported by the tensors' side anyway; here before either kind is timed)

    print(f"µs per call, {rounds} rounds")
    for op, shape, dtype, n in CASES:
        arrays = op_specs.OPS[op].make_inputs(shape, dtype, 0)
        tensors = {k: to_torch(v) if isinstance(v, np.ndarray) else v for k, v in arrays.items()}
        fn = getattr(kernels, op)
        calls = tuple(lambda fn=fn, kw=kw: fn(**kw) for kw in (arrays, tensors))
        for c in calls:
            for _ in range(3):
                c()
        times: list[list[float]] = [[], []]
        for r in range(rounds):
            for k in ((0, 1) if r % 2 == 0 else (1, 0)):
                times[k].append(_batch(calls[k], n))
        ratio = statistics.median(b / a for a, b in zip(*times, strict=True))
        print(f"{op:20s} {str(list(shape)):14s} {dtype:5s} arrays {statistics.median(times[0]):9.1f} | tensors "
              f"{statistics.median(times[1]):9.1f} | tensors/arrays {ratio:.3f}", flush=True)


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:2]))
