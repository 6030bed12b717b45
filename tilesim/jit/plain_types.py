"""One compiled version of each device function, not one per constant its callers pass.

Numba types a constant argument at a call site as a literal (``Literal[int](0)``) and compiles the callee for
it, so ``data_copy_pad(core, t, g, off, 1, n, n, 0)`` and the same call with a variable row count build two
machine-code versions of the whole call tree below. Device code never dispatches on an argument's value at
typing time, so for the functions of tilesim's own packages (and of a user's kernels that opt in through
:data:`PACKAGES`) the call is typed with plain types instead: the first compile serves every later call site.
"""

from __future__ import annotations

from numba.core import types
from numba.core.dispatcher import Dispatcher

PACKAGES = {"tilesim"}  # top-level packages whose njit functions get plain-typed arguments

_numba_get_call_template = Dispatcher.get_call_template


def _get_call_template(self, args, kws):
    module = getattr(self.py_func, "__module__", "") or ""
    if module.split(".", 1)[0] in PACKAGES:
        args = tuple(types.unliteral(a) for a in args)
        kws = {k: types.unliteral(v) for k, v in kws.items()}
    return _numba_get_call_template(self, args, kws)


def install() -> None:
    """Route every njit-to-njit call through the plain typing above (idempotent)."""
    Dispatcher.get_call_template = _get_call_template


install()
