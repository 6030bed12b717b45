"""Vector instructions on fp32 LocalTensors (Add, Sub, Mul, Div, Muls, Adds, Exp, Sqrt, Copy, Duplicate, BroadCast,
Cast, GetValue/SetValue). Each counts its 256 B repeats by class. In-place forms (dst is a source) are fine;
every op reads element k before it writes element k.
"""

from __future__ import annotations

import numpy as np

from .cast import narrow_bits, widen_bits
from .device import (
    VEC_BINARY,
    VEC_CAST,
    VEC_DIV,
    VEC_DUP,
    VEC_SCALAR,
    VEC_UNARY,
    at,
    count_scalar,
    count_vector,
    f32,
    flow1,
    flow2,
    flow_lanes,
    u16,
    u32,
    ub_in,
    ub_out,
    vec_ok,
    vec_out,
)
from .expf import exp_f32
from .intrinsics import copy_bytes
from .jit import njit


@njit(cache=True)
def _disjoint(a, na, b, nb):
    """The byte ranges [a, a + na) and [b, b + nb) do not overlap."""
    return a + na <= b or b + nb <= a


@njit(cache=True, inline="always")
def _ok3(core, dst, a, b, n):
    """Operands of a binary fp32 instruction; the sources' shadow state flows to the destination."""
    if not (vec_ok(core, a, 4 * n) and vec_ok(core, b, 4 * n) and vec_ok(core, dst, 4 * n)):
        return False
    flow2(core, dst, a, b, 4 * n)
    return True


@njit(cache=True, inline="always")
def _ok1(core, dst, src, n):
    """Operands of an elementwise fp32 instruction of one source."""
    if not (vec_ok(core, src, 4 * n) and vec_ok(core, dst, 4 * n)):
        return False
    flow1(core, dst, src, 4 * n)
    return True


@njit(cache=True, inline="always")
def _ok_lanes(core, dst, src, n_dst, n_src, dst_lane, src_lane, step):
    """Operands of a cast or broadcast: ``n_dst // dst_lane`` lanes, each from source lane ``i * step``."""
    if not (vec_ok(core, src, n_src) and vec_ok(core, dst, n_dst)):
        return False
    flow_lanes(core, dst, src, n_dst // dst_lane, dst_lane, src_lane, step)
    return True


# The elementwise instructions. A kernel often computes in place (dst is a source); two views of one address look
# like overlapping arrays to LLVM, whose runtime overlap check then sends the loop down its scalar path (8x slower
# for Exp). So each instruction has a loop over one view for the in-place case. (Passing the operation as a
# function argument would remove the repetition, but Numba cannot cache a function that takes one.)

@njit(cache=True)
def add(core, dst, a, b, n):
    if not _ok3(core, dst, a, b, n):
        return
    d = f32(core, dst, n)
    if a.addr == dst.addr:
        y = f32(core, b, n)
        for i in range(n):
            d[i] = d[i] + y[i]
    elif b.addr == dst.addr:
        x = f32(core, a, n)
        for i in range(n):
            d[i] = x[i] + d[i]
    else:
        x, y = f32(core, a, n), f32(core, b, n)
        for i in range(n):
            d[i] = x[i] + y[i]
    count_vector(core, VEC_BINARY, 4 * n, dst, a, b)


@njit(cache=True)
def sub(core, dst, a, b, n):
    if not _ok3(core, dst, a, b, n):
        return
    d = f32(core, dst, n)
    if a.addr == dst.addr:
        y = f32(core, b, n)
        for i in range(n):
            d[i] = d[i] - y[i]
    elif b.addr == dst.addr:
        x = f32(core, a, n)
        for i in range(n):
            d[i] = x[i] - d[i]
    else:
        x, y = f32(core, a, n), f32(core, b, n)
        for i in range(n):
            d[i] = x[i] - y[i]
    count_vector(core, VEC_BINARY, 4 * n, dst, a, b)


@njit(cache=True)
def mul(core, dst, a, b, n):
    if not _ok3(core, dst, a, b, n):
        return
    d = f32(core, dst, n)
    if a.addr == dst.addr:
        y = f32(core, b, n)
        for i in range(n):
            d[i] = d[i] * y[i]
    elif b.addr == dst.addr:
        x = f32(core, a, n)
        for i in range(n):
            d[i] = x[i] * d[i]
    else:
        x, y = f32(core, a, n), f32(core, b, n)
        for i in range(n):
            d[i] = x[i] * y[i]
    count_vector(core, VEC_BINARY, 4 * n, dst, a, b)


@njit(cache=True, error_model="numpy")
def div(core, dst, a, b, n):
    """IEEE division: x/0 is ±inf or NaN, as on the NPU (Numba's default error model would test every divisor
    and raise ZeroDivisionError, which also keeps the loop from vectorising)."""
    if not _ok3(core, dst, a, b, n):
        return
    d = f32(core, dst, n)
    if a.addr == dst.addr:
        y = f32(core, b, n)
        for i in range(n):
            d[i] = d[i] / y[i]
    elif b.addr == dst.addr:
        x = f32(core, a, n)
        for i in range(n):
            d[i] = x[i] / d[i]
    else:
        x, y = f32(core, a, n), f32(core, b, n)
        for i in range(n):
            d[i] = x[i] / y[i]
    count_vector(core, VEC_DIV, 4 * n, dst, a, b)


@njit(cache=True)
def muls(core, dst, a, s, n):
    if not _ok1(core, dst, a, n):
        return
    d = f32(core, dst, n)
    v = np.float32(s)
    if a.addr == dst.addr:
        for i in range(n):
            d[i] = d[i] * v
    else:
        x = f32(core, a, n)
        for i in range(n):
            d[i] = x[i] * v
    count_vector(core, VEC_SCALAR, 4 * n, dst, a, a)


@njit(cache=True)
def adds(core, dst, a, s, n):
    if not _ok1(core, dst, a, n):
        return
    d = f32(core, dst, n)
    v = np.float32(s)
    if a.addr == dst.addr:
        for i in range(n):
            d[i] = d[i] + v
    else:
        x = f32(core, a, n)
        for i in range(n):
            d[i] = x[i] + v
    count_vector(core, VEC_SCALAR, 4 * n, dst, a, a)


@njit(cache=True)
def _exp(v):
    """The Exp instruction on one fp32 value: :func:`tilesim.expf.exp_f32` (within 1 ulp of the correctly rounded
    e^x; the NPU's own Exp error is not modelled)."""
    return exp_f32(v)


@njit(cache=True)
def exp(core, dst, a, n):
    if not _ok1(core, dst, a, n):
        return
    d = f32(core, dst, n)
    if a.addr == dst.addr:
        for i in range(n):
            d[i] = _exp(d[i])
    else:
        x = f32(core, a, n)
        for i in range(n):
            d[i] = _exp(x[i])
    count_vector(core, VEC_UNARY, 4 * n, dst, a, a)


@njit(cache=True, host=True)
def exp_values(a):
    """Host helper: the values the Exp instruction gives for a float32 array, bit for bit (for oracles that
    replay a kernel's instruction order; numpy's own float32 exp differs from it by up to 2 ulp)."""
    out = np.empty_like(a)
    flat, res = a.reshape(-1), out.reshape(-1)
    for i in range(flat.size):
        res[i] = _exp(flat[i])
    return out


@njit(cache=True, error_model="numpy")
def sqrt(core, dst, a, n):
    """IEEE square root: NaN below 0 (Numba's default error model would raise)."""
    if not _ok1(core, dst, a, n):
        return
    d = f32(core, dst, n)
    if a.addr == dst.addr:
        for i in range(n):
            d[i] = np.sqrt(d[i])
    else:
        x = f32(core, a, n)
        for i in range(n):
            d[i] = np.sqrt(x[i])
    count_vector(core, VEC_UNARY, 4 * n, dst, a, a)


@njit(cache=True)
def copy(core, dst, src, n):
    """Copy: UB to UB through the vector unit, ``n`` fp32 elements."""
    if not _ok1(core, dst, src, n):
        return
    if _disjoint(dst.addr, 4 * n, src.addr, 4 * n):
        copy_bytes(core.base + dst.addr, core.base + src.addr, 4 * n)
    else:  # element by element, in order, as the instruction reads element k before writing it
        d, s = f32(core, dst, n), f32(core, src, n)
        for i in range(n):
            d[i] = s[i]
    count_vector(core, VEC_UNARY, 4 * n, dst, src, src)


@njit(cache=True)
def duplicate(core, dst, value, n):
    if not vec_out(core, dst, 4 * n):
        return
    f32(core, dst, n)[:] = np.float32(value)
    count_vector(core, VEC_DUP, 4 * n, dst, dst, dst)


@njit(cache=True)
def cast_to_f32(core, dst, src, n, kind):
    """Cast b16 (``kind``: fp16 or bf16 bits) to fp32, exactly. ``src`` may be the upper half of ``dst``'s
    buffer (the kernels' in-place widening): element k is read before any write can reach it."""
    if not _ok_lanes(core, dst, src, 4 * n, 2 * n, 4, 2, 1):
        return
    d, s = u32(core, dst, n), u16(core, src, n)
    widen_bits(s, d, n, kind)
    count_vector(core, VEC_CAST, 4 * n, dst, src, src)


@njit(cache=True)
def cast_from_f32(core, dst, src, n, kind, mode):
    """Cast fp32 to b16 bits with RoundMode ``mode``; ``dst`` may be ``src`` reinterpreted (in place)."""
    if not _ok_lanes(core, dst, src, 2 * n, 4 * n, 2, 4, 1):
        return
    d, s = u16(core, dst, n), u32(core, src, n)
    narrow_bits(s, d, n, kind, mode)
    count_vector(core, VEC_CAST, 4 * n, dst, src, src)


@njit(cache=True)
def get_value(core, t, k):
    """LocalTensor.GetValue(k) on fp32: a scalar read of UB."""
    if not ub_in(core, at(t, 4 * k), 4):
        return np.float32(0)
    count_scalar(core, t, False)
    return f32(core, t, k + 1)[k]


@njit(cache=True)
def set_value(core, t, k, v):
    if not ub_out(core, at(t, 4 * k), 4):
        return
    count_scalar(core, t, True)
    f32(core, t, k + 1)[k] = np.float32(v)
