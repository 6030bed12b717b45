"""Host tiling: one module per op, each computing the op's TilingData, UB plan, block_dim and workspace size."""

from .common import replace
from .rms_norm_grad import RmsNormGradTiling, rms_norm_grad

__all__ = ["RmsNormGradTiling", "replace", "rms_norm_grad"]
