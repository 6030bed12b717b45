"""tilesim.precision.judge, the explorer's one-pass judge of an output: the standard's MERE and MARE as compare()
computes them (special values and tails included), the same figures whatever the host thread count, the goldens
rounded as compare() rounds them, and each element against its rounding bound (tilesim.precision.ErrorBound)."""

from __future__ import annotations

import math

import ml_dtypes
import numba
import numpy as np
import pytest

from tilesim.precision import (
    BLOCK,
    BOUND_SAFETY,
    JUDGE_CHUNK,
    UNIT_ROUNDOFF,
    ErrorBound,
    Expected,
    compare,
    judge,
)

# 1e30 as fp16 is inf, on purpose; compare() then subtracts inf from inf
pytestmark = [pytest.mark.filterwarnings("ignore:overflow encountered in cast"),
              pytest.mark.filterwarnings("ignore:invalid value encountered in subtract")]
DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
SPECIALS = [0.0, -0.0, np.inf, -np.inf, 1e-40, -1e-40, 6e-8, 65504.0, 1e30]


def case(dtype: str, n: int, seed: int = 0, noise: float = 3e-3) -> tuple[np.ndarray, np.ndarray]:
    """A float64 golden with special values, and an output near it in ``dtype`` (a few elements far off)."""
    rng = np.random.default_rng(seed)
    g = rng.standard_normal(n) * np.exp(rng.uniform(-8, 8, n))
    k = min(n, len(SPECIALS))
    g[:k] = SPECIALS[:k]
    a = g * (1 + noise * rng.standard_normal(n))
    a[k:k + 3] *= -2.0
    with np.errstate(over="ignore"):
        return a.astype(DTYPES[dtype]), g


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("n", [1, BLOCK - 1, BLOCK + 7, JUDGE_CHUNK + 3 * BLOCK + 5])
def test_the_standard_s_figures_are_compare_s(dtype: str, n: int) -> None:
    a, g = case(dtype, n)
    p, q = judge(a, Expected.of(g, dtype)).precision, compare(a, g)
    assert p.dtype == q.dtype and p.threshold == q.threshold and p.ok == q.ok
    assert p.mere == pytest.approx(q.mere, rel=1e-12, nan_ok=True)
    assert p.mare == q.mare or (math.isnan(p.mare) and math.isnan(q.mare))
    assert p.strict_mare is None


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_nans_make_the_figures_nan_unless_both_sides_have_them(dtype: str) -> None:
    a, g = case(dtype, 5000)
    a[100] = np.nan
    g2 = g.copy()
    g2[100] = np.nan
    assert judge(a, Expected.of(g2, dtype)).precision.ok == compare(a, g2).ok
    p = judge(a, Expected.of(g, dtype)).precision
    assert math.isnan(p.mere) and math.isnan(p.mare) and math.isnan(compare(a, g).mere) and not p.ok


def test_bf16_goldens_are_rounded_as_compare_rounds_them() -> None:
    """ml_dtypes rounds float64 to bf16 through fp32; Expected.of gives the same bits (the compiled cast)."""
    b = np.random.default_rng(1).standard_normal(100000).astype(ml_dtypes.bfloat16).astype(np.float64)
    x = np.concatenate([b + np.abs(b) * 2.0 ** -8 * (1 + 2.0 ** -30), b * (1 + 1e-3), SPECIALS, [np.nan]])
    got = Expected.of(x, "bfloat16").rounded.view(np.uint16)
    want = x.astype(ml_dtypes.bfloat16).view(np.uint16)
    np.testing.assert_array_equal(got, want)


def test_the_figures_do_not_depend_on_the_host_threads() -> None:
    a, g = case("float32", 5 * JUDGE_CHUNK + 17)
    e = Expected.of(g, "float32", ErrorBound(np.abs(g), 8))
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = judge(a, e)
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
        many = judge(a, e)
    finally:
        numba.set_num_threads(before)
    assert one == many


def test_an_element_outside_its_rounding_bound_is_wrong_and_named() -> None:
    g = np.linspace(1.0, 2.0, 3 * BLOCK + 11)
    bound = ErrorBound(np.abs(g), 100)  # a sum of 101 terms of these sizes
    a = g.astype(np.float32)
    allowed = BOUND_SAFETY * (100 * UNIT_ROUNDOFF["float32"]) * g  # about what the bound lets through
    a[5] += np.float32(0.5 * allowed[5])  # inside
    a[700] += np.float32(40 * allowed[700])  # outside
    a[701] = np.nan  # outside (counted, but the finite one is reported first: it is further off than none)
    j = judge(a, Expected.of(g, "float32", bound))
    assert j.verdict == "wrong" and j.wrong == 2 and j.index == 701 and math.isinf(j.excess)
    a[701] = g[701]
    j = judge(a, Expected.of(g, "float32", bound))
    assert j.wrong == 1 and j.index == 700 and 30 < j.excess < 50
    assert j.actual == a[700] and j.expected == np.float32(g[700]) and j.bound > 0
    a[700] = g[700]
    j = judge(a, Expected.of(g, "float32", bound))
    assert j.verdict == "pass" and j.wrong == 0 and 0.2 < j.excess < 0.6 and j.index == 5


def test_an_imprecise_output_is_within_its_bound_but_fails_the_standard() -> None:
    g = np.random.default_rng(2).uniform(1, 2, 1000)
    a = (g * (1 + 5e-4)).astype(np.float32)  # MERE 5e-4 > 2^-13
    j = judge(a, Expected.of(g, "float32", ErrorBound(g, 100000)))
    assert j.verdict == "imprecise" and not j.precision.ok and j.excess < 1
    assert judge(a, Expected.of(g, "float32")).verdict == "imprecise"  # no bound: never wrong
    assert math.isnan(judge(a, Expected.of(g, "float32")).excess)


def test_the_absolute_bound_is_rounded_up() -> None:
    m = np.random.default_rng(3).uniform(0, 1e3, 10000)
    g = m / 3
    b = ErrorBound(m, 4095).absolute(g, "bfloat16")
    k, u = 4095, 2.0 ** -24
    fp32 = k * u / (1 - k * u) * m
    exact = BOUND_SAFETY * (fp32 + 2 * 2.0 ** -8 * (np.abs(g) + fp32) + 2.0 ** -133)
    assert b.dtype == np.float32 and (b.astype(np.float64) >= exact).all()
    assert (b.astype(np.float64) <= exact * (1 + 2.0 ** -18)).all()
