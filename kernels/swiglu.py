"""aclnnSwiGlu: the ops-nn kernel (``activation/swi_glu/op_kernel/swi_glu.cpp``: ``SwigluSingle`` of
``swi_glu_single.hpp`` over ``SwigluVector`` of ``swi_glu_impl.hpp`` for fp32 and ``SwigluVectorBF16`` of
``swi_glu_bf16.hpp`` for fp16 and bf16, tiles dealt by ``glu_tiling_kernel.hpp``) on tilesim's programming model,
and the op API.

y = silu(A)·B = A·σ(A)·B, A the first and B the second half of x along ``dim``. x is [rowLen, 2·colLen] in GM (A is
columns [0, colLen) of every row, B columns [colLen, 2·colLen)), y is [rowLen, colLen]. Each core runs tiles
``GetBlockIdx(), + GetBlockNum(), ...``; per tile:
- CopyIn: rows of A, then of B, each into its VECIN queue: DataCopy with a srcStride between rows (in 32 B blocks)
  when colLen is 32 B aligned, else DataCopyPad (DataCopyParams in bytes, isPad false) with each row landing on a
  32 B boundary; EnQue.
- Compute, with a PipeBarrier<PIPE_V> after each step as ops-nn writes them (nothing else orders two vector
  instructions on A2: the kernel runs clean in checked mode with BiSheng's auto-sync off too):
  - fp32 (SwigluVector), in the queue buffers: c = Muls(A, β = −1); Exp; Adds 1; Div(ones, c), the ones a TBuf
    filled by Duplicate in Init; Mul A; FreeTensor A; DeQue B; Mul B; FreeTensor B; EnQue c.
  - fp16/bf16 (SwigluVectorBF16): Cast A to fp32 (CAST_NONE) into inputTempBuffer; FreeTensor A; c = Muls(A, −1)
    in outputTempBuffer; Exp; Adds 1; Div(A, c); DeQue B; Cast B to fp32 into inputTempBuffer (A is dead);
    FreeTensor B; Mul; Cast to T with the tiling's ``round_mode`` (CAST_RINT on 910B/910_93, CAST_NONE on 310P:
    both round to nearest even); EnQue.
- CopyOut: DeQue; DataCopy (or DataCopyPad) with a dstStride between rows of y; FreeTensor.

A padded row's tail (DataCopyPad's dummy bytes, the row's first element, as on the NPU) is computed on and never
written back. No cross-core reduction: the op is
deterministic. The vector instructions are the count (level-2) forms ops-nn calls.

Where this differs from ops-nn: the kernels take the b16 rounding from the tiling (ops-nn compiles it per SoC,
see :class:`tiling.swiglu.SwiGluTiling`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from tilesim.tiling.common import FP32, dtype_name
from tilesim.tiling.swiglu import SwiGluTiling, check_args, check_tiling, out_shape
from tilesim.tiling.swiglu import swiglu as make_tiling

from tilesim import machine as asc  # AscendC::
from tilesim.errors import tiling_error
from tilesim.interop import accepts_torch
from tilesim.jit import njit
from tilesim.runtime.host_threads import workspace
from tilesim.runtime.launcher import kernel, launch
from tilesim.runtime.report import RunReport
from tilesim.soc import DEFAULT_SOC, SocSpec, get_soc

from .common import output
from .device import copy_in_rows, copy_out_rows, tile_length, tile_param, total_tiles

GM_NAMES = ["x", "y"]
BETA = -1.0  # SwigluSingle::InitGmBuffer sets beta = -1: Muls(A, beta) before Exp gives exp(-A)


@njit(cache=True)
def _compute_float(ctx, in_queue_a, in_queue_b, out_queue_c, tmp_queue, n):
    """SwigluVector::Compute: c = ((1 / (exp(A·β) + 1))·A)·B in the queue buffers."""
    a = in_queue_a.deque(asc.float32)
    c = out_queue_c.alloc_tensor(asc.float32)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.muls(c, a, BETA, n)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.exp(c, c, n)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.adds(c, c, 1.0, n)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    ones = tmp_queue.get(asc.float32)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.div(c, ones, c, n)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.mul(c, c, a, n)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    in_queue_a.free_tensor(a)
    b = in_queue_b.deque(asc.float32)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.mul(c, c, b, n)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    in_queue_b.free_tensor(b)
    out_queue_c.enque(c)


@njit(cache=True)
def _compute_b16(ctx, in_queue_a, in_queue_b, out_queue_c, input_temp_buffer, output_temp_buffer, n, dtype,
                 round_mode):
    """SwigluVectorBF16::Compute: A and B widened exactly in turn into one fp32 buffer, c = (A / (exp(A·β) + 1))·B
    in fp32, rounded once to T."""
    a16 = in_queue_a.deque(dtype)
    c16 = out_queue_c.alloc_tensor(dtype)
    a = input_temp_buffer.get(asc.float32)
    c = output_temp_buffer.get(asc.float32)
    asc.cast(a, a16, asc.CAST_NONE, n)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    in_queue_a.free_tensor(a16)
    asc.muls(c, a, BETA, n)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.exp(c, c, n)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.adds(c, c, 1.0, n)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.div(c, a, c, n)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    b16 = in_queue_b.deque(dtype)
    b = input_temp_buffer.get(asc.float32)
    asc.cast(b, b16, asc.CAST_NONE, n)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    in_queue_b.free_tensor(b16)
    asc.mul(c, c, b, n)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.cast(c16, c, round_mode, n)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    out_queue_c.enque(c16)


@kernel
def swiglu_float_kernel(ctx, t, x, y):
    """``SwigluSingle<SwigluVector<float, float, bufferNum>>``: Init (the queues of bufferNum buffers and depth,
    the ones Duplicate writes once), then Process."""
    sz = asc.size_of(x.dtype)
    nb = 2 if t.is_double_buffer == 1 else 1
    n = tile_length(t, sz)
    pipe = asc.TPipe(ctx)
    in_queue_a = pipe.init_buffer(asc.TQue(asc.VECIN, nb), nb, n * sz)
    in_queue_b = pipe.init_buffer(asc.TQue(asc.VECIN, nb), nb, n * sz)
    out_queue_c = pipe.init_buffer(asc.TQue(asc.VECOUT, nb), nb, n * sz)
    tmp_queue = pipe.init_buffer(asc.TBuf(asc.VECCALC), n * 4)
    asc.duplicate(tmp_queue.get(asc.float32), 1.0, n)
    for tile in range(asc.get_block_idx(ctx), total_tiles(t), asc.get_block_num(ctx)):
        cal, off_a, off_b, off_c, split, indep = tile_param(t, tile, sz)
        copy_in_rows(t, in_queue_a, x[off_a], split)  # CopyIn: A, then B
        copy_in_rows(t, in_queue_b, x[off_b], split)
        _compute_float(ctx, in_queue_a, in_queue_b, out_queue_c, tmp_queue, cal)
        copy_out_rows(t, out_queue_c, y[off_c], indep)


@kernel
def swiglu_b16_kernel(ctx, t, x, y):
    """``SwigluSingle<SwigluVectorBF16<T, float, T, bufferNum>>`` for T half or bfloat16_t: Init (the queues, two
    fp32 TBufs of a tile each), then Process."""
    sz = asc.size_of(x.dtype)
    nb = 2 if t.is_double_buffer == 1 else 1
    n = tile_length(t, sz)
    pipe = asc.TPipe(ctx)
    in_queue_a = pipe.init_buffer(asc.TQue(asc.VECIN, nb), nb, n * sz)
    in_queue_b = pipe.init_buffer(asc.TQue(asc.VECIN, nb), nb, n * sz)
    out_queue_c = pipe.init_buffer(asc.TQue(asc.VECOUT, nb), nb, n * sz)
    input_temp_buffer = pipe.init_buffer(asc.TBuf(asc.VECCALC), n * 4)
    output_temp_buffer = pipe.init_buffer(asc.TBuf(asc.VECCALC), n * 4)
    for tile in range(asc.get_block_idx(ctx), total_tiles(t), asc.get_block_num(ctx)):
        cal, off_a, off_b, off_c, split, indep = tile_param(t, tile, sz)
        copy_in_rows(t, in_queue_a, x[off_a], split)  # CopyIn: A, then B
        copy_in_rows(t, in_queue_b, x[off_b], split)
        _compute_b16(ctx, in_queue_a, in_queue_b, out_queue_c, input_temp_buffer, output_temp_buffer, cal, x.dtype,
                     t.round_mode)
        copy_out_rows(t, out_queue_c, y[off_c], indep)


def run(t: SwiGluTiling, spec: SocSpec, x: np.ndarray, y: np.ndarray, ws: np.ndarray | None,
        checks: bool | None = None, auto_sync: bool | None = None) -> RunReport:
    """Launch the kernel of x's dtype (the tiling key) on arrays already validated: the device part of the op.
    ``auto_sync`` is BiSheng's ``--cce-auto-sync`` for checked mode (off: the V-V and V-S syncs are the kernel's own
    to write). The 16 MiB workspace the tiling asks for is passed and not touched."""
    k = swiglu_float_kernel if t.dtype == FP32 else swiglu_b16_kernel
    return launch(k, t, np.ascontiguousarray(x), y, block_dim=t.block_dim, soc=spec, checks=checks, workspace=ws,
                  op="swiglu", gm_names=GM_NAMES, auto_sync=auto_sync)


@accepts_torch(arrays=("x",))
def swiglu(x: Any, dim: int = -1, *, soc: str | SocSpec = DEFAULT_SOC, tiling: SwiGluTiling | None = None,
           checks: bool | None = None, out: np.ndarray | None = None) -> np.ndarray:
    """aclnnSwiGlu: y = silu(A)·B (x's dtype, x's shape with the split axis halved), A and B the first and second
    halves of x along ``dim``, computed by the tiled kernel. An empty x gives an empty y without a launch (910B,
    910_93; 310P refuses it).

    ``tiling`` runs a TilingData made with the tiling function of ``tiling/swiglu.py``: ``swiglu(x, dim,
    core_num=..., buffer_num=..., base_row_len=..., base_col_len=...)`` (checked first); ``checks=True`` runs
    checked mode; ``out`` writes into an existing array. Errors raise :class:`tilesim.AclnnError` with the aclnn
    status; inputs are never modified, and nothing is written on error. A non-contiguous x is copied first (the
    op's AutoContiguous; the aclnn document lists non-contiguous x as unsupported, and tilesim takes numpy views).
    """
    spec = get_soc(soc)
    row_len, col_len = check_args(x, dim, spec)
    t = None
    if row_len * col_len:
        t = make_tiling(x, dim, soc=spec) if tiling is None else check_tiling(tiling, x, dim, soc=spec)
    elif tiling is not None:
        raise tiling_error("tiling", f"x {list(np.shape(x))} is empty: there is nothing to tile")
    y = output(out, "out", out_shape(x, dim), dtype_name(x))
    if t is not None:
        run(t, spec, x, y, workspace(t.workspace_size), checks)
    return y


__all__ = ["run", "swiglu", "swiglu_b16_kernel", "swiglu_float_kernel"]
