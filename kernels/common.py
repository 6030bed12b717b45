"""Host-side helpers every op API shares: numpy arrays to GM tensors and back, ``out=`` checking, checked mode's
default; and :func:`to_float`, which kernels share. Where a launch writes its outputs
(:func:`tilesim.launch.write_targets`) is the launch's business."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
from numba.extending import overload
from tilesim.tiling.common import BF16, FP16, FP32, dtype_name

from tilesim.cast import KIND_BF16, KIND_FP16, b16_to_f32_bits
from tilesim.errors import invalid
from tilesim.intrinsics import u32_as_f32
from tilesim.jit import OVERLOAD_OPTIONS
from tilesim.launch import checks_enabled, copy_back, write_targets  # noqa: F401  (the ops' names for them)

NUMPY_DTYPE = {FP32: np.dtype(np.float32), FP16: np.dtype(np.float16), BF16: np.dtype(ml_dtypes.bfloat16)}
KIND = {FP32: 0, FP16: KIND_FP16, BF16: KIND_BF16}
U8 = np.dtype(np.uint8)  # a dtype object: ndarray.view(np.uint8) converts the type on every call


def to_gm(a: Any) -> np.ndarray:
    """The bytes of a flat, C-contiguous view (a copy only when needed), as a kernel's GlobalTensor holds them.
    The caller's array is never written."""
    return np.ascontiguousarray(a).reshape(-1).view(U8)


def output(out: Any, index: int, name: str, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """``out[index]`` checked against the shape and dtype the op writes, or a new array."""
    if out is None or out[index] is None:
        return np.empty(shape, NUMPY_DTYPE[dtype])
    o = out[index]
    if not isinstance(o, np.ndarray) or tuple(o.shape) != tuple(shape) or dtype_name(o) != dtype:
        raise invalid(name, f"out array must be a numpy array of shape {list(shape)} and dtype {dtype}, got "
                            f"{getattr(o, 'shape', None)} {getattr(o, 'dtype', type(o).__name__)}")
    if not o.flags.c_contiguous or not o.flags.writeable:
        raise invalid(name, "out array must be C-contiguous and writeable")
    return o


def checks_default(checks: bool | None) -> bool:
    """``checks=None`` follows the TILESIM_CHECKS environment variable; ``pytest --tilesim-checks`` forces it on
    (:func:`tilesim.launch.checks_enabled`)."""
    return checks_enabled(checks)


def to_float(dtype, v):  # type: ignore[no-untyped-def]
    """``float(v)`` of a GetValue in a kernel (ToFloat for bfloat16_t; half and bfloat16 read as their bits)."""


@overload(to_float, jit_options=OVERLOAD_OPTIONS)
def _to_float(dtype, v):  # type: ignore[no-untyped-def]
    name = dtype.dt.name
    if name == "float":
        return lambda dtype, v: v
    kind = KIND_BF16 if name == "bfloat16_t" else KIND_FP16
    return lambda dtype, v: u32_as_f32(b16_to_f32_bits(v, kind))
