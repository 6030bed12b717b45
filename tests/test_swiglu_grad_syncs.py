"""aclnnSwiGluGrad's syncs (``kernels.swiglu_grad``): the PipeBarriers, SetFlags and WaitFlags each core makes,
counted against ops-nn's kernel, and its UB plan against the tiling's, for every dtype, aligned and unaligned colLen,
official and hand-made tilings (single and double buffer, tails, several tiles a core), on 910B and 310P (its
bits and other counters are pinned by ``tests/test_golden.py``); checked mode with BiSheng's auto-sync on (clean)
and off (the V-V barriers ops-nn leaves to the compiler, found where they are missing).
"""

from __future__ import annotations

import dataclasses
import re

import ml_dtypes
import numpy as np
import pytest
from bitwise import assert_bitwise
from tilesim.kernels.swiglu_grad import (
    kernel_for,
    run,
    swiglu_grad,
    swiglu_grad_b16_kernel,
    swiglu_grad_b16_kernel_200,
    swiglu_grad_float_kernel,
)
from tilesim.tiling.swiglu_grad import swiglu_grad as make_tiling
from tilesim.tiling.swiglu_grad import ub_plan

import tilesim
from tilesim.core.records import COUNTER_NAMES

DT = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
SYNCS = ["pipe_barriers", "set_flags", "wait_flags"]
# PipeBarrier<PIPE_V>s in one tile's Compute: swi_glu_grad_float.hpp writes 8, swi_glu_grad_bf16.hpp 17
# (ComputeSigLocal 6, ComputeGradN 3, Compute 8).
BARRIERS = {"float32": 8, "float16": 17, "bfloat16": 17}
# The queue calls of a tile: EnQue of A, L, B (CopyIn) and of N, M (Compute) set MTE2_V / V_MTE3; FreeTensor of A,
# B, L (Compute) and M, N (CopyOut) set V_MTE2 / MTE3_V; the five DeQues wait, and so does each AllocTensor of a
# buffer a FreeTensor gave back (a queue's (k + bufferNum)-th tile on a core).
QUEUES = 5
# The RAWs between vector instructions that ops-nn leaves without a PipeBarrier<PIPE_V> (BiSheng's auto-sync inserts
# them), per tile, as (reader, buffer, writer).
UNBARRED = {
    "float32": [("Div", "tmp_queue", "Duplicate"), ("Mul", "out_queue_n", "Mul"), ("Mul", "out_queue_m", "Mul"),
                ("Muls", "out_queue_m", "Mul"), ("Add", "out_queue_m", "Muls"), ("Mul", "out_queue_m", "Add"),
                ("Mul", "out_queue_m", "Mul")],
    "b16": [("Cast", "output_temp_buffer", "Mul")],
}
RAW = re.compile(r"V \((\w+)\) reads (\w+)\[.* written by V \((\w+)\) with no PipeBarrier<PIPE_V> between them")


def inputs(rng, shape, dtype, specials=False):
    """dy [rows, colLen] and x [rows, 2·colLen]: x ~ N(0, 3), dy ~ N(0, 1); ``specials`` puts saturating and
    non-finite values into the first row of A and of dy."""
    rows, col = shape
    x = rng.standard_normal((rows, 2 * col)) * 3
    dy = rng.standard_normal((rows, col))
    if specials:
        v = np.array([100.0, -100.0, 89.0, -89.0, 1e30, -1e30, np.inf, -np.inf, np.nan, 0.0, -0.0])
        k = min(v.size, col)
        x[0, :k] = v[:k]
        dy[0, :k] = v[::-1][:k]
    with np.errstate(over="ignore"):  # ±1e30 in fp16: ±inf
        return dy.astype(DT[dtype]), x.astype(DT[dtype])


def run_of(dy, x, soc="Ascend910B1", **kw):
    """The op's output and the report of its one launch."""
    with tilesim.capture() as runs:
        out = swiglu_grad(dy, x, soc=soc, **kw)
    assert len(runs) == 1
    return out, runs[0]


def syncs_of_ops_nn(t):
    """Per core, the syncs ops-nn's kernel makes over its tiles: (PipeBarriers, SetFlags, WaitFlags)."""
    n = np.array([len(t.tiles_of_core(c)) for c in range(t.block_dim)])
    return n * BARRIERS[t.dtype], n * 2 * QUEUES, n * QUEUES + np.maximum(n - t.buffer_num, 0) * QUEUES


def assert_syncs_and_plan(rep, t):
    """The launch ran tiling t; its syncs per core are ops-nn's per tile; its UB plan is the tiling's."""
    assert rep.tiling == t and rep.block_dim == t.block_dim and rep.op == "swiglu_grad"
    for name, want in zip(SYNCS, syncs_of_ops_nn(t), strict=True):
        np.testing.assert_array_equal(rep.counter(name), want, err_msg=name)
    placed = [(b.nbytes, b.buffer_num, b.offset) for b in rep.ub_plan.buffers]
    assert placed == [(b.nbytes, b.buffer_num, b.offset) for b in ub_plan(t, rep.soc).buffers if b.nbytes]


# (dtype, (rows, colLen), tiling overrides): aligned and unaligned colLen, one tile a core and several, single and
# double buffer, tails at the bottom and the right, tiny rows.
CASES = [
    ("float32", (37, 4096), {}),
    ("float32", (37, 4096), dict(core_num=3, buffer_num=1)),
    ("float32", (37, 4096), dict(base_row_len=3, base_col_len=1000, core_num=7)),
    ("float32", (37, 100), {}),
    ("float32", (37, 100), dict(base_row_len=5, base_col_len=33, core_num=4, buffer_num=1)),
    ("float16", (37, 4913), {}),
    ("float16", (37, 4913), dict(base_row_len=5, base_col_len=777, core_num=5)),
    ("float16", (50, 1024), dict(core_num=7, buffer_num=1)),
    ("float16", (1, 17), {}),
    ("bfloat16", (64, 4096), {}),
    ("bfloat16", (9, 300), dict(base_row_len=2, base_col_len=48, core_num=3)),
    ("bfloat16", (37, 15), dict(buffer_num=1, core_num=2)),
]


@pytest.mark.parametrize("dtype,shape,overrides", CASES)
def test_syncs_and_plan_as_ops_nn(rng, dtype, shape, overrides):
    dy, x = inputs(rng, shape, dtype, specials=True)
    t = make_tiling(dy, x, **overrides)
    if overrides:
        assert t != make_tiling(dy, x), overrides
    assert t.is_32b_aligned == int(shape[1] * x.itemsize % 32 == 0)
    assert_syncs_and_plan(run_of(dy, x, tiling=t if overrides else None)[1], t)


@pytest.mark.parametrize("dtype,shape,overrides", [
    ("float32", (50, 1024), {}), ("float32", (50, 1024), dict(core_num=3, buffer_num=1)),
    ("float16", (50, 1024), {}), ("float16", (20, 32), dict(core_num=2, buffer_num=1)),
    ("float16", (300, 4096), dict(base_row_len=5, base_col_len=1024, core_num=5)),
])
def test_syncs_and_plan_on_310p(rng, dtype, shape, overrides):
    """310P: colLen a multiple of 64 B; the b16 kernel's 200 build (CAST_NONE) runs, and gives the 910B bits."""
    dy, x = inputs(rng, shape, dtype, specials=True)
    spec = tilesim.get_soc("Ascend310P3")
    t = make_tiling(dy, x, soc=spec, **overrides)
    out, rep = run_of(dy, x, soc=spec, tiling=t if overrides else None)
    assert rep.soc == "Ascend310P3" and rep.ub_plan.capacity == 262144
    assert_syncs_and_plan(rep, t)
    want = swiglu_grad_float_kernel if dtype == "float32" else swiglu_grad_b16_kernel_200
    assert kernel_for(t, spec) is want
    a2 = swiglu_grad_float_kernel if dtype == "float32" else swiglu_grad_b16_kernel
    assert kernel_for(make_tiling(dy, x), tilesim.get_soc("Ascend910B1")) is a2
    assert_bitwise(out, swiglu_grad(dy, x), "310P vs 910B")


def test_the_sync_count_can_fail(rng):
    """Another tiling, or one PipeBarrier fewer on a core: the check sees either."""
    dy, x = inputs(rng, (37, 4096), "float32")
    official = make_tiling(dy, x)
    t = make_tiling(dy, x, core_num=3, buffer_num=1)
    rep = run_of(dy, x, tiling=t)[1]
    assert_syncs_and_plan(rep, t)
    with pytest.raises(AssertionError):
        assert_syncs_and_plan(rep, official)
    counters = rep.counters.copy()
    counters[1, COUNTER_NAMES.index("pipe_barriers")] -= 1
    with pytest.raises(AssertionError):
        assert_syncs_and_plan(dataclasses.replace(rep, counters=counters), t)


# --------------------------------------------------------------------------------------------------------------
# checked mode


CHECKED = [
    ("float32", (37, 100), dict(base_row_len=10, base_col_len=100, core_num=2), "Ascend910B1"),
    ("float32", (37, 4096), dict(core_num=3, buffer_num=1), "Ascend910B1"),
    ("bfloat16", (37, 100), dict(base_row_len=10, base_col_len=96, core_num=2), "Ascend910B1"),
    ("float16", (50, 1024), dict(core_num=4, buffer_num=1), "Ascend910B1"),
    ("float16", (20, 32), dict(core_num=2, buffer_num=1), "Ascend310P3"),
]


@pytest.mark.parametrize("dtype,shape,overrides,soc", CHECKED)
def test_checked_mode_with_auto_sync_on_and_off(rng, dtype, shape, overrides, soc):
    """Auto-sync on (ops-nn's build): clean, the fast bits. Off: each tile's RAWs between vector instructions that
    ops-nn writes no PipeBarrier<PIPE_V> for, and nothing else; the output is not written."""
    dy, x = inputs(rng, shape, dtype)
    spec = tilesim.get_soc(soc)
    t = make_tiling(dy, x, soc=spec, **overrides)
    fast = swiglu_grad(dy, x, soc=spec, tiling=t)
    y = np.full(x.shape, 7, x.dtype)
    rep = run(t, spec, dy, x, y, None, True, auto_sync=True)
    assert rep.checks
    assert_bitwise(y, fast, "checked, auto-sync on")
    y = np.full(x.shape, 7, x.dtype)
    with pytest.raises(tilesim.CheckError) as e:
        run(t, spec, dy, x, y, None, True, auto_sync=False)
    assert (y == 7).all()
    per_tile = UNBARRED["float32" if dtype == "float32" else "b16"]
    assert e.value.total == len(per_tile) * t.total_tile_num
    for c in range(t.block_dim):
        found = [v for v in e.value.violations if v.core == c]
        assert all(v.kind == "pipe hazard (RAW)" for v in found), e.value.reports
        pairs = [RAW.search(v.detail).groups() for v in found]
        assert pairs == (per_tile * len(t.tiles_of_core(c)))[:len(found)], e.value.reports
