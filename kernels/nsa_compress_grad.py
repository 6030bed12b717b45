"""aclnnNsaCompressGrad: the ops-transformer kernel (``attention/nsa_compress_grad/op_kernel/nsa_compress_grad.h``) as
device code on tilesim, and the op API.

The kernel holds one TBuf of the whole UB and carves it with GetWithOffset, as here: cmpGrad, input and the
broadcast weight, three fp32 areas of maxHeadNumInUb·D, each with its T view in its upper half; tmpx and a tmp
buffer in the 24 KiB kept at the end.
- Phase 0 (SetWsToZero): each core zeroes its weight-grad slice of the workspace, and its (t, n) rows of the fp32
  inputGrad workspace when windows overlap (of inputGrad itself when they do not). SyncAll.
- Phase 1 (Process): the core's windows in order; per head group dout (widened, broadcast over the rows a pass
  takes), then per pass of window rows: input and weight in, dW partials (input·dout summed over D by
  BlockReduceSum and WholeReduceSum) atomic-added to the core's slice, dX = weight·dout atomic-added to the
  workspace (overlap) or cast and written. The atomic adds into the shared inputGrad workspace are emulated by
  window parity: windows of one parity w mod ⌈blockSize/stride⌉ never meet, so those of parity 0 add into the
  workspace itself and those of parity r > 0 into shadow row r − 1, and the rows are added in order after the
  phase: one order the NPU's adds may take, whatever the host threads do. (Parity 0 going first, onto the zeroed
  workspace, gives the bits of a shadow row of its own: 0 + a = a.)
- Phase 2 (MoveResult, after SyncAll): the weight grad is summed deterministically (16-element column chunks per
  core, the cores' slices added by a pairwise halving tree, cast); overlapping inputGrad is cast and moved.
Casts: CAST_RINT for bf16, CAST_NONE for fp16 (both round to nearest even).
"""

from __future__ import annotations

import math
from collections import namedtuple
from dataclasses import fields
from typing import Any

import numpy as np

from tilesim.cast import CAST_NONE, CAST_RINT, KIND_BF16, elem_size
from tilesim.datamove import atomic_add_pad_out, data_copy_pad, data_copy_pad_out, init_output
from tilesim.device import at, gm_tensor, make_core, slot
from tilesim.errors import tiling_error
from tilesim.jit import njit
from tilesim.launch import finish, host_threads, prepare, reruns_on_overflow, run_cores, workspace, zeros
from tilesim.memo import by_identity
from tilesim.reduce import block_reduce_sum, whole_reduce_sum_to
from tilesim.soc import DEFAULT_SOC, SocSpec, get_soc
from tilesim.ub import UbPlan, shared_plan
from tilesim.vector import add, broadcast_col, broadcast_row, cast_from_f32, cast_to_f32, duplicate, mul
from tiling.common import dtype_name, shape_of
from tiling.nsa_compress_grad import SYS_WORKSPACE, UB_PRESERVE, NsaCompressGradTiling
from tiling.nsa_compress_grad import nsa_compress_grad as make_tiling

from .common import KIND, checks_default, copy_back, gm_out, output, to_gm, write_targets

GM_NAMES = ["outputGrad", "input", "weight", "inputGrad", "weightGrad", "workspace (weight grad)",
            "workspace (input grad)", "inputGrad (atomic)"]
UB = 0  # the kernel's one TBuf
TMPX_BYTES = 8 * 1024

# The tiling plus the kernel's derived values, as Numba sees them.
DeviceTiling = namedtuple("DeviceTiling", [f.name for f in fields(NsaCompressGradTiling)]
                          + ["max_head", "n_rows_once", "n_head_once", "overlap", "shadows"])


@by_identity
def device_tiling(t: NsaCompressGradTiling) -> Any:
    """The tiling and the kernel's derived values as the kernel takes them, built once per tiling."""
    return DeviceTiling(*(getattr(t, f.name) for f in fields(t)), t.max_head_num_in_ub, t.n_rows_once,
                        t.n_head_once, int(t.is_overlap), shadows(t))


def shadows(t: NsaCompressGradTiling) -> int:
    """Windows that can cover one token: ⌈blockSize / stride⌉."""
    return -(-t.block_size // t.block_stride)


@njit(cache=True)
def _cast_out(core, dst, src, n, kind):
    """CastByCondition's cast: fp16 CAST_NONE, bf16 CAST_RINT."""
    cast_from_f32(core, dst, src, n, kind, CAST_RINT if kind == KIND_BF16 else CAST_NONE)


@njit(cache=True, inline="always")
def _zero(core, t, g_wsw, g_wsx, g_dx):
    """SetWsToZero: this core's weight-grad slice; its (t, n) rows of the inputGrad workspace or of inputGrad."""
    c, d = core.idx, t.dim_of_head
    ub = slot(core, UB, 0)
    nw = t.block_size * t.num_of_head
    duplicate(core, ub, 0.0, nw)
    data_copy_pad_out(core, g_wsw, c * nw, ub, 1, nw, nw)
    h0, hn = _heads(t, c)
    if t.overlap:
        duplicate(core, at(ub, 4 * t.max_head * d), 0.0, t.max_head * d)
        for k in range((hn + t.max_head - 1) // t.max_head):
            rows = min(t.max_head, hn - k * t.max_head)
            data_copy_pad_out(core, g_wsx, (h0 + k * t.max_head) * d, at(ub, 4 * t.max_head * d), 1, rows * d,
                              rows * d)
    else:
        init_output(core, g_dx, h0 * d, hn * d, 0)


@njit(cache=True)
def _heads(t, c):
    base, rem = t.head_to_process, t.head_remainder
    return base * c + min(c, rem), base + (1 if c < rem else 0)


@njit(cache=True, inline="always")
def _dot_over_d(core, tmpx, x, groups, d):
    """ComputeWtGrad's sums over D of ``groups`` rows: BlockReduceSum of each 64-lane chunk into tmpx at a row
    pitch of (⌊D/64⌋ + 1) blocks, then WholeReduceSum over the D/8 block sums of each row into tmpx[row]."""
    pitch = (d // 64 + 1) * 8
    for g in range(groups):
        block_reduce_sum(core, at(tmpx, 4 * g * pitch), at(x, 4 * g * d), d // 8)
    for g in range(groups):
        whole_reduce_sum_to(core, at(tmpx, 4 * g), at(tmpx, 4 * g * pitch), d // 8)


@njit(cache=True, inline="always")
def _process(core, t, cum, g_dy, g_x, g_w, g_dx, g_wsw, g_wsx, shadow, kind):
    """Process: the core's windows in order, head groups, passes of rows."""
    c, n, d, bs, st = core.idx, t.num_of_head, t.dim_of_head, t.block_size, t.block_stride
    mi = t.max_head * d  # maxInputNum
    ub = slot(core, UB, 0)
    cmp, inp, wb = ub, at(ub, 4 * mi), at(ub, 8 * mi)
    cmp_hf, inp_hf = at(ub, 2 * mi), at(ub, 4 * mi + 2 * mi)
    calc = t.ub_max_size - UB_PRESERVE
    tmpx = at(ub, calc)
    w_hf, w_f32 = at(ub, calc - 2 * t.max_head), at(ub, calc - 4 * t.max_head)
    base, rem = t.num_of_block // t.block_dim, t.num_of_block % t.block_dim
    first = base * c + min(c, rem)
    count = base + (1 if c < rem else 0)
    row = n * d
    # calculateProcessInfo: the batch and token offset of the first window
    blk0, tok0, b = 0, 0, 0
    prev = 0
    for b in range(cum.size):
        length = cum[b] - prev
        nb = 0 if length < bs else (length - bs) // st + 1
        if first < blk0 + nb:
            break
        blk0 += nb
        tok0 += length
        prev = cum[b]
    length = cum[b] - prev
    nb = 0 if length < bs else (length - bs) // st + 1
    for blc in range(first, first + count):
        while blc >= blk0 + nb:  # the next batch with windows
            blk0 += nb
            tok0 += length
            prev = cum[b]
            b += 1
            length = cum[b] - prev
            nb = 0 if length < bs else (length - bs) // st + 1
        start = tok0 + (blc - blk0) * st  # first token of the window
        for h0 in range(0, n, t.n_head_once):
            heads = min(t.n_head_once, n - h0)
            size = heads * d
            data_copy_pad(core, cmp_hf, g_dy, blc * row + h0 * d, 1, size, size, 0)  # CopyInCmpGrad
            cast_to_f32(core, cmp, cmp_hf, size, kind)
            if t.n_rows_once > 1:
                broadcast_row(core, cmp, cmp, t.n_rows_once, size)
            for r0 in range(0, bs, t.n_rows_once):
                rows = min(t.n_rows_once, bs - r0)
                total = size * rows
                x_off = (start + r0) * row + h0 * d
                w_off = r0 * n + h0
                data_copy_pad(core, inp_hf, g_x, x_off, 1, total, total, 0)  # CopyInInput
                data_copy_pad(core, w_hf, g_w, w_off, 1, heads * rows, heads * rows, 0)  # CopyInWt
                cast_to_f32(core, inp, inp_hf, total, kind)  # ComputeWtGrad
                mul(core, inp, inp, cmp, total)
                _dot_over_d(core, tmpx, inp, heads * rows, d)
                atomic_add_pad_out(core, g_wsw, w_off + bs * n * c, tmpx, heads * rows)  # CopyOutWtGrad
                cast_to_f32(core, w_f32, w_hf, heads * rows, kind)  # ComputeInputGrad
                broadcast_col(core, wb, w_f32, heads * rows, d)
                mul(core, wb, wb, cmp, total)
                if t.overlap:  # CopyOutInputGrad: atomic add into the fp32 workspace (or this window's shadow row)
                    par = blc % t.shadows
                    if par == 0:
                        atomic_add_pad_out(core, g_wsx, x_off, wb, total)
                    else:
                        atomic_add_pad_out(core, shadow, (par - 1) * (cum[cum.size - 1] * row) + x_off, wb, total)
                else:
                    _cast_out(core, wb, wb, total, kind)
                    data_copy_pad_out(core, g_dx, x_off, wb, 1, total, total)


@njit(cache=True, inline="always")
def _sum_weight_grad(core, t, g_wsw, g_dw, kind):
    """DeterministicComputeSumWtGrad: 16-element chunks of the bs·N columns per core; the cores' rows added by a
    pairwise halving tree (an odd row left over is carried as the extra line), cast, written."""
    c, cores = core.idx, t.block_dim
    total = t.block_size * t.num_of_head
    base, rem = (total // 16) // cores, (total // 16) % cores
    start = (base * c + min(c, rem)) * 16
    ln = (base + (1 if c < rem else 0)) * 16
    if ln == 0:
        return
    buf = slot(core, UB, 0)
    data_copy_pad(core, buf, g_wsw, start, cores, ln, total, 0)
    lines, extra = cores, cores + 1
    while lines > 1 or 1 < extra < cores + 1:
        half = lines // 2
        if lines % 2 == 0:
            add(core, buf, buf, at(buf, 4 * half * ln), half * ln)
        else:
            if lines > 1:
                add(core, buf, buf, at(buf, 4 * half * ln), half * ln)
            if extra <= cores:
                add(core, at(buf, 4 * half * ln), at(buf, 4 * (lines - 1) * ln), at(buf, 4 * (extra - 1) * ln), ln)
                extra = half + 1
            else:
                extra = lines
        lines = half
    _cast_out(core, buf, buf, ln, kind)
    data_copy_pad_out(core, g_dw, start, buf, 1, ln, ln)


@njit(cache=True, inline="always")
def _move_input_grad(core, t, g_wsx, g_dx, kind):
    """MoveInputGrad: the core's (t, n) rows of the fp32 workspace, cast, to inputGrad, in maxHead-row chunks
    through the ping and pong areas."""
    d, mi = t.dim_of_head, t.max_head * t.dim_of_head
    ub = slot(core, UB, 0)
    h0, hn = _heads(t, core.idx)
    for k in range((hn + t.max_head - 1) // t.max_head):
        rows = min(t.max_head, hn - k * t.max_head)
        buf = at(ub, 4 * mi) if k % 2 == 0 else at(ub, 8 * mi)
        off = (h0 + k * t.max_head) * d
        data_copy_pad(core, buf, g_wsx, off, 1, rows * d, rows * d, 0)
        _cast_out(core, buf, buf, rows * d, kind)
        data_copy_pad_out(core, g_dx, off, buf, 1, rows * d, rows * d)


@njit(cache=True, inline="always")  # compiled once, inside _cores
def _core(phase, c, arena, plan, cnt, err, checks, t, cum, dy, x, w, dx, dw, wsw, wsx, shadow, kind):
    core = make_core(c, t.block_dim, arena, plan, cnt, err, checks)
    isz = elem_size(kind)
    g_dy, g_x, g_w = gm_tensor(0, dy, isz), gm_tensor(1, x, isz), gm_tensor(2, w, isz)
    g_dx, g_dw = gm_tensor(3, dx, isz), gm_tensor(4, dw, isz)
    g_wsw, g_wsx, g_sh = gm_tensor(5, wsw, 4), gm_tensor(6, wsx, 4), gm_tensor(7, shadow, 4)
    if phase == 0:
        _zero(core, t, g_wsw, g_wsx, g_dx)
    elif phase == 1:
        _process(core, t, cum, g_dy, g_x, g_w, g_dx, g_wsw, g_wsx, g_sh, kind)
    else:
        _sum_weight_grad(core, t, g_wsw, g_dw, kind)
        if t.overlap:
            _move_input_grad(core, t, g_wsx, g_dx, kind)


@njit(cache=True, nogil=True, host=True)
def _cores(first, last, phase, arena, plan, cnt, err, checks, t, cum, dy, x, w, dx, dw, wsw, wsx, shadow, kind):
    t = DeviceTiling(*t)  # a plain tuple from the host: see tiling.common.device_form
    for c in range(first, last):
        _core(phase, c, arena, plan, cnt, err, checks, t, cum, dy, x, w, dx, dw, wsw, wsx, shadow, kind)


@njit(cache=True, nogil=True, host=True)
def _merge_shadows(first, last, shadow, ws, k):
    """The shadowed atomic adds into the inputGrad workspace, in window-parity order at every address (elements
    ``first .. last - 1``; :func:`tilesim.launch.run_cores` splits the range over the host threads)."""
    n = ws.size
    for c0 in range(first, last, 1024):  # chunks that stay in L1 while each row is added, in row order
        c1 = min(c0 + 1024, last)
        w = ws[c0:c1]
        for r in range(k):
            s = shadow[r * n + c0:r * n + c1]
            for j in range(c1 - c0):
                w[j] += s[j]


@shared_plan
def ub_plan(t: NsaCompressGradTiling, soc: str | SocSpec = DEFAULT_SOC) -> UbPlan:
    """The kernel's one TBuf of ubMaxSize bytes, carved on the device."""
    plan = UbPlan(get_soc(soc).ub_size)
    plan.add("ub (TBuf)", t.ub_max_size)
    return plan


@reruns_on_overflow
def run(t: NsaCompressGradTiling, spec: SocSpec, output_grad: np.ndarray, input: np.ndarray,  # noqa: A002
        weight: np.ndarray, act_seq_len: Any, input_grad: np.ndarray, weight_grad: np.ndarray, ws: np.ndarray,
        checks: bool) -> None:
    """Launch the three phases (SyncAll between them) on validated arrays."""
    plan = ub_plan(t, spec).check()
    launch = prepare("nsa_compress_grad", spec, t, plan, t.block_dim, checks, GM_NAMES, phase_local_ub=True)
    kind = KIND[dtype_name(input)]
    dt = device_tiling(t)
    nw = t.block_size * t.num_of_head * t.block_dim
    tnd = math.prod(input.shape)
    wsw = ws[SYS_WORKSPACE:SYS_WORKSPACE + 4 * nw].view(np.float32)
    wsx = ws[SYS_WORKSPACE + 4 * nw:SYS_WORKSPACE + 4 * nw + 4 * tnd].view(np.float32)
    cum = np.asarray(act_seq_len, np.int64).reshape(-1)
    with host_threads(output_grad, input, input_grad):
        shadow = zeros("nsa_compress_grad shadows", (dt.shadows - 1) * tnd if t.is_overlap else 1)
        args = (tuple(dt), cum, to_gm(output_grad), to_gm(input), to_gm(weight), gm_out(input_grad),
                gm_out(weight_grad), gm_out(wsw), gm_out(wsx), gm_out(shadow), kind)
        for phase in range(3):
            run_cores(_cores, t.block_dim, phase, launch.arena, launch.plan_array, launch.counters, launch.err,
                      launch.core_checks, *args)
            if phase == 1 and t.is_overlap:
                run_cores(_merge_shadows, wsx.size, shadow, wsx, dt.shadows - 1)
    finish(launch, t.workspace_size)


def nsa_compress_grad(output_grad: Any, input: Any, weight: Any, act_seq_len: Any,  # noqa: A002
                      compress_block_size: int, compress_stride: int, act_seq_len_type: int = 0,
                      layout: str = "TND", *, soc: str | SocSpec = DEFAULT_SOC,
                      tiling: NsaCompressGradTiling | None = None, checks: bool | None = False,
                      out: tuple[np.ndarray | None, np.ndarray | None] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """aclnnNsaCompressGrad: ``(input_grad, weight_grad)`` in the inputs' dtype (fp16 or bf16), the gradients of
    the NSA compress forward (``kernels.reference.nsa_compress``), computed by the tiled kernel.

    ``tiling`` runs a tiling made with ``tiling.nsa_compress_grad(..., core_num=...)``; ``checks=True`` runs
    checked mode; ``out`` writes into existing arrays. Errors raise :class:`tilesim.AclnnError`; nothing is
    written on error.
    """
    spec = get_soc(soc)
    official = make_tiling(output_grad, input, weight, act_seq_len, compress_block_size, compress_stride,
                           act_seq_len_type, layout, soc=spec)
    t = official
    if tiling is not None:
        t = make_tiling(output_grad, input, weight, act_seq_len, compress_block_size, compress_stride,
                        act_seq_len_type, layout, soc=spec, core_num=tiling.block_dim)
        if tiling != t:
            raise tiling_error("tiling", "a hand-made tiling may change only the core count: make it with "
                                         "tiling.nsa_compress_grad(..., core_num=...)")
    dt = dtype_name(input)
    dx = output(out, 0, "inputGrad", shape_of(input), dt)
    dw = output(out, 1, "weightGrad", shape_of(weight), dt)
    checks = checks_default(checks)
    targets = write_targets((dx, dw), checks, (output_grad, input, weight))
    run(t, spec, output_grad, input, weight, act_seq_len, *targets, workspace(t.workspace_size), checks)
    copy_back((dx, dw), targets)
    return dx, dw
