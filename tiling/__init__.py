"""Host tiling: one module per op, each computing the op's TilingData, UB plan, block_dim and workspace size."""

from .common import replace
from .group_norm_backward import GroupNormBackwardTiling, group_norm_backward
from .rms_norm_grad import RmsNormGradTiling, rms_norm_grad
from .swiglu_grad import SwiGluGradTiling, swiglu_grad

__all__ = ["GroupNormBackwardTiling", "RmsNormGradTiling", "SwiGluGradTiling", "group_norm_backward", "replace",
           "rms_norm_grad", "swiglu_grad"]
