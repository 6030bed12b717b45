"""aclnnSwiGluGrad: the kernel on tilesim's programming model, and the op API.

The ops-nn kernel (``activation/swi_glu_grad/op_kernel``: ``SwiGluGradSingle`` of ``swi_glu_grad_single.hpp`` over
``SwiGluGradVector`` of ``swi_glu_grad_float.hpp`` for fp32 and ``SwiGluGradBF16`` of ``swi_glu_grad_bf16.hpp``
for fp16 and bf16, tiles dealt by ``glu_tiling_kernel.hpp``), call for call. x is [rowLen, 2·colLen] in GM (A is
columns [0, colLen) of every row, B columns [colLen, 2·colLen)), yGrad (L) is [rowLen, colLen]; the output has x's
layout, dA (M) where A was and dB (N) where B was. Each core runs tiles ``GetBlockIdx(), + GetBlockNum(), ...``
with the tile parameters of :mod:`kernels.swiglu` (the same ``SwigluSingleTilingKernel``); per tile:

- CopyIn (CopyIn_Non32BAligned when colLen is not 32 B aligned): A, then L, then B, each AllocTensor, DataCopy
  with the DataCopyParams ops-nn builds (the srcStride between rows in 32 B blocks) or DataCopyPad (the same
  fields in bytes, DataCopyPadParams ``{false, 0, 0, 0}``), EnQue.
- Compute, fp32 vector instructions of the count form: σ = 1 / (exp(A·β) + 1) with β = −1, dB = σ·A·L and
  dA = (σ + A·σ·(1 − σ))·B·L, with the queue calls and the PipeBarrier<PIPE_V>s where ops-nn has them:

  - fp32 (SwiGluGradVector), 8 barriers a tile. ops-nn leaves out the V-V barriers between Duplicate and Div,
    between the two Muls into N, and along dA's chain from its first Mul on: the op is built with BiSheng's
    auto-sync on (its CMake has no ``AUTO_SYNC false``), which inserts them. With auto-sync off
    (``run(..., auto_sync=False)``) checked mode reports them.
  - fp16/bf16 (SwiGluGradBF16), 17 barriers a tile: A and L widened exactly (CAST_NONE) into fp32 TBufs, B later
    into A's; dB and dA each rounded once with ``downcastRoundMode_``: CAST_RINT where ``__CCE_AICORE__`` is 220
    (910B, 910_93), CAST_NONE otherwise (310P; round to nearest even as well). The one V-V barrier ops-nn leaves
    out here is between dA's last Mul and its Cast.
- CopyOut (CopyOut_Non32BAligned): DeQue M, DataCopy (DataCopyPad) with the dstStride between rows of x,
  FreeTensor; then N likewise.

A padded row's tail (DataCopyPad's dummy bytes, the row's first element, as on the NPU) is computed on and never
written back. No cross-core reduction: the op is
deterministic. Besides the barriers, a tile's syncs are its queue calls': 10 SetFlags (5 EnQue, 5 FreeTensor),
5 DeQue waits, and 5 AllocTensor waits once a queue's buffers come round again.

Where this differs from ops-nn: ops-nn compiles the kernel per SoC with the round mode in it; SwiGluGradTiling
carries no round mode, so the b16 kernel has a build per ``__CCE_AICORE__`` here, :func:`swiglu_grad_b16_kernel`
(220) and :func:`swiglu_grad_b16_kernel_200` (310P). The 310P build lacks the non-aligned path, as ops-nn's does
(``#if __CCE_AICORE__ == 220``; the tiling refuses such a colLen there).

On the host, a fast launch runs each core's tiles to the end before the next core's (each host thread one UB
for its cores in turn); the NPU's cores run side by side, the k-th tile of each at about the same time.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from tilesim.tiling.common import FP32, dtype_name, shape_of
from tilesim.tiling.swiglu_grad import SwiGluGradTiling, check_tiling, ub_plan
from tilesim.tiling.swiglu_grad import swiglu_grad as make_tiling

from tilesim import machine as asc  # AscendC::
from tilesim.interop import accepts_torch
from tilesim.jit import njit
from tilesim.runtime.host_threads import workspace
from tilesim.runtime.launcher import kernel, launch
from tilesim.runtime.report import RunReport
from tilesim.soc import DEFAULT_SOC, SocSpec, get_soc

from .common import output
from .device import copy_in_rows, copy_out_rows, tile_length, tile_param, total_tiles

GM_NAMES = ["yGrad", "x", "out"]
BETA = -1.0  # SwiGluGradSingle::InitGmBuffer sets beta = -1: σ's Muls by beta, dA's Muls by -beta


@njit(cache=True)
def _copy_params(split, indep):
    """The grad's DataCopyParams from SwiGluSinlgeTileCopyParam (as :func:`kernels.device.tile_param` lays them
    out for the forward: ``split`` with its stride on the source, ``indep`` on the destination):
    splitCopyinParams (rows of A or B out of x), indepCopyinParams (rows of yGrad) and splitCopyoutParams (rows
    of dA or dB into the output)."""
    indep_in = asc.DataCopyParams(indep.block_count, indep.block_len, indep.dst_stride, 0)
    split_out = asc.DataCopyParams(split.block_count, split.block_len, 0, split.src_stride)
    return split, indep_in, split_out


@njit(cache=True)
def _compute_float(ctx, in_queue_a, in_queue_b, in_queue_l, out_queue_m, out_queue_n, temp_local, sig_local, n):
    """SwiGluGradVector::Compute: σ in sigLocal, dB in N, dA in M, the fp32 queue buffers computed on directly."""
    a = in_queue_a.deque(asc.float32)
    asc.muls(sig_local, a, BETA, n)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.exp(sig_local, sig_local, n)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.adds(sig_local, sig_local, 1.0, n)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.duplicate(temp_local, 1.0, n)
    asc.div(sig_local, temp_local, sig_local, n)
    asc.pipe_barrier(ctx, asc.PIPE_V)

    nt = out_queue_n.alloc_tensor(asc.float32)
    asc.mul(nt, sig_local, a, n)
    lt = in_queue_l.deque(asc.float32)
    asc.mul(nt, nt, lt, n)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    out_queue_n.enque(nt)

    asc.muls(temp_local, sig_local, -1.0, n)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.adds(temp_local, temp_local, 1.0, n)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    m = out_queue_m.alloc_tensor(asc.float32)
    asc.mul(m, sig_local, temp_local, n)
    asc.mul(m, m, a, n)
    in_queue_a.free_tensor(a)
    asc.muls(m, m, -BETA, n)
    asc.add(m, m, sig_local, n)
    b = in_queue_b.deque(asc.float32)
    asc.mul(m, m, b, n)
    in_queue_b.free_tensor(b)
    asc.mul(m, m, lt, n)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    out_queue_m.enque(m)
    in_queue_l.free_tensor(lt)


@njit(cache=True)
def _compute_sig_local(ctx, in_queue_a, temp_local, sig_local, a_local, n, dtype):
    """SwiGluGradBF16::ComputeSigLocal: A widened into aLocal (its queue buffer freed), σ into sigLocal."""
    a16 = in_queue_a.deque(dtype)
    asc.cast(a_local, a16, asc.CAST_NONE, n)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    in_queue_a.free_tensor(a16)
    asc.muls(sig_local, a_local, BETA, n)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.exp(sig_local, sig_local, n)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.adds(sig_local, sig_local, 1.0, n)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.duplicate(temp_local, 1.0, n)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.div(sig_local, temp_local, sig_local, n)
    asc.pipe_barrier(ctx, asc.PIPE_V)


@njit(cache=True)
def _compute_grad_n(ctx, in_queue_l, out_queue_n, l_local, n_local, n, dtype, round_mode):
    """SwiGluGradBF16::ComputeGradN: L widened into lLocal (its queue buffer freed), dB = (σ·A)·L rounded into N."""
    l16 = in_queue_l.deque(dtype)
    asc.cast(l_local, l16, asc.CAST_NONE, n)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    in_queue_l.free_tensor(l16)
    n16 = out_queue_n.alloc_tensor(dtype)
    asc.mul(n_local, n_local, l_local, n)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.cast(n16, n_local, round_mode, n)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    out_queue_n.enque(n16)


@njit(cache=True)
def _compute_b16(ctx, in_queue_a, in_queue_b, in_queue_l, out_queue_m, out_queue_n, temp_local, sig_local, a_local,
                 n_local, l_local, n, dtype, round_mode):
    """SwiGluGradBF16::Compute: σ, dB, then dA in nLocal (mLocal is the same buffer), B widened into aLocal (A is
    dead by then; yGrad before B here, unlike the fp32 kernel), dA rounded into M."""
    _compute_sig_local(ctx, in_queue_a, temp_local, sig_local, a_local, n, dtype)
    asc.mul(n_local, sig_local, a_local, n)
    _compute_grad_n(ctx, in_queue_l, out_queue_n, l_local, n_local, n, dtype, round_mode)

    asc.muls(temp_local, sig_local, -1.0, n)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.adds(temp_local, temp_local, 1.0, n)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    m_local = n_local
    asc.mul(m_local, sig_local, temp_local, n)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.mul(m_local, m_local, a_local, n)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.muls(m_local, m_local, -BETA, n)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.add(m_local, m_local, sig_local, n)

    b16 = in_queue_b.deque(dtype)
    b_local = a_local
    asc.cast(b_local, b16, asc.CAST_NONE, n)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.mul(m_local, m_local, l_local, n)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    m16 = out_queue_m.alloc_tensor(dtype)
    asc.mul(m_local, m_local, b_local, n)
    in_queue_b.free_tensor(b16)
    asc.cast(m16, m_local, round_mode, n)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    out_queue_m.enque(m16)


@njit(cache=True)
def _process_b16(ctx, t, y_grad, x, out, in_queue_a, in_queue_b, in_queue_l, out_queue_m, out_queue_n, temp_local,
                 sig_local, a_local, n_local, l_local, round_mode):
    """SwiGluGradSingle::Process of the b16 kernel: SWIGLU_SINGLE_PROCESS (or its NON32BALIGNED form, by the
    tiling), tile after tile."""
    sz = asc.size_of(x.dtype)
    for tile in range(asc.get_block_idx(ctx), total_tiles(t), asc.get_block_num(ctx)):
        cal, off_a, off_b, off_l, split, indep = tile_param(t, tile, sz)
        split_in, indep_in, split_out = _copy_params(split, indep)
        copy_in_rows(t, in_queue_a, x[off_a], split_in)  # CopyIn: A, L, B
        copy_in_rows(t, in_queue_l, y_grad[off_l], indep_in)
        copy_in_rows(t, in_queue_b, x[off_b], split_in)
        _compute_b16(ctx, in_queue_a, in_queue_b, in_queue_l, out_queue_m, out_queue_n, temp_local, sig_local,
                     a_local, n_local, l_local, cal, x.dtype, round_mode)
        copy_out_rows(t, out_queue_m, out[off_a], split_out)  # CopyOut: dA where A was, dB where B was
        copy_out_rows(t, out_queue_n, out[off_b], split_out)


@njit(cache=True)
def _init_ub_buffer(ctx, t, sz):
    """SwiGluGradSingle's InitUbBuffer: a TPipe with the five queues (bufferNum buffers of a tile each, depth
    bufferNum) and the tmp and sigmoid TBufs (an fp32 tile each, fetched once); the pipe, the tile's elements and
    the seven tensors and queues."""
    nb = 2 if t.is_double_buffer == 1 else 1
    n = tile_length(t, sz)
    pipe = asc.TPipe(ctx)
    in_queue_a = pipe.init_buffer(asc.TQue(asc.VECIN, nb), nb, n * sz)
    in_queue_b = pipe.init_buffer(asc.TQue(asc.VECIN, nb), nb, n * sz)
    in_queue_l = pipe.init_buffer(asc.TQue(asc.VECIN, nb), nb, n * sz)
    out_queue_m = pipe.init_buffer(asc.TQue(asc.VECOUT, nb), nb, n * sz)
    out_queue_n = pipe.init_buffer(asc.TQue(asc.VECOUT, nb), nb, n * sz)
    tmp_queue = pipe.init_buffer(asc.TBuf(asc.VECCALC), n * 4)
    sig_queue = pipe.init_buffer(asc.TBuf(asc.VECCALC), n * 4)
    return (pipe, n, in_queue_a, in_queue_b, in_queue_l, out_queue_m, out_queue_n, tmp_queue.get(asc.float32),
            sig_queue.get(asc.float32))


@kernel
def swiglu_grad_float_kernel(ctx, t, y_grad, x, out):
    """``SwiGluGradSingle<SwiGluGradVector<float, ..., bufferNum>, float, float>``: Init, then Process."""
    sz = asc.size_of(x.dtype)
    _, _, in_queue_a, in_queue_b, in_queue_l, out_queue_m, out_queue_n, temp_local, sig_local = _init_ub_buffer(
        ctx, t, sz)
    for tile in range(asc.get_block_idx(ctx), total_tiles(t), asc.get_block_num(ctx)):
        cal, off_a, off_b, off_l, split, indep = tile_param(t, tile, sz)
        split_in, indep_in, split_out = _copy_params(split, indep)
        copy_in_rows(t, in_queue_a, x[off_a], split_in)  # CopyIn: A, L, B
        copy_in_rows(t, in_queue_l, y_grad[off_l], indep_in)
        copy_in_rows(t, in_queue_b, x[off_b], split_in)
        _compute_float(ctx, in_queue_a, in_queue_b, in_queue_l, out_queue_m, out_queue_n, temp_local, sig_local, cal)
        copy_out_rows(t, out_queue_m, out[off_a], split_out)  # CopyOut: dA where A was, dB where B was
        copy_out_rows(t, out_queue_n, out[off_b], split_out)


@njit(cache=True)
def _b16_kernel(ctx, t, y_grad, x, out, round_mode, unaligned):
    """``SwiGluGradSingle<SwiGluGradBF16<T, float, T, bufferNum>, T, T>`` for T half or bfloat16_t: Init (the
    queues and TBufs of :func:`_init_ub_buffer`, then three more fp32 TBufs of a tile), then Process, built with
    ``round_mode`` as ``downcastRoundMode_``; ``unaligned``: the build has the Process for a colLen that is not
    32 B aligned."""
    pipe, n, in_queue_a, in_queue_b, in_queue_l, out_queue_m, out_queue_n, temp_local, sig_local = _init_ub_buffer(
        ctx, t, asc.size_of(x.dtype))
    a_temp_buffer = pipe.init_buffer(asc.TBuf(asc.VECCALC), n * 4)
    l_temp_buffer = pipe.init_buffer(asc.TBuf(asc.VECCALC), n * 4)
    output_temp_buffer = pipe.init_buffer(asc.TBuf(asc.VECCALC), n * 4)
    if unaligned or t.is_32b_aligned == 1:
        _process_b16(ctx, t, y_grad, x, out, in_queue_a, in_queue_b, in_queue_l, out_queue_m, out_queue_n,
                     temp_local, sig_local, a_temp_buffer.get(asc.float32), output_temp_buffer.get(asc.float32),
                     l_temp_buffer.get(asc.float32), round_mode)


@kernel
def swiglu_grad_b16_kernel(ctx, t, y_grad, x, out):
    """The b16 kernel as built for ``__CCE_AICORE__ == 220`` (910B, 910_93): CAST_RINT."""
    _b16_kernel(ctx, t, y_grad, x, out, asc.CAST_RINT, True)


@kernel
def swiglu_grad_b16_kernel_200(ctx, t, y_grad, x, out):
    """The b16 kernel as built for ``__CCE_AICORE__ == 200`` (310P: half only): CAST_NONE, and no Process for a
    colLen that is not 32 B aligned."""
    _b16_kernel(ctx, t, y_grad, x, out, asc.CAST_NONE, False)


def kernel_for(t: SwiGluGradTiling, spec: SocSpec) -> Any:
    """The kernel the tiling key selects (``TILING_KEY_IS``), in the SoC's build."""
    if t.dtype == FP32:
        return swiglu_grad_float_kernel
    return swiglu_grad_b16_kernel if spec.arch == 220 else swiglu_grad_b16_kernel_200


def run(t: SwiGluGradTiling, spec: SocSpec, y_grad: np.ndarray, x: np.ndarray, out: np.ndarray,
        ws: np.ndarray | None, checks: bool | None = None, auto_sync: bool | None = None) -> RunReport:
    """Launch the kernel on arrays already validated: the device part of the op (``aclnnSwiGluGrad``).
    ``auto_sync`` is BiSheng's ``--cce-auto-sync`` for checked mode (ops-nn builds the op with it on). The 16 MiB
    workspace the tiling asks for is passed and not touched."""
    return launch(kernel_for(t, spec), t, np.ascontiguousarray(y_grad), np.ascontiguousarray(x), out,
                  block_dim=t.block_dim, soc=spec, checks=checks, workspace=ws, op="swiglu_grad", gm_names=GM_NAMES,
                  auto_sync=auto_sync)


@accepts_torch(arrays=("y_grad", "x"))
def swiglu_grad(y_grad: Any, x: Any, dim: int = -1, *, soc: str | SocSpec = DEFAULT_SOC,
                tiling: SwiGluGradTiling | None = None, checks: bool | None = None,
                out: np.ndarray | None = None) -> np.ndarray:
    """aclnnSwiGluGrad: the gradient of x (x's shape and dtype) for y = silu(A)·B, A and B the first and second
    halves of x along ``dim``, computed by the tiled kernel.

    ``tiling`` runs a TilingData made with ``tiling.swiglu_grad(..., core_num=..., buffer_num=...,
    base_row_len=..., base_col_len=...)`` (checked first); ``checks=True`` runs checked mode; ``out`` writes
    into an existing array. Errors raise :class:`tilesim.AclnnError` with the aclnn status; inputs are never
    modified, and nothing is written on error.
    """
    spec = get_soc(soc)
    t = make_tiling(y_grad, x, dim, soc=spec) if tiling is None else check_tiling(tiling, y_grad, x, dim, soc=spec)
    ub_plan(t, spec).check()
    res = output(out, "out", shape_of(x), dtype_name(x))
    run(t, spec, y_grad, x, res, workspace(t.workspace_size), checks)
    return res


__all__ = ["run", "swiglu_grad", "swiglu_grad_b16_kernel", "swiglu_grad_b16_kernel_200", "swiglu_grad_float_kernel"]
