"""GroupNormGrad tiling against the official formulas (hicann/ops-nn ``op_host/group_norm_grad_tiling.cpp``),
written out here independently of the module: task split, stage-1 UB capacities and mode, stage-2 plan and
workspace; explicit cases for each UB mode, the UB plan, and the core_num / ub_mode / mode3_capacity overrides."""

from __future__ import annotations

import dataclasses

import ml_dtypes
import numpy as np
import pytest
import tilesim.tiling as tiling
from hypothesis import event, given, settings
from hypothesis import strategies as st
from tilesim.tiling.group_norm_backward import ub_plan

from tilesim import AclnnError, get_soc

pytestmark = pytest.mark.no_launch_here  # host tiling only

MIB = 1024 * 1024
DTYPES = {"float32": np.dtype(np.float32), "float16": np.dtype(np.float16), "bfloat16": np.dtype(ml_dtypes.bfloat16)}
SOCS = ["Ascend910B1", "Ascend910B3", "Ascend910_9391"]
HXWS = [1, 2, 7, 8, 9, 16, 63, 64, 100, 1000, 4096, 9999, 12000, 20000, 70000]


def cdiv(a, b):
    return -(-a // b)


def up(a, b):
    """CeilAlign: a rounded up to a multiple of b."""
    return cdiv(a, b) * b


def z(shape, dtype):
    """A zero-stride stand-in: the tiling reads only shape and dtype."""
    return np.broadcast_to(np.zeros((), DTYPES[dtype]), shape)


def make(n, g, c_g, hxw, dtype="float32", soc="Ascend910B1", mask=(True, True, True), **kw):
    c = g * c_g
    return tiling.group_norm_backward(z((n, c, hxw), dtype), z((n, c, hxw), dtype), z((n, g), dtype),
                                      z((n, g), dtype), z((c,), dtype), n, c, hxw, g, mask, soc=soc, **kw)


def expected(n, g, c_g, hxw, dtype="float32", soc="Ascend910B1", core_num=None):
    """The official TilingData fields, from the spec."""
    spec = get_soc(soc)
    ub = spec.ub_size
    c = g * c_g
    ng = n * g
    cores = spec.core_num_aiv if core_num is None else core_num
    tpc = cdiv(ng, cores)
    used = cdiv(ng, tpc)
    if ng % used:
        tail_tpc, tail_core = tpc - 1, ng % used
    else:
        tail_tpc, tail_core = tpc, used
    f = dict(n=n, c=c, hxw=hxw, g=g, nxg=ng, c_g=c_g, task_num_per_core=tpc, task_num_per_tail_core=tail_tpc,
             tail_core=tail_core, block_dim=used, dtype=dtype)

    # stage 1
    epb = 8 if dtype == "float32" else 16
    db = 4 if dtype == "float32" else 6
    reserve = 1024 + up(c_g, epb) * db * 3
    extra = 0 if (hxw % 8 == 0 or c_g == 1) else 2 * up(hxw, epb) * 4
    cap0 = max((ub - reserve - extra) // (up(c_g * hxw, epb) * db * 3), 0)
    cap1 = (ub - reserve) // (up(hxw, epb) * db * 3)
    it1 = tail1 = 0
    if cap1 > 0:
        it1 = cdiv(c_g, cap1)
        tail1 = cap1 if it1 * cap1 == c_g else c_g - (it1 - 1) * cap1
    f.update(mode1_ub_cap_c_num=cap1, mode1_ub_iter_c_num=it1, mode1_ub_tail_c_num=tail1)
    cap3 = it3 = tail3 = 0
    if hxw == 1:
        mode = 5
    elif cap0 > 0:
        mode = 0
    elif cap1 == 1:
        mode = 1
    elif cap1 > 1:
        mode = 2
    else:
        mode = 3
        cap3 = (ub - reserve) // (db * 3) // (epb * 8) * (epb * 8)
        it3 = cdiv(hxw, cap3)
        tail3 = cap3 if hxw == it3 * cap3 else hxw - (it3 - 1) * cap3
    f.update(ub_mode=mode, mode2_ub_capacity_ele=cap3, mode2_ub_iteration_num=it3, mode2_ub_tail_num=tail3)
    det = n > 2
    f["tiling_key"] = {"float32": 0, "float16": 1, "bfloat16": 2}[dtype] + 10 * det

    # stage 2
    s2 = dict(work_space_size=0, stage2_core_used=0, cast_ele_num=0, tail_cast_num=0, core_batch_parts=0,
              core_batch_parts_tail_repeat=0, repeat_time4_stage2=0)
    if det:
        s2["work_space_size"] = cdiv(n, 2) * c
        if dtype == "float32":
            cast = up(cdiv(c, used // 2), 64)
            avail = (ub - 1024) // 2 - cast * 4
            counts = cdiv(cdiv(n, 2), 2)
        else:
            cast = up(cdiv(c, used), 64)
            avail = (ub - 1024) // 2 - cast * 6
            counts = cdiv(n, 2)
        parts = min(avail // (cast * 4), counts)
        s2.update(cast_ele_num=cast, core_batch_parts=parts,
                  core_batch_parts_tail_repeat=parts if counts % parts == 0 else counts % parts,
                  repeat_time4_stage2=cdiv(counts, parts))
    elif dtype != "float32":
        s2.update(cast_ele_num=up(cdiv(c, used), 64), work_space_size=c)
    if s2["cast_ele_num"] > 0:
        k = cdiv(c, s2["cast_ele_num"])
        s2.update(stage2_core_used=k, tail_cast_num=c if k == 1 else c - (k - 1) * s2["cast_ele_num"])
    f.update(s2)
    f["workspace_size"] = 16 * MIB + 2 * s2["work_space_size"] * 4
    return f


def assert_fields(t, want):
    got = {k: getattr(t, k) for k in want}
    diff = {k: (got[k], want[k]) for k in want if got[k] != want[k]}
    assert not diff, f"(tiling, spec) differ: {diff}"


def covered_once(t):
    seen = []
    for core in range(t.block_dim):
        first, count = t.tasks_of_core(core)
        assert count >= 0
        seen.extend(range(first, first + count))
    return sorted(seen) == list(range(t.nxg))


def mode0_fp32_stage1_bytes(c_g, hxw):
    """The kernel's mode-0 fp32 buffers: dy, x, temp of the group; gamma, dgamma, dbeta of its channels; and the two
    HxW staging rows when HxW is not a multiple of 8 (and C/G > 1). Each rounded up to 32 B."""
    b = 3 * up(up(c_g * hxw, 8) * 4, 32) + 3 * up(up(c_g, 8) * 4, 32)
    if hxw % 8 and c_g != 1:
        b += 2 * up(up(hxw, 8) * 4, 32)
    return b


def stage2_fp32_bytes(t):
    """After pipe.Reset, the deterministic fp32 stage 2: two sums of cast_ele_num and two blocks of
    core_batch_parts rows of it."""
    if not t.deterministic:
        return 0
    return 2 * up(t.cast_ele_num * 4, 32) + 2 * up(t.core_batch_parts * t.cast_ele_num * 4, 32)


# --- properties ---------------------------------------------------------------------------------------------------

@settings(max_examples=400, deadline=None)
@given(n=st.integers(1, 40), g=st.integers(1, 16), c_g=st.integers(1, 300), hxw=st.sampled_from(HXWS),
       dtype=st.sampled_from(list(DTYPES)), soc=st.sampled_from(SOCS))
def test_official_formulas(n, g, c_g, hxw, dtype, soc):
    t = make(n, g, c_g, hxw, dtype, soc)
    event(f"ub_mode {t.ub_mode}")
    want = expected(n, g, c_g, hxw, dtype, soc)
    assert_fields(t, want)
    assert t.deterministic == (n > 2)
    assert (t.dx_is_require, t.dgamma_is_require, t.dbeta_is_require) == (True, True, True)
    assert covered_once(t)
    assert t.block_dim <= get_soc(soc).core_num_aiv
    plan = ub_plan(t, get_soc(soc)).check()
    assert plan.used <= get_soc(soc).ub_size
    if dtype == "float32" and t.ub_mode == 0:
        assert plan.used == max(mode0_fp32_stage1_bytes(c_g, hxw), stage2_fp32_bytes(t))


@settings(max_examples=150, deadline=None)
@given(n=st.integers(1, 40), g=st.integers(1, 16), c_g=st.integers(1, 300), hxw=st.sampled_from(HXWS),
       dtype=st.sampled_from(list(DTYPES)), soc=st.sampled_from(SOCS), data=st.data())
def test_core_num_override(n, g, c_g, hxw, dtype, soc, data):
    lo = 2 if (dtype == "float32" and n > 2) else 1
    core_num = data.draw(st.integers(lo, get_soc(soc).core_num_aiv), label="core_num")
    t = make(n, g, c_g, hxw, dtype, soc, core_num=core_num)
    assert_fields(t, expected(n, g, c_g, hxw, dtype, soc, core_num=core_num))
    assert t.block_dim <= core_num
    assert covered_once(t)
    ub_plan(t, get_soc(soc)).check()


@settings(max_examples=100, deadline=None)
@given(c_g=st.integers(1, 300), hxw=st.sampled_from([h for h in HXWS if h > 1]), dtype=st.sampled_from(list(DTYPES)),
       k=st.integers(1, 8))
def test_mode3_capacity_override(c_g, hxw, dtype, k):
    unit = 64 if dtype == "float32" else 128
    cap = k * unit
    t = make(2, 2, c_g, hxw, dtype, ub_mode=3, mode3_capacity=cap)
    it = cdiv(hxw, cap)
    assert (t.ub_mode, t.mode2_ub_capacity_ele, t.mode2_ub_iteration_num) == (3, cap, it)
    assert t.mode2_ub_tail_num == (cap if hxw == it * cap else hxw - (it - 1) * cap)
    # every other field is the official one
    want = expected(2, 2, c_g, hxw, dtype)
    for f in ("ub_mode", "mode2_ub_capacity_ele", "mode2_ub_iteration_num", "mode2_ub_tail_num"):
        del want[f]
    assert_fields(t, want)


# --- explicit cases, one per UB mode ------------------------------------------------------------------------------

@pytest.mark.parametrize("n,g,c_g,hxw,dtype,mode", [
    (2, 32, 2, 64, "float32", 0),  # cap0 = (196608 - 1120) // (128*12) = 127
    (2, 2, 4, 12000, "float32", 1),  # cap0 0; cap1 = 195488 // 144000 = 1
    (2, 2, 16, 5000, "float32", 2),  # cap0 0; cap1 = 195392 // 60000 = 3
    (2, 2, 4, 20000, "float32", 3),  # cap1 = 195488 // 240000 = 0
    (2, 2, 4, 1, "float32", 5),
    (4, 4, 300, 1, "bfloat16", 5),
    (2, 2, 4, 9999, "float16", 1),  # cap1 = (196608 - 1312) // (10000*18) = 1
    (2, 2, 4, 12000, "float16", 3),  # 12000*18 > UB
    (2, 2, 4, 5000, "bfloat16", 2),
    (40, 16, 300, 9, "float16", 0),
])
def test_each_ub_mode(n, g, c_g, hxw, dtype, mode):
    want = expected(n, g, c_g, hxw, dtype)
    assert want["ub_mode"] == mode  # the spec itself lands here
    t = make(n, g, c_g, hxw, dtype)
    assert t.ub_mode == mode
    assert_fields(t, want)
    ub_plan(t, get_soc("Ascend910B1")).check()


def test_mode0_fp32_by_hand():
    t = make(2, 32, 2, 64)
    # 64 tasks on 48 cores: 2 per core, so 32 cores, all "tail" cores with 2 tasks
    assert (t.ub_mode, t.tiling_key, t.block_dim, t.task_num_per_core, t.tail_core) == (0, 0, 32, 2, 32)
    # cap1 = 195488 // (64*12) = 254: both channels in one pass
    assert (t.task_num_per_tail_core, t.mode1_ub_cap_c_num, t.mode1_ub_iter_c_num, t.mode1_ub_tail_c_num) == \
        (2, 254, 1, 2)
    assert (t.work_space_size, t.cast_ele_num, t.stage2_core_used, t.workspace_size) == (0, 0, 0, 16 * MIB)
    # dy, x, temp: 128 floats each; gamma, dgamma, dbeta: 8 floats each
    assert ub_plan(t, get_soc("Ascend910B1")).used == 3 * 512 + 3 * 32


def test_mode0_fp32_staging_rows():
    # HxW = 100 is not a multiple of 8 and C/G = 3 > 1: two 104-float staging rows
    t = make(2, 2, 3, 100)
    assert t.ub_mode == 0
    assert ub_plan(t, get_soc("Ascend910B1")).used == 3 * 1216 + 3 * 32 + 2 * 416
    t = make(2, 2, 1, 100)  # C/G = 1: none
    assert ub_plan(t, get_soc("Ascend910B1")).used == 3 * 416 + 3 * 32


def test_mode3_by_hand():
    t = make(2, 2, 4, 20000)
    # reserve 1024 + 8*4*3 = 1120; (196608 - 1120) // 12 = 16290 -> 16256 (multiple of 64)
    assert (t.ub_mode, t.mode2_ub_capacity_ele, t.mode2_ub_iteration_num, t.mode2_ub_tail_num) == \
        (3, 16256, 2, 20000 - 16256)
    assert t.mode1_ub_cap_c_num == 0 and t.mode1_ub_iter_c_num == 0 and t.mode1_ub_tail_c_num == 0


def test_mode1_and_mode2_by_hand():
    t = make(2, 2, 4, 12000)
    assert (t.ub_mode, t.mode1_ub_cap_c_num, t.mode1_ub_iter_c_num, t.mode1_ub_tail_c_num) == (1, 1, 4, 1)
    t = make(2, 2, 16, 5000)
    # reserve 1024 + 16*4*3 = 1216; 195392 // 60000 = 3; 16 = 5*3 + 1
    assert (t.ub_mode, t.mode1_ub_cap_c_num, t.mode1_ub_iter_c_num, t.mode1_ub_tail_c_num) == (2, 3, 6, 1)


# --- stage 2 by hand --------------------------------------------------------------------------------------------

def test_stage2_deterministic_fp32():
    # N = 40, G = 16, C = 4800: 640 tasks on 48 cores, tpc 14, used ceil(640/14) = 46, 640 % 46 = 42 tail cores
    t = make(40, 16, 300, 16)
    assert (t.block_dim, t.task_num_per_core, t.task_num_per_tail_core, t.tail_core) == (46, 14, 13, 42)
    # cast = up(ceil(4800/23), 64) = 256; avail = 97792 - 1024 = 96768; counts = ceil(20/2) = 10
    assert (t.cast_ele_num, t.core_batch_parts, t.core_batch_parts_tail_repeat, t.repeat_time4_stage2) == \
        (256, 10, 10, 1)
    assert (t.stage2_core_used, t.tail_cast_num, t.work_space_size) == (19, 4800 - 18 * 256, 20 * 4800)
    assert t.workspace_size == 16 * MIB + 2 * 20 * 4800 * 4
    assert t.tiling_key == 10


def test_stage2_deterministic_b16_several_repeats():
    # C = 4800 fp16, N = 40 on 3 cores: cast = up(1600, 64) = 1600; avail = 97792 - 9600 = 88192;
    # parts = min(88192 // 6400, 20) = 13; 20 % 13 = 7; 2 repeats
    t = make(40, 16, 300, 16, "float16", core_num=3)
    assert (t.block_dim, t.cast_ele_num, t.core_batch_parts, t.core_batch_parts_tail_repeat,
            t.repeat_time4_stage2) == (3, 1600, 13, 7, 2)
    assert (t.stage2_core_used, t.tail_cast_num, t.tiling_key) == (3, 1600, 11)


def test_stage2_not_deterministic():
    t = make(2, 2, 4, 16)  # fp32, N <= 2: straight into the outputs
    assert (t.cast_ele_num, t.work_space_size, t.stage2_core_used, t.workspace_size) == (0, 0, 0, 16 * MIB)
    t = make(1, 2, 4, 16, "bfloat16")  # b16: a workspace of C and one slice of casts
    assert (t.cast_ele_num, t.work_space_size, t.stage2_core_used, t.tail_cast_num, t.core_batch_parts) == \
        (64, 8, 1, 8, 0)
    assert (t.tiling_key, t.workspace_size) == (2, 16 * MIB + 2 * 8 * 4)


# --- overrides ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n,g", [(1, 1), (2, 2), (3, 3), (4, 2), (5, 7), (40, 16)])
def test_core_num_4(n, g):
    t = make(n, g, 4, 16, core_num=4)
    assert t.block_dim <= 4
    assert covered_once(t)
    counts = [t.tasks_of_core(core)[1] for core in range(t.block_dim)]
    assert max(counts) - min(counts) <= 1
    assert_fields(t, expected(n, g, 4, 16, core_num=4))


@pytest.mark.parametrize("hxw,it,tail", [(64, 1, 64), (100, 2, 36), (128, 2, 64), (1000, 16, 40)])
def test_mode3_capacity_64_on_a_mode0_shape(hxw, it, tail):
    assert make(2, 32, 2, hxw).ub_mode == 0
    t = make(2, 32, 2, hxw, ub_mode=3, mode3_capacity=64)
    assert (t.ub_mode, t.mode2_ub_capacity_ele, t.mode2_ub_iteration_num, t.mode2_ub_tail_num) == (3, 64, it, tail)
    assert cdiv(hxw, 64) == it and tail == hxw - (it - 1) * 64
    official = dataclasses.asdict(make(2, 32, 2, hxw))
    for f in ("ub_mode", "mode2_ub_capacity_ele", "mode2_ub_iteration_num", "mode2_ub_tail_num"):
        del official[f]
    assert_fields(t, official)


def test_mode3_default_capacity_when_forced():
    t = make(2, 32, 2, 100, ub_mode=3)  # the largest capacity: (196608 - 1120) // 12 // 64 * 64
    assert (t.mode2_ub_capacity_ele, t.mode2_ub_iteration_num, t.mode2_ub_tail_num) == (16256, 1, 100)


def test_mask_is_carried():
    t = make(2, 2, 4, 16, mask=(False, True, False))
    assert (t.dx_is_require, t.dgamma_is_require, t.dbeta_is_require) == (False, True, False)


def test_unknown_ub_mode_refused():
    with pytest.raises(AclnnError) as e:
        make(2, 2, 4, 16, ub_mode=4)
    assert e.value.status == 161002 and "ub_mode" in e.value.message
