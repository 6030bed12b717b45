"""The element-wise instructions whose operands may differ in width: Cast (``MV/类型转换/Cast.md``, rounding per
``B/数据结构/precision_conversion.md``) and Axpy (``MV/复合计算/Axpy.md``), in the two forms of the API:

- count: ``cast(dst, src, round_mode, count)``, ``axpy(dst, src, scalar, count)``: ``count`` contiguous elements;
  on A2 one instruction in counter mode, which leaves the mask register all ones in normal mode;
- level-0: ``cast(dst, src, round_mode, mask, repeat_times, UnaryRepeatParams(...))``, ``axpy(dst, src, scalar,
  mask, repeat_times, UnaryRepeatParams(...))``, the mask as for :mod:`tilesim.machine.vector` (a count, a pair of
  64-bit patterns, or MASK_PLACEHOLDER). A repeat has 256 / sizeof(wider type) lanes (64 for half to float: the
  mask "follows the larger type"), and each operand is walked in 32 B blocks of its own type: lane k of repeat r
  is at ``(r * rep_stride + k // (32 / sizeof) * blk_stride) * 32 + k % (32 / sizeof) * sizeof`` bytes, so a
  contiguous walk gives the narrower operand repeat stride 4 (Cast.md's example: dstRepStride 8, srcRepStride 4).
  How the block stride applies to the narrower operand is not documented; this is the choice.

One piece of code (:func:`mixed_op`) serves both, as :func:`tilesim.machine.vector.vec_op` serves the one-width
families: the operand checks (checked mode: 32 B alignment, bounds, repeat_times <= 255, a zero dst block stride,
the overlap rule of :mod:`tilesim.machine.overlap`), the walk, the counters (Cast: ``vec_cast``; Axpy:
``vec_scalar``, in 256 B repeats of the wider operand) and the UB shadow (the count form flows the sources' state,
the level-0 form marks its span written). ``dst`` may overlap ``src`` as kernels widen and narrow in place (the
narrow type at the start or the end of the wide one's bytes, as RmsNormGrad's Cast2FloatIf and its dx Cast do),
where no repeat reads what an earlier one wrote: element k is read before any write reaches a later element's
source.

**Cast.** ``round_mode`` is one of :mod:`tilesim.numerics.b16`'s CAST_NONE ... CAST_ODD. The pairs and the modes each
admits are Cast.md's A2 table (:data:`PAIRS`); another pair stops the kernel (a KernelError when it runs, so that a
branch for another dtype may hold it), and so does a mode the pair does not admit (float to bfloat16 has no CAST_NONE,
half to float only CAST_NONE). Not emulated: int32 to half, which ignores the mode and scales by SetDeqScale's DEQSCALE
register (tilesim has no such register yet), and int4b_t, which tilesim has no type for. Rounding is
:func:`tilesim.numerics.b16.round_shift`'s, on the exact value (CAST_NONE is CAST_RINT where the pair can lose
precision). float to half and bfloat16 are :func:`tilesim.numerics.b16.f32_bits_to_b16` (the count form keeps its vector
paths for them and for half / bfloat16 to float), whose overflow follows IEEE 754 (inf where the mode rounds away from
zero) and NaN keeps a NaN: the NPU's half / bfloat16 saturation (CTRL[48]) is not modelled. Choices where the docs are
silent: a float rounded to an integer type saturates to its range (the docs' "溢出默认按照饱和模式处理"), with
NaN giving 0 and a negative value to uint8 giving 0 ("视为异常" in the docs); float to float rounded to an integer
keeps the sign (-0.4 gives -0.0) and passes inf and NaN on; integers narrow by saturation (int32 2**31 - 1 to
int16 32767, as the docs' example).

**Axpy.** ``dst = scalar * src + dst`` for (dst, src) half / half, float / float and float / half (the scalar has
src's type; half / float: 64 lanes a repeat, and src and dst must not overlap: checked mode reports it). Whether
the NPU fuses the multiply-add is not documented; the high-level Axpy (``高阶API/数学计算/Axpy-80.md``) says its
Muls-then-Add in fp32 "gives better precision" than this instruction, so this emulation does not fuse: the product
is rounded to the instruction's type, then the sum (half: each step rounded to half; half src with float dst: the
product is exact in fp32, so one rounding).
"""

from __future__ import annotations

import numpy as np
from numba import carray, types
from numba.extending import overload

from tilesim.core.pipes import LANE_VECTOR
from tilesim.core.records import (
    VEC_CAST,
    VEC_SCALAR,
    checked_only,
    count_vector,
    flow2,
    flow_lanes,
    lane_state,
    mix_state,
    shadow_of,
    u16,
    u32,
    vec_ok,
    vec_out,
)
from tilesim.core.vec_kinds import vec_kind
from tilesim.jit import INLINE_OPTIONS, OVERLOAD_OPTIONS, njit
from tilesim.jit.intrinsics import address_as_pointer, f32_as_u32, u32_as_f32
from tilesim.machine.dtypes import ALL
from tilesim.machine.hazard import INSTRUCTIONS, hz_instruction, op_code
from tilesim.machine.overlap import NONE, SAME, SRC, count_ok, walk_ok
from tilesim.machine.pipe import FAULT_API_TABLE, FAULT_CAST, FAULT_DTYPE, fault
from tilesim.machine.tensor import core_of, ctx_words, plan_tensor
from tilesim.machine.vector import (
    LOOP_OPTIONS,
    UnaryRepeatParams,
    elems,
    lane_on,
    last_lane,
    level0_mask,
    load,
    marker,
    mask_span,
    op_name,
    params_ok,
    reset_mask,
    scalar_of,
    store,
)
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
    ROUND_MODES,
    b16_to_f32_bits,
    f32_bits_to_b16,
    narrow_bits,
    round_shift,
    widen_bits,
)

_R = (CAST_RINT, CAST_FLOOR, CAST_CEIL, CAST_ROUND, CAST_TRUNC)
PAIRS = {  # (src, dst) -> the RoundModes Cast.md's A2 table admits
    ("int8_t", "half"): (CAST_NONE,), ("uint8_t", "half"): (CAST_NONE,),
    ("int16_t", "half"): (*_R, CAST_NONE), ("int16_t", "float"): (CAST_NONE,),
    ("half", "int8_t"): (*_R, CAST_NONE), ("half", "uint8_t"): (*_R, CAST_NONE), ("half", "int16_t"): _R,
    ("half", "int32_t"): _R, ("half", "float"): (CAST_NONE,),
    ("bfloat16_t", "int32_t"): _R, ("bfloat16_t", "float"): (CAST_NONE,),
    ("int32_t", "int16_t"): (CAST_NONE,), ("int32_t", "float"): (*_R, CAST_NONE), ("int32_t", "int64_t"): (CAST_NONE,),
    ("float", "half"): (*_R, CAST_ODD, CAST_NONE), ("float", "bfloat16_t"): _R, ("float", "float"): _R,
    ("float", "int16_t"): _R, ("float", "int32_t"): _R, ("float", "int64_t"): _R,
    ("int64_t", "int32_t"): (CAST_NONE,), ("int64_t", "float"): _R,
}
AXPY = (("half", "half"), ("float", "float"), ("float", "half"))  # (dst, src) on A2
_KIND = {"half": KIND_FP16, "bfloat16_t": KIND_BF16}
_CAST, _AXPY = marker("Cast"), marker("Axpy")
_CAST_CODE = op_code("Cast")
_INT_RANGE = {"int8_t": (-(2 ** 7), 2 ** 7 - 1), "uint8_t": (0, 2 ** 8 - 1), "int16_t": (-(2 ** 15), 2 ** 15 - 1),
              "int32_t": (-(2 ** 31), 2 ** 31 - 1), "int64_t": (-(2 ** 63), 2 ** 63 - 1)}


def type_index(dt) -> int:  # type: ignore[no-untyped-def]
    """An element type's number in a fault's detail (its index in :data:`tilesim.machine.dtypes.ALL`)."""
    return [d.name for d in ALL].index(dt.name)


def bad_type(*checks: tuple) -> int | None:  # type: ignore[type-arg]
    """The :func:`type_index` of the first element type that is not among the names its operand takes
    (``checks``: pairs of an element type and those names), or None."""
    for dt, names in checks:
        if dt.name not in names:
            return type_index(dt)
    return None


_CAST_KIND = vec_kind("Cast", 4)  # a b16 <-> fp32 Cast's throughput


@njit(cache=True, inline="always")
def _ok_lanes(core, dst, src, n, dst_lane, src_lane):
    """Operands of a count-form cast of ``n`` lanes (checked mode: alignment, bounds, the overlap rule); the
    shadow state flows lane to lane."""
    if not (vec_ok(core, src, n * src_lane, _CAST_CODE) and vec_ok(core, dst, n * dst_lane, _CAST_CODE)
            and count_ok(core, _CAST_CODE, SRC, SAME, dst, dst_lane, src, src_lane, n)):
        return False
    flow_lanes(core, dst, src, n, dst_lane, src_lane, 1)
    return True


@njit(cache=True, forceinline=True)
def _cast_to_f32(core, dst, src, n, kind):
    """Cast b16 (``kind``: fp16 or bf16 bits) to fp32, exactly. ``src`` may be the upper half of ``dst``'s
    buffer (the kernels' in-place widening, which the overlap rule allows): element k is read before any write can
    reach it."""
    if not _ok_lanes(core, dst, src, n, 4, 2):
        return
    d, s = u32(core, dst, n), u16(core, src, n)
    widen_bits(s, d, n, kind)
    count_vector(core, VEC_CAST, _CAST_KIND, 4 * n, dst, src, src)


@njit(cache=True, forceinline=True)
def _cast_from_f32(core, dst, src, n, kind, mode):
    """Cast fp32 to b16 bits with RoundMode ``mode``; ``dst`` may be ``src`` reinterpreted (in place)."""
    if not _ok_lanes(core, dst, src, n, 2, 4):
        return
    d, s = u16(core, dst, n), u32(core, src, n)
    narrow_bits(s, d, n, kind, mode)
    count_vector(core, VEC_CAST, _CAST_KIND, 4 * n, dst, src, src)


@njit(cache=True)
def type_fault(ctx, code):
    """Stop the kernel: an instruction on an element type its A2 API does not take (FAULT_DTYPE; ``code``: the
    instruction's hazard code * 100 + :func:`type_index`)."""
    fault(ctx_words(ctx), FAULT_DTYPE, np.int64(-1), code)


@njit(cache=True)
def api_fault(ctx, op, mode, a, b):
    """Stop the kernel: instruction ``op`` (its hazard code) on element types ``a`` and ``b`` together
    (:func:`type_index`) with mode ``mode`` (-1: none) is not in its A2 API's table (FAULT_API_TABLE)."""
    m = min(max(np.int64(mode), -1), 98)
    fault(ctx_words(ctx), FAULT_API_TABLE, np.int64(-1), np.int64(op) * 1000000 + (m + 1) * 10000 + a * 100 + b)


def api_fault_text(detail: int) -> str:
    """FAULT_API_TABLE's detail (:func:`api_fault`) in words, for the KernelError."""
    from tilesim.machine.compare import CMPMODE, SELMODE  # the modes of the instructions built on this module

    op, rest = divmod(detail, 10 ** 6)
    mode, rest = divmod(rest, 10 ** 4)
    a, b = divmod(rest, 100)
    name = INSTRUCTIONS[op]
    names = {"Cast": {v: k for k, v in ROUND_MODES.items()}, "Compare": {m.value: m.name for m in CMPMODE},
             "CompareScalar": {m.value: m.name for m in CMPMODE},
             "Select": {m.value: m.name for m in SELMODE}}.get(name, {})
    with_mode = f" with {names.get(mode - 1, f'mode {mode - 1}')}" if mode else ""
    return f"{name} on {ALL[a].name} and {ALL[b].name}{with_mode}"


# ---------------------------------------------------------------------------------------------------------------
# One element


@njit(cache=True)
def _saturate(v, lo, hi):
    return min(max(v, lo), hi)


@njit(cache=True)
def _f32_to_int(u, mode, lo, hi):
    """fp32 bits ``u`` to the integer they round to by RoundMode ``mode``, saturated to [lo, hi]; NaN gives 0."""
    u = np.int64(u) & 0xFFFFFFFF
    neg = (u >> 31) != 0
    a = u & 0x7FFFFFFF
    if a > 0x7F800000:
        return np.int64(0)
    e = a >> 23
    if e >= 127 + 63:  # |x| >= 2**63, inf included: past every range
        return lo if neg else hi
    m = (a & 0x7FFFFF) | ((np.int64(1) << 23) if e else np.int64(0))
    e = max(e, np.int64(1))  # a subnormal's exponent is the smallest normal one's
    mag = m << (e - 150) if e >= 150 else round_shift(m, 150 - e, mode, neg)
    return _saturate(-mag if neg else mag, lo, hi)


@njit(cache=True)
def _f32_integral(u, mode):
    """fp32 bits ``u`` rounded to an integral fp32 by RoundMode ``mode``, the sign kept (-0.4 gives -0.0); inf and
    NaN as they are."""
    u = np.int64(u) & 0xFFFFFFFF
    a = u & 0x7FFFFFFF
    e = a >> 23
    if e >= 150:  # |x| >= 2**23: integral already, or inf / NaN
        return np.uint32(u)
    m = (a & 0x7FFFFF) | ((np.int64(1) << 23) if e else np.int64(0))
    q = round_shift(m, 150 - max(e, np.int64(1)), mode, (u >> 31) != 0)  # at most 2**23: exact in fp32
    return np.uint32(np.int64(f32_as_u32(np.float32(q))) | (u & 0x80000000))


@njit(cache=True)
def _int_to_f32_bits(v, mode, p):
    """The fp32 bits of integer ``v`` rounded to ``p`` significant bits by RoundMode ``mode`` (p = 24: fp32's own
    precision; 11: half's, whose values fp32 holds exactly)."""
    v = np.int64(v)
    if v == 0:
        return np.uint32(0)
    if v == -(2 ** 63):  # its magnitude is no int64; a power of two, exact
        return np.uint32(0xDF000000)
    neg = v < 0
    mag = -v if neg else v
    msb = np.int64(0)
    for s in (32, 16, 8, 4, 2, 1):
        if mag >> (msb + s):
            msb += s
    if msb >= p:
        q = round_shift(mag, msb - p + 1, mode, neg)
        if q >> p:  # the rounding carried into a new top bit
            q >>= 1
            msb += 1
        frac = (q << (24 - p)) & 0x7FFFFF
    else:
        frac = (mag << (23 - msb)) & 0x7FFFFF
    return np.uint32(((np.int64(1) << 31) if neg else np.int64(0)) | ((msb + 127) << 23) | frac)


def convert(dt, st, mode, x):  # type: ignore[no-untyped-def]
    """Element ``x`` of type ``st``, as stored (half, bfloat16: bits), to type ``dt`` as stored, rounded by
    RoundMode ``mode`` (the pair :data:`PAIRS` admits)."""


@overload(convert, jit_options=OVERLOAD_OPTIONS, inline="always")
def _convert(dt, st, mode, x):  # type: ignore[no-untyped-def]
    d, s = dt.dt, st.dt
    to = d.storage
    if s.is_float:
        if s.name == "float":
            if d.name in _KIND:
                kind = _KIND[d.name]
                return lambda dt, st, mode, x: f32_bits_to_b16(f32_as_u32(x), kind, mode)
            if d.name == "float":
                return lambda dt, st, mode, x: u32_as_f32(_f32_integral(f32_as_u32(x), mode))
            lo, hi = _INT_RANGE[d.name]
            return lambda dt, st, mode, x: to(_f32_to_int(f32_as_u32(x), mode, lo, hi))
        kind = _KIND[s.name]  # half and bfloat16 widen to fp32 exactly first
        if d.name == "float":
            return lambda dt, st, mode, x: u32_as_f32(b16_to_f32_bits(x, kind))
        lo, hi = _INT_RANGE[d.name]
        return lambda dt, st, mode, x: to(_f32_to_int(b16_to_f32_bits(x, kind), mode, lo, hi))
    if d.name == "half":  # from an integer: rounded to half's 11 bits in fp32, then narrowed exactly
        return lambda dt, st, mode, x: f32_bits_to_b16(_int_to_f32_bits(x, mode, 11), KIND_FP16, CAST_RINT)
    if d.name == "float":
        return lambda dt, st, mode, x: u32_as_f32(_int_to_f32_bits(x, mode, 24))
    lo, hi = _INT_RANGE[d.name]
    return lambda dt, st, mode, x: to(_saturate(np.int64(x), lo, hi))


def element(op, dt, st, s, mode, x, d):  # type: ignore[no-untyped-def]
    """The new value of one dst element of instruction ``op`` (as stored): from source element ``x`` (type
    ``st``), the scalar ``s``, the round mode and the old dst element ``d`` (type ``dt``)."""


@overload(element, jit_options=OVERLOAD_OPTIONS, inline="always")
def _element(op, dt, st, s, mode, x, d):  # type: ignore[no-untyped-def]
    if op_name(op) == "Cast":
        return lambda op, dt, st, s, mode, x, d: convert(dt, st, mode, x)
    # Axpy, not fused: the product rounded to dst's type, then the sum
    return lambda op, dt, st, s, mode, x, d: store(dt, load(dt, store(dt, scalar_of(st, s) * load(st, x)))
                                                   + load(dt, d))


# ---------------------------------------------------------------------------------------------------------------
# The walks


def _flat(op, dst, src, s, mode, n):  # type: ignore[no-untyped-def]
    """The count form: ``dst[i] = element(...)`` for i < n, in order."""


@overload(_flat, jit_options=LOOP_OPTIONS)
def _flat_impl(op, dst, src, s, mode, n):  # type: ignore[no-untyped-def]
    dt, st = dst.dtype.dt, src.dtype.dt

    def flat(op, dst, src, s, mode, n):  # type: ignore[no-untyped-def]
        core = core_of(dst)
        d, x = elems(core, dst, n), elems(core, src, n)
        for i in range(n):
            d[i] = element(op, dt, st, s, mode, x[i], d[i])
    return flat


def _strided(op, dst, src, s, mode, lo, hi, repeat, ds, dr, ss, sr, tail):  # type: ignore[no-untyped-def]
    """The level-0 walk: ``repeat`` repeats of the wider type's lanes selected by the mask (lo, hi), each operand
    in 32 B blocks of its own type, strides in blocks. ``tail`` > 0: the last repeat has only ``tail`` lanes
    (counter mode)."""


@overload(_strided, jit_options=LOOP_OPTIONS)
def _strided_impl(op, dst, src, s, mode, lo, hi, repeat, ds, dr, ss, sr, tail):  # type: ignore[no-untyped-def]
    dt, st = dst.dtype.dt, src.dtype.dt
    dsz, ssz, dsto, ssto = dt.size, st.size, dt.storage, st.storage
    per, de, se = 256 // max(dsz, ssz), 32 // dsz, 32 // ssz

    def walk(op, dst, src, s, mode, lo, hi, repeat, ds, dr, ss, sr, tail):  # type: ignore[no-untyped-def]
        core = core_of(dst)
        for r in range(repeat):
            last = tail if (tail > 0 and r == repeat - 1) else per
            for k in range(last):
                if lane_on(lo, hi, k):
                    d = carray(address_as_pointer(core.base + dst.addr + (r * dr + k // de * ds) * 32
                                                  + k % de * dsz, dsto), 1)
                    x = carray(address_as_pointer(core.base + src.addr + (r * sr + k // se * ss) * 32
                                                  + k % se * ssz, ssto), 1)
                    d[0] = element(op, dt, st, s, mode, x[0], d[0])
    return walk


@checked_only(None)
def _accumulate(core, dst, src, n, dst_size, src_size):
    """Checked mode: lane i of ``dst`` takes the combined state of itself and lane i of ``src`` (an instruction
    that accumulates into dst: Axpy)."""
    if not core.checks:
        return
    if dst_size == src_size:
        flow2(core, dst, src, dst, n * dst_size)
        return
    sh = shadow_of(core)
    for i in range(n):
        v = lane_state(sh, src.addr + i * src_size, src_size)
        for j in range(dst.addr + i * dst_size, dst.addr + (i + 1) * dst_size):
            sh[j] = mix_state(sh[j], v)


# ---------------------------------------------------------------------------------------------------------------
# The family


@njit(cache=True)
def _mode_of(ctx, mode, admitted, op, a, b):
    """RoundMode ``mode`` as an int if it is one the pair admits (``admitted``: a bit per mode), else stop the
    kernel."""
    m = np.int64(mode)
    if m < 0 or m > 6 or not (admitted >> m) & 1:
        api_fault(ctx, op, m, a, b)
    return m


def mixed_op(op, dst, src, s, mode, args):  # type: ignore[no-untyped-def]
    """One instruction of the two-width family: ``args`` is (count,) or (mask, repeat_times, UnaryRepeatParams);
    ``s`` the scalar (Axpy), ``mode`` the RoundMode (Cast)."""


@overload(mixed_op, jit_options=INLINE_OPTIONS)
def _mixed_op(op, dst, src, s, mode, args):  # type: ignore[no-untyped-def]
    name = op_name(op)
    d, sdt = dst.dtype.dt, src.dtype.dt
    code = op_code(name)
    a_i, d_i = type_index(sdt), type_index(d)
    if name == "Cast":
        if (sdt.name, d.name) not in PAIRS:  # a run-time stop, not a compile error, as in vec_op
            return lambda op, dst, src, s, mode, args: fault(ctx_words(dst.ctx), FAULT_CAST, np.int64(-1),
                                                             a_i * 100 + d_i)
        admitted = sum(1 << m for m in PAIRS[(sdt.name, d.name)])
        cls = VEC_CAST
    else:
        if (d.name, sdt.name) not in AXPY:
            return lambda op, dst, src, s, mode, args: api_fault(dst.ctx, code, -1, a_i, d_i)
        admitted, cls = 1, VEC_SCALAR  # Axpy: mode 0, no rounding choice
    dsz, ssz = d.size, sdt.size
    wide = max(dsz, ssz)
    per = 256 // wide
    kind = vec_kind(name, wide)
    axpy = name == "Axpy"
    rule = NONE if axpy and dsz != ssz else SAME  # Axpy.md: half src with float dst does not support overlap
    # the pairs the count form casts in vector blocks (_cast_to_f32, _cast_from_f32: the kernels' casts, bit for bit)
    widen = name == "Cast" and d.name == "float" and sdt.name in _KIND
    narrow = name == "Cast" and sdt.name == "float" and d.name in _KIND
    kind = _KIND.get(d.name if narrow else sdt.name, 0)

    if len(args) == 1:
        def count_form(op, dst, src, s, mode, args):  # type: ignore[no-untyped-def]
            m = _mode_of(dst.ctx, mode, admitted, code, a_i, d_i)
            n = np.int64(args[0])
            core = core_of(dst)
            reset_mask(ctx_words(dst.ctx))
            if n <= 0:
                return
            pd, ps = plan_tensor(dst), plan_tensor(src)
            if widen or narrow:  # these check their operands, keep the shadow and count themselves
                hz_instruction(core, LANE_VECTOR, code, pd, n * dsz, ps, n * ssz, ps, 0)
                if widen:
                    _cast_to_f32(core, pd, ps, n, kind)
                else:
                    _cast_from_f32(core, pd, ps, n, kind, m)
                return
            if not (vec_ok(core, ps, n * ssz, code) and vec_ok(core, pd, n * dsz, code)
                    and count_ok(core, code, SRC, rule, pd, dsz, ps, ssz, n)):
                return
            if axpy:
                _accumulate(core, pd, ps, n, dsz, ssz)
            else:
                flow_lanes(core, pd, ps, n, dsz, ssz, 1)
            hz_instruction(core, LANE_VECTOR, code, pd, n * dsz, ps, n * ssz, pd, n * dsz if axpy else 0)
            _flat(op, dst, src, s, m, n)
            count_vector(core, cls, kind, n * wide, pd, ps, pd if axpy else ps)
        return count_form
    if len(args) != 3 or not (isinstance(args[2], types.BaseNamedTuple)
                              and args[2].instance_class is UnaryRepeatParams):
        return None
    def level0(op, dst, src, s, mode, args):  # type: ignore[no-untyped-def]
        m = _mode_of(dst.ctx, mode, admitted, code, a_i, d_i)
        mask, given, params = args
        core = core_of(dst)
        lo, hi, repeat, tail = level0_mask(dst.ctx, mask, given, per)
        ds, ss = np.int64(params.dst_blk_stride), np.int64(params.src_blk_stride)
        dr, sr = np.int64(params.dst_rep_stride), np.int64(params.src_rep_stride)
        pd, ps = plan_tensor(dst), plan_tensor(src)
        if not params_ok(core, pd, np.int64(given), ds):  # counter mode ignores repeat_times
            return
        if repeat <= 0 or (lo == 0 and hi == 0):
            return  # a NOP on A2: dst is not written
        lane = last_lane(lo, hi, tail, per)  # each operand to its last lane, as vec_op bounds them
        d_span, s_span = mask_span(repeat, ds, dr, lane, tail, dsz, per), mask_span(repeat, ss, sr, lane, tail, ssz,
                                                                                     per)
        if not vec_ok(core, ps, s_span, code):
            return
        # the shadow: the strided walk's span counts as written (its lanes' own states are not followed yet)
        if not (vec_out(core, pd, d_span, code)
                and walk_ok(core, code, SRC, rule, pd, dsz, ds, dr, ps, ssz, ss, sr, lo, hi, repeat, tail, per)):
            return
        hz_instruction(core, LANE_VECTOR, code, pd, d_span, ps, s_span, pd, d_span if axpy else 0)
        _strided(op, dst, src, s, m, lo, hi, repeat, ds, dr, ss, sr, tail)
        count_vector(core, cls, kind, repeat * 256, pd, ps, pd if axpy else ps)
    return level0


# ---------------------------------------------------------------------------------------------------------------
# The instructions


def cast(dst, src, round_mode, *args):  # type: ignore[no-untyped-def]
    """Cast(dst, src, roundMode, count) or Cast(dst, src, roundMode, mask, repeatTime, UnaryRepeatParams): ``src``
    converted to ``dst``'s type, rounded by ``round_mode`` (CAST_NONE ... CAST_ODD)."""
    raise TypeError("Cast is device code: call it from a kernel")


@overload(cast, jit_options=INLINE_OPTIONS)
def _cast(dst, src, round_mode, *args):  # type: ignore[no-untyped-def]
    return lambda dst, src, round_mode, *args: mixed_op(_CAST, dst, src, 0, round_mode, args)


def axpy(dst, src, scalar, *args):  # type: ignore[no-untyped-def]
    """Axpy(dst, src, scalarValue, count) or Axpy(dst, src, scalarValue, mask, repeatTime, UnaryRepeatParams):
    ``dst = scalar * src + dst``, element-wise."""
    raise TypeError("Axpy is device code: call it from a kernel")


@overload(axpy, jit_options=INLINE_OPTIONS)
def _axpy(dst, src, scalar, *args):  # type: ignore[no-untyped-def]
    return lambda dst, src, scalar, *args: mixed_op(_AXPY, dst, src, scalar, 0, args)
