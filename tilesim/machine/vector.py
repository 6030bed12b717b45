"""The element-wise vector instructions, by family: binary (Add, Sub, Mul, Div, Max, Min), binary with a scalar
(Adds, Muls, Maxs, Mins), unary (Exp, Ln, Abs, Sqrt, Rsqrt, Reciprocal, Relu) and Duplicate.

Each has the two forms of the Ascend C API (``MV/基础算术/*.md``):
- count (level-2): ``add(dst, src0, src1, count)``, ``adds(dst, src, scalar, count)``, ``exp(dst, src, count)``,
  ``duplicate(dst, scalar, count)``: ``count`` contiguous elements; on A2 one instruction in counter mode, which
  leaves the mask register all ones in normal mode;
- mask / repeat (level-0): ``add(dst, src0, src1, mask, repeat_times, BinaryRepeatParams(...))``,
  ``adds(dst, src, scalar, mask, repeat_times, UnaryRepeatParams(...))``, ``exp(dst, src, mask, repeat_times,
  UnaryRepeatParams(...))``, ``duplicate(dst, scalar, mask, repeat_times, dst_blk_stride, dst_rep_stride)``.
  A repeat is 8 blocks of 32 B; element e of block b of repeat r is at ``(r * rep_stride + b * blk_stride) * 32 +
  e * sizeof(T)`` bytes; ``mask`` is a count (the first ``mask`` lanes of each repeat) or a pair ``(mask[0],
  mask[1])`` of 64-bit patterns (bit i selects lane i), which the call writes to the mask register as the API's
  SetMask does (it stays there), or :data:`MASK_PLACEHOLDER` for the register as :func:`set_vector_mask` or an
  earlier call left it (isSetMask = false). In counter mode (:func:`set_mask_count`) the register's low word is
  the total count and repeat_times is ignored (``SIMD计算说明/掩码.md``, 接口内设置Mask: after SetMaskCount a call
  with ``mask = (130, 0)`` computes 130 elements). Masked-off lanes keep their old values; zero repeats or mask
  is no instruction.

One piece of code (:func:`vec_op`) serves every instruction: it checks the operands (checked mode: 32 B alignment,
bounds, repeat_times <= 255, a zero dst block stride, the overlap rule of :mod:`tilesim.machine.overlap` with
Add/Sub/Mul/Max/Min's exception for src1), walks the count or the repeats and strides, counts the 256 B repeats
and keeps the UB shadow (the count form flows its sources' state; the level-0 form marks the span it walks
written). The operation is a type (a :class:`Marker`), so each instruction compiles to its own loops.
Types: half, float, and int16 / int32 where the API allows them (another type stops the kernel when it runs); the
API's one template T for all its tensors (``Adds<T>(dst, src, ...)``): tensors of different types stop the kernel
when the call runs (:func:`mixed_types`), where Ascend C would not compile it;
half computes through fp32 and rounds once (exact for + - * / and sqrt). Choices where the documentation is
silent: Max and Min propagate NaN, Relu passes NaN on, int16 / int32 arithmetic wraps, Rsqrt and Reciprocal are
exact (the NPU's are approximate on A2, and their error is not modelled).
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np
from numba import carray, types
from numba.extending import overload

from tilesim.core.pipes import LANE_VECTOR
from tilesim.core.records import (
    ERR_VEC_PARAM,
    VEC_BINARY,
    VEC_DIV,
    VEC_DUP,
    VEC_SCALAR,
    VEC_UNARY,
    checked_only,
    count_vector,
    flow1,
    flow2,
    plan_of,
    report,
    vec_ok,
    vec_out,
)
from tilesim.core.vec_kinds import vec_kind
from tilesim.jit import INLINE_OPTIONS, OVERLOAD_OPTIONS, njit
from tilesim.jit.intrinsics import (
    address_as_pointer,
    bf16_nearest_bits,
    f32_as_u32,
    fp16_nearest_bits,
    fp16_widen_bits,
    u32_as_f32,
)
from tilesim.machine.dtypes import ALL
from tilesim.machine.hazard import INSTRUCTIONS, hz_instruction, hz_level0, op_code
from tilesim.machine.overlap import ACCUMULATE, SAME, SRC, SRC0, SRC1, count_ok, walk_ok
from tilesim.machine.pipe import FAULT_DTYPE, FAULT_MIXED_TYPES, fault
from tilesim.machine.structs import ConstantType, constant_type
from tilesim.machine.tensor import (
    X_COUNTER_MODE,
    X_MASK_HI,
    X_MASK_LO,
    KernelContextType,
    core_of,
    ctx_words,
    plan_tensor,
)
from tilesim.numerics.expf import exp_f32

BinaryRepeatParams = namedtuple("BinaryRepeatParams", ["dst_blk_stride", "src0_blk_stride", "src1_blk_stride",
                                                       "dst_rep_stride", "src0_rep_stride", "src1_rep_stride"],
                                defaults=(1, 1, 1, 8, 8, 8))
UnaryRepeatParams = namedtuple("UnaryRepeatParams", ["dst_blk_stride", "src_blk_stride", "dst_rep_stride",
                                                     "src_rep_stride"], defaults=(1, 1, 8, 8))
CopyRepeatParams = namedtuple("CopyRepeatParams", ["dst_stride", "src_stride", "dst_repeat_size", "src_repeat_size"],
                              defaults=(1, 1, 8, 8))
BinaryRepeatParams.__doc__ = """BinaryRepeatParams(dstBlkStride, src0BlkStride, src1BlkStride, dstRepStride,
src0RepStride, src1RepStride) of a level-0 binary instruction: per operand, the stride between the 32 B blocks of
one repeat and between the starts of consecutive repeats, both in 32 B blocks (the struct's other fields are
reserved)."""
UnaryRepeatParams.__doc__ = """UnaryRepeatParams(dstBlkStride, srcBlkStride, dstRepStride, srcRepStride) of a level-0
unary or scalar instruction: per operand, the stride between the 32 B blocks of one repeat and between the starts
of consecutive repeats, both in 32 B blocks."""
CopyRepeatParams.__doc__ = """CopyRepeatParams(dstStride, srcStride, dstRepeatSize, srcRepeatSize) of Copy: per operand,
the stride between the 32 B blocks of one repeat and between the starts of consecutive repeats, both in 32 B
blocks."""


class Marker:
    """A constant that is all type: an operation, the mask placeholder."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return marker, (self.name,)


class MarkerType(ConstantType):
    """The Numba type of one :class:`Marker`."""


constant_type(Marker, MarkerType)

_MARKERS: dict[str, Marker] = {}
# The loops: IEEE division and square root (x/0 is ±inf or NaN, as on the NPU), where Numba's default error model
# would test every divisor and raise, which also keeps the loop from vectorising
LOOP_OPTIONS = {**OVERLOAD_OPTIONS, "error_model": "numpy"}


def marker(name: str) -> Marker:
    """The one :class:`Marker` named ``name`` (made on first use), so that a name stands for one Numba type."""
    return _MARKERS.setdefault(name, Marker(name))


MASK_PLACEHOLDER = marker("MASK_PLACEHOLDER")
# operation -> (counter class, the dtypes the API allows)
_B16_32 = ("half", "float", "int16_t", "int32_t")
_F = ("half", "float")
_ANY_B16_32 = ("half", "bfloat16_t", "float", "int16_t", "uint16_t", "int32_t", "uint32_t")
OPS = {"Add": (VEC_BINARY, _B16_32), "Sub": (VEC_BINARY, _B16_32), "Mul": (VEC_BINARY, _B16_32),
       "Div": (VEC_DIV, _F), "Max": (VEC_BINARY, _B16_32), "Min": (VEC_BINARY, _B16_32),
       "Adds": (VEC_SCALAR, _B16_32), "Muls": (VEC_SCALAR, _B16_32), "Maxs": (VEC_SCALAR, _B16_32),
       "Mins": (VEC_SCALAR, _B16_32), "Exp": (VEC_UNARY, _F), "Ln": (VEC_UNARY, _F), "Abs": (VEC_UNARY, _F),
       "Sqrt": (VEC_UNARY, _F), "Rsqrt": (VEC_UNARY, _F), "Reciprocal": (VEC_UNARY, _F),
       "Relu": (VEC_UNARY, ("half", "float", "int32_t")), "Duplicate": (VEC_DUP, _ANY_B16_32),
       "Copy": (VEC_DUP, _ANY_B16_32)}
for _n in OPS:
    marker(_n)


def op_name(op):  # type: ignore[no-untyped-def]
    """The name of the operation a MarkerType stands for (its instruction's Ascend C name, ``"Add"``)."""
    return op.value.name


# ---------------------------------------------------------------------------------------------------------------
# One element type T: an instruction's template parameter

ROLES = ("dst", "src", "src0", "src1", "sharedTmpBuffer")


def mixed_types(name: str, *operands: tuple[str, object]) -> int | None:
    """At typing time: the first operand whose element type differs from the first operand's, among ``operands``
    (pairs of a role in :data:`ROLES` and a LocalTensor's Numba type) of instruction ``name``, which has one
    element type T for all of them; its FAULT_MIXED_TYPES detail (:func:`mixed_types_text`), or None.

    A run-time stop (:func:`mixed_fault`) rather than a compile error, as for a type the API does not take: a
    kernel written for several dtypes types every branch for each, also those it does not take (``if sz == 2:
    cast(...) else: muls(...)``), and only a call that runs is wrong."""
    (role0, t0), *rest = operands
    for role, t in rest:
        if t.dtype.dt is not t0.dtype.dt:  # type: ignore[attr-defined]
            names = [d.name for d in ALL]
            return (((op_code(name) * 100 + ROLES.index(role0)) * 100 + ROLES.index(role)) * 100
                    + names.index(t0.dtype.dt.name)) * 100 + names.index(t.dtype.dt.name)  # type: ignore[attr-defined]
    return None


def mixed_types_text(detail: int) -> str:
    """FAULT_MIXED_TYPES's detail in words: the instruction and the two operands with their types."""
    rest, b = divmod(detail, 100)
    rest, a = divmod(rest, 100)
    rest, role_b = divmod(rest, 100)
    op, role_a = divmod(rest, 100)
    return f"{INSTRUCTIONS[op]} with {ROLES[role_a]} {ALL[a].name} and {ROLES[role_b]} {ALL[b].name}"


@njit(cache=True)
def mixed_fault(ctx, detail):
    """Stop the kernel: an instruction's tensors of its one element type T given different types
    (FAULT_MIXED_TYPES, ``detail`` from :func:`mixed_types`)."""
    fault(ctx_words(ctx), FAULT_MIXED_TYPES, np.int64(-1), detail)


# ---------------------------------------------------------------------------------------------------------------
# One element


def apply(op, a, b):  # type: ignore[no-untyped-def]
    """The operation ``op`` on one element (compute type: float32 for half and float, the integer for ints);
    ``b`` is the second source, the scalar, or ignored."""


@overload(apply, jit_options=OVERLOAD_OPTIONS, inline="always")
def _apply(op, a, b):  # type: ignore[no-untyped-def]
    n = op_name(op)
    f = isinstance(a, types.Float)
    if n in ("Add", "Adds"):
        return lambda op, a, b: a + b
    if n == "Sub":
        return lambda op, a, b: a - b
    if n in ("Mul", "Muls"):
        return lambda op, a, b: a * b
    if n == "Div":
        return lambda op, a, b: a / b
    if n in ("Max", "Maxs"):  # np.maximum: NaN propagates, and no branch (a conditional breaks the inlining)
        return lambda op, a, b: np.maximum(a, b)
    if n in ("Min", "Mins"):
        return lambda op, a, b: np.minimum(a, b)
    if n == "Exp":
        return lambda op, a, b: exp_f32(a)
    if n == "Ln":
        return lambda op, a, b: np.log(a)
    if n == "Abs":
        return lambda op, a, b: abs(a)
    if n == "Sqrt":
        return lambda op, a, b: np.sqrt(a)
    if n == "Rsqrt":
        return lambda op, a, b: np.float32(1) / np.sqrt(a)
    if n == "Reciprocal":
        return lambda op, a, b: np.float32(1) / a
    if n == "Relu":
        zero = np.float32(0) if f else 0
        return lambda op, a, b: np.maximum(a, zero)
    if n == "Copy":
        return lambda op, a, b: a
    if n == "Duplicate":
        return lambda op, a, b: b
    return None


def load(dt, x):  # type: ignore[no-untyped-def]
    """An element as stored (half: its bits) to its compute type."""


@overload(load, jit_options=OVERLOAD_OPTIONS, inline="always")
def _load(dt, x):  # type: ignore[no-untyped-def]
    if dt.dt.name == "half":
        return lambda dt, x: u32_as_f32(fp16_widen_bits(x))
    return lambda dt, x: x


def store(dt, v):  # type: ignore[no-untyped-def]
    """A computed value to an element as stored (half: rounded to nearest even, its bits)."""


@overload(store, jit_options=OVERLOAD_OPTIONS, inline="always")
def _store(dt, v):  # type: ignore[no-untyped-def]
    if dt.dt.name == "half":
        return lambda dt, v: np.uint16(fp16_nearest_bits(f32_as_u32(np.float32(v)), False))
    st = dt.dt.storage
    return lambda dt, v: st(v)


def scalar_bits(dt, s):  # type: ignore[no-untyped-def]
    """A scalar argument of element type ``dt`` (a ``const T&`` of the API) as the type stores it: half and
    bfloat16 rounded to nearest even, their bits; float rounded to float; the ints converted as C++ converts."""


@overload(scalar_bits, jit_options=OVERLOAD_OPTIONS, inline="always")
def _scalar_bits(dt, s):  # type: ignore[no-untyped-def]
    if dt.dt.name == "bfloat16_t":  # store keeps bfloat16's bits (the moves' compute type): a scalar is a value
        return lambda dt, s: np.uint16(bf16_nearest_bits(f32_as_u32(np.float32(s)), False))
    return lambda dt, s: store(dt, s)


def element_bits(dt, s):  # type: ignore[no-untyped-def]
    """:func:`scalar_bits` as a uint64 holding the element's bytes (its low ``sizeof(T)`` bytes), for the movers,
    which fill bytes whatever the type."""


@overload(element_bits, jit_options=OVERLOAD_OPTIONS, inline="always")
def _element_bits(dt, s):  # type: ignore[no-untyped-def]
    if dt.dt.name == "float":
        return lambda dt, s: np.uint64(f32_as_u32(np.float32(s)))
    return lambda dt, s: np.uint64(scalar_bits(dt, s))


def scalar_of(dt, s):  # type: ignore[no-untyped-def]
    """A scalar operand in the compute type: :func:`scalar_bits` loaded (half: rounded to half first, as the API
    takes a half scalar; bfloat16, which only the moves take (Duplicate), stays its bits)."""


@overload(scalar_of, jit_options=OVERLOAD_OPTIONS, inline="always")
def _scalar_of(dt, s):  # type: ignore[no-untyped-def]
    return lambda dt, s: load(dt, scalar_bits(dt, s))


# ---------------------------------------------------------------------------------------------------------------
# The walks


def elems(core, t, n):  # type: ignore[no-untyped-def]
    """``n`` elements of LocalTensor ``t`` as stored."""


@overload(elems, jit_options=OVERLOAD_OPTIONS, inline="always")
def _elems_impl(core, t, n):  # type: ignore[no-untyped-def]
    st = t.dtype.dt.storage
    return lambda core, t, n: carray(address_as_pointer(core.base + t.addr, st), n)


def _contiguous(op, dst, a, b, s, n):  # type: ignore[no-untyped-def]
    """``dst[i] = op(a[i], b[i] or s)`` for i < n; b is None for the one-source families. One loop per aliasing
    case, so that each vectorises (LLVM's runtime overlap check would send an in-place loop down its scalar
    path)."""


@overload(_contiguous, jit_options=LOOP_OPTIONS)
def _contiguous_impl(op, dst, a, b, s, n):  # type: ignore[no-untyped-def]
    dt = dst.dtype.dt
    if isinstance(b, types.NoneType):
        def one(op, dst, a, b, s, n):  # type: ignore[no-untyped-def]
            core = core_of(dst)
            d = elems(core, dst, n)
            v = scalar_of(dt, s)
            if a.addr == dst.addr:
                for i in range(n):
                    d[i] = store(dt, apply(op, load(dt, d[i]), v))
            else:
                x = elems(core, a, n)
                for i in range(n):
                    d[i] = store(dt, apply(op, load(dt, x[i]), v))
        return one

    def two(op, dst, a, b, s, n):  # type: ignore[no-untyped-def]
        core = core_of(dst)
        d = elems(core, dst, n)
        if a.addr == dst.addr and b.addr == dst.addr:
            for i in range(n):
                d[i] = store(dt, apply(op, load(dt, d[i]), load(dt, d[i])))
        elif a.addr == dst.addr:
            y = elems(core, b, n)
            for i in range(n):
                d[i] = store(dt, apply(op, load(dt, d[i]), load(dt, y[i])))
        elif b.addr == dst.addr:
            x = elems(core, a, n)
            for i in range(n):
                d[i] = store(dt, apply(op, load(dt, x[i]), load(dt, d[i])))
        else:
            x, y = elems(core, a, n), elems(core, b, n)
            for i in range(n):
                d[i] = store(dt, apply(op, load(dt, x[i]), load(dt, y[i])))
    return two


@njit(cache=True)
def prefix_lanes(lo, hi, per):
    """How many lanes the mask (lo, hi) turns on for ``per`` lanes a repeat if they are the first ones (b32's
    64 take ``lo`` alone), else 0."""
    ones = np.uint64(0xFFFFFFFFFFFFFFFF)
    if lo == ones:
        if per <= 64 or hi == ones:
            return np.int64(per)
        first, word = np.int64(64), hi
    else:
        first, word = np.int64(0), lo
        if per > 64 and hi != 0:
            return np.int64(0)
    if word & (word + np.uint64(1)):  # not a run of ones from bit 0
        return np.int64(0)
    k = first
    while word:
        word >>= np.uint64(1)
        k += 1
    return k


@njit(cache=True, inline="always")
def lane_on(lo, hi, lane):
    """Whether lane ``lane`` (0 to 127) is on in the 128-bit mask (``lo``: lanes 0 to 63, ``hi``: 64 to 127)."""
    return ((lo >> np.uint64(lane)) & np.uint64(1)) != 0 if lane < 64 else ((hi >> np.uint64(lane - 64))
                                                                              & np.uint64(1)) != 0


def _strided(op, dst, a, b, s, lo, hi, repeat, ds, dr, as_, ar, bs, br, tail):  # type: ignore[no-untyped-def]
    """The level-0 walk: ``repeat`` repeats of 8 blocks, lanes selected by the 128-bit mask (lo, hi); block and
    repeat strides in 32 B blocks for dst, a and b. ``tail`` > 0: the last repeat has only ``tail`` lanes
    (counter mode)."""


@overload(_strided, jit_options=LOOP_OPTIONS)
def _strided_impl(op, dst, a, b, s, lo, hi, repeat, ds, dr, as_, ar, bs, br, tail):  # type: ignore[no-untyped-def]
    dt = dst.dtype.dt
    st, sz = dt.storage, dt.size
    epb = 32 // sz
    two = not isinstance(b, types.NoneType)

    def walk(op, dst, a, b, s, lo, hi, repeat, ds, dr, as_, ar, bs, br, tail):  # type: ignore[no-untyped-def]
        core = core_of(dst)
        v = scalar_of(dt, s)
        k = prefix_lanes(lo, hi, 8 * epb)
        if k > 0 and ds == 1 and as_ == 1 and (not two or bs == 1):  # each repeat's lanes in one run: the
            run = k * sz  # same elements in the same order, in a loop that vectorises
            if dr * 32 == run and ar * 32 == run and (not two or br * 32 == run):  # each run right after the
                _contiguous(op, dst, a, b, s, repeat * k if tail <= 0 else (repeat - 1) * k + min(k, tail))
                return  # last: one loop does them all
            for r in range(repeat):
                m = min(k, tail) if (tail > 0 and r == repeat - 1) else k
                d = carray(address_as_pointer(core.base + dst.addr + r * dr * 32, st), m)
                x = carray(address_as_pointer(core.base + a.addr + r * ar * 32, st), m)
                if two:
                    y = carray(address_as_pointer(core.base + b.addr + r * br * 32, st), m)
                    for e in range(m):
                        d[e] = store(dt, apply(op, load(dt, x[e]), load(dt, y[e])))
                else:
                    for e in range(m):
                        d[e] = store(dt, apply(op, load(dt, x[e]), v))
            return
        for r in range(repeat):
            last = tail if (tail > 0 and r == repeat - 1) else 8 * epb
            for blk in range(8):
                do = core.base + dst.addr + (r * dr + blk * ds) * 32
                ao = core.base + a.addr + (r * ar + blk * as_) * 32
                d = carray(address_as_pointer(do, st), epb)
                x = carray(address_as_pointer(ao, st), epb)
                if two:
                    y = carray(address_as_pointer(core.base + b.addr + (r * br + blk * bs) * 32, st), epb)
                for e in range(epb):
                    lane = blk * epb + e
                    if lane < last and lane_on(lo, hi, lane):
                        if two:
                            d[e] = store(dt, apply(op, load(dt, x[e]), load(dt, y[e])))
                        else:
                            d[e] = store(dt, apply(op, load(dt, x[e]), v))
    return walk


@njit(cache=True)
def mask_bits(mask, per):
    """A contiguous mask (a count) as its 128-bit pattern, clamped to the lanes of a repeat."""
    m = min(max(np.int64(mask), 0), per)
    lo = np.uint64(0xFFFFFFFFFFFFFFFF) if m >= 64 else (np.uint64(1) << np.uint64(m)) - np.uint64(1)
    hi = np.uint64(0)
    if m > 64:
        hi = np.uint64(0xFFFFFFFFFFFFFFFF) if m >= 128 else (np.uint64(1) << np.uint64(m - 64)) - np.uint64(1)
    return lo, hi


@njit(cache=True, inline="always")
def reset_mask(w):
    """The mask register all ones, in normal mode (context block ``w``): what a count-form call leaves behind (its
    SetMaskNorm and SetVectorMask(~0, ~0))."""
    w[X_MASK_LO] = -1
    w[X_MASK_HI] = -1
    w[X_COUNTER_MODE] = 0


# A counter-mode count past any UB (the bounds checks report it), kept small enough for the spans' arithmetic
_COUNT_CAP = np.uint64(1 << 40)


@njit(cache=True, inline="always")
def register_lanes(w, repeat, per):
    """The lanes of a level-0 call as the mask register (context block ``w``) gives them for ``per`` lanes a
    repeat: (lo, hi, repeats, the lanes of a last partial repeat, 0 for none). Normal mode: the register's 128-bit
    pattern in each of ``repeat`` repeats. Counter mode (SetMaskCount): its low word is the total count
    (``掩码.md``: only the low 64 bits count), whose repeats replace ``repeat``, every lane on but the last
    repeat's past the count."""
    if w[X_COUNTER_MODE]:
        total = np.int64(min(np.uint64(w[X_MASK_LO]), _COUNT_CAP))
        r = (total + per - 1) // per
        tail = total - (r - 1) * per if total % per else np.int64(0)
        return np.uint64(0xFFFFFFFFFFFFFFFF), np.uint64(0xFFFFFFFFFFFFFFFF), r, tail
    return np.uint64(w[X_MASK_LO]), np.uint64(w[X_MASK_HI]), np.int64(repeat), np.int64(0)


def level0_mask(ctx, mask, repeat, per):  # type: ignore[no-untyped-def]
    """The lanes of a level-0 call for ``per`` lanes a repeat (:func:`register_lanes`), from its ``mask``
    argument: a count or a pair ``(mask[0], mask[1])`` of 64-bit patterns is first written to the mask register
    as the API's SetMask writes it (the pair as (low, high) words, a count as a run of that many bits from bit 0,
    128 at most) and stays there; :data:`MASK_PLACEHOLDER` reads the register as it is. In counter mode the
    register's low word is then the total count: ``mask = (130, 0)`` computes 130 elements whatever
    ``repeat``, as ``SetVectorMask(130)`` and the placeholder do (and a count ``mask`` of 8 counts the 255 its
    bits make, as on the NPU: 掩码.md gives counter mode the pair or the placeholder). ``ctx`` is the operands'
    context block."""


@overload(level0_mask, jit_options=OVERLOAD_OPTIONS)
def _level0_mask(ctx, mask, repeat, per):  # type: ignore[no-untyped-def]
    if isinstance(mask, MarkerType):
        return lambda ctx, mask, repeat, per: register_lanes(ctx_words(ctx), repeat, per)
    if isinstance(mask, types.BaseTuple):
        def pattern(ctx, mask, repeat, per):  # type: ignore[no-untyped-def]
            w = ctx_words(ctx)
            w[X_MASK_LO] = np.int64(np.uint64(mask[0]))
            w[X_MASK_HI] = np.int64(np.uint64(mask[1]))
            return register_lanes(w, repeat, per)
        return pattern

    def count(ctx, mask, repeat, per):  # type: ignore[no-untyped-def]
        w = ctx_words(ctx)
        lo, hi = mask_bits(mask, 128)
        w[X_MASK_LO] = np.int64(lo)
        w[X_MASK_HI] = np.int64(hi)
        return register_lanes(w, repeat, per)
    return count


@checked_only(True)
def params_ok(core, t, repeat, blk):
    """Checked mode: repeat_times in [0, 255] and a dst block stride other than 0 (undefined on the NPU)."""
    if not core.checks:
        return True
    if repeat > 255 or repeat < 0 or blk == 0:
        report(core, ERR_VEC_PARAM, t.buf, t.addr - plan_of(core)[t.buf, 0], repeat, blk)
        return False
    return True


@njit(cache=True)
def last_lane(lo, hi, tail, per):
    """The last lane a level-0 call's last repeat computes: the mask's highest bit among the ``per`` lanes, or the
    counter mode's ``tail`` - 1 (-1: none)."""
    if tail > 0:
        return tail - 1
    for lane in range(min(per, 128) - 1, -1, -1):
        if lane_on(lo, hi, lane):
            return np.int64(lane)
    return np.int64(-1)


@njit(cache=True, inline="always")
def mask_span(repeat, blk, rep, lane, tail, sz, per):
    """Bytes from an operand's start to the end of the last element a level-0 walk reads or writes: the last
    repeat's ``lane`` (:func:`last_lane`), or in counter mode a full repeat before a short last one, whichever ends
    later (as CPU-debug's CalculateVectorMaxOffset bounds an access: not the whole last repeat); -1, which the
    bounds checks refuse, for a negative stride (the walk would run backwards: Ascend C's strides are unsigned)."""
    if repeat <= 0 or lane < 0:
        return np.int64(0)
    if blk < 0 or rep < 0:
        return np.int64(-1)
    epb = 32 // sz
    end = ((repeat - 1) * rep + lane // epb * blk) * 32 + (lane % epb + 1) * sz
    if tail > 0 and repeat > 1:
        end = max(end, ((repeat - 2) * rep + (per - 1) // epb * blk) * 32 + ((per - 1) % epb + 1) * sz)
    return end


@njit(cache=True, inline="always")
def span(repeat, blk, rep):
    """Bytes from an operand's start to the end of the last block a level-0 walk touches (-1 for a negative stride,
    as :func:`mask_span`)."""
    if blk < 0 or rep < 0:
        return np.int64(-1) if repeat > 0 else np.int64(0)
    return ((repeat - 1) * rep + 7 * blk) * 32 + 32 if repeat > 0 else 0


def vec_op(op, dst, a, b, s, args):  # type: ignore[no-untyped-def]
    """One instruction of the element-wise families: ``args`` is (count,) or (mask, repeat_times, params)."""


@overload(vec_op, jit_options=INLINE_OPTIONS)
def _vec_op(op, dst, a, b, s, args):  # type: ignore[no-untyped-def]
    name = op_name(op)
    cls, allowed = OPS[name]
    dt = dst.dtype.dt
    two = not isinstance(b, types.NoneType)
    has_src = not isinstance(a, types.NoneType)
    mixed = mixed_types(name, ("dst", dst), *([("src0" if two else "src", a)] if has_src else []),
                        *([("src1", b)] if two else []))
    if mixed is not None:
        return lambda op, dst, a, b, s, args: mixed_fault(dst.ctx, mixed)
    if dt.name not in allowed:  # a run-time stop, not a compile error, so that a branch not taken may hold it
        code = op_code(name) * 100 + [d.name for d in ALL].index(dt.name)
        return lambda op, dst, a, b, s, args: fault(ctx_words(dst.ctx), FAULT_DTYPE, np.int64(-1), code)
    sz = dt.size
    per = 256 // sz
    code = op_code(name)
    kind = vec_kind(name, sz)
    # the one exception to the overlap rule's across-repeat part (通用地址重叠约束): src1 of these, with a repeat
    # stride of dst or src1 of 0
    accumulates = name in ("Add", "Sub", "Mul", "Max", "Min") and dt.name in ("half", "int32_t", "float")
    first = SRC0 if two else SRC
    if len(args) == 1:  # the count form
        def count_form(op, dst, a, b, s, args):  # type: ignore[no-untyped-def]
            n = np.int64(args[0])
            core = core_of(dst)
            nb = n * sz
            reset_mask(ctx_words(dst.ctx))
            if n <= 0:
                return
            if has_src:
                if two:
                    if not (vec_ok(core, plan_tensor(a), nb, code) and vec_ok(core, plan_tensor(b), nb, code)
                            and vec_ok(core, plan_tensor(dst), nb, code)
                            and count_ok(core, code, SRC0, SAME, plan_tensor(dst), sz, plan_tensor(a), sz, n)
                            and count_ok(core, code, SRC1, SAME, plan_tensor(dst), sz, plan_tensor(b), sz, n)):
                        return
                    flow2(core, plan_tensor(dst), plan_tensor(a), plan_tensor(b), nb)
                    hz_instruction(core, LANE_VECTOR, code, plan_tensor(dst), nb, plan_tensor(a), nb, plan_tensor(b),
                                   nb)
                else:
                    if not (vec_ok(core, plan_tensor(a), nb, code) and vec_ok(core, plan_tensor(dst), nb, code)
                            and count_ok(core, code, SRC, SAME, plan_tensor(dst), sz, plan_tensor(a), sz, n)):
                        return
                    flow1(core, plan_tensor(dst), plan_tensor(a), nb)
                    hz_instruction(core, LANE_VECTOR, code, plan_tensor(dst), nb, plan_tensor(a), nb, plan_tensor(a),
                                   0)
                _contiguous(op, dst, a, b, s, n)
                count_vector(core, cls, kind, nb, plan_tensor(dst), plan_tensor(a), plan_tensor(b if two else a))
            else:
                if not vec_out(core, plan_tensor(dst), nb, code):
                    return
                hz_instruction(core, LANE_VECTOR, code, plan_tensor(dst), nb, plan_tensor(dst), 0, plan_tensor(dst), 0)
                _contiguous(op, dst, dst, None, s, n)
                count_vector(core, cls, kind, nb, plan_tensor(dst), plan_tensor(dst), plan_tensor(dst))
        return count_form
    if len(args) != 3:
        return None
    params = args[2]
    unary_params = isinstance(params, types.BaseNamedTuple) and params.instance_class in (UnaryRepeatParams,
                                                                                          CopyRepeatParams)
    dup_params = isinstance(params, types.BaseTuple) and not isinstance(params, types.BaseNamedTuple)

    def level0(op, dst, a, b, s, args):  # type: ignore[no-untyped-def]
        mask, given, params = args
        core = core_of(dst)
        lo, hi, repeat, tail = level0_mask(dst.ctx, mask, given, per)
        if dup_params:  # Duplicate: (dst_blk_stride, dst_rep_stride)
            ds, dr = np.int64(params[0]), np.int64(params[1])
            as_, ar, bs, br = ds, dr, ds, dr
        elif unary_params:
            ds, as_, dr, ar = (np.int64(params[0]), np.int64(params[1]), np.int64(params[2]),  # Copy's alike
                               np.int64(params[3]))
            bs, br = as_, ar
        else:
            ds, as_, bs = (np.int64(params.dst_blk_stride), np.int64(params.src0_blk_stride),
                           np.int64(params.src1_blk_stride))
            dr, ar, br = (np.int64(params.dst_rep_stride), np.int64(params.src0_rep_stride),
                          np.int64(params.src1_rep_stride))
        if not params_ok(core, plan_tensor(dst), np.int64(given), ds):  # counter mode ignores repeat_times
            return
        if repeat <= 0 or (lo == 0 and hi == 0):
            return  # a NOP on A2: dst is not written
        pd = plan_tensor(dst)
        src = a if has_src else dst
        lane = last_lane(lo, hi, tail, per)
        a_end = mask_span(repeat, as_, ar, lane, tail, sz, per) if has_src else np.int64(0)
        b_end = mask_span(repeat, bs, br, lane, tail, sz, per) if two else np.int64(0)
        d_end = mask_span(repeat, ds, dr, lane, tail, sz, per)
        if has_src and not vec_ok(core, plan_tensor(a), a_end, code):
            return
        if two and not vec_ok(core, plan_tensor(b), b_end, code):
            return
        # the shadow: the strided walk's span counts as written (its lanes' own states are not followed yet)
        if not vec_out(core, pd, d_end, code):
            return
        if has_src and not walk_ok(core, code, first, SAME, pd, sz, ds, dr, plan_tensor(a), sz, as_, ar, lo, hi,
                                   repeat, tail, per):
            return
        if two and not walk_ok(core, code, SRC1, ACCUMULATE if accumulates and (br == 0 or dr == 0) else SAME, pd,
                               sz, ds, dr, plan_tensor(b), sz, bs, br, lo, hi, repeat, tail, per):
            return
        hz_level0(core, code, pd, ds, dr, d_end, plan_tensor(src), as_, ar, a_end, plan_tensor(b if two else src),
                  bs, br, b_end, repeat)
        _strided(op, dst, src, b, s, lo, hi, repeat, ds, dr, as_, ar, bs, br, tail)
        count_vector(core, cls, kind, repeat * 256, pd, plan_tensor(src), plan_tensor(b if two else src))
    return level0


# ---------------------------------------------------------------------------------------------------------------
# The instructions, by family: each a Python stub with an overload, so that a kernel's call selects its form (count
# or level-0) by its arguments' types when it compiles.

_FORMS = {  # family -> (the call's operands before the form's arguments, how they map onto vec_op, the doc)
    "binary": ("dst, src0, src1", "count or mask, repeat_times, BinaryRepeatParams", "dst = src0 {op} src1"),
    "scalar": ("dst, src, scalar", "count or mask, repeat_times, UnaryRepeatParams", "dst = src {op} scalar"),
    "unary": ("dst, src", "count or mask, repeat_times, UnaryRepeatParams", "dst = {op}(src)"),
    "fill": ("dst, scalar", "count or mask, repeat_times, dst_blk_stride, dst_rep_stride", "dst = scalar"),
}


def _instruction(name: str, family: str, attr: str):  # type: ignore[no-untyped-def]
    op = marker(name)
    operands, form, what = _FORMS[family]

    def stub(dst, *args):  # type: ignore[no-untyped-def]
        raise TypeError(f"{name} is device code: call it from a kernel")

    @overload(stub, jit_options=INLINE_OPTIONS)
    def _typed(dst, *args):  # type: ignore[no-untyped-def]
        if family == "binary":
            return lambda dst, *args: vec_op(op, dst, args[0], args[1], 0, args[2:])
        if family == "scalar":
            return lambda dst, *args: vec_op(op, dst, args[0], None, args[1], args[2:])
        if family == "unary":
            return lambda dst, *args: vec_op(op, dst, args[0], None, 0, args[1:])
        if len(args) == 5:  # Duplicate's level-0 form gives its two strides apart
            return lambda dst, *args: vec_op(op, dst, None, None, args[0], (args[1], args[2], (args[3], args[4])))
        return lambda dst, *args: vec_op(op, dst, None, None, args[0], args[1:])

    stub.__name__ = stub.__qualname__ = attr
    stub.__doc__ = f"{name}({operands}, {form}): {what.format(op=name)}, element-wise."
    return stub


add = _instruction("Add", "binary", "add")
sub = _instruction("Sub", "binary", "sub")
mul = _instruction("Mul", "binary", "mul")
div = _instruction("Div", "binary", "div")
max_ = _instruction("Max", "binary", "max_")
min_ = _instruction("Min", "binary", "min_")
adds = _instruction("Adds", "scalar", "adds")
muls = _instruction("Muls", "scalar", "muls")
maxs = _instruction("Maxs", "scalar", "maxs")
mins = _instruction("Mins", "scalar", "mins")
exp = _instruction("Exp", "unary", "exp")
ln = _instruction("Ln", "unary", "ln")
abs_ = _instruction("Abs", "unary", "abs_")
sqrt = _instruction("Sqrt", "unary", "sqrt")
rsqrt = _instruction("Rsqrt", "unary", "rsqrt")
reciprocal = _instruction("Reciprocal", "unary", "reciprocal")
relu = _instruction("Relu", "unary", "relu")
duplicate = _instruction("Duplicate", "fill", "duplicate")
copy = _instruction("Copy", "unary", "copy")
copy.__doc__ = ("Copy(dst, src, mask, repeat_times, CopyRepeatParams(dst_stride, src_stride, dst_repeat_size, "
                "src_repeat_size)): dst = src over the lanes the mask selects, UB to UB through the vector unit "
                "(vcopy; strides in 32 B blocks, as UnaryRepeatParams'), or Copy(dst, src, count).")


def set_vector_mask(ctx, *mask):  # type: ignore[no-untyped-def]
    """SetVectorMask(maskHigh, maskLow) or SetVectorMask(len): the mask register that level-0 calls with
    :data:`MASK_PLACEHOLDER` read (in counter mode, ``len`` is the total count)."""


@overload(set_vector_mask, jit_options=OVERLOAD_OPTIONS)
def _set_vector_mask(ctx, *mask):  # type: ignore[no-untyped-def]
    if not isinstance(ctx, KernelContextType):
        return None
    if len(mask) == 2:
        def set2(ctx, *mask):  # type: ignore[no-untyped-def]
            w = ctx_words(ctx.ctx)
            w[X_MASK_HI] = np.int64(np.uint64(mask[0]))
            w[X_MASK_LO] = np.int64(np.uint64(mask[1]))
        return set2

    def set1(ctx, *mask):  # type: ignore[no-untyped-def]
        w = ctx_words(ctx.ctx)
        n = np.int64(mask[0])
        if w[X_COUNTER_MODE]:
            w[X_MASK_LO] = n
            w[X_MASK_HI] = 0
        else:
            lo, hi = mask_bits(n, 128)
            w[X_MASK_LO] = np.int64(lo)
            w[X_MASK_HI] = np.int64(hi)
    return set1


@njit(cache=True)
def set_mask_count(ctx):
    """SetMaskCount: level-0 calls with the mask placeholder take the mask register as a total count."""
    ctx_words(ctx.ctx)[X_COUNTER_MODE] = 1


@njit(cache=True)
def set_mask_norm(ctx):
    """SetMaskNorm: the mask register is a lane pattern again."""
    ctx_words(ctx.ctx)[X_COUNTER_MODE] = 0
