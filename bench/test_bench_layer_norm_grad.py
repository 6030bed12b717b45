"""Layer-norm backward of x [4096, 4096] over the last axis on this CPU, side by side: tilesim's tiled kernel (the
LayerNormGrad and LayerNormGradBeta APIs per UB tile), an untiled float32 numpy implementation of the same math,
torch's CPU kernel (``aten::native_layer_norm_backward``), and the host's memory bandwidth (the triad probe of
``test_bench_rms_norm_grad.py``, imported so this file alone reports its share of it).

tilesim is timed twice on the same call: checks off (op "tilesim") and in checked mode (``checks=True``, op
"tilesim checked"), in the same group; the summary's checked/fast column is the ratio of their medians.

``make bench`` (``pytest bench --benchmark-enable``) times them; plain ``pytest bench`` (benchmarks disabled by
the project's addopts) runs each body once, as a smoke test. Every benchmark stores in ``extra_info`` the bytes
the op must move and, when timed, the effective GB/s at the median; ``bench/conftest.py`` prints the summary
and writes ``bench/results.json``. Each implementation's outputs are checked loosely against the float64
reference once, before it is timed, so a broken benchmark fails without reporting a figure.

Bytes a layer-norm backward must move: read dy and x (N x H), variance and mean (N) and gamma (H); write pd_x
(N x H), pd_gamma and pd_beta (H each); everything in x's dtype. Workspace and cross-core partial sums are not
counted. torch is given rstd (N) in place of variance, the same bytes.

With H = 4096 a UB tile holds one row (LayerNormGrad's one-chunk temporaries, 6·H·4 B, sit next to four fp32 row
tiles and gamma), so each core runs its ~86 rows one by one: about 20 whole-row vector instructions, three row
sums as WholeReduceSum trees (65 vcadds each) and two [H] atomic adds of the row's pd_gamma and pd_beta partials
per row. The emulator is bound by those instructions, not by memory: the vcadds alone take about a third of its
time.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
import tilesim.kernels as kernels
import torch

from bench.record import kernel_traffic, pair_with_fast, record, remember_fast, torch_threads
from bench.test_bench_rms_norm_grad import (  # noqa: F401  (collected here too)
    test_bandwidth_probe,
    test_bandwidth_probe_one_thread,
    test_vector_pass,
)

N, H = 4096, 4096
EPS = 1e-5  # torch.nn.LayerNorm's default
DTYPES = {"fp32": np.dtype(np.float32), "fp16": np.dtype(np.float16)}
TORCH_DTYPES = {"fp32": torch.float32, "fp16": torch.float16}
RTOL = 1e-2  # the loose check: |a - g| <= RTOL * |g| + RTOL * max|g| per output, g the float64 reference


def group(dtype: str) -> str:
    return f"layer_norm_grad {dtype} [{N}, {H}]"


# One benchmark group per dtype, so pytest-benchmark's table puts tilesim, numpy and torch side by side.
PARAMS = [pytest.param(name, id=name, marks=pytest.mark.benchmark(group=group(name))) for name in DTYPES]


@functools.cache
def inputs(dtype: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(dy, x, variance, mean, gamma), all in the dtype: x ~ U(-2, 2) and dy ~ N(0, 1) of shape [N, H], the
    variance (biased) and mean [N] of each row of the rounded x computed in float64, gamma ~ U(0.5, 1.5)."""
    rng = np.random.default_rng(2024)
    dt = DTYPES[dtype]
    x = rng.uniform(-2.0, 2.0, (N, H)).astype(np.float32).astype(dt)
    dy = rng.standard_normal((N, H), dtype=np.float32).astype(dt)
    x64 = x.astype(np.float64)
    mean, var = x64.mean(axis=-1), x64.var(axis=-1)
    gamma = rng.uniform(0.5, 1.5, H).astype(np.float32).astype(dt)
    return dy, x, var.astype(dt), mean.astype(dt), gamma


@functools.cache
def golden(dtype: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(pd_x, pd_gamma, pd_beta) of kernels.reference.layer_norm_grad (float64, untiled) on the dtype's inputs."""
    return kernels.reference.layer_norm_grad(*inputs(dtype), epsilon=EPS)


def check(outputs, dtype: str) -> None:
    """Each of (pd_x, pd_gamma, pd_beta), cast to float64, is within RTOL of the reference (relative, plus RTOL
    of the output's largest magnitude absolute: each crosses zero)."""
    for name, a, g in zip(("pd_x", "pd_gamma", "pd_beta"), outputs, golden(dtype), strict=True):
        a = np.asarray(a).astype(np.float64).reshape(g.shape)
        assert np.allclose(a, g, rtol=RTOL, atol=RTOL * float(np.abs(g).max())), \
            f"{name}: max abs error {float(np.abs(a - g).max()):.3g}, max |golden| {float(np.abs(g).max()):.3g}"


def numpy_layer_norm_grad(dy: np.ndarray, x: np.ndarray, variance: np.ndarray, mean: np.ndarray, gamma: np.ndarray,
                          epsilon: float = EPS) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The reference's math, vectorised in float32 and untiled over [rows, H]: inputs cast to float32 (no copy
    when they are), r = (variance + ε)^−½ and x̂ = (x − mean)·r per row, dγ = dy·γ,
    ``pd_x = r·(dγ − mean_H(dγ) − x̂·mean_H(dγ·x̂))``, ``pd_gamma = Σ_rows dy·x̂``, ``pd_beta = Σ_rows dy``; the
    outputs cast back to x's dtype. pd_beta is a BLAS product with a ones vector: numpy's column sum adds
    the rows one after another, which misses the fp32 precision standard here (MARE 2.0e-3, limit 1.2e-3)."""
    f32 = np.float32
    h = np.shape(x)[-1]
    d = dy.astype(f32, copy=False).reshape(-1, h)
    r = f32(1.0) / np.sqrt(variance.astype(f32).reshape(-1, 1) + f32(epsilon))
    xhat = x.astype(f32).reshape(-1, h) - mean.astype(f32).reshape(-1, 1)  # a new array: safe to update in place
    xhat *= r
    dg = d * gamma.astype(f32, copy=False)
    c1 = dg.mean(axis=-1, keepdims=True)
    c2 = np.einsum("nh,nh->n", dg, xhat)[:, None] * f32(1.0 / h)
    pd_gamma = np.einsum("nh,nh->h", d, xhat)
    pd_beta = np.ones(d.shape[0], f32) @ d  # BLAS's blocked sum: d.sum(axis=0) adds rows one by one
    dg -= c1
    xhat *= c2
    dg -= xhat
    dg *= r
    dt = x.dtype
    return dg.reshape(np.shape(x)).astype(dt, copy=False), pd_gamma.astype(dt), pd_beta.astype(dt)


def op_bytes(dy: np.ndarray, x: np.ndarray, variance: np.ndarray, mean: np.ndarray, gamma: np.ndarray) -> int:
    """Bytes the op must move: read dy, x, variance, mean, gamma; write pd_x, pd_gamma, pd_beta (x's dtype)."""
    return dy.nbytes + x.nbytes + variance.nbytes + mean.nbytes + gamma.nbytes + x.nbytes + 2 * gamma.nbytes


def _record(benchmark, op: str, dtype: str, nbytes: int, timed: str, **traffic: int) -> None:
    record(benchmark, op, dtype, nbytes, timed, **traffic, shape=[N, H], epsilon=EPS)


def _tilesim(benchmark, dtype: str, checks: bool) -> None:
    """kernels.layer_norm_grad with ``checks``, timed into preallocated outputs, after one
    warm-up call with the same checks whose outputs are checked."""
    args = inputs(dtype)
    _, x, _, _, gamma = args
    out = (np.empty_like(x), np.empty_like(gamma), np.empty_like(gamma))
    traffic = kernel_traffic(  # the warm-up: compile / load the Numba cache
        lambda: kernels.layer_norm_grad(*args, epsilon=EPS, checks=checks, out=out))
    check(out, dtype)
    benchmark(kernels.layer_norm_grad, *args, epsilon=EPS, checks=checks, out=out)
    if not checks:
        remember_fast(benchmark, lambda: kernels.layer_norm_grad(*args, epsilon=EPS, checks=False, out=out))
    _record(benchmark, "tilesim checked" if checks else "tilesim", dtype, op_bytes(*args),
            f"kernels.layer_norm_grad(..., checks={checks}, out=(pd_x, pd_gamma, pd_beta)): validation, tiling, "
            f"launch", **traffic)


@pytest.mark.parametrize("dtype", PARAMS)
def test_tilesim(benchmark, dtype):
    """kernels.layer_norm_grad on the default SoC (shared tmp, no isReuseSource), checks off, into preallocated
    outputs."""
    _tilesim(benchmark, dtype, checks=False)


@pytest.mark.parametrize("dtype", PARAMS)
def test_tilesim_checked(benchmark, dtype):
    """The same call in checked mode (``checks=True``: the kernel into temporaries, copied out when clean)."""
    _tilesim(benchmark, dtype, checks=True)


@pytest.mark.parametrize("dtype", PARAMS)
def test_numpy(benchmark, dtype):
    """numpy_layer_norm_grad: untiled float32 numpy (casts in and out included)."""
    args = inputs(dtype)
    check(numpy_layer_norm_grad(*args), dtype)
    benchmark(numpy_layer_norm_grad, *args)
    _record(benchmark, "numpy float32", dtype, op_bytes(*args),
           "numpy_layer_norm_grad (float32, untiled; casts in and out)")


@functools.cache
def _torch_tensors(dtype: str) -> tuple[torch.Tensor, ...]:
    """(dy, x, mean [N, 1], rstd [N, 1], gamma, bias) as CPU tensors of the dtype; rstd = (variance + ε)^−½ in
    float64 from the dtype's variance, rounded to the dtype; bias zeros (see test_torch)."""
    dy, x, var, mean, gamma = inputs(dtype)
    rstd = (1.0 / np.sqrt(var.astype(np.float64) + EPS)).astype(DTYPES[dtype])
    t = [torch.from_numpy(a) for a in (dy, x, mean.reshape(N, 1), rstd.reshape(N, 1), gamma)]
    return (*t, torch.zeros(H, dtype=TORCH_DTYPES[dtype]))


@pytest.mark.parametrize("dtype", PARAMS)
def test_torch(benchmark, dtype):
    """``torch.ops.aten.native_layer_norm_backward(dy, x, [H], mean, rstd, gamma, bias, [True] * 3)`` on the
    CPU, 2 threads, every tensor in the dtype (torch takes all-half and returns half pd_gamma and pd_beta). bias
    is a zero tensor: the backward never reads its values, but torch 2.13's CPU kernel raises "tensor does not
    have a device" when bias is None and pd_beta is asked for (it allocates pd_beta like the bias)."""
    args = inputs(dtype)
    dy, x, mean, rstd, gamma, bias = _torch_tensors(dtype)
    tdt = TORCH_DTYPES[dtype]
    with torch_threads(2):
        def backward():
            return torch.ops.aten.native_layer_norm_backward(dy, x, [H], mean, rstd, gamma, bias, [True, True, True])

        outs = backward()  # warm-up
        assert all(o.dtype == tdt for o in outs) and outs[0].shape == (N, H) and outs[1].shape == (H,)
        check([o.numpy() for o in outs], dtype)
        benchmark(backward)
        pair_with_fast(benchmark, backward)
    _record(benchmark, "torch aten", dtype, op_bytes(*args),
           "torch.ops.aten.native_layer_norm_backward(..., [True, True, True]), CPU, 2 threads")
