"""How tilesim compiles: :func:`njit` is Numba's, without the wrappers compiled code does not need, for 512-bit
vectors where the host has AVX-512.

Numba compiles two wrappers for every ``@njit`` function: one that Python calls (the CPython wrapper: it unboxes
each argument, a Core or a tiling as much as an array) and a C-callable one (the cfunc wrapper) that only
first-class function values use, which tilesim's code never makes. Compiled code calls the function itself, not
either wrapper. So :func:`njit` skips the cfunc wrapper everywhere (cold compile of every kernel 134 -> 121 s in
back-to-back runs) and the CPython wrapper for device code, the instructions and a kernel's helpers,
which only other compiled code calls (100 -> 84 s side by side). What Python calls is marked
``host=True``: a kernel's launcher, a host helper, a scalar the tests call. A device function called from Python
raises a TypeError that says so, where Numba would jump to a null wrapper. A user's kernel may use Numba's own
``njit``: the two mix freely.

On a host with AVX-512, LLVM's tuning for Intel's AVX-512 cores still prefers 256-bit vectors (the frequency drop
of 512-bit code on the first such Xeons), so Numba's loops use ymm registers. A UB tile small enough for the L1d
(a 1024-lane Mul: three 4 KiB operands) then runs at half the speed the core has: 11 against 20 lanes/ns here, and
the same for a chain of five such instructions. :func:`prefer_512_bit_vectors` lifts that preference for the
process when tilesim is imported, unless the user has set ``NUMBA_CPU_FEATURES`` or ``NUMBA_CPU_NAME``, or Numba
has compiled before. It changes only the vector width LLVM picks: the results are bitwise the same (no fast-math,
so no reassociation and no fused multiply-add contraction), and Numba keys its cache on the feature string, so
the cache never mixes the two.
"""

from __future__ import annotations

import platform
from collections.abc import Callable
from typing import Any

import llvmlite.binding as llvm
import numba
from numba.core import config, registry
from numba.core.registry import CPUDispatcher

# Numba's options for what Python calls (the CPython wrapper only) and for device code (neither wrapper; also an
# ``@overload``'s ``jit_options``). Device code sets forceinline (off) itself: Numba passes a compile's flags down
# to the functions it compiles on the way, so a walk first compiled for an INLINE_OPTIONS function would be copied
# into every caller.
HOST_OPTIONS = {"no_cfunc_wrapper": True}
DEVICE_OPTIONS = {"no_cfunc_wrapper": True, "no_cpython_wrapper": True, "forceinline": False}
# The ``jit_options`` of tilesim's own ``@overload``s: device code, and its implementations kept in Numba's on-disk
# cache like an ``@njit(cache=True)`` function's. Without it every process would type and lower each instruction
# again for every kernel it compiles, though another process has compiled the same one on the same types (the cache keys
# an implementation, a closure, by its code and the pickled values it closes over). Not in DEVICE_OPTIONS: a user's
# overload defined where Numba's cache cannot locate its source would fail to compile.
OVERLOAD_OPTIONS = {**DEVICE_OPTIONS, "cache": True}
# An instruction as a kernel calls it, its call and the form it takes (the checks, the counters, the call of its
# walk), inlined into every caller (Numba's forceinline: LLVM's alwaysinline), as Ascend C's API functions are
# ``__aicore__ inline``: left to LLVM's size threshold, which their operands' bounds checks cross, each would be a
# call with twenty-odd arguments, and the kernel's loads of the core's words would no longer leave its loops.
INLINE_OPTIONS = {**OVERLOAD_OPTIONS, "forceinline": True}


class DeviceDispatcher(CPUDispatcher):
    """The dispatcher of a device function: compiled code calls it; Python cannot (it has no CPython wrapper)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        f = self.py_func
        raise TypeError(f"{f.__module__}.{f.__qualname__} is device code, compiled without the wrapper Python calls "
                        f"through: call it from an @njit function (decorate it with njit(host=True) to call it "
                        f"from Python)")


def njit(fn: Callable[..., Any] | None = None, *, host: bool = False, **options: Any) -> Any:
    """``numba.njit(fn, **options)`` (either form: ``@njit`` or ``@njit(cache=True, ...)``), without the cfunc
    wrapper, and, unless ``host``, without the CPython wrapper: a device function, which only compiled code calls
    (:class:`DeviceDispatcher`). ``host=True`` for what Python calls: a kernel's launcher, a host helper."""
    options = {**(HOST_OPTIONS if host else DEVICE_OPTIONS), **options}

    def decorate(f: Callable[..., Any]) -> Any:
        disp = numba.njit(f, **options)
        if not host and type(disp) is CPUDispatcher:  # not under NUMBA_DISABLE_JIT, where it is f itself
            disp.__class__ = DeviceDispatcher  # Numba builds the dispatcher; this only refuses Python's calls
        return disp
    return decorate if fn is None else decorate(fn)


def prefer_512_bit_vectors() -> bool:
    """Let Numba's codegen pick 512-bit vectors on an x86 host with AVX-512 (LLVM's ``-prefer-256-bit``), before
    Numba builds it; True if it did. Leaves a user's ``NUMBA_CPU_FEATURES`` or ``NUMBA_CPU_NAME`` alone (a CPU
    name such as ``generic`` asks for code that runs on other hosts, which the host's features would undo), and
    is too late (False) once Numba's CPU target exists: its target machine is made once per process."""
    if (config.CPU_FEATURES is not None or config.CPU_NAME is not None
            or "_toplevel_target_context" in vars(registry.cpu_target)):
        return False
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    features = llvm.get_host_cpu_features()
    if not features.get("avx512f", False):
        return False
    config.CPU_FEATURES = features.flatten() + ",-prefer-256-bit"
    return True


# At import: every module of tilesim and kernels decorates through this one, and the first decoration makes
# Numba's CPU target.
PREFERS_512_BIT = prefer_512_bit_vectors()
