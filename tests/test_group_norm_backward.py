"""GroupNormBackward: the tiled kernel (every UB mode, both reductions, every dtype) against untiled float64 math
and torch's native_group_norm_backward, the 910/310P decomposition, masks, reports and reproducibility."""

from __future__ import annotations

import ml_dtypes
import numba
import numpy as np
import pytest
import tilesim.tiling as tiling
import torch
from tilesim.kernels import group_norm_backward
from tilesim.kernels import reference as ref
from tilesim.tiling.common import replace
from tilesim.tiling.group_norm_backward import SYS_WORKSPACE

import tilesim
from tilesim.precision import THRESHOLD, compare

DT = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
EPS = 1e-5


def gn_inputs(rng, n, c, hxw, group, dtype, offset=0.0, gamma=True):
    """dy, x, mean, rstd, gamma in ``dtype``; mean and rstd [N, group] from the rounded x in float64."""
    dt = DT[dtype]
    x = (rng.standard_normal((n, c, hxw)) + offset).astype(dt)
    xg = x.astype(np.float64).reshape(n, group, -1)
    mean = xg.mean(-1)
    rstd = 1.0 / np.sqrt(xg.var(-1) + EPS)
    dy = rng.standard_normal((n, c, hxw)).astype(dt)
    g = rng.standard_normal(c).astype(dt) if gamma else None
    return dy, x, mean.astype(dt), rstd.astype(dt), g


def torch64(dy, x, mean, rstd, gamma, n, c, hxw, group):
    t = [None if a is None else torch.from_numpy(np.asarray(a).astype(np.float64)) for a in (dy, x, mean, rstd, gamma)]
    out = torch.ops.aten.native_group_norm_backward(*t, n, c, hxw, group, [True, True, True])
    return [o.numpy() for o in out]


def check_all(outs, golden, dtype):
    for name, o, g in zip(("dx", "dgamma", "dbeta"), outs, golden, strict=True):
        p = compare(o, g, dtype)
        assert p.ok, f"{name}: {p}"


# (N, C, HxW, group, the official UB mode on 910B for fp32, for b16: 6 UB bytes per element instead of 4)
MODE_SHAPES = [
    (2, 16, 64, 4, 0, 0),  # whole group resident, aligned channels
    (3, 12, 7, 4, 0, 0),  # odd HxW: channels re-read from GM into aligned buffers
    (4, 8, 33, 8, 0, 0),  # C/group = 1
    (2, 8, 8, 2, 0, 0),  # b16: channel starts 32 B aligned as fp32, not as T (the dx pass re-reads them)
    (1, 6, 12000, 2, 1, 3),  # one fp32 channel fits; a b16 one does not
    (1, 6, 8000, 2, 2, 1),  # two fp32 channels fit, one b16 channel
    (3, 8, 5000, 2, 2, 2),  # two channels at a time
    (2, 4, 20000, 2, 3, 3),  # HxW split into chunks, with a tail
    (3, 64, 1, 4, 5, 5),  # HxW = 1
]


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("n,c,hxw,group,mode32,mode16", MODE_SHAPES)
def test_every_ub_mode_against_untiled_math_and_torch(rng, n, c, hxw, group, mode32, mode16, dtype):
    args = gn_inputs(rng, n, c, hxw, group, dtype)
    t = tiling.group_norm_backward(*args, n, c, hxw, group)
    assert t.ub_mode == (mode32 if dtype == "float32" else mode16)
    assert t.deterministic == (n > 2)
    outs = group_norm_backward(*args, n, c, hxw, group)
    assert [o.dtype for o in outs] == [np.dtype(DT[dtype])] * 3
    assert outs[0].shape == (n, c, hxw) and outs[1].shape == (c,)
    check_all(outs, ref.group_norm_backward(*args, n, c, hxw, group), dtype)
    check_all(outs, torch64(*args, n, c, hxw, group), dtype)


@pytest.mark.parametrize("soc", ["Ascend910B3", "Ascend910_9391", "Ascend910_9372"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("n", [1, 2, 5, 12])
def test_both_reductions_on_910b_and_910_93(rng, soc, dtype, n):
    c, hxw, group = 96, 40, 6
    args = gn_inputs(rng, n, c, hxw, group, dtype)
    outs = group_norm_backward(*args, n, c, hxw, group, soc=soc)
    check_all(outs, ref.group_norm_backward(*args, n, c, hxw, group), dtype)


def test_c_over_group_one_and_hxw_one(rng):
    """D = 1: x̂ = 0 and dx = rstd·(γ·dy − γ·dy) = 0 exactly in real numbers; dgamma = 0, dbeta = Σ_n dy."""
    n, c = 3, 16
    dy, x, mean, rstd, g = gn_inputs(rng, n, c, 1, c, "float32")
    dx, dgamma, dbeta = group_norm_backward(dy, x, mean, rstd, g, n, c, 1, c)
    assert np.all(np.abs(dx) <= 1e-5 * np.abs(rstd.reshape(n, c, 1) * g.reshape(1, c, 1) * dy))
    assert np.all(np.abs(dgamma) <= 1e-5)
    np.testing.assert_allclose(dbeta, dy.sum(axis=(0, 2), dtype=np.float64), rtol=1e-6)


def test_gamma_none_means_ones(rng):
    n, c, hxw, group = 3, 8, 24, 2
    dy, x, mean, rstd, _ = gn_inputs(rng, n, c, hxw, group, "float32")
    a = group_norm_backward(dy, x, mean, rstd, None, n, c, hxw, group)
    b = group_norm_backward(dy, x, mean, rstd, np.ones(c, np.float32), n, c, hxw, group)
    for u, v in zip(a, b, strict=True):
        np.testing.assert_array_equal(u, v)


def test_large_mean_loses_far_fewer_digits_than_torch(rng):
    """x = 1000 + randn. The kernel centres before it sums (x̂ = x·r − μ·r, then Σdy·x̂), torch's CPU backward
    sums on raw x and subtracts afterwards. The kernel's x̂ still carries the rounding of x·r (|x·r| ~ 1000),
    so it is not exact either, but an order of magnitude closer than torch."""
    n, c, hxw, group = 2, 64, 1024, 8
    args = gn_inputs(rng, n, c, hxw, group, "float32", offset=1000.0)
    ours = group_norm_backward(*args, n, c, hxw, group)
    gold = ref.group_norm_backward(*args, n, c, hxw, group)
    t = [torch.from_numpy(np.asarray(a)) for a in args]
    theirs = [o.numpy() for o in torch.ops.aten.native_group_norm_backward(*t, n, c, hxw, group, [True] * 3)]
    for name, o, th, g in zip(("dx", "dgamma", "dbeta"), ours, theirs, gold, strict=True):
        po, pt = compare(o, g, "float32"), compare(th, g, "float32")
        assert po.mere < THRESHOLD["float32"], f"{name}: {po}"
        if name != "dbeta":  # dbeta does not involve x
            assert po.mere * 3 < pt.mere and po.mare * 3 < pt.mare, f"{name}: ours {po}, torch {pt}"


@pytest.mark.parametrize("mask", [(True, False, False), (False, True, False), (False, False, True),
                                  (False, True, True), (True, True, False)])
@pytest.mark.parametrize("n", [2, 4])
def test_output_mask_skips_outputs(rng, mask, n):
    c, hxw, group = 16, 32, 4
    args = gn_inputs(rng, n, c, hxw, group, "bfloat16")
    full = group_norm_backward(*args, n, c, hxw, group)
    with tilesim.capture() as runs:
        outs = group_norm_backward(*args, n, c, hxw, group, mask)
    for on, o, f in zip(mask, outs, full, strict=True):
        if on:
            np.testing.assert_array_equal(o.view(np.uint16), f.view(np.uint16))
        else:
            assert o is None
    rep = runs[0]
    dx_bytes = n * c * hxw * 2
    assert (rep.total("mte3_bytes") >= dx_bytes) == mask[0]
    if not (mask[1] or mask[2]):
        assert rep.total("atomic_bytes") == 0


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("n", [2, 7])
def test_reductions_bit_identical_across_thread_counts(rng, dtype, n):
    c, hxw, group = 128, 20, 16
    args = gn_inputs(rng, n, c, hxw, group, dtype)
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = group_norm_backward(*args, n, c, hxw, group)
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
        many = group_norm_backward(*args, n, c, hxw, group)
    finally:
        numba.set_num_threads(before)
    for a, b in zip(one, many, strict=True):
        assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize("n,c,hxw,group", [(3, 12, 7, 4), (2, 4, 20000, 2), (5, 64, 1, 4), (4, 24, 100, 3)])
def test_checked_mode_runs_clean_and_matches_fast_mode(rng, n, c, hxw, group):
    args = gn_inputs(rng, n, c, hxw, group, "float16")
    fast = group_norm_backward(*args, n, c, hxw, group)
    checked = group_norm_backward(*args, n, c, hxw, group, checks=True)
    for a, b in zip(fast, checked, strict=True):
        assert a.tobytes() == b.tobytes()


def test_out_arrays_are_written_in_place(rng):
    n, c, hxw, group = 3, 8, 16, 2
    args = gn_inputs(rng, n, c, hxw, group, "float32")
    out = (np.empty((n, c, hxw), np.float32), np.empty(c, np.float32), np.empty(c, np.float32))
    res = group_norm_backward(*args, n, c, hxw, group, out=out)
    assert all(r is o for r, o in zip(res, out, strict=True))
    check_all(res, ref.group_norm_backward(*args, n, c, hxw, group), "float32")


@pytest.mark.parametrize("changes", [dict(core_num=5), dict(ub_mode=1), dict(ub_mode=2), dict(ub_mode=3),
                                     dict(ub_mode=3, mode3_capacity=64), dict(core_num=3, ub_mode=3,
                                                                               mode3_capacity=128)])
def test_hand_made_tilings_give_the_same_numbers(rng, changes):
    n, c, hxw, group = 4, 16, 300, 4
    args = gn_inputs(rng, n, c, hxw, group, "float32")
    t = tiling.group_norm_backward(*args, n, c, hxw, group, **changes)
    assert tiling.group_norm_backward(*args, n, c, hxw, group).ub_mode == 0
    with tilesim.capture() as runs:
        outs = group_norm_backward(*args, n, c, hxw, group, tiling=t)
    assert runs[0].tiling == t and runs[0].block_dim == t.block_dim
    check_all(outs, ref.group_norm_backward(*args, n, c, hxw, group), "float32")


def test_run_report_counts_what_the_kernel_moves(rng):
    n, c, hxw, group = 4, 32, 64, 8
    args = gn_inputs(rng, n, c, hxw, group, "float32")
    with tilesim.capture() as runs:
        group_norm_backward(*args, n, c, hxw, group)
    rep = runs[0]
    t = tiling.group_norm_backward(*args, n, c, hxw, group)
    assert rep.op == "group_norm_backward" and rep.block_dim == t.block_dim
    assert rep.workspace_size == t.workspace_size - SYS_WORKSPACE  # GetUserWorkspace: the 16 MiB not emulated
    big = n * c * hxw * 4
    assert rep.total("mte2_bytes") >= 2 * big  # dy and x, at least once
    assert rep.total("mte3_bytes") >= big  # dx
    assert rep.total("atomic_bytes") > 0  # the partials into the workspace
    assert "UB plan" in str(rep)


def test_a_tampered_tiling_is_refused():
    args = gn_inputs(np.random.default_rng(0), 3, 8, 16, 2, "float32")
    t = tiling.group_norm_backward(*args, 3, 8, 16, 2)
    bad = replace(t, task_num_per_core=t.task_num_per_core + 1)
    with pytest.raises(tilesim.AclnnError) as e:
        group_norm_backward(*args, 3, 8, 16, 2, tiling=bad)
    assert e.value.status == 561002


# --- the decomposition aclnn runs on the 910 training series and 310P -------------------------------------


@pytest.mark.parametrize("soc", ["Ascend910A", "Ascend910ProB", "Ascend310P3"])
def test_decomposition_fp32_meets_the_standard(rng, soc):
    n, c, hxw, group = 3, 24, 49, 6
    args = gn_inputs(rng, n, c, hxw, group, "float32")
    with tilesim.capture() as runs:
        outs = group_norm_backward(*args, n, c, hxw, group, soc=soc)
    assert runs == []  # no GroupNormGrad kernel there
    check_all(outs, ref.group_norm_backward(*args, n, c, hxw, group), "float32")


def test_decomposition_fp16_rounds_every_intermediate(rng):
    """In fp16 each l0 op rounds: x − mean, x̂, dy·x̂ and the per-(n, c) sums over HxW are fp16 before the sum
    over N. The error stays within that rounding, and is far above the kernel's, which keeps fp32 throughout."""
    n, c, hxw, group = 4, 32, 64, 8
    args = gn_inputs(rng, n, c, hxw, group, "float16")
    dx, dgamma, dbeta = group_norm_backward(*args, n, c, hxw, group, soc="Ascend910A")
    gdx, gdg, gdb = ref.group_norm_backward(*args, n, c, hxw, group)
    assert compare(dx, gdx, "float16").mere < THRESHOLD["float16"]
    dy, x, mean, rstd, _ = (np.asarray(a).astype(np.float64) for a in args)
    xhat = (x - np.repeat(mean, c // group, axis=1)[..., None]) * np.repeat(rstd, c // group, axis=1)[..., None]
    u = 2.0 ** -11  # fp16 unit roundoff
    for got, gold, part in ((dgamma, gdg, (dy * xhat).sum(2)), (dbeta, gdb, dy.sum(2))):
        # per element: x − mean, x̂, dy·x̂ (3u), the sum over HxW (u), the sum over N (u)
        bound = 3 * u * np.abs(dy * xhat).sum((0, 2)) + u * np.abs(part).sum(0) + u * np.abs(gold) + 1e-3
        assert np.all(np.abs(got.astype(np.float64) - gold) <= bound)
    kernel = group_norm_backward(*args, n, c, hxw, group, soc="Ascend910B1")
    assert compare(kernel[2], gdb, "float16").mere <= compare(dbeta, gdb, "float16").mere


def test_decomposition_fp16_breaks_on_tiny_variance():
    """var = 1/rstd² − 1e-5 in fp16: rstd² overflows past 255.9, var becomes −1e-5 and BatchNorm's
    1/sqrt(var + 1e-5) is NaN; the 910B kernel uses rstd directly and stays finite."""
    rng = np.random.default_rng(3)
    n, c, hxw, group = 2, 8, 16, 2
    x = (1.0 + 1e-3 * rng.standard_normal((n, c, hxw))).astype(np.float16)
    mean = x.astype(np.float64).reshape(n, group, -1).mean(-1).astype(np.float16)
    rstd = np.full((n, group), 300.0, np.float16)
    dy = rng.standard_normal((n, c, hxw)).astype(np.float16)
    dx910, _, _ = group_norm_backward(dy, x, mean, rstd, None, n, c, hxw, group, soc="Ascend910A")
    dx910b, _, _ = group_norm_backward(dy, x, mean, rstd, None, n, c, hxw, group, soc="Ascend910B1")
    assert not np.isfinite(dx910.astype(np.float32)).any()
    assert np.isfinite(dx910b.astype(np.float32)).all()


def test_the_group_constants_add_reducesum_repeats_in_order():
    """C/G = 256 (HxW = 1, γ = 1, x̂ = 0): c1 = Σdy / 256 comes from ReduceSum's count form over four 64-lane
    repeats, whose sums A2 adds in order: ((1e8 + 1) − 1e8) + 1 = 1, where a tree of them gives
    (1e8 + 1) + (−1e8 + 1) = 0. So dx = dy − c1 is −1/256 where dy is 0."""
    c = 256
    dy = np.zeros((1, c, 1), np.float32)
    dy[0, [0, 64, 128, 192], 0] = [1e8, 1.0, -1e8, 1.0]
    x = np.zeros((1, c, 1), np.float32)
    one, zero = np.ones(1, np.float32), np.zeros(1, np.float32)
    dx, _, dbeta = group_norm_backward(dy, x, zero, one, np.ones(c, np.float32), 1, c, 1, 1)
    assert dx[0, 1, 0] == np.float32(-1.0 / 256)
    np.testing.assert_array_equal(dbeta, dy.reshape(-1))
