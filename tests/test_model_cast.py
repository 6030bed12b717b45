"""Cast (tilesim.machine.cast) on every A2 pair of Cast.md's table and every RoundMode the pair admits, count form
and level-0, against an exact statement of the documented rounding: each source value as an exact rational
(Python's Fraction), rounded to the target by the mode's rule (precision_conversion.md), saturated or overflowed
as the module states. NaN, ±inf, -0, subnormals, ties, overflow and the integer ranges' edges included. A mode a
pair does not admit and a pair the table lacks stop the kernel.

Semantics are checked in the checked build, which computes the fast build's bits (every op's checked-mode test
compares the two), so that its operand, bounds and sync checks see each form too and ``pytest --tilesim-checks``
finds these kernels compiled; a test of what the NPU does with a broken kernel runs fast."""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from tilesim.machine import (
    CAST_CEIL,
    CAST_FLOOR,
    CAST_NONE,
    CAST_ODD,
    CAST_RINT,
    CAST_ROUND,
    CAST_TRUNC,
    MASK_PLACEHOLDER,
    VECIN,
    VECOUT,
    HardEvent,
    TPipe,
    TQue,
    UnaryRepeatParams,
    cast,
    data_copy,
    set_flag,
    set_mask_count,
    set_mask_norm,
    set_vector_mask,
    wait_flag,
)
from tilesim.runtime.launcher import KernelError, kernel, launch

N = 1024
R = (CAST_RINT, CAST_FLOOR, CAST_CEIL, CAST_ROUND, CAST_TRUNC)
# Cast.md, "Atlas A2 训练系列产品/Atlas A2 推理系列产品支持的数据类型组合情况" (int4b_t left out: no such numpy type;
# int32_t -> half: SetDeqScale, tested as not emulated)
A2_TABLE = {
    ("int8", "float16"): (CAST_NONE,), ("uint8", "float16"): (CAST_NONE,),
    ("int16", "float16"): (*R, CAST_NONE), ("int16", "float32"): (CAST_NONE,),
    ("float16", "int8"): (*R, CAST_NONE), ("float16", "uint8"): (*R, CAST_NONE), ("float16", "int16"): R,
    ("float16", "int32"): R, ("float16", "float32"): (CAST_NONE,),
    ("bfloat16", "int32"): R, ("bfloat16", "float32"): (CAST_NONE,),
    ("int32", "int16"): (CAST_NONE,), ("int32", "float32"): (*R, CAST_NONE), ("int32", "int64"): (CAST_NONE,),
    ("float32", "int16"): R, ("float32", "float16"): (*R, CAST_ODD, CAST_NONE), ("float32", "bfloat16"): R,
    ("float32", "int32"): R, ("float32", "float32"): R, ("float32", "int64"): R,
    ("int64", "int32"): (CAST_NONE,), ("int64", "float32"): R,
}
FLOATS = {"float16": (11, -14, 15), "bfloat16": (8, -126, 127), "float32": (24, -126, 127)}  # p, emin, emax


def np_type(name: str) -> np.dtype:
    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


# --- the documented semantics ------------------------------------------------------------------------------------

def round_int(q: Fraction, mode: int) -> int:
    """The integer ``q`` rounds to by RoundMode ``mode`` (precision_conversion.md's table 1)."""
    fl = math.floor(q)
    rem = q - fl
    if mode == CAST_FLOOR:
        return fl
    if mode == CAST_CEIL:
        return fl + (rem != 0)
    if mode == CAST_TRUNC:
        return math.trunc(q)
    if mode == CAST_ROUND:  # ties away from zero
        return math.floor(q + Fraction(1, 2)) if q >= 0 else -math.floor(-q + Fraction(1, 2))
    if mode == CAST_ODD:  # inexact: the odd neighbour
        return fl if rem == 0 or fl % 2 else fl + 1
    return fl + (rem > Fraction(1, 2) or (rem == Fraction(1, 2) and fl % 2 == 1))  # RINT, NONE


def to_float(v: Fraction, neg: bool, mode: int, fmt: str) -> float:
    """``v`` (its sign ``neg`` for a zero) rounded to format ``fmt`` by ``mode``; past the largest finite value,
    IEEE 754's overflow per direction (inf where the mode rounds away from zero, else the largest finite)."""
    p, emin, emax = FLOATS[fmt]
    if v == 0:
        return -0.0 if neg else 0.0
    a = abs(v)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    ulp = Fraction(2) ** (max(e, emin) - p + 1)
    n = round_int(v / ulp, mode)
    r = n * ulp
    top = Fraction(2) ** (emax + 1)
    if abs(r) >= top:
        biggest = float(top - Fraction(2) ** (emax - p + 1))
        up = {CAST_FLOOR: v < 0, CAST_CEIL: v > 0, CAST_TRUNC: False, CAST_ODD: False}.get(mode, True)
        r = math.inf if up else biggest
        return -r if v < 0 else r
    return -0.0 if r == 0 and v < 0 else float(r)


def expected(x: np.ndarray, dst: str, mode: int) -> np.ndarray:
    """What Cast gives for each element of ``x``."""
    out = []
    info = np.iinfo(dst) if dst not in FLOATS else None
    with np.errstate(invalid="ignore"):
        values = (x.astype(np.float64) if x.dtype.kind == "f" or x.dtype == np_type("bfloat16") else x).tolist()
    for v in values:
        if isinstance(v, float) and math.isnan(v):
            out.append(0 if info else math.nan)  # NaN to an integer: 0 (the module's choice)
        elif isinstance(v, float) and math.isinf(v):
            out.append((info.max if v > 0 else info.min) if info else v)
        elif info is not None:  # to an integer: rounded, then saturated to the range
            n = round_int(Fraction(v), mode) if isinstance(v, float) else v
            out.append(min(max(n, info.min), info.max))
        elif dst == "float32" and x.dtype == np.float32:  # float to float: rounded to an integer, sign kept
            n = round_int(Fraction(v), mode)
            out.append(math.copysign(float(n), v))
        else:
            out.append(to_float(Fraction(v), math.copysign(1.0, v) < 0 if isinstance(v, float) else False, mode,
                                dst))
    return np.array(out, dtype=np.float64 if info is None else np.int64).astype(np_type(dst))


def inputs(src: str, rng: np.random.Generator) -> np.ndarray:
    """N values of ``src``: the special ones, the ranges' edges, ties, then random values of every magnitude."""
    if src in ("int8", "uint8", "int16", "int32", "int64"):
        info = np.iinfo(src)
        edge = [info.min, info.min + 1, -1, 0, 1, info.max - 1, info.max, 2 ** 11 + 1, 2 ** 12 + 2, 2 ** 12 + 6,
                2 ** 24 + 1, 2 ** 25 + 3, 2 ** 25 + 2, 2 ** 35 + 2 ** 12 + 2 ** 11, 2 ** 53 + 1, -(2 ** 40) - 3,
                2 ** 31, 2 ** 31 + 1, -(2 ** 31) - 1, 2 ** 15, -(2 ** 15) - 1]
        edge = [e for e in edge if info.min <= e <= info.max]
        rand = rng.integers(info.min, info.max, N, dtype=src, endpoint=True)
        return np.concatenate([np.array(edge, src), rand])[:N]
    special = [math.nan, -math.nan, math.inf, -math.inf, 0.0, -0.0, 0.5, -0.5, 1.5, 2.5, -1.5, -2.5, 0.4, -0.4, 0.6,
               -0.6, 1.0, -1.0, 127.5, 128.0, -128.5, -129.0, 255.5, 256.0, -0.7, 32767.5, -32768.5, 2.0 ** 31,
               -(2.0 ** 31), 2.0 ** 31 - 128, 3e9, -3e9, 2.0 ** 63, -(2.0 ** 63), 1e19, -1e19, 65504.0, 65519.0,
               65520.0, 65536.0, -65520.0, 1e5, 6e-8, 3e-8, 2.0 ** -25, 2.0 ** -24, 1.5 * 2.0 ** -24, 1e-40, -1e-40,
               1e-45, 2.0 ** 22 + 0.5, 2.0 ** 23 + 1, 0.5 + 2.0 ** -12, 0.5 + 2.0 ** -9 + 2.0 ** -11, 3.4e38]
    if src == "float32":
        rand = [rng.uniform(-300, 300, 200), rng.uniform(-1e5, 1e5, 100), rng.integers(-40, 40, 100) + 0.5,
                np.exp(rng.uniform(-103, 88, 200)) * rng.choice([-1, 1], 200),
                rng.integers(0, 2 ** 32, N, dtype=np.uint32).view(np.float32)]
        return np.concatenate([np.array(special, np.float32), *[np.asarray(r).astype(np.float32) for r in rand]])[:N]
    bits = rng.integers(0, 2 ** 16, N, dtype=np.uint16).view(np_type(src))
    with np.errstate(over="ignore"):
        return np.concatenate([np.array(special, np.float64).astype(np_type(src)), bits])[:N]


# --- the kernel ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class CastTiling:
    n: int
    src_bytes: int
    dst_bytes: int
    modes: int  # a bit per RoundMode: the count-form casts to do
    mode0: int  # the level-0 cast's mode
    lo: int  # its mask
    hi: int
    src_rep: int  # its repeat strides, in 32 B blocks
    dst_rep: int


@kernel
def cast_kernel(ctx, t, a, init, out):
    """Row m of ``out`` (m < 7): Cast(a) with RoundMode m, count form, for the modes in t.modes. Row 7: ``init``
    with a level-0 Cast of two repeats (t.mode0, mask t.lo / t.hi, repeat strides t.src_rep / t.dst_rep) over it."""
    pipe = TPipe(ctx)
    qi = pipe.init_buffer(TQue(VECIN, 1), 1, t.src_bytes)
    qz = pipe.init_buffer(TQue(VECIN, 1), 1, t.dst_bytes)
    qo = pipe.init_buffer(TQue(VECOUT, 1), 1, t.dst_bytes)
    x = qi.alloc_tensor(a.dtype)
    data_copy(x, a, t.n)
    qi.enque(x)
    x = qi.deque(a.dtype)
    for m in range(7):
        if (t.modes >> m) & 1:
            y = qo.alloc_tensor(out.dtype)
            cast(y, x, m, t.n)
            qo.enque(y)
            y = qo.deque(out.dtype)
            data_copy(out[m * t.n], y, t.n)
            qo.free_tensor(y)
    z = qz.alloc_tensor(out.dtype)
    data_copy(z, init, t.n)
    qz.enque(z)
    z = qz.deque(out.dtype)
    cast(z, x, t.mode0, (t.lo, t.hi), 2, UnaryRepeatParams(1, 1, t.dst_rep, t.src_rep))
    set_flag(ctx, HardEvent.V_MTE3, 0)
    wait_flag(ctx, HardEvent.V_MTE3, 0)
    data_copy(out[7 * t.n], z, t.n)
    qz.free_tensor(z)
    qi.free_tensor(x)


LO, HI = 0x70F0F0F0F0F0F0F1, 0x4000000000000003  # the level-0 mask: lanes 0, 4-7, 12-15, ..., 64, 65, 126


def run_cast(src: str, dst: str, x: np.ndarray, modes: tuple[int, ...], mode0: int, init: np.ndarray,
             gap: int = 1) -> tuple[np.ndarray, object]:
    ssz, dsz = np_type(src).itemsize, np_type(dst).itemsize
    per = 256 // max(ssz, dsz)
    t = CastTiling(N, N * ssz, N * dsz, sum(1 << m for m in modes), mode0, LO, HI, per * ssz // 32,
                   per * dsz // 32 + gap)
    out = np.zeros(8 * N, np_type(dst))
    rep = launch(cast_kernel, t, x, init, out, block_dim=1, checks=True)
    return out.reshape(8, N), rep


def same(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Elementwise: the same bits, or both NaN."""
    if got.dtype.kind == "f" or got.dtype == np_type("bfloat16"):
        with np.errstate(invalid="ignore"):
            g, w = got.astype(np.float64), want.astype(np.float64)
        bits = got.view(f"u{got.itemsize}") == want.view(f"u{want.itemsize}")
        return bits | (np.isnan(g) & np.isnan(w))
    return got == want


@pytest.mark.parametrize("src,dst", list(A2_TABLE), ids=[f"{s}-{d}" for s, d in A2_TABLE])
def test_every_pair_and_mode(src: str, dst: str) -> None:
    rng = np.random.default_rng(abs(hash((src, dst))) % 2 ** 32)
    x = inputs(src, rng)
    modes = A2_TABLE[(src, dst)]
    init = rng.integers(0, 100, N).astype(np_type(dst))
    got, rep = run_cast(src, dst, x, modes, modes[0], init)
    for m in modes:
        want = expected(x, dst, m)
        ok = same(got[m], want)
        bad = np.flatnonzero(~ok)[:8]
        assert ok.all(), f"mode {m}: {[(x[i], got[m][i], want[i]) for i in bad]}"
    # level-0: two repeats of the wider type's lanes, the mask's lanes only, dst repeats a block apart
    ssz, dsz = x.itemsize, np_type(dst).itemsize
    per = 256 // max(ssz, dsz)
    want = init.copy()
    conv = expected(x, dst, modes[0])
    for r in range(2):
        for k in range(per):
            if (LO if k < 64 else HI) >> (k % 64) & 1:
                want[r * (per + 32 // dsz) + k] = conv[r * per + k]
    assert same(got[7], want).all()
    assert rep.total("vec_cast") == len(modes) * (N * max(ssz, dsz) // 256) + 2


@pytest.mark.parametrize("src,dst,mode", [("float32", "bfloat16", CAST_NONE), ("float32", "bfloat16", CAST_ODD),
                                          ("float16", "float32", CAST_RINT), ("float32", "int32", CAST_NONE),
                                          ("int8", "float16", CAST_FLOOR)])
def test_a_mode_the_pair_does_not_admit_stops_the_kernel(src: str, dst: str, mode: int) -> None:
    x = np.zeros(N, np_type(src))
    with pytest.raises(KernelError, match="Cast on .* with CAST_.*: not in the A2 API's table"):
        run_cast(src, dst, x, (mode,), A2_TABLE[(src, dst)][0], np.zeros(N, np_type(dst)))


@pytest.mark.parametrize("src,dst", [("int32", "float16"), ("float16", "bfloat16"), ("uint8", "float32")])
def test_a_pair_not_in_the_table_stops_the_kernel(src: str, dst: str) -> None:
    with pytest.raises(KernelError, match="Cast from .*: not a conversion tilesim emulates"):
        run_cast(src, dst, np.zeros(N, np_type(src)), (CAST_NONE,), CAST_NONE, np.zeros(N, np_type(dst)))


def test_the_docs_examples() -> None:
    """precision_conversion.md's worked examples, through the oracle (so that the oracle states the docs)."""
    assert [round_int(Fraction(-3, 2), m) for m in (CAST_RINT, CAST_FLOOR, CAST_CEIL, CAST_ROUND, CAST_TRUNC)] == \
        [-2, -2, -1, -2, -1]
    assert [to_float(Fraction(2 ** 25 + 3), False, m, "float32") for m in R] == [2 ** 25 + 4, 2 ** 25, 2 ** 25 + 4,
                                                                                 2 ** 25 + 4, 2 ** 25]
    assert [to_float(Fraction(2 ** 35 + 2 ** 12 + 2 ** 11), False, m, "float32") for m in R] == \
        [2 ** 35 + 2 ** 13, 2 ** 35 + 2 ** 12, 2 ** 35 + 2 ** 13, 2 ** 35 + 2 ** 13, 2 ** 35 + 2 ** 12]
    half = Fraction(1, 2) + Fraction(1, 2 ** 12)
    assert [to_float(half, False, m, "float16") for m in (*R, CAST_ODD)] == [0.5, 0.5, 0.5 + 2 ** -11,
                                                                               0.5 + 2 ** -11, 0.5, 0.5 + 2 ** -11]
    assert [to_float(Fraction(2 ** 12 + 2), False, m, "float16") for m in R] == [4096, 4096, 4100, 4100, 4096]


@dataclass(frozen=True)
class CountTiling:
    n: int


@kernel
def narrow_count_mode(ctx, t, a, out):
    """A level-0 Cast float -> half in counter mode of ``t.n`` (< 64) elements into a VECOUT buffer of just their
    bytes, as LayerNormGradBeta casts its [H] sums back."""
    pipe = TPipe(ctx)
    qi = pipe.init_buffer(TQue(VECIN, 1), 1, t.n * 4)
    qo = pipe.init_buffer(TQue(VECOUT, 1), 1, t.n * 2)
    x = qi.alloc_tensor(a.dtype)
    data_copy(x, a, t.n)
    qi.enque(x)
    x = qi.deque(a.dtype)
    y = qo.alloc_tensor(out.dtype)
    set_mask_count(ctx)
    set_vector_mask(ctx, t.n)
    cast(y, x, CAST_NONE, MASK_PLACEHOLDER, 1, UnaryRepeatParams(1, 1, 4, 8))
    set_mask_norm(ctx)
    qo.enque(y)
    y = qo.deque(out.dtype)
    data_copy(out, y, t.n)
    qo.free_tensor(y)
    qi.free_tensor(x)


def test_a_level0_cast_is_bounded_by_its_last_lane() -> None:
    """Checked mode bounds each operand of a level-0 Cast at the last lane the mask (here the counter) enables,
    in its own element size, as the element-wise instructions do: 16 halves from 16 floats stay inside 32 B."""
    x = np.arange(16, dtype=np.float32) / 3
    out = np.zeros(16, np.float16)
    launch(narrow_count_mode, CountTiling(16), x, out, block_dim=1, checks=True)
    assert np.array_equal(out, x.astype(np.float16))
