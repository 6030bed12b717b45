"""SwiGluGrad tiling against the official algorithm (``Tiling4SwiGlu<SWIGLU_GRAD_SINGLE>`` of hicann/ops-nn
``activation/swi_glu/op_host/swi_glu_tiling.cpp``), written out here independently of the module: the UB bound on
a tile, the base-shape search with its stride rules, the choice between double and single buffering, block_dim,
the tiling key and workspace; explicit cases, the 310P rule, the overrides, the UB plan and the tile dealing."""

from __future__ import annotations

import dataclasses

import ml_dtypes
import numpy as np
import pytest
import tilesim.tiling as tiling
from hypothesis import event, given, settings
from hypothesis import strategies as st
from tilesim.tiling.swiglu_grad import check_tiling, ub_plan

from tilesim import AclnnError

pytestmark = pytest.mark.no_launch_here  # host tiling only

MIB = 1024 * 1024
DTYPES = {"float32": np.dtype(np.float32), "float16": np.dtype(np.float16), "bfloat16": np.dtype(ml_dtypes.bfloat16)}
ISZ = {"float32": 4, "float16": 2, "bfloat16": 2}
# SoC: (GetCoreNumAiv, UB bytes, is 310P)
SOCS = {"Ascend910B1": (48, 196608, False), "Ascend910B3": (40, 196608, False), "Ascend910_9391": (48, 196608, False),
        "Ascend310P3": (8, 262144, True)}
SPECIAL_COLS = [1, 15, 16, 17, 255, 256, 257, 4095, 4096, 4097, 4912, 4913, 32767, 32768, 65535, 65536, 70000]
LIMIT = 65535  # DataCopy blockLen / stride limit
MAX_ROWS = 4095  # DataCopy blockCount limit


class SearchFailed(Exception):
    """The official CalcOptBaseShape returns false."""


def cdiv(a, b):
    return -(-a // b)


def align_up(a, b):
    return cdiv(a, b) * b


def align_down(a, b):
    return 0 if a < b else a // b * b


def z(shape, dtype):
    """A zero-stride stand-in: the tiling reads only shape and dtype."""
    return np.broadcast_to(np.zeros((), DTYPES[dtype]), shape)


def problem(row, col, dtype="float32"):
    """yGrad [row, col] and x [row, 2·col], split on the last axis: the tiling function's arguments."""
    return z((row, col), dtype), z((row, 2 * col), dtype), -1


def make(row, col, dtype="float32", soc="Ascend910B1", **kw):
    """The module's tiling of x [row, 2·col], yGrad [row, col], split on the last axis."""
    return tiling.swiglu_grad(*problem(row, col, dtype), soc=soc, **kw)


def max_tile(ub, dtype, nb):
    isz = ISZ[dtype]
    temps = 2 if dtype == "float32" else 5
    return align_down(ub // (nb * 5 * isz + temps * 4), 32 // isz)


def search(row, col, dtype, cores, maxt):
    """One CalcOptBaseShape: the best (br, bc, total, used, tiles per core), or SearchFailed."""
    isz = ISZ[dtype]
    m, pack = 32 // isz, 512 // isz
    aligned = col % m == 0

    def must_single(bc):
        return (2 * col - bc) > LIMIT * m if aligned else (2 * col - bc) * isz > LIMIT

    best = {}

    def save(br, bc):
        total = cdiv(row, br) * cdiv(col, bc)
        size, full = br * bc, (row // br) * (col // bc)
        used = min(total, cores)
        key = (used, -total, size, full)  # the order of SaveOptBaseShape's tie-breaks
        if not best or key > best["key"]:
            best.update(key=key, br=br, bc=bc, total=total, used=used, tpc=cdiv(total, used))

    up = min(col, maxt, LIMIT if aligned else LIMIT // isz)
    bc = align_down(up, pack) if pack < up < col else up
    row_up = min(row, MAX_ROWS)
    if must_single(bc):
        save(1, bc)
        return best
    while True:
        br = min(maxt // align_up(bc, m), row_up)
        if br < 1 or (br > 1 and must_single(bc)):
            if not best:
                raise SearchFailed
            return best
        if not (br > 1 and must_single(col % bc)):
            save(br, bc)
        if bc <= pack or br >= row_up:
            return best
        bc = bc - pack if bc % pack == 0 else align_down(bc, pack)


def expected(row, col, dtype="float32", soc="Ascend910B1", core_num=None):
    """The official TilingData fields, from the spec; 561002 situations raise AclnnError-like SearchFailed."""
    cores, ub, p310 = SOCS[soc]
    cores = cores if core_num is None else core_num
    isz = ISZ[dtype]
    if p310 and (col * isz) % 64:
        raise SearchFailed("310P: colLen not a multiple of 64 B")
    db = search(row, col, dtype, cores, max_tile(ub, dtype, 2))
    opt, nb = db, 2
    if db["tpc"] == 2:
        try:
            single = search(row, col, dtype, cores, max_tile(ub, dtype, 1))
        except SearchFailed:
            single = None
        if single is not None and single["tpc"] == 1 and single["used"] >= db["used"]:
            opt, nb = single, 1
    return dict(is_32b_aligned=int(col % (32 // isz) == 0), is_double_buffer=int(nb == 2), row_len=row,
                col_len=col, base_row_len=opt["br"], base_col_len=opt["bc"], block_dim=opt["used"],
                tiling_key={"float32": 0, "float16": 1, "bfloat16": 27}[dtype], workspace_size=16 * MIB)


def assert_fields(t, want):
    got = {k: getattr(t, k) for k in want}
    diff = {k: (got[k], want[k]) for k in want if got[k] != want[k]}
    assert not diff, f"(tiling, spec) differ: {diff}"


def tile_length(t):
    m = 32 // ISZ[t.dtype]
    return t.base_row_len * (t.base_col_len if t.is_32b_aligned else align_up(t.base_col_len, m))


def check_ub_plan(t, soc):
    """Ten buffer ids: five queues of T with buffer_num slots, then the fp32 temporaries (b16 five, fp32 two and
    three 0-byte ids); every buffer one tile."""
    _, ub, _ = SOCS[soc]
    isz, n, nb = ISZ[t.dtype], tile_length(t), 2 if t.is_double_buffer else 1
    plan = ub_plan(t, soc)
    assert plan.names() == ["a", "b", "y_grad", "d_a", "d_b", "tmp", "sigmoid", "a_fp32", "y_grad_fp32", "out_fp32"]
    b16 = t.dtype != "float32"
    want = [(align_up(n * isz, 32), nb)] * 5 + [(align_up(n * 4, 32), 1)] * 2 + [(align_up(n * 4, 32) * b16, 1)] * 3
    assert [(b.nbytes, b.buffer_num) for b in plan.buffers] == want
    used = sum(a * k for a, k in want)
    assert plan.used == used <= ub
    assert plan.check() is plan
    return plan


def check_dealing(t):
    """Tile t goes to core t mod block_dim: every tile exactly once, a core's tiles in order."""
    total = t.total_tile_num
    assert total == cdiv(t.row_len, t.base_row_len) * cdiv(t.col_len, t.base_col_len)
    assert 1 <= t.block_dim <= total
    ranges = [t.tiles_of_core(c) for c in range(t.block_dim)]
    assert [r.start for r in ranges] == list(range(t.block_dim))
    assert all(r.step == t.block_dim and r.stop == total for r in ranges)
    assert sum(len(r) for r in ranges) == total
    if total <= 20000:
        assert sorted(i for r in ranges for i in r) == list(range(total))


# --- the spec itself, on hand-computed figures ------------------------------------------------------------------

@pytest.mark.parametrize("ub, dtype, nb, want", [
    (196608, "float32", 2, 4096), (196608, "float16", 2, 4912), (196608, "bfloat16", 2, 4912),
    (196608, "float32", 1, 7016), (196608, "float16", 1, 6544), (196608, "bfloat16", 1, 6544),
    (262144, "float32", 2, 5456), (262144, "float16", 1, 8736),
])
def test_max_tile_len(ub, dtype, nb, want):
    from tilesim.tiling.swiglu_grad import max_tile_len

    assert max_tile(ub, dtype, nb) == want  # the spec's figures
    assert max_tile_len(ub, dtype, nb) == want


def test_fp32_8192_square():
    # colLen 4096 fp32: up 4096 = colLen, one row of 4096 per tile; 8192 tiles on 48 cores
    t = make(8192, 4096)
    assert (t.base_row_len, t.base_col_len, t.total_tile_num, t.block_dim) == (1, 4096, 8192, 48)
    assert (t.is_32b_aligned, t.is_double_buffer, t.tiling_key, t.workspace_size) == (1, 1, 0, 16 * MIB)
    assert_fields(t, expected(8192, 4096))


def test_bf16_8192_square():
    # b16 maxTile 4912: up 4096 = colLen; the search walks 4096, 3840, ... and keeps the 256-wide tile of 19 rows
    # (4912 // 256): 432 x 16 = 6912 tiles, the fewest with all 48 cores busy
    t = make(8192, 4096, "bfloat16")
    assert (t.base_row_len, t.base_col_len, t.total_tile_num, t.block_dim) == (19, 256, 6912, 48)
    assert (t.is_double_buffer, t.tiling_key) == (1, 27)
    assert_fields(t, expected(8192, 4096, "bfloat16"))
    assert ub_plan(t).used == 19 * 256 * (2 * 5 * 2 + 5 * 4)


def test_double_buffer_switches_off():
    # fp32 x (48, 10000): double buffering leaves 2 tiles per core (16 x 256, 60 tiles); single buffering covers
    # [48, 5000] with 3 x 2304 tiles, 48 of them, one per core
    t = make(48, 5000)
    assert (t.is_double_buffer, t.base_row_len, t.base_col_len, t.block_dim, t.total_tile_num) == (0, 3, 2304, 48, 48)
    assert_fields(t, expected(48, 5000))
    db = make(48, 5000, buffer_num=2)
    assert (db.is_double_buffer, db.base_row_len, db.base_col_len, db.total_tile_num) == (1, 16, 256, 60)
    # the same shape on fewer cores keeps the double buffer (more than 2 tiles a core)
    t = make(48, 5000, core_num=7)
    assert t.is_double_buffer == 1
    assert_fields(t, expected(48, 5000, core_num=7))


def test_must_be_single_row():
    # fp16 colLen 40001, not aligned: (2·40001 − 4864)·2 B > 65535, so the stride forces one row per tile
    t = make(4, 40001, "float16")
    assert (t.is_32b_aligned, t.base_row_len, t.base_col_len) == (0, 1, 4864)
    assert (t.total_tile_num, t.block_dim) == (4 * 9, 36)
    assert_fields(t, expected(4, 40001, "float16"))


def test_invalid_tail_column_is_skipped():
    # fp16 colLen 16386, not aligned, 1000 rows: 19 x 256 would leave a tail of 2 columns whose row gap
    # ((2·16386 − 2)·2 B = 65540) exceeds the stride limit, so the search keeps 6 x 768 (tail 258: 65028 B)
    t = make(1000, 16386, "float16")
    assert (t.base_row_len, t.base_col_len, t.block_dim) == (6, 768, 48)
    assert_fields(t, expected(1000, 16386, "float16"))
    # a hand-made tiling with that tail is refused
    with pytest.raises(AclnnError) as e:
        check_tiling(tiling.replace(t, base_row_len=19, base_col_len=256), *problem(1000, 16386, "float16"))
    assert e.value.status == 561002 and "base_row_len" in e.value.message and "2 columns" in e.value.message
    check_tiling(tiling.replace(t, base_row_len=1, base_col_len=256), *problem(1000, 16386, "float16"))


def test_split_axis_not_last():
    # x [6, 8, 10] fp32, dim 1: rowLen 6, colLen 4·10 = 40; dim 0 / -3: rowLen 1, colLen 80
    x = z((6, 8, 10), "float32")
    t = tiling.swiglu_grad(z((6, 4, 10), "float32"), x, 1)
    assert (t.row_len, t.col_len) == (6, 40)
    assert_fields(t, expected(6, 40))
    for dim in (0, -3):
        t = tiling.swiglu_grad(z((3, 8, 10), "float32"), x, dim)
        assert (t.row_len, t.col_len) == (1, 240)
        assert_fields(t, expected(1, 240))
    t = tiling.swiglu_grad(z((6, 8, 5), "float16"), z((6, 8, 10), "float16"), 2)
    assert (t.row_len, t.col_len, t.is_32b_aligned) == (48, 5, 0)
    assert_fields(t, expected(48, 5, "float16"))


def test_socs_and_the_310p_rule():
    for soc, cores in (("Ascend910B1", 48), ("Ascend910B3", 40), ("Ascend910_9391", 48), ("Ascend310P3", 8)):
        t = make(10000, 256, "float16", soc)
        assert t.block_dim == cores, soc
        assert_fields(t, expected(10000, 256, "float16", soc))
    # 310P: colLen·itemsize must be a multiple of 64 B
    for col, dtype in ((24, "float32"), (16, "float16"), (100, "float16"), (8, "float32")):
        with pytest.raises(AclnnError) as e:
            make(4, col, dtype, "Ascend310P3")
        assert e.value.status == 561002 and "64 B" in e.value.message and f"colLen {col}" in e.value.message
    assert make(4, 32, "float16", "Ascend310P3").col_len == 32
    assert make(4, 16, "float32", "Ascend310P3").col_len == 16


# --- properties -------------------------------------------------------------------------------------------------

COLS = st.one_of(st.sampled_from(SPECIAL_COLS), st.integers(1, 200000), st.integers(1, 25000).map(lambda k: 8 * k))
ROWS = st.one_of(st.integers(1, 100000), st.integers(1, 64), st.sampled_from([1, 2, 47, 48, 49, 4095, 4096, 8192]))


@settings(max_examples=300, deadline=None)
@given(row=ROWS, col=COLS, dtype=st.sampled_from(list(DTYPES)), soc=st.sampled_from(list(SOCS)), data=st.data())
def test_official_tiling_matches_the_spec(row, col, dtype, soc, data):
    p310 = SOCS[soc][2]
    if p310 and dtype == "bfloat16":
        dtype = "float16"  # no bf16 on 310P
    isz = ISZ[dtype]
    if p310 and data.draw(st.booleans(), label="round to 64 B"):
        col = align_up(col, 64 // isz)
    try:
        want = expected(row, col, dtype, soc)
    except SearchFailed:
        with pytest.raises(AclnnError) as e:
            make(row, col, dtype, soc)
        assert e.value.status == 561002
        event("561002")
        return
    t = make(row, col, dtype, soc)
    event(f"aligned {t.is_32b_aligned} double {t.is_double_buffer} rows {'1' if t.base_row_len == 1 else '>1'}")
    assert_fields(t, want)
    assert t.block_dim <= SOCS[soc][0]
    assert tile_length(t) == t.tile_length
    check_ub_plan(t, soc)
    check_dealing(t)


@settings(max_examples=100, deadline=None)
@given(row=ROWS, col=COLS, dtype=st.sampled_from(list(DTYPES)), soc=st.sampled_from(list(SOCS)[:3]),
       data=st.data())
def test_core_num_override_matches_the_spec(row, col, dtype, soc, data):
    core_num = data.draw(st.integers(1, SOCS[soc][0]), label="core_num")
    t = make(row, col, dtype, soc, core_num=core_num)
    assert_fields(t, expected(row, col, dtype, soc, core_num=core_num))
    assert t.block_dim <= core_num
    check_dealing(t)
    check_ub_plan(t, soc)


@settings(max_examples=150, deadline=None)
@given(row=st.integers(1, 300), col=st.integers(1, 12000), dtype=st.sampled_from(list(DTYPES)),
       soc=st.sampled_from(list(SOCS)[:3]))
def test_near_the_double_buffer_switch(row, col, dtype, soc):
    """Few tiles per core: where the single-buffered search can win."""
    t = make(row, col, dtype, soc)
    event(f"double {t.is_double_buffer}")
    assert_fields(t, expected(row, col, dtype, soc))
    check_ub_plan(t, soc)


# --- overrides --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("core_num", [1, 7])
def test_core_num(core_num):
    t = make(100, 4096, core_num=core_num)
    assert t.block_dim == core_num
    assert_fields(t, expected(100, 4096, core_num=core_num))
    check_dealing(t)
    counts = [len(t.tiles_of_core(c)) for c in range(t.block_dim)]
    assert max(counts) - min(counts) <= 1


@pytest.mark.parametrize("core_num", [0, -1, 49])
def test_core_num_out_of_range(core_num):
    with pytest.raises(AclnnError) as e:
        make(100, 4096, core_num=core_num)
    assert e.value.status == 561002 and "core_num" in e.value.message and "48" in e.value.message


def test_core_num_bounded_by_the_soc():
    make(100, 4096, soc="Ascend910B3", core_num=40)
    with pytest.raises(AclnnError) as e:
        make(100, 4096, soc="Ascend910B3", core_num=41)
    assert e.value.status == 561002 and "40" in e.value.message


@pytest.mark.parametrize("nb", [1, 2])
def test_buffer_num(nb):
    # one search with that many buffers, no switching
    t = make(48, 5000, buffer_num=nb)
    assert t.is_double_buffer == (nb == 2)
    want = search(48, 5000, "float32", 48, max_tile(196608, "float32", nb))
    assert (t.base_row_len, t.base_col_len, t.block_dim) == (want["br"], want["bc"], want["used"])
    check_ub_plan(t, "Ascend910B1")


@pytest.mark.parametrize("nb", [0, 3])
def test_buffer_num_refused(nb):
    with pytest.raises(AclnnError) as e:
        make(48, 5000, buffer_num=nb)
    assert e.value.status == 561002 and "buffer_num" in e.value.message


def test_base_shape_override():
    t = make(100, 4096, base_row_len=3, base_col_len=512)
    assert (t.base_row_len, t.base_col_len, t.is_double_buffer) == (3, 512, 1)
    assert (t.row_tile_num, t.col_tile_num, t.total_tile_num, t.block_dim) == (34, 8, 272, 48)
    official = dataclasses.asdict(make(100, 4096))
    for f in ("base_row_len", "base_col_len", "block_dim", "is_double_buffer"):
        del official[f]
    assert_fields(t, official)
    check_dealing(t)
    # base_col_len alone: the rows that fit it (4096 // 512 = 8 with two buffers); with buffer_num 1, 7016 // 512
    t = make(100, 4096, base_col_len=512)
    assert (t.base_row_len, t.base_col_len) == (8, 512)
    assert make(100, 4096, base_col_len=512, buffer_num=1).base_row_len == 13
    # base_row_len alone: the column is min(colLen, maxTile)
    t = make(100, 3000, base_row_len=2)
    assert (t.base_row_len, t.base_col_len, t.block_dim) == (2, 3000, 48)
    # rows capped by rowLen
    assert make(5, 64, base_col_len=64).base_row_len == 5
    with pytest.raises(AclnnError) as e:
        make(100, 4096, base_col_len=0)
    assert e.value.status == 561002 and "base_col_len" in e.value.message


def test_ub_plan_by_hand():
    # fp32 aligned, double buffer, 1 x 4096: five queues of 16 KiB x 2, two fp32 temporaries, three empty ids
    t = make(8192, 4096)
    plan = check_ub_plan(t, "Ascend910B1")
    assert plan.used == 5 * 2 * 16384 + 2 * 16384 == 196608
    # unaligned fp16 rows are padded to 32 B in the UB: 5 rows of 17 -> 5 x 32 elements
    t = make(5, 17, "float16")
    assert (t.is_32b_aligned, t.base_row_len, t.base_col_len) == (0, 5, 17)
    assert t.tile_length == 5 * 32
    plan = check_ub_plan(t, "Ascend910B1")
    assert plan.buffers[0].nbytes == 5 * 32 * 2 and plan.buffers[7].nbytes == 5 * 32 * 4


def test_check_tiling_limits():
    # what DataCopy can move: blockCount 4095 rows, a 32 B-multiple column on an aligned colLen, no more columns
    # than colLen, the official problem and key
    t = make(8192, 4096)
    check_tiling(tiling.replace(t, base_row_len=4095, base_col_len=8), *problem(8192, 4096))  # the UB is not its job
    # a rule the tiling function refuses the free choices by, or the first field they do not give
    for change, field in ((dict(base_row_len=4096), "base_row_len: 4096"), (dict(base_row_len=0), "base_row_len: 0"),
                          (dict(base_col_len=12), "base_col_len: 12"), (dict(base_col_len=4104), "base_col_len: 4104"),
                          (dict(base_col_len=0), "base_col_len: 0"), (dict(block_dim=0), "core_num: 0"),
                          (dict(block_dim=49), "core_num: 49"), (dict(row_len=8191), "tiling.row_len"),
                          (dict(col_len=2048), "tiling.col_len"), (dict(tiling_key=1), "tiling.tiling_key"),
                          (dict(is_32b_aligned=0), "tiling.is_32b_aligned"),
                          (dict(is_double_buffer=2), "tiling.is_double_buffer")):
        with pytest.raises(AclnnError) as e:
            check_tiling(tiling.replace(t, **change), *problem(8192, 4096))
        assert e.value.status == 561002 and field in e.value.message, (change, e.value.message)
    # unaligned colLen: any column count, as long as a row is at most 65535 B
    t = make(4, 40001, "float16")
    check_tiling(tiling.replace(t, base_col_len=32767, block_dim=8), *problem(4, 40001, "float16"))  # 4 x 2 tiles
    with pytest.raises(AclnnError) as e:
        check_tiling(tiling.replace(t, base_col_len=32768, block_dim=8), *problem(4, 40001, "float16"))
    assert e.value.status == 561002 and "65535" in e.value.message
