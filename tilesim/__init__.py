"""tilesim: the Ascend AI Core (vector core) execution model for tiled kernels, on the CPU, with Numba."""

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

__all__ = [
    "ACLNN_ERR_INNER_TILING_ERROR", "ACLNN_ERR_PARAM_INVALID", "ACLNN_ERR_PARAM_NULLPTR", "ACLNN_ERR_RUNTIME_ERROR",
    "ACLNN_SUCCESS", "AclnnError", "COUNTER_NAMES", "CheckError", "DEFAULT_SOC", "RunReport", "SocSpec",
    "UbOverflowError", "UbPlan", "capture", "cast", "device", "get_soc", "list_socs", "machine", "precision",
    "recorded",
]
