"""A hand-written untiled RmsNormGrad in Numba: the same math as the kernel, fused into two passes over each row,
no UB, no tiles, no instruction boundaries: what a plain fused kernel reaches on this host. The benchmark puts
it beside tilesim's tiled kernel ("numba untiled"); the gap between the two is what emulating the tiles costs.

Per row: pass 1 accumulates dgamma and ``dy * gamma * x * rstd``, the latter into 64 lane sums (element j into
lane j mod 64, as a vector unit would; the lanes added in order at the end); pass 2 writes
``dx = (dy * gamma - x * rstd * mean) * rstd``. The rows are split over the host threads, each with its own dgamma
partial, added at the end. bf16 is widened and rounded back (RINT) in the loops.

The lane sums are what let LLVM vectorise pass 1: summed in one chain (each 64-element block's ``.sum()``, then
the blocks in order), every add waited for the one before, and the baseline ran 1.3x (fp32) to 1.7x (bf16)
slower on the Zen 3 host: 10.4 -> 7.8 ms and 9.0 -> 5.3 ms on [4096, 4096].
"""

from __future__ import annotations

import numba
import numpy as np
from numba import njit, prange, types
from numba.extending import overload

from tilesim.jit.intrinsics import bf16_nearest_bits, bf16_widen_bits, f32_as_u32, u32_as_f32

BLOCK = 64  # lane sums of the row reduction


def _widen(v):
    """An element as float32: bf16 bits (uint16) widened, a float32 as it is."""


def _narrow(v, dtype):
    """A float32 as ``dtype``: bf16 bits (uint16) rounded to nearest even, or the float32 itself."""


@overload(_widen, inline="always")
def _widen_impl(v):
    if v == types.uint16:
        return lambda v: u32_as_f32(bf16_widen_bits(v))
    return lambda v: v


@overload(_narrow, inline="always")
def _narrow_impl(v, dtype):
    if dtype.dtype == types.uint16:
        return lambda v, dtype: bf16_nearest_bits(f32_as_u32(v), False)
    return lambda v, dtype: v


@njit(cache=True, parallel=True)
def _rms_norm_grad(dy, x, rstd, gamma, dx, partials):
    n, d = x.shape
    parts = partials.shape[0]
    inv_d = np.float32(1.0) / np.float32(d)
    for p in prange(parts):
        dg = partials[p]
        dg[:] = 0
        lanes = np.empty(BLOCK, np.float32)
        body = d - d % BLOCK
        for i in range(n * p // parts, n * (p + 1) // parts):
            rv = rstd[i]
            lanes[:] = 0
            for j0 in range(0, body, BLOCK):
                for k in range(BLOCK):
                    xn = _widen(x[i, j0 + k]) * rv
                    g = _widen(dy[i, j0 + k])
                    dg[j0 + k] += g * xn
                    lanes[k] += g * gamma[j0 + k] * xn
            for j in range(body, d):
                xn = _widen(x[i, j]) * rv
                g = _widen(dy[i, j])
                dg[j] += g * xn
                lanes[j - body] += g * gamma[j] * xn
            s = np.float32(0)
            for k in range(BLOCK):
                s += lanes[k]
            mean = s * inv_d
            for j in range(d):
                xn = _widen(x[i, j]) * rv
                dx[i, j] = _narrow((_widen(dy[i, j]) * gamma[j] - xn * mean) * rv, dx.dtype)


def rms_norm_grad(dy: np.ndarray, x: np.ndarray, rstd: np.ndarray, gamma: np.ndarray, dx: np.ndarray,
                  partials: np.ndarray) -> np.ndarray:
    """dx into ``dx`` (dy's dtype: float32 or bfloat16) and dgamma returned (float32), from 2-D dy, x, 1-D rstd
    and float32 gamma; ``partials`` is [host threads, D] float32 scratch."""
    b16 = dy.dtype != np.float32
    view = (lambda a: a.view(np.uint16)) if b16 else (lambda a: a)
    prev = numba.get_num_threads()
    numba.set_num_threads(min(partials.shape[0], numba.config.NUMBA_NUM_THREADS))
    try:
        _rms_norm_grad(view(dy), view(x), rstd, gamma, view(dx), partials)
    finally:
        numba.set_num_threads(prev)
    return partials.sum(axis=0, dtype=np.float32)
