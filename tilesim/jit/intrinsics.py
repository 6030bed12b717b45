"""LLVM operations Numba does not expose: a float32 reinterpreted as its bits and back (one ``bitcast``, no
instruction at all), the fused multiply-add (``llvm.fma``, one rounding), an address as a typed pointer, and
vector shuffles (a repeat's pair-tree sum).

``arr.view`` reinterprets arrays, but a scalar round trip through memory, or a call to ``math.fma``'s C
fallback, keeps LLVM from vectorising the loop around it. These vectorise.
"""

from __future__ import annotations

import platform
import sys
from collections.abc import Callable
from typing import Any

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
def atomic_add(typingctx, addr, v):
    """``*addr += v`` on the int64 at an address, atomically (sequentially consistent); the old value."""
    if not (isinstance(addr, types.Integer) and isinstance(v, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        i64 = ir.IntType(64)
        p = builder.inttoptr(args[0], i64.as_pointer())
        return builder.atomic_rmw("add", p, context.cast(builder, args[1], signature.args[1], types.int64),
                                  "seq_cst")

    return types.int64(addr, v), codegen


def _int64_load(ordering: str) -> Any:
    """The codegen of an atomic load of the int64 at an address, with LLVM's memory ``ordering``."""

    def codegen(context, builder, signature, args):
        return builder.load_atomic(builder.inttoptr(args[0], ir.IntType(64).as_pointer()), ordering, 8)

    return codegen


@intrinsic
def atomic_load(typingctx, addr):
    """The int64 at an address, read atomically (sequentially consistent): another thread's store is seen."""
    if not isinstance(addr, types.Integer):
        return None
    return types.int64(addr), _int64_load("seq_cst")


@intrinsic
def flag_load(typingctx, addr):
    """The int64 at an address, read atomically but unordered with the loads and stores around it (LLVM's
    monotonic): for a flag another thread sets, which must be seen but orders nothing, read so often (each
    instruction) that :func:`atomic_load`'s barrier to the optimiser would cost the kernel's loops."""
    if not isinstance(addr, types.Integer):
        return None
    return types.int64(addr), _int64_load("monotonic")


# Linux's futex system call (its number per architecture), with which a waiting thread sleeps until the thread it
# waits for wakes it; None elsewhere, where a wait sleeps in short naps (usleep) instead.
SYS_FUTEX = {"x86_64": 202, "amd64": 202, "aarch64": 98, "arm64": 98}.get(platform.machine().lower()) \
    if sys.platform.startswith("linux") else None
_FUTEX_WAIT_PRIVATE, _FUTEX_WAKE_PRIVATE = 128, 129
_NAP_US = 50  # a wait's nap where there is no futex


@intrinsic
def futex_wait(typingctx, addr, expected, timeout_us):
    """Sleep while the 32-bit word at ``addr`` (the low half of an int64 there) holds ``expected``, until
    :func:`futex_wake` on it or ``timeout_us`` microseconds; at once if it already differs. Spurious returns
    happen: the caller checks its condition again. Without a futex: a nap of at most 50 µs."""
    if not all(isinstance(a, types.Integer) for a in (addr, expected, timeout_us)):
        return None

    def codegen(context, builder, signature, args):
        i64, i32 = ir.IntType(64), ir.IntType(32)
        us = context.cast(builder, args[2], signature.args[2], types.int64)
        if SYS_FUTEX is None:
            fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(i32, [i32]), "usleep")
            nap = builder.select(builder.icmp_signed("<", us, ir.Constant(i64, _NAP_US)), us,
                                 ir.Constant(i64, _NAP_US))
            builder.call(fn, [builder.trunc(nap, i32)])
            return context.get_dummy_value()
        ts = cgutils.alloca_once(builder, ir.LiteralStructType([i64, i64]))
        million = ir.Constant(i64, 1_000_000)
        builder.store(builder.sdiv(us, million), cgutils.gep_inbounds(builder, ts, 0, 0))
        builder.store(builder.mul(builder.srem(us, million), ir.Constant(i64, 1000)),
                      cgutils.gep_inbounds(builder, ts, 0, 1))
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(i64, [i64], var_arg=True), "syscall")
        expected = builder.and_(context.cast(builder, args[1], signature.args[1], types.int64),
                                ir.Constant(i64, 0xFFFFFFFF))
        builder.call(fn, [ir.Constant(i64, SYS_FUTEX), context.cast(builder, args[0], signature.args[0], types.int64),
                          ir.Constant(i64, _FUTEX_WAIT_PRIVATE), expected, builder.ptrtoint(ts, i64)])
        return context.get_dummy_value()

    return types.none(addr, expected, timeout_us), codegen


@intrinsic
def futex_wake(typingctx, addr):
    """Wake every thread asleep in :func:`futex_wait` on the word at ``addr`` (nothing without a futex)."""
    if not isinstance(addr, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        if SYS_FUTEX is not None:
            i64 = ir.IntType(64)
            fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(i64, [i64], var_arg=True),
                                                "syscall")
            builder.call(fn, [ir.Constant(i64, SYS_FUTEX), context.cast(builder, args[0], signature.args[0],
                                                                         types.int64),
                              ir.Constant(i64, _FUTEX_WAKE_PRIVATE), ir.Constant(i64, 0x7FFFFFFF)])
        return context.get_dummy_value()

    return types.none(addr), codegen


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


@intrinsic
def pair_tree_sum_f32(typingctx, src, blk, bits):
    """The sum of a repeat of 64 float lanes as the hardware's adjacent-pair tree (WholeReduceSum's ``vcadd``):
    lane pairs, pairs of those, ... to one value, every add in float. ``src``: the address of the repeat's first
    32 B block, the next ones ``blk`` bytes apart; a lane whose bit of ``bits`` is off enters as +0. The same adds
    in the same order as the tree written out per lane, done as vector shuffles and adds (an even and an odd
    half a level) rather than 63 scalar adds."""
    if not all(isinstance(a, types.Integer) for a in (src, blk, bits)):
        return None

    def codegen(context, builder, signature, args):
        f32, i64 = ir.FloatType(), ir.IntType(64)
        base = context.cast(builder, args[0], signature.args[0], types.int64)
        step = context.cast(builder, args[1], signature.args[1], types.int64)
        v8 = ir.VectorType(f32, 8)
        blocks = []
        for b in range(8):
            at = builder.add(base, builder.mul(step, ir.Constant(i64, b)))
            load = builder.load(builder.inttoptr(at, v8.as_pointer()))
            load.align = 4
            blocks.append(load)
        while len(blocks) > 1:  # the blocks side by side: one vector of 64 lanes
            n = blocks[0].type.count
            idx = ir.Constant(ir.VectorType(ir.IntType(32), 2 * n), [ir.Constant(ir.IntType(32), i)
                                                                    for i in range(2 * n)])
            blocks = [builder.shuffle_vector(blocks[i], blocks[i + 1], idx) for i in range(0, len(blocks), 2)]
        v = blocks[0]
        on = builder.bitcast(context.cast(builder, args[2], signature.args[2], types.uint64), ir.VectorType(
            ir.IntType(1), 64))
        v = builder.select(on, v, ir.Constant(v.type, None))  # lanes off: +0
        while v.type.count > 1:
            n = v.type.count // 2
            even = ir.Constant(ir.VectorType(ir.IntType(32), n), [ir.Constant(ir.IntType(32), 2 * i)
                                                                  for i in range(n)])
            odd = ir.Constant(ir.VectorType(ir.IntType(32), n), [ir.Constant(ir.IntType(32), 2 * i + 1)
                                                                 for i in range(n)])
            undef = ir.Constant(v.type, ir.Undefined)
            v = builder.fadd(builder.shuffle_vector(v, undef, even), builder.shuffle_vector(v, undef, odd))
        return builder.extract_element(v, ir.Constant(ir.IntType(32), 0))

    return types.float32(src, blk, bits), codegen


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
# of the vectorised cast loops and adds a pack per vector; these emit the same formulas as i32 operations. Each
# formula is built on an i32 or on a vector of i32 lanes: the scalar intrinsics serve the in-order loops, the
# block ones (:data:`BLOCK_LANES` lanes loaded, converted, stored) the in-place casts LLVM cannot vectorise.
_I16, _I32 = ir.IntType(16), ir.IntType(32)
BLOCK_LANES = 16  # lanes per block cast: one 512-bit vector of fp32 bits


def _c32(v: int) -> ir.Constant:
    return ir.Constant(_I32, v)


def _like(ty: ir.Type, elem: ir.Type) -> ir.Type:
    """``elem``, or a vector of ``elem`` as long as the vector type ``ty``."""
    return ir.VectorType(elem, ty.count) if isinstance(ty, ir.VectorType) else elem


def _k(ty: ir.Type, v: int) -> ir.Constant:
    """The i32 constant ``v`` for values of type ``ty`` (an i32 or a vector of them: every lane ``v``)."""
    return ir.Constant(ty, [v] * ty.count) if isinstance(ty, ir.VectorType) else _c32(v)


def _as_i32(builder: ir.IRBuilder, v: ir.Value, ty: types.Integer) -> ir.Value:
    if ty.bitwidth > 32:
        return builder.trunc(v, _I32)
    return builder.zext(v, _I32) if ty.bitwidth < 32 else v


def _umin(builder: ir.IRBuilder, a: ir.Value, b: ir.Value) -> ir.Value:
    return builder.select(builder.icmp_unsigned("<", a, b), a, b)


def _bf16_nearest(b: ir.IRBuilder, x: ir.Value, away: ir.Value, nans: bool = True) -> ir.Value:
    """fp32 bits ``x`` to bf16 bits (in the low 16 bits of the i32 lanes); ``away`` an i1. ``nans`` False: no
    lane is a NaN (the caller has tested), so their select is left out."""
    t = x.type
    lsb = b.and_(b.lshr(x, _k(t, 16)), _k(t, 1))
    bias = b.select(away, _k(t, 0x8000), b.add(_k(t, 0x7FFF), lsb))
    q = b.lshr(b.add(x, bias), _k(t, 16))  # the sign rides along: |x| + bias stays below 2**31 unless NaN
    if not nans:
        return q
    nan = b.or_(b.and_(b.lshr(x, _k(t, 16)), _k(t, 0x8000)), _k(t, 0x7FC0))
    return b.select(_f32_nan(b, x), nan, q)


def _f32_nan(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """The lanes of fp32 bits ``x`` that are NaNs (i1)."""
    t = x.type
    return b.icmp_unsigned(">", b.and_(x, _k(t, 0x7FFFFFFF)), _k(t, 0x7F800000))


def _fp16_nan(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """The lanes of fp16 bits ``x`` (the low 16 bits of i32 lanes) that are NaNs (i1)."""
    t = x.type
    return b.icmp_unsigned(">", b.and_(x, _k(t, 0x7FFF)), _k(t, 0x7C00))


def _fp16_nearest(b: ir.IRBuilder, x: ir.Value, away: ir.Value, nans: bool = True) -> ir.Value:
    """fp32 bits ``x`` to fp16 bits (in the low 16 bits of the i32 lanes); ``away`` an i1. ``nans`` False: no
    lane is a NaN (the caller has tested), so their select is left out."""
    t = x.type
    a = b.and_(x, _k(t, 0x7FFFFFFF))
    sign = b.and_(b.lshr(x, _k(t, 16)), _k(t, 0x8000))
    e = b.lshr(a, _k(t, 23))
    # normal results: drop 13 mantissa bits from the rebased exponent and mantissa
    r = b.sub(a, _k(t, 112 << 23))
    bias = b.select(away, _k(t, 0x1000), b.add(_k(t, 0xFFF), b.and_(b.lshr(r, _k(t, 13)), _k(t, 1))))
    normal = b.lshr(b.add(r, bias), _k(t, 13))
    # subnormal results, in units of 2**-24: the mantissa with its hidden bit, shifted by 126 - e, the shift
    # kept in [1, 31] (larger shifts round to zero as well; lanes outside it are not selected)
    e_nz = b.icmp_unsigned("!=", e, _k(t, 0))
    m = b.or_(b.and_(a, _k(t, 0x7FFFFF)), b.select(e_nz, _k(t, 0x800000), _k(t, 0)))
    sh = b.sub(_k(t, 126), b.select(e_nz, e, _k(t, 1)))
    sh = _umin(b, sh, _k(t, 31))
    sh = b.select(b.icmp_unsigned("<", sh, _k(t, 1)), _k(t, 1), sh)
    half = b.shl(_k(t, 1), b.sub(sh, _k(t, 1)))
    sbias = b.select(away, half, b.add(b.sub(half, _k(t, 1)), b.and_(b.lshr(m, sh), _k(t, 1))))
    sub = b.lshr(b.add(m, sbias), sh)
    q = b.select(b.icmp_unsigned("<", e, _k(t, 113)), sub, normal)
    q = _umin(b, q, _k(t, 0x7C00))
    if nans:
        nan = b.or_(_k(t, 0x7C00), b.lshr(b.and_(a, _k(t, 0x7FFFFF)), _k(t, 13)))
        nan = b.select(b.icmp_unsigned("==", nan, _k(t, 0x7C00)), _k(t, 0x7C01), nan)
        is_nan = _f32_nan(b, x)
        q = b.select(is_nan, nan, q)
    q = b.or_(sign, q)
    if HARDWARE_FP16:  # round to nearest even in hardware, NaNs as above: the same bits, one instruction
        hw = b.fptrunc(b.bitcast(x, _like(t, ir.FloatType())), _like(t, ir.HalfType()))
        hw = b.zext(b.bitcast(hw, _like(t, _I16)), t)
        q = b.select(away, q, b.select(is_nan, b.or_(sign, nan), hw) if nans else hw)
    return q


def _bf16_widen(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """bf16 bits (the low 16 bits of the i32 lanes ``x``, the rest 0) to fp32 bits."""
    return b.shl(x, _k(x.type, 16))


def _fp16_widen(b: ir.IRBuilder, x: ir.Value, nans: bool = True) -> ir.Value:
    """fp16 bits (the low 16 bits of the i32 lanes ``x``, the rest 0) to fp32 bits. ``nans`` False: no lane is a
    NaN (the caller has tested), which the hardware conversion alone then gets right."""
    t = x.type
    if HARDWARE_FP16:  # exact in hardware but for NaN payloads (a signalling NaN comes out quiet): as below
        hw = b.bitcast(b.fpext(b.bitcast(b.trunc(x, _like(t, _I16)), _like(t, ir.HalfType())),
                               _like(t, ir.FloatType())), t)
        if not nans:
            return hw
    sign = b.shl(b.and_(x, _k(t, 0x8000)), _k(t, 16))
    e = b.and_(b.lshr(x, _k(t, 10)), _k(t, 0x1F))
    m = b.and_(x, _k(t, 0x3FF))
    special = b.or_(_k(t, 0x7F800000), b.shl(m, _k(t, 13)))
    is_special = b.icmp_unsigned("==", e, _k(t, 31))
    if HARDWARE_FP16:
        return b.select(is_special, b.or_(sign, special), hw)
    normal = b.or_(b.shl(b.add(e, _k(t, 112)), _k(t, 23)), b.shl(m, _k(t, 13)))
    # subnormal m * 2**-24, normalised in integers (a float multiply here kept LLVM from vectorising):
    # leading bit p, exponent p + 103, the bits below it as the mantissa; m = 0 gives 0
    name = f"llvm.ctlz.v{t.count}i32" if isinstance(t, ir.VectorType) else "llvm.ctlz.i32"
    ctlz = cgutils.get_or_insert_function(b.module, ir.FunctionType(t, [t, ir.IntType(1)]), name)
    p = b.sub(_k(t, 31), b.call(ctlz, [m, ir.Constant(ir.IntType(1), 0)]))
    sub = b.or_(b.shl(b.add(p, _k(t, 103)), _k(t, 23)),
                b.and_(b.shl(m, b.sub(_k(t, 23), _umin(b, p, _k(t, 23)))), _k(t, 0x7FFFFF)))
    sub = b.select(b.icmp_unsigned("==", m, _k(t, 0)), _k(t, 0), sub)
    bits = b.select(b.icmp_unsigned("==", e, _k(t, 0)), sub, b.select(is_special, special, normal))
    return b.or_(sign, bits)


def _nearest_intrinsic(formula: Callable[[ir.IRBuilder, ir.Value, ir.Value], ir.Value]) -> Callable[..., Any]:
    def typer(typingctx: Any, u: types.Type, away: types.Type) -> Any:
        if not (isinstance(u, types.Integer) and isinstance(away, types.Boolean)):
            return None

        def codegen(context, builder, signature, args):
            return builder.trunc(formula(builder, _as_i32(builder, args[0], u), args[1]), _I16)

        return types.uint16(u, away), codegen
    return typer


def _widen_intrinsic(formula: Callable[[ir.IRBuilder, ir.Value], ir.Value]) -> Callable[..., Any]:
    def typer(typingctx: Any, h: types.Type) -> Any:
        if not isinstance(h, types.Integer):
            return None

        def codegen(context, builder, signature, args):
            return formula(builder, builder.and_(_as_i32(builder, args[0], h), _c32(0xFFFF)))

        return types.uint32(h), codegen
    return typer


_V16, _V32 = ir.VectorType(_I16, BLOCK_LANES), ir.VectorType(_I32, BLOCK_LANES)


def _any_lane(b: ir.IRBuilder, lanes: ir.Value) -> ir.Value:
    """Whether any lane of a vector of i1 is set (one vector compare's mask and a test on x86)."""
    fn = cgutils.get_or_insert_function(b.module, ir.FunctionType(ir.IntType(1), [lanes.type]),
                                        f"llvm.vector.reduce.or.v{lanes.type.count}i1")
    return b.call(fn, [lanes])


def _store_by_nans(b: ir.IRBuilder, nan_lanes: ir.Value | None, store: Callable[[bool], None]) -> None:
    """``store(nans)``: with ``nans`` False (the formula without its NaN selects) when no lane of
    ``nan_lanes`` is set, which is nearly always; ``nan_lanes`` None: always with them."""
    if nan_lanes is None:
        store(True)
        return
    with b.if_else(_any_lane(b, nan_lanes), likely=False) as (with_nans, without):
        with with_nans:
            store(True)
        with without:
            store(False)


def _narrow_block_intrinsic(formula: Callable[..., ir.Value]) -> Callable[..., Any]:
    def typer(typingctx: Any, dst: types.Type, src: types.Type, away: types.Type) -> Any:
        if not (isinstance(dst, types.Integer) and isinstance(src, types.Integer)
                and isinstance(away, types.Boolean)):
            return None

        def codegen(context, builder, signature, args):
            x = builder.load(builder.inttoptr(args[1], _V32.as_pointer()), align=4)
            out = builder.inttoptr(args[0], _V16.as_pointer())
            _store_by_nans(builder, _f32_nan(builder, x), lambda nans: builder.store(
                builder.trunc(formula(builder, x, args[2], nans), _V16), out, align=2))
            return context.get_dummy_value()

        return types.none(dst, src, away), codegen
    return typer


def _widen_block_intrinsic(formula: Callable[..., ir.Value],
                           nan_lanes: Callable[[ir.IRBuilder, ir.Value], ir.Value] | None = None) -> Callable[..., Any]:
    """``nan_lanes``: the b16 format's NaN test, where the formula is cheaper without NaNs (fp16 in hardware)."""
    def typer(typingctx: Any, dst: types.Type, src: types.Type) -> Any:
        if not (isinstance(dst, types.Integer) and isinstance(src, types.Integer)):
            return None

        def codegen(context, builder, signature, args):
            x = builder.zext(builder.load(builder.inttoptr(args[1], _V16.as_pointer()), align=2), _V32)
            out = builder.inttoptr(args[0], _V32.as_pointer())
            split = nan_lanes is not None and HARDWARE_FP16
            _store_by_nans(builder, nan_lanes(builder, x) if split else None,
                           lambda nans: builder.store(formula(builder, x) if nans else formula(builder, x, False),
                                                      out, align=4))
            return context.get_dummy_value()

        return types.none(dst, src), codegen
    return typer


# fp32 bits to b16 bits rounded to nearest, ties to even (``away`` False: CAST_RINT, CAST_NONE) or away from zero
# (CAST_ROUND); past the largest finite value: inf. NaN: bf16 gives sign | 0x7FC0, as ml_dtypes; fp16 keeps its
# top payload bits and stays a NaN, as numpy's ``astype(float16)``. fp16 subnormals included.
bf16_nearest_bits = intrinsic(_nearest_intrinsic(_bf16_nearest))
fp16_nearest_bits = intrinsic(_nearest_intrinsic(_fp16_nearest))
# b16 bits to fp32 bits, exactly (fp16: subnormals normalised, inf and NaN with their payload)
bf16_widen_bits = intrinsic(_widen_intrinsic(_bf16_widen))
fp16_widen_bits = intrinsic(_widen_intrinsic(_fp16_widen))
# The same on BLOCK_LANES lanes at once: ``(dst, src[, away])`` addresses; all the lanes are read before any is
# written, so a block may overlap itself (an in-place cast) where that gives the in-order loop's results.
# A block without NaN lanes (nearly every one) is converted without the formulas' NaN selects.
bf16_nearest_block = intrinsic(_narrow_block_intrinsic(_bf16_nearest))
fp16_nearest_block = intrinsic(_narrow_block_intrinsic(_fp16_nearest))
bf16_widen_block = intrinsic(_widen_block_intrinsic(_bf16_widen))
fp16_widen_block = intrinsic(_widen_block_intrinsic(_fp16_widen, _fp16_nan))


# glibc's user contexts (ucontext.h), with which a host thread runs the cores of a SyncAll launch as coroutines:
# a core waiting at SyncAll switches to the thread's scheduler, which switches to a core that can go on.
UCONTEXT_BYTES = 1024  # sizeof(ucontext_t) is 968 on x86-64 glibc, 4560 on aarch64 (its FP state)
if platform.machine().lower() in ("aarch64", "arm64"):
    UCONTEXT_BYTES = 8192


def _libc_call(builder, name, ret, args, values, var_arg=False):  # type: ignore[no-untyped-def]
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ret, args, var_arg=var_arg), name)
    return builder.call(fn, values)


@intrinsic
def get_ucontext(typingctx, at):
    """getcontext(at): the calling thread's context into the ucontext_t at address ``at`` (a template for
    :func:`make_ucontext`)."""
    if not isinstance(at, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        i64, i32 = ir.IntType(64), ir.IntType(32)
        _libc_call(builder, "getcontext", i32, [i64], [context.cast(builder, args[0], signature.args[0], types.int64)])
        return context.get_dummy_value()

    return types.none(at), codegen


@intrinsic
def make_ucontext(typingctx, at, fn, arg):
    """makecontext(at, fn, 1, arg): the context at ``at`` (its stack and uc_link set) made to run the C function
    at address ``fn`` with the int64 ``arg`` when switched to."""
    if not all(isinstance(a, types.Integer) for a in (at, fn, arg)):
        return None

    def codegen(context, builder, signature, args):
        i64, i32 = ir.IntType(64), ir.IntType(32)
        at_, fn_, arg_ = (context.cast(builder, v, t, types.int64) for v, t in zip(args, signature.args, strict=True))
        _libc_call(builder, "makecontext", ir.VoidType(), [i64, i64, i32], [at_, fn_, ir.Constant(i32, 1), arg_],
                   var_arg=True)
        return context.get_dummy_value()

    return types.none(at, fn, arg), codegen


@intrinsic
def swap_ucontext(typingctx, save, load):
    """swapcontext(save, load): this context saved at ``save``, the one at ``load`` run; returns when switched
    back to."""
    if not all(isinstance(a, types.Integer) for a in (save, load)):
        return None

    def codegen(context, builder, signature, args):
        i64, i32 = ir.IntType(64), ir.IntType(32)
        vals = [context.cast(builder, v, t, types.int64) for v, t in zip(args, signature.args, strict=True)]
        _libc_call(builder, "swapcontext", i32, [i64, i64], vals)
        return context.get_dummy_value()

    return types.none(save, load), codegen
