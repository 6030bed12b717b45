"""aclnnGroupNormBackward's syncs (``kernels.group_norm_backward``): the PipeBarriers, SetFlags and WaitFlags each
core makes, counted against ops-nn's ``GroupNormGrad<T, isDeterministic>`` (``group_norm_grad.h``), and its UB plan
against the tiling's, over every UB mode, dtype, both reductions over N (and N = 1), output masks and hand-made
tilings; checked mode clean (its bits and the other counters are pinned by ``tests/test_golden.py``).

A core's syncs, as ops-nn's code makes them (the counts per call in :func:`syncs_of_ops_nn`):

- Custom_DataCopy_In: b16 a PipeBarrier<PIPE_ALL> between the copy and the Cast; Custom_DataCopy_Out: b16 a
  V_MTE3 and an MTE3_V pair around the copy. Get_Mean_Rstd: a PipeBarrier<PIPE_ALL>. Each SetFlag / WaitFlag
  pair of a mode's code is one of each.
- Mode_Selection: an S_MTE3 pair, then an MTE3_V pair after each atomic copy (fp32_dgamma_dbeta2GM) or a V_MTE3
  pair before each copy (non_fp32_dgamma_dbeta2GM): 1 + the sums asked for, either way.
- The queue calls: EnQue sets and DeQue waits; FreeTensor sets, and the AllocTensor that takes the buffer again
  waits, or pipe.Reset does (it waits every freed buffer's event), so every first-stage FreeTensor is one set and
  one wait; in the second stage a FreeTensor is waited for only by the next AllocTensor of the buffer.
- InitOutput (core 0): a V_MTE3 pair each. SyncAll is not a flag.
- Not in ops-nn: Compute_Mode_5's V_MTE3 pair after the Mul (see the kernel's docstring).
"""

from __future__ import annotations

import dataclasses

import ml_dtypes
import numpy as np
import pytest
import tilesim.tiling as tiling
from tilesim.kernels import group_norm_backward
from tilesim.kernels.group_norm_backward import execute
from tilesim.tiling.common import replace
from tilesim.tiling.group_norm_backward import SPLIT_COUNT, ub_plan

import tilesim
from tilesim.core.records import COUNTER_NAMES
from tilesim.runtime.host_threads import workspace

DT = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
SYNCS = ["pipe_barriers", "set_flags", "wait_flags"]


def gn_inputs(rng, n, c, hxw, group, dtype):
    dt = DT[dtype]
    x = rng.standard_normal((n, c, hxw)).astype(dt)
    xg = x.astype(np.float64).reshape(n, group, -1)
    mean, rstd = xg.mean(-1), 1.0 / np.sqrt(xg.var(-1) + 1e-5)
    dy = rng.standard_normal((n, c, hxw)).astype(dt)
    return dy, x, mean.astype(dt), rstd.astype(dt), rng.standard_normal(c).astype(dt)


class Count:
    """Barriers, sets and waits."""

    def __init__(self) -> None:
        self.b = self.s = self.w = 0

    def pair(self, k: int = 1) -> None:  # SetFlag / WaitFlag pairs
        self.s += k
        self.w += k

    def free(self, k: int = 1) -> None:  # first-stage FreeTensors: set, and waited by an AllocTensor or the Reset
        self.pair(k)


def _fold_steps(rows: int) -> int:
    """reduce_axis_n_WSP2UB's halving Adds for ``rows`` rows."""
    end = mid = rows
    steps = 0
    while mid >= 2:
        mid >>= 1
        end -= mid
        steps += 1
        mid = end
    return steps


def syncs_of_ops_nn(t):
    """Per core, (PipeBarriers, SetFlags, WaitFlags) of ops-nn's kernel (with the pair it adds in mode 5)."""
    b16 = t.dtype != "float32"
    ci = 1 if b16 else 0  # Custom_DataCopy_In's PIPE_ALL
    co = 2 if b16 else 0  # Custom_DataCopy_Out's pairs
    sums = 1 + t.dgamma_is_require + t.dbeta_is_require  # Mode_Selection's pairs
    hxw, cg = t.hxw, t.c_g
    out = []
    for core in range(t.block_dim):
        k = Count()
        first, num = t.tasks_of_core(core)
        for _ in range(first, first + num):
            if t.ub_mode in (0, 5):  # CopyIn_Mode_0
                k.b += 2 * ci + 1  # two copies in, Get_Mean_Rstd
                k.s += 2  # EnQue dy, x
                k.pair(2)  # MTE2_V, S_V
                k.w += 2  # Compute's DeQues
            else:
                k.b += 1  # Get_Mean_Rstd
            if t.ub_mode == 0:
                for c in range(cg):
                    if c * hxw % 8 == 0:
                        k.pair()  # S_V
                    else:
                        k.b += 2 * ci + 1  # in_temp_x / in_temp_dy in, PIPE_ALL before the SetValues
                        k.pair()  # MTE2_V
                k.free()  # temp_queue_HXW
                k.pair(sums)
                if t.dx_is_require:
                    k.b += ci
                    k.pair()  # gamma's MTE2_V
                    tpb = 16 if b16 else 8
                    for c in range(cg):
                        k.pair()  # S_V
                        if c * hxw % tpb:
                            k.b += 2 + 2 * ci  # PIPE_ALL, the copies in, PIPE_ALL
                            k.pair()  # MTE2_V
                        k.pair(1 + co)  # V_MTE3, Custom_DataCopy_Out
                        k.free()  # temp_queue_HXW
                    k.free()  # gamma
                k.free(4)  # dbeta, dgamma, dy, x
            elif t.ub_mode == 5:
                k.b += 1  # PIPE_ALL after the DataCopy
                k.pair()  # V_MTE3 after the Mul (not in ops-nn)
                k.pair(sums)
                if t.dx_is_require:
                    k.b += ci
                    k.pair()  # gamma's MTE2_V
                    k.pair(1 + co + 1)  # V_MTE3, Custom_DataCopy_Out, MTE3_MTE2
                k.free(4 + 2 * t.dx_is_require)  # dbeta, dgamma, dy, x (and gamma, temp_queue_HXW)
            else:
                chunks = cg * (t.mode2_ub_iteration_num if t.ub_mode == 3 else 1)
                passes = -(-cg // 2) if t.ub_mode == 2 else chunks
                k.b += 2 * ci * chunks
                k.pair(passes)  # MTE2_V
                if t.ub_mode == 1:
                    k.free(3 * chunks)  # x, dy, temp_queue_HXW
                elif t.ub_mode == 2:
                    k.free(6)  # the two buffers of x, dy, temp_queue_HXW
                else:
                    k.s += 3 * chunks  # EnQue x, dy (CopyIn_x), temp_queue_HXW (compute_dgamma)
                    k.w += 3 * chunks  # their DeQues
                    k.free(4 * chunks)  # temp_queue_HXW (CopyIn_x, Copyout_dgamma), dy, x
                k.pair(sums)
                k.free(2)  # dbeta, dgamma
                if t.dx_is_require:
                    k.b += ci + 2 * ci * chunks
                    k.pair()  # gamma's MTE2_V
                    k.pair(2 * passes)  # S_V, MTE2_V
                    k.pair(chunks * (1 + co))  # V_MTE3, Custom_DataCopy_Out
                    k.free(3 * chunks + 1)  # x, dy, temp_queue_HXW; gamma
        det = t.deterministic
        if core == 0:  # Init_Output_GM
            k.pair(4 if det and not b16 else 2)
        s2 = t.stage2_core_used
        req = t.dgamma_is_require + t.dbeta_is_require
        if det and (core < s2 if b16 else core < SPLIT_COUNT * s2):
            half = -(-t.n // SPLIT_COUNT)
            if b16:
                axis = half
            else:
                first = -(-half // SPLIT_COUNT)
                axis = first if core < s2 else half - first
            loops = -(-axis // t.core_batch_parts)
            k.b += 1  # after the Duplicates
            for li in range(loops):
                rows = t.core_batch_parts if li < loops - 1 else (axis % t.core_batch_parts or t.core_batch_parts)
                k.b += req * (2 * _fold_steps(rows) + 1)
                k.pair(req)  # MTE2_V
                k.s += req  # FreeTensor of the rows
                k.w += req * (li > 0)  # the AllocTensor of the next loop's rows
            if b16:
                k.b += 1  # PIPE_ALL
                k.pair(req * co)
            else:
                k.pair()  # V_MTE3
            k.s += 2  # FreeTensor of the sums
        elif b16 and not det and t.n != 1 and core < s2:  # cast_dgamma_dbeta_WSP2GM
            k.pair(2 * req)  # MTE2_V, V_MTE3
            k.s += req  # FreeTensor
        out.append((k.b, k.s, k.w))
    return [np.array(v) for v in zip(*out, strict=True)]


def assert_syncs_and_plan(rep, t):
    """The launch ran tiling t; its syncs per core are ops-nn's; its UB plan is the tiling's, row for row."""
    assert rep.tiling == t and rep.block_dim == t.block_dim and rep.op == "group_norm_backward"
    for name, want in zip(SYNCS, syncs_of_ops_nn(t), strict=True):
        np.testing.assert_array_equal(rep.counter(name), want, err_msg=name)
    placed = [(b.name, b.nbytes, b.buffer_num, b.offset) for b in rep.ub_plan.buffers]
    assert placed == [(b.name, b.nbytes, b.buffer_num, b.offset) for b in ub_plan(t, tilesim.get_soc(rep.soc)).buffers]


# (N, C, HxW, group, dtype, tiling overrides, output mask): every UB mode in fp32 and b16, aligned and unaligned
# channels, odd C/G in mode 2, both reductions over N and N = 1, hand-made core counts and modes, masks.
CASES = [
    (2, 16, 64, 4, "float32", {}, (True, True, True)),  # mode 0, N = 2
    (3, 12, 7, 4, "float32", {}, (True, True, True)),  # mode 0, unaligned channels, N > 2
    (3, 12, 7, 4, "bfloat16", {}, (True, True, True)),
    (2, 8, 8, 2, "float16", {}, (True, True, True)),  # b16: channel starts aligned as fp32, not as T
    (1, 6, 12000, 2, "float32", {}, (True, True, True)),  # mode 1, N = 1
    (1, 6, 12000, 2, "float16", {}, (True, True, True)),  # mode 3, b16 N = 1: the sums cast and written
    (3, 8, 5000, 2, "float32", {}, (True, True, True)),  # mode 2
    (2, 6, 5000, 2, "float32", {}, (True, True, True)),  # mode 2, C/G odd
    (4, 6, 5000, 2, "bfloat16", {}, (True, True, True)),  # mode 1 (b16)
    (2, 4, 20000, 2, "float32", {}, (True, True, True)),  # mode 3
    (5, 4, 20000, 2, "bfloat16", {}, (True, True, True)),
    (3, 64, 1, 4, "float32", {}, (True, True, True)),  # mode 5
    (2, 64, 1, 4, "bfloat16", {}, (True, True, True)),
    (1, 64, 1, 4, "float16", {}, (True, True, True)),
    (9, 16, 100, 4, "float32", dict(core_num=5), (True, True, True)),  # several tasks a core, tail cores
    (9, 16, 100, 4, "float16", dict(core_num=3, ub_mode=1), (True, True, True)),
    (2, 8, 300, 2, "float32", dict(ub_mode=3, mode3_capacity=128), (True, True, True)),
    (6, 8, 300, 2, "bfloat16", dict(ub_mode=2, core_num=4), (True, False, True)),
    (3, 12, 7, 4, "float32", {}, (False, True, False)),
    (2, 64, 1, 4, "float32", {}, (False, False, True)),
    (1, 6, 12000, 2, "bfloat16", {}, (True, False, False)),
]


def run_of(args, n, c, hxw, group, mask, t, soc="Ascend910B1"):
    with tilesim.capture() as runs:
        outs = group_norm_backward(*args, n, c, hxw, group, mask, soc=soc, tiling=t)
    assert len(runs) == 1
    return outs, runs[0]


@pytest.mark.parametrize("n,c,hxw,group,dtype,overrides,mask", CASES)
def test_syncs_and_plan_as_ops_nn(rng, n, c, hxw, group, dtype, overrides, mask):
    args = gn_inputs(rng, n, c, hxw, group, dtype)
    t = tiling.group_norm_backward(*args, n, c, hxw, group, mask, **overrides)
    if overrides:
        assert t != tiling.group_norm_backward(*args, n, c, hxw, group, mask)
    assert_syncs_and_plan(run_of(args, n, c, hxw, group, mask, t)[1], t)


@pytest.mark.parametrize("soc", ["Ascend910B3", "Ascend910_9391"])
def test_syncs_on_other_a2_socs(rng, soc):
    n, c, hxw, group = 5, 96, 40, 6
    args = gn_inputs(rng, n, c, hxw, group, "bfloat16")
    t = tiling.group_norm_backward(*args, n, c, hxw, group, soc=soc)
    assert_syncs_and_plan(run_of(args, n, c, hxw, group, (True, True, True), None, soc)[1], t)


def test_the_sync_count_can_fail(rng):
    """Another tiling, or one PipeBarrier fewer on a core: the check sees either."""
    n, c, hxw, group = 9, 16, 100, 4
    args = gn_inputs(rng, n, c, hxw, group, "float32")
    t = tiling.group_norm_backward(*args, n, c, hxw, group, core_num=5)
    rep = run_of(args, n, c, hxw, group, (True, True, True), t)[1]
    assert_syncs_and_plan(rep, t)
    with pytest.raises(AssertionError):
        assert_syncs_and_plan(rep, replace(t, dx_is_require=False))
    counters = rep.counters.copy()
    counters[1, COUNTER_NAMES.index("pipe_barriers")] -= 1
    with pytest.raises(AssertionError):
        assert_syncs_and_plan(dataclasses.replace(rep, counters=counters), t)


@pytest.mark.parametrize("n,c,hxw,group,dtype,overrides,mask", CASES[::3])
def test_checked_mode_is_clean_and_gives_the_fast_bits(rng, n, c, hxw, group, dtype, overrides, mask):
    args = gn_inputs(rng, n, c, hxw, group, dtype)
    t = tiling.group_norm_backward(*args, n, c, hxw, group, mask, **overrides)
    spec = tilesim.get_soc("Ascend910B1")
    fast = group_norm_backward(*args, n, c, hxw, group, mask, tiling=t)
    res = [np.full(a.shape, 7, a.dtype) if m else None for a, m in zip(fast, mask, strict=True)]
    execute(t, spec, *args, n, c, hxw, group, mask, res, workspace(t.workspace_size), True)
    for a, b in zip(res, fast, strict=True):
        if b is not None:
            assert a.view(np.uint8).tobytes() == b.view(np.uint8).tobytes()
