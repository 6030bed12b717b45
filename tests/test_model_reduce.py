"""The reductions and Brcb (tilesim.machine.reduce) against numpy statements of their documented A2 semantics:
pairwise trees with every addition rounded to the type (ReduceDataBlock.md), the count form of ReduceSum adding
its repeats in order, the level-0 form a tree of trees, Max / Min with the first index of equal values, masked-off
lanes entering a sum as +0 and a fully masked block or pair left unwritten; special values, masks, strides,
counter mode; and checked mode's findings.

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
    MASK_PLACEHOLDER,
    VECCALC,
    VECIN,
    VECOUT,
    BrcbRepeatParams,
    ReduceOrder,
    TBuf,
    TPipe,
    TQue,
    block_reduce_max,
    block_reduce_min,
    block_reduce_sum,
    brcb,
    data_copy,
    duplicate,
    pair_reduce_sum,
    reduce_max,
    reduce_min,
    reduce_sum,
    set_mask_count,
    set_mask_norm,
    set_vector_mask,
    size_of,
    whole_reduce_max,
    whole_reduce_min,
    whole_reduce_sum,
)
from tilesim.runtime.launcher import KernelError, kernel, launch

SENTINEL = -7.0  # what dst holds where an instruction writes nothing
FAMILY = ["whole", "whole", "whole", "block", "block", "block", "pair"]
KIND = ["sum", "max", "min", "sum", "max", "min", "sum"]


def _s64(u: int) -> int:
    """A 64-bit mask pattern as the int64 a tiling field carries."""
    return u - (1 << 64) if u >= 1 << 63 else u


# ---------------------------------------------------------------------------------------------------------------
# The documented semantics, in numpy


def _tree(v: np.ndarray, dt: type) -> np.generic:
    """The adjacent-pair tree of ``v`` (a power of two long), every sum rounded to ``dt``."""
    v = v.astype(dt)
    with np.errstate(all="ignore"):
        while v.size > 1:
            v = (v[0::2] + v[1::2]).astype(dt)
    return v[0]


def _masked_sum(v: np.ndarray, on: np.ndarray) -> np.generic:
    return _tree(np.where(on, v, v.dtype.type(0)), v.dtype.type)  # a masked-off lane is +0


def _extreme(v: np.ndarray, on: np.ndarray, is_max: bool) -> int:
    """The lane of the first NaN, else of the first largest (smallest) value among the lanes on."""
    best = -1
    for k in np.flatnonzero(on):
        b = v[best] if best >= 0 else None
        if best < 0 or (not np.isnan(b) and (np.isnan(v[k]) or (v[k] > b if is_max else v[k] < b))):
            best = k
    return best


def _lanes(lo: int, hi: int, lanes: int) -> np.ndarray:
    return np.array([(lo >> k) & 1 if k < 64 else (hi >> (k - 64)) & 1 for k in range(lanes)], bool)


def _repeat_lanes(x: np.ndarray, r: int, blk: int, rep: int) -> tuple[np.ndarray, np.ndarray]:
    epb = 32 // x.itemsize
    idx = np.array([(r * rep + b * blk) * epb + e for b in range(8) for e in range(epb)])
    return x[idx], idx


def ref_repeat(x: np.ndarray, op: int, ons: list[np.ndarray], dst_rep: int, blk: int, rep: int, order: int,
               m: int) -> np.ndarray:
    """WholeReduce* / BlockReduce* / PairReduceSum as their pages state them, into ``m`` elements of SENTINEL."""
    dt, sz = x.dtype.type, x.itemsize
    epb, lanes = 32 // sz, 256 // sz
    out = np.full(m, SENTINEL, dt)
    ov = out.view(np.uint16 if sz == 2 else np.uint32)
    family, kind = FAMILY[op], KIND[op]
    group = {"whole": lanes, "block": epb, "pair": 2}[family]
    for r, on in enumerate(ons):
        v, _ = _repeat_lanes(x, r, blk, rep)
        for g in range(lanes // group):
            sl = slice(g * group, (g + 1) * group)
            if not on[sl].any():
                continue
            if kind == "sum":
                s = _masked_sum(v[sl], on[sl])
                unit = {"whole": 1, "block": 8, "pair": 128 // sz}[family]
                out[r * dst_rep * unit + g] = s
                continue
            k = _extreme(v[sl], on[sl], kind == "max")
            if family == "block":
                out[r * dst_rep * 8 + g] = v[sl][k]
            elif order == 0:
                out[r * dst_rep * 2], ov[r * dst_rep * 2 + 1] = v[k], k
            elif order == 1:
                ov[r * dst_rep * 2], out[r * dst_rep * 2 + 1] = k, v[k]
            elif order == 2:
                out[r * dst_rep] = v[k]
            else:
                out.view(np.uint32)[r * dst_rep] = k
    return out


def ref_reduce(x: np.ndarray, kind: str, ons: list[np.ndarray] | None, n: int, rep: int) -> tuple[np.generic, int]:
    """ReduceSum / Max / Min: the count form (``ons`` None: the first ``n`` elements, ReduceSum adding its repeats
    in order) or the level-0 form (the repeats' lanes ``ons``, ``rep`` blocks apart; ReduceSum a tree of the
    repeats' sums, per at a time); (value, index)."""
    dt, sz = x.dtype.type, x.itemsize
    epb, per = 32 // sz, 256 // sz
    count_form = ons is None
    if count_form:
        ons = [np.arange(per) < n - r * per for r in range(-(-n // per))]
        rep = 8
    rows = [_repeat_lanes(x, r, 1, rep)[0] for r in range(len(ons))]
    if kind == "sum":
        sums = [_masked_sum(v, on) for v, on in zip(rows, ons, strict=True)]
        if count_form:
            acc = sums[0]
            with np.errstate(all="ignore"):
                for s in sums[1:]:
                    acc = dt(acc + s)
            return acc, 0
        s = np.array(sums, dt)
        while s.size > 1:
            s = np.concatenate([s, np.zeros(-s.size % per, dt)])
            s = np.array([_tree(s[i:i + per], dt) for i in range(0, s.size, per)], dt)
        return s[0], 0
    best, where = None, 0
    for r, (v, on) in enumerate(zip(rows, ons, strict=True)):
        k = _extreme(v, on, kind == "max")
        if k < 0:
            continue
        if best is None or (not np.isnan(best) and (np.isnan(v[k]) or (v[k] > best if kind == "max" else v[k] < best))):
            best, where = v[k], r * rep * epb + k
    return best, where


def assert_same(got: np.ndarray, want: np.ndarray, what: str = "") -> None:
    """Bit for bit, any NaN matching any NaN."""
    ib = np.uint16 if got.itemsize == 2 else np.uint32
    nan_g, nan_w = np.isnan(got), np.isnan(want)
    diff = (nan_g != nan_w) | (~nan_g & (got.view(ib) != want.view(ib)))
    assert not diff.any(), f"{what}: {int(diff.sum())} differ, first at {np.flatnonzero(diff)[:8].tolist()}: " \
                           f"got {got[diff][:4]}, want {want[diff][:4]}"


def _data(dtype: type, n: int, seed: int) -> np.ndarray:
    """Random values with the special ones planted: NaN, ±inf, -0, subnormals, ties."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-4, 4, max(n, 1024)).astype(dtype)
    sub = np.float32(1e-40) if dtype == np.float32 else np.float16(3e-6)
    lanes = 256 // x.itemsize
    x[lanes + 3] = np.nan
    x[2 * lanes + 5], x[2 * lanes + 9] = np.inf, 9.0
    x[3 * lanes + 1] = -np.inf
    x[4:12] = [-0.0, 0.0, -0.0, sub, -sub, sub, 4.5, 4.5]  # 4.5 twice: the max tie
    x[20:24] = [-4.5, 1.0, -4.5, 2.0]  # the min tie
    x[40:48] = -0.0
    return x[:n].copy()


# ---------------------------------------------------------------------------------------------------------------
# Whole / Block / Pair


@dataclass(frozen=True)
class Rep:
    n: int  # src elements
    m: int  # dst elements
    op: int
    lo: int
    hi: int
    count: int
    repeat: int
    dst_rep: int
    blk: int
    rep: int
    order: int


@kernel
def repeat_kernel(ctx, t, a, out):
    """One of the per-repeat reductions on ``a`` into a dst that holds SENTINEL where nothing is written."""
    sz = size_of(a.dtype)
    pipe = TPipe(ctx)
    qi = pipe.init_buffer(TQue(VECIN, 1), 1, t.n * sz)
    qo = pipe.init_buffer(TQue(VECOUT, 1), 1, t.m * sz)
    x = qi.alloc_tensor(a.dtype)
    data_copy(x, a, t.n)
    qi.enque(x)
    x = qi.deque(a.dtype)
    o = qo.alloc_tensor(a.dtype)
    duplicate(o, SENTINEL, t.m)
    mask = (t.lo, t.hi)
    if t.op == 0:
        whole_reduce_sum(o, x, mask, t.repeat, t.dst_rep, t.blk, t.rep)
    elif t.op == 1:
        whole_reduce_max(o, x, mask, t.repeat, t.dst_rep, t.blk, t.rep, t.order)
    elif t.op == 2:
        whole_reduce_min(o, x, mask, t.repeat, t.dst_rep, t.blk, t.rep, t.order)
    elif t.op == 3:
        block_reduce_sum(o, x, t.repeat, mask, t.dst_rep, t.blk, t.rep)
    elif t.op == 4:
        block_reduce_max(o, x, t.repeat, mask, t.dst_rep, t.blk, t.rep)
    elif t.op == 5:
        block_reduce_min(o, x, t.repeat, mask, t.dst_rep, t.blk, t.rep)
    elif t.op == 6:
        pair_reduce_sum(o, x, t.repeat, mask, t.dst_rep, t.blk, t.rep)
    elif t.op == 7:  # the contiguous mask
        whole_reduce_sum(o, x, t.count, t.repeat, t.dst_rep, t.blk, t.rep)
    elif t.op == 8:
        whole_reduce_max(o, x, t.count, t.repeat, t.dst_rep, t.blk, t.rep, ReduceOrder.ORDER_INDEX_VALUE)
    elif t.op == 9:
        block_reduce_min(o, x, t.repeat, t.count, t.dst_rep, t.blk, t.rep)
    elif t.op == 10:
        pair_reduce_sum(o, x, t.repeat, t.count, t.dst_rep, t.blk, t.rep)
    elif t.op == 11:  # isSetMask = false: the mask register
        set_vector_mask(ctx, t.hi, t.lo)
        whole_reduce_min(o, x, MASK_PLACEHOLDER, t.repeat, t.dst_rep, t.blk, t.rep)
    else:  # counter mode: t.count lanes in all, repeat_times ignored
        set_mask_count(ctx)
        set_vector_mask(ctx, t.count)
        block_reduce_sum(o, x, 1, MASK_PLACEHOLDER, t.dst_rep, t.blk, t.rep)
        set_mask_norm(ctx)
    qo.enque(o)
    o = qo.deque(a.dtype)
    data_copy(out, o, t.m)
    qi.free_tensor(x)
    qo.free_tensor(o)


PATTERN = (0xF0F0_0FF0_8421_3C3D, 0x8000_0001_00FF_0003)  # lane 0 on, lane 1 off, ...; b32 uses the low word
REPEAT, DST_REP, BLK, REP = 4, 3, 2, 17  # strides that leave gaps and do not start on a multiple of 8


def _run_repeat(dtype: type, op: int, mask: tuple[int, int] = PATTERN, count: int = 0, order: int = 0,
                repeat: int = REPEAT, dst_rep: int = DST_REP, blk: int = BLK, rep: int = REP) -> tuple:
    sz = np.dtype(dtype).itemsize
    n = max((((repeat - 1) * rep + 7 * blk) * 32 + 32) // sz, 1024 // sz)
    m = 8192 // sz
    x = _data(dtype, n, op + 10 * order)
    out = np.zeros(m, dtype)
    t = Rep(n, m, op, _s64(mask[0]), _s64(mask[1]), count, repeat, dst_rep, blk, rep, order)
    report = launch(repeat_kernel, t, x, out, block_dim=1, checks=True)
    return x, out, report


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("op", range(7))
def test_per_repeat_reductions_with_a_mask_pattern_and_strides(dtype: type, op: int) -> None:
    x, out, report = _run_repeat(dtype, op)
    lanes = 256 // np.dtype(dtype).itemsize
    ons = [_lanes(*PATTERN, lanes)] * REPEAT
    assert_same(out, ref_repeat(x, op, ons, DST_REP, BLK, REP, 0, out.size), f"{FAMILY[op]} {KIND[op]}")
    assert report.total("vec_reduce") == REPEAT


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("op", [0, 3, 6])
@pytest.mark.parametrize("blk,rep", [(1, 8), (BLK, REP)])
def test_sums_with_every_lane_on(dtype: type, op: int, blk: int, rep: int) -> None:
    """The float sums with every lane on take a path of their own (the adds written out): the same tree."""
    lanes = 256 // np.dtype(dtype).itemsize
    x, out, _ = _run_repeat(dtype, op, mask=(2 ** 64 - 1, 2 ** 64 - 1), blk=blk, rep=rep)
    ons = [np.ones(lanes, bool)] * REPEAT
    assert_same(out, ref_repeat(x, op, ons, DST_REP, blk, rep, 0, out.size), f"{FAMILY[op]} {KIND[op]}")


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("order", [0, 1, 2, 3])
def test_whole_reduce_max_min_orders_and_the_index_bits(dtype: type, order: int) -> None:
    lanes = 256 // np.dtype(dtype).itemsize
    for op in (1, 2):
        x, out, _ = _run_repeat(dtype, op, mask=(2 ** 64 - 1, 2 ** 64 - 1), order=order, blk=1, rep=8, dst_rep=1)
        ons = [np.ones(lanes, bool)] * REPEAT
        assert_same(out, ref_repeat(x, op, ons, 1, 1, 8, order, out.size), f"{KIND[op]} order {order}")
    # the ties: repeat 0 holds 4.5 at lanes 10 and 11, -4.5 at 20 and 22 (the values of _data)
    x, out, _ = _run_repeat(dtype, 1, mask=(2 ** 64 - 1, 0), order=0, blk=1, rep=8, dst_rep=1)
    assert out[0] == 4.5 and out.view(np.uint16 if dtype == np.float16 else np.uint32)[1] == 10


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("op,count", [(7, 37), (8, 5), (9, 20), (10, 3), (7, 1000)])
def test_the_contiguous_mask(dtype: type, op: int, count: int) -> None:
    lanes = 256 // np.dtype(dtype).itemsize
    x, out, _ = _run_repeat(dtype, op, count=count)
    on = np.arange(lanes) < count
    base = {7: 0, 8: 1, 9: 5, 10: 6}[op]
    assert_same(out, ref_repeat(x, base, [on] * REPEAT, DST_REP, BLK, REP, 1 if op == 8 else 0, out.size))


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_the_mask_register_and_counter_mode(dtype: type) -> None:
    lanes = 256 // np.dtype(dtype).itemsize
    x, out, _ = _run_repeat(dtype, 11)
    assert_same(out, ref_repeat(x, 2, [_lanes(*PATTERN, lanes)] * REPEAT, DST_REP, BLK, REP, 0, out.size))
    total = 2 * lanes + 21  # two whole repeats and a partial one: block_reduce_sum's repeat_times 1 is ignored
    x, out, report = _run_repeat(dtype, 12, count=total)
    ons = [np.arange(lanes) < total - r * lanes for r in range(3)]
    assert_same(out, ref_repeat(x, 3, ons, DST_REP, BLK, REP, 0, out.size), "counter mode")
    assert report.total("vec_reduce") == 3


def test_a_fully_masked_block_or_pair_is_not_written_and_a_masked_lane_sums_as_plus_zero() -> None:
    x, out, _ = _run_repeat(np.float32, 3, mask=(0xFF00_FF00_0000_0001, 0), repeat=1, blk=1, rep=8, dst_rep=1)
    # block 0: lane 0 only; blocks 5 and 7 whole; the others nothing
    np.testing.assert_array_equal(out[[1, 2, 3, 4, 6]], SENTINEL)
    assert out[0] == x[0]
    np.testing.assert_array_equal(out[[5, 7]], [_tree(x[8 * b:8 * b + 8], np.float32) for b in (5, 7)])
    # pairs: (4, 5) both off, (0, 1) one on: x[0] + 0; lanes 40..47 all -0 in a block with lane 40 off: +0
    x, out, _ = _run_repeat(np.float32, 6, mask=(0xFFFF_FE00_FFFF_FF0D, 0), repeat=1, blk=1, rep=8, dst_rep=1)
    assert out[2] == SENTINEL and out[0] == x[0] and out[1] == x[2] + x[3]
    x, out, _ = _run_repeat(np.float32, 3, mask=(0xFE00_0000_0000, 0), repeat=1, blk=1, rep=8, dst_rep=1)
    assert np.all(x[40:48] == 0) and np.signbit(x[40:48]).all()
    assert out[5] == 0 and not np.signbit(out[5]), "-0 lanes with a masked-off one sum to +0"
    x, out, _ = _run_repeat(np.float32, 3, mask=(0xFF00_0000_0000, 0), repeat=1, blk=1, rep=8, dst_rep=1)
    assert np.signbit(out[5]), "-0 lanes, all on, sum to -0"


def test_half_rounds_every_addition_of_the_tree() -> None:
    """60000 + 60000 overflows at the first level (ReduceDataBlock.md's example): [60000, 60000, -60000, -60000]
    sums to NaN in half, where fp32 would give 0; and the pairs of lanes round each sum."""
    x, out, _ = _run_repeat(np.float16, 3, mask=(0xF, 0), repeat=1, blk=1, rep=8, dst_rep=1)
    want = _tree(np.concatenate([x[:4], np.zeros(12, np.float16)]), np.float16)
    assert_same(out[:1], np.array([want]))
    a = np.zeros(2112 // 2, np.float16)
    a[:4] = [60000, 60000, -60000, -60000]
    t = Rep(a.size, 4096, 3, 0xF, 0, 0, 1, 1, 1, 8, 0)
    o = np.zeros(4096, np.float16)
    launch(repeat_kernel, t, a, o, block_dim=1, checks=True)
    assert np.isnan(o[0])


# ---------------------------------------------------------------------------------------------------------------
# ReduceSum / ReduceMax / ReduceMin


@dataclass(frozen=True)
class Red:
    n: int  # src elements
    op: int
    count: int
    lo: int
    hi: int
    mask: int
    repeat: int
    rep: int
    work: int  # work elements
    index: int


@kernel
def reduce_kernel(ctx, t, a, out):
    sz = size_of(a.dtype)
    pipe = TPipe(ctx)
    qi = pipe.init_buffer(TQue(VECIN, 1), 1, t.n * sz)
    qo = pipe.init_buffer(TQue(VECOUT, 1), 1, 64)
    tb = pipe.init_buffer(TBuf(VECCALC), 32768)
    x = qi.alloc_tensor(a.dtype)
    data_copy(x, a, t.n)
    qi.enque(x)
    x = qi.deque(a.dtype)
    work = tb.get(a.dtype, t.work)
    o = qo.alloc_tensor(a.dtype)
    duplicate(o, SENTINEL, 64 // sz)
    if t.op == 0:
        reduce_sum(o, x, work, t.count)
    elif t.op == 1:
        reduce_max(o, x, work, t.count)
    elif t.op == 2:
        reduce_max(o, x, work, t.count, t.index == 1)
    elif t.op == 3:
        reduce_min(o, x, work, t.count, True)
    elif t.op == 4:
        reduce_sum(o, x, work, (t.lo, t.hi), t.repeat, t.rep)
    elif t.op == 5:
        reduce_max(o, x, work, (t.lo, t.hi), t.repeat, t.rep, True)
    elif t.op == 6:
        reduce_min(o, x, work, t.mask, t.repeat, t.rep, t.index == 1)
    else:
        reduce_sum(o, x, work, t.mask, t.repeat, t.rep)
    qo.enque(o)
    o = qo.deque(a.dtype)
    data_copy(out, o, 64 // sz)
    qi.free_tensor(x)
    qo.free_tensor(o)


def _run_reduce(dtype: type, op: int, n: int, count: int = 0, mask: int = 0, pattern: tuple = PATTERN,
                repeat: int = 0, rep: int = 8, work: int = 8192, index: int = 1, seed: int = 0,
                x: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    if x is None:
        x = _data(dtype, n, seed)
    out = np.zeros(64 // np.dtype(dtype).itemsize, dtype)
    t = Red(n, op, count, _s64(pattern[0]), _s64(pattern[1]), mask, repeat, rep, work, index)
    launch(reduce_kernel, t, x, out, block_dim=1, checks=True)
    return x, out


def _check_reduce(out: np.ndarray, value: np.generic, index: int | None, what: str) -> None:
    want = np.full(out.size, SENTINEL, out.dtype)
    want[0] = value
    if index is not None:
        want.view(np.uint16 if out.itemsize == 2 else np.uint32)[1] = index
    assert_same(out, want, what)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("count", [1, 40, 64, 200, 1000, 4096])
def test_reduce_sum_count_form_adds_the_repeats_in_order(dtype: type, count: int) -> None:
    n = 4096
    rng = np.random.default_rng(count)
    x = rng.uniform(-3, 3, n).astype(dtype)
    x[::97] *= 500  # large and small together: the order shows
    _, out = _run_reduce(dtype, 0, n, count=count, x=x)
    _check_reduce(out, ref_reduce(x, "sum", None, count, 8)[0], None, f"ReduceSum({count})")
    if count == 4096:  # the level-0 tree of trees gives another sum: the form matters
        tree = ref_reduce(x, "sum", [np.ones(256 // x.itemsize, bool)] * (count * x.itemsize // 256), 0, 8)[0]
        assert tree != out[0]


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_reduce_sum_with_special_values(dtype: type) -> None:
    x = _data(dtype, 1024, 3)
    _, out = _run_reduce(dtype, 0, 1024, count=1024, x=x)
    assert np.isnan(out[0])  # NaN and both infinities
    _, out = _run_reduce(dtype, 0, 1024, count=64 if dtype == np.float16 else 32, x=x)
    _check_reduce(out, ref_reduce(x, "sum", None, 64 if dtype == np.float16 else 32, 8)[0], None, "short")


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("mask,repeat,rep", [(128, 20, 8), (37, 70, 9), (5, 1, 0), (64, 300, 0)])
def test_reduce_sum_level0_is_a_tree_of_trees(dtype: type, mask: int, repeat: int, rep: int) -> None:
    sz = np.dtype(dtype).itemsize
    lanes = 256 // sz
    n = ((repeat - 1) * rep * 32 + 256) // sz
    x, out = _run_reduce(dtype, 7, n, mask=mask, repeat=repeat, rep=rep, seed=repeat)
    on = np.arange(lanes) < mask
    _check_reduce(out, ref_reduce(x, "sum", [on] * repeat, 0, rep)[0], None, "ReduceSum level-0")
    x, out = _run_reduce(dtype, 4, n, repeat=repeat, rep=rep, seed=repeat)
    _check_reduce(out, ref_reduce(x, "sum", [_lanes(*PATTERN, lanes)] * repeat, 0, rep)[0], None, "pattern")


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("count", [7, 64, 130, 1000])
def test_reduce_max_min_count_form_with_the_first_index(dtype: type, count: int) -> None:
    n = 1024
    x = _data(dtype, n, count)
    x[np.isnan(x)] = 0  # NaN apart (below): here the ties, ±inf, -0, subnormals
    for op, kind in ((2, "max"), (3, "min")):
        _, out = _run_reduce(dtype, op, n, count=count, x=x)
        value, index = ref_reduce(x, kind, None, count, 8)
        _check_reduce(out, value, index, f"Reduce{kind}({count})")
    _, out = _run_reduce(dtype, 1, n, count=count, x=x)  # no index: dst[1] untouched
    _check_reduce(out, ref_reduce(x, "max", None, count, 8)[0], None, "ReduceMax without index")
    x[count // 2] = np.nan
    _, out = _run_reduce(dtype, 3, n, count=count, x=x)
    assert np.isnan(out[0]) and out.view(np.uint16 if dtype == np.float16 else np.uint32)[1] == count // 2


def test_reduce_max_min_ties_give_the_smallest_index() -> None:
    x = np.zeros(1024, np.float32)
    x[[5, 70, 700]] = 3.0
    x[[9, 300]] = -2.0
    _, out = _run_reduce(np.float32, 2, 1024, count=1024, x=x)
    assert out[0] == 3.0 and out.view(np.uint32)[1] == 5
    _, out = _run_reduce(np.float32, 3, 1024, count=1024, x=x)
    assert out[0] == -2.0 and out.view(np.uint32)[1] == 9
    x[:] = -1.0
    x[3], x[4] = -0.0, 0.0  # equal: the first one, -0
    _, out = _run_reduce(np.float32, 2, 1024, count=1024, x=x)
    assert out[0] == 0 and np.signbit(out[0]) and out.view(np.uint32)[1] == 3


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("repeat,rep", [(1, 8), (6, 10), (40, 8)])
def test_reduce_max_min_level0_index_counts_the_repeat_stride(dtype: type, repeat: int, rep: int) -> None:
    sz = np.dtype(dtype).itemsize
    lanes = 256 // sz
    n = ((repeat - 1) * rep * 32 + 256) // sz
    x = _data(dtype, n, repeat)
    x[np.isnan(x)] = 1.0
    x, out = _run_reduce(dtype, 5, n, repeat=repeat, rep=rep, x=x)
    value, index = ref_reduce(x, "max", [_lanes(*PATTERN, lanes)] * repeat, 0, rep)
    _check_reduce(out, value, index, "ReduceMax level-0")
    x, out = _run_reduce(dtype, 6, n, mask=45, repeat=repeat, rep=rep, x=x)
    value, index = ref_reduce(x, "min", [np.arange(lanes) < 45] * repeat, 0, rep)
    _check_reduce(out, value, index, "ReduceMin level-0")
    x, out = _run_reduce(dtype, 6, n, mask=45, repeat=repeat, rep=rep, x=x, index=0)
    _check_reduce(out, value, None, "ReduceMin level-0 without index")


# ---------------------------------------------------------------------------------------------------------------
# Brcb


@dataclass(frozen=True)
class Bc:
    n: int  # src elements copied in (8 a repeat, up to a whole 32 B)
    repeat: int
    blk: int
    rep: int
    m: int


@kernel
def brcb_kernel(ctx, t, a, out):
    sz = size_of(a.dtype)
    pipe = TPipe(ctx)
    qi = pipe.init_buffer(TQue(VECIN, 1), 1, t.n * sz)
    qo = pipe.init_buffer(TQue(VECOUT, 1), 1, t.m * sz)
    x = qi.alloc_tensor(a.dtype)
    data_copy(x, a, t.n)
    qi.enque(x)
    x = qi.deque(a.dtype)
    o = qo.alloc_tensor(a.dtype)
    duplicate(o, 5, t.m)
    brcb(o, x, t.repeat, BrcbRepeatParams(t.blk, t.rep))
    qo.enque(o)
    o = qo.deque(a.dtype)
    data_copy(out, o, t.m)
    qi.free_tensor(x)
    qo.free_tensor(o)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32, np.int16])
@pytest.mark.parametrize("repeat,blk,rep", [(2, 1, 8), (3, 2, 16), (2, 0, 9), (1, 3, 0)])
def test_brcb_fills_each_block_with_one_element(dtype: type, repeat: int, blk: int, rep: int) -> None:
    sz = np.dtype(dtype).itemsize
    epb = 32 // sz
    m = 4096 // sz
    x = np.arange(1, -(-8 * repeat // epb) * epb + 1).astype(dtype)
    if dtype in (np.float32, np.float16):
        x[:4] = [np.nan, -0.0, np.inf, 1e-6]
    out = np.zeros(m, dtype)
    report = launch(brcb_kernel, Bc(x.size, repeat, blk, rep, m), x, out, block_dim=1, checks=True)
    want = np.full(m, 5, dtype)
    for i in range(repeat):  # Brcb.md's pseudo-code
        for j in range(8):
            start = (i * rep + j * (blk or 1)) * epb
            want[start:start + epb] = x[i * 8 + j]
    if dtype in (np.float32, np.float16):
        assert_same(out, want)
    else:
        np.testing.assert_array_equal(out, want)
    assert report.total("vec_dup") == repeat + m * sz // 256  # Brcb and the Duplicate before it


# ---------------------------------------------------------------------------------------------------------------
# Checked mode


@dataclass(frozen=True)
class Bad:
    case: int


@kernel
def bad_kernel(ctx, t, a, out):
    pipe = TPipe(ctx)
    qi = pipe.init_buffer(TQue(VECIN, 1), 1, 2048)
    qo = pipe.init_buffer(TQue(VECOUT, 1), 1, 1024)
    tb = pipe.init_buffer(TBuf(VECCALC), 2048)
    x = qi.alloc_tensor(a.dtype)
    data_copy(x, a, 256)
    qi.enque(x)
    x = qi.deque(a.dtype)
    o = qo.alloc_tensor(a.dtype)
    duplicate(o, 0.0, 256)
    u = tb.get(a.dtype)
    if t.case == 1:  # 4 repeats with the index need 8 + 8 elements of work (ReduceMax.md)
        reduce_max(o, x, tb.get(a.dtype, 8), 64, 4, 8, True)
    elif t.case == 2:  # a source never written
        whole_reduce_sum(o, u, 64, 2, 1, 1, 8)
    elif t.case == 3:  # the count runs past the 256 elements copied in
        reduce_sum(o, x, u, 300)
    elif t.case == 4:  # BlockReduce's float dst must be 32 B aligned
        block_reduce_sum(o[4], x, 1, 64, 1, 1, 8)
    elif t.case == 5:
        whole_reduce_sum(o, x, 64, 256, 1, 1, 8)
    elif t.case == 6:  # the lanes on were written; the ones off and the strides' gaps were not: clean
        duplicate(u, 1.0, 8)
        duplicate(u[16], 2.0, 8)
        whole_reduce_sum(o, u, 8, 2, 1, 1, 2)
        block_reduce_max(o[64], u, 1, (0xFFFF, 0), 1, 2, 8)
    elif t.case == 7:  # VALUE_INDEX on float: 8 B aligned
        whole_reduce_max(o[1], x, 64, 1, 1, 1, 8)
    qo.enque(o)
    o = qo.deque(a.dtype)
    data_copy(out, o, 256)
    qi.free_tensor(x)
    qo.free_tensor(o)


@pytest.mark.parametrize("case,kind,words,offset", [
    (1, "temporary buffer too small", "the sharedTmpBuffer holds 32 B, less than the 64 B", 0),
    (2, "uninitialised read", "read of 512 B of UB never written, the first 0 B", 0),
    (3, "uninitialised read", "read of 176 B of UB never written, the first 1024 B into the access", 0),
    (4, "misaligned vector operand", "16 B past a 32 B boundary", 16),
    (5, "invalid repeat parameters", "repeat_times 256", 0),
    (7, "misaligned vector operand", "4 B past a 32 B boundary", 4)])
def test_checked_mode_findings(case: int, kind: str, words: str, offset: int) -> None:
    a = np.ones(256, np.float32)
    out = np.zeros(256, np.float32)
    with pytest.raises(CheckError) as e:
        launch(bad_kernel, Bad(case), a, out, block_dim=1, checks=True)
    v = e.value.violations[0]
    assert v.kind == kind and words in v.detail and v.offset == offset, str(v)


def test_checked_mode_reads_only_the_lanes_a_reduction_uses() -> None:
    a = np.ones(256, np.float32)
    out = np.zeros(256, np.float32)
    launch(bad_kernel, Bad(6), a, out, block_dim=1, checks=True)
    assert out[0] == 8.0 and out[1] == 16.0 and out[64] == 1.0 and out[65] == 2.0 and out[66] == 0.0


@kernel
def unsynced_kernel(ctx, t, a, out):
    """The copy-in is not DeQue'd before the reduction reads it: a race on the NPU."""
    pipe = TPipe(ctx)
    tb = pipe.init_buffer(TBuf(VECCALC), 1024)
    qo = pipe.init_buffer(TQue(VECOUT, 1), 1, 1024)
    x = tb.get(a.dtype)
    data_copy(x, a, 256)
    o = qo.alloc_tensor(a.dtype)
    whole_reduce_sum(o, x, 64, 4, 1, 1, 8)
    qo.enque(o)
    o = qo.deque(a.dtype)
    data_copy(out, o, 8)
    qo.free_tensor(o)


def test_the_hazard_check_sees_the_reduction() -> None:
    with pytest.raises(CheckError) as e:
        launch(unsynced_kernel, Bad(0), np.ones(256, np.float32), np.zeros(8, np.float32), block_dim=1, checks=True)
    assert "V (WholeReduceSum) reads" in e.value.violations[0].detail


@kernel
def bf16_kernel(ctx, t, a, out):
    pipe = TPipe(ctx)
    tb = pipe.init_buffer(TBuf(VECCALC), 1024)
    x = tb.get(a.dtype)
    whole_reduce_sum(x, x, 64, 1, 1, 1, 8)


def test_a_type_the_api_does_not_take_stops_the_kernel() -> None:
    a = np.zeros(16, ml_dtypes.bfloat16)
    with pytest.raises(KernelError, match="WholeReduceSum on bfloat16_t: the A2 API does not take"):
        launch(bf16_kernel, Bad(0), a, a.copy(), block_dim=1)
