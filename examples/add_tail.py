"""A kernel of your own: z = (x + y) · alpha over a flat length with a tail, in fp32, fp16 or bf16.
``python -m examples.add_tail`` runs it; ``tilesim explore add_tail --ops examples.add_tail`` sweeps its tilings.
The README's "Your own kernel" walks through it."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

import ml_dtypes
import numpy as np

import tilesim
from tilesim import machine as asc  # AscendC::
from tilesim.cost import estimate
from tilesim.errors import invalid, null_error, tiling_error
from tilesim.launcher import kernel, launch
from tilesim.opspec import Candidate, Inputs, OpSpec
from tilesim.precision import compare
from tilesim.soc import DEFAULT_SOC, SocSpec, get_soc


# --8<-- [start:tiling]
@dataclass(frozen=True)
class AddTailTiling:
    """Cores below former_num take former_length elements, the others tail_length (one 32 B block fewer), the
    last one last_length; each walks its range in tiles of tile_len elements through queues of buffer_num."""
    total_length: int
    block_dim: int
    former_num: int
    former_length: int
    tail_length: int
    last_length: int
    tile_len: int
    buffer_num: int
    alpha: float = 0.5


def max_tile_len(isz: int, buffer_num: int, soc: SocSpec) -> int:
    """The largest tile that fits: three queues of buffer_num buffers, plus two fp32 buffers for b16."""
    return soc.ub_size // (3 * buffer_num * isz + (8 if isz == 2 else 0)) // (32 // isz) * (32 // isz)


def tiling(x: Any, *, soc: str | SocSpec = DEFAULT_SOC, core_num: int | None = None, tile_len: int | None = None,
           buffer_num: int = 2, alpha: float = 0.5) -> AddTailTiling:
    """The tiling for ``x`` (only its shape and dtype); core_num, tile_len and buffer_num are free choices."""
    spec, isz, n = get_soc(soc), np.dtype(x.dtype).itemsize, int(np.prod(x.shape))
    name = np.dtype(x.dtype).name
    if name not in ("float32", "float16", "bfloat16") or (name == "bfloat16" and not spec.supports_bf16):
        raise invalid("x", f"dtype {x.dtype} not supported on {spec.name}")
    if n == 0:
        raise invalid("x", f"shape {list(x.shape)}: empty tensors are not supported")
    cores, m = spec.core_num_aiv if core_num is None else int(core_num), 32 // isz
    if not 1 <= cores <= spec.core_num_aiv:
        raise tiling_error("core_num", f"{cores} must be in [1, {spec.core_num_aiv}] (the vector cores of {spec.name})")
    if buffer_num not in (1, 2):
        raise tiling_error("buffer_num", f"{buffer_num} must be 1 or 2")
    blocks = -(-n // m)
    block_dim = min(cores, blocks)
    per, former_num = divmod(blocks, block_dim)
    fit = max_tile_len(isz, buffer_num, spec)
    tile_len = min(fit, (per + (former_num > 0)) * m) if tile_len is None else tile_len
    if tile_len < m or tile_len % m or tile_len > fit:
        raise tiling_error("tile_len", f"{tile_len} must be a positive multiple of {m} elements (32 B), at most "
                                       f"{fit} (what fits the UB with buffer_num {buffer_num})")
    last = n - former_num * (per + 1) * m - (block_dim - 1 - former_num) * per * m
    return AddTailTiling(n, block_dim, former_num, (per + 1) * m, per * m, last, tile_len, buffer_num, float(alpha))
# --8<-- [end:tiling]


# --8<-- [start:kernel-setup]
@kernel
def add_tail_kernel(ctx, t, x, y, z):
    sz, c = asc.size_of(x.dtype), asc.get_block_idx(ctx)
    pipe = asc.TPipe(ctx)
    in_x = pipe.init_buffer(asc.TQue(asc.VECIN, 1), t.buffer_num, t.tile_len * sz)
    in_y = pipe.init_buffer(asc.TQue(asc.VECIN, 1), t.buffer_num, t.tile_len * sz)
    out_z = pipe.init_buffer(asc.TQue(asc.VECOUT, 1), t.buffer_num, t.tile_len * sz)
    x32 = pipe.init_buffer(asc.TBuf(asc.VECCALC), t.tile_len * 4 if sz == 2 else 0)  # b16 computes in fp32
    y32 = pipe.init_buffer(asc.TBuf(asc.VECCALC), t.tile_len * 4 if sz == 2 else 0)
    start = c * t.tail_length + min(c, t.former_num) * (t.former_length - t.tail_length)
    length = t.former_length if c < t.former_num else t.last_length if c == t.block_dim - 1 else t.tail_length
    # --8<-- [end:kernel-setup]
    # --8<-- [start:copy-in]
    for off in range(start, start + length, t.tile_len):
        n = min(t.tile_len, start + length - off)
        k = (n * sz + 31) // 32 * 32 // sz  # whole blocks: the padding is computed on, never written out
        row, zero_pad = asc.DataCopyExtParams(1, n * sz, 0, 0), asc.DataCopyPadExtParams(True, 0, 0, 0)
        xl, yl = in_x.alloc_tensor(x.dtype), in_y.alloc_tensor(x.dtype)  # CopyIn: DataCopyPad zero-fills a tail
        asc.data_copy_pad(xl, x[off], row, zero_pad)
        asc.data_copy_pad(yl, y[off], row, zero_pad)
        in_x.enque(xl)
        in_y.enque(yl)
        # --8<-- [end:copy-in]
        # --8<-- [start:compute]
        xl, yl, zl = in_x.deque(x.dtype), in_y.deque(x.dtype), out_z.alloc_tensor(x.dtype)  # Compute
        if sz == 4:  # a PipeBarrier<PIPE_V> between dependent steps, as ops-nn writes them (auto-sync would too)
            asc.add(zl, xl, yl, k)
            asc.pipe_barrier(ctx, asc.PIPE_V)
            asc.muls(zl, zl, t.alpha, k)
        else:
            a, b = x32.get(asc.float32), y32.get(asc.float32)
            asc.cast(a, xl, asc.CAST_NONE, k)
            asc.cast(b, yl, asc.CAST_NONE, k)
            asc.pipe_barrier(ctx, asc.PIPE_V)
            asc.add(a, a, b, k)
            asc.pipe_barrier(ctx, asc.PIPE_V)
            asc.muls(a, a, t.alpha, k)
            asc.pipe_barrier(ctx, asc.PIPE_V)
            asc.cast(zl, a, asc.CAST_RINT, k)
        in_x.free_tensor(xl)
        in_y.free_tensor(yl)
        # --8<-- [end:compute]
        # --8<-- [start:copy-out]
        out_z.enque(zl)
        zl = out_z.deque(x.dtype)  # CopyOut: only the n real elements
        asc.data_copy_pad(z[off], zl, row)
        out_z.free_tensor(zl)
        # --8<-- [end:copy-out]


# --8<-- [start:op]
def check_tiling(t: AddTailTiling, x: Any, soc: SocSpec) -> AddTailTiling:
    """A hand-made tiling runs only if it is what its free choices give for ``x`` (561002 naming the field)."""
    if not 1 <= t.block_dim <= soc.core_num_aiv:
        raise tiling_error("tiling.block_dim", f"{t.block_dim} must be in [1, {soc.core_num_aiv}]")
    want = tiling(x, soc=soc, core_num=t.block_dim, tile_len=t.tile_len, buffer_num=t.buffer_num, alpha=t.alpha)
    for f in (f.name for f in fields(t) if getattr(t, f.name) != getattr(want, f.name)):
        raise tiling_error(f"tiling.{f}", f"{getattr(t, f)} does not match x and the free choices: {getattr(want, f)}")
    return t


def add_tail(x: np.ndarray, y: np.ndarray, *, alpha: float = 0.5, soc: str | SocSpec = DEFAULT_SOC,
             tiling: AddTailTiling | None = None, checks: bool = False, out: np.ndarray | None = None) -> np.ndarray:
    """z = (x + y) · alpha by the kernel. Errors raise tilesim.AclnnError; nothing is written on error."""
    spec = get_soc(soc)
    if x is None or y is None:
        raise null_error("x" if x is None else "y")
    t = make_tiling(x, soc=spec, alpha=alpha) if tiling is None else check_tiling(replace(tiling, alpha=alpha), x, spec)
    if y.dtype != x.dtype or y.shape != x.shape:
        raise invalid("y", f"{y.dtype} {list(y.shape)} must match x: {x.dtype} {list(x.shape)}")
    z = np.empty(x.shape, x.dtype) if out is None else out
    if z.shape != x.shape or z.dtype != x.dtype or not (z.flags.c_contiguous and z.flags.writeable):
        raise invalid("out", f"must be a writeable C-contiguous {x.dtype} array of shape {list(x.shape)}")
    launch(add_tail_kernel, t, np.ascontiguousarray(x), np.ascontiguousarray(y), z, block_dim=t.block_dim,
           soc=spec, checks=checks, op="add_tail")
    return z
# --8<-- [end:op]


make_tiling = tiling  # the op's ``tiling=`` argument shadows the name


# --8<-- [start:opspec]
def reference(x: np.ndarray, y: np.ndarray, alpha: float = 0.5) -> np.ndarray:
    return (x.astype(np.float64) + y.astype(np.float64)) * alpha


def make_inputs(shape: tuple[int, ...], dtype: str, seed: int = 0) -> Inputs:
    dt = {"fp32": np.float32, "bf16": ml_dtypes.bfloat16, "fp16": np.float16}[dtype]
    rng = np.random.default_rng(seed)
    return {k: rng.uniform(-2, 2, shape).astype(np.float32).astype(dt) for k in ("x", "y")}


def candidates(inputs: Inputs, soc: SocSpec) -> list[Candidate]:
    """Core counts x buffer_num 1, 2 x tiles from one 256 B repeat up, x4 a step, to what fits; official first."""
    x, n = inputs["x"], get_soc(soc).core_num_aiv
    found = {tiling(x, soc=soc): True}  # a dict keeps the order and drops repeats
    for cores in sorted({min(c, n) for c in (1, 4, 16, n)}):
        for nb in (1, 2):
            top, size = tiling(x, soc=soc, core_num=cores, buffer_num=nb).tile_len, 256 // x.itemsize
            for tile in [*(size * 4 ** i for i in range(12) if size * 4 ** i < top), top]:
                found.setdefault(tiling(x, soc=soc, core_num=cores, tile_len=tile, buffer_num=nb), False)
    return [Candidate(t, {"block_dim": t.block_dim, "tile": t.tile_len, "buffer_num": t.buffer_num}, official=o)
            for t, o in found.items()]


OPS = {"add_tail": OpSpec(
    name="add_tail", dtypes=("fp32", "bf16", "fp16"), default_shape=(999, 1001), make_inputs=make_inputs,
    shape_help="any shape, x and y alike, computed flat (999 x 1001: a tail in every dtype)", candidates=candidates,
    run=lambda inputs, t, soc: (add_tail(**inputs, tiling=t, soc=soc),), reference=lambda i: (reference(**i),),
    output_names=("z",), doc="z = (x + y) * alpha: the README's worked example of a kernel of your own.")}
# --8<-- [end:opspec]

# --8<-- [start:main]
if __name__ == "__main__":
    for d in ("fp32", "bf16"):
        inputs = make_inputs(OPS["add_tail"].default_shape, d)
        z, reports = tilesim.recorded(lambda: add_tail(**inputs))  # noqa: B023
        print(reports[0].tiling, reports[0], compare(z, reference(**inputs)), estimate(reports[0]), sep="\n\n")
# --8<-- [end:main]
