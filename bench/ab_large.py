"""Paired A/B of the demo's large calls between two source trees: ``python -m bench.ab_large OLD NEW [ROUNDS]
[OP:DTYPE ...]`` (default: every case of ``bench.demo.CASES``, 8 rounds; any dtype of an op the demo runs, on the
demo's shape for the op, as ``bench.profile``).

As :mod:`bench.ab_small`: one worker process per tree, the two take turns (the order flipping every round), and
each case's figure is the median of the paired ratios new/old, so that this VM's drift cancels. A batch is
``CALLS`` calls into preallocated outputs, in fast mode; the figures are milliseconds per call.
"""

from __future__ import annotations

import sys

from bench.ab_small import paired

CALLS = 3

WORKER = f"""
import sys, time
from bench.profile import demo_case
built = {{}}
print("ready", flush=True)
for line in sys.stdin:
    key = line.strip()
    if key not in built:  # inputs, outputs and a warm-up call, on first use
        call = demo_case(*key.split(":"))[0]
        built[key] = call, call()
    call, out = built[key]
    t = time.perf_counter()
    for _ in range({CALLS}):
        call(out)
    print((time.perf_counter() - t) / {CALLS} * 1e3, flush=True)
"""


def cases() -> list[str]:
    from bench import demo

    return list(dict.fromkeys(demo.op_of(m) + ":" + d for m, _, d in demo.CASES))  # as WORKER


def main(argv: list[str]) -> None:
    old, new = argv[:2]
    rounds = int(argv[2]) if len(argv) > 2 else 8
    paired(old, new, argv[3:] or cases(), rounds, WORKER, f"ms per call, batches of {CALLS}")


if __name__ == "__main__":
    main(sys.argv[1:])
