"""aclnnSwiGluGrad: the ops-nn kernel (``swi_glu_grad_single.hpp`` over ``swi_glu_grad_float.hpp`` /
``swi_glu_grad_bf16.hpp``, tiles dealt by ``glu_tiling_kernel.hpp``) as device code on tilesim, and the op API.

x is [rowLen, 2·colLen] in GM: A is columns [0, colLen) and B columns [colLen, 2·colLen) of every row; yGrad is
[rowLen, colLen]; the output has x's layout (dA where A was, dB where B was). Each core runs tiles
``idx, idx + blockDim, ...``; per tile CopyIn (rows of A and of B are strided reads of x: DataCopy with a
srcStride when colLen is 32 B aligned, DataCopyPad with rows landing 32 B apart otherwise), Compute (fp32
vector instructions in the kernel's order, σ(A) = 1 / (1 + exp(−A))), CopyOut (the same strides, into the
output). b16 is widened exactly and rounded once at the end: CAST_RINT on 910B/910_93, CAST_NONE (also round
to nearest even for fp32 to fp16) on 310P. There is no cross-core reduction: the op is deterministic.
"""

from __future__ import annotations

from collections import namedtuple
from dataclasses import fields
from typing import Any

import numpy as np

from tilesim.cast import CAST_NONE, CAST_RINT, elem_size
from tilesim.datamove import data_copy_pad, data_copy_pad_out, data_copy_rows, data_copy_rows_out
from tilesim.device import gm_tensor, make_core, slot
from tilesim.jit import njit
from tilesim.launch import finish, host_threads, prepare, reruns_on_overflow, run_cores, workspace
from tilesim.soc import DEFAULT_SOC, SocSpec, get_soc
from tilesim.vector import add, adds, cast_from_f32, cast_to_f32, div, duplicate, exp, mul, muls
from tiling.common import device_form, dtype_name, shape_of
from tiling.swiglu_grad import (
    A_TMP,
    L_TMP,
    OUT_TMP,
    SIG,
    TMP,
    SwiGluGradTiling,
    check_tiling,
    ub_plan,
)
from tiling.swiglu_grad import A as Q_A
from tiling.swiglu_grad import B as Q_B
from tiling.swiglu_grad import L as Q_L
from tiling.swiglu_grad import M as Q_M
from tiling.swiglu_grad import N as Q_N
from tiling.swiglu_grad import swiglu_grad as make_tiling

from .common import KIND, checks_default, copy_back, gm_out, output, to_gm, write_targets

# GM tensor tags, for checked-mode reports.
GM_NAMES = ["yGrad", "x", "out"]
G_DY, G_X, G_OUT = range(3)
BETA = -1.0  # InitGmBuffer sets beta = -1: σ's Muls by beta, dA's Muls by -beta

DeviceTiling = namedtuple("DeviceTiling", [f.name for f in fields(SwiGluGradTiling)])


@njit(cache=True)
def _sigmoid(core, sig, tmp, a, n):
    """ComputeSigLocal: σ = 1 / (exp(beta·A) + 1), the division by a Duplicate of ones."""
    muls(core, sig, a, BETA, n)
    exp(core, sig, sig, n)
    adds(core, sig, sig, 1.0, n)
    duplicate(core, tmp, 1.0, n)
    div(core, sig, tmp, sig, n)


@njit(cache=True)
def _d_a_factor(core, m, sig, tmp, a, n):
    """m = σ + A·σ·(1 − σ): dA's factor before yGrad and B, in the kernel's instruction order."""
    muls(core, tmp, sig, -1.0, n)
    adds(core, tmp, tmp, 1.0, n)
    mul(core, m, sig, tmp, n)
    mul(core, m, m, a, n)
    muls(core, m, m, -BETA, n)
    add(core, m, m, sig, n)


@njit(cache=True, inline="always")
def _compute_f32(core, k, n):
    """SwiGluGradVector::Compute: fp32 in the queue buffers; dB = σ·A·yGrad, dA = m·B·yGrad."""
    a, b, dy = slot(core, Q_A, k), slot(core, Q_B, k), slot(core, Q_L, k)
    da, db = slot(core, Q_M, k), slot(core, Q_N, k)
    sig, tmp = slot(core, SIG, 0), slot(core, TMP, 0)
    _sigmoid(core, sig, tmp, a, n)
    mul(core, db, sig, a, n)
    mul(core, db, db, dy, n)
    _d_a_factor(core, da, sig, tmp, a, n)
    mul(core, da, da, b, n)
    mul(core, da, da, dy, n)


@njit(cache=True, inline="always")
def _compute_b16(core, k, n, kind, mode):
    """SwiGluGradBF16::Compute: widen A and yGrad, compute and round dB; widen B into A's fp32 buffer, then dA
    (yGrad before B here, unlike the fp32 kernel)."""
    a16, b16, dy16 = slot(core, Q_A, k), slot(core, Q_B, k), slot(core, Q_L, k)
    da16, db16 = slot(core, Q_M, k), slot(core, Q_N, k)
    sig, tmp = slot(core, SIG, 0), slot(core, TMP, 0)
    a, dy, out = slot(core, A_TMP, 0), slot(core, L_TMP, 0), slot(core, OUT_TMP, 0)
    cast_to_f32(core, a, a16, n, kind)
    _sigmoid(core, sig, tmp, a, n)
    mul(core, out, sig, a, n)
    cast_to_f32(core, dy, dy16, n, kind)
    mul(core, out, out, dy, n)
    cast_from_f32(core, db16, out, n, kind, mode)
    _d_a_factor(core, out, sig, tmp, a, n)
    cast_to_f32(core, a, b16, n, kind)
    mul(core, out, out, dy, n)
    mul(core, out, out, a, n)
    cast_from_f32(core, da16, out, n, kind, mode)


@njit(cache=True, inline="always")
def _tile(core, t, k, tile, dy, x, out, kind, mode):
    """One tile: CaclOneTileParam, CopyIn, Compute, CopyOut (SWIGLU_SINGLE_PROCESS_TILE and its unaligned form)."""
    col, br, bc = t.col_len, t.base_row_len, t.base_col_len
    col_tiles = (col + bc - 1) // bc
    r_tile, c_tile = tile // col_tiles, tile % col_tiles
    rows = br if r_tile < t.row_len // br else t.row_len % br
    cols = bc if c_tile < col // bc else col % bc
    off_a = r_tile * br * 2 * col + c_tile * bc
    off_b = off_a + col
    off_dy = r_tile * br * col + c_tile * bc
    a, b, l = slot(core, Q_A, k), slot(core, Q_B, k), slot(core, Q_L, k)
    da, db = slot(core, Q_M, k), slot(core, Q_N, k)
    if t.is_32b_aligned == 1:
        data_copy_rows(core, a, x, off_a, rows, cols, 2 * col)
        data_copy_rows(core, l, dy, off_dy, rows, cols, col)
        data_copy_rows(core, b, x, off_b, rows, cols, 2 * col)
        n = rows * cols
    else:
        data_copy_pad(core, a, x, off_a, rows, cols, 2 * col, 0)
        data_copy_pad(core, l, dy, off_dy, rows, cols, col, 0)
        data_copy_pad(core, b, x, off_b, rows, cols, 2 * col, 0)
        m = 32 // x.isz
        n = rows * ((cols + m - 1) // m * m)
    if kind == 0:
        _compute_f32(core, k, n)
    else:
        _compute_b16(core, k, n, kind, mode)
    if t.is_32b_aligned == 1:
        data_copy_rows_out(core, out, off_a, da, rows, cols, 2 * col)
        data_copy_rows_out(core, out, off_b, db, rows, cols, 2 * col)
    else:
        data_copy_pad_out(core, out, off_a, da, rows, cols, 2 * col)
        data_copy_pad_out(core, out, off_b, db, rows, cols, 2 * col)


@njit(cache=True, inline="always")  # compiled once, inside _cores
def _core_tile(c, k, tile, block_dim, arena, plan, cnt, err, checks, t, dy, x, out, kind, mode):
    """Core c's k-th tile (``tile`` of the whole op: the kernel's loop over tiles c, c + blockDim, ...)."""
    core = make_core(c, block_dim, arena, plan, cnt, err, checks)
    isz = elem_size(kind)
    g_dy, g_x, g_out = gm_tensor(G_DY, dy, isz), gm_tensor(G_X, x, isz), gm_tensor(G_OUT, out, isz)
    _tile(core, t, k, tile, g_dy, g_x, g_out, kind, mode)


@njit(cache=True, nogil=True, host=True)
def _cores(first, last, block_dim, arena, plan, cnt, err, checks, t, dy, x, out, kind, mode):
    """Cores ``first .. last - 1``. The cores share no GM they write and no tile reads UB an earlier tile wrote, so
    every order gives the NPU's bits and counters. A fast launch goes step by step, the k-th tile of each core in
    turn, then the (k + 1)-th: it reads GM as the cores together do on the NPU, consecutive tiles side by side in
    x and y_grad, where core after core read pieces of one row (512 B in bf16) 16 KiB apart, a stream the host's
    prefetchers could not follow; its cores share the thread's one UB (phase_local_ub), and so does a launch that
    records. A checked launch goes core after core: each core has a UB and a shadow of its own, which stay in the
    host's L2 over its tiles."""
    t = DeviceTiling(*t)  # a plain tuple from the host: see tiling.common.device_form
    col_tiles = (t.col_len + t.base_col_len - 1) // t.base_col_len
    total = (t.row_len + t.base_row_len - 1) // t.base_row_len * col_tiles
    steps, cores = (total + block_dim - 1) // block_dim, last - first
    for i in range(steps * cores):  # one call site of the inlined tile for both orders
        if not checks:  # the fast and the record build (None, 0); the checked build (a bool) when it checks
            k, c = i // cores, first + i % cores
        else:
            k, c = i % steps, first + i // steps
        if c + k * block_dim < total:
            _core_tile(c, k, c + k * block_dim, block_dim, arena, plan, cnt, err, checks, t, dy, x, out, kind, mode)


@reruns_on_overflow
def run(t: SwiGluGradTiling, spec: SocSpec, y_grad: np.ndarray, x: np.ndarray, out: np.ndarray, ws: np.ndarray | None,
        checks: bool) -> None:
    """Launch the kernel on arrays already validated: the device part of the op (``aclnnSwiGluGrad``). The 16 MiB
    workspace the tiling asks for is not touched by the kernel."""
    plan = ub_plan(t, spec).check()
    launch = prepare("swiglu_grad", spec, t, plan, t.block_dim, checks, GM_NAMES, phase_local_ub=True)
    kind = KIND[dtype_name(x)]
    mode = CAST_RINT if spec.arch == 220 else CAST_NONE
    with host_threads(y_grad, x, out):
        run_cores(_cores, t.block_dim, t.block_dim, launch.arena, launch.plan_array, launch.counters, launch.err,
                  launch.core_checks, device_form(DeviceTiling, t), to_gm(y_grad),
                  to_gm(x), gm_out(out), kind, mode)
    finish(launch, t.workspace_size)


def swiglu_grad(y_grad: Any, x: Any, dim: int = -1, *, soc: str | SocSpec = DEFAULT_SOC,
                tiling: SwiGluGradTiling | None = None, checks: bool | None = False,
                out: np.ndarray | None = None) -> np.ndarray:
    """aclnnSwiGluGrad: the gradient of x (x's shape and dtype) for y = silu(A)·B, A and B the first and second
    halves of x along ``dim``, computed by the tiled kernel.

    ``tiling`` runs a TilingData made with ``tiling.swiglu_grad(..., core_num=..., buffer_num=...,
    base_row_len=..., base_col_len=...)`` (checked first); ``checks=True`` runs checked mode; ``out`` writes
    into an existing array. Errors raise :class:`tilesim.AclnnError` with the aclnn status; inputs are never
    modified, and nothing is written on error.
    """
    spec = get_soc(soc)
    official = make_tiling(y_grad, x, dim, soc=spec)
    t = official
    if tiling is not None:
        check_tiling(tiling, official, spec)
        t = tiling
    ub_plan(t, spec).check()
    res = output(None if out is None else (out,), 0, "out", shape_of(x), dtype_name(x))
    checks = checks_default(checks)
    targets = write_targets((res,), checks, (y_grad, x))
    run(t, spec, y_grad, x, targets[0], workspace(t.workspace_size), checks)
    copy_back((res,), targets)
    return res
