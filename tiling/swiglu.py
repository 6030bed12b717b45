"""SwiGlu host tiling: ``Tiling4SwiGlu<SWIGLU_SINGLE>`` of ``activation/swi_glu/op_host/swi_glu_tiling.cpp``
(hicann/ops-nn, the non-regbase path: 910B, 910_93, 310P), reproduced field for field, plus the UB plan of its
kernels (``op_kernel/swi_glu_impl.hpp`` for fp32, ``op_kernel/swi_glu_bf16.hpp`` for fp16 and bf16) and the
checks of aclnnSwiGlu (``docs/aclnnSwiGlu.md``) and of its tiling.

The forward and SwiGluGrad share the TilingData (``SwiGluTilingData``, ``swi_glu_tiling.h``) and the whole search
(``GluSingleTilingCalculator``); only the UB budget differs. So this module reuses :mod:`tiling.swiglu_grad`'s
search (``_Search``: CalcOptBaseShape and SaveOptBaseShape) and its tiling check, with SwiGlu's budget: per element
bufferNum·3 queues of T (XXGLU_TQUE_NUM: A and B in, y out) plus fp32 temporaries, SWIGLU_TBUF_NUM_FLOAT = 1
(the ones of fp32's Div) or SWIGLU_TBUF_NUM_HALF / _BF16 = 2 (the widened A or B, and the result). On 196608 B
with two buffers that is 9824 (b16) and 7016 (fp32) elements.

x is viewed as [rowLen, 2·colLen] (rowLen the product of the axes before ``dim``, colLen half the product of the
rest), y as [rowLen, colLen]; base tiles of baseRowLen × baseColLen are dealt to the cores round-robin.

Free choices a user may override: ``core_num``, ``buffer_num`` (1 or 2; the official code picks it),
``base_row_len`` and ``base_col_len``; every other field follows from them as the official code derives it.

Where this differs from ops-nn on purpose: an empty x (which aclnnSwiGlu accepts on A2) is refused here with
561002, because the A2 tiling cannot tile it (its search divides by the aligned baseColLen, 0); the op returns an
empty y before it tiles (``kernels.swiglu``). The rank limit [1, 8] is aclnn's for any tensor: the SwiGlu document
says only "greater than 0".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tilesim.core.ub import UbPlan, shared_plan
from tilesim.errors import ACLNN_ERR_INNER_FIND_KERNEL_ERROR, AclnnError, invalid, tiling_error
from tilesim.numerics.b16 import CAST_NONE, CAST_RINT
from tilesim.soc import DEFAULT_SOC, SocSpec, get_soc
from tilesim.tools.opspec import match_tiling

from .common import BF16, FP16, FP32, ITEMSIZE, align_up, ceil_div, dtype_name, remembered, require, shape_of
from .swiglu_grad import (
    BLOCK,
    MAX_BLOCK_COUNT,
    SOC_CONFIGS,
    TILING_KEY,
    WORKSPACE_BUFFER,
    SwiGluGradTiling,
    _Opt,
    _Search,
    check_copies,
    split_view,
)

QUEUES = 3  # XXGLU_TQUE_NUM: A and B in, y out
TBUFS = {FP32: 1, FP16: 2, BF16: 2}  # SWIGLU_TBUF_NUM_FLOAT / _HALF / _BF16: fp32 temporaries of one tile each
MAX_RANK = 8


@dataclass(frozen=True)
class SwiGluTiling(SwiGluGradTiling):
    """SwiGluTilingData (official names in snake_case; the struct and its derived properties are SwiGluGrad's:
    :class:`tiling.swiglu_grad.SwiGluGradTiling`) plus ``block_dim``, ``tiling_key`` (the ge dtype: fp32 0, fp16 1,
    bf16 27) and ``workspace_size`` (16 MiB, unused by the kernel), and ``round_mode``: the kernel build's rounding of
    its b16 result (``#if __CCE_AICORE__ == 220``: CAST_RINT on 910B and 910_93, CAST_NONE elsewhere). On the NPU that
    is a compile-time choice of the kernel binary, not a TilingData field; a tilesim kernel is one build for every
    SoC, so the choice rides in the tiling, as a kernel's scalars do."""

    round_mode: int = CAST_RINT


def check_args(x: Any, dim: Any, soc: SocSpec) -> tuple[int, int]:
    """The checks of aclnnSwiGlu and its tiling, in their order; returns (rowLen, colLen), 0 for an empty x.

    None is 161001; a dtype, dim or shape rule of the document 161002 (310P also refuses an empty x); a SoC
    without the kernel 561003; 310P's colLen not a multiple of 64 B (a tiling failure) 561002.
    """
    require(x=x)
    if soc.short_soc not in SOC_CONFIGS:
        raise AclnnError(ACLNN_ERR_INNER_FIND_KERNEL_ERROR,
                         f"SwiGlu has no AI Core kernel for {soc.name} ({soc.short_soc}); ops-nn registers it for "
                         f"{', '.join(SOC_CONFIGS)} only")
    t_x = dtype_name(x)
    allowed = (FP32, FP16, BF16) if soc.supports_bf16 else (FP32, FP16)
    if t_x not in allowed:
        raise invalid("x", f"dtype {t_x} not supported on {soc.name}; supported: {', '.join(allowed)}")
    s_x = shape_of(x)
    if not 1 <= len(s_x) <= MAX_RANK:
        raise invalid("x", f"rank {len(s_x)} must be in [1, {MAX_RANK}]")
    if isinstance(dim, bool) or not isinstance(dim, int | np.integer):
        raise invalid("dim", f"must be an integer, got {type(dim).__name__}")
    dim = int(dim)
    if not -len(s_x) <= dim <= len(s_x) - 1:
        raise invalid("dim", f"{dim} must be in [{-len(s_x)}, {len(s_x) - 1}] for x of rank {len(s_x)}")
    d = dim % len(s_x)
    if s_x[d] % 2:
        raise invalid("x", f"shape {list(s_x)}: the split axis {d} (dim {dim}) has odd size {s_x[d]}; it must "
                           "be even")
    if 0 in s_x and soc.arch != 220:
        raise invalid("x", f"shape {list(s_x)}: empty tensors are not supported on {soc.name}")
    row_len, col_len = split_view(s_x, dim)
    isz = ITEMSIZE[t_x]
    if row_len * col_len and soc.arch == 200 and (col_len * isz) % 64:
        raise tiling_error("x", f"colLen {col_len} (half of the axes from dim {dim} on) is {col_len * isz} B; on "
                                f"{soc.name} it must be a multiple of 64 B")
    return row_len, col_len


def out_shape(x: Any, dim: int) -> tuple[int, ...]:
    """InferShapeForSwiGlu: x's shape with the split axis halved (``dim`` already checked)."""
    s = shape_of(x)
    d = int(dim) % len(s)
    return s[:d] + (s[d] // 2,) + s[d + 1:]


def max_tile_len(ub_size: int, dtype: str, buffer_num: int) -> int:
    """CalcUbMaxTileLen: the largest tile in elements, 32 B aligned down: UB over bufferNum·3 queues of T plus the
    fp32 temporaries (196608 B with two buffers: b16 9824, fp32 7016)."""
    isz = ITEMSIZE[dtype]
    n = ub_size // (buffer_num * QUEUES * isz + TBUFS[dtype] * 4)
    m = BLOCK // isz
    return n // m * m if n >= m else 0


def _search(row_len: int, col_len: int, dtype: str, spec: SocSpec, cores: int, nb: int) -> _Search:
    """GluSingleTilingCalculator for one buffer count, with SwiGlu's largest tile."""
    return _Search(row_len, col_len, ITEMSIZE[dtype], cores, max_tile_len(spec.ub_size, dtype, nb))


def _official(row_len: int, col_len: int, dtype: str, spec: SocSpec, cores: int,
              buffer_num: int | None) -> tuple[_Opt, int]:
    """CalcTiling: the double-buffered search, and the single-buffered one when it saves each core its second
    tile without using fewer cores."""
    nb = 2 if buffer_num is None else buffer_num
    opt = _search(row_len, col_len, dtype, spec, cores, nb).run()
    if opt is None:
        raise tiling_error("x", f"no base shape fits [rowLen {row_len}, colLen {col_len}] with buffer_num {nb} "
                                "(CalcOptBaseShape failed)")
    if buffer_num is None and opt.tiles_per_core == 2:
        single = _search(row_len, col_len, dtype, spec, cores, 1).run()
        if single is not None and single.tiles_per_core == 1 and single.used_cores >= opt.used_cores:
            return single, 1
    return opt, nb


@remembered(1)
def swiglu(x: Any, dim: int = -1, *, soc: str | SocSpec = DEFAULT_SOC, core_num: int | None = None,
           buffer_num: int | None = None, base_row_len: int | None = None,
           base_col_len: int | None = None) -> SwiGluTiling:
    """The official SwiGlu tiling for ``x`` (anything with ``.shape`` and ``.dtype``) split along ``dim``.

    Overrides of the free choices give a consistent alternative tiling; leave them None for the official one.
    ``base_row_len`` and ``base_col_len`` go together (either alone keeps the search's rule for the other).
    """
    spec = get_soc(soc)
    row_len, col_len = check_args(x, dim, spec)
    if row_len * col_len == 0:
        raise tiling_error("x", f"shape {list(shape_of(x))} is empty: the A2 tiling has no base shape for it "
                                "(aclnnSwiGlu returns an empty y before tiling)")
    dtype = dtype_name(x)
    cores = spec.core_num_aiv if core_num is None else int(core_num)
    if not 1 <= cores <= spec.core_num_aiv:
        raise tiling_error("core_num", f"{cores} must be in [1, {spec.core_num_aiv}] (GetCoreNumAiv of {spec.name})")
    if buffer_num is not None and buffer_num not in (1, 2):
        raise tiling_error("buffer_num", f"{buffer_num} must be 1 or 2")
    if base_row_len is None and base_col_len is None:
        opt, nb = _official(row_len, col_len, dtype, spec, cores, buffer_num)
        br, bc = opt.base_row, opt.base_col
    else:
        nb = 2 if buffer_num is None else buffer_num
        m = BLOCK // ITEMSIZE[dtype]
        s = _search(row_len, col_len, dtype, spec, cores, nb)
        bc = int(base_col_len) if base_col_len is not None else min(col_len, s.max_tile)
        if bc < 1:
            raise tiling_error("base_col_len", f"{bc} must be at least 1")
        if base_row_len is not None:
            br = int(base_row_len)
        else:  # as many rows as fit, or one where the gap between rows (of a full or the tail tile) is too long
            single = s.must_single_row(bc) or s.must_single_row(col_len % bc or bc)
            br = 1 if single else max(1, min(s.max_tile // align_up(bc, m), row_len, MAX_BLOCK_COUNT))
    total = ceil_div(row_len, max(br, 1)) * ceil_div(col_len, max(bc, 1))
    t = SwiGluTiling(is_32b_aligned=int(col_len % (BLOCK // ITEMSIZE[dtype]) == 0), is_double_buffer=int(nb == 2),
                     row_len=row_len, col_len=col_len, base_row_len=br, base_col_len=bc,
                     block_dim=min(total, cores), tiling_key=TILING_KEY[dtype], workspace_size=WORKSPACE_BUFFER,
                     round_mode=CAST_RINT if spec.arch == 220 else CAST_NONE)
    if base_row_len is not None or base_col_len is not None:  # an override that cannot run is refused here
        check_copies(t, spec)
        ub_plan(t, spec).check()
    return t


def check_tiling(t: Any, x: Any, dim: int = -1, *, soc: str | SocSpec = DEFAULT_SOC) -> SwiGluTiling:
    """A hand-made tiling, if it is what its free choices give for these arguments on this SoC (``round_mode``,
    the kernel build, included), field for field (:func:`tilesim.tools.opspec.match_tiling`; 561002 naming the field
    otherwise); the tiling function checks that overridden tiles are ones DataCopy can move and fit the UB."""
    return match_tiling(t, swiglu, x, dim, soc=soc)


@shared_plan
def ub_plan(t: SwiGluTiling, soc: str | SocSpec = DEFAULT_SOC) -> UbPlan:
    """The kernel's InitBuffer calls for this tiling (``InitUbBuffer``, in order, under the names kernels.swiglu's
    kernels give them): three queues of bufferNum buffers of T (A and B in, y out), then the fp32 temporaries:
    fp32 ``tmp_queue`` (the ones Div divides), b16 ``input_temp_buffer`` (A, then B, widened) and
    ``output_temp_buffer`` (the result before its rounding)."""
    plan = UbPlan(get_soc(soc).ub_size)
    n, nb = t.tile_length, t.buffer_num
    for name in ("in_queue_a", "in_queue_b", "out_queue_c"):
        plan.add(name, n * t.itemsize, nb)
    for name in (("tmp_queue",) if t.dtype == FP32 else ("input_temp_buffer", "output_temp_buffer")):
        plan.add(name, n * 4)
    return plan
