"""The LayerNormGradBeta document's example kernel (``KernelLayernormGradBeta``) on tilesim's programming model:
one core copies resForGamma and dy [B, S, H] whole into its UB, calls the LayerNormGradBeta API and copies
pd_gamma and pd_beta [H] out.

- Init: a TPipe with the two VECIN queues (resForGamma, dy: B·S·H of T each), the two VECOUT queues (pd_gamma,
  pd_beta: H of T each) and, with ``tmp="shared"``, the sharedTmpBuffer TBuf of ``tmp_bytes``.
- CopyIn: AllocTensor, DataCopy of all B·S·H elements, EnQue; resForGamma, then dy.
- Compute: DeQue both, AllocTensor both outputs, ``LayerNormGradBeta<T, isReuseSource>(pdGamma, pdBeta,
  resForGamma, dy, sharedTmpBuffer, tiling)`` (:func:`tilesim.machine.normalization.layer_norm_grad_beta`; with
  ``tmp="framework"`` the prototype without sharedTmpBuffer, whose PopStackBuffer hands out the UB the pipe left
  free), EnQue the outputs, FreeTensor the sources.
- CopyOut: DeQue, DataCopy of H elements, FreeTensor; pd_gamma, then pd_beta.
The syncs are the queue calls' alone (EnQue / DeQue of each tensor); the API's PipeBarrier<PIPE_V>s are its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from tilesim.tiling.common import FP16, FP32, ITEMSIZE, dtype_name, flag, integer, require, shape_of
from tilesim.tiling.layer_norm_grad_api import (
    LayerNormGradBetaTiling,
    get_layer_norm_grad_beta_max_min_tmp_size,
    get_layer_norm_grad_beta_nd_tiling_info,
)

from tilesim import machine as asc  # AscendC::
from tilesim.core.ub import UbPlan
from tilesim.errors import invalid
from tilesim.interop import accepts_torch
from tilesim.machine.normalization import layer_norm_grad_beta as lng_beta
from tilesim.runtime.launcher import kernel, launch
from tilesim.soc import DEFAULT_SOC, SocSpec, get_soc

from .common import outputs

GM_NAMES = ["resForGamma", "inputDy", "outputPdGamma", "outputPdBeta"]


@dataclass(frozen=True)
class BetaExampleTiling:
    """The example kernel's TilingData: the API's tiling, the sharedTmpBuffer's bytes (0: the framework's) and
    isReuseSource."""

    api: LayerNormGradBetaTiling
    tmp_bytes: int
    is_reuse_source: int


def check_api_args(dtype: str, h: int, is_reuse_source: bool, what: str = "inputDy") -> None:
    """The APIs' own rules: T half or float, the last axis a whole number of 32 B blocks, isReuseSource for
    float only (161002)."""
    if dtype not in (FP32, FP16):
        raise invalid(what, f"dtype {dtype} not supported; the LayerNormGrad APIs take float32 or float16")
    if h * ITEMSIZE[dtype] % 32:
        raise invalid(what, f"last axis H = {h} is {h * ITEMSIZE[dtype]} B; it must be 32 B aligned (pad it with "
                            "zeros and pass originalH)")
    if flag("is_reuse_source", is_reuse_source) and dtype != FP32:
        raise invalid("is_reuse_source", "isReuseSource is supported for float only, not half")


def tmp_region(plan: UbPlan, tmp: str, tmp_bytes: int | None, need: tuple[int, int], name: str = "tmp") -> int:
    """Add the temporaries to ``plan`` and return their bytes: ``tmp="shared"`` a buffer of ``tmp_bytes`` (default
    the API's maximum, capped to the UB left free), checked against the minimum; ``tmp="framework"`` all UB left
    free (PopStackBuffer), which must hold the minimum. ``need`` is the API's (max, min)."""
    mx, mn = need
    free = plan.free // 32 * 32
    if tmp == "shared":
        size = min(mx, free) if tmp_bytes is None else integer("tmp_bytes", tmp_bytes)
        if size < mn:
            raise invalid("tmp_bytes", f"sharedTmpBuffer of {size} B is below the API's minimum of {mn} B")
        plan.add(name, size)
        plan.check()
        return size
    if tmp == "framework":
        if tmp_bytes is not None:
            raise invalid("tmp_bytes", "only for tmp=\"shared\"; the framework hands out all UB left free")
        if free < mn:
            raise invalid("tmp", f"the framework's temporaries need {mn} B but the plan leaves {free} B of UB free")
        plan.add_stack(name)
        return free
    raise invalid("tmp", f"{tmp!r} must be \"shared\" or \"framework\"")


@kernel
def layer_norm_grad_beta_kernel(ctx, t, res_for_gamma, input_dy, output_pd_gamma, output_pd_beta):
    """KernelLayernormGradBeta: Init, CopyIn, Compute, CopyOut on one core."""
    sz = asc.size_of(input_dy.dtype)
    bsh, h = t.api.bsh_length, t.api.h_length
    pipe = asc.TPipe(ctx)
    res_for_gamma_que = pipe.init_buffer(asc.TQue(asc.VECIN, 1), 1, bsh * sz)
    dy_que = pipe.init_buffer(asc.TQue(asc.VECIN, 1), 1, bsh * sz)
    pd_gamma_que = pipe.init_buffer(asc.TQue(asc.VECOUT, 1), 1, h * sz)
    pd_beta_que = pipe.init_buffer(asc.TQue(asc.VECOUT, 1), 1, h * sz)
    r = res_for_gamma_que.alloc_tensor(input_dy.dtype)  # CopyIn
    asc.data_copy(r, res_for_gamma, bsh)
    res_for_gamma_que.enque(r)
    d = dy_que.alloc_tensor(input_dy.dtype)
    asc.data_copy(d, input_dy, bsh)
    dy_que.enque(d)
    r = res_for_gamma_que.deque(input_dy.dtype)  # Compute
    d = dy_que.deque(input_dy.dtype)
    pg = pd_gamma_que.alloc_tensor(input_dy.dtype)
    pb = pd_beta_que.alloc_tensor(input_dy.dtype)
    if t.tmp_bytes > 0:
        tmp = pipe.init_buffer(asc.TBuf(asc.VECCALC), t.tmp_bytes)
        lng_beta(ctx, pg, pb, r, d, tmp.get(asc.uint8), t.api, t.is_reuse_source != 0)
    else:
        lng_beta(ctx, pg, pb, r, d, None, t.api, t.is_reuse_source != 0)
    pd_gamma_que.enque(pg)
    pd_beta_que.enque(pb)
    res_for_gamma_que.free_tensor(r)
    dy_que.free_tensor(d)
    pg = pd_gamma_que.deque(input_dy.dtype)  # CopyOut
    asc.data_copy(output_pd_gamma, pg, h)
    pd_gamma_que.free_tensor(pg)
    pb = pd_beta_que.deque(input_dy.dtype)
    asc.data_copy(output_pd_beta, pb, h)
    pd_beta_que.free_tensor(pb)


@accepts_torch(arrays=("res_for_gamma", "dy"))
def layer_norm_grad_beta(res_for_gamma: Any, dy: Any, *, soc: str | SocSpec = DEFAULT_SOC, tmp: str = "shared",
                         tmp_bytes: int | None = None, is_reuse_source: bool = False, checks: bool | None = None,
                         out: tuple[np.ndarray | None, np.ndarray | None] | None = None
                         ) -> tuple[np.ndarray, np.ndarray]:
    """``(pd_gamma, pd_beta)`` [H] in the inputs' dtype, by the document's one-core example kernel:
    pd_gamma = Σ_{b,s} dy·resForGamma, pd_beta = Σ_{b,s} dy over [B, S, H] held whole in UB.

    ``tmp``/``tmp_bytes`` choose the temporaries (see :func:`tmp_region`); ``is_reuse_source`` lets the API
    compute in resForGamma's UB copy (float only). The tiling comes from the API's host helpers; the run
    report's ``tiling`` is the kernel's :class:`BetaExampleTiling` (``.api`` the LayerNormGradBetaTiling).
    """
    require(resForGamma=res_for_gamma, inputDy=dy)
    spec = get_soc(soc)
    dtype = dtype_name(dy)
    if dtype_name(res_for_gamma) != dtype:
        raise invalid("resForGamma", f"dtype {dtype_name(res_for_gamma)} must equal inputDy's {dtype}")
    shape = shape_of(dy)
    if len(shape) != 3:
        raise invalid("inputDy", f"shape {list(shape)} must be [B, S, H]")
    if shape_of(res_for_gamma) != shape:
        raise invalid("resForGamma", f"shape {list(shape_of(res_for_gamma))} must equal inputDy's {list(shape)}")
    b, s, h = shape
    if b * s * h == 0:
        raise invalid("inputDy", f"shape {list(shape)}: empty tensors are not supported")
    check_api_args(dtype, h, is_reuse_source)
    isz = ITEMSIZE[dtype]
    src_shape = (b, s, h, h)
    plan = UbPlan(spec.ub_size)
    plan.add("res_for_gamma", b * s * h * isz)
    plan.add("dy", b * s * h * isz)
    plan.add("pd_gamma", h * isz)
    plan.add("pd_beta", h * isz)
    plan.check()
    size = tmp_region(plan, tmp, tmp_bytes,
                      get_layer_norm_grad_beta_max_min_tmp_size(src_shape, isz, is_reuse_source))
    t: LayerNormGradBetaTiling = get_layer_norm_grad_beta_nd_tiling_info(src_shape, size, isz, is_reuse_source)
    pd_gamma, pd_beta = outputs(out, ("outputPdGamma", (h,), dtype), ("outputPdBeta", (h,), dtype))
    kt = BetaExampleTiling(t, size if tmp == "shared" else 0, int(bool(is_reuse_source)))
    launch(layer_norm_grad_beta_kernel, kt, np.ascontiguousarray(res_for_gamma), np.ascontiguousarray(dy), pd_gamma,
           pd_beta, block_dim=1, outputs=2, soc=spec, checks=checks, op="layer_norm_grad_beta", gm_names=GM_NAMES)
    return pd_gamma, pd_beta
