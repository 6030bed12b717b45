"""tilesim.jit.link: device code finalised link-only (no module pipeline, no machine code of its own), cached as
bitcode that a host function compiled in another process links; each process names its functions apart."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import tilesim  # noqa: F401  (installs the link-only finalisation)
from tilesim.jit import njit

pytestmark = pytest.mark.no_launch_here  # host functions and subprocesses, no kernel

ROOT = Path(__file__).resolve().parents[1]


@njit
def _scale(a, k):
    for i in range(a.size):
        a[i] = a[i] * k + np.float32(1)


@njit(host=True)
def _scale_host(a, k):
    _scale(a, k)


def test_device_code_has_no_machine_code_of_its_own_and_runs_inside_the_host_function():
    a = np.arange(5, dtype=np.float32)
    _scale_host(a, np.float32(2))
    np.testing.assert_array_equal(a, np.arange(5, dtype=np.float32) * 2 + 1)
    device = _scale.overloads[_scale.signatures[0]].library
    host = _scale_host.overloads[_scale_host.signatures[0]].library
    assert device._tilesim_link_only and not getattr(host, "_tilesim_link_only", False)
    device_fn = next(f.name for f in device.get_defined_functions())
    host_fn = next(f.name for f in host.get_defined_functions() if "_scale_host" in f.name)
    engine = host.codegen._engine
    assert engine.is_symbol_defined(host_fn) and not engine.is_symbol_defined(device_fn)  # inlined, not compiled


_MODULE = """
import numpy as np
from tilesim.jit import njit

@njit(cache=True)
def device(a, k):
    for i in range(a.size):
        a[i] = a[i] * k - np.float32(3)

@njit(cache=True, host=True)
def first(a):
    device(a, np.float32(2))

@njit(cache=True, host=True)
def second(a):
    device(a, np.float32(2))
    device(a, np.float32(0.5))
"""

_RUN = """
import sys, numpy as np
sys.path.insert(0, sys.argv[1])
import linked_mod
from numba.core import bytecode
a = np.arange(4, dtype=np.float32)
getattr(linked_mod, sys.argv[2])(a)
print(next(bytecode.FunctionIdentity._unique_ids), a.tolist(), sum(linked_mod.device.stats.cache_hits.values()))
"""


def test_a_cached_device_function_is_linked_from_its_bitcode_by_a_host_function_of_another_process(tmp_path):
    (tmp_path / "linked_mod.py").write_text(textwrap.dedent(_MODULE))
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache")}

    def run(fn: str) -> list[str]:
        out = subprocess.run([sys.executable, "-c", _RUN, str(tmp_path), fn], cwd=ROOT, env=env,
                             capture_output=True, text=True, check=True)
        return out.stdout.split(" ", 1)

    uid1, rest1 = run("first")  # compiles device and first, caches both
    uid2, rest2 = run("second")  # device from the cache (bitcode), second compiled against it
    assert rest1.strip().endswith(" 0") and rest2.strip().endswith(" 1")  # the second process loaded it
    assert rest1.startswith("[-3.0, -1.0, 1.0, 3.0]")
    assert rest2.startswith("[-4.5, -3.5, -2.5, -1.5]")  # (2i - 3) / 2 - 3
    # the two processes' functions were numbered from far-apart random points, not both from 1
    assert int(uid1) > 2**40 and int(uid2) > 2**40 and abs(int(uid1) - int(uid2)) > 10**6


_OVERLOAD_MODULE = """
import numpy as np
from numba.core.extending import overload
from tilesim.jit import OVERLOAD_OPTIONS, njit

@njit(cache=True)
def scale(x):
    return x * np.float32(2)

def op(x):
    pass

@overload(op, jit_options=OVERLOAD_OPTIONS)
def _op(x):
    f = scale
    return lambda x: f(x) + np.float32(1)  # a closure over a compiled function, as tilesim's builds select theirs

@njit(cache=True, host=True)
def first(x):
    return op(x)

@njit(cache=True, host=True)
def second(x):
    return op(x) - np.float32(1)
"""

_RUN_COUNTING = """
import sys, numpy as np
sys.path.insert(0, sys.argv[1])
from numba.core import event
import overload_mod
compiled = []
class Count(event.Listener):
    def on_start(self, e):
        compiled.append(e.data["dispatcher"].py_func.__qualname__)
    def on_end(self, e):
        pass
with event.install_listener("numba:compile", Count()):
    r = getattr(overload_mod, sys.argv[2])(np.float32(3))
print(r, " ".join(sorted(compiled)))
"""


def test_an_overloads_implementation_is_found_in_the_cache_by_another_process(tmp_path):
    """OVERLOAD_OPTIONS caches an @overload's implementation, a closure; one over a compiled function gets the
    same key in every process (Numba's key pickles the dispatcher's uuid, drawn anew in each)."""
    (tmp_path / "overload_mod.py").write_text(textwrap.dedent(_OVERLOAD_MODULE))
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache")}

    def run(fn: str) -> list[str]:
        out = subprocess.run([sys.executable, "-c", _RUN_COUNTING, str(tmp_path), fn], cwd=ROOT, env=env,
                             capture_output=True, text=True, check=True)
        return out.stdout.split()

    assert run("first") == ["7.0", "_op.<locals>.<lambda>", "first", "scale"]
    assert run("second") == ["6.0", "second"]  # the implementation (and scale below it) from the cache
