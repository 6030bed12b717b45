"""The namedtuple types a tiling crosses into a kernel as (:mod:`tilesim.runtime.launcher`), one per list of fields,
named after the fields so that any process can rebuild one by name: Numba's cache pickles a compiled kernel's
argument types by reference, and a kernel compiled in one process is loaded in another."""

from __future__ import annotations

from collections import namedtuple
from typing import Any

_made: dict[str, Any] = {}


def name_of(fields: list[str]) -> str:
    """``Tiling_<len><field>...``: the fields, each after its length."""
    return "Tiling_" + "".join(f"{len(f)}{f}" for f in fields)


def __getattr__(name: str) -> Any:
    if not name.startswith("Tiling_"):
        raise AttributeError(name)
    t = _made.get(name)
    if t is None:
        rest, fields = name[len("Tiling_"):], []
        while rest:
            i = 0
            while rest[i].isdigit():
                i += 1
            n = int(rest[:i])
            fields.append(rest[i:i + n])
            rest = rest[i + n:]
        t = _made[name] = namedtuple(name, fields)
        t.__module__ = __name__
    return t
