"""The launcher passes a tiling whose fields are themselves dataclasses (an API's tiling inside the op's) as nested
namedtuples, and a tuple of dataclasses as a tuple of them, indexable on the device."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tilesim.runtime.launcher import kernel, launch


@dataclass(frozen=True)
class Inner:
    a: int
    b: float


@dataclass(frozen=True)
class Outer:
    n: int
    name: str  # not numeric: the kernel does not see it
    api: Inner
    cases: tuple[Inner, Inner, Inner]


@kernel
def read_nested(ctx, t, out):
    """out = [n, api.a, api.b, cases[k].a, cases[k].b for k by a runtime index]."""
    out.set_value(0, t.n)
    out.set_value(1, t.api.a)
    out.set_value(2, t.api.b)
    for k in range(t.n):
        c = t.cases[k]
        out.set_value(3 + 2 * k, c.a)
        out.set_value(4 + 2 * k, c.b)


def test_a_nested_dataclass_and_a_tuple_of_them_reach_the_kernel() -> None:
    t = Outer(3, "x", Inner(7, 0.5), (Inner(1, 1.5), Inner(2, 2.5), Inner(3, 3.5)))
    out = np.zeros(9, np.float32)
    launch(read_nested, t, out, block_dim=1)
    assert out.tolist() == [3, 7, 0.5, 1, 1.5, 2, 2.5, 3, 3.5]
    # another tiling of the same classes: the same generated loop, the new values
    u = Outer(2, "y", Inner(4, -1.0), (Inner(5, 0.25), Inner(6, 0.75), Inner(0, 0.0)))
    out[:] = 0
    launch(read_nested, u, out, block_dim=1)
    assert out.tolist() == [2, 4, -1.0, 5, 0.25, 6, 0.75, 0, 0]
