"""The Ascend C high-level APIs LayerNormGrad and LayerNormGradBeta (``tilesim.machine.normalization``) and their host
helpers (``tiling.layer_norm_grad_api``).

- The helpers, field for field, against the formulas of asc-devkit's tiling code written out here (ascend-ops.md
  section 4), on chosen shapes and by hypothesis; every assertion, with its status and message.
- Both APIs through single-core harness kernels (below) against untiled float64 math: float and half,
  isReuseSource on and off, a sharedTmpBuffer of the helper's minimum, maximum and sizes between, or the UB the
  framework hands out (PopStackBuffer); originalH < H and = H; the documents' examples.
- What isReuseSource leaves in the sources, the quirks of the real code (pd_mean's sum over the stored H,
  LayerNormGradBeta's row walk originalH apart), the official tiling's chunk that outgrows its tmp buffer, and
  checked mode's reports.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

import ml_dtypes
import numpy as np
import pytest
import tilesim.kernels as kernels
from conftest import as_asked
from hypothesis import given, settings
from hypothesis import strategies as st
from tilesim.kernels.layer_norm_grad_beta import tmp_region
from tilesim.tiling.layer_norm_grad_api import (
    LayerNormGradBetaTiling,
    LayerNormGradTiling,
    chunk_fits,
    get_layer_norm_grad_beta_max_min_tmp_size,
    get_layer_norm_grad_beta_nd_tiling_info,
    get_layer_norm_grad_max_min_tmp_size,
    get_layer_norm_grad_nd_tiling_info,
    one_chunk_tiling,
)

from tilesim import AclnnError, CheckError, get_soc
from tilesim.core.ub import UbPlan
from tilesim.jit import njit
from tilesim.machine import VECCALC, HardEvent, TBuf, TPipe, data_copy, set_flag, size_of, uint8, wait_flag
from tilesim.machine.normalization import layer_norm_grad, layer_norm_grad_beta
from tilesim.precision import compare
from tilesim.runtime.launcher import kernel, launch

SOC = get_soc("Ascend910B1")
F32, F16 = np.float32, np.float16
TILING_ERR, INVALID, NULLPTR, RUNTIME = 561002, 161002, 161001, 361001


# --- the helpers' formulas, written out from the tiling code ---------------------------------------------------


def beta_sizes(shape, ts):
    """GetLayerNormGradBetaMaxMinTmpSize: 4 (half) or 2 (float) fp32 buffers of B*S*H (max) or H (min) elements."""
    b, s, h, _ = shape
    k = 4 if ts == 2 else 2
    return k * b * s * h * 4, k * h * 4


def lng_need(ts, reuse):
    return 9 if ts == 2 else (4 if reuse else 6)


def lng_sizes(shape, ts, reuse):
    """GetLayerNormGradMaxMinTmpSize (non-950): need * max/min(B*S*H, H*H) elements of typeSize bytes."""
    b, s, h, _ = shape
    base = (b * s * h, h * h)
    need = lng_need(ts, reuse)
    return need * max(base) * ts, need * min(base) * ts


def beta_fields(shape, stack_bytes, ts):
    """GetLayerNormGradBetaNDTilingInfo, every field."""
    b, s, h, oh = shape
    bsh = b * s * h
    stack = stack_bytes // 4
    nbuf, one = (2, (stack - 2 * h) // 2) if ts == 2 else (1, stack)
    one = min(one // h * h, bsh)
    tail = bsh % one
    pos = (0, h, 2 * h, 2 * h + one) if ts == 2 else (0, 0, 0, 0)
    return dict(stack_buffer_size=stack, b_length=b, s_length=s, h_length=h, original_h_length=oh, bsh_length=bsh,
                bs_length=b * s, one_cal_size=one, number_of_tmp_buf=nbuf, loop_round=bsh // one,
                input_tail_size=tail, input_tail_pos=bsh - tail, bs_tail_size=tail // h, bsh_cur_length=one,
                bs_cur_length=one // h, gamma_temp_tensor_pos=pos[0], beta_temp_tensor_pos=pos[1],
                input_dy_tmp_tensor_pos=pos[2], res_for_gamma_tmp_tensor_pos=pos[3], reserved=0)


def f32_bits(v):
    return int(np.array([v], F32).view(np.uint32)[0])


def lng_fields(shape, stack_bytes, ts, reuse):
    """GetLayerNormGradNDTilingInfo (non-950), every field: the rows of a chunk rounded UP to 8 (float) or 16
    (half), the temporaries at multiples of the chunk."""
    b, s, h, oh = shape
    bsh = b * s * h
    need = lng_need(ts, reuse)
    rows = stack_bytes // 4 // need // h
    blk = 8 if ts == 4 else 16
    noh = -(-rows // blk) * blk
    one = noh * h
    x1, x2, x3 = (0, 0, 3 * one) if (reuse and ts == 4) else (3 * one, 4 * one, 5 * one)
    tmps = (6 * one, 7 * one, 8 * one) if ts == 2 else (0, 0, 0)
    d = dict(stack_buffer_size=stack_bytes, b_length=b, s_length=s, h_length=h, original_h_length=oh,
             one_cal_size=one, noh_cal_size=noh, loop_num=bsh // one, tail_size=bsh % one,
             noh_tail_size=bsh % one // h, tmp_tensor_bsh_pos=0, pd_var_tensor_pos=one, pd_mean_tensor_pos=2 * one,
             x1_tensor_pos=x1, x2_tensor_pos=x2, x3_tensor_pos=x3, tmp_tensor_pos=tmps[0], tmp_tensor1_pos=tmps[1],
             tmp_tensor2_pos=tmps[2], last_dim_value_back=f32_bits(F32(1) / F32(oh)),
             last_dim_value_back_mul_two=f32_bits(F32(2) / F32(oh)))
    for name in ("tmp_tensor_bsh", "pd_var_tensor", "pd_mean_tensor", "x1_tensor", "x2_tensor", "x3_tensor",
                 "tmp_tensor", "tmp_tensor1", "tmp_tensor2"):
        d[name + "_size"] = one
    return d


def lng_footprint(shape, stack_bytes, ts, reuse):
    """Bytes of the tmp buffer the API's temporaries span: need chunks of fp32."""
    return 4 * lng_need(ts, reuse) * lng_fields(shape, stack_bytes, ts, reuse)["one_cal_size"]


# --- 1. the helpers ---------------------------------------------------------------------------------------------

SHAPES = [(2, 16, 64, 64), (2, 32, 16, 16), (2, 16, 32, 32), (1, 8, 8, 8), (3, 5, 48, 40), (4, 16, 32, 20),
          (1, 1, 1024, 1000), (8, 64, 16, 13)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("ts", [2, 4])
@pytest.mark.parametrize("reuse", [False, True])
def test_max_min_tmp_sizes(shape, ts, reuse):
    assert get_layer_norm_grad_beta_max_min_tmp_size(shape, ts, reuse) == beta_sizes(shape, ts)
    assert get_layer_norm_grad_max_min_tmp_size(shape, ts, reuse) == lng_sizes(shape, ts, reuse)


def test_max_min_tmp_sizes_by_hand():
    # the documents' example {2, 16, 64, 64} half: B*S*H = 2048 < H*H = 4096
    assert get_layer_norm_grad_beta_max_min_tmp_size([2, 16, 64, 64], 2, False) == (4 * 2048 * 4, 4 * 64 * 4)
    assert get_layer_norm_grad_beta_max_min_tmp_size([2, 16, 64, 64], 4, True) == (2 * 2048 * 4, 2 * 64 * 4)
    assert get_layer_norm_grad_max_min_tmp_size([2, 16, 64, 64], 2, False) == (73728, 36864)
    assert get_layer_norm_grad_max_min_tmp_size([2, 16, 64, 64], 2, True) == (73728, 36864)  # half: always 9
    assert get_layer_norm_grad_max_min_tmp_size([2, 16, 64, 64], 4, False) == (98304, 49152)
    assert get_layer_norm_grad_max_min_tmp_size([2, 16, 64, 64], 4, True) == (65536, 32768)
    # B*S*H = 8192 > H*H = 1024
    assert get_layer_norm_grad_max_min_tmp_size([4, 64, 32, 32], 4, False) == (6 * 8192 * 4, 6 * 1024 * 4)
    # Beta ignores isReuseSource, LayerNormGrad's float needs 4 of 6 buffers with it
    for shape in SHAPES:
        assert (get_layer_norm_grad_beta_max_min_tmp_size(shape, 4, True)
                == get_layer_norm_grad_beta_max_min_tmp_size(shape, 4, False))
        mx, mn = get_layer_norm_grad_max_min_tmp_size(shape, 4, False)
        rmx, rmn = get_layer_norm_grad_max_min_tmp_size(shape, 4, True)
        assert (rmx * 6, rmn * 6) == (mx * 4, mn * 4)


def stacks_for(shape, ts, reuse):
    """Stack sizes from the helper's min to its max (and one below the min), 4 B steps included."""
    lmx, lmn = lng_sizes(shape, ts, reuse)
    bmx, bmn = beta_sizes(shape, ts)
    return sorted({lmn, lmx, (lmn + lmx) // 2, (lmn + lmx) // 2 + 4, lmn + 4 * 7, bmn, bmx, (bmn + bmx) // 3 + 36,
                   lmx * 3})


def beta_refuses(shape, stack, ts):
    """GetLayerNormGradBetaNDTilingInfo's asserts: stack >= 2 H fp32 elements, then a whole row per buffer."""
    h, st_ = shape[2], stack // 4
    return st_ < 2 * h or (((st_ - 2 * h) // 2) if ts == 2 else st_) < h


def lng_refuses(shape, stack, ts, reuse):
    """GetLayerNormGradNDTilingInfo's assert: a whole row of H in each of the need fp32 temporaries."""
    return stack // 4 // lng_need(ts, reuse) // shape[2] == 0


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("ts", [2, 4])
@pytest.mark.parametrize("reuse", [False, True])
def test_nd_tilings_every_field(shape, ts, reuse):
    refused = 0
    for stack in stacks_for(shape, ts, reuse):
        if beta_refuses(shape, stack, ts):
            raises_561002(get_layer_norm_grad_beta_nd_tiling_info, shape, stack, ts, reuse)
            refused += 1
        else:
            b = get_layer_norm_grad_beta_nd_tiling_info(shape, stack, ts, reuse)
            assert isinstance(b, LayerNormGradBetaTiling) and len(fields(b)) == 20
            assert asdict(b) == beta_fields(shape, stack, ts), (shape, stack)
        if lng_refuses(shape, stack, ts, reuse):
            raises_561002(get_layer_norm_grad_nd_tiling_info, shape, stack, ts, reuse)
            refused += 1
            continue
        t = get_layer_norm_grad_nd_tiling_info(shape, stack, ts, reuse)
        assert isinstance(t, LayerNormGradTiling) and len(fields(t)) == 30
        assert asdict(t) == lng_fields(shape, stack, ts, reuse), (shape, stack)
        assert chunk_fits(t) == (lng_footprint(shape, stack, ts, reuse) <= stack)
    assert refused < len(stacks_for(shape, ts, reuse))


def test_doc_example_tilings_by_hand():
    """{2, 16, 64, 64} half with the helpers' minimum, as both tiling documents call them."""
    mx, mn = get_layer_norm_grad_beta_max_min_tmp_size([2, 16, 64, 64], 2, False)
    b = get_layer_norm_grad_beta_nd_tiling_info([2, 16, 64, 64], mn, 2, False)
    assert mn == 1024
    assert asdict(b) == dict(stack_buffer_size=256, b_length=2, s_length=16, h_length=64, original_h_length=64,
                             bsh_length=2048, bs_length=32, one_cal_size=64, number_of_tmp_buf=2, loop_round=32,
                             input_tail_size=0, input_tail_pos=2048, bs_tail_size=0, bsh_cur_length=64,
                             bs_cur_length=1, gamma_temp_tensor_pos=0, beta_temp_tensor_pos=64,
                             input_dy_tmp_tensor_pos=128, res_for_gamma_tmp_tensor_pos=192, reserved=0)
    mx, mn = get_layer_norm_grad_max_min_tmp_size([2, 16, 64, 64], 2, False)
    t = get_layer_norm_grad_nd_tiling_info([2, 16, 64, 64], mn, 2, False)
    assert mn == 36864
    expect = dict(stack_buffer_size=36864, b_length=2, s_length=16, h_length=64, original_h_length=64,
                  one_cal_size=1024, noh_cal_size=16, loop_num=2, tail_size=0, noh_tail_size=0,
                  tmp_tensor_bsh_pos=0, pd_var_tensor_pos=1024, pd_mean_tensor_pos=2048, x1_tensor_pos=3072,
                  x2_tensor_pos=4096, x3_tensor_pos=5120, tmp_tensor_pos=6144, tmp_tensor1_pos=7168,
                  tmp_tensor2_pos=8192, last_dim_value_back=0x3C800000, last_dim_value_back_mul_two=0x3D000000)
    got = asdict(t)
    assert {k: got[k] for k in expect} == expect
    sizes = [k for k in got if k.endswith("_tensor_size") or k.endswith("tensor1_size") or k.endswith("tensor2_size")
             or k == "tmp_tensor_bsh_size"]
    assert len(sizes) == 9 and all(got[k] == 1024 for k in sizes)
    assert chunk_fits(t) and t.footprint == 36864
    # float with reuse at a stack between: 5 rows of 64 in 4 buffers, rounded up to 8 rows
    t = get_layer_norm_grad_nd_tiling_info([2, 16, 64, 64], 4 * 4 * 5 * 64 + 100, 4, True)
    assert (t.one_cal_size, t.noh_cal_size, t.loop_num, t.tail_size, t.noh_tail_size) == (512, 8, 4, 0, 0)
    assert (t.x1_tensor_pos, t.x2_tensor_pos, t.x3_tensor_pos, t.tmp_tensor_pos) == (0, 0, 1536, 0)
    assert not chunk_fits(t) and t.footprint == 8192


@pytest.mark.parametrize("oh,bits", [(64, 0x3C800000), (1, 0x3F800000), (3, 0x3EAAAAAB), (20, 0x3D4CCCCD),
                                     (1000, 0x3A83126F), (13, None), (4095, None)])
def test_last_dim_value_back_bits(oh, bits):
    t = get_layer_norm_grad_nd_tiling_info([1, 8, 4096, oh], 6 * 8 * 4096 * 4, 4, False)
    one_over = np.array([t.last_dim_value_back], np.uint32).view(F32)[0]
    two_over = np.array([t.last_dim_value_back_mul_two], np.uint32).view(F32)[0]
    assert one_over == F32(1) / F32(oh) and two_over == F32(2) / F32(oh)
    if bits is not None:
        assert t.last_dim_value_back == bits
    assert t.original_h_length == oh and t.h_length == 4096


HELPERS = {
    "GetLayerNormGradBetaMaxMinTmpSize": (
        "LayerNormGradBeta", lambda shp, ts: get_layer_norm_grad_beta_max_min_tmp_size(shp, ts, False)),
    "GetLayerNormGradBetaNDTilingInfo": (
        "LayerNormGradBeta", lambda shp, ts: get_layer_norm_grad_beta_nd_tiling_info(shp, 1 << 16, ts, False)),
    "GetLayerNormGradMaxMinTmpSize": (
        "LayerNormGrad", lambda shp, ts: get_layer_norm_grad_max_min_tmp_size(shp, ts, False)),
    "GetLayerNormGradNDTilingInfo": (
        "LayerNormGrad", lambda shp, ts: get_layer_norm_grad_nd_tiling_info(shp, 1 << 16, ts, False)),
}


def raises_561002(fn, *args):
    with pytest.raises(AclnnError) as ei:
        fn(*args)
    assert ei.value.status == TILING_ERR
    return str(ei.value)


@pytest.mark.parametrize("func", list(HELPERS))
def test_common_assertions(func):
    api, call = HELPERS[func]
    prefix = f"[{api}][{func}]"
    for ts in (3, 1, 8, 0):
        msg = raises_561002(call, [2, 16, 64, 64], ts)
        assert f"{prefix} Type size {ts} is unsupported!" in msg
    for shp in ([2, 0, 64, 64], [0, 16, 64, 64], [2, 16, 64, 0]):
        assert f"{prefix} Input Shape size must be greater than 0." in raises_561002(call, shp, 2)
    for shp in ([2, 16, 64], [32, 64], [1, 2, 16, 64, 64]):
        msg = raises_561002(call, shp, 4)
        assert (f"{prefix} The dims of srcShape is {len(shp)}, should be 4 (e.g. [B, S, storageHLength, "
                "originHLength])!") in msg
    raises_561002(call, [], 4)  # an empty shape is refused (its message: test_shape_size_as_ge_computes_it)


@pytest.mark.parametrize("func", ["GetLayerNormGradMaxMinTmpSize", "GetLayerNormGradNDTilingInfo"])
def test_layer_norm_grad_dims_must_be_positive(func):
    """CheckSrcShape: every dim > 0 (reached when the product is positive, with two negative dims)."""
    _, call = HELPERS[func]
    assert "srcShape[0] must be greater than 0." in raises_561002(call, [-3, -3, 16, 16], 4)
    assert "srcShape[1] must be greater than 0." in raises_561002(call, [2, -3, 16, -16], 2)
    assert "srcShape[2] must be greater than 0." in raises_561002(call, [2, 3, -16, -16], 2)


# ge::Shape::GetShapeSize() is 0 for an empty shape and -1 (UNKNOWN_DIM_SIZE) when a dim is -1 or -2, so the
# real helpers fail "Input Shape size must be greater than 0." for these.
@pytest.mark.parametrize("func", list(HELPERS))
@pytest.mark.parametrize("shape", [[], [-1, -2, 16, 16], [-1, -1, 16, 16]])
def test_shape_size_as_ge_computes_it(func, shape):
    _, call = HELPERS[func]
    assert "Input Shape size must be greater than 0." in raises_561002(call, shape, 4)


def test_stack_too_small():
    # LayerNormGradBeta: stack < 2 H fp32 elements; half also needs a row in each of its two buffers
    shp = [2, 16, 64, 64]
    for ts in (2, 4):
        msg = raises_561002(get_layer_norm_grad_beta_nd_tiling_info, shp, 2 * 64 * 4 - 4, ts, False)
        assert "[LayerNormGradBeta][GetLayerNormGradBetaNDTilingInfo] stackBufferSize is not enough." in msg
    get_layer_norm_grad_beta_nd_tiling_info(shp, 2 * 64 * 4, 4, False)  # 2 H: float's one chunk of 2 rows
    msg = raises_561002(get_layer_norm_grad_beta_nd_tiling_info, shp, 2 * 64 * 4, 2, False)
    assert "stackBufferSize is not enough." in msg
    assert get_layer_norm_grad_beta_nd_tiling_info(shp, 4 * 64 * 4, 2, False).one_cal_size == 64
    # LayerNormGrad: no row of H in each of the need fp32 temporaries
    for ts, reuse, need in ((4, False, 6), (4, True, 4), (2, False, 9), (2, True, 9)):
        msg = raises_561002(get_layer_norm_grad_nd_tiling_info, shp, need * 64 * 4 - 4, ts, reuse)
        assert "[LayerNormGrad][GetLayerNormGradNDTilingInfo] stackBufferSize is not enough." in msg
        t = get_layer_norm_grad_nd_tiling_info(shp, need * 64 * 4, ts, reuse)
        assert t.noh_cal_size == (8 if ts == 4 else 16)
    # a size the reusing float takes and the plain one refuses
    get_layer_norm_grad_nd_tiling_info(shp, 4 * 64 * 4, 4, True)
    raises_561002(get_layer_norm_grad_nd_tiling_info, shp, 4 * 64 * 4, 4, False)


@settings(max_examples=300, deadline=None)
@given(b=st.integers(1, 6), s=st.integers(1, 70), blocks=st.integers(1, 24), cut=st.integers(0, 15),
       ts=st.sampled_from([2, 4]), reuse=st.booleans(), frac=st.floats(0, 1.5))
def test_helpers_hypothesis(b, s, blocks, cut, ts, reuse, frac):
    h = blocks * (32 // ts)
    oh = max(1, h - cut)
    shape = (b, s, h, oh)
    assert get_layer_norm_grad_beta_max_min_tmp_size(shape, ts, reuse) == beta_sizes(shape, ts)
    mx, mn = get_layer_norm_grad_max_min_tmp_size(shape, ts, reuse)
    assert (mx, mn) == lng_sizes(shape, ts, reuse)
    stack = int(mn + frac * (mx - mn))
    if lng_refuses(shape, stack, ts, reuse):  # half with B*S = 1 at its own minimum (see below)
        raises_561002(get_layer_norm_grad_nd_tiling_info, shape, stack, ts, reuse)
        return
    t = get_layer_norm_grad_nd_tiling_info(shape, stack, ts, reuse)
    assert asdict(t) == lng_fields(shape, stack, ts, reuse)
    fit = lng_footprint(shape, stack, ts, reuse) <= stack
    assert chunk_fits(t) == fit
    if (stack // 4 // lng_need(ts, reuse) // h) % (8 if ts == 4 else 16) == 0:
        assert fit  # a whole number of blocks of rows: the rounding adds nothing
    assert t.loop_num * t.one_cal_size + t.tail_size == b * s * h
    bmx, bmn = beta_sizes(shape, ts)
    bstack = int(bmn + frac * (bmx - bmn)) // 4 * 4
    bt = get_layer_norm_grad_beta_nd_tiling_info(shape, bstack, ts, reuse)
    assert asdict(bt) == beta_fields(shape, bstack, ts)
    # the kernel's own check: resForGammaTmpTensorPos + oneCalSize <= stackBufferSize
    assert bt.res_for_gamma_tmp_tensor_pos + bt.one_cal_size <= bt.stack_buffer_size
    if ts == 2:
        assert 2 * h + 2 * bt.one_cal_size <= bt.stack_buffer_size


def test_half_minimum_counts_half_elements():
    """The real helper's half minimum is 9 buffers of 2 B elements while the API's temporaries are fp32, so it
    holds min(B*S*H, H*H) / 2 elements a buffer: with B*S = 1 not one row, and the ND helper refuses the size
    its own Max/Min helper gave."""
    for shape in ([1, 1, 16, 16], [1, 1, 64, 64], [1, 1, 128, 100]):
        mx, mn = get_layer_norm_grad_max_min_tmp_size(shape, 2, False)
        assert mn == 9 * shape[2] * 2
        msg = raises_561002(get_layer_norm_grad_nd_tiling_info, shape, mn, 2, False)
        assert "stackBufferSize is not enough." in msg
        t = get_layer_norm_grad_nd_tiling_info(shape, mx, 2, False)  # the max (H*H based) is enough
        assert t.noh_cal_size == -(-shape[2] // 2 // 16) * 16 and (t.loop_num, t.tail_size) == (0, shape[2])


def test_chunk_outgrows_the_tmp_buffer_fields():
    """The official rounding of nohCalSize up to a block of rows: at the helper's own minimum with fewer rows
    than a block, or between block multiples, the temporaries span more than the tmp buffer."""
    mx, mn = get_layer_norm_grad_max_min_tmp_size([2, 32, 16, 16], 2, False)
    assert mn == 4608
    t = get_layer_norm_grad_nd_tiling_info([2, 32, 16, 16], mn, 2, False)
    assert (t.noh_cal_size, t.one_cal_size, t.loop_num, t.tail_size) == (16, 256, 4, 0)  # 8 rows fit, 16 taken
    assert t.footprint == 9216 and not chunk_fits(t)
    mx, mn = get_layer_norm_grad_max_min_tmp_size([1, 4, 32, 32], 4, False)
    t = get_layer_norm_grad_nd_tiling_info([1, 4, 32, 32], mn, 4, False)
    assert mn == 3072 and t.noh_cal_size == 8 and t.footprint == 6144 and not chunk_fits(t)
    t = get_layer_norm_grad_nd_tiling_info([4, 16, 32, 32], 6 * 12 * 32 * 4, 4, False)  # 12 rows -> 16
    assert t.noh_cal_size == 16 and t.footprint == 12288 and not chunk_fits(t)
    t = get_layer_norm_grad_nd_tiling_info([4, 16, 32, 32], 6 * 16 * 32 * 4, 4, False)
    assert t.noh_cal_size == 16 and chunk_fits(t)
    # one_chunk_tiling: all rows in one chunk, the temporaries packed at multiples of B*S*H
    o = one_chunk_tiling([2, 32, 16, 16], 2, False)
    assert (o.loop_num, o.tail_size, o.noh_cal_size, o.one_cal_size) == (1, 0, 64, 1024)
    assert o.stack_buffer_size == 9 * 1024 * 4 and chunk_fits(o)
    assert [o.x1_tensor_pos, o.x2_tensor_pos, o.x3_tensor_pos, o.tmp_tensor2_pos] == [3072, 4096, 5120, 8192]
    o = one_chunk_tiling([2, 8, 32, 20], 4, True)
    assert (o.x1_tensor_pos, o.x2_tensor_pos, o.x3_tensor_pos, o.stack_buffer_size) == (0, 0, 1536, 4 * 512 * 4)
    assert o.last_dim_value_back == f32_bits(F32(1) / F32(20))


# --- 2. single-core harness kernels -----------------------------------------------------------------------------

LNG_GM = ["dy", "x", "variance", "mean", "gamma", "pd_x", "res_for_gamma", "dy_after", "x_after"]
BETA_GM = ["res_for_gamma", "dy", "pd_gamma_init", "pd_beta_init", "pd_gamma", "pd_beta", "res_after", "dy_after"]


@dataclass(frozen=True)
class LngHarness:
    """The LayerNormGrad harness's tiling: the API's, the tmp buffer's bytes, the statistics' padded length,
    epsilon (as T), isReuseSource and whether to copy dy and x out again after the API."""

    api: LayerNormGradTiling
    tmp_bytes: int
    n_stat: int
    eps: float
    reuse: int
    after: int


@njit(cache=True)
def _lng_body(ctx, t, bufs, tmp, dy, x, var, mean, gamma, pdx, res, dy_after, x_after):
    """CopyIn dy, x, variance, mean, gamma (DataCopy); LayerNormGrad; CopyOut pd_x, resForGamma and what is left
    in the UB of dy and x."""
    l_dy, l_x, l_var, l_mean, l_gamma, l_pdx, l_res = bufs
    n = t.api.b_length * t.api.s_length * t.api.h_length
    data_copy(l_dy, dy, n)
    data_copy(l_x, x, n)
    data_copy(l_var, var, t.n_stat)
    data_copy(l_mean, mean, t.n_stat)
    data_copy(l_gamma, gamma, t.api.h_length)
    set_flag(ctx, HardEvent.MTE2_V, 0)
    wait_flag(ctx, HardEvent.MTE2_V, 0)
    layer_norm_grad(ctx, l_pdx, l_res, l_dy, l_x, l_var, l_mean, l_gamma, tmp, t.eps, t.api, t.reuse != 0)
    set_flag(ctx, HardEvent.V_MTE3, 0)
    wait_flag(ctx, HardEvent.V_MTE3, 0)
    data_copy(pdx, l_pdx, n)
    data_copy(res, l_res, n)
    if t.after:  # what the API left in its sources (after isReuseSource: its scratch, a read checked mode flags)
        data_copy(dy_after, l_dy, n)
        data_copy(x_after, l_x, n)


@njit(cache=True)
def _lng_buffers(ctx, pipe, t, dtype):
    """The harness's sources and outputs: dy, x, variance, mean, gamma, pd_x, resForGamma (TBufs, T-sized)."""
    sz = size_of(dtype)
    n = t.api.b_length * t.api.s_length * t.api.h_length
    dy = pipe.init_buffer(TBuf(VECCALC), n * sz)
    x = pipe.init_buffer(TBuf(VECCALC), n * sz)
    variance = pipe.init_buffer(TBuf(VECCALC), t.n_stat * sz)
    mean = pipe.init_buffer(TBuf(VECCALC), t.n_stat * sz)
    gamma = pipe.init_buffer(TBuf(VECCALC), t.api.h_length * sz)
    pd_x = pipe.init_buffer(TBuf(VECCALC), n * sz)
    res_for_gamma = pipe.init_buffer(TBuf(VECCALC), n * sz)
    return (dy.get(dtype), x.get(dtype), variance.get(dtype), mean.get(dtype), gamma.get(dtype), pd_x.get(dtype),
            res_for_gamma.get(dtype))


@kernel
def lng_harness(ctx, t, dy, x, var, mean, gamma, pdx, res, dy_after, x_after):
    """The sources and outputs, then the tmp TBuf."""
    pipe = TPipe(ctx)
    bufs = _lng_buffers(ctx, pipe, t, dy.dtype)
    tmp = pipe.init_buffer(TBuf(VECCALC), t.tmp_bytes)
    _lng_body(ctx, t, bufs, tmp.get(uint8), dy, x, var, mean, gamma, pdx, res, dy_after, x_after)


@kernel
def lng_harness_tmp_first(ctx, t, dy, x, var, mean, gamma, pdx, res, dy_after, x_after):
    """The tmp TBuf first, then the sources and outputs."""
    pipe = TPipe(ctx)
    tmp = pipe.init_buffer(TBuf(VECCALC), t.tmp_bytes)
    bufs = _lng_buffers(ctx, pipe, t, dy.dtype)
    _lng_body(ctx, t, bufs, tmp.get(uint8), dy, x, var, mean, gamma, pdx, res, dy_after, x_after)


@kernel
def lng_harness_framework(ctx, t, dy, x, var, mean, gamma, pdx, res, dy_after, x_after):
    """The sources and outputs; the API without a sharedTmpBuffer (PopStackBuffer: the UB left)."""
    pipe = TPipe(ctx)
    bufs = _lng_buffers(ctx, pipe, t, dy.dtype)
    _lng_body(ctx, t, bufs, None, dy, x, var, mean, gamma, pdx, res, dy_after, x_after)


@dataclass(frozen=True)
class BetaHarness:
    """The LayerNormGradBeta harness's tiling: the API's, the tmp buffer's bytes (0: the framework's),
    isReuseSource and whether to copy resForGamma and dy out again after the API."""

    api: LayerNormGradBetaTiling
    tmp_bytes: int
    reuse: int
    after: int


@kernel
def beta_harness(ctx, t, g_res, g_dy, pg_init, pb_init, pg, pb, res_after, dy_after):
    """CopyIn resForGamma, dy and the outputs' prior contents; LayerNormGradBeta; CopyOut pd_gamma, pd_beta and
    what is left in the UB of resForGamma and dy."""
    dt = g_dy.dtype
    sz = size_of(dt)
    n, h = t.api.bsh_length, t.api.h_length
    pipe = TPipe(ctx)
    res_for_gamma = pipe.init_buffer(TBuf(VECCALC), n * sz)
    dy = pipe.init_buffer(TBuf(VECCALC), n * sz)
    pd_gamma = pipe.init_buffer(TBuf(VECCALC), h * sz)
    pd_beta = pipe.init_buffer(TBuf(VECCALC), h * sz)
    l_res, l_dy = res_for_gamma.get(dt), dy.get(dt)
    l_pg, l_pb = pd_gamma.get(dt), pd_beta.get(dt)
    data_copy(l_res, g_res, n)
    data_copy(l_dy, g_dy, n)
    data_copy(l_pg, pg_init, h)
    data_copy(l_pb, pb_init, h)
    set_flag(ctx, HardEvent.MTE2_V, 0)
    wait_flag(ctx, HardEvent.MTE2_V, 0)
    if t.tmp_bytes > 0:
        tmp = pipe.init_buffer(TBuf(VECCALC), t.tmp_bytes)
        layer_norm_grad_beta(ctx, l_pg, l_pb, l_res, l_dy, tmp.get(uint8), t.api, t.reuse != 0)
    else:
        layer_norm_grad_beta(ctx, l_pg, l_pb, l_res, l_dy, None, t.api, t.reuse != 0)
    set_flag(ctx, HardEvent.V_MTE3, 0)
    wait_flag(ctx, HardEvent.V_MTE3, 0)
    data_copy(pg, l_pg, h)
    data_copy(pb, l_pb, h)
    if t.after:
        data_copy(res_after, l_res, n)
        data_copy(dy_after, l_dy, n)


def _tmp_size(plan, tmp, tmp_bytes, buffer_bytes, need):
    """The temporaries' bytes: a buffer of exactly ``buffer_bytes`` (no minimum check), or the kernels'
    tmp_region (for "framework": all UB the plan leaves free)."""
    if buffer_bytes is not None:
        plan.add("tmp", buffer_bytes)
        plan.check()
        return buffer_bytes
    return tmp_region(plan, tmp, tmp_bytes, need)


def run_lng(dy, x, var, mean, gamma, *, oh=None, eps=1e-5, reuse=False, tmp="shared", tmp_bytes=None,
            buffer_bytes=None, tiling=None, tmp_first=False, checks=True, after=None):
    """LayerNormGrad on one core: returns (pd_x, resForGamma, dy and x as left in UB, the tiling). The tiling is
    the helper's for the tmp size unless given; ``buffer_bytes`` makes the tmp buffer that size whatever the
    tiling says; ``tmp_first`` places the tmp buffer before the others.
    ``after``: copy dy and x back out of UB after the API (by default unless checked mode would flag reading
    them: with isReuseSource they hold the API's scratch); otherwise their arrays come back unwritten."""
    after = not (reuse and checks) if after is None else after
    half = dy.dtype == F16
    isz = 2 if half else 4
    b, s, h = dy.shape
    oh = h if oh is None else oh
    src = (b, s, h, oh)
    bs = b * s
    n_stat = -(-bs * isz // 32) * 32 // isz
    varp = np.ones(n_stat, dy.dtype)
    meanp = np.zeros(n_stat, dy.dtype)
    varp[:bs], meanp[:bs] = var.reshape(-1), mean.reshape(-1)
    need = get_layer_norm_grad_max_min_tmp_size(src, isz, reuse)
    plan = UbPlan(SOC.ub_size)  # the harness's plan, for the tmp's size
    for nb in (bs * h * isz, bs * h * isz, n_stat * isz, n_stat * isz, h * isz, bs * h * isz, bs * h * isz):
        plan.add("buf", nb)
    plan.check()
    size = _tmp_size(plan, tmp, tmp_bytes, buffer_bytes, need)
    t = get_layer_norm_grad_nd_tiling_info(src, size, isz, reuse) if tiling is None else tiling
    outs = [np.full((b, s, h), 7.0, dy.dtype) for _ in range(4)]
    eps_t = float(F16(eps)) if half else float(F32(eps))
    k = lng_harness_framework if tmp == "framework" and buffer_bytes is None else (
        lng_harness_tmp_first if tmp_first else lng_harness)
    with as_asked():
        launch(k, LngHarness(t, size, n_stat, eps_t, int(reuse), int(after)), dy, x, varp, meanp, gamma, *outs,
               block_dim=1, outputs=4, soc=SOC, checks=checks, op="layer_norm_grad_api", gm_names=LNG_GM)
    return (*outs, t)


def run_beta(res, dy, *, oh=None, reuse=False, tmp="shared", tmp_bytes=None, buffer_bytes=None, tiling=None,
             pg_init=None, pb_init=None, checks=True, after=None):
    """LayerNormGradBeta on one core: returns (pd_gamma, pd_beta, resForGamma and dy as left in UB, tiling);
    ``after`` as for :func:`run_lng` (fp32 isReuseSource makes resForGamma the scratch)."""
    after = not (reuse and dy.dtype == F32 and checks) if after is None else after
    half = dy.dtype == F16
    isz = 2 if half else 4
    b, s, h = dy.shape
    src = (b, s, h, h if oh is None else oh)
    plan = UbPlan(SOC.ub_size)
    for nb in (b * s * h * isz, b * s * h * isz, h * isz, h * isz):
        plan.add("buf", nb)
    plan.check()
    size = _tmp_size(plan, tmp, tmp_bytes, buffer_bytes, get_layer_norm_grad_beta_max_min_tmp_size(src, isz, reuse))
    t = get_layer_norm_grad_beta_nd_tiling_info(src, size, isz, reuse) if tiling is None else tiling
    pg_init = np.full(h, 7.0, dy.dtype) if pg_init is None else pg_init
    pb_init = np.full(h, -7.0, dy.dtype) if pb_init is None else pb_init
    pg, pb = np.full(h, 7.0, dy.dtype), np.full(h, 7.0, dy.dtype)
    res_after, dy_after = np.full_like(res, 7.0), np.full_like(dy, 7.0)
    framework = tmp == "framework" and buffer_bytes is None
    with as_asked():
        launch(beta_harness, BetaHarness(t, 0 if framework else size, int(reuse), int(after)), res, dy, pg_init,
               pb_init, pg, pb, res_after, dy_after, block_dim=1, outputs=4, soc=SOC, checks=checks,
               op="layer_norm_grad_beta_api", gm_names=BETA_GM)
    return pg, pb, res_after, dy_after, t


# --- inputs and float64 oracles ---------------------------------------------------------------------------------


def lng_inputs(seed, shape, dtype, oh=None, pad="zero", offset=0.5):
    """dy, x, variance, mean, gamma in ``dtype``; mean and variance of x's first ``oh`` columns (a forward's);
    past oh: dy and gamma 0, x 0 (``pad="zero"``, as the API document asks) or the row's mean (``"mean"``)."""
    rng = np.random.default_rng(seed)
    b, s, h = shape
    oh = h if oh is None else oh
    x = offset + rng.uniform(-2, 2, shape)
    dy = rng.uniform(-1, 1, shape)
    gamma = rng.uniform(0.5, 1.5, h)
    dy[..., oh:] = 0
    gamma[oh:] = 0
    mean = x[..., :oh].mean(-1).astype(dtype)
    var = x[..., :oh].var(-1).astype(dtype)
    x = x.astype(dtype)
    x[..., oh:] = mean[..., None] if pad == "mean" else 0
    return dy.astype(dtype), x, var, mean, gamma.astype(dtype)


def lng_golden(dy, x, var, mean, gamma, eps, oh):
    """The formulas in float64 over all columns given (sums over them), 1/oh: pd_x, resForGamma, and
    pd_var*(2/oh)*(x - mean) + pd_mean/oh (what x1 holds at the end)."""
    dy, x, gamma = (np.asarray(a, np.float64) for a in (dy, x, gamma))
    var, mean = np.asarray(var, np.float64)[..., None], np.asarray(mean, np.float64)[..., None]
    pd_xl = dy * gamma
    xm = x - mean
    r = (var + eps) ** -0.5
    pd_var = np.sum(-0.5 * pd_xl * xm * r ** 3, -1, keepdims=True)
    pd_mean = np.sum(-pd_xl * r, -1, keepdims=True) + pd_var * (1.0 / oh) * np.sum(-2.0 * xm, -1, keepdims=True)
    rest = pd_var * (2.0 / oh) * xm + pd_mean / oh
    return pd_xl * r + rest, xm * r, rest


def eps_of(dtype, eps=1e-5):
    return float(F16(eps)) if dtype == F16 else float(F32(eps))


def dname(dtype):
    return np.dtype(dtype).name


def check_lng(inputs, pd_x, res, oh=None, eps=1e-5):
    dy = inputs[0]
    oh = dy.shape[-1] if oh is None else oh
    g_pdx, g_res, _ = lng_golden(*inputs, eps_of(dy.dtype, eps), oh)
    p1, p2 = compare(pd_x, g_pdx, dname(dy.dtype)), compare(res, g_res, dname(dy.dtype))
    assert p1.ok, f"pd_x: {p1}"
    assert p2.ok, f"resForGamma: {p2}"


# --- 3. LayerNormGrad against float64 ---------------------------------------------------------------------------


def size_for(shape, dtype, reuse, which):
    """The helper's "min" or "max", or a stack of ``which`` rows per chunk in the API's fp32 buffers."""
    b, s, h = shape
    isz = 2 if dtype == F16 else 4
    mx, mn = get_layer_norm_grad_max_min_tmp_size((b, s, h, h), isz, reuse)
    if which == "min":
        return mn
    if which == "max":
        return mx
    size = lng_need(isz, reuse) * which * h * 4
    assert mn < size < mx
    return size


LNG_CASES = [
    # dtype, shape, reuse, stack: B*S*H > H*H, so min, max and sizes between differ
    (F32, (4, 16, 32), False, "min"), (F32, (4, 16, 32), False, 48), (F32, (4, 16, 32), False, "max"),
    (F32, (4, 16, 32), True, "min"), (F32, (4, 16, 32), True, 40), (F32, (4, 16, 32), True, "max"),
    (F16, (4, 32, 32), False, "min"), (F16, (4, 32, 32), False, 48), (F16, (4, 32, 32), False, "max"),
    (F16, (2, 16, 64), False, "min"),  # the tiling document's example
    (F32, (2, 8, 32), False, "min"), (F32, (2, 8, 32), True, "max"),  # B*S*H < H*H: one chunk (max: the tail)
    (F32, (3, 8, 128), False, "min"), (F16, (1, 32, 128), False, "min"),  # H > 64: two-level row sums
]


@pytest.mark.parametrize("dtype,shape,reuse,which", LNG_CASES)
def test_layer_norm_grad_shared_tmp(dtype, shape, reuse, which):
    size = size_for(shape, dtype, reuse, which)
    inputs = lng_inputs(7, shape, dtype)
    pd_x, res, dy_after, x_after, t = run_lng(*inputs, reuse=reuse, tmp_bytes=size)
    assert t.stack_buffer_size == size and chunk_fits(t)
    check_lng(inputs, pd_x, res)
    if not reuse:  # the sources are read only
        assert np.array_equal(dy_after, inputs[0]) and np.array_equal(x_after, inputs[1])


def test_layer_norm_grad_loops_and_tails():
    """The chunk plans the cases above run: several loops, a tail, only a tail."""
    plans = {}
    for dtype, shape, reuse, which in LNG_CASES:
        isz = 2 if dtype == F16 else 4
        t = get_layer_norm_grad_nd_tiling_info((*shape, shape[-1]), size_for(shape, dtype, reuse, which), isz, reuse)
        plans[(dname(dtype), shape, reuse, which)] = (t.loop_num, t.noh_tail_size)
    assert plans[("float32", (4, 16, 32), False, "min")] == (2, 0)
    assert plans[("float32", (4, 16, 32), False, 48)] == (1, 16)
    assert plans[("float32", (4, 16, 32), True, 40)] == (1, 24)
    assert plans[("float16", (4, 32, 32), False, "min")] == (8, 0)
    assert plans[("float16", (4, 32, 32), False, 48)] == (2, 32)
    assert plans[("float16", (4, 32, 32), False, "max")] == (2, 0)  # half's max holds half the rows (9 x 2 B)
    assert plans[("float32", (2, 8, 32), True, "max")] == (0, 16)


def framework_free(shape, dtype):
    """The UB the LayerNormGrad harness's plan leaves free: dy, x, pd_x, resForGamma, variance, mean, gamma."""
    b, s, h = shape
    isz = 2 if dtype == F16 else 4
    used = 4 * b * s * h * isz + 2 * (-(-b * s * isz // 32) * 32) + h * isz
    return (SOC.ub_size - used) // 32 * 32


def touched(t, need):
    """Bytes of the tmp buffer the API really touches: its last temporary's position plus the elements of a
    full chunk (when there is one) or of the tail."""
    return 4 * ((need - 1) * t.one_cal_size + (t.one_cal_size if t.loop_num else t.tail_size))


@pytest.mark.parametrize("dtype,shape,reuse", [(F32, (4, 16, 32), False), (F32, (4, 16, 32), True),
                                               (F16, (2, 16, 64), False), (F32, (3, 8, 128), True)])
def test_layer_norm_grad_framework_tmp(dtype, shape, reuse):
    inputs = lng_inputs(8, shape, dtype)
    pd_x, res, dy_after, x_after, t = run_lng(*inputs, reuse=reuse, tmp="framework")
    assert t.stack_buffer_size == framework_free(shape, dtype)  # all UB the plan left free
    assert touched(t, lng_need(2 if dtype == F16 else 4, reuse)) <= t.stack_buffer_size
    check_lng(inputs, pd_x, res)


def test_layer_norm_grad_framework_tmp_overflows_the_ub():
    """The framework's temporaries are all free UB, and the official rounding of the chunk can still place the
    last temporary past them, here past the end of the UB: [4, 32, 32] half leaves 163264 B, 141 rows of 9 fp32
    buffers, rounded to 144; the 128 rows of the tail start tmpTensor2 at 8 x 144 rows."""
    shape = (4, 32, 32)
    free = framework_free(shape, F16)
    assert free == 163264
    t = get_layer_norm_grad_nd_tiling_info((*shape, 32), free, 2, False)
    assert (t.noh_cal_size, t.loop_num, t.noh_tail_size, t.tmp_tensor2_pos) == (144, 0, 128, 8 * 144 * 32)
    assert touched(t, 9) == 163840 > free
    assert SOC.ub_size - free + touched(t, 9) > SOC.ub_size
    with pytest.raises(CheckError) as ei:
        run_lng(*lng_inputs(8, shape, F16), tmp="framework")
    v = ei.value.violations[0]
    assert (v.kind, v.memory, v.offset, v.nbytes) == ("UB out of bounds", 'UB buffer "stack"', 8 * 144 * 32 * 4, 16384)
    assert f"(slot of {free} B)" in v.detail


# the official tiling's chunk outgrowing its tmp buffer


def test_layer_norm_grad_chunk_overflow_is_reported():
    shape = (2, 32, 16)
    inputs = lng_inputs(9, shape, F16)
    mx, mn = get_layer_norm_grad_max_min_tmp_size((*shape, 16), 2, False)
    t = get_layer_norm_grad_nd_tiling_info((*shape, 16), mn, 2, False)
    assert not chunk_fits(t) and t.footprint == 2 * mn
    with pytest.raises(CheckError) as ei:
        run_lng(*inputs, tmp_bytes=mn)
    e = ei.value
    assert e.status == RUNTIME
    v = e.violations[0]
    assert v.kind == "UB out of bounds" and v.memory == 'UB buffer "tmp"' and "leaves the LocalTensor" in str(e)
    assert f"(slot of {mn} B)" in e.reports[0]
    # the same call with one_chunk_tiling's packing is right
    o = one_chunk_tiling((*shape, 16), 2, False)
    pd_x, res, dy_after, x_after, _ = run_lng(*inputs, tiling=o, buffer_bytes=o.stack_buffer_size)
    check_lng(inputs, pd_x, res)
    assert np.array_equal(dy_after, inputs[0]) and np.array_equal(x_after, inputs[1])


def test_layer_norm_grad_chunk_overflow_tramples_the_next_buffer():
    """Unchecked, the temporaries past the tmp buffer land in the buffers after it (here dy and x): the inputs
    are overwritten and the results wrong."""
    shape = (2, 32, 16)
    inputs = lng_inputs(9, shape, F16)
    mn = get_layer_norm_grad_max_min_tmp_size((*shape, 16), 2, False)[1]
    golden = lng_golden(*inputs, eps_of(F16), 16)[0]
    pd_x, res, dy_after, x_after, _ = run_lng(*inputs, tmp_bytes=mn, tmp_first=True, checks=False)
    assert not np.array_equal(dy_after, inputs[0]) and not np.array_equal(x_after, inputs[1])
    assert not compare(pd_x, golden, "float16").ok
    with pytest.raises(CheckError):
        run_lng(*inputs, tmp_bytes=mn, tmp_first=True, checks=True)
    # with the tmp buffer last the excess lands in UB no buffer holds: unchecked, nothing shows
    pd_x, res, dy_after, x_after, _ = run_lng(*inputs, tmp_bytes=mn, checks=False)
    assert compare(pd_x, golden, "float16").ok


def test_layer_norm_grad_between_sizes_off_the_block_overflow_too():
    shape = (4, 16, 32)
    inputs = lng_inputs(10, shape, F32)
    size = 6 * 44 * 32 * 4  # 44 rows -> 48
    t = get_layer_norm_grad_nd_tiling_info((*shape, 32), size, 4, False)
    assert t.noh_cal_size == 48 and not chunk_fits(t)
    with pytest.raises(CheckError) as ei:
        run_lng(*inputs, tmp_bytes=size)
    assert ei.value.violations[0].kind == "UB out of bounds" and ei.value.violations[0].memory == 'UB buffer "tmp"'


# originalH < H: pd_mean's sum over the stored H


@pytest.mark.parametrize("dtype,shape,oh", [(F32, (2, 8, 32), 20), (F16, (2, 16, 32), 21), (F32, (1, 8, 72), 70)])
def test_layer_norm_grad_zero_padding_quirk(dtype, shape, oh):
    inputs = lng_inputs(11, shape, dtype, oh=oh, pad="zero", offset=3.0)
    pd_x, res, _, _, t = run_lng(*inputs, oh=oh, tmp="framework")
    assert t.original_h_length == oh and t.h_length == shape[-1]
    # the oracle of the code: every sum over the stored H (the zero padding adds 2*mean per padded column to
    # the sum of -2(x - mean)), 1/originalH
    check_lng(inputs, pd_x, res, oh=oh)
    # the math of the real H differs (the mean is far from 0)
    dy, x, var, mean, gamma = inputs
    true_pdx, true_res, _ = lng_golden(dy[..., :oh], x[..., :oh], var, mean, gamma[:oh], eps_of(dtype), oh)
    assert compare(res[..., :oh], true_res, dname(dtype)).ok
    assert not compare(pd_x[..., :oh], true_pdx, dname(dtype)).ok
    # the quirk is exactly that term: pd_var * (1/oH) * 2 * mean * (H - oH), spread by 1/oH
    g_pdx, _, _ = lng_golden(*inputs, eps_of(dtype), oh)
    mean64 = np.asarray(mean, np.float64)[..., None]
    pd_var = np.sum(-0.5 * dy.astype(np.float64) * gamma.astype(np.float64) * (x.astype(np.float64) - mean64)
                    * (np.asarray(var, np.float64)[..., None] + eps_of(dtype)) ** -1.5, -1, keepdims=True)
    shift = pd_var * 2 * mean64 * (shape[-1] - oh) / oh / oh
    np.testing.assert_allclose(g_pdx[..., :oh] - true_pdx, np.broadcast_to(shift, true_pdx.shape), rtol=1e-9,
                               atol=1e-12)


@pytest.mark.parametrize("dtype,shape,oh", [(F32, (2, 8, 32), 20), (F16, (2, 16, 32), 21)])
def test_layer_norm_grad_padding_with_the_mean_is_exact(dtype, shape, oh):
    inputs = lng_inputs(12, shape, dtype, oh=oh, pad="mean", offset=3.0)
    pd_x, res, _, _, _ = run_lng(*inputs, oh=oh, tmp_bytes=size_for(shape, dtype, False, "min"))
    dy, x, var, mean, gamma = inputs
    true_pdx, true_res, _ = lng_golden(dy[..., :oh], x[..., :oh], var, mean, gamma[:oh], eps_of(dtype), oh)
    assert compare(pd_x[..., :oh], true_pdx, dname(dtype)).ok
    assert compare(res[..., :oh], true_res, dname(dtype)).ok
    assert np.all(res[..., oh:] == 0)


# --- 4. isReuseSource -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("tmp", ["shared", "framework"])
def test_layer_norm_grad_reuse_clobbers_dy_and_x(tmp):
    shape = (4, 16, 32)
    inputs = lng_inputs(13, shape, F32, offset=1.0)
    dy, x, var, mean, gamma = inputs
    size = size_for(shape, F32, True, 40) if tmp == "shared" else None
    pd_x, res, dy_after, x_after, t = run_lng(*inputs, reuse=True, tmp=tmp, tmp_bytes=size, checks=False)
    check_lng(inputs, pd_x, res)
    assert t.x1_tensor_pos == t.x2_tensor_pos == 0 and t.x3_tensor_pos == 3 * t.one_cal_size
    # x now holds x - mean (the fp32 Sub), dy the partial pd_var*(2/oH)*(x - mean) + pd_mean/oH
    assert np.array_equal(x_after, x - mean[..., None])
    assert not np.allclose(dy_after, dy)
    _, _, rest = lng_golden(*inputs, eps_of(F32), shape[-1])
    assert compare(dy_after, rest, "float32").ok
    # the results do not depend on it
    pd_x2, res2, dy2, x2, _ = run_lng(*inputs, reuse=False, tmp=tmp,
                                      tmp_bytes=size_for(shape, F32, False, 48) if tmp == "shared" else None)
    assert np.array_equal(dy2, dy) and np.array_equal(x2, x)
    assert np.array_equal(pd_x2, pd_x) and np.array_equal(res2, res)  # row by row, the same instructions


def test_layer_norm_grad_reuse_needs_less_tmp():
    """4 fp32 buffers instead of 6: a tmp size that works with isReuseSource and is refused without."""
    shape = (1, 8, 32)
    src = (*shape, 32)
    rmx, rmn = get_layer_norm_grad_max_min_tmp_size(src, 4, True)
    mx, mn = get_layer_norm_grad_max_min_tmp_size(src, 4, False)
    assert (rmn, mn) == (4096, 6144) and rmn * 6 == mn * 4
    inputs = lng_inputs(14, shape, F32)
    pd_x, res, _, _, t = run_lng(*inputs, reuse=True, tmp_bytes=rmn)
    assert chunk_fits(t) and t.footprint == rmn
    check_lng(inputs, pd_x, res)
    with pytest.raises(AclnnError) as ei:  # the kernel's check against the API's minimum
        run_lng(*inputs, reuse=False, tmp_bytes=rmn)
    assert ei.value.status == INVALID and "4096 B is below the API's minimum of 6144 B" in str(ei.value)
    t = get_layer_norm_grad_nd_tiling_info(src, rmn, 4, False)  # the helper alone: its chunk outgrows 4096 B
    assert not chunk_fits(t)
    with pytest.raises(CheckError):
        run_lng(*inputs, reuse=False, buffer_bytes=rmn)
    # one row of H in 4 buffers but not in 6: the helper refuses it without reuse
    get_layer_norm_grad_nd_tiling_info(src, 4 * 32 * 4, 4, True)
    raises_561002(get_layer_norm_grad_nd_tiling_info, src, 4 * 32 * 4, 4, False)


# --- LayerNormGradBeta ------------------------------------------------------------------------------------------


def beta_inputs(seed, shape, dtype):
    rng = np.random.default_rng(seed)
    return rng.uniform(-1.5, 1.5, shape).astype(dtype), rng.uniform(-1, 1, shape).astype(dtype)


def beta_golden(res, dy):
    r, d = (np.asarray(a, np.float64).reshape(-1, a.shape[-1]) for a in (res, dy))
    return (r * d).sum(0), d.sum(0)


def beta_replay(res, dy, t, half):
    """The code's walk in fp32: per chunk, rows ``original_h_length`` apart, ``original_h_length`` columns,
    added one by one onto row 0 of the first chunk (Adds 0); half casts the fp32 sums once per chunk."""
    oh = t.original_h_length
    p = res.reshape(-1).astype(F32) * dy.reshape(-1).astype(F32)
    d = dy.reshape(-1).astype(F32)
    chunks = [(r * t.one_cal_size, t.bs_cur_length) for r in range(t.loop_round)]
    if t.input_tail_size:
        chunks.append((t.input_tail_pos, t.bs_tail_size))
    g = b = None
    for off, rows in chunks:
        for i in range(rows):
            gp, dp = p[off + i * oh:off + i * oh + oh], d[off + i * oh:off + i * oh + oh]
            g, b = (gp + F32(0), dp + F32(0)) if g is None else (gp + g, dp + b)
    return (g.astype(F16), b.astype(F16)) if half else (g, b)


def beta_size(shape, dtype, which):
    b, s, h = shape
    isz = 2 if dtype == F16 else 4
    mx, mn = get_layer_norm_grad_beta_max_min_tmp_size((b, s, h, h), isz, False)
    return {"min": mn, "max": mx}.get(which, which)


BETA_CASES = [(F32, (2, 16, 64), "min"), (F32, (2, 16, 64), 4 * 64 * 5 + 12), (F32, (2, 16, 64), "max"),
              (F16, (2, 16, 64), "min"), (F16, (2, 16, 64), 4 * (2 * 64 + 2 * 7 * 64)), (F16, (2, 16, 64), "max"),
              (F32, (3, 7, 40), "min"), (F16, (1, 24, 48), 4 * (2 * 48 + 2 * 5 * 48) + 8)]


@pytest.mark.parametrize("dtype,shape,which", BETA_CASES)
@pytest.mark.parametrize("tmp", ["shared", "framework"])
def test_layer_norm_grad_beta_kernel_against_float64(dtype, shape, which, tmp):
    res, dy = beta_inputs(20, shape, dtype)
    size = beta_size(shape, dtype, which) if tmp == "shared" else None
    pg, pb = kernels.layer_norm_grad_beta(res, dy, tmp=tmp, tmp_bytes=size, checks=True)
    assert pg.dtype == dtype and pg.shape == (shape[-1],)
    g_g, g_b = beta_golden(res, dy)
    assert compare(pg, g_g, dname(dtype)).ok and compare(pb, g_b, dname(dtype)).ok
    # and bit for bit the fp32 walk of the code
    isz = 2 if dtype == F16 else 4
    src = (*shape, shape[-1])
    if tmp == "framework":
        size = (SOC.ub_size - 2 * res.nbytes - 2 * (-(-shape[-1] * isz // 32) * 32)) // 32 * 32
    t = get_layer_norm_grad_beta_nd_tiling_info(src, size, isz, False)
    rg, rb = beta_replay(res, dy, t, dtype == F16)
    assert np.array_equal(pg, rg) and np.array_equal(pb, rb)


@pytest.mark.parametrize("tmp", ["shared", "framework"])
def test_checked_mode_reports_reading_a_reused_source(tmp):
    """isReuseSource: the API computes in dy and x; a kernel reading them afterwards reads scratch."""
    shape = (4, 16, 32)
    inputs = lng_inputs(13, shape, F32, offset=1.0)
    size = size_for(shape, F32, True, 40) if tmp == "shared" else None
    with pytest.raises(CheckError) as ei:
        run_lng(*inputs, reuse=True, tmp=tmp, tmp_bytes=size, after=True)
    v = ei.value.violations[0]
    assert (v.kind, v.memory, v.offset, v.nbytes) == ("read of a reused source", 'UB buffer "dy"', 0, 4 * 4 * 16 * 32)
    assert "isReuseSource" in v.detail and ei.value.violations[1].memory == 'UB buffer "x"'
    res, dy = beta_inputs(21, (2, 16, 64), F32)
    with pytest.raises(CheckError) as ei:
        run_beta(res, dy, reuse=True, tmp=tmp, tmp_bytes=4 * 64 * 3 if tmp == "shared" else None, after=True)
    assert ei.value.violations[0].memory == 'UB buffer "res_for_gamma"'


@pytest.mark.parametrize("tmp", ["shared", "framework"])
def test_layer_norm_grad_beta_reuse_clobbers_res(tmp):
    shape = (2, 16, 64)
    res, dy = beta_inputs(21, shape, F32)
    size = 4 * 64 * 3 if tmp == "shared" else None  # 3 rows a chunk: loops and a tail
    pg, pb, res_after, dy_after, t = run_beta(res, dy, reuse=True, tmp=tmp, tmp_bytes=size, checks=False)
    if tmp == "shared":
        assert (t.loop_round, t.bs_tail_size) == (10, 2)
    assert np.array_equal(res_after, res * dy)  # the fp32 product, in res's UB
    assert np.array_equal(dy_after, dy)
    g_g, g_b = beta_golden(res, dy)
    assert compare(pg, g_g, "float32").ok and compare(pb, g_b, "float32").ok
    pg2, pb2, res2, dy2, _ = run_beta(res, dy, reuse=False, tmp=tmp, tmp_bytes=size)
    assert np.array_equal(res2, res) and np.array_equal(dy2, dy)
    assert np.array_equal(pg2, pg) and np.array_equal(pb2, pb)
    # through the document's kernel too
    kg, kb = kernels.layer_norm_grad_beta(res, dy, tmp=tmp, tmp_bytes=size, is_reuse_source=True, checks=True)
    assert np.array_equal(kg, pg) and np.array_equal(kb, pb)


@pytest.mark.parametrize("dtype,size", [(F32, 4 * 3 * 32), (F16, 4 * (2 * 32 + 2 * 3 * 32))])
def test_layer_norm_grad_beta_padding_quirk(dtype, size):
    """originalH < H: the rows of a chunk are read originalH apart and originalH columns added; the outputs'
    columns past originalH keep what they held."""
    shape, oh = (2, 8, 32), 20
    res, dy = beta_inputs(22, shape, dtype)
    res[..., oh:] = 0
    dy[..., oh:] = 0
    pg0, pb0 = np.full(32, 5.5, dtype), np.full(32, -2.25, dtype)
    # rows originalH apart put the API's vector operands off 32 B boundaries, an illegal instruction on the NPU
    with pytest.raises(CheckError) as ei:
        run_beta(res, dy, oh=oh, tmp_bytes=size, pg_init=pg0, pb_init=pb0)
    assert ei.value.violations[0].kind == "misaligned vector operand"
    pg, pb, _, _, t = run_beta(res, dy, oh=oh, tmp_bytes=size, pg_init=pg0, pb_init=pb0, checks=False)
    assert (t.original_h_length, t.bs_cur_length, t.loop_round, t.bs_tail_size) == (20, 3, 5, 1)
    rg, rb = beta_replay(res, dy, t, dtype == F16)
    assert np.array_equal(pg[:oh], rg) and np.array_equal(pb[:oh], rb)
    assert np.all(pg[oh:] == pg0[oh:]) and np.all(pb[oh:] == pb0[oh:])
    g_g, g_b = beta_golden(res, dy)  # not the column sums
    assert not compare(pg[:oh], g_g[:oh], dname(dtype)).ok and not compare(pb[:oh], g_b[:oh], dname(dtype)).ok
    # originalH = H: the same harness gives the column sums
    pg, pb, _, _, _ = run_beta(res, dy, tmp_bytes=size, pg_init=pg0, pb_init=pb0)
    assert compare(pg, g_g, dname(dtype)).ok and compare(pb, g_b, dname(dtype)).ok


# --- 5. the LayerNormGradBeta document's example ----------------------------------------------------------------

DOC_PD_GAMMA = [8960, 9416, 9888, 10376, 10880, 11400, 11936, 12488]
DOC_PD_BETA = [224, 232, 240, 248, 256, 264, 272, 280]


@pytest.mark.parametrize("tmp,reuse", [("shared", False), ("shared", True), ("framework", False),
                                       ("framework", True)])
def test_doc_example(tmp, reuse):
    a = np.arange(64, dtype=F32).reshape(1, 8, 8)
    pg, pb = kernels.layer_norm_grad_beta(a, a.copy(), tmp=tmp, is_reuse_source=reuse, checks=True)
    assert pg[0] == 8960 and pb[0] == 224
    assert pg.tolist() == DOC_PD_GAMMA and pb.tolist() == DOC_PD_BETA
    r = np.arange(64, dtype=np.int64).reshape(8, 8)
    assert pg.tolist() == (r * r).sum(0).tolist() and pb.tolist() == r.sum(0).tolist()
    mn = get_layer_norm_grad_beta_max_min_tmp_size([1, 8, 8, 8], 4, reuse)[1]
    if tmp == "shared":  # at the minimum (one row a chunk): the same
        pg, pb = kernels.layer_norm_grad_beta(a, a.copy(), tmp_bytes=mn, is_reuse_source=reuse, checks=True)
        assert pg.tolist() == DOC_PD_GAMMA and pb.tolist() == DOC_PD_BETA


def test_doc_example_half_is_not_32b_aligned():
    a = np.arange(64, dtype=F16).reshape(1, 8, 8)
    with pytest.raises(AclnnError) as ei:
        kernels.layer_norm_grad_beta(a, a.copy())
    assert ei.value.status == INVALID
    assert "H = 8 is 16 B" in str(ei.value) and "32 B aligned" in str(ei.value)
    r = np.arange(128, dtype=np.int64).reshape(8, 16) % 32
    b = r.astype(F16).reshape(1, 8, 16)  # 16 halves are 32 B
    pg, pb = kernels.layer_norm_grad_beta(b, b.copy(), checks=True)
    assert pg.tolist() == (r * r).sum(0).astype(F16).tolist() and pb.tolist() == r.sum(0).tolist()


# --- 6. errors through kernels.layer_norm_grad_beta -------------------------------------------------------------

R, D = beta_inputs(30, (2, 16, 64), F32)
R16, D16 = R.astype(F16), D.astype(F16)

ERR_CASES = [
    ("tmp below the min", (R, D), dict(tmp_bytes=480), INVALID, ["tmp_bytes", "480 B", "minimum of 512 B"]),
    ("half tmp below the min", (R16, D16), dict(tmp_bytes=1000), INVALID, ["1000 B", "minimum of 1024 B"]),
    ("reuse with half", (R16, D16), dict(is_reuse_source=True), INVALID, ["is_reuse_source", "float only"]),
    ("unknown tmp mode", (R, D), dict(tmp="heap"), INVALID, ["tmp", "'heap'", "shared", "framework"]),
    ("tmp_bytes with framework", (R, D), dict(tmp="framework", tmp_bytes=1024), INVALID, ["tmp_bytes", "shared"]),
    ("bf16", (R.astype(ml_dtypes.bfloat16), D.astype(ml_dtypes.bfloat16)), {}, INVALID, ["bfloat16", "float32"]),
    ("float64", (R.astype(np.float64), D.astype(np.float64)), {}, INVALID, ["float64", "not supported"]),
    ("dtypes differ", (R16, D), {}, INVALID, ["resForGamma", "float16", "float32"]),
    ("shapes differ", (R[:, :8], D), {}, INVALID, ["resForGamma", "[2, 8, 64]", "[2, 16, 64]"]),
    ("rank 2", (R[0], D[0]), {}, INVALID, ["inputDy", "[16, 64]", "[B, S, H]"]),
    ("rank 4", (R[None], D[None]), {}, INVALID, ["inputDy", "[1, 2, 16, 64]"]),
    ("H not 32 B", (R[..., :60], D[..., :60]), {}, INVALID, ["H = 60", "240 B", "32 B aligned"]),
    ("empty", (R[:, :0], D[:, :0]), {}, INVALID, ["empty"]),
    ("res None", (None, D), {}, NULLPTR, ["resForGamma", "None"]),
    ("dy None", (R, None), {}, NULLPTR, ["inputDy", "None"]),
]


@pytest.mark.parametrize("label,args,kw,status,words", ERR_CASES, ids=[c[0] for c in ERR_CASES])
def test_beta_kernel_errors(label, args, kw, status, words):
    h = 64
    dt = args[1].dtype if args[1] is not None and args[1].dtype in (F32, F16) else F32
    out = (np.full(h, 3.0, dt), np.full(h, 4.0, dt))
    with pytest.raises(AclnnError) as ei:
        kernels.layer_norm_grad_beta(*args, out=out, **kw)
    assert ei.value.status == status, str(ei.value)
    for w in words:
        assert w in str(ei.value), (w, str(ei.value))
    assert np.all(out[0] == 3.0) and np.all(out[1] == 4.0)


def test_beta_kernel_framework_needs_the_minimum_free():
    """[1, 380, 128] half leaves 1536 B of UB free, below the API's 2048 B; one row less leaves exactly 2048 B."""
    rng = np.random.default_rng(31)
    res, dy = (rng.uniform(-1, 1, (1, 380, 128)).astype(F16) for _ in range(2))
    out = (np.full(128, 3.0, F16), np.full(128, 4.0, F16))
    with pytest.raises(AclnnError) as ei:
        kernels.layer_norm_grad_beta(res, dy, tmp="framework", out=out)
    assert ei.value.status == INVALID
    assert "need 2048 B but the plan leaves 1536 B of UB free" in str(ei.value)
    assert np.all(out[0] == 3.0) and np.all(out[1] == 4.0)
    res, dy = res[:, :379], dy[:, :379]
    pg, pb = kernels.layer_norm_grad_beta(res, dy, tmp="framework", out=out, checks=True)
    assert pg is out[0] and pb is out[1]
    g_g, g_b = beta_golden(res, dy)
    assert compare(pg, g_g, "float16").ok and compare(pb, g_b, "float16").ok
    # a shared buffer larger than the UB left is the plan's overflow (561002)
    with pytest.raises(AclnnError) as ei:
        kernels.layer_norm_grad_beta(res, dy, tmp_bytes=4096)
    assert ei.value.status == TILING_ERR and "UB plan needs" in str(ei.value)


# --- 7. checked mode: a sharedTmpBuffer smaller than the tiling's ----------------------------------------------


def test_short_shared_tmp_buffer_is_reported():
    shape = (4, 16, 32)
    inputs = lng_inputs(40, shape, F32)
    t = get_layer_norm_grad_nd_tiling_info((*shape, 32), size_for(shape, F32, False, "max"), 4, False)
    short = size_for(shape, F32, False, "min")
    with pytest.raises(CheckError) as ei:
        run_lng(*inputs, tiling=t, buffer_bytes=short)
    v = ei.value.violations[0]
    assert ei.value.status == RUNTIME
    assert (v.kind, v.memory, v.offset) == ("temporary buffer too small", 'UB buffer "tmp"', 0)
    assert f"the sharedTmpBuffer holds {short} B, less than the {t.stack_buffer_size} B" in v.detail
    res, dy = beta_inputs(41, (2, 16, 64), F16)
    bt = get_layer_norm_grad_beta_nd_tiling_info((2, 16, 64, 64), 4096, 2, False)
    with pytest.raises(CheckError) as ei:
        run_beta(res, dy, tiling=bt, buffer_bytes=2048)
    assert "the sharedTmpBuffer holds 2048 B, less than the 4096 B" in str(ei.value)
    pg, pb, _, _, _ = run_beta(res, dy, tiling=bt, buffer_bytes=4096)  # the size it was made for
    g_g, g_b = beta_golden(res, dy)
    assert compare(pg, g_g, "float16").ok and compare(pb, g_b, "float16").ok
