"""PopStackBuffer: the UB a kernel's TPipe leaves free, handed out as the framework's temporaries (an API called
without a sharedTmpBuffer), named ``stack`` in the plan and the reports."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

import tilesim
from tilesim.machine import VECCALC, VECIN, TBuf, TPipe, TQue, data_copy, duplicate, float32, pop_stack_buffer, uint8
from tilesim.runtime.launcher import kernel, launch
from tilesim.soc import get_soc

SOC = get_soc("Ascend910B1")


@dataclass(frozen=True)
class StackTiling:
    n: int
    calls: int


@kernel
def stack_kernel(ctx, t, a, out):
    """A queue of ``n`` floats, then PopStackBuffer ``calls`` times (one plan row while the free UB stays), then
    a TBuf placed where the stack starts; out = [the stack's bytes, its offset, the TBuf's offset, a value
    written through the stack]."""
    pipe = TPipe(ctx)
    q = pipe.init_buffer(TQue(VECIN, 1), 1, t.n * 4)
    x = q.alloc_tensor(a.dtype)
    data_copy(x, a, t.n)
    q.free_tensor(x)
    stack = pop_stack_buffer(ctx, uint8)
    for _ in range(t.calls - 1):
        stack = pop_stack_buffer(ctx, uint8)
    s = stack.reinterpret_cast(float32)
    duplicate(s, 2.5, 64)
    after = pipe.init_buffer(TBuf(VECCALC), 64)
    out.set_value(0, stack.get_size())
    out.set_value(1, stack.addr)
    out.set_value(2, after.get(uint8).addr)
    out.set_value(3, s.get_value(1))


def test_pop_stack_buffer_hands_out_the_free_ub() -> None:
    n = 40  # 160 B, placed as 160 B (a multiple of 32)
    out = np.zeros(4, np.float32)  # every value exact in fp32 (the UB is 192 KiB)
    rep = launch(stack_kernel, StackTiling(n, 3), np.ones(n, np.float32), out, block_dim=1, checks=True)
    free = (SOC.ub_size - 160) // 32 * 32
    assert out.tolist() == [free, 160, 160, 2.5]
    names = [(b.name, b.offset, b.nbytes, b.stack) for b in rep.ub_plan.buffers]
    assert names == [("q", 0, 160, False), ("stack", 160, free, True), ("after", 160, 64, False)]


@kernel
def tbuf_overrun(ctx, t, a, out):
    """A Duplicate of ``t.n`` floats into a TBuf of 64 floats placed last, then the first 64 copied out."""
    pipe = TPipe(ctx)
    buf = pipe.init_buffer(TBuf(VECCALC), 256)
    b = buf.get(float32)
    duplicate(b, 1.5, t.n)
    out.set_value(0, b.get_value(0))


def test_a_tbuf_access_past_its_end_is_out_of_bounds() -> None:
    """A TBuf is one slot: 256 B of it and not the UB after it (nothing placed there does not make it its)."""
    out = np.zeros(1, np.float32)
    launch(tbuf_overrun, StackTiling(64, 1), np.ones(1, np.float32), out, block_dim=1, checks=True)
    with pytest.raises(tilesim.CheckError) as ei:
        launch(tbuf_overrun, StackTiling(128, 1), np.ones(1, np.float32), out, block_dim=1, checks=True)
    v = ei.value.violations[0]
    assert (v.kind, v.memory, v.offset, v.nbytes) == ("UB out of bounds", 'UB buffer "buf"', 0, 512)
