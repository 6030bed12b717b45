"""tilesim.runtime.excinfo: what device code raised, carried out of a C entry (as a SyncAll launch's cores run) and
raised again in Python, its type and arguments, constant or computed at run time, whether the entry was compiled in the
process or loaded from Numba's cache; and the same raise through a host function (tilesim.jit.link sets the
environment a raise with values computed at run time boxes them with); what such a raise allocated is freed once it
is rebuilt. What tilesim.runtime.excinfo reads of Numba's internals is tested here: a Numba that changes them fails this
test."""

from __future__ import annotations

import ctypes
import gc
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
from numba.core import config
from numba.core.runtime import rtsys

from tilesim.runtime.excinfo import rebuilt

ROOT = Path(__file__).resolve().parents[1]

_MODULE = """
import numpy as np
from numba import carray, cfunc, types
from tilesim.runtime.excinfo import call_caught
from tilesim.jit.intrinsics import address_as_pointer
from tilesim.jit import njit

@njit(cache=True)
def check(k, n):
    if k == 1:
        raise ValueError("k must not be 1")
    if k == 2:
        raise KeyError("no row " + str(n), n * 2)
    if k == 3:
        raise IndexError("row", n, n * 2)
    return n

@cfunc(types.void(types.int64), cache=True)
def entry(at):
    w = carray(address_as_pointer(at, np.int64), 3)
    status, excinfo = call_caught(check, (w[0], w[1]))
    w[1] = status
    w[2] = excinfo

@njit(cache=True, host=True)
def host(k, n):
    return check(k, n)
"""

def calls(directory: str) -> list[str]:
    """What the C entry and the host function of ``caught_mod`` in ``directory`` raise for k = 0 to 3, whether the
    entry came from the cache, and (with Numba's NRT statistics on) the allocations of the entry's k = 3 raise left
    unfreed once it is rebuilt."""
    sys.path.insert(0, directory)
    import caught_mod  # type: ignore[import-not-found]

    entry = ctypes.CFUNCTYPE(None, ctypes.c_int64)(caught_mod.entry.address)
    gc.collect()  # what the entry's code points at must outlive its compile
    lines = []
    for k in range(4):
        before = rtsys.get_allocation_stats() if config.NRT_STATS else None
        w = np.array([k, 7, 0], np.int64)
        entry(w.ctypes.data)
        exc, where = rebuilt(int(w[1]), int(w[2])) if w[1] else (None, "")
        lines.append(f"{exc!r} {Path(where).name}")
        if before is not None and k == 3:  # only numbers: Numba leaks a string's (its wrapper does too)
            after = rtsys.get_allocation_stats()
            lines.append(f"unfreed {after.alloc - before.alloc - (after.free - before.free)}")
        try:
            caught_mod.host(k, 7)
        except Exception as e:  # the host function raises what the entry reported
            lines.append(repr(e))
    return [*lines, str(caught_mod.entry.cache_hits)]


def test_an_exception_of_device_code_is_rebuilt_from_a_c_entry_compiled_or_cached(tmp_path: Path) -> None:
    (tmp_path / "caught_mod.py").write_text(textwrap.dedent(_MODULE))
    raised = ["None ", "ValueError('k must not be 1') caught_mod.py, line 11", "ValueError('k must not be 1')",
              "KeyError('no row 7', 14) caught_mod.py, line 13", "KeyError('no row 7', 14)",
              "IndexError('row', 7, 14) caught_mod.py, line 15"]
    host = "IndexError('row', 7, 14)"
    try:
        assert calls(str(tmp_path)) == [*raised, host, "0"]  # compiled here, and cached
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("caught_mod", None)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]), "NUMBA_NRT_STATS": "1"}
    out = subprocess.run([sys.executable, "-c", f"from test_excinfo import calls; print(calls({str(tmp_path)!r}))"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == repr([*raised, "unfreed 0", host, "1"])  # in another process, from the cache
