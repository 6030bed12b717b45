"""Host tiling: one module per op, each computing the op's TilingData, UB plan, block_dim and workspace size."""

if __name__ != "tilesim.tiling":  # a checkout's root on the path: Numba would cache code under a name others lack
    raise ImportError(f"{__name__!r} is tilesim's tiling/ imported under a name of its own: import it as "
                      f"`import tilesim.tiling` (or `from tilesim import tiling`)")

from .common import replace
from .group_norm_backward import GroupNormBackwardTiling, group_norm_backward
from .layer_norm_grad import LayerNormGradOpTiling, layer_norm_grad
from .layer_norm_grad_api import (
    LayerNormGradBetaTiling,
    LayerNormGradTiling,
    get_layer_norm_grad_beta_max_min_tmp_size,
    get_layer_norm_grad_beta_nd_tiling_info,
    get_layer_norm_grad_max_min_tmp_size,
    get_layer_norm_grad_nd_tiling_info,
)
from .nsa_compress_grad import NsaCompressGradTiling, nsa_compress_grad
from .rms_norm import RmsNormTiling, rms_norm
from .rms_norm_grad import RmsNormGradTiling, rms_norm_grad
from .softmax import (
    SoftmaxOpTiling,
    SoftMaxTiling,
    get_soft_max_max_tmp_size,
    get_soft_max_min_tmp_size,
    soft_max_tiling_func,
    softmax,
)
from .swiglu import SwiGluTiling, swiglu
from .swiglu_grad import SwiGluGradTiling, swiglu_grad

__all__ = [
    "GroupNormBackwardTiling", "LayerNormGradBetaTiling", "LayerNormGradOpTiling", "LayerNormGradTiling",
    "NsaCompressGradTiling", "RmsNormGradTiling", "RmsNormTiling", "SwiGluGradTiling", "SwiGluTiling",
    "get_layer_norm_grad_beta_max_min_tmp_size",
    "get_layer_norm_grad_beta_nd_tiling_info", "get_layer_norm_grad_max_min_tmp_size",
    "get_layer_norm_grad_nd_tiling_info", "group_norm_backward", "layer_norm_grad", "nsa_compress_grad", "replace",
    "rms_norm", "rms_norm_grad", "swiglu", "swiglu_grad",
    "SoftMaxTiling", "SoftmaxOpTiling", "get_soft_max_max_tmp_size", "get_soft_max_min_tmp_size",
    "soft_max_tiling_func", "softmax",
]
