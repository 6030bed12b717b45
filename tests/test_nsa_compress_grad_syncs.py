"""aclnnNsaCompressGrad's syncs (``kernels.nsa_compress_grad``): the PipeBarriers, SetFlags and WaitFlags each core
makes, counted against ops-transformer's ``NsaCompressGradND`` as the tiling drives it (windows and (t, n) rows per
core, head groups and passes of window rows, D in 64-lane parts), overlapping windows and not, several rows a pass
and one; checked mode clean with BiSheng's auto-sync on and off (the kernel writes every sync it needs)."""

from __future__ import annotations

import dataclasses

import ml_dtypes
import numpy as np
import pytest
import tilesim.tiling as tiling
from tilesim.kernels.nsa_compress_grad import run, ub_plan
from tilesim.tiling.nsa_compress_grad import UB_PRESERVE, seq_lengths, windows

import tilesim
from tilesim.core.records import COUNTER_NAMES

SYNCS = ["pipe_barriers", "set_flags", "wait_flags"]


def inputs(rng, cum, n, d, bs, stride):
    windows = sum((b - a - bs) // stride + 1 for a, b in zip([0, *cum], cum, strict=False) if b - a >= bs)
    x = rng.standard_normal((cum[-1], n, d)).astype(ml_dtypes.bfloat16)
    w = rng.standard_normal((bs, n)).astype(ml_dtypes.bfloat16)
    g = rng.standard_normal((windows, n, d)).astype(ml_dtypes.bfloat16)
    return g, x, w


def halving_barriers(cores):
    """DeterministicComputeSumWtGrad's PipeBarriers in its halving loop (one a round, one more per extra line)."""
    lines, extra, n = cores, cores + 1, 0
    while lines > 1 or 1 < extra < cores + 1:
        n += 1
        half = lines // 2
        if lines % 2:
            if extra <= cores:
                n += 1
                extra = half + 1
            else:
                extra = lines
        lines = half
    return n


def syncs_of_ops_transformer(t):
    """Per core, (PipeBarriers, SetFlags, WaitFlags) of NsaCompressGradND (nsa_compress_grad.h and _base.h) over
    Init, Process and MoveResult."""
    n, d, bs = t.num_of_head, t.dim_of_head, t.block_size
    max_head = (t.ub_max_size - UB_PRESERVE) // d // 4 // 3 // 16 * 16  # InitTilingData's maxHeadNumInUb_
    rows_once, head_once = t.n_rows_once, t.n_head_once
    groups, passes = -(-n // head_once), -(-bs // rows_once)  # Process: head groups, passes of nRowsOnce_ rows
    reduce_parts = d // 64 + (d % 64 > 0)  # ComputeWtGrad: a BlockReduceSum per 64 lanes of D, one for the rest
    # PipeBarrier<PIPE_V>s of one pass: ComputeWtGrad after Cast, after Mul, after each BlockReduceSum and after
    # WholeReduceSum; ComputeInputGrad after Cast, after BroadCast and after Mul
    pass_barriers = 2 + reduce_parts + 1 + 3
    # SetFlag / WaitFlag pairs of one pass: CopyInInput MTE2_V (3) set, ComputeWtGrad waits it; CopyInWt MTE2_V (2),
    # ComputeInputGrad waits it; ComputeWtGrad V_MTE3 (3), CopyOutWtGrad; ComputeInputGrad V_MTE3 (2),
    # CopyOutInputGrad; CopyOutWtGrad MTE3_MTE2 (3), the next CopyInInput; CopyOutInputGrad MTE3_MTE2 (2), CopyInWt
    pass_pairs = 6
    out = np.zeros((t.block_dim, 3), np.int64)
    for c in range(t.block_dim):
        windows = t.blocks_of_core(c)[1]
        heads = t.heads_of_core(c)[1]
        # Process: per window and head group, CopyInCmpGrad's barrier before the BroadCast (several rows a pass)
        barriers = windows * groups * ((rows_once > 1) + passes * pass_barriers)
        # DeterministicComputeSumWtGrad: one a halving round and one per extra line, one before and one after the
        # cast (on 0 elements too, for a core without a 16-element chunk)
        barriers += halving_barriers(t.block_dim) + 2
        # SetWsToZero: V_MTE3 (3) after the Duplicate; with overlap after the second Duplicate, else InitOutput's
        # V_MTE3 (its FetchEventID) before its copies
        pairs = 1 + 1
        # PresetFlag's three sets, waited by ClearPresetFlag; per window and head group V_MTE2 (6) waited before and
        # set after it, and CopyInCmpGrad's MTE2_V (3); per pass the six pairs
        pairs += 3 + windows * groups * (2 + passes * pass_pairs)
        pairs += 2  # DeterministicComputeSumWtGrad's MTE2_V (7) and V_MTE3 (7)
        # MoveInputGrad (overlap): MTE3_MTE2 0 and 1 set first and waited last; per copy MTE3_MTE2 waited before the
        # copy in and set after the copy out, MTE2_V and V_MTE3 set and waited
        copies = -(-heads // max_head) if t.is_overlap else 0
        sets = pairs + (2 + 3 * copies if t.is_overlap else 0)
        waits = pairs + (3 * copies + 2 if t.is_overlap else 0)
        out[c] = barriers, sets, waits
    return out


def assert_syncs_and_plan(rep, t):
    """The launch ran tiling t; its syncs per core are ops-transformer's; its UB plan is the kernel's one TBuf."""
    assert rep.tiling == t and rep.block_dim == t.block_dim and rep.op == "nsa_compress_grad"
    want = syncs_of_ops_transformer(t)
    for k, name in enumerate(SYNCS):
        np.testing.assert_array_equal(rep.counter(name), want[:, k], err_msg=name)
    placed = [(b.nbytes, b.buffer_num, b.offset) for b in rep.ub_plan.buffers]
    assert placed == [(b.nbytes, b.buffer_num, b.offset) for b in ub_plan(t, rep.soc).buffers]
    assert placed == [(t.ub_max_size, 1, 0)]


# (cum, N, D, blockSize, stride, core_num): overlap and not, several rows a pass and one (N = 128 > the 112 heads
# of maxHeadNumInUb at D = 192), D a multiple of 64 and not, cores with no window
CASES = [
    ([0, 128, 272], 4, 16, 32, 16, None),
    ([0, 120, 140, 272], 128, 192, 32, 16, 7),
    ([100, 300], 3, 96, 64, 16, 5),
    ([0, 100, 164, 200], 4, 32, 32, 32, 3),
]


def launch_of(rng, cum, n, d, bs, stride, core_num, checks=False, auto_sync=True):
    g, x, w = inputs(rng, cum, n, d, bs, stride)
    if stride == bs:  # the kernel's path without overlap, which the op's checks do not reach (blockSize > stride)
        probe_g = np.zeros((sum(windows(seq_lengths(cum), bs, bs // 2)), n, d), g.dtype)
        probe = tiling.nsa_compress_grad(probe_g, x, w, cum, bs, bs // 2)
        t = dataclasses.replace(probe, block_stride=bs, num_of_block=g.shape[0])
    else:
        t = tiling.nsa_compress_grad(g, x, w, cum, bs, stride, **({"core_num": core_num} if core_num else {}))
    dx, dw = np.zeros_like(x), np.zeros_like(w)
    with tilesim.capture() as runs:
        run(t, tilesim.get_soc("Ascend910B1"), g, x, w, cum, dx, dw, np.empty(t.workspace_size, np.uint8), checks,
            auto_sync)
    return t, runs[0], dx, dw


@pytest.mark.parametrize("cum,n,d,bs,stride,core_num", CASES)
def test_syncs_as_ops_transformer(rng, cum, n, d, bs, stride, core_num):
    t, rep, _, _ = launch_of(rng, cum, n, d, bs, stride, core_num)
    assert_syncs_and_plan(rep, t)


def test_the_sync_count_can_fail(rng):
    """Another tiling, or one WaitFlag fewer on a core: the check sees either."""
    t, rep, _, _ = launch_of(rng, *CASES[0])
    assert_syncs_and_plan(rep, t)
    counters = rep.counters.copy()
    counters[1, COUNTER_NAMES.index("wait_flags")] -= 1
    with pytest.raises(AssertionError):
        assert_syncs_and_plan(dataclasses.replace(rep, counters=counters), t)
    with pytest.raises(AssertionError):
        assert_syncs_and_plan(rep, dataclasses.replace(t, block_size=t.block_size * 2))


@pytest.mark.parametrize("auto_sync", [True, False])
@pytest.mark.parametrize("case", [CASES[0], CASES[2], CASES[3]])
def test_checked_mode_is_clean_and_gives_the_fast_bits(rng, case, auto_sync):
    """The kernel makes every sync between its pipes itself (its V-V barriers included): clean with auto-sync off
    as well as on."""
    seed = rng.integers(1 << 30)
    _, _, dx, dw = launch_of(np.random.default_rng(seed), *case)
    _, rep, cdx, cdw = launch_of(np.random.default_rng(seed), *case, checks=True, auto_sync=auto_sync)
    assert rep.checks
    np.testing.assert_array_equal(cdx.view(np.uint16), dx.view(np.uint16))
    np.testing.assert_array_equal(cdw.view(np.uint16), dw.view(np.uint16))
