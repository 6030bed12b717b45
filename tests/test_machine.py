"""The machine model of tilesim: UB plans, SoC records, per-core launch through the UB arena, DataCopyPad, checked
mode, reduction order, run reports, and RmsNormGrad end to end through ``tilesim.capture``.

The small kernels here are written the way a kernel module writes its own (``kernels/rms_norm_grad.py``): an
``@njit(nogil=True)`` loop over a range of cores (:func:`tilesim.launch.run_cores` gives each host thread its
range) that calls a plain ``@njit`` per-core body, which builds its ``Core`` (the typed views of the arena are taken
inside the body, never before the loop).
"""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest
from numba import njit

import kernels
import tilesim
import tiling
from tilesim.cast import CAST_RINT, KIND_BF16
from tilesim.datamove import (
    data_copy,
    data_copy_out,
    data_copy_pad,
    data_copy_pad_out,
    data_copy_rows,
    data_copy_rows_out,
)
from tilesim.device import COUNTER_NAMES, at, global_tensor, make_core, slot
from tilesim.launch import arena, finish, prepare, run_cores
from tilesim.precision import assert_close
from tilesim.reduce import reduce_sum, reduce_sum_half_interval, whole_reduce_sum
from tilesim.soc import MIB, get_soc, list_socs
from tilesim.ub import BLOCK, UbPlan, align_up
from tilesim.vector import adds, cast_from_f32, cast_to_f32, muls
from tiling.rms_norm_grad import SYS_WORKSPACE

SOC = get_soc("Ascend910B1")


def _counters(rep: tilesim.RunReport) -> dict[str, np.ndarray]:
    return {n: rep.counter(n) for n in COUNTER_NAMES}


# --- UbPlan -----------------------------------------------------------------------------------------------------


def test_ub_plan_offsets_are_aligned_and_sequential():
    plan = UbPlan(196608)
    sizes = [("a", 1, 1), ("b", 32, 1), ("c", 33, 2), ("d", 100, 3), ("e", 4096, 2), ("f", 63, 1)]
    ids = [plan.add(n, b, k) for n, b, k in sizes]
    assert ids == list(range(len(sizes)))
    off = 0
    for buf, (name, nbytes, k) in zip(plan.buffers, sizes, strict=True):
        assert buf.name == name
        assert buf.offset == off and buf.offset % 32 == 0
        assert buf.nbytes == align_up(nbytes, 32) and buf.nbytes % 32 == 0
        assert buf.buffer_num == k and buf.total == buf.nbytes * k  # buffer_num multiplies
        off += buf.nbytes * k
    assert plan.used == off == 32 + 32 + 2 * 64 + 3 * 128 + 2 * 4096 + 64
    assert plan.free == 196608 - off
    assert plan.check() is plan
    arr = plan.as_array()
    assert arr.dtype == np.int64 and arr.shape == (len(sizes), 3)
    assert arr.tolist() == [[b.offset, b.nbytes, b.buffer_num] for b in plan.buffers]
    assert plan.names() == [s[0] for s in sizes]


@pytest.mark.parametrize("nbytes, k", [(-32, 1), (32, 0)])
def test_ub_plan_rejects_empty_buffers(nbytes, k):
    with pytest.raises(ValueError):
        UbPlan(1024).add("bad", nbytes, k)


def test_shared_plans_are_built_once_and_frozen():
    from tilesim.ub import shared_plan

    built = []

    @shared_plan
    def build(n: int) -> UbPlan:
        built.append(n)
        plan = UbPlan(SOC.ub_size)
        plan.add("x", n)
        return plan

    a = build(64)
    assert build(64) is a and built == [64]
    assert a.as_array().tolist() == [[0, 64, 1]] and a.used == 64
    with pytest.raises(RuntimeError, match="frozen"):
        a.add("y", 32)
    with pytest.raises(RuntimeError, match="frozen"):
        a.reset()


def test_ub_plan_zero_bytes_reserves_an_id_and_reset_reuses_the_ub():
    plan = UbPlan(1024)
    assert plan.add("a", 100) == 0 and plan.add("unused", 0) == 1 and plan.add("b", 64) == 2
    assert [b.offset for b in plan.buffers] == [0, 128, 128] and plan.used == 192
    plan.reset()  # TPipe.Reset: a second stage starts from offset 0 again
    assert plan.add("c", 500, 2) == 3
    assert plan.buffers[3].offset == 0 and plan.used == 1024 and plan.check() is plan
    plan.add("d", 32)
    with pytest.raises(tilesim.UbOverflowError, match="d 1 x 32 B = 32 B at 1024"):
        plan.check()
    assert "unused" not in plan.table()


def test_ub_plan_that_fits_exactly_passes():
    plan = UbPlan(1024)
    plan.add("a", 500, 2)  # 512 x 2
    assert plan.check() is plan and plan.free == 0


def test_ub_plan_overflow_names_every_buffer():
    plan = UbPlan(SOC.ub_size)
    plan.add("dy", 24320, 2)
    plan.add("x", 24320, 2)
    plan.add("dx", 24320, 2)
    plan.add("rstd", 100, 2)
    plan.add("gamma", 60000)
    total = 3 * 2 * 24320 + 2 * 128 + 60000
    assert plan.used == total > SOC.ub_size
    with pytest.raises(tilesim.UbOverflowError) as ei:
        plan.check()
    e = ei.value
    assert isinstance(e, tilesim.AclnnError) and isinstance(e, ValueError)
    assert e.status == tilesim.ACLNN_ERR_INNER_TILING_ERROR == 561002
    msg = str(e)
    assert str(total) in msg and str(SOC.ub_size) in msg
    for name, slot_b, k in [("dy", 24320, 2), ("x", 24320, 2), ("dx", 24320, 2), ("rstd", 128, 2),
                            ("gamma", 60000, 1)]:
        assert re.search(rf"\b{name} {k} x {slot_b} B = {k * slot_b} B", msg), (name, msg)
    assert f"over by {total - SOC.ub_size} B" in msg


# --- SoC records ------------------------------------------------------------------------------------------------

# ../shared/reference/ascend-ops.md section 0: (names, ai_core_cnt, vector_core_cnt, ub_size, GetCoreNumAiv, lib ws)
SOC_TABLE = [
    (["Ascend910B1", "Ascend910B2", "Ascend910B2C"], 24, 48, 196608, 48, 16 * MIB),
    (["Ascend910B3", "Ascend910B4", "Ascend910B4-1"], 20, 40, 196608, 40, 16 * MIB),
    (["Ascend910_9381", "Ascend910_9382", "Ascend910_9391", "Ascend910_9392"], 24, 48, 196608, 48, 16 * MIB),
    (["Ascend910_9362", "Ascend910_9372"], 20, 40, 196608, 40, 16 * MIB),
    (["Ascend310P1"], 10, 8, 262144, 10, 2 * MIB),
    (["Ascend310P3", "Ascend310P5", "Ascend310P7"], 8, 7, 262144, 8, 2 * MIB),
    (["Ascend910A", "Ascend910PremiumA", "Ascend910ProA"], 32, 0, 262144, 32, 2 * MIB),
    (["Ascend910ProB"], 30, 0, 262144, 30, 2 * MIB),
]
SOC_ROWS = [(n, *rest) for names, *rest in SOC_TABLE for n in names]


@pytest.mark.parametrize("name, ai, vec, ub, aiv, lib", SOC_ROWS, ids=[r[0] for r in SOC_ROWS])
def test_soc_records(name, ai, vec, ub, aiv, lib):
    s = get_soc(name)
    assert s.name == name
    assert (s.ai_core_cnt, s.vector_core_cnt, s.ub_size) == (ai, vec, ub)
    assert s.core_num_aiv == aiv
    assert s.lib_workspace_size == lib
    assert (s.block_size, s.repeat_size, s.max_repeat_times) == (32, 256, 255)
    assert name in list_socs()
    assert get_soc(s) is s


def test_soc_short_names_and_default():
    assert get_soc().name == tilesim.DEFAULT_SOC == "Ascend910B1"
    short = {"Ascend910B1": "Ascend910B", "Ascend910_9372": "Ascend910_93", "Ascend310P3": "Ascend310P",
             "Ascend910ProB": "Ascend910"}
    for name, s in short.items():
        assert get_soc(name).short_soc == s
    # The legacy Ascend910B.ini describes the old 910 (30 cores, 256 KiB UB), not an A2 part: if the name is
    # known at all, it must not be mistaken for the 910B family.
    if "Ascend910B" in list_socs():
        legacy = get_soc("Ascend910B")
        assert (legacy.short_soc, legacy.ai_core_cnt, legacy.ub_size, legacy.core_num_aiv) == (
            "Ascend910", 30, 262144, 30)


@pytest.mark.parametrize("bad", ["Ascend910C", "ascend910b1", "", None, 910])
def test_unknown_soc_lists_the_known_ones(bad):
    with pytest.raises(tilesim.AclnnError) as ei:
        get_soc(bad)
    e = ei.value
    assert e.status == tilesim.ACLNN_ERR_PARAM_INVALID == 161002
    assert isinstance(e, ValueError)
    for name in [r[0] for r in SOC_ROWS]:
        assert name in str(e)


# --- a copy-and-scale kernel through the UB arena, on several cores ---------------------------------------------

G_SRC, G_DST = 0, 1
B_X, B_Y = 0, 1


@njit(cache=True)
def _scale_core(c, block_dim, arena_, plan, cnt, err, checks, src, dst, rows, d, n, kind, scale, bias):
    """Per core: rows ``[c * rows, +rows)`` of a [*, d] tensor; y = x * scale + bias, ping-pong slots.
    fp32 (kind 0) computes on ``n`` = d elements; b16 lands in the upper half of the fp32 slot, is widened in
    place, computed on ``n`` = align(d, 16) elements and narrowed in place (CAST_RINT)."""
    core = make_core(c, block_dim, arena_, plan, cnt, err, checks)
    gs, gd = global_tensor(G_SRC, src), global_tensor(G_DST, dst)
    for i in range(rows):
        r = c * rows + i
        x, y = slot(core, B_X, i), slot(core, B_Y, i)
        if kind == 0:
            data_copy_pad(core, x, gs, r * d, 1, d, d, 0)
        else:
            data_copy_pad(core, at(x, 2 * n), gs, r * d, 1, d, d, 0)
            cast_to_f32(core, x, at(x, 2 * n), n, kind)
        muls(core, y, x, scale, n)
        adds(core, y, y, bias, n)
        if kind != 0:
            cast_from_f32(core, y, y, n, kind, CAST_RINT)
        data_copy_pad_out(core, gd, r * d, y, 1, d, d)


@njit(cache=True, nogil=True)
def _scale_cores(first, last, block_dim, arena_, plan, cnt, err, checks, src, dst, rows, d, n, kind, scale, bias):
    for c in range(first, last):
        _scale_core(c, block_dim, arena_, plan, cnt, err, checks, src, dst, rows, d, n, kind, scale, bias)


def scale_plan(d: int, soc=SOC) -> tuple[UbPlan, int]:
    da = align_up(d, 16)
    plan = UbPlan(soc.ub_size)
    plan.add("xbuf", 4 * da, 2)
    plan.add("ybuf", 4 * da, 2)
    return plan.check(), da


def run_scale(src: np.ndarray, rows: int, block_dim: int, scale: float, bias: float, checks: bool = False,
              op: str = "scale"):
    """Run the scale kernel on ``src`` [block_dim * rows, d] (float32 or bfloat16); returns (dst, report, launch)."""
    d = src.shape[1]
    bf16 = src.dtype == ml_dtypes.bfloat16
    plan, da = scale_plan(d)
    launch = prepare(op, SOC, None, plan, block_dim, checks, ["src", "dst"])
    dst = np.full(src.shape, np.nan, src.dtype)
    g_src = src.reshape(-1).view(np.uint16) if bf16 else src.reshape(-1)
    g_dst = dst.reshape(-1).view(np.uint16) if bf16 else dst.reshape(-1)
    run_cores(_scale_cores, block_dim, block_dim, launch.arena, launch.plan_array, launch.counters, launch.err,
              checks, g_src, g_dst, rows, d, da if bf16 else d, KIND_BF16 if bf16 else 0, scale, bias)
    return dst, finish(launch), launch


@pytest.mark.parametrize("d", [1, 7, 33, 100, 1000])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("checks", [False, True])
def test_parallel_kernel_writes_land_in_gm_and_arena(d, dtype, checks):
    block_dim, rows = 6, 3
    bf16 = dtype == "bfloat16"
    rng = np.random.default_rng(d)
    src32 = rng.standard_normal((block_dim * rows, d)).astype(np.float32)
    src = src32.astype(ml_dtypes.bfloat16) if bf16 else src32
    scale, bias = 1.75, -0.5
    before = src.copy()
    plan, da = scale_plan(d)
    ar = arena(SOC, block_dim)
    ar[:block_dim, :plan.used] = 0xAB  # stale UB: nothing below may survive where the kernel wrote
    dst, rep, launch = run_scale(src, rows, block_dim, scale, bias, checks)
    assert launch.arena is ar and ar.shape[0] >= block_dim and ar.shape[1] == SOC.ub_size
    assert np.array_equal(src.view(np.uint16), before.view(np.uint16))  # inputs untouched

    # every element of GM was written (dst started as NaN), with fp32 arithmetic and one final RINT cast
    x32 = src.astype(np.float32)
    want32 = x32 * np.float32(scale) + np.float32(bias)
    if bf16:
        assert np.array_equal(dst.view(np.uint16), want32.astype(ml_dtypes.bfloat16).view(np.uint16))
    else:
        assert np.array_equal(dst, want32)

    # the arena holds each core's last two rows: x slots with the input (and the DataCopyPad zeros), y slots
    # with the result
    slot_b = 4 * da
    xoff, yoff = plan.buffers[B_X].offset, plan.buffers[B_Y].offset
    pitch = align_up(d * (2 if bf16 else 4), BLOCK)
    for c in range(block_dim):
        for i in range(max(rows - 2, 0), rows):
            r, k = c * rows + i, i % 2
            xs = ar[c, xoff + k * slot_b: xoff + (k + 1) * slot_b]
            ys = ar[c, yoff + k * slot_b: yoff + (k + 1) * slot_b]
            if bf16:
                # the b16 row landed in the upper half, was zero-filled to 32 B and widened in place (which
                # overwrote the upper half): the fp32 row, then the widened zeros of the pad
                assert np.array_equal(xs[:4 * d].view(np.float32), x32[r])
                assert not xs[4 * d:2 * pitch].any()
                assert np.array_equal(ys[:2 * d].view(np.uint16), dst[r].view(np.uint16))  # narrowed in place
            else:
                assert np.array_equal(xs[:4 * d].view(np.float32), src[r])
                assert not xs[4 * d:pitch].any()  # zero fill to the 32 B boundary
                assert np.array_equal(ys[:4 * d].view(np.float32), dst[r])

    # counters, per core
    cnt = _counters(rep)
    isz = 2 if bf16 else 4
    n = da if bf16 else d
    rep_n = -(-4 * n // 256)
    expect = {"mte2_bytes": rows * d * isz, "mte2_transfers": rows, "mte2_pad_bytes": rows * (pitch - d * isz),
              "mte3_bytes": rows * d * isz, "mte3_transfers": rows, "vec_scalar": rows * 2 * rep_n,
              "vec_cast": rows * 2 * rep_n if bf16 else 0}
    for name in COUNTER_NAMES:
        assert cnt[name].shape == (block_dim,)
        assert (cnt[name] == expect.get(name, 0)).all(), (name, cnt[name], expect.get(name, 0))
    assert rep.total("mte2_bytes") == src.nbytes and rep.total("mte3_bytes") == dst.nbytes
    assert rep.block_dim == block_dim and rep.checks == checks and rep.ub_plan.buffers == plan.buffers


def test_vector_repeats_are_ceil_bytes_over_256():
    """One muls + one adds per row: each counts ceil(4 n / 256) repeats of the vec_scalar class."""
    for d, reps in [(1, 1), (63, 1), (64, 1), (65, 2), (100, 2), (128, 2), (129, 3), (1000, 16)]:
        src = np.ones((2, d), np.float32)
        _, rep, _ = run_scale(src, 1, 2, 2.0, 0.0)
        assert rep.counter("vec_scalar").tolist() == [2 * reps, 2 * reps], d


# --- DataCopyPad zero fill ---------------------------------------------------------------------------------------


@njit(cache=True)
def _pad_core(c, block_dim, arena_, plan, cnt, err, checks, src, dst, rows, row_len, src_stride, dst_stride):
    core = make_core(c, block_dim, arena_, plan, cnt, err, checks)
    t = slot(core, 1, 0)  # buffer 1 of the plan ("rows"), behind a first buffer
    data_copy_pad(core, t, global_tensor(0, src), c * rows * src_stride, rows, row_len, src_stride, 0)
    data_copy_pad_out(core, global_tensor(1, dst), c * rows * dst_stride, t, rows, row_len, dst_stride)


@njit(cache=True, nogil=True)
def _pad_cores(first, last, block_dim, arena_, plan, cnt, err, checks, src, dst, rows, row_len, src_stride,
               dst_stride):
    for c in range(first, last):
        _pad_core(c, block_dim, arena_, plan, cnt, err, checks, src, dst, rows, row_len, src_stride, dst_stride)


@pytest.mark.parametrize("dtype, row_len, rows", [
    (np.float32, 1, 1), (np.float32, 7, 1), (np.float32, 33, 1), (np.uint16, 3, 1), (np.float32, 8, 1),
    (np.float32, 7, 3), (np.float32, 33, 4), (np.uint16, 3, 5), (np.uint16, 17, 2), (np.float32, 1, 9),
])
@pytest.mark.parametrize("checks", [False, True])
def test_data_copy_pad_zero_fills_each_row_to_32_bytes(dtype, row_len, rows, checks):
    block_dim = 3
    isz = np.dtype(dtype).itemsize
    src_stride, dst_stride = row_len + 2, row_len + 5  # gaps in GM on both sides
    pitch = align_up(row_len * isz, BLOCK)
    rng = np.random.default_rng(row_len * 10 + rows)
    src = (rng.integers(1, 60000, size=block_dim * rows * src_stride).astype(dtype) if dtype == np.uint16
           else rng.uniform(1, 2, size=block_dim * rows * src_stride).astype(dtype))
    dst = np.full(block_dim * rows * dst_stride, 77, dtype)
    plan = UbPlan(SOC.ub_size)
    plan.add("pad0", 96)  # so that the buffer under test does not start at 0
    plan.add("rows", rows * pitch + 64)
    plan.check()
    ar = arena(SOC, block_dim)
    ar[:block_dim, :plan.used] = 0xCD
    launch = prepare("pad", SOC, None, plan, block_dim, checks, ["src", "dst"])
    run_cores(_pad_cores, block_dim, block_dim, launch.arena, launch.plan_array, launch.counters, launch.err,
              checks, src, dst, rows, row_len, src_stride, dst_stride)
    rep = finish(launch)
    off = plan.buffers[1].offset
    for c in range(block_dim):
        ub = ar[c, off:off + rows * pitch + 64]
        for r in range(rows):
            row = ub[r * pitch:(r + 1) * pitch]
            g = (c * rows + r) * src_stride
            assert np.array_equal(row[:row_len * isz].view(dtype), src[g:g + row_len])
            assert not row[row_len * isz:].any(), f"core {c} row {r}: pad bytes {row[row_len * isz:]}"
        assert (ub[rows * pitch:] == 0xCD).all()  # nothing written past the last row's boundary
        assert (ar[c, :off] == 0xCD).all()  # nor before the buffer
    # DataCopyPad out: only row_len elements of each row reach GM, the gaps keep their values
    want = np.full_like(dst, 77)
    for q in range(block_dim * rows):
        want[q * dst_stride:q * dst_stride + row_len] = src[q * src_stride:q * src_stride + row_len]
    assert np.array_equal(dst, want)
    assert rep.counter("mte2_pad_bytes").tolist() == [rows * (pitch - row_len * isz)] * block_dim
    assert rep.counter("mte2_bytes").tolist() == [rows * row_len * isz] * block_dim
    assert rep.counter("mte3_bytes").tolist() == [rows * row_len * isz] * block_dim
    assert rep.counter("mte2_transfers").tolist() == [1] * block_dim
    assert rep.counter("mte3_transfers").tolist() == [1] * block_dim


# --- checked mode -----------------------------------------------------------------------------------------------

OK, BAD_LEN, BAD_UB, BAD_GM_IN, BAD_GM_OUT = range(5)
B_PAD, B_BUF = 0, 1
SLOT_ELEMS = 64  # 256 B slots


@njit(cache=True)
def _checked_core(c, block_dim, arena_, plan, cnt, err, checks, src, dst, what):
    core = make_core(c, block_dim, arena_, plan, cnt, err, checks)
    gs, gd = global_tensor(G_SRC, src), global_tensor(G_DST, dst)
    x = slot(core, B_BUF, 1)  # the second slot: offset 256 in the buffer
    n = SLOT_ELEMS
    w = what[c]
    if w == BAD_LEN:
        data_copy(core, x, gs, c * n, 7)  # 28 B: not whole 32 B blocks
    elif w == BAD_GM_IN:
        data_copy(core, x, gs, src.size - 32, n)  # reads 32 elements past the end of src
    else:
        data_copy(core, x, gs, c * n, n)
    if w == BAD_UB:
        muls(core, at(x, 64), x, 2.0, n)  # 256 B from byte 64 of the last slot: leaves the buffer
    else:
        muls(core, x, x, 2.0, n)
    if w == BAD_GM_OUT:
        data_copy_out(core, gd, dst.size - 8, x, n)
    else:
        data_copy_out(core, gd, c * n, x, n)


@njit(cache=True, nogil=True)
def _checked_cores(first, last, block_dim, arena_, plan, cnt, err, checks, src, dst, what):
    for c in range(first, last):
        _checked_core(c, block_dim, arena_, plan, cnt, err, checks, src, dst, what)


def run_checked(what: list[int], checks: bool):
    block_dim = len(what)
    plan = UbPlan(SOC.ub_size)
    plan.add("pad0", 96)
    plan.add("xbuf", 4 * SLOT_ELEMS, 2)
    plan.check()
    src = np.arange(block_dim * SLOT_ELEMS, dtype=np.float32)
    dst = np.zeros_like(src)
    launch = prepare("checked", SOC, None, plan, block_dim, checks, ["src", "dst"])
    run_cores(_checked_cores, block_dim, block_dim, launch.arena, launch.plan_array, launch.counters, launch.err,
              checks, src, dst, np.array(what, np.int64))
    return src, dst, launch


@pytest.mark.parametrize("checks", [False, True])
def test_in_bounds_kernel_runs_with_and_without_checks(checks):
    src, dst, launch = run_checked([OK] * 4, checks)
    rep = finish(launch)
    assert np.array_equal(dst, src * 2)
    assert rep.checks == checks
    assert rep.counter("mte2_bytes").tolist() == [256] * 4
    assert rep.counter("mte3_bytes").tolist() == [256] * 4


def test_partial_block_data_copy_is_fine_without_checks():
    """Checks off: DataCopy of 28 B is not verified (the NPU would copy whole blocks); nothing is raised."""
    _, _, launch = run_checked([OK, BAD_LEN, OK], False)
    rep = finish(launch)
    assert rep.counter("mte2_bytes").tolist() == [256, 28, 256]


N_CORES_CHECKED = 4
N_SRC_BYTES = N_CORES_CHECKED * SLOT_ELEMS * 4


@pytest.mark.parametrize("what, kind, memory, offset, nbytes, phrase", [
    (BAD_LEN, "misaligned DataCopy length", 'UB buffer "xbuf"', 256, 28, "not a whole number of 32 B blocks"),
    (BAD_UB, "UB out of bounds", 'UB buffer "xbuf"', 320, 256, "leaves the LocalTensor (slot of 256 B)"),
    (BAD_GM_IN, "GM out of bounds", 'GM tensor "src"', N_SRC_BYTES - 128, 256, f"the tensor ({N_SRC_BYTES} B)"),
    (BAD_GM_OUT, "GM out of bounds", 'GM tensor "dst"', N_SRC_BYTES - 32, 256, f"the tensor ({N_SRC_BYTES} B)"),
], ids=["datacopy_len", "ub_oob", "gm_oob_in", "gm_oob_out"])
def test_checked_mode_reports_core_buffer_and_offset(what, kind, memory, offset, nbytes, phrase):
    kinds = [OK] * N_CORES_CHECKED
    kinds[2] = what
    _, _, launch = run_checked(kinds, True)
    with tilesim.capture() as runs:
        with pytest.raises(tilesim.CheckError) as ei:
            finish(launch)
    e = ei.value
    assert isinstance(e, tilesim.AclnnError) and isinstance(e, ValueError)
    assert e.status == tilesim.ACLNN_ERR_RUNTIME_ERROR == 361001
    v = e.violations[0]
    assert (v.kind, v.kernel, v.core, v.phase, v.memory, v.offset, v.nbytes) == (kind, "checked", 2, 0, memory,
                                                                                 offset, nbytes)
    assert phrase in v.detail and str(v) in str(e) and e.reports[0] == str(v)
    assert {x.core for x in e.violations} == {2} and e.total == len(e.violations)
    assert v.mssanitizer().startswith(f"====== ERROR: {kind}")
    assert len(runs) == 1  # the report of the failed launch is still captured


def test_checked_mode_reports_every_core():
    _, _, launch = run_checked([BAD_UB, OK, BAD_LEN, BAD_GM_IN, BAD_GM_OUT], True)
    with pytest.raises(tilesim.CheckError) as ei:
        finish(launch)
    first = {}
    for v in ei.value.violations:
        first.setdefault(v.core, v.kind)
    assert first == {0: "UB out of bounds", 2: "misaligned DataCopy length", 3: "GM out of bounds",
                     4: "GM out of bounds"}
    assert f"(and {ei.value.total - 1} more)" in str(ei.value) and ei.value.total >= 4


# --- reduction order --------------------------------------------------------------------------------------------

COUNTS = [1, 7, 63, 64, 65, 100, 128, 4095, 4096, 6080, 20000]  # 20000: 312 full repeats, over 255 per instruction
STRIDE = 20000


@njit(cache=True)
def _reduce_core(c, block_dim, arena_, plan, cnt, err, checks, src, counts, out):
    core = make_core(c, block_dim, arena_, plan, cnt, err, checks)
    t = slot(core, 0, 0)
    n = counts[c]
    data_copy_pad(core, t, global_tensor(0, src), c * STRIDE, 1, n, n, 0)
    out[c, 2] = reduce_sum(core, t, t, t, n)  # in place, as GroupNormGrad calls it
    data_copy_pad(core, t, global_tensor(0, src), c * STRIDE, 1, n, n, 0)
    if n <= 64:
        out[c, 1] = whole_reduce_sum(core, t, n)
    out[c, 0] = reduce_sum_half_interval(core, t, n)


@njit(cache=True, nogil=True)
def _reduce_cores(first, last, block_dim, arena_, plan, cnt, err, checks, src, counts, out):
    for c in range(first, last):
        _reduce_core(c, block_dim, arena_, plan, cnt, err, checks, src, counts, out)


def py_tree64(v: list) -> np.float32:
    """vcadd: 64 lanes (missing ones 0) summed as an adjacent-pair binary tree, in float32."""
    buf = [np.float32(a) for a in v] + [np.float32(0)] * (64 - len(v))
    while len(buf) > 1:
        buf = [np.float32(buf[2 * i] + buf[2 * i + 1]) for i in range(len(buf) // 2)]
    return buf[0]


def py_half_interval(v: list) -> np.float32:
    """ReduceSumHalfInterval as the docstring tells it: the part past the largest power of two is added onto
    the head, the body is halved onto itself down to 64 lanes, then one vcadd."""
    v = [np.float32(a) for a in v]
    n = len(v)
    if n <= 64:
        return py_tree64(v)
    body = 1
    while body * 2 <= n:
        body *= 2
    for i in range(n - body):
        v[i] = np.float32(v[i] + v[body + i])
    while body > 64:
        body //= 2
        for i in range(body):
            v[i] = np.float32(v[i] + v[body + i])
    return py_tree64(v[:64])


def py_reduce_sum(v: list) -> np.float32:
    """ReduceSum: vcadd per 64-lane repeat, then vcadd over those partials, level by level."""
    v = [np.float32(a) for a in v]
    while len(v) > 1:
        v = [py_tree64(v[k:k + 64]) for k in range(0, len(v), 64)]
    return v[0]


@pytest.mark.parametrize("checks", [True, False], ids=["checked build", "fast build"])
def test_reductions_follow_the_documented_order(checks):
    rng = np.random.default_rng(2024)
    # a wide dynamic range, so that the summation order shows in the last bits
    src = (rng.standard_normal((len(COUNTS), STRIDE)) * 10.0 ** rng.uniform(-4, 4, (len(COUNTS), STRIDE)))
    src = src.astype(np.float32)
    plan = UbPlan(SOC.ub_size)
    plan.add("row", 4 * STRIDE)
    plan.check()
    launch = prepare("reduce", SOC, None, plan, len(COUNTS), checks, ["src"])
    out = np.full((len(COUNTS), 3), np.nan, np.float32)
    run_cores(_reduce_cores, len(COUNTS), len(COUNTS), launch.arena, launch.plan_array, launch.counters,
              launch.err, launch.core_checks, src.reshape(-1), np.array(COUNTS, np.int64), out)
    finish(launch)
    differs_from_sequential = 0
    for c, n in enumerate(COUNTS):
        row = src[c, :n].tolist()
        want = py_half_interval(row)
        assert out[c, 0].view(np.uint32) == want.view(np.uint32), (n, out[c, 0], want)
        levels = py_reduce_sum(row)
        assert out[c, 2].view(np.uint32) == levels.view(np.uint32), (n, out[c, 2], levels)
        if n <= 64:
            w64 = py_tree64(row)
            assert out[c, 1].view(np.uint32) == w64.view(np.uint32), (n, out[c, 1], w64)
        seq = np.float32(0)
        for a in src[c, :n]:
            seq = np.float32(seq + a)
        differs_from_sequential += int(seq != want)
    assert differs_from_sequential >= 3  # the data tells the orders apart: the test has teeth


def test_whole_reduce_sum_takes_up_to_255_repeats_an_instruction():
    """ReduceSum over 20000 lanes, level by level: 312 full repeats (255 + 57 in two instructions) and a 32-lane
    tail, then 313 partials (4 repeats, 57 lanes), then 5: six WholeReduceSums, 319 repeats."""
    n = 20000
    src = np.ones((len(COUNTS), STRIDE), np.float32)
    plan = UbPlan(SOC.ub_size)
    plan.add("row", 4 * STRIDE)
    plan.check()

    def call() -> None:
        launch = prepare("reduce", SOC, None, plan, len(COUNTS), False, ["src"])
        out = np.zeros((len(COUNTS), 3), np.float32)
        run_cores(_reduce_cores, len(COUNTS), len(COUNTS), launch.arena, launch.plan_array, launch.counters,
                  launch.err, launch.core_checks, src.reshape(-1), np.array(COUNTS, np.int64), out)
        finish(launch)
        assert out[COUNTS.index(n), 2] == n

    _, reports = tilesim.recorded(call)
    log = reports[0].log[COUNTS.index(n)]
    amounts = log[log[:, 1] == tilesim.device.VEC_REDUCE, 2]
    # reduce_sum's six, then reduce_sum_half_interval's last vcadd
    assert amounts[:6].tolist() == [255, 57, 1, 4, 1, 1] and amounts.max() <= SOC.max_repeat_times


@njit(cache=False)  # not cached: its machine code is inspected
def _fast_build_probe(arena_, plan, cnt, err, checks):
    core = make_core(0, 1, arena_, plan, cnt, err, checks)
    t = slot(core, 0, 0)
    muls(core, t, t, 2.0, 64)
    return reduce_sum(core, t, t, t, 64)


def test_fast_build_compiles_checked_mode_and_recording_out():
    """make_core with checks None is the fast build: neither checked mode's checks nor the recording of
    instructions is compiled into it; with an int (a launch that records) the record build has the recording but
    not the checks; with a bool the checked build has both (and still honours False)."""
    plan = UbPlan(SOC.ub_size)
    plan.add("row", 256)
    for checks in (False, True):
        launch = prepare("probe", SOC, None, plan.check(), 1, checks, [])
        assert launch.core_checks is (True if checks else None)
        _fast_build_probe(launch.arena, launch.plan_array, launch.counters, launch.err, launch.core_checks)
        _fast_build_probe(launch.arena, launch.plan_array, launch.counters, launch.err, checks)
    with tilesim.capture(log=True):
        launch = prepare("probe", SOC, None, plan.check(), 1, False, [])
        assert launch.core_checks == 0 and launch.core_checks is not False
        _fast_build_probe(launch.arena, launch.plan_array, launch.counters, launch.err, launch.core_checks)
        finish(launch)
    irs = {str(sig[-1]): ir for sig, ir in _fast_build_probe.inspect_llvm().items()}
    assert set(irs) == {"none", "int64", "bool"}
    for name in ("_ub_check", "_align_check", "_read_check", "flow1"):
        assert name not in irs["none"] and name not in irs["int64"] and name in irs["bool"], name
    assert "_log" not in irs["none"] and "_log" in irs["int64"] and "_log" in irs["bool"]


# --- run reports ------------------------------------------------------------------------------------------------


def test_capture_collects_one_report_per_launch():
    src = np.arange(4 * 50, dtype=np.float32).reshape(4, 50)
    run_scale(src, 1, 4, 1.0, 0.0, op="outside")  # not captured
    with tilesim.capture() as outer:
        run_scale(src, 2, 2, 1.0, 0.0, op="first")
        with tilesim.capture() as inner:
            run_scale(src, 1, 4, 3.0, 1.0, op="second")
        run_scale(src, 4, 1, 1.0, 0.0, op="third")
    run_scale(src, 1, 4, 1.0, 0.0, op="after")
    assert [r.op for r in outer] == ["first", "second", "third"]
    assert [r.op for r in inner] == ["second"]
    assert all(isinstance(r, tilesim.RunReport) for r in outer)
    assert [r.block_dim for r in outer] == [2, 4, 1]
    assert all(r.counters.shape == (r.block_dim, len(COUNTER_NAMES)) for r in outer)
    rep = outer[1]
    assert rep.soc == SOC.name and rep.wall_s >= 0
    text = str(rep)
    assert text.startswith("second on Ascend910B1: block_dim 4")
    assert "UB plan:" in text and "xbuf" in text and "ybuf" in text
    for b in rep.ub_plan.buffers:
        assert re.search(rf"{b.name}\s+{b.offset}\s+{b.nbytes}\s+{b.buffer_num}\s+{b.total}", text), b
    assert f"used {rep.ub_plan.used} of {SOC.ub_size} B" in text
    assert "counters" in text
    assert re.search(rf"mte2_bytes\s+{src.nbytes}\s+{src.nbytes // 4}", text)
    assert re.search(rf"mte3_bytes\s+{src.nbytes}\s+{src.nbytes // 4}", text)
    assert "vec_scalar" in text and "vec_div" not in text  # only counters that moved are listed


# --- RmsNormGrad end to end -------------------------------------------------------------------------------------


@pytest.mark.parametrize("rows, d", [(37, 64), (100, 8), (9, 1000), (3, 6080), (5, 8192), (1, 16)])
@pytest.mark.parametrize("checks", [False, True])
def test_rms_norm_grad_report(rows, d, checks, tilesim_checks):
    rng = np.random.default_rng(rows * d)
    dy = rng.uniform(-2, 2, (rows, d)).astype(np.float32)
    x = rng.uniform(-2, 2, (rows, d)).astype(np.float32)
    rstd = (1 / np.sqrt(np.mean(x.astype(np.float64) ** 2, axis=1) + 1e-6)).astype(np.float32)
    gamma = rng.uniform(-2, 2, d).astype(np.float32)
    t = tiling.rms_norm_grad(dy, x, rstd, gamma)
    with tilesim.capture() as runs:
        dx, dgamma = kernels.rms_norm_grad(dy, x, rstd, gamma, checks=checks)
    assert len(runs) == 1
    rep = runs[0]
    assert rep.op == "rms_norm_grad" and rep.soc == tilesim.DEFAULT_SOC
    assert rep.block_dim == t.block_dim and rep.tiling == t and rep.checks == (checks or tilesim_checks)
    assert rep.counters.shape[0] == t.block_dim
    assert rep.total("mte2_bytes") >= 2 * rows * d * 4 + rows * 4
    assert rep.total("mte3_bytes") >= rows * d * 4 + d * 4
    assert rep.workspace_size == t.workspace_size - SYS_WORKSPACE  # the user workspace the kernel is given
    assert "rms_norm_grad on Ascend910B1" in str(rep)
    ref_dx, ref_dgamma = kernels.reference.rms_norm_grad(dy, x, rstd, gamma)
    assert_close(dx, ref_dx, what="dx")
    assert_close(dgamma, ref_dgamma, what="dgamma")


# --- DataCopy with DataCopyParams: strided rows ------------------------------------------------------------------

R_BUF = 1  # plan buffer 0 is padding, so the rows buffer does not start at UB offset 0
ROWS_OK, ROWS_BAD_GAP, ROWS_BAD_LEN, ROWS_GM_LAST_IN, ROWS_GM_LAST_OUT, ROWS_BAD_UB, ROWS_UB_ALIGN = range(7)


@njit(cache=True)
def _rows_core(c, block_dim, arena_, plan, cnt, err, checks, src, dst, rows, row_len, src_stride, dst_stride, what):
    """Per core: ``rows`` rows of ``row_len`` from ``src`` (starts ``src_stride`` apart, core c's block at
    c·rows·src_stride) into the packed UB buffer, then back out to ``dst`` with starts ``dst_stride`` apart."""
    core = make_core(c, block_dim, arena_, plan, cnt, err, checks)
    gs, gd = global_tensor(G_SRC, src), global_tensor(G_DST, dst)
    x = slot(core, R_BUF, 0)
    w = what[c]
    s_off, d_off = c * rows * src_stride, c * rows * dst_stride
    if w == ROWS_BAD_GAP:
        data_copy_rows(core, x, gs, s_off, rows, row_len, src_stride + 3)  # a gap 3 elements off whole blocks
    elif w == ROWS_BAD_LEN:
        data_copy_rows(core, x, gs, s_off, rows, row_len - 1, src_stride)
    elif w == ROWS_GM_LAST_IN:
        data_copy_rows(core, x, gs, src.size - row_len - src_stride, rows, row_len, src_stride)  # rows >= 3
    elif w == ROWS_BAD_UB:
        data_copy_rows(core, x, gs, s_off, rows + 1, row_len, src_stride)  # one row more than the slot holds
    elif w == ROWS_UB_ALIGN:
        data_copy_rows(core, at(x, 16), gs, s_off, 1, row_len, src_stride)
    else:
        data_copy_rows(core, x, gs, s_off, rows, row_len, src_stride)
    if w == ROWS_GM_LAST_OUT:
        data_copy_rows_out(core, gd, dst.size - row_len - dst_stride, x, rows, row_len, dst_stride)
    else:
        data_copy_rows_out(core, gd, d_off, x, rows, row_len, dst_stride)


@njit(cache=True, nogil=True)
def _rows_cores(first, last, block_dim, arena_, plan, cnt, err, checks, src, dst, rows, row_len, src_stride,
                dst_stride, what):
    for c in range(first, last):
        _rows_core(c, block_dim, arena_, plan, cnt, err, checks, src, dst, rows, row_len, src_stride, dst_stride,
                   what)


def run_rows(dtype, rows, row_len, src_gap, dst_gap, what, checks, fill=0xCD):
    """Launch the rows kernel on len(what) cores; gaps in elements. Returns (src, dst, plan, arena, launch)."""
    block_dim = len(what)
    isz = np.dtype(dtype).itemsize
    src_stride, dst_stride = row_len + src_gap, row_len + dst_gap
    rng = np.random.default_rng(rows * 1000 + row_len)
    n_src = block_dim * rows * src_stride
    src = (rng.integers(1, 60000, size=n_src).astype(dtype) if dtype == np.uint16
           else rng.uniform(1, 2, size=n_src).astype(dtype))
    dst = np.full(block_dim * rows * dst_stride, 77, dtype)
    plan = UbPlan(SOC.ub_size)
    plan.add("pad0", 96)
    plan.add("rbuf", rows * row_len * isz)
    plan.add("after", 64)
    plan.check()
    ar = arena(SOC, block_dim)
    ar[:block_dim, :plan.used] = fill
    launch = prepare("rows", SOC, None, plan, block_dim, checks, ["src", "dst"])
    run_cores(_rows_cores, block_dim, block_dim, launch.arena, launch.plan_array, launch.counters, launch.err,
              checks, src, dst, rows, row_len, src_stride, dst_stride, np.array(what, np.int64))
    return src, dst, plan, ar, launch


@pytest.mark.parametrize("dtype, row_len", [(np.float32, 8), (np.float32, 24), (np.uint16, 16), (np.uint16, 48)])
@pytest.mark.parametrize("rows", [1, 3, 5])
@pytest.mark.parametrize("gaps", [(0, 0), (1, 2), (3, 0)], ids=["dense", "gaps", "src-gap"])
@pytest.mark.parametrize("checks", [False, True])
def test_data_copy_rows_strided_in_and_out(dtype, row_len, rows, gaps, checks):
    block_dim = 3
    isz = np.dtype(dtype).itemsize
    blk = 32 // isz
    src_gap, dst_gap = gaps[0] * blk, gaps[1] * blk  # whole 32 B blocks
    src_stride, dst_stride = row_len + src_gap, row_len + dst_gap
    src, dst, plan, ar, launch = run_rows(dtype, rows, row_len, src_gap, dst_gap, [ROWS_OK] * block_dim, checks)
    rep = finish(launch)
    off, nbytes = plan.buffers[R_BUF].offset, rows * row_len * isz
    for c in range(block_dim):
        ub = ar[c, off:off + nbytes].view(dtype)
        want = np.concatenate([src[(c * rows + r) * src_stride:(c * rows + r) * src_stride + row_len]
                               for r in range(rows)])
        assert np.array_equal(ub, want), f"core {c}: rows not packed back to back in the UB"
        assert (ar[c, :off] == 0xCD).all() and (ar[c, off + nbytes:plan.used] == 0xCD).all()
    want = np.full_like(dst, 77)  # the gaps in GM keep their values
    for q in range(block_dim * rows):
        want[q * dst_stride:q * dst_stride + row_len] = src[q * src_stride:q * src_stride + row_len]
    assert np.array_equal(dst, want)
    assert rep.counter("mte2_bytes").tolist() == [nbytes] * block_dim  # only the rows, not the gaps
    assert rep.counter("mte3_bytes").tolist() == [nbytes] * block_dim
    assert rep.counter("mte2_transfers").tolist() == [1] * block_dim  # one instruction for all the rows
    assert rep.counter("mte3_transfers").tolist() == [1] * block_dim
    assert rep.counter("mte2_pad_bytes").tolist() == [0] * block_dim


def test_data_copy_and_data_copy_out_are_one_row():
    _, dst, _, _, launch = run_rows(np.float32, 1, 64, 0, 0, [ROWS_OK] * 2, True)
    rep = finish(launch)
    assert rep.counter("mte2_bytes").tolist() == [256, 256]
    assert not (dst == 77).any()


ROWS_SRC_BYTES = 2 * 3 * (8 + 8) * 4  # two cores, 3 rows of 8 fp32 every 16
ROWS_DST_BYTES = 2 * 3 * (8 + 16) * 4  # every 24
# The last-row cases start one row and one stride before the end: the first row is inside the tensor, the third
# starts a gap past its end.


@pytest.mark.parametrize("what, kind, memory, offset, nbytes, phrase", [
    (ROWS_BAD_GAP, "misaligned DataCopy stride", 'UB buffer "rbuf"', 0, 32, "44 B apart in GM"),
    (ROWS_BAD_LEN, "misaligned DataCopy length", 'UB buffer "rbuf"', 0, 28, "not a whole number of 32 B blocks"),
    (ROWS_GM_LAST_IN, "GM out of bounds", 'GM tensor "src"', ROWS_SRC_BYTES + 8 * 4, 32,
     f"the tensor ({ROWS_SRC_BYTES} B)"),
    (ROWS_GM_LAST_OUT, "GM out of bounds", 'GM tensor "dst"', ROWS_DST_BYTES + 16 * 4, 32,
     f"the tensor ({ROWS_DST_BYTES} B)"),
    (ROWS_BAD_UB, "UB out of bounds", 'UB buffer "rbuf"', 0, 128, "(slot of 96 B)"),
    (ROWS_UB_ALIGN, "misaligned DataCopy address", 'UB buffer "rbuf"', 16, 32, "not 32 B aligned"),
], ids=["gap", "row_len", "gm_last_row_in", "gm_last_row_out", "ub_oob", "ub_align"])
def test_checked_data_copy_rows_reports(what, kind, memory, offset, nbytes, phrase):
    # fp32 rows of 8 (32 B), src rows 16 apart (a gap of 32 B), dst rows 24 apart (64 B); core 1 misbehaves
    src, dst, _, _, launch = run_rows(np.float32, 3, 8, 8, 16, [ROWS_OK, what], True)
    with pytest.raises(tilesim.CheckError) as ei:
        finish(launch)
    v = ei.value.violations[0]
    assert (v.kind, v.kernel, v.core, v.memory, v.offset, v.nbytes) == (kind, "rows", 1, memory, offset, nbytes), v
    assert phrase in v.detail, v
    # the well-behaved core is unaffected: its three rows are out, 24 apart
    for r in range(3):
        assert np.array_equal(dst[r * 24:r * 24 + 8], src[r * 16:r * 16 + 8])


def test_data_copy_rows_checks_the_gap_not_the_stride():
    # fp16 rows of 16 (32 B): a stride of 32 elements is a whole-block gap, a stride of 24 is not (16 B)
    _, _, _, _, launch = run_rows(np.uint16, 2, 16, 16, 16, [ROWS_OK], True)
    finish(launch)
    _, _, _, _, launch = run_rows(np.uint16, 2, 16, 8, 16, [ROWS_OK], True)
    with pytest.raises(tilesim.CheckError) as ei:
        finish(launch)
    assert "not a whole number of 32 B blocks" in ei.value.reports[0]
    # without checks the same copy runs (the NPU would not be asked to verify it)
    src, dst, _, _, launch = run_rows(np.uint16, 2, 16, 8, 16, [ROWS_OK], False)
    finish(launch)
    assert np.array_equal(dst[:16], src[:16]) and np.array_equal(dst[32:48], src[24:40])


def test_instruction_timer_runs_both_builds(monkeypatch):
    """``python -m bench.instructions`` (per-call cost of single instructions, fast and checked build)."""
    from bench import instructions

    monkeypatch.setattr(instructions, "CALLS", 1000)  # calls enough to stand out of a launch's jitter (µs)
    rows = instructions.measure([64])
    assert [r[0] for r in rows] == instructions.INSTRUCTIONS
    assert all(fast > 0 and checked > 0 for _, _, fast, checked in rows)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_untiled_baseline_matches_the_kernel(dtype):
    """bench.untiled (the hand-written fused RmsNormGrad the benchmark sets beside tilesim) computes the op: its
    dx equals the tiled kernel's to an ulp or so (the same formula, other rounding points), its dgamma is close."""
    from bench import untiled

    dt = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(np.float32)
    rng = np.random.default_rng(11)
    n, d = 96, 200
    x = rng.uniform(-2, 2, (n, d)).astype(np.float32).astype(dt)
    dy = rng.standard_normal((n, d), dtype=np.float32).astype(dt)
    x32 = x.astype(np.float32)
    rstd = (1 / np.sqrt((x32 * x32).mean(axis=1) + np.float32(1e-6))).astype(np.float32)
    gamma = rng.uniform(0.5, 1.5, d).astype(np.float32)
    dx = np.empty_like(dy)
    dgamma = untiled.rms_norm_grad(dy, x, rstd, gamma, dx, np.empty((2, d), np.float32))
    want_dx, want_dgamma = kernels.rms_norm_grad(dy, x, rstd, gamma)
    ulp = 2.0 ** -7 if dtype == "bfloat16" else 2.0 ** -23
    scale = np.abs(want_dx.astype(np.float64)).max()
    assert np.abs(dx.astype(np.float64) - want_dx.astype(np.float64)).max() <= 4 * ulp * scale
    np.testing.assert_allclose(dgamma, want_dgamma, rtol=1e-5, atol=1e-5 * np.abs(want_dgamma).max())


def test_kernel_traffic_is_what_the_emulated_kernel_moved():
    """bench.record.kernel_traffic (the GM/op and UB/op columns of ``make bench``): SwiGluGrad on aligned rows reads
    dy and x and writes dx once, so its GM bytes are exactly those; its UB bytes are its vector repeats' 256 B."""
    from bench.record import kernel_traffic

    rng = np.random.default_rng(5)
    x = rng.standard_normal((64, 512), dtype=np.float32)
    dy = rng.standard_normal((64, 256), dtype=np.float32)
    traffic = kernel_traffic(lambda: kernels.swiglu_grad(dy, x, -1))
    assert traffic["gm_bytes"] == dy.nbytes + 2 * x.nbytes
    with tilesim.capture() as runs:
        kernels.swiglu_grad(dy, x, -1)
    repeats = sum(r.total(n) for r in runs for n in tilesim.COUNTER_NAMES if n.startswith("vec_"))
    assert repeats > 0 and traffic["ub_bytes"] == 256 * repeats
