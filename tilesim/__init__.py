"""tilesim: the Ascend AI Core (vector core) execution model for tiled kernels, on the CPU, with Numba.

The package's rooms: ``jit`` (how tilesim compiles), ``numerics`` (bit-exact casts, the Exp), ``core`` (one core's
records, its pipes and UB), ``machine`` (the Ascend C programming model a kernel calls), ``runtime`` (``@kernel`` and
the launch), ``checks`` (checked mode's findings), ``cost`` (the cost model and its trace), ``tools`` (the explorer,
the command line, the pytest plugin); the op packages ``kernels`` and ``tiling``. The names below are the public
face, with :mod:`tilesim.options` (every knob: ``tilesim.options.scope(checks=True)``); the rest is imported from
its module (``from tilesim.cost.model import estimated``). ``tilesim.kernels`` and
``tilesim.tiling`` work after a plain ``import tilesim`` (:pep:`562`: imported on first access, so that ``import
tilesim`` stays as fast as the runtime it needs).
"""

import importlib
from typing import Any

# isort: off
from tilesim import source_tree  # noqa: F401  (first: a checkout's kernels/ and tiling/ are tilesim's)
from tilesim.jit import cache  # noqa: F401  (first: njit caches are stamped when their functions are decorated)
from tilesim.jit import link, plain_types  # noqa: F401  (before any kernel compiles)
# isort: on
from tilesim import machine, options, precision
from tilesim.core.records import COUNTER_NAMES
from tilesim.core.ub import UbPlan
from tilesim.errors import (
    ACLNN_ERR_INNER_TILING_ERROR,
    ACLNN_ERR_PARAM_INVALID,
    ACLNN_ERR_PARAM_NULLPTR,
    ACLNN_ERR_RUNTIME_ERROR,
    ACLNN_SUCCESS,
    AclnnError,
    CheckError,
    UbOverflowError,
)
from tilesim.options import Options
from tilesim.runtime.report import RunReport, capture, recorded
from tilesim.soc import DEFAULT_SOC, SocSpec, get_soc, list_socs

# The op packages, imported on first access as tilesim.<name>; tilesim.torch is not among them: it needs torch, and is
# imported as ``import tilesim.torch``.
_SUBMODULES = frozenset({"kernels", "tiling"})

__all__ = [
    "ACLNN_ERR_INNER_TILING_ERROR", "ACLNN_ERR_PARAM_INVALID", "ACLNN_ERR_PARAM_NULLPTR", "ACLNN_ERR_RUNTIME_ERROR",
    "ACLNN_SUCCESS", "AclnnError", "COUNTER_NAMES", "CheckError", "DEFAULT_SOC", "Options", "RunReport", "SocSpec",
    "UbOverflowError", "UbPlan", "capture", "get_soc", "list_socs", "machine", "options", "precision",
    "recorded",
]


def __getattr__(name: str) -> Any:
    """``tilesim.<submodule>`` for the submodules not imported with tilesim, imported on first access."""
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    """The module's names and the submodules :func:`__getattr__` imports on access."""
    return sorted(set(globals()) | _SUBMODULES)
