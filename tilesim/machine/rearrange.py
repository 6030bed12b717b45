"""The instructions that move elements rather than compute them: Gather (``MV/离散与聚合/Gather.md``;
``impl/basic_api/dav_c220/kernel_operator_vec_gather_impl.h``), the 16 x 16 Transpose
(``MV/数据排布转换/Transpose.md``), and the high-level Broadcast (``高阶API/张量变换/Broadcast.md``).

**Gather** ``gather(dst, src, src_offset, src_base_addr, count)``: ``dst[i] = src[(src_base_addr + src_offset[i]) /
sizeof(T)]``, the offsets a uint32 LocalTensor of byte offsets (an offset that is not a multiple of sizeof(T)
reads the element it falls in: the docs' "data shifts silently"). T: int16, uint16, half, bfloat16, int32, uint32,
float. The level-0 form ``gather(dst, src, src_offset, src_base_addr, mask, repeat_times, dst_rep_stride)`` takes
256 / sizeof(T) lanes a repeat, the offsets of repeat r from ``src_offset[r * 256 / sizeof(T)]`` on (the docs
give no offset stride: contiguous is the choice), dst's blocks contiguous within a repeat and ``dst_rep_stride``
blocks apart; masked lanes keep dst. The count form is what A2's impl makes of it: a level-0 call of
``count / (256 / sizeof(T))`` full repeats (the impl casts that to uint8: 256 or more wrap, and checked mode
reports them) and one of the rest. An address outside the core's UB reads 0 (the NPU's behaviour there is not
documented; tilesim never reads outside the UB). Checked mode: 32 B alignment, repeat_times <= 255, a source
element outside the src tensor's buffer slot (``UB out of bounds``, at the element), dst overlapping an element it
gathers or the offsets (the API does not support src and dst in the same memory), the offsets read as values (they
must have been written); each dst lane takes the shadow state of the element it gathered. Counted as
``vec_unary``.

**Transpose** ``transpose(dst, src)``: one 16 x 16 matrix of b16 (int16, uint16, half), ``dst = src.T``; src may
be dst (in place), other overlaps are reported in checked mode (the API's overlap rule: all or nothing). The
NCHW / NHWC form with a sharedTmpBuffer is not emulated. Counted as ``vec_unary``, 512 B; in checked mode every
byte of dst takes the combined shadow state of the whole source.

**Broadcast** ``broadcast(dst, src, dst_shape, src_shape, axis, shared_tmp)``: ``Broadcast<T, dim, axis>`` with dim
1 or 2 (the length of the shape tuples) and ``axis`` the one broadcast (0: ``src_shape[0]`` is 1, every row of dst
is src; 1: ``src_shape[1]`` is 1, row r of dst is ``src[r]`` repeated; dim 1 takes axis 0 only, every element of
dst ``src[0]``), dst and src contiguous ND. T: int8, uint8,
half, float (the A2 table). On A2 the API runs Brcb, Copy and for an unaligned row GatherMask through
``shared_tmp``; here it is one pass over dst, counted as ``vec_dup`` (dst's 256 B repeats), and ``shared_tmp`` is
taken and not written (the scratch the NPU's steps use is not modelled). Checked mode: 32 B alignment, bounds, src
and dst apart (the API's documentation rules overlap out), except where the v220 implementation runs an overlap as
the NPU computes it, which ops-transformer's NsaCompressGrad relies on: dst == src along axis 0 (row 0 is src
itself; the first-axis path is an Or of src with zeros into every row, src's block stride 0, which runs in place)
and any overlap along axis 1 (the last-axis path first Brcbs src into ``shared_tmp``; here src is then read whole
before dst is written), shapes that are not a broadcast along ``axis`` (stopping the kernel); each dst element takes
the shadow state of the element it copies.

A type outside the A2 table stops the kernel when it runs.
"""

from __future__ import annotations

import numpy as np
from numba import carray
from numba.extending import overload

from tilesim.core.pipes import LANE_VECTOR
from tilesim.core.records import (
    ERR_API_RULE,
    ERR_UB_OOB,
    VEC_DUP,
    VEC_UNARY,
    checked_only,
    count_vector,
    flow1,
    flow_lanes,
    plan_of,
    report,
    vec_in,
    vec_ok,
    vec_out,
)
from tilesim.core.ub import PlanTensor
from tilesim.core.vec_kinds import vec_kind
from tilesim.jit import INLINE_OPTIONS, OVERLOAD_OPTIONS
from tilesim.jit.intrinsics import address_as_pointer
from tilesim.machine.convert import api_fault, bad_type, type_fault, type_index
from tilesim.machine.hazard import hz_access, hz_instruction, op_code
from tilesim.machine.overlap import ANY, SRC, SRC_OFFSET, apart, overlap_extra
from tilesim.machine.tensor import core_of, plan_tensor
from tilesim.machine.vector import (
    LOOP_OPTIONS,
    lane_on,
    level0_mask,
    mask_bits,
    mixed_fault,
    mixed_types,
    params_ok,
    span,
)

_GATHER, _TRANSPOSE, _BROADCAST = op_code("Gather"), op_code("Transpose"), op_code("Broadcast")
GATHER_TYPES = ("int16_t", "uint16_t", "half", "bfloat16_t", "int32_t", "uint32_t", "float")
TRANSPOSE_TYPES = ("int16_t", "uint16_t", "half")
BROADCAST_TYPES = ("int8_t", "uint8_t", "half", "float")
_ALL_LANES = np.uint64(0xFFFFFFFFFFFFFFFF)


# ---------------------------------------------------------------------------------------------------------------
# Gather


@checked_only(None)
def _gathered(core, dst, d_span, src, off, base, lo, hi, repeat, dr, tail, size):
    """Checked mode, before a Gather's walk: each lane's source element inside src's buffer slot (else UB out of
    bounds, the first such lane reported) and outside the dst span (else the overlap rule), its read recorded for
    the pipe-hazard check, and its shadow state flowed to the lane."""
    if not core.checks:
        return
    per = 256 // size
    offs = carray(address_as_pointer(core.base + off.addr, np.uint32), repeat * per)
    p = plan_of(core)
    start, slot = p[src.buf, 0], p[src.buf, 1]
    first = start + (src.addr - start) // slot * slot
    oob = overlap = False
    for r in range(repeat):
        for k in range(tail if (tail > 0 and r == repeat - 1) else per):
            if not lane_on(lo, hi, k):
                continue
            at = src.addr + (base + np.int64(offs[r * per + k])) // size * size
            if not (first <= at and at + size <= first + slot) and not oob:
                report(core, ERR_UB_OOB, src.buf, at - start, size, slot)
                oob = True
            if dst.addr <= at < dst.addr + d_span and not overlap:
                report(core, ERR_API_RULE, dst.buf, dst.addr - p[dst.buf, 0], d_span,
                       overlap_extra(_GATHER, ANY, SRC, r, r, 0, 0))
                overlap = True
            if 0 <= at and at + size <= core.ub_size:
                hz_access(core, LANE_VECTOR, _GATHER, src.buf, at, size, False, src.gen >= 0)
                flow_lanes(core, PlanTensor(dst.buf, dst.addr + r * dr * 32 + k * size, dst.gen),
                           PlanTensor(src.buf, at, src.gen), 1, size, size, 1)


def _gather_walk(dst, src, off, base, lo, hi, repeat, dr, tail):  # type: ignore[no-untyped-def]
    """``repeat`` repeats of 256 / sizeof(T) lanes selected by the mask (lo, hi) (``tail`` > 0: the last repeat
    has only ``tail`` lanes, counter mode): lane k of repeat r takes the element at ``src + base + off[r * lanes +
    k]`` (rounded down to an element; 0 outside the UB)."""


@overload(_gather_walk, jit_options=LOOP_OPTIONS)
def _gather_walk_impl(dst, src, off, base, lo, hi, repeat, dr, tail):  # type: ignore[no-untyped-def]
    t = dst.dtype.dt
    sz, st = t.size, t.storage
    per = 256 // sz

    def walk(dst, src, off, base, lo, hi, repeat, dr, tail):  # type: ignore[no-untyped-def]
        core = core_of(dst)
        offs = carray(address_as_pointer(core.base + off.addr, np.uint32), repeat * per)
        for r in range(repeat):
            d = carray(address_as_pointer(core.base + dst.addr + r * dr * 32, st), per)
            for k in range(tail if (tail > 0 and r == repeat - 1) else per):
                if lane_on(lo, hi, k):
                    at = src.addr + (base + np.int64(offs[r * per + k])) // sz * sz
                    if 0 <= at and at + sz <= core.ub_size:
                        d[k] = carray(address_as_pointer(core.base + at, st), 1)[0]
                    else:
                        d[k] = st(0)
    return walk


def _gather_one(dst, src, off, base, lo, hi, repeat, dr, tail):  # type: ignore[no-untyped-def]
    """One Gather instruction of ``repeat`` repeats (``tail``: as for :func:`_gather_walk`)."""


@overload(_gather_one, jit_options=OVERLOAD_OPTIONS)
def _gather_one_impl(dst, src, off, base, lo, hi, repeat, dr, tail):  # type: ignore[no-untyped-def]
    sz = dst.dtype.dt.size
    per = 256 // sz
    kind = vec_kind("Gather", sz)

    def one(dst, src, off, base, lo, hi, repeat, dr, tail):  # type: ignore[no-untyped-def]
        core = core_of(dst)
        pd, ps, po = plan_tensor(dst), plan_tensor(src), plan_tensor(off)
        base = np.int64(base)
        if repeat <= 0 or (lo == 0 and hi == 0):
            return  # a NOP on A2: dst is not written
        d_span = span(repeat, 1, dr)
        o_bytes = (repeat * per if tail == 0 else (repeat - 1) * per + tail) * 4  # the offsets of its lanes
        if not (vec_ok(core, ps, sz, _GATHER) and vec_in(core, po, o_bytes, _GATHER)
                and vec_out(core, pd, d_span, _GATHER)
                and apart(core, _GATHER, SRC_OFFSET, pd, d_span, po, o_bytes)):  # Gather.md: no overlap
            return
        _gathered(core, pd, d_span, ps, po, base, lo, hi, repeat, dr, tail, sz)
        hz_instruction(core, LANE_VECTOR, _GATHER, pd, d_span, po, o_bytes, ps, 0)
        _gather_walk(dst, src, off, base, lo, hi, repeat, dr, tail)
        count_vector(core, VEC_UNARY, kind, repeat * 256, pd, ps, po)
    return one


def gather(dst, src, src_offset, src_base_addr, *args):  # type: ignore[no-untyped-def]
    """Gather(dst, src, srcOffset, srcBaseAddr, count) or (..., mask, repeatTime, dstRepStride): ``dst[i] =
    src[(srcBaseAddr + srcOffset[i]) / sizeof(T)]``, offsets in bytes."""
    raise TypeError("Gather is device code: call it from a kernel")


@overload(gather, jit_options=INLINE_OPTIONS)
def _gather(dst, src, src_offset, src_base_addr, *args):  # type: ignore[no-untyped-def]
    t = dst.dtype.dt
    mixed = mixed_types("Gather", ("dst", dst), ("src", src))
    if mixed is not None:
        return lambda dst, src, src_offset, src_base_addr, *args: mixed_fault(dst.ctx, mixed)
    bad = bad_type((t, GATHER_TYPES), (src_offset.dtype.dt, ("uint32_t",)))
    if bad is not None:  # a run-time stop, not a compile error, so that a branch not taken may hold it
        code = _GATHER * 100 + bad
        return lambda dst, src, src_offset, src_base_addr, *args: type_fault(dst.ctx, code)
    per = 256 // t.size
    if len(args) == 1:
        def count_form(dst, src, src_offset, src_base_addr, *args):  # type: ignore[no-untyped-def]
            n = np.int64(args[0])
            full, rest = n // per, n % per
            if full > 0:
                if not params_ok(core_of(dst), plan_tensor(dst), full, 1):  # the impl's uint8 repeatTime
                    return
                _gather_one(dst, src, src_offset, src_base_addr, _ALL_LANES, _ALL_LANES, full & 255, 8, 0)
            if rest > 0:
                lo, hi = mask_bits(rest, per)
                _gather_one(dst[n - rest], src, src_offset[n - rest], src_base_addr, lo, hi, 1, 8, 0)
        return count_form
    if len(args) != 3:
        return None

    def level0(dst, src, src_offset, src_base_addr, *args):  # type: ignore[no-untyped-def]
        if not params_ok(core_of(dst), plan_tensor(dst), np.int64(args[1]), 1):  # counter mode ignores it
            return
        lo, hi, repeat, tail = level0_mask(dst.ctx, args[0], args[1], per)
        _gather_one(dst, src, src_offset, src_base_addr, lo, hi, repeat, np.int64(args[2]), tail)
    return level0


# ---------------------------------------------------------------------------------------------------------------
# Transpose


def transpose(dst, src):  # type: ignore[no-untyped-def]
    """Transpose(dst, src): a 16 x 16 matrix of b16, ``dst = src.T`` (src may be dst)."""
    raise TypeError("Transpose is device code: call it from a kernel")


@overload(transpose, jit_options=INLINE_OPTIONS)
def _transpose(dst, src):  # type: ignore[no-untyped-def]
    t = dst.dtype.dt
    mixed = mixed_types("Transpose", ("dst", dst), ("src", src))
    if mixed is not None:
        return lambda dst, src: mixed_fault(dst.ctx, mixed)
    bad = bad_type((t, TRANSPOSE_TYPES))
    if bad is not None:
        code = _TRANSPOSE * 100 + bad
        return lambda dst, src: type_fault(dst.ctx, code)
    kind = vec_kind("Transpose", t.size)

    def transpose_(dst, src):  # type: ignore[no-untyped-def]
        core = core_of(dst)
        pd, ps = plan_tensor(dst), plan_tensor(src)
        if not (vec_ok(core, ps, 512, _TRANSPOSE) and vec_ok(core, pd, 512, _TRANSPOSE)):
            return
        if pd.addr != ps.addr and not apart(core, _TRANSPOSE, SRC, pd, 512, ps, 512):
            return
        flow_lanes(core, pd, ps, 1, 512, 512, 1)  # each byte of dst: the state of the whole source
        hz_instruction(core, LANE_VECTOR, _TRANSPOSE, pd, 512, ps, 512, ps, 0)
        d = carray(address_as_pointer(core.base + dst.addr, np.uint16), 256)
        if pd.addr == ps.addr:
            for i in range(16):
                for j in range(i + 1, 16):
                    d[i * 16 + j], d[j * 16 + i] = d[j * 16 + i], d[i * 16 + j]
        else:
            x = carray(address_as_pointer(core.base + src.addr, np.uint16), 256)
            for i in range(16):
                for j in range(16):
                    d[j * 16 + i] = x[i * 16 + j]
        count_vector(core, VEC_UNARY, kind, 512, pd, ps, ps)
    return transpose_


# ---------------------------------------------------------------------------------------------------------------
# Broadcast


def broadcast(dst, src, dst_shape, src_shape, axis, shared_tmp=None):  # type: ignore[no-untyped-def]
    """Broadcast<T, dim, axis>(dst, src, dstShape, srcShape[, sharedTmpBuffer]): src of ``src_shape`` (1 along
    ``axis``) repeated along ``axis`` to dst of ``dst_shape``."""
    raise TypeError("Broadcast is device code: call it from a kernel")


@overload(broadcast, jit_options=INLINE_OPTIONS)
def _broadcast(dst, src, dst_shape, src_shape, axis, shared_tmp=None):  # type: ignore[no-untyped-def]
    t = dst.dtype.dt
    mixed = mixed_types("Broadcast", ("dst", dst), ("src", src))
    if mixed is not None:
        return lambda dst, src, dst_shape, src_shape, axis, shared_tmp=None: mixed_fault(dst.ctx, mixed)
    bad = bad_type((t, BROADCAST_TYPES))
    if bad is not None:
        code = _BROADCAST * 100 + bad
        return lambda dst, src, dst_shape, src_shape, axis, shared_tmp=None: type_fault(dst.ctx, code)
    sz, st, ti = t.size, t.storage, type_index(t)
    two = len(dst_shape) == 2
    kind = vec_kind("Broadcast", sz)

    def broadcast_(dst, src, dst_shape, src_shape, axis, shared_tmp=None):  # type: ignore[no-untyped-def]
        # dim 1: a column of dst_shape[0] one-element rows, each src[0] (axis 0)
        rows, cols = np.int64(dst_shape[0]), np.int64(dst_shape[1] if two else 1)
        s_rows, s_cols = np.int64(src_shape[0]), np.int64(src_shape[1] if two else 1)
        if (axis == 0 and (s_rows != 1 or s_cols != cols)) or (axis == 1 and (s_cols != 1 or s_rows != rows)) or \
                not (0 <= axis <= 1) or (not two and axis != 0):
            api_fault(dst.ctx, _BROADCAST, axis, ti, ti)  # shapes that are not a broadcast along ``axis``
        core = core_of(dst)
        pd, ps = plan_tensor(dst), plan_tensor(src)
        n, m = rows * cols * sz, s_rows * s_cols * sz
        overlap = pd.buf == ps.buf and pd.addr < ps.addr + m and ps.addr < pd.addr + n
        # tolerated overlaps, as the v220 implementation runs them (the module's docstring)
        tolerated = (axis == 0 and pd.addr == ps.addr) or axis == 1
        if not (vec_ok(core, ps, m, _BROADCAST) and vec_ok(core, pd, n, _BROADCAST)
                and ((overlap and tolerated) or apart(core, _BROADCAST, SRC, pd, n, ps, m))):
            return
        for r in range(rows):  # each element of dst: the state of the one it copies
            row = PlanTensor(pd.buf, pd.addr + r * cols * sz, pd.gen)
            if axis == 0:
                flow1(core, row, ps, cols * sz)
            else:
                flow_lanes(core, row, PlanTensor(ps.buf, ps.addr + r * sz, ps.gen), cols, sz, sz, 0)
        hz_instruction(core, LANE_VECTOR, _BROADCAST, pd, n, ps, m, ps, 0)
        d = carray(address_as_pointer(core.base + dst.addr, st), rows * cols)
        x = carray(address_as_pointer(core.base + src.addr, st), s_rows * s_cols)
        if overlap and axis == 1:  # src is read whole (into the Brcb scratch) before dst is written
            x = x.copy()
        for r in range(rows):
            o = r * cols
            if axis == 0:
                for j in range(cols):
                    d[o + j] = x[j]
            else:
                v = x[r]
                for j in range(cols):
                    d[o + j] = v
        count_vector(core, VEC_DUP, kind, n, pd, ps, ps)
    return broadcast_
