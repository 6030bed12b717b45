"""What one emulated instruction costs on this host, in the fast build and the checked build.

A kernel's time is its instructions' time: a pass over the operands plus a fixed part per call (the checks, the
counters, the log when recording). This times single instructions on one core's UB, each called many times in
an ``@njit`` loop (so no Python in between), and prints nanoseconds per call. Use it to see what a change to the
primitives does to the per-call cost, which no profiler shows (Numba's machine code has no symbols).

    python -m bench.instructions            # the default sizes: 64 lanes (the fixed part) and 1024 lanes

Fast build: ``make_core(..., checks=None)``; checked build: ``checks=True`` (shadow flows, slot and generation
checks). The figures are medians of 5 timed loops; this machine is shared, so compare runs, not single numbers.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from numba import njit

from tilesim.cast import CAST_RINT, KIND_BF16, KIND_FP16
from tilesim.device import make_core, slot
from tilesim.launch import prepare
from tilesim.reduce import reduce_level
from tilesim.soc import get_soc
from tilesim.ub import UbPlan
from tilesim.vector import cast_from_f32, cast_to_f32, duplicate, mul, muls

INSTRUCTIONS = ["Mul", "Muls", "Duplicate", "WholeReduceSum levels", "Cast bf16->fp32", "Cast fp32->bf16 RINT",
                "Cast fp16->fp32", "Cast fp32->fp16 RINT"]
CALLS = 20_000
SLOT = 64 * 1024  # bytes per operand buffer: room for 16384 fp32 lanes
PASS_LANES = 2048  # vector_pass: both operands in a 32 KiB L1d, few calls' fixed costs per repeat
REPEAT_LANES = 64  # fp32 lanes per 256 B repeat


@njit(cache=True)
def _loop(arena, plan, cnt, err, checks, which, n, calls):
    core = make_core(0, 1, arena, plan, cnt, err, checks)
    a, b, c = slot(core, 0, 0), slot(core, 1, 0), slot(core, 2, 0)
    duplicate(core, a, 1.0, n)  # defined sources, so that checked mode reports nothing
    duplicate(core, b, 2.0, n)
    for _ in range(calls):
        if which == 0:
            mul(core, c, a, b, n)
        elif which == 1:
            muls(core, c, a, 2.0, n)
        elif which == 2:
            duplicate(core, c, 0.0, n)
        elif which == 3:
            reduce_level(core, c, a, n)
        elif which == 4:
            cast_to_f32(core, c, b, n, KIND_BF16)
        elif which == 5:
            cast_from_f32(core, c, a, n, KIND_BF16, CAST_RINT)
        elif which == 6:
            cast_to_f32(core, c, b, n, KIND_FP16)
        else:
            cast_from_f32(core, c, a, n, KIND_FP16, CAST_RINT)


def _args(which: int, n: int, checks: bool) -> tuple[Any, ...]:
    """``_loop``'s arguments but the call count: one core's UB with three operand buffers, instruction ``which``
    over ``n`` lanes, in the fast (``checks`` False) or the checked build."""
    soc = get_soc("Ascend910B1")
    plan = UbPlan(soc.ub_size)
    for name in ("a", "b", "c"):
        plan.add(name, SLOT)
    plan.check()
    launch = prepare("instructions", soc, None, plan, 1, checks, [])
    return launch.arena, launch.plan_array, launch.counters, launch.err, launch.core_checks, which, n


def vector_pass(lanes: int = PASS_LANES, calls: int = CALLS) -> tuple[Callable[[], None], int]:
    """The cheapest emulated vector pass on this host, to time: a call that runs ``calls`` fast-build Muls over
    ``lanes`` fp32 lanes (two operands in L1 at the default 2048: 16 KiB), and the 256 B repeats it covers. Muls
    is the cheapest per repeat of the instructions above at 2048 lanes (one load and one store a lane; the bf16
    widening, which loads half the bytes, comes within 5 %), so a kernel's repeats times its cost is a floor under
    the kernel's vector time (the bench summary's ``floor``)."""
    args = _args(INSTRUCTIONS.index("Muls"), lanes, False)
    _loop(*args, 10)  # compile or load the cache
    return lambda: _loop(*args, calls), calls * (lanes // REPEAT_LANES)


def measure(lanes: list[int]) -> list[tuple[str, int, float, float]]:
    """(instruction, lanes, fast ns, checked ns) per call."""
    rows = []
    for which, name in enumerate(INSTRUCTIONS):
        for n in lanes:
            ns = []
            for checks in (False, True):
                args = _args(which, n, checks)
                _loop(*args, 10)  # compile or load the cache
                runs = []
                for _ in range(5):
                    t0 = time.perf_counter()
                    _loop(*args, CALLS)
                    runs.append((time.perf_counter() - t0) / CALLS * 1e9)
                ns.append(statistics.median(runs))
            rows.append((name, n, ns[0], ns[1]))
    return rows


def main(argv: list[str]) -> None:
    lanes = [int(a) for a in argv] or [64, 1024]
    print(f"{'instruction':<24}{'lanes':>7}{'fast ns':>10}{'checked ns':>12}{'checked/fast':>14}")
    for name, n, fast, checked in measure(lanes):
        print(f"{name:<24}{n:>7}{fast:>10.1f}{checked:>12.1f}{checked / fast:>14.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])
