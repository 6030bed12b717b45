"""Softmax host tiling: a kernel of tilesim's own around the Ascend C high-level ``SoftMax`` API, as a user's kernel on
A2 would be written (ops-nn's Ascend C SoftmaxV2 kernel is registered for the 950 only, ``softmax_v2_def.cpp``, and
the A2 binary's source is not public), plus the API's host helpers and the checks of aclnnSoftmax.

Two parts, kept apart:

- **asc-devkit's** (mirror-cann/asc-devkit ``impl/adv_api/tiling/activation/softmax_tiling.cpp``, reproduced field
  for field): :class:`SoftMaxTiling` (the ``SoftMaxTiling`` struct), :func:`get_soft_max_max_tmp_size`,
  :func:`get_soft_max_min_tmp_size` (A2: ``(32/sizeof(T) + srcK + 64)`` floats a row, for srcM rows or one) and
  :func:`soft_max_tiling_func` (``SoftMaxTilingFunc``: ``baseM = min(tmp / 4 / (32/sizeof(T) + srcK + 64), srcM)``,
  rounded down to 8 rows when it is less than srcM, then ``AdjustToBasicBlockBaseM``: with srcM a multiple of 8 and
  srcK of 64, baseM is cut to a divisor of srcM and halved until baseM·srcK < 16384). A pass of the API covers
  ``reduce_m`` (= ``split_m``) rows; ``range_m`` full passes and one of ``tail_m`` rows. The kernel-side
  re-computation (``SoftMaxTilingFunc`` of ``softmax_common/softmax_tiling_func.h``, run by the API when the shape
  it is given is not the tiling's) is the kernel module's: :func:`kernels.softmax.kernel_tiling_func`.
- **tilesim's** (the outer kernel, :class:`SoftmaxOpTiling`): x is viewed as [rows, cols] (cols the normalised
  axis), each row padded in UB to ``cols_align`` (32 B of x's dtype: the API's srcK must be 32 B aligned).
  bfloat16, which the API does not take (half and float, ``SoftMax.md``), is widened into an fp32 TBuf of the tile
  (``cast_buf``) and run through ``SoftMax<float>``: the API's tiling and tmp sizes are float's. Cores
  take ``block_rows`` rows each, the first ``former_num`` one more; a core walks its rows in tiles of ``tile_rows``
  through a VECIN queue for x and a VECOUT queue for y of ``buffer_num`` buffers each, and a TBuf of ``tmp_size``
  bytes is the API's sharedTmpBuffer. Official choices: every vector core (``GetCoreNumAiv``; fewer when there
  are fewer rows); a tile of as many rows as fit the whole UB (no API on this path uses the top 8 KiB of
  scratch on A2) with one buffer each when that holds a core's rows, else two; the API's largest tmp
  (``GetSoftMaxMaxTmpSize`` of the tile); and the tile cut to the rows the API's tiling takes in one pass
  (``reduce_m``), so that a tile is one pass (see below). The API's tiling for a full tile
  (``soft_max_tiling_func([tile_rows, cols_align], sizeof(T), tmp_size)``) rides in the TilingData's
  ``src_m`` ... ``tail_reduce_size`` fields, as a real op embeds ``SoftMaxTiling`` in its TilingData.

- **tilesim's [A, R, B] kernel** (:class:`SoftmaxArbTiling`), for a normalised axis R with elements after it (B, the
  product of the later axes, above 1; an axis followed only by axes of size 1, or of size 1 itself, is the
  last-axis kernel's): tiles of one A index and ``tile_b`` elements of B over the cores, each tile's R rows whole
  in UB when they fit, else in loads of ``tile_r`` rows (a pass for the max, one for the sum, one to normalise).
  Official choices: every vector core; B whole when a row of it is at most 255 32-B blocks of floats (the uint8
  repStride of the row-broadcast Sub / Div), cut further, to 32 B at least, until there are as many tiles as
  cores; R whole when it fits single-buffered (double when a core has several tiles and they fit), else as many
  rows a load as fit double-buffered (at most DataCopyPad's 4095). Overrides: ``core_num``, ``tile_rows`` (R rows
  a load), ``tile_b``, ``buffer_num``.

- **tilesim's split-row kernel** (:class:`SoftmaxLongTiling`), for rows the API kernel cannot take (or any
  last-axis rows when ``tile_cols`` is given): a row at a time, in loads of ``tile_cols`` elements (a multiple of
  64), over three passes (the max, the sum, the normalisation); rows over the cores as the API kernel shares them.
  Official choices: every vector core, two buffers a queue, loads of as many 64-element rows as fit the UB.
  Overrides: ``core_num``, ``tile_cols``, ``buffer_num``.

Free choices of the last-axis kernel a user may override: ``core_num``, ``tile_rows``, ``buffer_num`` (1 or 2) and
``tmp_size`` (bytes, a multiple of 32, at least ``GetSoftMaxMinTmpSize``); a smaller tmp makes the API take a tile
in several passes.

The API's limits: its Max / Add folds take a row's 64-wide blocks past the first 512 elements in one instruction
whose repeat count is a uint8 (``(uint8_t)(splitBlock - 8)`` in ``BigBlockReduceMax`` / ``Sum``), so cols must be
below 64·264 = 16896; a longer row, or one that does not fit the UB beside the API's tmp, goes to the split-row
kernel (below). Enforced with 561002: a pass's rows are a uint8
repeat count for cols in [128, 512) (``NewReduceMaxLastNDImpl``) and ⌈rows/8⌉ one for the broadcast
(``AlignedBroadCastImpl``), so tile_rows ≤ 255 there and ≤ 2040 elsewhere; DataCopyPad's blockCount ≤ 4095.

float64 has no AI Core kernel: aclnn's l0op::SoftmaxV2 sends it to the AI CPU, which tilesim computes on the host
(:func:`kernels.softmax.ai_cpu_softmax`); this function refuses it (561002: nothing to tile).

aclnnSoftmax's checks (``op_api/aclnn_softmax.cpp``), in its order: x or out None 161001; an empty x succeeds
without a launch (the op returns an empty y); x's or out's dtype not supported 161002; dim outside
[-ndim, ndim-1] (a 0-d x counts as 1-d) 161002; rank above 8 or out's shape not x's 161002. tilesim's own
refusals, all 161002 unless stated: an out dtype other than x's (aclnn
would Cast the result in a second kernel, not modelled); a SoC other than 910B / 910_93 561003 (the kernels are
built on the v220 implementation of the API and on DataCopyPad, which 310P lacks).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from tilesim.core.ub import UbPlan, shared_plan
from tilesim.errors import ACLNN_ERR_INNER_FIND_KERNEL_ERROR, AclnnError, invalid, tiling_error
from tilesim.soc import DEFAULT_SOC, SocSpec, get_soc
from tilesim.tools.opspec import match_tiling

from .common import BF16, FP16, FP32, ITEMSIZE, align_up, ceil_div, dtype_name, numel, remembered, require, shape_of

BLOCK = 32
FLOAT_SIZE = 4
BASICBLOCK_UNIT = 64  # SOFTMAX_BASICBLOCK_UNIT: floats of a repeat, the per-row fold buffer of the reductions
BASIC_TILE_NUM = 8  # BASIC_TILE_NUM: rows of a basic block
BASICBLOCK_MIN_SIZE = 256  # SOFTMAX_BASICBLOCK_MIN_SIZE
SUPPORT_TYPESIZE = (2, 4)
MAX_RANK = 8
MAX_COLS = 64 * 264 - 1  # BigBlockReduce*'s (uint8_t)(cols / 64 - 8) repeats: cols / 64 at most 263
MAX_PASS_ROWS_U8 = 255  # cols in [128, 512): NewReduce*LastNDImpl's (uint8_t)(originalSrcM) repeats
MAX_PASS_ROWS = 255 * 8  # AlignedBroadCastImpl's (uint8_t) Brcb repeats of 8 rows
MAX_BLOCK_COUNT = 4095  # DataCopyPad's blockCount
FP64 = "float64"
TILING_KEY = {FP32: 0, FP16: 1, BF16: 27}  # the ge::DataType of x
KEY_DTYPE = {v: k for k, v in TILING_KEY.items()}
DTYPES = (FP32, FP16, BF16, FP64)  # aclnn_softmax.cpp's ASCEND910B_DTYPE_SUPPORT_LIST
SUPPORTED_SOCS = ("Ascend910B", "Ascend910_93")


# ---------------------------------------------------------------------------------------------------------------
# asc-devkit: the SoftMax API's host helpers


@dataclass(frozen=True)
class SoftMaxTiling:
    """The SoftMax API's ``SoftMaxTiling`` (``softmax_tilingdata.h``), official names in snake_case: the shape
    (src_m x src_k), the max / sum outputs' shape (out_max_*: a 32 B block a row), a pass's rows and elements
    (split_* = reduce_m x src_k), a pass's reduce results (reduce_*: reduce_m x 32/sizeof(T) floats), the full
    passes (range_m) and the last pass's rows (tail_m) and sizes."""

    src_m: int
    src_k: int
    src_size: int
    out_max_m: int
    out_max_k: int
    out_max_size: int
    split_m: int
    split_k: int
    split_size: int
    reduce_m: int
    reduce_k: int
    reduce_size: int
    range_m: int
    tail_m: int
    tail_split_size: int
    tail_reduce_size: int


API_FIELDS = tuple(f.name for f in fields(SoftMaxTiling))


def _api_checks(func: str, src_shape: Any, type_size: int) -> tuple[int, int]:
    """HighLevelApiCheck's shape and type-size checks and the assertions of the helpers (561002, with their
    messages): a non-empty shape, a positive last axis of whole 32 B blocks, a type size of 2 or 4. Returns
    (srcM, srcK) (``GetLastAxisShapeND``)."""
    dims = tuple(int(d) for d in src_shape)
    if not dims or numel(dims) <= 0:
        raise tiling_error("src_shape", f"[{func}] Input shape size should be greater than 0!")
    if dims[-1] * type_size % BLOCK:
        raise tiling_error("src_shape", f"[{func}] The shape LastAxis data size must be 32-byte aligned!")
    if type_size not in SUPPORT_TYPESIZE:
        raise tiling_error("type_size", f"[{func}] Type size {type_size} is unsupported! Support typesize is 2 4.")
    return numel(dims) // dims[-1], dims[-1]


def get_soft_max_max_tmp_size(src_shape: Any, type_size: int, is_reuse_source: bool = False) -> int:
    """GetSoftMaxMaxTmpSize (A2): bytes of the sharedTmpBuffer with which one pass takes every row:
    ``srcM·(32/sizeof(T) + srcK + 64)`` floats. ``is_reuse_source`` has no effect (the API warns)."""
    m, k = _api_checks("GetSoftMaxMaxTmpSize", src_shape, type_size)
    return m * (BLOCK // type_size + k + BASICBLOCK_UNIT) * FLOAT_SIZE


def get_soft_max_min_tmp_size(src_shape: Any, type_size: int, is_reuse_source: bool = False) -> int:
    """GetSoftMaxMinTmpSize (A2): bytes for one row a pass: ``32/sizeof(T) + srcK + 64`` floats."""
    _, k = _api_checks("GetSoftMaxMinTmpSize", src_shape, type_size)
    return (BLOCK // type_size + k + BASICBLOCK_UNIT) * FLOAT_SIZE


def _adjust_to_basic_block(base_m: int, src_m: int, src_k: int) -> int:
    """AdjustToBasicBlockBaseM: with srcM a multiple of 8 and srcK of 64, baseM a divisor of srcM (in steps of 8)
    and baseM·srcK below 64·256 (the comment: "max repeat only support 255")."""
    if base_m > BASIC_TILE_NUM and src_m % BASIC_TILE_NUM == 0 and src_k % BASICBLOCK_UNIT == 0:
        base_m = base_m // BASIC_TILE_NUM * BASIC_TILE_NUM
        while src_m % base_m:
            base_m -= BASIC_TILE_NUM
        while base_m * src_k >= BASICBLOCK_UNIT * BASICBLOCK_MIN_SIZE:
            base_m //= 2
    return base_m


def soft_max_tiling_func(src_shape: Any, type_size: int, local_work_space_size: int) -> SoftMaxTiling:
    """SoftMaxTilingFunc (host, A2): the API's tiling of ``src_shape`` (its last axis srcK, 32 B aligned; the rest
    srcM) for a sharedTmpBuffer of ``local_work_space_size`` bytes."""
    src_m, src_k = _api_checks("SoftMaxTilingFunc", src_shape, type_size)
    if local_work_space_size <= 0:
        raise tiling_error("local_work_space_size",
                           "[SoftMaxTilingFunc] The localWorkSpaceSize should be greater than 0!")
    epb = BLOCK // type_size
    base_m = min(local_work_space_size // FLOAT_SIZE // (epb + src_k + BASICBLOCK_UNIT), src_m)
    if src_m > base_m > BASIC_TILE_NUM:
        base_m = base_m // BASIC_TILE_NUM * BASIC_TILE_NUM
    base_m = _adjust_to_basic_block(base_m, src_m, src_k)
    tail = src_m % base_m if base_m else 0
    return SoftMaxTiling(src_m=src_m, src_k=src_k, src_size=src_m * src_k, out_max_m=src_m, out_max_k=epb,
                         out_max_size=src_m * epb, split_m=base_m, split_k=src_k, split_size=base_m * src_k,
                         reduce_m=base_m, reduce_k=epb, reduce_size=base_m * epb,
                         range_m=src_m // base_m if base_m else 0, tail_m=tail, tail_split_size=tail * src_k,
                         tail_reduce_size=tail * epb)


# ---------------------------------------------------------------------------------------------------------------
# tilesim: the outer kernel's tiling


@dataclass(frozen=True)
class SoftmaxOpTiling:
    """The TilingData of tilesim's softmax kernel: x as [rows, cols] with rows padded to ``cols_align`` in UB;
    ``block_dim`` cores, the first ``former_num`` taking ``block_rows + 1`` rows and the others ``block_rows``;
    tiles of ``tile_rows`` rows through queues of ``buffer_num`` buffers; a sharedTmpBuffer of ``tmp_size`` bytes;
    ``itemsize`` (x's); then the SoftMax API's :class:`SoftMaxTiling` of a full tile, field for field;
    ``tiling_key`` (x's ge::DataType: fp32 0, fp16 1, bf16 27) and ``workspace_size`` (the library's 16 MiB,
    ``GetLibApiWorkSpaceSize``, which the kernel does not touch)."""

    rows: int
    cols: int
    cols_align: int
    block_dim: int
    former_num: int
    block_rows: int
    tile_rows: int
    buffer_num: int
    tmp_size: int
    itemsize: int
    src_m: int
    src_k: int
    src_size: int
    out_max_m: int
    out_max_k: int
    out_max_size: int
    split_m: int
    split_k: int
    split_size: int
    reduce_m: int
    reduce_k: int
    reduce_size: int
    range_m: int
    tail_m: int
    tail_split_size: int
    tail_reduce_size: int
    tiling_key: int
    workspace_size: int

    @property
    def dtype(self) -> str:
        """The input's dtype name: 'float32', 'float16' or 'bfloat16' (from ``tiling_key``)."""
        return KEY_DTYPE[self.tiling_key]

    @property
    def softmax_tiling(self) -> SoftMaxTiling:
        """The SoftMax API's tiling of a full tile, as its own struct."""
        return SoftMaxTiling(**{f: getattr(self, f) for f in API_FIELDS})

    @property
    def tile_bytes(self) -> int:
        """Bytes of one queue buffer: tile_rows rows of cols_align elements."""
        return self.tile_rows * self.cols_align * self.itemsize

    @staticmethod
    def choice_fields() -> dict[str, str | None]:
        """The overrides of :func:`softmax` and the fields that carry them (block_dim: the core count)."""
        return {"core_num": "block_dim", "tile_rows": "tile_rows", "buffer_num": "buffer_num", "tmp_size": "tmp_size"}

    def rows_of_core(self, c: int) -> tuple[int, int]:
        """(first row, rows) of core ``c``."""
        return c * self.block_rows + min(c, self.former_num), self.block_rows + (c < self.former_num)


def check_args(x: Any, dim: Any, out: Any, soc: SocSpec) -> tuple[int, int]:
    """aclnnSoftmax's checks and tilesim's refusals (module docstring), in aclnn's order; ``out`` None is allowed
    here (the op API makes y; the aclnn form checks it first). Returns (rows, cols), rows·cols = 0 for an empty
    x."""
    require(x=x)
    s_x = shape_of(x)
    if numel(s_x) == 0:
        return 0, 0
    if soc.short_soc not in SUPPORTED_SOCS:
        raise AclnnError(ACLNN_ERR_INNER_FIND_KERNEL_ERROR,
                         f"softmax has no kernel for {soc.name} ({soc.short_soc}): tilesim's kernel is built on the "
                         f"v220 SoftMax API and DataCopyPad; {', '.join(SUPPORTED_SOCS)} only")
    t_x = dtype_name(x)
    if t_x not in DTYPES:
        raise invalid("x", f"dtype {t_x} not supported; supported: {', '.join(DTYPES)}")
    has_out = out is not None and hasattr(out, "dtype") and hasattr(out, "shape")  # else the op API's out check
    if has_out:
        t_o = dtype_name(out)
        if t_o not in DTYPES:
            raise invalid("out", f"dtype {t_o} not supported; supported: {', '.join(DTYPES)}")
        if t_o != t_x:
            raise invalid("out", f"dtype {t_o} must be x's ({t_x}): aclnn casts the result to out's dtype in a "
                                 "second kernel, which tilesim does not run")
    if isinstance(dim, bool) or not isinstance(dim, int | np.integer):
        raise invalid("dim", f"must be an integer, got {type(dim).__name__}")
    nd = max(len(s_x), 1)
    dim = int(dim)
    if not -nd <= dim <= nd - 1:
        raise invalid("dim", f"{dim} must be in [{-nd}, {nd - 1}] for x of rank {len(s_x)}")
    if len(s_x) > MAX_RANK:
        raise invalid("x", f"rank {len(s_x)} must be at most {MAX_RANK}")
    if has_out and shape_of(out) != s_x:
        raise invalid("out", f"shape {list(shape_of(out))} must be x's {list(s_x)}")
    s = s_x or (1,)
    cols = s[dim % nd]
    return numel(s) // cols, cols


def arb(shape: tuple[int, ...], dim: int) -> tuple[int, int, int]:
    """x of ``shape`` as [A, R, B] for softmax along ``dim`` (already checked): A the axes before it, R its length,
    B the axes after it (a 0-d x is [1, 1, 1])."""
    s = shape or (1,)
    d = dim % len(s)
    return numel(s[:d]), s[d], numel(s[d + 1:])


def api_size(dtype: str) -> int:
    """sizeof(T) of the SoftMax API's T for x of ``dtype``: bfloat16 is widened to float first (the API takes half
    and float)."""
    return FLOAT_SIZE if dtype == BF16 else ITEMSIZE[dtype]


def _row_bytes(cols_align: int, dtype: str, nb: int) -> int:
    """UB bytes a row of a tile takes: two queues of nb buffers of cols_align elements, bfloat16's fp32 copy of
    the row, and the API's largest tmp (32/sizeof(T) + cols_align + 64 floats)."""
    cast = cols_align * FLOAT_SIZE if dtype == BF16 else 0
    return (2 * nb * cols_align * ITEMSIZE[dtype] + cast
            + (BLOCK // api_size(dtype) + cols_align + BASICBLOCK_UNIT) * FLOAT_SIZE)


def _fit_rows(ub: int, cols_align: int, dtype: str, nb: int) -> int:
    """Rows a tile can hold in the UB (:func:`_row_bytes` a row)."""
    return ub // _row_bytes(cols_align, dtype, nb)


def _row_cap(cols: int) -> int:
    """The most rows a pass of the API takes (its uint8 repeat counts) and DataCopyPad moves (blockCount)."""
    return MAX_PASS_ROWS_U8 if 128 <= cols < 512 else min(MAX_PASS_ROWS, MAX_BLOCK_COUNT)


def _build(rows: int, cols: int, dtype: str, spec: SocSpec, block_dim: int, tile_rows: int, buffer_num: int,
           tmp_size: int) -> SoftmaxOpTiling:
    isz = ITEMSIZE[dtype]
    cols_align = align_up(cols, BLOCK // isz)
    api = soft_max_tiling_func((tile_rows, cols_align), api_size(dtype), tmp_size)
    return SoftmaxOpTiling(rows=rows, cols=cols, cols_align=cols_align, block_dim=block_dim,
                           former_num=rows % block_dim, block_rows=rows // block_dim, tile_rows=tile_rows,
                           buffer_num=buffer_num, tmp_size=tmp_size, itemsize=isz,
                           **{f: getattr(api, f) for f in API_FIELDS}, tiling_key=TILING_KEY[dtype],
                           workspace_size=spec.lib_workspace_size)


@remembered(1)
def softmax(x: Any, dim: int = -1, *, soc: str | SocSpec = DEFAULT_SOC, core_num: int | None = None,
            tile_rows: int | None = None, buffer_num: int | None = None, tmp_size: int | None = None,
            tile_b: int | None = None, tile_cols: int | None = None) -> Any:
    """The official tiling of tilesim's softmax kernel for ``x`` (anything with ``.shape`` and ``.dtype``) along
    ``dim``; overrides of the free choices give a consistent alternative (None: the official choice). An axis whose
    elements are contiguous (followed only by axes of size 1, or of size 1 itself) is the last-axis kernel's
    (:class:`SoftmaxOpTiling`), or the split-row kernel's (:class:`SoftmaxLongTiling`) for rows the SoftMax API
    cannot take in one pass, or when ``tile_cols`` (a row's elements a load) is given; any other axis is the
    [A, R, B] kernel's (:class:`SoftmaxArbTiling`: ``tile_rows`` is its R rows a load, ``tile_b`` its B elements a
    tile). ``tmp_size`` is the API kernel's only."""
    spec = get_soc(soc)
    rows, cols = check_args(x, dim, None, spec)
    if rows * cols == 0:
        raise tiling_error("x", f"shape {list(shape_of(x))} is empty: there is nothing to tile (aclnnSoftmax "
                                "returns before launching)")
    if dtype_name(x) == FP64:
        raise tiling_error("x", "float64 runs on the AI CPU (SoftmaxV2's AI CPU kernel, which aclnn launches for a "
                                "dtype no AI Core kernel takes): there is no AI Core kernel to tile")
    a, r, b = arb(shape_of(x), int(dim))
    if b > 1 and r > 1:
        if tile_cols is not None:
            raise tiling_error("tile_cols", f"{tile_cols}: the [A, R, B] kernel takes R rows, not a row in loads")
        return _arb_tiling(a, r, b, dtype_name(x), spec, core_num, tile_rows, buffer_num, tmp_size, tile_b)
    if tile_b is not None:
        raise tiling_error("tile_b", f"{tile_b}: the normalised axis is contiguous (the last-axis kernel), which has "
                                     "no B tiles")
    dtype = dtype_name(x)
    isz, asz = ITEMSIZE[dtype], api_size(dtype)
    if tile_cols is not None or cols > MAX_COLS or _fit_rows(spec.ub_size, align_up(cols, BLOCK // isz), dtype, 1) < 1:
        return _long_tiling(rows, cols, dtype, spec, core_num, tile_rows, buffer_num, tmp_size, tile_cols)
    cores = spec.core_num_aiv if core_num is None else int(core_num)
    if not 1 <= cores <= spec.core_num_aiv:
        raise tiling_error("core_num", f"{cores} must be in [1, {spec.core_num_aiv}] (GetCoreNumAiv of {spec.name})")
    if buffer_num is not None and buffer_num not in (1, 2):
        raise tiling_error("buffer_num", f"{buffer_num} must be 1 or 2")
    block_dim = min(cores, rows)
    core_rows = ceil_div(rows, block_dim)
    cols_align = align_up(cols, BLOCK // isz)
    if tile_rows is None:
        fit1 = min(_fit_rows(spec.ub_size, cols_align, dtype, 1), _row_cap(cols))
        nb = buffer_num or (1 if core_rows <= fit1 else 2)  # double buffers only where a core has several tiles
        fit = min(_fit_rows(spec.ub_size, cols_align, dtype, nb), _row_cap(cols))
        if fit < 1:
            raise tiling_error("buffer_num", f"{nb}: a row of {cols} elements does not fit the UB twice")
        rows_t = min(core_rows, fit)
        if tmp_size is None:  # cut the tile to what the API takes in one pass (AdjustToBasicBlockBaseM)
            rows_t = soft_max_tiling_func((rows_t, cols_align), asz,
                                          get_soft_max_max_tmp_size((rows_t, cols_align), asz)).reduce_m
            if buffer_num is None and rows_t < core_rows:
                nb = 2 if _fit_rows(spec.ub_size, cols_align, dtype, 2) >= rows_t else 1
    else:
        rows_t = int(tile_rows)
        if not 1 <= rows_t <= min(core_rows, _row_cap(cols)):
            raise tiling_error("tile_rows", f"{rows_t} must be in [1, {min(core_rows, _row_cap(cols))}] (a core's "
                                            "rows, the SoftMax API's and DataCopyPad's row limits)")
        nb = buffer_num or (1 if rows_t >= core_rows else 2)
    if tmp_size is None:
        tmp = get_soft_max_max_tmp_size((rows_t, cols_align), asz)
    else:
        tmp = int(tmp_size)
        low = get_soft_max_min_tmp_size((1, cols_align), asz)
        if tmp < low or tmp % BLOCK:
            raise tiling_error("tmp_size", f"{tmp} must be a multiple of 32 B and at least {low} B "
                                           "(GetSoftMaxMinTmpSize: one row a pass)")
    t = _build(rows, cols, dtype, spec, block_dim, rows_t, nb, tmp)
    if t.reduce_m < 1:
        raise tiling_error("tmp_size", f"{t.tmp_size} B gives the SoftMax API no rows a pass")
    ub_plan(t, spec).check()
    return t


# ---------------------------------------------------------------------------------------------------------------
# tilesim: the [A, R, B] kernel (a normalised axis that is not the last contiguous one)


@dataclass(frozen=True)
class SoftmaxArbTiling:
    """The TilingData of tilesim's [A, R, B] softmax kernel: x as [a, r, b] (r the normalised axis), cut into
    ``a · b_chunks`` tiles of one A index and ``tile_b`` B elements (the last chunk of B shorter); ``block_dim``
    cores, the first ``former_num`` taking ``block_tiles + 1`` tiles and the others ``block_tiles``. A tile's R
    rows come in loads of ``tile_r`` rows (``r_chunks`` loads; one: the whole tile at once) through queues of
    ``buffer_num`` buffers, each row padded in UB to ``b_align`` (32 B of x's dtype); ``itemsize`` and
    ``tiling_key`` (x's ge::DataType: fp32 0, fp16 1, bf16 27); ``workspace_size`` (the library's 16 MiB, which
    the kernel does not touch)."""

    a: int
    r: int
    b: int
    block_dim: int
    former_num: int
    block_tiles: int
    tile_b: int
    b_chunks: int
    b_align: int
    tile_r: int
    r_chunks: int
    buffer_num: int
    itemsize: int
    tiling_key: int
    workspace_size: int

    @property
    def dtype(self) -> str:
        """The input's dtype name (from ``tiling_key``)."""
        return KEY_DTYPE[self.tiling_key]

    @property
    def tiles(self) -> int:
        """Tiles in all: an A index and a chunk of B each."""
        return self.a * self.b_chunks

    @property
    def tile_bytes(self) -> int:
        """Bytes of one queue buffer: tile_r rows of b_align elements."""
        return self.tile_r * self.b_align * self.itemsize

    @staticmethod
    def choice_fields() -> dict[str, str | None]:
        """The overrides of :func:`softmax` and the fields that carry them (block_dim: the core count)."""
        return {"core_num": "block_dim", "tile_rows": "tile_r", "buffer_num": "buffer_num", "tmp_size": None,
                "tile_b": "tile_b"}

    def tiles_of_core(self, c: int) -> tuple[int, int]:
        """(first tile, tiles) of core ``c``."""
        return c * self.block_tiles + min(c, self.former_num), self.block_tiles + (c < self.former_num)


def arb_row_bytes(b_align: int, dtype: str, nb: int) -> int:
    """UB bytes an R row of an [A, R, B] tile takes: the x and y queues (nb buffers each), the fp32 copy of a b16
    row, and half a row of the fold buffer (the first fold step halves the rows)."""
    isz = ITEMSIZE[dtype]
    cast = b_align * FLOAT_SIZE if isz == 2 else 0
    return 2 * nb * b_align * isz + cast + b_align * FLOAT_SIZE // 2


def arb_fixed_bytes(b_align: int) -> int:
    """UB bytes of an [A, R, B] tile that do not grow with its rows: the max and sum rows and the fold buffer's
    rounding up."""
    return 3 * b_align * FLOAT_SIZE


def _arb_fit(ub: int, b_align: int, dtype: str, nb: int) -> int:
    """R rows an [A, R, B] load can hold (DataCopyPad's blockCount at most)."""
    return min(max(ub - arb_fixed_bytes(b_align), 0) // arb_row_bytes(b_align, dtype, nb), MAX_BLOCK_COUNT)


def _arb_tiling(a: int, r: int, b: int, dtype: str, spec: SocSpec, core_num: int | None, tile_rows: int | None,
                buffer_num: int | None, tmp_size: int | None, tile_b: int | None) -> SoftmaxArbTiling:
    """The [A, R, B] kernel's tiling (:func:`softmax`). Official choices: every vector core; B whole in a tile
    when it fits a row of at most 255 32-B blocks of floats (a level-0 repStride), else in equal chunks, and cut
    further (down to 32 B) until there are as many tiles as cores; R whole in a tile when it fits the UB
    single-buffered (two buffers when a core has several tiles and they fit), else loads of as many rows as fit
    double-buffered."""
    if tmp_size is not None:
        raise tiling_error("tmp_size", f"{tmp_size}: the [A, R, B] kernel does not call the SoftMax API and has no "
                                       "sharedTmpBuffer")
    isz = ITEMSIZE[dtype]
    blk = BLOCK // isz
    max_b = MAX_PASS_ROWS // blk * blk  # a float row of b_align elements is at most 255 blocks (uint8 repStride)
    cores = spec.core_num_aiv if core_num is None else int(core_num)
    if not 1 <= cores <= spec.core_num_aiv:
        raise tiling_error("core_num", f"{cores} must be in [1, {spec.core_num_aiv}] (GetCoreNumAiv of {spec.name})")
    if buffer_num is not None and buffer_num not in (1, 2):
        raise tiling_error("buffer_num", f"{buffer_num} must be 1 or 2")
    if tile_b is None:
        chunks = max(ceil_div(b, max_b), min(ceil_div(cores, a), ceil_div(b, blk)))
        tb = b if chunks == 1 else align_up(ceil_div(b, chunks), blk)
    else:
        tb = int(tile_b)
        if not 1 <= tb <= min(b, max_b):
            raise tiling_error("tile_b", f"{tb} must be in [1, {min(b, max_b)}] (B, and a row of at most 255 blocks "
                                         "of floats)")
    b_chunks = ceil_div(b, tb)
    b_align = align_up(tb, blk)
    tiles = a * b_chunks
    block_dim = min(cores, tiles)
    core_tiles = ceil_div(tiles, block_dim)
    ub = spec.ub_size
    if tile_rows is None:
        if r <= _arb_fit(ub, b_align, dtype, 1):
            nb = buffer_num or (2 if core_tiles > 1 and r <= _arb_fit(ub, b_align, dtype, 2) else 1)
            tr = r
        else:
            nb = buffer_num or 2
            tr = min(r, _arb_fit(ub, b_align, dtype, nb))
            if tr < 1:
                raise tiling_error("buffer_num", f"{nb}: an R row of {b_align} elements does not fit the UB")
    else:
        tr = int(tile_rows)
        if not 1 <= tr <= min(r, MAX_BLOCK_COUNT):
            raise tiling_error("tile_rows", f"{tr} must be in [1, {min(r, MAX_BLOCK_COUNT)}] (R, and DataCopyPad's "
                                            "blockCount)")
        nb = buffer_num or (2 if tr < r or core_tiles > 1 else 1)
    t = SoftmaxArbTiling(a=a, r=r, b=b, block_dim=block_dim, former_num=tiles % block_dim,
                         block_tiles=tiles // block_dim, tile_b=tb, b_chunks=b_chunks, b_align=b_align, tile_r=tr,
                         r_chunks=ceil_div(r, tr), buffer_num=nb, itemsize=isz, tiling_key=TILING_KEY[dtype],
                         workspace_size=spec.lib_workspace_size)
    ub_plan(t, spec).check()
    return t


# ---------------------------------------------------------------------------------------------------------------
# tilesim: the split-row kernel (rows the SoftMax API cannot take in one pass)

LONG_LANES = 64  # floats of a repeat: a row's loads fold into one 64-float row
LONG_STAT_FLOATS = 2 * LONG_LANES + 8  # the running max / sum row, the sum broadcast row, a block for the reduce


@dataclass(frozen=True)
class SoftmaxLongTiling:
    """The TilingData of tilesim's split-row softmax kernel: x as [rows, cols], rows over ``block_dim`` cores as
    the last-axis kernel shares them (``block_rows``, one more on the first ``former_num``), each row in
    ``c_chunks`` loads of ``tile_cols`` elements (a multiple of 64; the last load shorter) through queues of
    ``buffer_num`` buffers; ``itemsize``, ``tiling_key`` (x's ge::DataType: fp32 0, fp16 1, bf16 27) and
    ``workspace_size`` (the library's 16 MiB, which the kernel does not touch)."""

    rows: int
    cols: int
    block_dim: int
    former_num: int
    block_rows: int
    tile_cols: int
    c_chunks: int
    buffer_num: int
    itemsize: int
    tiling_key: int
    workspace_size: int

    @property
    def dtype(self) -> str:
        """The input's dtype name (from ``tiling_key``)."""
        return KEY_DTYPE[self.tiling_key]

    @property
    def tile_bytes(self) -> int:
        """Bytes of one queue buffer: a load of tile_cols elements."""
        return self.tile_cols * self.itemsize

    @staticmethod
    def choice_fields() -> dict[str, str | None]:
        """The overrides of :func:`softmax` and the fields that carry them (block_dim: the core count)."""
        return {"core_num": "block_dim", "tile_rows": None, "buffer_num": "buffer_num", "tmp_size": None}

    def rows_of_core(self, c: int) -> tuple[int, int]:
        """(first row, rows) of core ``c``."""
        return c * self.block_rows + min(c, self.former_num), self.block_rows + (c < self.former_num)


def long_elem_bytes(dtype: str, nb: int) -> int:
    """UB bytes an element of a split-row load takes: the x and y queues (nb buffers each), the fp32 copy of a
    b16 load and half an element of the fold buffer (the first fold halves the load's 64-float rows)."""
    isz = ITEMSIZE[dtype]
    return 2 * nb * isz + (FLOAT_SIZE if isz == 2 else 0) + FLOAT_SIZE // 2


def _long_tiling(rows: int, cols: int, dtype: str, spec: SocSpec, core_num: int | None, tile_rows: int | None,
                 buffer_num: int | None, tmp_size: int | None, tile_cols: int | None) -> SoftmaxLongTiling:
    """The split-row kernel's tiling (:func:`softmax`). Official choices: every vector core (fewer when there are
    fewer rows); two buffers a queue (a row's loads stream through them); loads of as many 64-element rows as fit
    the UB."""
    for name, v in (("tile_rows", tile_rows), ("tmp_size", tmp_size)):
        if v is not None:
            raise tiling_error(name, f"{v}: the split-row kernel takes one row at a time in loads of tile_cols "
                                     "elements and does not call the SoftMax API")
    cores = spec.core_num_aiv if core_num is None else int(core_num)
    if not 1 <= cores <= spec.core_num_aiv:
        raise tiling_error("core_num", f"{cores} must be in [1, {spec.core_num_aiv}] (GetCoreNumAiv of {spec.name})")
    if buffer_num is not None and buffer_num not in (1, 2):
        raise tiling_error("buffer_num", f"{buffer_num} must be 1 or 2")
    nb = buffer_num or 2
    most = align_up(cols, LONG_LANES)
    if tile_cols is None:
        room = spec.ub_size - LONG_STAT_FLOATS * FLOAT_SIZE - LONG_LANES * FLOAT_SIZE  # the fold's rounding up
        tc = min(room // long_elem_bytes(dtype, nb) // LONG_LANES * LONG_LANES, most)
    else:
        tc = int(tile_cols)
        if not (LONG_LANES <= tc <= most and tc % LONG_LANES == 0):
            raise tiling_error("tile_cols", f"{tc} must be a multiple of {LONG_LANES} in [{LONG_LANES}, {most}] "
                                            "(whole 64-float rows, at most the row)")
    block_dim = min(cores, rows)
    t = SoftmaxLongTiling(rows=rows, cols=cols, block_dim=block_dim, former_num=rows % block_dim,
                          block_rows=rows // block_dim, tile_cols=tc, c_chunks=ceil_div(cols, tc), buffer_num=nb,
                          itemsize=ITEMSIZE[dtype], tiling_key=TILING_KEY[dtype],
                          workspace_size=spec.lib_workspace_size)
    ub_plan(t, spec).check()
    return t


def check_tiling(t: Any, x: Any, dim: int = -1, *, soc: str | SocSpec = DEFAULT_SOC) -> Any:
    """A hand-made tiling, if it is what its free choices give for these arguments, field for field (the API's
    tiling included: :func:`tilesim.tools.opspec.match_tiling`; 561002 naming the field otherwise); the tiling function
    checks the choices' tmp size and UB plan."""
    if isinstance(t, SoftmaxLongTiling):  # tile_cols picks the kernel: it is an argument here, not a free choice
        return match_tiling(t, softmax, x, dim, soc=soc, tile_cols=t.tile_cols)
    return match_tiling(t, softmax, x, dim, soc=soc)


@shared_plan
def ub_plan(t: Any, soc: str | SocSpec = DEFAULT_SOC) -> UbPlan:
    """The kernel's InitBuffer calls, in order, under the names kernels.softmax gives them: the x and y queues of
    ``buffer_num`` tiles each, then (bf16) the fp32 tile and the sharedTmpBuffer TBuf; for the [A, R, B] and the
    split-row kernels the queues, (b16) the fp32 load, the fold buffer (half the load's rows, rounded up) and the
    stat buffer (the max and sum rows; split-row: the running row, the sum row and a reduce block)."""
    plan = UbPlan(get_soc(soc).ub_size)
    if isinstance(t, SoftmaxLongTiling):
        plan.add("in_queue_x", t.tile_bytes, t.buffer_num)
        plan.add("out_queue_y", t.tile_bytes, t.buffer_num)
        if t.itemsize == 2:
            plan.add("cast_buf", t.tile_cols * FLOAT_SIZE)
        plan.add("fold_buf", (t.tile_cols // LONG_LANES + 1) // 2 * LONG_LANES * FLOAT_SIZE)
        plan.add("stat_buf", LONG_STAT_FLOATS * FLOAT_SIZE)
        return plan
    if isinstance(t, SoftmaxArbTiling):
        plan.add("in_queue_x", t.tile_bytes, t.buffer_num)
        plan.add("out_queue_y", t.tile_bytes, t.buffer_num)
        if t.itemsize == 2:
            plan.add("cast_buf", t.tile_r * t.b_align * FLOAT_SIZE)
        plan.add("fold_buf", (t.tile_r + 1) // 2 * t.b_align * FLOAT_SIZE)
        plan.add("stat_buf", 2 * t.b_align * FLOAT_SIZE)
        return plan
    plan.add("in_queue_x", t.tile_bytes, t.buffer_num)
    plan.add("out_queue_y", t.tile_bytes, t.buffer_num)
    if t.dtype == BF16:
        plan.add("cast_buf", t.tile_rows * t.cols_align * FLOAT_SIZE)
    plan.add("tmp_buf", t.tmp_size)
    return plan
