"""A kernel of your own: z = (x + y) · alpha over a flat length with a tail, in fp32, fp16 or bf16.
``python -m examples.add_tail`` runs it; ``tilesim explore add_tail --ops examples.add_tail`` sweeps its tilings.
docs/first-kernel.md walks through it."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

import tilesim
from tilesim import machine as asc  # AscendC::
from tilesim.cost.model import estimate
from tilesim.errors import invalid, null_error, tiling_error
from tilesim.precision import compare
from tilesim.runtime.launcher import kernel, launch
from tilesim.soc import DEFAULT_SOC, SocSpec, get_soc
from tilesim.tools.opspec import (
    Candidate,
    Inputs,
    OpSpec,
    collect,
    core_counts,
    match_tiling,
    uniform_inputs,
    with_tiles,
)


# --8<-- [start:tiling]
@dataclass(frozen=True)
class AddTailTiling:
    """block_dim cores share total_length elements in whole 32 B blocks, core i from block i·blocks/block_dim on;
    each walks its range in tiles of tile_len elements through queues of buffer_num buffers."""
    total_length: int
    block_dim: int
    tile_len: int
    buffer_num: int
    alpha: float = 0.5

    @staticmethod
    def choice_fields() -> dict[str, str | None]:
        """add_tail_tiling's free choices and the fields that carry them, which match_tiling reads."""
        return {"core_num": "block_dim", "tile_len": "tile_len", "buffer_num": "buffer_num"}


def add_tail_tiling(x: Any, *, soc: str | SocSpec = DEFAULT_SOC, core_num: int | None = None,
                    tile_len: int | None = None, buffer_num: int = 2, alpha: float = 0.5) -> AddTailTiling:
    """The tiling for ``x`` (only its shape and dtype); core_num, tile_len and buffer_num are free choices."""
    spec, isz, n, name = get_soc(soc), x.dtype.itemsize, x.size, x.dtype.name
    if name not in ("float32", "float16", "bfloat16") or (name == "bfloat16" and not spec.supports_bf16):
        raise invalid("x", f"dtype {x.dtype} not supported on {spec.name}")
    if n == 0:
        raise invalid("x", f"shape {list(x.shape)}: empty tensors are not supported")
    cores, m = spec.core_num_aiv if core_num is None else int(core_num), 32 // isz
    if not 1 <= cores <= spec.core_num_aiv:
        raise tiling_error("core_num", f"{cores} must be in [1, {spec.core_num_aiv}] (the vector cores of {spec.name})")
    if buffer_num not in (1, 2):
        raise tiling_error("buffer_num", f"{buffer_num} must be 1 or 2")
    block_dim = min(cores, -(-n // m))
    fit = spec.ub_size // (3 * buffer_num * isz + (8 if isz == 2 else 0)) // m * m  # 3 queues; b16: 2 fp32 TBufs
    tile_len = min(fit, -(-n // (block_dim * m)) * m) if tile_len is None else tile_len  # the largest core's range
    if tile_len < m or tile_len % m or tile_len > fit:
        raise tiling_error("tile_len", f"{tile_len} must be a positive multiple of {m} elements (32 B), at most "
                                       f"{fit} (what fits the UB with buffer_num {buffer_num})")
    return AddTailTiling(n, block_dim, tile_len, buffer_num, float(alpha))
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
    blocks = (t.total_length * sz + 31) // 32  # this core's range: whole blocks, the last core's ends with the data
    start, end = c * blocks // t.block_dim * 32 // sz, min((c + 1) * blocks // t.block_dim * 32 // sz, t.total_length)
    # --8<-- [end:kernel-setup]
    # --8<-- [start:copy-in]
    for off in range(start, end, t.tile_len):
        n = min(t.tile_len, end - off)
        k = (n * sz + 31) // 32 * 32 // sz  # whole blocks: the padding is computed on, never written out
        row, zero_pad = asc.DataCopyExtParams(1, n * sz, 0, 0), asc.DataCopyPadExtParams(True, 0, k - n, 0)
        xl, yl = in_x.alloc_tensor(x.dtype), in_y.alloc_tensor(x.dtype)  # CopyIn: a tail padded with zeros
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
def add_tail(x: np.ndarray, y: np.ndarray, *, alpha: float = 0.5, soc: str | SocSpec = DEFAULT_SOC,
             tiling: AddTailTiling | None = None, checks: bool | None = None,
             out: np.ndarray | None = None) -> np.ndarray:
    """z = (x + y) · alpha by the kernel. Errors raise tilesim.AclnnError; nothing is written on error."""
    if x is None or y is None:  # a required input missing: 161001, as aclnn's nullptr check
        raise null_error("x" if x is None else "y")
    t = add_tail_tiling(x, soc=soc, alpha=alpha) if tiling is None else match_tiling(  # a hand-made one: checked
        tiling, add_tail_tiling, x, soc=soc, alpha=alpha)
    if y.dtype != x.dtype or y.shape != x.shape:
        raise invalid("y", f"{y.dtype} {list(y.shape)} must match x: {x.dtype} {list(x.shape)}")
    z = np.empty(x.shape, x.dtype) if out is None else out
    if z.shape != x.shape or z.dtype != x.dtype or not (z.flags.c_contiguous and z.flags.writeable):
        raise invalid("out", f"must be a writeable C-contiguous {x.dtype} array of shape {list(x.shape)}")
    launch(add_tail_kernel, t, np.ascontiguousarray(x), np.ascontiguousarray(y), z, block_dim=t.block_dim,
           soc=soc, checks=checks, op="add_tail")
    return z
# --8<-- [end:op]


# --8<-- [start:opspec]
def reference(x: np.ndarray, y: np.ndarray, alpha: float = 0.5) -> np.ndarray:
    return (x.astype(np.float64) + y.astype(np.float64)) * alpha


def candidates(inputs: Inputs, soc: SocSpec) -> list[Candidate]:
    """Core counts 1, 2, 4, ... and all x buffer_num 1, 2 x tiles from one 256 B repeat to what fits; official first."""
    x, make = inputs["x"], partial(add_tail_tiling, inputs["x"], soc=soc)
    return collect(make(), (t for cores in core_counts(get_soc(soc)) for nb in (1, 2) for t in with_tiles(
        make, {"core_num": cores, "buffer_num": nb}, lambda v: {"tile_len": v}, 256 // x.itemsize, x.size,
        32 // x.itemsize)), lambda t: {"block_dim": t.block_dim, "tile": t.tile_len, "buffer_num": t.buffer_num})


OPS = {"add_tail": OpSpec(
    name="add_tail", dtypes=("fp32", "bf16", "fp16"), default_shape=(999, 1001), make_inputs=uniform_inputs("x", "y"),
    shape_help="any shape, x and y alike, computed flat (999 x 1001: a tail in every dtype)", candidates=candidates,
    run=lambda inputs, t, soc: (add_tail(**inputs, tiling=t, soc=soc),), reference=lambda i: (reference(**i),),
    output_names=("z",), doc="z = (x + y) * alpha: the worked example of a kernel of your own.")}
# --8<-- [end:opspec]

# --8<-- [start:main]
if __name__ == "__main__":
    for d in ("fp32", "bf16"):
        inputs = OPS["add_tail"].make_inputs(OPS["add_tail"].default_shape, d, 0)
        z, reports = tilesim.recorded(lambda: add_tail(**inputs))  # noqa: B023
        print(reports[0].tiling, reports[0], compare(z, reference(**inputs)), estimate(reports[0]), sep="\n\n")
# --8<-- [end:main]
