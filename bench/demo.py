"""``make demo``: RmsNormGrad (both of its kernels), RmsNorm, GroupNormBackward, SwiGluGrad, SwiGlu, Softmax, the
layer-norm backward and NsaCompressGrad on the emulated Ascend910B1, in one table.

Runs ``kernels.rms_norm_grad`` on [4096, 4096] bf16 (split-N: whole rows per UB tile) and on [64, 12288] fp32 (split-D:
rows too long for the UB, cut into column tiles), ``kernels.rms_norm`` (the forward, on the programming model) on [4096,
4096] bf16 (NORMAL: a row at a time), ``kernels.group_norm_backward`` on [32, 512, 64·64] with 32 groups in fp32 and
bf16, and ``kernels.swiglu_grad`` on x [8192, 2·4096] bf16 (dim -1: A and B the two column halves, y_grad [8192, 4096])
and ``kernels.swiglu`` (its forward) on the same x, ``kernels.softmax`` (tilesim's kernel on the A2 SoftMax API) on
[4096, 4096] fp16 and (its [A, R, B] kernel) on [2048, 4096] bf16 along dim 0, ``kernels.layer_norm_grad`` (the
LayerNormGrad and LayerNormGradBeta APIs per UB tile of whole rows) on [4096, 4096] in fp32 and fp16 and
``kernels.nsa_compress_grad`` on input [8192, 32, 128] bf16 (TND, 4 sequences of 2048 tokens, blockSize 32, stride 16:
overlapping windows), with realistic inputs (the makers of ``tilesim.kernels.op_specs``, which the explorer uses too),
and prints, per run, the tiling the host chose, the UB plan's size, the bytes the data movers carried, the error of dx
(pd_x for the layer-norm backward, input_grad for NsaCompressGrad) against untiled float64 math under Ascend's precision
standard, and the wall time on this CPU.

    python -m bench.demo
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import tilesim.kernels as kernels
from tilesim.kernels.op_specs import (
    OPS,
    group_norm_backward_inputs,
    layer_norm_grad_inputs,
    nsa_compress_grad_inputs,
    rms_norm_grad_inputs,
    rms_norm_inputs,
    softmax_inputs,
    swiglu_grad_inputs,
    swiglu_inputs,
)
from tilesim.tiling.layer_norm_grad import TMP_MODES
from tilesim.tiling.rms_norm import MODE_NAMES
from tilesim.tiling.softmax import SoftmaxArbTiling, SoftmaxLongTiling

import tilesim
from tilesim.cost.model import estimated, total_us
from tilesim.precision import compare

REPEATS = 5
SPLIT = {1: "split-N", 2: "split-D"}


def case(op: str, inputs: dict[str, Any], label: str) -> tuple[Callable[..., Any], Callable[[], np.ndarray], str]:
    """``op``'s API on ``inputs`` (the tilesim.kernels.op_specs makers' dicts: the API's argument names):
    (call(out=None) -> outputs, golden of the first output, shape label). SwiGluGrad has one output; call wraps it
    in a tuple, as the other ops return theirs."""
    api = getattr(kernels, op)

    def call(out: Any = None) -> Any:
        if op in ("swiglu_grad", "swiglu", "softmax"):
            return (api(**inputs, out=None if out is None else out[0]),)
        return api(**inputs, out=out)

    return call, lambda: OPS[op].reference(inputs)[0], label


def rms_norm_grad_case(shape: tuple[int, int], dtype: str) -> tuple[Callable[..., Any], Callable[[], np.ndarray], str]:
    """kernels.rms_norm_grad on ``shape``: (call, golden dx, shape label)."""
    return case("rms_norm_grad", rms_norm_grad_inputs(shape, dtype), "x".join(map(str, shape)))


def rms_norm_case(shape: tuple[int, int], dtype: str) -> tuple[Callable[..., Any], Callable[[], np.ndarray], str]:
    """kernels.rms_norm (the forward, on tilesim's programming model) on ``shape``, gamma in x's dtype: (call,
    golden y, shape label)."""
    return case("rms_norm", rms_norm_inputs(shape, dtype), "x".join(map(str, shape)))


def group_norm_backward_case(shape: tuple[int, int, int],
                             dtype: str) -> tuple[Callable[..., Any], Callable[[], np.ndarray], str]:
    """kernels.group_norm_backward on [N, C, HxW] (32 groups for C >= 32): (call, golden dx, shape label)."""
    inputs = group_norm_backward_inputs(shape, dtype)
    return case("group_norm_backward", inputs, f"{'x'.join(map(str, shape))} G={inputs['group']}")


def swiglu_grad_case(shape: tuple[int, int], dtype: str,
                     dim: int = -1) -> tuple[Callable[..., Any], Callable[[], np.ndarray], str]:
    """kernels.swiglu_grad on x of ``shape`` split along ``dim``: (call, golden dx, shape label)."""
    sizes = [str(n) for n in shape]
    sizes[dim] = f"2·{shape[dim] // 2}"  # the split axis: A and B
    return case("swiglu_grad", swiglu_grad_inputs(shape, dtype, dim=dim), "x".join(sizes))


def swiglu_case(shape: tuple[int, int], dtype: str,
                dim: int = -1) -> tuple[Callable[..., Any], Callable[[], np.ndarray], str]:
    """kernels.swiglu (the forward, on tilesim's programming model) on x of ``shape`` split along ``dim``: (call,
    golden y, shape label)."""
    sizes = [str(n) for n in shape]
    sizes[dim] = f"2·{shape[dim] // 2}"  # the split axis: A and B
    return case("swiglu", swiglu_inputs(shape, dtype, dim=dim), "x".join(sizes))


def softmax_case(shape: tuple[int, int], dtype: str,
                 dim: int = -1) -> tuple[Callable[..., Any], Callable[[], np.ndarray], str]:
    """kernels.softmax over axis ``dim`` of ``shape`` (the last: tilesim's kernel on the A2 SoftMax API; another:
    its [A, R, B] kernel): (call, golden y, shape label)."""
    label = "x".join(map(str, shape)) + ("" if dim == -1 else f" dim {dim}")
    return case("softmax", softmax_inputs(shape, dtype, dim=dim), label)


def layer_norm_grad_case(shape: tuple[int, int],
                         dtype: str) -> tuple[Callable[..., Any], Callable[[], np.ndarray], str]:
    """kernels.layer_norm_grad over the last axis of ``shape`` (epsilon 1e-5): (call, golden pd_x, shape label)."""
    return case("layer_norm_grad", layer_norm_grad_inputs(shape, dtype), "x".join(map(str, shape)))


def nsa_compress_grad_case(shape: tuple[int, int, int],
                           dtype: str) -> tuple[Callable[..., Any], Callable[[], np.ndarray], str]:
    """kernels.nsa_compress_grad on input ``shape`` [T, N, D] in 4 equal sequences, blockSize 32, stride 16:
    (call, golden input_grad, shape label)."""
    inputs = nsa_compress_grad_inputs(shape, dtype)
    return case("nsa_compress_grad", inputs, f"{'x'.join(map(str, shape))} S={len(inputs['act_seq_len'])} "
                                             f"bs={inputs['compress_block_size']}/{inputs['compress_stride']}")


CASES = [(rms_norm_grad_case, (4096, 4096), "bf16"), (rms_norm_grad_case, (64, 12288), "fp32"),
         (rms_norm_case, (4096, 4096), "bf16"),
         (group_norm_backward_case, (32, 512, 64 * 64), "fp32"), (group_norm_backward_case, (32, 512, 64 * 64), "bf16"),
         (swiglu_grad_case, (8192, 8192), "bf16"), (swiglu_case, (8192, 8192), "bf16"),
         (softmax_case, (4096, 4096), "fp16"), (functools.partial(softmax_case, dim=0), (2048, 4096), "bf16"),
         (layer_norm_grad_case, (4096, 4096), "fp32"), (layer_norm_grad_case, (4096, 4096), "fp16"),
         (nsa_compress_grad_case, (8192, 32, 128), "bf16")]


def op_of(make: Callable[..., Any]) -> str:
    """The op a case's maker runs (``softmax`` for ``softmax_case`` and a partial of it)."""
    return getattr(make, "func", make).__name__.removesuffix("_case")


def tiling_key(op: str, t: Any) -> str:
    """The tiling key and what it selects: RmsNormGrad's split, GroupNormGrad's UB mode and reduction, SwiGluGrad's
    dtype kernel (the key is the ge::DataType) with its base tile, double buffering and DataCopy path, the
    layer-norm backward's UB tile (whole rows x the 32 B-aligned H), its temporaries and isReuseSource,
    NsaCompressGrad's (one) key with its core count and whether windows overlap (inputGrad via the fp32 workspace),
    RmsNorm's mode (and ops-nn's is_performance flag)."""
    if op == "rms_norm":
        return f"{t.tiling_key} {MODE_NAMES[t.tiling_key]}{', perf' if t.is_performance else ''}"
    if op == "softmax":
        db = ", DB" if t.buffer_num == 2 else ""
        if isinstance(t, SoftmaxArbTiling):
            return f"{t.tiling_key} {t.dtype} [A,R,B] tile {t.tile_r}x{t.b_align}{db}, {t.r_chunks} R load"
        if isinstance(t, SoftmaxLongTiling):
            return f"{t.tiling_key} {t.dtype} split-row load {t.tile_cols}{db}, {t.c_chunks} a row"
        return (f"{t.tiling_key} {t.dtype} tile {t.tile_rows}x{t.cols_align}{db}, "
                f"{t.range_m + (t.tail_m > 0)} API pass")
    if op == "nsa_compress_grad":
        return f"key {t.tiling_key}, {t.block_dim} cores{', overlap' if t.is_overlap else ''}"
    if op == "layer_norm_grad":
        return (f"{t.tiling_key} tile {t.ub_rows}x{t.h_align}, tmp {TMP_MODES[t.tmp_mode]}"
                f"{', reuse' if t.is_reuse_source else ''}")
    if op == "group_norm_backward":
        return f"{t.tiling_key} UB mode {t.ub_mode}{', det' if t.deterministic else ''}"
    if op in ("swiglu_grad", "swiglu"):
        return (f"{t.tiling_key} {t.dtype} tile {t.base_row_len}x{t.base_col_len}{', DB' if t.is_double_buffer else ''}"
                f"{'' if t.is_32b_aligned else ', pad'}")
    return f"{t.tiling_key} {SPLIT.get(t.tiling_key, '?')}"


def run_case(make: Callable[..., Any], shape: tuple[int, ...], dtype: str) -> dict[str, Any]:
    call, golden, label = make(shape, dtype)
    t0 = time.perf_counter()
    outs = call()  # compiles, or loads the Numba cache
    first = time.perf_counter() - t0
    with tilesim.capture() as runs:
        call(out=outs)
    report = runs[-1]
    _, est = estimated(lambda: call(out=outs), runs)  # the launches schedule themselves on the cost model
    npu = total_us(est)
    times = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        call(out=outs)
        times.append(time.perf_counter() - t0)
    p = compare(outs[0], golden())
    t = report.tiling
    return {
        "op": report.op,
        "shape": label,
        "dtype": dtype,
        "SoC": report.soc,
        "tiling key": tiling_key(report.op, t),
        "block_dim": str(report.block_dim),
        "UB used/cap B": f"{report.ub_plan.used}/{report.ub_plan.capacity}",
        "MTE2 bytes": f"{report.total('mte2_bytes'):,}",
        "MTE3 bytes": f"{report.total('mte3_bytes'):,}",
        "dx MARE": f"{p.mare:.2e}",
        "limit": f"{10 * p.threshold:.2e}",
        "check": "pass" if p.ok else "FAIL",
        "first call": f"{first:.1f} s" if first >= 1 else f"{first * 1e3:.0f} ms",
        "wall": f"{statistics.median(times) * 1e3:.1f} ms",
        "est. NPU": f"{npu:.0f} µs",
    }


RIGHT = {"block_dim", "UB used/cap B", "MTE2 bytes", "MTE3 bytes", "dx MARE", "limit", "first call", "wall",
         "est. NPU"}


def table(rows: list[dict[str, str]]) -> str:
    cols = list(rows[0])
    width = {c: max(len(c), *(len(r[c]) for r in rows)) for c in cols}

    def line(cells: dict[str, str]) -> str:
        return "  ".join(cells[c].rjust(width[c]) if c in RIGHT else cells[c].ljust(width[c]) for c in cols)

    return "\n".join([line({c: c for c in cols}), "  ".join("-" * width[c] for c in cols)]
                     + [line(r) for r in rows])


def main() -> None:
    print(f"tilesim demo: aclnnRmsNormGrad, aclnnRmsNorm, aclnnGroupNormBackward, aclnnSwiGluGrad, aclnnSwiGlu, "
          f"aclnnSoftmax, a layer-norm backward and aclnnNsaCompressGrad on the emulated {tilesim.DEFAULT_SOC}, "
          f"checks off\n")
    rows = [run_case(make, shape, dtype) for make, shape, dtype in CASES]
    print(table(rows))
    print(f"\nG: groups; det: the deterministic two-stage dgamma/dbeta reduction; 2·n: x's split axis (A, B); tile: "
          f"SwiGluGrad's and SwiGlu's base rows x base cols, DB: double-buffered queues, pad: DataCopyPad (rows not "
          f"32 B aligned); layer_norm_grad's tile: UB rows x aligned H, tmp: its APIs' sharedTmpBuffer (shared) or "
          f"free UB (framework); S: sequences, bs: NsaCompressGrad's blockSize/stride, overlap: windows overlap "
          f"(inputGrad accumulated in an fp32 workspace); UB: per-core UB plan / capacity (bytes); MTE2/MTE3: bytes "
          f"GM->UB / UB->GM, all cores; dx MARE: max relative error vs float64 math (pd_x for layer_norm_grad, "
          f"input_grad for nsa_compress_grad, y for swiglu, rms_norm and softmax), pass = MERE < T and MARE < limit "
          f"(10T); "
          f"first call: with Numba compile/cache load; wall: median of {REPEATS} later calls into the first call's "
          f"outputs, on this CPU; est. NPU: the cost model's time for the call on the SoC (tilesim.cost.model; "
          f"`tilesim trace` draws its timeline); rms_norm's key: its mode (NORMAL, SPLIT_D, MERGE_N, SINGLE_ROW), "
          f"perf: ops-nn's is_performance; softmax's key: x's dtype, its tile (rows x 32 B-aligned cols), DB and the "
          f"SoftMax API's passes a tile ([A,R,B]: R rows a load x 32 B-aligned B elements, and the loads of R).")


if __name__ == "__main__":
    main()
