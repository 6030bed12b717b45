"""The kernel's context, LocalTensor and GlobalTensor.

A kernel receives a KernelContext: the address of its core's context block (the core's place in the launch,
where its UB, counters and checked-mode records are, the TPipe's buffers and queue states, the vector mask
register) and the build it runs in (``checks``: None fast, a bool checked, False when it records without
checks; see :mod:`tilesim.core.records`). Every tensor carries both, so that an instruction needs nothing but its
operands, as in Ascend C: ``add(z, x, y, n)``.

A LocalTensor is ``(ctx, checks, buf, addr, nbytes, gen)`` with its element type in its Numba type: the UB plan
row (TPipe buffer) it lies in, its byte offset in the core's UB, its length in bytes, and for a queue tensor the
allocation it came from (checked mode tells a tensor used after its slot was freed or reallocated). ``t[k]`` is
the sub-tensor k elements on (``operator[]``), ``t.reinterpret_cast(uint32)`` the same bytes as another type.

A GlobalTensor is ``(ctx, checks, tag, base, size, off)`` with its element type: the GM tensor's tag (its index
among the launch's GM arguments, for reports), the host address and size in bytes of the whole tensor, and the
byte offset of this (sub-)tensor's element 0 in it (``gm[k]``).
"""

from __future__ import annotations

import operator

import numpy as np
from numba import carray, types
from numba.extending import overload, overload_attribute, overload_method

from tilesim.core.pipes import LANE_SCALAR
from tilesim.core.records import (
    FAULT_WORDS,
    MAX_BUFS,
    MAX_QUE_SLOTS,
    Core,
    GmView,
    count_gm_scalar,
    count_scalar,
    gm_ok,
    ub_in,
    ub_out,
)
from tilesim.core.ub import PlanTensor
from tilesim.jit import OVERLOAD_OPTIONS, njit
from tilesim.jit.intrinsics import address_as_pointer
from tilesim.machine.dtypes import ElemType, uint8
from tilesim.machine.hazard import hz_access, hz_issue, op_code
from tilesim.machine.structs import StructType, constructor, struct_type

# The context block of a core: int64 words.
X_IDX, X_BLOCK_NUM, X_BASE, X_UB_SIZE, X_PLAN_AT, X_PLAN_ROWS, X_CNT_AT, X_CNT_SIZE, X_ERR_AT, X_ERR_SIZE = range(10)
X_POOL = 10  # TPipe: the end of the buffers placed so far, in bytes
X_WS_AT, X_WS_SIZE = 11, 12  # GetUserWorkspace: address and bytes
X_MASK_LO, X_MASK_HI, X_COUNTER_MODE = 13, 14, 15  # the vector mask register, and SetMaskCount / SetMaskNorm
X_FAULT = 16  # FAULT_WORDS: what stopped the kernel, the buffer, a detail, ... (tilesim.core.records's fault record)
X_PLAN = X_FAULT + FAULT_WORDS  # MAX_BUFS rows of (offset, slot bytes, slots): the UB plan as InitBuffer placed it
X_QUE = X_PLAN + 3 * MAX_BUFS  # MAX_BUFS rows of Q_WORDS: each buffer's queue state
Q_POS, Q_DEPTH, Q_NEXT, Q_COUNT, Q_HEAD, Q_SLOT = range(6)  # Q_SLOT: Q_NEXT modulo the buffer count
Q_FIFO = 6  # MAX_QUE_SLOTS: the slots enqueued, oldest at Q_HEAD
Q_STATE = Q_FIFO + MAX_QUE_SLOTS  # MAX_QUE_SLOTS: each slot's state (FREE ...)
Q_GEN = Q_STATE + MAX_QUE_SLOTS  # MAX_QUE_SLOTS: the allocation each slot last went to (a LocalTensor's gen)
Q_FIFO_EVT = Q_GEN + MAX_QUE_SLOTS  # MAX_QUE_SLOTS: the event id each EnQue took, beside Q_FIFO
Q_FREE_EVT = Q_FIFO_EVT + MAX_QUE_SLOTS  # MAX_QUE_SLOTS: each slot's FreeTensor event id + 1 (0: none pending)
Q_WORDS = Q_FREE_EVT + MAX_QUE_SLOTS
X_EVT_POOL = X_QUE + MAX_BUFS * Q_WORDS  # N_EVENT_POOLS words: the event ids taken, a bit each, per HardEvent
N_EVENT_POOLS = 16
X_ATOMIC = X_EVT_POOL + N_EVENT_POOLS  # SetAtomicAdd<T>: the index of T in tilesim.machine.dtypes.ALL + 1 (0: none)
X_SYNC_AT = X_ATOMIC + 1  # SyncAll: the address of the launch's barrier words (0: a launch without SyncAll)
X_SYNC_GEN = X_SYNC_AT + 1  # the SyncAlls this core has passed
X_ARRIVED = X_SYNC_GEN + 1  # the phases this core has finished (a SyncAll reached; the end adds DONE), read by others
X_ATOMIC_TURN = X_ARRIVED + 1  # 1 + the phase in which every core before this one has finished (its atomic adds land)
X_ALOG_AT, X_ALOG_SIZE, X_ALOG_USED = X_ATOMIC_TURN + 1, X_ATOMIC_TURN + 2, X_ATOMIC_TURN + 3  # its atomic-add log
X_WAITERS = X_ALOG_USED + 1  # threads asleep until X_ARRIVED advances (tilesim.machine.waits)
X_STACK = X_WAITERS + 1  # PopStackBuffer: 1 + the plan row it placed last (0: none)
X_STACK_ROWS = X_STACK + 1  # the plan rows PopStackBuffer placed, a bit each (for reports)
X_CORO = X_STACK_ROWS + 1  # a SyncAll launch's core, a coroutine: its job record (tilesim.runtime.coroutines); else 0
X_STOP_AT = X_CORO + 1  # the address of the launch's stop word (tilesim.runtime.interrupt): every instruction reads it
CTX_WORDS = X_STOP_AT + 1
FREE, ALLOCATED, ENQUEUED, DEQUEUED = 0, 1, 2, 3  # a queue slot's state
_GET_VALUE, _SET_VALUE = op_code("GetValue"), op_code("SetValue")


class CoreHandle(StructType):
    """What every device object starts with: its core's context block and its build."""
    PARAMS = ("checks",)
    FIELDS = (("ctx", types.int64), ("checks", "checks"))


@struct_type
class KernelContextType(CoreHandle):
    """What a kernel receives: its core."""


@struct_type
class LocalTensorType(StructType):
    """A LocalTensor's Numba type, parametrised by its element type and build: its UB plan row, byte offset,
    length in bytes and allocation (see the module's docstring)."""
    PARAMS = ("dtype", "checks")
    FIELDS = (("ctx", types.int64), ("checks", "checks"), ("buf", types.int64), ("addr", types.int64),
              ("nbytes", types.int64), ("gen", types.int64))


@struct_type
class GlobalTensorType(StructType):
    """A GlobalTensor's Numba type, parametrised by its element type and build: its GM tag, the whole tensor's
    host address and bytes, and this (sub-)tensor's byte offset in it (see the module's docstring)."""
    PARAMS = ("dtype", "checks")
    FIELDS = (("ctx", types.int64), ("checks", "checks"), ("tag", types.int64), ("base", types.int64),
              ("size", types.int64), ("off", types.int64))


def _checks_type(t):  # type: ignore[no-untyped-def]
    """Core.checks' type in a build: None or a bool (see :func:`tilesim.core.records.build_of`)."""
    return t if isinstance(t, types.NoneType) else types.boolean


def _typed(f, m):  # type: ignore[no-untyped-def]
    """A tensor's type parameters: its element type (the marker) and its build."""
    return (m, _checks_type(f[1])) if isinstance(m, ElemType) else None


def by_build(f, m):  # type: ignore[no-untyped-def]
    """A core handle's type parameter: its build."""
    return (_checks_type(f[1]),)


make_kernel_context = constructor(KernelContextType, by_build)
make_local = constructor(LocalTensorType, _typed)
make_global = constructor(GlobalTensorType, _typed)


@njit(cache=True, inline="always")
def ctx_words(at):
    """A core's context block, at address ``at``."""
    return carray(address_as_pointer(at, np.int64), CTX_WORDS)


@njit(cache=True)
def fault(w, kind, buf, detail):
    """Stop the kernel: the context records what happened (``tilesim.machine.pipe.FAULT_*``), for the host's
    message (:func:`tilesim.runtime.launcher.launch` raises the KernelError)."""
    w[X_FAULT] = kind
    w[X_FAULT + 1] = buf
    w[X_FAULT + 2] = detail
    raise RuntimeError("tilesim kernel fault")


@njit(cache=True, inline="always")
def core_of(x):
    """The :class:`tilesim.core.records.Core` of a context, tensor or queue: what the machine's internals take."""
    w = ctx_words(x.ctx)
    return Core(w[X_IDX], w[X_BLOCK_NUM], x.checks, w[X_BASE], w[X_UB_SIZE], w[X_PLAN_AT], w[X_PLAN_ROWS],
                w[X_CNT_AT], w[X_CNT_SIZE], w[X_ERR_AT], w[X_ERR_SIZE], w[X_STOP_AT], x.ctx + X_FAULT * 8)


@njit(cache=True, inline="always")
def plan_tensor(t):
    """The machine's name of a LocalTensor: (buffer, address, generation)."""
    return PlanTensor(t.buf, t.addr, t.gen)


@overload_attribute(LocalTensorType, "dtype", jit_options=OVERLOAD_OPTIONS)
@overload_attribute(GlobalTensorType, "dtype", jit_options=OVERLOAD_OPTIONS)
def _dtype(t):  # type: ignore[no-untyped-def]
    """``t.dtype``: the tensor's element type (``asc.float32``, ...), to allocate or cast alike."""
    dt = t.dtype.dt
    return lambda t: dt


@overload(operator.getitem, jit_options=OVERLOAD_OPTIONS)
def _offset(t, k):  # type: ignore[no-untyped-def]
    """``tensor[k]``: the sub-tensor from element ``k`` (Ascend C's ``operator[]``)."""
    if not isinstance(k, types.Integer):
        return None
    if isinstance(t, LocalTensorType):
        dt, sz = t.dtype.dt, t.dtype.dt.size
        return lambda t, k: make_local((t.ctx, t.checks, t.buf, t.addr + k * sz, t.nbytes - k * sz, t.gen), dt)
    if isinstance(t, GlobalTensorType):
        dt, sz = t.dtype.dt, t.dtype.dt.size
        return lambda t, k: make_global((t.ctx, t.checks, t.tag, t.base, t.size, t.off + k * sz), dt)
    return None


@overload_method(LocalTensorType, "get_size", jit_options=OVERLOAD_OPTIONS)
def _get_size(t):  # type: ignore[no-untyped-def]
    """GetSize: the elements from this (sub-)tensor's start to its end."""
    sz = t.dtype.dt.size
    return lambda t: t.nbytes // sz


@overload_method(GlobalTensorType, "get_size", jit_options=OVERLOAD_OPTIONS)
def _gm_get_size(t):  # type: ignore[no-untyped-def]
    """GetSize: the elements from this (sub-)tensor's start to the GM tensor's end."""
    sz = t.dtype.dt.size
    return lambda t: (t.size - t.off) // sz


@overload_method(LocalTensorType, "reinterpret_cast", jit_options=OVERLOAD_OPTIONS)
@overload_method(GlobalTensorType, "reinterpret_cast", jit_options=OVERLOAD_OPTIONS)
def _reinterpret(t, dtype):  # type: ignore[no-untyped-def]
    """ReinterpretCast<U>: the same bytes as elements of ``dtype``."""
    if not isinstance(dtype, ElemType):
        return None
    dt = dtype.dt
    if isinstance(t, LocalTensorType):
        return lambda t, dtype: make_local((t.ctx, t.checks, t.buf, t.addr, t.nbytes, t.gen), dt)
    return lambda t, dtype: make_global((t.ctx, t.checks, t.tag, t.base, t.size, t.off), dt)


def _element(t, i, write):  # type: ignore[no-untyped-def]
    """The host address of element ``i`` of a LocalTensor or GlobalTensor, for a scalar read or write (PIPE_S):
    checked (GM bounds always, UB bounds and shadow in checked mode) and counted; 0 when the check fails."""


@overload(_element, jit_options=OVERLOAD_OPTIONS)
def _element_impl(t, i, write):  # type: ignore[no-untyped-def]
    sz = t.dtype.dt.size
    if isinstance(t, LocalTensorType):
        def ub(t, i, write):  # type: ignore[no-untyped-def]
            core = core_of(t)
            e = PlanTensor(t.buf, t.addr + i * sz, t.gen)
            if not (ub_out(core, e, sz, _SET_VALUE) if write else ub_in(core, e, sz, _GET_VALUE)):
                return np.int64(0)
            hz_access(core, LANE_SCALAR, _SET_VALUE if write else _GET_VALUE, t.buf, e.addr, sz, write, t.gen >= 0)
            hz_issue(core, LANE_SCALAR)
            count_scalar(core, plan_tensor(t), write)
            return core.base + e.addr
        return ub

    def gm(t, i, write):  # type: ignore[no-untyped-def]
        core = core_of(t)
        g, k = gm_view(t), t.off // sz + i
        if not gm_ok(core, g, k, 1):
            return np.int64(0)
        count_gm_scalar(core, g, k, write)
        return t.base + k * sz
    return gm


@overload_method(LocalTensorType, "get_value", jit_options=OVERLOAD_OPTIONS)
@overload_method(GlobalTensorType, "get_value", jit_options=OVERLOAD_OPTIONS)
def _get_value(t, i):  # type: ignore[no-untyped-def]
    """GetValue(i): a scalar read (PIPE_S; GM through the data cache). half and bfloat16 read as their bits."""
    st = t.dtype.dt.storage

    def get_value(t, i):  # type: ignore[no-untyped-def]
        a = _element(t, i, False)
        return carray(address_as_pointer(a, st), 1)[0] if a else st(0)
    return get_value


@overload_method(LocalTensorType, "set_value", jit_options=OVERLOAD_OPTIONS)
@overload_method(GlobalTensorType, "set_value", jit_options=OVERLOAD_OPTIONS)
def _set_value(t, i, v):  # type: ignore[no-untyped-def]
    """SetValue(i, v): a scalar write (PIPE_S); half and bfloat16 take their bits."""
    st = t.dtype.dt.storage

    def set_value(t, i, v):  # type: ignore[no-untyped-def]
        a = _element(t, i, True)
        if a:
            carray(address_as_pointer(a, st), 1)[0] = st(v)
    return set_value


def gm_view(t):  # type: ignore[no-untyped-def]
    """The machine's :class:`tilesim.core.records.GmView` (tag, address, bytes, element size) of the whole tensor
    a typed GlobalTensor lies in."""


@overload(gm_view, jit_options=OVERLOAD_OPTIONS)
def _gm_view(t):  # type: ignore[no-untyped-def]
    sz = t.dtype.dt.size
    return lambda t: GmView(t.tag, t.base, t.size, np.int64(sz))


@njit(cache=True)
def get_block_idx(ctx):
    """GetBlockIdx: this core's index in the launch."""
    return ctx_words(ctx.ctx)[X_IDX]


@njit(cache=True)
def get_block_num(ctx):
    """GetBlockNum: the launch's block_dim."""
    return ctx_words(ctx.ctx)[X_BLOCK_NUM]


def get_user_workspace(ctx):  # type: ignore[no-untyped-def]
    """GetUserWorkspace: the launch's workspace as a GlobalTensor of uint8 (as under ASCENDC_CPU_DEBUG: the NPU's
    16 MiB of system workspace in front of it is not emulated)."""


@overload(get_user_workspace, jit_options=OVERLOAD_OPTIONS)
def _workspace(ctx):  # type: ignore[no-untyped-def]
    return lambda ctx: make_global((ctx.ctx, ctx.checks, np.int64(-2), ctx_words(ctx.ctx)[X_WS_AT],
                                    ctx_words(ctx.ctx)[X_WS_SIZE], np.int64(0)), uint8)


