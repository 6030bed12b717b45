"""Paired A/B of the worked example, ``examples/add_tail.py``, between two source trees:
``python -m bench.ab_example OLD NEW [ROUNDS]`` (as :mod:`bench.ab_small`: a worker per tree, batches in turns,
the median of the paired ratios new/old). Shapes from a 16 KiB call to a 64 MiB one, fp32 and bf16, into a
preallocated output, in fast mode; microseconds per call."""

from __future__ import annotations

import sys

from bench.ab_small import paired

CASES = ["4096:fp32", "65536:fp32", "999x1001:fp32", "999x1001:bf16", "4096x4096:fp32"]

WORKER = """
import sys, time
import numpy as np
from examples.add_tail import OPS, add_tail
built = {}
print("ready", flush=True)
for line in sys.stdin:
    key = line.strip()
    if key not in built:
        shape, dtype = key.split(":")
        inputs = OPS["add_tail"].make_inputs(tuple(int(s) for s in shape.split("x")), dtype, 0)
        out = np.empty_like(inputs["x"])
        call = lambda i=inputs, o=out: add_tail(**i, out=o)
        for _ in range(3):
            call()
        calls = max(1, int(0.05 / max(1e-6, (lambda t: (call(), time.perf_counter() - t)[1])(time.perf_counter()))))
        built[key] = call, calls
    call, calls = built[key]
    t = time.perf_counter()
    for _ in range(calls):
        call()
    print((time.perf_counter() - t) / calls * 1e6, flush=True)
"""


def main(old: str, new: str, rounds: int = 20) -> None:
    paired(old, new, CASES, rounds, WORKER, "µs per call")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], *(int(a) for a in sys.argv[3:4]))
