"""The machine model of tilesim: UB plans, SoC records, a kernel on the programming model launched on several
cores (what lands in GM, the UB rows DataCopy and DataCopyPad leave, the per-core counters), checked mode's
reports (core, buffer, offset), the fast build without checked mode's code or the recording, run reports through
``tilesim.capture``, RmsNormGrad end to end, and the benchmark's instruction timer, untiled baseline and traffic.

The kernel here (``rows_kernel``) is written the way a kernel module writes its own: CopyIn, Compute and CopyOut
through queues. One kernel in two element types serves every test of the section, so that the file compiles few
(kernel, dtype, build) combinations.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

import ml_dtypes
import numpy as np
import pytest
import tilesim.kernels as kernels
import tilesim.tiling as tiling
from conftest import as_asked
from tilesim.tiling.rms_norm_grad import SYS_WORKSPACE

import tilesim
from tilesim import machine as asc  # AscendC::
from tilesim.core.ub import BLOCK, UbPlan, align_up
from tilesim.jit import njit
from tilesim.precision import assert_close
from tilesim.runtime import launcher
from tilesim.runtime.launcher import kernel, launch
from tilesim.soc import MIB, get_soc, list_socs

SOC = get_soc("Ascend910B1")
BF16 = np.dtype(ml_dtypes.bfloat16)


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
    from tilesim.core.ub import shared_plan

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


# --- a kernel on the programming model, on several cores --------------------------------------------------------

# DataCopyPad padded with zeros to the 32 B end (isPad, right padding); DataCopy with DataCopyParams; DataCopy of a
# count; DataCopyPad without padding, isPad false (the row's end to the 32 B boundary: dummy bytes)
COPY_PAD, COPY_ROWS, COPY_COUNT, COPY_DUMMY = range(4)
OK, BAD_LEN, BAD_UB_COPY, BAD_UB_ALIGN, BAD_UB_VEC, BAD_GM_IN, BAD_GM_OUT = range(7)  # a core's mistake
SENTINEL = -12851  # int16 0xCDCD: a dump shows 0xCD bytes where nothing wrote


@dataclass(frozen=True)
class RowsTiling:
    """Core c takes rows ``[c·rows, (c+1)·rows)`` of ``d`` elements, ``d + src_gap`` apart in src, in tiles of
    ``tile_rows`` rows; y = x · scale + bias in fp32 (b16 widened and narrowed to nearest even), rows ``d +
    dst_gap`` apart in dst. ``copy`` picks the copies (COPY_*); ``dump`` fills the x slot with SENTINEL before the
    copy in and copies the whole slot out to ``ub`` (tile k of the launch at ``k·slot``); ``bad``: core c's
    mistake (OK, BAD_*) in bits 3c to 3c + 2, made on its last tile."""

    rows: int
    d: int
    tile_rows: int = 1
    src_gap: int = 0
    dst_gap: int = 0
    scale: float = 1.0
    bias: float = 0.0
    copy: int = COPY_PAD
    dump: int = 0
    bad: int = 0


def bad_cores(*what: int) -> int:
    """RowsTiling.bad for cores 0, 1, ... making the mistakes ``what``."""
    return sum(w << 3 * c for c, w in enumerate(what))


def pitch_of(d: int, isz: int) -> int:
    """Elements from one UB row to the next: each row starts on 32 B."""
    return align_up(d * isz, BLOCK) // isz


def slot_of(t: RowsTiling, isz: int) -> int:
    """Elements of an x slot: the tile's rows, and 64 B past them when dumped (nothing may land there)."""
    return t.tile_rows * pitch_of(t.d, isz) + (64 // isz if t.dump else 0)


@kernel
def rows_kernel(ctx, t, src, dst, ub):
    sz, c = asc.size_of(src.dtype), asc.get_block_idx(ctx)
    pitch = (t.d * sz + 31) // 32 * 32 // sz
    slot = t.tile_rows * pitch + (64 // sz if t.dump else 0)
    pipe = asc.TPipe(ctx)
    in_x = pipe.init_buffer(asc.TQue(asc.VECIN, 1), 2, slot * sz)
    out_y = pipe.init_buffer(asc.TQue(asc.VECOUT, 1), 2, slot * sz)
    out_ub = pipe.init_buffer(asc.TQue(asc.VECOUT, 1), 1, slot * sz if t.dump else 0)
    x32 = pipe.init_buffer(asc.TBuf(asc.VECCALC), pitch * 4 if sz == 2 else 0)  # b16 computes in fp32
    s_stride, d_stride, blk = t.d + t.src_gap, t.d + t.dst_gap, 32 // sz
    end = (c + 1) * t.rows
    for first in range(c * t.rows, end, t.tile_rows):
        k = min(t.tile_rows, end - first)
        what = t.bad >> 3 * c & 7 if first + k == end else OK  # the last tile: with two, in the second slot
        # CopyIn
        xl = in_x.alloc_tensor(src.dtype)
        if t.dump:  # the sentinel under the rows, written before MTE2 writes them
            asc.duplicate(xl.reinterpret_cast(asc.int16), SENTINEL, slot * sz // 2)
            e = pipe.fetch_event_id(asc.HardEvent.V_MTE2)
            asc.set_flag(ctx, asc.HardEvent.V_MTE2, e)
            asc.wait_flag(ctx, asc.HardEvent.V_MTE2, e)
        xd, g, rows_in = xl, src[first * s_stride], k
        if what == BAD_GM_IN:  # the tile's last row ends a 32 B block past the tensor
            g = src[src.get_size() - (k - 1) * s_stride - t.d + blk]
        elif what == BAD_UB_COPY:  # a row more than the slot holds
            rows_in = t.tile_rows + 1
        elif what == BAD_UB_ALIGN:  # 16 B into the slot
            xd, rows_in = xl[16 // sz], 1
        if what == BAD_LEN:  # not a whole number of 32 B blocks
            asc.data_copy(xd, g, t.d - 1)
        elif t.copy == COPY_PAD or t.copy == COPY_DUMMY:
            pad = asc.DataCopyPadExtParams(True, 0, pitch - t.d, 0) if t.copy == COPY_PAD else \
                asc.DataCopyPadExtParams(False, 0, 0, 0)
            asc.data_copy_pad(xd, g, asc.DataCopyExtParams(rows_in, t.d * sz, t.src_gap * sz, 0), pad)
        elif t.copy == COPY_ROWS:
            asc.data_copy(xd, g, asc.DataCopyParams(rows_in, t.d // blk, t.src_gap // blk, 0))
        else:  # the tile's rows back to back in GM (no src_gap)
            asc.data_copy(xd, g, rows_in * t.d)
        in_x.enque(xl)
        # Compute
        xl, yl = in_x.deque(src.dtype), out_y.alloc_tensor(src.dtype)
        if what == BAD_UB_VEC:  # 64 B into the slot, a slot long
            asc.muls(yl[64 // sz], xl, t.scale, slot)
        for r in range(k):
            x, y = xl[r * pitch], yl[r * pitch]
            if sz == 4:  # on the row's elements
                asc.muls(y, x, t.scale, t.d)
                asc.adds(y, y, t.bias, t.d)
            else:  # on the row's 32 B blocks, padding included (never written out)
                a = x32.get(asc.float32)
                asc.cast(a, x, asc.CAST_NONE, pitch)
                asc.muls(a, a, t.scale, pitch)
                asc.adds(a, a, t.bias, pitch)
                asc.cast(y, a, asc.CAST_RINT, pitch)
        if t.dump:  # the x slot as the copy in left it
            u = out_ub.alloc_tensor(src.dtype)
            asc.data_copy(u, xl, slot)
            out_ub.enque(u)
        in_x.free_tensor(xl)
        out_y.enque(yl)
        # CopyOut
        yl = out_y.deque(src.dtype)
        h = dst[first * d_stride]
        if what == BAD_GM_OUT:
            h = dst[dst.get_size() - (k - 1) * d_stride - t.d + blk]
        if t.copy == COPY_PAD or t.copy == COPY_DUMMY:
            asc.data_copy_pad(h, yl, asc.DataCopyExtParams(k, t.d * sz, 0, t.dst_gap * sz))
        elif t.copy == COPY_ROWS:
            asc.data_copy(h, yl, asc.DataCopyParams(k, t.d // blk, 0, t.dst_gap // blk))
        else:
            asc.data_copy(h, yl, k * t.d)
        out_y.free_tensor(yl)
        if t.dump:
            u = out_ub.deque(src.dtype)
            asc.data_copy(ub[first // t.tile_rows * slot], u, slot)
            out_ub.free_tensor(u)


def run_rows(src: np.ndarray, t: RowsTiling, block_dim: int, checks: bool = False, op: str = "rows",
             fill: float = 77) -> tuple[np.ndarray, np.ndarray, tilesim.RunReport]:
    """Launch the kernel on ``src`` (flat); dst starts as ``fill`` (its gaps must keep it), ub as SENTINEL bytes.
    Returns (dst, ub, report)."""
    isz = src.itemsize
    dst = np.full(block_dim * t.rows * (t.d + t.dst_gap), fill, src.dtype)
    n_ub = block_dim * t.rows // t.tile_rows * slot_of(t, isz) if t.dump else BLOCK // isz
    ub = np.full(n_ub * isz, 0xCD, np.uint8).view(src.dtype)
    rep = launch(rows_kernel, t, src, dst, ub, block_dim=block_dim, outputs=2, soc=SOC, checks=checks, op=op,
                 gm_names=["src", "dst", "ub"])
    return dst, ub, rep


def want_rows(src: np.ndarray, dst: np.ndarray, t: RowsTiling, block_dim: int) -> np.ndarray:
    """What dst must hold: each row of src where it goes, the gaps as they were."""
    want = dst.copy()
    for q in range(block_dim * t.rows):
        s, o = q * (t.d + t.src_gap), q * (t.d + t.dst_gap)
        want[o:o + t.d] = src[s:s + t.d]
    return want


def inputs(dtype: np.dtype, n: int, seed: int) -> np.ndarray:
    """n values in [1, 2), exact in dtype: y = x · 1 + 0 copies them, widened and narrowed alike."""
    return np.random.default_rng(seed).uniform(1, 2, n).astype(np.float32).astype(dtype)


@pytest.mark.parametrize("d", [1, 7, 33, 100, 1000])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("checks", [False, True])
def test_parallel_kernel_writes_land_in_gm(d, dtype, checks, tilesim_checks):
    block_dim, rows = 6, 3
    bf16 = dtype == "bfloat16"
    rng = np.random.default_rng(d)
    src32 = rng.standard_normal(block_dim * rows * d).astype(np.float32)
    src = src32.astype(BF16) if bf16 else src32
    before = src.copy()
    t = RowsTiling(rows, d, scale=1.75, bias=-0.5)  # a row a tile: the two slots of each queue take turns
    dst, _, rep = run_rows(src, t, block_dim, checks)
    assert np.array_equal(src.view(np.uint16), before.view(np.uint16))  # inputs untouched

    # every element of GM was written, with fp32 arithmetic and one final RINT cast
    want32 = src.astype(np.float32) * np.float32(1.75) + np.float32(-0.5)
    if bf16:
        assert np.array_equal(dst.view(np.uint16), want32.astype(BF16).view(np.uint16))
    else:
        assert np.array_equal(dst, want32)

    # counters, per core: fp32 computes on the row's d elements, b16 on its 32 B blocks
    isz = src.itemsize
    pitch = pitch_of(d, isz)
    reps = -(-4 * (pitch if bf16 else d) // 256)
    expect = {"mte2_bytes": rows * d * isz, "mte2_transfers": rows, "mte2_pad_bytes": rows * (pitch - d) * isz,
              "mte3_bytes": rows * d * isz, "mte3_transfers": rows, "vec_scalar": rows * 2 * reps,
              "vec_cast": rows * 2 * reps if bf16 else 0,
              # the queues' syncs: each EnQue and FreeTensor sets a flag; each DeQue waits, and so does each
              # AllocTensor of a slot freed before (from the third tile on, two queues)
              "set_flags": 4 * rows, "wait_flags": 2 * rows + 2 * max(rows - 2, 0)}
    for name in tilesim.COUNTER_NAMES:
        got = rep.counter(name)
        assert got.shape == (block_dim,)
        assert (got == expect.get(name, 0)).all(), (name, got, expect.get(name, 0))
    assert rep.total("mte2_bytes") == src.nbytes and rep.total("mte3_bytes") == dst.nbytes
    assert rep.block_dim == block_dim and rep.checks == (checks or tilesim_checks)
    slot_b = pitch * isz  # as the kernel's InitBuffer calls placed them, in their order
    assert [(b.name, b.nbytes, b.buffer_num) for b in rep.ub_plan.buffers] == [
        ("in_x", slot_b, 2), ("out_y", slot_b, 2), ("out_ub", 0, 1), ("x32", 4 * pitch if bf16 else 0, 1)]


def test_vector_repeats_are_ceil_bytes_over_256():
    """One Muls + one Adds per row: each counts ceil(4 n / 256) repeats of the vec_scalar class."""
    for d, reps in [(1, 1), (63, 1), (64, 1), (65, 2), (100, 2), (128, 2), (129, 3), (1000, 16)]:
        _, _, rep = run_rows(np.ones(2 * d, np.float32), RowsTiling(1, d, scale=2.0), 2)
        assert rep.counter("vec_scalar").tolist() == [2 * reps, 2 * reps], d


# --- what DataCopyPad and DataCopy leave in the UB and in GM -------------------------------------------------------


def check_ub_rows(ub: np.ndarray, src: np.ndarray, t: RowsTiling, block_dim: int) -> None:
    """Each core's dumped x slot: its rows from their 32 B starts, each filled to its 32 B end with zeros (COPY_PAD)
    or its first element (COPY_DUMMY), and the sentinel past the last row (nothing written there)."""
    isz = src.itemsize
    pitch_b, slot_b = pitch_of(t.d, isz) * isz, slot_of(t, isz) * isz
    raw = ub.view(np.uint8)
    for c in range(block_dim):
        s = raw[c * slot_b:(c + 1) * slot_b]
        for r in range(t.rows):
            row = s[r * pitch_b:(r + 1) * pitch_b]
            g = (c * t.rows + r) * (t.d + t.src_gap)
            assert np.array_equal(row[:t.d * isz].view(src.dtype).view(np.uint16 if isz == 2 else np.uint32),
                                  src[g:g + t.d].view(np.uint16 if isz == 2 else np.uint32)), (c, r)
            tail = row[t.d * isz:]
            want = np.tile(row[:isz], tail.size // isz) if t.copy == COPY_DUMMY else np.zeros_like(tail)
            assert np.array_equal(tail, want), f"core {c} row {r}: bytes past the data {tail}"
        assert (s[t.rows * pitch_b:] == 0xCD).all(), f"core {c}: written past the last row"


@pytest.mark.parametrize("dtype, row_len, rows", [
    (np.float32, 1, 1), (np.float32, 7, 1), (np.float32, 33, 1), (BF16, 3, 1), (np.float32, 8, 1),
    (np.float32, 7, 3), (np.float32, 33, 4), (BF16, 3, 5), (BF16, 17, 2), (np.float32, 1, 9),
])
@pytest.mark.parametrize("checks", [False, True])
def test_data_copy_pad_right_padding_zero_fills_each_row_to_32_bytes(dtype, row_len, rows, checks):
    block_dim = 3
    isz = np.dtype(dtype).itemsize
    t = RowsTiling(rows, row_len, tile_rows=rows, src_gap=2, dst_gap=5, dump=1)  # gaps in GM on both sides
    src = inputs(dtype, block_dim * rows * (row_len + 2), row_len * 10 + rows)
    dst, ub, rep = run_rows(src, t, block_dim, checks)
    check_ub_rows(ub, src, t, block_dim)
    # DataCopyPad out: only row_len elements of each row reach GM, the gaps keep their values
    assert np.array_equal(dst.view(np.uint8), want_rows(src, np.full_like(dst, 77), t, block_dim).view(np.uint8))
    pitch = pitch_of(row_len, isz)
    assert rep.counter("mte2_pad_bytes").tolist() == [rows * (pitch - row_len) * isz] * block_dim
    assert rep.counter("mte2_bytes").tolist() == [rows * row_len * isz] * block_dim
    assert rep.counter("mte2_transfers").tolist() == [1] * block_dim  # one instruction for all the rows
    # the rows, then the dump of the slot
    assert rep.counter("mte3_bytes").tolist() == [rows * row_len * isz + slot_of(t, isz) * isz] * block_dim
    assert rep.counter("mte3_transfers").tolist() == [2] * block_dim


@pytest.mark.parametrize("dtype, row_len, rows", [(np.float32, 7, 3), (BF16, 3, 2), (np.float32, 8, 2)])
def test_data_copy_pad_without_padding_repeats_each_row_first_element(dtype, row_len, rows):
    """isPad false, no padding: the bytes from each row's end to its 32 B end repeat the row's first element
    (DataCopyPad（GMToUB非对齐数据搬运）.md, 示例2), in both builds; checked mode takes them as never written, so
    the dump of the slot (a copy out of them) is a finding, at the first row's first dummy byte."""
    block_dim = 3
    isz = np.dtype(dtype).itemsize
    t = RowsTiling(rows, row_len, tile_rows=rows, src_gap=2, copy=COPY_DUMMY, dump=1)
    src = inputs(dtype, block_dim * rows * (row_len + 2), row_len * 10 + rows)
    with as_asked():
        dst, ub, rep = run_rows(src, t, block_dim)
    check_ub_rows(ub, src, t, block_dim)
    assert np.array_equal(dst.view(np.uint8), want_rows(src, np.full_like(dst, 77), t, block_dim).view(np.uint8))
    dummy = pitch_of(row_len, isz) - row_len
    assert rep.counter("mte2_pad_bytes").tolist() == [rows * dummy * isz] * block_dim
    if dummy == 0:  # whole blocks: no dummy bytes, nothing to report
        run_rows(src, t, block_dim, checks=True)
        return
    with pytest.raises(tilesim.CheckError) as e:
        run_rows(src, t, block_dim, checks=True)
    v = e.value.violations[0]
    assert (v.kind, v.memory, v.core) == ("uninitialised read", 'UB buffer "out_ub"', 0)
    assert f"read of {rows * dummy * isz} B of UB never written, the first {row_len * isz} B into" in v.detail


@kernel
def pad_value(ctx, t, a, out):
    """DataCopyPad of 3 elements with 5 elements of right padding of 1.5 (isPad), the 32 B out whole."""
    pipe = asc.TPipe(ctx)
    q = pipe.init_buffer(asc.TQue(asc.VECIN, 1), 1, 32)
    x = q.alloc_tensor(a.dtype)
    sz = asc.size_of(a.dtype)
    asc.data_copy_pad(x, a, asc.DataCopyExtParams(1, 3 * sz, 0, 0), asc.DataCopyPadExtParams(True, 0, 32 // sz - 3,
                                                                                            1.5))
    q.enque(x)
    x = q.deque(a.dtype)
    asc.set_flag(ctx, asc.HardEvent.V_MTE3, 0)
    asc.wait_flag(ctx, asc.HardEvent.V_MTE3, 0)
    asc.data_copy(out, x, 32 // sz)
    q.free_tensor(x)


@pytest.mark.parametrize("dtype", [np.float16, np.int32])
def test_data_copy_pad_padding_value_is_a_value_of_the_type(dtype):
    """paddingValue is a T: 1.5 pads half with 0x3E00 (not the bits 0x0001) and int32 with 1 (not 1.5's float
    bits)."""
    n = 32 // np.dtype(dtype).itemsize
    a = np.arange(1, 4).astype(dtype)
    out = np.zeros(n, dtype)
    launch(pad_value, RowsTiling(0, 0), a, out, block_dim=1, checks=True)
    np.testing.assert_array_equal(out, np.concatenate([a, np.full(n - 3, dtype(1.5))]))


@pytest.mark.parametrize("dtype, row_len", [(np.float32, 8), (np.float32, 24), (BF16, 16), (BF16, 48)])
@pytest.mark.parametrize("rows", [1, 3, 5])
@pytest.mark.parametrize("gaps", [(0, 0), (1, 2), (3, 0)], ids=["dense", "gaps", "src-gap"])
@pytest.mark.parametrize("checks", [False, True])
def test_data_copy_rows_strided_in_and_out(dtype, row_len, rows, gaps, checks):
    block_dim = 3
    isz = np.dtype(dtype).itemsize
    blk = BLOCK // isz
    t = RowsTiling(rows, row_len, tile_rows=rows, src_gap=gaps[0] * blk, dst_gap=gaps[1] * blk, copy=COPY_ROWS,
                   dump=1)  # gaps of whole 32 B blocks, as DataCopyParams gives them
    src = inputs(dtype, block_dim * rows * (row_len + t.src_gap), rows * 1000 + row_len)
    dst, ub, rep = run_rows(src, t, block_dim, checks)
    check_ub_rows(ub, src, t, block_dim)  # whole blocks: the rows back to back, no padding
    assert np.array_equal(dst.view(np.uint8), want_rows(src, np.full_like(dst, 77), t, block_dim).view(np.uint8))
    nbytes = rows * row_len * isz
    assert rep.counter("mte2_bytes").tolist() == [nbytes] * block_dim  # only the rows, not the gaps
    assert rep.counter("mte2_transfers").tolist() == [1] * block_dim  # one instruction for all the rows
    assert rep.counter("mte2_pad_bytes").tolist() == [0] * block_dim
    assert rep.counter("mte3_bytes").tolist() == [nbytes + slot_of(t, isz) * isz] * block_dim
    assert rep.counter("mte3_transfers").tolist() == [2] * block_dim


def test_data_copy_of_a_count_is_one_row():
    src = inputs(np.float32, 2 * 64, 0)
    dst, _, rep = run_rows(src, RowsTiling(1, 64, copy=COPY_COUNT), 2, True)
    assert rep.counter("mte2_bytes").tolist() == [256, 256] and rep.counter("mte2_transfers").tolist() == [1, 1]
    assert rep.counter("mte3_bytes").tolist() == [256, 256] and rep.counter("mte3_transfers").tolist() == [1, 1]
    assert np.array_equal(dst, src)


# --- checked mode -----------------------------------------------------------------------------------------------

# Two layouts. COUNT: 64 fp32 (256 B) a row, two rows a core, a row a tile: a core's last tile is in the second
# slot of each queue (offset 256). ROWS: three rows of 8 fp32 a tile, 16 apart in src and 24 in dst.
COUNT = RowsTiling(2, 64, copy=COPY_COUNT, scale=2.0)
ROWS = RowsTiling(3, 8, tile_rows=3, src_gap=8, dst_gap=16, copy=COPY_ROWS)
N_CHECKED = 4  # cores of a COUNT launch
COUNT_BYTES = N_CHECKED * 2 * 64 * 4  # its src and dst
ROWS_SRC_BYTES, ROWS_DST_BYTES = 2 * 3 * 16 * 4, 2 * 3 * 24 * 4  # two cores of ROWS


def run_checked(t: RowsTiling, what: list[int], checks: bool = True):
    """Core c makes mistake what[c]; returns (src, dst, report)."""
    block_dim = len(what)
    t = dataclasses.replace(t, bad=bad_cores(*what))
    src = np.arange(block_dim * t.rows * (t.d + t.src_gap), dtype=np.float32)
    dst, _, rep = run_rows(src, t, block_dim, checks, op="checked", fill=0)
    return src, dst, rep


def test_in_bounds_kernel_runs_with_and_without_checks(tilesim_checks):
    for checks in (False, True):
        src, dst, rep = run_checked(COUNT, [OK] * N_CHECKED, checks)
        assert np.array_equal(dst, src * 2) and rep.checks == (checks or tilesim_checks)
        assert rep.counter("mte2_bytes").tolist() == [512] * N_CHECKED


def test_partial_block_data_copy_is_fine_without_checks():
    """Checks off: a DataCopy of 252 B is not reported; it moves 224 B, as the NPU does (the length rounded down
    to 32 B), and nothing is raised."""
    with as_asked():
        src, dst, rep = run_checked(COUNT, [OK, BAD_LEN, OK], False)
    assert rep.counter("mte2_bytes").tolist() == [512, 256 + 224, 512]
    np.testing.assert_array_equal(dst[:192], src[:192] * 2)  # core 1's last row: 56 elements came in
    np.testing.assert_array_equal(dst[192:248], src[192:248] * 2)
    assert not np.array_equal(dst[248:256], src[248:256] * 2)


@kernel
def partial_counts(ctx, t, a, out):
    """DataCopy's count form with 10 or 12 floats (40 B, 48 B): each direction moves 32 B. out[0:16]: x (-1 from
    a Duplicate, then a's 10 floats over it) copied out whole; out[16:32]: y (-2, then x's 12 floats over it)
    copied out whole; out[32:48]: x's 12 floats copied out over out's own values."""
    pipe = asc.TPipe(ctx)
    b = pipe.init_buffer(asc.TBuf(asc.VECCALC), 128)
    x, y = b.get(asc.float32), b.get(asc.float32)[16]
    asc.duplicate(x, -1.0, 16)
    asc.duplicate(y, -2.0, 16)
    asc.pipe_barrier(ctx, asc.PIPE_ALL)
    asc.data_copy(x, a, 10)
    asc.pipe_barrier(ctx, asc.PIPE_ALL)
    asc.data_copy(y, x, 12)
    asc.pipe_barrier(ctx, asc.PIPE_ALL)
    asc.data_copy(out, x, 16)
    asc.data_copy(out[16], y, 16)
    asc.data_copy(out[32], x, 12)


def test_data_copy_count_moves_whole_blocks_in_every_direction():
    a = np.arange(1, 17, dtype=np.float32)
    out = np.full(48, 7.0, np.float32)
    with as_asked():
        rep = launch(partial_counts, RowsTiling(0, 0), a, out, block_dim=1)
    want = np.concatenate([a[:8], np.full(8, -1), a[:8], np.full(8, -2), a[:8], np.full(8, 7)]).astype(np.float32)
    np.testing.assert_array_equal(out, want)
    assert rep.total("mte2_bytes") == 32 and rep.total("mte3_bytes") == 64 + 64 + 32
    with pytest.raises(tilesim.CheckError) as e:
        launch(partial_counts, RowsTiling(0, 0), a, out, block_dim=1, checks=True)
    assert [(v.kind, v.nbytes) for v in e.value.violations] == [("misaligned DataCopy length", 40)] + [
        ("misaligned DataCopy length", 48)] * 2
    assert "(the NPU moves 32 B)" in e.value.violations[0].detail


@pytest.mark.parametrize("t, what, kind, memory, offset, nbytes, phrase", [
    (COUNT, BAD_LEN, "misaligned DataCopy length", 'UB buffer "in_x"', 256, 252, "not a whole number of 32 B blocks"),
    (COUNT, BAD_UB_VEC, "UB out of bounds", 'UB buffer "out_y"', 320, 256, "leaves the LocalTensor (slot of 256 B)"),
    (COUNT, BAD_UB_COPY, "UB out of bounds", 'UB buffer "in_x"', 256, 512, "(slot of 256 B)"),
    (COUNT, BAD_UB_ALIGN, "misaligned DataCopy address", 'UB buffer "in_x"', 272, 256, "not 32 B aligned"),
    (COUNT, BAD_GM_IN, "GM out of bounds", 'GM tensor "src"', COUNT_BYTES - 224, 256, f"the tensor ({COUNT_BYTES} B)"),
    (COUNT, BAD_GM_OUT, "GM out of bounds", 'GM tensor "dst"', COUNT_BYTES - 224, 256, f"the tensor ({COUNT_BYTES} B)"),
    # a tile's first row inside the tensor, its last one past the end: each row is checked
    (ROWS, BAD_GM_IN, "GM out of bounds", 'GM tensor "src"', ROWS_SRC_BYTES, 32, f"the tensor ({ROWS_SRC_BYTES} B)"),
    (ROWS, BAD_GM_OUT, "GM out of bounds", 'GM tensor "dst"', ROWS_DST_BYTES, 32, f"the tensor ({ROWS_DST_BYTES} B)"),
    (ROWS, BAD_UB_COPY, "UB out of bounds", 'UB buffer "in_x"', 0, 128, "(slot of 96 B)"),
    (ROWS, BAD_UB_ALIGN, "misaligned DataCopy address", 'UB buffer "in_x"', 16, 32, "not 32 B aligned"),
], ids=["datacopy_len", "ub_oob_vec", "ub_oob_copy", "ub_align", "gm_oob_in", "gm_oob_out", "rows_gm_last_in",
        "rows_gm_last_out", "rows_ub_oob", "rows_ub_align"])
def test_checked_mode_reports_core_buffer_and_offset(t, what, kind, memory, offset, nbytes, phrase):
    kinds = [OK] * (N_CHECKED if t is COUNT else 2)
    kinds[-2] = what  # core 2 of 4 (COUNT), core 0 of 2 (ROWS): a core behind it is fine
    c = len(kinds) - 2
    with tilesim.capture() as runs:
        with pytest.raises(tilesim.CheckError) as ei:
            run_checked(t, kinds)
    e = ei.value
    assert isinstance(e, tilesim.AclnnError) and isinstance(e, ValueError)
    assert e.status == tilesim.ACLNN_ERR_RUNTIME_ERROR == 361001
    v = e.violations[0]
    assert (v.kind, v.kernel, v.core, v.phase, v.memory, v.offset, v.nbytes) == (kind, "checked", c, 0, memory,
                                                                                 offset, nbytes), v
    assert phrase in v.detail and str(v) in str(e) and e.reports[0] == str(v)
    assert {x.core for x in e.violations} == {c} and e.total == len(e.violations)
    assert v.mssanitizer().startswith(f"====== ERROR: {kind}")
    assert len(runs) == 1  # the report of the failed launch is still captured


def test_checked_mode_reports_every_core():
    with pytest.raises(tilesim.CheckError) as ei:
        run_checked(COUNT, [BAD_UB_VEC, OK, BAD_LEN, BAD_GM_IN, BAD_GM_OUT])
    first = {}
    for v in ei.value.violations:
        first.setdefault(v.core, v.kind)
    assert first == {0: "UB out of bounds", 2: "misaligned DataCopy length", 3: "GM out of bounds",
                     4: "GM out of bounds"}
    assert f"(and {ei.value.total - 1} more)" in str(ei.value) and ei.value.total >= 4


# --- the builds ---------------------------------------------------------------------------------------------------


def test_fast_build_compiles_checked_mode_and_recording_out(monkeypatch):
    """A launch's core loop gets the fast build (checks None), in which neither checked mode's checks nor the
    recording of instructions is compiled; a checked launch, and a recorded one (under ``capture(log=True)``), the
    checked build (a bool), with both: the recorded launch runs the checked launch's compile with its checks off
    (the same arguments' types: a UB per core). The loop is compiled here without Numba's cache: its code is
    inspected."""
    src = inputs(np.float32, 64, 0)
    t = RowsTiling(1, 64, copy=COPY_COUNT)
    run_rows(src, t, 1)  # places the launch's core loop
    key = next(k for k in launcher._CORE_LOOPS if k[0] is rows_kernel.py_func and k[1] is RowsTiling)
    cores, fields = launcher._CORE_LOOPS[key]
    probe = njit(cache=False, nogil=True, host=True)(cores.py_func)
    monkeypatch.setitem(launcher._CORE_LOOPS, key, (probe, fields))
    with as_asked():
        for checks in (False, True):
            dst, _, rep = run_rows(src, t, 1, checks)
            assert np.array_equal(dst, src) and rep.checks == checks
        with tilesim.capture(log=True):
            dst, _, rep = run_rows(src, t, 1)
    assert np.array_equal(dst, src) and not rep.checks and len(rep.log[0]) > 0
    irs = {str(sig[6]): ir for sig, ir in probe.inspect_llvm().items()}  # by the type of its checks argument
    assert set(irs) == {"none", "bool"} and len(probe.signatures) == 2
    for name in ("_ub_check", "_align_check", "_read_check", "flow1", "_log"):
        assert name not in irs["none"] and name in irs["bool"], name


# --- run reports ------------------------------------------------------------------------------------------------


def test_capture_collects_one_report_per_launch():
    src = np.arange(4 * 50, dtype=np.float32)
    run_rows(src, RowsTiling(1, 50), 4, op="outside")  # not captured
    with tilesim.capture() as outer:
        run_rows(src, RowsTiling(2, 50), 2, op="first")
        with tilesim.capture() as inner:
            run_rows(src, RowsTiling(1, 50, scale=3.0, bias=1.0), 4, op="second")
        run_rows(src, RowsTiling(4, 50), 1, op="third")
    run_rows(src, RowsTiling(1, 50), 4, op="after")
    assert [r.op for r in outer] == ["first", "second", "third"]
    assert [r.op for r in inner] == ["second"]
    assert all(isinstance(r, tilesim.RunReport) for r in outer)
    assert [r.block_dim for r in outer] == [2, 4, 1]
    assert all(r.counters.shape == (r.block_dim, len(tilesim.COUNTER_NAMES)) for r in outer)
    rep = outer[1]
    assert rep.soc == SOC.name and rep.wall_s >= 0
    text = str(rep)
    assert text.startswith("second on Ascend910B1: block_dim 4")
    assert "UB plan:" in text and "in_x" in text and "out_y" in text
    for b in rep.ub_plan.buffers:
        if b.nbytes:
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


def test_instruction_timer_runs_both_builds(monkeypatch):
    """``python -m bench.instructions`` (per-call cost of single instructions, fast and checked build)."""
    from bench import instructions

    monkeypatch.setattr(instructions, "CALLS", 1000)  # calls enough to stand out of a launch's jitter (µs)
    with as_asked():  # the fast build too under --tilesim-checks
        rows = instructions.measure([64])
    assert [r[0] for r in rows] == instructions.INSTRUCTIONS
    # differences of timings on a shared machine (a cheap instruction's may come out at 0 or below): finite only
    assert all(np.isfinite(fast) and np.isfinite(checked) for _, _, fast, checked in rows)
    cores = launcher._CORE_LOOPS[(instructions.instruction_loop.py_func, instructions.Loop, ())][0]
    assert {str(sig[6]) for sig in cores.signatures} == {"none", "bool"}  # Core.checks of the fast, checked build


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
