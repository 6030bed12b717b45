"""Every shipped op's outputs and counters, bit for bit, against the pins in ``tests/golden.json`` (see
``tests/golden.py``): in fast mode, and under ``--tilesim-checks`` in checked mode."""

from __future__ import annotations

import json

import pytest
from golden import PATH, SHAPES, cases, record

GOLDEN = json.loads(PATH.read_text())


@pytest.mark.no_launch_here
def test_every_pinned_op_has_its_shapes() -> None:
    assert sorted({key.split()[0] for key in GOLDEN}) == sorted(SHAPES)


@pytest.mark.parametrize("op", sorted(SHAPES))
def test_outputs_and_counters_are_the_pinned_ones(op: str) -> None:
    """The op's cases are the pinned ones (each once), and each gives its pinned outputs and counters; the cases
    are made here, not at collection, where every pytest worker would make them all."""
    found = list(cases(op))
    keys = [key for key, *_ in found]
    assert len(set(keys)) == len(keys) and sorted(keys) == sorted(k for k in GOLDEN if k.split()[0] == op)
    moved = [key for key, spec, inputs, t in found if record(spec, inputs, t) != GOLDEN[key]]
    assert not moved, f"{len(moved)} cases moved, the first: {moved[0]}"
