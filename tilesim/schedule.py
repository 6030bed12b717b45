"""The cost model's schedule of one core, one instruction at a time.

One function, :func:`step`, places an instruction on its pipe's timeline. Two callers use it:

- a launch that schedules itself while it runs (``tilesim.cost.estimated``): the device code calls ``step`` for
  each instruction a core issues, so the estimate needs no instruction log and its memory does not grow with the
  number of instructions;
- the replay of a recorded log (``tilesim.cost.estimate`` of a ``tilesim.recorded`` report), which also gives
  each instruction's start and end for a trace.

The model itself is stated in ``tilesim.cost``'s docstring. A core's state is one float64 array (layout below);
each phase starts from zero (the caller adds the phase's start), so a core's span in a phase is its ``F_SPAN``.
The state's tables are indexed by queue slot (:func:`slot_of`: a UB buffer's slot, the unit TQue's EnQue/DeQue
flags synchronise on) and by GM tensor tag.
"""

from __future__ import annotations

import numpy as np

from .cost_params import VEC_CLASSES, CostParams
from .jit import njit

PIPE_MTE2, PIPE_VECTOR, PIPE_MTE3, PIPE_SCALAR = 0, 1, 2, 3
PIPE_NAMES = ["MTE2", "VECTOR", "MTE3", "SCALAR"]  # msprof's lane names
N_PIPES = len(PIPE_NAMES)
N_VEC = len(VEC_CLASSES)

# A core's state (float64 words). Cycles of the SoC's clock from the phase's start.
F_ISSUED = 0  # when the scalar unit issued the last instruction
F_FREE = 1  # N_PIPES words: when each pipe takes its next instruction
F_BUSY = F_FREE + N_PIPES  # N_PIPES words: cycles each pipe was occupied
F_SPAN = F_BUSY + N_PIPES  # the latest result so far
F_RATE2 = F_SPAN + 1  # this phase's MTE2 rate (GB/s: bytes a ns)
F_RATE3 = F_RATE2 + 1  # this phase's MTE3 rate
F_LAT2 = F_RATE3 + 1  # the CostParams figures, fixed for a launch
F_LAT3 = F_LAT2 + 1
F_BURST = F_LAT3 + 1
F_GET_VALUE = F_BURST + 1
F_ISSUE = F_GET_VALUE + 1
F_CLOCK = F_ISSUE + 1
F_REPEAT = F_CLOCK + 1  # N_VEC words: cycles per 256 B repeat, by vector class
F_STARTUP = F_REPEAT + N_VEC  # N_VEC words: start-up delay, by vector class
F_TABLES = F_STARTUP + N_VEC  # then: write end and read end of each slot, last write end of each GM tensor
SPAN_AND_BUSY = slice(F_BUSY, F_SPAN + 1)  # what a phase leaves: busy per pipe, then the span
SLOT_CACHE = 64  # refs whose queue slot a core remembers (a kernel's tiles reuse a few dozen UB addresses)


def state_words(n_slots: int, n_gm: int) -> int:
    """Words of a core's state with ``n_slots`` queue slots and ``n_gm`` GM tensors."""
    return F_TABLES + 2 * n_slots + n_gm


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
    f[F_REPEAT:F_REPEAT + N_VEC] = [p.vec_repeat_cycles[c] for c in VEC_CLASSES]
    f[F_STARTUP:F_STARTUP + N_VEC] = [p.vec_startup_cycles[c] for c in VEC_CLASSES]


def reset(f: np.ndarray) -> None:
    """A new phase: the timelines and tables of the states ``f`` (one core's, or a row per core) back to zero."""
    f[..., F_ISSUED:F_SPAN + 1] = 0.0
    f[..., F_TABLES:] = 0.0


def mte_rates(b2: float, b3: float, movers: int, p: CostParams) -> tuple[float, float]:
    """A core's MTE2 and MTE3 rates (GB/s) in a phase in which it moves ``b2`` bytes in and ``b3`` out and
    ``movers`` cores move data: the chip's GM bandwidth shared by those cores, the core's share split between its
    MTE2 and MTE3 in proportion to their bytes (they draw on the same bandwidth), each within its per-core limit."""
    share = p.gm_bandwidth_gbs / max(movers, 1)
    moved = max(b2 + b3, 1)
    return min(p.mte2_core_gbs, share * max(b2, 1) / moved), min(p.mte3_core_gbs, share * max(b3, 1) / moved)


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
    address's 32 B block and the buffer): working it out took three quarters of a scheduled instruction's cost."""
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


@njit(cache=True)
def step(f, pipe, vcls, amount, bursts, w, r0, r1, gm, n_slots):
    """Schedule one instruction of a core (state ``f``): ``pipe``, its vector class ``vcls`` (an index into
    VEC_CLASSES), ``amount`` (bytes for MTE2/MTE3, 256 B repeats for VECTOR), ``bursts`` (rows of a transfer), the
    queue slots it writes (``w``) and reads (``r0``, ``r1``) and the GM tensor it moves (``gm``), -1 for none.
    Returns when it starts and when it frees its pipe, in cycles from the phase's start.

    It starts when the scalar unit has issued it, its pipe is free, the slots it reads have been written (RAW),
    the slot it writes has been written and read (WAW, WAR), and, for an MTE2 read of GM, this core's last MTE3
    write of that tensor has landed. It holds its pipe for its occupancy and its result comes a start-up later
    (vector instructions only). A scalar access stalls issue until its value is there."""
    if pipe == PIPE_VECTOR:
        occ = amount * f[F_REPEAT + vcls]
        lat = occ + f[F_STARTUP + vcls]
    elif pipe == PIPE_SCALAR:
        occ = f[F_GET_VALUE]
        lat = occ
    else:
        mte2 = pipe == PIPE_MTE2
        occ = ((f[F_LAT2] if mte2 else f[F_LAT3]) + max(bursts - 1, 0) * f[F_BURST]
               + amount / (f[F_RATE2] if mte2 else f[F_RATE3]) * f[F_CLOCK])
        lat = occ
    w_end, r_end, gm_w = F_TABLES, F_TABLES + n_slots, F_TABLES + 2 * n_slots
    issued = f[F_ISSUED] + f[F_ISSUE]
    t = _later(issued, f[F_FREE + pipe])
    if r0 >= 0:
        t = _later(t, f[w_end + r0])
    if r1 >= 0:
        t = _later(t, f[w_end + r1])
    if w >= 0:
        t = _later(t, _later(f[w_end + w], f[r_end + w]))
    if gm >= 0 and pipe == PIPE_MTE2:
        t = _later(t, f[gm_w + gm])
    e = t + lat
    f[F_FREE + pipe] = t + occ
    f[F_BUSY + pipe] += occ
    if r0 >= 0:
        f[r_end + r0] = _later(f[r_end + r0], e)
    if r1 >= 0:
        f[r_end + r1] = _later(f[r_end + r1], e)
    if w >= 0:
        f[w_end + w] = e
        f[r_end + w] = e
    if gm >= 0 and pipe == PIPE_MTE3:
        f[gm_w + gm] = e
    f[F_ISSUED] = e if pipe == PIPE_SCALAR else issued
    f[F_SPAN] = _later(f[F_SPAN], e)
    return t, t + occ
