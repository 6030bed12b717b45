"""How tilesim compiles: :func:`njit` is Numba's, without the cfunc wrapper, for 512-bit vectors where the host
has AVX-512.

Numba compiles two wrappers for every ``@njit`` function: one that Python calls and a C-callable one (the cfunc
wrapper) that only first-class function values use, which tilesim's code never makes. Skipping the second took the
cold compile of every kernel from 134 to 121 s in back-to-back runs (session 15; this VM drifts by a fifth within
minutes, so read it as "about a tenth"). Python still calls every function, through the first wrapper. A user's
kernel may use Numba's own ``njit``: the two mix freely.

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


def njit(fn: Callable[..., Any] | None = None, **options: Any) -> Any:
    """``numba.njit(fn, **options)`` (either form: ``@njit`` or ``@njit(cache=True, ...)``), without the cfunc
    wrapper."""
    options.setdefault("no_cfunc_wrapper", True)
    return numba.njit(**options) if fn is None else numba.njit(fn, **options)


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
