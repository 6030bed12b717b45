"""The cost model's schedule as a Chrome trace (JSON Object Format): opens in Perfetto (ui.perfetto.dev) and
chrome://tracing.

One process per core ("core 7"), one thread (lane) per pipe named as msprof's simulator names them (MTE2,
VECTOR, MTE3, SCALAR), one complete event per stage (a run of one pipe's instructions: a tile's CopyIn, Compute
or CopyOut), with its instruction count and bytes or repeats. An op call that launches several kernels shows them
one after the other, each launch's overhead and SyncAlls as global instant events.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tilesim.core.pipes import LANE_NAMES
from tilesim.cost.model import Estimate

_UNIT = {"MTE2": "bytes", "MTE3": "bytes", "VECTOR": "repeats", "SCALAR": "accesses"}


def chrome_trace(estimates: list[Estimate]) -> dict[str, Any]:
    """The trace of an op call's launches (in launch order), as a dict ready for ``json.dump``."""
    events: list[dict[str, Any]] = []
    cores = max((e.block_dim for e in estimates), default=0)
    for c in range(cores):
        events.append({"ph": "M", "name": "process_name", "pid": c, "tid": 0, "args": {"name": f"core {c}"}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": c, "tid": 0, "args": {"sort_index": c}})
        for i, p in enumerate(LANE_NAMES):
            events.append({"ph": "M", "name": "thread_name", "pid": c, "tid": i, "args": {"name": p}})
            events.append({"ph": "M", "name": "thread_sort_index", "pid": c, "tid": i, "args": {"sort_index": i}})
    offset = 0.0
    for k, e in enumerate(estimates):
        events.append({"ph": "i", "s": "g", "name": f"launch {e.op}", "ts": offset, "pid": 0, "tid": 0,
                       "args": {"launch": k, "block_dim": e.block_dim, "estimated_us": e.total_us}})
        t = offset + e.launch_us
        for ph, span in enumerate(e.phase_us[:-1]):
            t += span
            events.append({"ph": "i", "s": "g", "name": "SyncAll", "ts": t, "pid": 0, "tid": 0,
                           "args": {"launch": k, "after_phase": ph}})
            t += e.sync_all_us
        for s in e.stages:
            events.append({"ph": "X", "name": s.name, "cat": s.pipe, "pid": s.core, "tid": LANE_NAMES.index(s.pipe),
                           "ts": offset + s.start_us, "dur": s.end_us - s.start_us,
                           "args": {"launch": k, "phase": s.phase, "instructions": s.instructions,
                                    _UNIT[s.pipe]: s.amount}})
        offset += e.total_us
    return {"traceEvents": events, "displayTimeUnit": "ns",
            "otherData": {"tool": "tilesim", "ops": [e.op for e in estimates],
                          "soc": estimates[0].soc if estimates else "", "estimated_us": offset}}


def write_trace(path: str | Path, estimates: list[Estimate]) -> Path:
    """Write :func:`chrome_trace` to ``path`` (parents created); returns the path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with p.open("w") as f:
        json.dump(chrome_trace(estimates), f)
    return p
