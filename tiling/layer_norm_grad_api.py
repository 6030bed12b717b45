"""Host helpers of the Ascend C high-level APIs LayerNormGrad and LayerNormGradBeta (asc-devkit
``impl/adv_api/tiling/normalization/layernorm_grad{,_beta}_tiling_impl.cpp``): the temporary-buffer sizes and the
ND tilings, reproduced field for field in uint32 arithmetic, with every assertion of the real helpers raised as
an error (561002, the tiling's status) whose message is the real one.

``src_shape`` is [B, S, H, originalH]: H the stored (32 B aligned) last axis, originalH the real one.
``stack_buffer_size`` is in bytes, as the code reads it (the LayerNormGradBeta document says elements).
The non-950 paths only (910B, 910_93, 310P).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tilesim.errors import tiling_error

U32 = 0xFFFFFFFF
B16, B32 = 2, 4
LNG_HALF_BUF_NUM = 9  # LAYERNORM_GRAD_HALF_BUF_NUM: fp32 temporaries of one chunk, half
LNG_FLOAT_BUF_NUM = 6  # LAYERNORM_GRAD_FLOAT_BUF_NUM
LNG_REUSE_FLOAT_BUF_NUM = 4  # LAYERNORM_GRAD_REUSE_FLOAT_BUF_NUM: dy and x serve as x1 and x2
BLOCK_ELEMS = {B32: 8, B16: 16}  # LAYERNORM_GRAD_B{32,16}_DATA_NUM_PER_BLOCK


def _assert(ok: bool, api: str, func: str, message: str) -> None:
    if not ok:
        raise tiling_error("src_shape" if "hape" in message or "dims" in message else "stack_buffer_size",
                           f"[{api}][{func}] {message}")


def _shape_size(dims: tuple[int, ...]) -> int:
    """ge::Shape::GetShapeSize: 0 for no dims, -1 when a dim is unknown (-1 or -2), else the product."""
    if not dims:
        return 0
    if any(d in (-1, -2) for d in dims):
        return -1
    size = 1
    for d in dims:
        size *= d
    return size


def _check_common(api: str, func: str, src_shape: Any, type_size: int) -> tuple[int, ...]:
    """CheckLayerNormGrad(Beta)HostCommon: the type size, a non-empty shape, exactly four dims."""
    _assert(type_size in (B16, B32), api, func, f"Type size {type_size} is unsupported!")
    dims = tuple(int(d) for d in src_shape)
    _assert(_shape_size(dims) > 0, api, func, "Input Shape size must be greater than 0.")
    _assert(len(dims) == 4, api, func, f"The dims of srcShape is {len(dims)}, should be 4 (e.g. [B, S, "
                                       "storageHLength, originHLength])!")
    return dims


def _float_bits(v: float) -> int:
    return int(np.array([v], np.float32).view(np.uint32)[0])


@dataclass(frozen=True)
class LayerNormGradBetaTiling:
    """LayerNormGradBetaTiling: 20 uint32 fields, official names in snake_case. ``stack_buffer_size`` is in fp32
    elements (the helper divides the bytes by 4); positions and sizes are fp32 elements of the tmp buffer."""

    stack_buffer_size: int
    b_length: int
    s_length: int
    h_length: int
    original_h_length: int
    bsh_length: int
    bs_length: int
    one_cal_size: int
    number_of_tmp_buf: int
    loop_round: int
    input_tail_size: int
    input_tail_pos: int
    bs_tail_size: int
    bsh_cur_length: int
    bs_cur_length: int
    gamma_temp_tensor_pos: int
    beta_temp_tensor_pos: int
    input_dy_tmp_tensor_pos: int
    res_for_gamma_tmp_tensor_pos: int
    reserved: int = 0


@dataclass(frozen=True)
class LayerNormGradTiling:
    """LayerNormGradTiling: 30 uint32 fields, official names in snake_case. ``stack_buffer_size`` is in bytes;
    positions and sizes are fp32 elements of the tmp buffer; ``last_dim_value_back`` and
    ``last_dim_value_back_mul_two`` hold the float bits of 1/originalH and 2/originalH."""

    stack_buffer_size: int
    b_length: int
    s_length: int
    h_length: int
    original_h_length: int
    one_cal_size: int
    noh_cal_size: int
    loop_num: int
    tail_size: int
    noh_tail_size: int
    tmp_tensor_bsh_pos: int
    tmp_tensor_bsh_size: int
    pd_var_tensor_pos: int
    pd_var_tensor_size: int
    pd_mean_tensor_pos: int
    pd_mean_tensor_size: int
    x1_tensor_pos: int
    x1_tensor_size: int
    x2_tensor_pos: int
    x2_tensor_size: int
    x3_tensor_pos: int
    x3_tensor_size: int
    tmp_tensor_pos: int
    tmp_tensor_size: int
    tmp_tensor1_pos: int
    tmp_tensor1_size: int
    tmp_tensor2_pos: int
    tmp_tensor2_size: int
    last_dim_value_back: int
    last_dim_value_back_mul_two: int

    @property
    def need_buffer_block(self) -> int:
        """Temporaries of ``one_cal_size`` fp32 elements the API places (6, 4 with reuse, 9 for half)."""
        return max(self.tmp_tensor2_pos, self.x3_tensor_pos) // max(self.one_cal_size, 1) + 1

    @property
    def footprint(self) -> int:
        """Bytes of the tmp buffer the API touches: its last temporary ends there."""
        return 4 * (max(self.tmp_tensor2_pos, self.x3_tensor_pos) + self.one_cal_size)


def get_layer_norm_grad_beta_max_min_tmp_size(src_shape: Any, type_size: int,
                                              is_reuse_source: bool) -> tuple[int, int]:
    """GetLayerNormGradBetaMaxMinTmpSize: (max, min) bytes, 4 (half) or 2 (float) fp32 buffers of B·S·H or of H
    elements. ``is_reuse_source`` is ignored, as in the real helper."""
    api, func = "LayerNormGradBeta", "GetLayerNormGradBetaMaxMinTmpSize"
    b, s, h, _ = _check_common(api, func, src_shape, type_size)
    k = 4 if type_size == B16 else 2
    return (k * ((b * s * h * 4) & U32)) & U32, (k * h * 4) & U32


def get_layer_norm_grad_beta_nd_tiling_info(src_shape: Any, stack_buffer_size: int, type_size: int,
                                            is_reuse_source: bool) -> LayerNormGradBetaTiling:
    """GetLayerNormGradBetaNDTilingInfo: the chunk of rows that fits the tmp buffer, its loop and tail."""
    api, func = "LayerNormGradBeta", "GetLayerNormGradBetaNDTilingInfo"
    b, s, h, oh = _check_common(api, func, src_shape, type_size)
    bsh, bs = (b * s * h) & U32, (b * s) & U32
    stack = (int(stack_buffer_size) & U32) // 4
    _assert(stack >= h + h, api, func, f"stackBufferSize is not enough. ({stack} fp32 elements, at least 2 x "
                                       f"hLength = {2 * h} needed)")
    one, nbuf = stack, 1
    if type_size == B16:
        nbuf = 2
        one = (one - h - h) // nbuf
    one = one // h * h
    _assert(one != 0, api, func, f"stackBufferSize is not enough. (no whole row of {h} fits)")
    one = min(one, bsh)
    tail = bsh % one
    pos = (0, h, 2 * h, 2 * h + one) if type_size == B16 else (0, 0, 0, 0)
    return LayerNormGradBetaTiling(
        stack_buffer_size=stack, b_length=b, s_length=s, h_length=h, original_h_length=oh, bsh_length=bsh,
        bs_length=bs, one_cal_size=one, number_of_tmp_buf=nbuf, loop_round=bsh // one, input_tail_size=tail,
        input_tail_pos=bsh - tail, bs_tail_size=tail // h, bsh_cur_length=one, bs_cur_length=one // h,
        gamma_temp_tensor_pos=pos[0], beta_temp_tensor_pos=pos[1], input_dy_tmp_tensor_pos=pos[2],
        res_for_gamma_tmp_tensor_pos=pos[3])


def _lng_need(type_size: int, is_reuse_source: bool) -> int:
    if type_size == B16:
        return LNG_HALF_BUF_NUM
    return LNG_REUSE_FLOAT_BUF_NUM if is_reuse_source else LNG_FLOAT_BUF_NUM


def _check_dims(api: str, func: str, dims: tuple[int, ...]) -> None:
    """CheckSrcShape: every dim positive."""
    for i, d in enumerate(dims):
        _assert(d > 0, api, func, f"srcShape[{i}] must be greater than 0.")


def get_layer_norm_grad_max_min_tmp_size(src_shape: Any, type_size: int, is_reuse_source: bool) -> tuple[int, int]:
    """GetLayerNormGradMaxMinTmpSize (non-950): need · max/min(B·S·H, H·H) elements of the type size, need 9
    (half), 4 (float reusing its sources) or 6 (float)."""
    api, func = "LayerNormGrad", "GetLayerNormGradMaxMinTmpSize"
    dims = _check_common(api, func, src_shape, type_size)
    _check_dims(api, func, dims)
    b, s, h, _ = dims
    size, hh = (b * s * h) & U32, (h * h) & U32
    need = _lng_need(type_size, is_reuse_source)
    return (need * max(size, hh) * type_size) & U32, (need * min(size, hh) * type_size) & U32


def get_layer_norm_grad_nd_tiling_info(src_shape: Any, stack_buffer_size: int, type_size: int,
                                       is_reuse_source: bool) -> LayerNormGradTiling:
    """GetLayerNormGradNDTilingInfo (non-950): rows per chunk from the tmp bytes, rounded up to a whole 32 B
    block of per-row values (8 float, 16 half rows), and the temporaries at multiples of the chunk.

    The rounding up is the real helper's: when the tmp buffer holds fewer rows than a block, the chunk and the
    positions outgrow it (see :func:`chunk_fits`)."""
    api, func = "LayerNormGrad", "GetLayerNormGradNDTilingInfo"
    dims = _check_common(api, func, src_shape, type_size)
    _check_dims(api, func, dims)
    b, s, h, oh = dims
    size = (b * s * h) & U32
    need = _lng_need(type_size, is_reuse_source)
    one = (int(stack_buffer_size) & U32) // 4 // need
    one = one // h * h
    _assert(one > 0, api, func, f"stackBufferSize is not enough. ({stack_buffer_size} B hold no row of {h} in "
                                f"each of {need} fp32 temporaries)")
    blk = BLOCK_ELEMS[type_size]
    noh = (one // h + blk - 1) // blk * blk
    return _lng_tiling(int(stack_buffer_size) & U32, b, s, h, oh, (noh * h) & U32, noh, size, type_size,
                       is_reuse_source)


def _lng_tiling(stack: int, b: int, s: int, h: int, oh: int, one: int, noh: int, size: int, type_size: int,
                reuse: bool) -> LayerNormGradTiling:
    """SetTilingData + the loop fields: temporaries at multiples of ``one``."""
    bsh_pos, var_pos, mean_pos = 0, one, 2 * one
    if reuse and type_size == B32:
        x1 = x2 = 0
        x3 = 3 * one
    else:
        x1, x2, x3 = 3 * one, 4 * one, 5 * one
    t, t1, t2 = (6 * one, 7 * one, 8 * one) if type_size == B16 else (0, 0, 0)
    return LayerNormGradTiling(
        stack_buffer_size=stack, b_length=b, s_length=s, h_length=h, original_h_length=oh, one_cal_size=one,
        noh_cal_size=noh, loop_num=size // one, tail_size=size % one, noh_tail_size=(size % one) // h,
        tmp_tensor_bsh_pos=bsh_pos, tmp_tensor_bsh_size=one, pd_var_tensor_pos=var_pos, pd_var_tensor_size=one,
        pd_mean_tensor_pos=mean_pos, pd_mean_tensor_size=one, x1_tensor_pos=x1, x1_tensor_size=one,
        x2_tensor_pos=x2, x2_tensor_size=one, x3_tensor_pos=x3, x3_tensor_size=one, tmp_tensor_pos=t,
        tmp_tensor_size=one, tmp_tensor1_pos=t1, tmp_tensor1_size=one, tmp_tensor2_pos=t2, tmp_tensor2_size=one,
        last_dim_value_back=_float_bits(float(np.float32(1.0) / np.float32(oh))),
        last_dim_value_back_mul_two=_float_bits(float(np.float32(2.0) / np.float32(oh))))


def chunk_fits(t: LayerNormGradTiling) -> bool:
    """Whether the API's temporaries stay inside the ``stack_buffer_size`` bytes the tiling was made for. The
    real helper rounds the rows of a chunk up to a block, so at its own minimum size with fewer rows than a
    block (B·S < 8 float, < 16 half), or with a tmp size between block multiples, they do not."""
    return t.footprint <= t.stack_buffer_size


def one_chunk_tiling(src_shape: Any, type_size: int, is_reuse_source: bool) -> LayerNormGradTiling:
    """A LayerNormGradTiling that computes all B·S rows in one chunk (loopNum 1, no tail), with the temporaries
    packed at multiples of B·S·H: what a kernel that calls the API once per UB tile needs, in
    ``need · B·S·H · 4`` bytes. The per-row values are not advanced between chunks, so the block rounding of the
    official helper is not needed; everything else is as the helper computes it."""
    api, func = "LayerNormGrad", "one_chunk_tiling"
    dims = _check_common(api, func, src_shape, type_size)
    _check_dims(api, func, dims)
    b, s, h, oh = dims
    size = (b * s * h) & U32
    need = _lng_need(type_size, is_reuse_source)
    return _lng_tiling(need * size * 4, b, s, h, oh, size, b * s, size, type_size, is_reuse_source)
