"""Compare, CompareScalar and Select (``MV/比较与选择/Compare.md``, ``Compares.md``, ``Select.md``; the A2 code:
``impl/basic_api/dav_c220/kernel_operator_vec_cmp_impl.h``, ``kernel_operator_vec_cmpsel_impl.h``).

**Compare** ``compare(dst, src0, src1, cmp_mode, count)`` and **CompareScalar** (Compares, formerly CompareScalar)
``compare_scalar(dst, src, scalar, cmp_mode, count)`` write a bit mask: bit i (bit i % 8 of byte i / 8, LSB first)
is ``src0[i] <cmp_mode> src1[i]`` (or the scalar, which has src's type), ``cmp_mode`` a :class:`CMPMODE`. Types
(A2): half and float in every mode, int32 only with EQ; dst uint8 (Compare also int8). The level-0 forms
``compare(dst, src0, src1, cmp_mode, mask, repeat_times, BinaryRepeatParams(...))`` and ``compare_scalar(dst, src,
scalar, cmp_mode, mask, repeat_times, UnaryRepeatParams(...))`` walk the sources by their strides and write each
repeat's 256 / sizeof(T) bits packed after the last (dst strides unused); **the mask does nothing on A2** (the impl
drops it: "保留参数，设置无效"), every lane is compared. **The count form compares only whole 256 B repeats**:
count * sizeof(T) / 256 of them, in instructions of at most 252, the rest of dst unwritten (checked mode reports a
count that leaves a rest: Compare.md requires a multiple of 256 B). NaN compares as IEEE 754 says (the docs are
silent; the choice): unordered, so only NE holds; -0 equals +0.

**Select** ``select(dst, sel_mask, src0, src1, sel_mode, count)``: ``dst[i] = src0[i]`` where the selection bit is
1, else ``src1[i]`` (a tensor for sel modes 0 and 2, a scalar of dst's type for mode 1), T half or float, sel_mask
uint8 / uint16 / uint32 (its bits LSB first, whatever its type). A :class:`SELMODE`:

- VSEL_CMPMASK_SPR (0): **every repeat reuses the same first 256 / sizeof(T) bits** of sel_mask (the count form
  too: element i takes bit i % (256 / sizeof(T)));
- VSEL_TENSOR_SCALAR_MODE (1), VSEL_TENSOR_TENSOR_MODE (2): bit i for element i, consumed repeat after repeat.

The level-0 form ``select(dst, sel_mask, src0, src1, sel_mode, mask, repeat_times, BinaryRepeatParams(...))``
filters by the mask too (masked lanes keep dst). **Modes 1 and 2 write the top 8 KiB of UB** (TMP_UB_OFFSET, the
API's scratch: the scalar duplicated 32 times, or 32 copies of sel_mask's address) as A2's impl does before its
vsel, so a plan reaching into it is clobbered; checked mode reports it. The forms that take no mask and read the
CMPMASK register set by SetCmpMask are not emulated (tilesim has no CMPMASK register).

One piece of code per family (:func:`cmp_op`, :func:`sel_op`) checks the operands (checked mode: 32 B alignment,
bounds, repeat_times <= 255, Select's zero dst block stride, the overlap rule of :mod:`tilesim.machine.overlap`:
Compare's bits apart from its sources, as its silent page has it, Select's dst and sources by the general rule and
its selMask apart), walks, counts (Compare and Select: ``vec_binary``,
CompareScalar: ``vec_scalar``, in 256 B repeats of the sources) and keeps the UB shadow: Compare's mask bytes count
as written (the sources' state is not followed into the bits), Select's count form flows its sources' state, its
level-0 form marks the span it walks written. A type or mode outside the A2 table stops the kernel when it runs.
"""

from __future__ import annotations

from enum import IntEnum

import numpy as np
from numba import carray, types
from numba.extending import overload

from tilesim.core.pipes import LANE_VECTOR
from tilesim.core.records import (
    ERR_API_RULE,
    RULE_CMP_COUNT,
    RULE_SCRATCH,
    VEC_BINARY,
    VEC_SCALAR,
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
from tilesim.jit.intrinsics import address_as_pointer
from tilesim.machine.convert import api_fault, bad_type, type_fault, type_index
from tilesim.machine.hazard import hz_access, hz_instruction, op_code
from tilesim.machine.overlap import NONE, SAME, SEL_MASK, SRC, SRC0, SRC1, apart, count_ok, results_ok, walk_ok
from tilesim.machine.tensor import LocalTensorType, core_of, ctx_words, plan_tensor
from tilesim.machine.vector import (
    LOOP_OPTIONS,
    BinaryRepeatParams,
    UnaryRepeatParams,
    lane_on,
    level0_mask,
    load,
    marker,
    mixed_fault,
    mixed_types,
    op_name,
    params_ok,
    reset_mask,
    scalar_of,
    span,
    store,
)


class CMPMODE(IntEnum):
    """CMPMODE: the test ``src0 <mode> src1``."""

    LT = 0
    GT = 1
    EQ = 2
    LE = 3
    GE = 4
    NE = 5


class SELMODE(IntEnum):
    """SELMODE: where Select's bits come from, and what src1 is."""

    VSEL_CMPMASK_SPR = 0
    VSEL_TENSOR_SCALAR_MODE = 1
    VSEL_TENSOR_TENSOR_MODE = 2


_COMPARE, _COMPARE_SCALAR = marker("Compare"), marker("CompareScalar")
_SELECT = op_code("Select")
_ALL_LANES = np.uint64(0xFFFFFFFFFFFFFFFF)
SCRATCH_BYTES = 8192  # the API scratch at the top of UB (TMP_UB_OFFSET = UB - 8 KiB: 184 KiB on A2)




# ---------------------------------------------------------------------------------------------------------------
# Compare, CompareScalar


@njit(cache=True)
def _cmp_mode(ctx, mode, ints, op, t, u):
    """CMPMODE ``mode`` as an int if the types take it (int32: EQ only), else stop the kernel."""
    m = np.int64(mode)
    if m < 0 or m > 5 or (ints and m != CMPMODE.EQ):
        api_fault(ctx, op, m, t, u)
    return m


@njit(cache=True, inline="always")
def _holds(m, x, y):
    """``x <m> y``, IEEE 754's comparisons (NaN is unordered: only NE holds)."""
    if m == 0:
        return x < y
    if m == 1:
        return x > y
    if m == 2:
        return x == y
    if m == 3:
        return x <= y
    if m == 4:
        return x >= y
    return x != y


def _compare_walk(op, dst, a, b, s, m, repeat, as_, ar, bs, br):  # type: ignore[no-untyped-def]
    """``repeat`` repeats of 256 / sizeof(T) lanes of ``a`` against ``b`` (Compare) or the scalar ``s``
    (CompareScalar), each repeat's bits packed after the last into dst."""


@overload(_compare_walk, jit_options=LOOP_OPTIONS)
def _compare_walk_impl(op, dst, a, b, s, m, repeat, as_, ar, bs, br):  # type: ignore[no-untyped-def]
    t = a.dtype.dt
    sz, st = t.size, t.storage
    epb, nb = 32 // sz, 256 // sz // 8
    two = op_name(op) == "Compare"

    def walk(op, dst, a, b, s, m, repeat, as_, ar, bs, br):  # type: ignore[no-untyped-def]
        core = core_of(dst)
        v = scalar_of(t, s)
        out = carray(address_as_pointer(core.base + dst.addr, np.uint8), repeat * nb)
        for r in range(repeat):
            for j in range(nb):
                bits = 0
                for q in range(8):
                    k = j * 8 + q
                    x = carray(address_as_pointer(core.base + a.addr + (r * ar + k // epb * as_) * 32
                                                  + k % epb * sz, st), 1)
                    if two:
                        v = load(t, carray(address_as_pointer(core.base + b.addr + (r * br + k // epb * bs) * 32
                                                              + k % epb * sz, st), 1)[0])
                    if _holds(m, load(t, x[0]), v):
                        bits |= 1 << q
                out[r * nb + j] = np.uint8(bits)
    return walk


@checked_only(None)
def _whole_repeats(core, op, src, nbytes):
    """Checked mode: a count form over ``nbytes`` of source that leaves a rest past its last whole 256 B."""
    if core.checks and nbytes % 256:
        report(core, ERR_API_RULE, src.buf, src.addr - plan_of(core)[src.buf, 0], nbytes,
               RULE_CMP_COUNT | (np.int64(op) << 8))


def _compare_one(op, dst, a, b, s, m, repeat, as_, ar, bs, br):  # type: ignore[no-untyped-def]
    """One Compare / CompareScalar instruction of ``repeat`` repeats (``b`` is ``a`` for CompareScalar)."""


@overload(_compare_one, jit_options=OVERLOAD_OPTIONS)
def _compare_one_impl(op, dst, a, b, s, m, repeat, as_, ar, bs, br):  # type: ignore[no-untyped-def]
    name = op_name(op)
    code, two = op_code(name), name == "Compare"
    cls = VEC_BINARY if two else VEC_SCALAR
    sz = a.dtype.dt.size
    kind = vec_kind(name, sz)
    nb = 256 // sz // 8
    per = 256 // sz

    def one(op, dst, a, b, s, m, repeat, as_, ar, bs, br):  # type: ignore[no-untyped-def]
        core = core_of(dst)
        pd, pa, pb = plan_tensor(dst), plan_tensor(a), plan_tensor(b)
        if not params_ok(core, pd, repeat, 1):  # Compare's dst strides are not used
            return
        if repeat <= 0:
            return  # a NOP on A2: dst is not written
        a_span, b_span = span(repeat, as_, ar), span(repeat, bs, br) if two else 0
        if not (vec_ok(core, pa, a_span, code) and vec_ok(core, pb, b_span, code)
                and vec_out(core, pd, repeat * nb, code)):
            return
        # Compare.md and Compares.md state no overlap rule: none is allowed (通用地址重叠约束)
        if not (results_ok(core, code, SRC0 if two else SRC, NONE, pd, nb, nb, pa, sz, as_, ar, _ALL_LANES,
                           _ALL_LANES, repeat, np.int64(0), per)
                and (not two or results_ok(core, code, SRC1, NONE, pd, nb, nb, pb, sz, bs, br, _ALL_LANES,
                                           _ALL_LANES, repeat, np.int64(0), per))):
            return
        hz_instruction(core, LANE_VECTOR, code, pd, repeat * nb, pa, a_span, pb, b_span)
        _compare_walk(op, dst, a, b, s, m, repeat, as_, ar, bs, br)
        count_vector(core, cls, kind, repeat * 256, pd, pa, pb)
    return one


def cmp_op(op, dst, a, b, s, mode, args):  # type: ignore[no-untyped-def]
    """One Compare or CompareScalar call: ``args`` is (count,) or (mask, repeat_times, params); ``b`` is ``a`` for
    CompareScalar, whose scalar is ``s``."""


@overload(cmp_op, jit_options=INLINE_OPTIONS)
def _cmp_op(op, dst, a, b, s, mode, args):  # type: ignore[no-untyped-def]
    name = op_name(op)
    code, two = op_code(name), name == "Compare"
    t, u = a.dtype.dt, dst.dtype.dt
    ti, ui = type_index(t), type_index(u)
    mixed = mixed_types(name, ("src0", a), ("src1", b))
    if mixed is not None:
        return lambda op, dst, a, b, s, mode, args: mixed_fault(dst.ctx, mixed)
    bad = bad_type((t, ("half", "float", "int32_t")), (u, ("uint8_t", "int8_t") if two else ("uint8_t",)))
    if bad is not None:  # a run-time stop, not a compile error, so that a branch not taken may hold it
        code_t = code * 100 + bad
        return lambda op, dst, a, b, s, mode, args: type_fault(dst.ctx, code_t)
    ints = t.name == "int32_t"
    sz = t.size
    per = 256 // sz
    if len(args) == 1:
        def count_form(op, dst, a, b, s, mode, args):  # type: ignore[no-untyped-def]
            m = _cmp_mode(dst.ctx, mode, ints, code, ti, ui)
            n = np.int64(args[0])
            if n <= 0:
                return
            _whole_repeats(core_of(dst), code, plan_tensor(a), n * sz)
            full = n // per
            for c in range(0, full, 252):  # the impl's instructions: 252 repeats each
                _compare_one(op, dst[c * per // 8], a[c * per], b[c * per], s, m, min(252, full - c), 1, 8, 1, 8)
        return count_form
    params = UnaryRepeatParams if name == "CompareScalar" else BinaryRepeatParams
    if len(args) != 3 or not (isinstance(args[2], types.BaseNamedTuple) and args[2].instance_class is params):
        return None

    def level0(op, dst, a, b, s, mode, args):  # type: ignore[no-untyped-def]
        m = _cmp_mode(dst.ctx, mode, ints, code, ti, ui)
        p = args[2]
        if two:
            _compare_one(op, dst, a, b, s, m, np.int64(args[1]), np.int64(p.src0_blk_stride),
                         np.int64(p.src0_rep_stride), np.int64(p.src1_blk_stride), np.int64(p.src1_rep_stride))
        else:
            _compare_one(op, dst, a, b, s, m, np.int64(args[1]), np.int64(p.src_blk_stride),
                         np.int64(p.src_rep_stride), np.int64(p.src_blk_stride), np.int64(p.src_rep_stride))
    return level0


def compare(dst, src0, src1, cmp_mode, *args):  # type: ignore[no-untyped-def]
    """Compare(dst, src0, src1, cmpMode, count) or Compare(dst, src0, src1, cmpMode, mask, repeatTime,
    BinaryRepeatParams): bit i of dst is ``src0[i] <cmp_mode> src1[i]``."""
    raise TypeError("Compare is device code: call it from a kernel")


@overload(compare, jit_options=INLINE_OPTIONS)
def _compare(dst, src0, src1, cmp_mode, *args):  # type: ignore[no-untyped-def]
    return lambda dst, src0, src1, cmp_mode, *args: cmp_op(_COMPARE, dst, src0, src1, 0, cmp_mode, args)


def compare_scalar(dst, src, scalar, cmp_mode, *args):  # type: ignore[no-untyped-def]
    """Compares (CompareScalar)(dst, src, scalar, cmpMode, count) or (..., mask, repeatTime, UnaryRepeatParams):
    bit i of dst is ``src[i] <cmp_mode> scalar``."""
    raise TypeError("CompareScalar is device code: call it from a kernel")


@overload(compare_scalar, jit_options=INLINE_OPTIONS)
def _compare_scalar(dst, src, scalar, cmp_mode, *args):  # type: ignore[no-untyped-def]
    return lambda dst, src, scalar, cmp_mode, *args: cmp_op(_COMPARE_SCALAR, dst, src, src, scalar, cmp_mode, args)


# ---------------------------------------------------------------------------------------------------------------
# Select


@njit(cache=True)
def _sel_mode(ctx, mode, scalar, t, u):
    """SELMODE ``mode`` as an int if it fits src1 (a scalar: mode 1; a tensor: modes 0 and 2), else stop the
    kernel."""
    m = np.int64(mode)
    if (m != 1) if scalar else (m != 0 and m != 2):
        api_fault(ctx, _SELECT, m, t, u)
    return m


@checked_only(None)
def _scratch_written(core, at, nbytes):
    """Checked mode: Select has written ``[at, at + nbytes)``, the API's scratch: a plan buffer lying there is
    reported, and the write is recorded for the pipe-hazard check."""
    if not core.checks:
        return
    p = plan_of(core)
    buf = np.int64(-1)
    for b in range(core.plan_rows):
        if p[b, 0] < at + nbytes and at < p[b, 0] + p[b, 1] * p[b, 2]:
            report(core, ERR_API_RULE, b, at - p[b, 0], nbytes, RULE_SCRATCH | (np.int64(_SELECT) << 8))
            buf = b
            break
    hz_access(core, LANE_VECTOR, _SELECT, buf, at, nbytes, True, False)


def _select_walk(dst, sel, a, b, m, lo, hi, repeat, ds, dr, as_, ar, bs, br, tail):  # type: ignore[no-untyped-def]
    """The walk: ``repeat`` repeats of 256 / sizeof(T) lanes selected by the mask (lo, hi) (``tail`` > 0: the last
    repeat has only ``tail`` lanes), each taking ``a``'s element where its selection bit is 1, else ``b``'s (a
    tensor, or the scalar)."""


@overload(_select_walk, jit_options=LOOP_OPTIONS)
def _select_walk_impl(dst, sel, a, b, m, lo, hi, repeat, ds, dr, as_, ar, bs, br, tail):  # type: ignore[no-untyped-def]
    t = dst.dtype.dt
    sz, st = t.size, t.storage
    epb, per = 32 // sz, 256 // sz
    tensor = isinstance(b, LocalTensorType)

    def walk(dst, sel, a, b, m, lo, hi, repeat, ds, dr, as_, ar, bs, br, tail):  # type: ignore[no-untyped-def]
        core = core_of(dst)
        bits = carray(address_as_pointer(core.base + sel.addr, np.uint8), (repeat * per + 7) // 8)
        for r in range(repeat):
            last = tail if (tail > 0 and r == repeat - 1) else per
            for k in range(last):
                if lane_on(lo, hi, k):
                    i = k if m == 0 else r * per + k
                    d = carray(address_as_pointer(core.base + dst.addr + (r * dr + k // epb * ds) * 32
                                                  + k % epb * sz, st), 1)
                    if (bits[i >> 3] >> (i & 7)) & 1:
                        d[0] = carray(address_as_pointer(core.base + a.addr + (r * ar + k // epb * as_) * 32
                                                         + k % epb * sz, st), 1)[0]
                    elif tensor:
                        d[0] = carray(address_as_pointer(core.base + b.addr + (r * br + k // epb * bs) * 32
                                                         + k % epb * sz, st), 1)[0]
                    else:
                        d[0] = store(t, scalar_of(t, b))
    return walk


def _select_lanes(ctx, args, per):  # type: ignore[no-untyped-def]
    """A Select call's lanes and strides: (lo, hi, repeat, tail, dst, src0 and src1 block and repeat strides, n,
    given), ``n`` the count of the count form (0 for level-0), ``given`` the level-0 form's repeat_times. The count
    form is one instruction in counter mode, contiguous, and leaves the mask register all ones, in normal mode."""


@overload(_select_lanes, jit_options=OVERLOAD_OPTIONS)
def _select_lanes_impl(ctx, args, per):  # type: ignore[no-untyped-def]
    if len(args) == 1:
        def count(ctx, args, per):  # type: ignore[no-untyped-def]
            n = max(np.int64(args[0]), np.int64(0))
            reset_mask(ctx_words(ctx))
            repeat = (n + per - 1) // per
            one, eight = np.int64(1), np.int64(8)
            return (_ALL_LANES, _ALL_LANES, repeat, n - (repeat - 1) * per, one, eight, one, eight, one, eight, n,
                    repeat)
        return count

    def level0(ctx, args, per):  # type: ignore[no-untyped-def]
        mask, given, p = args
        lo, hi, repeat, tail = level0_mask(ctx, mask, given, per)
        return (lo, hi, repeat, tail, np.int64(p.dst_blk_stride), np.int64(p.dst_rep_stride),
                np.int64(p.src0_blk_stride), np.int64(p.src0_rep_stride), np.int64(p.src1_blk_stride),
                np.int64(p.src1_rep_stride), np.int64(0), np.int64(given))
    return level0


def sel_op(dst, sel, a, b, mode, args):  # type: ignore[no-untyped-def]
    """One Select call: ``args`` is (count,) or (mask, repeat_times, BinaryRepeatParams); ``b`` a tensor or a
    scalar."""


@overload(sel_op, jit_options=INLINE_OPTIONS)
def _sel_op(dst, sel, a, b, mode, args):  # type: ignore[no-untyped-def]
    t, u = dst.dtype.dt, sel.dtype.dt
    ti, ui = type_index(t), type_index(u)
    tensor = isinstance(b, LocalTensorType)
    mixed = mixed_types("Select", ("dst", dst), ("src0", a), *([("src1", b)] if tensor else []))
    if mixed is not None:
        return lambda dst, sel, a, b, mode, args: mixed_fault(dst.ctx, mixed)
    bad = bad_type((t, ("half", "float")), (u, ("uint8_t", "uint16_t", "uint32_t")))
    if bad is not None:
        code_t = _SELECT * 100 + bad
        return lambda dst, sel, a, b, mode, args: type_fault(dst.ctx, code_t)
    sz, st = t.size, t.storage
    per = 256 // sz
    kind = vec_kind("Select", sz)
    if len(args) != 1 and (len(args) != 3 or not (isinstance(args[2], types.BaseNamedTuple)
                                                  and args[2].instance_class is BinaryRepeatParams)):
        return None

    def select_(dst, sel, a, b, mode, args):  # type: ignore[no-untyped-def]
        m = _sel_mode(dst.ctx, mode, not tensor, ti, ui)
        core = core_of(dst)
        lo, hi, repeat, tail, ds, dr, as_, ar, bs, br, n, given = _select_lanes(dst.ctx, args, per)
        counted = n > 0
        d_span, a_span = (n * sz, n * sz) if counted else (span(repeat, ds, dr), span(repeat, as_, ar))
        pd, pm, pa = plan_tensor(dst), plan_tensor(sel), plan_tensor(a)
        pb = plan_tensor(b) if tensor else pa
        b_span = (a_span if counted else span(repeat, bs, br)) if tensor else 0
        if not (counted or params_ok(core, pd, given, ds)):  # counter mode ignores repeat_times
            return
        if repeat <= 0 or (lo == 0 and hi == 0):
            return  # a NOP on A2: dst is not written
        lanes = repeat * per if tail == 0 else (repeat - 1) * per + tail
        m_bytes = per // 8 if m == 0 else (lanes + 7) // 8
        if not (vec_ok(core, pa, a_span, _SELECT) and vec_ok(core, pb, b_span, _SELECT)
                and vec_ok(core, pm, m_bytes, _SELECT)):
            return
        if counted:
            if not (vec_ok(core, pd, d_span, _SELECT) and count_ok(core, _SELECT, SRC0, SAME, pd, sz, pa, sz, n)
                    and (not tensor or count_ok(core, _SELECT, SRC1, SAME, pd, sz, pb, sz, n))):
                return
            if tensor:
                flow2(core, pd, pa, pb, d_span)
            else:
                flow1(core, pd, pa, d_span)
        elif not (vec_out(core, pd, d_span, _SELECT)  # the strided walk's span counts as written
                  and walk_ok(core, _SELECT, SRC0, SAME, pd, sz, ds, dr, pa, sz, as_, ar, lo, hi, repeat, tail, per)
                  and (not tensor or walk_ok(core, _SELECT, SRC1, SAME, pd, sz, ds, dr, pb, sz, bs, br, lo, hi,
                                             repeat, tail, per))):
            return
        if not apart(core, _SELECT, SEL_MASK, pd, d_span, pm, m_bytes):  # two types: no 100% overlap to have
            return
        if m != 0:  # the impl's Duplicate into the API scratch, which set_cmpmask then reads
            at = core.ub_size - SCRATCH_BYTES
            if tensor:
                carray(address_as_pointer(core.base + at, np.uint32), 32)[:] = np.uint32(sel.addr)
                _scratch_written(core, at, 128)
            else:
                carray(address_as_pointer(core.base + at, st), 32)[:] = store(t, scalar_of(t, b))
                _scratch_written(core, at, 32 * sz)
        hz_access(core, LANE_VECTOR, _SELECT, pm.buf, pm.addr, m_bytes, False, pm.gen >= 0)
        hz_instruction(core, LANE_VECTOR, _SELECT, pd, d_span, pa, a_span, pb, b_span)
        _select_walk(dst, sel, a, b, m, lo, hi, repeat, ds, dr, as_, ar, bs, br, tail)
        count_vector(core, VEC_BINARY, kind, d_span if counted else repeat * 256, pd, pa, pb)
    return select_


def select(dst, sel_mask, src0, src1, sel_mode, *args):  # type: ignore[no-untyped-def]
    """Select(dst, selMask, src0, src1, selMode, count) or (..., mask, repeatTime, BinaryRepeatParams): ``dst[i] =
    src0[i]`` where the selection bit is 1, else src1's (a tensor, or a scalar for VSEL_TENSOR_SCALAR_MODE)."""
    raise TypeError("Select is device code: call it from a kernel")


@overload(select, jit_options=INLINE_OPTIONS)
def _select(dst, sel_mask, src0, src1, sel_mode, *args):  # type: ignore[no-untyped-def]
    return lambda dst, sel_mask, src0, src1, sel_mode, *args: sel_op(dst, sel_mask, src0, src1, sel_mode, args)
