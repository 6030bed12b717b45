"""aclnnGroupNormBackward: the GroupNormGrad kernel of ops-nn (``op_kernel/group_norm_grad_kernel.h``) as device
code on tilesim, the op-level decomposition aclnn uses on the other SoCs, and the host op API.

Per core: tasks (n, g) ``[first, +count)`` from the tiling; per task CopyIn (DataCopyPad; b16 lands in a T buffer
and is cast to the fp32 buffer), the per-channel sums Σdy and Σdy·x̂ with x̂ = x·rstd + (−mean·rstd), the group
constants c1 = Σγ·Σdy / D and c2 = Σγ·Σdy·x̂ / D, then dx = rstd·(γ·dy − c1 − c2·x̂) in the mode's own operation
order, cast with CAST_ROUND for b16. UB modes 0, 1, 2, 3 and 5 are each their own loop, as in the kernel.

dgamma/dbeta: each task's channel sums go out by atomic add. With N > 2 (deterministic) into workspace row n/2
(two addends per address), SyncAll, then stage 2 folds the rows (fp32: two halves of the cores, each atomically
adding into the zeroed output; b16: one pass per channel slice, then the cast). With N <= 2 straight into the
outputs (fp32), or through an fp32 workspace and a cast (b16; N = 1 casts directly). The atomic adds land in
two shadow rows (batch row parity, or the stage-2 half) merged after the phase: at most two addends meet at an
address, so the sums are those of the NPU whatever the host thread count.

Only DAV_2201 (910B, 910_93) runs this kernel. aclnn decomposes the op on the others (the 910 training series and
310P): dx from BatchNorm backward over [1, N·G, D] of dy·γ with var = 1/rstd² − 1e-5, dgamma and dbeta from
ReduceSum ops, each op rounding to the tensors' dtype (:func:`decomposed`).
"""

from __future__ import annotations

from collections import namedtuple
from dataclasses import fields
from typing import Any

import numpy as np

from tilesim.cast import CAST_ROUND, b16_to_f32_bits, elem_size
from tilesim.datamove import atomic_add_pad_out, data_copy_pad, data_copy_pad_out, init_output
from tilesim.device import at, count_gm_scalar, gm_f32, gm_size, gm_tensor, gm_u16, make_core, slot
from tilesim.errors import invalid
from tilesim.intrinsics import u32_as_f32
from tilesim.jit import njit
from tilesim.launch import AtomicTarget, finish, host_threads, prepare, reruns_on_overflow, run_cores, workspace
from tilesim.reduce import reduce_sum
from tilesim.soc import DEFAULT_SOC, SocSpec, get_soc
from tilesim.vector import (
    add,
    adds,
    cast_from_f32,
    cast_to_f32,
    copy,
    duplicate,
    get_value,
    mul,
    muls,
    set_value,
    sub,
)
from tiling.common import device_form, dtype_name, shape_of
from tiling.group_norm_backward import (
    DBETA,
    DBETA_T,
    DGAMMA,
    DGAMMA_T,
    DY,
    DY_T,
    GAMMA,
    GAMMA_T,
    MODE_0,
    MODE_3,
    MODE_5,
    S2_DBETA_ROWS,
    S2_DBETA_SUM,
    S2_DBETA_T,
    S2_DGAMMA_ROWS,
    S2_DGAMMA_SUM,
    S2_DGAMMA_T,
    SPLIT_COUNT,
    SYS_WORKSPACE,
    TEMP_DY,
    TEMP_HXW,
    TEMP_X,
    X_T,
    GroupNormBackwardTiling,
    X,
    check_args,
    check_tiling,
    ub_plan,
)
from tiling.group_norm_backward import group_norm_backward as make_tiling

from .common import KIND, NUMPY_DTYPE, checks_default, copy_back, gm_out, output, to_gm, write_targets

LANES = 64
FOLD_START = 128  # ReduceSum_template folds from 128 repeats of 64 lanes down
GM_NAMES = ["gradOut", "input", "mean", "rstd", "gamma", "gradInput", "gradGammaOut", "gradBetaOut",
            "workspace (dgamma)", "workspace (dbeta)", "dgamma partials (atomic)", "dbeta partials (atomic)",
            "stage-2 dgamma (atomic)", "stage-2 dbeta (atomic)"]
(G_DY, G_X, G_MEAN, G_RSTD, G_GAMMA, G_DX, G_DGAMMA, G_DBETA, G_WSG, G_WSB, G_SH1G, G_SH1B, G_SH2G,
 G_SH2B) = range(len(GM_NAMES))
DX_EPS = 1e-5  # the decomposition's eps (GradInputProcess)

# The tiling as Numba sees it: the numeric fields, and whether the reduction is the deterministic one.
DeviceTiling = namedtuple("DeviceTiling", [f.name for f in fields(GroupNormBackwardTiling) if f.name != "dtype"]
                          + ["deterministic"])


@njit(cache=True)
def _gm_scalar(core, g, i, kind):
    """GlobalTensor.GetValue, widened to fp32 (ToFloat for bf16)."""
    count_gm_scalar(core, g, i)
    if kind == 0:
        return gm_f32(g)[i]
    return u32_as_f32(b16_to_f32_bits(gm_u16(g)[i], kind))


@njit(cache=True)
def _copy_in(core, dst, tbuf, g, off, count, kind):
    """Custom_DataCopy_In: DataCopyPad of ``count`` elements; b16 lands in ``tbuf`` and is cast (exactly) to fp32."""
    if kind == 0:
        data_copy_pad(core, dst, g, off, 1, count, count, 0)
    else:
        data_copy_pad(core, tbuf, g, off, 1, count, count, 0)
        cast_to_f32(core, dst, tbuf, count, kind)


@njit(cache=True)
def _copy_out(core, g, off, src, tbuf, count, kind):
    """Custom_DataCopy_Out: fp32 goes out as it is; b16 is cast with CAST_ROUND into ``tbuf`` first."""
    if kind == 0:
        data_copy_pad_out(core, g, off, src, 1, count, count)
    else:
        cast_from_f32(core, tbuf, src, count, kind, CAST_ROUND)
        data_copy_pad_out(core, g, off, tbuf, 1, count, count)


@njit(cache=True)
def _adds_muls(core, t, a, m, n):
    """Adds_Muls_template in place: Muls by ``m``, then Adds ``a`` (two roundings, no fused multiply-add)."""
    muls(core, t, t, m, n)
    adds(core, t, t, a, n)


@njit(cache=True)
def _fold_sum(core, dst, src, work, count):
    """ReduceSum_template with mode on: above 64 elements, fold onto the head by halves from 128 repeats down
    (Copy, then Add of the part past the first fold), then ReduceSum of 64. Past 16384 elements the first Add
    writes beyond the folded head and those lanes are lost, as on the NPU; the tilings keep HxW chunks below it
    on 192 KiB UBs."""
    if count <= LANES:
        return reduce_sum(core, dst, src, work, count)
    first = True
    start = FOLD_START
    while start >= 1:
        inner = start * LANES
        if count > inner:
            if first:
                copy(core, dst, src, inner)
                add(core, dst, at(src, 4 * inner), dst, count - inner)
                first = False
            else:
                add(core, dst, at(dst, 4 * inner), dst, inner)
            count = inner
        start //= 2
    return reduce_sum(core, dst, dst, work, LANES)


@njit(cache=True)
def _group_constants(core, t, s_beta, s_gamma, gam):
    """Mul_ReduceSum_template: c1 = Σγ·Σdy / D and c2 = Σγ·Σdy·x̂ / D (the sums are scaled by γ in place)."""
    cg = t.c_g
    mul(core, s_beta, gam, s_beta, cg)
    mul(core, s_gamma, gam, s_gamma, cg)
    d = np.float32(t.c_g * t.hxw)
    c1 = np.float32(reduce_sum(core, s_beta, s_beta, s_beta, cg) / d)
    c2 = np.float32(reduce_sum(core, s_gamma, s_gamma, s_gamma, cg) / d)
    return c1, c2


@njit(cache=True)
def _load_gamma(core, t, task, gamma, kind):
    gam = slot(core, GAMMA, 0)
    _copy_in(core, gam, slot(core, GAMMA_T, 0), gamma, (task % t.g) * t.c_g, t.c_g, kind)
    return gam


@njit(cache=True)
def _mode_selection(core, t, task, s_gamma, s_beta, dgamma, dbeta, sh1g, sh1b, kind):
    """Mode_Selection: where a task's C_G channel sums go. Atomic adds land in the shadow row of the batch row's
    parity (row n/2 of the workspace when deterministic, the output or the workspace of C otherwise)."""
    n, g = task // t.g, task % t.g
    cg = t.c_g
    if not t.deterministic and kind != 0 and t.n == 1:  # non_fp32_dgamma_dbeta2GM: cast and write
        if t.dbeta_is_require:
            cast_from_f32(core, slot(core, DBETA_T, 0), s_beta, cg, kind, CAST_ROUND)
            data_copy_pad_out(core, dbeta, g * cg, slot(core, DBETA_T, 0), 1, cg, cg)
        if t.dgamma_is_require:
            cast_from_f32(core, slot(core, DGAMMA_T, 0), s_gamma, cg, kind, CAST_ROUND)
            data_copy_pad_out(core, dgamma, g * cg, slot(core, DGAMMA_T, 0), 1, cg, cg)
        return
    row_len = gm_size(sh1g) // SPLIT_COUNT
    off = (n % SPLIT_COUNT) * row_len + ((n // SPLIT_COUNT) * t.g + g) * cg
    if t.dbeta_is_require:
        atomic_add_pad_out(core, sh1b, off, s_beta, cg)
    if t.dgamma_is_require:
        atomic_add_pad_out(core, sh1g, off, s_gamma, cg)


@njit(cache=True, inline="always")
def _task_mode0(core, t, task, dy, x, mean, rstd, gamma, dx, dgamma, dbeta, sh1g, sh1b, kind):
    """UB mode 0 (and 5): the whole group resident. Channels whose start is not 32 B aligned in the group
    buffer are re-read from GM into aligned buffers, and their dx uses the uncentred form of the kernel."""
    hxw, cg = t.hxw, t.c_g
    epg = cg * hxw
    base = task * epg
    dyl, xl, tmp = slot(core, DY, 0), slot(core, X, 0), slot(core, TEMP_HXW, 0)
    dyt, xt = slot(core, DY_T, 0), slot(core, X_T, 0)
    s_beta, s_gamma = slot(core, DBETA, 0), slot(core, DGAMMA, 0)
    _copy_in(core, dyl, dyt, dy, base, epg, kind)
    _copy_in(core, xl, xt, x, base, epg, kind)
    mv = _gm_scalar(core, mean, task, kind)
    rv = _gm_scalar(core, rstd, task, kind)
    neg_mr = np.float32(-1.0) * mv * rv
    _adds_muls(core, xl, neg_mr, rv, epg)
    if t.ub_mode == MODE_5:
        copy(core, s_beta, dyl, (cg + 7) // 8 * 8)
        mul(core, s_gamma, xl, dyl, cg)
    else:
        for ci in range(cg):
            co = ci * hxw
            if co % 8 == 0:
                set_value(core, s_beta, ci, _fold_sum(core, tmp, at(dyl, 4 * co), tmp, hxw))
                mul(core, tmp, at(xl, 4 * co), at(dyl, 4 * co), hxw)
                set_value(core, s_gamma, ci, _fold_sum(core, tmp, tmp, tmp, hxw))
            else:
                ux, udy = slot(core, TEMP_X, 0), slot(core, TEMP_DY, 0)
                _copy_in(core, ux, xt, x, base + co, hxw, kind)
                _copy_in(core, udy, dyt, dy, base + co, hxw, kind)
                _adds_muls(core, ux, neg_mr, rv, hxw)
                v1 = _fold_sum(core, tmp, udy, tmp, hxw)
                mul(core, tmp, ux, udy, hxw)
                v2 = _fold_sum(core, tmp, tmp, tmp, hxw)
                set_value(core, s_beta, ci, v1)
                set_value(core, s_gamma, ci, v2)
    _mode_selection(core, t, task, s_gamma, s_beta, dgamma, dbeta, sh1g, sh1b, kind)
    if not t.dx_is_require:
        return
    gam = _load_gamma(core, t, task, gamma, kind)
    if t.ub_mode == MODE_5:
        mul(core, dyl, dyl, gam, cg)
        c1, c2 = _group_constants(core, t, s_beta, s_gamma, gam)
        _adds_muls(core, xl, rv * c1, rv * c2, cg)
        muls(core, dyl, dyl, rv, cg)
        sub(core, tmp, dyl, xl, cg)
        _copy_out(core, dx, task * cg, tmp, dyt, cg, kind)
        return
    c1, c2 = _group_constants(core, t, s_beta, s_gamma, gam)
    tpb = 8 if kind == 0 else 16
    for ci in range(cg):
        co = ci * hxw
        gv = get_value(core, gam, ci)
        if co % tpb == 0:
            _adds_muls(core, at(xl, 4 * co), rv * c1, rv * c2, hxw)
            muls(core, at(dyl, 4 * co), at(dyl, 4 * co), rv * gv, hxw)
            sub(core, tmp, at(dyl, 4 * co), at(xl, 4 * co), hxw)
        else:
            fo = co // tpb * tpb
            _copy_in(core, at(xl, 4 * fo), xt, x, base + co, hxw, kind)
            _copy_in(core, at(dyl, 4 * fo), dyt, dy, base + co, hxw, kind)
            _adds_muls(core, at(xl, 4 * fo), rv * c1 - mv * rv * rv * c2, rv * rv * c2, hxw)
            muls(core, at(dyl, 4 * fo), at(dyl, 4 * fo), rv * gv, hxw)
            sub(core, tmp, at(dyl, 4 * fo), at(xl, 4 * fo), hxw)
        _copy_out(core, dx, base + co, tmp, dyt, hxw, kind)


@njit(cache=True, inline="always")
def _dx_chunk(core, k, dy, x, dx, off, count, gv, rv, a, m, kind):
    """dx of one channel (or HxW chunk) in modes 1-3: γ·dy − (x·(rstd·c2) − (mean·rstd·c2 − c1)), times rstd."""
    xl, dyl, tmp = slot(core, X, k), slot(core, DY, k), slot(core, TEMP_HXW, k)
    _copy_in(core, xl, slot(core, X_T, 0), x, off, count, kind)
    _copy_in(core, dyl, slot(core, DY_T, 0), dy, off, count, kind)
    muls(core, dyl, dyl, gv, count)
    _adds_muls(core, xl, a, m, count)
    sub(core, dyl, dyl, xl, count)
    muls(core, tmp, dyl, rv, count)
    _copy_out(core, dx, off, tmp, slot(core, DY_T, 0), count, kind)


@njit(cache=True, inline="always")
def _task_channels(core, t, task, dy, x, mean, rstd, gamma, dx, dgamma, dbeta, sh1g, sh1b, kind):
    """UB modes 1 and 2 (one channel at a time; mode 2 alternates two queue slots) and 3 (a channel in HxW
    chunks, the chunk sums added with Kahan compensation)."""
    hxw, cg = t.hxw, t.c_g
    base = task * cg * hxw
    s_beta, s_gamma = slot(core, DBETA, 0), slot(core, DGAMMA, 0)
    dyt, xt = slot(core, DY_T, 0), slot(core, X_T, 0)
    mv = _gm_scalar(core, mean, task, kind)
    rv = _gm_scalar(core, rstd, task, kind)
    neg_mr = np.float32(-1.0) * mv * rv
    mode3 = t.ub_mode == MODE_3
    cap = t.mode2_ub_capacity_ele if mode3 else hxw
    chunks = t.mode2_ub_iteration_num if mode3 else 1
    for ci in range(cg):
        k = 0 if mode3 else ci
        dyl, xl, tmp = slot(core, DY, k), slot(core, X, k), slot(core, TEMP_HXW, k)
        sum1 = sum2 = corr1 = corr2 = np.float32(0)
        for j in range(chunks):
            count = t.mode2_ub_tail_num if (mode3 and j == chunks - 1) else cap
            off = base + ci * hxw + j * cap
            _copy_in(core, dyl, dyt, dy, off, count, kind)
            _copy_in(core, xl, xt, x, off, count, kind)
            adj = _fold_sum(core, tmp, dyl, tmp, count) - corr1
            s = adj + sum1
            corr1 = (s - sum1) - adj
            sum1 = s
            _adds_muls(core, xl, neg_mr, rv, cap)  # mode 3 scales the whole chunk buffer, tail or not
            mul(core, tmp, xl, dyl, count)
            adj = _fold_sum(core, tmp, tmp, tmp, count) - corr2
            s = adj + sum2
            corr2 = (s - sum2) - adj
            sum2 = s
        set_value(core, s_beta, ci, sum1)
        set_value(core, s_gamma, ci, sum2)
    _mode_selection(core, t, task, s_gamma, s_beta, dgamma, dbeta, sh1g, sh1b, kind)
    if not t.dx_is_require:
        return
    gam = _load_gamma(core, t, task, gamma, kind)
    c1, c2 = _group_constants(core, t, s_beta, s_gamma, gam)
    a = np.float32(-1.0) * (mv * rv * c2 - c1)
    m = rv * c2
    for ci in range(cg):
        gv = get_value(core, gam, ci)
        for j in range(chunks):
            count = t.mode2_ub_tail_num if (mode3 and j == chunks - 1) else cap
            _dx_chunk(core, 0 if mode3 else ci, dy, x, dx, base + ci * hxw + j * cap, count, gv, rv, a, m, kind)


@njit(cache=True, inline="always")
def _init_outputs(core, t, dgamma, dbeta, wsg, wsb, kind):
    """Init_Output_GM (core 0, before the first SyncAll): zero what the atomic adds land in."""
    if core.idx != 0:
        return
    if t.deterministic or kind != 0:
        init_output(core, wsg, 0, t.work_space_size, 0.0)
        init_output(core, wsb, 0, t.work_space_size, 0.0)
    if kind == 0:
        init_output(core, dgamma, 0, t.c, 0.0)
        init_output(core, dbeta, 0, t.c, 0.0)


@njit(cache=True, inline="always")
def ceil_div_dev(a, b):
    return (a + b - 1) // b


@njit(cache=True)
def _fold_rows(core, t, rows_buf, ws, off, rep, count, acc):
    """reduce_axis_n_WSP2UB: ``rep`` workspace rows of ``count`` channels into UB rows castEleNum apart, folded
    by a pairwise halving tree, then added onto ``acc``."""
    cast = t.cast_ele_num
    v = slot(core, rows_buf, 0)
    data_copy_pad(core, v, ws, off, rep, count, t.c, 0, (cast - count) // 8)
    end = mid = rep
    while mid >= 2:
        mid >>= 1
        end -= mid
        add(core, v, at(v, 4 * end * cast), v, mid * cast)
        mid = end
    add(core, acc, v, acc, count)


@njit(cache=True)
def _stage2_sums(core, t, start, ch, count, rows, wsg, wsb):
    """The channel slice's sums over ``rows`` workspace rows from row offset ``start``, coreBatchParts at a time."""
    sg, sb = slot(core, S2_DGAMMA_SUM, 0), slot(core, S2_DBETA_SUM, 0)
    duplicate(core, sb, 0.0, t.cast_ele_num)
    duplicate(core, sg, 0.0, t.cast_ele_num)
    cbp = t.core_batch_parts
    loops = ceil_div_dev(rows, cbp)
    for li in range(loops):
        rep = cbp if li < loops - 1 else (rows % cbp if rows % cbp else cbp)
        off = start + li * cbp * t.c + ch
        if t.dgamma_is_require:
            _fold_rows(core, t, S2_DGAMMA_ROWS, wsg, off, rep, count, sg)
        if t.dbeta_is_require:
            _fold_rows(core, t, S2_DBETA_ROWS, wsb, off, rep, count, sb)
    return sg, sb


@njit(cache=True, inline="always")
def _stage2(core, t, dgamma, dbeta, wsg, wsb, sh2g, sh2b, kind):
    c, s2, cast = core.idx, t.stage2_core_used, t.cast_ele_num
    if not t.deterministic:
        if kind == 0 or t.n == 1 or c >= s2:
            return
        count = cast if c < s2 - 1 else t.tail_cast_num  # cast_dgamma_dbeta_WSP2GM
        for req, ws, rows, tb, out in ((t.dgamma_is_require, wsg, S2_DGAMMA_ROWS, S2_DGAMMA_T, dgamma),
                                       (t.dbeta_is_require, wsb, S2_DBETA_ROWS, S2_DBETA_T, dbeta)):
            if req:
                v = slot(core, rows, 0)
                data_copy_pad(core, v, ws, c * cast, 1, count, count, 0)
                cast_from_f32(core, slot(core, tb, 0), v, count, kind, CAST_ROUND)
                data_copy_pad_out(core, out, c * cast, slot(core, tb, 0), 1, count, count)
        return
    half_rows = ceil_div_dev(t.n, SPLIT_COUNT)
    if kind != 0:  # reduce_cast_dgamma_dbeta_WSP2GM: every row of a channel slice, then the cast
        if c >= s2:
            return
        count = cast if c < s2 - 1 else t.tail_cast_num
        sg, sb = _stage2_sums(core, t, 0, c * cast, count, half_rows, wsg, wsb)
        if t.dgamma_is_require:
            _copy_out(core, dgamma, c * cast, sg, slot(core, S2_DGAMMA_T, 0), count, kind)
        if t.dbeta_is_require:
            _copy_out(core, dbeta, c * cast, sb, slot(core, S2_DBETA_T, 0), count, kind)
        return
    first = ceil_div_dev(half_rows, SPLIT_COUNT)  # reduce_dgamma_dbeta_WSP2GM over two halves of the rows
    if c >= SPLIT_COUNT * s2:
        return
    way = c // s2
    ch = (c % s2) * cast
    count = cast if c % s2 < s2 - 1 else t.tail_cast_num
    start, rows = (0, first) if way == 0 else (first * t.c, half_rows - first)
    sg, sb = _stage2_sums(core, t, start, ch, count, rows, wsg, wsb)
    if t.dgamma_is_require:
        atomic_add_pad_out(core, sh2g, way * t.c + ch, sg, count)
    if t.dbeta_is_require:
        atomic_add_pad_out(core, sh2b, way * t.c + ch, sb, count)


@njit(cache=True, inline="always")  # compiled once, inside _cores
def _core(phase, c, block_dim, arena, plan, cnt, err, checks, t, dy, x, mean, rstd, gamma, dx, dgamma, dbeta, wsg,
          wsb, sh1g, sh1b, sh2g, sh2b, kind):
    core = make_core(c, block_dim, arena, plan, cnt, err, checks)
    isz = elem_size(kind)
    g_dgamma, g_dbeta = gm_tensor(G_DGAMMA, dgamma, isz), gm_tensor(G_DBETA, dbeta, isz)
    g_wsg, g_wsb = gm_tensor(G_WSG, wsg, 4), gm_tensor(G_WSB, wsb, 4)
    if phase == 0:
        _init_outputs(core, t, g_dgamma, g_dbeta, g_wsg, g_wsb, kind)
        return
    if phase == 2:
        _stage2(core, t, g_dgamma, g_dbeta, g_wsg, g_wsb, gm_tensor(G_SH2G, sh2g, 4),
                gm_tensor(G_SH2B, sh2b, 4), kind)
        return
    g_dy, g_x, g_mean, g_rstd = gm_tensor(G_DY, dy, isz), gm_tensor(G_X, x, isz), \
        gm_tensor(G_MEAN, mean, isz), gm_tensor(G_RSTD, rstd, isz)
    g_gamma, g_dx = gm_tensor(G_GAMMA, gamma, isz), gm_tensor(G_DX, dx, isz)
    g_sh1g, g_sh1b = gm_tensor(G_SH1G, sh1g, 4), gm_tensor(G_SH1B, sh1b, 4)
    if c < t.tail_core:
        first, count = c * t.task_num_per_core, t.task_num_per_core
    else:
        first, count = c * t.task_num_per_tail_core + t.tail_core, t.task_num_per_tail_core
    for task in range(first, first + count):
        if t.ub_mode == MODE_0 or t.ub_mode == MODE_5:
            _task_mode0(core, t, task, g_dy, g_x, g_mean, g_rstd, g_gamma, g_dx, g_dgamma, g_dbeta, g_sh1g, g_sh1b,
                        kind)
        else:
            _task_channels(core, t, task, g_dy, g_x, g_mean, g_rstd, g_gamma, g_dx, g_dgamma, g_dbeta, g_sh1g,
                           g_sh1b, kind)


@njit(cache=True, nogil=True, host=True)
def _cores(first, last, phase, block_dim, arena, plan, cnt, err, checks, t, dy, x, mean, rstd, gamma, dx, dgamma,
           dbeta, wsg, wsb, sh1g, sh1b, sh2g, sh2b, kind):
    t = DeviceTiling(*t)  # a plain tuple from the host: see tiling.common.device_form
    for c in range(first, last):
        _core(phase, c, block_dim, arena, plan, cnt, err, checks, t, dy, x, mean, rstd, gamma, dx, dgamma, dbeta, wsg,
              wsb, sh1g, sh1b, sh2g, sh2b, kind)


def device_tiling(t: GroupNormBackwardTiling) -> tuple[Any, ...]:
    return device_form(DeviceTiling, t)


@reruns_on_overflow
def run(t: GroupNormBackwardTiling, spec: SocSpec, dy: np.ndarray, x: np.ndarray, mean: np.ndarray,
        rstd: np.ndarray, gamma: np.ndarray, dx: np.ndarray, dgamma: np.ndarray, dbeta: np.ndarray, ws: np.ndarray,
        checks: bool) -> None:
    """Launch the kernel on arrays already validated (outputs flat or shaped, in the op's dtype)."""
    plan = ub_plan(t, spec).check()
    launch = prepare("group_norm_backward", spec, t, plan, t.block_dim, checks, GM_NAMES, phase_local_ub=True)
    kind = KIND[t.dtype]
    wss = t.work_space_size
    user = ws[SYS_WORKSPACE:SYS_WORKSPACE + 2 * wss * 4].view(np.float32)
    wsg, wsb = user[:wss], user[wss:]
    out_g, out_b = dgamma.reshape(-1), dbeta.reshape(-1)
    # phase 1's atomic adds: into the workspace rows (deterministic, or b16 with N = 2), else into the outputs
    to_ws = t.deterministic or kind != 0
    sh1 = [AtomicTarget(SPLIT_COUNT, wss if to_ws else t.c) for _ in range(2)]
    fp32_stage2 = t.deterministic and kind == 0
    sh2 = [AtomicTarget(SPLIT_COUNT, t.c if fp32_stage2 else 0) for _ in range(2)]
    args = (t.block_dim, launch.arena, launch.plan_array, launch.counters, launch.err, launch.core_checks,
            device_tiling(t), to_gm(dy), to_gm(x), to_gm(mean), to_gm(rstd), to_gm(gamma), gm_out(dx), gm_out(out_g),
            gm_out(out_b), gm_out(wsg), gm_out(wsb), gm_out(sh1[0].shadow), gm_out(sh1[1].shadow),
            gm_out(sh2[0].shadow), gm_out(sh2[1].shadow), kind)
    with host_threads(dy, x, dx):
        run_cores(_cores, t.block_dim, 0, *args)  # a SyncAll after each phase
        run_cores(_cores, t.block_dim, 1, *args)
        if not (kind != 0 and t.n == 1 and not t.deterministic):
            targets = (wsg, wsb) if to_ws else (out_g, out_b)
            for a, target, req in zip(sh1, targets, (t.dgamma_is_require, t.dbeta_is_require), strict=True):
                if req:
                    a.merge_into(target)
        if t.deterministic or kind != 0:
            run_cores(_cores, t.block_dim, 2, *args)
    if fp32_stage2:
        for a, target, req in zip(sh2, (out_g, out_b), (t.dgamma_is_require, t.dbeta_is_require), strict=True):
            if req:
                a.merge_into(target)
    finish(launch, t.workspace_size)


def decomposed(dy: np.ndarray, x: np.ndarray, mean: np.ndarray, rstd: np.ndarray, gamma: np.ndarray, n: int, c: int,
               hxw: int, group: int, mask: tuple[bool, bool, bool]) -> tuple[Any, Any, Any]:
    """What aclnnGroupNormBackward runs where the GroupNormGrad kernel does not (not DAV_2201): l0 ops, each
    rounding its result to the tensors' dtype (fp32 or fp16), emulated op by op on whole tensors.

    - dx: Mul(dy, γ), then BatchNorm training backward (BNTrainingUpdateGrad + BNTrainingReduceGrad, fp32 inside)
      over [1, N·G, D] with weight 1, the group mean, and var = Sub(Div(1, Mul(rstd, rstd)), 1e-5), from which
      BatchNorm takes invstd = 1/sqrt(var + 1e-5) again.
    - dgamma: Mul(dy, Mul(Sub(x, mean), rstd)), ReduceSum over HxW, then over N.
    - dbeta: ReduceSum of dy over HxW, then over N.

    The ReduceSums accumulate in fp32 (numpy's pairwise order, not the TBE ops' own) and round once.
    """
    cg = c // group
    dy3, x3 = dy.reshape(n, c, hxw), x.reshape(n, c, hxw)
    m_c = np.repeat(mean.reshape(n, group), cg, axis=1)[:, :, None]
    r_c = np.repeat(rstd.reshape(n, group), cg, axis=1)[:, :, None]
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):  # inf and NaN are what the NPU gives
        return _decomposed_ops(dy3, x3, mean, rstd, gamma, m_c, r_c, n, c, hxw, group, mask, dy.shape)


def _decomposed_ops(dy3: np.ndarray, x3: np.ndarray, mean: np.ndarray, rstd: np.ndarray, gamma: np.ndarray,
                    m_c: np.ndarray, r_c: np.ndarray, n: int, c: int, hxw: int, group: int,
                    mask: tuple[bool, bool, bool], shape: tuple[int, ...]) -> tuple[Any, Any, Any]:
    dt, f32, cg = dy3.dtype, np.float32, c // group
    dx = dgamma = dbeta = None
    if mask[0]:
        dyg = (dy3 * gamma.reshape(1, c, 1)).astype(dt)
        var = (np.ones_like(rstd) / (rstd * rstd).astype(dt)).astype(dt)
        var = (var - dt.type(DX_EPS)).astype(dt).reshape(n * group, 1).astype(f32)
        invstd = f32(1) / np.sqrt(var + f32(DX_EPS))
        g_dy = dyg.reshape(n * group, -1).astype(f32)
        g_x = x3.reshape(n * group, -1).astype(f32)
        xc = g_x - mean.reshape(n * group, 1).astype(f32)
        m = f32(cg * hxw)
        diff_scale = np.sum(g_dy * xc * invstd, axis=1, dtype=f32, keepdims=True)
        diff_offset = np.sum(g_dy, axis=1, dtype=f32, keepdims=True)
        dx = (invstd * (g_dy - diff_offset / m - xc * invstd * diff_scale / m)).astype(dt).reshape(shape)
    if mask[1]:
        xhat = ((x3 - m_c).astype(dt) * r_c).astype(dt)
        prod = (dy3 * xhat).astype(dt)
        dgamma = np.sum(np.sum(prod, axis=2, dtype=f32).astype(dt), axis=0, dtype=f32).astype(dt)
    if mask[2]:
        dbeta = np.sum(np.sum(dy3, axis=2, dtype=f32).astype(dt), axis=0, dtype=f32).astype(dt)
    return dx, dgamma, dbeta


def group_norm_backward(grad_out: Any, input: Any, mean: Any, rstd: Any, gamma: Any, N: int, C: int,  # noqa: N803
                        HxW: int, group: int, output_mask: Any = (True, True, True), *,  # noqa: N803
                        soc: str | SocSpec = DEFAULT_SOC, tiling: GroupNormBackwardTiling | None = None,
                        checks: bool | None = False, out: tuple[Any, Any, Any] | None = None
                        ) -> tuple[np.ndarray | None, np.ndarray | None, np.ndarray | None]:
    """aclnnGroupNormBackward: ``(grad_input, grad_gamma, grad_beta)``, each None where ``output_mask`` is False.

    grad_input has input's shape, grad_gamma and grad_beta gamma's shape ([C] when gamma is None, which means
    ones); all in grad_out's dtype. mean and rstd hold N·group values. On 910B/910_93 the tiled kernel runs
    (``tiling`` runs a hand-made GroupNormBackwardTiling, checked first; ``checks=True`` is checked mode);
    on the other SoCs aclnn's decomposition does (:func:`decomposed`). ``out`` = three arrays (or Nones) to
    write into. Errors raise :class:`tilesim.AclnnError`; nothing is written on error. Empty inputs return
    without computing, as aclnn does: arrays passed in ``out`` are left as they are, new ones are zeros.
    """
    spec = get_soc(soc)
    check_args(grad_out, input, mean, rstd, gamma, N, C, HxW, group, output_mask, None, spec)
    mask = tuple(bool(m) for m in output_mask)
    dtype = dtype_name(grad_out)
    s_gamma = shape_of(gamma) if gamma is not None else (C,)
    shapes = (shape_of(input), s_gamma, s_gamma)
    names = ("gradInput", "gradGammaOut", "gradBetaOut")
    if N * C * HxW == 0:
        if tiling is not None:
            raise invalid("tiling", "empty inputs launch no kernel")
        given = [out is not None and out[i] is not None for i in range(3)]
        return tuple(None if not mask[i] else output(out, i, names[i], shapes[i], dtype) if given[i]
                     else np.zeros(shapes[i], NUMPY_DTYPE[dtype]) for i in range(3))
    t = None
    if spec.arch == 220:
        official = make_tiling(grad_out, input, mean, rstd, gamma, N, C, HxW, group, mask, soc=spec)
        t = official
        if tiling is not None:
            check_tiling(tiling, official, spec)
            t = tiling
    elif tiling is not None:
        raise invalid("tiling", f"{spec.name} does not run the GroupNormGrad kernel (DAV_2201 only): aclnn "
                                "decomposes the op there, so there is no tiling to choose")
    res = [output(out, i, names[i], shapes[i], dtype) if mask[i] else None for i in range(3)]
    execute(t, spec, grad_out, input, mean, rstd, gamma, N, C, HxW, group, mask, res,
            workspace(t.workspace_size) if t is not None else None, checks_default(checks))
    return tuple(res)


def execute(t: GroupNormBackwardTiling | None, spec: SocSpec, grad_out: Any, input: Any, mean: Any, rstd: Any,
            gamma: Any, N: int, C: int, HxW: int, group: int, mask: tuple[bool, bool, bool],  # noqa: N803
            res: list[np.ndarray | None], ws: np.ndarray | None, checks: bool) -> None:
    """Compute into ``res`` (the three outputs, None where masked off), arguments already validated: the
    kernel with tiling ``t`` on ``ws``, or the decomposition when ``t`` is None. In checked mode the kernel
    writes temporaries, copied into ``res`` only when it ran clean."""
    dt = NUMPY_DTYPE[dtype_name(grad_out)]
    g = gamma if gamma is not None else np.ones(C, dt)
    if t is None:
        vals = decomposed(*(np.asarray(a) for a in (grad_out, input, mean, rstd, g)), N, C, HxW, group, mask)
        for r, v in zip(res, vals, strict=True):
            if r is not None:
                r[...] = v.reshape(r.shape)
        return
    targets = write_targets(res, checks, (grad_out, input, mean, rstd, gamma))
    dgamma, dbeta = (v if v is not None else np.empty(C, dt) for v in targets[1:])  # masked off: computed, dropped
    run(t, spec, grad_out, input, mean, rstd, g, targets[0] if mask[0] else np.empty(0, dt), dgamma, dbeta, ws,
        checks)
    copy_back(res, targets)
