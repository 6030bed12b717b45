"""Small calls: each op on a tiny input, where what a call costs is its fixed part: the argument checks, the
tiling, the UB plan, the launch of the parallel kernel (one parallel region per phase), the atomic merges and the
run report. The target is under 200 µs per call.

The inputs: RmsNormGrad [8, 128] fp32; GroupNormBackward [2, 8, 16] with 2 groups, fp32; SwiGluGrad x [8, 256]
(y_grad [8, 128], dim -1), fp32; the layer-norm backward [8, 128] fp32; NsaCompressGrad input [64, 1, 128] bf16
(TND, one sequence of 64 tokens, blockSize 32, stride 16: 3 windows; the op has no fp32).

Timed: the op API with ``checks=False`` into preallocated outputs, after warm-up calls (compile or load the
Numba cache), all in the benchmark group "small calls"; the summary prints their medians in µs in a section of
their own. Bytes are counted as each op's bench counts them (see its op_bytes); at these sizes GB/s says
nothing, so the summary leaves it out. Each output is checked loosely against the float64 reference once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
import pytest
import tilesim.kernels as kernels

from bench.record import record
from bench.test_bench_group_norm_backward import op_bytes as gn_bytes
from bench.test_bench_layer_norm_grad import op_bytes as ln_bytes
from bench.test_bench_nsa_compress_grad import op_bytes as nsa_bytes
from bench.test_bench_rms_norm_grad import op_bytes as rms_bytes
from bench.test_bench_swiglu_grad import op_bytes as swiglu_bytes

GROUP = "small calls"  # bench/conftest.py's SMALL_GROUP
WARMUP = 3  # untimed calls before timing: the first compiles or loads the Numba cache
RTOL = 1e-2  # the loose check: |a - g| <= RTOL * |g| + RTOL * max|g|, g the float64 reference
F32, BF16 = np.dtype(np.float32), np.dtype(ml_dtypes.bfloat16)

# (call, golden of the first output, shape, dtype, bytes, timed)
Case = tuple[Callable[[], Any], np.ndarray, list[int], str, int, str]


def _rms_norm_grad(rng: np.random.Generator) -> Case:
    n, d = 8, 128
    x = rng.uniform(-2.0, 2.0, (n, d)).astype(F32)
    dy = rng.standard_normal((n, d), dtype=F32)
    rstd = (1.0 / np.sqrt(np.mean(x * x, axis=1) + np.float32(1e-6))).astype(F32)
    gamma = rng.uniform(0.5, 1.5, d).astype(F32)
    out = (np.empty_like(dy), np.empty(d, F32))

    def call():
        return kernels.rms_norm_grad(dy, x, rstd, gamma, checks=False, out=out)

    return (call, kernels.reference.rms_norm_grad(dy, x, rstd, gamma)[0], [n, d], "fp32",
            rms_bytes(dy, x, rstd, gamma), "kernels.rms_norm_grad(..., checks=False, out=(dx, dgamma))")


def _group_norm_backward(rng: np.random.Generator) -> Case:
    n, c, hxw, g = 2, 8, 16, 2
    x = rng.uniform(-2.0, 2.0, (n, c, hxw)).astype(F32)
    dy = rng.standard_normal((n, c, hxw), dtype=F32)
    xg = x.reshape(n, g, -1).astype(np.float64)
    mean = xg.mean(axis=-1).astype(F32)
    rstd = (1.0 / np.sqrt(xg.var(axis=-1) + 1e-5)).astype(F32)
    gamma = rng.uniform(0.5, 1.5, c).astype(F32)
    args = (dy, x, mean, rstd, gamma)
    out = (np.empty_like(dy), np.empty_like(gamma), np.empty_like(gamma))

    def call():
        return kernels.group_norm_backward(*args, n, c, hxw, g, checks=False, out=out)

    return (call, kernels.reference.group_norm_backward(*args, n, c, hxw, g)[0], [n, c, hxw], "fp32",
            gn_bytes(*args), f"kernels.group_norm_backward(..., {n}, {c}, {hxw}, {g}, checks=False, out=(...))")


def _swiglu_grad(rng: np.random.Generator) -> Case:
    rows, cols = 8, 256
    x = rng.uniform(-3.0, 3.0, (rows, cols)).astype(F32)
    dy = rng.standard_normal((rows, cols // 2), dtype=F32)
    out = np.empty_like(x)

    def call():
        return (kernels.swiglu_grad(dy, x, -1, checks=False, out=out),)

    return (call, kernels.reference.swiglu_grad(dy, x, -1), [rows, cols], "fp32", swiglu_bytes(dy, x),
            "kernels.swiglu_grad(dy, x, -1, checks=False, out=dx)")


def _layer_norm_grad(rng: np.random.Generator) -> Case:
    n, h = 8, 128
    x = rng.uniform(-2.0, 2.0, (n, h)).astype(F32)
    dy = rng.standard_normal((n, h), dtype=F32)
    x64 = x.astype(np.float64)
    gamma = rng.uniform(0.5, 1.5, h).astype(F32)
    args = (dy, x, x64.var(axis=-1).astype(F32), x64.mean(axis=-1).astype(F32), gamma)
    out = (np.empty_like(x), np.empty_like(gamma), np.empty_like(gamma))

    def call():
        return kernels.layer_norm_grad(*args, epsilon=1e-5, checks=False, out=out)

    return (call, kernels.reference.layer_norm_grad(*args, epsilon=1e-5)[0], [n, h], "fp32", ln_bytes(*args),
            "kernels.layer_norm_grad(..., epsilon=1e-5, checks=False, out=(pd_x, pd_gamma, pd_beta))")


def _nsa_compress_grad(rng: np.random.Generator) -> Case:
    t, n, d, bs, stride = 64, 1, 128, 32, 16
    cum = [t]
    wins = (t - bs) // stride + 1
    x = rng.standard_normal((t, n, d), dtype=F32).astype(BF16)
    w = rng.uniform(-1.0, 1.0, (bs, n)).astype(F32).astype(BF16)
    dy = rng.standard_normal((wins, n, d), dtype=F32).astype(BF16)
    out = (np.empty_like(x), np.empty_like(w))

    def call():
        return kernels.nsa_compress_grad(dy, x, w, cum, bs, stride, checks=False, out=out)

    return (call, kernels.reference.nsa_compress_grad(dy, x, w, cum, bs, stride)[0], [t, n, d], "bf16",
            nsa_bytes(dy, x, w), f"kernels.nsa_compress_grad(dy, x, w, {cum}, {bs}, {stride}, checks=False, out=(...))")


CASES = {"rms_norm_grad": _rms_norm_grad, "group_norm_backward": _group_norm_backward, "swiglu_grad": _swiglu_grad,
         "layer_norm_grad": _layer_norm_grad, "nsa_compress_grad": _nsa_compress_grad}


@pytest.mark.benchmark(group=GROUP)
@pytest.mark.parametrize("kernel", list(CASES))
def test_small_call(benchmark, kernel):
    """One op on its tiny input, checks off, into preallocated outputs, after WARMUP untimed calls."""
    call, golden, shape, dtype, nbytes, timed = CASES[kernel](np.random.default_rng(2024))
    for _ in range(WARMUP):
        outs = call()
    a = np.asarray(outs[0]).astype(np.float64).reshape(golden.shape)
    assert np.allclose(a, golden, rtol=RTOL, atol=RTOL * float(np.abs(golden).max())), \
        f"{kernel}: max abs error {float(np.abs(a - golden).max()):.3g}"
    benchmark(call)
    record(benchmark, "tilesim", dtype, nbytes, timed + ", tiny input", shape=shape, kernel=kernel)
    if benchmark.stats is not None:
        benchmark.extra_info["median_us"] = benchmark.stats.stats.median * 1e6
