"""Numba's on-disk cache, kept consistent with tilesim's own sources, and found again by other processes.

Numba stamps each cached function with its own source file only. A kernel's machine code inlines tilesim's
instructions, so after an edit to (or an upgrade of) ``tilesim``, every kernel loaded from the cache, ours and a
user's alike, would still run the old instructions. This adds a hash of tilesim's sources to every stamp: when they
change, each cached function is compiled again on first use.

It must run before the first ``@njit(cache=True)`` is decorated (the stamp is taken then), so
``tilesim/__init__.py`` imports it first.

Numba keys a cached closure (an ``@overload``'s implementation is one) by its code and by the pickled values it
closes over. A compiled function among them (``tilesim.device``'s build selectors close over one) pickles with its
dispatcher's uuid, drawn anew in each process: such a key matched in no other process, so every process compiled
the function again and added one more entry to the cache. Here it pickles as its Python function. (A set of
strings in a closure would still key by the process's hash seed; no closure of tilesim's holds one.)
"""

from __future__ import annotations

import hashlib
import io
import pickle
from pathlib import Path
from typing import Any

from numba.core import caching, serialize
from numba.core.dispatcher import Dispatcher

# Host-side modules no kernel inlines: editing them (the cost model, the explorer, the command line, the launch's
# host side) leaves the compiled kernels valid. Their own @njit helpers, called from the host, are covered by
# Numba's stamp of their file. A new module is hashed until it is listed here.
HOST_ONLY = frozenset({"__main__.py", "cli.py", "cost.py", "cost_params.py", "explore.py", "interop.py", "launch.py",
                       "memo.py", "opspec.py", "precision.py", "pytest_plugin.py", "races.py", "soc.py",
                       "source_tree.py", "trace.py", "torch.py", "ub.py", "violations.py"})


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


def _compiled(py_func: Any) -> Any:
    """Stands for a compiled function in a cache key (a key is never unpickled)."""
    return py_func


class _KeyPickler(serialize.NumbaPickler):
    """Numba's pickler, with a compiled function pickled as its Python function."""

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, Dispatcher):
            return _compiled, (obj.py_func,)
        return super().reducer_override(obj)


def _index_key(self, sig, codegen):  # type: ignore[no-untyped-def]
    """Numba's index key (signature, codegen, code and closure hashes), the closure pickled by _KeyPickler."""
    cells = self._py_func.__closure__
    cvars = b""
    if cells is not None:
        with io.BytesIO() as buf:
            _KeyPickler(buf, protocol=4).dump(tuple(c.cell_contents for c in cells))
            cvars = buf.getvalue()
    code = self._py_func.__code__.co_code
    return (sig, codegen.magic_tuple(), (hashlib.sha256(code).hexdigest(), hashlib.sha256(cvars).hexdigest()))


caching.Cache._index_key = _index_key
