"""Compare, CompareScalar, Select, Axpy, Gather and Transpose (tilesim.machine) against numpy statements of their
documented A2 semantics: count and level-0 forms, masks and strides, special values (NaN, ±inf, -0, subnormals);
Compare's ignored mask and whole-256 B count, Select's mode-0 mask reuse and the API scratch of modes 1 and 2,
Axpy's rounding (not fused: the module's choice), Gather's byte offsets; checked mode's findings and the types and
modes each API does not take.

Semantics are checked in the checked build, which computes the fast build's bits (every op's checked-mode test
compares the two), so that its operand, bounds and sync checks see each form too and ``pytest --tilesim-checks``
finds these kernels compiled; a test of what the NPU does with a broken kernel runs fast."""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np
import pytest

from tilesim import CheckError
from tilesim.machine import (
    CMPMODE,
    PIPE_V,
    SELMODE,
    VECCALC,
    VECIN,
    VECOUT,
    BinaryRepeatParams,
    HardEvent,
    TBuf,
    TPipe,
    TQue,
    UnaryRepeatParams,
    axpy,
    compare,
    compare_scalar,
    data_copy,
    duplicate,
    gather,
    int16,
    pipe_barrier,
    select,
    set_flag,
    transpose,
    wait_flag,
)
from tilesim.runtime.launcher import KernelError, kernel, launch

SPECIAL = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-40, -1e-40, 65504.0, 3.0, -2.5, 0.5, -0.0, 1e-45],
                   np.float32)
SENTINEL = -23131  # int16 0xA5A5: each byte 0xA5
N = 1024


def _tests(x: np.ndarray, y: np.ndarray) -> list[np.ndarray]:
    """CMPMODE's tests in its order, IEEE 754's (NaN unordered)."""
    with np.errstate(invalid="ignore"):
        return [x < y, x > y, x == y, x <= y, x >= y, x != y]


def _lane(k: int, lo: int, hi: int) -> bool:
    return bool((lo if k < 64 else hi) >> (k % 64) & 1)


def same(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Elementwise: the same bits, or both NaN."""
    with np.errstate(invalid="ignore"):
        nan = np.isnan(got.astype(np.float64)) & np.isnan(want.astype(np.float64))
    return (got.view(f"u{got.itemsize}") == want.view(f"u{want.itemsize}")) | nan


# --- Compare, CompareScalar ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class CmpTiling:
    n: int  # the count of the count forms
    m0: int  # the modes run: [m0, m1)
    m1: int
    s: float  # CompareScalar's scalar
    rows: int  # bytes a row of out


@kernel
def compare_kernel(ctx, t, a, b, out):
    """Rows 2m and 2m + 1 of ``out``: Compare(a, b, m, n) and CompareScalar(a, s, m, n) over a tile of 0xA5 bytes, for
    m in [m0, m1). Rows 12, 13: level-0 Compare (mode m0; a mask that does nothing; 2 repeats, src0 a repeat apart,
    src1's first block for every block) and CompareScalar (mode m0; 2 repeats, contiguous)."""
    pipe = TPipe(ctx)
    qi = pipe.init_buffer(TQue(VECIN, 1), 2, N * 4)
    qo = pipe.init_buffer(TQue(VECOUT, 1), 1, t.rows)
    x = qi.alloc_tensor(a.dtype)
    data_copy(x, a, N)
    qi.enque(x)
    x = qi.deque(a.dtype)
    y = qi.alloc_tensor(a.dtype)
    data_copy(y, b, N)
    qi.enque(y)
    y = qi.deque(a.dtype)
    for row in range(14):
        m = row // 2
        if row >= 12 or (t.m0 <= m and m < t.m1):
            o = qo.alloc_tensor(out.dtype)
            duplicate(o.reinterpret_cast(int16), SENTINEL, t.rows // 2)
            pipe_barrier(ctx, PIPE_V)
            if row == 12:
                compare(o, x, y, t.m0, (1, 0), 2, BinaryRepeatParams(1, 1, 0, 8, 16, 0))
            elif row == 13:
                compare_scalar(o, x, t.s, t.m0, 5, 2, UnaryRepeatParams(1, 1, 8, 8))
            elif row % 2:
                compare_scalar(o, x, t.s, m, t.n)
            else:
                compare(o, x, y, m, t.n)
            qo.enque(o)
            o = qo.deque(out.dtype)
            data_copy(out[row * t.rows], o, t.rows)
            qo.free_tensor(o)
    qi.free_tensor(x)
    qi.free_tensor(y)


def run_compare(x: np.ndarray, y: np.ndarray, n: int, m0: int, m1: int, s: float, checks: bool = True):
    rows = N // 8  # a bit per element
    out = np.zeros(14 * rows, np.uint8)
    rep = launch(compare_kernel, CmpTiling(n, int(m0), int(m1), s, rows), x, y, out, block_dim=1, checks=checks)
    return out.reshape(14, rows), rep


def _cmp_inputs(dtype: type, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    x = rng.uniform(-3, 3, N).astype(np.float32)
    y = x.copy()
    y[::3] += 1
    y[1::3] -= 1
    x[:SPECIAL.size], y[:SPECIAL.size] = SPECIAL, SPECIAL[::-1]
    x[50:60] = y[50:60] = np.float32(np.nan)
    x[60], y[60] = -0.0, 0.0
    return x.astype(dtype), y.astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_compare_and_compare_scalar(dtype: type) -> None:
    rng = np.random.default_rng(1)
    x, y = _cmp_inputs(dtype, rng)
    s = 0.3
    x[70] = dtype(s)
    got, rep = run_compare(x, y, N, 0, 6, s)
    xf, yf = x.astype(np.float64), y.astype(np.float64)
    sf = np.float64(dtype(s))  # the scalar has src's type
    for m, (want, want_s) in enumerate(zip(_tests(xf, yf), _tests(xf, sf), strict=True)):
        np.testing.assert_array_equal(got[2 * m], np.packbits(want, bitorder="little"), err_msg=f"Compare {m}")
        np.testing.assert_array_equal(got[2 * m + 1], np.packbits(want_s, bitorder="little"),
                                      err_msg=f"CompareScalar {m}")
    # level-0: the mask (1, 0) does nothing on A2; src0 repeat r at 16 r blocks, src1 always its first block
    per, epb = 256 // x.itemsize, 32 // x.itemsize
    k = np.arange(per)
    xi = np.concatenate([r * 16 * epb + k for r in range(2)])
    yi = np.concatenate([k % epb for _ in range(2)])
    np.testing.assert_array_equal(got[12][:2 * per // 8], np.packbits(xf[xi] < yf[yi], bitorder="little"))
    assert (got[12][2 * per // 8:] == 0xA5).all(), "two repeats' bits, no more"
    np.testing.assert_array_equal(got[13][:2 * per // 8], np.packbits(xf[:2 * per] < sf, bitorder="little"))
    assert rep.total("vec_binary") == 6 * N * x.itemsize // 256 + 2
    assert rep.total("vec_scalar") == 6 * N * x.itemsize // 256 + 2


def test_compare_int32_takes_eq_only() -> None:
    rng = np.random.default_rng(2)
    x = rng.integers(-5, 5, N).astype(np.int32)
    y = rng.integers(-5, 5, N).astype(np.int32)
    x[0], y[0] = np.iinfo(np.int32).min, np.iinfo(np.int32).min
    got, _ = run_compare(x, y, N, CMPMODE.EQ, CMPMODE.EQ + 1, 3.0)
    np.testing.assert_array_equal(got[4], np.packbits(x == y, bitorder="little"))
    np.testing.assert_array_equal(got[5], np.packbits(x == 3, bitorder="little"))
    with pytest.raises(KernelError, match="Compare on int32_t and uint8_t with LT: not in the A2 API's table"):
        run_compare(x, y, N, CMPMODE.LT, CMPMODE.LT + 1, 3.0)


def test_compare_count_covers_whole_repeats_only(tilesim_checks: bool) -> None:
    """1000 floats are 15 whole repeats (960 elements) and 160 B more: A2 compares the 960 and leaves the rest of
    dst as it was; checked mode reports the count (Compare.md: count * sizeof(T) must be a multiple of 256 B)."""
    x, y = _cmp_inputs(np.float32, np.random.default_rng(3))
    if not tilesim_checks:
        got, _ = run_compare(x, y, 1000, CMPMODE.GT, CMPMODE.GT + 1, 0.0, checks=False)
        np.testing.assert_array_equal(got[2][:120], np.packbits(x[:960] > y[:960], bitorder="little"))
        assert (got[2][120:] == 0xA5).all()
    with pytest.raises(CheckError, match="API rule broken: Compare of 4000 B of source: count \\* sizeof\\(T\\) must "
                                         "be a multiple of 256 B"):
        run_compare(x, y, 1000, CMPMODE.GT, CMPMODE.GT + 1, 0.0, checks=True)


# --- Select ----------------------------------------------------------------------------------------------------

NS = 512  # Select's elements (a 64-byte selMask)
LO, HI = 0x70F0F0F0F0F0F0F1, 0x4000000000000003


@dataclass(frozen=True)
class SelTiling:
    s: float  # mode 1's scalar
    lo: int
    hi: int
    mode: int  # the mode of row 6 (a mismatch stops the kernel)


@kernel
def select_kernel(ctx, t, a, b, sel, out):
    """Rows of ``out`` (each over a tile of -7): 0-2 the count forms of modes 0, 1 (scalar s), 2; 3 level-0 mode 2
    (mask lo / hi, 2 repeats, src1's first block for every block); 4 level-0 mode 0 (mask 50, 3 repeats); 5 level-0
    mode 1 (2 full repeats); 6 the count form with a tensor src1 and mode t.mode."""
    pipe = TPipe(ctx)
    qi = pipe.init_buffer(TQue(VECIN, 1), 3, NS * 4)
    qo = pipe.init_buffer(TQue(VECOUT, 1), 1, NS * 4)
    x = qi.alloc_tensor(a.dtype)
    data_copy(x, a, NS)
    qi.enque(x)
    x = qi.deque(a.dtype)
    y = qi.alloc_tensor(a.dtype)
    data_copy(y, b, NS)
    qi.enque(y)
    y = qi.deque(a.dtype)
    m = qi.alloc_tensor(sel.dtype)
    data_copy(m, sel, sel.get_size())
    qi.enque(m)
    m = qi.deque(sel.dtype)
    for row in range(7):
        o = qo.alloc_tensor(a.dtype)
        duplicate(o, -7.0, NS)
        pipe_barrier(ctx, PIPE_V)
        if row == 0:
            select(o, m, x, y, SELMODE.VSEL_CMPMASK_SPR, NS)
        elif row == 1:
            select(o, m, x, t.s, SELMODE.VSEL_TENSOR_SCALAR_MODE, NS)
        elif row == 2:
            select(o, m, x, y, SELMODE.VSEL_TENSOR_TENSOR_MODE, NS)
        elif row == 3:
            select(o, m, x, y, SELMODE.VSEL_TENSOR_TENSOR_MODE, (t.lo, t.hi), 2, BinaryRepeatParams(1, 1, 0, 8, 8, 0))
        elif row == 4:
            select(o, m, x, y, SELMODE.VSEL_CMPMASK_SPR, 50, 3, BinaryRepeatParams(1, 1, 1, 8, 8, 8))
        elif row == 5:
            select(o, m, x, t.s, SELMODE.VSEL_TENSOR_SCALAR_MODE, 256, 2, BinaryRepeatParams(1, 1, 1, 8, 8, 8))
        else:
            select(o, m, x, y, t.mode, NS)
        qo.enque(o)
        o = qo.deque(a.dtype)
        data_copy(out[row * NS], o, NS)
        qo.free_tensor(o)
    qi.free_tensor(x)
    qi.free_tensor(y)
    qi.free_tensor(m)


@pytest.mark.parametrize("dtype,mask_dtype", [(np.float32, np.uint8), (np.float16, np.uint16),
                                              (np.float32, np.uint32)])
def test_select_modes(dtype: type, mask_dtype: type) -> None:
    rng = np.random.default_rng(4)
    a = rng.uniform(-3, 3, NS).astype(np.float32)
    b = rng.uniform(10, 20, NS).astype(np.float32)
    a[:SPECIAL.size], b[:SPECIAL.size] = SPECIAL, SPECIAL[::-1]
    a, b = a.astype(dtype), b.astype(dtype)
    bits_u8 = rng.integers(0, 256, NS // 8, dtype=np.uint8)
    sel = bits_u8.view(mask_dtype)
    s = 1.25
    out = np.zeros(7 * NS, dtype)
    launch(select_kernel, SelTiling(s, LO, HI, int(SELMODE.VSEL_TENSOR_TENSOR_MODE)), a, b, sel, out, block_dim=1,
           checks=True)
    got = out.reshape(7, NS)
    bits = np.unpackbits(bits_u8, bitorder="little").astype(bool)  # bit i of the mask's bytes, LSB first
    per, epb = 256 // a.itemsize, 32 // a.itemsize
    i = np.arange(NS)

    def same(g: np.ndarray, w: np.ndarray, what: str) -> None:
        np.testing.assert_array_equal(g.view(f"u{a.itemsize}"), w.astype(dtype).view(f"u{a.itemsize}"), err_msg=what)

    same(got[0], np.where(bits[i % per], a, b), "mode 0 reuses the first 256 / sizeof(T) bits for every repeat")
    same(got[1], np.where(bits, a, dtype(s)), "mode 1")
    same(got[2], np.where(bits, a, b), "mode 2")
    want = np.full(NS, -7.0, dtype)
    for r in range(2):
        for k in range(per):
            if _lane(k, LO, HI):
                want[r * per + k] = a[r * per + k] if bits[r * per + k] else b[k % epb]
    same(got[3], want, "level-0 mode 2: masked lanes keep dst")
    want = np.full(NS, -7.0, dtype)
    for r in range(3):
        for k in range(50):
            want[r * per + k] = a[r * per + k] if bits[k] else b[r * per + k]
    same(got[4], want, "level-0 mode 0")
    want = np.full(NS, -7.0, dtype)
    want[:2 * per] = np.where(bits[:2 * per], a[:2 * per], dtype(s))
    same(got[5], want, "level-0 mode 1")


def test_select_mode_and_src1_must_agree() -> None:
    a = np.zeros(NS, np.float32)
    with pytest.raises(KernelError, match="Select on float and uint8_t with VSEL_TENSOR_SCALAR_MODE: not in the A2"):
        launch(select_kernel, SelTiling(0.0, LO, HI, int(SELMODE.VSEL_TENSOR_SCALAR_MODE)), a, a,
               np.zeros(NS // 8, np.uint8), np.zeros(7 * NS, np.float32), block_dim=1)


@dataclass(frozen=True)
class FillTiling:
    fill: int  # bytes of the TBuf that takes the UB up to its end
    at: int  # the element of that TBuf at the top 8 KiB


@kernel
def select_scratch(ctx, t, a, sel, out):
    """Select mode 1 with a plan whose last TBuf (zeros) reaches the top of UB; ``out`` gets the TBuf's first 256 B
    of the top 8 KiB after the Select."""
    pipe = TPipe(ctx)
    qi = pipe.init_buffer(TQue(VECIN, 1), 2, NS * 4)
    qo = pipe.init_buffer(TQue(VECOUT, 1), 1, NS * 4)
    top = pipe.init_buffer(TBuf(VECCALC), t.fill)
    z = top.get(a.dtype)
    duplicate(z, 0.0, t.fill // 4)
    x = qi.alloc_tensor(a.dtype)
    data_copy(x, a, NS)
    qi.enque(x)
    x = qi.deque(a.dtype)
    m = qi.alloc_tensor(sel.dtype)
    data_copy(m, sel, sel.get_size())
    qi.enque(m)
    m = qi.deque(sel.dtype)
    o = qo.alloc_tensor(a.dtype)
    pipe_barrier(ctx, PIPE_V)
    select(o, m, x, 2.5, SELMODE.VSEL_TENSOR_SCALAR_MODE, NS)
    set_flag(ctx, HardEvent.V_MTE3, 0)
    wait_flag(ctx, HardEvent.V_MTE3, 0)
    data_copy(out, z[t.at], 64)
    qo.free_tensor(o)
    qi.free_tensor(x)
    qi.free_tensor(m)


def test_select_modes_1_and_2_write_the_top_8_kib(tilesim_checks: bool) -> None:
    """Select.md: modes 1 and 2 need 8 KiB of UB kept free at the top (the scratch at TMP_UB_OFFSET): a plan that
    fills the UB has its last buffer clobbered, and checked mode says so."""
    used = 3 * NS * 4
    t = FillTiling(196608 - used, (196608 - 8192 - used) // 4)
    a = np.ones(NS, np.float32)
    sel = np.zeros(NS // 8, np.uint8)
    out = np.zeros(64, np.float32)
    if not tilesim_checks:
        launch(select_scratch, t, a, sel, out, block_dim=1)
        want = np.zeros(64, np.float32)
        want[:32] = 2.5  # the impl's Duplicate of the scalar: 32 elements
        np.testing.assert_array_equal(out, want)
    with pytest.raises(CheckError, match="API rule broken: Select \\(modes 1 and 2\\) writes its 128 B of scratch at "
                                         "the top 8 KiB of UB"):
        launch(select_scratch, t, a, sel, out, block_dim=1, checks=True)


# --- Axpy ------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class AxpyTiling:
    n: int
    s: float
    lo: int
    hi: int
    src_rep: int
    dst_rep: int
    overlap: int  # 1: the count form with src the upper half of dst's own buffer (half src, float dst only)


@kernel
def axpy_kernel(ctx, t, a, d, out):
    """Row 0: d + s * a by the count form; row 1: d with the level-0 form over it (mask lo / hi, 2 repeats, repeat
    strides src_rep / dst_rep)."""
    pipe = TPipe(ctx)
    qi = pipe.init_buffer(TQue(VECIN, 1), 1, t.n * 4)
    qd = pipe.init_buffer(TQue(VECIN, 1), 2, t.n * 4)
    x = qi.alloc_tensor(a.dtype)
    data_copy(x, a, t.n)
    qi.enque(x)
    x = qi.deque(a.dtype)
    for row in range(2):
        z = qd.alloc_tensor(d.dtype)
        data_copy(z, d, t.n)
        qd.enque(z)
        z = qd.deque(d.dtype)
        if row == 0 and t.overlap:
            axpy(z, z.reinterpret_cast(a.dtype)[t.n // 2], t.s, t.n // 2)
        elif row == 0:
            axpy(z, x, t.s, t.n)
        else:
            axpy(z, x, t.s, (t.lo, t.hi), 2, UnaryRepeatParams(1, 1, t.dst_rep, t.src_rep))
        set_flag(ctx, HardEvent.V_MTE3, 0)
        wait_flag(ctx, HardEvent.V_MTE3, 0)
        data_copy(out[row * t.n], z, t.n)
        qd.free_tensor(z)
    qi.free_tensor(x)


def axpy_want(s: float, a: np.ndarray, d: np.ndarray) -> np.ndarray:
    """s * a + d, not fused: the product rounded to dst's type, then the sum (each exact in float64 first)."""
    dt = d.dtype.type
    sa = np.float64(a.dtype.type(s))  # the scalar has src's type
    with np.errstate(over="ignore", invalid="ignore"):
        p = (sa * a.astype(np.float64)).astype(dt)
        return (p.astype(np.float64) + d.astype(np.float64)).astype(dt)


@pytest.mark.parametrize("dst,src", [(np.float16, np.float16), (np.float32, np.float32), (np.float32, np.float16)])
def test_axpy(dst: type, src: type) -> None:
    n = 512
    rng = np.random.default_rng(5)
    a = rng.uniform(-4, 4, n).astype(np.float32)
    d = rng.uniform(-4, 4, n).astype(np.float32)
    a[:SPECIAL.size], d[:SPECIAL.size] = SPECIAL, SPECIAL[::-1]
    a, d = a.astype(src), d.astype(dst)
    s = 1.0 + 2.0 ** -12
    # not fused: (1 + 2^-12)^2 = 1 + 2^-11 + 2^-24 rounds to 1 + 2^-11 in fp32, so the sum is 0 (fused: 2^-24)
    a[20], d[20] = src(1.0 + 2.0 ** -12), dst(-(1.0 + 2.0 ** -11))
    dsz, ssz = np.dtype(dst).itemsize, np.dtype(src).itemsize
    per = 256 // max(dsz, ssz)
    out = np.zeros(2 * n, dst)
    rep = launch(axpy_kernel, AxpyTiling(n, s, LO, HI, per * ssz // 32, per * dsz // 32 + 1, 0), a, d, out,
                 block_dim=1, checks=True)
    got = out.reshape(2, n)
    want = axpy_want(s, a, d)
    assert same(got[0], want).all()
    if dst == np.float32 and src == np.float32:
        assert got[0][20] == 0.0
    want1 = d.copy()
    for r in range(2):
        for k in range(per):
            if _lane(k, LO, HI):
                di = r * (per + 32 // dsz) + k
                want1[di] = axpy_want(s, a[r * per + k:r * per + k + 1], d[di:di + 1])[0]
    assert same(got[1], want1).all()
    assert rep.total("vec_scalar") == n * max(dsz, ssz) // 256 + 2


def test_axpy_half_to_float_must_not_overlap() -> None:
    """Axpy.md: with half src and float dst, src and dst must not overlap."""
    a = np.ones(512, np.float16)
    with pytest.raises(CheckError, match="API rule broken: Axpy's destination overlaps a source it reads"):
        launch(axpy_kernel, AxpyTiling(512, 1.0, LO, HI, 4, 8, 1), a, np.ones(512, np.float32),
               np.zeros(1024, np.float32), block_dim=1, checks=True)


def test_axpy_types() -> None:
    a = np.ones(512, np.float32)
    with pytest.raises(KernelError, match="Axpy on float and half: not in the A2 API's table"):
        launch(axpy_kernel, AxpyTiling(512, 1.0, LO, HI, 8, 8, 0), a, np.ones(512, np.float16),
               np.zeros(1024, np.float16), block_dim=1)


# --- Gather ----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class GatherTiling:
    n: int  # the count form's count
    base: int  # srcBaseAddr, bytes
    lo: int
    hi: int
    drep: int  # the level-0 form's dst repeat stride


NG = 512


@kernel
def gather_kernel(ctx, t, a, offs, init, out):
    """Row 0: ``init`` with Gather(a, offs, base, n) over it; row 1: ``init`` with the level-0 Gather (mask lo / hi,
    2 repeats, dst repeats drep blocks apart) over it."""
    pipe = TPipe(ctx)
    qi = pipe.init_buffer(TQue(VECIN, 1), 2, NG * 4)
    qd = pipe.init_buffer(TQue(VECIN, 1), 2, NG * 4)
    x = qi.alloc_tensor(a.dtype)
    data_copy(x, a, NG)
    qi.enque(x)
    x = qi.deque(a.dtype)
    o = qi.alloc_tensor(offs.dtype)
    data_copy(o, offs, NG)
    qi.enque(o)
    o = qi.deque(offs.dtype)
    for row in range(2):
        z = qd.alloc_tensor(init.dtype)
        data_copy(z, init, NG)
        qd.enque(z)
        z = qd.deque(init.dtype)
        if row == 0:
            gather(z, x, o, t.base, t.n)
        else:
            gather(z, x, o, t.base, (t.lo, t.hi), 2, t.drep)
        set_flag(ctx, HardEvent.V_MTE3, 0)
        wait_flag(ctx, HardEvent.V_MTE3, 0)
        data_copy(out[row * NG], z, NG)
        qd.free_tensor(z)
    qi.free_tensor(x)
    qi.free_tensor(o)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int16, ml_dtypes.bfloat16])
def test_gather(dtype: type) -> None:
    rng = np.random.default_rng(6)
    sz = np.dtype(dtype).itemsize
    a = rng.uniform(-100, 100, NG).astype(np.float32)
    a[:SPECIAL.size] = SPECIAL
    with np.errstate(invalid="ignore"):  # NaN and inf to int16: any bits will do
        a = a.astype(dtype)
    base = 64
    idx = rng.integers(0, NG - base // sz, NG)
    offs = (idx * sz).astype(np.uint32)
    offs[5] += 1  # not element-aligned: the element it falls in
    init = np.full(NG, 9, dtype)
    per = 256 // sz
    n = 2 * per + 40 if sz == 2 else 3 * per + 8  # whole repeats and a rest
    out = np.zeros(2 * NG, dtype)
    launch(gather_kernel, GatherTiling(n, base, LO, HI, 16), a, offs, init, out, block_dim=1, checks=True)
    got = out.reshape(2, NG).view(f"u{sz}")
    src = a.view(f"u{sz}")
    want = init.view(f"u{sz}").copy()
    want[:n] = src[(base + offs[:n].astype(np.int64)) // sz]
    np.testing.assert_array_equal(got[0], want)
    want = init.view(f"u{sz}").copy()
    for r in range(2):
        for k in range(per):
            if _lane(k, LO, HI):
                want[r * 16 * 32 // sz + k] = src[(base + int(offs[r * per + k])) // sz]
    np.testing.assert_array_equal(got[1], want)


def test_gather_offset_out_of_the_source_is_a_finding() -> None:
    a = np.ones(NG, np.float32)
    offs = np.zeros(NG, np.uint32)
    offs[7] = NG * 4  # one element past the src buffer (its slot of NG floats)
    with pytest.raises(CheckError, match="UB out of bounds: the access leaves the LocalTensor"):
        launch(gather_kernel, GatherTiling(64, 0, LO, HI, 8), a, offs, a, np.zeros(2 * NG, np.float32),
               block_dim=1, checks=True)


# --- Transpose -------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Empty:
    n: int = 0


@kernel
def transpose_kernel(ctx, t, a, out):
    """Row 0: Transpose(a) into another tensor; row 1: Transpose in place."""
    pipe = TPipe(ctx)
    qi = pipe.init_buffer(TQue(VECIN, 1), 1, 512)
    qo = pipe.init_buffer(TQue(VECOUT, 1), 1, 512)
    x = qi.alloc_tensor(a.dtype)
    data_copy(x, a, 256)
    qi.enque(x)
    x = qi.deque(a.dtype)
    o = qo.alloc_tensor(a.dtype)
    transpose(o, x)
    qo.enque(o)
    o = qo.deque(a.dtype)
    data_copy(out, o, 256)
    qo.free_tensor(o)
    pipe_barrier(ctx, PIPE_V)
    transpose(x, x)
    set_flag(ctx, HardEvent.V_MTE3, 0)
    wait_flag(ctx, HardEvent.V_MTE3, 0)
    data_copy(out[256], x, 256)
    qi.free_tensor(x)


@pytest.mark.parametrize("dtype", [np.float16, np.int16, np.uint16])
def test_transpose(dtype: type) -> None:
    a = np.arange(256).astype(dtype)
    if dtype == np.float16:
        a[:SPECIAL.size] = SPECIAL.astype(np.float16)
    out = np.zeros(512, dtype)
    rep = launch(transpose_kernel, Empty(), a, out, block_dim=1, checks=True)
    want = a.reshape(16, 16).T.reshape(-1).view(np.uint16)
    np.testing.assert_array_equal(out[:256].view(np.uint16), want)
    np.testing.assert_array_equal(out[256:].view(np.uint16), want)
    assert rep.total("vec_unary") == 4


def test_transpose_types() -> None:
    with pytest.raises(KernelError, match="Transpose on float: the A2 API does not take this element type"):
        launch(transpose_kernel, Empty(), np.zeros(256, np.float32), np.zeros(512, np.float32), block_dim=1)
