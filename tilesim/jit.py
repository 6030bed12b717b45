"""How tilesim compiles: :func:`njit` is Numba's, without the cfunc wrapper.

Numba compiles two wrappers for every ``@njit`` function: one that Python calls and a C-callable one (the cfunc
wrapper) that only first-class function values use, which tilesim's code never makes. Skipping the second took the
cold compile of every kernel from 134 to 121 s in back-to-back runs (session 15; this VM drifts by a fifth within
minutes, so read it as "about a tenth"). Python still calls every function, through the first wrapper. A user's
kernel may use Numba's own ``njit``: the two mix freely.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numba


def njit(fn: Callable[..., Any] | None = None, **options: Any) -> Any:
    """``numba.njit(fn, **options)`` (either form: ``@njit`` or ``@njit(cache=True, ...)``), without the cfunc
    wrapper."""
    options.setdefault("no_cfunc_wrapper", True)
    return numba.njit(**options) if fn is None else numba.njit(fn, **options)
