"""SwiGlu (the forward, y = silu(A)·B) of x [8192, 8192] (y [8192, 4096], dim -1) on this CPU, side by side:
tilesim's tiled kernel (on the programming model: ``tilesim.machine``, ``tilesim.runtime.launcher``), an untiled float32
numpy implementation of the same math, torch on the CPU (``silu(a) * b``, the baseline), and the host's memory
bandwidth (the triad probe of ``test_bench_rms_norm_grad.py``, imported so this file alone reports its share of
it).

tilesim is timed twice on the same call: checks off (op "tilesim") and in checked mode (``checks=True``, op
"tilesim checked"), in the same group; the summary's checked/fast column is the ratio of their medians.

``make bench`` (``pytest bench --benchmark-enable``) times them; plain ``pytest bench`` (benchmarks disabled by
the project's addopts) runs each body once, as a smoke test. Every benchmark stores in ``extra_info`` the bytes
the op must move and, when timed, the effective GB/s at the median; ``bench/conftest.py`` prints the summary and
writes ``bench/results.json``. Each implementation's output is checked loosely against the float64 reference once,
before it is timed, so a broken benchmark fails without reporting a figure.

Bytes a SwiGlu must move: read x, write y (half of x), i.e. 1.5·x bytes. The op does one exp per element of A; the
pip build of Numba has no SVML, so tilesim's Exp is a scalar ``expf`` call per element, as in SwiGluGrad's bench.
"""

from __future__ import annotations

import functools

import ml_dtypes
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

ROWS, COLS = 8192, 8192  # x; A and B are its column halves, y is [ROWS, COLS // 2]
DIM = -1
DTYPES = {"fp32": np.dtype(np.float32), "bf16": np.dtype(ml_dtypes.bfloat16)}
TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
RTOL = 1e-2  # the loose check: |a - g| <= RTOL * |g| + RTOL * max|g|, g the float64 reference


def group(dtype: str) -> str:
    return f"swiglu {dtype} [{ROWS}, {COLS}]"


# One benchmark group per dtype, so pytest-benchmark's table puts tilesim, numpy and torch side by side.
PARAMS = [pytest.param(name, id=name, marks=pytest.mark.benchmark(group=group(name))) for name in DTYPES]


@functools.cache
def inputs(dtype: str) -> np.ndarray:
    """x ~ U(-3, 3) of shape [ROWS, COLS] in the dtype."""
    rng = np.random.default_rng(2024)
    x = rng.random((ROWS, COLS), dtype=np.float32)  # U[0, 1) in float32: no float64 copy of x
    x *= np.float32(6.0)
    x -= np.float32(3.0)
    return x.astype(DTYPES[dtype], copy=False)


@functools.cache
def golden(dtype: str) -> np.ndarray:
    """y of kernels.reference.swiglu (float64, untiled) on the dtype's x."""
    return kernels.reference.swiglu(inputs(dtype), DIM)


def check(y, dtype: str) -> None:
    """y, cast to float64, is within RTOL of the reference (relative, plus RTOL of its largest magnitude absolute:
    y crosses zero)."""
    g = golden(dtype)
    a = np.asarray(y).astype(np.float64).reshape(g.shape)
    assert np.allclose(a, g, rtol=RTOL, atol=RTOL * float(np.abs(g).max())), \
        f"y: max abs error {float(np.abs(a - g).max()):.3g}, max |golden| {float(np.abs(g).max()):.3g}"


def numpy_swiglu(x: np.ndarray, dim: int = DIM) -> np.ndarray:
    """The reference's math, vectorised in float32 and untiled: A and B x's halves along ``dim`` (cast to float32,
    no copy when they are), y = A / (1 + exp(−A)) · B, cast back to x's dtype."""
    f32 = np.float32
    a, b = np.split(x.astype(f32, copy=False), 2, axis=dim)
    y = np.negative(a)
    with np.errstate(over="ignore"):  # exp(−A) = inf for A < −88: A / inf = 0, as it should be
        np.exp(y, out=y)
    y += f32(1.0)
    np.divide(a, y, out=y)
    y *= b
    return y.astype(x.dtype, copy=False)


def op_bytes(x: np.ndarray) -> int:
    """Bytes the op must move: read x, write y (half of x)."""
    return x.nbytes + x.nbytes // 2


def _record(benchmark, op: str, dtype: str, nbytes: int, timed: str, **traffic: int) -> None:
    record(benchmark, op, dtype, nbytes, timed, **traffic, shape=[ROWS, COLS], dim=DIM)


def _tilesim(benchmark, dtype: str, checks: bool) -> None:
    """kernels.swiglu with ``checks``, timed into a preallocated y, after one warm-up call with the same checks
    whose output is checked."""
    x = inputs(dtype)
    out = np.empty((ROWS, COLS // 2), x.dtype)
    traffic = kernel_traffic(lambda: kernels.swiglu(x, DIM, checks=checks, out=out))  # compile / load the cache
    check(out, dtype)
    benchmark(kernels.swiglu, x, DIM, checks=checks, out=out)
    if not checks:
        remember_fast(benchmark, lambda: kernels.swiglu(x, DIM, checks=False, out=out))
    _record(benchmark, "tilesim checked" if checks else "tilesim", dtype, op_bytes(x),
            f"kernels.swiglu(x, -1, checks={checks}, out=y): validation, tiling, launch", **traffic)


@pytest.mark.parametrize("dtype", PARAMS)
def test_tilesim(benchmark, dtype):
    """kernels.swiglu on the default SoC, checks off, into a preallocated y."""
    _tilesim(benchmark, dtype, checks=False)


@pytest.mark.parametrize("dtype", PARAMS)
def test_tilesim_checked(benchmark, dtype):
    """The same call in checked mode (``checks=True``: the kernel into a temporary, copied out when clean)."""
    _tilesim(benchmark, dtype, checks=True)


@pytest.mark.parametrize("dtype", PARAMS)
def test_numpy(benchmark, dtype):
    """numpy_swiglu: untiled float32 numpy, one thread (casts in and out included)."""
    x = inputs(dtype)
    check(numpy_swiglu(x), dtype)
    benchmark(numpy_swiglu, x)
    _record(benchmark, "numpy float32", dtype, op_bytes(x), "numpy_swiglu (float32, untiled; casts in and out)")


def torch_swiglu(x: torch.Tensor) -> torch.Tensor:
    """silu of the first half times the second, as aten ops in the dtype (ops-nn's golden.py: torch.chunk, F.silu)."""
    a, b = x.chunk(2, dim=DIM)
    return torch.nn.functional.silu(a) * b


@pytest.mark.parametrize("dtype", PARAMS)
def test_torch(benchmark, dtype):
    """The torch baseline: torch_swiglu in the dtype, CPU, 2 threads."""
    x_np = inputs(dtype)
    with torch_threads(2):
        x = torch.from_numpy(x_np.astype(np.float32)).to(TORCH_DTYPES[dtype])  # bf16 through an exact fp32 copy
        y = torch_swiglu(x)  # warm-up
        assert y.dtype == TORCH_DTYPES[dtype] and y.shape == (ROWS, COLS // 2)
        check(y.float().numpy(), dtype)
        benchmark(torch_swiglu, x)
        pair_with_fast(benchmark, lambda: torch_swiglu(x))
    _record(benchmark, "torch aten", dtype, op_bytes(x_np), "silu(a) * b (aten, in the dtype), CPU, 2 threads")
