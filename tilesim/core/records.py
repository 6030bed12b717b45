"""The per-core device context every instruction takes, the counters it feeds and the checked-mode records.

``Core`` is built from a context block's words wherever an instruction needs it
(:func:`tilesim.machine.tensor.core_of`). Counters are int64 rows per core; checked mode writes the first
violation of each core into ``err`` and counts the rest, and the host turns them into a
:class:`tilesim.CheckError` after the launch.
"""

from __future__ import annotations

import functools
from collections import namedtuple
from collections.abc import Callable
from typing import Any

import numpy as np
from numba import carray, types
from numba.extending import overload

from tilesim.core.pipes import LANE_MTE2, LANE_MTE3, LANE_SCALAR, LANE_VECTOR
from tilesim.core.timeline import (
    L_AMOUNT,
    L_BURSTS,
    L_CLASS,
    L_GM,
    L_GM_OFF,
    L_GM_ROW,
    L_GM_STRIDE,
    L_PIPE,
    L_READ0,
    L_READ1,
    L_WRITE,
    LOG_FIELDS,
    N_VEC,
    QUEUE,
    SLOT_CACHE,
    run,
    state_words,
)
from tilesim.core.ub import PlanTensor
from tilesim.jit import OVERLOAD_OPTIONS, njit
from tilesim.jit.intrinsics import address_as_pointer, copy_bytes, flag_load

# Addresses, not arrays: every instruction takes the core, and Numba passes a namedtuple of arrays as some forty
# scalars plus a reference count per array, which cost more than a small instruction's own work.
Core = namedtuple("Core", ["idx", "block_num", "checks", "base", "ub_size", "plan_at", "plan_rows", "cnt_at",
                           "cnt_size", "err_at", "err_size", "stop_at", "fault_at"])
Core.__doc__ = """A core: its index, the block's core count, checked mode (:func:`checks_field`), and where its memory
lies: the UB (``base``, ``ub_size`` bytes), the UB plan's rows (offset, slot bytes, slots), its counter row and its
err row, as addresses and sizes; the address of its launch's stop word (Ctrl-C: :mod:`tilesim.runtime.interrupt`) and of
its fault record (FAULT_WORDS)."""
# Bytes rather than typed elements, so that one compiled kernel serves every dtype, as one binary does on the NPU.
GmView = namedtuple("GmView", ["tag", "addr", "nbytes", "isz"])
GmView.__doc__ = """A GM tensor as the machine's movers see it, untyped (a typed GlobalTensor's
:func:`tilesim.machine.tensor.gm_view`): its tag (for reports), the address and size in bytes of the host array's
memory, and its element size. The host array must outlive the tensor (the launch keeps its arguments alive)."""

# Counter columns.
MTE2_BYTES = 0  # GM to UB, bytes read from GM
MTE2_XFERS = 1
MTE2_PAD_BYTES = 2  # DataCopyPad's padding and dummy bytes, to each row's 32 B end
MTE3_BYTES = 3  # UB to GM, bytes written to GM
MTE3_XFERS = 4
ATOMIC_BYTES = 5  # of MTE3_BYTES, those written with atomic add
VEC_BINARY = 6  # 256 B repeats, by instruction class
VEC_SCALAR = 7
VEC_UNARY = 8
VEC_DIV = 9
VEC_REDUCE = 10
VEC_CAST = 11
VEC_DUP = 12
SCALAR_ACCESS = 13  # GetValue / SetValue
PIPE_BARRIERS = 14  # PipeBarrier
SET_FLAGS = 15  # SetFlag, the kernel's own and those its queue calls make (EnQue, FreeTensor)
WAIT_FLAGS = 16  # WaitFlag, likewise (DeQue, AllocTensor of a freed buffer)
N_COUNTERS = 17
assert VEC_DUP - VEC_BINARY + 1 == N_VEC, "tilesim.core.vec_kinds.VEC_CLASSES names the vector counter columns"
COUNTER_NAMES = ["mte2_bytes", "mte2_transfers", "mte2_pad_bytes", "mte3_bytes", "mte3_transfers", "atomic_bytes",
                 "vec_binary", "vec_scalar", "vec_unary", "vec_div", "vec_reduce", "vec_cast", "vec_dup",
                 "scalar_access", "pipe_barriers", "set_flags", "wait_flags"]

# Recording (``tilesim.capture(log=True)``, checked mode, or a launch that schedules itself): a core's counter row
# is then longer than N_COUNTERS. Column LOG_COUNT counts the instructions the core issued and REC_MODE says what
# follows from REC_AT: the instruction log (REC_LOG) or the core's cost-model schedule (REC_SCHEDULE).
# The log has LOG_FIELDS int64 per instruction: its pipe, its class (the counter column it feeds), its amount
# (bytes for MTE2/MTE3, 256 B repeats for VECTOR, 1 for SCALAR), its bursts (rows of a transfer; for a vector
# instruction its throughput's code, tilesim.core.vec_kinds.vec_kind), the UB tensor it writes and the two it reads
# (``buffer << 32 | address``, -1 for none), the GM tensor it moves (its tag, -1 for none) and where: the byte
# offset of its first row, the bytes of a row and the bytes from one row's start to the next. The cost model
# replays this log and checked mode looks in it for races between cores.
# The schedule (:mod:`tilesim.core.timeline`) is, from REC_AT, the number of queue slots (SCHED_SLOTS), of GM tensors
# (SCHED_GMS), the instructions queued (SCHED_PENDING) and where the queue starts in the row (SCHED_QUEUE), the slot
# cache of :func:`tilesim.core.timeline.slot_of` (SCHED_CACHE, 2 * SLOT_CACHE words), each plan buffer's first slot id
# (SCHED_BASE, a word per plan row), the float64 state of :func:`tilesim.core.timeline.run`, then the queue: QUEUE
# entries in the log's layout, scheduled whenever it is full (:func:`schedule_queue`).
# Only the checked build has the recording (:func:`recorded_only`): the fast build pays nothing.
LOG_COUNT = N_COUNTERS
REC_MODE = LOG_COUNT + 1
REC_AT = REC_MODE + 1
REC_LOG, REC_SCHEDULE = 0, 1
SCHED_SLOTS, SCHED_GMS, SCHED_PENDING, SCHED_QUEUE, SCHED_CACHE = range(5)
SCHED_BASE = SCHED_CACHE + 2 * SLOT_CACHE

# Violations. A core's err row: the number of violations it found, then the first MAX_REPORTS of them, ERR_FIELDS
# each: kind, buffer or GM tag, byte offset, bytes, extra (kind-dependent), the index of the instruction (in the
# core's log) it happened at, and the host phase (filled in by the launch). In checked mode the row goes on with
# the queue-buffer generations (GEN_COL: which allocation each buffer was last taken for) and the UB shadow
# (SHADOW_COL: one byte per UB byte: 0 never written, 1 written, 2 clobbered as an API's scratch).
ERR_DATACOPY_LEN = 1
ERR_UB_OOB = 2
ERR_GM_OOB = 3
ERR_UB_ALIGN = 4
ERR_DATACOPY_GAP = 5
ERR_API_TMP = 6  # a sharedTmpBuffer smaller than the API's tiling says
ERR_VEC_ALIGN = 7  # a vector instruction's operand not 32 B aligned
ERR_STALE = 8  # a LocalTensor used after FreeTensor (its buffer went to a later allocation)
ERR_UNINIT = 9  # a read of UB never written
ERR_CLOBBERED = 10  # a read of a source an API with isReuseSource used as scratch
ERR_VEC_PARAM = 11  # a level-0 instruction's repeat_times above 255 or below 0, or a dst block stride of 0
ERR_RAW, ERR_WAR, ERR_WAW = 12, 13, 14  # a pipe hazard (tilesim.machine.sync): two pipes' accesses not ordered
ERR_WAIT_UNSET = 15  # a WaitFlag with no SetFlag of its event and id before it: the NPU waits for ever
ERR_DOUBLE_SET = 16  # a SetFlag of an event and id already set and not waited for: undefined
ERR_UNPAIRED_SET = 17  # a SetFlag never waited for by the kernel's end
ERR_API_RULE = 18  # an instruction breaking a rule its API states; extra: the rule | the instruction's code << 8
RULE_OVERLAP, RULE_CMP_COUNT, RULE_SCRATCH = 1, 2, 3  # ERR_API_RULE's rules (tilesim.checks.violations words them)
ERR_FIELDS = 7
E_KIND, E_TAG, E_OFFSET, E_BYTES, E_EXTRA, E_INSTR, E_PHASE = range(ERR_FIELDS)
MAX_REPORTS = 32
MAX_BUFS = 64  # buffers per TPipe: the UB plan's rows, each with its queue state and its slots' generations
MAX_QUE_SLOTS = 8  # buffers of one queue (TQue: at most 8 per TPosition on A2)
GEN_COL = 1 + MAX_REPORTS * ERR_FIELDS
SHADOW_COL = (GEN_COL + MAX_BUFS * MAX_QUE_SLOTS + 7) // 8 * 8  # on a 64 B line in every row, as the UB it shadows
UNWRITTEN, WRITTEN, CLOBBERED = 0, 1, 2


def err_width(checks: bool, ub_size: int) -> int:
    """Columns of a core's err row: the count and the reports, then in checked mode the slot generations, the
    shadow and the pipe-hazard state (``tilesim.machine.sync``; a fast build compiles out everything that reads or
    writes them)."""
    if not checks:
        return GEN_COL
    return (hazard_col(ub_size) + HZ_WORDS + ub_size // HZ_GRANULE * HZ_GRANULE_WORDS + 7) // 8 * 8  # rows on 64 B


# The pipe-hazard state (checked mode), from hazard_col(ub_size) in a core's err row: the launch's setting of
# BiSheng's auto-sync, the instructions each pipe has issued, each pipe's vector clock (how many instructions of
# every pipe it knows to be done), each (HardEvent, id) flag (set or not, and the clock it carries), then a record
# per 32 B granule of UB: its last write and each pipe's last read.
HZ_MANUAL_SYNC = 0  # 1: --cce-auto-sync=off (the launch sets it; the zeroed row means on)
HZ_ISSUED = 1  # 4 words, by lane (tilesim.core.pipes)
HZ_CLOCK = HZ_ISSUED + 4  # 16 words: [waiting pipe * 4 + pipe]
HZ_SCRATCH = HZ_CLOCK + 16  # 4 words: a clock being built
HZ_FLAGS = HZ_SCRATCH + 4  # HZ_EVENTS * HZ_IDS flags of HZ_FLAG_WORDS: state (0 clear, 1 set by the kernel, 2 by a
HZ_EVENTS, HZ_IDS, HZ_FLAG_WORDS = 16, 8, 5  # queue call), then the setter's clock
HZ_WORDS = HZ_FLAGS + HZ_EVENTS * HZ_IDS * HZ_FLAG_WORDS
HZ_GRANULE = 32
HZ_GRANULE_WORDS = 5  # the last write ((instruction + 1) << 10 | op << 2 | pipe), then the last read by each pipe
# ((instruction + 1) << 8 | op)


@njit(cache=True, host=True)
def hazard_col(ub_size):
    """Where the pipe-hazard state starts in a checked core's err row (after the shadow, on a 64 B line)."""
    return (SHADOW_COL + ub_size // 8 + 7) // 8 * 8


# A kernel compiles in two builds, told apart by the type of Core.checks, which the launch chooses
# (:attr:`tilesim.runtime.launch.Launch.core_checks`): the fast build (None) has neither checked mode's code nor the
# recording of instructions; the checked build (a bool) has both, checks when the flag is True and records when the
# launch records: a launch that records without checks (an instruction log, or the launch's own schedule on the cost
# model) runs it with the flag False. Code that a build does not have costs it nothing: not even a test per
# instruction. Recording has no build of its own: one would run no faster than the checked build with its checks off,
# and every kernel would compile once more.
FAST_BUILD, CHECKED_BUILD = "fast", "checked"


def build_of(core: Any) -> str | None:
    """At typing time: which build ``core`` (a Core's Numba type) belongs to (None for what is not a Core)."""
    if not (isinstance(core, types.BaseNamedTuple) and "checks" in core.fields):
        return None
    return FAST_BUILD if isinstance(core.types[core.fields.index("checks")], types.NoneType) else CHECKED_BUILD


def _checked_build_only(absent: Any, guarded: bool) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator of a device function ``f(core, ...)`` compiled only into the checked build: in the fast build it
    compiles to ``return absent`` (a constant, or a call of ``absent``, a device function taking the same
    arguments), so that the fast build neither types nor links it. ``guarded``: the checked build calls it only
    when the launch checks (``core.checks``), and has ``absent`` otherwise."""
    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        compiled = njit(cache=True)(fn)

        def device_function(core, *args):  # type: ignore[no-untyped-def]  # Python: the device code's TypeError
            return compiled(core, *args)

        @overload(device_function, jit_options=OVERLOAD_OPTIONS)
        def _select(core, *args):  # type: ignore[no-untyped-def]
            call = callable(absent)
            if build_of(core) != CHECKED_BUILD:
                return (lambda core, *args: absent(core, *args)) if call else (lambda core, *args: absent)
            if guarded and call:
                return lambda core, *args: compiled(core, *args) if core.checks else absent(core, *args)
            if guarded:
                return lambda core, *args: compiled(core, *args) if core.checks else absent
            return lambda core, *args: compiled(core, *args)

        return functools.update_wrapper(device_function, fn)
    return decorate


def checked_only(fast_result: bool | None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator of a device function ``f(core, ...)`` whose work is checked mode's alone (a check, a shadow
    update): in the fast build, and in a checked build's launch with its checks off (one that only records), it is
    ``fast_result`` (True for a check, None for an update, False for a hazard not found), so that a fast kernel
    neither types nor links checked mode's code (which would lengthen every kernel's compile and enlarge its code),
    and a recording costs no call per instruction."""
    return _checked_build_only(fast_result, True)


def recorded_only(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator of a device function ``f(core, ...)`` that records an instruction: compiled out of the fast
    build (it returns None there), so that recording costs fast mode nothing. Its body tests whether the launch
    records (``core.cnt_size > LOG_COUNT``): a checked launch may not."""
    return _checked_build_only(None, False)(fn)


# A fault (every build): what stopped a kernel, in FAULT_WORDS int64 of the core's context block
# (tilesim.machine.tensor.X_FAULT, at Core.fault_at), which the launch turns into a KernelError: the kind
# (tilesim.machine.pipe's FAULT_* numbering), the buffer (-1: none), a detail (tilesim.machine.tensor.fault writes
# these three), then for FAULT_UB_RANGE the access's first UB byte and its length in bytes.
FAULT_WORDS = 5
FAULT_UB_RANGE = 14  # an access outside the core's UB (detail: the instruction's code, tilesim.machine.hazard)


@njit(cache=True)
def _outside_ub(at, buf, op, addr, nbytes):
    """Stop the kernel: instruction ``op`` accesses ``nbytes`` from UB byte ``addr`` of buffer ``buf``, outside the
    UB (FAULT_UB_RANGE, into the fault record at address ``at``)."""
    f = carray(address_as_pointer(at, np.int64), FAULT_WORDS)
    f[1] = buf
    f[2] = op
    f[3] = addr
    f[4] = nbytes
    f[0] = FAULT_UB_RANGE
    raise RuntimeError("tilesim kernel fault")


@njit(cache=True)
def in_ub(core, t, nbytes, op):
    """The bounds every build checks of a UB access by instruction ``op`` (its code,
    :data:`tilesim.machine.hazard.INSTRUCTIONS`): ``[addr, addr + nbytes)`` inside the core's UB, else the kernel
    stops (FAULT_UB_RANGE) before the access, as the NPU traps it: a bad LocalTensor offset never reaches the
    host's memory. Two comparisons an operand, once per instruction; checked mode checks the tighter bounds of the
    tensor's own buffer slot instead (:func:`ub_ok`). A negative ``nbytes`` is an operand whose walk runs
    backwards (a negative stride, length or padding, which Ascend C's unsigned fields cannot give)."""
    if nbytes != 0 and (t.addr < 0 or nbytes < 0 or nbytes > core.ub_size - t.addr):
        _outside_ub(core.fault_at, t.buf, op, t.addr, nbytes)
    return True


def ub_access(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator of checked mode's check of a UB access ``f(core, t, nbytes, op)`` (``op``: the instruction's
    code): a launch that checks runs ``f``, which reports a violation and returns False (the instruction is then
    skipped); every other launch (the fast build, a recording) has :func:`in_ub`'s bounds instead."""
    return _checked_build_only(in_ub, True)(fn)


def checks_field(checks):  # type: ignore[no-untyped-def]
    """Core.checks of a launch with checks ``checks``: the host's value; in compiled code None for the fast
    build, the launch's flag for the checked build (:func:`checks_field_typed`)."""
    return checks


@overload(checks_field, jit_options=OVERLOAD_OPTIONS)
def checks_field_typed(checks):  # type: ignore[no-untyped-def]
    """Core.checks: None for the fast build, the launch's flag for the checked build."""
    if isinstance(checks, types.NoneType):
        return lambda checks: None
    return lambda checks: bool(checks)


@njit(cache=True, inline="always")
def counters_of(core):
    """The core's counter row (and its log, when recording), an array over memory the launch owns, without a
    reference count (a count is a word every host thread would write, each taking its cache line from the
    others)."""
    return carray(address_as_pointer(core.cnt_at, np.int64), core.cnt_size)


@njit(cache=True, inline="always")
def errs_of(core):
    """The core's err row (:func:`counters_of`'s kind of array)."""
    return carray(address_as_pointer(core.err_at, np.int64), core.err_size)


@njit(cache=True, inline="always")
def plan_of(core):
    """The UB plan's rows: offset, slot bytes and slots of each buffer."""
    return carray(address_as_pointer(core.plan_at, np.int64), (core.plan_rows, 3))


@njit(cache=True)
def report(core, kind, tag, offset, nbytes, extra):
    """Record a violation: the first MAX_REPORTS of a core whole, all of them counted."""
    e = errs_of(core)
    k = e[0]
    e[0] = k + 1
    if k < MAX_REPORTS:
        o = 1 + k * ERR_FIELDS
        e[o + E_KIND] = kind
        e[o + E_TAG] = tag
        e[o + E_OFFSET] = offset
        e[o + E_BYTES] = nbytes
        e[o + E_EXTRA] = extra
        e[o + E_INSTR] = counters_of(core)[LOG_COUNT] if core.cnt_size > LOG_COUNT else -1


@njit(cache=True, inline="always")
def _ref(t):
    """The log's name of a LocalTensor: ``buffer << 32 | address`` (-1 for NO_TENSOR); the host turns it into a
    queue slot with the plan (``tilesim.cost.model``), so that the device side stays a shift and an or."""
    return np.int64(-1) if t.buf < 0 else (np.int64(t.buf) << 32) | np.int64(t.addr)


@recorded_only
def _log(core, pipe, cls, amount, bursts, w, r0, r1, gm, gm_off, gm_row, gm_stride):
    if core.cnt_size <= LOG_COUNT:  # a checked build's launch that does not record
        return
    c = counters_of(core)
    k = c[LOG_COUNT]
    c[LOG_COUNT] = k + 1
    queued = c[REC_MODE] == REC_SCHEDULE
    if queued:  # its place in the core's queue
        k = c[REC_AT + SCHED_PENDING]
        o = c[REC_AT + SCHED_QUEUE] + k * LOG_FIELDS
    else:
        o = REC_AT + k * LOG_FIELDS
        if o + LOG_FIELDS > c.size:  # a full log counts on; the host reruns with room for all (tilesim.runtime.launch)
            return
    c[o + L_PIPE] = pipe
    c[o + L_CLASS] = cls
    c[o + L_AMOUNT] = amount
    c[o + L_BURSTS] = bursts
    c[o + L_WRITE] = w
    c[o + L_READ0] = r0
    c[o + L_READ1] = r1
    c[o + L_GM] = gm
    c[o + L_GM_OFF] = gm_off
    c[o + L_GM_ROW] = gm_row
    c[o + L_GM_STRIDE] = gm_stride
    if queued:
        c[REC_AT + SCHED_PENDING] = k + 1
        if k + 1 == QUEUE:
            schedule_queue(core.cnt_at, plan_of(core))


@njit(cache=True, host=True)
def schedule_queue(row_at, plan):
    """Schedule the instructions a core has queued (its counter row at address ``row_at``, in a launch that
    schedules itself; ``plan``: the UB plan's rows) with :func:`tilesim.core.timeline.run`, and empty its queue. The
    core calls it when its queue is full, the launch at the end of each phase. Its arrays are built from the row's
    address: slicing, viewing and reshaping the row would cost more than the call's other work, queue or no
    queue."""
    head = carray(address_as_pointer(row_at + REC_AT * 8, np.int64), SCHED_BASE)
    n = head[SCHED_PENDING]
    if n == 0:
        return
    n_slots, n_gm = head[SCHED_SLOTS], head[SCHED_GMS]
    # the launch's plan rows, whose slot bases come before the state: a core's own plan (a TPipe that places more
    # buffers after a Reset) may have fewer so far
    rows = head[SCHED_QUEUE] - REC_AT - SCHED_BASE - state_words(n_slots, n_gm)
    base_at = row_at + (REC_AT + SCHED_BASE) * 8
    f = carray(address_as_pointer(base_at + rows * 8, np.float64), state_words(n_slots, n_gm))
    run(f, plan, carray(address_as_pointer(base_at, np.int64), rows),
        carray(address_as_pointer(row_at + (REC_AT + SCHED_CACHE) * 8, np.int64), 2 * SLOT_CACHE), n_slots, n_gm,
        carray(address_as_pointer(row_at + head[SCHED_QUEUE] * 8, np.int64), (QUEUE, LOG_FIELDS)), n, VEC_BINARY,
        PIPE_BARRIERS, f[:0], f[:0])  # no times kept
    head[SCHED_PENDING] = 0


NO_TENSOR = PlanTensor(-1, 0, -1)
STOPPED = "tilesim: the launch was interrupted"  # what a core raises when its launch's stop word is set


@njit(cache=True, inline="always")
def stop_if_asked(core):
    """Raise (:data:`STOPPED`) when the core's launch has been asked to stop (Ctrl-C, :mod:`tilesim.runtime.interrupt`):
    every instruction issued reads the word, in both builds, so that a launch stops within an instruction."""
    if flag_load(core.stop_at) != 0:
        raise RuntimeError(STOPPED)


@njit(cache=True)
def count_vector(core, cls, kind, nbytes, dst, a, b):
    """A vector instruction of class ``cls`` and kind ``kind`` (:func:`tilesim.core.vec_kinds.vec_kind`: its
    throughput) over ``nbytes`` of UB: its 256 B repeats, written ``dst``, read ``a`` and ``b`` (pass ``dst``
    again where it has fewer sources)."""
    stop_if_asked(core)
    n = repeats(nbytes)
    counters_of(core)[cls] += n
    _log(core, LANE_VECTOR, cls, n, kind, _ref(dst), _ref(a), _ref(b), -1, 0, 0, 0)


@njit(cache=True)
def count_sync(core, pipe, cls, key):
    """A sync on lane ``pipe`` (tilesim.core.pipes) of class ``cls`` (PIPE_BARRIERS, SET_FLAGS or
    WAIT_FLAGS): ``key`` the barrier's pipe (-1: PIPE_ALL) or the flag's ``event * 8 + id``, in the log's
    L_GM_OFF (its L_GM stays -1: no GM access)."""
    stop_if_asked(core)
    counters_of(core)[cls] += 1
    _log(core, pipe, cls, 0, 0, -1, -1, -1, -1, key, 0, 0)


@njit(cache=True)
def count_scalar(core, t, write):
    """GetValue (``write`` False) or SetValue of one element of UB tensor ``t``."""
    stop_if_asked(core)
    counters_of(core)[SCALAR_ACCESS] += 1
    r = _ref(t)
    _log(core, LANE_SCALAR, SCALAR_ACCESS, 1, 1, r if write else -1, -1 if write else r, -1, -1, 0, 0, 0)


@njit(cache=True)
def count_gm_scalar(core, g, i, write=False):
    """GlobalTensor.GetValue(i) (or SetValue, ``write``): a scalar access of element ``i`` of GM tensor ``g``. Its
    log class is the direction it moves data in (MTE2_BYTES: a read, MTE3_BYTES: a write), which the race check
    between cores reads."""
    stop_if_asked(core)
    counters_of(core)[SCALAR_ACCESS] += 1
    _log(core, LANE_SCALAR, MTE3_BYTES if write else MTE2_BYTES, 1, 1, -1, -1, -1, g.tag, i * g.isz, g.isz, g.isz)


@njit(cache=True)
def count_mte2(core, dst, g, off, rows, row_len, stride, pad_bytes):
    """A GM-to-UB transfer from GM tensor ``g`` into ``dst``: ``rows`` rows of ``row_len`` elements from element
    ``off``, ``stride`` elements from one row's start to the next; ``pad_bytes`` of DataCopyPad's padding and
    dummy bytes."""
    stop_if_asked(core)
    isz = g.isz
    nbytes = rows * row_len * isz
    c = counters_of(core)
    c[MTE2_BYTES] += nbytes
    c[MTE2_PAD_BYTES] += pad_bytes
    c[MTE2_XFERS] += 1
    _log(core, LANE_MTE2, MTE2_BYTES, nbytes, rows, _ref(dst), -1, -1, g.tag, off * isz, row_len * isz, stride * isz)


@njit(cache=True)
def count_mte3(core, g, src, off, rows, row_len, stride, atomic):
    """A UB-to-GM transfer from ``src`` (NO_TENSOR for InitOutput) into GM tensor ``g``, rows as for
    :func:`count_mte2`; ``atomic`` for SetAtomicAdd copies."""
    stop_if_asked(core)
    isz = g.isz
    nbytes = rows * row_len * isz
    c = counters_of(core)
    c[MTE3_BYTES] += nbytes
    c[MTE3_XFERS] += 1
    if atomic:
        c[ATOMIC_BYTES] += nbytes
    _log(core, LANE_MTE3, ATOMIC_BYTES if atomic else MTE3_BYTES, nbytes, rows, -1, _ref(src), -1, g.tag, off * isz,
         row_len * isz, stride * isz)


# at is called from many places. It is a plain function, not inline="always": Numba inlines at the
# level of its own IR, translating the callee's bytecode again at every call site (compile time), while LLVM
# inlines a plain function this small anyway once its code is linked into the caller.
@njit(cache=True)
def at(t, nbytes):
    """``tensor[k]`` of Ascend C, in bytes: the same buffer, ``nbytes`` further on."""
    return PlanTensor(t.buf, t.addr + nbytes, t.gen)


@ub_access
def ub_ok(core, t, nbytes, op):
    """An access of ``[addr, addr + nbytes)`` by instruction ``op``: in checked mode inside one slot of the
    tensor's buffer, and the tensor not stale; elsewhere inside the core's UB (:func:`in_ub`). :func:`ub_in` and
    :func:`ub_out` add the shadow's checks of reads and writes."""
    return _ub_check(core, t, nbytes)


@ub_access
def ub_in(core, t, nbytes, op):
    """A read of ``[addr, addr + nbytes)``: :func:`ub_ok`, and in checked mode every byte written before."""
    return _ub_check(core, t, nbytes) and _read_check(core, t, nbytes)


@ub_access
def ub_out(core, t, nbytes, op):
    """A write of ``[addr, addr + nbytes)``: :func:`ub_ok`, and in checked mode the bytes count as written."""
    return _ub_check(core, t, nbytes) and _written(core, t.addr, nbytes)


@checked_only(True)
def ub_rows_in(core, t, rows, row_bytes, pitch):
    """Reads of ``rows`` rows of ``row_bytes``, ``pitch`` bytes apart from ``t`` (the padding between rows is
    not read); the caller has checked the whole span with :func:`ub_ok`."""
    if core.checks:
        for r in range(rows):
            if not _read_check(core, at(t, r * pitch), row_bytes):
                return False
    return True


@checked_only(True)
def ub_rows_out(core, t, rows, row_bytes, pitch):
    """Writes of ``rows`` rows of ``row_bytes``, ``pitch`` bytes apart into ``t`` (the bytes between rows keep
    their state); the caller has checked the whole span with :func:`ub_ok`."""
    if core.checks:
        if row_bytes == pitch:
            return _written(core, t.addr, rows * pitch)
        for r in range(rows):
            _written(core, t.addr + r * pitch, row_bytes)
    return True


@njit(cache=True, inline="always")
def rows_span(rows, row_bytes, pitch):
    """Bytes from the first of ``rows`` rows of ``row_bytes``, ``pitch`` bytes apart, to the end of the last: the
    span :func:`ub_ok` checks (-1, which it refuses, for rows running backwards, a negative stride, or a negative
    length)."""
    if row_bytes < 0 or (pitch < 0 and rows > 1):
        return np.int64(-1)
    return (rows - 1) * pitch + row_bytes


@checked_only(True)
def ub_rows_unwritten(core, t, rows, start, nbytes, pitch):
    """Bytes an instruction leaves with values a kernel must not use (DataCopyPad's undefined padding, its dummy
    bytes): ``nbytes`` from ``start`` in each of ``rows`` rows ``pitch`` apart from ``t`` count as never
    written; the caller has checked the span with :func:`ub_ok`."""
    if core.checks and nbytes > 0:
        sh = shadow_of(core)
        for r in range(rows):
            a = t.addr + r * pitch + start
            sh[a:a + nbytes] = UNWRITTEN
    return True


@ub_access
def vec_ok(core, t, nbytes, op):
    """A vector instruction's operand: :func:`ub_ok` at a 32 B-aligned address (in checked mode). Its bytes'
    shadow state flows to the destination (:func:`flow1`, :func:`flow2`) rather than being checked: a kernel
    computing on padding lanes whose results it never stores is fine, as under Valgrind; the shadow is checked
    where data is used (copied out to GM, read as a scalar, reduced)."""
    return _align_check(core, t, nbytes) and _ub_check(core, t, nbytes)


@ub_access
def vec_in(core, t, nbytes, op):
    """A vector operand whose values are used, not just carried (a reduction's source): :func:`vec_ok` and
    every byte written."""
    return _align_check(core, t, nbytes) and _ub_check(core, t, nbytes) and _read_check(core, t, nbytes)


@ub_access
def vec_out(core, t, nbytes, op):
    """A vector destination filled regardless of the sources (Duplicate): :func:`vec_ok`, the bytes written."""
    return _align_check(core, t, nbytes) and _ub_check(core, t, nbytes) and _written(core, t.addr, nbytes)


@njit(cache=True)
def mix_state(a, b):
    """Shadow state of a byte computed from bytes in states ``a`` and ``b``: written when both are, else the
    CLOBBERED mark if either carries it, else UNWRITTEN."""
    return (a & b & WRITTEN) | ((a | b) & CLOBBERED)


_LOW = np.uint64(0x0101010101010101)  # WRITTEN in every byte of a word
_HIGH = np.uint64(0x0202020202020202)  # CLOBBERED in every byte


@njit(cache=True, inline="always")
def _words(core, addr, n):
    """``n`` shadow words (8 bytes each) from UB byte ``addr`` (8-aligned)."""
    return carray(address_as_pointer(core.err_at + SHADOW_COL * 8 + addr, np.uint64), n)


@checked_only(None)
def flow1(core, dst, src, nbytes):
    """Checked mode: ``dst``'s bytes take the state of ``src``'s (an elementwise instruction of one source; in
    order, as the instruction reads element k before it writes it)."""
    if core.checks and dst.addr != src.addr:
        sh = shadow_of(core)
        d, s = dst.addr, src.addr
        if d + nbytes <= s or s + nbytes <= d:
            copy_bytes(sh.ctypes.data + d, sh.ctypes.data + s, nbytes)
        else:
            for i in range(nbytes):
                sh[d + i] = sh[s + i]


@checked_only(None)
def flow2(core, dst, a, b, nbytes):
    """Checked mode: ``dst``'s bytes take the combined state of ``a``'s and ``b``'s (a binary instruction).
    Eight bytes at a time (the operands are 32 B aligned), one view per distinct operand so that the loop
    vectorises, as the instructions' own loops do."""
    if not core.checks:
        return
    w = nbytes // 8
    if dst.addr % 8 == 0 and a.addr % 8 == 0 and b.addr % 8 == 0:
        d = _words(core, dst.addr, w)
        if a.addr == dst.addr and b.addr == dst.addr:
            pass  # x op x: each byte keeps its state
        elif a.addr == dst.addr or b.addr == dst.addr:
            y = _words(core, b.addr if a.addr == dst.addr else a.addr, w)
            for i in range(w):
                p, q = d[i], y[i]
                d[i] = (p & q & _LOW) | ((p | q) & _HIGH)
        else:
            x, y = _words(core, a.addr, w), _words(core, b.addr, w)
            for i in range(w):
                p, q = x[i], y[i]
                d[i] = (p & q & _LOW) | ((p | q) & _HIGH)
    else:
        w = 0
    sh = shadow_of(core)
    for i in range(8 * w, nbytes):
        sh[dst.addr + i] = mix_state(sh[a.addr + i], sh[b.addr + i])


@njit(cache=True, inline="always")
def lane_state(sh, o, size):
    """The shadow state of one lane of ``size`` bytes at ``sh[o]``: its bytes' states mixed
    (:func:`mix_state`)."""
    v = sh[o]
    for j in range(1, size):
        v = mix_state(v, sh[o + j])
    return v


@njit(cache=True)
def _uniform_state(core, addr, nbytes):
    """The shadow state of every byte of ``[addr, addr + nbytes)`` when they all have the same, else -1. An OR of
    differences over 8-byte words, which vectorises."""
    if nbytes <= 0:
        return -1
    sh = shadow_of(core)
    v = sh[addr]
    w = nbytes // 8 if addr % 8 == 0 else 0
    pattern = np.uint64(v) * _LOW
    words = _words(core, addr, w)
    diff = np.uint64(0)
    for i in range(w):
        diff |= words[i] ^ pattern
    for i in range(8 * w, nbytes):
        diff |= np.uint64(sh[addr + i] ^ v)
    return np.int64(v) if diff == 0 else np.int64(-1)


@checked_only(None)
def flow_lanes(core, dst, src, n, dst_size, src_size, src_step):
    """Checked mode: lane ``i`` of ``dst`` (``dst_size`` bytes) takes the combined state of lane ``i * src_step``
    of ``src`` (``src_size`` bytes): casts (step 1, in order: an in-place widening reads lane i before any
    write reaches it) and broadcasts (step 0 repeats one source lane)."""
    if not core.checks:
        return
    sh = shadow_of(core)
    if src_step == 0:
        sh[dst.addr:dst.addr + n * dst_size] = lane_state(sh, src.addr, src_size)
        return
    # A source all in one state (the usual cast: every byte written) gives every lane that state in one fill,
    # rather than in the lane loops below, which LLVM cannot vectorise (the views overlap). Read before the
    # destination is written, so it holds for the in-place casts too.
    v = _uniform_state(core, src.addr, n * src_size) if src_step == 1 else -1
    if v >= 0:
        sh[dst.addr:dst.addr + n * dst_size] = np.uint8(v)
        return
    base = core.err_at + SHADOW_COL * 8
    if src_step == 1 and dst_size == 4 and src_size == 2 and dst.addr % 4 == 0 and src.addr % 2 == 0:
        d32 = carray(address_as_pointer(base + dst.addr, np.uint32), n)  # b16 -> fp32: a lane's two bytes
        s16 = carray(address_as_pointer(base + src.addr, np.uint16), n)
        for i in range(n):
            w = np.uint32(s16[i])
            p, q = w & np.uint32(0xFF), w >> np.uint32(8)
            d32[i] = ((p & q & np.uint32(1)) | ((p | q) & np.uint32(2))) * np.uint32(0x01010101)
        return
    if src_step == 1 and dst_size == 2 and src_size == 4 and dst.addr % 2 == 0 and src.addr % 4 == 0:
        d16 = carray(address_as_pointer(base + dst.addr, np.uint16), n)  # fp32 -> b16: a lane's four bytes
        s32 = carray(address_as_pointer(base + src.addr, np.uint32), n)
        for i in range(n):
            u = s32[i]
            a = u & (u >> np.uint32(8)) & (u >> np.uint32(16)) & (u >> np.uint32(24)) & np.uint32(1)
            c = (u | (u >> np.uint32(8)) | (u >> np.uint32(16)) | (u >> np.uint32(24))) & np.uint32(2)
            d16[i] = np.uint16((a | c) * np.uint32(0x0101))
        return
    for i in range(n):
        v = lane_state(sh, src.addr + i * src_step * src_size, src_size)
        o = dst.addr + i * dst_size
        for j in range(dst_size):
            sh[o + j] = v


@njit(cache=True)
def _align_check(core, t, nbytes):
    if t.addr % 32 != 0:
        report(core, ERR_VEC_ALIGN, t.buf, t.addr - plan_of(core)[t.buf, 0], nbytes, t.addr % 32)
        return False
    return True


@njit(cache=True)
def _ub_check(core, t, nbytes):
    p = plan_of(core)
    start = p[t.buf, 0]
    size = p[t.buf, 1]
    k = (t.addr - start) // size if t.addr >= start else -1
    # a queue tensor's own slot: its tile's; a TBuf's (or the stack's) one of the buffer's slots, not past them
    own = (k if k < p[t.buf, 2] else -1) if t.gen < 0 else t.gen % p[t.buf, 2]
    if k < 0 or k != own or t.addr + nbytes > start + (k + 1) * size or nbytes < 0:
        report(core, ERR_UB_OOB, t.buf, t.addr - start, nbytes, size)
        return False
    if t.gen >= 0 and t.buf < MAX_BUFS and p[t.buf, 2] <= MAX_QUE_SLOTS:
        now = errs_of(core)[GEN_COL + t.buf * MAX_QUE_SLOTS + k]
        if now != t.gen:
            report(core, ERR_STALE, t.buf, t.addr - start, nbytes, t.gen * (1 << 32) + now)
            return False
    return True


@njit(cache=True, inline="always")
def shadow_of(core):
    """Checked mode's UB shadow of the core: one byte per UB byte (UNWRITTEN, WRITTEN or CLOBBERED), an array
    over its err row."""
    return carray(address_as_pointer(core.err_at + SHADOW_COL * 8, np.uint8), core.ub_size)


@njit(cache=True)
def _written(core, addr, nbytes):
    shadow_of(core)[addr:addr + nbytes] = WRITTEN
    return True


@checked_only(None)
def clobber(core, t, nbytes):
    """Checked mode: an API with isReuseSource has used ``[addr, addr + nbytes)`` of its source as scratch, so
    the kernel must not read it again before writing it."""
    if core.checks:
        shadow_of(core)[t.addr:t.addr + nbytes] = CLOBBERED


@njit(cache=True)
def _read_check(core, t, nbytes):
    sh = shadow_of(core)[t.addr:t.addr + nbytes]
    acc = np.uint8(0xFF)
    w = nbytes // 8 if t.addr % 8 == 0 else 0
    acc64 = np.uint64(0xFFFFFFFFFFFFFFFF)
    words = _words(core, t.addr, w)
    for i in range(w):  # an AND reduction vectorises; the rare failure is looked at byte by byte below
        acc64 &= words[i]
    if w:
        acc = np.uint8(WRITTEN) if acc64 == _LOW else np.uint8(0)
    for i in range(8 * w, sh.size):
        acc &= sh[i]
    if acc == WRITTEN or nbytes <= 0:
        return True
    for i in range(sh.size):
        if sh[i] != WRITTEN:
            kind = ERR_CLOBBERED if sh[i] == CLOBBERED else ERR_UNINIT
            bad = 0
            for j in range(i, sh.size):
                bad += sh[j] != WRITTEN
            report(core, kind, t.buf, t.addr - plan_of(core)[t.buf, 0], nbytes, i * (1 << 32) + bad)
            break
    return False


@njit(cache=True)
def gm_ok(core, g, off, n):
    """The GM access ``[off, off + n)`` lies inside the tensor. Checked in fast mode too (two comparisons per
    transfer): the data movers index host arrays without bounds checks, and a kernel's bad offset must become a
    report, not a read of the host process's memory."""
    if off < 0 or n < 0 or (off + n) * g.isz > g.nbytes:
        report(core, ERR_GM_OOB, g.tag, off * g.isz, n * g.isz, g.nbytes)
        return False
    return True


@njit(cache=True)
def gm_f32(g):
    """A fp32 GM tensor's elements, as float32 (GlobalTensor.GetValue / SetValue of the host)."""
    return carray(address_as_pointer(g.addr, np.float32), g.nbytes // 4)


@njit(cache=True)
def gm_u16(g):
    """A b16 GM tensor's elements, as their uint16 bits."""
    return carray(address_as_pointer(g.addr, np.uint16), g.nbytes // 2)


@njit(cache=True, inline="always")
def ub_view(core, addr, n, dtype):
    """``n`` elements of ``dtype`` of this core's UB from byte ``addr``: the ``arr[a:b].view(dtype)`` of the arena,
    built from the address (no slicing checks, no reference count: an instruction's view costs nothing)."""
    return carray(address_as_pointer(core.base + addr, dtype), n)


@njit(cache=True, inline="always")
def u16(core, t, n):
    """The first ``n`` elements of the LocalTensor ``t`` as uint16 bits (:func:`ub_view`)."""
    return ub_view(core, t.addr, n, np.uint16)


@njit(cache=True, inline="always")
def u32(core, t, n):
    """The first ``n`` elements of the LocalTensor ``t`` as uint32 bits (:func:`ub_view`)."""
    return ub_view(core, t.addr, n, np.uint32)


@njit(cache=True, inline="always")
def repeats(nbytes):
    """The 256 B repeats ``nbytes`` bytes take, the last one partial."""
    return (nbytes + 255) // 256
