"""Untiled float64 math of each op: the oracle the tiled kernels are checked against; and, per op, what fp32
rounding can do to each output (``<op>_bounds``: :class:`tilesim.precision.ErrorBound`, the op's formula on
absolute values with every subtraction an addition, and the most roundings on a path to an element, a sum of n
terms counting n − 1 whatever its order). Every shipped kernel computes in fp32 and rounds once to its output's
dtype; the counts of products and casts beside the sums are generous, so that a result outside the bound is
wrong, not unlucky. The math takes torch CPU tensors too, and then returns tensors (:mod:`tilesim.interop`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from tilesim.interop import accepts_torch
from tilesim.precision import ErrorBound

OPS_SLACK = 16  # roundings granted beside an output's sums: its products, casts, a reciprocal, a square root
EXP_ROUNDINGS = 8  # Exp's error counted as roundings (tilesim.numerics.expf: within a few ulp)


def _f64(a: Any) -> np.ndarray:
    return np.asarray(a).astype(np.float64)


@accepts_torch
def rms_norm_grad(dy: Any, x: Any, rstd: Any, gamma: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(dx, dgamma)`` in float64: xh = x * rstd, dx = rstd * (dy * g - xh * mean_D(dy * g * xh)),
    dgamma = sum_rows(dy * xh). Rows are the leading axes of x not covered by gamma."""
    g = _f64(gamma)
    d = g.size
    dy2, x2 = _f64(dy).reshape(-1, d), _f64(x).reshape(-1, d)
    r = _f64(rstd).reshape(-1, 1)
    g2 = g.reshape(1, d)
    xh = x2 * r
    m = np.mean(dy2 * g2 * xh, axis=1, keepdims=True)
    dx = r * (dy2 * g2 - xh * m)
    dgamma = np.sum(dy2 * xh, axis=0)
    return dx.reshape(np.shape(x)), dgamma.reshape(np.shape(gamma))


@accepts_torch
def rms_norm(x: Any, gamma: Any, epsilon: float = 1e-6) -> tuple[np.ndarray, np.ndarray]:
    """``(y, rstd)`` in float64: rstd = 1 / sqrt(mean(x²) + ε) over the last axes gamma covers, of x's leading axes
    with 1 for each of gamma's; y = x · rstd · gamma of x's shape."""
    g = _f64(gamma)
    x2 = _f64(x).reshape(-1, g.size)
    r = 1.0 / np.sqrt(np.mean(x2 * x2, axis=1, keepdims=True) + float(epsilon))
    lead = np.shape(x)[:np.ndim(x) - np.ndim(gamma)]
    return (x2 * r * g.reshape(1, -1)).reshape(np.shape(x)), r.reshape(lead + (1,) * np.ndim(gamma))


@accepts_torch
def group_norm_backward(dy: Any, x: Any, mean: Any, rstd: Any, gamma: Any, N: int, C: int, HxW: int,  # noqa: N803
                        group: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """GroupNorm backward in float64 with centred x̂ = (x − mean)·rstd and γ inside the group sums:
    ``dx = rstd·(γ·dy − Σγ·dy/D − x̂·Σγ·dy·x̂/D)`` over each (n, g) group of D = (C/G)·HxW elements,
    ``dgamma = Σ_{n,hw} dy·x̂``, ``dbeta = Σ_{n,hw} dy``. gamma None means ones."""
    cg = C // group
    d = _f64(dy).reshape(N, group, cg, HxW)
    xx = _f64(x).reshape(N, group, cg, HxW)
    m = _f64(mean).reshape(N, group, 1, 1)
    r = _f64(rstd).reshape(N, group, 1, 1)
    g = np.ones((group, cg)) if gamma is None else _f64(gamma).reshape(group, cg)
    xhat = (xx - m) * r
    sdy, sdyx = d.sum(-1), (d * xhat).sum(-1)
    c1 = (g * sdy).sum(-1)[..., None, None] / (cg * HxW)
    c2 = (g * sdyx).sum(-1)[..., None, None] / (cg * HxW)
    dx = r * (g[..., None] * d - c1 - xhat * c2)
    return dx.reshape(np.shape(x)), sdyx.sum(0).reshape(C), sdy.sum(0).reshape(C)


@accepts_torch
def swiglu_grad(y_grad: Any, x: Any, dim: int = -1) -> np.ndarray:
    """The gradient of x for y = silu(A)·B in float64, A and B the first and second halves of x along ``dim``:
    ``dA = dy·B·σ(A)·(1 + A·(1 − σ(A)))``, ``dB = dy·A·σ(A)``, concatenated along ``dim``."""
    a, b = np.split(_f64(x), 2, axis=dim)
    dy = _f64(y_grad)
    s = 0.5 * (1.0 + np.tanh(0.5 * a))  # σ without exp's overflow for large |A|
    return np.concatenate([dy * b * s * (1.0 + a * (1.0 - s)), dy * a * s], axis=dim)


@accepts_torch
def swiglu(x: Any, dim: int = -1) -> np.ndarray:
    """y = silu(A)·B = A·σ(A)·B in float64, A and B the first and second halves of x along ``dim``."""
    a, b = np.split(_f64(x), 2, axis=dim)
    return a * (0.5 * (1.0 + np.tanh(0.5 * a))) * b  # σ without exp's overflow for large |A|


@accepts_torch
def softmax(x: Any, dim: int = -1) -> np.ndarray:
    """softmax along ``dim`` in float64, as the kernel forms it: ``exp(x − max) / Σ exp(x − max)`` (a row with a
    NaN, a +inf or only -inf is NaN throughout; a 0-d x is its own row)."""
    xx = _f64(x)
    if xx.ndim == 0:
        return softmax(xx.reshape(1), 0).reshape(())
    if xx.size == 0:
        return xx.copy()
    with np.errstate(invalid="ignore"):
        e = np.exp(xx - np.max(xx, axis=dim, keepdims=True))
        return e / np.sum(e, axis=dim, keepdims=True)


@accepts_torch
def layer_norm_grad(dy: Any, x: Any, variance: Any, mean: Any, gamma: Any,
                    epsilon: float = 1e-5) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Layer-norm backward over the last axis in float64, with the statistics as given: r = (variance + ε)^−½,
    x̂ = (x − mean)·r, ``pd_x = r·(dy·γ − mean_H(dy·γ) − x̂·mean_H(dy·γ·x̂))``, ``pd_gamma = Σ_rows dy·x̂``,
    ``pd_beta = Σ_rows dy``. variance and mean have x's leading shape (a trailing 1 is allowed)."""
    d, xx, g = _f64(dy), _f64(x), _f64(gamma)
    lead = xx.shape[:-1]
    r = 1.0 / np.sqrt(_f64(variance).reshape(lead + (1,)) + epsilon)
    xh = (xx - _f64(mean).reshape(lead + (1,))) * r
    dg = d * g
    pd_x = r * (dg - dg.mean(-1, keepdims=True) - xh * (dg * xh).mean(-1, keepdims=True))
    rows = tuple(range(xx.ndim - 1))
    return pd_x, (d * xh).sum(rows), d.sum(rows)


def _nsa_windows(act_seq_len: Any, block_size: int, stride: int) -> list[tuple[int, int]]:
    """(output row, first token) of every window, batch by batch: batch b covers [cum[b−1], cum[b]) and has
    ⌊(L − blockSize)/stride⌋ + 1 windows, none when L < blockSize; tokens after the last window are dropped."""
    out, start, o = [], 0, 0
    for end in (int(v) for v in np.asarray(act_seq_len).reshape(-1)):
        length = end - start
        n = 0 if length < block_size else (length - block_size) // stride + 1
        out += [(o + i, start + i * stride) for i in range(n)]
        o += n
        start = end
    return out


@accepts_torch
def nsa_compress(input: Any, weight: Any, act_seq_len: Any, compress_block_size: int,  # noqa: A002
                 compress_stride: int) -> np.ndarray:
    """NSA compress forward in float64: ``out[o_b + i, n, :] = Σ_j W[j, n]·input[start_b + i·stride + j, n, :]``
    over the windows of every batch (input [T, N, D] in TND, weight [blockSize, N], act_seq_len cumulative ends)."""
    x, w = _f64(input), _f64(weight)
    win = _nsa_windows(act_seq_len, compress_block_size, compress_stride)
    out = np.zeros((len(win),) + x.shape[1:])
    for o, s in win:
        out[o] = np.einsum("jn,jnd->nd", w, x[s:s + compress_block_size])
    return out


@accepts_torch
def nsa_compress_grad(output_grad: Any, input: Any, weight: Any, act_seq_len: Any,  # noqa: A002
                      compress_block_size: int, compress_stride: int) -> tuple[np.ndarray, np.ndarray]:
    """The gradients of :func:`nsa_compress` in float64: input_grad sums W[j, n]·dout over every window covering a
    token (0 where none does), weight_grad[j, n] sums dout·input over the windows and D."""
    g, x, w = _f64(output_grad), _f64(input), _f64(weight)
    bs = compress_block_size
    dx, dw = np.zeros_like(x), np.zeros_like(w)
    for o, s in _nsa_windows(act_seq_len, bs, compress_stride):
        dx[s:s + bs] += w[:, :, None] * g[o][None]
        dw += np.einsum("nd,jnd->jn", g[o], x[s:s + bs])
    return dx, dw


# ----------------------------------------------------------------------------------------------------------------
# what fp32 rounding can do to each output


def rms_norm_grad_bounds(dy: Any, x: Any, rstd: Any, gamma: Any) -> tuple[ErrorBound, ErrorBound]:
    """dx: r·(|dy·g| + |x|·r·mean_D(|dy·g·x|·r)), with a row sum of D terms; dgamma: Σ_rows |dy·x|·r."""
    g = np.abs(_f64(gamma))
    d = g.size
    dy2, x2 = np.abs(_f64(dy).reshape(-1, d)), np.abs(_f64(x).reshape(-1, d))
    r = np.abs(_f64(rstd).reshape(-1, 1))
    dyx = dy2 * x2
    dx = r * (dy2 * g + x2 * r * (r * np.mean(dyx * g, axis=1, keepdims=True)))
    return (ErrorBound(dx.reshape(np.shape(x)), d + OPS_SLACK),
            ErrorBound(np.sum(dyx * r, axis=0).reshape(np.shape(gamma)), dy2.shape[0] + OPS_SLACK))


def rms_norm_bounds(x: Any, gamma: Any, epsilon: float = 1e-6) -> tuple[ErrorBound, ErrorBound]:
    """y: |x|·r·|g|, rstd: r, both through the row's sum of D squares (r is what the inputs give, all terms
    positive)."""
    g = np.abs(_f64(gamma))
    d = g.size
    y, r = rms_norm(np.abs(_f64(x)), g, epsilon)
    return ErrorBound(np.abs(y), d + OPS_SLACK), ErrorBound(r, d + OPS_SLACK)


def group_norm_backward_bounds(dy: Any, x: Any, mean: Any, rstd: Any, gamma: Any, N: int, C: int,  # noqa: N803
                               HxW: int, group: int) -> tuple[ErrorBound, ErrorBound, ErrorBound]:
    """dx: r·(|γ·dy| + Σ|γ·dy|/D + |x̂|·Σ|γ·dy·x̂|/D) with |x̂| = (|x| + |mean|)·r, sums over the D = (C/G)·HxW
    elements of a group; dgamma: Σ_{n,hw} |dy·x̂|; dbeta: Σ_{n,hw} |dy|."""
    cg = C // group
    d = np.abs(_f64(dy)).reshape(N, group, cg, HxW)
    r = np.abs(_f64(rstd)).reshape(N, group, 1, 1)
    xh = (np.abs(_f64(x)).reshape(N, group, cg, HxW) + np.abs(_f64(mean)).reshape(N, group, 1, 1)) * r
    g = np.ones((group, cg, 1)) if gamma is None else np.abs(_f64(gamma)).reshape(group, cg, 1)
    gd = g * d
    c1 = gd.sum(axis=(-2, -1), keepdims=True) / (cg * HxW)
    c2 = (gd * xh).sum(axis=(-2, -1), keepdims=True) / (cg * HxW)
    dx = r * (gd + c1 + xh * c2)
    sums = N * HxW + OPS_SLACK
    return (ErrorBound(dx.reshape(np.shape(x)), cg * HxW + OPS_SLACK),
            ErrorBound((d * xh).sum(axis=(0, -1)).reshape(C), sums), ErrorBound(d.sum(axis=(0, -1)).reshape(C), sums))


def swiglu_grad_bounds(y_grad: Any, x: Any, dim: int = -1) -> tuple[ErrorBound]:
    """dA: |dy·B|·σ·(1 + |A|·(1 + σ)), dB: |dy·A|·σ, with σ = σ(A) and Exp's error counted as roundings: no sums,
    a couple of dozen roundings on the deepest path."""
    a, b = np.split(_f64(x), 2, axis=dim)
    dy = np.abs(_f64(y_grad))
    s = 0.5 * (1.0 + np.tanh(0.5 * a))
    mag = np.concatenate([dy * np.abs(b) * s * (1.0 + np.abs(a) * (1.0 + s)), dy * np.abs(a) * s], axis=dim)
    return (ErrorBound(mag, EXP_ROUNDINGS + OPS_SLACK),)


def swiglu_bounds(x: Any, dim: int = -1) -> tuple[ErrorBound]:
    """|A|·σ(A)·|B|, with Exp's error counted as roundings: no sums, a handful of roundings on the path."""
    a, b = np.split(_f64(x), 2, axis=dim)
    s = 0.5 * (1.0 + np.tanh(0.5 * a))
    return (ErrorBound(np.abs(a) * s * np.abs(b), EXP_ROUNDINGS + OPS_SLACK),)


def softmax_bounds(x: Any, dim: int = -1) -> tuple[ErrorBound]:
    """y·(1 + (|x − max| + max_row |x − max|)/k) with k = n − 1 + 2·Exp's roundings + slack, n the row's length:
    x − max is one rounding, which Exp turns into a relative error of |x − max|·u, so an element carries its own and
    (through the sum of n terms) the row's largest; the sum and the division add their roundings."""
    xx = _f64(x)
    if xx.ndim == 0:
        (b,) = softmax_bounds(xx.reshape(1), 0)
        return (ErrorBound(b.magnitude.reshape(()), b.roundings),)
    if xx.size == 0:
        return (ErrorBound(xx.copy(), OPS_SLACK),)
    y = softmax(xx, dim)
    d = np.abs(xx - np.max(xx, axis=dim, keepdims=True))
    k = xx.shape[dim] - 1 + 2 * EXP_ROUNDINGS + OPS_SLACK
    return (ErrorBound(y * (1.0 + (d + np.max(d, axis=dim, keepdims=True)) / k), k),)


def layer_norm_grad_bounds(dy: Any, x: Any, variance: Any, mean: Any, gamma: Any,
                           epsilon: float = 1e-5) -> tuple[ErrorBound, ErrorBound, ErrorBound]:
    """pd_x: r·(|dy·γ| + mean_H|dy·γ| + |x̂|·mean_H(|dy·γ|·|x̂|)) with |x̂| = (|x| + |mean|)·r, row sums of H
    terms; pd_gamma: Σ_rows |dy·x̂|; pd_beta: Σ_rows |dy|."""
    d, g = np.abs(_f64(dy)), np.abs(_f64(gamma))
    lead = d.shape[:-1]
    r = 1.0 / np.sqrt(np.abs(_f64(variance).reshape(lead + (1,)) + epsilon))
    xh = (np.abs(_f64(x)) + np.abs(_f64(mean)).reshape(lead + (1,))) * r
    dg = d * g
    pd_x = r * (dg + dg.mean(-1, keepdims=True) + xh * (dg * xh).mean(-1, keepdims=True))
    rows = tuple(range(d.ndim - 1))
    n = int(np.prod(lead)) + OPS_SLACK
    return (ErrorBound(pd_x, d.shape[-1] + OPS_SLACK), ErrorBound((d * xh).sum(rows), n), ErrorBound(d.sum(rows), n))


def nsa_compress_grad_bounds(output_grad: Any, input: Any, weight: Any, act_seq_len: Any,  # noqa: A002
                             compress_block_size: int, compress_stride: int) -> tuple[ErrorBound, ErrorBound]:
    """input_grad: Σ |W[j, n]|·|dout| over the windows covering a token; weight_grad[j, n]: Σ |dout·input| over the
    windows and D."""
    g, x, w = np.abs(_f64(output_grad)), np.abs(_f64(input)), np.abs(_f64(weight))
    bs = compress_block_size
    dx, dw = np.zeros_like(x), np.zeros_like(w)
    win = _nsa_windows(act_seq_len, bs, compress_stride)
    for o, s in win:
        dx[s:s + bs] += w[:, :, None] * g[o][None]
        dw += np.einsum("nd,jnd->jn", g[o], x[s:s + bs])
    return (ErrorBound(dx, -(-bs // compress_stride) + OPS_SLACK),
            ErrorBound(dw, len(win) * x.shape[-1] + OPS_SLACK))
