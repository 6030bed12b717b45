"""LLVM operations Numba does not expose: a float32 reinterpreted as its bits and back (one ``bitcast``, no
instruction at all), the fused multiply-add (``llvm.fma``, one rounding) and an address as a typed pointer.

``arr.view`` reinterprets arrays, but a scalar round trip through memory, or a call to ``math.fma``'s C
fallback, keeps LLVM from vectorising the loop around it. These vectorise.
"""

from __future__ import annotations

from llvmlite import ir
from llvmlite.binding import get_host_cpu_features, get_process_triple
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic


@intrinsic
def f32_as_u32(typingctx, x):
    """The bits of a float32 as a uint32."""
    if x != types.float32:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(32))

    return types.uint32(types.float32), codegen


@intrinsic
def u32_as_f32(typingctx, u):
    """The float32 whose bits are the low 32 bits of an integer."""
    if not isinstance(u, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        v = args[0]
        if u.bitwidth > 32:
            v = builder.trunc(v, ir.IntType(32))
        elif u.bitwidth < 32:
            v = builder.zext(v, ir.IntType(32))
        return builder.bitcast(v, ir.FloatType())

    return types.float32(u), codegen


@intrinsic
def fma_f32(typingctx, a, b, c):
    """a·b + c in float32 with one rounding (the hardware's FMA where the CPU has one)."""
    if not (a == b == c == types.float32):
        return None

    def codegen(context, builder, signature, args):
        f = ir.FloatType()
        fn = builder.module.declare_intrinsic("llvm.fma", [f], ir.FunctionType(f, [f, f, f]))
        return builder.call(fn, args)

    return types.float32(types.float32, types.float32, types.float32), codegen



@intrinsic
def address_as_pointer(typingctx, addr, dtype):
    """An integer address as a pointer to ``dtype`` (a NumPy scalar type or an array's ``.dtype``), for
    ``numba.carray``: an array over memory some other array owns, with no reference count of its own, so that
    taking it costs neither the slicing checks of ``arr[a:b].view(t)`` nor an atomic increment shared by every
    thread that views the same owner."""
    if not isinstance(addr, types.Integer):
        return None
    if isinstance(dtype, types.NumberClass):
        elem = dtype.instance_type
    elif isinstance(dtype, types.DType):
        elem = dtype.dtype
    else:
        return None
    ptr = types.CPointer(elem)

    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], context.get_value_type(ptr))

    return ptr(addr, dtype), codegen


@intrinsic
def copy_bytes(typingctx, dst, src, n):
    """``memcpy(dst, src, n)`` between integer addresses (``llvm.memcpy``: the C library's tuned copy for long
    runs, inline moves for short ones). The ranges must not overlap."""
    if not all(isinstance(a, types.Integer) for a in (dst, src, n)):
        return None

    def codegen(context, builder, signature, args):
        i8p = ir.IntType(8).as_pointer()
        d = builder.inttoptr(args[0], i8p)
        s = builder.inttoptr(args[1], i8p)
        count = context.cast(builder, args[2], signature.args[2], types.int64)
        cgutils.raw_memcpy(builder, d, s, count, context.get_constant(types.int64, 1))
        return context.get_dummy_value()

    return types.none(dst, src, n), codegen


@intrinsic
def stream_line(typingctx, dst, src):
    """64 bytes from ``src`` (any alignment) to ``dst`` (a multiple of 64) with a non-temporal store: the line goes
    to memory without being read into the cache first, and without evicting what is there."""
    if not (isinstance(dst, types.Integer) and isinstance(src, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        line = ir.VectorType(ir.FloatType(), 16)
        v = builder.load(builder.inttoptr(args[1], line.as_pointer()), align=1)
        st = builder.store(v, builder.inttoptr(args[0], line.as_pointer()), align=64)
        st.set_metadata("nontemporal", builder.module.add_metadata([ir.Constant(ir.IntType(32), 1)]))
        return context.get_dummy_value()

    return types.none(dst, src), codegen


@intrinsic
def store_fence(typingctx):
    """This thread's non-temporal stores are visible before any store that follows: ``sfence`` on x86 (where an
    ordinary fence orders nothing, every other store being ordered already), a full fence elsewhere."""

    def codegen(context, builder, signature, args):
        if get_process_triple().startswith(("x86_64", "i686", "i386")):
            fn = builder.module.declare_intrinsic("llvm.x86.sse.sfence", [], ir.FunctionType(ir.VoidType(), []))
            builder.call(fn, [])
        else:
            builder.fence("seq_cst")
        return context.get_dummy_value()

    return types.none(), codegen


def _hardware_fp16() -> bool:
    """Whether this host converts fp16 in hardware (x86: F16C's vcvtph2ps / vcvtps2ph; every aarch64 core):
    then LLVM's ``fpext`` and ``fptrunc`` between half and float are a vector instruction each, not a library
    call per element."""
    if not get_process_triple().startswith(("x86_64", "i686", "i386")):
        return get_process_triple().startswith(("aarch64", "arm64"))
    try:
        return bool(get_host_cpu_features().get("f16c", False))
    except RuntimeError:  # no features reported: the portable formulas
        return False


HARDWARE_FP16 = _hardware_fp16()

# The 16-bit casts in 32-bit integer arithmetic. Numba widens uint32 arithmetic to 64 bits, which halves the lanes
# of the vectorised cast loops and adds a pack per vector; these emit the same formulas as i32 operations.
_I16, _I32 = ir.IntType(16), ir.IntType(32)


def _c32(v: int) -> ir.Constant:
    return ir.Constant(_I32, v)


def _as_i32(builder: ir.IRBuilder, v: ir.Value, ty: types.Integer) -> ir.Value:
    if ty.bitwidth > 32:
        return builder.trunc(v, _I32)
    return builder.zext(v, _I32) if ty.bitwidth < 32 else v


def _umin(builder: ir.IRBuilder, a: ir.Value, b: ir.Value) -> ir.Value:
    return builder.select(builder.icmp_unsigned("<", a, b), a, b)


@intrinsic
def bf16_nearest_bits(typingctx, u, away):
    """fp32 bits to bf16 bits rounded to nearest, ties to even (``away`` False: CAST_RINT, CAST_NONE) or away from
    zero (CAST_ROUND); past the largest finite value: inf; NaN: sign | 0x7FC0, as ml_dtypes."""
    if not (isinstance(u, types.Integer) and isinstance(away, types.Boolean)):
        return None

    def codegen(context, builder, signature, args):
        b = builder
        x = _as_i32(b, args[0], u)
        a = b.and_(x, _c32(0x7FFFFFFF))
        lsb = b.and_(b.lshr(x, _c32(16)), _c32(1))
        bias = b.select(args[1], _c32(0x8000), b.add(_c32(0x7FFF), lsb))
        q = b.lshr(b.add(x, bias), _c32(16))  # the sign rides along: |x| + bias stays below 2**31 unless NaN
        nan = b.or_(b.and_(b.lshr(x, _c32(16)), _c32(0x8000)), _c32(0x7FC0))
        return b.trunc(b.select(b.icmp_unsigned(">", a, _c32(0x7F800000)), nan, q), _I16)

    return types.uint16(u, away), codegen


@intrinsic
def fp16_nearest_bits(typingctx, u, away):
    """fp32 bits to fp16 bits rounded to nearest (as :func:`bf16_nearest_bits`), subnormals included; overflow
    gives inf; NaN keeps its top payload bits and stays a NaN, as numpy's ``astype(float16)``."""
    if not (isinstance(u, types.Integer) and isinstance(away, types.Boolean)):
        return None

    def codegen(context, builder, signature, args):
        b = builder
        x = _as_i32(b, args[0], u)
        a = b.and_(x, _c32(0x7FFFFFFF))
        sign = b.and_(b.lshr(x, _c32(16)), _c32(0x8000))
        e = b.lshr(a, _c32(23))
        # normal results: drop 13 mantissa bits from the rebased exponent and mantissa
        t = b.sub(a, _c32(112 << 23))
        bias = b.select(args[1], _c32(0x1000), b.add(_c32(0xFFF), b.and_(b.lshr(t, _c32(13)), _c32(1))))
        normal = b.lshr(b.add(t, bias), _c32(13))
        # subnormal results, in units of 2**-24: the mantissa with its hidden bit, shifted by 126 - e, the shift
        # kept in [1, 31] (larger shifts round to zero as well; lanes outside it are not selected)
        e_nz = b.icmp_unsigned("!=", e, _c32(0))
        m = b.or_(b.and_(a, _c32(0x7FFFFF)), b.select(e_nz, _c32(0x800000), _c32(0)))
        sh = b.sub(_c32(126), b.select(e_nz, e, _c32(1)))
        sh = _umin(b, sh, _c32(31))
        sh = b.select(b.icmp_unsigned("<", sh, _c32(1)), _c32(1), sh)
        half = b.shl(_c32(1), b.sub(sh, _c32(1)))
        sbias = b.select(args[1], half, b.add(b.sub(half, _c32(1)), b.and_(b.lshr(m, sh), _c32(1))))
        sub = b.lshr(b.add(m, sbias), sh)
        q = b.select(b.icmp_unsigned("<", e, _c32(113)), sub, normal)
        q = _umin(b, q, _c32(0x7C00))
        nan = b.or_(_c32(0x7C00), b.lshr(b.and_(a, _c32(0x7FFFFF)), _c32(13)))
        nan = b.select(b.icmp_unsigned("==", nan, _c32(0x7C00)), _c32(0x7C01), nan)
        is_nan = b.icmp_unsigned(">", a, _c32(0x7F800000))
        q = b.or_(sign, b.select(is_nan, nan, q))
        if HARDWARE_FP16:  # round to nearest even in hardware, NaNs as above: the same bits, one instruction
            hw = b.zext(b.bitcast(b.fptrunc(b.bitcast(x, ir.FloatType()), ir.HalfType()), _I16), _I32)
            q = b.select(args[1], q, b.select(is_nan, b.or_(sign, nan), hw))
        return b.trunc(q, _I16)

    return types.uint16(u, away), codegen


@intrinsic
def bf16_widen_bits(typingctx, h):
    """bf16 bits to fp32 bits (exact: the bits shifted up)."""
    if not isinstance(h, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        return builder.shl(_as_i32(builder, args[0], h), _c32(16))

    return types.uint32(h), codegen


@intrinsic
def fp16_widen_bits(typingctx, h):
    """fp16 bits to fp32 bits, exactly: subnormals normalised, inf and NaN with their payload."""
    if not isinstance(h, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        b = builder
        x = b.and_(_as_i32(b, args[0], h), _c32(0xFFFF))
        sign = b.shl(b.and_(x, _c32(0x8000)), _c32(16))
        e = b.and_(b.lshr(x, _c32(10)), _c32(0x1F))
        m = b.and_(x, _c32(0x3FF))
        normal = b.or_(b.shl(b.add(e, _c32(112)), _c32(23)), b.shl(m, _c32(13)))
        special = b.or_(_c32(0x7F800000), b.shl(m, _c32(13)))
        # subnormal m * 2**-24, normalised in integers (a float multiply here kept LLVM from vectorising):
        # leading bit p, exponent p + 103, the bits below it as the mantissa; m = 0 gives 0
        ctlz = b.module.declare_intrinsic("llvm.ctlz", [_I32], ir.FunctionType(_I32, [_I32, ir.IntType(1)]))
        p = b.sub(_c32(31), b.call(ctlz, [m, ir.Constant(ir.IntType(1), 0)]))
        sub = b.or_(b.shl(b.add(p, _c32(103)), _c32(23)),
                    b.and_(b.shl(m, b.sub(_c32(23), _umin(b, p, _c32(23)))), _c32(0x7FFFFF)))
        sub = b.select(b.icmp_unsigned("==", m, _c32(0)), _c32(0), sub)
        is_special = b.icmp_unsigned("==", e, _c32(31))
        if HARDWARE_FP16:  # exact in hardware but for NaN payloads (a signalling NaN comes out quiet): as above
            hw = b.bitcast(b.fpext(b.bitcast(b.trunc(x, _I16), ir.HalfType()), ir.FloatType()), _I32)
            return b.select(is_special, b.or_(sign, special), hw)
        bits = b.select(b.icmp_unsigned("==", e, _c32(0)), sub, b.select(is_special, special, normal))
        return b.or_(sign, bits)

    return types.uint32(h), codegen
