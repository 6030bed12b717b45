"""A layer-norm backward built on the LayerNormGrad and LayerNormGradBeta APIs, multi-core, on tilesim (the design
and its choices: ``tiling/layer_norm_grad.py``).

Per core: gamma once; per UB tile of whole rows:
- CopyIn (DataCopyPad): dy with zero padding to the 32 B-aligned H; x row by row, padded with the row's mean so
  that x − μ is 0 past H and the API's Σ(x − μ) over the stored H is exact; variance and mean. Half lands in the
  upper half of fp32 buffers and is widened in place.
- The float APIs: LayerNormGrad (pd_x, resForGamma), then LayerNormGradBeta on the same rows (dy again from GM
  first when isReuseSource let LayerNormGrad compute in it); the tile's pd_gamma and pd_beta atomic-added in
  fp32 to the core's own workspace rows.
- CopyOut of pd_x (half: rounded to nearest even).

SyncAll, then 64-column tasks add the cores' rows in core order and write pd_gamma and pd_beta in T.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tilesim.cast import CAST_RINT, elem_size
from tilesim.datamove import atomic_add_pad_out, data_copy_pad, data_copy_pad_out, init_output
from tilesim.device import at, count_gm_scalar, gm_f32, gm_tensor, gm_u16, make_core, plan_of, slot
from tilesim.jit import njit
from tilesim.launch import finish, host_threads, prepare, reruns_on_overflow, run_cores, workspace
from tilesim.memo import by_identity
from tilesim.normalization import layer_norm_grad as lng_api
from tilesim.normalization import layer_norm_grad_beta as beta_api
from tilesim.soc import DEFAULT_SOC, SocSpec, get_soc
from tilesim.vector import add, cast_from_f32, cast_to_f32, duplicate
from tiling.common import dtype_name, shape_of
from tiling.layer_norm_grad import (
    DY,
    FINAL_ACC,
    FINAL_ROWS,
    GAMMA,
    LANES,
    MEAN,
    PD_X,
    RES,
    SYS_WORKSPACE,
    TMP,
    VAR,
    LayerNormGradOpTiling,
    X,
    check_tiling,
    plan_for,
)
from tiling.layer_norm_grad import layer_norm_grad as make_tiling
from tiling.layer_norm_grad_api import LayerNormGradBetaTilingDevice as BetaDevice
from tiling.layer_norm_grad_api import LayerNormGradTilingDevice as LngDevice
from tiling.layer_norm_grad_api import device_tiling

from .common import KIND, checks_default, copy_back, gm_out, output, to_gm, write_targets

GM_NAMES = ["dy", "x", "variance", "mean", "gamma", "pd_x", "pd_gamma", "pd_beta", "workspace"]


@njit(cache=True)
def _land(buf, n_elems, kind):
    """Where T data bound for an fp32 buffer of ``align_up(n_elems, 16)`` elements lands: the buffer itself for
    float, for half its upper half (32 B aligned, as DataCopyPad needs)."""
    return buf if kind == 0 else at(buf, 2 * ((n_elems + 15) // 16 * 16))


@njit(cache=True)
def _widen(core, buf, n_elems, kind):
    if kind != 0:
        cast_to_f32(core, buf, _land(buf, n_elems, kind), n_elems, kind)


@njit(cache=True, inline="always")
def _copy_in(core, t, r0, n, g_dy, g_x, g_var, g_mean, kind):
    """dy (zero padding past H), x (each row padded with its mean), variance and mean, widened to fp32."""
    h, hp = t[0], t[1]
    e = n * hp
    dy, x = slot(core, DY, 0), slot(core, X, 0)
    var, mean = slot(core, VAR, 0), slot(core, MEAN, 0)
    data_copy_pad(core, _land(dy, e, kind), g_dy, r0 * h, n, h, h, 0)
    xl = _land(x, e, kind)
    if h == hp:
        data_copy_pad(core, xl, g_x, r0 * h, n, h, h, 0)
    else:  # one DataCopyPad per row, its padding value the row's mean (a scalar read of GM)
        isz = g_x.isz
        for i in range(n):  # the mean's value for fp32, its bits for half (what DataCopyPad's padding takes)
            count_gm_scalar(core, g_mean, r0 + i)
            pv = gm_f32(g_mean)[r0 + i] if isz == 4 else np.float32(gm_u16(g_mean)[r0 + i])
            data_copy_pad(core, at(xl, i * hp * isz), g_x, (r0 + i) * h, 1, h, h, pv)
    data_copy_pad(core, _land(var, n, kind), g_var, r0, 1, n, n, 0)
    data_copy_pad(core, _land(mean, n, kind), g_mean, r0, 1, n, n, 0)
    _widen(core, dy, e, kind)
    _widen(core, x, e, kind)
    _widen(core, var, n, kind)
    _widen(core, mean, n, kind)


@njit(cache=True, inline="always")
def _tile(core, t, lt, bt, r0, n, g_dy, g_x, g_var, g_mean, g_pdx, g_ws, gamma, eps, kind, reuse):
    """One UB tile of ``n`` rows from row ``r0``: CopyIn, the two float APIs, the fp32 partial sums, CopyOut."""
    h, hp = t[0], t[1]
    _copy_in(core, t, r0, n, g_dy, g_x, g_var, g_mean, kind)
    dy, x, pdx, res = slot(core, DY, 0), slot(core, X, 0), slot(core, PD_X, 0), slot(core, RES, 0)
    tmp = slot(core, TMP, 0)
    lng_api(core, pdx, res, dy, x, slot(core, VAR, 0), slot(core, MEAN, 0), gamma, tmp, plan_of(core)[TMP, 1], eps, lt,
            0, reuse)
    if reuse:  # LayerNormGrad computed in dy: the Beta needs it again
        data_copy_pad(core, dy, g_dy, r0 * h, n, h, h, 0)
    pg, pb = at(tmp, t[3]), at(tmp, t[4])
    beta_api(core, pg, pb, res, dy, tmp, t[2], bt, 0, reuse)
    c = core.idx
    atomic_add_pad_out(core, g_ws, 2 * c * hp, pg, hp)
    atomic_add_pad_out(core, g_ws, (2 * c + 1) * hp, pb, hp)
    if kind != 0:
        cast_from_f32(core, pdx, pdx, n * hp, kind, CAST_RINT)
    data_copy_pad_out(core, g_pdx, r0 * h, pdx, n, h, h)


@njit(cache=True, inline="always")
def _final(core, t, g_ws, g_pg, g_pb, block_dim, kind):
    """64-column tasks round-robin over the cores: add the cores' fp32 rows in core order, cast, write."""
    h, hp = t[0], t[1]
    rows, acc = slot(core, FINAL_ROWS, 0), slot(core, FINAL_ACC, 0)
    for task in range(core.idx, 2 * ((h + LANES - 1) // LANES), block_dim):
        which = task % 2  # 0 pd_gamma, 1 pd_beta
        col0 = (task // 2) * LANES
        w = min(LANES, h - col0)
        data_copy_pad(core, rows, g_ws, which * hp + col0, block_dim, w, 2 * hp, 0)
        pitch = (w * 4 + 31) // 32 * 32 // 4
        duplicate(core, acc, 0.0, pitch)
        for b in range(block_dim):
            add(core, acc, acc, at(rows, 4 * b * pitch), pitch)
        out = g_pg if which == 0 else g_pb
        if kind != 0:
            cast_from_f32(core, acc, acc, pitch, kind, CAST_RINT)
        data_copy_pad_out(core, out, col0, acc, 1, w, w)


@njit(cache=True, inline="always")  # compiled once, inside _cores
def _core(phase, c, arena, plan, cnt, err, checks, t, lt0, lt1, lt2, bt0, bt1, bt2, dy, x, var, mean, gamma, pdx,
          pg, pb, ws, eps, kind, reuse):
    h, hp, bf, bd, tail, ub_rows = t[0], t[1], t[5], t[6], t[7], t[8]
    core = make_core(c, bd, arena, plan, cnt, err, checks)
    isz = elem_size(kind)
    g_dy, g_x, g_var, g_mean = gm_tensor(0, dy, isz), gm_tensor(1, x, isz), gm_tensor(2, var, isz), \
        gm_tensor(3, mean, isz)
    g_gamma, g_pdx, g_pg, g_pb = gm_tensor(4, gamma, isz), gm_tensor(5, pdx, isz), gm_tensor(6, pg, isz), \
        gm_tensor(7, pb, isz)
    g_ws = gm_tensor(8, ws, 4)
    if phase == 1:
        _final(core, t, g_ws, g_pg, g_pb, bd, kind)
        return
    init_output(core, g_ws, 2 * c * hp, 2 * hp, 0.0)
    gam = slot(core, GAMMA, 0)
    data_copy_pad(core, _land(gam, hp, kind), g_gamma, 0, 1, h, h, 0)
    _widen(core, gam, hp, kind)
    rows = tail if c == bd - 1 else bf
    r0 = c * bf
    done = 0
    while done < rows:
        n = min(ub_rows, rows - done)
        if n == ub_rows:  # the API tilings of a full tile, a full core's last tile, the tail core's last tile
            lt, bt = lt0, bt0
        elif c < bd - 1:
            lt, bt = lt1, bt1
        else:
            lt, bt = lt2, bt2
        _tile(core, t, lt, bt, r0 + done, n, g_dy, g_x, g_var, g_mean, g_pdx, g_ws, gam, eps, kind, reuse)
        done += n


@njit(cache=True, nogil=True, host=True)
def _cores(first, last, phase, arena, plan, cnt, err, checks, t, lt0, lt1, lt2, bt0, bt1, bt2, dy, x, var, mean,
           gamma, pdx, pg, pb, ws, eps, kind, reuse):
    # the API tilings come as plain tuples: see tiling.common.device_form
    lt0, lt1, lt2 = LngDevice(*lt0), LngDevice(*lt1), LngDevice(*lt2)
    bt0, bt1, bt2 = BetaDevice(*bt0), BetaDevice(*bt1), BetaDevice(*bt2)
    for c in range(first, last):
        _core(phase, c, arena, plan, cnt, err, checks, t, lt0, lt1, lt2, bt0, bt1, bt2, dy, x, var, mean, gamma, pdx,
              pg, pb, ws, eps, kind, reuse)


@by_identity
def _device_args(t: LayerNormGradOpTiling) -> tuple[tuple[int, ...], ...]:
    """What the device takes of the tiling, once per tiling object: the scalars it reads, by index (h, h_align,
    beta_bytes, pd_gamma_off, pd_beta_off, block_factor, block_dim, tail_rows, ub_rows), then the three
    LayerNormGrad and the three LayerNormGradBeta tilings as plain tuples (see tiling.common.device_form)."""
    return ((t.h, t.h_align, t.beta_bytes, t.pd_gamma_off, t.pd_beta_off, t.block_factor, t.block_dim, t.tail_rows,
             t.ub_rows), *(tuple(device_tiling(a)) for a in t.lng), *(tuple(device_tiling(b)) for b in t.beta))


@reruns_on_overflow
def run(t: LayerNormGradOpTiling, spec: SocSpec, dy: np.ndarray, x: np.ndarray, variance: np.ndarray,
        mean: np.ndarray, gamma: np.ndarray, epsilon: float, pd_x: np.ndarray, pd_gamma: np.ndarray,
        pd_beta: np.ndarray, ws: np.ndarray, checks: bool) -> None:
    """Launch the kernel on validated arrays (the device part of the op)."""
    plan = plan_for(t.ub_rows, t.h_align, t.block_dim, spec, t.tmp_mode, t.region_bytes).check()
    launch = prepare("layer_norm_grad", spec, t, plan, t.block_dim, checks, GM_NAMES, phase_local_ub=True)
    kind = KIND[t.dtype]
    eps = float(np.float32(epsilon))  # the float APIs' epsilon
    user_ws = ws[SYS_WORKSPACE:t.workspace_size]
    args = (launch.arena, launch.plan_array, launch.counters, launch.err, launch.core_checks, *_device_args(t),
            to_gm(dy), to_gm(x), to_gm(variance), to_gm(mean), to_gm(gamma), gm_out(pd_x), gm_out(pd_gamma),
            gm_out(pd_beta), user_ws, eps, kind, bool(t.is_reuse_source))
    with host_threads(dy, x, pd_x):
        for phase in range(2):  # SyncAll between the tiles and the final sums
            run_cores(_cores, t.block_dim, phase, *args)
    finish(launch, t.workspace_size)


def layer_norm_grad(dy: Any, x: Any, variance: Any, mean: Any, gamma: Any, *, epsilon: float = 1e-5,
                    soc: str | SocSpec = DEFAULT_SOC, tmp: str = "shared", is_reuse_source: bool = False,
                    tiling: LayerNormGradOpTiling | None = None, checks: bool | None = False,
                    out: tuple[np.ndarray | None, np.ndarray | None, np.ndarray | None] | None = None
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Layer-norm backward over the last axis: ``(pd_x, pd_gamma, pd_beta)`` in x's dtype (float32 or float16)
    from dy and x [..., H], the forward's variance and mean [...] and gamma [H], with rstd = (variance +
    epsilon)^−1/2, computed by a multi-core kernel built on the LayerNormGrad and LayerNormGradBeta APIs.

    ``tmp`` chooses the APIs' temporaries (a sharedTmpBuffer of the plan, or the framework's: all UB left free);
    ``is_reuse_source`` lets the APIs compute in their sources (float only); ``tiling`` runs a tiling made with
    ``tiling.layer_norm_grad(..., core_num=..., ub_rows=...)``. Errors raise :class:`tilesim.AclnnError`;
    nothing is written on error.
    """
    spec = get_soc(soc)
    official = make_tiling(dy, x, variance, mean, gamma, epsilon=epsilon, soc=spec, tmp=tmp,
                           is_reuse_source=is_reuse_source)
    t = official
    if tiling is not None:
        check_tiling(tiling, official, spec)
        t = tiling
    dt = dtype_name(x)
    pd_x = output(out, 0, "pd_x", shape_of(x), dt)
    pd_gamma = output(out, 1, "pd_gamma", (t.h,), dt)
    pd_beta = output(out, 2, "pd_beta", (t.h,), dt)
    checks = checks_default(checks)
    outs = (pd_x, pd_gamma, pd_beta)
    targets = write_targets(outs, checks, (dy, x, variance, mean, gamma))
    run(t, spec, dy, x, variance, mean, gamma, epsilon, *targets, workspace(t.workspace_size), checks)
    copy_back(outs, targets)
    return outs
