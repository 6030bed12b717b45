"""Host-side helpers every op API shares: new outputs and ``out=`` checking (shapes, dtypes, memory shared between
outputs); and :func:`to_float`, which kernels share. Where a launch writes its outputs
(:func:`tilesim.runtime.launch.write_targets`, which computes into temporaries where an output overlaps an input) is the
launch's business."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
from numba.extending import overload
from tilesim.tiling.common import BF16, FP16, FP32, dtype_name

from tilesim.errors import invalid
from tilesim.jit import OVERLOAD_OPTIONS
from tilesim.jit.intrinsics import u32_as_f32
from tilesim.numerics.b16 import KIND_BF16, KIND_FP16, b16_to_f32_bits
from tilesim.runtime.launch import shares_memory

NUMPY_DTYPE = {FP32: np.dtype(np.float32), FP16: np.dtype(np.float16), BF16: np.dtype(ml_dtypes.bfloat16)}


def new_output(shape: tuple[int, ...], dtype: str, fill: float | None = None) -> np.ndarray:
    """A new output array (``fill`` its value, or uninitialised): ``dtype`` a name (:func:`dtype_name`)."""
    dt = NUMPY_DTYPE.get(dtype) or np.dtype(dtype)
    return np.empty(shape, dt) if fill is None else np.full(shape, fill, dt)


def output(o: Any, name: str, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """``o``, an ``out=`` array, checked against the shape and dtype the op writes (a numpy array, C-contiguous
    and writeable: no conversion, as the op writes into its memory); a new array when ``o`` is None."""
    if o is None:
        return new_output(shape, dtype)
    if not isinstance(o, np.ndarray):
        raise invalid(name, f"out array must be a numpy array (or torch tensor) of shape {list(shape)} and dtype "
                            f"{dtype}, got {type(o).__name__}")
    if tuple(o.shape) != tuple(shape) or dtype_name(o) != dtype:
        raise invalid(name, f"out array must be of shape {list(shape)} and dtype {dtype}, got {list(o.shape)} "
                            f"{dtype_name(o)}")
    if not o.flags.c_contiguous or not o.flags.writeable:
        raise invalid(name, "out array must be C-contiguous and writeable")
    return o


def outputs(out: Any, *specs: tuple[str, tuple[int, ...], str] | None,
            fill: float | None = None) -> list[np.ndarray | None]:
    """The arrays an op with several outputs writes, one per spec (``(name, shape, dtype)``; None for an output
    the op does not make, whose ``out=`` entry is ignored): ``out`` is None or a tuple (or list) of one entry per
    output, each an array checked by :func:`output` or None for a new one (filled with ``fill`` if given). Arrays
    given must not share memory with each other: the op would write one over the other (161002 naming both)."""
    if out is not None and (not isinstance(out, tuple | list) or len(out) != len(specs)):
        names = ", ".join(s[0] if s else "None" for s in specs)
        got = f"{type(out).__name__} of length {len(out)}" if isinstance(out, tuple | list) else type(out).__name__
        raise invalid("out", f"must be None or a tuple of {len(specs)} arrays or Nones ({names}), got {got}")
    res: list[np.ndarray | None] = []
    given: list[tuple[str, np.ndarray]] = []
    for i, spec in enumerate(specs):
        o = None if out is None or spec is None else out[i]
        if spec is None:
            res.append(None)
        elif o is None:
            res.append(new_output(spec[1], spec[2], fill))
        else:
            res.append(output(o, *spec))
            given.append((spec[0], o))
    distinct(given)
    return res


def distinct(named: list[tuple[str, np.ndarray]]) -> None:
    """Output arrays that share no memory (161002 naming the first two that do): an op writing both would leave
    one's values in the other. Arrays that own their memory and are distinct objects share none."""
    for i, (a, x) in enumerate(named):
        for b, y in named[i + 1:]:
            if shares_memory(x, y):
                raise invalid(b, f"shares memory with {a}: each output needs its own memory")


def to_float(dtype, v):  # type: ignore[no-untyped-def]
    """``float(v)`` of a GetValue in a kernel (ToFloat for bfloat16_t; half and bfloat16 read as their bits)."""


@overload(to_float, jit_options=OVERLOAD_OPTIONS)
def _to_float(dtype, v):  # type: ignore[no-untyped-def]
    name = dtype.dt.name
    if name == "float":
        return lambda dtype, v: v
    kind = KIND_BF16 if name == "bfloat16_t" else KIND_FP16
    return lambda dtype, v: u32_as_f32(b16_to_f32_bits(v, kind))
