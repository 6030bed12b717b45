"""SwiGluGrad of x [8192, 8192] (y_grad [8192, 4096], dim -1) on this CPU, side by side: tilesim's tiled kernel, an
untiled float32 numpy implementation of the same math, torch on the CPU (the backward as aten ops, the baseline;
and autograd's forward + backward, for what an autograd user pays), and the host's memory bandwidth (the triad
probe of ``test_bench_rms_norm_grad.py``, imported so this file alone reports its share of it).

tilesim is timed twice on the same call: checks off (op "tilesim") and in checked mode (``checks=True``, op
"tilesim checked"), in the same group; the summary's checked/fast column is the ratio of their medians.

``make bench`` (``pytest bench --benchmark-enable``) times them; plain ``pytest bench`` (benchmarks disabled by
the project's addopts) runs each body once, as a smoke test. Every benchmark stores in ``extra_info`` the bytes
the op must move and, when timed, the effective GB/s at the median; ``bench/conftest.py`` prints the summary
and writes ``bench/results.json``. Each implementation's output is checked loosely against the float64
reference once, before it is timed, so a broken benchmark fails without reporting a figure.

Bytes a SwiGluGrad must move: read x (rows of A and B) and y_grad, write dx (x's shape and dtype), i.e.
2·x + y_grad bytes. The op does one exp per element of A; the pip build of Numba has no SVML, so tilesim's Exp is
a scalar libm ``expf`` call per element, and on 2 threads the exps alone take longer than moving the op's bytes at
the probe's bandwidth. Exp is the costliest of the fp32 kernel's 15 vector passes over each tile (bf16 adds 5
casts), not most of its time: the other passes and the emulator's per-instruction work take the rest.
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

ROWS, COLS = 8192, 8192  # x; A and B are its column halves, y_grad is [ROWS, COLS // 2]
DIM = -1
DTYPES = {"fp32": np.dtype(np.float32), "bf16": np.dtype(ml_dtypes.bfloat16)}
TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
RTOL = 1e-2  # the loose check: |a - g| <= RTOL * |g| + RTOL * max|g|, g the float64 reference


def group(dtype: str) -> str:
    return f"swiglu_grad {dtype} [{ROWS}, {COLS}]"


# One benchmark group per dtype, so pytest-benchmark's table puts tilesim, numpy and torch side by side.
PARAMS = [pytest.param(name, id=name, marks=pytest.mark.benchmark(group=group(name))) for name in DTYPES]


@functools.cache
def inputs(dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """(dy, x) in the dtype: x ~ U(-3, 3) of shape [ROWS, COLS], dy ~ N(0, 1) of shape [ROWS, COLS // 2]."""
    rng = np.random.default_rng(2024)
    dt = DTYPES[dtype]
    x = rng.random((ROWS, COLS), dtype=np.float32)  # U[0, 1) in float32: no float64 copy of x
    x *= np.float32(6.0)
    x -= np.float32(3.0)
    x = x.astype(dt, copy=False)
    dy = rng.standard_normal((ROWS, COLS // 2), dtype=np.float32).astype(dt)
    return dy, x


@functools.cache
def golden(dtype: str) -> np.ndarray:
    """dx of kernels.reference.swiglu_grad (float64, untiled) on the dtype's inputs."""
    return kernels.reference.swiglu_grad(*inputs(dtype), DIM)


def check(dx, dtype: str) -> None:
    """dx, cast to float64, is within RTOL of the reference (relative, plus RTOL of its largest magnitude absolute:
    dA and dB cross zero)."""
    g = golden(dtype)
    a = np.asarray(dx).astype(np.float64).reshape(g.shape)
    assert np.allclose(a, g, rtol=RTOL, atol=RTOL * float(np.abs(g).max())), \
        f"dx: max abs error {float(np.abs(a - g).max()):.3g}, max |golden| {float(np.abs(g).max()):.3g}"


def numpy_swiglu_grad(y_grad: np.ndarray, x: np.ndarray, dim: int = DIM) -> np.ndarray:
    """The reference's math, vectorised in float32 and untiled: x and y_grad cast to float32 (no copy when they
    are), A and B x's halves along ``dim``, σ = 1 / (1 + exp(−A)), dB = dy·A·σ and dA = dy·B·(σ + A·σ·(1 − σ))
    written into the halves of one float32 dx, cast back to x's dtype."""
    f32 = np.float32
    a, b = np.split(x.astype(f32, copy=False), 2, axis=dim)
    dy = y_grad.astype(f32, copy=False)
    dx = np.empty(np.shape(x), f32)
    da, db = np.split(dx, 2, axis=dim)  # views: dA and dB land in place
    s = np.negative(a)
    with np.errstate(over="ignore"):  # exp(−A) = inf for A < −88: σ = 1 / inf = 0, as it should be
        np.exp(s, out=s)
    s += f32(1.0)
    np.reciprocal(s, out=s)  # σ
    np.multiply(a, s, out=db)  # A·σ
    np.subtract(f32(1.0), s, out=da)  # 1 − σ
    da *= db
    da += s  # σ + A·σ·(1 − σ)
    da *= b
    da *= dy
    db *= dy
    return dx.astype(x.dtype, copy=False)


def op_bytes(dy: np.ndarray, x: np.ndarray) -> int:
    """Bytes the op must move: read x and dy, write dx (x's shape and dtype)."""
    return 2 * x.nbytes + dy.nbytes


def _record(benchmark, op: str, dtype: str, nbytes: int, timed: str, **traffic: int) -> None:
    record(benchmark, op, dtype, nbytes, timed, **traffic, shape=[ROWS, COLS], dim=DIM)


def _tilesim(benchmark, dtype: str, checks: bool) -> None:
    """kernels.swiglu_grad with ``checks``, timed into a preallocated dx, after one
    warm-up call with the same checks whose outputs are checked."""
    dy, x = inputs(dtype)
    out = np.empty_like(x)
    traffic = kernel_traffic(  # the warm-up: compile / load the Numba cache
        lambda: kernels.swiglu_grad(dy, x, DIM, checks=checks, out=out))
    check(out, dtype)
    benchmark(kernels.swiglu_grad, dy, x, DIM, checks=checks, out=out)
    if not checks:
        remember_fast(benchmark, lambda: kernels.swiglu_grad(dy, x, DIM, checks=False, out=out))
    _record(benchmark, "tilesim checked" if checks else "tilesim", dtype, op_bytes(dy, x),
            f"kernels.swiglu_grad(dy, x, -1, checks={checks}, out=dx): validation, tiling, launch", **traffic)


@pytest.mark.parametrize("dtype", PARAMS)
def test_tilesim(benchmark, dtype):
    """kernels.swiglu_grad on the default SoC, checks off, into a preallocated dx."""
    _tilesim(benchmark, dtype, checks=False)


@pytest.mark.parametrize("dtype", PARAMS)
def test_tilesim_checked(benchmark, dtype):
    """The same call in checked mode (``checks=True``: the kernel into a temporary, copied out when clean)."""
    _tilesim(benchmark, dtype, checks=True)


@pytest.mark.parametrize("dtype", PARAMS)
def test_numpy(benchmark, dtype):
    """numpy_swiglu_grad: untiled float32 numpy, one thread (casts in and out included)."""
    dy, x = inputs(dtype)
    check(numpy_swiglu_grad(dy, x), dtype)
    benchmark(numpy_swiglu_grad, dy, x)
    _record(benchmark, "numpy float32", dtype, op_bytes(dy, x),
           "numpy_swiglu_grad (float32, untiled; casts in and out)")


def _torch_tensors(dtype: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(dy, x) as CPU tensors of the dtype (bf16 goes through an exact float32 copy)."""
    tdt = TORCH_DTYPES[dtype]
    return tuple(torch.from_numpy(a.astype(np.float32)).to(tdt) for a in inputs(dtype))


def torch_swiglu_grad(dy: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """dx from (dy, x) by the aten ops autograd's backward of ``silu(A) * B`` runs: MulBackward0's two products
    (dy·B for silu(A), dy·silu(A) for B), SiluBackward0's ``silu_backward``, and SplitBackward0's cat into x's
    layout. Only silu(A) differs: autograd saved it in the forward, here it is recomputed from x, as the op must."""
    a, b = x.chunk(2, dim=DIM)
    return torch.cat([torch.ops.aten.silu_backward(dy * b, a), dy * torch.nn.functional.silu(a)], dim=DIM)


@pytest.mark.parametrize("dtype", PARAMS)
def test_torch(benchmark, dtype):
    """The torch baseline: torch_swiglu_grad (the backward alone, as aten ops in the dtype), CPU, 2 threads. It is
    the fair comparison: like aclnnSwiGluGrad it maps (dy, x) to dx and nothing else, where autograd's forward +
    backward (test_torch_autograd) also computes and allocates y."""
    dy_np, x_np = inputs(dtype)
    with torch_threads(2):
        dy, x = _torch_tensors(dtype)
        dx = torch_swiglu_grad(dy, x)  # warm-up
        assert dx.dtype == TORCH_DTYPES[dtype] and dx.shape == (ROWS, COLS)
        check(dx.float().numpy(), dtype)
        benchmark(torch_swiglu_grad, dy, x)
        pair_with_fast(benchmark, lambda: torch_swiglu_grad(dy, x))
    _record(benchmark, "torch aten", dtype, op_bytes(dy_np, x_np),
           "cat([silu_backward(dy*b, a), dy*silu(a)]) (aten, the backward alone), CPU, 2 threads")


@pytest.mark.parametrize("dtype", PARAMS)
def test_torch_autograd(benchmark, dtype):
    """What an autograd user pays: ``silu(A) * B`` forward and ``.backward(dy)`` timed together, x in the dtype
    with requires_grad, CPU, 2 threads. Not the ratios' baseline (its op name does not start with "torch"): it
    also runs the forward."""
    dy_np, x_np = inputs(dtype)
    with torch_threads(2):
        dy, x = _torch_tensors(dtype)
        x.requires_grad_()

        def forward_backward():
            x.grad = None
            a, b = x.chunk(2, dim=DIM)
            (torch.nn.functional.silu(a) * b).backward(dy)
            return x.grad

        dx = forward_backward()  # warm-up
        assert dx.dtype == TORCH_DTYPES[dtype] and dx.shape == (ROWS, COLS)
        check(dx.float().numpy(), dtype)
        benchmark(forward_backward)
    _record(benchmark, "autograd fwd+bwd", dtype, op_bytes(dy_np, x_np),
           "x.grad = None; (silu(a) * b).backward(dy) (torch autograd, forward + backward), CPU, 2 threads")
