"""LLVM operations Numba does not expose: a float32 reinterpreted as its bits and back (one ``bitcast``, no
instruction at all), the fused multiply-add (``llvm.fma``, one rounding) and an address as a typed pointer.

``arr.view`` reinterprets arrays, but a scalar round trip through memory, or a call to ``math.fma``'s C
fallback, keeps LLVM from vectorising the loop around it. These vectorise.
"""

from __future__ import annotations

from llvmlite import ir
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
