"""Every shipped op's outputs and counters, bit for bit, against the pins in ``tests/golden.json`` (see
``tests/golden.py``): in fast mode, and under ``--tilesim-checks`` in checked mode."""

from __future__ import annotations

import json

import pytest
from golden import PATH, cases, record

GOLDEN = json.loads(PATH.read_text())
CASES = list(cases())


def test_the_cases_are_the_pinned_ones() -> None:
    keys = [key for key, *_ in CASES]
    assert len(set(keys)) == len(keys) and sorted(keys) == sorted(GOLDEN)


@pytest.mark.parametrize("op", sorted({key.split()[0] for key, *_ in CASES}))
def test_outputs_and_counters_are_the_pinned_ones(op: str) -> None:
    moved = [key for key, spec, inputs, t in CASES if key.split()[0] == op and record(spec, inputs, t) != GOLDEN[key]]
    assert not moved, f"{len(moved)} cases moved, the first: {moved[0]}"
