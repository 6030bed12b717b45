"""RmsNormGrad at the two standard shapes, [4096, 4096] and [16384, 1024], on this CPU, side by side: tilesim's tiled
kernel (fast, and in checked mode), a hand-written untiled Numba kernel of the same math (``bench/untiled.py``:
what the emulation of tiles costs), the untiled numpy reference, torch autograd, and the host's figures that every
bench file times: the memory bandwidth (the triad probe, on all threads and on one) and the cheapest emulated
vector pass (the summary's floor).

``make bench`` (``pytest bench --benchmark-enable``) times them; plain ``pytest bench`` (benchmarks disabled by
the project's addopts) runs each body once, as a smoke test. Every benchmark stores in ``extra_info`` the bytes
the op must move and, when timed, the effective GB/s at the median; ``bench/conftest.py`` prints the summary
and writes ``bench/results.json``.

Bytes an RmsNormGrad must move: read dy, x (N x D of the dtype), rstd (N fp32) and gamma (D of gamma's dtype);
write dx (N x D of the dtype) and dgamma (D fp32). Workspace and cross-core partial sums are not counted.

Checked mode (``checks=True``, op "tilesim checked") is timed on the same call in the same group: the summary's
checked/fast column is its median over the fast one's. Both shapes hold 16 M elements, so their figures compare
directly: [16384, 1024] has four times the rows, each a quarter as long.
"""

from __future__ import annotations

import functools

import ml_dtypes
import numba
import numpy as np
import pytest
import tilesim.kernels as kernels
import torch

from bench import untiled
from bench.bandwidth import make_arrays, triad, triad_bytes
from bench.instructions import PASS_LANES, vector_pass
from bench.record import REPEAT_BYTES, kernel_traffic, pair_with_fast, record, remember_fast, torch_threads
from tilesim.precision import compare

SHAPES = ((4096, 4096), (16384, 1024))  # (N, D): the standard shapes, 16 M elements each
EPS = 1e-6
DTYPES = {"fp32": np.dtype(np.float32), "bf16": np.dtype(ml_dtypes.bfloat16)}
TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
PROBE_MIB = 256


def group(dtype: str, shape: tuple[int, int]) -> str:
    return f"rms_norm_grad {dtype} [{shape[0]}, {shape[1]}]"


# One benchmark group per (dtype, shape), so pytest-benchmark's table puts tilesim, numpy and torch side by side.
PARAMS = [pytest.param(name, shape, id=f"{name}-{shape[0]}x{shape[1]}",
                       marks=pytest.mark.benchmark(group=group(name, shape)))
          for shape in SHAPES for name in DTYPES]


@functools.cache
def inputs(dtype: str, shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(dy, x, rstd, gamma) of ``shape`` [N, D]: x ~ U(-2, 2) and dy ~ N(0, 1) in the dtype, rstd from the
    rounded x in fp32, gamma ~ U(0.5, 1.5) fp32."""
    rng = np.random.default_rng(2024)
    dt = DTYPES[dtype]
    x = rng.uniform(-2.0, 2.0, shape).astype(np.float32).astype(dt)
    dy = rng.standard_normal(shape, dtype=np.float32).astype(dt)
    x32 = x.astype(np.float32)
    rstd = (1.0 / np.sqrt(np.mean(x32 * x32, axis=1) + np.float32(EPS))).astype(np.float32)
    gamma = rng.uniform(0.5, 1.5, shape[1]).astype(np.float32)
    return dy, x, rstd, gamma


def op_bytes(dy: np.ndarray, x: np.ndarray, rstd: np.ndarray, gamma: np.ndarray) -> int:
    """Bytes the op must move: read dy, x, rstd, gamma; write dx (dy's dtype) and dgamma (fp32)."""
    return dy.nbytes + x.nbytes + rstd.nbytes + gamma.nbytes + dy.nbytes + gamma.size * 4


def _record(benchmark, op: str, dtype: str, shape: tuple[int, int], nbytes: int, timed: str, **traffic: int) -> None:
    record(benchmark, op, dtype, nbytes, timed, **traffic, shape=list(shape))


def _tilesim(benchmark, dtype: str, shape: tuple[int, int], checks: bool) -> None:
    """kernels.rms_norm_grad with ``checks``, timed into preallocated outputs after a warm-up call; the timed
    run's first 64 rows of dx checked against the float64 reference."""
    dy, x, rstd, gamma = inputs(dtype, shape)
    dx, dgamma = np.empty_like(dy), np.empty(shape[1], np.float32)
    out = (dx, dgamma)
    traffic = kernel_traffic(  # the warm-up: compile / load the Numba cache
        lambda: kernels.rms_norm_grad(dy, x, rstd, gamma, checks=checks, out=out))
    benchmark(kernels.rms_norm_grad, dy, x, rstd, gamma, checks=checks, out=out)
    if not checks:
        remember_fast(benchmark, lambda: kernels.rms_norm_grad(dy, x, rstd, gamma, checks=False, out=out))
    _record(benchmark, "tilesim checked" if checks else "tilesim", dtype, shape, op_bytes(dy, x, rstd, gamma),
            f"kernels.rms_norm_grad(..., checks={checks}, out=(dx, dgamma)): validation, tiling, launch", **traffic)
    golden_dx, _ = kernels.reference.rms_norm_grad(dy[:64], x[:64], rstd[:64], gamma)  # the timed run was right
    precision = compare(dx[:64], golden_dx)
    assert precision.ok, f"dx: {precision}"


@pytest.mark.parametrize("dtype,shape", PARAMS)
def test_tilesim(benchmark, dtype, shape):
    """kernels.rms_norm_grad on the default SoC, checks off, into preallocated outputs."""
    _tilesim(benchmark, dtype, shape, checks=False)


@pytest.mark.parametrize("dtype,shape", PARAMS)
def test_tilesim_checked(benchmark, dtype, shape):
    """The same call in checked mode (``checks=True``: the kernel into temporaries, copied out when clean)."""
    _tilesim(benchmark, dtype, shape, checks=True)


@pytest.mark.parametrize("dtype,shape", PARAMS)
def test_numba_untiled(benchmark, dtype, shape):
    """bench.untiled.rms_norm_grad: the op fused into two passes per row by hand, on all Numba threads, into
    preallocated outputs; its first 64 rows of dx checked as tilesim's, its dgamma loosely."""
    dy, x, rstd, gamma = inputs(dtype, shape)
    dx = np.empty_like(dy)
    partials = np.empty((numba.config.NUMBA_NUM_THREADS, shape[1]), np.float32)
    untiled.rms_norm_grad(dy, x, rstd, gamma, dx, partials)  # warm-up: compile / load the Numba cache
    dgamma = benchmark(untiled.rms_norm_grad, dy, x, rstd, gamma, dx, partials)
    _record(benchmark, "numba untiled", dtype, shape, op_bytes(dy, x, rstd, gamma),
            f"bench.untiled.rms_norm_grad (fused, {numba.config.NUMBA_NUM_THREADS} threads, preallocated dx)")
    golden_dx, _ = kernels.reference.rms_norm_grad(dy[:64], x[:64], rstd[:64], gamma)
    precision = compare(dx[:64], golden_dx)
    assert precision.ok, f"dx: {precision}"
    golden_dgamma = np.einsum("ij,ij->j", dy.astype(np.float64), x.astype(np.float64) * rstd[:, None])
    tol = 1e-3 * np.abs(golden_dgamma).max()  # one fp32 sum over N rows per thread: loose, as the other benches
    assert np.abs(dgamma - golden_dgamma).max() <= tol, f"dgamma off by {np.abs(dgamma - golden_dgamma).max():.3g}"


@pytest.mark.parametrize("dtype,shape", PARAMS)
def test_numpy_reference(benchmark, dtype, shape):
    """kernels.reference.rms_norm_grad: untiled float64 numpy (casts in and out included)."""
    dy, x, rstd, gamma = inputs(dtype, shape)
    benchmark(kernels.reference.rms_norm_grad, dy, x, rstd, gamma)
    _record(benchmark, "numpy float64", dtype, shape, op_bytes(dy, x, rstd, gamma),
            "kernels.reference.rms_norm_grad (float64, untiled)")


@pytest.mark.parametrize("dtype,shape", PARAMS)
def test_torch_autograd(benchmark, dtype, shape):
    """torch.nn.functional.rms_norm forward once (eps 1e-6, weight in the input's dtype so torch takes its
    native path), then only the backward is timed: ``torch.autograd.grad(y, (x, w), dy, retain_graph=True)``,
    which computes dx and dweight from the saved graph."""
    dy_np, x_np, rstd, gamma = inputs(dtype, shape)
    n, d = shape
    tdt = TORCH_DTYPES[dtype]
    with torch_threads(2):
        x = torch.from_numpy(x_np.astype(np.float32)).to(tdt).requires_grad_(True)
        w = torch.from_numpy(gamma).to(tdt).requires_grad_(True)
        dy = torch.from_numpy(dy_np.astype(np.float32)).to(tdt)
        y = torch.nn.functional.rms_norm(x, (d,), w, eps=EPS)

        def backward():
            return torch.autograd.grad(y, (x, w), dy, retain_graph=True)

        backward()  # warm-up
        dx, dw = benchmark(backward)
        pair_with_fast(benchmark, backward)
    _record(benchmark, "torch autograd", dtype, shape, op_bytes(dy_np, x_np, rstd, gamma),
            "torch.autograd.grad(y, (x, w), dy, retain_graph=True) after one rms_norm forward, 2 threads")
    assert dx.dtype == tdt and dx.shape == (n, d) and dw.shape == (d,)


def _probe(benchmark, op: str, threads: int) -> None:
    """The STREAM triad a = b + s * c over 3 x 256 MiB float32 on ``threads`` Numba threads: 2 reads + 1 write
    counted."""
    a, b, c = make_arrays(PROBE_MIB)
    s = np.float32(3.0)
    prev = numba.get_num_threads()
    numba.set_num_threads(threads)
    try:
        triad(a, b, c, s)  # warm-up: compile / load the cache, fault in the pages
        benchmark(triad, a, b, c, s)
    finally:
        numba.set_num_threads(prev)
    _record(benchmark, op, "fp32", (a.size,), triad_bytes(a),
            f"triad a[i] = b[i] + s*c[i], 3 x {PROBE_MIB} MiB, {threads} thread{'s' * (threads > 1)}")
    assert a[0] == np.float32(7.0) and a[-1] == np.float32(7.0)


@pytest.mark.benchmark(group="memory bandwidth")
def test_bandwidth_probe(benchmark):
    """The triad on all Numba threads: the bandwidth every share is taken of."""
    _probe(benchmark, "bandwidth probe", numba.config.NUMBA_NUM_THREADS)


@pytest.mark.benchmark(group="memory bandwidth")
def test_bandwidth_probe_one_thread(benchmark):
    """The triad on one thread: what a host thread's copies get while the others compute (the summary's floor)."""
    _probe(benchmark, "probe, one thread", 1)


@pytest.mark.benchmark(group="vector pass")
def test_vector_pass(benchmark):
    """The cheapest emulated vector pass (bench.instructions.vector_pass: fast-build Muls over 2048 fp32 lanes in
    L1, one host thread): the summary's floor takes a kernel's repeats at this cost. Bytes: the UB it covers."""
    run, repeats = vector_pass()
    benchmark(run)
    record(benchmark, "vector pass", "fp32", repeats * REPEAT_BYTES,
           f"{repeats} repeats of Muls over {PASS_LANES} lanes in one core's UB, one thread", shape=[PASS_LANES],
           repeats=repeats)
