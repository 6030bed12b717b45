"""The float32 exponential the emulated Exp instruction computes: branch-free, so that LLVM vectorises the loops
that call it (Numba's ``np.exp`` on a float32 calls the C library's ``expf`` one element at a time; the pip build
of Numba has no SVML).

Method: e^x = 2^k · e^r with k = rint(x / ln 2) and r = x − k·ln 2 (ln 2 in two parts, Cody and Waite, with FMA),
|r| ≤ ln 2 / 2; e^r ≈ 1 + r + r²·q(r), q of degree 4 fitted to (e^r − 1 − r) / r² for least maximum relative
error (3.8e-9 before float32 rounding); the scale 2^k is built from exponent bits in two halves so that results
down to the smallest subnormal and up to overflow are reached with one final rounding.

Error against the correctly rounded e^x (e^x in float64, rounded to float32), measured over all 2 239 889 410
float32 x in [−104, 89] (``python -m tilesim.numerics.expf``, about a minute): at most 1 ulp (``MAX_ULP``); 0.78 % of
all those float32 are not rounded correctly (most of them are tiny, where e^x rounds right), about 6 % of x drawn
uniformly from the range; against the C library's ``expf`` (Numba's ``np.exp``), sampled
every 4096th input: at most 1 ulp. The tests sample it again. Special values
follow IEEE: exp(−inf) = +0, exp(+inf) = +inf, NaN stays NaN (its sign and payload kept, a signalling NaN
quieted), x > 88.7228 overflows to +inf, x < −103.98 underflows to +0.
"""

from __future__ import annotations

import numpy as np

from tilesim.jit import njit
from tilesim.jit.intrinsics import fma_f32, u32_as_f32

MAX_ULP = 1  # measured, see the module docstring

_LOG2E = np.float32(1.44269504)
_LN2_HI = np.float32(0.693145752)  # ln 2 with 16 trailing zero bits: k·_LN2_HI is exact for |k| < 2^8
_LN2_LO = np.float32(1.42860677e-06)  # ln 2 − _LN2_HI
_SHIFTER = np.float32(12582912.0)  # 1.5·2^23: adding it rounds a float32 below 2^22 to an integer, ties to even
_Q0 = np.float32(0.49999988)
_Q1 = np.float32(0.16666518)
_Q2 = np.float32(0.041669525)
_Q3 = np.float32(0.008368915)
_Q4 = np.float32(0.001375176)
_LO = np.float32(-104.0)  # e^-104 rounds to +0 in float32
_HI = np.float32(89.0)  # e^89 overflows float32


@njit(cache=True, host=True)
def exp_f32(x):
    """e^x of a float32, as a float32 (see the module docstring for the error bound)."""
    c = x if x > _LO else _LO
    c = c if c < _HI else _HI
    kf = fma_f32(c, _LOG2E, _SHIFTER) - _SHIFTER
    r = fma_f32(-kf, _LN2_HI, c)
    r = fma_f32(-kf, _LN2_LO, r)
    q = fma_f32(_Q4, r, _Q3)
    q = fma_f32(q, r, _Q2)
    q = fma_f32(q, r, _Q1)
    q = fma_f32(q, r, _Q0)
    p = fma_f32(r * r, q, r) + np.float32(1.0)
    k = np.int32(kf)
    k1 = k >> 1
    s1 = u32_as_f32((k1 + 127) << 23)
    s2 = u32_as_f32((k - k1 + 127) << 23)
    y = p * s1 * s2
    # A NaN comes out quiet (x + 0), as IEEE 754 has exp(sNaN) = qNaN. Returning x itself, the value an in-place
    # Exp loop has just loaded, would let LLVM store only the other lanes: a masked store (vmaskmovps), slow on
    # AMD's cores.
    return y if x == x else x + np.float32(0.0)


@njit(cache=True, host=True)
def _exp_array(a, out):
    for i in range(a.size):
        out[i] = exp_f32(a[i])


def exp_values(a: np.ndarray) -> np.ndarray:
    """The values the Exp instruction gives for a float32 array, bit for bit (for oracles that replay a kernel's
    instruction order; numpy's own float32 exp differs from them by up to 2 ulp)."""
    out = np.empty(a.shape, np.float32)
    _exp_array(np.ascontiguousarray(a, np.float32).reshape(-1), out.reshape(-1))
    return out


def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """How many float32 values lie between ``a`` and ``b`` (0: the same value), for finite or infinite values of
    one sign; NaN pairs count 0."""
    ia = a.view(np.int32).astype(np.int64)
    ib = b.view(np.int32).astype(np.int64)
    ia = np.where(ia < 0, -(ia & 0x7FFFFFFF), ia)  # sign-magnitude to a monotone integer line
    ib = np.where(ib < 0, -(ib & 0x7FFFFFFF), ib)
    d = np.abs(ia - ib)
    return np.where(np.isnan(a) & np.isnan(b), 0, d)


def measure(chunk: int = 1 << 24) -> dict[str, float]:
    """Compare :func:`exp_f32` with e^x rounded to float32 (from float64) and with the C library's ``expf``,
    over every float32 x whose e^x is neither 0 nor inf nor 1 in float32 (elsewhere all three agree)."""
    import math

    lo = np.array([-104.0], np.float32).view(np.uint32)[0]
    hi = np.array([89.0], np.float32).view(np.uint32)[0]
    # the float32 values in [-104, 89], walked as bit patterns: negatives are 0x80000000.., positives 0x00000000..
    ranges = [(0x80000000, int(lo) + 1), (0, int(hi) + 1)]
    worst, worst_x, diff, total = 0, 0.0, 0, 0
    libm_worst = 0
    libm = np.vectorize(lambda v: np.float32(math.exp(float(v))), otypes=[np.float32])
    for start, stop in ranges:
        for s in range(start, stop, chunk):
            x = np.arange(s, min(s + chunk, stop), dtype=np.uint32).view(np.float32)
            ours = np.empty_like(x)
            _exp_array(x, ours)
            with np.errstate(over="ignore"):
                cr = np.exp(x.astype(np.float64)).astype(np.float32)
            d = ulp_distance(ours, cr)
            k = int(d.argmax())
            if d[k] > worst:
                worst, worst_x = int(d[k]), float(x[k])
            diff += int(np.count_nonzero(d))
            total += x.size
            if s % (1 << 28) == 0:  # libm, on a sample: the C expf one call at a time is slow from Python
                sample = x[:: 4096]
                libm_worst = max(libm_worst, int(ulp_distance(ours[:: 4096], libm(sample)).max()))
    return {"inputs": total, "max_ulp_vs_correctly_rounded": worst, "at_x": worst_x,
            "share_not_correctly_rounded": diff / total, "max_ulp_vs_libm_sampled": libm_worst}


if __name__ == "__main__":
    print(measure())
