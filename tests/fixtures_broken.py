"""Fixture kernels for checked mode: each is broken in exactly one way the sanitizer must name, or is a clean
control that must run without a report.

Why fixtures rather than the shipped ops: an op's own tiling is validated before it runs, so no caller can make
it misbehave on purpose. These kernels misbehave by construction, on one chosen core (``knobs[0]``) in one chosen
SyncAll phase (``knobs[1]``); every other core does the ordinary CopyIn, Compute, CopyOut of one tile, so a report
that names the wrong core or phase shows. They are tiny (1 to 4 cores, a tile of 256 B) so the whole set runs in
a few seconds once compiled.

The tile fixtures are the cases of one kernel, :func:`tile_fixtures` (one compile for all: a kernel links its
device code into its own machine code), on the Ascend C programming model. It places its TPipe's buffers in the
order pad0 (a TBuf of 96 B), xbuf (a VECIN TQue of two 256 B buffers: double buffering), ybuf (a VECOUT TQue of
one) and zbuf (a TBuf of 256 B): the 96 B first, so that a buffer's offset in the UB is never its offset in the
report (reports count from the buffer's start). It runs ``phases`` phases with a SyncAll between each two, every
case once per phase. GM: ``src`` (fp32, SPAN elements per core, values 0, 1, 2, ...), ``dst`` (fp32, the same
size, -1 before the launch) and ``acc`` (fp32, one tile of zeros), which the atomic case adds into under
SetAtomicAdd. Every case syncs its pipes (the queues' EnQue / DeQue, SetFlag / WaitFlag where a TBuf or a
copy-out of a VECIN tensor needs one), so that the one thing broken is the only report.

The LayerNormGradBeta fixtures (``reuse_source``, ``tmp_too_small``, ``framework_tmp_too_big`` and their clean
controls) run the API on one core over a [1, 8, 32] fp32 input; they are broken from the host side (a short tmp
buffer, a tiling made for more temporaries than the plan leaves free) or by reading a source the API reused.

:func:`run_fixture` launches one by name with :func:`tilesim.runtime.launcher.launch`, so a violation raises
:class:`tilesim.CheckError` exactly as it would from an op.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from conftest import as_asked
from tilesim.tiling.layer_norm_grad_api import (
    LayerNormGradBetaTiling,
    get_layer_norm_grad_beta_max_min_tmp_size,
    get_layer_norm_grad_beta_nd_tiling_info,
)

from tilesim import machine as asc
from tilesim.jit import njit
from tilesim.machine import VECCALC, HardEvent, TBuf, TPipe, float32, set_flag, uint8, wait_flag
from tilesim.machine import data_copy as asc_data_copy
from tilesim.machine.normalization import layer_norm_grad_beta as api_beta
from tilesim.runtime.launcher import kernel, launch
from tilesim.runtime.report import RunReport, capture
from tilesim.soc import get_soc

SOC = get_soc("Ascend910B1")
TILE = 64  # fp32 elements of one tile: 256 B, a buffer of xbuf
SPAN = 4 * TILE  # fp32 elements of src and dst per core
PAD0_BYTES = 96
GM_NAMES = ["src", "dst", "acc"]

# --- the tile fixtures ------------------------------------------------------------------------------------------
# Every case has one signature: (ctx, t, c, phase, xbuf, ybuf, zbuf, src, dst, acc), called by tile_fixtures once
# per phase on every core: t the knobs (TileKnobs), c the core.


@dataclass(frozen=True)
class TileKnobs:
    """The tile fixtures' tiling: the case (its index in TILE_FIXTURES), the core that misbehaves and the phase it
    does so in (knobs[0], knobs[1]; -1: none), two case-specific values (knobs[2], knobs[3]) and the phases."""

    case: int
    core: int
    phase: int
    a: int
    b: int
    phases: int


@njit(cache=True)
def _tile_pipe(ctx):
    """The TPipe's buffers: pad0 only takes the UB's first 96 B."""
    pipe = asc.TPipe(ctx)
    pad0 = pipe.init_buffer(asc.TBuf(asc.VECCALC), PAD0_BYTES)  # noqa: F841  (only its place in the UB)
    xbuf = pipe.init_buffer(asc.TQue(asc.VECIN, 2), 2, 4 * TILE)
    ybuf = pipe.init_buffer(asc.TQue(asc.VECOUT, 1), 1, 4 * TILE)
    zbuf = pipe.init_buffer(asc.TBuf(asc.VECCALC), 4 * TILE)
    return xbuf, ybuf, zbuf


@njit(cache=True)
def _tile(xbuf, ybuf, src, dst):
    """What a well-behaved core does with a tile: CopyIn from ``src`` into xbuf, Compute (x 2) into ybuf,
    CopyOut to ``dst``. Nine instructions in the core's log: the copies, the Muls and the queues' flags."""
    x = xbuf.alloc_tensor(asc.float32)
    asc.data_copy(x, src, TILE)
    xbuf.enque(x)
    x = xbuf.deque(asc.float32)
    y = ybuf.alloc_tensor(asc.float32)
    asc.muls(y, x, 2.0, TILE)
    xbuf.free_tensor(x)
    ybuf.enque(y)
    y = ybuf.deque(asc.float32)
    asc.data_copy(dst, y, TILE)
    ybuf.free_tensor(y)


@njit(cache=True)
def _normal(c, xbuf, ybuf, src, dst):
    """Core ``c``'s first tile, to the same place in dst."""
    _tile(xbuf, ybuf, src[c * SPAN], dst[c * SPAN])


@njit(cache=True)
def _loaded(xbuf, src):
    """A tile of xbuf loaded by MTE2 and handed to the vector unit (CopyIn: the copy, EnQue, DeQue)."""
    x = xbuf.alloc_tensor(asc.float32)
    asc.data_copy(x, src, TILE)
    xbuf.enque(x)
    return xbuf.deque(asc.float32)


@njit(cache=True)
def _load_pad(xbuf, src):
    """CopyIn 10 fp32 (40 B) with DataCopyPad and 6 elements of right padding (isPad, 0.0): 64 B of the tensor
    written, the rest of the 256 B never. Then Compute over the whole tensor, in place (the padding lanes carry
    'unwritten' to the result). Four instructions: the copy, EnQue, DeQue, Muls."""
    x = xbuf.alloc_tensor(asc.float32)
    asc.data_copy_pad(x, src, asc.DataCopyExtParams(1, 40, 0, 0), asc.DataCopyPadExtParams(True, 0, 6, 0.0))
    xbuf.enque(x)
    x = xbuf.deque(asc.float32)
    asc.muls(x, x, 2.0, TILE)
    return x


@njit(cache=True)
def _mte2_to_mte3(ctx):
    """A copy-out of what a CopyIn loaded, with no vector step between: MTE3 waits for MTE2."""
    asc.set_flag(ctx, asc.HardEvent.MTE2_MTE3, 0)
    asc.wait_flag(ctx, asc.HardEvent.MTE2_MTE3, 0)


@njit(cache=True)
def _v_to_mte3(ctx):
    """A copy-out of what the vector unit wrote outside a VECOUT queue: MTE3 waits for V."""
    asc.set_flag(ctx, asc.HardEvent.V_MTE3, 0)
    asc.wait_flag(ctx, asc.HardEvent.V_MTE3, 0)


@njit(cache=True)
def fx_clean(ctx, t, c, phase, xbuf, ybuf, zbuf, src, dst, acc):
    """Clean control: every core streams its 4 tiles through the double-buffered queue, loading tile k + 1 into
    the other buffer before tile k is computed and stored (tiles k and k + 1 live at once: not a reuse)."""
    x = xbuf.alloc_tensor(asc.float32)
    asc.data_copy(x, src[c * SPAN], TILE)
    xbuf.enque(x)
    for k in range(SPAN // TILE):
        if k + 1 < SPAN // TILE:
            nxt = xbuf.alloc_tensor(asc.float32)
            asc.data_copy(nxt, src[c * SPAN + (k + 1) * TILE], TILE)
            xbuf.enque(nxt)
        x = xbuf.deque(asc.float32)
        y = ybuf.alloc_tensor(asc.float32)
        asc.muls(y, x, 2.0, TILE)
        xbuf.free_tensor(x)
        ybuf.enque(y)
        y = ybuf.deque(asc.float32)
        asc.data_copy(dst[c * SPAN + k * TILE], y, TILE)
        ybuf.free_tensor(y)


@njit(cache=True)
def fx_gm_read_oob(ctx, t, c, phase, xbuf, ybuf, zbuf, src, dst, acc):
    """DataCopy of a tile from src element ``knobs[2]`` (past the end, or negative)."""
    if c == t.core and phase == t.phase:
        x = xbuf.alloc_tensor(asc.float32)
        asc.data_copy(x, src[t.a], TILE)
        xbuf.free_tensor(x)
    else:
        _normal(c, xbuf, ybuf, src, dst)


@njit(cache=True)
def fx_gm_write_oob(ctx, t, c, phase, xbuf, ybuf, zbuf, src, dst, acc):
    """CopyOut of a tile to dst element ``knobs[2]`` (past the end, or negative)."""
    if c == t.core and phase == t.phase:
        _tile(xbuf, ybuf, src[c * SPAN], dst[t.a])
    else:
        _normal(c, xbuf, ybuf, src, dst)


@njit(cache=True)
def fx_ub_oob(ctx, t, c, phase, xbuf, ybuf, zbuf, src, dst, acc):
    """Muls writing 256 B from 64 B into the tensor of xbuf's second buffer: the last 64 B leave the LocalTensor
    (its buffer)."""
    if c == t.core and phase == t.phase:
        xbuf.alloc_tensor(asc.float32)  # the first buffer, so that the tile below gets the second
        x = _loaded(xbuf, src[c * SPAN])
        asc.muls(x[16], x, 2.0, TILE)
    else:
        _normal(c, xbuf, ybuf, src, dst)


@njit(cache=True)
def fx_ub_oob_other_slot(ctx, t, c, phase, xbuf, ybuf, zbuf, src, dst, acc):
    """An access wholly inside the *other* buffer of xbuf's queue, through a tile's LocalTensor. ``knobs[2]``:
    0 Muls writes the 64 B before tile 1's tensor (the end of buffer 0, tile 0's); 1 Muls writes the 256 B after
    tile 0's tensor (buffer 1, never allocated); 2 the same after buffer 1 went to tile 1."""
    if c == t.core and phase == t.phase:
        x0 = xbuf.alloc_tensor(asc.float32)
        asc.data_copy(x0, src[c * SPAN], TILE)
        xbuf.enque(x0)
        if t.a == 1:
            x0 = xbuf.deque(asc.float32)
            asc.muls(x0[TILE], x0, 2.0, TILE)
            return
        x1 = xbuf.alloc_tensor(asc.float32)
        asc.data_copy(x1, src[c * SPAN + TILE], TILE)
        xbuf.enque(x1)
        x0 = xbuf.deque(asc.float32)
        x1 = xbuf.deque(asc.float32)
        if t.a == 0:
            asc.muls(x1[-16], x1, 2.0, 16)
        else:
            asc.muls(x0[TILE], x0, 2.0, TILE)
    else:
        _normal(c, xbuf, ybuf, src, dst)


@njit(cache=True)
def fx_use_after_free(ctx, t, c, phase, xbuf, ybuf, zbuf, src, dst, acc):
    """Tiles 0 and 1 through the two-buffer queue; tile 0's tensor freed; then (``knobs[2]`` 0) tile 2 loaded,
    which AllocTensor gives tile 0's buffer, and tile 0's tensor used: or (1) tile 0's tensor used at once."""
    if c == t.core and phase == t.phase:
        x0 = xbuf.alloc_tensor(asc.float32)
        asc.data_copy(x0, src[c * SPAN], TILE)
        xbuf.enque(x0)
        x1 = xbuf.alloc_tensor(asc.float32)
        asc.data_copy(x1, src[c * SPAN + TILE], TILE)
        xbuf.enque(x1)
        x0 = xbuf.deque(asc.float32)
        xbuf.deque(asc.float32)
        xbuf.free_tensor(x0)
        if t.a == 0:
            _loaded(xbuf, src[c * SPAN + 2 * TILE])
        asc.muls(x0, x0, 2.0, TILE)
    else:
        _normal(c, xbuf, ybuf, src, dst)


@njit(cache=True)
def fx_datacopy_len(ctx, t, c, phase, xbuf, ybuf, zbuf, src, dst, acc):
    """DataCopy of 7 fp32 (28 B): not whole 32 B blocks."""
    if c == t.core and phase == t.phase:
        asc.data_copy(xbuf.alloc_tensor(asc.float32), src[c * SPAN], 7)
    else:
        _normal(c, xbuf, ybuf, src, dst)


@njit(cache=True)
def fx_datacopy_ub_offset(ctx, t, c, phase, xbuf, ybuf, zbuf, src, dst, acc):
    """A UB address 16 B into a tensor of xbuf, by mover ``knobs[2]``: 0 DataCopy in, 1 DataCopyPad in,
    2 DataCopy out, 3 DataCopyPad out (32 B either way)."""
    if c == t.core and phase == t.phase:
        x = xbuf.alloc_tensor(asc.float32)
        if t.a == 0:
            asc.data_copy(x[4], src[c * SPAN], 8)
        elif t.a == 1:
            asc.data_copy_pad(x[4], src[c * SPAN], asc.DataCopyExtParams(1, 20, 0, 0),
                              asc.DataCopyPadExtParams(True, 0, 0, 0.0))
        else:
            asc.data_copy(x, src[c * SPAN], TILE)
            _mte2_to_mte3(ctx)
            if t.a == 2:
                asc.data_copy(dst[c * SPAN], x[4], 8)
            else:
                asc.data_copy_pad(dst[c * SPAN], x[4], asc.DataCopyExtParams(1, 20, 0, 0))
    else:
        _normal(c, xbuf, ybuf, src, dst)


@njit(cache=True)
def fx_vec_misaligned(ctx, t, c, phase, xbuf, ybuf, zbuf, src, dst, acc):
    """Muls on the LocalTensor 12 B into a loaded tile (a vector operand must start a 32 B block)."""
    if c == t.core and phase == t.phase:
        x = _loaded(xbuf, src[c * SPAN])
        asc.muls(x[3], x[3], 2.0, 8)
    else:
        _normal(c, xbuf, ybuf, src, dst)


@njit(cache=True)
def fx_uninit_copy_out(ctx, t, c, phase, xbuf, ybuf, zbuf, src, dst, acc):
    """10 fp32 loaded with DataCopyPad (64 B written with the padding), computed over the tensor, then 20 copied
    out: bytes 64 to 80 of the copy were never written."""
    if c == t.core and phase == t.phase:
        x = _load_pad(xbuf, src[c * SPAN])
        _v_to_mte3(ctx)
        asc.data_copy_pad(dst[c * SPAN], x, asc.DataCopyExtParams(1, 80, 0, 0))
    else:
        _normal(c, xbuf, ybuf, src, dst)


@njit(cache=True)
def _out8(ybuf, dst, v):
    """``v`` in 8 lanes of ybuf, copied out to ``dst`` (a result's CopyOut)."""
    y = ybuf.alloc_tensor(asc.float32)
    asc.duplicate(y, v, 8)
    ybuf.enque(y)
    y = ybuf.deque(asc.float32)
    asc.data_copy(dst, y, 8)
    ybuf.free_tensor(y)


@njit(cache=True)
def fx_uninit_get_value(ctx, t, c, phase, xbuf, ybuf, zbuf, src, dst, acc):
    """As uninit_copy_out, then GetValue(20): element 20 lies past the padding."""
    if c == t.core and phase == t.phase:
        x = _load_pad(xbuf, src[c * SPAN])
        _out8(ybuf, dst[c * SPAN], x.get_value(20))
    else:
        _normal(c, xbuf, ybuf, src, dst)


@njit(cache=True)
def fx_uninit_reduce(ctx, t, c, phase, xbuf, ybuf, zbuf, src, dst, acc):
    """As uninit_copy_out, then WholeReduceSum over 20 lanes (into zbuf): lanes 16 to 19 were never written."""
    if c == t.core and phase == t.phase:
        x = _load_pad(xbuf, src[c * SPAN])
        z = zbuf.get(asc.float32)
        asc.duplicate(z, 0.0, 8)
        asc.whole_reduce_sum(z, x, 20, 1, 1, 1, 8)
        _out8(ybuf, dst[c * SPAN], z.get_value(0))
    else:
        _normal(c, xbuf, ybuf, src, dst)


@njit(cache=True)
def fx_uninit_dummy(ctx, t, c, phase, xbuf, ybuf, zbuf, src, dst, acc):
    """60 fp32 loaded with DataCopyPad, isPad false and no padding: the 16 B from their end to the 32 B boundary are
    dummy bytes (the row's first element). WholeReduceSum over all 64 lanes (into zbuf, its sum to dst) uses
    them."""
    if c == t.core and phase == t.phase:
        x = xbuf.alloc_tensor(asc.float32)
        asc.data_copy_pad(x, src[c * SPAN], asc.DataCopyExtParams(1, 240, 0, 0),
                          asc.DataCopyPadExtParams(False, 0, 0, 0.0))
        xbuf.enque(x)
        x = xbuf.deque(asc.float32)
        z = zbuf.get(asc.float32)
        asc.duplicate(z, 0.0, 8)
        asc.whole_reduce_sum(z, x, TILE, 1, 1, 1, 8)
        _out8(ybuf, dst[c * SPAN], z.get_value(0))
    else:
        _normal(c, xbuf, ybuf, src, dst)


@njit(cache=True)
def fx_uninit_through_vector(ctx, t, c, phase, xbuf, ybuf, zbuf, src, dst, acc):
    """z = x + y with x a whole tile and y (xbuf's other buffer) only its first half loaded; z (zbuf) goes out to
    GM. The Add itself is fine (Valgrind-like); the report comes at the CopyOut of z, naming zbuf and the
    unwritten second half."""
    if c == t.core and phase == t.phase:
        x = xbuf.alloc_tensor(asc.float32)
        asc.data_copy(x, src[c * SPAN], TILE)
        xbuf.enque(x)
        y = xbuf.alloc_tensor(asc.float32)
        asc.data_copy(y, src[c * SPAN + TILE], TILE // 2)
        xbuf.enque(y)
        x = xbuf.deque(asc.float32)
        y = xbuf.deque(asc.float32)
        z = zbuf.get(asc.float32)
        asc.add(z, x, y, TILE)
        _v_to_mte3(ctx)
        asc.data_copy(dst[c * SPAN], z, TILE)
    else:
        _normal(c, xbuf, ybuf, src, dst)


@njit(cache=True)
def fx_clean_padding(ctx, t, c, phase, xbuf, ybuf, zbuf, src, dst, acc):
    """Clean control: computes on never-written padding lanes (Muls over the whole tensor) but uses only what
    DataCopyPad wrote, its padding included: CopyOut of the 10 elements, GetValue(12), WholeReduceSum over
    16 lanes (their sum, plus element 12, lands at dst[16:24])."""
    x = _load_pad(xbuf, src[c * SPAN])
    _v_to_mte3(ctx)
    asc.data_copy_pad(dst[c * SPAN], x, asc.DataCopyExtParams(1, 40, 0, 0))
    z = zbuf.get(asc.float32)
    asc.whole_reduce_sum(z, x, 16, 1, 1, 1, 8)
    _out8(ybuf, dst[c * SPAN + 16], z.get_value(0) + x.get_value(12))
    xbuf.free_tensor(x)


@njit(cache=True)
def fx_race_write_write(ctx, t, c, phase, xbuf, ybuf, zbuf, src, dst, acc):
    """Core ``knobs[0]`` in phase ``knobs[1]`` writes a tile to dst[SPAN - 32 : SPAN + 32]; core ``knobs[2]`` in
    phase ``knobs[3]`` writes its tile to dst[SPAN : SPAN + 64]: 128 B written by both. Every core reads its own
    src tile in every phase (reads never race), so no phase is empty."""
    x = xbuf.alloc_tensor(asc.float32)
    asc.data_copy(x, src[c * SPAN], TILE)
    _mte2_to_mte3(ctx)
    if c == t.core and phase == t.phase:
        asc.data_copy(dst[SPAN - TILE // 2], x, TILE)
    if c == t.a and phase == t.b:
        asc.data_copy(dst[SPAN], x, TILE)
    xbuf.free_tensor(x)


@njit(cache=True)
def fx_race_write_read(ctx, t, c, phase, xbuf, ybuf, zbuf, src, dst, acc):
    """Core ``knobs[0]`` in phase ``knobs[1]`` writes a tile to dst[SPAN + 32 : SPAN + 96]; core ``knobs[2]`` in
    phase ``knobs[3]`` reads dst[SPAN : SPAN + 64] into xbuf's other buffer (CopyIn of what it takes for another
    core's result): 128 B one writes and the other reads."""
    x = xbuf.alloc_tensor(asc.float32)
    asc.data_copy(x, src[c * SPAN], TILE)
    _mte2_to_mte3(ctx)
    if c == t.core and phase == t.phase:
        asc.data_copy(dst[SPAN + TILE // 2], x, TILE)
    if c == t.a and phase == t.b:
        r = xbuf.alloc_tensor(asc.float32)
        asc.data_copy(r, dst[SPAN], TILE)
        xbuf.free_tensor(r)
    xbuf.free_tensor(x)


@njit(cache=True)
def fx_atomic(ctx, t, c, phase, xbuf, ybuf, zbuf, src, dst, acc):
    """Every core adds its src tile into acc[0:64] under SetAtomicAdd, except core ``knobs[0]`` in phase
    ``knobs[1]``, which writes the tile there plainly (knobs[0] = -1: none does)."""
    x = xbuf.alloc_tensor(asc.float32)
    asc.data_copy(x, src[c * SPAN], TILE)
    _mte2_to_mte3(ctx)
    if c == t.core and phase == t.phase:
        asc.data_copy(acc, x, TILE)
    else:
        asc.set_atomic_add(ctx, asc.float32)
        asc.data_copy(acc, x, TILE)
        asc.set_atomic_none(ctx)
    xbuf.free_tensor(x)


@njit(cache=True)
def fx_many(ctx, t, c, phase, xbuf, ybuf, zbuf, src, dst, acc):
    """Every core but core 0 makes ``knobs[2]`` bad DataCopies (alternately a 28 B length and a UB address 16 B
    into a tensor of xbuf, a PipeBarrier<PIPE_MTE2> between each two: they write the same UB); core 0 is
    well-behaved. For checking that every report is collected and counted."""
    if c == 0:
        _normal(c, xbuf, ybuf, src, dst)
        return
    x = xbuf.alloc_tensor(asc.float32)
    for i in range(t.a):
        if i:
            asc.pipe_barrier(ctx, asc.PIPE_MTE2)
        if i % 2 == 0:
            asc.data_copy(x, src[c * SPAN], 7)
        else:
            asc.data_copy(x[4], src[c * SPAN], 8)


@njit(cache=True)
def fx_failed_only_phase(ctx, t, c, phase, xbuf, ybuf, zbuf, src, dst, acc):
    """Three phases. Phase 0: every core is well-behaved. Phase 1: core ``knobs[0]`` makes one GM read past the
    end of src (into zbuf: a TBuf's Get logs nothing, where a queue's FreeTensor would) and nothing else (no core
    issues an instruction that completes). Phase 2: that core makes the same bad read, then a good tile."""
    if phase == 0:
        _normal(c, xbuf, ybuf, src, dst)
    elif c == t.core:
        asc.data_copy(zbuf.get(asc.float32), src[src.get_size()], TILE)
        if phase == 2:
            _normal(c, xbuf, ybuf, src, dst)


# The cases of tile_fixtures, by TileKnobs.case: its chain of calls below follows this order.
TILE_FIXTURES = (fx_clean, fx_gm_read_oob, fx_gm_write_oob, fx_ub_oob, fx_ub_oob_other_slot, fx_use_after_free,
                 fx_datacopy_len, fx_datacopy_ub_offset, fx_vec_misaligned, fx_uninit_copy_out, fx_uninit_get_value,
                 fx_uninit_reduce, fx_uninit_through_vector, fx_clean_padding, fx_race_write_write,
                 fx_race_write_read, fx_atomic, fx_many, fx_failed_only_phase, fx_uninit_dummy)


@kernel
def tile_fixtures(ctx, t, src, dst, acc):
    """Case ``t.case`` on every core, once in each of ``t.phases`` phases, a SyncAll between each two."""
    xbuf, ybuf, zbuf = _tile_pipe(ctx)
    c, k = asc.get_block_idx(ctx), t.case
    for phase in range(t.phases):
        if phase:
            asc.sync_all(ctx)
        args = (ctx, t, c, phase, xbuf, ybuf, zbuf, src, dst, acc)
        if k == 0:
            fx_clean(*args)
        elif k == 1:
            fx_gm_read_oob(*args)
        elif k == 2:
            fx_gm_write_oob(*args)
        elif k == 3:
            fx_ub_oob(*args)
        elif k == 4:
            fx_ub_oob_other_slot(*args)
        elif k == 5:
            fx_use_after_free(*args)
        elif k == 6:
            fx_datacopy_len(*args)
        elif k == 7:
            fx_datacopy_ub_offset(*args)
        elif k == 8:
            fx_vec_misaligned(*args)
        elif k == 9:
            fx_uninit_copy_out(*args)
        elif k == 10:
            fx_uninit_get_value(*args)
        elif k == 11:
            fx_uninit_reduce(*args)
        elif k == 12:
            fx_uninit_through_vector(*args)
        elif k == 13:
            fx_clean_padding(*args)
        elif k == 14:
            fx_race_write_write(*args)
        elif k == 15:
            fx_race_write_read(*args)
        elif k == 16:
            fx_atomic(*args)
        elif k == 17:
            fx_many(*args)
        elif k == 18:
            fx_failed_only_phase(*args)
        else:
            fx_uninit_dummy(*args)


# --- the LayerNormGradBeta fixtures -----------------------------------------------------------------------------

BETA_SHAPE = (1, 8, 32)  # [B, S, H] fp32: 1 KiB per source
BETA_N = BETA_SHAPE[0] * BETA_SHAPE[1] * BETA_SHAPE[2]
BETA_H = BETA_SHAPE[2]
BETA_GM = ["res_for_gamma", "dy", "pd_gamma", "pd_beta", "res_after"]
B_RES, B_DY, B_PG, B_PB, B_FILLER, B_TMP = range(6)


@dataclass(frozen=True)
class BetaFixtureTiling:
    """The LayerNormGradBeta fixtures' tiling: the API's, isReuseSource, what follows the API (``knobs[1]``), the
    filler's bytes and the sharedTmpBuffer's (0: the framework's stack buffer)."""

    api: LayerNormGradBetaTiling
    reuse: int
    after: int
    filler: int
    tmp_bytes: int


@kernel
def fx_beta(ctx, t, g_res, g_dy, g_pg, g_pb, g_after):
    """The LayerNormGradBeta document's kernel on one core: CopyIn resForGamma and dy, the API with isReuseSource
    ``t.reuse`` and the temporaries of the tmp TBuf (``t.tmp_bytes``) or the framework's (PopStackBuffer: the
    UB left after the filler), CopyOut pd_gamma and pd_beta. ``t.after``: 1 then copies resForGamma's UB out
    again (after isReuseSource: the API's scratch), 2 reloads it from GM first (written again: fine)."""
    pipe = TPipe(ctx)
    res_for_gamma = pipe.init_buffer(TBuf(VECCALC), 4 * BETA_N)
    dy = pipe.init_buffer(TBuf(VECCALC), 4 * BETA_N)
    pd_gamma = pipe.init_buffer(TBuf(VECCALC), 4 * BETA_H)
    pd_beta = pipe.init_buffer(TBuf(VECCALC), 4 * BETA_H)
    filler = pipe.init_buffer(TBuf(VECCALC), t.filler)  # noqa: F841  (only its place in the UB: the UB left)
    r, d = res_for_gamma.get(float32), dy.get(float32)
    lpg, lpb = pd_gamma.get(float32), pd_beta.get(float32)
    asc_data_copy(r, g_res, BETA_N)
    asc_data_copy(d, g_dy, BETA_N)
    set_flag(ctx, HardEvent.MTE2_V, 0)
    wait_flag(ctx, HardEvent.MTE2_V, 0)
    if t.tmp_bytes > 0:
        tmp = pipe.init_buffer(TBuf(VECCALC), t.tmp_bytes)
        api_beta(ctx, lpg, lpb, r, d, tmp.get(uint8), t.api, t.reuse != 0)
    else:
        api_beta(ctx, lpg, lpb, r, d, None, t.api, t.reuse != 0)
    set_flag(ctx, HardEvent.V_MTE3, 0)
    wait_flag(ctx, HardEvent.V_MTE3, 0)
    asc_data_copy(g_pg, lpg, BETA_H)
    asc_data_copy(g_pb, lpb, BETA_H)
    if t.after == 2:
        set_flag(ctx, HardEvent.V_MTE2, 0)
        wait_flag(ctx, HardEvent.V_MTE2, 0)
        asc_data_copy(r, g_res, BETA_N)
        set_flag(ctx, HardEvent.MTE2_MTE3, 0)
        wait_flag(ctx, HardEvent.MTE2_MTE3, 0)
    if t.after != 0:
        asc_data_copy(g_after, r, BETA_N)


# --- the registry and the launcher ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fixture:
    """A fixture: its case of :func:`tile_fixtures` (or, for the API fixtures, its kernel), its default core
    count, knobs and phases, and (for the API fixtures) how the host breaks it: isReuseSource, the temporaries
    ("shared" or "framework"), the bytes the tiling is made for, the tmp buffer's bytes (shared) or the UB the plan
    leaves free (framework)."""

    kernel: Callable[..., None]
    block_dim: int = 2
    knobs: tuple[int, ...] = (1, 0, 0, 0)
    phases: int = 1
    clean: bool = False
    api: bool = False
    tmp: str = "shared"
    tiling_bytes: int = 0
    tmp_bytes: int = 0


_BETA_MAX, _BETA_MIN = get_layer_norm_grad_beta_max_min_tmp_size((*BETA_SHAPE, BETA_H), 4, False)

FIXTURES: dict[str, Fixture] = {
    "clean": Fixture(fx_clean, block_dim=4, knobs=(-1, -1, 0, 0), clean=True),
    "gm_read_oob": Fixture(fx_gm_read_oob, knobs=(1, 0, 2 * SPAN - TILE // 2, 0)),
    "gm_write_oob": Fixture(fx_gm_write_oob, knobs=(1, 0, 2 * SPAN - TILE // 2, 0)),
    "ub_oob": Fixture(fx_ub_oob),
    "ub_oob_other_slot": Fixture(fx_ub_oob_other_slot),
    "use_after_free": Fixture(fx_use_after_free),
    "datacopy_len": Fixture(fx_datacopy_len),
    "datacopy_ub_offset": Fixture(fx_datacopy_ub_offset),
    "vec_misaligned": Fixture(fx_vec_misaligned),
    "uninit_copy_out": Fixture(fx_uninit_copy_out),
    "uninit_get_value": Fixture(fx_uninit_get_value),
    "uninit_reduce": Fixture(fx_uninit_reduce),
    "uninit_through_vector": Fixture(fx_uninit_through_vector),
    "uninit_dummy": Fixture(fx_uninit_dummy),
    "clean_padding": Fixture(fx_clean_padding, block_dim=3, knobs=(-1, -1, 0, 0), clean=True),
    "race_write_write": Fixture(fx_race_write_write, knobs=(0, 0, 1, 0)),
    "race_write_read": Fixture(fx_race_write_read, knobs=(0, 0, 1, 0)),
    "clean_split_write_write": Fixture(fx_race_write_write, knobs=(0, 0, 1, 1), phases=2, clean=True),
    "clean_split_write_read": Fixture(fx_race_write_read, knobs=(0, 0, 1, 1), phases=2, clean=True),
    "clean_atomic": Fixture(fx_atomic, block_dim=4, knobs=(-1, -1, 0, 0), clean=True),
    "race_atomic_write": Fixture(fx_atomic, knobs=(0, 0, 0, 0)),
    "many": Fixture(fx_many, block_dim=4, knobs=(-1, -1, 3, 0)),
    "failed_only_phase": Fixture(fx_failed_only_phase, knobs=(1, -1, 0, 0), phases=3),
    "reuse_source": Fixture(fx_beta, block_dim=1, knobs=(1, 1), api=True, tiling_bytes=_BETA_MAX,
                            tmp_bytes=_BETA_MAX),
    "clean_reuse_rewritten": Fixture(fx_beta, block_dim=1, knobs=(1, 2), api=True, clean=True,
                                     tiling_bytes=_BETA_MAX, tmp_bytes=_BETA_MAX),
    "clean_no_reuse": Fixture(fx_beta, block_dim=1, knobs=(0, 1), api=True, clean=True, tiling_bytes=_BETA_MIN,
                              tmp_bytes=_BETA_MIN),
    "tmp_too_small": Fixture(fx_beta, block_dim=1, knobs=(0, 0), api=True, tiling_bytes=_BETA_MIN,
                             tmp_bytes=_BETA_MIN // 2),
    "clean_framework_tmp": Fixture(fx_beta, block_dim=1, knobs=(0, 0), api=True, clean=True, tmp="framework",
                                   tiling_bytes=_BETA_MAX, tmp_bytes=_BETA_MAX),
    "framework_tmp_too_big": Fixture(fx_beta, block_dim=1, knobs=(0, 0), api=True, tmp="framework",
                                     tiling_bytes=_BETA_MAX, tmp_bytes=_BETA_MAX // 2),
}
CLEAN = [n for n, f in FIXTURES.items() if f.clean]


@dataclass
class FixtureRun:
    """What a launch left: its GM tensors by name and its report."""

    gm: dict[str, np.ndarray]
    report: RunReport


def beta_inputs() -> tuple[np.ndarray, np.ndarray]:
    """resForGamma and dy of the API fixtures (fixed values, so reruns agree)."""
    rng = np.random.default_rng(5)
    res = rng.uniform(-1, 1, BETA_SHAPE).astype(np.float32)
    return res, rng.uniform(-1, 1, BETA_SHAPE).astype(np.float32)


def run_fixture(name: str, *, block_dim: int | None = None, knobs: Sequence[int] | None = None,
                phases: int | None = None, checks: bool = True) -> FixtureRun:
    """Launch fixture ``name`` and return its GM tensors and report.

    ``block_dim``, ``knobs`` and ``phases`` override the fixture's defaults (the tile fixtures' knobs: the core
    that misbehaves, the phase it does so in, then case-specific values). A violation raises
    :class:`tilesim.CheckError` from the launch, as from an op; ``tilesim.capture()`` still sees the report."""
    f = FIXTURES[name]
    bd = f.block_dim if block_dim is None else block_dim
    kn = tuple(int(k) for k in (f.knobs if knobs is None else knobs))
    n_phases = f.phases if phases is None else phases
    with capture() as runs:
        if f.api:
            gm = _run_beta(name, f, np.array(kn, np.int64), checks)
        else:
            gm = _run_tiles(name, f, bd, kn, n_phases, checks)
    return FixtureRun(gm, runs[-1])


def _run_tiles(name: str, f: Fixture, bd: int, kn: tuple[int, ...], n_phases: int,
               checks: bool) -> dict[str, np.ndarray]:
    src = np.arange(bd * SPAN, dtype=np.float32)
    dst = np.full(bd * SPAN, -1.0, np.float32)
    acc = np.zeros(TILE, np.float32)
    t = TileKnobs(TILE_FIXTURES.index(f.kernel), *kn, n_phases)
    with as_asked():
        launch(tile_fixtures, t, src, dst, acc, block_dim=bd, outputs=2, soc=SOC, checks=checks, op=name,
               gm_names=GM_NAMES)
    return {"src": src, "dst": dst, "acc": acc}


def _run_beta(name: str, f: Fixture, kn: np.ndarray, checks: bool) -> dict[str, np.ndarray]:
    res, dy = beta_inputs()
    used = 2 * 4 * BETA_N + 2 * 4 * BETA_H  # the sources and outputs, before the filler
    filler = SOC.ub_size - used - f.tmp_bytes if f.tmp == "framework" else 0
    t = get_layer_norm_grad_beta_nd_tiling_info((*BETA_SHAPE, BETA_H), f.tiling_bytes, 4, bool(kn[0]))
    pg, pb = np.full(BETA_H, 7.0, np.float32), np.full(BETA_H, 7.0, np.float32)
    after = np.full(BETA_N, 7.0, np.float32)
    kt = BetaFixtureTiling(t, int(kn[0]), int(kn[1]), filler, f.tmp_bytes if f.tmp == "shared" else 0)
    with as_asked():
        launch(fx_beta, kt, res.reshape(-1), dy.reshape(-1), pg, pb, after, block_dim=1, outputs=3, soc=SOC,
               checks=checks, op=name, gm_names=BETA_GM)
    return {"res_for_gamma": res, "dy": dy, "pd_gamma": pg, "pd_beta": pb, "res_after": after}
