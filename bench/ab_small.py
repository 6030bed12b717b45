"""Paired A/B of the small calls between two source trees: ``python -m bench.ab_small OLD NEW [ROUNDS]``.

This VM's speed drifts by up to 2x within minutes, more than most host-side changes save. So one worker process
per tree imports its tree, warms each small call of ``bench/test_bench_small_calls.py``, then the two run batches
of 100 calls in turn, ROUNDS times per op (default 40, the order flipping every round). Each op's figure is the
median of the paired ratios new/old, beside each tree's fastest and median batch. A tree is a checkout (for
example ``git archive REV | tar -x -C DIR``); each keeps its own Numba cache, so warm it once first.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
from pathlib import Path

OPS = ["swiglu_grad", "rms_norm_grad", "layer_norm_grad", "group_norm_backward", "nsa_compress_grad"]
BATCH = 100  # calls per timed batch

WORKER = f"""
import sys, time
import numpy as np
import bench.test_bench_small_calls as s
calls = {{}}
for which in {OPS!r}:
    calls[which] = getattr(s, "_" + which)(np.random.default_rng(0))[0]
    for _ in range(30):
        calls[which]()
print("ready", flush=True)
for line in sys.stdin:
    call = calls[line.strip()]
    t = time.perf_counter()
    for _ in range({BATCH}):
        call()
    print((time.perf_counter() - t) / {BATCH} * 1e6, flush=True)
"""


def _worker(tree: Path, script: str = WORKER) -> subprocess.Popen[str]:
    p = subprocess.Popen([sys.executable, "-c", script], cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)},
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "ready", f"{tree}: the worker did not start"
    return p


def _batch(p: subprocess.Popen[str], op: str) -> float:
    assert p.stdin is not None and p.stdout is not None
    p.stdin.write(op + "\n")
    p.stdin.flush()
    return float(p.stdout.readline())


def paired(old: str, new: str, ops: list[str], rounds: int, script: str, unit: str) -> None:
    """Time each op in turns in the two trees' workers (``script``: one op name in per line, one time out);
    print each tree's fastest and median batch and the median of the paired ratios new/old."""
    workers = [_worker(Path(old).resolve(), script), _worker(Path(new).resolve(), script)]
    try:
        print(f"{unit}, {rounds} rounds; old {old}, new {new}")
        for op in ops:
            times: list[list[float]] = [[], []]
            for r in range(rounds):
                for k in ((0, 1) if r % 2 == 0 else (1, 0)):
                    times[k].append(_batch(workers[k], op))
            ratio = statistics.median(b / a for a, b in zip(*times, strict=True))
            a, b = times
            print(f"{op:22s} old min {min(a):6.1f} median {statistics.median(a):6.1f} | new min {min(b):6.1f} "
                  f"median {statistics.median(b):6.1f} | new/old {ratio:.2f}", flush=True)
    finally:
        for w in workers:
            assert w.stdin is not None
            w.stdin.close()
            w.wait()


def main(old: str, new: str, rounds: int = 40) -> None:
    paired(old, new, OPS, rounds, WORKER, f"µs per call, batches of {BATCH}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], *(int(a) for a in sys.argv[3:4]))
