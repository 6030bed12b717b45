"""RmsNormGrad host tiling: ``op_host/rms_norm_grad_tiling.cpp`` of hicann/ops-nn (non-regbase: 910B, 910_93,
310P, 910), reproduced field for field, plus the UB plan of its kernels and the checks its tiling makes.

Free choices a user may override: ``core_num`` (cores the rows are split over), ``ub_factor`` (rows per UB tile
in split-N, columns per tile in split-D), ``buffer_num`` (queue depth, 2 in the real kernel) and ``tiling_key``
(1 split-N, 2 split-D); every other field is derived from them as the official code derives it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tilesim.core.ub import UbPlan, shared_plan
from tilesim.errors import invalid, tiling_error
from tilesim.soc import DEFAULT_SOC, SocSpec, get_soc
from tilesim.tools.opspec import match_tiling

from .common import (
    BF16,
    FP16,
    FP32,
    U32,
    align_up,
    ceil_div,
    dtype_name,
    flag,
    numel,
    remembered,
    require,
    shape_of,
)

SPLIT_N = 1
SPLIT_D = 2
BUFFER_SIZE_SPLIT_N = 6080  # BUFFER_SIZE_SPLIT_N_HIGH_PRECISION, fp32 elements
BUFFER_SIZE_SPLIT_D = 4096  # BUFFER_SIZE_SPLIT_D_HIGH_PRECISION
SMALL_D_THRESHOLD = 640
USED_UB = 195584  # (192 - 1) KiB, the small-D formula's budget
ROW_FACTOR_SPLIT_D = 32  # rstd rows per batch in split-D
BUFFER_NUM_DB = 2
ALIGN_32 = 8  # fp32 elements in 32 B
LANES = 64  # fp32 elements in one 256 B repeat: the deterministic final sum's column task
SYS_WORKSPACE = 16 * 1024 * 1024  # the tiling adds 16 MiB whatever the SoC
DATA_TYPE = {FP32: 0, FP16: 1, BF16: 2}

# (dy dtype, gamma dtype) pairs of the document's tables.
_DTYPES_A2 = {(FP16, FP32), (BF16, FP32), (FP16, FP16), (FP32, FP32), (BF16, BF16)}
_DTYPES_OTHER = {(FP16, FP16), (FP32, FP32)}


@dataclass(frozen=True)
class RmsNormGradTiling:
    """RmsNormGradTilingData (official names in snake_case) plus ``tiling_key``, ``workspace_size`` (bytes,
    the 16 MiB included) and ``buffer_num`` (tilesim's: the kernel's queue depth, BUFFER_NUM_DB = 2)."""

    block_factor: int
    core_calc_num: int
    core_calc_tail: int
    block_dim: int
    ub_split_dim: int
    ub_factor: int
    ub_calc_num: int
    ub_calc_tail: int
    ub_calc_loop: int
    ub_calc_tail_num: int
    ub_calc_tail_tail: int
    ub_calc_tail_loop: int
    row: int
    col: int
    col_val_align: int
    avg_factor: float
    data_type: int
    fixed_output: int
    need_chunk: int
    chunk_size: int
    chunk_num: int
    chunk_tail: int
    tiling_key: int
    workspace_size: int
    buffer_num: int = BUFFER_NUM_DB

    @property
    def small_d(self) -> bool:
        """Split-N with colValAlign <= 640: a UB tile of many rows is computed at once."""
        return self.tiling_key == SPLIT_N and self.col_val_align <= SMALL_D_THRESHOLD

    def rows_of_core(self, core: int) -> int:
        """The rows core ``core`` takes: ``block_factor``, the last core ``core_calc_tail`` where that is not 0."""
        last = core == self.block_dim - 1
        return self.core_calc_tail if (last and self.core_calc_tail) else self.block_factor

    @staticmethod
    def choice_fields() -> dict[str, str | None]:
        """The overrides of :func:`rms_norm_grad` and the fields that carry them (block_dim: the core count).
        ``fixed_output`` is not one: it is the op's ``deterministic`` argument."""
        return {"core_num": "block_dim", "ub_factor": "ub_factor", "buffer_num": "buffer_num",
                "tiling_key": "tiling_key"}


def small_d_buffer_size(col_val_align: int) -> int:
    """CalcSmallDBufferSize: fp32 elements of one DY/X/DX buffer when D is small."""
    ub_factor = (USED_UB - col_val_align * 10) // (col_val_align * 24 + 268)
    return ub_factor * col_val_align


def check_args(dy: Any, x: Any, rstd: Any, gamma: Any, soc: SocSpec) -> tuple[int, int]:
    """The checks of aclnnRmsNormGrad and its tiling, in their order; returns (rows N, columns D).

    None is 161001, a dtype outside the document's table 161002, a shape rule 561002 (the tiling's).
    """
    require(dy=dy, x=x, rstd=rstd, gamma=gamma)
    t_dy, t_x, t_r, t_g = dtype_name(dy), dtype_name(x), dtype_name(rstd), dtype_name(gamma)
    allowed = (FP32, FP16, BF16) if soc.supports_bf16 else (FP32, FP16)
    if t_dy not in allowed:
        raise invalid("dy", f"dtype {t_dy} not supported on {soc.name}; supported: {', '.join(allowed)}")
    if t_x != t_dy:
        raise invalid("x", f"dtype {t_x} must equal dy's dtype {t_dy}")
    if t_r != FP32:
        raise invalid("rstd", f"dtype {t_r} not supported; rstd must be float32")
    table = _DTYPES_A2 if soc.supports_bf16 else _DTYPES_OTHER
    if (t_dy, t_g) not in table:
        ok = sorted(g for d, g in table if d == t_dy)
        raise invalid("gamma", f"dtype {t_g} not supported with dy {t_dy} on {soc.name}; allowed: {', '.join(ok)}")

    s_dy, s_x, s_r, s_g = shape_of(dy), shape_of(x), shape_of(rstd), shape_of(gamma)
    if not 1 <= len(s_x) <= 8:
        raise tiling_error("x", f"rank {len(s_x)} must be in [1, 8]")
    if not 1 <= len(s_g) <= 8:
        raise tiling_error("gamma", f"rank {len(s_g)} must be in [1, 8]")
    if len(s_g) > len(s_x):
        raise tiling_error("gamma", f"rank {len(s_g)} must not exceed x's rank {len(s_x)}")
    if len(s_dy) != len(s_x):
        raise tiling_error("dy", f"rank {len(s_dy)} must equal x's rank {len(s_x)}")
    if s_dy != s_x:
        raise tiling_error("dy", f"shape {list(s_dy)} must equal x's shape {list(s_x)}")
    if s_dy[-1] == 0:
        raise tiling_error("dy", f"shape {list(s_dy)}: the last axis can not be 0")
    lead = len(s_x) - len(s_g)
    if len(s_r) < lead:
        if s_r != s_x[:len(s_r)]:
            raise tiling_error("rstd", f"shape {list(s_r)} must equal the first {len(s_r)} axes of x {list(s_x)}")
        for i in range(len(s_r), lead):
            if s_x[i] != 1:
                raise tiling_error("x", f"shape {list(s_x)}: axis {i} must be 1 as rstd {list(s_r)} has no axis "
                                        f"{i}")
    elif s_r[:lead] != s_x[:lead]:
        raise tiling_error("rstd", f"shape {list(s_r)} must start with the first {lead} axes of x {list(s_x)}")
    if s_g != s_dy[lead:]:
        raise tiling_error("gamma", f"shape {list(s_g)} must equal the last {len(s_g)} axes of dy {list(s_dy)}")
    rows, cols = numel(s_x[:lead]), numel(s_g)
    if numel(s_r) != rows:
        raise tiling_error("rstd", f"numel {numel(s_r)} must equal the row count {rows} (product of x's leading "
                                   "axes)")
    if soc.arch == 100 and cols % 64 != 0:
        raise tiling_error("gamma", f"size {cols} must be divisible by 64 on the 910 training series ({soc.name})")
    if rows == 0 or cols == 0:
        raise tiling_error("dy", f"shape {list(s_dy)}: empty tensors are not supported")
    if soc.arch == 200 and cols * (2 if t_dy != FP32 else 4) < 32:
        raise tiling_error("dy", f"last axes hold {cols} elements; on {soc.name} (Atlas inference series) they "
                                 "must be at least 32 B")
    return rows, cols


def _workspace(soc: SocSpec, key: int, row: int, col: int, cva: int, itemsize: int, block_dim: int,
               block_factor: int, deterministic: bool) -> tuple[int, int, int, int, int]:
    """SetChunkWorkspace + the workspace size: (need_chunk, chunk_size, chunk_num, chunk_tail, bytes)."""
    if not deterministic:
        return 0, cva, 1, 0, ALIGN_32 * block_dim * 4 + SYS_WORKSPACE
    # The official sum is uint32 arithmetic: it wraps for inputs of 4 GiB and more.
    total_in = (row * col * itemsize * 2 + row * 4 + col * itemsize) & U32
    enable = int(total_in * 0.05)
    current = block_dim * cva * 4
    if current <= enable or total_in < 500 * 1024 * 1024 or key == SPLIT_N or soc.short_soc not in (
            "Ascend910B", "Ascend910_93"):
        return 0, cva, 1, 0, (cva + ALIGN_32) * block_dim * 4 + SYS_WORKSPACE
    chunk = (((enable - block_factor * 4) & U32) // (block_dim * 4)) & U32
    chunk = chunk // 4096 * 4096 or 4096
    num = ceil_div(col, chunk)
    return 1, chunk, num, col - (num - 1) * chunk, (chunk + ALIGN_32 + block_factor) * block_dim * 4 + SYS_WORKSPACE


@remembered(4)
def rms_norm_grad(dy: Any, x: Any, rstd: Any, gamma: Any, *, soc: str | SocSpec = DEFAULT_SOC,
                  deterministic: bool = False, core_num: int | None = None, ub_factor: int | None = None,
                  buffer_num: int = BUFFER_NUM_DB, tiling_key: int | None = None) -> RmsNormGradTiling:
    """The official RmsNormGrad tiling for these arguments (anything with ``.shape`` and ``.dtype``).

    Overrides of the free choices give a consistent alternative tiling; leave them None for the official one.
    """
    spec = get_soc(soc)
    rows, cols = check_args(dy, x, rstd, gamma, spec)
    deterministic = flag("deterministic", deterministic)
    t_dy = dtype_name(dy)
    align = ALIGN_32 if t_dy == FP32 else 16
    cva = align_up(cols, align)
    n_cores = spec.core_num_aiv if core_num is None else int(core_num)
    if not 1 <= n_cores <= spec.core_num_aiv:
        raise tiling_error("core_num", f"{n_cores} must be in [1, {spec.core_num_aiv}] (GetCoreNumAiv of "
                                       f"{spec.name})")
    if buffer_num not in (1, 2):
        raise tiling_error("buffer_num", f"{buffer_num} must be 1 or 2")
    key = (SPLIT_N if cols <= BUFFER_SIZE_SPLIT_N else SPLIT_D) if tiling_key is None else int(tiling_key)
    if key not in (SPLIT_N, SPLIT_D):
        raise tiling_error("tiling_key", f"{key} must be 1 (split-N) or 2 (split-D)")

    block_factor = ceil_div(rows, n_cores)
    block_dim = ceil_div(rows, block_factor)
    core_tail = rows - (block_dim - 1) * block_factor if rows % block_factor else 0
    if key == SPLIT_N:
        buffer_size = small_d_buffer_size(cva) if cva <= SMALL_D_THRESHOLD else BUFFER_SIZE_SPLIT_N
        uf = min(buffer_size // cva, block_factor) if ub_factor is None else int(ub_factor)
        if uf < 1:
            raise tiling_error("ub_factor", f"{uf} rows per UB tile: must be at least 1 (colValAlign {cva} does "
                                            f"not fit {buffer_size} elements)")
        loop = ceil_div(block_factor, uf)
        tail = block_factor - (loop - 1) * uf if block_factor % uf else 0
        if core_tail:
            t_loop = ceil_div(core_tail, uf)
            t_num, t_tail = uf, (core_tail - (t_loop - 1) * uf if core_tail % uf else 0)
        else:
            t_loop = t_num = t_tail = 0
        split_dim = 0
    else:
        uf = BUFFER_SIZE_SPLIT_D if ub_factor is None else int(ub_factor)
        if uf < 1 or uf % align:
            raise tiling_error("ub_factor", f"{uf} columns per UB tile: must be a positive multiple of {align} "
                                            f"for {t_dy} (32 B)")
        loop = ceil_div(cols, uf)
        tail = cols - (loop - 1) * uf if cols % uf else 0
        t_num, t_tail, t_loop = (uf, tail, loop) if core_tail else (0, 0, 0)
        split_dim = 1
    need_chunk, chunk_size, chunk_num, chunk_tail, ws = _workspace(
        spec, key, rows, cols, cva, 4 if t_dy == FP32 else 2, block_dim, block_factor, deterministic)
    return RmsNormGradTiling(
        block_factor=block_factor, core_calc_num=block_factor, core_calc_tail=core_tail, block_dim=block_dim,
        ub_split_dim=split_dim, ub_factor=uf, ub_calc_num=uf, ub_calc_tail=tail, ub_calc_loop=loop,
        ub_calc_tail_num=t_num, ub_calc_tail_tail=t_tail, ub_calc_tail_loop=t_loop, row=rows, col=cols,
        col_val_align=cva, avg_factor=float(np.float32(1.0) / np.float32(cols)), data_type=DATA_TYPE[t_dy],
        fixed_output=int(deterministic), need_chunk=need_chunk, chunk_size=chunk_size, chunk_num=chunk_num,
        chunk_tail=chunk_tail, tiling_key=key, workspace_size=ws, buffer_num=int(buffer_num))


@shared_plan
def ub_plan(t: RmsNormGradTiling, soc: str | SocSpec = DEFAULT_SOC) -> UbPlan:
    """The kernel's InitBuffer calls for this tiling, in their order: the UB plan, not yet checked against the
    capacity. The dy and x queue buffers also hold block_dim rows of 64 floats for the deterministic final sum
    (split-N sizes them so in ops-nn; split-D here too, see :mod:`kernels.rms_norm_grad`)."""
    spec = get_soc(soc)
    plan = UbPlan(spec.ub_size)
    cva, uf, nb = t.col_val_align, t.ub_factor, t.buffer_num
    if t.tiling_key == SPLIT_N:  # InitInputQue, InitOutputQue, InitTmpBuffer
        io = max(uf * cva, t.block_dim * LANES) * 4
        align = ALIGN_32 if t.data_type == 0 else 16
        plan.add("in_que_dy", io, nb)
        plan.add("in_que_x", io, nb)
        plan.add("in_que_rstd", align_up(uf, align) * 4, nb)
        plan.add("in_que_gamma", cva * 4)
        plan.add("out_que_dx", io, nb)
        plan.add("out_que_dgamma", cva * 4)
        if t.small_d:
            plan.add("tmp_buf", uf * LANES * 4)
            plan.add("tmp_mean_buf", uf * 4)
    else:  # InitUB
        io = max(uf, t.block_dim * LANES) * 4
        plan.add("in_que_dy", io, nb)
        plan.add("in_que_x", io, nb)
        plan.add("in_que_rstd", ROW_FACTOR_SPLIT_D * 4)
        plan.add("in_que_gamma", uf * 4)
        plan.add("out_que_dx", uf * 4, nb)
        plan.add("out_que_dgamma", uf * 4)
        plan.add("mean_buf", ROW_FACTOR_SPLIT_D * 4)
        plan.add("mean_tmp_buf", ROW_FACTOR_SPLIT_D * 4)
    return plan


def check_tiling(t: Any, dy: Any, x: Any, rstd: Any, gamma: Any, *, soc: str | SocSpec = DEFAULT_SOC,
                 deterministic: bool = False) -> RmsNormGradTiling:
    """A hand-made tiling, if it is what its free choices give for these arguments (``deterministic`` included),
    field for field (:func:`tilesim.tools.opspec.match_tiling`; 561002 naming the field otherwise). The op checks its
    UB plan."""
    return match_tiling(t, rms_norm_grad, dy, x, rstd, gamma, soc=soc, deterministic=deterministic)
