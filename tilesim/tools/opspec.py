"""What the explorer, the trace command and the run report need to know about an op: an :class:`OpSpec`.

The shipped ops have theirs in ``tilesim.kernels.op_specs``; a user's own kernel (a ``@kernel`` on
:mod:`tilesim.machine` and a tiling dataclass) gets the same report, trace and sweep by building one. The machine
never imports an op: the command line finds the specs by module name (``tilesim.kernels.op_specs`` by default,
``--ops mypkg.myops`` for more).
"""

from __future__ import annotations

import functools
import math
import reprlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any

import ml_dtypes
import numpy as np

from tilesim.errors import AclnnError, tiling_error
from tilesim.precision import ErrorBound
from tilesim.soc import SocSpec

Inputs = dict[str, Any]
"""An op's inputs by name, as ``OpSpec.make_inputs`` makes them and ``run`` and ``reference`` take them."""
DTYPES = {"fp32": np.dtype(np.float32), "bf16": np.dtype(ml_dtypes.bfloat16), "fp16": np.dtype(np.float16)}


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


def uniform_inputs(*names: str, low: float = -2.0, high: float = 2.0) -> Callable[[tuple[int, ...], str, int],
                                                                                Inputs]:
    """A ``make_inputs`` for an op whose inputs are arrays of one shape and dtype: each of ``names`` uniform in
    [low, high), drawn in fp32 and rounded to the dtype, the same for a seed."""
    def make_inputs(shape: tuple[int, ...], dtype: str, seed: int = 0) -> Inputs:
        rng = np.random.default_rng(seed)
        return {k: rng.uniform(low, high, shape).astype(np.float32).astype(DTYPES[dtype]) for k in names}

    return make_inputs


# ----------------------------------------------------------------------------------------------------------------
# Building an op's sweep (``candidates``) and checking a hand-made tiling: the shipped ops' and a user's alike.

TILES = 3  # explicit tile sizes per sweep: the smallest, one between, the largest that fits


def core_counts(soc: SocSpec) -> list[int]:
    """1, 2, 4, ... below the SoC's core count (GetCoreNumAiv), then that count (what the official tilings use)."""
    n = soc.core_num_aiv
    return sorted({1 << i for i in range(n.bit_length()) if 1 << i < n} | {n})


def tile_sizes(fits: Callable[[int], bool], lo: int, hi: int, step: int = 1, count: int = TILES) -> list[int]:
    """Up to ``count`` tile sizes, multiples of ``step``: ``lo`` (rounded up to a step, at most ``hi``), the
    largest size up to ``hi`` that ``fits``, and between them sizes spread geometrically, rounded to a power of
    two steps. ``fits`` must be monotonic (a larger tile never fits where a smaller one does not): the largest
    is found by bisection, so a sweep costs a few tiling calls, not one per size. Empty when ``lo`` does not
    fit."""
    u_hi = hi // step
    if u_hi < 1:
        return []
    u_lo = min(-(-lo // step), u_hi)
    if not fits(u_lo * step):
        return []
    a, b = u_lo, u_hi
    while a < b:
        mid = (a + b + 1) // 2
        if fits(mid * step):
            a = mid
        else:
            b = mid - 1
    units = {u_lo, a}
    for i in range(1, count - 1):
        v = u_lo * (a / u_lo) ** (i / (count - 1))
        units.add(min(max(1 << round(math.log2(v)), u_lo), a))
    return [u * step for u in sorted(units)]


def legal(make: Callable[..., Any], **overrides: Any) -> Any | None:
    """``make(**overrides)``: a tiling its checks accept, or None where the tiling function, the tiling check or
    the UB plan refuses it (an AclnnError; UbOverflowError is one)."""
    try:
        return make(**overrides)
    except AclnnError:
        return None


def with_tiles(make: Callable[..., Any], fixed: dict[str, Any], tile: Callable[[int], dict[str, Any]], lo: int,
               hi: int, step: int = 1, *, own: bool = True, count: int = TILES) -> Iterator[Any]:
    """The legal tilings of ``make(**fixed)`` (the op's own tile for those choices; not with ``own=False``) and of
    ``make(**fixed, **tile(size))`` for ``count`` :func:`tile_sizes` between ``lo`` and ``hi``."""
    def at(size: int) -> Any | None:
        return legal(make, **fixed, **tile(size))

    sizes = tile_sizes(lambda s: at(s) is not None, lo, hi, step, count)
    for t in (legal(make, **fixed) if own else None, *(at(s) for s in sizes)):
        if t is not None:
            yield t


def collect(official: Any, tilings: Iterable[Any], params: Callable[[Any], dict[str, Any]]) -> list[Candidate]:
    """The official tiling first, then the swept ones in order, each once; params come from the tiling itself, so
    equal tilings have equal params."""
    unique = dict.fromkeys([official, *tilings])
    return [Candidate(t, params(t), official=t == official) for t in unique]


def match_tiling(t: Any, make: Callable[..., Any], *args: Any, **arguments: Any) -> Any:
    """A hand-made tiling checked against what the tiling function derives from its free choices: ``t`` must be of
    the class ``make(*args, **arguments)`` (the official tiling) is, each field of the type that field holds
    there, and equal field for field to ``make(*args, **arguments, **choices)``, the choices read from the fields
    that carry them (the tiling class's ``choice_fields()``: each override of the tiling function, and the field
    it sets or None where the tiling does not take it). Returns that re-made tiling, equal to ``t`` and with the
    field types the kernel was compiled for.

    The arguments' own errors are raised as the tiling function raises them; the tiling's are 561002: ``tiling``
    for an object of another class (a dict, another op's tiling), ``tiling.<field>`` for a field of the wrong type,
    a free choice the tiling function refuses (with the rule it refuses it by) or the first field that differs
    from the derived one (its value and the derived value). Nothing is built from a field's value before it is
    checked: a count of 2**31 is a mismatch, not a loop."""
    official = make(*args, **arguments)
    cls = type(official)
    if type(t) is not cls:
        raise tiling_error("tiling", f"must be a {cls.__module__}.{cls.__qualname__} (what {make.__name__} makes), "
                                     f"got {type(t).__module__}.{type(t).__qualname__}")
    _same_types(t, official, "tiling")
    carriers = t.choice_fields()
    choices = {c: None if f is None else getattr(t, f) for c, f in carriers.items()}
    said = ", ".join(f"{c}={v!r}" if f in (None, c) else f"{c}={v!r} ({f})"
                     for (c, v), f in zip(choices.items(), carriers.values(), strict=True))
    try:
        want = make(*args, **arguments, **choices)
    except AclnnError as e:
        refused = [c for c in carriers if carriers[c] and e.message.startswith(f"{c}:")]
        if refused:
            c = refused[0]
            raise tiling_error(f"tiling.{carriers[c]}", f"{choices[c]!r} is refused as the tiling function's {c}: "
                                                        f"{e.message}") from None
        raise tiling_error("tiling", f"its free choices ({said}) are refused: {e.message}") from None
    for f in fields(cls):
        v, w = getattr(t, f.name), getattr(want, f.name)
        if not (v == w or (v != v and w != w)):  # NaN equals NaN here: a derived float may be one
            raise tiling_error(f"tiling.{f.name}", f"is {v!r} but the arguments and the free choices ({said}) give "
                                                   f"{w!r}")
    return want


_PLAIN = frozenset((int, float, bool, str))


@functools.cache
def _field_names(cls: type) -> tuple[str, ...] | None:
    """The fields of dataclass ``cls``, in order; None for a class that is not one."""
    return tuple(f.name for f in fields(cls)) if is_dataclass(cls) else None


def _same_types(v: Any, w: Any, name: str) -> None:
    """``v`` (a hand-made tiling's field) of the type ``w`` (the official tiling's) has, dataclasses and tuples
    field by field and element by element: an int field takes an int or a numpy integer, a float field a real
    number, a bool field a bool; so comparing them is a plain comparison (an array would not give one)."""
    tw = type(w)
    if type(v) is tw and tw in _PLAIN:  # the common case, first: the explorer checks every candidate this way
        return
    names = _field_names(tw)
    if names is not None:
        if type(v) is not tw:
            raise tiling_error(name, f"must be a {tw.__qualname__}, got {type(v).__qualname__}")
        for n in names:
            _same_types(getattr(v, n), getattr(w, n), f"{name}.{n}")
        return
    if isinstance(w, tuple):
        if type(v) is not tuple or len(v) != len(w):
            raise tiling_error(name, f"must be a tuple of {len(w)}, got {type(v).__name__}")
        for i, (a, b) in enumerate(zip(v, w, strict=True)):
            _same_types(a, b, f"{name}[{i}]")
        return
    if isinstance(w, bool | np.bool_):
        kind, ok = "a bool", isinstance(v, bool | np.bool_)
    elif isinstance(w, int | np.integer):
        kind, ok = "an integer", isinstance(v, int | np.integer) and not isinstance(v, bool | np.bool_)
    elif isinstance(w, float | np.floating):
        kind, ok = "a real number", isinstance(v, int | float | np.integer | np.floating) and not isinstance(
            v, bool | np.bool_)
    elif isinstance(w, str):
        kind, ok = "a str", isinstance(v, str)
    else:
        return
    if not ok:
        raise tiling_error(name, f"must be {kind}, got {type(v).__name__} {reprlib.repr(v)}")
