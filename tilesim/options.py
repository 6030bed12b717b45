"""Every knob of tilesim in one place: :class:`Options`, documented field by field; the options in force
(:func:`current`); and two ways to change them: for the calling thread's block (:func:`scope`), or for the whole
process (:func:`set_defaults`). The environment gives the process's defaults when tilesim is imported
(:meth:`Options.from_environ`)::

    with tilesim.options.scope(checks=True):
        kernels.softmax(x)                  # checked: the call leaves checks to the options
        kernels.softmax(x, checks=False)    # fast: the call's own argument comes first

What a launch does with a knob that is also its argument (``checks``, ``auto_sync``): the call's True or False,
else (None, the default) the options in force; and with :attr:`Options.force_checks` every launch is checked.
:func:`tilesim.runtime.launcher.launch` decides so, once per launch, with :meth:`Options.resolve_checks` and
:meth:`Options.resolve_auto_sync`; an op function or an aclnn form hands its caller's ``checks`` on untouched.

A scope belongs to the thread that opens it, as :func:`tilesim.capture`'s does: the launches that thread makes
inside the block see it, launches on other threads do not. The defaults are the process's: every thread sees them
where no scope of its own says otherwise. A launch reads the options once, when it starts.

Not here, because they are another library's or another call's: the host threads a launch runs on are Numba's
(``NUMBA_NUM_THREADS``, ``numba.set_num_threads``, per thread); Numba's cache of compiled functions is
``NUMBA_CACHE_DIR``; whether the inputs are warm in the L2 is an argument of the estimate it shapes
(:func:`tilesim.cost.model.estimated`).
"""

from __future__ import annotations

import dataclasses
import os
import reprlib
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from tilesim.errors import invalid


@dataclass(frozen=True)
class Options:
    """tilesim's knobs, one field each. Frozen: :func:`scope` and :func:`set_defaults` make new ones."""

    checks: bool = False
    """Checked mode for a launch whose call leaves ``checks`` to the options:
    ``checks=None``, the default of the shipped ops, of their PyTorch layers, of
    :func:`tilesim.runtime.launcher.launch`, and what the aclnn forms (which take no ``checks``) pass. Default False;
    the environment variable ``TILESIM_CHECKS`` set to anything but ``""`` or ``0`` makes it True."""

    force_checks: bool = False
    """Every launch in checked mode, whatever its call's ``checks``: ``pytest --tilesim-checks`` sets it for the
    session (:mod:`tilesim.tools.pytest_plugin`). Default False; no environment variable."""

    auto_sync: bool = True
    """BiSheng's ``--cce-auto-sync`` for a launch whose call leaves ``auto_sync`` to the options (None, the default
    of :func:`tilesim.runtime.launcher.launch` and of the ops' ``run``): on, the compiler's syncs stand in for the
    V-V barriers and the syncs with PIPE_S, so checked mode's pipe-hazard check does not ask the kernel for them;
    off, it does (:mod:`tilesim.machine.sync`). Fast mode runs the same either way. Default True; no environment
    variable."""

    cache_dir: str = "~/.cache/tilesim"
    """The directory tilesim writes the loops over a launch's cores into (``launchers/`` in it: a module per
    kernel, tiling class and element types, which Numba caches beside it), read when a process first launches a
    kernel; a leading ``~`` is the user's home. Default ``~/.cache/tilesim``; the environment variable
    ``TILESIM_CACHE`` sets it. (Numba's cache of the kernels themselves is ``NUMBA_CACHE_DIR``'s business.)"""

    def __post_init__(self) -> None:
        for f in ("checks", "force_checks", "auto_sync"):
            v = getattr(self, f)
            if not isinstance(v, bool | np.bool_):
                raise invalid(f, f"must be True or False, got {type(v).__name__} {reprlib.repr(v)}")
            object.__setattr__(self, f, bool(v))
        d = self.cache_dir
        if not isinstance(d, str | os.PathLike) or not os.fspath(d):
            raise invalid("cache_dir", f"must be a directory's path, got {type(d).__name__} {reprlib.repr(d)}")
        object.__setattr__(self, "cache_dir", os.fspath(d))

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Options:
        """The defaults the environment ``environ`` gives (the process's own, ``os.environ``, when tilesim is
        imported): ``TILESIM_CHECKS`` and ``TILESIM_CACHE``, as each field says; the rest as declared."""
        return cls(checks=environ.get("TILESIM_CHECKS", "") not in ("", "0"),
                   cache_dir=environ.get("TILESIM_CACHE") or cls.cache_dir)

    def resolve_checks(self, checks: Any) -> bool:
        """Whether a launch whose call passed ``checks`` runs in checked mode: always under :attr:`force_checks`;
        else the call's True or False, and for None :attr:`checks`. Anything else is refused (161002, naming
        ``checks``) before the launch writes anything."""
        if checks is None:
            return self.checks or self.force_checks
        if checks is True or checks is False or isinstance(checks, np.bool_):
            return self.force_checks or bool(checks)
        raise invalid("checks", f"must be True, False or None (the options decide), got {type(checks).__name__} "
                                f"{reprlib.repr(checks)}")

    def resolve_auto_sync(self, auto_sync: Any) -> bool:
        """Whether a launch whose call passed ``auto_sync`` runs with BiSheng's auto-sync: the call's True or
        False, and for None :attr:`auto_sync`. Anything else is refused (161002, naming ``auto_sync``)."""
        if auto_sync is None:
            return self.auto_sync
        if auto_sync is True or auto_sync is False or isinstance(auto_sync, np.bool_):
            return bool(auto_sync)
        raise invalid("auto_sync", f"must be True, False or None (the options decide), got "
                                   f"{type(auto_sync).__name__} {reprlib.repr(auto_sync)}")


FIELDS = tuple(f.name for f in dataclasses.fields(Options))

_defaults = Options.from_environ(os.environ)
_defaults_lock = threading.Lock()  # set_defaults reads, then replaces


class _Scope(threading.local):
    """The calling thread's scopes: the fields its open :func:`scope` blocks set (the innermost's value of each),
    and the options they give over the defaults, with the defaults they were made from (a default set meanwhile
    makes them again). Class attributes as every thread's start: a missing attribute of a threading.local costs an
    AttributeError per look-up."""

    changes: dict[str, Any] = {}  # never mutated: scope assigns a new dict
    made: tuple[Options, Options] | None = None  # (the defaults, the options in force)


_scope = _Scope()


def current() -> Options:
    """The options in force on the calling thread: the process's defaults, with the fields of the
    :func:`scope` blocks the thread is in."""
    if not _scope.changes:
        return _defaults
    base, made = _defaults, _scope.made
    if made is None or made[0] is not base:
        made = _scope.made = (base, dataclasses.replace(base, **_scope.changes))
    return made[1]


def _checked(fields: dict[str, Any]) -> None:
    unknown = [f for f in fields if f not in FIELDS]
    if unknown:
        raise TypeError(f"tilesim options have no {', '.join(map(repr, unknown))}: the options are "
                        f"{', '.join(FIELDS)}")


@contextmanager
def scope(**fields: Any) -> Iterator[Options]:
    """Set ``fields`` (names of :class:`Options`) for the calling thread's launches in the block, over the
    defaults and any scope it is in; yields the options in force inside. The values are checked before the block
    runs (161002 for a value a field does not take, TypeError for a name that is not a field)::

        with tilesim.options.scope(checks=True, auto_sync=False):
            kernels.rms_norm(x, gamma)  # checked, with the kernel's own V-V and V-S syncs asked for
    """
    _checked(fields)
    dataclasses.replace(current(), **fields)  # the values' check, before the block
    prev = _scope.changes
    _scope.changes, _scope.made = {**prev, **fields}, None
    try:
        yield current()
    finally:
        _scope.changes, _scope.made = prev, None


def set_defaults(**fields: Any) -> Options:
    """Set ``fields`` (names of :class:`Options`) as the process's defaults, for every thread (a thread's
    :func:`scope` still comes first on it); returns the defaults before, for a caller to put back what it
    changed: ``before = set_defaults(force_checks=True)`` ... ``set_defaults(force_checks=before.force_checks)``.
    The values are checked as :func:`scope` checks them."""
    global _defaults
    _checked(fields)
    with _defaults_lock:
        before = _defaults
        _defaults = dataclasses.replace(before, **fields)
    return before


__all__ = ["FIELDS", "Options", "current", "scope", "set_defaults"]
