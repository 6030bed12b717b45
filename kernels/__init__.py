"""Device kernels and their op API: numpy in, numpy out, run on the emulated AI Core."""

from . import aclnn, reference
from .rms_norm_grad import rms_norm_grad

__all__ = ["aclnn", "reference", "rms_norm_grad"]
