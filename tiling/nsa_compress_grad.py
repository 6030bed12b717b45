"""NsaCompressGrad host tiling: ``op_host/nsa_compress_grad_tiling.cpp`` of ops-transformer (attention/
nsa_compress_grad), field for field, the split the kernel derives from it (``nsa_compress_grad.h``: the UB's head
capacity, rows and heads per pass, blocks and (t, n) rows per core), and the checks of aclnnNsaCompressGrad.

Free choice a user may override: ``core_num`` (blockDim; the official one is every vector core).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tilesim.errors import invalid, null_error, tiling_error
from tilesim.soc import DEFAULT_SOC, SocSpec, get_soc
from tilesim.tools.opspec import match_tiling

from .common import BF16, FP16, ceil_div, dtype_name, integer, remembered, require, shape_of

SYS_WORKSPACE = 16 * 1024 * 1024  # WORKSIZE
UB_PRESERVE = 24 * 1024  # the kernel keeps 24 KiB of UB for its tmp buffers
BLOCK_16 = 16
MAX_BLOCK_SIZE = 128
MAX_HEAD_DIM = 256
MAX_HEADS = 128
SOCS = ("Ascend910B", "Ascend910_93")  # nsa_compress_grad_def.cpp AddConfig


@dataclass(frozen=True)
class NsaCompressGradTiling:
    """NsaCompressGradTilingData (official names in snake_case) plus ``block_dim`` (aivNum), ``tiling_key`` (0)
    and ``workspace_size`` (bytes, the 16 MiB included)."""

    batch_size: int
    num_of_block: int
    num_of_head: int
    dim_of_head: int
    block_size: int
    block_stride: int
    seq_len_type: int
    head_to_process: int
    head_remainder: int
    ub_max_size: int
    block_dim: int
    tiling_key: int
    workspace_size: int

    @property
    def max_head_num_in_ub(self) -> int:
        """(UB − 24 KiB) / D / 4 / 3, down to a multiple of 16: (t, n) rows of D fp32 in each of three buffers."""
        return (self.ub_max_size - UB_PRESERVE) // self.dim_of_head // 4 // 3 // BLOCK_16 * BLOCK_16

    @property
    def n_rows_once(self) -> int:
        """Window rows a pass takes (all heads of each), at most blockSize."""
        m, n = self.max_head_num_in_ub, self.num_of_head
        return min(m // n, self.block_size) if m >= n else 1

    @property
    def n_head_once(self) -> int:
        """Heads a pass takes: all of them, or N split into equal parts that fit."""
        m, n = self.max_head_num_in_ub, self.num_of_head
        return n if m >= n else n // ceil_div(n, m)

    @property
    def is_overlap(self) -> bool:
        """Windows overlap (blockSize > stride): inputGrad accumulates in an fp32 workspace."""
        return self.block_size > self.block_stride

    def blocks_of_core(self, core: int) -> tuple[int, int]:
        """(first window, window count) of core ``core``: the remainder goes one each to the first cores."""
        base, rem = divmod(self.num_of_block, self.block_dim)
        return base * core + min(core, rem), base + (1 if core < rem else 0)

    def heads_of_core(self, core: int) -> tuple[int, int]:
        """(first (t, n) row, row count) core ``core`` zeroes and moves inputGrad for."""
        base, rem = self.head_to_process, self.head_remainder
        return base * core + min(core, rem), base + (1 if core < rem else 0)

    @staticmethod
    def choice_fields() -> dict[str, str | None]:
        """The override of :func:`nsa_compress_grad` and the field that carries it: block_dim, the core count."""
        return {"core_num": "block_dim"}


def windows(lengths: list[int], block_size: int, stride: int) -> list[int]:
    """CompressBlkNum per batch: ⌊(L − blockSize)/stride⌋ + 1, or 0 when L < blockSize."""
    return [0 if n < block_size else (n - block_size) // stride + 1 for n in lengths]


def seq_lengths(act_seq_len: Any) -> list[int]:
    """Batch lengths from the cumulative ends (actSeqLenType 0)."""
    cum = [int(v) for v in act_seq_len]
    return [c - p for p, c in zip([0] + cum[:-1], cum, strict=True)]


def seq_ends(act_seq_len: Any) -> list[int]:
    """actSeqLen (an aclIntArray: a sequence or 1-D array of integers, by value) as a list of ints; floats (which
    would be truncated), strings, NaN, a 2-D array or an empty one are 161002."""
    try:
        a = np.asarray(act_seq_len)
    except (ValueError, TypeError):
        a = None
    if a is not None and a.size == 0:
        raise invalid("actSeqLen", "must not be empty")
    if a is None or a.dtype.kind not in "iu":
        got = type(act_seq_len).__name__ if a is None else f"{type(act_seq_len).__name__} of {a.dtype}"
        raise invalid("actSeqLen", f"must be a 1-D sequence of integers, got {got}")
    if a.ndim != 1:
        raise invalid("actSeqLen", f"must be 1-D, got shape {list(a.shape)}")
    return [int(v) for v in a]


def check_args(output_grad: Any, input: Any, weight: Any, act_seq_len: Any, compress_block_size: int,
               compress_stride: int, act_seq_len_type: int, layout: str, soc: SocSpec) -> tuple[int, int, int, int]:
    """The checks of aclnnNsaCompressGrad and its tiling; returns (T, N, D, total windows).

    None is 161001, everything else 161002."""
    require(outputGrad=output_grad, input=input, weight=weight)
    if act_seq_len is None:
        raise null_error("actSeqLen")
    if soc.short_soc not in SOCS:
        raise invalid("soc", f"NsaCompressGrad runs on Ascend910B and Ascend910_93 only, not {soc.name}")
    if not isinstance(layout, str) or layout != "TND":
        raise invalid("layout", f"{layout!r}: only \"TND\" is supported")
    if integer("actSeqLenType", act_seq_len_type) != 0:
        raise invalid("actSeqLenType", f"{act_seq_len_type}: only 0 (cumulative ends) is supported")
    dt = dtype_name(input)
    if dt not in (FP16, BF16):
        raise invalid("input", f"dtype {dt} not supported; float16 or bfloat16")
    for name, t in (("outputGrad", output_grad), ("weight", weight)):
        if dtype_name(t) != dt:
            raise invalid(name, f"dtype {dtype_name(t)} must equal input's dtype {dt}")
    bs, stride = integer("compressBlockSize", compress_block_size), integer("compressStride", compress_stride)
    if bs % BLOCK_16 or bs <= 0:
        raise invalid("compressBlockSize", f"{bs} must be a positive multiple of 16")
    if stride % BLOCK_16 or stride <= 0:
        raise invalid("compressStride", f"{stride} must be a positive multiple of 16")
    if bs <= stride:
        raise invalid("compressBlockSize", f"{bs} must be greater than compressStride {stride}")
    if bs > MAX_BLOCK_SIZE:
        raise invalid("compressBlockSize", f"{bs} must be at most {MAX_BLOCK_SIZE}")
    s = shape_of(input)
    if len(s) != 3:
        raise invalid("input", f"shape {list(s)} must be [T, N, D]")
    t, n, d = s
    if t * n * d == 0:
        raise invalid("input", f"shape {list(s)}: empty tensors are not supported")
    if d % BLOCK_16 or d > MAX_HEAD_DIM:
        raise invalid("input", f"D = {d} must be a multiple of 16 and at most {MAX_HEAD_DIM}")
    if n > MAX_HEADS:
        raise invalid("input", f"N = {n} must be at most {MAX_HEADS}")
    if shape_of(weight) != (bs, n):
        raise invalid("weight", f"shape {list(shape_of(weight))} must be [compressBlockSize, N] = [{bs}, {n}]")
    cum = seq_ends(act_seq_len)
    if cum[0] < 0 or any(b < a for a, b in zip(cum, cum[1:], strict=False)):
        raise invalid("actSeqLen", f"{cum}: cumulative ends must be non-negative and non-decreasing")
    if cum[-1] != t:
        raise invalid("actSeqLen", f"last end {cum[-1]} must equal T = {t} (input's first axis)")
    total = sum(windows(seq_lengths(cum), bs, stride))
    if shape_of(output_grad) != (total, n, d):
        raise invalid("outputGrad", f"shape {list(shape_of(output_grad))} must be [windows, N, D] = "
                                    f"[{total}, {n}, {d}]")
    return t, n, d, total


@remembered(3, by_value=(3,))
def nsa_compress_grad(output_grad: Any, input: Any, weight: Any, act_seq_len: Any,
                      compress_block_size: int, compress_stride: int, act_seq_len_type: int = 0,
                      layout: str = "TND", *, soc: str | SocSpec = DEFAULT_SOC,
                      core_num: int | None = None) -> NsaCompressGradTiling:
    """The official NsaCompressGrad tiling for these arguments (tensors need only ``.shape`` and ``.dtype``)."""
    spec = get_soc(soc)
    t, n, d, total = check_args(output_grad, input, weight, act_seq_len, compress_block_size, compress_stride,
                                act_seq_len_type, layout, spec)
    cores = spec.core_num_aiv if core_num is None else int(core_num)
    if not 1 <= cores <= spec.core_num_aiv:
        raise tiling_error("core_num", f"{cores} must be in [1, {spec.core_num_aiv}] (GetCoreNumAiv of {spec.name})")
    bs = int(compress_block_size)
    ws = SYS_WORKSPACE + bs * n * 4 * cores + t * n * d * 4 + 1024 * 1024
    return NsaCompressGradTiling(
        batch_size=len(seq_ends(act_seq_len)), num_of_block=total, num_of_head=n, dim_of_head=d,
        block_size=bs, block_stride=int(compress_stride), seq_len_type=int(act_seq_len_type),
        head_to_process=t * n // cores, head_remainder=t * n % cores, ub_max_size=spec.ub_size, block_dim=cores,
        tiling_key=0, workspace_size=ws)



def check_tiling(t: Any, output_grad: Any, input: Any, weight: Any, act_seq_len: Any,  # noqa: A002
                 compress_block_size: int, compress_stride: int, act_seq_len_type: int = 0, layout: str = "TND", *,
                 soc: str | SocSpec = DEFAULT_SOC) -> NsaCompressGradTiling:
    """A hand-made tiling, if it is what its core count gives for these arguments, field for field
    (:func:`tilesim.tools.opspec.match_tiling`; 561002 naming the field otherwise)."""
    return match_tiling(t, nsa_compress_grad, output_grad, input, weight, act_seq_len, compress_block_size,
                        compress_stride, act_seq_len_type, layout, soc=soc)
