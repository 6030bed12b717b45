"""tilesim: the Ascend AI Core (vector core) execution model for tiled kernels, on the CPU, with Numba.

The submodules the documentation uses as ``tilesim.<module>`` work after a plain ``import tilesim``: those not
imported here (the cost model, the trace, the explorer, the op packages, ...) are imported on first access
(:pep:`562`), so ``tilesim.cost.estimated(...)`` needs no import of its own and ``import tilesim`` stays as fast as
the runtime it needs.
"""

import importlib
from typing import Any

# isort: off
from . import source_tree  # noqa: F401  (first: a checkout's kernels/ and tiling/ are tilesim's)
from . import jit_cache  # noqa: F401  (first: njit caches are stamped when their functions are decorated)
# isort: on
from . import (
    cast,
    device,
    jit_link,  # noqa: F401  (before any kernel compiles)
    machine,
    precision,
    races,  # noqa: F401  (registers the race check of checked launches)
    specialise,  # noqa: F401  (before any kernel compiles)
)
from .device import COUNTER_NAMES
from .errors import (
    ACLNN_ERR_INNER_TILING_ERROR,
    ACLNN_ERR_PARAM_INVALID,
    ACLNN_ERR_PARAM_NULLPTR,
    ACLNN_ERR_RUNTIME_ERROR,
    ACLNN_SUCCESS,
    AclnnError,
    CheckError,
    UbOverflowError,
)
from .launch import RunReport, capture, recorded
from .soc import DEFAULT_SOC, SocSpec, get_soc, list_socs
from .ub import UbPlan

# Imported on first access as tilesim.<name>; tilesim.torch is not among them: it needs torch, and is imported as
# ``import tilesim.torch``.
_SUBMODULES = frozenset({"cost", "cost_params", "explore", "kernels", "launcher", "normalization", "opspec", "tiling",
                         "trace", "violations"})

__all__ = [
    "ACLNN_ERR_INNER_TILING_ERROR", "ACLNN_ERR_PARAM_INVALID", "ACLNN_ERR_PARAM_NULLPTR", "ACLNN_ERR_RUNTIME_ERROR",
    "ACLNN_SUCCESS", "AclnnError", "COUNTER_NAMES", "CheckError", "DEFAULT_SOC", "RunReport", "SocSpec",
    "UbOverflowError", "UbPlan", "capture", "cast", "device", "get_soc", "list_socs", "machine", "precision",
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
