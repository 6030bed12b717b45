"""A kernel of your own, start to finish: z = (x + y) · alpha over a flat length with a tail. ``python -m
examples.add_tail`` runs it; ``tilesim explore add_tail --ops examples.add_tail`` sweeps its tilings.

The host splits the length over the cores in whole 32 B blocks (the first ``former_num`` cores take one block
more); each core walks its range in UB tiles: CopyIn (DataCopy, or DataCopyPad for the last partial tile),
Compute (b16 widened to fp32 and rounded once at the end), CopyOut, through queues of ``buffer_num`` buffers.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import ml_dtypes
import numpy as np

import tilesim
from tilesim.cost import estimate
from tilesim.errors import invalid, null_error, tiling_error
from tilesim.launcher import kernel, launch
from tilesim.machine import (
    VECCALC,
    VECIN,
    VECOUT,
    DataCopyExtParams,
    DataCopyPadExtParams,
    TBuf,
    TPipe,
    TQue,
    add,
    cast,
    data_copy,
    data_copy_pad,
    float32,
    get_block_idx,
    muls,
)
from tilesim.machine.convert import CAST_NONE, CAST_RINT
from tilesim.machine.dtypes import size_of
from tilesim.opspec import Candidate, Inputs, OpSpec
from tilesim.precision import compare
from tilesim.soc import DEFAULT_SOC, SocSpec, get_soc

ALPHA = 0.5
DTYPES = {"fp32": np.float32, "bf16": ml_dtypes.bfloat16, "fp16": np.float16}


@dataclass(frozen=True)
class AddTailTiling:
    """Core c < former_num takes former_length elements, later cores tail_length, the last last_length."""
    dtype: str
    total_length: int
    block_dim: int
    former_num: int
    former_length: int
    tail_length: int
    last_length: int
    tile_len: int  # elements per UB tile, whole 32 B blocks
    buffer_num: int  # buffers per queue
    alpha: float = ALPHA


def max_tile_len(dtype: str, buffer_num: int, soc: SocSpec) -> int:
    """The largest tile that fits: three queues of buffer_num buffers, plus two fp32 buffers for b16."""
    isz = np.dtype(dtype).itemsize
    return soc.ub_size // (3 * buffer_num * isz + (0 if isz == 4 else 8)) // (32 // isz) * (32 // isz)


def tiling(x: Any, *, soc: str | SocSpec = DEFAULT_SOC, core_num: int | None = None, tile_len: int | None = None,
           buffer_num: int = 2, alpha: float = ALPHA) -> AddTailTiling:
    """The tiling for ``x``; ``core_num``, ``tile_len`` and ``buffer_num`` are free choices (561002 if illegal)."""
    spec, dtype = get_soc(soc), np.dtype(x.dtype).name
    if dtype not in ("float32", "float16", "bfloat16") or (dtype == "bfloat16" and not spec.supports_bf16):
        raise invalid("x", f"dtype {dtype} not supported on {spec.name}")
    n, m = int(np.prod(x.shape)), 32 // np.dtype(x.dtype).itemsize
    if n == 0:
        raise invalid("x", f"shape {list(x.shape)}: empty tensors are not supported")
    cores = spec.core_num_aiv if core_num is None else int(core_num)
    if not 1 <= cores <= spec.core_num_aiv:
        raise tiling_error("core_num", f"{cores} must be in [1, {spec.core_num_aiv}] (the vector cores of {spec.name})")
    if buffer_num not in (1, 2):
        raise tiling_error("buffer_num", f"{buffer_num} must be 1 or 2")
    block_dim = min(cores, -(-n // m))
    per, former_num = divmod(-(-n // m), block_dim)
    last_start = former_num * (per + 1) * m + (block_dim - 1 - former_num) * per * m
    fit = max_tile_len(dtype, buffer_num, spec)
    if tile_len is None:
        tile_len = min(fit, (per + (former_num > 0)) * m)
    elif tile_len < m or tile_len % m or tile_len > fit:
        raise tiling_error("tile_len", f"{tile_len} must be a positive multiple of {m} elements (32 B of {dtype}), "
                                       f"at most {fit} (what fits the UB with buffer_num {buffer_num})")
    return AddTailTiling(dtype, n, block_dim, former_num, (per + 1) * m, per * m, n - last_start, int(tile_len),
                         buffer_num, float(alpha))


@kernel
def add_tail_kernel(ctx, t, x, y, z):
    sz, c = size_of(x.dtype), get_block_idx(ctx)
    pipe = TPipe(ctx)
    in_x = pipe.init_buffer(TQue(VECIN, 1), t.buffer_num, t.tile_len * sz)
    in_y = pipe.init_buffer(TQue(VECIN, 1), t.buffer_num, t.tile_len * sz)
    out_z = pipe.init_buffer(TQue(VECOUT, 1), t.buffer_num, t.tile_len * sz)
    x32 = pipe.init_buffer(TBuf(VECCALC), t.tile_len * 4 if sz == 2 else 0)
    y32 = pipe.init_buffer(TBuf(VECCALC), t.tile_len * 4 if sz == 2 else 0)
    start = c * t.former_length if c < t.former_num else (t.former_num * t.former_length
                                                           + (c - t.former_num) * t.tail_length)
    length = t.former_length if c < t.former_num else t.last_length if c == t.block_dim - 1 else t.tail_length
    for off in range(start, start + length, t.tile_len):
        n = min(t.tile_len, start + length - off)
        whole, pad = n == t.tile_len, DataCopyExtParams(1, n * sz, 0, 0)
        xl, yl = in_x.alloc_tensor(x.dtype), in_y.alloc_tensor(x.dtype)  # CopyIn
        if whole:
            data_copy(xl, x[off], n)
            data_copy(yl, y[off], n)
        else:  # the last tile: DataCopyPad zero-fills the UB row to its 32 B end
            data_copy_pad(xl, x[off], pad, DataCopyPadExtParams(True, 0, 0, 0))
            data_copy_pad(yl, y[off], pad, DataCopyPadExtParams(True, 0, 0, 0))
        in_x.enque(xl)
        in_y.enque(yl)
        xl, yl, zl = in_x.deque(x.dtype), in_y.deque(x.dtype), out_z.alloc_tensor(x.dtype)  # Compute
        k = (n * sz + 31) // 32 * 32 // sz  # the padding is computed on, never written out
        if sz == 4:
            add(zl, xl, yl, k)
            muls(zl, zl, t.alpha, k)
        else:
            a, b = x32.get(float32), y32.get(float32)
            cast(a, xl, CAST_NONE, k)
            cast(b, yl, CAST_NONE, k)
            add(a, a, b, k)
            muls(a, a, t.alpha, k)
            cast(zl, a, CAST_RINT, k)
        in_x.free_tensor(xl)
        in_y.free_tensor(yl)
        out_z.enque(zl)
        zl = out_z.deque(x.dtype)  # CopyOut
        if whole:
            data_copy(z[off], zl, n)
        else:
            data_copy_pad(z[off], zl, pad)
        out_z.free_tensor(zl)


def add_tail(x: np.ndarray, y: np.ndarray, *, alpha: float = ALPHA, soc: str | SocSpec = DEFAULT_SOC,
             tiling: AddTailTiling | None = None, checks: bool = False, out: np.ndarray | None = None) -> np.ndarray:
    """z = (x + y) · alpha by the kernel; a hand-made ``tiling`` must be what its free choices give for x."""
    spec = get_soc(soc)
    if x is None or y is None:
        raise null_error("x" if x is None else "y")
    want = make_tiling(x, soc=spec, alpha=alpha, **({} if tiling is None else {
        "core_num": max(1, min(tiling.block_dim, spec.core_num_aiv)), "tile_len": tiling.tile_len,
        "buffer_num": tiling.buffer_num}))
    for f in fields(want) if tiling is not None else ():
        if getattr(tiling, f.name) != getattr(want, f.name):
            raise tiling_error(f"tiling.{f.name}", f"{getattr(tiling, f.name)} does not match x and the free "
                                                   f"choices: {getattr(want, f.name)}")
    if y.dtype != x.dtype or y.shape != x.shape:
        raise invalid("y", f"{y.dtype} {list(y.shape)} must match x: {x.dtype} {list(x.shape)}")
    z = np.empty(x.shape, x.dtype) if out is None else out
    if z.shape != x.shape or z.dtype != x.dtype or not (z.flags.c_contiguous and z.flags.writeable):
        raise invalid("out", f"must be a writeable C-contiguous {x.dtype} array of shape {list(x.shape)}")
    checked = tilesim.launch.checks_enabled(checks)
    dst = np.empty_like(z) if checked else z  # a CheckError leaves the caller's array untouched
    launch(add_tail_kernel, want, np.ascontiguousarray(x), np.ascontiguousarray(y), dst, block_dim=want.block_dim,
           soc=spec, checks=checked, op="add_tail")
    if checked:
        z[...] = dst
    return z


make_tiling = tiling  # the op's ``tiling=`` argument shadows the name


def reference(x: np.ndarray, y: np.ndarray, alpha: float = ALPHA) -> np.ndarray:
    return (x.astype(np.float64) + y.astype(np.float64)) * alpha


def make_inputs(shape: tuple[int, ...], dtype: str, seed: int = 0) -> Inputs:
    rng = np.random.default_rng(seed)
    return {k: rng.uniform(-2, 2, shape).astype(np.float32).astype(DTYPES[dtype]) for k in ("x", "y")}


def candidates(inputs: Inputs, soc: SocSpec) -> list[Candidate]:
    """Core counts x buffer_num 1, 2 x tiles from one 256 B repeat up, x4 a step, to what fits; official first."""
    x, n = inputs["x"], get_soc(soc).core_num_aiv
    official = tiling(x, soc=soc)
    found = {official: None}
    for cores in sorted({min(c, n) for c in (1, 4, 16, n)}):
        for nb in (1, 2):
            top, size = tiling(x, soc=soc, core_num=cores, buffer_num=nb).tile_len, 256 // x.itemsize
            for tile in [*[size * 4 ** i for i in range(12) if size * 4 ** i < top], top]:
                found.setdefault(tiling(x, soc=soc, core_num=cores, tile_len=tile, buffer_num=nb))
    return [Candidate(t, {"block_dim": t.block_dim, "tile": t.tile_len, "buffer_num": t.buffer_num},
                      official=t == official) for t in found]


OPS = {"add_tail": OpSpec(
    name="add_tail", dtypes=("fp32", "bf16", "fp16"), default_shape=(999, 1001), make_inputs=make_inputs,
    shape_help="any shape, x and y alike, computed flat (999 x 1001: a tail in every dtype)", candidates=candidates,
    run=lambda inputs, t, soc: (add_tail(**inputs, tiling=t, soc=soc),), reference=lambda i: (reference(**i),),
    output_names=("z",), doc="z = (x + y) * alpha: the README's worked example of a kernel of your own.")}

if __name__ == "__main__":
    for d in ("fp32", "bf16"):
        inputs = make_inputs(OPS["add_tail"].default_shape, d)
        z, reports = tilesim.recorded(lambda: add_tail(**inputs))  # noqa: B023
        r = reports[0]
        print(r.tiling, r, compare(z, reference(**inputs)), estimate(r), sep="\n", end="\n\n")
