"""NsaCompressGrad of input [8192, 32, 128] (TND: 4 sequences of 2048 tokens, 32 heads of 128), blockSize 32,
stride 16 (overlapping windows: 127 per sequence, output_grad [508, 32, 128]) on this CPU, side by side: tilesim's
tiled kernel, an untiled float32 numpy implementation of the same math, torch autograd's backward of the forward
(unfold + einsum) on the CPU, and the host's memory bandwidth (the triad probe of ``test_bench_rms_norm_grad.py``,
imported so this file alone reports its share of it).

tilesim is timed twice on the same call: checks off (op "tilesim") and in checked mode (``checks=True``, op
"tilesim checked"), in the same group; the summary's checked/fast column is the ratio of their medians.

``make bench`` (``pytest bench --benchmark-enable``) times them; plain ``pytest bench`` (benchmarks disabled by
the project's addopts) runs each body once, as a smoke test. Every benchmark stores in ``extra_info`` the bytes
the op must move and, when timed, the effective GB/s at the median; ``bench/conftest.py`` prints the summary
and writes ``bench/results.json``. Each implementation's outputs are checked loosely against the float64
reference once, before it is timed, so a broken benchmark fails without reporting a figure.

Bytes an NsaCompressGrad must move: read output_grad, input and weight; write input_grad (input's shape) and
weight_grad (weight's shape); everything in the dtype. Workspace and cross-core partial sums are not counted.

The kernel does not stream these bytes once: each core walks its windows, and per window and head group it
makes passes over the window's rows (input and the broadcast weight in, the dW partials reduced over D and
atomic-added, dX = W·dout atomic-added). With stride < blockSize every token is covered by two windows, so dX
goes to an fp32 workspace (T·N·D·4 bytes, zeroed, accumulated and re-read to be cast), and the emulator keeps
one fp32 shadow copy of it per window parity (2·T·N·D·4 bytes) so the overlapping atomic adds stay
deterministic, merged on the host after the phase.
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

CUM = (2048, 4096, 6144, 8192)  # act_seq_len: cumulative ends of the 4 sequences
T, N, D = CUM[-1], 32, 128
BLOCK_SIZE, STRIDE = 32, 16
DTYPES = {"bf16": np.dtype(ml_dtypes.bfloat16), "fp16": np.dtype(np.float16)}
TORCH_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
RTOL = 1e-2  # the loose check: |a - g| <= RTOL * |g| + RTOL * max|g| per output, g the float64 reference


def windows(length: int, bs: int = BLOCK_SIZE, stride: int = STRIDE) -> int:
    """Compress windows of a sequence of ``length`` tokens: ⌊(L − bs)/stride⌋ + 1, 0 when L < bs."""
    return (length - bs) // stride + 1 if length >= bs else 0


def sequences(cum=CUM) -> list[tuple[int, int, int]]:
    """(first token, tokens, first window in output_grad) of each sequence."""
    out, start, first = [], 0, 0
    for end in cum:
        out.append((start, end - start, first))
        first += windows(end - start)
        start = end
    return out


NUM_WINDOWS = sum(windows(n) for _, n, _ in sequences())


def group(dtype: str) -> str:
    return f"nsa_compress_grad {dtype} [{T}, {N}, {D}] bs={BLOCK_SIZE} s={STRIDE}"


# One benchmark group per dtype, so pytest-benchmark's table puts tilesim, numpy and torch side by side.
PARAMS = [pytest.param(name, id=name, marks=pytest.mark.benchmark(group=group(name))) for name in DTYPES]


@functools.cache
def inputs(dtype: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(output_grad, input, weight) in the dtype: input ~ N(0, 1) of shape [T, N, D], output_grad ~ N(0, 1) of
    shape [NUM_WINDOWS, N, D], weight ~ U(-1, 1) of shape [BLOCK_SIZE, N]."""
    rng = np.random.default_rng(2024)
    dt = DTYPES[dtype]
    x = rng.standard_normal((T, N, D), dtype=np.float32).astype(dt)
    dy = rng.standard_normal((NUM_WINDOWS, N, D), dtype=np.float32).astype(dt)
    w = rng.uniform(-1.0, 1.0, (BLOCK_SIZE, N)).astype(np.float32).astype(dt)
    return dy, x, w


@functools.cache
def golden(dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """(input_grad, weight_grad) of kernels.reference.nsa_compress_grad (float64, untiled) on the dtype's inputs."""
    return kernels.reference.nsa_compress_grad(*inputs(dtype), list(CUM), BLOCK_SIZE, STRIDE)


def check(outputs, dtype: str) -> None:
    """Each of (input_grad, weight_grad), cast to float64, is within RTOL of the reference (relative, plus RTOL
    of the output's largest magnitude absolute: each crosses zero)."""
    for name, a, g in zip(("input_grad", "weight_grad"), outputs, golden(dtype), strict=True):
        a = np.asarray(a).astype(np.float64).reshape(g.shape)
        assert np.allclose(a, g, rtol=RTOL, atol=RTOL * float(np.abs(g).max())), \
            f"{name}: max abs error {float(np.abs(a - g).max()):.3g}, max |golden| {float(np.abs(g).max()):.3g}"


def numpy_nsa_compress_grad(output_grad: np.ndarray, input: np.ndarray, weight: np.ndarray,  # noqa: A002
                            act_seq_len=CUM, bs: int = BLOCK_SIZE,
                            stride: int = STRIDE) -> tuple[np.ndarray, np.ndarray]:
    """The reference's math, vectorised in float32 and untiled, per sequence: the inputs cast to float32 (no copy
    when they are); the sequence's windows a strided view of its tokens (``sliding_window_view`` every
    ``stride``-th start: [windows, N, D, bs]); ``dW[j, n] += Σ_{w, d} dout[w, n, d]·x[start_w + j, n, d]`` as one
    einsum; dX by scatter-adding: for each of the bs offsets j, the tokens start_w + j of the windows are a
    strided slice (one token per window), and ``dX[slice] += W[j, n]·dout`` in one vectorised add. Tokens no
    window covers get 0. Both outputs cast back to the input's dtype."""
    f32 = np.float32
    x = input.astype(f32, copy=False)
    dy = output_grad.astype(f32, copy=False)
    w = weight.astype(f32, copy=False)
    dx = np.zeros(x.shape, f32)
    dw = np.zeros(w.shape, f32)
    start = first = 0
    for end in act_seq_len:
        n = (end - start - bs) // stride + 1 if end - start >= bs else 0
        if n:
            g = dy[first:first + n]
            xw = np.lib.stride_tricks.sliding_window_view(x[start:end], bs, axis=0)[::stride][:n]
            dw += np.einsum("wnd,wndj->jn", g, xw)
            for j in range(bs):
                dx[start + j:start + j + stride * (n - 1) + 1:stride] += w[j][:, None] * g
        first += n
        start = end
    dt = input.dtype
    return dx.astype(dt, copy=False), dw.astype(dt)


def op_bytes(dy: np.ndarray, x: np.ndarray, w: np.ndarray) -> int:
    """Bytes the op must move: read output_grad, input, weight; write input_grad and weight_grad (the dtype)."""
    return dy.nbytes + 2 * x.nbytes + 2 * w.nbytes


def _record(benchmark, op: str, dtype: str, nbytes: int, timed: str, **traffic: int) -> None:
    record(benchmark, op, dtype, nbytes, timed, **traffic, shape=[T, N, D], act_seq_len=list(CUM),
           block_size=BLOCK_SIZE, stride=STRIDE, windows=NUM_WINDOWS)


def _tilesim(benchmark, dtype: str, checks: bool) -> None:
    """kernels.nsa_compress_grad with ``checks``, timed into preallocated outputs, after one
    warm-up call with the same checks whose outputs are checked."""
    args = inputs(dtype)
    _, x, w = args
    out = (np.empty_like(x), np.empty_like(w))
    cum = list(CUM)
    traffic = kernel_traffic(  # the warm-up: compile / load the Numba cache
        lambda: kernels.nsa_compress_grad(*args, cum, BLOCK_SIZE, STRIDE, checks=checks, out=out))
    check(out, dtype)
    benchmark(kernels.nsa_compress_grad, *args, cum, BLOCK_SIZE, STRIDE, checks=checks, out=out)
    if not checks:
        remember_fast(benchmark, lambda: kernels.nsa_compress_grad(*args, cum, BLOCK_SIZE, STRIDE, checks=False,
                                                                   out=out))
    _record(benchmark, "tilesim checked" if checks else "tilesim", dtype, op_bytes(*args),
            f"kernels.nsa_compress_grad(dy, x, w, cum, 32, 16, checks={checks}, out=(dx, dw)): validation, tiling, "
            f"launch", **traffic)


@pytest.mark.parametrize("dtype", PARAMS)
def test_tilesim(benchmark, dtype):
    """kernels.nsa_compress_grad on the default SoC (TND), checks off, into preallocated outputs."""
    _tilesim(benchmark, dtype, checks=False)


@pytest.mark.parametrize("dtype", PARAMS)
def test_tilesim_checked(benchmark, dtype):
    """The same call in checked mode (``checks=True``: the kernel into temporaries, copied out when clean)."""
    _tilesim(benchmark, dtype, checks=True)


@pytest.mark.parametrize("dtype", PARAMS)
def test_numpy(benchmark, dtype):
    """numpy_nsa_compress_grad: untiled float32 numpy (casts in and out included)."""
    args = inputs(dtype)
    check(numpy_nsa_compress_grad(*args), dtype)
    benchmark(numpy_nsa_compress_grad, *args)
    _record(benchmark, "numpy float32", dtype, op_bytes(*args),
           "numpy_nsa_compress_grad (float32, untiled; casts in and out)")


def torch_nsa_compress(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The forward in torch: per sequence, its windows by ``unfold`` ([windows, N, D, bs]) contracted with W by
    einsum, the sequences' outputs concatenated."""
    outs = []
    for start, n, _ in sequences():
        if windows(n):
            outs.append(torch.einsum("wndj,jn->wnd", x[start:start + n].unfold(0, BLOCK_SIZE, STRIDE), w))
    return torch.cat(outs)


@pytest.mark.parametrize("dtype", PARAMS)
def test_torch(benchmark, dtype):
    """torch autograd's backward alone: the forward (torch_nsa_compress, input and weight in the dtype with
    requires_grad) is built once, untimed; ``torch.autograd.grad(y, (x, w), dy, retain_graph=True)`` is timed
    (einsum's backward, two bmm-based contractions, and unfold's scatter back into x's layout), CPU, 2 threads."""
    args = inputs(dtype)
    tdt = TORCH_DTYPES[dtype]
    with torch_threads(2):
        dy, x, w = (torch.from_numpy(a.astype(np.float32)).to(tdt) for a in args)  # exact: via float32
        x.requires_grad_()
        w.requires_grad_()
        y = torch_nsa_compress(x, w)

        def backward():
            return torch.autograd.grad(y, (x, w), dy, retain_graph=True)

        outs = backward()  # warm-up
        assert all(o.dtype == tdt for o in outs) and outs[0].shape == (T, N, D) and outs[1].shape == (BLOCK_SIZE, N)
        check([o.float().numpy() for o in outs], dtype)
        benchmark(backward)
        pair_with_fast(benchmark, backward)
    _record(benchmark, "torch autograd", dtype, op_bytes(*args),
           "torch.autograd.grad(unfold+einsum forward, (x, w), dy, retain_graph=True), backward alone, CPU, 2 threads")
