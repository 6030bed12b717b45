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

from dataclasses import dataclass

import numpy as np

THRESHOLD = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7, "float32": 2.0 ** -13}
SMALL_VALUE = {"float16": 2.0 ** -11, "bfloat16": 2.0 ** -8, "float32": 2.0 ** -14}


@dataclass(frozen=True)
class Precision:
    dtype: str
    mere: float
    mare: float
    strict_mare: float
    threshold: float

    @property
    def ok(self) -> bool:
        return self.mere < self.threshold and self.mare < 10 * self.threshold

    def __str__(self) -> str:
        verdict = "pass" if self.ok else "FAIL"
        return (f"{verdict} ({self.dtype}): MERE {self.mere:.3g} (< {self.threshold:.3g}), MARE {self.mare:.3g} "
                f"(< {10 * self.threshold:.3g}); MARE with the 1e-7 floor {self.strict_mare:.3g}")


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


def assert_close(actual: np.ndarray, golden: np.ndarray, dtype: str | None = None, what: str = "output") -> None:
    p = compare(actual, golden, dtype)
    assert p.ok, f"{what}: {p}"
