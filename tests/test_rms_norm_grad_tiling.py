"""RmsNormGrad tiling: the official formulas on hand-computed cases, the SoC rules, overrides, and properties."""

from __future__ import annotations

import numpy as np
import pytest
import tilesim.tiling as tiling
from conftest import Spec
from hypothesis import given, settings
from hypothesis import strategies as st
from tilesim.tiling.rms_norm_grad import check_tiling, ub_plan

from tilesim import AclnnError, get_soc, list_socs

pytestmark = pytest.mark.no_launch_here  # host tiling only

MIB = 1024 * 1024


def args(rows_shape, cols_shape, dtype="float32", gamma_dtype=None):
    shape = tuple(rows_shape) + tuple(cols_shape)
    return (Spec(shape, dtype), Spec(shape, dtype), Spec(tuple(rows_shape), "float32"),
            Spec(tuple(cols_shape), gamma_dtype or dtype))


def test_split_n_large_d_bf16_910b1():
    t = tiling.rms_norm_grad(*args((4096,), (4096,), "bfloat16", "float32"))
    assert (t.tiling_key, t.block_factor, t.block_dim, t.core_calc_tail) == (1, 86, 48, 4096 - 47 * 86)
    assert (t.ub_factor, t.ub_calc_loop, t.ub_calc_tail) == (1, 86, 0)
    assert (t.ub_calc_tail_num, t.ub_calc_tail_loop, t.ub_calc_tail_tail) == (1, 54, 0)
    assert (t.col_val_align, t.data_type, t.ub_split_dim) == (4096, 2, 0)
    assert t.workspace_size == 16 * MIB + 8 * 48 * 4
    assert np.float32(t.avg_factor) == np.float32(1) / np.float32(4096)


def test_split_n_small_d_rule():
    # cva = 104 <= 640: ubFactor = (195584 - 10*104) // (24*104 + 268) = 70 rows, capped by block_factor 21.
    t = tiling.rms_norm_grad(*args((1000,), (100,)))
    assert t.small_d and t.col_val_align == 104
    assert (t.block_factor, t.block_dim, t.core_calc_tail, t.ub_factor) == (21, 48, 13, 21)
    assert (t.ub_calc_loop, t.ub_calc_tail, t.ub_calc_tail_loop, t.ub_calc_tail_num, t.ub_calc_tail_tail) == \
        (1, 0, 1, 21, 13)
    t = tiling.rms_norm_grad(*args((100000,), (100,)))
    assert (t.block_factor, t.ub_factor, t.ub_calc_loop, t.ub_calc_tail) == (2084, 70, 30, 2084 - 29 * 70)


def test_split_n_boundary_6080_and_split_d():
    assert tiling.rms_norm_grad(*args((8,), (6080,))).tiling_key == 1
    t = tiling.rms_norm_grad(*args((64,), (12288,)))
    assert (t.tiling_key, t.ub_split_dim, t.ub_factor, t.ub_calc_loop, t.ub_calc_tail) == (2, 1, 4096, 3, 0)
    assert (t.block_factor, t.block_dim, t.core_calc_tail) == (2, 32, 0)
    t = tiling.rms_norm_grad(*args((100,), (6081,), "float16", "float16"))
    assert (t.tiling_key, t.ub_calc_loop, t.ub_calc_tail, t.col_val_align) == (2, 2, 6081 - 4096, 6096)
    assert (t.block_factor, t.block_dim, t.core_calc_tail) == (3, 34, 1)
    assert (t.ub_calc_tail_num, t.ub_calc_tail_tail, t.ub_calc_tail_loop) == (4096, 1985, 2)


def test_core_counts_by_soc():
    for soc, cores in (("Ascend910B1", 48), ("Ascend910B3", 40), ("Ascend910_9391", 48), ("Ascend910_9362", 40),
                       ("Ascend310P3", 8), ("Ascend310P1", 10), ("Ascend910A", 32), ("Ascend910ProB", 30)):
        t = tiling.rms_norm_grad(*args((10000,), (128,), "float16", "float16"), soc=soc)
        assert t.block_dim == cores, soc
        ub_plan(t, soc).check()


def test_workspace_deterministic():
    t = tiling.rms_norm_grad(*args((4096,), (4095,)), deterministic=True)
    assert t.fixed_output == 1 and t.need_chunk == 0
    assert t.workspace_size == 16 * MIB + (4096 + 8) * 48 * 4


def test_workspace_chunked_deterministic():
    # 48 rows of 2**21 fp32: 813695168 B of input >= 500 MiB and 48*cva*4 > 5 % of it, on 910B split-D.
    t = tiling.rms_norm_grad(*args((48,), (2 ** 21,)), deterministic=True)
    assert (t.need_chunk, t.chunk_size, t.chunk_num, t.chunk_tail) == (1, 208896, 11, 8192)
    assert t.workspace_size == 16 * MIB + (208896 + 8 + 1) * 48 * 4
    # The official input size is uint32 arithmetic: 16 GiB wraps to 8 MiB, so no chunking.
    t = tiling.rms_norm_grad(*args((1024,), (2 ** 21,)), deterministic=True)
    assert t.need_chunk == 0
    # Chunking is a 910B/910_93 rule.
    assert tiling.rms_norm_grad(*args((48,), (2 ** 21,)), deterministic=True, soc="Ascend310P1").need_chunk == 0


def test_910_training_series_multiple_of_64():
    assert tiling.rms_norm_grad(*args((100,), (128,)), soc="Ascend910A").block_dim == 25  # 4 rows a core
    with pytest.raises(AclnnError) as e:
        tiling.rms_norm_grad(*args((100,), (100,)), soc="Ascend910A")
    assert e.value.status == 561002 and "64" in e.value.message


def test_overrides_make_consistent_tilings():
    base = args((1000,), (4096,))
    t = tiling.rms_norm_grad(*base, core_num=7)
    assert (t.block_factor, t.block_dim, t.core_calc_tail) == (143, 7, 1000 - 6 * 143)
    t = tiling.rms_norm_grad(*args((1000,), (100,)), ub_factor=5, buffer_num=1)
    assert (t.ub_factor, t.ub_calc_loop, t.ub_calc_tail, t.buffer_num) == (5, 5, 1, 1)
    t = tiling.rms_norm_grad(*base, tiling_key=2, ub_factor=1024)
    assert (t.tiling_key, t.ub_factor, t.ub_calc_loop) == (2, 1024, 4)
    for bad in (dict(core_num=0), dict(core_num=49), dict(buffer_num=3), dict(tiling_key=3),
                dict(tiling_key=2, ub_factor=100)):
        with pytest.raises(AclnnError) as e:
            tiling.rms_norm_grad(*base, **bad)
        assert e.value.status == 561002


def test_hand_made_tiling_is_checked():
    base = args((1000,), (100,))
    t = tiling.rms_norm_grad(*base)
    assert check_tiling(t, *base) == t
    with pytest.raises(AclnnError, match="tiling.block_factor: is 20 but"):
        check_tiling(tiling.replace(t, block_factor=20), *base)
    with pytest.raises(AclnnError, match="tiling.col: is 100 but .* give 101"):
        check_tiling(t, *args((1000,), (101,)))


@settings(max_examples=200, deadline=None)
@given(rows=st.integers(1, 200000), cols=st.integers(1, 20000), dtype=st.sampled_from(["float32", "float16"]),
       soc=st.sampled_from(list_socs()), det=st.booleans())
def test_official_tiling_covers_rows_and_fits_ub(rows, cols, dtype, soc, det):
    if get_soc(soc).arch == 100:
        cols = max(64, cols // 64 * 64)
    if get_soc(soc).arch == 200 and cols * (4 if dtype == "float32" else 2) < 32:
        cols = 16
    t = tiling.rms_norm_grad(*args((rows,), (cols,), dtype), soc=soc, deterministic=det)
    assert sum(t.rows_of_core(c) for c in range(t.block_dim)) == rows
    assert t.block_dim <= get_soc(soc).core_num_aiv
    assert all(t.rows_of_core(c) >= 1 for c in range(t.block_dim))
    plan = ub_plan(t, soc).check()
    assert plan.used <= get_soc(soc).ub_size
    assert check_tiling(t, *args((rows,), (cols,), dtype), soc=soc, deterministic=det) == t
