"""TPipe, TQue and TBuf: the UB's buffers and the queues that hand them between the pipes.

In a kernel::

    pipe = TPipe(ctx)
    in_x = pipe.init_buffer(TQue(VECIN, 1), BUFFER_NUM, tile_len * 4)   # InitBuffer(inQueueX, BUFFER_NUM, len)
    tmp = pipe.init_buffer(TBuf(VECCALC), tile_len * 4)                # InitBuffer(tmpBuf, len)
    x = in_x.alloc_tensor(float32)                                     # AllocTensor<float>()
    data_copy(x, gx[off], tile_len); in_x.enque(x)                      # CopyIn
    x = in_x.deque(float32); ...; in_x.free_tensor(x)                  # Compute
    t = tmp.get(float32)                                               # Get<float>()

InitBuffer places ``num`` buffers of ``len`` bytes (rounded up to 32 B) back to back from the end of the ones
placed before, in call order, as TPipe does; a pipe that outgrows the UB stops the kernel with
:class:`tilesim.UbOverflowError` naming every buffer. The queue calls keep the real rules: AllocTensor takes the
next free buffer round-robin; EnQue at most ``depth`` tensors before a DeQue; DeQue the oldest; FreeTensor only of
a tensor in use. A call that would hang the NPU or trip CPU-debug's asserts (AllocTensor with every buffer in use,
EnQue past depth, DeQue of an empty queue, FreeTensor of a free buffer) stops the kernel with a
:class:`tilesim.runtime.launcher.KernelError` that names the core, the buffer and the rule. In checked mode a tensor
used after its FreeTensor is reported (use after free).
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np
from numba import types
from numba.extending import overload, overload_method

from tilesim.core.records import FAULT_UB_RANGE, GEN_COL, MAX_BUFS, MAX_QUE_SLOTS, checked_only, errs_of
from tilesim.jit import OVERLOAD_OPTIONS, njit
from tilesim.machine.dtypes import ElemType
from tilesim.machine.structs import constructor, struct_type
from tilesim.machine.sync import (
    FAULT_EVENT_ID,
    FAULT_EVENT_POOL,
    FAULT_SYNC_ALL,
    HardEvent,
    alloc_id,
    fetch_id,
    release_id,
    set_event,
    wait_event,
)
from tilesim.machine.tensor import (
    ALLOCATED,
    DEQUEUED,
    ENQUEUED,
    FREE,
    N_EVENT_POOLS,
    Q_COUNT,
    Q_DEPTH,
    Q_FIFO,
    Q_FIFO_EVT,
    Q_FREE_EVT,
    Q_GEN,
    Q_HEAD,
    Q_NEXT,
    Q_POS,
    Q_SLOT,
    Q_STATE,
    Q_WORDS,
    X_EVT_POOL,
    X_PLAN,
    X_PLAN_ROWS,
    X_POOL,
    X_QUE,
    X_STACK,
    X_STACK_ROWS,
    X_UB_SIZE,
    CoreHandle,
    KernelContextType,
    by_build,
    core_of,
    ctx_words,
    fault,
    make_local,
)

VECIN, VECOUT, VECCALC = 1, 2, 3  # TPosition

# What stopped a kernel (a context's X_FAULT word; the next words: the buffer, then a detail).
FAULT_UB_OVERFLOW = 1
FAULT_ALLOC_NONE_FREE = 2
FAULT_ENQUE_FULL = 3
FAULT_DEQUE_EMPTY = 4
FAULT_FREE_FREE = 5
FAULT_BAD_QUEUE = 6  # InitBuffer of a TQue at VECCALC, of depth or num out of range, past 64 buffers
FAULT_BAD_GET = 7  # TBuf.Get past the buffer
FAULT_DTYPE = 8  # an instruction on an element type its A2 API does not take (detail: its code * 100 + dtype)
FAULT_CAST = 9  # a Cast between types tilesim does not convert (detail: src * 100 + dst)
# FAULT_EVENT_POOL = 10, FAULT_EVENT_ID = 11, FAULT_SYNC_ALL = 13: tilesim.machine.sync; FAULT_UB_RANGE = 14:
# tilesim.core.records (an access outside the core's UB)
FAULT_API_TABLE = 12  # element types or a mode outside an instruction's A2 table (detail: op_code * 10**6 + (mode
# + 1) * 10**4 + type * 100 + second type, the types' indices in tilesim.machine.dtypes.ALL, 99 for none)
FAULT_MIXED_TYPES = 15  # tensors of one instruction's one element type T given different types (detail:
# tilesim.machine.vector.mixed_types)

TQue = namedtuple("TQue", ["pos", "depth"])
TQue.__doc__ = """TQue<pos, depth>: a queue to be placed by :meth:`TPipe.init_buffer`. ``pos`` VECIN (GM to UB:
MTE2 produces, V consumes) or VECOUT (V produces, MTE3 consumes); ``depth`` the EnQues allowed before a DeQue."""
TBuf = namedtuple("TBuf", ["pos"])
TBuf.__doc__ = "TBuf<pos>: a buffer outside any queue (VECCALC), to be placed by :meth:`TPipe.init_buffer`."


@struct_type
class TPipeType(CoreHandle):
    """A TPipe."""


@struct_type
class QueueType(CoreHandle):
    """A placed TQue: its buffer (a row of the UB plan)."""
    FIELDS = (*CoreHandle.FIELDS, ("buf", types.int64))


@struct_type
class BufferType(CoreHandle):
    """A placed TBuf: its buffer."""
    FIELDS = (*CoreHandle.FIELDS, ("buf", types.int64))


_make_pipe = constructor(TPipeType, by_build)
_make_queue = constructor(QueueType, by_build)
_make_buffer = constructor(BufferType, by_build)


def TPipe(ctx):  # type: ignore[no-untyped-def]  # noqa: N802  (Ascend C's class name)
    """TPipe: a pool of UB buffers, empty (a kernel makes one, in its Init)."""


@overload(TPipe, jit_options=OVERLOAD_OPTIONS)
def _tpipe(ctx):  # type: ignore[no-untyped-def]
    if not isinstance(ctx, KernelContextType):
        return None

    def make(ctx):  # type: ignore[no-untyped-def]
        w = ctx_words(ctx.ctx)
        w[X_POOL] = 0
        w[X_PLAN_ROWS] = 0
        w[X_STACK] = 0
        w[X_STACK_ROWS] = 0
        return _make_pipe((ctx.ctx, ctx.checks), None)
    return make


@njit(cache=True)
def _place(w, nbytes, num, pos, depth):
    """InitBuffer: ``num`` buffers of ``nbytes`` (rounded up to 32 B) after the last one placed; the buffer's id."""
    b = w[X_PLAN_ROWS]
    if b >= MAX_BUFS:
        fault(w, FAULT_BAD_QUEUE, b, 0)
    slot = (nbytes + 31) // 32 * 32
    off = w[X_POOL]
    row = X_PLAN + 3 * b
    w[row] = off
    w[row + 1] = slot
    w[row + 2] = num
    w[X_PLAN_ROWS] = b + 1
    if nbytes < 0 or off + slot * num > w[X_UB_SIZE]:
        fault(w, FAULT_UB_OVERFLOW, b, off + slot * num)
    w[X_POOL] = off + slot * num
    q = X_QUE + Q_WORDS * b
    w[q + Q_POS] = pos
    w[q + Q_DEPTH] = depth
    w[q + Q_NEXT] = 0
    w[q + Q_SLOT] = 0
    w[q + Q_COUNT] = 0
    w[q + Q_HEAD] = 0
    for k in range(num):
        w[q + Q_STATE + k] = FREE
        w[q + Q_FREE_EVT + k] = 0
    return b


@overload_method(TPipeType, "init_buffer", jit_options=OVERLOAD_OPTIONS)
def _init_buffer(pipe, spec, a, b=None):  # type: ignore[no-untyped-def]
    """InitBuffer(que, num, len) of a :class:`TQue`, InitBuffer(buf, len) of a :class:`TBuf`; ``len`` in bytes.
    Returns the placed queue or buffer."""
    if not isinstance(spec, types.BaseNamedTuple):
        return None
    if spec.instance_class is TQue:
        def init_queue(pipe, spec, a, b=None):  # type: ignore[no-untyped-def]
            w = ctx_words(pipe.ctx)
            if spec.pos not in (VECIN, VECOUT) or not 1 <= a <= MAX_QUE_SLOTS or spec.depth < 1:
                fault(w, FAULT_BAD_QUEUE, w[X_PLAN_ROWS], spec.pos * 1000000 + a * 1000 + spec.depth)
            return _make_queue((pipe.ctx, pipe.checks, _place(w, np.int64(b), np.int64(a), spec.pos, spec.depth)),
                               None)
        return init_queue
    if spec.instance_class is TBuf:
        def init_tbuf(pipe, spec, a, b=None):  # type: ignore[no-untyped-def]
            w = ctx_words(pipe.ctx)
            return _make_buffer((pipe.ctx, pipe.checks, _place(w, np.int64(a), np.int64(1), spec.pos, 0)), None)
        return init_tbuf
    return None


# The queue calls' syncs, by TPosition (kernel_tquebind_impl.h): EnQue sets and DeQue waits for the producer-to-
# consumer event; FreeTensor sets and the next AllocTensor of the buffer waits for the consumer-to-producer one.
_ENQUE_EVENT = (-1, int(HardEvent.MTE2_V), int(HardEvent.V_MTE3), -1)
_FREE_EVENT = (-1, int(HardEvent.V_MTE2), int(HardEvent.MTE3_V), -1)


@njit(cache=True, inline="always")
def _queue_at(q):
    return X_QUE + Q_WORDS * q.buf


@checked_only(None)
def _track(core, buf, slot, gen):
    """Checked mode: slot ``slot`` of ``buf`` now belongs to allocation ``gen`` (-2: freed, every tensor of it
    dead)."""
    if core.checks and buf < MAX_BUFS and slot < MAX_QUE_SLOTS:
        errs_of(core)[GEN_COL + buf * MAX_QUE_SLOTS + slot] = gen


@njit(cache=True, inline="always")
def _slot_tensor(q, w, slot, dtype):
    """Slot ``slot`` of queue ``q`` as a LocalTensor of ``dtype``, of the allocation it last went to."""
    row = X_PLAN + 3 * q.buf
    return make_local((q.ctx, q.checks, q.buf, w[row] + slot * w[row + 1], w[row + 1],
                       w[_queue_at(q) + Q_GEN + slot]), dtype)


@overload_method(QueueType, "alloc_tensor", jit_options=OVERLOAD_OPTIONS)
def _alloc_tensor(q, dtype):  # type: ignore[no-untyped-def]
    """AllocTensor<T>(): the next free buffer, round-robin, as a LocalTensor of ``dtype`` (contents as the last
    user left them: uninitialised)."""
    if not isinstance(dtype, ElemType):
        return None

    def alloc_tensor(q, dtype):  # type: ignore[no-untyped-def]
        w = ctx_words(q.ctx)
        a = _queue_at(q)
        num = w[X_PLAN + 3 * q.buf + 2]
        k = w[a + Q_NEXT]
        slot = w[a + Q_SLOT]  # k % num, kept without a division
        while w[a + Q_STATE + slot] != FREE:
            k += 1
            slot = slot + 1 if slot + 1 < num else 0
            if k - w[a + Q_NEXT] >= num:
                fault(w, FAULT_ALLOC_NONE_FREE, q.buf, num)
        w[a + Q_NEXT] = k + 1
        w[a + Q_SLOT] = slot + 1 if slot + 1 < num else 0
        w[a + Q_STATE + slot] = ALLOCATED
        w[a + Q_GEN + slot] = k
        core = core_of(q)
        pending = w[a + Q_FREE_EVT + slot]
        if pending:  # the FreeTensor's V_MTE2 (VECIN) or MTE3_V (VECOUT): its consumer is done with the buffer
            ev = _FREE_EVENT[w[a + Q_POS]]
            wait_event(core, w, ev, pending - 1)
            release_id(w, ev, pending - 1)
            w[a + Q_FREE_EVT + slot] = 0
        _track(core, q.buf, slot, k)
        return _slot_tensor(q, w, slot, dtype)
    return alloc_tensor


@njit(cache=True, inline="always")
def _slot_of(w, t):
    row = X_PLAN + 3 * t.buf
    off, size, last, slot = t.addr - w[row], w[row + 1], w[row + 2] - 1, 0
    while slot < last and off >= size:  # a subtraction or two: a division costs more than the rest of the call
        off -= size
        slot += 1
    return slot


@overload_method(QueueType, "enque", jit_options=OVERLOAD_OPTIONS)
def _enque(q, t):  # type: ignore[no-untyped-def]
    """EnQue(t): hand the tensor to the queue's consumer (VECIN: the vector unit; VECOUT: MTE3)."""
    def enque(q, t):  # type: ignore[no-untyped-def]
        w = ctx_words(q.ctx)
        a = _queue_at(q)
        n = w[a + Q_COUNT]
        if n >= w[a + Q_DEPTH]:
            fault(w, FAULT_ENQUE_FULL, q.buf, w[a + Q_DEPTH])
        slot = _slot_of(w, t)
        at = (w[a + Q_HEAD] + n) % MAX_QUE_SLOTS
        ev = _ENQUE_EVENT[w[a + Q_POS]]
        k = alloc_id(w, ev)
        w[a + Q_FIFO + at] = slot
        w[a + Q_FIFO_EVT + at] = k
        w[a + Q_COUNT] = n + 1
        w[a + Q_STATE + slot] = ENQUEUED
        set_event(core_of(q), w, ev, k, 2)
    return enque


@overload_method(QueueType, "deque", jit_options=OVERLOAD_OPTIONS)
def _deque(q, dtype):  # type: ignore[no-untyped-def]
    """DeQue<T>(): the oldest tensor enqueued, as a LocalTensor of ``dtype``."""
    if not isinstance(dtype, ElemType):
        return None

    def deque(q, dtype):  # type: ignore[no-untyped-def]
        w = ctx_words(q.ctx)
        a = _queue_at(q)
        n = w[a + Q_COUNT]
        if n == 0:
            fault(w, FAULT_DEQUE_EMPTY, q.buf, 0)
        h = w[a + Q_HEAD]
        slot = w[a + Q_FIFO + h]
        ev, k = _ENQUE_EVENT[w[a + Q_POS]], w[a + Q_FIFO_EVT + h]
        w[a + Q_HEAD] = (h + 1) % MAX_QUE_SLOTS
        w[a + Q_COUNT] = n - 1
        w[a + Q_STATE + slot] = DEQUEUED
        wait_event(core_of(q), w, ev, k)
        release_id(w, ev, k)
        return _slot_tensor(q, w, slot, dtype)
    return deque


@overload_method(QueueType, "free_tensor", jit_options=OVERLOAD_OPTIONS)
def _free_tensor(q, t):  # type: ignore[no-untyped-def]
    """FreeTensor(t): the buffer goes back to the queue's producer; the tensor is dead."""
    def free_tensor(q, t):  # type: ignore[no-untyped-def]
        w = ctx_words(q.ctx)
        a = _queue_at(q)
        slot = _slot_of(w, t)
        if w[a + Q_STATE + slot] == FREE:
            fault(w, FAULT_FREE_FREE, q.buf, slot)
        w[a + Q_STATE + slot] = FREE
        ev = _FREE_EVENT[w[a + Q_POS]]
        k = alloc_id(w, ev)
        w[a + Q_FREE_EVT + slot] = k + 1
        core = core_of(q)
        set_event(core, w, ev, k, 2)
        _track(core, q.buf, slot, -2)
    return free_tensor


@overload_method(BufferType, "get", jit_options=OVERLOAD_OPTIONS)
def _get(b, dtype, n=None):  # type: ignore[no-untyped-def]
    """Get<T>() / Get<T>(len): the buffer from its start as a LocalTensor of ``dtype`` (all of it, or ``n``
    elements: a multiple of 32 B, no more than the buffer)."""
    if not isinstance(dtype, ElemType):
        return None
    dt, sz = dtype.dt, dtype.dt.size

    def get(b, dtype, n=None):  # type: ignore[no-untyped-def]
        w = ctx_words(b.ctx)
        row = X_PLAN + 3 * b.buf
        size = w[row + 1]
        if n is not None:
            want = np.int64(n) * sz
            if want % 32 or want > size or want < 0:
                fault(w, FAULT_BAD_GET, b.buf, want)
            size = want
        return make_local((b.ctx, b.checks, b.buf, w[row], size, np.int64(-1)), dt)
    return get


def pop_stack_buffer(ctx, dtype):  # type: ignore[no-untyped-def]
    """PopStackBuffer<T, TPosition::LCM>(tensor), as a high-level API without a sharedTmpBuffer calls it: the UB
    the TPipe's buffers leave free (from the end of the last InitBuffer to the UB's end, whole 32 B blocks) as a
    LocalTensor of ``dtype``. It places no buffer: an InitBuffer after it takes the same UB. Reports name it
    ``stack`` (a row of the UB plan, the same one while no InitBuffer or Reset moves the free UB)."""


@overload(pop_stack_buffer, jit_options=OVERLOAD_OPTIONS)
def _pop_stack_buffer(ctx, dtype):  # type: ignore[no-untyped-def]
    if not (isinstance(ctx, KernelContextType) and isinstance(dtype, ElemType)):
        return None
    dt = dtype.dt

    def pop(ctx, dtype):  # type: ignore[no-untyped-def]
        w = ctx_words(ctx.ctx)
        off = w[X_POOL]
        b = w[X_STACK] - 1
        if b < 0 or b >= w[X_PLAN_ROWS] or w[X_PLAN + 3 * b] != off:
            b = _place(w, (w[X_UB_SIZE] - off) // 32 * 32, np.int64(1), VECCALC, np.int64(0))
            w[X_POOL] = off  # the stack is not the pipe's: the next InitBuffer starts where it does
            w[X_STACK] = b + 1
            w[X_STACK_ROWS] |= np.int64(1) << b
        return make_local((ctx.ctx, ctx.checks, b, off, w[X_PLAN + 3 * b + 1], np.int64(-1)), dt)
    return pop


@overload_method(TPipeType, "reset", jit_options=OVERLOAD_OPTIONS)
def _reset(pipe):  # type: ignore[no-untyped-def]
    """Reset (``B/资源管理/TPipe/Reset.md``; ``kernel_tpipe_impl.h``): the WaitFlag of every free buffer's
    pending FreeTensor event, then the pipe back to its initial state, its event ids free; the buffers placed
    from now on start again at UB offset 0, over the earlier ones (a kernel's next stage reusing the UB, e.g.
    after a SyncAll). The earlier buffers stay in the launch's UB plan for reports; their tensors must not be
    used again."""
    def reset(pipe):  # type: ignore[no-untyped-def]
        w = ctx_words(pipe.ctx)
        core = core_of(pipe)
        for b in range(w[X_PLAN_ROWS]):
            a = X_QUE + Q_WORDS * b
            for slot in range(w[X_PLAN + 3 * b + 2] if w[a + Q_DEPTH] > 0 else 0):
                pending = w[a + Q_FREE_EVT + slot]
                if pending and w[a + Q_STATE + slot] == FREE:
                    wait_event(core, w, _FREE_EVENT[w[a + Q_POS]], pending - 1)
                    w[a + Q_FREE_EVT + slot] = 0
        w[X_POOL] = 0
        for e in range(N_EVENT_POOLS):
            w[X_EVT_POOL + e] = 0
    return reset


@overload_method(TPipeType, "alloc_event_id", jit_options=OVERLOAD_OPTIONS)
def _alloc_event_id(pipe, event):  # type: ignore[no-untyped-def]
    """AllocEventID<event>(): the lowest free id of the event's pool, now taken (the pool is shared with the
    queues' own syncs; give it back with release_event_id)."""
    return lambda pipe, event: alloc_id(ctx_words(pipe.ctx), np.int64(event))


@overload_method(TPipeType, "fetch_event_id", jit_options=OVERLOAD_OPTIONS)
def _fetch_event_id(pipe, event):  # type: ignore[no-untyped-def]
    """FetchEventID(event): the lowest free id of the event's pool, not taken: for a SetFlag / WaitFlag pair
    issued back to back."""
    return lambda pipe, event: fetch_id(ctx_words(pipe.ctx), np.int64(event))


@overload_method(TPipeType, "release_event_id", jit_options=OVERLOAD_OPTIONS)
def _release_event_id(pipe, event, event_id):  # type: ignore[no-untyped-def]
    """ReleaseEventID<event>(id): the id back to the event's pool."""
    return lambda pipe, event, event_id: release_id(ctx_words(pipe.ctx), np.int64(event), np.int64(event_id))


FAULT_TEXT = {
    FAULT_UB_OVERFLOW: "InitBuffer: the buffers need {detail} B, more than the core's UB",
    FAULT_ALLOC_NONE_FREE: "AllocTensor with all {detail} buffers of the queue in use (the NPU waits for ever; "
                           "FreeTensor one first)",
    FAULT_ENQUE_FULL: "EnQue past the queue's depth {detail} (DeQue first, or give the TQue a larger depth)",
    FAULT_DEQUE_EMPTY: "DeQue of an empty queue (the NPU waits for ever: EnQue first)",
    FAULT_FREE_FREE: "FreeTensor of buffer {detail}, which is free already",
    FAULT_BAD_QUEUE: "InitBuffer: a TQue must be at VECIN or VECOUT, with depth >= 1 and 1 to 8 buffers, and a "
                     "TPipe holds at most 64 buffers (pos * 10^6 + num * 10^3 + depth = {detail})",
    FAULT_BAD_GET: "TBuf.Get of {detail} B: the length must be a multiple of 32 B and fit the buffer",
    FAULT_DTYPE: "{detail}: the A2 API does not take this element type",
    FAULT_CAST: "Cast from {detail}: not a conversion tilesim emulates",
    FAULT_API_TABLE: "{detail}: not in the A2 API's table of element types and modes",
    FAULT_MIXED_TYPES: "{detail}: the API has one element type T for these tensors (in Ascend C the call does not "
                       "compile)",
    FAULT_EVENT_POOL: "AllocEventID / FetchEventID of HardEvent {detail} with all its 8 ids taken (CPU-debug asserts; "
                      "release one, or wait for a queue's EnQue / FreeTensor to be consumed)",
    FAULT_EVENT_ID: "{detail}: an event id must be 0 to 7, and PipeBarrier takes PIPE_V, PIPE_MTE2, PIPE_MTE3 or "
                    "PIPE_ALL (100 + pipe)",
    FAULT_SYNC_ALL: "SyncAll {detail} (-1: in a launch that did not expect it: the kernel's own source must call "
                    "sync_all; else the number of the SyncAll given up because another core stopped)",
    FAULT_UB_RANGE: "{detail}",  # tilesim.runtime.launcher words it
}
