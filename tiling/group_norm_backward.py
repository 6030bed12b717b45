"""GroupNormGrad host tiling: ``op_host/group_norm_grad_tiling.cpp`` of hicann/ops-nn (the non-regbase
GroupNormGradTiling), reproduced field for field, plus the UB plans of its kernel and the checks of
``aclnnGroupNormBackward`` (``op_host/op_api/aclnn_group_norm_backward.cpp``) in their order.

Tasks are the N·G (batch, group) pairs, split over the vector cores. A task's UB mode depends on what fits:
5 when HxW = 1; 0 the whole group resident; 1 one channel at a time; 2 two channels at a time (double buffer);
3 a channel split into HxW chunks. dgamma/dbeta are reduced over N in a second stage whose plan (castEleNum,
the cores it uses, coreBatchParts) the tiling also computes.

Free choices a user may override: ``core_num`` (cores the tasks are split over), ``ub_mode`` (any mode whose
buffers fit, instead of the first that does) and ``mode3_capacity`` (elements per HxW chunk in mode 3, a multiple
of 8 blocks); every other field is derived from them as the official code derives it.
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
    align_up,
    ceil_div,
    dtype_name,
    flag,
    integer,
    numel,
    remembered,
    require,
    shape_of,
)

MODE_0, MODE_1, MODE_2, MODE_3, MODE_5 = 0, 1, 2, 3, 5
UB_MODES = (MODE_0, MODE_1, MODE_2, MODE_3, MODE_5)
DTYPE_MODE = {FP32: 0, FP16: 1, BF16: 2}
DETERMINISTIC_KEY = 10  # tiling key = dtype mode + 10 when N > 2
UPPER_CARRYING_LIMIT = 8000  # C/G rounded up to a block, in elements
MAX_C_SIZE = 240000
RESERVE_SPACE = 1024
UB_COPIES = 3  # dy, x and the HxW temporary
EIGHT_BLOCK = 8
STEP_SIZE = 64  # castEleNum granularity
SPLIT_COUNT = 2  # batch rows per workspace row, and halves of the fp32 stage 2
SYS_WORKSPACE = 16 * 1024 * 1024  # GetLibApiWorkSpaceSize on DAV_2201
FLOAT_BYTES = 4
MAX_DIMS = 8


@dataclass(frozen=True)
class GroupNormBackwardTiling:
    """GroupNormGradTilingData (official names in snake_case; its ``Tiling_key`` field is ``ub_mode`` here) plus
    ``tiling_key`` (the kernel template: dtype mode + 10 when deterministic), ``block_dim`` (coreNumUsed),
    ``dtype`` and ``workspace_size`` (bytes, the library's 16 MiB included)."""

    ub_mode: int
    n: int
    c: int
    hxw: int
    g: int
    nxg: int
    c_g: int
    task_num_per_core: int
    task_num_per_tail_core: int
    tail_core: int
    mode1_ub_cap_c_num: int
    mode1_ub_iter_c_num: int
    mode1_ub_tail_c_num: int
    mode2_ub_capacity_ele: int
    mode2_ub_iteration_num: int
    mode2_ub_tail_num: int
    work_space_size: int
    stage2_core_used: int
    cast_ele_num: int
    tail_cast_num: int
    core_batch_parts: int
    core_batch_parts_tail_repeat: int
    repeat_time4_stage2: int
    dx_is_require: bool
    dgamma_is_require: bool
    dbeta_is_require: bool
    tiling_key: int
    block_dim: int
    dtype: str
    workspace_size: int

    @property
    def deterministic(self) -> bool:
        """The two-stage reduction over N (selected by N > 2, not by the global deterministic flag)."""
        return self.tiling_key >= DETERMINISTIC_KEY

    def choice_fields(self) -> dict[str, str | None]:
        """The overrides of :func:`group_norm_backward` and the fields that carry them (block_dim: the core count;
        mode 3's chunk, ``mode2_ub_capacity_ele``, in mode 3 only)."""
        return {"core_num": "block_dim", "ub_mode": "ub_mode",
                "mode3_capacity": "mode2_ub_capacity_ele" if self.ub_mode == MODE_3 else None}

    def tasks_of_core(self, core: int) -> tuple[int, int]:
        """(first task, task count) of a core: the first ``tail_core`` cores take one task more."""
        if core < self.tail_core:
            return core * self.task_num_per_core, self.task_num_per_core
        return core * self.task_num_per_tail_core + self.tail_core, self.task_num_per_tail_core


def elements_per_block(dtype: str) -> int:
    """Elements of ``dtype`` in one 32 B block: 8 for fp32, 16 for fp16 and bf16."""
    return 8 if dtype == FP32 else 16


def dtype_bytes(dtype: str) -> int:
    """UB bytes per element: fp32 4; b16 6 (a staging buffer in T plus the fp32 buffer computed on)."""
    return 4 if dtype == FP32 else 6


@remembered(5)
def check_args(grad_out: Any, input: Any, mean: Any, rstd: Any, gamma: Any, n: int, c: int, hxw: int, group: int,
               output_mask: Any, outputs: tuple[Any, Any, Any] | None, soc: SocSpec) -> None:
    """CheckParams of aclnnGroupNormBackward, in its order. None inputs are 161001; everything else, a null or
    wrong-length mask and a required output missing included, is 161002 (the code's codes; the doc says 161001
    for the mask). ``outputs`` is (gradInput, gradGammaOut, gradBetaOut) of the two-phase form, or None when
    the op allocates them."""
    require(gradOut=grad_out, input=input, mean=mean, rstd=rstd)
    if gamma is not None:
        require(gamma=gamma)
    if output_mask is None:
        raise invalid("outputMask", "must not be null")
    if not isinstance(output_mask, tuple | list | np.ndarray):
        raise invalid("outputMask", f"must be a sequence of 3 bools, got {type(output_mask).__name__}")
    mask = tuple(flag(f"outputMask[{i}]", m) for i, m in enumerate(output_mask))
    if len(mask) != 3:
        raise invalid("outputMask", f"length must be 3, got {len(mask)}")
    out_names = ("gradInput", "gradGammaOut", "gradBetaOut")
    if outputs is not None:
        for i in range(3):
            if mask[i] and outputs[i] is None:
                raise invalid(out_names[i], f"must not be null when outputMask[{i}] is true")
            if mask[i]:
                require(**{out_names[i]: outputs[i]})
    t = dtype_name(grad_out)
    allowed = (FP32, FP16, BF16) if soc.supports_bf16 else (FP32, FP16)
    if t not in allowed:
        raise invalid("gradOut", f"dtype {t} not supported on {soc.name}; supported: {', '.join(allowed)}")
    named = [("input", input), ("mean", mean), ("rstd", rstd), ("gamma", gamma)]
    if outputs is not None:
        named += [(out_names[i], outputs[i]) for i in range(3) if mask[i]]
    for name, a in named:
        if a is not None and dtype_name(a) != t:
            raise invalid(name, f"dtype {dtype_name(a)} must equal gradOut's dtype {t}")
    n, c, hxw, group = integer("N", n), integer("C", c), integer("HxW", hxw), integer("group", group)
    for name, v in (("N", n), ("C", c), ("HxW", hxw)):
        if v < 0:
            raise invalid(name, f"must not be negative, got {v}")
    if group <= 0:
        raise invalid("group", f"must be greater than 0, got {group}")
    if c % group != 0:
        raise invalid("C", f"must be divisible by group: C = {c}, group = {group}")
    if soc.arch == 220:
        if c // group > UPPER_CARRYING_LIMIT:
            raise invalid("group", f"C / group = {c // group} must not exceed {UPPER_CARRYING_LIMIT} on {soc.name}")
        if c > MAX_C_SIZE:
            raise invalid("C", f"must not exceed {MAX_C_SIZE} on {soc.name}, got {c}")
    s_dy = shape_of(grad_out)
    if len(s_dy) > MAX_DIMS:
        raise invalid("gradOut", f"rank {len(s_dy)} must not exceed {MAX_DIMS}")
    for name, a, want, rule in (("gradOut", grad_out, n * c * hxw, "N * C * HxW"),
                                ("input", input, n * c * hxw, "N * C * HxW"),
                                ("mean", mean, n * group, "N * group"), ("rstd", rstd, n * group, "N * group")):
        if numel(shape_of(a)) != want:
            raise invalid(name, f"numel {numel(shape_of(a))} must equal {rule} = {want}")
    if gamma is not None and numel(shape_of(gamma)) != c:
        raise invalid("gamma", f"numel {numel(shape_of(gamma))} must equal C = {c}")
    if outputs is not None:
        s_g = shape_of(gamma) if gamma is not None else (c,)
        for i, want in enumerate((shape_of(input), s_g, s_g)):
            if mask[i] and shape_of(outputs[i]) != want:
                raise invalid(out_names[i], f"shape {list(shape_of(outputs[i]))} must be {list(want)}")


def _stage1(c_g: int, hxw: int, dtype: str, ub: int, ub_mode: int | None, mode3_capacity: int | None) -> dict:
    """CalStage1TilingInfo: the UB capacities, the mode, and mode 3's HxW chunks."""
    epb, db = elements_per_block(dtype), dtype_bytes(dtype)
    reserve = RESERVE_SPACE + align_up(c_g, epb) * db * UB_COPIES
    extra = 0 if (hxw % EIGHT_BLOCK == 0 or c_g == 1) else 2 * align_up(hxw, epb) * FLOAT_BYTES
    cap0 = 0 if ub < reserve + extra else (ub - reserve - extra) // (align_up(c_g * hxw, epb) * db * UB_COPIES)
    cap1 = (ub - reserve) // (align_up(hxw, epb) * db * UB_COPIES)
    iter1 = tail1 = 0
    if cap1 > 0:
        iter1 = ceil_div(c_g, cap1)
        tail1 = cap1 if iter1 * cap1 == c_g else c_g - (iter1 - 1) * cap1
    if hxw == 1:
        official = MODE_5
    elif cap0 > 0:
        official = MODE_0
    elif cap1 == 1:
        official = MODE_1
    elif cap1 > 1:
        official = MODE_2
    else:
        official = MODE_3
    mode = official if ub_mode is None else ub_mode
    if mode not in UB_MODES:
        raise invalid("ub_mode", f"must be one of {UB_MODES}, got {mode}")
    if (mode == MODE_5) != (hxw == 1):
        raise tiling_error("ub_mode", "mode 5 is the mode for HxW = 1, and only for it" +
                           f" (HxW = {hxw}, ub_mode {mode})")
    if mode == MODE_0 and cap0 < 1:
        raise tiling_error("ub_mode", f"mode 0 keeps a whole group ({c_g} x {hxw}) in UB: it does not fit")
    if mode == MODE_1 and cap1 < 1:
        raise tiling_error("ub_mode", f"mode 1 keeps one channel ({hxw} elements) in UB: it does not fit")
    if mode == MODE_2 and cap1 < 2:
        raise tiling_error("ub_mode", f"mode 2 keeps two channels ({hxw} elements each) in UB: they do not fit")
    cap_ele = it3 = tail3 = 0
    if mode == MODE_3:
        cap_max = (ub - reserve) // (db * UB_COPIES) // (epb * EIGHT_BLOCK) * (epb * EIGHT_BLOCK)
        cap_ele = cap_max if mode3_capacity is None else mode3_capacity
        if cap_ele <= 0 or cap_ele % (epb * EIGHT_BLOCK) or cap_ele > cap_max:
            raise tiling_error("mode3_capacity", f"must be a positive multiple of {epb * EIGHT_BLOCK} elements up "
                                                 f"to {cap_max}, got {cap_ele}")
        it3 = ceil_div(hxw, cap_ele)
        tail3 = cap_ele if hxw == it3 * cap_ele else hxw - (it3 - 1) * cap_ele
    elif mode3_capacity is not None:
        raise invalid("mode3_capacity", f"applies to ub_mode 3 only (ub_mode is {mode})")
    return dict(ub_mode=mode, mode1_ub_cap_c_num=cap1, mode1_ub_iter_c_num=iter1, mode1_ub_tail_c_num=tail1,
                mode2_ub_capacity_ele=cap_ele, mode2_ub_iteration_num=it3, mode2_ub_tail_num=tail3)


def _stage2(n: int, c: int, used: int, dtype: str, det: bool, ub: int) -> dict:
    """CalStage2TilingInfo: the reduction over N and the workspace. The official code logs and carries on when
    castEleNum or coreBatchParts come out 0 (its Init status is ignored); here that is a tiling error."""
    f = dict(work_space_size=0, stage2_core_used=0, cast_ele_num=0, tail_cast_num=0, core_batch_parts=0,
             core_batch_parts_tail_repeat=0, repeat_time4_stage2=0, user_ws=0)
    avail = (ub - RESERVE_SPACE) // SPLIT_COUNT
    if det:
        f["work_space_size"] = ceil_div(n, SPLIT_COUNT) * c
        if dtype == FP32:
            if used // SPLIT_COUNT == 0:
                raise tiling_error("core_num", f"the deterministic fp32 stage 2 splits the batch rows over two "
                                               f"halves of the cores and needs at least 2 cores, got {used}")
            cast = align_up(ceil_div(c, used // SPLIT_COUNT), STEP_SIZE)
            avail -= cast * FLOAT_BYTES
            counts = ceil_div(ceil_div(n, SPLIT_COUNT), SPLIT_COUNT)
        else:
            cast = align_up(ceil_div(c, used), STEP_SIZE)
            avail -= cast * (FLOAT_BYTES + 2)
            counts = ceil_div(n, SPLIT_COUNT)
        parts = min(max(avail, 0) // (cast * FLOAT_BYTES), counts)
        if parts == 0:
            raise tiling_error("C", f"stage 2 needs {cast} channels x 4 B per row in UB beside its sums, but only "
                                    f"{max(avail, 0)} B are left of {ub} B (C = {c}, {used} cores)")
        f.update(cast_ele_num=cast, core_batch_parts=parts,
                 core_batch_parts_tail_repeat=parts if counts % parts == 0 else counts % parts,
                 repeat_time4_stage2=ceil_div(counts, parts))
    elif dtype != FP32:
        cast = align_up(ceil_div(c, used), STEP_SIZE)
        f.update(cast_ele_num=cast, work_space_size=c)
    if f["cast_ele_num"]:
        s2 = ceil_div(c, f["cast_ele_num"])
        f.update(stage2_core_used=s2, tail_cast_num=c if s2 == 1 else c - (s2 - 1) * f["cast_ele_num"])
    f["user_ws"] = SPLIT_COUNT * f["work_space_size"] * FLOAT_BYTES
    return f


@remembered(5)
def group_norm_backward(grad_out: Any, input: Any, mean: Any, rstd: Any, gamma: Any, N: int, C: int,  # noqa: N803
                        HxW: int, group: int, output_mask: Any = (True, True, True), *,  # noqa: N803
                        soc: str | SocSpec = DEFAULT_SOC, core_num: int | None = None, ub_mode: int | None = None,
                        mode3_capacity: int | None = None) -> GroupNormBackwardTiling:
    """The official GroupNormGrad TilingData for these arguments (checked as aclnnGroupNormBackward checks them),
    or a consistent alternative with ``core_num``, ``ub_mode`` or ``mode3_capacity`` overridden.

    Inputs need only ``.shape`` and ``.dtype``; gamma may be None. Raises AclnnError: 161001/161002 for what
    aclnn refuses, 561002 for what the tiling refuses (HxW = 0, C/G beyond 8000 elements, an override that
    does not fit).
    """
    spec = get_soc(soc)
    check_args(grad_out, input, mean, rstd, gamma, N, C, HxW, group, output_mask, None, spec)
    mask = tuple(bool(m) for m in output_mask)
    dtype = dtype_name(grad_out)
    if HxW == 0 or N == 0 or C == 0:
        raise tiling_error("input", f"empty input (N = {N}, C = {C}, HxW = {HxW}): N * G and HxW must not be 0 "
                                    "(aclnn returns before tiling for empty tensors)")
    c_g = C // group
    epb = elements_per_block(dtype)
    if align_up(c_g, epb) > UPPER_CARRYING_LIMIT:
        raise tiling_error("group", f"C / group = {c_g} rounds up to {align_up(c_g, epb)} elements, over the "
                                    f"kernel's carrying capacity {UPPER_CARRYING_LIMIT}")
    cores = spec.core_num_aiv if core_num is None else int(core_num)
    if not 1 <= cores <= spec.core_num_aiv:
        raise tiling_error("core_num", f"{cores} must be in [1, {spec.core_num_aiv}] (GetCoreNumAiv of {spec.name})")
    nxg = N * group
    tpc = ceil_div(nxg, cores)
    used = ceil_div(nxg, tpc)
    tail_tpc, tail_core = tpc, used
    if nxg % used:
        tail_tpc, tail_core = tpc - 1, nxg % used
    det = N > 2
    s1 = _stage1(c_g, HxW, dtype, spec.ub_size, ub_mode, mode3_capacity)
    s2 = _stage2(N, C, used, dtype, det, spec.ub_size)
    user_ws = s2.pop("user_ws")
    t = GroupNormBackwardTiling(
        n=N, c=C, hxw=HxW, g=group, nxg=nxg, c_g=c_g, task_num_per_core=tpc, task_num_per_tail_core=tail_tpc,
        tail_core=tail_core, **s1, **s2, dx_is_require=mask[0], dgamma_is_require=mask[1],
        dbeta_is_require=mask[2], tiling_key=DTYPE_MODE[dtype] + DETERMINISTIC_KEY * det, block_dim=used,
        dtype=dtype, workspace_size=SYS_WORKSPACE + user_ws)
    ub_plan(t, spec).check()
    return t


def check_tiling(t: Any, grad_out: Any, input: Any, mean: Any, rstd: Any, gamma: Any, N: int, C: int,  # noqa: N803
                 HxW: int, group: int, output_mask: Any = (True, True, True), *,  # noqa: N803
                 soc: str | SocSpec = DEFAULT_SOC) -> GroupNormBackwardTiling:
    """A hand-made tiling, if it is what its free choices give for these arguments, field for field
    (:func:`tilesim.tools.opspec.match_tiling`; 561002 naming the field otherwise); the tiling function checks the UB
    plan of the choices."""
    return match_tiling(t, group_norm_backward, grad_out, input, mean, rstd, gamma, N, C, HxW, group, output_mask,
                        soc=soc)


# GroupNormGrad's InitBuffer calls, one order for every dtype and mode (kernels.group_norm_backward places a buffer a
# mode or dtype does not have with 0 bytes, where it moves no offset): Init_Unified_Buffer, then after pipe.Reset
# the second stage's Initbuffer4stage2_mode0/1/2.
STAGE1_BUFFERS = ["in_queue_dy", "in_tbuf_dy_t", "in_queue_x", "in_temp_x", "in_temp_dy", "in_tbuf_x_t",
                  "in_queue_gamma", "in_tbuf_gamma_t", "temp_queue_hxw_fp32_mode3", "out_tbuf_dgamma_t",
                  "out_tbuf_dbeta_t", "out_queue_dgamma", "out_queue_dbeta", "temp_queue_hxw", "in_temp_x_fp32",
                  "in_temp_dy_fp32"]
STAGE2_BUFFERS = ["cal_queue_dgamma_reduce", "cal_queue_dbeta_reduce", "in_queue_dgamma_channel",
                  "in_queue_dbeta_channel", "out_tbuf_dgamma_channel_t", "out_tbuf_dbeta_channel_t"]


@shared_plan
def ub_plan(t: GroupNormBackwardTiling, soc: SocSpec) -> UbPlan:
    """Init_Unified_Buffer of the kernel for the tiling's dtype and mode (Init_Unified_Buffer_FP32_MODE_* or
    _FP16_BF16_MODE_*), then (after pipe.Reset) the second stage's buffers where core 0 places them: every row of
    :data:`STAGE1_BUFFERS` and :data:`STAGE2_BUFFERS` in that order, 0 bytes where ops-nn places none."""
    b16 = t.dtype != FP32
    epb = elements_per_block(t.dtype)
    if t.ub_mode == MODE_0:
        main = align_up(t.c_g * t.hxw, epb)
    elif t.ub_mode in (MODE_1, MODE_2):
        main = align_up(t.hxw, epb)
    elif t.ub_mode == MODE_3:
        main = align_up(t.mode2_ub_capacity_ele, epb)
    else:
        main = align_up(t.c_g, epb)
    nbuf = 2 if t.ub_mode == MODE_2 else 1
    cg = align_up(t.c_g, epb) * 4
    tb = 2 if b16 else 0
    temp = 0
    if t.ub_mode == MODE_0 and not (t.hxw % EIGHT_BLOCK == 0 or t.c_g == 1):
        temp = align_up(t.hxw, epb) * 4
    mode3_fp32 = t.ub_mode == MODE_3 and not b16
    stage1 = [(main * 4, nbuf), (main * tb, 1), (main * 4, nbuf), (temp if b16 else 0, 1), (temp if b16 else 0, 1),
              (main * tb, 1), (cg, 1), (cg // 4 * tb, 1), (main * 4 if mode3_fp32 else 0, nbuf), (cg // 4 * tb, 1),
              (cg // 4 * tb, 1), (cg, 1), (cg, 1), (0 if mode3_fp32 else main * 4, nbuf), (0 if b16 else temp, 1),
              (0 if b16 else temp, 1)]
    plan = UbPlan(soc.ub_size)
    for name, (nbytes, num) in zip(STAGE1_BUFFERS, stage1, strict=True):
        plan.add(name, nbytes, num)
    if t.deterministic or (b16 and t.n != 1):
        cast = t.cast_ele_num
        sums = cast * 4 if t.deterministic else 0
        rows = t.core_batch_parts * cast * 4 if t.deterministic else cast * 4
        plan.reset()
        for name, nbytes in zip(STAGE2_BUFFERS, (sums, sums, rows, rows, cast * tb, cast * tb), strict=True):
            plan.add(name, nbytes, 1)
    return plan
