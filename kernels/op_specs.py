"""The five shipped ops as the explorer, the trace command and the run report see them: one
:class:`tilesim.tools.opspec.OpSpec` each in :data:`OPS`, keyed by op name, with the realistic input makers the demo
(``bench.demo``) uses too.

A sweep (``candidates``) crosses an op's free choices, so that a table of a few dozen rows shows each choice's
trend without running every value:
- the core count: 1, 2, 4, ... and all the SoC's vector cores (the official count); ``block_dim`` is what the
  tiling makes of it (fewer when there is less work than cores);
- the tile: the size the op's own host code picks for those choices, plus :data:`tilesim.tools.opspec.TILES` sizes
  from a small one (a row, a 256 B repeat, a 512 B cache line: whatever the op's unit is) to the largest the UB
  takes, spread geometrically (:func:`tilesim.tools.opspec.with_tiles`);
- buffer_num 1 and 2 where the kernel has queues to deepen, and the op's split or mode where it has one. A
  split or mode the host code would not pick for these inputs is there to compare against: it gets only its
  smallest and largest tiles (:data:`OTHER_TILES`), which keeps a sweep of a default shape to a few dozen runs.
A tiling is kept when the tiling function accepts the overrides, the op's own tiling check accepts the result
(so ``tiling=`` runs it) and its UB plan fits; identical tilings are kept once (the TilingData classes are
frozen dataclasses: they compare and hash by value), and the official tiling (no overrides) is always in the
list, first, marked ``official``.

Inputs are dicts keyed by the op API's argument names (scalars included), so ``run`` is the API called with
``**inputs``; dtypes are "fp32", "bf16", "fp16".
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
from tilesim.tiling.common import FP32, align_up, ceil_div, dtype_name
from tilesim.tiling.group_norm_backward import EIGHT_BLOCK, MODE_2, MODE_3, MODE_5, UB_MODES, elements_per_block
from tilesim.tiling.group_norm_backward import check_tiling as gn_check_tiling
from tilesim.tiling.group_norm_backward import group_norm_backward as gn_tiling
from tilesim.tiling.layer_norm_grad import TMP_MODES, plan_for
from tilesim.tiling.layer_norm_grad import check_tiling as ln_check_tiling
from tilesim.tiling.layer_norm_grad import layer_norm_grad as ln_tiling
from tilesim.tiling.nsa_compress_grad import check_tiling as nsa_check_tiling
from tilesim.tiling.nsa_compress_grad import nsa_compress_grad as nsa_tiling
from tilesim.tiling.rms_norm import MODE_MERGE_N, MODE_NAMES, MODE_SPLIT_D
from tilesim.tiling.rms_norm import check_tiling as rms_norm_check_tiling
from tilesim.tiling.rms_norm import rms_norm as rms_norm_tiling
from tilesim.tiling.rms_norm_grad import SPLIT_D, SPLIT_N
from tilesim.tiling.rms_norm_grad import check_tiling as rms_check_tiling
from tilesim.tiling.rms_norm_grad import rms_norm_grad as rms_tiling
from tilesim.tiling.rms_norm_grad import ub_plan as rms_ub_plan
from tilesim.tiling.softmax import SoftmaxArbTiling, SoftmaxLongTiling
from tilesim.tiling.softmax import check_tiling as softmax_check_tiling
from tilesim.tiling.softmax import softmax as softmax_tiling
from tilesim.tiling.swiglu import check_tiling as swiglu_fwd_check_tiling
from tilesim.tiling.swiglu import swiglu as swiglu_fwd_tiling
from tilesim.tiling.swiglu_grad import BLOCK, L2_CACHE_LINE, MAX_BLOCK_COUNT
from tilesim.tiling.swiglu_grad import check_tiling as swiglu_check_tiling
from tilesim.tiling.swiglu_grad import swiglu_grad as swiglu_tiling
from tilesim.tiling.swiglu_grad import ub_plan as swiglu_ub_plan

from tilesim.errors import invalid
from tilesim.soc import SocSpec, get_soc
from tilesim.tools.opspec import (
    DTYPES,
    TILES,
    Accumulation,
    Candidate,
    Inputs,
    OpSpec,
    collect,
    core_counts,
    legal,
    with_tiles,
)

from . import reference
from .group_norm_backward import group_norm_backward
from .layer_norm_grad import layer_norm_grad
from .nsa_compress_grad import nsa_compress_grad
from .nsa_compress_grad import ub_plan as nsa_ub_plan
from .rms_norm import rms_norm
from .rms_norm_grad import rms_norm_grad
from .softmax import softmax
from .swiglu import swiglu
from .swiglu_grad import swiglu_grad

RMS_EPS = 1e-6  # the forward RmsNorm's epsilon, for rstd
GN_EPS = 1e-5  # torch.nn.GroupNorm's default, for the forward's rstd
GN_MAX_GROUPS = 32
LN_EPS = 1e-5  # torch.nn.LayerNorm's default
NSA_SEQS = 4  # NsaCompressGrad: sequences of equal length
NSA_BLOCK_SIZE, NSA_STRIDE = 32, 16
OTHER_TILES = 2  # for a split or mode the op's host code does not pick for the inputs: the smallest, the largest
LANES = 64  # fp32 elements of one 256 B repeat: the smallest split-D tile swept

# ----------------------------------------------------------------------------------------------------------------
# input makers


def rms_norm_grad_inputs(shape: tuple[int, ...], dtype: str, seed: int = 0) -> Inputs:
    """dy ~ N(0, 1) and x ~ U(-2, 2) of ``shape`` [rows, D] in ``dtype``; rstd = 1 / sqrt(mean(x²) + 1e-6) of the
    rounded x in fp32 (what the forward RmsNorm saves); gamma ~ U(0.5, 1.5) in fp32, or fp16 with fp16 inputs (the
    one fp16 pairing every SoC's dtype table allows; fp32 gamma with fp16 dy is A2-only)."""
    rng = np.random.default_rng(seed)
    dt = DTYPES[dtype]
    x = rng.uniform(-2.0, 2.0, shape).astype(np.float32).astype(dt)
    dy = rng.standard_normal(shape, dtype=np.float32).astype(dt)
    x32 = x.astype(np.float32)
    rstd = (np.float32(1.0) / np.sqrt(np.mean(x32 * x32, axis=1) + np.float32(RMS_EPS))).astype(np.float32)
    gamma = rng.uniform(0.5, 1.5, shape[1]).astype(np.float32).astype(DTYPES["fp16" if dtype == "fp16" else "fp32"])
    return {"dy": dy, "x": x, "rstd": rstd, "gamma": gamma}


def default_groups(c: int) -> int:
    """32 groups, or the largest count below that divides C (C must be a multiple of the group count): C = 16
    gives 16 groups of one channel, C = 48 gives 24."""
    return max(g for g in range(1, min(GN_MAX_GROUPS, c) + 1) if c % g == 0)


def group_norm_backward_inputs(shape: tuple[int, ...], dtype: str, seed: int = 0, *,
                               groups: int | None = None) -> Inputs:
    """dy ~ N(0, 1) and x ~ U(-2, 2) of ``shape`` [N, C, HxW]; mean and rstd = 1 / sqrt(var + 1e-5) over each
    (n, group) of the rounded x, [N, groups] (what the forward GroupNorm saves); gamma ~ U(0.5, 1.5); all in
    ``dtype``, as aclnnGroupNormBackward requires. ``groups`` defaults to :func:`default_groups`."""
    n, c, _ = shape
    g = default_groups(c) if groups is None else groups
    rng = np.random.default_rng(seed)
    dt = DTYPES[dtype]
    x = rng.uniform(-2.0, 2.0, shape).astype(np.float32).astype(dt)
    dy = rng.standard_normal(shape, dtype=np.float32).astype(dt)
    xg = x.astype(np.float32).reshape(n, g, -1)
    mean = xg.mean(axis=-1, dtype=np.float64).astype(np.float32).astype(dt)
    rstd = (1.0 / np.sqrt(xg.var(axis=-1, dtype=np.float64) + GN_EPS)).astype(np.float32).astype(dt)
    gamma = rng.uniform(0.5, 1.5, c).astype(np.float32).astype(dt)
    return {"grad_out": dy, "input": x, "mean": mean, "rstd": rstd, "gamma": gamma, "N": n, "C": c,
            "HxW": shape[2], "group": g}


def swiglu_grad_inputs(shape: tuple[int, ...], dtype: str, seed: int = 0, *, dim: int = -1) -> Inputs:
    """x ~ U(-3, 3) of ``shape`` (A and B its halves along ``dim``) and y_grad ~ N(0, 1) of ``shape`` with ``dim``
    halved, in ``dtype``."""
    rng = np.random.default_rng(seed)
    dt = DTYPES[dtype]
    x = rng.uniform(-3.0, 3.0, shape).astype(np.float32).astype(dt)
    dy_shape = list(shape)
    dy_shape[dim] //= 2
    dy = rng.standard_normal(dy_shape, dtype=np.float32).astype(dt)
    return {"y_grad": dy, "x": x, "dim": dim}


def swiglu_inputs(shape: tuple[int, ...], dtype: str, seed: int = 0, *, dim: int = -1) -> Inputs:
    """x ~ U(-3, 3) of ``shape`` in ``dtype``, A and B its halves along ``dim``."""
    x = np.random.default_rng(seed).uniform(-3.0, 3.0, shape).astype(np.float32).astype(DTYPES[dtype])
    return {"x": x, "dim": dim}


def softmax_inputs(shape: tuple[int, ...], dtype: str, seed: int = 0, *, dim: int = -1) -> Inputs:
    """x ~ N(0, 2²) of ``shape`` in ``dtype`` (logits), normalised along ``dim``."""
    x = (np.random.default_rng(seed).standard_normal(shape, dtype=np.float32) * np.float32(2.0)).astype(DTYPES[dtype])
    return {"x": x, "dim": dim}


def rms_norm_inputs(shape: tuple[int, ...], dtype: str, seed: int = 0, *, gamma_dtype: str | None = None) -> Inputs:
    """x ~ U(-2, 2) of ``shape`` [rows, D] in ``dtype``; gamma ~ U(0.5, 1.5) of [D] in ``gamma_dtype`` (x's dtype by
    default; "fp32" with b16 x is the mixed-dtype kernel); epsilon 1e-6."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-2.0, 2.0, shape).astype(np.float32).astype(DTYPES[dtype])
    gamma = rng.uniform(0.5, 1.5, shape[-1]).astype(np.float32).astype(DTYPES[gamma_dtype or dtype])
    return {"x": x, "gamma": gamma, "epsilon": RMS_EPS}


def layer_norm_grad_inputs(shape: tuple[int, ...], dtype: str, seed: int = 0) -> Inputs:
    """dy ~ N(0, 1) and x ~ U(-2, 2) of ``shape`` [rows, H] in ``dtype``; the (biased) variance and mean of each
    row of the rounded x in float64 (what the forward LayerNorm saves), gamma ~ U(0.5, 1.5), in ``dtype``;
    epsilon 1e-5."""
    rng = np.random.default_rng(seed)
    dt = DTYPES[dtype]
    x = rng.uniform(-2.0, 2.0, shape).astype(np.float32).astype(dt)
    dy = rng.standard_normal(shape, dtype=np.float32).astype(dt)
    x64 = x.astype(np.float64)
    gamma = rng.uniform(0.5, 1.5, shape[-1]).astype(np.float32).astype(dt)
    return {"dy": dy, "x": x, "variance": x64.var(axis=-1).astype(dt), "mean": x64.mean(axis=-1).astype(dt),
            "gamma": gamma, "epsilon": LN_EPS}


def nsa_compress_grad_inputs(shape: tuple[int, ...], dtype: str, seed: int = 0, *, seqs: int = NSA_SEQS,
                             block_size: int = NSA_BLOCK_SIZE, stride: int = NSA_STRIDE) -> Inputs:
    """NsaCompressGrad's arguments in ``dtype``: input ~ N(0, 1) of ``shape`` [T, N, D] (TND) cut into ``seqs``
    sequences of T / seqs tokens (act_seq_len their cumulative ends), weight ~ U(-1, 1) of [block_size, N],
    output_grad ~ N(0, 1) of [windows, N, D], ⌊(L − block_size)/stride⌋ + 1 windows per sequence."""
    rng = np.random.default_rng(seed)
    dt = DTYPES[dtype]
    t, n, _ = shape
    cum = [t * (i + 1) // seqs for i in range(seqs)]
    lens = np.diff([0, *cum])
    wins = int(sum((length - block_size) // stride + 1 for length in lens if length >= block_size))
    x = rng.standard_normal(shape, dtype=np.float32).astype(dt)
    w = rng.uniform(-1.0, 1.0, (block_size, n)).astype(np.float32).astype(dt)
    dy = rng.standard_normal((wins, *shape[1:]), dtype=np.float32).astype(dt)
    return {"output_grad": dy, "input": x, "weight": w, "act_seq_len": cum, "compress_block_size": block_size,
            "compress_stride": stride}


# ----------------------------------------------------------------------------------------------------------------
# sweeps


# ----------------------------------------------------------------------------------------------------------------
# RmsNormGrad

RMS_ARGS = ("dy", "x", "rstd", "gamma")


def rms_norm_grad_candidates(inputs: Inputs, soc: SocSpec) -> list[Candidate]:
    """Cores x buffer_num 1, 2 x split-N (tiles of whole rows: 1 row up to what fits, at most the core's rows) and
    split-D (column tiles from 64 columns up to what fits, at most the row); the split the op does not pick has
    neither its own tile formula nor a tile between. The non-deterministic kernel, as the op runs by default
    (``deterministic`` is an op argument, not a tiling choice)."""
    spec = get_soc(soc)
    args = tuple(inputs[k] for k in RMS_ARGS)
    official = rms_tiling(*args, soc=spec)
    rows, cols, data_type = official.row, official.col, official.data_type
    align = 8 if data_type == 0 else 16

    def make(**kw: Any) -> Any:
        t = rms_tiling(*args, soc=spec, **kw)
        rms_check_tiling(t, *args, soc=spec)
        rms_ub_plan(t, spec).check()
        return t

    def sweep() -> Iterator[Any]:
        for cores in core_counts(spec):
            for nb in (1, 2):
                for key, lo, hi, step in ((SPLIT_N, 1, ceil_div(rows, cores), 1),
                                          (SPLIT_D, LANES, align_up(cols, align), align)):
                    # The split-D formula's 4096 columns are sized for rows longer than split-N takes.
                    mine = key == official.tiling_key
                    yield from with_tiles(make, {"core_num": cores, "buffer_num": nb, "tiling_key": key},
                                          lambda v: {"ub_factor": v}, lo, hi, step, own=mine,
                                          count=TILES if mine else OTHER_TILES)

    return collect(official, sweep(), rms_norm_grad_params)


def rms_norm_grad_sums(t: Any) -> dict[str, Accumulation]:
    """dgamma: each core sums its rows (block_factor) into its partial, then the cores' partials are added."""
    return {"dgamma": Accumulation(t.block_factor, "rows per core")}


def rms_norm_grad_params(t: Any) -> dict[str, Any]:
    """Split-N tiles are ub_factor whole rows; split-D tiles ub_factor columns of one row."""
    split_n = t.tiling_key == SPLIT_N
    return {"block_dim": t.block_dim, "buffer_num": t.buffer_num,
            "tile": f"{t.ub_factor}x{t.col}" if split_n else f"1x{t.ub_factor}", "split": "N" if split_n else "D"}


# ----------------------------------------------------------------------------------------------------------------
# GroupNormBackward

GN_ARGS = ("grad_out", "input", "mean", "rstd", "gamma", "N", "C", "HxW", "group")
GN_MODE_NAMES = {0: "0 group", 1: "1 channel", 2: "2 channel", 3: "3 chunk", 5: "5 HxW=1"}


def group_norm_backward_candidates(inputs: Inputs, soc: SocSpec) -> list[Candidate]:
    """Cores x every UB mode whose buffers fit (mode 3 with its own chunk and chunks of 8 blocks up to HxW). Off
    DAV_2201 the op runs aclnn's decomposition, which launches no kernel: there is nothing to explore, and the
    SoC is refused (161002) as the API refuses a tiling there."""
    spec = get_soc(soc)
    if spec.arch != 220:
        raise invalid("soc", f"{spec.name} runs no GroupNormGrad kernel (DAV_2201 only): aclnn decomposes the op "
                             "there, so there is no tiling to explore")
    args = tuple(inputs[k] for k in GN_ARGS)
    official = gn_tiling(*args, soc=spec)
    step = elements_per_block(official.dtype) * EIGHT_BLOCK

    def make(**kw: Any) -> Any:
        t = gn_tiling(*args, soc=spec, **kw)  # it checks the UB plan itself
        gn_check_tiling(t, *args, soc=spec)
        return t

    def sweep() -> Iterator[Any]:
        for cores in core_counts(spec):
            for mode in UB_MODES:
                fixed = {"core_num": cores, "ub_mode": mode}
                if mode == MODE_3:
                    yield from with_tiles(make, fixed, lambda v: {"mode3_capacity": v}, step,
                                          align_up(official.hxw, step), step,
                                          count=TILES if official.ub_mode == MODE_3 else OTHER_TILES)
                elif (t := legal(make, **fixed)) is not None:
                    yield t

    return collect(official, sweep(), group_norm_backward_params)


def group_norm_backward_params(t: Any) -> dict[str, Any]:
    """The tile a task's UB holds: channels x elements (mode 0 a whole group, 1 and 2 one channel, 2 double-
    buffered, 3 an HxW chunk, 5 the group's C/G values)."""
    tile = {0: f"{t.c_g}x{t.hxw}", MODE_3: f"1x{t.mode2_ub_capacity_ele}", MODE_5: f"{t.c_g}x1"}.get(
        t.ub_mode, f"1x{t.hxw}")
    return {"block_dim": t.block_dim, "buffer_num": 2 if t.ub_mode == MODE_2 else 1, "tile": tile,
            "mode": GN_MODE_NAMES[t.ub_mode]}


# ----------------------------------------------------------------------------------------------------------------
# SwiGluGrad


def swiglu_grad_candidates(inputs: Inputs, soc: SocSpec) -> list[Candidate]:
    """Cores x buffer_num 1, 2 x the base tile the official search picks for them, and tiles from one 512 B cache
    line up to what fits: whole rows (as many as the size holds) where a row fits, else part of one row."""
    spec = get_soc(soc)
    y_grad, x, dim = inputs["y_grad"], inputs["x"], inputs["dim"]
    official = swiglu_tiling(y_grad, x, dim, soc=spec)
    m = BLOCK // official.itemsize
    row = align_up(official.col_len, m)  # one row of a tile in UB

    def make(**kw: Any) -> Any:
        t = swiglu_tiling(y_grad, x, dim, soc=spec, **kw)
        swiglu_check_tiling(t, y_grad, x, dim, soc=spec)
        swiglu_ub_plan(t, spec).check()
        return t

    def tile(e: int) -> dict[str, int]:
        if e >= row:
            return {"base_row_len": min(e // row, official.row_len, MAX_BLOCK_COUNT),
                    "base_col_len": official.col_len}
        return {"base_row_len": 1, "base_col_len": e}

    def sweep() -> Iterator[Any]:
        for cores in core_counts(spec):
            for nb in (1, 2):
                yield from with_tiles(make, {"core_num": cores, "buffer_num": nb}, tile,
                                      L2_CACHE_LINE // official.itemsize, official.row_len * row, m)

    return collect(official, sweep(), swiglu_grad_params)


def swiglu_grad_params(t: Any) -> dict[str, Any]:
    """The explorer's columns of a SwiGluGrad tiling: block_dim, buffer_num and the base tile (rows x columns)."""
    return {"block_dim": t.block_dim, "buffer_num": t.buffer_num, "tile": f"{t.base_row_len}x{t.base_col_len}"}


# ----------------------------------------------------------------------------------------------------------------
# SwiGlu


def swiglu_candidates(inputs: Inputs, soc: SocSpec) -> list[Candidate]:
    """SwiGluGrad's sweep with SwiGlu's tiling (the same search, a larger UB tile): cores x buffer_num 1, 2 x the
    base tile the official search picks for them, and tiles from one 512 B cache line up to what fits: whole rows
    (as many as the size holds) where a row fits, else part of one row."""
    spec = get_soc(soc)
    x, dim = inputs["x"], inputs["dim"]
    official = swiglu_fwd_tiling(x, dim, soc=spec)
    row = align_up(official.col_len, BLOCK // official.itemsize)  # one row of a tile in UB

    def make(**kw: Any) -> Any:
        return swiglu_fwd_check_tiling(swiglu_fwd_tiling(x, dim, soc=spec, **kw), x, dim, soc=spec)

    def tile(e: int) -> dict[str, int]:
        if e >= row:
            return {"base_row_len": min(e // row, official.row_len, MAX_BLOCK_COUNT),
                    "base_col_len": official.col_len}
        return {"base_row_len": 1, "base_col_len": e}

    return collect(official, (t for cores in core_counts(spec) for nb in (1, 2)
                              for t in with_tiles(make, {"core_num": cores, "buffer_num": nb}, tile,
                                                  L2_CACHE_LINE // official.itemsize, official.row_len * row,
                                                  BLOCK // official.itemsize)), swiglu_grad_params)


# ----------------------------------------------------------------------------------------------------------------
# RmsNorm


def rms_norm_candidates(inputs: Inputs, soc: SocSpec) -> list[Candidate]:
    """Cores x every mode whose kernel takes the inputs and whose plan fits (SINGLE_ROW only for b16 x with fp32
    gamma, MERGE_N up to numColAlign 2040) x its tile: MERGE_N's rows a pass (8 up to the core's rows, steps of 8),
    SPLIT_D's column tile (64 columns up to the row, a multiple of 16), NORMAL's and SINGLE_ROW's whole row; the
    modes the op does not pick get only their smallest and largest tiles."""
    spec = get_soc(soc)
    x, gamma, eps = inputs["x"], inputs["gamma"], inputs["epsilon"]
    official = rms_norm_tiling(x, gamma, eps, soc=spec)

    def make(**kw: Any) -> Any:
        return rms_norm_check_tiling(rms_norm_tiling(x, gamma, eps, soc=spec, **kw), x, gamma, eps, soc=spec)

    def sweep() -> Iterator[Any]:
        for cores in core_counts(spec):
            rows = ceil_div(official.num_row, cores)
            for mode in MODE_NAMES:
                mine = mode == official.tiling_key
                fixed = {"core_num": cores, "mode": mode}
                count = TILES if mine else OTHER_TILES
                if mode == MODE_MERGE_N:
                    yield from with_tiles(make, fixed, lambda v: {"row_factor": v}, 8, align_up(rows, 8), 8, own=mine,
                                          count=count)
                elif mode == MODE_SPLIT_D:
                    yield from with_tiles(make, fixed, lambda v: {"ub_factor": v}, LANES,
                                          align_up(official.num_col, 16), 16, own=mine, count=count)
                elif (t := legal(make, **fixed)) is not None:
                    yield t

    return collect(official, sweep(), rms_norm_params)


def rms_norm_params(t: Any) -> dict[str, Any]:
    """The tile a UB pass holds: MERGE_N row_factor rows, SPLIT_D ub_factor columns of a row, NORMAL and
    SINGLE_ROW one row (their queues hold one buffer each)."""
    tile = {MODE_MERGE_N: f"{t.row_factor}x{t.num_col}", MODE_SPLIT_D: f"1x{t.ub_factor}"}.get(t.tiling_key,
                                                                                                f"1x{t.num_col}")
    return {"block_dim": t.block_dim, "buffer_num": 1, "tile": tile, "mode": MODE_NAMES[t.tiling_key]}


# ----------------------------------------------------------------------------------------------------------------
# Softmax


def softmax_candidates(inputs: Inputs, soc: SocSpec) -> list[Candidate]:
    """Cores x buffer_num 1, 2 x the kernel's tile: for the last-axis kernel on the SoftMax API, tiles of whole rows
    from one row up to what fits beside the API's largest tmp (at most the core's rows; the tmp the API's largest
    for the tile, so that it takes a tile in one pass where its own tiling lets it); for the [A, R, B] kernel
    (another ``dim``), loads of R rows from one up to R; for the split-row kernel (rows the API cannot take), loads
    of 64 elements up to the row."""
    spec = get_soc(soc)
    x, dim = inputs["x"], inputs["dim"]
    official = softmax_tiling(x, dim, soc=spec)

    def make(**kw: Any) -> Any:
        if isinstance(official, SoftmaxLongTiling):
            kw.setdefault("tile_cols", official.tile_cols)
        return softmax_check_tiling(softmax_tiling(x, dim, soc=spec, **kw), x, dim, soc=spec)

    if isinstance(official, SoftmaxArbTiling):
        tile, lo, hi = (lambda v: {"tile_rows": v}), 1, official.r
    elif isinstance(official, SoftmaxLongTiling):
        tile, lo, hi = (lambda v: {"tile_cols": LANES * v}), 1, ceil_div(official.cols, LANES)
    else:
        tile, lo = (lambda v: {"tile_rows": v}), 1
        hi = None
    return collect(official, (t for cores in core_counts(spec) for nb in (1, 2)
                              for t in with_tiles(make, {"core_num": cores, "buffer_num": nb}, tile, lo,
                                                  hi or ceil_div(official.rows, min(cores, official.rows)))),
                   softmax_params)


def softmax_params(t: Any) -> dict[str, Any]:
    """The explorer's columns of a Softmax tiling: block_dim, buffer_num and the tile (the last-axis kernel: rows x
    columns; [A, R, B]: R rows a load x B elements; split-row: one row x elements a load)."""
    if isinstance(t, SoftmaxArbTiling):
        tile = f"{t.tile_r}x{t.tile_b}"
    elif isinstance(t, SoftmaxLongTiling):
        tile = f"1x{t.tile_cols}"
    else:
        tile = f"{t.tile_rows}x{t.cols}"
    return {"block_dim": t.block_dim, "buffer_num": t.buffer_num, "tile": tile}


# ----------------------------------------------------------------------------------------------------------------
# layer-norm backward (LayerNormGrad + LayerNormGradBeta)

LN_ARGS = ("dy", "x", "variance", "mean", "gamma")


def _ln_modes(inputs: Inputs) -> list[tuple[str, bool]]:
    """(tmp, is_reuse_source): both temporaries modes; isReuseSource on float only."""
    reuse = (False, True) if dtype_name(inputs["x"]) == FP32 else (False,)
    return [(tmp, r) for tmp in TMP_MODES for r in reuse]


def _ln_maker(args: tuple[Any, ...], eps: float, spec: SocSpec, tmp: str, reuse: bool) -> Callable[..., Any]:
    """make(core_num=..., ub_rows=...) for one tmp mode and isReuseSource, checked as the API checks it."""
    def make(**kw: Any) -> Any:
        t = ln_tiling(*args, epsilon=eps, soc=spec, tmp=tmp, is_reuse_source=reuse, **kw)
        ln_check_tiling(t, *args, epsilon=eps, soc=spec, tmp=tmp, is_reuse_source=reuse)
        plan_for(t.ub_rows, t.h_align, t.block_dim, spec, t.tmp_mode, t.region_bytes).check()
        return t

    return make


def layer_norm_grad_candidates(inputs: Inputs, soc: SocSpec) -> list[Candidate]:
    """Cores x tmp mode (shared, framework) x isReuseSource (float only) x UB tiles of 1 row up to what fits, at
    most the core's rows (the API's defaults, shared without reuse, are the official mode). tmp and
    isReuseSource are op arguments that the tiling records; ``run`` passes them from the tiling, as the API's
    tiling check requires them to match."""
    spec = get_soc(soc)
    args = tuple(inputs[k] for k in LN_ARGS)
    eps = inputs["epsilon"]
    official = ln_tiling(*args, epsilon=eps, soc=spec)

    def sweep() -> Iterator[Any]:
        for tmp, reuse in _ln_modes(inputs):
            make = _ln_maker(args, eps, spec, tmp, reuse)
            mine = (tmp, reuse) == (TMP_MODES[official.tmp_mode], bool(official.is_reuse_source))
            for cores in core_counts(spec):
                yield from with_tiles(make, {"core_num": cores}, lambda v: {"ub_rows": v}, 1,
                                      ceil_div(official.rows, cores), count=TILES if mine else OTHER_TILES)

    return collect(official, sweep(), layer_norm_grad_params)


def layer_norm_grad_sums(t: Any) -> dict[str, Accumulation]:
    """pd_gamma and pd_beta: each core sums its rows (block_factor), tile by tile, into its workspace rows."""
    rows = Accumulation(t.block_factor, "rows per core")
    return {"pd_gamma": rows, "pd_beta": rows}


def layer_norm_grad_params(t: Any) -> dict[str, Any]:
    """No queues to deepen (buffer_num 1); the tile is ub_rows whole rows; mode: the temporaries' source, and
    "+reuse" with isReuseSource."""
    return {"block_dim": t.block_dim, "buffer_num": 1, "tile": f"{t.ub_rows}x{t.h}",
            "mode": TMP_MODES[t.tmp_mode] + ("+reuse" if t.is_reuse_source else "")}


def layer_norm_grad_run(inputs: Inputs, t: Any, soc: SocSpec) -> tuple[np.ndarray, ...]:
    """The API with the tiling's own tmp and isReuseSource: its check compares them with the tiling it makes from
    these arguments, so a "framework" or reuse tiling run with the defaults would be refused."""
    return tuple(layer_norm_grad(**inputs, tmp=TMP_MODES[t.tmp_mode], is_reuse_source=bool(t.is_reuse_source),
                                 tiling=t, soc=soc))


# ----------------------------------------------------------------------------------------------------------------
# NsaCompressGrad


def nsa_compress_grad_candidates(inputs: Inputs, soc: SocSpec) -> list[Candidate]:
    """The core count only: the kernel carves its one TBuf itself, so its pass (window rows x heads) follows from
    N, D and the UB, and it has no queues to deepen."""
    spec = get_soc(soc)
    official = nsa_tiling(**inputs, soc=spec)

    def make(**kw: Any) -> Any:
        t = nsa_tiling(**inputs, soc=spec, **kw)
        nsa_check_tiling(t, **inputs, soc=spec)
        nsa_ub_plan(t, spec).check()
        return t

    return collect(official, (t for c in core_counts(spec) if (t := legal(make, core_num=c)) is not None),
                   nsa_compress_grad_params)


def nsa_compress_grad_sums(t: Any) -> dict[str, Accumulation]:
    """weight_grad: each core sums its windows (each summed over D) into its slice of the workspace."""
    return {"weight_grad": Accumulation(-(-t.num_of_block // t.block_dim) * t.dim_of_head,
                                        f"window·D products per core ({t.dim_of_head} a window)")}


def nsa_compress_grad_params(t: Any) -> dict[str, Any]:
    """The tile is one pass: window rows x heads x D."""
    return {"block_dim": t.block_dim, "buffer_num": 1, "tile": f"{t.n_rows_once}x{t.n_head_once}x{t.dim_of_head}"}


# ----------------------------------------------------------------------------------------------------------------
# the specs


def _doc(*parts: str | None) -> str:
    """One paragraph from sentences and docstrings (the candidates functions' docstrings say what a sweep
    covers; the spec's doc repeats them rather than a second copy of the text)."""
    return " ".join(" ".join((p or "").split()) for p in parts)


def _api_run(api: Callable[..., Any]) -> Callable[[Inputs, Any, SocSpec], tuple[np.ndarray, ...]]:
    """``run`` of an op whose API takes every input by its name and returns a tuple of outputs."""
    def run(inputs: Inputs, t: Any, soc: SocSpec) -> tuple[np.ndarray, ...]:
        return tuple(api(**inputs, tiling=t, soc=soc))

    return run


OPS: dict[str, OpSpec] = {s.name: s for s in (
    OpSpec(
        name="rms_norm_grad", dtypes=("fp32", "bf16", "fp16"), default_shape=(256, 1024),
        shape_help="[rows, D]: x and dy; gamma [D] (fp32; fp16 with fp16 inputs), rstd [rows] fp32",
        make_inputs=rms_norm_grad_inputs, candidates=rms_norm_grad_candidates, run=_api_run(rms_norm_grad),
        reference=lambda inputs: reference.rms_norm_grad(**inputs), output_names=("dx", "dgamma"),
        doc=_doc("aclnnRmsNormGrad: dx in dy's dtype, dgamma fp32.", rms_norm_grad_candidates.__doc__),
        bounds=lambda inputs: reference.rms_norm_grad_bounds(**inputs), accumulations=rms_norm_grad_sums),
    OpSpec(
        name="group_norm_backward", dtypes=("fp32", "bf16", "fp16"), default_shape=(4, 128, 1024),
        shape_help="[N, C, HxW]: 32 groups, or the largest count up to 32 that divides C (C = 48: 24, C = 16: 16)",
        make_inputs=group_norm_backward_inputs, candidates=group_norm_backward_candidates,
        run=_api_run(group_norm_backward),
        reference=lambda inputs: reference.group_norm_backward(*(inputs[k] for k in GN_ARGS)),
        output_names=("grad_input", "grad_gamma", "grad_beta"),
        bounds=lambda inputs: reference.group_norm_backward_bounds(*(inputs[k] for k in GN_ARGS)),
        doc=_doc("aclnnGroupNormBackward, every output in the inputs' dtype.", group_norm_backward_candidates.__doc__,
                 "With N > 2 the fp32 dgamma/dbeta reduction splits the batch over two halves of the cores, so one "
                 "core is not a legal count there.")),
    OpSpec(
        name="swiglu_grad", dtypes=("fp32", "bf16", "fp16"), default_shape=(256, 2048),
        shape_help="x [rows, 2*cols]: A and B its column halves (dim -1); y_grad [rows, cols]",
        make_inputs=swiglu_grad_inputs, candidates=swiglu_grad_candidates,
        run=lambda inputs, t, soc: (swiglu_grad(**inputs, tiling=t, soc=soc),),
        reference=lambda inputs: (reference.swiglu_grad(**inputs),), output_names=("x_grad",),
        bounds=lambda inputs: reference.swiglu_grad_bounds(**inputs),
        doc=_doc("aclnnSwiGluGrad: the gradient of x.", swiglu_grad_candidates.__doc__)),
    OpSpec(
        name="swiglu", dtypes=("fp32", "bf16", "fp16"), default_shape=(256, 2048),
        shape_help="x [rows, 2*cols]: A and B its column halves (dim -1); y [rows, cols]",
        make_inputs=swiglu_inputs, candidates=swiglu_candidates,
        run=lambda inputs, t, soc: (swiglu(**inputs, tiling=t, soc=soc),),
        reference=lambda inputs: (reference.swiglu(**inputs),), output_names=("y",),
        bounds=lambda inputs: reference.swiglu_bounds(**inputs),
        doc=_doc("aclnnSwiGlu: y = silu(A)*B, on tilesim's programming model.", swiglu_candidates.__doc__)),
    OpSpec(
        name="rms_norm", dtypes=("fp32", "bf16", "fp16"), default_shape=(256, 1024),
        shape_help="[rows, D]: x; gamma [D] in x's dtype; y as x, rstd [rows, 1] fp32; epsilon 1e-6",
        make_inputs=rms_norm_inputs, candidates=rms_norm_candidates, run=_api_run(rms_norm),
        reference=lambda inputs: reference.rms_norm(**inputs), output_names=("y", "rstd"),
        bounds=lambda inputs: reference.rms_norm_bounds(**inputs),
        doc=_doc("aclnnRmsNorm: y in x's dtype, rstd fp32, on tilesim's programming model.",
                 rms_norm_candidates.__doc__)),
    OpSpec(
        name="softmax", dtypes=("fp32", "fp16", "bf16"), default_shape=(256, 1024),
        shape_help="x [rows, cols], normalised along the last axis (dim -1; make_inputs' dim picks another); y as x",
        make_inputs=softmax_inputs, candidates=softmax_candidates,
        run=lambda inputs, t, soc: (softmax(**inputs, tiling=t, soc=soc),),
        reference=lambda inputs: (reference.softmax(**inputs),), output_names=("y",),
        bounds=lambda inputs: reference.softmax_bounds(**inputs),
        doc=_doc("aclnnSoftmax (fp32, fp16, bf16): tilesim's kernels on tilesim's programming model, on the A2 "
                 "SoftMax API for the last axis, the [A, R, B] kernel for another, the split-row kernel for rows "
                 "the API cannot take.", softmax_candidates.__doc__)),
    OpSpec(
        name="layer_norm_grad", dtypes=("fp32", "fp16"), default_shape=(256, 1024),
        shape_help="[rows, H]: x and dy; variance, mean [rows]; gamma [H]; epsilon 1e-5",
        make_inputs=layer_norm_grad_inputs, candidates=layer_norm_grad_candidates, run=layer_norm_grad_run,
        reference=lambda inputs: reference.layer_norm_grad(**inputs), output_names=("pd_x", "pd_gamma", "pd_beta"),
        bounds=lambda inputs: reference.layer_norm_grad_bounds(**inputs), accumulations=layer_norm_grad_sums,
        doc=_doc("The layer-norm backward on the LayerNormGrad and LayerNormGradBeta APIs (no bf16).",
                 layer_norm_grad_candidates.__doc__)),
    OpSpec(
        name="nsa_compress_grad", dtypes=("bf16", "fp16"), default_shape=(1024, 8, 128),
        shape_help="input [T, N, D] (TND): 4 sequences of T/4 tokens, blockSize 32, stride 16 (overlapping windows); "
                   "D a multiple of 16 up to 256, N up to 128",
        make_inputs=nsa_compress_grad_inputs, candidates=nsa_compress_grad_candidates,
        run=_api_run(nsa_compress_grad), reference=lambda inputs: reference.nsa_compress_grad(**inputs),
        output_names=("input_grad", "weight_grad"),
        bounds=lambda inputs: reference.nsa_compress_grad_bounds(**inputs), accumulations=nsa_compress_grad_sums,
        doc=_doc("aclnnNsaCompressGrad (no fp32; 910B and 910_93 only).", nsa_compress_grad_candidates.__doc__)),
)}
