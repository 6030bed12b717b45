"""Softmax over the last axis of x [8192, 4096] on this CPU, side by side: tilesim's kernel around the A2 SoftMax API
(on the programming model: ``tilesim.machine``, ``tilesim.runtime.launcher``), an untiled float32 numpy implementation
of the same math, torch on the CPU (``torch.softmax``, the baseline), and the host's memory bandwidth (the triad probe
of ``test_bench_rms_norm_grad.py``, imported so this file alone reports its share of it).

tilesim is timed twice on the same call: checks off (op "tilesim") and in checked mode (``checks=True``, op
"tilesim checked"), in the same group; the summary's checked/fast column is the ratio of their medians. Checked
mode is timed on this shape because tilesim's checked mode bounds every operand of it exactly (cols 4096: the API's
row-wise Sub and Div, no masked tail; see ``kernels/softmax.py``).

``make bench`` (``pytest bench --benchmark-enable``) times them; plain ``pytest bench`` (benchmarks disabled by
the project's addopts) runs each body once, as a smoke test. Every benchmark stores in ``extra_info`` the bytes
the op must move and, when timed, the effective GB/s at the median; ``bench/conftest.py`` prints the summary and
writes ``bench/results.json``. Each implementation's output is checked loosely against the float64 reference once,
before it is timed, so a broken benchmark fails without reporting a figure.

Bytes a softmax must move: read x, write y, i.e. 2·x bytes. The API makes five passes over UB (max, Sub, Exp, sum,
Div; half two Casts more), one exp per element; the pip build of Numba has no SVML, so tilesim's Exp is a scalar
``expf`` call per element.
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

ROWS, COLS = 8192, 4096
DIM = -1
DTYPES = {"fp32": np.dtype(np.float32), "fp16": np.dtype(np.float16)}
TORCH_DTYPES = {"fp32": torch.float32, "fp16": torch.float16}
RTOL = 1e-2  # the loose check: |a - g| <= RTOL * |g| + RTOL * max|g|, g the float64 reference


def group(dtype: str) -> str:
    return f"softmax {dtype} [{ROWS}, {COLS}]"


# One benchmark group per dtype, so pytest-benchmark's table puts tilesim, numpy and torch side by side.
PARAMS = [pytest.param(name, id=name, marks=pytest.mark.benchmark(group=group(name))) for name in DTYPES]


@functools.cache
def inputs(dtype: str) -> np.ndarray:
    """x ~ N(0, 2²) of shape [ROWS, COLS] in the dtype (logits)."""
    x = np.random.default_rng(2024).standard_normal((ROWS, COLS), dtype=np.float32)
    x *= np.float32(2.0)
    return x.astype(DTYPES[dtype], copy=False)


@functools.cache
def golden(dtype: str) -> np.ndarray:
    """y of kernels.reference.softmax (float64, untiled) on the dtype's x."""
    return kernels.reference.softmax(inputs(dtype), DIM)


def check(y, dtype: str) -> None:
    """y, cast to float64, is within RTOL of the reference (relative, plus RTOL of its largest magnitude
    absolute: most of y is tiny)."""
    g = golden(dtype)
    a = np.asarray(y).astype(np.float64).reshape(g.shape)
    assert np.allclose(a, g, rtol=RTOL, atol=RTOL * float(np.abs(g).max())), \
        f"y: max abs error {float(np.abs(a - g).max()):.3g}, max |golden| {float(np.abs(g).max()):.3g}"


def numpy_softmax(x: np.ndarray, dim: int = DIM) -> np.ndarray:
    """The reference's math, vectorised in float32 and untiled: e = exp(x − max), y = e / Σe, cast back to x's
    dtype."""
    y = x.astype(np.float32)
    y -= y.max(axis=dim, keepdims=True)
    np.exp(y, out=y)
    y /= y.sum(axis=dim, keepdims=True)
    return y.astype(x.dtype, copy=False)


def op_bytes(x: np.ndarray) -> int:
    """Bytes the op must move: read x, write y."""
    return 2 * x.nbytes


def _record(benchmark, op: str, dtype: str, nbytes: int, timed: str, **traffic: int) -> None:
    record(benchmark, op, dtype, nbytes, timed, **traffic, shape=[ROWS, COLS], dim=DIM)


def _tilesim(benchmark, dtype: str, checks: bool) -> None:
    """kernels.softmax with ``checks``, timed into a preallocated y, after one warm-up call with the same checks
    whose output is checked."""
    x = inputs(dtype)
    out = np.empty((ROWS, COLS), x.dtype)
    traffic = kernel_traffic(lambda: kernels.softmax(x, DIM, checks=checks, out=out))  # compile / load the cache
    check(out, dtype)
    benchmark(kernels.softmax, x, DIM, checks=checks, out=out)
    if not checks:
        remember_fast(benchmark, lambda: kernels.softmax(x, DIM, checks=False, out=out))
    _record(benchmark, "tilesim checked" if checks else "tilesim", dtype, op_bytes(x),
            f"kernels.softmax(x, -1, checks={checks}, out=y): validation, tiling, launch", **traffic)


@pytest.mark.parametrize("dtype", PARAMS)
def test_tilesim(benchmark, dtype):
    """kernels.softmax on the default SoC, checks off, into a preallocated y."""
    _tilesim(benchmark, dtype, checks=False)


@pytest.mark.parametrize("dtype", PARAMS)
def test_tilesim_checked(benchmark, dtype):
    """The same call in checked mode (``checks=True``: the kernel into a temporary, copied out when clean)."""
    _tilesim(benchmark, dtype, checks=True)


@pytest.mark.parametrize("dtype", PARAMS)
def test_numpy(benchmark, dtype):
    """numpy_softmax: untiled float32 numpy, one thread (casts in and out included)."""
    x = inputs(dtype)
    check(numpy_softmax(x), dtype)
    benchmark(numpy_softmax, x)
    _record(benchmark, "numpy float32", dtype, op_bytes(x), "numpy_softmax (float32, untiled; casts in and out)")


@pytest.mark.parametrize("dtype", PARAMS)
def test_torch(benchmark, dtype):
    """The torch baseline: torch.softmax in the dtype, CPU, 2 threads."""
    x_np = inputs(dtype)
    with torch_threads(2):
        x = torch.from_numpy(x_np)
        y = torch.softmax(x, DIM)  # warm-up
        assert y.dtype == TORCH_DTYPES[dtype] and y.shape == (ROWS, COLS)
        check(y.float().numpy(), dtype)
        benchmark(torch.softmax, x, DIM)
        pair_with_fast(benchmark, lambda: torch.softmax(x, DIM))
    _record(benchmark, "torch aten", dtype, op_bytes(x_np), "torch.softmax(x, -1) (aten, in the dtype), CPU, 2 "
                                                             "threads")
