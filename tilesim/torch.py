"""PyTorch layers whose forward and backward run through tilesim's emulated kernels (the ``torch`` extra).

Each layer is an ``nn.Module`` that computes what its ``torch.nn`` namesake computes, with the math done by the
shipped kernels on a chosen SoC, so that a model trained with it sees the NPU's kernels, roundings and tilings:

- :class:`RMSNorm`: forward ``kernels.rms_norm`` (aclnnRmsNorm), backward ``kernels.rms_norm_grad``
  (aclnnRmsNormGrad) from the forward's rstd;
- :class:`SwiGLU`: forward ``kernels.swiglu`` (aclnnSwiGlu), backward ``kernels.swiglu_grad`` (aclnnSwiGluGrad);
- :class:`LayerNorm`: forward torch's ``layer_norm``, backward ``kernels.layer_norm_grad`` (the LayerNormGrad and
  LayerNormGradBeta APIs);
- :class:`GroupNorm`: forward torch's ``native_group_norm``, backward ``kernels.group_norm_backward``
  (aclnnGroupNormBackward).

The functional forms (:func:`rms_norm`, :func:`swiglu`, :func:`layer_norm`, :func:`group_norm`) are the autograd
functions applied. Tensors cross into the kernels without copies (:mod:`tilesim.interop`); they must be on the CPU.
Every layer takes ``soc`` (a name from :func:`tilesim.list_socs` or a :class:`tilesim.SocSpec`) and ``checks``
(``True`` runs every launch in checked mode, ``False`` none; ``None``, the default, leaves it to the options in
force, :mod:`tilesim.options`). What a kernel refuses (a dtype
outside its table, a shape its tiling cannot take) raises :class:`tilesim.AclnnError` with the aclnn status and
the kernel's reason, in the forward where the forward's kernel or the backward's tiling sees it first.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from tilesim import kernels, tiling
from tilesim.soc import DEFAULT_SOC, SocSpec

Soc = str | SocSpec


class RMSNormFunction(torch.autograd.Function):
    """y = x · rstd · weight, rstd = 1 / sqrt(mean(x²) + eps) over the axes ``weight`` covers: forward by
    aclnnRmsNorm's kernel, backward (dx, dweight) by aclnnRmsNormGrad's from the forward's rstd."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, weight: Tensor, eps: float, soc: Soc, checks: bool | None) -> Tensor:
        """y by aclnnRmsNorm's kernel; saves x, the kernel's rstd and weight for the backward."""
        y, rstd = kernels.rms_norm(x, weight, epsilon=eps, soc=soc, checks=checks)
        ctx.save_for_backward(x, rstd, weight)
        ctx.soc, ctx.checks = soc, checks
        return y

    @staticmethod
    def backward(ctx: Any, dy: Tensor) -> tuple[Tensor | None, ...]:
        """dx and dweight by aclnnRmsNormGrad's kernel (dweight in weight's dtype), None for what needs no
        gradient."""
        x, rstd, weight = ctx.saved_tensors
        dx, dweight = kernels.rms_norm_grad(dy, x, rstd, weight, soc=ctx.soc, checks=ctx.checks)
        need = ctx.needs_input_grad
        return dx if need[0] else None, dweight.to(weight.dtype) if need[1] else None, None, None, None


class SwiGLUFunction(torch.autograd.Function):
    """y = silu(A) · B, A and B the halves of x along ``dim``: forward by aclnnSwiGlu's kernel, backward by
    aclnnSwiGluGrad's."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, dim: int, soc: Soc, checks: bool | None) -> Tensor:
        """y by aclnnSwiGlu's kernel; saves x for the backward."""
        ctx.save_for_backward(x)
        ctx.dim, ctx.soc, ctx.checks = dim, soc, checks
        return kernels.swiglu(x, dim, soc=soc, checks=checks)

    @staticmethod
    def backward(ctx: Any, dy: Tensor) -> tuple[Tensor | None, ...]:
        """dx by aclnnSwiGluGrad's kernel."""
        (x,) = ctx.saved_tensors
        return kernels.swiglu_grad(dy, x, ctx.dim, soc=ctx.soc, checks=ctx.checks), None, None, None


class LayerNormFunction(torch.autograd.Function):
    """Layer norm over the last axis: forward by torch (tilesim has no forward kernel), backward (dx, dweight,
    dbias) by the kernel on the LayerNormGrad and LayerNormGradBeta APIs, from the forward's mean and variance in
    x's dtype (the APIs' inputs). ``weight`` is required (ones for a layer without one); ``bias`` may be None."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, weight: Tensor, bias: Tensor | None, eps: float, soc: Soc,
                checks: bool | None) -> Tensor:
        """y by torch's layer_norm; checks the backward's rules first and saves x, the variance and mean in x's
        dtype and weight."""
        x32 = x.float()
        var, mean = torch.var_mean(x32, dim=-1, correction=0)
        var, mean = var.to(x.dtype), mean.to(x.dtype)
        tiling.layer_norm_grad(x, x, var, mean, weight, epsilon=eps, soc=soc)  # the backward's rules, now
        ctx.save_for_backward(x, var, mean, weight)
        ctx.eps, ctx.soc, ctx.checks = eps, soc, checks
        return torch.nn.functional.layer_norm(x, x.shape[-1:], weight, bias, eps)

    @staticmethod
    def backward(ctx: Any, dy: Tensor) -> tuple[Tensor | None, ...]:
        """dx, dweight and dbias by the LayerNormGrad and LayerNormGradBeta kernel, None for what needs no
        gradient."""
        x, var, mean, weight = ctx.saved_tensors
        dx, dweight, dbias = kernels.layer_norm_grad(dy, x, var, mean, weight, epsilon=ctx.eps, soc=ctx.soc,
                                                     checks=ctx.checks)
        need = ctx.needs_input_grad
        return dx if need[0] else None, dweight if need[1] else None, dbias if need[2] else None, None, None, None


class GroupNormFunction(torch.autograd.Function):
    """Group norm of x [N, C, *]: forward by torch's ``native_group_norm`` (its mean and rstd [N, groups] are what
    aclnnGroupNorm saves), backward (dx, dweight, dbias) by aclnnGroupNormBackward's kernel, those in x's dtype.
    ``weight`` may be None (ones: no dweight); so may ``bias``."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, groups: int, weight: Tensor | None, bias: Tensor | None, eps: float, soc: Soc,
                checks: bool | None) -> Tensor:
        """y by torch's native_group_norm; saves x, its mean and rstd in x's dtype and weight for the backward."""
        n, c = x.shape[0], x.shape[1]
        hxw = math.prod(x.shape[2:])
        y, mean, rstd = torch.native_group_norm(x, weight, bias, n, c, hxw, groups, eps)
        ctx.save_for_backward(x, mean.to(x.dtype), rstd.to(x.dtype), weight)
        ctx.shape, ctx.soc, ctx.checks = (n, c, hxw, groups), soc, checks
        ctx.has_bias = bias is not None
        return y

    @staticmethod
    def backward(ctx: Any, dy: Tensor) -> tuple[Tensor | None, ...]:
        """dx, dweight and dbias by aclnnGroupNormBackward's kernel, computing only those a gradient is needed
        of (its output mask)."""
        x, mean, rstd, weight = ctx.saved_tensors
        n, c, hxw, groups = ctx.shape
        mask = (ctx.needs_input_grad[0], weight is not None and ctx.needs_input_grad[2],
                ctx.has_bias and ctx.needs_input_grad[3])
        dx, dweight, dbias = kernels.group_norm_backward(dy, x, mean, rstd, weight, n, c, hxw, groups, mask,
                                                         soc=ctx.soc, checks=ctx.checks)
        return dx, None, dweight, dbias, None, None, None


def rms_norm(x: Tensor, weight: Tensor, eps: float = 1e-6, *, soc: Soc = DEFAULT_SOC,
             checks: bool | None = None) -> Tensor:
    """:class:`RMSNormFunction` applied: differentiable in x and weight."""
    return RMSNormFunction.apply(x, weight, eps, soc, checks)


def swiglu(x: Tensor, dim: int = -1, *, soc: Soc = DEFAULT_SOC, checks: bool | None = None) -> Tensor:
    """:class:`SwiGLUFunction` applied: silu of x's first half along ``dim`` times its second half."""
    return SwiGLUFunction.apply(x, dim, soc, checks)


def layer_norm(x: Tensor, normalized_shape: tuple[int, ...], weight: Tensor | None = None, bias: Tensor | None = None,
               eps: float = 1e-5, *, soc: Soc = DEFAULT_SOC, checks: bool | None = None) -> Tensor:
    """``torch.nn.functional.layer_norm`` with the backward on the emulated kernel. Over more than the last axis,
    x is viewed with ``normalized_shape`` flattened into one axis (the same normalisation), weight and bias too."""
    shape = tuple(normalized_shape)
    lead = x.shape[:x.dim() - len(shape)]
    h = math.prod(shape)
    w = torch.ones(h, dtype=x.dtype) if weight is None else weight.reshape(h)
    b = None if bias is None else bias.reshape(h)
    return LayerNormFunction.apply(x.reshape(*lead, h), w, b, eps, soc, checks).reshape(x.shape)


def group_norm(x: Tensor, num_groups: int, weight: Tensor | None = None, bias: Tensor | None = None,
               eps: float = 1e-5, *, soc: Soc = DEFAULT_SOC, checks: bool | None = None) -> Tensor:
    """``torch.nn.functional.group_norm`` with the backward on the emulated kernel."""
    return GroupNormFunction.apply(x, num_groups, weight, bias, eps, soc, checks)


class RMSNorm(nn.Module):
    """``torch.nn.RMSNorm`` on the emulated kernels (:class:`RMSNormFunction`); ``eps`` defaults to
    aclnnRmsNorm's 1e-6. Without ``elementwise_affine`` the weight is a buffer of ones."""

    def __init__(self, normalized_shape: int | tuple[int, ...], eps: float = 1e-6, elementwise_affine: bool = True,
                 *, soc: Soc = DEFAULT_SOC, checks: bool | None = None, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.normalized_shape, self.eps, self.soc, self.checks = shape, eps, soc, checks
        ones = torch.ones(shape, dtype=dtype)
        if elementwise_affine:
            self.weight = nn.Parameter(ones)
        else:
            self.register_buffer("weight", ones)

    def forward(self, x: Tensor) -> Tensor:
        """The layer applied to x (:func:`rms_norm`)."""
        return rms_norm(x, self.weight, self.eps, soc=self.soc, checks=self.checks)

    def extra_repr(self) -> str:
        """The shape, eps and SoC in the module's repr."""
        return f"{self.normalized_shape}, eps={self.eps}, soc={self.soc!r}"


class SwiGLU(nn.Module):
    """The SwiGLU activation: silu of x's first half along ``dim`` times its second half
    (:class:`SwiGLUFunction`), x's shape with ``dim`` halved."""

    def __init__(self, dim: int = -1, *, soc: Soc = DEFAULT_SOC, checks: bool | None = None) -> None:
        super().__init__()
        self.dim, self.soc, self.checks = dim, soc, checks

    def forward(self, x: Tensor) -> Tensor:
        """The layer applied to x (:func:`swiglu`)."""
        return swiglu(x, self.dim, soc=self.soc, checks=self.checks)

    def extra_repr(self) -> str:
        """The dim and SoC in the module's repr."""
        return f"dim={self.dim}, soc={self.soc!r}"


class LayerNorm(nn.LayerNorm):
    """``torch.nn.LayerNorm`` with its backward on the emulated kernel (:func:`layer_norm`): float32 and
    float16, as the LayerNormGrad API takes."""

    def __init__(self, normalized_shape: int | tuple[int, ...], eps: float = 1e-5, elementwise_affine: bool = True,
                 bias: bool = True, *, soc: Soc = DEFAULT_SOC, checks: bool | None = None,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__(normalized_shape, eps, elementwise_affine, bias, dtype=dtype)
        self.soc, self.checks = soc, checks

    def forward(self, x: Tensor) -> Tensor:
        """The layer applied to x (:func:`layer_norm`)."""
        return layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps, soc=self.soc,
                          checks=self.checks)


class GroupNorm(nn.GroupNorm):
    """``torch.nn.GroupNorm`` with its backward on the emulated kernel (:func:`group_norm`)."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True, *,
                 soc: Soc = DEFAULT_SOC, checks: bool | None = None, dtype: torch.dtype | None = None) -> None:
        super().__init__(num_groups, num_channels, eps, affine, dtype=dtype)
        self.soc, self.checks = soc, checks

    def forward(self, x: Tensor) -> Tensor:
        """The layer applied to x (:func:`group_norm`)."""
        return group_norm(x, self.num_groups, self.weight, self.bias, self.eps, soc=self.soc, checks=self.checks)


__all__ = ["GroupNorm", "GroupNormFunction", "LayerNorm", "LayerNormFunction", "RMSNorm", "RMSNormFunction",
           "SwiGLU", "SwiGLUFunction", "group_norm", "layer_norm", "rms_norm", "swiglu"]
