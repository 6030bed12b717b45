"""Numba's on-disk cache, kept consistent with tilesim's own sources, and found again by other processes.

Numba stamps each cached function with its own source file only. A kernel's machine code inlines tilesim's
instructions, so after an edit to (or an upgrade of) ``tilesim``, every kernel loaded from the cache, ours and a
user's alike, would still run the old instructions. This adds a hash of tilesim's device sources
(:func:`device_sources`) to every stamp: when they change, each cached function is compiled again on first use.

It must run before the first ``@njit(cache=True)`` is decorated (the stamp is taken then), so
``tilesim/__init__.py`` imports it first.

Numba keys a cached closure (an ``@overload``'s implementation is one) by its code and by the pickled values it
closes over. A compiled function among them (``tilesim.core.records``'s build selectors close over one) pickles with its
dispatcher's uuid, drawn anew in each process: such a key matched in no other process, so every process compiled
the function again and added one more entry to the cache. Here it pickles as its Python function. (A set of
strings in a closure would still key by the process's hash seed; no closure of tilesim's holds one.)

A cache is a cache: whatever is on disk, a function compiles right. An entry that cannot be used is a miss: a
:class:`CacheWarning`, a compile, and the entry written again. That is a data file truncated or overwritten (its
CRC shows it before anything of it is unpickled or handed to LLVM), an index that does not unpickle, or an entry
written under a module name this process cannot import; and, without a warning (a race, not damage), another
signature's entry where two processes took one data file number at once (the key stored in each entry shows it).
An entry that cannot be written (a directory made read-only or deleted meanwhile, a full disk) warns and keeps the
compiled code in memory. A function with no writable cache directory at all (``NUMBA_CACHE_DIR``, the
``__pycache__`` beside its source and ``~/.cache/numba``) warns once per directory and compiles in memory, in
every process, where Numba would refuse to decorate it.
"""

from __future__ import annotations

import hashlib
import io
import os
import pickle
import warnings
import zlib
from pathlib import Path
from typing import Any

from numba.core import caching, serialize
from numba.core.ccallback import CFunc
from numba.core.dispatcher import Dispatcher

# Compiled code lives in tilesim's folders but these host ones, and in the shipped kernels (a kernel inlines other
# kernel modules' device functions). The top-level modules (errors, soc, precision, interop, torch, ...) and the host
# folders hold nothing a kernel's machine code takes in, so editing them (an error message, the cost model's figures,
# the explorer) leaves the compiled kernels valid; their own @njit helpers, called from the host, are covered by
# Numba's stamp of their file. A new folder is device code until it is named here.
HOST_FOLDERS = frozenset({"checks", "cost", "tools", "tiling"})


def device_sources() -> list[Path]:
    """The source files every cached kernel depends on: each folder of tilesim that is not a host folder, and the
    shipped kernels (``tilesim/kernels/`` installed, ``kernels/`` beside ``tilesim/`` in a checkout)."""
    package = Path(__file__).resolve().parent.parent
    folders = [d for d in sorted(package.iterdir()) if (d / "__init__.py").is_file() and d.name not in HOST_FOLDERS]
    checkout_kernels = package.parent / "kernels"
    if not (package / "kernels").is_dir() and (checkout_kernels / "__init__.py").is_file():
        folders.append(checkout_kernels)
    return [p for d in folders for p in sorted(d.rglob("*.py"))]


def _sources_hash() -> str:
    h = hashlib.sha256()
    top = Path(__file__).resolve().parents[2]
    for p in device_sources():
        h.update(str(p.relative_to(top)).encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


MACHINE_HASH = _sources_hash()

_numba_stamp = caching._SourceFileBackedLocatorMixin.get_source_stamp


def _stamp(self):  # type: ignore[no-untyped-def]
    return (_numba_stamp(self), MACHINE_HASH)


caching._SourceFileBackedLocatorMixin.get_source_stamp = _stamp


class CacheWarning(UserWarning):
    """A compiled-code cache entry tilesim could not use (it compiled the function again) or write (the compiled
    code stays in memory for the process)."""


def _warn(text: str) -> None:
    warnings.warn(f"tilesim: {text}", CacheWarning, stacklevel=2)


_numba_load_index = caching.IndexDataCacheFile._load_index
_numba_load = caching.IndexDataCacheFile.load
_numba_save = caching.IndexDataCacheFile.save
_numba_load_overload = caching.Cache._load_overload
_numba_save_overload = caching.Cache._save_overload
_numba_enable_caching = Dispatcher.enable_caching
_numba_enable_cfunc_caching = CFunc.enable_caching

_ENTRY_MAGIC = b"tilesim cache entry 1\n"  # then the body's CRC-32, then the body: Numba's pickle of (key, data)
_CRC = 4


class _DamagedEntry(Exception):
    """A data file that is not an entry as written (truncated, overwritten, another format)."""


def _crc(body: bytes) -> bytes:
    return zlib.crc32(body).to_bytes(_CRC, "little")


def _load_index(self):  # type: ignore[no-untyped-def]
    """Numba's index, or none when it cannot be read back. An index written before a type it pickles was renamed
    or moved (a tilesim Marker, an element type) raises while unpickling, before Numba compares its stamp: such
    an index is stale anyway, and its functions compile again. Anything else is a damaged index: the same, with
    a warning; the next save writes it anew."""
    try:
        overloads = _numba_load_index(self)
    except (AttributeError, ImportError, TypeError):
        return {}
    except Exception as e:
        _warn(f"{self._index_path}: a damaged cache index is ignored ({type(e).__name__}: {e}); its functions "
              f"compile again")
        return {}
    if not isinstance(overloads, dict):
        _warn(f"{self._index_path}: a damaged cache index is ignored; its functions compile again")
        return {}
    return overloads


def _save_data(self, name, data):  # type: ignore[no-untyped-def]
    """Numba's data file, its body behind a magic and its CRC (written to a temporary file, then renamed)."""
    body = self._dump(data)
    with self._open_for_write(self._data_path(name)) as f:
        f.write(_ENTRY_MAGIC + _crc(body) + body)


def _load_data(self, name):  # type: ignore[no-untyped-def]
    """A data file's entry, once its CRC shows it is whole: nothing of a damaged one is unpickled."""
    path = self._data_path(name)
    with open(path, "rb") as f:
        raw = f.read()
    head = len(_ENTRY_MAGIC) + _CRC
    body = raw[head:]
    if raw[:len(_ENTRY_MAGIC)] != _ENTRY_MAGIC or raw[len(_ENTRY_MAGIC):head] != _crc(body):
        raise _DamagedEntry(f"{path} is damaged (truncated or overwritten)")
    return pickle.loads(body)


def _save(self, key, data):  # type: ignore[no-untyped-def]
    """Numba's save, the entry's key stored with its data."""
    _numba_save(self, key, (key, data))


def _load(self, key):  # type: ignore[no-untyped-def]
    """Numba's load; None for another key's entry: two processes that read the index before either wrote it
    number their new entries alike, and the index may keep one's key for the other's data."""
    entry = _numba_load(self, key)
    if entry is None:
        return None
    stored, data = entry
    return data if stored == key else None


def _function_name(py_func: Any) -> str:
    return f"{py_func.__module__}.{py_func.__qualname__}"


def _load_overload(self, sig, target_context):  # type: ignore[no-untyped-def]
    """Numba's load of a function's cached code; a miss, with a warning, for an entry that cannot be used."""
    try:
        return _numba_load_overload(self, sig, target_context)
    except Exception as e:
        why = str(e) if isinstance(e, _DamagedEntry) else f"{type(e).__name__}: {e}"
        _warn(f"the cached code of {_function_name(self._py_func)} in {self._cache_path} cannot be used ({why}); "
              f"it compiles again")
        return None


def _save_overload(self, sig, data):  # type: ignore[no-untyped-def]
    """Numba's save of a function's compiled code; a warning when it cannot be written: the code stays in memory."""
    try:
        _numba_save_overload(self, sig, data)
    except OSError as e:  # one text per directory and cause: shown once, not once per function
        _warn(f"cannot write to the cache directory {self._cache_path} ({e.strerror or type(e).__name__}): "
              f"compiled code stays in memory for this process")
    except Exception as e:
        _warn(f"the compiled code of {_function_name(self._py_func)} cannot be cached ({type(e).__name__}: {e}); "
              f"it stays in memory for this process")


def _uncached(self, py_func: Any, numba_enable: Any) -> None:
    """``numba_enable(self)``; where Numba finds no cache directory it can write for ``py_func``, or cannot read its
    file, a warning and no cache: the function compiles in memory."""
    try:
        numba_enable(self)
    except (RuntimeError, OSError) as e:  # one text per directory and cause: shown once, not once per function
        file = py_func.__code__.co_filename
        if not os.path.exists(file):  # a generated core loop's, deleted meanwhile
            _warn(f"{file} is gone: its functions compile in memory")
        else:
            cause = e.strerror if isinstance(e, OSError) else "no writable cache directory"
            _warn(f"{os.path.dirname(file)}: {cause} (NUMBA_CACHE_DIR, its __pycache__, ~/.cache/numba): its "
                  f"functions compile in memory, in every process")
        self._cache = caching.NullCache()


def _enable_caching(self):  # type: ignore[no-untyped-def]
    _uncached(self, self.py_func, _numba_enable_caching)


def _enable_cfunc_caching(self):  # type: ignore[no-untyped-def]
    _uncached(self, self._pyfunc, _numba_enable_cfunc_caching)


caching.IndexDataCacheFile._load_index = _load_index
caching.IndexDataCacheFile._save_data = _save_data
caching.IndexDataCacheFile._load_data = _load_data
caching.IndexDataCacheFile.save = _save
caching.IndexDataCacheFile.load = _load
caching.Cache._load_overload = _load_overload
caching.Cache._save_overload = _save_overload
Dispatcher.enable_caching = _enable_caching
CFunc.enable_caching = _enable_cfunc_caching


def _compiled(py_func: Any) -> Any:
    """Stands for a compiled function in a cache key's closure pickle (which is hashed, never unpickled)."""
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
