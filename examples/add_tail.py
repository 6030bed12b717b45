"""A kernel of your own, start to finish: z = (x + y) · alpha over a flat length with a tail.

It has the shape of every Ascend C elementwise kernel. The host splits the length over the cores in whole 32 B
blocks: the first "former" cores take one block more than the "tail" cores, and the last core stops where the
data stops. Each core walks its range in UB tiles of ``tile_len`` elements:
- CopyIn: DataCopy for a full tile, DataCopyPad for the core's last, partial tile;
- Compute: fp32 vector instructions (fp16/bf16 are widened exactly, then rounded once at the end);
- CopyOut: the same two movers, back to GM.
With ``buffer_num`` 2 each queue has two slots, so CopyIn of tile i+1 overlaps Compute of tile i.

``python -m examples.add_tail`` runs it; ``tilesim explore add_tail --ops examples.add_tail --shape 999,1001
--dtype bf16`` sweeps its tilings.
"""

from __future__ import annotations

from collections import namedtuple
from dataclasses import dataclass, fields
from typing import Any

import ml_dtypes
import numpy as np
from numba import njit

import tilesim
from tilesim.cast import CAST_RINT, KIND_BF16, KIND_FP16, elem_size
from tilesim.cost import estimate
from tilesim.datamove import data_copy, data_copy_out, data_copy_pad, data_copy_pad_out
from tilesim.device import gm_tensor, make_core, slot
from tilesim.errors import invalid, null_error, tiling_error
from tilesim.launch import finish, host_threads, prepare, reruns_on_overflow, run_cores
from tilesim.opspec import Candidate, Inputs, OpSpec
from tilesim.precision import compare
from tilesim.soc import DEFAULT_SOC, SocSpec, get_soc
from tilesim.ub import UbPlan
from tilesim.vector import add, cast_from_f32, cast_to_f32, muls

BLOCK = 32  # bytes: DataCopy moves whole 32 B blocks, and UB buffers start on them
ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2}
KIND = {"float32": 0, "float16": KIND_FP16, "bfloat16": KIND_BF16}  # how the device code tells the dtypes apart
ALPHA = 0.5

# ---------------------------------------------------------------------------------------------------------------
# host: the tiling and the UB plan


@dataclass(frozen=True)
class AddTailTiling:
    """The TilingData. Core c < former_num handles former_length elements, each later core tail_length (one 32 B
    block fewer), except the last one, which ends at total_length (last_length elements). Frozen, so a sweep can
    hash it and a user edits it with ``dataclasses.replace``."""

    dtype: str
    total_length: int
    block_dim: int
    former_num: int
    former_length: int
    tail_length: int
    last_length: int
    tile_len: int  # ub_factor: elements per UB tile, whole 32 B blocks; a core's last tile may be shorter
    buffer_num: int  # slots per queue


def max_tile_len(dtype: str, buffer_num: int, soc: SocSpec) -> int:
    """The largest tile that fits the UB: three queues of buffer_num slots, plus two fp32 buffers for b16."""
    per_elem = 3 * buffer_num * ITEMSIZE[dtype] + (0 if dtype == "float32" else 2 * 4)
    m = BLOCK // ITEMSIZE[dtype]
    return soc.ub_size // per_elem // m * m


def tiling(x: Any, *, soc: str | SocSpec = DEFAULT_SOC, core_num: int | None = None, tile_len: int | None = None,
           buffer_num: int = 2) -> AddTailTiling:
    """The tiling for ``x`` (anything with ``.shape`` and ``.dtype``). ``core_num``, ``tile_len`` and
    ``buffer_num`` are the free choices; left alone, all cores and the largest tile that fits (no larger than a
    core's range). An input the op refuses is 161002, an override the kernel cannot run 561002."""
    spec = get_soc(soc)
    dtype = np.dtype(x.dtype).name
    if dtype not in KIND or (dtype == "bfloat16" and not spec.supports_bf16):
        raise invalid("x", f"dtype {dtype} not supported on {spec.name}")
    n = int(np.prod(x.shape))
    if n == 0:
        raise invalid("x", f"shape {list(x.shape)}: empty tensors are not supported")
    cores = spec.core_num_aiv if core_num is None else int(core_num)
    if not 1 <= cores <= spec.core_num_aiv:
        raise tiling_error("core_num", f"{cores} must be in [1, {spec.core_num_aiv}] (the vector cores of {spec.name})")
    if buffer_num not in (1, 2):
        raise tiling_error("buffer_num", f"{buffer_num} must be 1 or 2")
    m = BLOCK // ITEMSIZE[dtype]  # elements per 32 B block
    blocks = -(-n // m)
    block_dim = min(cores, blocks)  # every core gets at least one block
    per, former_num = divmod(blocks, block_dim)
    former_length, tail_length = (per + 1) * m, per * m
    last_start = former_num * former_length + (block_dim - 1 - former_num) * tail_length  # the last core is a tail core
    fit = max_tile_len(dtype, buffer_num, spec)
    if tile_len is None:
        tile_len = min(fit, former_length if former_num else tail_length)
    elif tile_len < m or tile_len % m:
        raise tiling_error("tile_len", f"{tile_len} must be a positive multiple of {m} elements (32 B of {dtype}): "
                                       "full tiles move with DataCopy, in whole blocks")
    elif tile_len > fit:
        raise tiling_error("tile_len", f"{tile_len} elements do not fit the UB ({spec.ub_size} B) with buffer_num "
                                       f"{buffer_num}: at most {fit}")
    return AddTailTiling(dtype, n, block_dim, former_num, former_length, tail_length, n - last_start, int(tile_len),
                         buffer_num)


make_tiling = tiling  # the op's ``tiling=`` argument shadows the name


def check_tiling(t: AddTailTiling, x: Any, soc: SocSpec) -> AddTailTiling:
    """A hand-made tiling runs only if it is what its free choices give for ``x`` (561002 naming the field)."""
    if not 1 <= t.block_dim <= soc.core_num_aiv:
        raise tiling_error("tiling.block_dim", f"{t.block_dim} must be in [1, {soc.core_num_aiv}]")
    want = tiling(x, soc=soc, core_num=t.block_dim, tile_len=t.tile_len, buffer_num=t.buffer_num)
    for f in fields(t):
        if getattr(t, f.name) != getattr(want, f.name):
            raise tiling_error(f"tiling.{f.name}", f"{getattr(t, f.name)} does not match x and the free choices "
                                                   f"(block_dim, tile_len, buffer_num): {getattr(want, f.name)}")
    return t


X, Y, Z, X32, Y32 = range(5)  # UB buffer ids: the order of the InitBuffer calls


def ub_plan(t: AddTailTiling, soc: str | SocSpec = DEFAULT_SOC) -> UbPlan:
    """InitBuffer: queues x, y (in) and z (out) of buffer_num slots; for b16 two fp32 buffers to compute in (0 B
    for fp32, which computes in the queues: the ids stay fixed)."""
    plan = UbPlan(get_soc(soc).ub_size)
    for name in ("x", "y", "z"):
        plan.add(name, t.tile_len * ITEMSIZE[t.dtype], t.buffer_num)
    b16 = t.dtype != "float32"
    plan.add("x_fp32", 4 * t.tile_len if b16 else 0)
    plan.add("y_fp32", 4 * t.tile_len if b16 else 0)
    return plan


# ---------------------------------------------------------------------------------------------------------------
# device: per core, per tile CopyIn, Compute, CopyOut

GM_NAMES = ["x", "y", "z"]  # GM tensor tags, for checked-mode reports and the trace
G_X, G_Y, G_Z = range(3)
DeviceTiling = namedtuple("DeviceTiling", [f.name for f in fields(AddTailTiling) if f.name != "dtype"])


@njit(cache=True)
def _compute(core, k, n, alpha, kind, mode):
    x, y, z = slot(core, X, k), slot(core, Y, k), slot(core, Z, k)
    if kind == 0:  # fp32: straight in the queue slots
        add(core, z, x, y, n)
        muls(core, z, z, alpha, n)
    else:  # b16: widen exactly, compute in fp32, round once into z's slot
        x32, y32 = slot(core, X32, 0), slot(core, Y32, 0)
        cast_to_f32(core, x32, x, n, kind)
        cast_to_f32(core, y32, y, n, kind)
        add(core, x32, x32, y32, n)
        muls(core, x32, x32, alpha, n)
        cast_from_f32(core, z, x32, n, kind, mode)


@njit(cache=True, inline="always")  # compiled once, inside _cores
def _core(c, block_dim, arena, plan, cnt, err, checks, t, x, y, z, alpha, kind, mode):
    core = make_core(c, block_dim, arena, plan, cnt, err, checks)
    isz = elem_size(kind)
    gx, gy, gz = gm_tensor(G_X, x, isz), gm_tensor(G_Y, y, isz), gm_tensor(G_Z, z, isz)
    if c < t.former_num:  # this core's range, from its block index (GetBlockIdx) and the tiling
        start, length = c * t.former_length, t.former_length
    else:
        start = t.former_num * t.former_length + (c - t.former_num) * t.tail_length
        length = t.last_length if c == block_dim - 1 else t.tail_length
    m = BLOCK // isz
    k = 0  # tile counter: tile k uses slot k % buffer_num of each queue
    for off in range(0, length, t.tile_len):
        n = min(t.tile_len, length - off)
        xs, ys, zs = slot(core, X, k), slot(core, Y, k), slot(core, Z, k)
        if n == t.tile_len:  # whole blocks: DataCopy
            data_copy(core, xs, gx, start + off, n)
            data_copy(core, ys, gy, start + off, n)
        else:  # the last tile: DataCopyPad reads n elements and zero-fills UB up to the next 32 B
            data_copy_pad(core, xs, gx, start + off, 1, n, n, 0)
            data_copy_pad(core, ys, gy, start + off, 1, n, n, 0)
        _compute(core, k, (n + m - 1) // m * m, alpha, kind, mode)  # the padding is computed on, never written
        if n == t.tile_len:
            data_copy_out(core, gz, start + off, zs, n)
        else:  # only the n real elements reach GM
            data_copy_pad_out(core, gz, start + off, zs, 1, n, n)
        k += 1


@njit(cache=True, nogil=True)
def _cores(first, last, block_dim, arena, plan, cnt, err, checks, t, x, y, z, alpha, kind, mode):
    # The tiling crosses the launch as a plain tuple: Numba's dispatcher types a namedtuple argument in Python,
    # about 5 µs a launch for a dozen fields, a plain tuple in C.
    t = DeviceTiling(*t)
    for c in range(first, last):
        _core(c, block_dim, arena, plan, cnt, err, checks, t, x, y, z, alpha, kind, mode)


@reruns_on_overflow
def _launch(t: AddTailTiling, spec: SocSpec, x: np.ndarray, y: np.ndarray, z: np.ndarray, alpha: float,
            checks: bool) -> None:
    """The kernel launch: one phase (no SyncAll), block_dim cores; GM tensors travel as their bytes."""
    launch = prepare("add_tail", spec, t, ub_plan(t, spec).check(), t.block_dim, checks, GM_NAMES)
    gm = [np.ascontiguousarray(a).reshape(-1).view(np.uint8) for a in (x, y)]
    with host_threads(x, y, z):
        run_cores(_cores, t.block_dim, t.block_dim, launch.arena, launch.plan_array, launch.counters, launch.err,
                  launch.core_checks, tuple(getattr(t, f) for f in DeviceTiling._fields), *gm,
                  z.reshape(-1).view(np.uint8), float(alpha), KIND[t.dtype], CAST_RINT)
    finish(launch)


# ---------------------------------------------------------------------------------------------------------------
# the op API and its float64 reference


def add_tail(x: np.ndarray, y: np.ndarray, *, alpha: float = ALPHA, soc: str | SocSpec = DEFAULT_SOC,
             tiling: AddTailTiling | None = None, checks: bool = False, out: np.ndarray | None = None) -> np.ndarray:
    """z = (x + y) · alpha, in x's shape and dtype, by the tiled kernel. ``tiling`` runs a tiling made with
    :func:`tiling` overrides (checked first); ``checks=True`` runs checked mode; ``out`` is written in place.
    Errors raise :class:`tilesim.AclnnError`; nothing is written on error."""
    spec = get_soc(soc)
    if x is None or y is None:
        raise null_error("x" if x is None else "y")
    t = make_tiling(x, soc=spec) if tiling is None else check_tiling(tiling, x, spec)
    if y.dtype != x.dtype or y.shape != x.shape:
        raise invalid("y", f"{y.dtype} {list(y.shape)} must match x: {x.dtype} {list(x.shape)}")
    z = np.empty(x.shape, x.dtype) if out is None else out
    if z.shape != x.shape or z.dtype != x.dtype or not (z.flags.c_contiguous and z.flags.writeable):
        raise invalid("out", f"must be a writeable C-contiguous {x.dtype} array of shape {list(x.shape)}")
    if tilesim.launch.checks_enabled(checks):  # a violation raises CheckError before the caller's array is touched
        tmp = np.empty_like(z)
        _launch(t, spec, x, y, tmp, alpha, True)
        z[...] = tmp
    else:
        _launch(t, spec, x, y, z, alpha, False)
    return z


def reference(x: np.ndarray, y: np.ndarray, alpha: float = ALPHA) -> np.ndarray:
    """Untiled float64 math."""
    return (x.astype(np.float64) + y.astype(np.float64)) * alpha


# ---------------------------------------------------------------------------------------------------------------
# what the explorer and the command line see

DTYPES = {"fp32": np.float32, "bf16": ml_dtypes.bfloat16, "fp16": np.float16}


def make_inputs(shape: tuple[int, ...], dtype: str, seed: int = 0) -> Inputs:
    rng = np.random.default_rng(seed)
    return {k: rng.uniform(-2, 2, shape).astype(np.float32).astype(DTYPES[dtype]) for k in ("x", "y")}


def candidates(inputs: Inputs, soc: SocSpec) -> list[Candidate]:
    """A few core counts x buffer_num 1, 2 x tiles from one 256 B repeat up, x4 each step, to what fits (at most
    a core's range); the official tiling first."""
    spec, x = get_soc(soc), inputs["x"]
    official = tiling(x, soc=spec)
    found = {official: None}  # a dict keeps order and drops repeats (the tilings hash by value)
    n = spec.core_num_aiv
    for cores in sorted({min(c, n) for c in (1, 4, 16, n)}):
        for nb in (1, 2):
            top = tiling(x, soc=spec, core_num=cores, buffer_num=nb).tile_len
            size = 256 // ITEMSIZE[official.dtype]
            while size < top:
                found.setdefault(tiling(x, soc=spec, core_num=cores, tile_len=size, buffer_num=nb))
                size *= 4
            found.setdefault(tiling(x, soc=spec, core_num=cores, tile_len=top, buffer_num=nb))
    return [Candidate(t, {"block_dim": t.block_dim, "tile": t.tile_len, "buffer_num": t.buffer_num},
                      official=t == official) for t in found]


OPS: dict[str, OpSpec] = {"add_tail": OpSpec(
    name="add_tail", dtypes=("fp32", "bf16", "fp16"), default_shape=(999, 1001),
    shape_help="any shape, x and y alike, computed flat (999 x 1001: a tail in every dtype)",
    make_inputs=make_inputs, candidates=candidates,
    run=lambda inputs, t, soc: (add_tail(**inputs, tiling=t, soc=soc),),
    reference=lambda inputs: (reference(**inputs),), output_names=("z",),
    doc="z = (x + y) * alpha: the README's worked example of a kernel of your own. Sweeps a few core counts x "
        "buffer_num 1, 2 x tiles from one 256 B repeat up to what fits.")}


def demo(dtype: str) -> None:
    inputs = make_inputs(OPS["add_tail"].default_shape, dtype)
    t = tiling(inputs["x"])
    print(t, ub_plan(t).table(), sep="\n")
    z, reports = tilesim.recorded(lambda: add_tail(**inputs))
    print(compare(z, reference(**inputs)))
    print(estimate(reports[0]), end="\n\n")


if __name__ == "__main__":
    for d in ("fp32", "bf16"):
        demo(d)
