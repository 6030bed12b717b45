"""SwiGluGrad host tiling: ``Tiling4SwiGlu<SWIGLU_GRAD_SINGLE>`` of ``activation/swi_glu/op_host/swi_glu_tiling.cpp``
(hicann/ops-nn, the non-regbase path: 910B, 910_93, 310P), reproduced field for field, plus the UB plan of its
kernels (``swi_glu_grad_float.hpp``, ``swi_glu_grad_bf16.hpp``) and the checks the op makes.

x is viewed as [rowLen, 2·colLen] (rowLen = the product of the axes before ``dim``, colLen half the product of
the rest), yGrad as [rowLen, colLen]. The tiling cuts that view into base tiles of baseRowLen × baseColLen
(tails at the bottom and the right); tile t goes to core t mod blockDim.

Free choices a user may override: ``core_num`` (the cores the tiles are dealt to), ``buffer_num`` (1 or 2: queue
depth; the official code picks it), ``base_row_len`` and ``base_col_len`` (the tile); every other field is
derived from them as the official code derives it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tilesim.core.ub import UbPlan, shared_plan
from tilesim.errors import ACLNN_ERR_INNER_FIND_KERNEL_ERROR, AclnnError, invalid, tiling_error
from tilesim.soc import DEFAULT_SOC, SocSpec, get_soc
from tilesim.tools.opspec import match_tiling

from .common import BF16, FP16, FP32, ITEMSIZE, align_up, ceil_div, dtype_name, numel, remembered, require, shape_of

L2_CACHE_LINE = 512  # L2_CACHE_LINE_SIZE: bytes of the pack the base column is cut to
BLOCK = 32  # UB_MIN_BLOCK_SIZE
MAX_BLOCK_COUNT = 4095  # DISCONTINE_COPY_MAX_BLOCKCNT: DataCopyParams.blockCount
MAX_BLOCK_LEN = 65535  # DISCONTINE_COPY_MAX_BLOCKLEN: blockLen, in 32 B blocks (aligned) or bytes (DataCopyPad)
MAX_STRIDE = 65535  # DISCONTINE_COPY_MAX_STRIDE: srcStride / dstStride, same units
QUEUES = 5  # XXGLU_BW_TQUE_NUM: A, B, yGrad in; dA, dB out
TBUFS = {FP32: 2, FP16: 5, BF16: 5}  # SWIGLU_BW_TBUF_NUM_*: fp32 temporaries of one tile each
WORKSPACE_BUFFER = 16 * 1024 * 1024  # the grad's user workspace, unused by its kernel
TILING_KEY = {FP32: 0, FP16: 1, BF16: 27}  # the ge::DataType enum, SetTilingKey(dataType)
SOC_CONFIGS = ("Ascend910B", "Ascend910_93", "Ascend310P")  # swi_glu_grad_def.cpp AddConfig (non-regbase)


@dataclass(frozen=True)
class SwiGluGradTiling:
    """SwiGluTilingData (official names in snake_case) plus ``block_dim`` (SetBlockDim: the cores used),
    ``tiling_key`` and ``workspace_size`` (bytes). The grad sets the first six fields; the rest belong to
    SwiGlu's quantised variants and stay 0, as in the real TilingData."""

    is_32b_aligned: int
    is_double_buffer: int
    row_len: int
    col_len: int
    base_row_len: int
    base_col_len: int
    block_dim: int
    tiling_key: int
    workspace_size: int
    activate_left: int = 0
    bias_is_empty: int = 0
    quant_scale_is_empty: int = 0
    activate_scale_is_empty: int = 0
    swi_col_len: int = 0
    per_row_len: int = 0
    mod_row_len: int = 0
    used_core_num: int = 0

    @property
    def dtype(self) -> str:
        """The inputs' dtype name, from the tiling key."""
        return {v: k for k, v in TILING_KEY.items()}[self.tiling_key]

    @property
    def itemsize(self) -> int:
        """Bytes of an element of the inputs."""
        return ITEMSIZE[self.dtype]

    @property
    def buffer_num(self) -> int:
        """Buffers per queue: 2 with double buffering (``is_double_buffer``), else 1."""
        return 2 if self.is_double_buffer else 1

    @property
    def ub_min_block_len(self) -> int:
        """Elements of one 32 B block."""
        return BLOCK // self.itemsize

    @property
    def tile_length(self) -> int:
        """Elements of one queue buffer (SwigluSingleTilingKernel.tileLength): rows of baseColLen, each padded to
        32 B when colLen is not aligned (DataCopyPad lands every row on a block boundary)."""
        col = self.base_col_len if self.is_32b_aligned else align_up(self.base_col_len, self.ub_min_block_len)
        return self.base_row_len * col

    @property
    def row_tile_num(self) -> int:
        """Tiles along the rows: row_len over base_row_len, rounded up."""
        return ceil_div(self.row_len, self.base_row_len)

    @property
    def col_tile_num(self) -> int:
        """Tiles along a row: col_len over base_col_len, rounded up."""
        return ceil_div(self.col_len, self.base_col_len)

    @property
    def total_tile_num(self) -> int:
        """Tiles in all: row_tile_num · col_tile_num, shared out over the cores."""
        return self.row_tile_num * self.col_tile_num

    @staticmethod
    def choice_fields() -> dict[str, str | None]:
        """The overrides of the tiling function and the fields that carry them (block_dim: the core count;
        buffer_num: is_double_buffer's)."""
        return {"core_num": "block_dim", "buffer_num": "buffer_num", "base_row_len": "base_row_len",
                "base_col_len": "base_col_len"}

    def tiles_of_core(self, core: int) -> range:
        """The tiles core ``core`` runs, in order (the kernel's ``tileIdx += blockNum`` loop)."""
        return range(core, self.total_tile_num, self.block_dim)


def split_view(shape: tuple[int, ...], dim: int) -> tuple[int, int]:
    """SetTotalShape: (rowLen, colLen) of x split along ``dim`` (already checked to lie in range)."""
    d = dim + len(shape) if dim < 0 else dim
    return numel(shape[:d]), numel(shape[d:]) // 2


def check_args(y_grad: Any, x: Any, dim: Any, soc: SocSpec) -> tuple[int, int]:
    """The checks of aclnnSwiGluGrad and its tiling, in their order; returns (rowLen, colLen).

    None is 161001; a dtype, dim or shape rule of the document 161002; a SoC without the kernel 561003.
    """
    require(yGrad=y_grad, x=x)
    if soc.short_soc not in SOC_CONFIGS:
        raise AclnnError(ACLNN_ERR_INNER_FIND_KERNEL_ERROR,
                         f"SwiGluGrad has no AI Core kernel for {soc.name} ({soc.short_soc}); ops-nn registers it "
                         f"for {', '.join(SOC_CONFIGS)} only")
    t_x, t_dy = dtype_name(x), dtype_name(y_grad)
    allowed = (FP32, FP16, BF16) if soc.supports_bf16 else (FP32, FP16)
    if t_x not in allowed:
        raise invalid("x", f"dtype {t_x} not supported on {soc.name}; supported: {', '.join(allowed)}")
    if t_dy != t_x:
        raise invalid("yGrad", f"dtype {t_dy} must equal x's dtype {t_x}")
    s_x, s_dy = shape_of(x), shape_of(y_grad)
    if not 1 <= len(s_x) <= 8:
        raise invalid("x", f"rank {len(s_x)} must be in [1, 8]")
    if isinstance(dim, bool) or not isinstance(dim, int | np.integer):
        raise invalid("dim", f"must be an integer, got {type(dim).__name__}")
    dim = int(dim)
    if not -len(s_x) <= dim <= len(s_x) - 1:
        raise invalid("dim", f"{dim} must be in [{-len(s_x)}, {len(s_x) - 1}] for x of rank {len(s_x)}")
    if 0 in s_x:
        raise invalid("x", f"shape {list(s_x)}: empty tensors are not supported")
    if 0 in s_dy:
        raise invalid("yGrad", f"shape {list(s_dy)}: empty tensors are not supported")
    d = dim % len(s_x)
    if s_x[d] % 2:
        raise invalid("x", f"shape {list(s_x)}: the split axis {d} (dim {dim}) has odd size {s_x[d]}; it must "
                           "be even")
    want = s_x[:d] + (s_x[d] // 2,) + s_x[d + 1:]
    if s_dy != want:
        raise invalid("yGrad", f"shape {list(s_dy)} must be x's shape {list(s_x)} with axis {d} halved: "
                               f"{list(want)}")
    row_len, col_len = split_view(s_x, dim)
    isz = ITEMSIZE[t_x]
    if soc.arch == 200 and (col_len * isz) % 64:
        raise tiling_error("x", f"colLen {col_len} (half of the axes from dim {dim} on) is {col_len * isz} B; on "
                                f"{soc.name} it must be a multiple of 64 B")
    return row_len, col_len


def max_tile_len(ub_size: int, dtype: str, buffer_num: int) -> int:
    """CalcUbMaxTileLen: the largest tile in elements, 32 B aligned down: UB over bufferNum·5 queues of T plus
    the fp32 temporaries (196608 B: b16 4912, fp32 4096 with two buffers)."""
    isz = ITEMSIZE[dtype]
    per_elem = buffer_num * QUEUES * isz + TBUFS[dtype] * 4
    n = ub_size // per_elem
    m = BLOCK // isz
    return n // m * m if n >= m else 0


@dataclass
class _Opt:
    """GluSingleTilingOptParam: the best base shape so far."""

    base_row: int = 0
    base_col: int = 0
    total_tiles: int = 0
    base_size: int = 0
    base_tiles: int = 0
    used_cores: int = 0
    tiles_per_core: int = 0


class _Search:
    """GluSingleTilingCalculator's base-shape search for one buffer count."""

    def __init__(self, row_len: int, col_len: int, isz: int, cores: int, max_tile: int) -> None:
        self.row, self.col, self.isz, self.cores, self.max_tile = row_len, col_len, isz, cores, max_tile
        self.ub_min = BLOCK // isz
        self.pack = L2_CACHE_LINE // isz  # alignPackLen = cacheLineLen
        self.aligned = col_len % self.ub_min == 0

    def must_single_row(self, base_col: int) -> bool:
        """MustBeSingleBaseRowLen: the GM gap between two rows of A (or B) does not fit DataCopy's stride."""
        gap = self.col * 2 - base_col
        return gap > MAX_STRIDE * self.ub_min if self.aligned else gap * self.isz > MAX_STRIDE

    def save(self, br: int, bc: int, opt: _Opt) -> None:
        """SaveOptBaseShape: more cores used, then fewer tiles, then bigger tiles, then more full tiles."""
        total = ceil_div(self.row, br) * ceil_div(self.col, bc)
        size, full = br * bc, (self.row // br) * (self.col // bc)
        used = min(total, self.cores)
        better = (opt.total_tiles == 0 or used > opt.used_cores
                  or (used == opt.used_cores and total < opt.total_tiles)
                  or (used == opt.used_cores and total == opt.total_tiles and size > opt.base_size)
                  or (used == opt.used_cores and total == opt.total_tiles and size == opt.base_size
                      and full > opt.base_tiles))
        if better:
            opt.base_row, opt.base_col, opt.total_tiles, opt.base_size = br, bc, total, size
            opt.base_tiles, opt.used_cores, opt.tiles_per_core = full, used, ceil_div(total, used)

    def run(self) -> _Opt | None:
        """CalcOptBaseShape; None where the official code fails (returns false)."""
        opt = _Opt()
        up = min(self.col, self.max_tile, MAX_BLOCK_LEN if self.aligned else MAX_BLOCK_LEN // self.isz)
        # A row cut into several tiles gets whole 512 B cache lines per tile.
        bc = up // self.pack * self.pack if self.pack < up < self.col else up
        row_up = min(self.row, MAX_BLOCK_COUNT)
        if self.must_single_row(bc):
            self.save(1, bc, opt)
            return opt
        while True:
            br = min(self.max_tile // align_up(bc, self.ub_min), row_up)
            if br < 1 or (br > 1 and self.must_single_row(bc)):
                return opt if opt.total_tiles > 0 else None
            if not (br > 1 and self.must_single_row(self.col % bc)):  # isValidTailCol
                self.save(br, bc, opt)
            if bc <= self.pack or br >= row_up:
                return opt
            bc = bc - self.pack if bc % self.pack == 0 else bc // self.pack * self.pack


def _official(row_len: int, col_len: int, dtype: str, spec: SocSpec, cores: int,
              buffer_num: int | None) -> tuple[_Opt, int]:
    """CalcTiling: the double-buffered search, and the single-buffered one when it saves the second pass."""
    isz = ITEMSIZE[dtype]

    def search(nb: int) -> _Opt | None:
        return _Search(row_len, col_len, isz, cores, max_tile_len(spec.ub_size, dtype, nb)).run()

    if buffer_num is not None:
        opt = search(buffer_num)
        if opt is None:
            raise tiling_error("x", f"no base shape fits [rowLen {row_len}, colLen {col_len}] with buffer_num "
                                    f"{buffer_num}")
        return opt, buffer_num
    db = search(2)
    if db is None:
        raise tiling_error("x", f"no base shape fits [rowLen {row_len}, colLen {col_len}] (CalcOptBaseShape "
                                "failed)")
    if db.tiles_per_core == 2:
        single = search(1)
        if single is not None and single.tiles_per_core == 1 and single.used_cores >= db.used_cores:
            return single, 1
    return db, 2


@remembered(2)
def swiglu_grad(y_grad: Any, x: Any, dim: int = -1, *, soc: str | SocSpec = DEFAULT_SOC,
                core_num: int | None = None, buffer_num: int | None = None, base_row_len: int | None = None,
                base_col_len: int | None = None) -> SwiGluGradTiling:
    """The official SwiGluGrad tiling for these arguments (anything with ``.shape`` and ``.dtype``).

    Overrides of the free choices give a consistent alternative tiling; leave them None for the official one.
    ``base_row_len`` and ``base_col_len`` go together (either alone keeps the search for the other).
    """
    spec = get_soc(soc)
    row_len, col_len = check_args(y_grad, x, dim, spec)
    dtype = dtype_name(x)
    cores = spec.core_num_aiv if core_num is None else int(core_num)
    if not 1 <= cores <= spec.core_num_aiv:
        raise tiling_error("core_num", f"{cores} must be in [1, {spec.core_num_aiv}] (GetCoreNumAiv of {spec.name})")
    if buffer_num is not None and buffer_num not in (1, 2):
        raise tiling_error("buffer_num", f"{buffer_num} must be 1 or 2")
    if base_row_len is None and base_col_len is None:
        opt, nb = _official(row_len, col_len, dtype, spec, cores, buffer_num)
        br, bc = opt.base_row, opt.base_col
        if br == 0 or bc == 0:
            raise tiling_error("x", f"the official search ends without a base shape for [rowLen {row_len}, colLen "
                                    f"{col_len}] (it would set baseRowLen {br}, baseColLen {bc})")
    else:
        nb = 2 if buffer_num is None else buffer_num
        isz = ITEMSIZE[dtype]
        m = BLOCK // isz
        max_tile = max_tile_len(spec.ub_size, dtype, nb)
        bc = int(base_col_len) if base_col_len is not None else min(col_len, max_tile)
        if bc < 1:
            raise tiling_error("base_col_len", f"{bc} must be at least 1")
        if base_row_len is not None:
            br = int(base_row_len)
        else:  # as many rows as fit, or one where the gap between rows (of a full or the tail tile) is too long
            s = _Search(row_len, col_len, isz, cores, max_tile)
            single = s.must_single_row(bc) or s.must_single_row(col_len % bc or bc)
            br = 1 if single else max(1, min(max_tile // align_up(bc, m), row_len, MAX_BLOCK_COUNT))
    aligned = int(col_len % (BLOCK // ITEMSIZE[dtype]) == 0)
    total = ceil_div(row_len, max(br, 1)) * ceil_div(col_len, max(bc, 1))
    t = SwiGluGradTiling(is_32b_aligned=aligned, is_double_buffer=int(nb == 2), row_len=row_len, col_len=col_len,
                            base_row_len=br, base_col_len=bc, block_dim=min(total, cores),
                            tiling_key=TILING_KEY[dtype], workspace_size=WORKSPACE_BUFFER)
    if base_row_len is not None or base_col_len is not None:
        check_copies(t, spec)  # an override DataCopy cannot move is refused here, not at launch
    return t


# UB buffer ids of the kernels' plans (the order of their InitBuffer calls).
A, B, L, M, N, TMP, SIG, A_TMP, L_TMP, OUT_TMP = range(10)


@shared_plan
def ub_plan(t: SwiGluGradTiling, soc: str | SocSpec = DEFAULT_SOC) -> UbPlan:
    """The kernel's InitBuffer calls for this tiling: five queues of T (A, B and yGrad in, dA and dB out) and
    the fp32 temporaries (fp32: tmp and sigmoid; b16 also the widened A or B, yGrad and the output)."""
    plan = UbPlan(get_soc(soc).ub_size)
    n, nb = t.tile_length, t.buffer_num
    for name in ("a", "b", "y_grad", "d_a", "d_b"):
        plan.add(name, n * t.itemsize, nb)
    plan.add("tmp", n * 4)
    plan.add("sigmoid", n * 4)
    b16 = t.dtype != FP32
    plan.add("a_fp32", n * 4 if b16 else 0)
    plan.add("y_grad_fp32", n * 4 if b16 else 0)
    plan.add("out_fp32", n * 4 if b16 else 0)
    return plan


def check_copies(t: SwiGluGradTiling, soc: str | SocSpec) -> None:
    """The tile of overridden choices must be one DataCopy can move (561002 naming the choice otherwise): at
    most 4095 rows (blockCount), a row of at most 65535 blocks (aligned) or bytes (DataCopyPad), whole 32 B
    blocks when colLen is aligned, and one row where the gap between x's rows exceeds the stride field. The UB
    plan is checked apart (:func:`ub_plan`)."""
    spec = get_soc(soc)
    if not 1 <= t.base_row_len <= MAX_BLOCK_COUNT:
        raise tiling_error("base_row_len", f"{t.base_row_len} must be in [1, {MAX_BLOCK_COUNT}] (DataCopy "
                                           "blockCount)")
    isz, m = t.itemsize, t.ub_min_block_len
    if t.base_col_len < 1 or t.base_col_len > t.col_len:
        raise tiling_error("base_col_len", f"{t.base_col_len} must be in [1, colLen {t.col_len}]")
    if t.is_32b_aligned:
        if t.base_col_len % m:
            raise tiling_error("base_col_len", f"{t.base_col_len} must be a multiple of {m} elements (32 B): colLen "
                                               "is aligned, so tiles move with DataCopy in whole blocks")
        if t.base_col_len // m > MAX_BLOCK_LEN:
            raise tiling_error("base_col_len", f"{t.base_col_len} elements are more than {MAX_BLOCK_LEN} blocks "
                                               "(blockLen)")
    elif t.base_col_len * isz > MAX_BLOCK_LEN:
        raise tiling_error("base_col_len", f"{t.base_col_len * isz} B per row is more than DataCopyPad's blockLen "
                                           f"{MAX_BLOCK_LEN} B")
    if t.base_row_len > 1:
        s = _Search(t.row_len, t.col_len, isz, spec.core_num_aiv, 0)
        for cols in {t.base_col_len, t.col_len % t.base_col_len or t.base_col_len}:
            if s.must_single_row(cols):
                gap = 2 * t.col_len - cols
                unit = f"{gap // m} blocks of 32 B" if t.is_32b_aligned else f"{gap * isz} B"
                raise tiling_error("base_row_len", f"{t.base_row_len} rows of {cols} columns: the gap between rows "
                                                   f"of x ({gap} elements, {unit}) exceeds DataCopy's stride field "
                                                   f"({MAX_STRIDE}); such tiles must be one row")


def check_tiling(t: Any, y_grad: Any, x: Any, dim: int = -1, *,
                 soc: str | SocSpec = DEFAULT_SOC) -> SwiGluGradTiling:
    """A hand-made tiling, if it is what its free choices give for these arguments, field for field
    (:func:`tilesim.tools.opspec.match_tiling`; 561002 naming the field otherwise); the tiling function checks that
    overridden tiles are ones DataCopy can move (:func:`check_copies`). The op checks its UB plan."""
    return match_tiling(t, swiglu_grad, y_grad, x, dim, soc=soc)
