"""tilesim.jit.njit: Numba's njit without the cfunc wrapper, in every module of tilesim and kernels."""

from __future__ import annotations

import importlib
import pkgutil

from numba.core.registry import CPUDispatcher

import kernels
import tilesim
from tilesim.jit import njit


@njit
def _plus_one(x):
    return x + 1


@njit(cache=False)
def _twice_plus_one(x):
    return 2 * _plus_one(x) - 1


def test_both_forms_compile_and_python_still_calls_them():
    assert _plus_one(2) == 3 and _twice_plus_one(2) == 5
    for f in (_plus_one, _twice_plus_one):
        assert f.targetoptions["no_cfunc_wrapper"] is True


def test_every_compiled_function_of_tilesim_and_kernels_skips_the_cfunc_wrapper():
    found = []
    for pkg in (tilesim, kernels):
        for info in pkgutil.iter_modules(pkg.__path__, pkg.__name__ + "."):
            if info.name.endswith("__main__"):
                continue
            mod = importlib.import_module(info.name)
            found += [(info.name, n, f) for n, f in vars(mod).items()
                      if isinstance(f, CPUDispatcher) and f.py_func.__module__ == info.name]
    assert len(found) > 100
    assert [(m, n) for m, n, f in found if not f.targetoptions.get("no_cfunc_wrapper")] == []
