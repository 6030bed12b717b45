"""Tiling of tilesim's layer-norm backward kernel, which composes the LayerNormGrad and LayerNormGradBeta APIs
(``kernels/layer_norm_grad.py``). There is no official op with this design; the choices are ours:

- Rows (the axes before the last) are split over the vector cores: ``block_factor`` rows each, the remainder on
  the last core, ``block_dim`` cores used.
- A UB tile is ``ub_rows`` whole rows of H (never split, as the APIs require), stored ``h_align`` wide (32 B);
  ``ub_rows`` is the largest count that fits the UB with the temporaries, at most ``block_factor``.
- Per tile LayerNormGrad runs on all ``ub_rows`` rows in one chunk (``one_chunk_tiling``: the official helper
  rounds the rows of a chunk up to 8 (float) or 16 (half), which makes its temporaries outgrow a tmp buffer
  sized for fewer rows; one chunk per call needs ``need · rows · H · 4`` bytes, need 6, 4 with isReuseSource, 9
  for half), then LayerNormGradBeta on the same rows with the official Beta helper's tiling at its maximum for
  them, in the same tmp region; its [H] outputs sit after its temporaries in that region.
- The APIs run in float for both dtypes: half inputs land in the upper half of fp32-sized buffers and are
  widened in place, pd_x is rounded to half (RNE) before CopyOut. Composing the half APIs instead rounds
  resForGamma and every tile's pd_gamma/pd_beta to half, which fails the fp16 precision standard for
  pd_gamma/pd_beta (MERE about 1.1e-3 against 9.8e-4); the half APIs are tested on their own.
- pd_gamma and pd_beta are summed per core in fp32 in the workspace (atomic adds into the core's own rows, so
  the order is fixed), then, after a SyncAll, 64-column tasks round-robin over the cores add the cores' rows in
  core order and cast to T: deterministic.
- The temporaries are a buffer of the kernel's plan (``tmp="shared"``, exactly the region size) or all UB the
  plan leaves free (``tmp="framework"``, PopStackBuffer).
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
    FP16,
    FP32,
    ITEMSIZE,
    align_up,
    ceil_div,
    dtype_name,
    flag,
    numel,
    remembered,
    replace,
    require,
    shape_of,
)
from .layer_norm_grad_api import (
    LNG_FLOAT_BUF_NUM,
    LNG_HALF_BUF_NUM,
    LNG_REUSE_FLOAT_BUF_NUM,
    LayerNormGradBetaTiling,
    LayerNormGradTiling,
    get_layer_norm_grad_beta_max_min_tmp_size,
    get_layer_norm_grad_beta_nd_tiling_info,
    one_chunk_tiling,
)

LANES = 64  # columns of one final-sum task (one 256 B repeat of fp32)
SYS_WORKSPACE = 16 * 1024 * 1024
TMP_MODES = ("shared", "framework")


@dataclass(frozen=True)
class LayerNormGradOpTiling:
    """The op's TilingData: the split, the tile, the tmp region's layout (bytes from its start) and the API
    tilings of the three tile sizes a run meets (full, the last tile of a full core, the last tile of the tail
    core)."""

    rows: int
    h: int
    h_align: int
    data_type: int  # 0 float32, 1 float16
    block_factor: int
    block_dim: int
    tail_rows: int  # rows of the last core
    ub_rows: int
    tmp_mode: int  # 0 shared, 1 framework
    is_reuse_source: int
    epsilon: float  # the float APIs' epsilon (the argument rounded to fp32)
    region_bytes: int  # the tmp region: a plan buffer, or all free UB
    lng_bytes: int
    beta_bytes: int
    pd_gamma_off: int
    pd_beta_off: int
    workspace_size: int
    lng: tuple[LayerNormGradTiling, LayerNormGradTiling, LayerNormGradTiling]
    beta: tuple[LayerNormGradBetaTiling, LayerNormGradBetaTiling, LayerNormGradBetaTiling]

    @property
    def dtype(self) -> str:
        """The inputs' dtype name: 'float32' or 'float16' (from ``data_type``)."""
        return FP32 if self.data_type == 0 else FP16

    def rows_of_core(self, core: int) -> int:
        """The rows core ``core`` takes: ``block_factor``, the last core ``tail_rows``."""
        return self.tail_rows if core == self.block_dim - 1 else self.block_factor

    @property
    def tiling_key(self) -> int:
        """The kernel variant: data_type · 10 + tmp_mode · 2 + is_reuse_source."""
        return self.data_type * 10 + self.tmp_mode * 2 + self.is_reuse_source

    @staticmethod
    def choice_fields() -> dict[str, str | None]:
        """The overrides of :func:`layer_norm_grad` and the fields that carry them (block_dim: the core count).
        The tmp mode and isReuseSource are not: they are the op's ``tmp`` and ``is_reuse_source`` arguments."""
        return {"core_num": "block_dim", "ub_rows": "ub_rows"}


def check_args(dy: Any, x: Any, variance: Any, mean: Any, gamma: Any, epsilon: Any, is_reuse_source: bool,
               tmp: str) -> tuple[int, int, str]:
    """The op's input rules; returns (rows, H, dtype). None 161001, anything else 161002."""
    require(dy=dy, x=x, variance=variance, mean=mean, gamma=gamma)
    dt = dtype_name(x)
    if dt not in (FP32, FP16):
        raise invalid("x", f"dtype {dt} not supported; LayerNormGrad takes float32 or float16")
    for name, t in (("dy", dy), ("variance", variance), ("mean", mean), ("gamma", gamma)):
        if dtype_name(t) != dt:
            raise invalid(name, f"dtype {dtype_name(t)} must equal x's dtype {dt}")
    s = shape_of(x)
    if not 1 <= len(s) <= 8:
        raise invalid("x", f"rank {len(s)} must be in [1, 8]")
    if shape_of(dy) != s:
        raise invalid("dy", f"shape {list(shape_of(dy))} must equal x's shape {list(s)}")
    h = s[-1]
    if shape_of(gamma) != (h,):
        raise invalid("gamma", f"shape {list(shape_of(gamma))} must be [H] = [{h}]")
    lead = s[:-1]
    for name, t in (("variance", variance), ("mean", mean)):
        if shape_of(t) not in (lead, lead + (1,)):
            raise invalid(name, f"shape {list(shape_of(t))} must be x's leading axes {list(lead)} (or with a "
                                "trailing 1)")
    if numel(s) == 0:
        raise invalid("x", f"shape {list(s)}: empty tensors are not supported")
    if isinstance(epsilon, bool) or not isinstance(epsilon, int | float | np.integer | np.floating):
        raise invalid("epsilon", f"must be a real number, got {type(epsilon).__name__}")
    if not 0 <= float(epsilon) < float("inf"):
        raise invalid("epsilon", f"{float(epsilon)} must be a finite, non-negative number")
    if flag("is_reuse_source", is_reuse_source) and dt != FP32:
        raise invalid("is_reuse_source", "isReuseSource is supported for float only, not half")
    if tmp not in TMP_MODES:
        raise invalid("tmp", f"{tmp!r} must be \"shared\" or \"framework\"")
    return numel(lead), h, dt


def _need(dt: str, reuse: bool) -> int:
    return LNG_HALF_BUF_NUM if dt == FP16 else (LNG_REUSE_FLOAT_BUF_NUM if reuse else LNG_FLOAT_BUF_NUM)


def _region(rows: int, hp: int, reuse: bool) -> tuple[int, int, int, int, int]:
    """(region bytes, LayerNormGrad bytes, Beta bytes, pd_gamma offset, pd_beta offset) of the float APIs."""
    lng = _need(FP32, reuse) * rows * hp * 4
    beta = get_layer_norm_grad_beta_max_min_tmp_size((1, rows, hp, hp), 4, reuse)[0]
    pg, pb = beta, beta + hp * 4
    return max(lng, pb + hp * 4), lng, beta, pg, pb


@shared_plan
def plan_for(rows: int, hp: int, block_dim: int, soc: SocSpec, tmp_mode: int, region: int) -> UbPlan:
    """The kernel's InitBuffer calls: dy, x, pd_x, resForGamma tiles, variance and mean, gamma (all fp32-sized:
    half lands in their upper halves), the tmp region; then (TPipe.Reset) the final sum's buffers."""
    plan = UbPlan(soc.ub_size)
    for name in ("dy", "x", "pd_x", "res_for_gamma"):
        plan.add(name, rows * hp * 4)
    plan.add("variance", align_up(rows, 16) * 4)  # room for half to land in the upper half, 32 B aligned
    plan.add("mean", align_up(rows, 16) * 4)
    plan.add("gamma", hp * 4)
    if tmp_mode == 0:
        plan.add("tmp", region)
    else:
        plan.add_stack("tmp")
    plan.reset()
    plan.add("final_rows", block_dim * LANES * 4)
    plan.add("final_acc", LANES * 4)
    return plan


# Buffer ids of plan_for.
DY, X, PD_X, RES, VAR, MEAN, GAMMA, TMP, FINAL_ROWS, FINAL_ACC = range(10)


def _fits(rows: int, hp: int, reuse: bool, block_dim: int, soc: SocSpec, tmp_mode: int) -> bool:
    region = _region(rows, hp, reuse)[0]
    plan = plan_for(rows, hp, block_dim, soc, tmp_mode, region)
    if plan.used > soc.ub_size:
        return False
    return tmp_mode == 0 or plan.buffers[TMP].nbytes >= region


@remembered(5)
def layer_norm_grad(dy: Any, x: Any, variance: Any, mean: Any, gamma: Any, *, epsilon: float = 1e-5,
                    soc: str | SocSpec = DEFAULT_SOC, tmp: str = "shared", is_reuse_source: bool = False,
                    core_num: int | None = None, ub_rows: int | None = None) -> LayerNormGradOpTiling:
    """The tiling for these arguments; ``core_num`` and ``ub_rows`` override the split and the tile."""
    spec = get_soc(soc)
    rows, h, dt = check_args(dy, x, variance, mean, gamma, epsilon, is_reuse_source, tmp)
    return _tiling(rows, h, dt, bool(is_reuse_source), tmp, spec, core_num, ub_rows, float(np.float32(epsilon)))


def _tiling(rows: int, h: int, dt: str, reuse: bool, tmp: str, spec: SocSpec, core_num: int | None,
            ub_rows: int | None, eps: float) -> LayerNormGradOpTiling:
    """The tiling of checked arguments (it runs the API helpers six times: :func:`layer_norm_grad` remembers
    it)."""
    hp = align_up(h, 32 // ITEMSIZE[dt])  # whole 32 B blocks of T (half rows must land 32 B apart too)
    cores = spec.core_num_aiv if core_num is None else int(core_num)
    if not 1 <= cores <= spec.core_num_aiv:
        raise tiling_error("core_num", f"{cores} must be in [1, {spec.core_num_aiv}] (GetCoreNumAiv of {spec.name})")
    bf = ceil_div(rows, cores)
    bd = ceil_div(rows, bf)
    mode = TMP_MODES.index(tmp)
    if ub_rows is None:
        r = min(bf, max(1, spec.ub_size // (4 * hp * 4 + _need(FP32, reuse) * hp * 4)))
        while r >= 1 and not _fits(r, hp, reuse, bd, spec, mode):
            r -= 1
        if r < 1:
            region = _region(1, hp, reuse)[0]
            need = plan_for(1, hp, bd, spec, 0, region).used
            raise invalid("x", f"H = {h}: one row does not fit the UB of {spec.name} with its temporaries: it "
                               f"needs {need} B ({tmp} tmp), the UB has {spec.ub_size} B")
    else:
        r = int(ub_rows)
        if not 1 <= r <= bf:
            raise tiling_error("ub_rows", f"{r} must be in [1, {bf}] (rows per core)")
        if not _fits(r, hp, reuse, bd, spec, mode):
            raise tiling_error("ub_rows", f"{r} rows of H = {h} and their temporaries do not fit the UB of "
                                          f"{spec.name}")
    return _build(rows, h, hp, dt, reuse, mode, bf, r, spec, eps)


def _build(rows: int, h: int, hp: int, dt: str, reuse: bool, mode: int, bf: int, r: int,
           spec: SocSpec, eps: float) -> LayerNormGradOpTiling:
    """Every field from the free choices: rows per core and rows per tile."""
    bd = ceil_div(rows, bf)
    tail = rows - (bd - 1) * bf
    region, lng_b, beta_b, pg, pb = _region(r, hp, reuse)
    if mode == 1:
        region = plan_for(r, hp, bd, spec, mode, region).buffers[TMP].nbytes
    sizes = (r, bf % r or r, tail % r or r)
    lng = tuple(_lng_tiling(n, r, hp, h, reuse) for n in sizes)
    beta = tuple(get_layer_norm_grad_beta_nd_tiling_info((1, n, hp, hp), beta_b, 4, reuse) for n in sizes)
    return LayerNormGradOpTiling(
        rows=rows, h=h, h_align=hp, data_type=0 if dt == FP32 else 1, block_factor=bf, block_dim=bd,
        tail_rows=tail, ub_rows=r, tmp_mode=mode, is_reuse_source=int(reuse), epsilon=eps, region_bytes=region,
        lng_bytes=lng_b, beta_bytes=beta_b, pd_gamma_off=pg, pd_beta_off=pb,
        workspace_size=SYS_WORKSPACE + 2 * bd * hp * 4, lng=lng, beta=beta)


def _lng_tiling(n: int, r: int, hp: int, h: int, reuse: bool) -> LayerNormGradTiling:
    """The one-chunk LayerNormGrad tiling of an ``n``-row tile, temporaries placed for ``r`` rows (every tile
    size then uses the same region layout)."""
    full = one_chunk_tiling((1, r, hp, h), 4, reuse)
    part = one_chunk_tiling((1, n, hp, h), 4, reuse)
    if n == r:
        return full
    # The tile's rows, the full tile's positions: the loop runs once on the n rows (as the tail chunk).
    return replace(full, s_length=n, loop_num=0, tail_size=part.one_cal_size, noh_tail_size=n)


def check_tiling(t: Any, dy: Any, x: Any, variance: Any, mean: Any, gamma: Any, *, epsilon: float = 1e-5,
                 soc: str | SocSpec = DEFAULT_SOC, tmp: str = "shared",
                 is_reuse_source: bool = False) -> LayerNormGradOpTiling:
    """A hand-made tiling, if it is what its free choices give for these arguments (``tmp`` and
    ``is_reuse_source`` included), field for field (:func:`tilesim.tools.opspec.match_tiling`; 561002 naming the field
    otherwise); the tiling function checks that the choices fit the UB."""
    return match_tiling(t, layer_norm_grad, dy, x, variance, mean, gamma, epsilon=epsilon, soc=soc, tmp=tmp,
                        is_reuse_source=is_reuse_source)
