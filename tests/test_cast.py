"""The compiled casts of tilesim.numerics.b16 against ml_dtypes, numpy and an independent float64 model of each round
mode.

- CAST_RINT narrowing is bit-identical to ``ml_dtypes`` (bf16) and numpy (fp16) on 10 million random fp32 bit
  patterns (NaN, inf, subnormals and both zeros included) and on a list of hand-picked special values.
- Widening is exact for all 65536 bit patterns of each format; narrowing a value that is already representable
  gives it back under every round mode.
- The other round modes are checked against a model that finds the two representable neighbours of x in float64
  and picks one by the mode's rule (several hundred thousand values, and hypothesis on the scalar functions).
"""

from __future__ import annotations

import warnings

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tilesim.jit.intrinsics import BLOCK_LANES
from tilesim.numerics import b16 as cast
from tilesim.numerics.b16 import (
    CAST_CEIL,
    CAST_FLOOR,
    CAST_NONE,
    CAST_ODD,
    CAST_RINT,
    CAST_ROUND,
    CAST_TRUNC,
    KIND_BF16,
    KIND_FP16,
    b16_to_f32_bits,
    bf16_to_f32_bits,
    f32_bits_to_b16,
    f32_bits_to_bf16,
    f32_bits_to_fp16,
    fp16_to_f32_bits,
    narrow,
    widen,
)

FORMATS = ["bfloat16", "float16"]
KIND = {"bfloat16": KIND_BF16, "float16": KIND_FP16}
NP_DTYPE = {"bfloat16": np.dtype(ml_dtypes.bfloat16), "float16": np.dtype(np.float16)}
# precision p (significand bits, the hidden one included), emin, emax
PARAMS = {"bfloat16": (8, -126, 127), "float16": (11, -14, 15)}
ALL_MODES = [CAST_NONE, CAST_RINT, CAST_FLOOR, CAST_CEIL, CAST_ROUND, CAST_TRUNC, CAST_ODD]
OTHER_MODES = [CAST_FLOOR, CAST_CEIL, CAST_ROUND, CAST_TRUNC, CAST_ODD]
MODE_NAME = {v: k for k, v in cast.ROUND_MODES.items()}

N_RANDOM = 10_000_000


def _bits32(x) -> np.ndarray:
    return np.asarray(x, np.float32).view(np.uint32)


def _ref_rint(x32: np.ndarray, fmt: str) -> np.ndarray:
    """The library cast (ml_dtypes for bf16, numpy for fp16) as uint16 bits."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return x32.astype(NP_DTYPE[fmt]).view(np.uint16)


def _hexdiff(x32: np.ndarray, got: np.ndarray, want: np.ndarray, limit: int = 10) -> str:
    bad = np.flatnonzero(got != want)
    rows = [f"x=0x{int(_bits32(x32[i])):08x} ({x32[i]!r}): got 0x{int(got[i]):04x}, want 0x{int(want[i]):04x}"
            for i in bad[:limit]]
    return f"{bad.size} mismatches of {got.size}:\n  " + "\n  ".join(rows)


@pytest.fixture(scope="module")
def random_f32() -> np.ndarray:
    """10M uint32 bit patterns viewed as fp32: all classes of fp32 value, NaN payloads of both signs included."""
    rng = np.random.default_rng(20240611)
    return rng.integers(0, 2 ** 32, size=N_RANDOM, dtype=np.uint32).view(np.float32)


# --- special values ---------------------------------------------------------------------------------------------

NAN_BITS = [0x7F800001, 0x7F800FFF, 0x7F801000, 0x7F801FFF, 0x7F802000, 0x7F808000, 0x7F80FFFF, 0x7F810000,
            0x7FBFFFFF, 0x7FC00000, 0x7FC00001, 0x7FFFE000, 0x7FFFFFFF, 0xFF800001, 0xFF80FFFF, 0xFFC00000,
            0xFFBFFFFF, 0xFFFFFFFF]

SPECIAL_BITS_COMMON = [
    0x00000000, 0x80000000,  # +-0
    0x7F800000, 0xFF800000,  # +-inf
    0x7F7FFFFF, 0xFF7FFFFF,  # largest finite fp32 (bf16: rounds to inf)
    0x00800000, 0x80800000,  # smallest normal
    0x007FFFFF, 0x807FFFFF,  # largest subnormal
    0x00000001, 0x80000001,  # smallest subnormal
    0x3F800000, 0xBF800000, 0x40000000, 0x3FFFFFFF, 0xBFFFFFFF,  # 1, -1, 2, just below 2 (carries into exponent)
]

BF16_TIE_BITS = [
    0x3F808000, 0xBF808000,  # 1 + half ulp: tie, even -> stays
    0x3F818000, 0xBF818000,  # tie with odd q: -> up
    0x3F808001, 0x3F807FFF, 0x3F818001, 0x3F817FFF,  # just above / below ties
    0x7F7F0000, 0xFF7F0000,  # bf16 max
    0x7F7F7FFF, 0xFF7F7FFF,  # just below the tie above max: stays max
    0x7F7F8000, 0xFF7F8000,  # tie above max (odd): -> inf
    0x7F7F8001, 0xFF7F8001,  # above it: inf
    0x7F7EFFFF, 0x7F7E8000,  # tie below max (even q): stays 0x7F7E
    0x00008000, 0x80008000,  # subnormal tie to 0
    0x00018000, 0x80018000,  # subnormal tie, odd: up
    0x00007FFF, 0x00008001, 0x0000FFFF, 0x00010000,
    0x007F8000, 0x007FFFFF, 0x007F7FFF,  # largest subnormals: tie rounds up to the smallest normal
    0x00800000 | 0x8000, 0x00810000 | 0x8000,  # ties at the smallest normal
]

F16_SPECIAL_VALUES = [
    65504.0, -65504.0, 65519.99, -65519.99, 65520.0, -65520.0, 65536.0, 1e5, -1e5, 3.0e38,
    2.0 ** -24, -(2.0 ** -24),  # smallest subnormal
    2.0 ** -25, -(2.0 ** -25),  # tie between 0 and 2**-24: to 0
    2.0 ** -25 * 1.0000001, -(2.0 ** -25 * 1.0000001),  # just above the tie: 2**-24
    2.0 ** -25 * 0.9999999, 2.0 ** -26, 2.0 ** -40, 1e-30,
    3 * 2.0 ** -25, 5 * 2.0 ** -25, 7 * 2.0 ** -25,  # subnormal ties: 2, 2, 4 units
    2.0 ** -14, 2.0 ** -14 - 2.0 ** -24, 2.0 ** -14 - 2.0 ** -25, 2.0 ** -14 - 2.0 ** -26,  # normal boundary
    1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11, 1 + 2.0 ** -11 + 2.0 ** -23, 1 + 2.0 ** -11 - 2.0 ** -24,
    2049.0, 2051.0, 2050.0, 4097.0, 4098.0, 4099.0, 32767.0, 32769.0, 65505.0, 65535.0,
    0.1, -0.1, 1 / 3, 6.1e-5, 6.0e-8, 5.9e-8, 3.0e-8,
]


def _specials() -> np.ndarray:
    bits = np.array(NAN_BITS + SPECIAL_BITS_COMMON + BF16_TIE_BITS, np.uint32)
    f16 = np.array(F16_SPECIAL_VALUES, np.float32)
    x = np.concatenate([bits.view(np.float32), f16, -f16])
    # every fp16 tie and its neighbours: the midpoints of consecutive fp16 values are exact in fp32
    h = np.arange(0, 0x7C00, dtype=np.uint16).view(np.float16).astype(np.float32)
    mid = ((h[:-1].astype(np.float64) + h[1:].astype(np.float64)) / 2).astype(np.float32)
    ties16 = np.concatenate([mid, np.nextafter(mid, np.float32(np.inf)), np.nextafter(mid, np.float32(0))])
    # and the same for bf16: every tie between finite bf16 values
    b = (np.arange(0, 0x7F80, dtype=np.uint32) << 16)
    tb = (b[:-1] | 0x8000).view(np.float32)
    ties_b = np.concatenate([tb, np.nextafter(tb, np.float32(np.inf)), np.nextafter(tb, np.float32(0))])
    out = np.concatenate([x, ties16, -ties16, ties_b, -ties_b]).astype(np.float32)
    return out


SPECIALS = _specials()


# --- RINT against the libraries --------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_rint_matches_library_on_10m_random_bit_patterns(random_f32, fmt):
    x = random_f32
    got = narrow(x, fmt, CAST_RINT)
    want = _ref_rint(x, fmt)
    assert got.dtype == np.uint16 and got.shape == x.shape
    assert np.array_equal(got, want), _hexdiff(x, got, want)
    # the sample really covers every class of fp32 value
    b = x.view(np.uint32) & 0x7FFFFFFF
    assert (b > 0x7F800000).sum() > 10_000 and (b < 0x00800000).sum() > 10_000
    assert (x.view(np.uint32) >> 31).sum() > N_RANDOM // 3


@pytest.mark.parametrize("fmt", FORMATS)
def test_none_narrows_like_rint(random_f32, fmt):
    x = random_f32[:2_000_000]
    assert np.array_equal(narrow(x, fmt, CAST_NONE), narrow(x, fmt, CAST_RINT))
    assert np.array_equal(narrow(SPECIALS, fmt, CAST_NONE), narrow(SPECIALS, fmt, CAST_RINT))


def test_rint_bf16_specials():
    got = narrow(SPECIALS, "bfloat16", CAST_RINT)
    want = _ref_rint(SPECIALS, "bfloat16")
    assert np.array_equal(got, want), _hexdiff(SPECIALS, got, want)


def test_rint_fp16_specials():
    got = narrow(SPECIALS, "float16", CAST_RINT)
    want = _ref_rint(SPECIALS, "float16")
    assert np.array_equal(got, want), _hexdiff(SPECIALS, got, want)


@pytest.mark.parametrize("value, bits", [
    (65504.0, 0x7BFF), (65519.99, 0x7BFF), (65520.0, 0x7C00), (-65520.0, 0xFC00), (65536.0, 0x7C00),
    (2.0 ** -24, 0x0001), (2.0 ** -25, 0x0000), (-(2.0 ** -25), 0x8000), (2.0 ** -25 * 1.0000001, 0x0001),
    (3 * 2.0 ** -25, 0x0002), (2.0 ** -14, 0x0400), (2.0 ** -14 - 2.0 ** -25, 0x0400), (1 + 2.0 ** -11, 0x3C00),
    (1 + 3 * 2.0 ** -11, 0x3C02), (2049.0, 0x6800), (2051.0, 0x6802),
])
def test_rint_fp16_known_values(value, bits):
    """A few results written out by hand (the IEEE binary16 encodings)."""
    assert int(narrow(np.array([value], np.float32), "float16", CAST_RINT)[0]) == bits
    assert int(f32_bits_to_fp16(int(_bits32(value)), CAST_RINT)) == bits


@pytest.mark.parametrize("u, bits", [
    (0x3F808000, 0x3F80), (0x3F818000, 0x3F82), (0x3F808001, 0x3F81), (0x7F7F8000, 0x7F80), (0x7F7F7FFF, 0x7F7F),
    (0xFF7F8000, 0xFF80), (0x00008000, 0x0000), (0x00018000, 0x0002), (0x3FFFFFFF, 0x4000),
    (0x007FFFFF, 0x0080), (0x7F800001, 0x7FC0), (0xFF800001, 0xFFC0), (0x7F80FFFF, 0x7FC0), (0x80000000, 0x8000),
])
def test_rint_bf16_known_values(u, bits):
    assert int(f32_bits_to_bf16(u, CAST_RINT)) == bits
    assert int(narrow(np.array([u], np.uint32).view(np.float32), "bfloat16", CAST_RINT)[0]) == bits


@pytest.mark.parametrize("fmt", FORMATS)
def test_scalar_functions_agree_with_array_cast(fmt):
    """The njit scalar functions (what the vector Cast instruction calls) give the array cast's bits."""
    kind = KIND[fmt]
    scalar = f32_bits_to_bf16 if fmt == "bfloat16" else f32_bits_to_fp16
    x = np.concatenate([SPECIALS[::50], np.array(NAN_BITS + SPECIAL_BITS_COMMON, np.uint32).view(np.float32)])
    for mode in ALL_MODES:
        arr = narrow(x, fmt, mode)
        for xi, a in zip(x.view(np.uint32).tolist(), arr.tolist(), strict=True):
            assert int(scalar(xi, mode)) == a, (fmt, MODE_NAME[mode], hex(xi))
            assert int(f32_bits_to_b16(xi, kind, mode)) == a, (fmt, MODE_NAME[mode], hex(xi))


def test_narrow_keeps_shape_and_accepts_non_contiguous():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)[:, ::2, ::-1] * np.float32(1.37)
    for fmt in FORMATS:
        got = narrow(x, fmt)
        assert got.shape == x.shape and got.dtype == np.uint16
        assert np.array_equal(got, _ref_rint(np.ascontiguousarray(x), fmt))
        back = widen(got, fmt)
        assert back.shape == x.shape and back.dtype == np.float32


# --- widening and round trips ----------------------------------------------------------------------------------

ALL16 = np.arange(65536, dtype=np.uint32).astype(np.uint16)


@pytest.mark.parametrize("fmt", FORMATS)
def test_widen_every_bit_pattern_exactly(fmt):
    got = widen(ALL16, fmt).view(np.uint32)
    want = ALL16.view(NP_DTYPE[fmt]).astype(np.float32).view(np.uint32)
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, [(hex(int(ALL16[i])), hex(int(got[i])), hex(int(want[i]))) for i in bad[:10]]
    # NaN payloads survive widening (compared as bits above); check the count of NaNs as a sanity check
    assert np.isnan(got.view(np.float32)).sum() == (2 * 127 if fmt == "bfloat16" else 2 * 1023)


@pytest.mark.parametrize("fmt", FORMATS)
def test_widen_scalar_functions(fmt):
    kind = KIND[fmt]
    scalar = bf16_to_f32_bits if fmt == "bfloat16" else fp16_to_f32_bits
    want = widen(ALL16, fmt).view(np.uint32)
    for h in list(range(0, 65536, 97)) + [0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400, 0x7BFF, 0x7C00, 0xFC00,
                                          0x7C01, 0x7E00, 0x7FFF, 0xFFFF, 0x7F7F, 0x7F80, 0x7F81, 0x7FC0, 0xFF80]:
        assert int(scalar(h)) == int(want[h]), (fmt, hex(h))
        assert int(b16_to_f32_bits(h, kind)) == int(want[h]), (fmt, hex(h))


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("mode", ALL_MODES, ids=lambda m: MODE_NAME[m])
def test_round_trip_is_identity(fmt, mode):
    """Every b16 value widened and narrowed again is itself, under every round mode (it is exact).
    NaNs: bf16 narrows to the canonical quiet NaN of the same sign (ml_dtypes), fp16 keeps the payload (numpy)."""
    w = widen(ALL16, fmt)
    back = narrow(w, fmt, mode)
    nan = np.isnan(w)
    assert np.array_equal(back[~nan], ALL16[~nan])
    if fmt == "bfloat16":
        assert np.array_equal(back[nan], (ALL16[nan] & 0x8000) | 0x7FC0)
    else:
        assert np.array_equal(back[nan], ALL16[nan])
    # and widen(narrow(x)) == x for every b16 value x (as fp32 bits), NaNs of bf16 aside
    again = widen(back, fmt).view(np.uint32)
    ok = ~nan if fmt == "bfloat16" else np.ones_like(nan)
    assert np.array_equal(again[ok], w.view(np.uint32)[ok])


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("mode", ALL_MODES, ids=lambda m: MODE_NAME[m])
def test_inf_and_nan_under_every_mode(fmt, mode):
    x = np.array([np.inf, -np.inf], np.float32)
    inf = 0x7F80 if fmt == "bfloat16" else 0x7C00
    assert narrow(x, fmt, mode).tolist() == [inf, 0x8000 | inf]
    nans = np.array(NAN_BITS, np.uint32).view(np.float32)
    got = narrow(nans, fmt, mode)
    assert np.array_equal(got, _ref_rint(nans, fmt))  # a NaN is a NaN whatever the mode
    assert np.isnan(got.view(NP_DTYPE[fmt]).astype(np.float32)).all()


# --- the other round modes against an independent model --------------------------------------------------------


def model(x32: np.ndarray, fmt: str, mode: int) -> np.ndarray:
    """Expected bits of finite fp32 ``x32`` narrowed to ``fmt`` with ``mode``, computed in float64.

    The two representable neighbours of |x| are ``k * ulp`` and ``(k + 1) * ulp`` with ``ulp`` the quantum at
    x's exponent (clamped at emin for subnormals); the mode picks one. Overflow (a result above the largest
    finite value) gives inf for the modes that rounded away from zero (RINT, ROUND, CEIL of x > 0, FLOOR of x < 0)
    and the largest finite value for the others (TRUNC, ODD, CEIL of x < 0, FLOOR of x > 0).
    """
    p, emin, emax = PARAMS[fmt]
    x = x32.astype(np.float64)
    assert np.isfinite(x).all()
    neg = np.signbit(x)
    m = np.abs(x)
    _, e2 = np.frexp(m)  # m = f * 2**e2, f in [0.5, 1)
    e = np.maximum(e2 - 1, emin)
    ulp = np.ldexp(1.0, e - (p - 1))
    k = np.floor(m / ulp)
    rem = m - k * ulp  # exact: ulp is a power of two and m has 24 significant bits
    exact = rem == 0
    odd = np.mod(k, 2) == 1
    half = ulp / 2
    if mode in (CAST_RINT, CAST_NONE):
        up = (rem > half) | ((rem == half) & odd)
    elif mode == CAST_ROUND:
        up = rem >= half
    elif mode == CAST_TRUNC:
        up = np.zeros_like(exact)
    elif mode == CAST_FLOOR:
        up = neg & ~exact
    elif mode == CAST_CEIL:
        up = ~neg & ~exact
    elif mode == CAST_ODD:
        up = ~exact & ~odd
    else:
        raise ValueError(mode)
    r = np.where(up, (k + 1) * ulp, k * ulp)
    max_finite = (2.0 - 2.0 ** (1 - p)) * 2.0 ** emax
    if mode in (CAST_RINT, CAST_NONE, CAST_ROUND):
        away = np.ones_like(neg)
    elif mode == CAST_CEIL:
        away = ~neg
    elif mode == CAST_FLOOR:
        away = neg
    else:
        away = np.zeros_like(neg)
    r = np.where(r > max_finite, np.where(away, np.inf, max_finite), r)
    r = np.where(neg, -r, r)
    # r is representable in fmt, so the library cast is exact here
    return r.astype(NP_DTYPE[fmt]).view(np.uint16)


@pytest.fixture(scope="module")
def finite_sample() -> np.ndarray:
    """~700k finite fp32 values: random bit patterns, values spread over the fp16 range and its edges, and values
    whose dropped bits are at, just below and just above half an ulp of bf16 and fp16."""
    rng = np.random.default_rng(7)
    n = 150_000
    u = rng.integers(0, 2 ** 32, size=n, dtype=np.uint32)
    u = u[(u & 0x7F800000) != 0x7F800000]
    sign = rng.integers(0, 2, size=n, dtype=np.uint32) << 31
    man = rng.integers(0, 1 << 23, size=n, dtype=np.uint32)
    # exponents 90..143 cover fp16 underflow (below 2**-25), subnormals, normals and overflow (above 65520)
    f16range = sign | (rng.integers(90, 144, size=n, dtype=np.uint32) << 23) | man
    low16 = np.array([0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001, 0xFFFF], np.uint32)
    bf_ties = (rng.integers(0, 2 ** 32, size=n, dtype=np.uint32) & 0xFFFF0000) | rng.choice(low16, size=n)
    bf_ties = bf_ties[(bf_ties & 0x7F800000) != 0x7F800000]
    low13 = np.array([0x0000, 0x0001, 0x0FFF, 0x1000, 0x1001, 0x1FFF], np.uint32)
    f16_ties = (f16range & ~np.uint32(0x1FFF)) | rng.choice(low13, size=n)
    # fp16 subnormal ties: (2j + 1) * 2**-25 and neighbours
    j = rng.integers(0, 1024, size=n // 10).astype(np.float64)
    sub = ((2 * j + 1) * 2.0 ** -25).astype(np.float32)
    subs = np.concatenate([sub, np.nextafter(sub, np.float32(1)), np.nextafter(sub, np.float32(0))])
    fin = SPECIALS[np.isfinite(SPECIALS)]
    x = np.concatenate([u.view(np.float32), f16range.view(np.float32), bf_ties.view(np.float32),
                        f16_ties.view(np.float32), subs, -subs, fin])
    assert np.isfinite(x).all()
    return x


@pytest.mark.parametrize("fmt", FORMATS)
def test_model_agrees_with_library_on_rint(finite_sample, fmt):
    """The model itself, checked on RINT where the libraries are the reference."""
    x = finite_sample
    got, want = model(x, fmt, CAST_RINT), _ref_rint(x, fmt)
    assert np.array_equal(got, want), _hexdiff(x, got, want)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("mode", OTHER_MODES, ids=lambda m: MODE_NAME[m])
def test_round_mode_matches_model(finite_sample, fmt, mode):
    x = finite_sample
    got, want = narrow(x, fmt, mode), model(x, fmt, mode)
    assert np.array_equal(got, want), _hexdiff(x, got, want)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("mode", OTHER_MODES, ids=lambda m: MODE_NAME[m])
def test_round_mode_properties(finite_sample, fmt, mode):
    """Directed modes bracket x; the result is one of x's two neighbours; overflow rule per mode."""
    x = finite_sample
    got = narrow(x, fmt, mode).view(NP_DTYPE[fmt]).astype(np.float64)
    xd = x.astype(np.float64)
    fin = np.isfinite(got)
    if mode == CAST_FLOOR:
        assert (got <= xd).all()
    elif mode == CAST_CEIL:
        assert (got >= xd).all()
    elif mode in (CAST_TRUNC, CAST_ODD):
        assert fin.all()  # these never overflow to inf
    if mode == CAST_TRUNC:
        assert (np.abs(got) <= np.abs(xd)).all()
        assert (np.signbit(got) == np.signbit(xd)).all()
    rn = _ref_rint(x, fmt).view(NP_DTYPE[fmt]).astype(np.float64)
    if mode == CAST_ROUND:  # differs from RINT only on exact ties
        diff = (got != rn) & np.isfinite(rn)
        assert (np.abs(got[diff]) > np.abs(rn[diff])).all()


FMT_MODE = st.tuples(st.sampled_from(FORMATS), st.sampled_from(ALL_MODES))


@settings(max_examples=400, deadline=None, database=None)
@given(x=st.floats(width=32, allow_nan=False, allow_infinity=False), fm=FMT_MODE)
def test_scalar_cast_matches_model_hypothesis(x, fm):
    fmt, mode = fm
    xa = np.array([x], np.float32)
    want = int(model(xa, fmt, mode)[0])
    u = int(xa.view(np.uint32)[0])
    assert int(f32_bits_to_b16(u, KIND[fmt], mode)) == want
    assert int(narrow(xa, fmt, mode)[0]) == want


@settings(max_examples=300, deadline=None, database=None)
@given(u=st.integers(0, 2 ** 32 - 1), fm=FMT_MODE)
def test_scalar_cast_bits_hypothesis(u, fm):
    """Arbitrary bit patterns: RINT/NONE match the library, the other modes the model (NaN and inf are kept)."""
    fmt, mode = fm
    xa = np.array([u], np.uint32).view(np.float32)
    got = int(f32_bits_to_b16(u, KIND[fmt], mode))
    if mode in (CAST_RINT, CAST_NONE) or not np.isfinite(xa[0]):
        assert got == int(_ref_rint(xa, fmt)[0])
    else:
        assert got == int(model(xa, fmt, mode)[0])


OVERLAP_N = 37  # two whole blocks of BLOCK_LANES and a tail


def _in_order(buf, d, s, n, dst_size, src_size, convert):
    """The instruction's definition: element k read, converted, written, for k = 0 .. n - 1, on the bytes of
    ``buf`` (``dst_size``/``src_size``-byte elements at byte offsets ``d`` and ``s``)."""
    src_t, dst_t = (np.uint16, np.uint32) if src_size == 2 else (np.uint32, np.uint16)
    for k in range(n):
        v = int(buf[s + src_size * k:s + src_size * (k + 1)].view(src_t)[0])
        buf[d + dst_size * k:d + dst_size * (k + 1)] = np.array([convert(v)], dst_t).view(np.uint8)


@pytest.mark.parametrize("kind", [KIND_BF16, KIND_FP16], ids=["bf16", "fp16"])
def test_widening_gives_the_in_order_results_wherever_the_source_lies(kind):
    """widen_bits against the in-order loop for every source position from well below the destination to past
    its end, in 2-byte steps: the block path where no write reaches a later source (the upper half, disjoint),
    the runs where one does."""
    n = OVERLAP_N
    rng = np.random.default_rng(kind)
    size = 12 * n
    d = 4 * n
    for s in range(0, size - 2 * n + 1, 2):
        buf = rng.integers(0, 256, size, dtype=np.uint64).astype(np.uint8)
        want = buf.copy()
        _in_order(want, d, s, n, 4, 2, lambda v: b16_to_f32_bits(v, kind))
        cast.widen_bits(buf[s:s + 2 * n].view(np.uint16), buf[d:d + 4 * n].view(np.uint32), n, kind)
        np.testing.assert_array_equal(buf, want, err_msg=f"source at {s - d:+d} bytes from the destination")


@pytest.mark.parametrize("kind", [KIND_BF16, KIND_FP16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("mode", [CAST_RINT, CAST_ROUND, CAST_FLOOR])
def test_narrowing_gives_the_in_order_results_wherever_the_source_lies(kind, mode):
    """narrow_bits against the in-order loop for every source position, in 4-byte steps (rounding to nearest
    takes the block path where no write reaches a later source: in place, disjoint)."""
    n = OVERLAP_N
    rng = np.random.default_rng(kind + 10 * mode)
    size = 12 * n
    d = 4 * n
    for s in range(0, size - 4 * n + 1, 4):
        f = rng.uniform(-70000, 70000, size // 4).astype(np.float32)
        buf = f.view(np.uint8).copy()
        want = buf.copy()
        _in_order(want, d, s, n, 2, 4, lambda v: f32_bits_to_b16(v, kind, mode))
        cast.narrow_bits(buf[s:s + 4 * n].view(np.uint32), buf[d:d + 2 * n].view(np.uint16), n, kind, mode)
        np.testing.assert_array_equal(buf, want, err_msg=f"source at {s - d:+d} bytes from the destination")


@pytest.mark.parametrize("kind", [KIND_BF16, KIND_FP16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("mode", [CAST_RINT, CAST_ROUND])
def test_block_casts_with_and_without_nan_lanes(kind, mode):
    """A vector block without NaN lanes takes the formula without its NaN selects (``intrinsics._store_by_nans``):
    blocks with no NaN, with one NaN at each lane position, and of NaNs only (quiet, signalling, either sign, every
    payload bit), narrowed in place and widened from the upper half of the destination, give the general casts'
    bits."""
    lanes = BLOCK_LANES
    rng = np.random.default_rng(kind + 10 * mode)
    finite = rng.integers(0, 0x7F800001, 40 * lanes, dtype=np.uint64).astype(np.uint32)  # up to inf
    finite[::7] |= np.uint32(0x80000000)
    nan32 = np.array([0x7FC00000, 0x7F800001, 0x7FBFFFFF, 0xFFC00001, 0xFF800001, 0x7FFFFFFF, 0xFFFFE000,
                      0x7F802000, 0x7FC01000, 0xFF800000 | 0x1000, 0x7F800000 | 0x400000 | 0x1FFF, 0x7FA00000,
                      0xFFD55555, 0x7F8AAAAA, 0x7FF00000, 0xFFFFFFFF], np.uint32)
    u = finite.copy()
    for k in range(lanes):  # block 2k: no NaN; block 2k + 1: a NaN at lane k
        u[(2 * k + 1) * lanes + k] = nan32[k]
    u = np.concatenate([u, nan32, np.uint32(0x7F800000) | (np.arange(lanes, dtype=np.uint32) << 9)])
    buf = u.copy()
    cast.narrow_bits(buf, buf.view(np.uint16)[:u.size], u.size, kind, mode)
    want = np.array([f32_bits_to_b16(v, kind, mode) for v in u], np.uint16)
    np.testing.assert_array_equal(buf.view(np.uint16)[:u.size], want)

    nan16 = np.array([0x7C01, 0x7E00, 0x7DFF, 0xFC01, 0xFE01, 0x7FFF, 0xFFFF, 0x7D55], np.uint16)
    h = rng.integers(0, 0x7C01, 40 * lanes, dtype=np.uint64).astype(np.uint16)  # up to inf
    h[::5] |= np.uint16(0x8000)
    for k in range(lanes):
        h[(2 * k + 1) * lanes + k] = nan16[k % nan16.size]
    h = np.concatenate([h, np.tile(nan16, 2), np.uint16(0x7C00) | np.arange(lanes, dtype=np.uint16)])
    out = np.zeros(h.size, np.uint32)
    out.view(np.uint16)[h.size:] = h  # the upper half, as the kernels widen
    cast.widen_bits(out.view(np.uint16)[h.size:], out, h.size, kind)
    np.testing.assert_array_equal(out, np.array([b16_to_f32_bits(v, kind) for v in h], np.uint32))
