"""What the explorer, the trace command and the run report need to know about an op: an :class:`OpSpec`.

The five shipped ops have theirs in ``kernels.ops``; a user's own kernel (written with tilesim's primitives, a
tiling dataclass and a UB plan) gets the same report, trace and sweep by building one. tilesim never imports an
op: the command line finds the specs by module name (``kernels.ops`` by default, ``--ops mypkg.myops`` for more).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .precision import ErrorBound
from .soc import SocSpec

Inputs = dict[str, Any]


@dataclass(frozen=True)
class Accumulation:
    """The longest fp32 sum into an element of an output with a tiling: ``terms`` added one after another, each a
    ``unit`` ("rows per core"). An fp32 sum errs more the longer it is, so a tiling that sums more per core is less
    precise than one that sums less: the explorer says so where a tiling fails the standard."""

    terms: int
    unit: str


@dataclass(frozen=True)
class Candidate:
    """One tiling the explorer may run: the TilingData (or whatever the op's ``run`` takes), the free choices that
    produced it as ``params`` (block_dim, tile, buffer_num, split, ...: short names, plain values, the same keys
    for every candidate of an op), and whether it is the tiling the op's host code picks by itself."""

    tiling: Any
    params: dict[str, Any]
    official: bool = False


@dataclass(frozen=True)
class OpSpec:
    """An op as the explorer sees it.

    - ``make_inputs(shape, dtype, seed)``: realistic named inputs for ``shape`` (the op's own shape notation, see
      ``shape_help``) and ``dtype`` ("fp32", "bf16", "fp16").
    - ``candidates(inputs, soc)``: every legal tiling (it fits the UB, its lengths are 32 B aligned, the op's
      tiling check accepts it), the official one among them and marked.
    - ``run(inputs, tiling, soc)``: the outputs of the tiled kernel run with that tiling (fast mode).
    - ``reference(inputs)``: the untiled float64 math, one array per output, in the same order.
    - ``bounds(inputs)`` (optional): per output, what fp32 rounding can do to it (an
      :class:`~tilesim.precision.ErrorBound`), so that an output further off than that is judged wrong rather
      than imprecise. Without it no output is judged wrong, only against the standard.
    - ``accumulations(tiling)`` (optional): per output summed in fp32, its longest sum with that tiling
      (:class:`Accumulation`), which the explorer names beside a tiling that fails the standard.
    """

    name: str
    dtypes: tuple[str, ...]
    default_shape: tuple[int, ...]
    shape_help: str
    make_inputs: Callable[[tuple[int, ...], str, int], Inputs]
    candidates: Callable[[Inputs, SocSpec], Sequence[Candidate]]
    run: Callable[[Inputs, Any, SocSpec], tuple[np.ndarray, ...]]
    reference: Callable[[Inputs], tuple[np.ndarray, ...]]
    output_names: tuple[str, ...]
    doc: str = field(default="", compare=False)
    bounds: Callable[[Inputs], tuple[ErrorBound, ...]] | None = None
    accumulations: Callable[[Any], dict[str, Accumulation]] | None = None
