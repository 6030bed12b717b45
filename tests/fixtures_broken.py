"""Fixture kernels for checked mode: each is broken in exactly one way the sanitizer must name, or is a clean
control that must run without a report.

Why fixtures rather than the shipped ops: an op's own tiling is validated before it runs, so no caller can make
it misbehave on purpose. These kernels misbehave by construction, on one chosen core (``knobs[0]``) in one chosen
SyncAll phase (``knobs[1]``); every other core does the ordinary CopyIn, Compute, CopyOut of one tile, so a report
that names the wrong core or phase shows. They are tiny (1 to 4 cores, a tile of 256 B) so the whole set runs in
a few seconds once compiled.

The UB plan puts a 96 B buffer first, so that a buffer's offset in the UB is never its offset in the report
(reports count from the buffer's start); ``xbuf`` is a double-buffered queue (two 256 B slots), ``ybuf`` and
``zbuf`` single 256 B buffers. GM: ``src`` (fp32, SPAN elements per core, values 0, 1, 2, ...), ``dst`` (fp32,
the same size, -1 before the launch) and ``acc``, an atomic-add target whose per-core shadow rows all carry one
tag and the same offsets, as the NPU's atomic adds into one tensor would.

The LayerNormGradBeta fixtures (``reuse_source``, ``tmp_too_small``, ``framework_tmp_too_big`` and their clean
controls) run the API on one core over a [1, 8, 32] fp32 input; they are broken from the host side (a short tmp
buffer, a tiling made for more temporaries than the plan leaves free) or by reading a source the API reused.

:func:`run_fixture` launches one by name (the tile fixtures with ``prepare`` / ``run_cores`` once per phase /
``finish``; the LayerNormGradBeta ones, on the programming model, with :func:`tilesim.launcher.launch`), so a
violation raises :class:`tilesim.CheckError` exactly as it would from an op.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numba import njit

from tilesim.datamove import atomic_add_pad_out, data_copy, data_copy_out, data_copy_pad, data_copy_pad_out
from tilesim.device import at, gm_tensor, make_core, slot
from tilesim.launch import (
    AtomicTarget,
    RunReport,
    capture,
    checks_enabled,
    finish,
    force_checks,
    host_threads,
    prepare,
    run_cores,
)
from tilesim.launcher import kernel, launch
from tilesim.machine import VECCALC, HardEvent, TBuf, TPipe, float32, set_flag, uint8, wait_flag
from tilesim.machine import data_copy as asc_data_copy
from tilesim.normalization import layer_norm_grad_beta as api_beta
from tilesim.reduce import whole_reduce_sum
from tilesim.soc import get_soc
from tilesim.ub import UbPlan
from tilesim.vector import add, duplicate, get_value, muls
from tiling.layer_norm_grad_api import (
    LayerNormGradBetaTiling,
    get_layer_norm_grad_beta_max_min_tmp_size,
    get_layer_norm_grad_beta_nd_tiling_info,
)

SOC = get_soc("Ascend910B1")
TILE = 64  # fp32 elements of one tile: 256 B, a slot of xbuf
SPAN = 4 * TILE  # fp32 elements of src and dst per core
PAD0, XBUF, YBUF, ZBUF = range(4)  # UB buffer ids of the tile fixtures
PAD0_BYTES = 96
GM_NAMES = ["src", "dst", "acc"]
G_SRC, G_DST, G_ACC = range(3)

# --- the tile fixtures ------------------------------------------------------------------------------------------
# Every kernel has one signature: (first, last, phase, block_dim, arena, plan, cnt, err, checks, knobs, src, dst,
# acc), src and dst flat bytes, acc the [block_dim, 256] bytes of the atomic target's shadow rows.


@njit(cache=True, inline="always")
def _enter(c, phase, block_dim, arena, plan, cnt, err, checks, knobs, src, dst):
    """Core ``c``'s context, its GM tensors, and whether it misbehaves now (the chosen core, the chosen phase)."""
    core = make_core(c, block_dim, arena, plan, cnt, err, checks)
    return core, gm_tensor(G_SRC, src, 4), gm_tensor(G_DST, dst, 4), c == knobs[0] and phase == knobs[1]


@njit(cache=True)
def _normal(core, c, gs, gd):
    """What a well-behaved core does: CopyIn its first tile, Compute (x 2), CopyOut to the same place in dst."""
    x = slot(core, XBUF, 0)
    data_copy(core, x, gs, c * SPAN, TILE)
    muls(core, x, x, 2.0, TILE)
    data_copy_out(core, gd, c * SPAN, x, TILE)


@njit(cache=True)
def _load_pad(core, c, gs):
    """CopyIn 10 fp32 (40 B) with DataCopyPad: the zero fill makes 64 B of xbuf written, the rest of the 256 B
    slot never is. Then Compute over the whole slot (the padding lanes carry 'unwritten' to the result)."""
    x = slot(core, XBUF, 0)
    data_copy_pad(core, x, gs, c * SPAN, 1, 10, 10, 0.0)
    muls(core, x, x, 2.0, TILE)
    return x


@njit(cache=True, nogil=True)
def fx_clean(first, last, phase, block_dim, arena, plan, cnt, err, checks, knobs, src, dst, acc):
    """Clean control: every core streams its 4 tiles through the double-buffered queue, prefetching tile k + 1
    into the other slot while tile k is computed and stored (slot k and k + 1 live at once: not a reuse)."""
    for c in range(first, last):
        core, gs, gd, _ = _enter(c, phase, block_dim, arena, plan, cnt, err, checks, knobs, src, dst)
        x = slot(core, XBUF, 0)
        data_copy(core, x, gs, c * SPAN, TILE)
        for k in range(SPAN // TILE):
            nxt = x
            if k + 1 < SPAN // TILE:
                nxt = slot(core, XBUF, k + 1)
                data_copy(core, nxt, gs, c * SPAN + (k + 1) * TILE, TILE)
            muls(core, x, x, 2.0, TILE)
            data_copy_out(core, gd, c * SPAN + k * TILE, x, TILE)
            x = nxt


@njit(cache=True, nogil=True)
def fx_gm_read_oob(first, last, phase, block_dim, arena, plan, cnt, err, checks, knobs, src, dst, acc):
    """DataCopy of a tile from src element ``knobs[2]`` (past the end, or negative)."""
    for c in range(first, last):
        core, gs, gd, bad = _enter(c, phase, block_dim, arena, plan, cnt, err, checks, knobs, src, dst)
        if bad:
            data_copy(core, slot(core, XBUF, 0), gs, knobs[2], TILE)
        else:
            _normal(core, c, gs, gd)


@njit(cache=True, nogil=True)
def fx_gm_write_oob(first, last, phase, block_dim, arena, plan, cnt, err, checks, knobs, src, dst, acc):
    """CopyOut of a tile to dst element ``knobs[2]`` (past the end, or negative)."""
    for c in range(first, last):
        core, gs, gd, bad = _enter(c, phase, block_dim, arena, plan, cnt, err, checks, knobs, src, dst)
        if bad:
            x = slot(core, XBUF, 0)
            data_copy(core, x, gs, c * SPAN, TILE)
            data_copy_out(core, gd, knobs[2], x, TILE)
        else:
            _normal(core, c, gs, gd)


@njit(cache=True, nogil=True)
def fx_ub_oob(first, last, phase, block_dim, arena, plan, cnt, err, checks, knobs, src, dst, acc):
    """Muls writing 256 B from 64 B into xbuf's second slot: the last 64 B leave the LocalTensor (the slot)."""
    for c in range(first, last):
        core, gs, gd, bad = _enter(c, phase, block_dim, arena, plan, cnt, err, checks, knobs, src, dst)
        if bad:
            x = slot(core, XBUF, 1)
            data_copy(core, x, gs, c * SPAN, TILE)
            muls(core, at(x, 64), x, 2.0, TILE)
        else:
            _normal(core, c, gs, gd)


@njit(cache=True, nogil=True)
def fx_ub_oob_other_slot(first, last, phase, block_dim, arena, plan, cnt, err, checks, knobs, src, dst, acc):
    """An access wholly inside the *other* slot of xbuf's queue, through a tile's LocalTensor. ``knobs[2]``:
    0 Muls writes the 64 B before tile 1's tensor (the end of slot 0, tile 0's); 1 Muls writes the 256 B after
    tile 0's tensor (slot 1, never allocated); 2 the same after slot 1 went to tile 1."""
    for c in range(first, last):
        core, gs, gd, bad = _enter(c, phase, block_dim, arena, plan, cnt, err, checks, knobs, src, dst)
        if bad:
            x0 = slot(core, XBUF, 0)
            data_copy(core, x0, gs, c * SPAN, TILE)
            if knobs[2] == 1:
                muls(core, at(x0, 4 * TILE), x0, 2.0, TILE)
                continue
            x1 = slot(core, XBUF, 1)
            data_copy(core, x1, gs, c * SPAN + TILE, TILE)
            if knobs[2] == 0:
                muls(core, at(x1, -64), x1, 2.0, 16)
            else:
                muls(core, at(x0, 4 * TILE), x0, 2.0, TILE)
        else:
            _normal(core, c, gs, gd)


@njit(cache=True, nogil=True)
def fx_use_after_free(first, last, phase, block_dim, arena, plan, cnt, err, checks, knobs, src, dst, acc):
    """Tiles 0, 1 and 2 through the two-slot queue, then tile 0's tensor is used: slot(xbuf, 0 + buffer_num)
    handed its physical slot to tile 2."""
    for c in range(first, last):
        core, gs, gd, bad = _enter(c, phase, block_dim, arena, plan, cnt, err, checks, knobs, src, dst)
        if bad:
            x0 = slot(core, XBUF, 0)
            data_copy(core, x0, gs, c * SPAN, TILE)
            x1 = slot(core, XBUF, 1)
            data_copy(core, x1, gs, c * SPAN + TILE, TILE)
            x2 = slot(core, XBUF, 2)
            data_copy(core, x2, gs, c * SPAN + 2 * TILE, TILE)
            muls(core, x0, x0, 2.0, TILE)
        else:
            _normal(core, c, gs, gd)


@njit(cache=True, nogil=True)
def fx_datacopy_len(first, last, phase, block_dim, arena, plan, cnt, err, checks, knobs, src, dst, acc):
    """DataCopy of 7 fp32 (28 B): not whole 32 B blocks."""
    for c in range(first, last):
        core, gs, gd, bad = _enter(c, phase, block_dim, arena, plan, cnt, err, checks, knobs, src, dst)
        if bad:
            data_copy(core, slot(core, XBUF, 0), gs, c * SPAN, 7)
        else:
            _normal(core, c, gs, gd)


@njit(cache=True, nogil=True)
def fx_datacopy_ub_offset(first, last, phase, block_dim, arena, plan, cnt, err, checks, knobs, src, dst, acc):
    """A UB address 16 B into xbuf, by mover ``knobs[2]``: 0 DataCopy in, 1 DataCopyPad in, 2 DataCopy out,
    3 DataCopyPad out (32 B either way)."""
    for c in range(first, last):
        core, gs, gd, bad = _enter(c, phase, block_dim, arena, plan, cnt, err, checks, knobs, src, dst)
        if bad:
            x = slot(core, XBUF, 0)
            how = knobs[2]
            if how == 0:
                data_copy(core, at(x, 16), gs, c * SPAN, 8)
            elif how == 1:
                data_copy_pad(core, at(x, 16), gs, c * SPAN, 1, 5, 5, 0.0)
            else:
                data_copy(core, x, gs, c * SPAN, TILE)
                if how == 2:
                    data_copy_out(core, gd, c * SPAN, at(x, 16), 8)
                else:
                    data_copy_pad_out(core, gd, c * SPAN, at(x, 16), 1, 5, 5)
        else:
            _normal(core, c, gs, gd)


@njit(cache=True, nogil=True)
def fx_vec_misaligned(first, last, phase, block_dim, arena, plan, cnt, err, checks, knobs, src, dst, acc):
    """Muls on the LocalTensor 12 B into a loaded tile (a vector operand must start a 32 B block)."""
    for c in range(first, last):
        core, gs, gd, bad = _enter(c, phase, block_dim, arena, plan, cnt, err, checks, knobs, src, dst)
        if bad:
            x = slot(core, XBUF, 0)
            data_copy(core, x, gs, c * SPAN, TILE)
            muls(core, at(x, 12), at(x, 12), 2.0, 8)
        else:
            _normal(core, c, gs, gd)


@njit(cache=True, nogil=True)
def fx_uninit_copy_out(first, last, phase, block_dim, arena, plan, cnt, err, checks, knobs, src, dst, acc):
    """10 fp32 loaded with DataCopyPad (64 B written with the zero fill), computed over the slot, then 20 copied
    out: bytes 64 to 80 of the copy were never written."""
    for c in range(first, last):
        core, gs, gd, bad = _enter(c, phase, block_dim, arena, plan, cnt, err, checks, knobs, src, dst)
        if bad:
            x = _load_pad(core, c, gs)
            data_copy_pad_out(core, gd, c * SPAN, x, 1, 20, 20)
        else:
            _normal(core, c, gs, gd)


@njit(cache=True, nogil=True)
def fx_uninit_get_value(first, last, phase, block_dim, arena, plan, cnt, err, checks, knobs, src, dst, acc):
    """As uninit_copy_out, then GetValue(20): element 20 lies past the zero fill."""
    for c in range(first, last):
        core, gs, gd, bad = _enter(c, phase, block_dim, arena, plan, cnt, err, checks, knobs, src, dst)
        if bad:
            x = _load_pad(core, c, gs)
            v = get_value(core, x, 20)
            y = slot(core, YBUF, 0)
            duplicate(core, y, v, 8)
            data_copy_out(core, gd, c * SPAN, y, 8)
        else:
            _normal(core, c, gs, gd)


@njit(cache=True, nogil=True)
def fx_uninit_reduce(first, last, phase, block_dim, arena, plan, cnt, err, checks, knobs, src, dst, acc):
    """As uninit_copy_out, then WholeReduceSum over 20 lanes: lanes 16 to 19 were never written."""
    for c in range(first, last):
        core, gs, gd, bad = _enter(c, phase, block_dim, arena, plan, cnt, err, checks, knobs, src, dst)
        if bad:
            x = _load_pad(core, c, gs)
            s = whole_reduce_sum(core, x, 20)
            y = slot(core, YBUF, 0)
            duplicate(core, y, s, 8)
            data_copy_out(core, gd, c * SPAN, y, 8)
        else:
            _normal(core, c, gs, gd)


@njit(cache=True, nogil=True)
def fx_uninit_through_vector(first, last, phase, block_dim, arena, plan, cnt, err, checks, knobs, src, dst, acc):
    """z = x + y with only y's first half loaded; z goes out to GM. The add itself is fine (Valgrind-like); the
    report comes at the CopyOut of z, naming zbuf and the unwritten second half."""
    for c in range(first, last):
        core, gs, gd, bad = _enter(c, phase, block_dim, arena, plan, cnt, err, checks, knobs, src, dst)
        if bad:
            x, y, z = slot(core, XBUF, 0), slot(core, YBUF, 0), slot(core, ZBUF, 0)
            data_copy(core, x, gs, c * SPAN, TILE)
            data_copy(core, y, gs, c * SPAN + TILE, TILE // 2)
            add(core, z, x, y, TILE)
            data_copy_out(core, gd, c * SPAN, z, TILE)
        else:
            _normal(core, c, gs, gd)


@njit(cache=True, nogil=True)
def fx_clean_padding(first, last, phase, block_dim, arena, plan, cnt, err, checks, knobs, src, dst, acc):
    """Clean control: computes on never-written padding lanes (Muls over the whole slot) but uses only what
    DataCopyPad wrote, its zero fill included: CopyOut of the 10 elements, GetValue(12), WholeReduceSum over
    16 lanes (their sum, plus element 12, lands at dst[16:24])."""
    for c in range(first, last):
        core, gs, gd, _ = _enter(c, phase, block_dim, arena, plan, cnt, err, checks, knobs, src, dst)
        x = _load_pad(core, c, gs)
        data_copy_pad_out(core, gd, c * SPAN, x, 1, 10, 10)
        s = whole_reduce_sum(core, x, 16) + get_value(core, x, 12)
        y = slot(core, YBUF, 0)
        duplicate(core, y, s, 8)
        data_copy_out(core, gd, c * SPAN + 16, y, 8)


@njit(cache=True, nogil=True)
def fx_race_write_write(first, last, phase, block_dim, arena, plan, cnt, err, checks, knobs, src, dst, acc):
    """Core ``knobs[0]`` in phase ``knobs[1]`` writes a tile to dst[SPAN - 32 : SPAN + 32]; core ``knobs[2]`` in
    phase ``knobs[3]`` writes its tile to dst[SPAN : SPAN + 64]: 128 B written by both. Every core reads its own
    src tile in every phase (reads never race), so no phase is empty."""
    for c in range(first, last):
        core, gs, gd, _ = _enter(c, phase, block_dim, arena, plan, cnt, err, checks, knobs, src, dst)
        x = slot(core, XBUF, 0)
        data_copy(core, x, gs, c * SPAN, TILE)
        if c == knobs[0] and phase == knobs[1]:
            data_copy_out(core, gd, SPAN - TILE // 2, x, TILE)
        if c == knobs[2] and phase == knobs[3]:
            data_copy_out(core, gd, SPAN, x, TILE)


@njit(cache=True, nogil=True)
def fx_race_write_read(first, last, phase, block_dim, arena, plan, cnt, err, checks, knobs, src, dst, acc):
    """Core ``knobs[0]`` in phase ``knobs[1]`` writes a tile to dst[SPAN + 32 : SPAN + 96]; core ``knobs[2]`` in
    phase ``knobs[3]`` reads dst[SPAN : SPAN + 64] (CopyIn of what it takes for another core's result): 128 B
    one writes and the other reads."""
    for c in range(first, last):
        core, gs, gd, _ = _enter(c, phase, block_dim, arena, plan, cnt, err, checks, knobs, src, dst)
        x = slot(core, XBUF, 0)
        data_copy(core, x, gs, c * SPAN, TILE)
        if c == knobs[0] and phase == knobs[1]:
            data_copy_out(core, gd, SPAN + TILE // 2, x, TILE)
        if c == knobs[2] and phase == knobs[3]:
            data_copy(core, slot(core, YBUF, 0), gd, SPAN, TILE)


@njit(cache=True, nogil=True)
def fx_atomic(first, last, phase, block_dim, arena, plan, cnt, err, checks, knobs, src, dst, acc):
    """Every core atomic-adds its src tile into acc[0:64] (its own shadow row, the same tag and offsets), except
    core ``knobs[0]`` in phase ``knobs[1]``, which writes the tile there plainly (knobs[0] = -1: none does)."""
    for c in range(first, last):
        core, gs, gd, bad = _enter(c, phase, block_dim, arena, plan, cnt, err, checks, knobs, src, dst)
        ga = gm_tensor(G_ACC, acc[c], 4)
        x = slot(core, XBUF, 0)
        data_copy(core, x, gs, c * SPAN, TILE)
        if bad:
            data_copy_out(core, ga, 0, x, TILE)
        else:
            atomic_add_pad_out(core, ga, 0, x, TILE)


@njit(cache=True, nogil=True)
def fx_many(first, last, phase, block_dim, arena, plan, cnt, err, checks, knobs, src, dst, acc):
    """Every core but core 0 makes ``knobs[2]`` bad DataCopies (alternately a 28 B length and a UB address 16 B
    into xbuf); core 0 is well-behaved. For checking that every report is collected and counted."""
    for c in range(first, last):
        core, gs, gd, _ = _enter(c, phase, block_dim, arena, plan, cnt, err, checks, knobs, src, dst)
        if c == 0:
            _normal(core, c, gs, gd)
            continue
        x = slot(core, XBUF, 0)
        for i in range(knobs[2]):
            if i % 2 == 0:
                data_copy(core, x, gs, c * SPAN, 7)
            else:
                data_copy(core, at(x, 16), gs, c * SPAN, 8)


@njit(cache=True, nogil=True)
def fx_failed_only_phase(first, last, phase, block_dim, arena, plan, cnt, err, checks, knobs, src, dst, acc):
    """Three phases. Phase 0: every core is well-behaved. Phase 1: core ``knobs[0]`` makes one GM read past the
    end of src and nothing else (no core issues an instruction that completes). Phase 2: that core makes the
    same bad read, then a good tile."""
    for c in range(first, last):
        core, gs, gd, _ = _enter(c, phase, block_dim, arena, plan, cnt, err, checks, knobs, src, dst)
        if phase == 0:
            _normal(core, c, gs, gd)
        elif c == knobs[0]:
            data_copy(core, slot(core, XBUF, 0), gs, src.size // 4, TILE)
            if phase == 2:
                _normal(core, c, gs, gd)


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
    """A fixture: its kernel, its default core count, knobs and phases, and (for the API fixtures) how the host
    breaks it: isReuseSource, the temporaries ("shared" or "framework"), the bytes the tiling is made for, the
    tmp buffer's bytes (shared) or the UB the plan leaves free (framework)."""

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
    """What a launch left: its GM tensors by name (``acc`` merged from the atomic shadow rows) and its report."""

    gm: dict[str, np.ndarray]
    report: RunReport


def tile_plan() -> UbPlan:
    """The tile fixtures' UB: pad0 96 B, xbuf 2 x 256 B, ybuf 256 B, zbuf 256 B (offsets 0, 96, 608, 864)."""
    plan = UbPlan(SOC.ub_size)
    plan.add("pad0", PAD0_BYTES)
    plan.add("xbuf", 4 * TILE, 2)
    plan.add("ybuf", 4 * TILE)
    plan.add("zbuf", 4 * TILE)
    return plan.check()


def beta_inputs() -> tuple[np.ndarray, np.ndarray]:
    """resForGamma and dy of the API fixtures (fixed values, so reruns agree)."""
    rng = np.random.default_rng(5)
    res = rng.uniform(-1, 1, BETA_SHAPE).astype(np.float32)
    return res, rng.uniform(-1, 1, BETA_SHAPE).astype(np.float32)


def run_fixture(name: str, *, block_dim: int | None = None, knobs: Sequence[int] | None = None,
                phases: int | None = None, checks: bool = True) -> FixtureRun:
    """Launch fixture ``name`` (prepare, one run_cores per phase, finish) and return its GM tensors and report.

    ``block_dim``, ``knobs`` and ``phases`` override the fixture's defaults (the tile fixtures' knobs: the core
    that misbehaves, the phase it does so in, then fixture-specific values). A violation raises
    :class:`tilesim.CheckError` from ``finish``, as from an op; ``tilesim.capture()`` still sees the report."""
    f = FIXTURES[name]
    bd = f.block_dim if block_dim is None else block_dim
    kn = np.array(f.knobs if knobs is None else knobs, np.int64)
    n_phases = f.phases if phases is None else phases
    with capture() as runs:
        if f.api:
            gm = _run_beta(name, f, kn, checks)
        else:
            gm = _run_tiles(name, f, bd, kn, n_phases, checks)
    return FixtureRun(gm, runs[-1])


def _run_tiles(name: str, f: Fixture, bd: int, kn: np.ndarray, n_phases: int, checks: bool) -> dict[str, np.ndarray]:
    src = np.arange(bd * SPAN, dtype=np.float32)
    dst = np.full(bd * SPAN, -1.0, np.float32)
    target = AtomicTarget(bd, TILE)
    acc = np.zeros(TILE, np.float32)
    launch = prepare(name, SOC, None, tile_plan(), bd, checks, GM_NAMES)
    with host_threads(src, dst):
        for p in range(n_phases):
            run_cores(f.kernel, bd, p, bd, launch.arena, launch.plan_array, launch.counters, launch.err, checks, kn,
                      src.view(np.uint8), dst.view(np.uint8), target.shadow.view(np.uint8))
    target.merge_into(acc)
    finish(launch)
    return {"src": src, "dst": dst, "acc": acc}


def launch_as_asked(*args: object, checks: bool, **kw: object) -> RunReport:
    """:func:`tilesim.launcher.launch` in the mode the test asks for: a fast run that shows what the NPU would do
    with a broken kernel (``checks=False``) stays fast under ``pytest --tilesim-checks``, which forces checked mode
    on every other launch."""
    forced = checks_enabled(False)
    force_checks(forced and checks)
    try:
        return launch(*args, checks=checks, **kw)
    finally:
        force_checks(forced)


def _run_beta(name: str, f: Fixture, kn: np.ndarray, checks: bool) -> dict[str, np.ndarray]:
    res, dy = beta_inputs()
    used = 2 * 4 * BETA_N + 2 * 4 * BETA_H  # the sources and outputs, before the filler
    filler = SOC.ub_size - used - f.tmp_bytes if f.tmp == "framework" else 0
    t = get_layer_norm_grad_beta_nd_tiling_info((*BETA_SHAPE, BETA_H), f.tiling_bytes, 4, bool(kn[0]))
    pg, pb = np.full(BETA_H, 7.0, np.float32), np.full(BETA_H, 7.0, np.float32)
    after = np.full(BETA_N, 7.0, np.float32)
    kt = BetaFixtureTiling(t, int(kn[0]), int(kn[1]), filler, f.tmp_bytes if f.tmp == "shared" else 0)
    launch_as_asked(fx_beta, kt, res.reshape(-1), dy.reshape(-1), pg, pb, after, block_dim=1, outputs=3, soc=SOC,
                    checks=checks, op=name, gm_names=BETA_GM)
    return {"res_for_gamma": res, "dy": dy, "pd_gamma": pg, "pd_beta": pb, "res_after": after}
