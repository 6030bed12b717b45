"""RmsNorm (the forward, aclnnRmsNorm) at the two standard shapes, [4096, 4096] (NORMAL on 910B: a row per
compute, numColAlign above 2000) and [16384, 1024] (MERGE_N: 11 rows a pass), on this CPU, side by side: tilesim's
tiled kernels (on the programming model: ``tilesim.machine``, ``tilesim.runtime.launcher``), an untiled float32 numpy
implementation of the same math, torch on the CPU (``torch.nn.functional.rms_norm``, the baseline), and the host's
memory bandwidth (the triad probe of ``test_bench_rms_norm_grad.py``, imported so this file alone reports its
share of it).

tilesim is timed twice on the same call: checks off (op "tilesim") and in checked mode (``checks=True``, op
"tilesim checked"), in the same group; the summary's checked/fast column is the ratio of their medians.

``make bench`` (``pytest bench --benchmark-enable``) times them; plain ``pytest bench`` (benchmarks disabled by
the project's addopts) runs each body once, as a smoke test. Every benchmark stores in ``extra_info`` the bytes
the op must move and, when timed, the effective GB/s at the median; ``bench/conftest.py`` prints the summary and
writes ``bench/results.json``. Each implementation's y is checked against the float64 reference (the first 64
rows, Ascend's precision standard) once, before it is timed, so a broken benchmark fails without a figure.

Bytes an RmsNorm must move: read x and gamma, write y (x's dtype) and rstd (N fp32).
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
from tilesim.precision import compare

SHAPES = ((4096, 4096), (16384, 1024))  # (N, D): 16 M elements each
EPS = 1e-6
DTYPES = {"fp32": np.dtype(np.float32), "bf16": np.dtype(ml_dtypes.bfloat16)}
TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def group(dtype: str, shape: tuple[int, int]) -> str:
    return f"rms_norm {dtype} [{shape[0]}, {shape[1]}]"


# One benchmark group per (dtype, shape), so pytest-benchmark's table puts tilesim, numpy and torch side by side.
PARAMS = [pytest.param(name, shape, id=f"{name}-{shape[0]}x{shape[1]}",
                       marks=pytest.mark.benchmark(group=group(name, shape)))
          for shape in SHAPES for name in DTYPES]


@functools.cache
def inputs(dtype: str, shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """(x, gamma): x ~ U(-2, 2) of ``shape`` in the dtype, gamma ~ U(0.5, 1.5) of [D] in the same dtype."""
    rng = np.random.default_rng(2024)
    x = rng.random(shape, dtype=np.float32)
    x *= np.float32(4.0)
    x -= np.float32(2.0)
    gamma = rng.uniform(0.5, 1.5, shape[1]).astype(np.float32)
    return x.astype(DTYPES[dtype], copy=False), gamma.astype(DTYPES[dtype])


def check(y: np.ndarray, x: np.ndarray, gamma: np.ndarray) -> None:
    """The first 64 rows of y against the float64 reference, under Ascend's precision standard."""
    golden, _ = kernels.reference.rms_norm(x[:64], gamma, EPS)
    p = compare(np.asarray(y)[:64].astype(x.dtype), golden)
    assert p.ok, f"y: {p}"


def numpy_rms_norm(x: np.ndarray, gamma: np.ndarray, eps: float = EPS) -> tuple[np.ndarray, np.ndarray]:
    """The reference's math, vectorised in float32 and untiled: rstd = 1 / sqrt(mean(x²) + ε) per row, y = x · rstd
    · gamma cast back to x's dtype."""
    f32 = np.float32
    x32 = x.astype(f32, copy=False)
    rstd = np.einsum("ij,ij->i", x32, x32)
    rstd *= f32(1.0 / x.shape[1])
    rstd += f32(eps)
    np.sqrt(rstd, out=rstd)
    np.divide(f32(1.0), rstd, out=rstd)
    y = x32 * rstd[:, None]
    y *= gamma.astype(f32)
    return y.astype(x.dtype, copy=False), rstd


def op_bytes(x: np.ndarray, gamma: np.ndarray) -> int:
    """Bytes the op must move: read x and gamma, write y and rstd (fp32)."""
    return 2 * x.nbytes + gamma.nbytes + 4 * x.shape[0]


def _record(benchmark, op: str, dtype: str, shape: tuple[int, int], nbytes: int, timed: str, **traffic: int) -> None:
    record(benchmark, op, dtype, nbytes, timed, **traffic, shape=list(shape))


def _tilesim(benchmark, dtype: str, shape: tuple[int, int], checks: bool) -> None:
    """kernels.rms_norm with ``checks``, timed into preallocated outputs after one warm-up call with the same
    checks whose y is checked."""
    x, gamma = inputs(dtype, shape)
    out = (np.empty_like(x), np.empty((shape[0], 1), np.float32))
    traffic = kernel_traffic(lambda: kernels.rms_norm(x, gamma, checks=checks, out=out))  # compile / load the cache
    check(out[0], x, gamma)
    benchmark(kernels.rms_norm, x, gamma, checks=checks, out=out)
    if not checks:
        remember_fast(benchmark, lambda: kernels.rms_norm(x, gamma, checks=False, out=out))
    _record(benchmark, "tilesim checked" if checks else "tilesim", dtype, shape, op_bytes(x, gamma),
            f"kernels.rms_norm(x, gamma, checks={checks}, out=(y, rstd)): validation, tiling, launch", **traffic)


@pytest.mark.parametrize("dtype,shape", PARAMS)
def test_tilesim(benchmark, dtype, shape):
    """kernels.rms_norm on the default SoC, checks off, into preallocated outputs."""
    _tilesim(benchmark, dtype, shape, checks=False)


@pytest.mark.parametrize("dtype,shape", PARAMS)
def test_tilesim_checked(benchmark, dtype, shape):
    """The same call in checked mode (``checks=True``: the kernel into temporaries, copied out when clean)."""
    _tilesim(benchmark, dtype, shape, checks=True)


@pytest.mark.parametrize("dtype,shape", PARAMS)
def test_numpy(benchmark, dtype, shape):
    """numpy_rms_norm: untiled float32 numpy, one thread (casts in and out included)."""
    x, gamma = inputs(dtype, shape)
    check(numpy_rms_norm(x, gamma)[0], x, gamma)
    benchmark(numpy_rms_norm, x, gamma)
    _record(benchmark, "numpy float32", dtype, shape, op_bytes(x, gamma),
            "numpy_rms_norm (float32, untiled; casts in and out)")


@pytest.mark.parametrize("dtype,shape", PARAMS)
def test_torch(benchmark, dtype, shape):
    """The torch baseline: torch.nn.functional.rms_norm in the dtype (eps 1e-6, weight in the dtype), CPU, 2
    threads; torch returns no rstd."""
    x_np, gamma_np = inputs(dtype, shape)
    tdt = TORCH_DTYPES[dtype]
    with torch_threads(2):
        x = torch.from_numpy(x_np.astype(np.float32)).to(tdt)  # bf16 through an exact fp32 copy
        w = torch.from_numpy(gamma_np.astype(np.float32)).to(tdt)

        def forward() -> torch.Tensor:
            return torch.nn.functional.rms_norm(x, (shape[1],), w, eps=EPS)

        y = forward()  # warm-up
        assert y.dtype == tdt and y.shape == shape
        check(y.float().numpy(), x_np, gamma_np)
        benchmark(forward)
        pair_with_fast(benchmark, forward)
    _record(benchmark, "torch aten", dtype, shape, op_bytes(x_np, gamma_np),
            "torch.nn.functional.rms_norm (aten, in the dtype), CPU, 2 threads")
