"""RmsNorm host tiling: ``Tiling4RmsNorm`` of ``norm/rms_norm/op_host/rms_norm_tiling.cpp`` (hicann/ops-nn), the
path 910B and 910_93 take (not regbase, not the 910 training series' branch), reproduced field for field
(``RMSNormTilingData`` of ``rms_norm_tiling.h``), plus the UB plan of each of its A2 kernels and the checks of
aclnnRmsNorm (``docs/aclnnRmsNorm.md``) and of the tiling (``CheckInputShape4RmsNorm``).

Rows are the product of x's leading axes, columns the product of gamma's (``numRow``, ``numCol``); numColAlign is
numCol rounded up to 32 B of x's dtype. Cores: ``blockFactor = ceil(numRow / GetCoreNumAiv())`` rows each, the
last core the rest (``last_block_factor``), ``blockDim = ceil(numRow / blockFactor)``. The UB budget is the UB
less 1024 B (``UB_USED``). The tiling key is the mode (on A2 the NORMAL key's SoC and alignment weights are 0):

- x and gamma of one dtype: ``ubFactor`` 10240 (fp32) or 12288 (b16) elements; numColAlign above it is SPLIT_D
  (1), whose ubFactor is numCol cut into ``ceil(numCol / ubFactor)`` column tiles of a multiple of 16, shrunk by 16
  while the last tile would be shorter than 16; on 910B (``SocVersion::ASCEND910B``, not 910_93) numColAlign up to
  2000 is MERGE_N (2), ``rowFactor = ubSize / (numColAlign · 16 + 260)`` rows a pass; else NORMAL (0), 64 rows
  (``rowFactor``) to a batch of rstd.
- x fp16 / bf16 with gamma fp32 (``CalMixDtypeTiling``): the first that fits of MERGE_N (910B, numColAlign up to
  2000, ``rowFactor = ubSize / (numColAlign · 16 + 288)``), NORMAL (ubFactor = numColAlign), SINGLE_ROW (3: x
  widened inside its own queue buffer), SPLIT_D (ubFactor = (ubSize − 2560) / 16, a multiple of 16).

``is_performance`` (b16 x, not mixed, x of rank 2 or 3 with at most 512 (and 8) leading rows, gamma of rank 1,
numCol up to 5120, on 910B) selects MERGE_N's Brcb path in ops-nn (tilesim's MERGE_N kernel takes it for every
input: see :mod:`kernels.rms_norm`); ``mul_loop``, ``mul_tail`` and ``dst_rep_stride`` (a uint8, numColAlign / 8)
are that path's repeat figures. The 910-only fields (``reduce_mask``, ``left_num``,
``rstd_size`` ...) are 0 here, as on A2. Workspace: 256 B + 16 MiB, untouched by the kernels.

Free choices a user may override: ``core_num``, ``mode`` (any mode whose plan fits and whose kernel takes the
inputs: SINGLE_ROW only with mixed dtypes, MERGE_N only up to numColAlign 2040, as ``dst_rep_stride`` is a
uint8), ``row_factor`` (NORMAL: rows per rstd batch; MERGE_N: rows per pass; SPLIT_D and SINGLE_ROW use 64, a
constant of their kernels) and ``ub_factor`` (SPLIT_D: columns per tile, a multiple of 16; NORMAL and SINGLE_ROW:
a row's buffer, at least numColAlign; MERGE_N: row_factor · numColAlign); the other fields follow from them as
the official code derives them.

Where this differs from ops-nn on purpose: an empty x (which aclnnRmsNorm accepts) is refused here with 561002, as
the tiling refuses it (``CheckInputShape4RmsNorm``: "Input x cannot be an empty tensor"); the op returns empty
outputs before it tiles (``kernels.rms_norm``). Only the A2 build of the kernels is emulated: on 310P (its
DataCopy-and-patch copies, rstd by atomic add) and the 910 training series the tiling refuses with 561003.
``dtype_key`` (xDtypeKey: fp16 1, fp32 2, bf16 3) and ``is_mix_dtype`` are tilesim's, for the UB plan: on the NPU
the kernel binary is compiled per dtype.
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

MODE_NORMAL, MODE_SPLIT_D, MODE_MERGE_N, MODE_SINGLE_ROW = 0, 1, 2, 3
MODE_NAMES = {MODE_NORMAL: "NORMAL", MODE_SPLIT_D: "SPLIT_D", MODE_MERGE_N: "MERGE_N", MODE_SINGLE_ROW: "SINGLE_ROW"}
DTYPE_KEY = {FP16: 1, FP32: 2, BF16: 3}
UB_FACTOR_B16 = 12288
UB_FACTOR_B32 = 10240
BLOCK_ALIGN_NUM = 16  # SPLIT_D column tiles: a multiple of 16 elements whatever the dtype
UB_USED = 1024
SMALL_REDUCE_NUM = 2000  # MERGE_N up to this numColAlign
FLOAT_PER_REPEAT = 64  # rowFactor of NORMAL, SPLIT_D and SINGLE_ROW
MERGE_N_ROW_BYTES = 260  # MERGE_N: bytes a row needs beside its 16 B per column (rstd 4, tmp 64 floats)
MAX_DST_REP_STRIDE = 255  # dst_rep_stride is a uint8
PERF_ROWS, PERF_DIM1, PERF_COLS = 512, 8, 5120  # isPerformance's shape limits
USR_WORKSPACE = 256
SYS_WORKSPACE = 16 * 1024 * 1024
MAX_RANK = 8
SUPPORTED_SOCS = ("Ascend910B", "Ascend910_93")

# (x dtype, gamma dtype) pairs of the document's A2 table.
DTYPES = {(FP16, FP32), (BF16, FP32), (FP16, FP16), (BF16, BF16), (FP32, FP32)}


@dataclass(frozen=True)
class RmsNormTiling:
    """RMSNormTilingData (official names in snake_case) plus ``tiling_key`` (the mode on A2), ``block_dim``,
    ``workspace_size`` (bytes, the 16 MiB included) and tilesim's ``dtype_key`` and ``is_mix_dtype``."""

    num_row: int
    num_col: int
    num_col_align: int
    block_factor: int
    row_factor: int
    ub_factor: int
    reduce_mask: int
    left_num: int
    last_reduce_mask: int
    last_left_num: int
    rstd_size: int
    ub_loop: int
    col_buffer_length: int
    multi_n_num: int
    is_nddma: int
    epsilon: float
    avg_factor: float
    is_gemma: int
    last_block_factor: int
    row_loop: int
    last_block_row_loop: int
    row_tail: int
    last_block_row_tail: int
    mul_loop: int
    mul_tail: int
    dst_rep_stride: int
    is_performance: int
    normal_flag: int
    tiling_key: int
    block_dim: int
    workspace_size: int
    dtype_key: int
    is_mix_dtype: int

    @property
    def mode(self) -> int:
        """The kernel's mode (MODE_NORMAL, MODE_SPLIT_D, MODE_MERGE_N or MODE_SINGLE_ROW): the tiling key on A2."""
        return self.tiling_key

    @property
    def x_itemsize(self) -> int:
        """Bytes of an element of x: 4 for fp32, 2 for fp16 and bf16."""
        return 4 if self.dtype_key == DTYPE_KEY[FP32] else 2

    @property
    def gamma_itemsize(self) -> int:
        """Bytes of an element of gamma: 4 with fp32 x or mixed dtypes (b16 x, fp32 gamma), else 2."""
        return 4 if self.is_mix_dtype or self.x_itemsize == 4 else 2

    def rows_of_core(self, core: int) -> int:
        """The rows core ``core`` takes: ``block_factor``, the last core ``last_block_factor``."""
        return self.last_block_factor if core == self.block_dim - 1 else self.block_factor

    @staticmethod
    def choice_fields() -> dict[str, str | None]:
        """The overrides of :func:`rms_norm` and the fields that carry them (block_dim: the core count)."""
        return {"core_num": "block_dim", "mode": "tiling_key", "row_factor": "row_factor", "ub_factor": "ub_factor"}


def check_args(x: Any, gamma: Any, epsilon: Any, soc: SocSpec) -> tuple[int, int]:
    """The checks of aclnnRmsNorm and its tiling, in their order; returns (numRow, numCol), numRow 0 for an empty
    x. None is 161001; a dtype outside the document's table 161002; a shape rule, a negative epsilon 561002 (the
    tiling's); a SoC whose build tilesim does not emulate 561003."""
    require(x=x, gamma=gamma)
    if soc.short_soc not in SUPPORTED_SOCS:
        raise AclnnError(ACLNN_ERR_INNER_FIND_KERNEL_ERROR,
                         f"soc: tilesim emulates the A2 build of RmsNorm's kernels ({', '.join(SUPPORTED_SOCS)}); "
                         f"{soc.name} ({soc.short_soc}) runs another build")
    t_x, t_g = dtype_name(x), dtype_name(gamma)
    if t_x not in (FP32, FP16, BF16):
        raise invalid("x", f"dtype {t_x} not supported; supported: float32, float16, bfloat16")
    if (t_x, t_g) not in DTYPES:
        ok = sorted(g for d, g in DTYPES if d == t_x)
        raise invalid("gamma", f"dtype {t_g} not supported with x {t_x}; allowed: {', '.join(ok)}")
    if isinstance(epsilon, bool) or not isinstance(epsilon, int | float | np.integer | np.floating):
        raise invalid("epsilon", f"must be a real number (double), got {type(epsilon).__name__}")
    s_x, s_g = shape_of(x), shape_of(gamma)
    if not 1 <= len(s_x) <= MAX_RANK:
        raise tiling_error("x", f"rank {len(s_x)} must be in [1, {MAX_RANK}]")
    if not 1 <= len(s_g) <= MAX_RANK:
        raise tiling_error("gamma", f"rank {len(s_g)} must be in [1, {MAX_RANK}]")
    if len(s_g) > len(s_x):
        raise tiling_error("gamma", f"rank {len(s_g)} must not exceed x's rank {len(s_x)}")
    if 0 in s_g:
        raise tiling_error("gamma", f"shape {list(s_g)}: gamma cannot be an empty tensor")
    lead = len(s_x) - len(s_g)
    if s_x[lead:] != s_g:
        raise tiling_error("gamma", f"shape {list(s_g)} must equal the last {len(s_g)} axes of x {list(s_x)}")
    if float(epsilon) < 0:
        raise tiling_error("epsilon", f"{float(epsilon)} must not be negative")
    return numel(s_x[:lead]), numel(s_g)


def out_shapes(x: Any, gamma: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """InferShape4RmsNorm: y as x; rstd x's leading axes with 1 for each axis gamma covers."""
    s_x, n_g = shape_of(x), len(shape_of(gamma))
    return s_x, s_x[:len(s_x) - n_g] + (1,) * n_g


def _split_d_ub_factor(cols: int, ub_factor: int) -> int:
    """SPLIT_D's column tile: numCol in ceil(numCol / ubFactor) tiles of a multiple of 16, shrunk by 16 while the
    last tile would be shorter than 16 elements."""
    tiles = ceil_div(cols, ub_factor)
    uf = ceil_div(cols, tiles * BLOCK_ALIGN_NUM) * BLOCK_ALIGN_NUM
    while cols % uf and cols % uf < BLOCK_ALIGN_NUM:
        uf -= BLOCK_ALIGN_NUM
        if uf == 0:
            raise tiling_error("gamma", f"numCol {cols}: splitting the last dim failed")
    return uf


def _mix_tiling(ub: int, nca: int, is_910b: bool) -> tuple[int, int, int]:
    """CalMixDtypeTiling: (mode, rowFactor, ubFactor) for b16 x with fp32 gamma."""
    xy_gamma = 2 * 2 * nca + 4 * nca  # x and y in b16, gamma in fp32
    rstd_one, rstd_multi, reduce, tmp = 4 * 8, 4 * FLOAT_PER_REPEAT, 4 * FLOAT_PER_REPEAT, 4 * 2 * nca
    if nca <= SMALL_REDUCE_NUM and is_910b:
        rf = ub // (xy_gamma + tmp + rstd_one + reduce)
        return MODE_MERGE_N, rf, rf * nca
    if xy_gamma + tmp + rstd_multi + reduce < ub:
        return MODE_NORMAL, FLOAT_PER_REPEAT, nca
    if 2 * nca + 4 * nca + tmp + rstd_multi + reduce < ub:
        return MODE_SINGLE_ROW, FLOAT_PER_REPEAT, nca
    return MODE_SPLIT_D, FLOAT_PER_REPEAT, _mix_split_d_ub_factor(ub)


def _mix_split_d_ub_factor(ub: int) -> int:
    """CalMixDtypeTiling's SPLIT_D column tile: the UB less rstd, reduce and the sums of 64 rows, over 16 B a
    column (x and y in b16; gamma, x widened and its square in fp32), a multiple of 16."""
    fixed = 4 * FLOAT_PER_REPEAT + 4 * FLOAT_PER_REPEAT + 4 * 8 * FLOAT_PER_REPEAT
    return (ub - fixed) // (2 * 2 + 4 * 3) // BLOCK_ALIGN_NUM * BLOCK_ALIGN_NUM


def _mode_defaults(mode: int, mix: bool, cols: int, nca: int, ub: int, t_x: str) -> tuple[int, int]:
    """(rowFactor, ubFactor) the official code gives ``mode`` for these inputs."""
    base = UB_FACTOR_B32 if t_x == FP32 else UB_FACTOR_B16
    if mode == MODE_MERGE_N:
        rf = ub // (nca * 16 + (288 if mix else MERGE_N_ROW_BYTES))
        return rf, rf * nca
    if mode == MODE_SPLIT_D:
        return FLOAT_PER_REPEAT, _mix_split_d_ub_factor(ub) if mix else _split_d_ub_factor(cols, base)
    if mode == MODE_NORMAL and not mix:
        return FLOAT_PER_REPEAT, max(base, nca)
    return FLOAT_PER_REPEAT, nca


@remembered(2)
def rms_norm(x: Any, gamma: Any, epsilon: float = 1e-6, *, soc: str | SocSpec = DEFAULT_SOC,
             core_num: int | None = None, mode: int | None = None, row_factor: int | None = None,
             ub_factor: int | None = None) -> RmsNormTiling:
    """The official RmsNorm tiling for these arguments (anything with ``.shape`` and ``.dtype``).

    Overrides of the free choices give a consistent alternative tiling; leave them None for the official one.
    """
    spec = get_soc(soc)
    rows, cols = check_args(x, gamma, epsilon, spec)
    if rows == 0:
        raise tiling_error("x", f"shape {list(shape_of(x))}: x cannot be an empty tensor (aclnnRmsNorm returns "
                                "empty outputs before tiling)")
    t_x, t_g = dtype_name(x), dtype_name(gamma)
    mix = t_x != t_g and t_g == FP32
    nca = align_up(cols, 32 // ITEMSIZE[t_x])
    ub = spec.ub_size - UB_USED
    is_910b = spec.short_soc == "Ascend910B"
    cores = spec.core_num_aiv if core_num is None else int(core_num)
    if not 1 <= cores <= spec.core_num_aiv:
        raise tiling_error("core_num", f"{cores} must be in [1, {spec.core_num_aiv}] (GetCoreNumAiv of {spec.name})")
    block_factor = ceil_div(rows, cores)
    block_dim = ceil_div(rows, block_factor)
    last_block_factor = rows - block_factor * (block_dim - 1)

    is_perf = 0
    if mix:
        official, rf, uf = _mix_tiling(ub, nca, is_910b)
    else:
        s_x, s_g = shape_of(x), shape_of(gamma)
        dim_ok = len(s_x) in (2, 3) and len(s_g) == 1
        size_ok = cols <= PERF_COLS and ((len(s_x) == 2 and s_x[0] <= PERF_ROWS)
                                         or (len(s_x) == 3 and s_x[0] <= PERF_ROWS and s_x[1] <= PERF_DIM1))
        if dim_ok and size_ok and t_x != FP32 and is_910b:
            is_perf = 1
        official, rf, uf = MODE_NORMAL, FLOAT_PER_REPEAT, UB_FACTOR_B32 if t_x == FP32 else UB_FACTOR_B16
        if nca > uf:
            official = MODE_SPLIT_D
        if nca <= SMALL_REDUCE_NUM and is_910b:
            official = MODE_MERGE_N
        if official == MODE_SPLIT_D:
            uf = _split_d_ub_factor(cols, uf)
        if official == MODE_MERGE_N:
            rf = ub // (nca * 16 + MERGE_N_ROW_BYTES)
            uf = rf * nca
            if uf == 0:
                raise tiling_error("gamma", f"numColAlign {nca}: MERGE_N's rows per pass is 0")

    overridden = any(v is not None for v in (core_num, mode, row_factor, ub_factor))
    key = official if mode is None else int(mode)
    if key not in MODE_NAMES:
        raise tiling_error("mode", f"{key} must be 0 (NORMAL), 1 (SPLIT_D), 2 (MERGE_N) or 3 (SINGLE_ROW)")
    if key != official:
        rf, uf = _mode_defaults(key, mix, cols, nca, ub, t_x)
    if key == MODE_SINGLE_ROW and not mix:
        raise tiling_error("mode", "3 (SINGLE_ROW) is the mixed-dtype kernel: x fp16 / bf16 with gamma fp32 only")
    if key == MODE_MERGE_N and nca // 8 > MAX_DST_REP_STRIDE:
        raise tiling_error("mode", f"2 (MERGE_N) needs numColAlign / 8 <= {MAX_DST_REP_STRIDE} (its repeat stride "
                                   f"is a uint8); numColAlign is {nca}")
    if row_factor is not None:
        rf = int(row_factor)
        if key in (MODE_SPLIT_D, MODE_SINGLE_ROW) and rf != FLOAT_PER_REPEAT:
            raise tiling_error("row_factor", f"{rf}: {MODE_NAMES[key]}'s kernel batches rstd by "
                                             f"{FLOAT_PER_REPEAT} rows (a constant of the kernel)")
        if rf < 1:
            raise tiling_error("row_factor", f"{rf} must be at least 1")
        if key == MODE_MERGE_N:
            uf = rf * nca
    if ub_factor is not None:
        want = int(ub_factor)
        if key == MODE_MERGE_N and want != rf * nca:
            raise tiling_error("ub_factor", f"{want}: MERGE_N's buffers hold row_factor x numColAlign = "
                                            f"{rf} x {nca} elements")
        if key == MODE_SPLIT_D and (want < BLOCK_ALIGN_NUM or want % BLOCK_ALIGN_NUM):
            raise tiling_error("ub_factor", f"{want} columns per tile: must be a positive multiple of "
                                            f"{BLOCK_ALIGN_NUM}")
        if key in (MODE_NORMAL, MODE_SINGLE_ROW) and want < nca:
            raise tiling_error("ub_factor", f"{want}: {MODE_NAMES[key]} holds a whole row, numColAlign {nca}")
        uf = want
    if key == MODE_MERGE_N and rf * nca < ceil_div(rf, 8) * FLOAT_PER_REPEAT:
        raise tiling_error("row_factor", f"{rf} rows of numColAlign {nca}: sqx must hold the Brcb of their rstd "
                                         f"({ceil_div(rf, 8) * FLOAT_PER_REPEAT} floats)")

    row_loop = ceil_div(block_factor, rf)
    last_row_loop = ceil_div(last_block_factor, rf)
    mul_loop = nca // FLOAT_PER_REPEAT
    t = RmsNormTiling(
        num_row=rows, num_col=cols, num_col_align=nca, block_factor=block_factor, row_factor=rf, ub_factor=uf,
        reduce_mask=0, left_num=0, last_reduce_mask=0, last_left_num=0, rstd_size=0, ub_loop=0,
        col_buffer_length=0, multi_n_num=0, is_nddma=1, epsilon=float(np.float32(epsilon)),
        avg_factor=float(np.float32(1.0) / np.float32(cols)), is_gemma=0, last_block_factor=last_block_factor,
        row_loop=row_loop, last_block_row_loop=last_row_loop, row_tail=block_factor - (row_loop - 1) * rf,
        last_block_row_tail=last_block_factor - (last_row_loop - 1) * rf, mul_loop=mul_loop,
        mul_tail=nca - mul_loop * FLOAT_PER_REPEAT, dst_rep_stride=(nca // 8) & 0xFF, is_performance=is_perf,
        normal_flag=0, tiling_key=key, block_dim=block_dim, workspace_size=USR_WORKSPACE + SYS_WORKSPACE,
        dtype_key=DTYPE_KEY[t_x], is_mix_dtype=int(mix))
    if overridden:
        ub_plan(t, spec).check()  # an override whose buffers do not fit is refused here, not at launch
    return t


def check_tiling(t: Any, x: Any, gamma: Any, epsilon: float = 1e-6, *,
                 soc: str | SocSpec = DEFAULT_SOC) -> RmsNormTiling:
    """A hand-made tiling, if it is what its free choices give for these arguments, field for field
    (:func:`tilesim.tools.opspec.match_tiling`; 561002 naming the field otherwise), whose UB plan fits (the tiling
    function checks the plan of overridden choices)."""
    return match_tiling(t, rms_norm, x, gamma, epsilon, soc=soc)


@shared_plan
def ub_plan(t: RmsNormTiling, soc: str | SocSpec = DEFAULT_SOC) -> UbPlan:
    """The kernel's InitBuffer calls for this tiling, in order, under the names kernels.rms_norm's kernels give
    them (the queues one buffer each, BUFFER_NUM = 1). A buffer ops-nn allocates only for b16 x (the fp32 copy
    of x) is placed with 0 bytes for fp32 x, so that each kernel's buffer ids are fixed."""
    plan = UbPlan(get_soc(soc).ub_size)
    uf, rf, sz, gsz = t.ub_factor, t.row_factor, t.x_itemsize, t.gamma_itemsize
    wide = uf * 4 if sz == 2 else 0
    if t.tiling_key == MODE_NORMAL:  # rms_norm.h
        for name, n in (("in_queue_x", uf * sz), ("in_queue_gamma", uf * gsz), ("out_queue_y", uf * sz),
                        ("out_queue_rstd", rf * 4), ("x_fp32_buf", wide), ("sqx_buf", uf * 4),
                        ("reduce_fp32_buf", FLOAT_PER_REPEAT * 4)):
            plan.add(name, n)
    elif t.tiling_key == MODE_SPLIT_D:  # rms_norm_split_d.h
        for name, n in (("in_queue_gamma", uf * gsz), ("in_queue_x", uf * sz), ("out_queue_rstd", rf * 4),
                        ("out_queue_y", uf * sz), ("x_fp32_buf", wide), ("sum_buf", rf * 8 * 4),
                        ("sqx_buf", uf * 4), ("reduce_fp32_buf", FLOAT_PER_REPEAT * 4)):
            plan.add(name, n)
    elif t.tiling_key == MODE_MERGE_N:  # rms_norm_merge_n.h
        for name, n in (("in_queue_x", uf * sz), ("in_queue_gamma", uf * 4), ("out_queue_y", uf * sz),
                        ("out_queue_rstd", rf * 4), ("x_fp32_buf", wide), ("sqx_buf", uf * 4),
                        ("tmp_buf", rf * FLOAT_PER_REPEAT * 4)):
            plan.add(name, n)
    else:  # rms_norm_single_row.h: x lands in a buffer of gamma's (fp32) width
        for name, n in (("in_queue_x", uf * 4), ("in_queue_gamma", uf * 4), ("out_queue_y", uf * sz),
                        ("out_queue_rstd", rf * 4), ("x_buf_fp32", uf * 4), ("reduce_buf_fp32", FLOAT_PER_REPEAT * 4)):
            plan.add(name, n)
    return plan
