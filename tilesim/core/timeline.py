"""The cost model's schedule of one core, in issue order.

One function, :func:`run`, places instructions in the instruction log's layout on their pipes' timelines. Two
callers use it:

- a launch that schedules itself while it runs (``tilesim.cost.model.estimated``): each core writes the instructions it
  issues into a queue of QUEUE entries and schedules the queue whenever it is full (and the launch at the end of
  each phase), so the estimate needs no log and its memory does not grow with the number of instructions;
- the replay of a recorded log (``tilesim.cost.model.estimate`` of a ``tilesim.recorded`` report), which also gives
  each instruction's start and end for a trace.

The model itself is stated in ``tilesim.cost.model``'s docstring. A core's state is one float64 array (layout below);
each phase starts from zero (the caller adds the phase's start), so a core's span in a phase is its ``F_SPAN``.
The state's tables are indexed by queue slot (:func:`slot_of`: a UB buffer's slot, the unit TQue's EnQue/DeQue
flags synchronise on) and by GM tensor tag.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from tilesim.core.pipes import LANE_MTE2, LANE_MTE3, LANE_SCALAR, LANE_VECTOR, N_LANES
from tilesim.core.vec_kinds import VEC_CLASSES, VEC_KINDS
from tilesim.jit import njit

if TYPE_CHECKING:  # the figures are read, never imported: the cost model's host side sits above the core
    from tilesim.cost.params import CostParams

N_VEC = len(VEC_CLASSES)
N_RATES = 2 * len(VEC_KINDS)  # cycles per repeat by kind and element size (tilesim.core.vec_kinds.vec_kind)
QUEUE = 64  # instructions a core queues before it schedules them (5.5 KiB a core; 16 to 2048 cost the same)

# The instruction log: LOG_FIELDS int64 per instruction (tilesim.core.records writes it; its comment says what each is).
LOG_FIELDS = 11
L_PIPE, L_CLASS, L_AMOUNT, L_BURSTS, L_WRITE, L_READ0, L_READ1, L_GM, L_GM_OFF, L_GM_ROW, L_GM_STRIDE = \
    range(LOG_FIELDS)

# A core's state (float64 words). Cycles of the SoC's clock from the phase's start.
F_ISSUED = 0  # when the scalar unit issued the last instruction
F_FREE = 1  # N_LANES words: when each pipe takes its next instruction
F_BUSY = F_FREE + N_LANES  # N_LANES words: cycles each pipe was occupied
F_SPAN = F_BUSY + N_LANES  # the latest result so far
F_PATH = F_SPAN + 1  # N_LANES words: the span's critical path, the cycles of it each pipe holds (its "blame")
F_RATE2 = F_PATH + N_LANES  # this phase's MTE2 rate (GB/s: bytes a ns)
F_RATE3 = F_RATE2 + 1  # this phase's MTE3 rate
F_LAT2 = F_RATE3 + 1  # the CostParams figures, fixed for a launch
F_LAT3 = F_LAT2 + 1
F_BURST = F_LAT3 + 1
F_GET_VALUE = F_BURST + 1
F_ISSUE = F_GET_VALUE + 1
F_CLOCK = F_ISSUE + 1
F_REPEAT = F_CLOCK + 1  # N_RATES words: cycles per 256 B repeat, by the instruction's vec_kind code
F_STARTUP = F_REPEAT + N_RATES  # N_VEC words: start-up delay, by vector class
F_DONE = F_STARTUP + N_VEC  # N_LANES words: when each pipe's instructions so far are all done
F_FLAGS = F_DONE + N_LANES  # FLAGS words: when each (HardEvent, id) flag was set (tilesim.machine.sync)
FLAGS = 16 * 8
# The blame of a time: N_LANES words, the cycles of the longest chain of instructions and waits that ends at it
# which each pipe holds (the scalar unit's issue counts as SCALAR). Each time the schedule keeps has one.
B_ISSUED = F_FLAGS + FLAGS  # the issue time's
B_FREE = B_ISSUED + N_LANES  # N_LANES blames: each pipe's free time's
B_DONE = B_FREE + N_LANES * N_LANES  # N_LANES blames: each pipe's done time's
B_FLAGS = B_DONE + N_LANES * N_LANES  # FLAGS blames
# Then the tables: the write end and the read end of each queue slot, the last write end of each GM tensor, then
# their blames in the same order. Each table starts with an entry for "none", which stays 0: an instruction
# without an operand reads and writes it like any other.
F_TABLES = B_FLAGS + FLAGS * N_LANES
PHASE_WORDS = 2 * N_LANES + 1  # what a phase leaves (PHASE_RESULT): busy per pipe, the span, the span's path
PHASE_RESULT = slice(F_BUSY, F_PATH + N_LANES)
SLOT_CACHE = 64  # refs whose queue slot a core remembers (a kernel's tiles reuse a few dozen UB addresses)


@njit(cache=True, host=True)
def state_words(n_slots, n_gm):
    """Words of a core's state with ``n_slots`` queue slots and ``n_gm`` GM tensors."""
    return F_TABLES + (1 + N_LANES) * (2 * (n_slots + 1) + n_gm + 1)


def slot_bases(plan: np.ndarray) -> tuple[np.ndarray, int]:
    """The id of each UB plan buffer's first queue slot (``plan``: rows of offset, slot bytes, slots), and the
    number of slots in all."""
    counts = np.maximum(plan[:, 2].astype(np.int64), 1)
    base = np.zeros(len(counts), np.int64)
    if len(counts):
        base[1:] = np.cumsum(counts)[:-1]
    return base, int(counts.sum())


def set_params(f: np.ndarray, p: CostParams) -> None:
    """Write ``p``'s figures into a core's state."""
    f[F_LAT2], f[F_LAT3], f[F_BURST] = p.mte2_latency_cycles, p.mte3_latency_cycles, p.mte_burst_cycles
    f[F_GET_VALUE], f[F_ISSUE], f[F_CLOCK] = p.get_value_cycles, p.scalar_issue_cycles, p.clock_ghz
    f[F_REPEAT:F_REPEAT + N_RATES] = [c for k in VEC_KINDS for c in p.vec_repeat_cycles[k]]
    f[F_STARTUP:F_STARTUP + N_VEC] = [p.vec_startup_cycles[c] for c in VEC_CLASSES]


def reset(f: np.ndarray) -> None:
    """A new phase: the timelines and tables of the states ``f`` (one core's, or a row per core) back to zero."""
    f[..., F_ISSUED:F_PATH + N_LANES] = 0.0
    f[..., F_DONE:] = 0.0


def l2_hit(in_bytes: int, out_bytes: int, read_bytes: int, l2_size: int, warm: bool) -> float:
    """The share of a launch's GM reads (``read_bytes`` in all) that the L2 serves. None unless the launch's GM
    tensors (``in_bytes`` of inputs, ``out_bytes`` of outputs; the workspace aside) fit the L2's ``l2_size``
    bytes; then the re-reads (every read byte beyond the inputs' bytes: a kernel that reads x twice) or, with
    ``warm`` (the inputs left in the L2 by the previous run of the same call), every read."""
    if read_bytes <= 0 or in_bytes + out_bytes <= 0 or in_bytes + out_bytes > l2_size:
        return 0.0
    return 1.0 if warm else max(0, read_bytes - in_bytes) / read_bytes


def l2_read_gbs(p: CostParams, ai_cores: int) -> float:
    """The chip's L2 read bandwidth (GB/s): ``p.l2_read_rate`` per AI core, ``ai_cores`` of them."""
    return p.l2_read_rate * ai_cores * p.clock_ghz


def mte_rates(b2: Any, b3: Any, movers: Any, p: CostParams, hit: float = 0.0,
              l2_gbs: float = 0.0) -> tuple[Any, Any]:
    """A core's MTE2 and MTE3 rates (GB/s) in a phase in which it moves ``b2`` bytes in and ``b3`` out and
    ``movers`` cores move data: the chip's GM bandwidth shared by those cores, the core's share split between its
    MTE2 and MTE3 in proportion to the HBM bytes each moves (they draw on the same bandwidth), each within its
    per-core limit. A share ``hit`` of the reads comes from the L2 instead (:func:`l2_hit`), whose bandwidth
    ``l2_gbs`` the movers share likewise: MTE2's rate is then that of its HBM and L2 bytes one after the other.
    Writes go to HBM. Numbers or numpy arrays (elementwise), the same float64 operations either way."""
    share = p.gm_bandwidth_gbs / np.maximum(movers, 1)
    hbm2 = b2 * (1.0 - hit) if hit else b2
    moved = np.maximum(hbm2 + b3, 1)
    r2 = share * np.maximum(hbm2, 1) / moved
    if hit:  # the time of its HBM bytes at r2, then of its L2 bytes at the L2's share
        r2 = 1.0 / ((1.0 - hit) / r2 + hit * np.maximum(movers, 1) / l2_gbs)
    return np.minimum(p.mte2_core_gbs, r2), np.minimum(p.mte3_core_gbs, share * np.maximum(b3, 1) / moved)


def new_slot_cache() -> np.ndarray:
    """An empty cache for :func:`slot_of`: SLOT_CACHE refs (none yet: -2 matches no ref), then their slots."""
    cache = np.zeros(2 * SLOT_CACHE, np.int64)
    cache[:SLOT_CACHE] = -2
    return cache


@njit(cache=True, inline="always")
def slot_of(plan, base, cache, n_slots, ref):
    """The queue slot id of a logged UB tensor ``ref`` (``buffer << 32 | address``; -1 for none): the buffer's
    first slot's id plus the slot the address lies in (the first or the last one for an address outside the
    buffer, which checked mode reports). Remembered in ``cache`` (:func:`new_slot_cache`, direct-mapped by the
    address's 32 B block and the buffer): a kernel's tiles reuse a few dozen addresses, so most look-ups hit."""
    if ref < 0:
        return np.int64(-1)
    h = ((ref >> 5) ^ (ref >> 32)) & (SLOT_CACHE - 1)
    if cache[h] == ref:
        return cache[SLOT_CACHE + h]
    buf = ref >> 32
    if buf >= plan.shape[0]:
        return np.int64(n_slots - 1)
    addr = ref & 0xFFFFFFFF
    off, size, n = plan[buf, 0], plan[buf, 1], plan[buf, 2]
    k = np.int64(0)
    if size > 0:
        while k + 1 < n and addr >= off + (k + 1) * size:  # buffer_num slots: one or two steps, no division
            k += 1
    cache[h] = ref
    cache[SLOT_CACHE + h] = base[buf] + k
    return base[buf] + k


@njit(cache=True, inline="always")
def _later(a, b):
    """max(a, b) as one select: Numba's max() tests for NaN first, and the schedule has none."""
    return a if a >= b else b


@njit(cache=True, inline="always")
def _gate(t, at, q, scalar, mte2, vector, mte3, free0, free1, free2, free3):
    """The pipe ``q`` (all four for -1) takes no instruction before ``t``; the scalar unit's wait holds issue."""
    free0 = _later(free0, t) if (q < 0 or mte2) else free0
    free1 = _later(free1, t) if (q < 0 or vector) else free1
    free2 = _later(free2, t) if (q < 0 or mte3) else free2
    free3 = _later(free3, t) if (q < 0 or scalar) else free3
    return _later(at, t) if (q < 0 or scalar) else at, free0, free1, free2, free3


@njit(cache=True, inline="always")
def _blame(f, dst, src, pipe, cycles):
    """The blame at ``dst``: the one at ``src``, ``cycles`` more on ``pipe``."""
    for k in range(N_LANES):
        f[dst + k] = f[src + k] + (cycles if k == pipe else 0.0)


@njit(cache=True, inline="always")
def _wait_for(t, src, x, x_src):
    """The later of time ``t`` (its blame at ``src``) and time ``x`` (its blame at ``x_src``), with its blame."""
    return (x, x_src) if x > t else (t, src)


@njit(cache=True, inline="always")
def _put(f, dst, b0, b1, b2, b3):
    """The blame ``b0..b3`` at ``dst``."""
    f[dst] = b0
    f[dst + 1] = b1
    f[dst + 2] = b2
    f[dst + 3] = b3


@njit(cache=True, inline="always")
def _blame_if(f, cond, dst, src):
    """The blame at ``src`` to ``dst`` where ``cond`` (a time that moved to the one ``src`` is the blame of)."""
    if cond:
        for k in range(N_LANES):
            f[dst + k] = f[src + k]


@njit(cache=True, host=True)
def run(f, plan, base, cache, n_slots, n_gm, log, n, vec_column, sync_column, start, free):
    """Schedule the first ``n`` instructions of ``log`` (rows in the log's layout) after those already on a core's
    state ``f``, with ``plan``, ``base`` and ``cache`` for :func:`slot_of` and ``vec_column`` the counter column
    of the first vector class and ``sync_column`` that of the syncs (PipeBarrier, then SetFlag, then WaitFlag).
    With ``start`` and ``free`` as long as the log, each instruction's start and the moment it frees its pipe go
    there (cycles from the phase's start); pass empty arrays for none.

    The kernel's syncs, and those its queue calls make: a SetFlag fires when the instructions of its pipe issued
    before it are done (their results too); the WaitFlag holds its pipe until then (on the scalar unit, the issue
    of everything after it); a PipeBarrier holds its pipe (PIPE_ALL: every pipe and the issue) until that pipe's
    earlier instructions are done.

    An instruction starts when the scalar unit has issued it, its pipe is free, the slots it reads have been
    written (RAW), the slot it writes has been written and read (WAW, WAR), and, for an MTE2 read of GM, this
    core's last MTE3 write of that tensor has landed. It holds its pipe for its occupancy (MTE: a latency, then its
    bytes at the phase's rate or its rows at their least time, whichever is longer; VECTOR: its repeats at its
    kind's cycles for its element size; SCALAR: a fixed cost) and its result comes a start-up later (vector
    instructions only). A scalar access stalls issue until its value is there.

    Each time kept carries its blame (B_*): the wait that set an instruction's start passes its blame on, plus the
    instruction's own occupancy (to its pipe's free time) or latency (to its result), so that the span's blame
    (F_PATH) is its critical path by pipe, and adds up to the span.

    The issue time, the pipes' free and busy times and the span are locals over the loop; every duration is worked
    out and the instruction's selected, and an absent operand reads and writes its table's entry for "none", which
    stays 0. About 40-50 ns an instruction replaying a recorded log on this project's 2-core VM, the blame half
    again of what the schedule took without it."""
    lat2, lat3, burst, get_value, issue, clock = f[F_LAT2], f[F_LAT3], f[F_BURST], f[F_GET_VALUE], f[F_ISSUE], \
        f[F_CLOCK]
    rate2, rate3 = f[F_RATE2], f[F_RATE3]
    issued, span = f[F_ISSUED], f[F_SPAN]
    free0, free1, free2, free3 = f[F_FREE], f[F_FREE + 1], f[F_FREE + 2], f[F_FREE + 3]
    busy0, busy1, busy2, busy3 = f[F_BUSY], f[F_BUSY + 1], f[F_BUSY + 2], f[F_BUSY + 3]
    done0, done1, done2, done3 = f[F_DONE], f[F_DONE + 1], f[F_DONE + 2], f[F_DONE + 3]
    w_end, r_end, gm_w = F_TABLES + 1, F_TABLES + n_slots + 2, F_TABLES + 2 * n_slots + 3  # each past its "none"
    # the blames of the tables' entries: past the tables, N_LANES words an entry, in the same order
    n_tab = 2 * (n_slots + 1) + n_gm + 1
    bw_end, br_end, bgm_w = (F_TABLES + n_tab + N_LANES * (w_end - F_TABLES),
                             F_TABLES + n_tab + N_LANES * (r_end - F_TABLES),
                             F_TABLES + n_tab + N_LANES * (gm_w - F_TABLES))
    times = start.size > 0
    for i in range(n):
        pipe, amount = log[i, L_PIPE], log[i, L_AMOUNT]
        vector, scalar, mte2, mte3 = pipe == LANE_VECTOR, pipe == LANE_SCALAR, pipe == LANE_MTE2, pipe == LANE_MTE3
        p = min(max(pipe, 0), N_LANES - 1)
        sync = log[i, L_CLASS] - sync_column
        issued += issue
        f[B_ISSUED + LANE_SCALAR] += issue
        if sync >= 0:  # 0 PipeBarrier, 1 SetFlag, 2 WaitFlag: the key (L_GM_OFF) is the pipe or the flag
            key = log[i, L_GM_OFF]
            done_now = done0 if mte2 else done1 if vector else done2 if mte3 else done3
            if sync == 1:
                f[F_FLAGS + key] = _later(done_now, issued)
                _blame(f, B_FLAGS + N_LANES * key, B_DONE + N_LANES * p if done_now >= issued else B_ISSUED, 0, 0.0)
            else:
                everything = sync == 0 and key < 0
                if sync == 2:
                    t, src = f[F_FLAGS + key], B_FLAGS + N_LANES * key
                elif everything:
                    t, src = done0, B_DONE
                    for q, d in ((1, done1), (2, done2), (3, done3)):
                        if d > t:
                            t, src = d, B_DONE + N_LANES * q
                else:
                    t, src = done_now, B_DONE + N_LANES * p
                was = (issued, free0, free1, free2, free3)
                issued, free0, free1, free2, free3 = _gate(t, issued, -1 if everything else pipe, scalar, mte2,
                                                           vector, mte3, free0, free1, free2, free3)
                _blame_if(f, issued != was[0], B_ISSUED, src)
                _blame_if(f, free0 != was[1], B_FREE, src)
                _blame_if(f, free1 != was[2], B_FREE + N_LANES, src)
                _blame_if(f, free2 != was[3], B_FREE + 2 * N_LANES, src)
                _blame_if(f, free3 != was[4], B_FREE + 3 * N_LANES, src)
            if times:  # on its pipe, in order: not before the pipe's earlier instructions have left it
                start[i] = free[i] = _later(issued, free0 if mte2 else free1 if vector else free2 if mte3 else free3)
            continue
        vcls = min(max(log[i, L_CLASS] - vec_column, 0), N_VEC - 1)
        kind = min(max(log[i, L_BURSTS], 0), N_RATES - 1)  # a vector instruction's vec_kind code
        w = slot_of(plan, base, cache, n_slots, log[i, L_WRITE])
        r0 = slot_of(plan, base, cache, n_slots, log[i, L_READ0])
        r1 = slot_of(plan, base, cache, n_slots, log[i, L_READ1])
        g = log[i, L_GM]
        g = g if 0 <= g < n_gm else -1
        mte = ((lat2 if mte2 else lat3)
               + _later(amount / (rate2 if mte2 else rate3) * clock, log[i, L_BURSTS] * burst))
        occ = amount * f[F_REPEAT + kind] if vector else get_value if scalar else mte
        lat = occ + (f[F_STARTUP + vcls] if vector else 0.0)
        g_read = g if mte2 else -1
        g_write = g if mte3 else -1
        free_now = free0 if mte2 else free1 if vector else free2 if mte3 else free3
        # the start: the latest of what it waits for, and the blame of that one
        t, src = _wait_for(issued, B_ISSUED, free_now, B_FREE + N_LANES * p)
        t, src = _wait_for(t, src, f[w_end + r0], bw_end + N_LANES * r0)
        t, src = _wait_for(t, src, f[w_end + r1], bw_end + N_LANES * r1)
        t, src = _wait_for(t, src, f[w_end + w], bw_end + N_LANES * w)
        t, src = _wait_for(t, src, f[r_end + w], br_end + N_LANES * w)
        t, src = _wait_for(t, src, f[gm_w + g_read], bgm_w + N_LANES * g_read)
        e = t + lat
        after = t + occ
        # the blame of its result, held for the stores below (its own start's entry may be one of them)
        b0 = f[src] + (lat if p == 0 else 0.0)
        b1 = f[src + 1] + (lat if p == 1 else 0.0)
        b2 = f[src + 2] + (lat if p == 2 else 0.0)
        b3 = f[src + 3] + (lat if p == 3 else 0.0)
        _blame(f, B_FREE + N_LANES * p, src, p, occ)
        free0 = after if mte2 else free0
        free1 = after if vector else free1
        free2 = after if mte3 else free2
        free3 = after if scalar else free3
        busy0 += occ if mte2 else 0.0
        busy1 += occ if vector else 0.0
        busy2 += occ if mte3 else 0.0
        busy3 += occ if scalar else 0.0
        done_now = done0 if mte2 else done1 if vector else done2 if mte3 else done3
        stores = 0  # where the result's blame goes: a bit per entry
        if e >= done_now:
            stores |= 1
        done0 = _later(done0, e) if mte2 else done0
        done1 = _later(done1, e) if vector else done1
        done2 = _later(done2, e) if mte3 else done2
        done3 = _later(done3, e) if scalar else done3
        if r0 >= 0 and e >= f[r_end + r0]:
            stores |= 2
        f[r_end + r0] = _later(f[r_end + r0], e if r0 >= 0 else 0.0)
        if r1 >= 0 and e >= f[r_end + r1]:
            stores |= 4
        f[r_end + r1] = _later(f[r_end + r1], e if r1 >= 0 else 0.0)
        f[w_end + w] = e if w >= 0 else 0.0
        f[r_end + w] = e if w >= 0 else 0.0
        if w >= 0:
            stores |= 8
        f[gm_w + g_write] = e if g_write >= 0 else 0.0
        if g_write >= 0:
            stores |= 16
        if scalar:
            issued = e
            stores |= 32
        if e >= span:
            stores |= 64
        span = _later(span, e)
        if stores & 1:
            _put(f, B_DONE + N_LANES * p, b0, b1, b2, b3)
        if stores & 2:
            _put(f, br_end + N_LANES * r0, b0, b1, b2, b3)
        if stores & 4:
            _put(f, br_end + N_LANES * r1, b0, b1, b2, b3)
        if stores & 8:
            _put(f, bw_end + N_LANES * w, b0, b1, b2, b3)
            _put(f, br_end + N_LANES * w, b0, b1, b2, b3)
        if stores & 16:
            _put(f, bgm_w + N_LANES * g_write, b0, b1, b2, b3)
        if stores & 32:
            _put(f, B_ISSUED, b0, b1, b2, b3)
        if stores & 64:
            _put(f, F_PATH, b0, b1, b2, b3)
        if times:
            start[i] = t
            free[i] = after
    f[F_ISSUED], f[F_SPAN] = issued, span
    f[F_FREE], f[F_FREE + 1], f[F_FREE + 2], f[F_FREE + 3] = free0, free1, free2, free3
    f[F_BUSY], f[F_BUSY + 1], f[F_BUSY + 2], f[F_BUSY + 3] = busy0, busy1, busy2, busy3
    f[F_DONE], f[F_DONE + 1], f[F_DONE + 2], f[F_DONE + 3] = done0, done1, done2, done3
