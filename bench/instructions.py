"""What one emulated instruction costs on this host, in the fast build and the checked build.

A kernel's time is its instructions' time: a pass over the operands plus a fixed part per call (the checks, the
counters, the log when recording). This times single instructions on one core's UB: a kernel that calls one
instruction many times in a loop (so no Python in between), launched on one core; the launch's own cost (the
least time of the same launch with no call) is subtracted, and the rest divided by the calls gives nanoseconds
per call. Use it to see what a change to the machine does to the per-call cost, which a profile of a kernel does
not show apart (the instructions' machine code is linked into the launch's core loop).

    python -m bench.instructions            # the default sizes: 64 lanes (the fixed part) and 1024 lanes
    python -m bench.instructions 4096       # other sizes, in fp32 lanes

Fast build: ``launch(..., checks=False)``; checked build: ``checks=True`` (shadow flows, operand, slot and hazard
checks). The figures are medians of 5 timed launches; this machine is shared, so compare runs, not single numbers.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from tilesim import machine as asc
from tilesim.runtime.launcher import kernel, launch

INSTRUCTIONS = ["Mul", "Muls", "Duplicate", "WholeReduceSum", "Cast bf16->fp32", "Cast fp32->bf16 RINT",
                "Cast fp16->fp32", "Cast fp32->fp16 RINT"]
CALLS = 20_000
PASS_LANES = 2048  # vector_pass: both operands in a 32 KiB L1d, few calls' fixed costs per repeat
REPEAT_LANES = 64  # fp32 lanes per 256 B repeat
ZERO_RUNS = 10  # launches with no call, the least of whose times is the launch's own cost


@dataclass(frozen=True)
class Loop:
    which: int  # an index into INSTRUCTIONS
    n: int  # fp32 lanes
    calls: int


@kernel
def instruction_loop(ctx, t):
    """``t.calls`` calls of instruction ``t.which`` over ``t.n`` lanes on three UB buffers (WholeReduceSum: one
    level of a sum's tree, each 64-lane repeat to one value), the sources written first so that checked mode
    reports nothing."""
    pipe = asc.TPipe(ctx)
    size = (t.n * 4 + 31) // 32 * 32
    a = pipe.init_buffer(asc.TBuf(asc.VECCALC), size).get(asc.float32)
    b = pipe.init_buffer(asc.TBuf(asc.VECCALC), size).get(asc.float32)
    c = pipe.init_buffer(asc.TBuf(asc.VECCALC), size).get(asc.float32)
    asc.duplicate(a, 1.0, t.n)
    asc.duplicate(b, 2.0, t.n)  # as bfloat16 or half: pairs of 0.0 and 2.0
    for _ in range(t.calls):
        if t.which == 0:
            asc.mul(c, a, b, t.n)
        elif t.which == 1:
            asc.muls(c, a, 2.0, t.n)
        elif t.which == 2:
            asc.duplicate(c, 0.0, t.n)
        elif t.which == 3:
            asc.whole_reduce_sum(c, a, REPEAT_LANES, t.n // REPEAT_LANES, 1, 1, 8)
        elif t.which == 4:
            asc.cast(c, b.reinterpret_cast(asc.bfloat16), asc.CAST_NONE, t.n)
        elif t.which == 5:
            asc.cast(c.reinterpret_cast(asc.bfloat16), a, asc.CAST_RINT, t.n)
        elif t.which == 6:
            asc.cast(c, b.reinterpret_cast(asc.half), asc.CAST_NONE, t.n)
        else:
            asc.cast(c.reinterpret_cast(asc.half), a, asc.CAST_RINT, t.n)


def _launch(which: int, n: int, calls: int, checks: bool) -> float:
    """Seconds of one launch of ``instruction_loop`` on one core."""
    t0 = time.perf_counter()
    launch(instruction_loop, Loop(which, n, calls), block_dim=1, outputs=0, checks=checks)
    return time.perf_counter() - t0


def vector_pass(lanes: int = PASS_LANES, calls: int = CALLS) -> tuple[Callable[[], None], int]:
    """The cheapest emulated vector pass on this host, to time: a call that launches ``calls`` fast-build Muls over
    ``lanes`` fp32 lanes (two operands in L1 at the default 2048: 16 KiB), and the 256 B repeats it covers. Muls
    is the cheapest per repeat of the instructions above at 2048 lanes (one load and one store a lane; the bf16
    widening, which loads half the bytes, comes close), so a kernel's repeats times its cost is a floor under the
    kernel's vector time (the bench summary's ``floor``). The launch's own cost is in the call's time."""
    which = INSTRUCTIONS.index("Muls")
    _launch(which, lanes, 10, False)  # compile or load the cache
    return lambda: launch(instruction_loop, Loop(which, lanes, calls), block_dim=1, outputs=0,
                          checks=False), calls * (lanes // REPEAT_LANES)


def measure(lanes: list[int]) -> list[tuple[str, int, float, float]]:
    """(instruction, lanes, fast ns, checked ns) per call."""
    rows = []
    for which, name in enumerate(INSTRUCTIONS):
        for n in lanes:
            ns = []
            for checks in (False, True):
                _launch(which, n, 10, checks)  # compile or load the cache
                empty = min(_launch(which, n, 0, checks) for _ in range(ZERO_RUNS))
                ns.append(statistics.median((_launch(which, n, CALLS, checks) - empty) / CALLS * 1e9
                                            for _ in range(5)))
            rows.append((name, n, ns[0], ns[1]))
    return rows


def main(argv: list[str]) -> None:
    lanes = [int(a) for a in argv] or [64, 1024]
    print(f"{'instruction':<24}{'lanes':>7}{'fast ns':>10}{'checked ns':>12}{'checked/fast':>14}")
    for name, n, fast, checked in measure(lanes):
        print(f"{name:<24}{n:>7}{fast:>10.1f}{checked:>12.1f}{checked / fast:>14.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])
