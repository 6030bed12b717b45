"""Bit-exact pins of the shipped ops: the outputs and the counters of each op over a fixed set of cases, recorded
in ``tests/golden.json`` and compared by ``tests/test_golden.py``. A change that must not move a bit (a kernel
rewritten onto the programming model, a machine refactor) shows up there as the case that moved.

The cases are each op's OpSpec inputs (seed 0) at a few small shapes that reach its modes and tails, in every
dtype it takes, on each SoC of ``SOCS`` that takes it, run with a spread of the tilings
its explorer sweep lists (the official one and up to ``PER_CASE - 1`` more, evenly through the list, so that its
splits, modes and buffer counts come in). A case records a hash of each output's bytes and, per launch, the
counters summed over the cores and a hash of the per-core table, the syncs' counters left out (a port adds
them). ``make test`` runs the comparison in fast mode and again under ``--tilesim-checks``, so both builds are
held to the same pins.

``python -m tests.golden write`` records the file afresh: run it only when a change is meant to move outputs or
counters, and say why in the commit.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from tilesim.kernels.op_specs import OPS

import tilesim
from tilesim.core.records import COUNTER_NAMES
from tilesim.errors import AclnnError
from tilesim.soc import get_soc

PATH = Path(__file__).with_name("golden.json")
SOCS = ("Ascend910B1", "Ascend910B3", "Ascend910_9391", "Ascend310P3", "Ascend910A")  # the SoCs the tests use
PER_CASE = 4  # tilings per (op, shape, dtype, SoC): the official one and a spread of the sweep
SYNC_COUNTERS = ("pipe_barriers", "set_flags", "wait_flags")
KEPT = [i for i, n in enumerate(COUNTER_NAMES) if n not in SYNC_COUNTERS]

# Small shapes in each op's OpSpec notation that reach its modes (split-N and split-D, the GroupNorm UB modes,
# HxW = 1, colLen not 32 B aligned, rows longer than the UB, the multi-row RmsNorm) and its tails.
SHAPES: dict[str, list[tuple[int, ...]]] = {
    "rms_norm_grad": [(16, 64), (33, 1000), (5, 9000)],
    "group_norm_backward": [(2, 32, 16), (1, 16, 3000), (2, 48, 1), (3, 64, 100)],
    "swiglu_grad": [(8, 128), (5, 2000), (3, 34)],
    "swiglu": [(8, 128), (5, 2000), (3, 34)],
    "rms_norm": [(16, 64), (7, 1000), (3, 20000)],
    "softmax": [(16, 64), (5, 1000), (3, 4100)],
    "layer_norm_grad": [(16, 64), (4, 1000)],
    "nsa_compress_grad": [(128, 2, 64), (256, 1, 128)],
}


def _digest(a: Any) -> str:
    a = np.ascontiguousarray(a)
    return hashlib.sha256(str(a.dtype).encode() + str(a.shape).encode() + a.view(np.uint8).tobytes()).hexdigest()[:16]


def _spread(cands: list[Any]) -> list[Any]:
    """The official candidate and up to PER_CASE - 1 others, evenly through the sweep's order."""
    official = [c for c in cands if c.official]
    others = [c for c in cands if not c.official]
    step = max(1, -(-len(others) // (PER_CASE - 1)))
    return official + others[::step][: PER_CASE - 1]


def cases(op: str | None = None) -> Iterator[tuple[str, Any, Any, Any]]:
    """(key, op spec, inputs, tiling) of every case (of op ``op`` alone if given), in a fixed order."""
    for name, shapes in SHAPES.items() if op is None else [(op, SHAPES[op])]:
        spec = OPS[name]
        for shape in shapes:
            for dtype in spec.dtypes:
                inputs = spec.make_inputs(shape, dtype, 0)
                for soc in SOCS:
                    try:
                        cands = spec.candidates(inputs, get_soc(soc))
                    except AclnnError:  # the SoC does not take the dtype (or the shape)
                        continue
                    for c in _spread(list(cands)):
                        params = ",".join(f"{k}={v}" for k, v in sorted(c.params.items()))
                        key = f"{name} {'x'.join(map(str, shape))} {dtype} {soc} {params}"
                        yield key, spec, inputs, (c.tiling, soc)


def record(spec: Any, inputs: Any, tiling: Any) -> dict[str, Any]:
    """What a case pins: each output's hash, and per launch the counters (syncs left out)."""
    t, soc = tiling
    with tilesim.capture() as runs:
        outs = spec.run(inputs, t, get_soc(soc))
    launches = []
    for r in runs:
        table = np.ascontiguousarray(r.counters[:, KEPT])
        launches.append({"op": r.op, "cores": int(table.shape[0]), "table": _digest(table),
                         "totals": {COUNTER_NAMES[i]: int(v) for i, v in zip(KEPT, table.sum(axis=0), strict=True)
                                    if v}})
    return {"outputs": [_digest(o) for o in outs], "launches": launches}


def compute() -> dict[str, dict[str, Any]]:
    return {key: record(spec, inputs, t) for key, spec, inputs, t in cases()}


def write() -> None:
    found = compute()
    PATH.write_text(json.dumps(found, indent=1, sort_keys=True) + "\n")
    print(f"{len(found)} cases written to {PATH}")


if __name__ == "__main__":
    if sys.argv[1:] != ["write"]:
        sys.exit("usage: python -m tests.golden write")
    write()
