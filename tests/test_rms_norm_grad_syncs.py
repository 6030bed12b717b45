"""aclnnRmsNormGrad's syncs (``kernels.rms_norm_grad``): the PipeBarriers, SetFlags and WaitFlags each core makes,
counted against ops-nn's kernels, and the UB plan against the tiling's, for split-N (a row at a time and small D),
split-D, atomic and deterministic dgamma, fp32 and b16 dy and gamma (the bits and the other counters are pinned by
``tests/test_golden.py``); checked mode with BiSheng's auto-sync on and off (ops-nn writes every sync: clean both
ways); the atomic adds of split-D's dgamma in core order, batch by batch, as the NPU makes them.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from bitwise import assert_bitwise
from conftest import rms_inputs
from tilesim.kernels.rms_norm_grad import KERNELS, rms_norm_grad, run
from tilesim.tiling.rms_norm_grad import SPLIT_N, ub_plan
from tilesim.tiling.rms_norm_grad import rms_norm_grad as make_tiling

import tilesim
from tilesim.core.records import COUNTER_NAMES

SYNCS = ["pipe_barriers", "set_flags", "wait_flags"]


def folds(count):
    """reduce_common.h ReduceSumHalfInterval: its PipeBarrier<PIPE_V>s, one per Add fold (the tail past the largest
    power of two, then each halving down to 64 lanes); WholeReduceSum's V_S sync is a flag pair, not a barrier."""
    if count <= 64:
        return 0
    body = 1 << (count.bit_length() - 1)
    return int(count > body) + (body // 64).bit_length() - 1


def alloc_waits(allocs, buffers):
    """AllocTensor waits for the FreeTensor of the buffer it gets once a queue's buffers come round again."""
    return max(allocs - buffers, 0)


def final_tasks(t, core):
    """FinalProcessDeterministic: the 64-column tasks core ``core`` takes (round-robin)."""
    return len(range(core, -(-t.col_val_align // 64), t.block_dim)) if t.fixed_output else 0


def split_n_syncs(t, core, b16, gb16):
    """RmsNormGradSplitNHighPrecision on one core: (PipeBarriers, SetFlags, WaitFlags)."""
    first = core < t.block_dim - 1 or t.core_calc_tail == 0
    loop, num, tail = ((t.ub_calc_loop, t.ub_calc_num, t.ub_calc_tail) if first else
                       (t.ub_calc_tail_loop, t.ub_calc_tail_num, t.ub_calc_tail_tail))
    tiles = [num] * (loop - 1) + [tail or num]
    rows = sum(tiles)
    # Process: Cast2FloatIf of gamma (b16), Duplicate of dgamma; gamma and dgamma queues: EnQue, DeQue, FreeTensor.
    bars, sets, waits = gb16 + 1, 2 + 2, 1 + 1
    if t.small_d:  # ComputeSmallD per UB tile of n rows
        for n in tiles:
            # BroadCast rstd, Mul, Mul, the n Adds into dgamma, BroadCast gamma, Mul, Mul, ReduceSumMultiN (Duplicate,
            # per 255 rows the 64-lane Adds and the barrier before WholeReduceSum), the barrier after it, Muls,
            # BroadCast, Mul, Sub, BroadCast, Mul: 13 + n; the three Casts of b16 dy.
            bars += 13 + n + 1 + -(-n // 255) * (t.col // 64 + 1) + 3 * b16
        copies = len(tiles)
    else:  # Compute per row: Muls, Mul, Mul, Mul, [ReduceSumHalfInterval's folds], Muls, Sub, Muls; 3 Casts (b16)
        bars += rows * (7 + folds(t.col) + 3 * b16)
        copies = rows
        # V_S and S_V around GetValue(rstd), ReduceSumHalfInterval's V_S, the S_V before Muls by the mean
        sets += 4 * rows
        waits += 4 * rows
    # rstd, x, dy and dx per CopyIn / Compute / CopyOut: EnQue and FreeTensor set, DeQue and AllocTensor wait
    sets += 8 * copies
    waits += 4 * copies + 4 * alloc_waits(copies, t.buffer_num)
    if not t.fixed_output and core == 0:  # InitOutput of dgamma: its V_MTE3 pair
        sets, waits = sets + 1, waits + 1
    if t.fixed_output:  # doDeter: AllocTensor of an x and a dy buffer, FreeTensor of both; a task 4 pairs, 2 barriers
        waits += 2 * (copies + 1 > t.buffer_num)
        sets += 2 + 4 * final_tasks(t, core)
        waits += 4 * final_tasks(t, core)
        bars += 2 * final_tasks(t, core)
    return bars, sets, waits


def split_d_syncs(t, core, b16, gb16):
    """RmsNormGradSplitDHighPrecision (ProcessMain) on one core: (PipeBarriers, SetFlags, WaitFlags)."""
    rows = t.rows_of_core(core)
    batches = [32] * (rows // 32) + ([rows % 32] if rows % 32 else [])
    widths = [t.ub_factor] * (t.col // t.ub_factor) + ([t.col % t.ub_factor] if t.col % t.ub_factor else [])
    bars = sets = waits = 0
    x_allocs = dx_allocs = 0
    for n in batches:
        bars += 2  # Duplicate of meanBuf, Muls by avgFactor
        sets, waits = sets + 2, waits + 1  # rstd queue: EnQue, FreeTensor; DeQue
        for w in widths:
            # loopColProcessBeforeReduce: Cast2FloatIf gamma, Duplicate dgamma, per row ComputeFormer (Muls, Mul, Add,
            # Mul, the folds; 2 Casts of b16), the Add into meanBuf
            bars += gb16 + 1 + n * (4 + folds(w) + 2 * b16) + 1
            # loopColProcessAfterReduce: Cast2FloatIf gamma, per row ComputeLatter (Muls, Mul, Sub, Muls; 3 Casts)
            bars += gb16 + n * (4 + 3 * b16)
            sets, waits = sets + 2 * 2 + 2, waits + 2 + 1  # gamma twice, dgamma once: EnQue, FreeTensor; DeQue
            # per row, before: x and dy EnQue, FreeTensor; DeQue; V_S, S_V, ReduceSumHalfInterval's V_S, S_V
            sets, waits = sets + n * (4 + 4), waits + n * (2 + 4)
            # per row, after: x and dy as before, dx EnQue, FreeTensor, DeQue; V_S, S_V
            sets, waits = sets + n * (4 + 2 + 2), waits + n * (2 + 1 + 2)
            x_allocs += 2 * n  # and as many of dy
            dx_allocs += n
    n_gamma = 2 * len(batches) * len(widths)
    waits += alloc_waits(len(batches), 1) + alloc_waits(n_gamma, 1) + alloc_waits(len(batches) * len(widths), 1)
    x_allocs += t.fixed_output  # the final sum's buffers
    waits += 2 * alloc_waits(x_allocs, t.buffer_num) + alloc_waits(dx_allocs, t.buffer_num)
    if t.fixed_output or core == 0:  # InitOutput of dgamma (core 0) or of the core's workspace row: a V_MTE3 pair
        sets, waits = sets + 1, waits + 1
    if t.fixed_output:  # doDeterminCompute: FreeTensor of the two buffers, 4 pairs and 2 barriers a task
        sets += 2 + 4 * final_tasks(t, core)
        waits += 4 * final_tasks(t, core)
        bars += 2 * final_tasks(t, core)
    return bars, sets, waits


def syncs_of_ops_nn(t, dy_dtype, gamma_dtype):
    """Per core, the syncs ops-nn's kernel makes: (PipeBarriers, SetFlags, WaitFlags) arrays."""
    b16, gb16 = int(dy_dtype.itemsize == 2), int(gamma_dtype.itemsize == 2)
    count = split_n_syncs if t.tiling_key == SPLIT_N else split_d_syncs
    return [np.array(v) for v in zip(*(count(t, c, b16, gb16) for c in range(t.block_dim)), strict=True)]


def assert_syncs_and_plan(rep, t, dy_dtype, gamma_dtype):
    assert rep.tiling == t and rep.block_dim == t.block_dim and rep.op == "rms_norm_grad"
    for name, want in zip(SYNCS, syncs_of_ops_nn(t, dy_dtype, gamma_dtype), strict=True):
        np.testing.assert_array_equal(rep.counter(name), want, err_msg=name)
    placed = [(b.nbytes, b.buffer_num, b.offset) for b in rep.ub_plan.buffers if b.nbytes]
    assert placed == [(b.nbytes, b.buffer_num, b.offset) for b in ub_plan(t, rep.soc).buffers if b.nbytes]


def run_of(args, **kw):
    with tilesim.capture() as runs:
        out = rms_norm_grad(*args, **kw)
    assert len(runs) == 1
    return out, runs[0]


# (dtype, gamma dtype, (rows, cols), tiling overrides): a row at a time and small D (one tile and several, tails,
# a core tail), split-D (batches of 32 rows and a tail batch, a column tail, one tile), fp32 and b16.
CASES = [
    ("float32", "float32", (37, 1000), {}),
    ("float32", "float32", (37, 1000), dict(core_num=4, ub_factor=3, buffer_num=1)),
    ("bfloat16", "bfloat16", (37, 700), dict(core_num=5, ub_factor=2)),
    ("float16", "float32", (300, 100), {}),
    ("float16", "float32", (300, 100), dict(core_num=7, ub_factor=9, buffer_num=1)),
    ("bfloat16", "bfloat16", (64, 33), dict(core_num=2)),
    ("float32", "float32", (70, 9000), dict(core_num=2)),
    ("bfloat16", "bfloat16", (40, 9000), dict(core_num=3, ub_factor=1024, buffer_num=1)),
    ("float16", "float32", (5, 300), dict(core_num=2, tiling_key=2, ub_factor=128)),
]


@pytest.mark.parametrize("det", [False, True])
@pytest.mark.parametrize("dtype,gamma_dtype,shape,overrides", CASES)
def test_syncs_and_plan_as_ops_nn(rng, dtype, gamma_dtype, shape, overrides, det):
    args = rms_inputs(rng, shape, 1, dtype, gamma_dtype)
    t = make_tiling(*args, deterministic=det, **overrides)
    if overrides:
        assert t != make_tiling(*args, deterministic=det), overrides
    out, rep = run_of(args, deterministic=det, tiling=t if overrides else None)
    assert_syncs_and_plan(rep, t, args[0].dtype, args[3].dtype)
    # GetValue of rstd and of ReduceSumHalfInterval's sum (split-D: and of the mean); small D reads no scalar
    assert (rep.counter("scalar_access").sum() > 0) == (not t.small_d)


def test_the_sync_count_can_fail(rng):
    """Another tiling, or one PipeBarrier fewer on a core: the check sees either."""
    args = rms_inputs(rng, (37, 1000), 1, "float32")
    t = make_tiling(*args, core_num=4, ub_factor=3, buffer_num=1)
    rep = run_of(args, tiling=t)[1]
    assert_syncs_and_plan(rep, t, args[0].dtype, args[3].dtype)
    with pytest.raises(AssertionError):
        assert_syncs_and_plan(rep, make_tiling(*args), args[0].dtype, args[3].dtype)
    counters = rep.counters.copy()
    counters[1, COUNTER_NAMES.index("pipe_barriers")] -= 1
    with pytest.raises(AssertionError):
        assert_syncs_and_plan(dataclasses.replace(rep, counters=counters), t, args[0].dtype, args[3].dtype)


CHECKED = [
    ("float32", "float32", (37, 1000), dict(core_num=4, ub_factor=3, buffer_num=1), False),
    ("bfloat16", "bfloat16", (64, 33), dict(core_num=2), True),
    ("float16", "float32", (40, 9000), dict(core_num=3, ub_factor=1024), False),
    ("float32", "float32", (5, 300), dict(core_num=2, tiling_key=2, ub_factor=128), True),
]


@pytest.mark.parametrize("dtype,gamma_dtype,shape,overrides,det", CHECKED)
def test_checked_mode_clean_with_auto_sync_on_and_off(rng, dtype, gamma_dtype, shape, overrides, det):
    """ops-nn writes every PipeBarrier and scalar sync: checked mode is clean either way, with the fast bits."""
    args = rms_inputs(rng, shape, 1, dtype, gamma_dtype)
    t = make_tiling(*args, deterministic=det, **overrides)
    spec = tilesim.get_soc("Ascend910B1")
    fast = rms_norm_grad(*args, deterministic=det, tiling=t)
    for auto_sync in (True, False):
        dx, dgamma = np.full_like(fast[0], 7), np.full_like(fast[1], 7)
        rep = run(t, spec, *args, dx, dgamma, tilesim.runtime.host_threads.workspace(t.workspace_size), True,
                  auto_sync=auto_sync)
        assert rep.checks
        assert_bitwise(dx, fast[0], f"dx, auto-sync {auto_sync}")
        assert_bitwise(dgamma, fast[1], f"dgamma, auto-sync {auto_sync}")


def test_split_d_dgamma_lands_batch_by_batch_in_core_order(rng):
    """Split-D atomic dgamma: each core adds its tile's partial sum once per batch of 32 rows, and the adds land in
    core order (core 0's batches, then core 1's, ...), each one float addition into GM: the NPU's order. A core
    with more than 32 rows thus adds more than once; summing its batches before adding (as earlier tilesim did)
    gives other bits."""
    dy, x, rstd, gamma = rms_inputs(rng, (150, 7000), 1, "float32")
    t = make_tiling(dy, x, rstd, gamma, core_num=2)
    assert t.tiling_key == 2 and t.block_factor > 32 and t.block_dim == 2
    _, dgamma = rms_norm_grad(dy, x, rstd, gamma, tiling=t)
    f32 = np.float32
    gm = np.zeros(t.col, f32)
    per_core = []
    for c in range(t.block_dim):
        r0, rows = c * t.block_factor, t.rows_of_core(c)
        core_sum = np.zeros(t.col, f32)
        for b0 in range(0, rows, 32):
            part = np.zeros(t.col, f32)  # the batch's dgamma tiles: dy · (x · rstd), added row by row in fp32
            for r in range(r0 + b0, r0 + min(b0 + 32, rows)):
                part = part + dy[r] * (x[r] * rstd[r])
            gm = gm + part  # one atomic add
            core_sum = core_sum + part
        per_core.append(core_sum)
    assert_bitwise(dgamma, gm, "dgamma: the batches' atomic adds in core order")
    summed_first = np.zeros(t.col, f32)
    for s in per_core:
        summed_first = summed_first + s
    assert not np.array_equal(dgamma.view(np.uint32), summed_first.view(np.uint32))


def test_kernels_by_tiling_key():
    assert set(KERNELS) == {1, 2}
