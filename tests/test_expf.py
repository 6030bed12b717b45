"""tilesim.numerics.expf.exp_f32, the Exp instruction's float32 exponential, against e^x rounded from float64 and
against the C library's expf, and the branch-free nearest-rounding casts against the general ones.

The bound (``MAX_ULP``) was measured on every float32 in [-104, 89] by ``python -m tilesim.numerics.expf``; here it is
sampled: every exponent of the range with random mantissas, the overflow and underflow edges, and the specials.
"""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit

from tilesim.jit import intrinsics
from tilesim.numerics.b16 import (
    CAST_NONE,
    CAST_RINT,
    CAST_ROUND,
    f32_bits_to_bf16,
    f32_bits_to_bf16_nearest,
    f32_bits_to_fp16,
    f32_bits_to_fp16_nearest,
)
from tilesim.numerics.expf import MAX_ULP, exp_f32, exp_values, ulp_distance

pytestmark = pytest.mark.no_launch_here  # host numerics, no kernel


@njit(cache=True)
def _ours(x):
    out = np.empty_like(x)
    for i in range(x.size):
        out[i] = exp_f32(x[i])
    return out


@njit(cache=True)
def _libm(x):
    out = np.empty_like(x)
    for i in range(x.size):
        out[i] = np.exp(x[i])  # Numba calls the C library's expf for a float32
    return out


@pytest.fixture(scope="module")
def sample() -> np.ndarray:
    """4 M float32 in [-104, 89]: uniform, uniform in magnitude per binade (tiny |x| too), and the edges."""
    rng = np.random.default_rng(7)
    uniform = rng.uniform(-104.0, 89.0, 2_000_000).astype(np.float32)
    binades = (rng.uniform(1.0, 2.0, 1_800_000) * 2.0 ** rng.integers(-40, 7, 1_800_000)).astype(np.float32)
    binades *= np.where(rng.random(binades.size) < 0.5, -1, 1).astype(np.float32)
    binades = binades[(binades > -104) & (binades < 89)]
    edges = np.concatenate([np.linspace(a, b, 50_000, dtype=np.float32)
                            for a, b in ((88.6, 89.0), (-104.0, -103.8), (-87.5, -87.2), (-1e-3, 1e-3))])
    return np.concatenate([uniform, binades, edges])


def test_within_max_ulp_of_correctly_rounded(sample):
    with np.errstate(over="ignore"):
        cr = np.exp(sample.astype(np.float64)).astype(np.float32)
    d = ulp_distance(_ours(sample), cr)
    assert d.max() <= MAX_ULP, (d.max(), sample[d.argmax()])
    assert np.mean(d != 0) < 0.1  # 5.6 % on this sample; 0.78 % over every float32 (most are tiny)


def test_within_one_ulp_of_libm(sample):
    d = ulp_distance(_ours(sample), _libm(sample))
    assert d.max() <= 1


def test_special_values():
    x = np.array([np.inf, -np.inf, np.nan, -np.nan, 0.0, -0.0, 88.72283, 88.72284, 89.0, 1e30, -103.97208,
                  -103.97209, -104.0, -1e30, 1.0, -1.0], np.float32)
    got = _ours(x)
    assert got[0] == np.inf and got[1] == 0.0 and np.signbit(got[1]) == 0
    assert np.isnan(got[2]) and np.isnan(got[3])
    assert got[4] == 1.0 and got[5] == 1.0
    assert np.isfinite(got[6]) and got[7] == np.inf and got[8] == np.inf and got[9] == np.inf
    assert got[10] == np.float32(1.4e-45) and got[11] == 0.0 and got[12] == 0.0 and got[13] == 0.0
    assert got[14] == np.float32(np.e) and got[15] == np.float32(1 / np.e)


def test_nan_keeps_its_sign_and_payload_and_comes_out_quiet():
    """IEEE 754's exp(NaN): a quiet NaN stays as it is, a signalling one is quieted (sign and payload kept)."""
    x = np.array([0x7FC00000, 0xFFC00000, 0x7FC12345, 0xFFFFFFFF, 0x7FA00001, 0xFF800001, 0x7F800002], np.uint32)
    want = x | np.uint32(0x00400000)
    np.testing.assert_array_equal(_ours(x.view(np.float32)).view(np.uint32), want)
    np.testing.assert_array_equal(exp_values(x.view(np.float32)).view(np.uint32), want)


def test_subnormal_results_are_graded(sample):
    """Results between the smallest subnormal and the smallest normal come out subnormal, within the bound."""
    x = np.linspace(-103.9, -87.4, 200_001, dtype=np.float32)
    got = _ours(x)
    cr = np.exp(x.astype(np.float64)).astype(np.float32)
    assert (got[got > 0] < np.finfo(np.float32).tiny).any()
    assert ulp_distance(got, cr).max() <= MAX_ULP
    assert np.all(np.diff(got) >= 0)  # monotone across the range


@njit(cache=True)
def _nearest_vs_general(u, mode):
    bad = 0
    away = mode == CAST_ROUND
    for i in range(u.size):
        if f32_bits_to_bf16_nearest(u[i], away) != f32_bits_to_bf16(u[i], mode):
            bad += 1
        if f32_bits_to_fp16_nearest(u[i], away) != f32_bits_to_fp16(u[i], mode):
            bad += 1
    return bad


@pytest.mark.parametrize("mode", [CAST_RINT, CAST_NONE, CAST_ROUND])
def test_branch_free_casts_match_general_ones(mode):
    """The vectorising casts are bit for bit the general ones (checked on all 2^32 inputs when written; sampled
    here): every exponent with random mantissas, and the patterns next to each rounding boundary."""
    rng = np.random.default_rng(mode)
    u = rng.integers(0, 2**32, 4_000_000, dtype=np.uint64).astype(np.uint32)
    exps = np.arange(256, dtype=np.uint32) << 23
    low = np.array([0, 1, 0xFFF, 0x1000, 0x1001, 0x1FFF, 0x2000, 0x7FFF, 0x8000, 0x8001, 0xFFFF, 0x10000,
                    0x17FFF, 0x18000, 0x7FFFFF, 0x7FE000, 0x7FF000], np.uint32)
    edges = (exps[:, None] | low[None, :]).reshape(-1)
    u = np.concatenate([u, edges, edges | np.uint32(0x80000000)])
    assert _nearest_vs_general(u, mode) == 0


@pytest.mark.parametrize("hardware", [False, True], ids=["portable", "hardware"])
def test_fp16_casts_are_exact_with_and_without_hardware_conversion(monkeypatch, hardware):
    """fp16 casts use the host's conversion instructions where it has them (intrinsics.HARDWARE_FP16), the
    portable integer formulas elsewhere; both give the same bits: every half widened, NaN payloads kept, and the
    sample of :func:`test_branch_free_casts_match_general_ones` narrowed under RINT and ROUND, one element at a
    time and in vector blocks. Checked on all 2^32 inputs when written; fresh uncached functions compile each
    path here."""
    if hardware and not intrinsics.HARDWARE_FP16:
        pytest.skip("this host has no fp16 conversion instructions")
    monkeypatch.setattr(intrinsics, "HARDWARE_FP16", hardware)

    @njit
    def widen_all(h, out):
        for i in range(h.size):
            out[i] = intrinsics.fp16_widen_bits(h[i])

    @njit
    def narrow_bad(u, away, mode):
        bad = 0
        for i in range(u.size):
            bad += intrinsics.fp16_nearest_bits(u[i], away) != f32_bits_to_fp16(u[i], mode)
        return bad

    @njit
    def widen_all_blocks(h, out):
        for i in range(0, h.size, intrinsics.BLOCK_LANES):
            intrinsics.fp16_widen_block(out.ctypes.data + 4 * i, h.ctypes.data + 2 * i)

    @njit
    def narrow_blocks_bad(u, away, mode):
        out = np.empty(intrinsics.BLOCK_LANES, np.uint16)
        bad = 0
        for i in range(0, u.size - intrinsics.BLOCK_LANES + 1, intrinsics.BLOCK_LANES):
            intrinsics.fp16_nearest_block(out.ctypes.data, u.ctypes.data + 4 * i, away)
            for k in range(intrinsics.BLOCK_LANES):
                bad += out[k] != f32_bits_to_fp16(u[i + k], mode)
        return bad

    h = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    h32 = h.astype(np.uint32)
    nan_bits = ((h32 & 0x8000) << 16) | 0x7F800000 | ((h32 & 0x3FF) << 13)
    want = np.where((h32 & 0x7C00) == 0x7C00, nan_bits, h.view(np.float16).astype(np.float32).view(np.uint32))
    for widen_with in (widen_all, widen_all_blocks):
        out = np.empty(65536, np.uint32)
        widen_with(h, out)
        np.testing.assert_array_equal(out, want)
    rng = np.random.default_rng(7)
    u = rng.integers(0, 2**32, 2_000_000, dtype=np.uint64).astype(np.uint32)
    exps = np.arange(256, dtype=np.uint32) << 23
    low = np.array([0, 1, 0xFFF, 0x1000, 0x1001, 0x1FFF, 0x2000, 0x7FFFFF, 0x7FE000, 0x7FF000], np.uint32)
    edges = (exps[:, None] | low[None, :]).reshape(-1)
    u = np.concatenate([u, edges, edges | np.uint32(0x80000000)])
    for bad_of in (narrow_bad, narrow_blocks_bad):
        assert bad_of(u, False, CAST_RINT) == 0
        assert bad_of(u, True, CAST_ROUND) == 0
