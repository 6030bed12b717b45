"""``make demo``: RmsNormGrad (both of its kernels), GroupNormBackward, SwiGluGrad, the layer-norm backward and
NsaCompressGrad on the emulated Ascend910B1, in one table.

Runs ``kernels.rms_norm_grad`` on [4096, 4096] bf16 (split-N: whole rows per UB tile) and on [64, 12288] fp32
(split-D: rows too long for the UB, cut into column tiles), ``kernels.group_norm_backward`` on [32, 512, 64·64]
with 32 groups in fp32 and bf16, and ``kernels.swiglu_grad`` on x [8192, 2·4096] bf16 (dim -1: A and B the two
column halves, y_grad [8192, 4096]), ``kernels.layer_norm_grad`` (the LayerNormGrad and LayerNormGradBeta APIs
per UB tile of whole rows) on [4096, 4096] in fp32 and fp16 and ``kernels.nsa_compress_grad`` on input
[8192, 32, 128] bf16 (TND, 4 sequences of 2048 tokens, blockSize 32, stride 16: overlapping windows), with
realistic inputs, and prints, per run, the tiling the host chose, the UB plan's size, the bytes the data movers
carried, the error of dx (pd_x for the layer-norm backward, input_grad for NsaCompressGrad) against untiled
float64 math under Ascend's precision standard, and the wall time on this CPU.

    python -m bench.demo
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np

import kernels
import tilesim
from tilesim.precision import compare

EPS = 1e-6
GN_EPS = 1e-5  # torch.nn.GroupNorm's default, for the forward's rstd
GN_GROUPS = 32
SWIGLU_DIM = -1
LN_EPS = 1e-5  # torch.nn.LayerNorm's default
NSA_SEQS = 4  # NsaCompressGrad: sequences of equal length
NSA_BLOCK_SIZE, NSA_STRIDE = 32, 16
REPEATS = 5
SPLIT = {1: "split-N", 2: "split-D"}
DTYPES = {"fp32": np.dtype(np.float32), "bf16": np.dtype(ml_dtypes.bfloat16), "fp16": np.dtype(np.float16)}
TMP_MODES = ("shared", "framework")  # LayerNormGradOpTiling.tmp_mode


def make_inputs(shape: tuple[int, int], dtype: str, seed: int = 0) -> tuple[np.ndarray, ...]:
    """dy ~ N(0, 1) and x ~ U(-2, 2) in ``dtype``; rstd = 1 / sqrt(mean(x^2) + 1e-6) of the rounded x, in fp32
    (what the forward RmsNorm saves); gamma ~ U(0.5, 1.5) fp32."""
    rng = np.random.default_rng(seed)
    dt = DTYPES[dtype]
    x = rng.uniform(-2.0, 2.0, shape).astype(np.float32).astype(dt)
    dy = rng.standard_normal(shape, dtype=np.float32).astype(dt)
    x32 = x.astype(np.float32)
    rstd = (np.float32(1.0) / np.sqrt(np.mean(x32 * x32, axis=1) + np.float32(EPS))).astype(np.float32)
    gamma = rng.uniform(0.5, 1.5, shape[1]).astype(np.float32)
    return dy, x, rstd, gamma


def make_gn_inputs(shape: tuple[int, int, int], dtype: str, groups: int, seed: int = 0) -> tuple[np.ndarray, ...]:
    """dy ~ N(0, 1) and x ~ U(-2, 2) of shape [N, C, HxW]; mean and rstd = 1 / sqrt(var + 1e-5) over each
    (n, group) of the rounded x, [N, groups] (what the forward GroupNorm saves); gamma ~ U(0.5, 1.5); all in
    ``dtype``, as aclnnGroupNormBackward requires."""
    rng = np.random.default_rng(seed)
    dt = DTYPES[dtype]
    x = rng.uniform(-2.0, 2.0, shape).astype(np.float32).astype(dt)
    dy = rng.standard_normal(shape, dtype=np.float32).astype(dt)
    xg = x.astype(np.float32).reshape(shape[0], groups, -1)
    mean = xg.mean(axis=-1, dtype=np.float64).astype(np.float32).astype(dt)
    rstd = (1.0 / np.sqrt(xg.var(axis=-1, dtype=np.float64) + GN_EPS)).astype(np.float32).astype(dt)
    gamma = rng.uniform(0.5, 1.5, shape[1]).astype(np.float32).astype(dt)
    return dy, x, mean, rstd, gamma


def make_swiglu_inputs(shape: tuple[int, int], dtype: str, dim: int = SWIGLU_DIM,
                       seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(y_grad, x) in ``dtype``: x ~ U(-3, 3) of ``shape``, y_grad ~ N(0, 1) of ``shape`` with ``dim`` halved."""
    rng = np.random.default_rng(seed)
    dt = DTYPES[dtype]
    x = rng.uniform(-3.0, 3.0, shape).astype(np.float32).astype(dt)
    dy_shape = list(shape)
    dy_shape[dim] //= 2
    dy = rng.standard_normal(dy_shape, dtype=np.float32).astype(dt)
    return dy, x


def make_ln_inputs(shape: tuple[int, int], dtype: str, seed: int = 0) -> tuple[np.ndarray, ...]:
    """(dy, x, variance, mean, gamma) in ``dtype``: dy ~ N(0, 1) and x ~ U(-2, 2) of ``shape``; the (biased)
    variance and mean of each row of the rounded x in float64 (what the forward LayerNorm saves), gamma ~
    U(0.5, 1.5)."""
    rng = np.random.default_rng(seed)
    dt = DTYPES[dtype]
    x = rng.uniform(-2.0, 2.0, shape).astype(np.float32).astype(dt)
    dy = rng.standard_normal(shape, dtype=np.float32).astype(dt)
    x64 = x.astype(np.float64)
    gamma = rng.uniform(0.5, 1.5, shape[-1]).astype(np.float32).astype(dt)
    return dy, x, x64.var(axis=-1).astype(dt), x64.mean(axis=-1).astype(dt), gamma


def make_nsa_inputs(shape: tuple[int, int, int], dtype: str, seqs: int = NSA_SEQS, bs: int = NSA_BLOCK_SIZE,
                    stride: int = NSA_STRIDE, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[int]]:
    """(output_grad, input, weight, act_seq_len) for NsaCompressGrad in ``dtype``: input ~ N(0, 1) of ``shape``
    [T, N, D] (TND) cut into ``seqs`` sequences of T / seqs tokens (act_seq_len their cumulative ends), weight ~
    U(-1, 1) of [bs, N], output_grad ~ N(0, 1) of [windows, N, D], ⌊(L − bs)/stride⌋ + 1 windows per sequence."""
    rng = np.random.default_rng(seed)
    dt = DTYPES[dtype]
    t, n, _ = shape
    cum = [t * (i + 1) // seqs for i in range(seqs)]
    lens = np.diff([0, *cum])
    wins = int(sum((length - bs) // stride + 1 for length in lens if length >= bs))
    x = rng.standard_normal(shape, dtype=np.float32).astype(dt)
    w = rng.uniform(-1.0, 1.0, (bs, n)).astype(np.float32).astype(dt)
    dy = rng.standard_normal((wins, *shape[1:]), dtype=np.float32).astype(dt)
    return dy, x, w, cum


def rms_norm_grad_case(shape: tuple[int, int], dtype: str) -> tuple[Callable[..., Any], Callable[[], np.ndarray], str]:
    """kernels.rms_norm_grad on ``shape``: (call(out=None) -> outputs, golden dx, shape label)."""
    dy, x, rstd, gamma = make_inputs(shape, dtype)

    def call(out: Any = None) -> Any:
        return kernels.rms_norm_grad(dy, x, rstd, gamma, out=out)

    return call, lambda: kernels.reference.rms_norm_grad(dy, x, rstd, gamma)[0], "x".join(map(str, shape))


def group_norm_backward_case(shape: tuple[int, int, int], dtype: str,
                             groups: int = GN_GROUPS) -> tuple[Callable[..., Any], Callable[[], np.ndarray], str]:
    """kernels.group_norm_backward on [N, C, HxW] with ``groups`` groups: (call, golden dx, shape label)."""
    args = (*make_gn_inputs(shape, dtype, groups), *shape, groups)

    def call(out: Any = None) -> Any:
        return kernels.group_norm_backward(*args, out=out)

    return call, lambda: kernels.reference.group_norm_backward(*args)[0], f"{'x'.join(map(str, shape))} G={groups}"


def swiglu_grad_case(shape: tuple[int, int], dtype: str,
                     dim: int = SWIGLU_DIM) -> tuple[Callable[..., Any], Callable[[], np.ndarray], str]:
    """kernels.swiglu_grad on x of ``shape`` split along ``dim``: (call, golden dx, shape label). The op has one
    output; call wraps it in a tuple, as the other cases return theirs."""
    dy, x = make_swiglu_inputs(shape, dtype, dim)

    def call(out: Any = None) -> Any:
        return (kernels.swiglu_grad(dy, x, dim, out=None if out is None else out[0]),)

    sizes = [str(n) for n in shape]
    sizes[dim] = f"2·{shape[dim] // 2}"  # the split axis: A and B
    return call, lambda: kernels.reference.swiglu_grad(dy, x, dim), "x".join(sizes)


def layer_norm_grad_case(shape: tuple[int, int],
                         dtype: str) -> tuple[Callable[..., Any], Callable[[], np.ndarray], str]:
    """kernels.layer_norm_grad over the last axis of ``shape`` (epsilon 1e-5): (call, golden pd_x, shape label)."""
    args = make_ln_inputs(shape, dtype)

    def call(out: Any = None) -> Any:
        return kernels.layer_norm_grad(*args, epsilon=LN_EPS, out=out)

    return call, lambda: kernels.reference.layer_norm_grad(*args, epsilon=LN_EPS)[0], "x".join(map(str, shape))


def nsa_compress_grad_case(shape: tuple[int, int, int], dtype: str, seqs: int = NSA_SEQS, bs: int = NSA_BLOCK_SIZE,
                           stride: int = NSA_STRIDE) -> tuple[Callable[..., Any], Callable[[], np.ndarray], str]:
    """kernels.nsa_compress_grad on input ``shape`` [T, N, D] in ``seqs`` equal sequences, blockSize ``bs``, stride
    ``stride``: (call, golden input_grad, shape label)."""
    dy, x, w, cum = make_nsa_inputs(shape, dtype, seqs, bs, stride)

    def call(out: Any = None) -> Any:
        return kernels.nsa_compress_grad(dy, x, w, cum, bs, stride, out=out)

    return (call, lambda: kernels.reference.nsa_compress_grad(dy, x, w, cum, bs, stride)[0],
            f"{'x'.join(map(str, shape))} S={seqs} bs={bs}/{stride}")


CASES = [(rms_norm_grad_case, (4096, 4096), "bf16"), (rms_norm_grad_case, (64, 12288), "fp32"),
         (group_norm_backward_case, (32, 512, 64 * 64), "fp32"), (group_norm_backward_case, (32, 512, 64 * 64), "bf16"),
         (swiglu_grad_case, (8192, 8192), "bf16"), (layer_norm_grad_case, (4096, 4096), "fp32"),
         (layer_norm_grad_case, (4096, 4096), "fp16"), (nsa_compress_grad_case, (8192, 32, 128), "bf16")]


def tiling_key(op: str, t: Any) -> str:
    """The tiling key and what it selects: RmsNormGrad's split, GroupNormGrad's UB mode and reduction, SwiGluGrad's
    dtype kernel (the key is the ge::DataType) with its base tile, double buffering and DataCopy path, the
    layer-norm backward's UB tile (whole rows x the 32 B-aligned H), its temporaries and isReuseSource,
    NsaCompressGrad's (one) key with its core count and whether windows overlap (inputGrad via the fp32 workspace)."""
    if op == "nsa_compress_grad":
        return f"key {t.tiling_key}, {t.block_dim} cores{', overlap' if t.is_overlap else ''}"
    if op == "layer_norm_grad":
        return (f"{t.tiling_key} tile {t.ub_rows}x{t.h_align}, tmp {TMP_MODES[t.tmp_mode]}"
                f"{', reuse' if t.is_reuse_source else ''}")
    if op == "group_norm_backward":
        return f"{t.tiling_key} UB mode {t.ub_mode}{', det' if t.deterministic else ''}"
    if op == "swiglu_grad":
        return (f"{t.tiling_key} {t.dtype} tile {t.base_row_len}x{t.base_col_len}{', DB' if t.is_double_buffer else ''}"
                f"{'' if t.is_32b_aligned else ', pad'}")
    return f"{t.tiling_key} {SPLIT.get(t.tiling_key, '?')}"


def run_case(make: Callable[..., Any], shape: tuple[int, ...], dtype: str) -> dict[str, Any]:
    call, golden, label = make(shape, dtype)
    with tilesim.capture() as runs:
        t0 = time.perf_counter()
        outs = call()  # compiles, or loads the Numba cache
        first = time.perf_counter() - t0
    report = runs[-1]
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
    }


RIGHT = {"block_dim", "UB used/cap B", "MTE2 bytes", "MTE3 bytes", "dx MARE", "limit", "first call", "wall"}


def table(rows: list[dict[str, str]]) -> str:
    cols = list(rows[0])
    width = {c: max(len(c), *(len(r[c]) for r in rows)) for c in cols}

    def line(cells: dict[str, str]) -> str:
        return "  ".join(cells[c].rjust(width[c]) if c in RIGHT else cells[c].ljust(width[c]) for c in cols)

    return "\n".join([line({c: c for c in cols}), "  ".join("-" * width[c] for c in cols)]
                     + [line(r) for r in rows])


def main() -> None:
    print(f"tilesim demo: aclnnRmsNormGrad, aclnnGroupNormBackward, aclnnSwiGluGrad, a layer-norm backward and "
          f"aclnnNsaCompressGrad on the emulated {tilesim.DEFAULT_SOC}, checks off\n")
    rows = [run_case(make, shape, dtype) for make, shape, dtype in CASES]
    print(table(rows))
    print(f"\nG: groups; det: the deterministic two-stage dgamma/dbeta reduction; 2·n: x's split axis (A, B); "
          f"tile: SwiGluGrad's base rows x base cols, DB: double-buffered queues, pad: DataCopyPad (rows not 32 B "
          f"aligned); layer_norm_grad's tile: UB rows x aligned H, tmp: its APIs' sharedTmpBuffer (shared) or free "
          f"UB (framework); S: sequences, bs: NsaCompressGrad's blockSize/stride, overlap: windows overlap "
          f"(inputGrad accumulated in an fp32 workspace); UB: per-core UB plan / capacity (bytes); MTE2/MTE3: bytes "
          f"GM->UB / UB->GM, all cores; dx MARE: max relative error vs float64 math (pd_x for layer_norm_grad, "
          f"input_grad for nsa_compress_grad), pass = MERE < T and MARE < limit (10T); first call: with Numba "
          f"compile/cache load; wall: median of {REPEATS} later calls into the first call's outputs.")


if __name__ == "__main__":
    main()
