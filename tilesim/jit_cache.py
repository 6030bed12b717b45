"""Numba's on-disk cache, kept consistent with tilesim's own sources.

Numba stamps each cached function with its own source file only. A kernel's machine code inlines tilesim's
instructions, so after an edit to (or an upgrade of) ``tilesim``, every kernel loaded from the cache, ours and a
user's alike, would still run the old instructions. This adds a hash of tilesim's sources to every stamp: when they
change, each cached function is compiled again on first use.

It must run before the first ``@njit(cache=True)`` is decorated (the stamp is taken then), so
``tilesim/__init__.py`` imports it first.
"""

from __future__ import annotations

import hashlib
import pickle
from pathlib import Path

from numba.core import caching

# Host-side modules no kernel inlines: editing them (the cost model, the explorer, the command line, the launch's
# host side) leaves the compiled kernels valid. Their own @njit helpers, called from the host, are covered by
# Numba's stamp of their file. A new module is hashed until it is listed here.
HOST_ONLY = frozenset({"__main__.py", "cli.py", "cost.py", "cost_params.py", "explore.py", "launch.py", "memo.py",
                       "opspec.py", "precision.py", "pytest_plugin.py", "races.py", "soc.py", "trace.py", "ub.py",
                       "violations.py"})


def _sources_hash() -> str:
    h = hashlib.sha256()
    root = Path(__file__).parent
    for p in sorted(root.rglob("*.py")):
        if p.name in HOST_ONLY and p.parent == root:
            continue
        h.update(str(p.relative_to(root)).encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


MACHINE_HASH = _sources_hash()

_numba_stamp = caching._SourceFileBackedLocatorMixin.get_source_stamp


def _stamp(self):  # type: ignore[no-untyped-def]
    return (_numba_stamp(self), MACHINE_HASH)


caching._SourceFileBackedLocatorMixin.get_source_stamp = _stamp

_numba_load_index = caching.IndexDataCacheFile._load_index


def _load_index(self):  # type: ignore[no-untyped-def]
    """Numba's index, or none when it cannot be read back: an index written before a type it pickles was renamed
    or moved (a tilesim Marker, an element type) raises while unpickling, before Numba compares its stamp. Such an
    index is stale anyway; its functions compile again."""
    try:
        return _numba_load_index(self)
    except (AttributeError, ImportError, ModuleNotFoundError, EOFError, pickle.UnpicklingError, TypeError):
        return {}


caching.IndexDataCacheFile._load_index = _load_index
