"""Device kernels and their op API: numpy arrays or torch CPU tensors in, the same kind out, run on the emulated AI
Core."""

if __name__ != "tilesim.kernels":  # a checkout's root on the path: Numba would cache code under a name others lack
    raise ImportError(f"{__name__!r} is tilesim's kernels/ imported under a name of its own: import it as "
                      f"`import tilesim.kernels` (or `from tilesim import kernels`)")

from . import aclnn, reference
from .group_norm_backward import group_norm_backward
from .layer_norm_grad import layer_norm_grad
from .layer_norm_grad_beta import layer_norm_grad_beta
from .nsa_compress_grad import nsa_compress_grad
from .rms_norm import rms_norm
from .rms_norm_grad import rms_norm_grad
from .softmax import softmax
from .swiglu import swiglu
from .swiglu_grad import swiglu_grad

__all__ = ["aclnn", "group_norm_backward", "layer_norm_grad", "layer_norm_grad_beta", "nsa_compress_grad", "reference",
           "rms_norm", "rms_norm_grad", "softmax",
           "swiglu", "swiglu_grad"]
