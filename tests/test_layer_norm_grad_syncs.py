"""layer_norm_grad's syncs (``kernels.layer_norm_grad``): the PipeBarriers, SetFlags and WaitFlags each core makes,
counted against the code they come from, and its UB plan against the tiling's, for both dtypes, both tmp modes,
isReuseSource, official and hand-made tilings (several tiles a core, a short last tile, rows not a multiple of 8).
There is no Huawei kernel of this design: the kernel's own syncs are its queue calls and the flags its docstring
lists; the PipeBarriers and the V_S flags are asc-devkit's APIs' (``layernormgrad_common_impl.h``,
``layernormgradbeta_common_impl.h``), counted here from their code. Bits and other counters: ``tests/test_golden.py``.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from tilesim.kernels.layer_norm_grad import layer_norm_grad
from tilesim.kernels.op_specs import OPS
from tilesim.tiling.layer_norm_grad import LANES, plan_for
from tilesim.tiling.layer_norm_grad import layer_norm_grad as make_tiling

import tilesim
from tilesim.core.records import COUNTER_NAMES

SYNCS = ["pipe_barriers", "set_flags", "wait_flags"]
FLOAT_REPEAT, MAX_REPEAT = 64, 255


def broadcast_barriers(rows, h):
    """BroadcastLastDimImpl (BrcbLastDimImpl) + DuplicateTensor: a PipeBarrier after each 32 B column's Brcbs (H/8),
    one after DuplicateLastDimImpl when rows % 8, one of DuplicateTensor's."""
    return h // 8 + (1 if rows % 8 else 0) + 1


def reduce_sum_barriers(rows, h):
    """ReduceSumImpl: per row and level, one after the loop of 255-repeat WholeReduceSums, one after the partial
    block, one after the tail lanes."""
    per_row, total = 0, h
    while total > 1:
        reps, tail = divmod(total, FLOAT_REPEAT)
        per_row += 1 + (reps % MAX_REPEAT > 0) + (tail > 0)
        total = -(-total // FLOAT_REPEAT)
    return rows * per_row


def lng_chunk_barriers(rows, h):
    """ComputeProcess<float>: ComputePdX1 1, ComputePdX2 2 + a broadcast, ComputePdVar 11 (DoOneDiv's 2 among
    them) + a broadcast + a ReduceSum, ComputePdMean 13 (DoOneDiv's 2) + a broadcast + two ReduceSums, 1 between
    PdMean and PdX, ComputePdX 6 + two broadcasts: 34 + 5 broadcasts + 3 ReduceSums."""
    return 34 + 5 * broadcast_barriers(rows, h) + 3 * reduce_sum_barriers(rows, h)


def beta_chunk_barriers(rows):
    """ComputeProcess (float): after the Mul, then one per row of each ReduceSumFirstN (the clearing Adds counts as
    the first row's)."""
    return 1 + 2 * rows


def chunks(lt):
    """LayerNormGrad's chunks of one call: loopNum of nohCalSize rows, then the tail's."""
    return [lt.noh_cal_size] * lt.loop_num + ([lt.noh_tail_size] if lt.tail_size else [])


def beta_chunks(bt):
    return [bt.bs_cur_length] * bt.loop_round + ([bt.bs_tail_size] if bt.input_tail_size else [])


def tiles_of_core(t, c):
    """The tile sizes of core c and the API tilings each uses (as the kernel picks them)."""
    rows = t.rows_of_core(c)
    out = []
    for done in range(0, rows, t.ub_rows):
        n = min(t.ub_rows, rows - done)
        k = 0 if n == t.ub_rows else (1 if c < t.block_dim - 1 else 2)
        out.append((n, t.lng[k], t.beta[k]))
    return out


def expected_syncs(t):
    """Per core: (PipeBarriers, SetFlags, WaitFlags)."""
    reuse = bool(t.is_reuse_source)
    bars, sets, waits = [], [], []
    tasks = 2 * -(-t.h // LANES)
    for c in range(t.block_dim):
        b = 0
        s = w = 2  # InitOutput's V_MTE3 (its Duplicate, then the copies out); gamma's MTE2_V
        tiles = tiles_of_core(t, c)
        for i, (_, lt, bt) in enumerate(tiles):
            v_s = sum(5 for n in chunks(lt) if n % 8)  # DuplicateLastDimImpl's V_S, in each of 5 broadcasts
            b += sum(lng_chunk_barriers(n, t.h_align) for n in chunks(lt))
            b += sum(beta_chunk_barriers(n) for n in beta_chunks(bt))
            # EnQue dy, x, variance, mean (MTE2_V) and pd_x (V_MTE3); FreeTensor x, variance, mean, dy (V_MTE2) and
            # pd_x (MTE3_V); the V_MTE3 and MTE3_V flags around the atomic adds; with reuse dy's FreeTensor and
            # EnQue of its second copy
            s += 4 + 1 + 4 + 1 + 2 + v_s + (2 if reuse else 0)
            # DeQue of the five; the two flags; with reuse dy's second AllocTensor (its FreeTensor's V_MTE2) and
            # DeQue; from the second tile on, each AllocTensor of the five waits for the last FreeTensor
            w += 5 + 2 + v_s + (2 if reuse else 0) + (5 if i else 0)
        w += 5  # TPipe.Reset: the FreeTensor events of the five queues' buffers, still pending
        m = len(range(c, tasks, t.block_dim))
        s += 4 * m  # per task: EnQue and FreeTensor of the rows and of the sum
        w += 2 * m + 2 * max(m - 1, 0)  # the two DeQues; the AllocTensors after the first task
        bars.append(b)
        sets.append(s)
        waits.append(w)
    return np.array(bars), np.array(sets), np.array(waits)


def assert_syncs_and_plan(rep, t):
    assert rep.tiling == t and rep.block_dim == t.block_dim and rep.op == "layer_norm_grad"
    for name, want in zip(SYNCS, expected_syncs(t), strict=True):
        np.testing.assert_array_equal(rep.counter(name), want, err_msg=name)
    plan = plan_for(t.ub_rows, t.h_align, t.block_dim, tilesim.get_soc(rep.soc), t.tmp_mode, t.region_bytes)
    placed = [(b.nbytes, b.buffer_num, b.offset, b.stack) for b in rep.ub_plan.buffers]
    assert placed == [(b.nbytes, b.buffer_num, b.offset, b.stack) for b in plan.buffers]


def run_of(inputs, **kw):
    with tilesim.capture() as runs:
        layer_norm_grad(**inputs, **kw)
    assert len(runs) == 1
    return runs[0]


# (shape, dtype, tmp, reuse, tiling overrides): one tile a core and several, a short last tile, tail rows of the
# broadcasts (rows % 8), H aligned or not, the framework's temporaries.
CASES = [
    ((16, 64), "fp32", "shared", False, {}),
    ((16, 64), "fp32", "shared", False, dict(core_num=2, ub_rows=3)),
    ((37, 200), "fp32", "framework", False, dict(core_num=4, ub_rows=4)),
    ((37, 200), "fp32", "shared", True, dict(core_num=3, ub_rows=5)),
    ((9, 1000), "fp16", "shared", False, {}),
    ((30, 100), "fp16", "framework", False, dict(core_num=4, ub_rows=3)),
]


@pytest.mark.parametrize("shape,dtype,tmp,reuse,overrides", CASES)
def test_syncs_and_plan(shape, dtype, tmp, reuse, overrides):
    inputs = OPS["layer_norm_grad"].make_inputs(shape, dtype, 0)
    args = [inputs[k] for k in ("dy", "x", "variance", "mean", "gamma")]
    t = make_tiling(*args, epsilon=inputs["epsilon"], tmp=tmp, is_reuse_source=reuse, **overrides)
    rep = run_of(inputs, tmp=tmp, is_reuse_source=reuse, tiling=t if overrides else None)
    assert_syncs_and_plan(rep, t)


def test_the_sync_count_can_fail():
    """Another tiling, or one PipeBarrier fewer on a core: the check sees either."""
    inputs = OPS["layer_norm_grad"].make_inputs((16, 64), "fp32", 0)
    args = [inputs[k] for k in ("dy", "x", "variance", "mean", "gamma")]
    t = make_tiling(*args, epsilon=inputs["epsilon"], core_num=2, ub_rows=3)
    rep = run_of(inputs, tiling=t)
    assert_syncs_and_plan(rep, t)
    with pytest.raises(AssertionError):
        assert_syncs_and_plan(rep, make_tiling(*args, epsilon=inputs["epsilon"]))
    counters = rep.counters.copy()
    counters[1, COUNTER_NAMES.index("pipe_barriers")] -= 1
    with pytest.raises(AssertionError):
        assert_syncs_and_plan(dataclasses.replace(rep, counters=counters), t)
