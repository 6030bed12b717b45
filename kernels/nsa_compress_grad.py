"""aclnnNsaCompressGrad: the ops-transformer kernel on tilesim's programming model, and the op API.

``NsaCompressGradND<T>`` of ``attention/nsa_compress_grad/op_kernel/nsa_compress_grad.h`` (members declared in
``nsa_compress_grad_base.h``), call for call: ``Init`` (one TBuf of ubMaxSize bytes carved by GetWithOffset, then
SetWsToZero), ``Process``, ``MoveResult``.

- Buffers (InitBuffers): cmpGrad, inputFp32 and weightBrdc, three fp32 areas of maxHeadNumInUb·D floats, each with
  its T view in its upper half (cmpGradHf, inputHf; inputGradHf over weightBrdc); tmpx (8 KiB) and the 16 KiB
  tmpBuffer at the top of the UB the kernel keeps (24 KiB); weightFp32 and weightHf just below that.
- SetWsToZero: Duplicate 0, V_MTE3 (EVENT_ID3), DataCopyPad into this core's weight-grad slice of the workspace;
  with overlapping windows (blockSize > stride) the same for this core's (t, n) rows of the fp32 inputGrad
  workspace, else InitOutput of its rows of inputGrad. SyncAll.
- Process: PresetFlag (MTE3_MTE2 ids 2 and 3, V_MTE2 id 6); the core's windows in order, per head group
  WaitFlag V_MTE2 (6), CopyInCmpGrad (DataCopyPad, MTE2_V (3), Cast CAST_NONE, and with several rows a pass
  PipeBarrier<PIPE_V> and the BroadCast of the row over them), then per pass of window rows CopyInInput (WaitFlag
  MTE3_MTE2 (3), DataCopyPad, SetFlag MTE2_V (3)), CopyInWt (MTE3_MTE2 (2), DataCopyPad, MTE2_V (2)),
  ComputeWtGrad (Cast, Mul, per 64 lanes of D a BlockReduceSum over the rows, a WholeReduceSum of each row's block
  sums, PipeBarrier<PIPE_V> between them; V_MTE3 (3)), CopyOutWtGrad (SetAtomicAdd<float>, DataCopyPad into the
  core's weight-grad slice, SetAtomicNone, MTE3_MTE2 (3)), ComputeInputGrad (MTE2_V (2), Cast, BroadCast along D,
  Mul, CastByCondition when not overlapping; V_MTE3 (2)), CopyOutInputGrad (atomic add into the fp32 inputGrad
  workspace when overlapping, else a copy into inputGrad; MTE3_MTE2 (2)); SetFlag V_MTE2 (6). ClearPresetFlag.
- MoveResult, after SyncAll: DeterministicComputeSumWtGrad (16-element column chunks per core, the cores' slices
  added by a pairwise halving tree of Adds, CastByCondition, V_MTE3 (7), the copy out), and with overlap
  MoveInputGrad (the core's (t, n) rows of the workspace in maxHeadNumInUb-row chunks, ping and pong through
  inputFp32 and weightBrdc, MTE3_MTE2 / MTE2_V / V_MTE3 on ids 0 and 1).

GetSeqLenTarBch reads actSeqLen with GetValue (counted as scalar_access). CastByCondition: fp16 CAST_NONE, bf16
CAST_RINT (both round to nearest even). A pass of more than 255 rows (heads x rows; 8 heads of D = 32 take 256)
gives ComputeWtGrad's BlockReduceSum more than the API's 255 repeats: checked mode reports it. The atomic adds
into the shared fp32 inputGrad workspace land in core order (:mod:`tilesim.machine.atomic`): each window's in
turn, the order of the windows.

Where this differs from ops-transformer: deterministicFlag_ is always on (the class's default; the non-deterministic
MoveWtGrad by core 0 is not emulated); InitOutput and BroadCast are :mod:`tilesim.machine`'s (their UB steps are
not modelled); the kernel runs on every SoC the tiling accepts with the A2 build. Process moves on to the next
sequence with a loop over the sequences without a window (shorter than blockSize): ops-transformer moves on by
one sequence a window (an ``if``), so a core whose windows run past such a sequence would take its next window
from that sequence's first token (a wrong gradient; ``tests/test_nsa_compress_grad.py`` holds such a case). A
core with no window (more cores than windows) reads actSeqLen from sequence 0 in Process, as theirs does
(startBatchIdx_ 0). A core with no 16-element chunk of the weight grad (more cores than chunks) runs
DeterministicComputeSumWtGrad on 0 elements, as theirs does.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from tilesim.tiling.common import dtype_name, shape_of
from tilesim.tiling.nsa_compress_grad import SYS_WORKSPACE, UB_PRESERVE, NsaCompressGradTiling, check_tiling
from tilesim.tiling.nsa_compress_grad import nsa_compress_grad as make_tiling

from tilesim import machine as asc  # AscendC::
from tilesim.core.ub import UbPlan, shared_plan
from tilesim.interop import accepts_torch
from tilesim.jit import njit
from tilesim.runtime.host_threads import workspace
from tilesim.runtime.launcher import kernel, launch
from tilesim.runtime.report import RunReport
from tilesim.soc import DEFAULT_SOC, SocSpec, get_soc

from .common import outputs
from .device import y_round_mode

GM_NAMES = ["outputGrad", "input", "weight", "actSeqLen", "inputGrad", "weightGrad"]
ONE_KILO = 1024
BLOCK_16 = 16
V_MTE3, MTE2_V, MTE3_MTE2, V_MTE2 = (asc.HardEvent.V_MTE3, asc.HardEvent.MTE2_V, asc.HardEvent.MTE3_MTE2,
                                     asc.HardEvent.V_MTE2)


@njit(cache=True)
def _cast_by_condition(dst, src, n, condition):
    """CastByCondition: src narrowed into dst (half CAST_NONE, bfloat16 CAST_RINT) when ``condition``."""
    if condition:
        asc.cast(dst, src, y_round_mode(dst.dtype), n)


@njit(cache=True)
def _seq_len(t, act_seq_len, b):
    """GetSeqLenTarBch: sequence b's length (actSeqLen cumulative unless seqLenType is 1)."""
    if t.seq_len_type == 1 or b == 0:
        return act_seq_len.get_value(b)
    return act_seq_len.get_value(b) - act_seq_len.get_value(b - 1)


@njit(cache=True)
def _blocks(length, bs, st):
    """CompressBlkNum: the windows of a sequence of ``length`` tokens."""
    return 0 if length < bs else (length - bs) // st + 1


@njit(cache=True)
def _sizes(t):
    """InitTilingData's derived sizes: ubCalcSize, maxHeadNumInUb, nRowsOnce, nHeadOnce."""
    calc = t.ub_max_size - UB_PRESERVE
    max_head = calc // t.dim_of_head // 4 // 3 // BLOCK_16 * BLOCK_16
    n = t.num_of_head
    rows_once = min(max_head // n, t.block_size) if max_head >= n else 1
    head_once = n if max_head >= n else n // ((n + max_head - 1) // max_head)
    return calc, max_head, rows_once, head_once


@njit(cache=True)
def _heads(t, c):
    """This core's (t, n) rows of inputGrad for SetWsToZero and MoveInputGrad: (headOffsetCurCore_, headToProcess_)."""
    base, rem = t.head_to_process, t.head_remainder
    return base * c + min(c, rem), base + (1 if c < rem else 0)


@njit(cache=True)
def _set_ws_to_zero(ctx, t, ub8, ws, input_grad, max_head, overlap):
    """SetWsToZero: this core's weight-grad slice, and its rows of the inputGrad workspace (or of inputGrad)."""
    c, d = asc.get_block_idx(ctx), t.dim_of_head
    cmp_grad = ub8.reinterpret_cast(asc.float32)
    wt_grad_num = t.block_size * t.num_of_head
    asc.duplicate(cmp_grad, 0.0, wt_grad_num)
    asc.set_flag(ctx, V_MTE3, 3)
    asc.wait_flag(ctx, V_MTE3, 3)
    asc.data_copy_pad(ws[c * wt_grad_num], cmp_grad, asc.DataCopyExtParams(1, wt_grad_num * 4, 0, 0))
    h0, hn = _heads(t, c)
    if overlap:
        ping = ub8[max_head * d * 4].reinterpret_cast(asc.float32)
        asc.duplicate(ping, 0.0, max_head * d)
        asc.set_flag(ctx, V_MTE3, 3)
        asc.wait_flag(ctx, V_MTE3, 3)
        wsx = ws[wt_grad_num * asc.get_block_num(ctx)]
        copies = (hn + max_head - 1) // max_head
        for k in range(copies):
            heads = hn - k * max_head if k == copies - 1 else max_head
            asc.data_copy_pad(wsx[(h0 + k * max_head) * d], ping, asc.DataCopyExtParams(1, heads * d * 4, 0, 0))
    else:
        asc.init_output(input_grad[h0 * d], hn * d, 0.0)
    asc.sync_all(ctx)


@njit(cache=True)
def _compute_wt_grad(ctx, inp32, inp_hf, cmp_grad, tmpx, size, d):
    """ComputeWtGrad: input widened, times cmpGrad, summed over D per row: BlockReduceSum per 64 lanes (rows as
    repeats, the block sums of a row ⌊D/64⌋ + 1 blocks apart), then WholeReduceSum of each row's D/8 sums."""
    asc.wait_flag(ctx, MTE2_V, 3)
    asc.cast(inp32, inp_hf, asc.CAST_NONE, size)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.mul(inp32, inp32, cmp_grad, size)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    m, rest, rows = d // 64, d % 64, size // d
    for a in range(m):
        asc.block_reduce_sum(tmpx[8 * a], inp32[64 * a], rows, 64, m + 1, 1, d // 8)
        asc.pipe_barrier(ctx, asc.PIPE_V)
    if rest != 0:
        asc.block_reduce_sum(tmpx[8 * m], inp32[64 * m], rows, rest, m + 1, 1, d // 8)
        asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.whole_reduce_sum(tmpx, tmpx, d // 8, rows, 1, 1, m + 1)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.set_flag(ctx, V_MTE3, 3)


@njit(cache=True)
def _compute_input_grad(ctx, wt32, wt_hf, wt_brdc, cmp_grad, in_grad_hf, tmp_buffer, size, d, overlap):
    """ComputeInputGrad: the weights widened, broadcast along D, times cmpGrad, narrowed unless overlapping."""
    asc.wait_flag(ctx, MTE2_V, 2)
    rows = size // d
    asc.cast(wt32, wt_hf, asc.CAST_NONE, rows)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.broadcast(wt_brdc, wt32, (rows, d), (rows, 1), 1, tmp_buffer)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.mul(wt_brdc, wt_brdc, cmp_grad, size)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    _cast_by_condition(in_grad_hf, wt_brdc, size, not overlap)
    asc.set_flag(ctx, V_MTE3, 2)


@njit(cache=True)
def _process(ctx, t, ub8, output_grad, input_, weight, act_seq_len, input_grad, ws, calc, max_head, rows_once,
             head_once, overlap):
    """Process: the core's windows in order, head groups, passes of window rows."""
    c, cores = asc.get_block_idx(ctx), asc.get_block_num(ctx)
    n, d, bs, st = t.num_of_head, t.dim_of_head, t.block_size, t.block_stride
    mi = max_head * d  # maxInputNum
    dt = input_.dtype
    cmp_grad, inp32 = ub8.reinterpret_cast(asc.float32), ub8[mi * 4].reinterpret_cast(asc.float32)
    wt_brdc = ub8[mi * 8].reinterpret_cast(asc.float32)
    cmp_hf, inp_hf = ub8[mi * 2].reinterpret_cast(dt), ub8[mi * 6].reinterpret_cast(dt)
    in_grad_hf = ub8[mi * 8].reinterpret_cast(dt)
    tmpx = ub8[calc].reinterpret_cast(asc.float32)
    tmp_buffer = ub8[calc + 8 * ONE_KILO]
    wt_hf = ub8[calc - max_head * 2].reinterpret_cast(dt)
    wt32 = ub8[calc - max_head * 4].reinterpret_cast(asc.float32)
    wsx = ws[bs * n * cores]
    # calculateProcessInfo: the core's first window, its batch and the batch's first token
    base, rem = t.num_of_block // cores, t.num_of_block % cores
    first = base * c + min(c, rem)
    count = base + (1 if c < rem else 0)
    b, blc0, tok0 = 0, 0, 0  # startBatchIdx_, blcIdxOfStartBatch_, batchOffsetCurCore_: 0 unless found
    cum_blc, cum_tok = 0, 0
    for bidx in range(t.batch_size):
        length = _seq_len(t, act_seq_len, bidx)
        nb = _blocks(length, bs, st)
        if first < cum_blc + nb:
            b, blc0, tok0 = bidx, cum_blc, cum_tok
            break
        cum_blc += nb
        cum_tok += length
    # PresetFlag
    asc.set_flag(ctx, MTE3_MTE2, 2)
    asc.set_flag(ctx, MTE3_MTE2, 3)
    asc.set_flag(ctx, V_MTE2, 6)
    row = n * d
    length = _seq_len(t, act_seq_len, b)
    nb = _blocks(length, bs, st)
    for blc in range(first, first + count):
        while blc >= blc0 + nb:  # the next batch with windows (ops-transformer: if, see the module's docstring)
            b += 1
            blc0 += nb
            tok0 += length
            length = _seq_len(t, act_seq_len, b)
            nb = _blocks(length, bs, st)
        blc_off = (tok0 + (blc - blc0) * st) * row
        for h0 in range(0, n, head_once):
            heads = n - h0 if h0 + head_once > n else head_once
            size = heads * d
            asc.wait_flag(ctx, V_MTE2, 6)
            # CopyInCmpGrad
            asc.data_copy_pad(cmp_hf, output_grad[blc * row + h0 * d], asc.DataCopyExtParams(1, size * 2, 0, 0),
                              asc.DataCopyPadExtParams(False, 0, 0, 0))
            asc.set_flag(ctx, MTE2_V, 3)
            asc.wait_flag(ctx, MTE2_V, 3)
            asc.cast(cmp_grad, cmp_hf, asc.CAST_NONE, size)
            if rows_once > 1:
                asc.pipe_barrier(ctx, asc.PIPE_V)
                asc.broadcast(cmp_grad, cmp_grad, (rows_once, size), (1, size), 0, tmp_buffer)
            for r0 in range(0, bs, rows_once):
                rows = bs - r0 if r0 + rows_once > bs else rows_once
                total = size * rows
                x_off = blc_off + r0 * row + h0 * d
                w_off = r0 * n + h0
                asc.wait_flag(ctx, MTE3_MTE2, 3)  # CopyInInput
                asc.data_copy_pad(inp_hf, input_[x_off], asc.DataCopyExtParams(1, total * 2, 0, 0),
                                  asc.DataCopyPadExtParams(False, 0, 0, 0))
                asc.set_flag(ctx, MTE2_V, 3)
                asc.wait_flag(ctx, MTE3_MTE2, 2)  # CopyInWt
                asc.data_copy_pad(wt_hf, weight[w_off], asc.DataCopyExtParams(1, heads * rows * 2, 0, 0),
                                  asc.DataCopyPadExtParams(False, 0, 0, 0))
                asc.set_flag(ctx, MTE2_V, 2)
                _compute_wt_grad(ctx, inp32, inp_hf, cmp_grad, tmpx, total, d)
                asc.wait_flag(ctx, V_MTE3, 3)  # CopyOutWtGrad (deterministic: the core's slice)
                asc.set_atomic_add(ctx, asc.float32)
                asc.data_copy_pad(ws[w_off + bs * n * c], tmpx, asc.DataCopyExtParams(1, heads * rows * 4, 0, 0))
                asc.set_atomic_none(ctx)
                asc.set_flag(ctx, MTE3_MTE2, 3)
                _compute_input_grad(ctx, wt32, wt_hf, wt_brdc, cmp_grad, in_grad_hf, tmp_buffer, total, d, overlap)
                asc.wait_flag(ctx, V_MTE3, 2)  # CopyOutInputGrad
                if overlap:
                    asc.set_atomic_add(ctx, asc.float32)
                    asc.data_copy_pad(wsx[x_off], wt_brdc, asc.DataCopyExtParams(1, total * 4, 0, 0))
                    asc.set_atomic_none(ctx)
                else:
                    asc.data_copy_pad(input_grad[x_off], in_grad_hf, asc.DataCopyExtParams(1, total * 2, 0, 0))
                asc.set_flag(ctx, MTE3_MTE2, 2)
            asc.set_flag(ctx, V_MTE2, 6)
    # ClearPresetFlag
    asc.wait_flag(ctx, MTE3_MTE2, 2)
    asc.wait_flag(ctx, MTE3_MTE2, 3)
    asc.wait_flag(ctx, V_MTE2, 6)


@njit(cache=True)
def _sum_wt_grad(ctx, t, ub8, ws, weight_grad):
    """DeterministicComputeSumWtGrad: 16-element chunks of the blockSize·N columns per core, the cores' slices
    added by a pairwise halving tree (an odd line left over carried as the extra line), cast, copied out."""
    c, cores = asc.get_block_idx(ctx), asc.get_block_num(ctx)
    total = t.block_size * t.num_of_head
    base, rem = (total // 16) // cores, (total // 16) % cores
    start = (base * c + min(c, rem)) * 16
    ln = (base + (1 if c < rem else 0)) * 16
    buf = ub8.reinterpret_cast(asc.float32)
    asc.data_copy_pad(buf, ws[start], asc.DataCopyExtParams(cores, ln * 4, (total - ln) * 4, 0),
                      asc.DataCopyPadExtParams(False, 0, 0, 0))
    asc.set_flag(ctx, MTE2_V, 7)
    asc.wait_flag(ctx, MTE2_V, 7)
    lines, extra = cores, cores + 1
    while lines > 1 or 1 < extra < cores + 1:
        asc.pipe_barrier(ctx, asc.PIPE_V)
        half = lines // 2
        if lines % 2 == 0:
            asc.add(buf, buf, buf[half * ln], half * ln)
        else:
            if lines > 1:
                asc.add(buf, buf, buf[half * ln], half * ln)
            if extra <= cores:
                asc.pipe_barrier(ctx, asc.PIPE_V)
                asc.add(buf[half * ln], buf[(lines - 1) * ln], buf[(extra - 1) * ln], ln)
                extra = half + 1
            else:
                extra = lines
        lines = half
    asc.pipe_barrier(ctx, asc.PIPE_V)
    out = buf.reinterpret_cast(weight_grad.dtype)
    _cast_by_condition(out, buf, ln, True)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.set_flag(ctx, V_MTE3, 7)
    asc.wait_flag(ctx, V_MTE3, 7)
    asc.data_copy_pad(weight_grad[start], out, asc.DataCopyExtParams(1, ln * 2, 0, 0))


@njit(cache=True)
def _move_input_grad(ctx, t, ub8, wsx, input_grad, max_head):
    """MoveInputGrad: the core's (t, n) rows of the fp32 workspace, cast, to inputGrad, in maxHeadNumInUb-row
    chunks through the ping and pong areas."""
    d, mi = t.dim_of_head, max_head * t.dim_of_head
    h0, hn = _heads(t, asc.get_block_idx(ctx))
    copies = (hn + max_head - 1) // max_head
    asc.set_flag(ctx, MTE3_MTE2, 0)
    asc.set_flag(ctx, MTE3_MTE2, 1)
    pong = 0
    for k in range(copies):
        heads = hn - k * max_head if k == copies - 1 else max_head
        num = heads * d
        off = (h0 + k * max_head) * d
        cur = ub8[mi * 8 if pong else mi * 4].reinterpret_cast(asc.float32)
        asc.wait_flag(ctx, MTE3_MTE2, pong)
        asc.data_copy_pad(cur, wsx[off], asc.DataCopyExtParams(1, num * 4, 0, 0),
                          asc.DataCopyPadExtParams(False, 0, 0, 0))
        asc.set_flag(ctx, MTE2_V, pong)
        asc.wait_flag(ctx, MTE2_V, pong)
        half = cur.reinterpret_cast(input_grad.dtype)
        _cast_by_condition(half, cur, num, True)
        asc.set_flag(ctx, V_MTE3, pong)
        asc.wait_flag(ctx, V_MTE3, pong)
        asc.data_copy_pad(input_grad[off], half, asc.DataCopyExtParams(1, num * 2, 0, 0))
        asc.set_flag(ctx, MTE3_MTE2, pong)
        pong = 1 - pong
    asc.wait_flag(ctx, MTE3_MTE2, 0)
    asc.wait_flag(ctx, MTE3_MTE2, 1)


@kernel
def nsa_compress_grad_kernel(ctx, t, output_grad, input_, weight, act_seq_len, input_grad, weight_grad):
    """``nsa_compress_grad`` (tiling key 0): NsaCompressGradND<T>'s Init, Process and MoveResult."""
    calc, max_head, rows_once, head_once = _sizes(t)
    overlap = t.block_size > t.block_stride
    pipe = asc.TPipe(ctx)
    ub_tbuf = pipe.init_buffer(asc.TBuf(asc.VECCALC), t.ub_max_size)
    ub8 = ub_tbuf.get(asc.uint8)
    ws = asc.get_user_workspace(ctx).reinterpret_cast(asc.float32)
    _set_ws_to_zero(ctx, t, ub8, ws, input_grad, max_head, overlap)
    _process(ctx, t, ub8, output_grad, input_, weight, act_seq_len, input_grad, ws, calc, max_head, rows_once,
             head_once, overlap)
    asc.sync_all(ctx)  # MoveResult
    _sum_wt_grad(ctx, t, ub8, ws, weight_grad)
    if overlap:
        _move_input_grad(ctx, t, ub8, ws[t.block_size * t.num_of_head * asc.get_block_num(ctx)], input_grad,
                         max_head)


@shared_plan
def ub_plan(t: NsaCompressGradTiling, soc: str | SocSpec = DEFAULT_SOC) -> UbPlan:
    """The kernel's one TBuf of ubMaxSize bytes, carved on the device."""
    plan = UbPlan(get_soc(soc).ub_size)
    plan.add("ub_tbuf", t.ub_max_size)
    return plan


def run(t: NsaCompressGradTiling, spec: SocSpec, output_grad: np.ndarray, input: np.ndarray,  # noqa: A002
        weight: np.ndarray, act_seq_len: Any, input_grad: np.ndarray, weight_grad: np.ndarray, ws: np.ndarray,
        checks: bool | None = None, auto_sync: bool | None = None) -> RunReport:
    """Launch the kernel on validated arrays (``ws``: the tiling's workspace, its 16 MiB and the user part)."""
    ub_plan(t, spec).check()
    cum = np.ascontiguousarray(np.asarray(act_seq_len, np.int64).reshape(-1))
    user_ws = np.asarray(ws).reshape(-1).view(np.uint8)[SYS_WORKSPACE:t.workspace_size]
    return launch(nsa_compress_grad_kernel, t, np.ascontiguousarray(output_grad), np.ascontiguousarray(input),
                  np.ascontiguousarray(weight), cum, input_grad, weight_grad, block_dim=t.block_dim, outputs=2,
                  soc=spec, checks=checks, workspace=user_ws, op="nsa_compress_grad", gm_names=GM_NAMES,
                  auto_sync=auto_sync)


@accepts_torch(arrays=("output_grad", "input", "weight"))
def nsa_compress_grad(output_grad: Any, input: Any, weight: Any, act_seq_len: Any,  # noqa: A002
                      compress_block_size: int, compress_stride: int, act_seq_len_type: int = 0,
                      layout: str = "TND", *, soc: str | SocSpec = DEFAULT_SOC,
                      tiling: NsaCompressGradTiling | None = None, checks: bool | None = None,
                      out: tuple[np.ndarray | None, np.ndarray | None] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """aclnnNsaCompressGrad: ``(input_grad, weight_grad)`` in the inputs' dtype (fp16 or bf16), the gradients of
    the NSA compress forward (``kernels.reference.nsa_compress``), computed by the tiled kernel.

    ``tiling`` runs a tiling made with ``tiling.nsa_compress_grad(..., core_num=...)``; ``checks=True`` runs
    checked mode; ``out`` writes into existing arrays. Errors raise :class:`tilesim.AclnnError`; nothing is
    written on error.
    """
    spec = get_soc(soc)
    args = (output_grad, input, weight, act_seq_len, compress_block_size, compress_stride, act_seq_len_type, layout)
    t = make_tiling(*args, soc=spec) if tiling is None else check_tiling(tiling, *args, soc=spec)
    dt = dtype_name(input)
    dx, dw = outputs(out, ("inputGrad", shape_of(input), dt), ("weightGrad", shape_of(weight), dt))
    run(t, spec, output_grad, input, weight, act_seq_len, dx, dw, workspace(t.workspace_size), checks)
    return dx, dw
