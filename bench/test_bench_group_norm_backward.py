"""GroupNormBackward [32, 512, 64*64] with 32 groups on this CPU, side by side: tilesim's tiled kernel, an untiled
float32 numpy implementation of the same math, torch's CPU kernel (``aten::native_group_norm_backward``), and the
host's memory bandwidth (the triad probe of ``test_bench_rms_norm_grad.py``, imported so this file alone reports
its share of it).

tilesim is timed twice on the same call: checks off (op "tilesim") and in checked mode (``checks=True``, op
"tilesim checked"), in the same group; the summary's checked/fast column is the ratio of their medians.

``make bench`` (``pytest bench --benchmark-enable``) times them; plain ``pytest bench`` (benchmarks disabled by
the project's addopts) runs each body once, as a smoke test. Every benchmark stores in ``extra_info`` the bytes
the op must move and, when timed, the effective GB/s at the median; ``bench/conftest.py`` prints the summary
and writes ``bench/results.json``. Each implementation's outputs are checked loosely against the float64
reference once, before it is timed, so a broken benchmark fails without reporting a figure.

Bytes a GroupNormBackward must move: read dy, x (N x C x HxW of the dtype), mean and rstd (N x G) and gamma (C);
write dx (N x C x HxW), dgamma and dbeta (C each); everything in dy's dtype, as aclnn requires. Workspace and
cross-core partial sums are not counted.
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

N, C, HXW, GROUPS = 32, 512, 64 * 64, 32
EPS = 1e-5  # torch.nn.GroupNorm's default, for the forward's rstd
DTYPES = {"fp32": np.dtype(np.float32), "bf16": np.dtype(ml_dtypes.bfloat16)}
TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
RTOL = 1e-2  # the loose check: |a - g| <= RTOL * |g| + RTOL * max|g| per output, g the float64 reference


def group(dtype: str) -> str:
    return f"group_norm_backward {dtype} [{N}, {C}, {HXW}] G={GROUPS}"


# One benchmark group per dtype, so pytest-benchmark's table puts tilesim, numpy and torch side by side.
PARAMS = [pytest.param(name, id=name, marks=pytest.mark.benchmark(group=group(name))) for name in DTYPES]


@functools.cache
def inputs(dtype: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(dy, x, mean, rstd, gamma), all in the dtype: x ~ U(-2, 2) and dy ~ N(0, 1) of shape [N, C, HxW], mean and
    rstd = 1 / sqrt(var + 1e-5) over each (n, group) of the rounded x, [N, G], gamma ~ U(0.5, 1.5)."""
    rng = np.random.default_rng(2024)
    dt = DTYPES[dtype]
    x = rng.uniform(-2.0, 2.0, (N, C, HXW)).astype(np.float32).astype(dt)
    dy = rng.standard_normal((N, C, HXW), dtype=np.float32).astype(dt)
    xg = x.astype(np.float32).reshape(N, GROUPS, -1)
    mean = xg.mean(axis=-1, dtype=np.float64)
    var = xg.var(axis=-1, dtype=np.float64)
    rstd = (1.0 / np.sqrt(var + EPS)).astype(np.float32).astype(dt)
    gamma = rng.uniform(0.5, 1.5, C).astype(np.float32).astype(dt)
    return dy, x, mean.astype(np.float32).astype(dt), rstd, gamma


@functools.cache
def golden(dtype: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(dx, dgamma, dbeta) of kernels.reference.group_norm_backward (float64, untiled) on the dtype's inputs."""
    return kernels.reference.group_norm_backward(*inputs(dtype), N, C, HXW, GROUPS)


def check(outputs, dtype: str) -> None:
    """Each of (dx, dgamma, dbeta), cast to float64, is within RTOL of the reference (relative, plus RTOL of the
    output's largest magnitude absolute: dx cancels to near zero in places)."""
    for name, a, g in zip(("dx", "dgamma", "dbeta"), outputs, golden(dtype), strict=True):
        a = np.asarray(a).astype(np.float64).reshape(g.shape)
        assert np.allclose(a, g, rtol=RTOL, atol=RTOL * float(np.abs(g).max())), \
            f"{name}: max abs error {float(np.abs(a - g).max()):.3g}, max |golden| {float(np.abs(g).max()):.3g}"


def numpy_group_norm_backward(dy: np.ndarray, x: np.ndarray, mean: np.ndarray, rstd: np.ndarray, gamma: np.ndarray,
                              n: int, c: int, hxw: int, groups: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The reference's math, vectorised in float32 and untiled: inputs cast to float32 (no copy when they are),
    x̂ = (x - mean)·rstd, per-channel sums Σdy and Σdy·x̂ over HxW, c1 = Σγ·Σdy / D and c2 = Σγ·Σdy·x̂ / D per
    (n, group) with D = C/G·HxW, dx = rstd·(γ·dy - c1 - x̂·c2), dgamma = Σ_n Σdy·x̂, dbeta = Σ_n Σdy; the outputs
    cast back to dy's dtype."""
    f32, cg = np.float32, c // groups
    d = dy.astype(f32, copy=False).reshape(n, groups, cg, hxw)
    m = mean.astype(f32).reshape(n, groups, 1, 1)
    r = rstd.astype(f32).reshape(n, groups, 1, 1)
    g = gamma.astype(f32).reshape(1, groups, cg, 1)
    xhat = x.astype(f32).reshape(n, groups, cg, hxw) - m  # a new array: safe to update in place
    xhat *= r
    sdy = d.sum(axis=-1)  # [n, groups, cg]
    sdyx = np.einsum("ngch,ngch->ngc", d, xhat)
    inv_d = f32(1.0 / (cg * hxw))
    c1 = (g[..., 0] * sdy).sum(axis=-1)[..., None, None] * inv_d  # [n, groups, 1, 1]
    c2 = (g[..., 0] * sdyx).sum(axis=-1)[..., None, None] * inv_d
    dx = g * d
    dx -= c1
    xhat *= c2
    dx -= xhat
    dx *= r
    dt = dy.dtype
    return (dx.reshape(np.shape(x)).astype(dt, copy=False), sdyx.sum(axis=0).reshape(c).astype(dt),
            sdy.sum(axis=0).reshape(c).astype(dt))


def op_bytes(dy: np.ndarray, x: np.ndarray, mean: np.ndarray, rstd: np.ndarray, gamma: np.ndarray) -> int:
    """Bytes the op must move: read dy, x, mean, rstd, gamma; write dx, dgamma, dbeta (all in dy's dtype)."""
    return dy.nbytes + x.nbytes + mean.nbytes + rstd.nbytes + gamma.nbytes + dy.nbytes + 2 * gamma.nbytes


def _record(benchmark, op: str, dtype: str, nbytes: int, timed: str, **traffic: int) -> None:
    record(benchmark, op, dtype, nbytes, timed, **traffic, shape=[N, C, HXW], groups=GROUPS)


def _tilesim(benchmark, dtype: str, checks: bool) -> None:
    """kernels.group_norm_backward with ``checks``, timed into preallocated outputs, after one
    warm-up call with the same checks whose outputs are checked."""
    args = inputs(dtype)
    dy, _, _, _, gamma = args
    out = (np.empty_like(dy), np.empty_like(gamma), np.empty_like(gamma))
    traffic = kernel_traffic(  # the warm-up: compile / load the Numba cache
        lambda: kernels.group_norm_backward(*args, N, C, HXW, GROUPS, checks=checks, out=out))
    check(out, dtype)
    benchmark(kernels.group_norm_backward, *args, N, C, HXW, GROUPS, checks=checks, out=out)
    if not checks:
        remember_fast(benchmark, lambda: kernels.group_norm_backward(*args, N, C, HXW, GROUPS, checks=False,
                                                                     out=out))
    _record(benchmark, "tilesim checked" if checks else "tilesim", dtype, op_bytes(*args),
            f"kernels.group_norm_backward(..., checks={checks}, out=(dx, dgamma, dbeta)): validation, tiling, launch",
            **traffic)


@pytest.mark.parametrize("dtype", PARAMS)
def test_tilesim(benchmark, dtype):
    """kernels.group_norm_backward on the default SoC, checks off, into preallocated outputs."""
    _tilesim(benchmark, dtype, checks=False)


@pytest.mark.parametrize("dtype", PARAMS)
def test_tilesim_checked(benchmark, dtype):
    """The same call in checked mode (``checks=True``: the kernel into temporaries, copied out when clean)."""
    _tilesim(benchmark, dtype, checks=True)


@pytest.mark.parametrize("dtype", PARAMS)
def test_numpy(benchmark, dtype):
    """numpy_group_norm_backward: untiled float32 numpy (casts in and out included)."""
    args = inputs(dtype)
    check(numpy_group_norm_backward(*args, N, C, HXW, GROUPS), dtype)
    benchmark(numpy_group_norm_backward, *args, N, C, HXW, GROUPS)
    _record(benchmark, "numpy float32", dtype, op_bytes(*args),
           "numpy_group_norm_backward (float32, untiled; casts in and out)")


@pytest.mark.parametrize("dtype", PARAMS)
def test_torch(benchmark, dtype):
    """``torch.ops.aten.native_group_norm_backward(dy, x, mean, rstd, gamma, N, C, HxW, G, [True] * 3)`` on the CPU,
    2 threads, every tensor in the dtype (torch accepts all-bf16, as aclnn does, and then returns bf16 dgamma
    and dbeta)."""
    args = inputs(dtype)
    tdt = TORCH_DTYPES[dtype]
    with torch_threads(2):
        dy, x, mean, rstd, gamma = (torch.from_numpy(a.astype(np.float32)).to(tdt) for a in args)

        def backward():
            return torch.ops.aten.native_group_norm_backward(dy, x, mean, rstd, gamma, N, C, HXW, GROUPS,
                                                             [True, True, True])

        outs = backward()  # warm-up
        assert all(o.dtype == tdt for o in outs) and outs[0].shape == (N, C, HXW) and outs[1].shape == (C,)
        check([o.float().numpy() for o in outs], dtype)
        benchmark(backward)
        pair_with_fast(benchmark, backward)
    _record(benchmark, "torch aten", dtype, op_bytes(*args),
           "torch.ops.aten.native_group_norm_backward(..., [True, True, True]), CPU, 2 threads")
