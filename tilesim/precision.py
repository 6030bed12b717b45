"""Ascend's precision standard, for comparing a kernel's output with untiled float64 math.

The experimental standard (hicann/opbase ``experimental_standard.md``): with relative error
``|a - g| / (|g| + floor)``, pass when MERE < T and MARE < 10 T, T = 2^-10 (fp16), 2^-7 (bf16), 2^-13 (fp32).

Two choices are ours and stated here:
- The golden is the float64 result rounded once to the output dtype, as Ascend's goldens are (fp32 math, one
  final cast): no implementation can be closer than that rounding.
- The standard's floor is 1e-7, which makes MARE fail wherever a result cancels to nearly zero (fp32 math on
  O(1) terms leaves ~1e-8 absolute error) or lands among fp16 subnormals. We floor the denominator at the
  commercial standard's small-value threshold (2^-11 fp16, 2^-8 bf16, 2^-14 fp32) times the golden's largest
  magnitude, so a value that cancels to near zero is judged by its absolute error at the tensor's scale (a sum
  over rows errs by eps times the summands, not by eps times the result). ``strict_mare`` keeps the 1e-7 figure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import ml_dtypes
import numpy as np
from numba import types
from numba.extending import overload

from tilesim.interop import accepts_torch
from tilesim.jit import OVERLOAD_OPTIONS, njit
from tilesim.jit.intrinsics import u32_as_f32
from tilesim.numerics.b16 import bf16_to_f32_bits, fp16_to_f32_bits, narrow, widen
from tilesim.runtime.host_threads import run_cores, thread_count  # the launch's host threads

THRESHOLD = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7, "float32": 2.0 ** -13}
SMALL_VALUE = {"float16": 2.0 ** -11, "bfloat16": 2.0 ** -8, "float32": 2.0 ** -14}


@dataclass(frozen=True)
class Precision:
    """A verdict of Ascend's precision standard on one output (:func:`compare`): MERE and MARE, MARE with the
    standard's 1e-7 floor, and the threshold T of ``dtype``; ``str()`` gives the verdict in one line."""
    dtype: str
    mere: float
    mare: float
    strict_mare: float | None  # None where it was not computed (:func:`judge`)
    threshold: float

    @property
    def ok(self) -> bool:
        """Whether the output passes: MERE < T and MARE < 10 T."""
        return self.mere < self.threshold and self.mare < 10 * self.threshold

    def __str__(self) -> str:
        verdict = "pass" if self.ok else "FAIL"
        strict = "" if self.strict_mare is None else f"; MARE with the 1e-7 floor {self.strict_mare:.3g}"
        return (f"{verdict} ({self.dtype}): MERE {self.mere:.3g} (< {self.threshold:.3g}), MARE {self.mare:.3g} "
                f"(< {10 * self.threshold:.3g}){strict}")


@accepts_torch
def compare(actual: np.ndarray, golden: np.ndarray, dtype: str | None = None) -> Precision:
    """Judge ``actual`` (the kernel's output) against float64 ``golden`` under the standard for ``dtype``
    (default: actual's dtype)."""
    dt = np.dtype(actual.dtype).name if dtype is None else dtype
    a = np.asarray(actual).astype(np.float64).reshape(-1)
    g = np.asarray(golden, dtype=np.float64).astype(np.asarray(actual).dtype).astype(np.float64).reshape(-1)
    if a.size == 0:
        return Precision(dt, 0.0, 0.0, 0.0, THRESHOLD[dt])
    err = np.abs(a - g)
    finite = np.abs(g[np.isfinite(g)])
    scale = float(finite.max()) if finite.size else 1.0
    rel = err / (np.abs(g) + max(1e-7, SMALL_VALUE[dt] * scale))
    strict = err / (np.abs(g) + 1e-7)
    same = (a == g) | (np.isnan(a) & np.isnan(g))
    rel[same] = 0.0
    strict[same] = 0.0
    return Precision(dt, float(np.mean(rel)), float(np.max(rel)), float(np.max(strict)), THRESHOLD[dt])


@accepts_torch
def assert_close(actual: np.ndarray, golden: np.ndarray, dtype: str | None = None, what: str = "output") -> None:
    """Assert that ``actual`` passes Ascend's precision standard against float64 ``golden`` (:func:`compare`, the
    standard for ``dtype``, default actual's dtype); the AssertionError's message names ``what`` and gives the
    verdict (MERE, MARE and their thresholds). Takes numpy arrays or torch tensors."""
    p = compare(actual, golden, dtype)
    if not p.ok:  # not an assert statement: python -O would strip it
        raise AssertionError(f"{what}: {p}")


# ----------------------------------------------------------------------------------------------------------------
# what rounding can explain

UNIT_ROUNDOFF = {"float16": 2.0 ** -11, "bfloat16": 2.0 ** -8, "float32": 2.0 ** -24}
SPACING = {"float16": 2.0 ** -24, "bfloat16": 2.0 ** -133, "float32": 2.0 ** -149}  # the smallest subnormal
BOUND_SAFETY = 2.0  # the bound is first-order and our count of a kernel's roundings may miss a few: twice it


@dataclass(frozen=True)
class ErrorBound:
    """What fp32 rounding can do to one output of an op computed in fp32 and rounded once to its dtype, as every
    shipped kernel does. ``magnitude``: per element, the op's formula evaluated on the absolute values of its
    inputs with every subtraction an addition (for a sum, the sum of the terms' absolute values): rounding errors
    scale with it, not with the result. ``roundings``: the most roundings on any path to an element, counting n − 1
    for a sum of n terms, which bounds a sum in any order (Higham, *Accuracy and Stability of Numerical
    Algorithms*, 2nd ed., §3.1 and §4.2: |error| ≤ γ_k·magnitude, γ_k = k·u / (1 − k·u), u = 2⁻²⁴)."""

    magnitude: np.ndarray
    roundings: int

    def absolute(self, golden: np.ndarray, dtype: str) -> np.ndarray:
        """Per element, float32 rounded up, the largest distance between a correct kernel's output in ``dtype`` and
        the float64 ``golden`` rounded to ``dtype`` (as :func:`compare` rounds it): γ_k·magnitude, the kernel's
        final rounding and the golden's, each half a unit in the last place, the smallest subnormal for a result
        at zero, all times BOUND_SAFETY."""
        k, u = self.roundings, UNIT_ROUNDOFF["float32"]
        m = np.ascontiguousarray(self.magnitude, np.float64).reshape(-1)
        g = np.ascontiguousarray(golden, np.float64).reshape(-1)
        out = np.empty(m.size, np.float32)
        chunks = -(-m.size // JUDGE_CHUNK)
        run_cores(_absolute, chunks, (m, g, k * u / (1.0 - k * u), UNIT_ROUNDOFF[dtype], SPACING[dtype],
                                      BOUND_SAFETY * (1.0 + 2.0 ** -20), out),  # float32's rounding cannot go below
                  thread_count(chunks, m.nbytes + g.nbytes))
        return out


@dataclass(frozen=True)
class Expected:
    """One output's golden, prepared once for judging many runs (:func:`judge`): rounded to the output's dtype as
    :func:`compare` rounds it, the floor of the relative error, and each element's rounding bound (None: no bound
    known, nothing is judged wrong)."""

    dtype: str
    rounded: np.ndarray
    floor: float
    bound: np.ndarray | None

    @classmethod
    def of(cls, golden: np.ndarray, dtype: str, bound: ErrorBound | None = None) -> Expected:
        """``golden`` (float64) of an output in ``dtype`` ("float32", "float16", "bfloat16")."""
        g = np.ascontiguousarray(np.asarray(golden, np.float64).reshape(-1))
        with np.errstate(over="ignore"):  # a golden beyond the dtype's range rounds to infinity, as in compare()
            # ml_dtypes rounds float64 to bf16 through fp32 (twice, each to nearest even), so compare() does too:
            # the compiled cast gives the same bits, faster
            if dtype == "bfloat16":
                rounded = narrow(g.astype(np.float32), dtype).view(_DTYPES[dtype])
                values = widen(rounded.view(np.uint16), dtype)
            else:
                rounded = values = g.astype(_DTYPES[dtype])
        finite = np.abs(values[np.isfinite(values)])
        scale = float(finite.max()) if finite.size else 1.0
        return cls(dtype, rounded, max(1e-7, SMALL_VALUE[dtype] * scale),
                   None if bound is None else bound.absolute(g, dtype).reshape(-1))


@dataclass(frozen=True)
class Judgement:
    """A run's output against its :class:`Expected`: the standard's figures, and the element furthest outside its
    rounding bound: ``excess`` is its error over its bound (above 1: no rounding explains it; NaN without a
    bound), ``wrong`` how many elements lie outside their bounds."""

    precision: Precision
    excess: float
    wrong: int
    index: int
    actual: float
    expected: float
    bound: float

    @property
    def verdict(self) -> str:
        """"wrong" (outside any rounding explanation), "imprecise" (rounding explains it, the standard fails it)
        or "pass"."""
        return "wrong" if self.wrong else "pass" if self.precision.ok else "imprecise"


_DTYPES = {"float32": np.dtype(np.float32), "float16": np.dtype(np.float16), "bfloat16": np.dtype(ml_dtypes.bfloat16)}
# The bits a judged output travels as: the type selects the widening at compile time (Numba has no float16)
_BITS = {"float32": np.uint32, "float16": np.int16, "bfloat16": np.uint16}
JUDGE_CHUNK = 1 << 15  # elements a task judges: its partial sums are added in task order, whatever the threads
BLOCK = 256  # elements a task's loops take at a time
_SUM, _MARE, _NANS, _EXCESS, _AT, _WRONG = range(6)


def _value(bits):  # type: ignore[no-untyped-def]  # compiled code only: the overload below
    raise TypeError("_value is compiled code's")


@overload(_value, jit_options=OVERLOAD_OPTIONS)
def _value_of(bits):  # type: ignore[no-untyped-def]
    """An element's value as float64, from its bits as :data:`_BITS` carries them."""
    if bits == types.uint32:
        return lambda bits: np.float64(u32_as_f32(bits))
    if bits == types.uint16:
        return lambda bits: np.float64(u32_as_f32(bf16_to_f32_bits(bits)))
    if bits == types.int16:
        return lambda bits: np.float64(u32_as_f32(fp16_to_f32_bits(np.uint16(bits))))
    return None


@njit(cache=True, nogil=True, host=True)
def _absolute(first, last, m, g, gamma, u_out, spacing, scale, out):
    """Chunks ``first`` to ``last`` of :meth:`ErrorBound.absolute`, in one pass."""
    for c in range(first, last):
        for i in range(c * JUDGE_CHUNK, min(m.size, (c + 1) * JUDGE_CHUNK)):
            fp32 = gamma * m[i]
            out[i] = np.float32((fp32 + 2.0 * u_out * (abs(g[i]) + fp32) + spacing) * scale)


@njit(cache=True, inline="always")
def _halve_sum(v, h):
    for j in range(h):
        v[j] += v[j + h]


@njit(cache=True, inline="always")
def _halve_max(v, h):
    for j in range(h):  # a select, not max(): Numba's max tests for NaN (there is none here) and stays scalar
        v[j] = v[j] if v[j] >= v[j + h] else v[j + h]


@njit(cache=True, inline="always")
def _excess(err, b):
    return err / b if err == err else np.inf  # a NaN error is outside any bound


@njit(cache=True, nogil=True, host=True, error_model="numpy")
def _judge_chunks(first, last, a, g, bound, floor, out):
    """Tasks ``first`` to ``last`` of :func:`judge`: each chunk's sum and maximum of relative errors, its NaN
    errors, and the element furthest outside its bound (err / bound; NaN counts as infinite).

    By blocks of BLOCK elements: a block whose bits all agree is skipped (most of a b16 output); otherwise every
    element's ratios go into small buffers without branches, and the buffers are reduced by halving. Both loops
    vectorise (slices, not offset indices: LLVM gives up on the latter), and the sum's order is fixed. The rare
    block whose sum is NaN (a NaN on either side, an infinite golden) is judged again element by element, and only a
    block whose largest ratio to its bound is news is scanned for where it is and how many exceed their bounds."""
    n = a.size
    has_bound = bound.size > 0
    buf = np.zeros((3, BLOCK))
    rs, rm, xm = buf[0], buf[1], buf[2]
    for c in range(first, last):
        total, mare, nans, excess, at, wrong = 0.0, 0.0, 0, 0.0, -1, 0
        for b0 in range(c * JUDGE_CHUNK, min(n, (c + 1) * JUDGE_CHUNK), BLOCK):
            m = min(BLOCK, n - b0)
            ab, gb = a[b0:b0 + m], g[b0:b0 + m]
            diff = 0
            for j in range(m):
                diff |= ab[j] ^ gb[j]
            if diff == 0:
                continue
            bb = bound[b0:b0 + m] if has_bound else bound
            for j in range(m):
                av, gv = _value(ab[j]), _value(gb[j])
                err = 0.0 if av == gv else abs(av - gv)
                r = err / (abs(gv) + floor)
                rs[j] = r
                rm[j] = r
                xm[j] = err / bb[j] if has_bound else 0.0
            buf[:, m:] = 0.0
            h = BLOCK // 2
            while h:
                _halve_sum(rs, h)
                _halve_max(rm, h)
                _halve_max(xm, h)
                h //= 2
            if rs[0] == rs[0]:
                total += rs[0]
                mare = max(mare, rm[0])
                news = xm[0] > excess or at < 0
                if not (has_bound and (news or xm[0] > 1.0)):
                    continue
            for j in range(m):  # the rare block: element by element
                av, gv = _value(ab[j]), _value(gb[j])
                if av == gv or (av != av and gv != gv):
                    continue
                err = abs(av - gv)
                r = err / (abs(gv) + floor)
                if rs[0] != rs[0]:
                    if r != r:
                        nans += 1
                    else:
                        total += r
                        mare = max(mare, r)
                if has_bound:
                    x = _excess(err, bb[j]) if r == r else np.inf
                    wrong += x > 1.0
                    if x > excess or at < 0:
                        excess, at = x, b0 + j
        o = out[c]
        o[_SUM], o[_MARE], o[_NANS], o[_WRONG] = total, mare, nans, wrong
        o[_EXCESS], o[_AT] = excess, at


def judge(actual: np.ndarray, expected: Expected) -> Judgement:
    """``actual`` (a kernel's output) against ``expected``: Ascend's standard as :func:`compare` computes it (the
    sum in a fixed order; without the strict MARE) and the rounding bound, in one pass over the host threads."""
    dt = expected.dtype
    a = np.ascontiguousarray(actual).reshape(-1)
    if a.dtype != _DTYPES[dt] or a.size != expected.rounded.size:
        raise ValueError(f"judge: a {a.dtype} output of {a.size} elements against a {dt} golden of "
                         f"{expected.rounded.size}")
    bits = _BITS[dt]
    chunks = -(-a.size // JUDGE_CHUNK)
    out = np.zeros((max(chunks, 1), 6))
    bound = expected.bound if expected.bound is not None else np.zeros(0, np.float32)
    run_cores(_judge_chunks, chunks, (a.view(bits), expected.rounded.view(bits), bound, expected.floor, out),
              thread_count(chunks, a.nbytes + expected.rounded.nbytes + bound.nbytes))  # a small output: one thread
    nan = bool(out[:, _NANS].any())
    mere = math.fsum(out[:, _SUM].tolist()) / a.size if a.size else 0.0
    p = Precision(dt, math.nan if nan else mere, math.nan if nan else float(out[:, _MARE].max()), None,
                  THRESHOLD[dt])
    if expected.bound is None:
        return Judgement(p, math.nan, 0, -1, math.nan, math.nan, math.nan)
    worst = int(np.argmax(out[:, _EXCESS]))
    at = int(out[worst, _AT])
    if at < 0:
        return Judgement(p, 0.0, 0, -1, math.nan, math.nan, math.nan)
    return Judgement(p, float(out[worst, _EXCESS]), int(out[:, _WRONG].sum()), at, float(a[at]),
                     float(expected.rounded[at]), float(expected.bound[at]))
