"""aclnnRmsNormGrad: the split-N and split-D kernels of ops-nn (``rms_norm_grad_split_{n,d}_high_precision.h``)
as device code on tilesim, and the host op API.

Per core: rows ``[idx * block_factor, +rows_of_core)``; per UB tile CopyIn (DataCopyPad, b16 landing in the upper
half of an fp32-sized buffer and widened in place), Compute (fp32 vector instructions in the kernel's order),
CopyOut (DataCopyPad, fp16 CAST_NONE / bf16 CAST_RINT). dgamma is summed across cores either by atomic add into
the output zeroed by core 0 (the default) or deterministically: each core writes its partial to its workspace
row, SyncAll, then 64-column tasks round-robin over the cores add the rows in core order.
"""

from __future__ import annotations

from collections import namedtuple
from dataclasses import fields
from typing import Any

import numpy as np

from tilesim.cast import CAST_NONE, CAST_RINT, KIND_BF16, elem_size
from tilesim.datamove import atomic_add_pad_out, data_copy_pad, data_copy_pad_out, init_output
from tilesim.device import at, gm_tensor, make_core, slot
from tilesim.errors import tiling_error
from tilesim.jit import njit
from tilesim.launch import AtomicTarget, finish, host_threads, prepare, reruns_on_overflow, run_cores, workspace
from tilesim.reduce import reduce_sum_half_interval, reduce_sum_multi_n
from tilesim.soc import DEFAULT_SOC, SocSpec, get_soc
from tilesim.vector import (
    add,
    broadcast_col,
    broadcast_row,
    cast_from_f32,
    cast_to_f32,
    duplicate,
    get_value,
    mul,
    muls,
    set_value,
    sub,
)
from tiling.common import FP32, device_form, dtype_name, shape_of
from tiling.rms_norm_grad import (
    DGAMMA,
    DX,
    DY,
    GAMMA,
    MEAN,
    MEAN_TMP,
    ROW_FACTOR_SPLIT_D,
    RSTD,
    SMALL_D_THRESHOLD,
    SPLIT_N,
    SYS_WORKSPACE,
    TMP,
    TMP_MEAN,
    RmsNormGradTiling,
    X,
    check_tiling,
    ub_plan,
)
from tiling.rms_norm_grad import rms_norm_grad as make_tiling

from .common import KIND, checks_default, copy_back, gm_out, output, to_gm, write_targets

LANES = 64
# GM tensor tags, for checked-mode reports.
GM_NAMES = ["dy", "x", "rstd", "gamma", "dx", "dgamma", "workspace", "dgamma (atomic)"]
G_DY, G_X, G_RSTD, G_GAMMA, G_DX, G_DGAMMA, G_WS, G_SHADOW = range(8)

# The tiling as Numba sees it: the same fields, in a namedtuple.
DeviceTiling = namedtuple("DeviceTiling", [f.name for f in fields(RmsNormGradTiling)])


@njit(cache=True)
def _load(core, t, g, off, rows, row_len, kind, upper):
    """CopyIn of T rows; b16 lands at element ``upper`` of T, the upper half of the fp32-sized buffer."""
    data_copy_pad(core, at(t, upper * 2) if kind else t, g, off, rows, row_len, row_len, 0)


@njit(cache=True)
def _widen(core, t, n, kind, upper):
    """Cast2FloatIf: widen the b16 upper half in place to fp32."""
    if kind:
        cast_to_f32(core, t, at(t, upper * 2), n, kind)


@njit(cache=True)
def _narrow(core, t, n, kind, mode):
    if kind:
        cast_from_f32(core, t, t, n, kind, mode)


@njit(cache=True, inline="always")
def _row(core, t, k, r, dy, x, rstd, dx, gam, dgam, kind, mode):
    """Split-N Compute of one row (colValAlign > 640): the high-precision kernel's ``Compute``."""
    d, cva = t.col, t.col_val_align
    rs, xl, dyl, dxl = slot(core, RSTD, k), slot(core, X, k), slot(core, DY, k), slot(core, DX, k)
    data_copy_pad(core, rs, rstd, r, 1, 1, 1, 0)
    _load(core, xl, x, r * d, 1, d, kind, cva)
    _load(core, dyl, dy, r * d, 1, d, kind, cva)
    rv = get_value(core, rs, 0)
    _widen(core, xl, cva, kind, cva)
    muls(core, xl, xl, rv, cva)
    _widen(core, dyl, cva, kind, cva)
    mul(core, dxl, dyl, xl, cva)
    add(core, dgam, dgam, dxl, cva)
    mul(core, dyl, dyl, gam, cva)
    mul(core, dxl, dyl, xl, cva)
    mean = reduce_sum_half_interval(core, dxl, d) * np.float32(t.avg_factor)
    muls(core, dxl, xl, mean, cva)
    sub(core, dxl, dyl, dxl, cva)
    muls(core, dxl, dxl, rv, cva)
    _narrow(core, dxl, cva, kind, mode)
    data_copy_pad_out(core, dx, r * d, dxl, 1, d, d)


@njit(cache=True, inline="always")
def _rows_small_d(core, t, k, r, n, dy, x, rstd, dx, gam, dgam, kind, mode):
    """Split-N Compute of ``n`` rows at once (colValAlign <= 640): the kernel's ``ComputeSmallD``."""
    d, cva = t.col, t.col_val_align
    e = n * cva
    rs, xl, dyl, dxl = slot(core, RSTD, k), slot(core, X, k), slot(core, DY, k), slot(core, DX, k)
    tmp, tmean = slot(core, TMP, 0), slot(core, TMP_MEAN, 0)
    data_copy_pad(core, rs, rstd, r, 1, n, n, 0)
    _load(core, xl, x, r * d, n, d, kind, e)
    _load(core, dyl, dy, r * d, n, d, kind, e)
    broadcast_col(core, dxl, rs, n, cva)
    _widen(core, xl, e, kind, e)
    mul(core, xl, xl, dxl, e)
    _widen(core, dyl, e, kind, e)
    mul(core, dxl, dyl, xl, e)
    for i in range(n):
        add(core, dgam, at(dxl, 4 * i * cva), dgam, cva)
    broadcast_row(core, dxl, gam, n, cva)
    mul(core, dyl, dyl, dxl, e)
    mul(core, dxl, dyl, xl, e)
    reduce_sum_multi_n(core, tmean, dxl, tmp, n, d, cva)
    muls(core, tmean, tmean, t.avg_factor, n)
    broadcast_col(core, dxl, tmean, n, cva)
    mul(core, dxl, xl, dxl, e)
    sub(core, dxl, dyl, dxl, e)
    broadcast_col(core, dyl, rs, n, cva)
    mul(core, dxl, dxl, dyl, e)
    _narrow(core, dxl, e, kind, mode)
    data_copy_pad_out(core, dx, r * d, dxl, n, d, d)


@njit(cache=True, inline="always")
def _final_deterministic(core, t, ws, dgamma):
    """FinalProcessDeterministic: 64-column tasks round-robin over cores; each adds the block_dim workspace
    rows in core order and writes its columns of dgamma."""
    d, cva, bd = t.col, t.col_val_align, t.block_dim
    rows, acc = slot(core, DY, 0), slot(core, DGAMMA, 0)
    for task in range(core.idx, (d + LANES - 1) // LANES, bd):
        col0 = task * LANES
        w = min(LANES, d - col0)
        pitch = (w * 4 + 31) // 32 * 32
        data_copy_pad(core, rows, ws, col0, bd, w, cva, 0)
        duplicate(core, acc, 0.0, pitch // 4)
        for b in range(bd):
            add(core, acc, acc, at(rows, b * pitch), pitch // 4)
        data_copy_pad_out(core, dgamma, col0, acc, 1, w, w)


@njit(cache=True, inline="always")
def _split_n(core, t, phase, dy, x, rstd, gamma, dx, dgamma, ws, shadow, kind, gkind, mode):
    c, d, cva = core.idx, t.col, t.col_val_align
    det = t.fixed_output == 1
    if not det and phase == 0:
        if c == 0:
            init_output(core, dgamma, 0, d, 0.0)
        return
    if det and phase == 1:
        _final_deterministic(core, t, ws, dgamma)
        return
    gam, dgam = slot(core, GAMMA, 0), slot(core, DGAMMA, 0)
    _load(core, gam, gamma, 0, 1, d, gkind, cva)
    _widen(core, gam, cva, gkind, cva)
    duplicate(core, dgam, 0.0, cva)
    if t.core_calc_tail == 0 or c < t.block_dim - 1:
        loop, num, tail = t.ub_calc_loop, t.ub_calc_num, t.ub_calc_tail
    else:
        loop, num, tail = t.ub_calc_tail_loop, t.ub_calc_tail_num, t.ub_calc_tail_tail
    row0 = c * t.block_factor
    k = 0
    for i in range(loop):
        n = tail if (i == loop - 1 and tail != 0) else num
        r = row0 + i * t.ub_factor
        if cva <= SMALL_D_THRESHOLD:
            _rows_small_d(core, t, k, r, n, dy, x, rstd, dx, gam, dgam, kind, mode)
            k += 1
        else:
            for j in range(n):
                _row(core, t, k, r + j, dy, x, rstd, dx, gam, dgam, kind, mode)
                k += 1
    if det:
        data_copy_pad_out(core, ws, c * cva, dgam, 1, d, d)
    else:
        atomic_add_pad_out(core, shadow, c * d, dgam, d)


@njit(cache=True, inline="always")
def _gamma_tile(core, t, j, gamma, gkind):
    """Split-D column tile ``j``: its width, width rounded to 32 B, first column; gamma loaded and widened."""
    uf = t.ub_factor
    w = t.ub_calc_tail if (j == t.ub_calc_loop - 1 and t.ub_calc_tail != 0) else uf
    align = 8 if t.data_type == 0 else 16
    wa = (w + align - 1) // align * align
    gam = slot(core, GAMMA, 0)
    _load(core, gam, gamma, j * uf, 1, w, gkind, uf)
    _widen(core, gam, wa, gkind, uf)
    return w, wa, j * uf


@njit(cache=True, inline="always")
def _xy_row(core, t, k, off, w, wa, x, dy, kind):
    """Split-D CopyIn of one row's x and dy tile into queue slot ``k``, widened to fp32."""
    xl, dyl, dxl = slot(core, X, k), slot(core, DY, k), slot(core, DX, k)
    _load(core, xl, x, off, 1, w, kind, t.ub_factor)
    _load(core, dyl, dy, off, 1, w, kind, t.ub_factor)
    _widen(core, xl, wa, kind, t.ub_factor)
    _widen(core, dyl, wa, kind, t.ub_factor)
    return xl, dyl, dxl


@njit(cache=True, inline="always")
def _split_d(core, t, phase, dy, x, rstd, gamma, dx, dgamma, ws, shadow, kind, gkind, mode):
    c, d, cva = core.idx, t.col, t.col_val_align
    det = t.fixed_output == 1
    if phase == 0:  # zero what the atomic adds land in, then SyncAll
        if det:
            init_output(core, ws, c * cva, d, 0.0)
        elif c == 0:
            init_output(core, dgamma, 0, d, 0.0)
        return
    if det and phase == 2:
        _final_deterministic(core, t, ws, dgamma)
        return
    acc, acc_off = (ws, c * cva) if det else (shadow, c * d)
    rows = t.core_calc_tail if (t.core_calc_tail and c == t.block_dim - 1) else t.block_factor
    row0 = c * t.block_factor
    rs, mean, mtmp = slot(core, RSTD, 0), slot(core, MEAN, 0), slot(core, MEAN_TMP, 0)
    gam, dgam = slot(core, GAMMA, 0), slot(core, DGAMMA, 0)
    loop = t.ub_calc_loop
    k = 0
    for b in range((rows + ROW_FACTOR_SPLIT_D - 1) // ROW_FACTOR_SPLIT_D):
        r0 = row0 + b * ROW_FACTOR_SPLIT_D
        n = min(ROW_FACTOR_SPLIT_D, rows - b * ROW_FACTOR_SPLIT_D)
        data_copy_pad(core, rs, rstd, r0, 1, n, n, 0)
        duplicate(core, mean, 0.0, n)
        for j in range(loop):  # pass 1: dgamma partials and the row sums of dy * g * x * rstd
            w, wa, col0 = _gamma_tile(core, t, j, gamma, gkind)
            duplicate(core, dgam, 0.0, wa)
            for i in range(n):
                xl, dyl, dxl = _xy_row(core, t, k, (r0 + i) * d + col0, w, wa, x, dy, kind)
                k += 1
                rv = get_value(core, rs, i)
                muls(core, xl, xl, rv, wa)
                mul(core, dxl, dyl, xl, wa)
                add(core, dgam, dgam, dxl, wa)
                mul(core, dxl, dxl, gam, wa)
                set_value(core, mtmp, i, reduce_sum_half_interval(core, dxl, w))
            atomic_add_pad_out(core, acc, acc_off + col0, dgam, w)
            add(core, mean, mean, mtmp, n)
        muls(core, mean, mean, t.avg_factor, n)
        for j in range(loop):  # pass 2: dx
            w, wa, col0 = _gamma_tile(core, t, j, gamma, gkind)
            for i in range(n):
                xl, dyl, dxl = _xy_row(core, t, k, (r0 + i) * d + col0, w, wa, x, dy, kind)
                k += 1
                rv = get_value(core, rs, i)
                mv = get_value(core, mean, i)
                muls(core, xl, xl, rv, wa)
                muls(core, xl, xl, mv, wa)
                mul(core, dxl, dyl, gam, wa)
                sub(core, dxl, dxl, xl, wa)
                muls(core, dxl, dxl, rv, wa)
                _narrow(core, dxl, wa, kind, mode)
                data_copy_pad_out(core, dx, (r0 + i) * d + col0, dxl, 1, w, w)


@njit(cache=True, inline="always")  # compiled once, inside _cores
def _core(phase, c, block_dim, arena, plan, cnt, err, checks, t, dy, x, rstd, gamma, dx, dgamma, ws, shadow, kind,
          gkind, mode):
    core = make_core(c, block_dim, arena, plan, cnt, err, checks)
    isz, gsz = elem_size(kind), elem_size(gkind)
    g_dy, g_x, g_rstd = gm_tensor(G_DY, dy, isz), gm_tensor(G_X, x, isz), gm_tensor(G_RSTD, rstd, 4)
    g_gamma, g_dx, g_dgamma = gm_tensor(G_GAMMA, gamma, gsz), gm_tensor(G_DX, dx, isz), \
        gm_tensor(G_DGAMMA, dgamma, 4)
    g_ws, g_sh = gm_tensor(G_WS, ws, 4), gm_tensor(G_SHADOW, shadow, 4)
    if t.tiling_key == SPLIT_N:
        _split_n(core, t, phase, g_dy, g_x, g_rstd, g_gamma, g_dx, g_dgamma, g_ws, g_sh, kind, gkind, mode)
    else:
        _split_d(core, t, phase, g_dy, g_x, g_rstd, g_gamma, g_dx, g_dgamma, g_ws, g_sh, kind, gkind, mode)


@njit(cache=True, nogil=True, host=True)
def _cores(first, last, phase, block_dim, arena, plan, cnt, err, checks, t, dy, x, rstd, gamma, dx, dgamma, ws,
           shadow, kind, gkind, mode):
    t = DeviceTiling(*t)  # a plain tuple from the host: see tiling.common.device_form
    for c in range(first, last):
        _core(phase, c, block_dim, arena, plan, cnt, err, checks, t, dy, x, rstd, gamma, dx, dgamma, ws, shadow, kind,
              gkind, mode)


def check_supported(t: RmsNormGradTiling) -> None:
    """The kernels here are the non-chunked ones; the chunked deterministic split-D (inputs >= 500 MiB on 910B)
    would need a workspace layout tilesim does not emulate yet, so it is refused rather than run out of bounds."""
    if t.need_chunk:
        raise tiling_error("deterministic", f"the chunked deterministic split-D kernel (need_chunk, chunk_size "
                                            f"{t.chunk_size}) is not emulated by tilesim yet")


@reruns_on_overflow
def run(t: RmsNormGradTiling, spec: SocSpec, dy: np.ndarray, x: np.ndarray, rstd: np.ndarray, gamma: np.ndarray,
        dx: np.ndarray, dgamma: np.ndarray, ws: np.ndarray, checks: bool) -> None:
    """Launch the kernel on arrays already validated: the device part of the op (``aclnnRmsNormGrad``)."""
    check_supported(t)
    plan = ub_plan(t, spec).check()
    launch = prepare("rms_norm_grad", spec, t, plan, t.block_dim, checks, GM_NAMES, phase_local_ub=True)
    kind, gkind = KIND[dtype_name(dy)], KIND[dtype_name(gamma)]
    mode = CAST_RINT if kind == KIND_BF16 else CAST_NONE
    det = t.fixed_output == 1
    n_phases = (2 if t.tiling_key == SPLIT_N else 3) if det else 2
    user_ws = ws[SYS_WORKSPACE:t.workspace_size]
    atomic = AtomicTarget(t.block_dim, 0 if det else t.col)
    out_dgamma = dgamma.reshape(-1)
    with host_threads(dy, x, dx):
        args = (t.block_dim, launch.arena, launch.plan_array, launch.counters, launch.err, launch.core_checks,
                device_form(DeviceTiling, t), to_gm(dy), to_gm(x), to_gm(rstd),
                to_gm(gamma), gm_out(dx), gm_out(out_dgamma), user_ws, gm_out(atomic.shadow), kind, gkind, mode)
        for phase in range(n_phases):  # a SyncAll between phases
            run_cores(_cores, t.block_dim, phase, *args)
    if not det:
        atomic.merge_into(out_dgamma)
    finish(launch, t.workspace_size)


def rms_norm_grad(dy: Any, x: Any, rstd: Any, gamma: Any, *, soc: str | SocSpec = DEFAULT_SOC,
                  deterministic: bool = False, tiling: RmsNormGradTiling | None = None, checks: bool | None = False,
                  out: tuple[np.ndarray | None, np.ndarray | None] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """aclnnRmsNormGrad: ``(dx, dgamma)`` from dy, x, rstd and gamma, computed by the tiled kernel.

    dx has dy's shape and dtype; dgamma has gamma's shape and is float32. ``tiling`` runs a TilingData made
    with ``tiling.rms_norm_grad(..., core_num=..., ub_factor=..., buffer_num=...)`` (checked first);
    ``checks=True`` runs checked mode; ``out=(dx, dgamma)`` writes into existing arrays.
    Errors raise :class:`tilesim.AclnnError` with the aclnn status; inputs are never modified, and nothing
    is written on error.
    """
    spec = get_soc(soc)
    official = make_tiling(dy, x, rstd, gamma, soc=spec, deterministic=deterministic)
    t = official
    if tiling is not None:
        check_tiling(tiling, official.row, official.col, official.data_type, spec)
        t = tiling
    check_supported(t)
    ub_plan(t, spec).check()
    dx = output(out, 0, "dx", shape_of(dy), dtype_name(dy))
    dgamma = output(out, 1, "dgamma", shape_of(gamma), FP32)
    checks = checks_default(checks)
    targets = write_targets((dx, dgamma), checks, (dy, x, rstd, gamma))
    run(t, spec, dy, x, rstd, gamma, *targets, workspace(t.workspace_size), checks)
    copy_back((dx, dgamma), targets)
    return dx, dgamma
