"""A kernel that runs until it is stopped, for the Ctrl-C tests (``tests/test_interrupt.py`` runs this module as a
script, in a process of its own, and sends it SIGINT).

Each core copies its tile of x in, adds 1 to it ``t.iters`` times and copies it out after every step, so that a
core left running keeps writing y: a write after the KeyboardInterrupt reached the caller shows. In
:func:`spin_synced_kernel` the cores meet at a SyncAll after each step (the coroutine launch); iters = 2**62 runs
for ever. The script runs every case named on its command line (``cores:plain|synced:fast|checked``, and
``:reinstalled`` to put Python's SIGINT handler back in front first, ``:clean-stop`` for a handler of the program's
own that does not raise), a JSON line each.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass

import numpy as np

from tilesim import machine as asc
from tilesim.runtime.launcher import kernel, launch

TILE = 8192  # fp32 elements a core computes on: 24 cores move over 1 MiB, so that they run on the host's threads


@dataclass(frozen=True)
class SpinTiling:
    iters: int


@kernel
def spin_kernel(ctx, t, x, y):
    """``t.iters`` times: x += 1 in UB, copied out to y."""
    c = asc.get_block_idx(ctx)
    buf = asc.TPipe(ctx).init_buffer(asc.TBuf(asc.VECCALC), TILE * 4).get(asc.float32)
    asc.data_copy(buf, x[c * TILE], TILE)
    asc.set_flag(ctx, asc.HardEvent.MTE2_V, 0)
    asc.wait_flag(ctx, asc.HardEvent.MTE2_V, 0)
    for _ in range(t.iters):
        asc.adds(buf, buf, 1.0, TILE)
        asc.set_flag(ctx, asc.HardEvent.V_MTE3, 0)
        asc.wait_flag(ctx, asc.HardEvent.V_MTE3, 0)
        asc.data_copy(y[c * TILE], buf, TILE)
        asc.set_flag(ctx, asc.HardEvent.MTE3_V, 0)
        asc.wait_flag(ctx, asc.HardEvent.MTE3_V, 0)


@kernel
def spin_synced_kernel(ctx, t, x, y):
    """:func:`spin_kernel` with a SyncAll after every step: its cores run as coroutines."""
    c = asc.get_block_idx(ctx)
    buf = asc.TPipe(ctx).init_buffer(asc.TBuf(asc.VECCALC), TILE * 4).get(asc.float32)
    asc.data_copy(buf, x[c * TILE], TILE)
    asc.set_flag(ctx, asc.HardEvent.MTE2_V, 0)
    asc.wait_flag(ctx, asc.HardEvent.MTE2_V, 0)
    for _ in range(t.iters):
        asc.adds(buf, buf, 1.0, TILE)
        asc.set_flag(ctx, asc.HardEvent.V_MTE3, 0)
        asc.wait_flag(ctx, asc.HardEvent.V_MTE3, 0)
        asc.data_copy(y[c * TILE], buf, TILE)
        asc.set_flag(ctx, asc.HardEvent.MTE3_V, 0)
        asc.wait_flag(ctx, asc.HardEvent.MTE3_V, 0)
        asc.sync_all(ctx)


def run(cores: int, iters: int, synced: bool, checks: bool) -> np.ndarray:
    """y after ``iters`` steps on ``cores`` cores (x = 0: y = iters everywhere)."""
    x = np.zeros(cores * TILE, np.float32)
    y = np.full(cores * TILE, -1.0, np.float32)
    launch(spin_synced_kernel if synced else spin_kernel, SpinTiling(iters), x, y, block_dim=cores, checks=checks)
    return y


def interrupted(cores: int, synced: bool, checks: bool, iters: int = 2 ** 62) -> dict[str, object]:
    """Ctrl-C 0.5 s into a launch of ``iters`` steps (by default one that would run for ever): what the caller
    sees."""
    x = np.zeros(cores * TILE, np.float32)
    y = np.full(cores * TILE, -1.0, np.float32)
    threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
    t0 = time.perf_counter()
    try:
        launch(spin_synced_kernel if synced else spin_kernel, SpinTiling(iters), x, y, block_dim=cores,
               checks=checks)
        raised = "nothing"
    except KeyboardInterrupt:
        raised = "KeyboardInterrupt"
    except BaseException as e:  # noqa: BLE001  (reported, not hidden)
        raised = repr(e)
    waited = time.perf_counter() - t0
    seen = y.copy()
    time.sleep(0.5)  # a core left running would write y meanwhile
    return {"raised": raised, "seconds": waited, "written_after": bool((y != seen).any()),
            "untouched": bool((y == -1).all()), "complete": bool((y == iters).all()),
            "next_call_right": bool((run(cores, 3, synced, checks) == 3).all())}


if __name__ == "__main__":
    # Ctrl-C as an interactive program has it: a shell starting a job in the background without job control
    # (`make test &` in a script) leaves SIGINT ignored, which the process inherits and Python keeps
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for case in sys.argv[1:]:
        cores, form, build, *handler = case.split(":")
        if handler == ["reinstalled"]:  # Python's handler put back in front of tilesim's, as signal.signal does
            signal.signal(signal.SIGINT, signal.default_int_handler)
        run(int(cores), 2, form == "synced", build == "checked")  # compiled, and its buffers made, before the clock
        if handler == ["clean-stop"]:  # a program whose Ctrl-C asks for a clean stop: its launch runs to its end
            seen: list[int] = []
            signal.signal(signal.SIGINT, lambda signum, frame, seen=seen: seen.append(signum))
            r = interrupted(int(cores), form == "synced", build == "checked", iters=30_000)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            print(json.dumps({"case": case, "handler_ran": seen == [signal.SIGINT], **r}), flush=True)
            continue
        print(json.dumps({"case": case, **interrupted(int(cores), form == "synced", build == "checked")}), flush=True)
