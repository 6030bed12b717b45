"""The Unified Buffer: the host-side plan (TPipe.InitBuffer) and the machine's name of a place in it.

A plan places named buffers, each ``buffer_num`` slots of ``nbytes`` rounded up to 32 B, one after another at
32 B-aligned offsets, as TPipe does. A plan that does not fit the SoC's UB raises :class:`UbOverflowError`
naming every buffer. On the device the machine names a LocalTensor (:mod:`tilesim.machine.tensor`'s, which also
carries its element type) by a :data:`PlanTensor` ``(buf, addr, gen)``: the plan row that owns it, a byte address
in the core's arena and its allocation; typed views of the arena are taken per access, so aliases (a b16 tensor
in the upper half of an fp32 buffer, ReinterpretCast) are real aliasing.
"""

from __future__ import annotations

import functools
from collections import namedtuple
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from tilesim.core.memo import by_identity
from tilesim.errors import UbOverflowError

BLOCK = 32

PlanTensor = namedtuple("PlanTensor", ["buf", "addr", "gen"], defaults=(-1,))
PlanTensor.__doc__ = """A LocalTensor's place in the UB: the plan row (buffer) that owns it, its byte address in the
core's arena, and ``gen``, the allocation the queue buffer was taken for (AllocTensor's count of that queue), so
that checked mode can tell a tensor used after its buffer went to a later allocation; -1 for a tensor not
tracked."""


def align_up(n: int, a: int) -> int:
    """``n`` rounded up to a multiple of ``a``."""
    return (n + a - 1) // a * a


@dataclass
class UbBuffer:
    """One buffer of a UB plan (an InitBuffer): its name, its offset in the UB, one slot's bytes (rounded up to
    32 B) and its slots (``buffer_num``)."""
    name: str
    offset: int
    nbytes: int  # one slot, rounded up to 32 B
    buffer_num: int
    stack: bool = False  # the framework's temporaries (PopStackBuffer): all the UB the plan left free

    @property
    def total(self) -> int:
        """The buffer's bytes: its slots times a slot's."""
        return self.nbytes * self.buffer_num


@dataclass
class UbPlan:
    """TPipe.InitBuffer for one kernel: ``add`` buffers, then ``check`` them against ``capacity``."""

    capacity: int
    buffers: list[UbBuffer] = field(default_factory=list)
    region: int = 0  # index of the first buffer placed since the last reset
    _end: int = field(default=0, repr=False)  # where the next buffer of the current region goes
    _array: np.ndarray | None = field(default=None, repr=False)  # as_array of a frozen plan
    _used: int = field(default=0, repr=False)  # used of a frozen plan

    def _mutable(self) -> None:
        if self._array is not None:
            raise RuntimeError("this UB plan is frozen: every launch of its tiling shares it; build a new one")

    def freeze(self) -> UbPlan:
        """No more buffers: the plan becomes shareable (see :func:`shared_plan`)."""
        self._used = self.used
        self._array = self._rows()
        self._array.flags.writeable = False
        return self

    def add(self, name: str, nbytes: int, buffer_num: int = 1) -> int:
        """Place ``buffer_num`` slots of ``nbytes``; returns the buffer's index (its id on the device).

        ``nbytes`` 0 reserves the id without UB: a kernel whose buffer ids are fixed across its modes gives the
        buffers a mode does not allocate 0 bytes."""
        if nbytes < 0 or buffer_num <= 0:
            raise ValueError(f"UB buffer {name}: nbytes must be >= 0 and buffer_num positive, got {nbytes}, "
                             f"{buffer_num}")
        self._mutable()
        offset = self._end if self.region < len(self.buffers) else 0
        self._end = offset + align_up(int(nbytes), BLOCK) * int(buffer_num)
        self.buffers.append(UbBuffer(name, offset, align_up(int(nbytes), BLOCK), int(buffer_num)))
        return len(self.buffers) - 1

    def add_stack(self, name: str = "stack") -> int:
        """PopStackBuffer: a last buffer holding all the UB the plan leaves free (whole 32 B blocks), the
        temporaries the framework hands to an API called without a sharedTmpBuffer; returns its id."""
        i = self.add(name, max(self.capacity - self.used, 0) // BLOCK * BLOCK)
        self.buffers[i] = replace(self.buffers[i], stack=True)
        return i

    def reset(self) -> UbPlan:
        """TPipe.Reset: the buffers added from now on are placed from offset 0 again, over the earlier ones
        (a kernel's second stage reusing the UB of its first)."""
        self._mutable()
        self.region = len(self.buffers)
        return self

    @property
    def used(self) -> int:
        """The high-water mark: the largest end offset of any buffer."""
        if self._array is not None:
            return self._used
        return max((b.offset + b.total for b in self.buffers), default=0)

    @property
    def free(self) -> int:
        """UB left after the plan: what the framework can hand out as temporaries (PopStackBuffer)."""
        return max(self.capacity - self.used, 0)

    def check(self) -> UbPlan:
        """Raise :class:`tilesim.UbOverflowError` when the plan does not fit ``capacity``, naming every buffer with its
        slots, bytes and offset; returns the plan."""
        if self.used > self.capacity:
            rows = "; ".join(f"{b.name} {b.buffer_num} x {b.nbytes} B = {b.total} B at {b.offset}"
                             for b in self.buffers if b.nbytes)
            raise UbOverflowError(f"UB plan needs {self.used} B but the core has {self.capacity} B "
                                  f"(over by {self.used - self.capacity} B): {rows}")
        return self

    def as_array(self) -> np.ndarray:
        """int64 rows (offset, slot bytes, slots) for the device."""
        return self._array if self._array is not None else self._rows()

    def _rows(self) -> np.ndarray:
        a = np.zeros((max(len(self.buffers), 1), 3), np.int64)
        for i, b in enumerate(self.buffers):
            a[i] = (b.offset, b.nbytes, b.buffer_num)
        return a

    def names(self) -> list[str]:
        """The buffers' names, by index."""
        return [b.name for b in self.buffers]

    def table(self) -> str:
        """The plan as the run report prints it: a line per buffer of nonzero size (offset, slot bytes, slots, total),
        then the bytes used of the capacity."""
        lines = [f"  {'buffer':<14}{'offset':>8}{'slot B':>9}{'slots':>6}{'total B':>9}"]
        lines += [f"  {b.name:<14}{b.offset:>8}{b.nbytes:>9}{b.buffer_num:>6}{b.total:>9}" for b in self.buffers
                  if b.nbytes]
        lines.append(f"  used {self.used} of {self.capacity} B ({100 * self.used / self.capacity:.1f} %)")
        return "\n".join(lines)


def shared_plan(build: Callable[..., UbPlan]) -> Callable[..., UbPlan]:
    """Memoise a kernel's plan builder (hashable arguments: a tiling, a SoC, sizes): an op call builds its plan
    once per tiling rather than once or twice per call, which at small sizes cost more than the kernel. The plans
    it returns are frozen, since every caller shares them. Positional calls look the arguments up by identity
    first (:func:`tilesim.core.memo.by_identity`: an op's remembered tiling is one object), then by value."""
    @functools.lru_cache(maxsize=1024)
    def cached(*args, **kwargs):  # type: ignore[no-untyped-def]
        return build(*args, **kwargs).freeze()

    same = by_identity(cached)

    @functools.wraps(build)
    def plan(*args, **kwargs):  # type: ignore[no-untyped-def]
        return cached(*args, **kwargs) if kwargs else same(*args)

    return plan
