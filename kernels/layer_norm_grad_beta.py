"""The LayerNormGradBeta document's example kernel (``KernelLayernormGradBeta``) on tilesim: one core copies
resForGamma and dy [B, S, H] whole into its UB, calls the LayerNormGradBeta API and copies pd_gamma and pd_beta
[H] out. The temporaries are a sharedTmpBuffer of the kernel's own plan (``tmp="shared"``, ``tmp_bytes`` of it)
or the UB the plan leaves free (``tmp="framework"``, the prototype without sharedTmpBuffer: PopStackBuffer).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tilesim.cast import elem_size
from tilesim.datamove import data_copy, data_copy_out
from tilesim.device import gm_tensor, make_core, slot
from tilesim.errors import invalid
from tilesim.jit import njit
from tilesim.launch import finish, prepare, run_checked
from tilesim.normalization import layer_norm_grad_beta as api
from tilesim.soc import DEFAULT_SOC, SocSpec, get_soc
from tilesim.ub import UbPlan
from tiling.common import FP16, FP32, ITEMSIZE, dtype_name, require, shape_of
from tiling.layer_norm_grad_api import (
    LayerNormGradBetaTiling,
    LayerNormGradBetaTilingDevice,
    device_tiling,
    get_layer_norm_grad_beta_max_min_tmp_size,
    get_layer_norm_grad_beta_nd_tiling_info,
)

from .common import KIND, checks_default, gm_out, output, to_gm

GM_NAMES = ["resForGamma", "inputDy", "outputPdGamma", "outputPdBeta"]
RES, DY, PD_GAMMA, PD_BETA, TMP = range(5)


def check_api_args(dtype: str, h: int, is_reuse_source: bool, what: str = "inputDy") -> None:
    """The APIs' own rules: T half or float, the last axis a whole number of 32 B blocks, isReuseSource for
    float only (161002)."""
    if dtype not in (FP32, FP16):
        raise invalid(what, f"dtype {dtype} not supported; the LayerNormGrad APIs take float32 or float16")
    if h * ITEMSIZE[dtype] % 32:
        raise invalid(what, f"last axis H = {h} is {h * ITEMSIZE[dtype]} B; it must be 32 B aligned (pad it with "
                            "zeros and pass originalH)")
    if is_reuse_source and dtype != FP32:
        raise invalid("is_reuse_source", "isReuseSource is supported for float only, not half")


def tmp_region(plan: UbPlan, tmp: str, tmp_bytes: int | None, need: tuple[int, int], name: str = "tmp") -> int:
    """Add the temporaries to ``plan`` and return their bytes: ``tmp="shared"`` a buffer of ``tmp_bytes`` (default
    the API's maximum, capped to the UB left free), checked against the minimum; ``tmp="framework"`` all UB left
    free (PopStackBuffer), which must hold the minimum. ``need`` is the API's (max, min)."""
    mx, mn = need
    free = plan.free // 32 * 32
    if tmp == "shared":
        size = min(mx, free) if tmp_bytes is None else int(tmp_bytes)
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


@njit(cache=True, host=True)
def _kernel(arena, plan, cnt, err, checks, t, res, dy, pd_gamma, pd_beta, tmp_bytes, kind, reuse):
    t = LayerNormGradBetaTilingDevice(*t)  # a plain tuple across the launch: see tiling.common.device_form
    core = make_core(0, 1, arena, plan, cnt, err, checks)
    isz = elem_size(kind)
    g_res, g_dy = gm_tensor(0, res, isz), gm_tensor(1, dy, isz)
    g_pg, g_pb = gm_tensor(2, pd_gamma, isz), gm_tensor(3, pd_beta, isz)
    r, d = slot(core, RES, 0), slot(core, DY, 0)
    pg, pb = slot(core, PD_GAMMA, 0), slot(core, PD_BETA, 0)
    bsh, h = t.bsh_length, t.h_length
    data_copy(core, r, g_res, 0, bsh)  # CopyIn
    data_copy(core, d, g_dy, 0, bsh)
    api(core, pg, pb, r, d, slot(core, TMP, 0), tmp_bytes, t, kind, reuse)  # Compute
    data_copy_out(core, g_pg, 0, pg, h)  # CopyOut
    data_copy_out(core, g_pb, 0, pb, h)


def layer_norm_grad_beta(res_for_gamma: Any, dy: Any, *, soc: str | SocSpec = DEFAULT_SOC, tmp: str = "shared",
                         tmp_bytes: int | None = None, is_reuse_source: bool = False, checks: bool | None = False,
                         out: tuple[np.ndarray | None, np.ndarray | None] | None = None
                         ) -> tuple[np.ndarray, np.ndarray]:
    """``(pd_gamma, pd_beta)`` [H] in the inputs' dtype, by the document's one-core example kernel:
    pd_gamma = Σ_{b,s} dy·resForGamma, pd_beta = Σ_{b,s} dy over [B, S, H] held whole in UB.

    ``tmp``/``tmp_bytes`` choose the temporaries (see :func:`tmp_region`); ``is_reuse_source`` lets the API
    compute in resForGamma's UB copy (float only). The tiling comes from the API's host helpers; the run
    report's ``tiling`` is the LayerNormGradBetaTiling.
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
    pd_gamma = output(out, 0, "outputPdGamma", (h,), dtype)
    pd_beta = output(out, 1, "outputPdBeta", (h,), dtype)
    checks = checks_default(checks)
    pg, pb = np.empty_like(pd_gamma), np.empty_like(pd_beta)  # the caller's arrays are written only on success

    def launch_once() -> None:
        launch = prepare("layer_norm_grad_beta", spec, t, plan, 1, checks, GM_NAMES)
        _kernel(launch.arena, launch.plan_array, launch.counters, launch.err, launch.core_checks,
                tuple(device_tiling(t)), to_gm(res_for_gamma), to_gm(dy), gm_out(pg), gm_out(pb), size, KIND[dtype],
                bool(is_reuse_source))
        finish(launch)

    run_checked(launch_once)
    pd_gamma[...], pd_beta[...] = pg, pb
    return pd_gamma, pd_beta
