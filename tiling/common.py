"""Helpers every op's tiling shares: arithmetic as the C++ tilings do it, and reading shapes and dtypes."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import numpy as np

from tilesim.errors import null_error

FP32, FP16, BF16 = "float32", "float16", "bfloat16"
ITEMSIZE = {FP32: 4, FP16: 2, BF16: 2}
U32 = 0xFFFFFFFF


def ceil_div(a: int, b: int) -> int:
    return (a + b - 1) // b


def align_up(a: int, b: int) -> int:
    return ceil_div(a, b) * b


_DTYPE_NAMES: dict[Any, str] = {}


def dtype_name(t: Any) -> str:
    """'float32', 'float16', 'bfloat16' (ml_dtypes), or whatever numpy calls the dtype."""
    d = t.dtype
    try:
        return _DTYPE_NAMES[d]
    except (KeyError, TypeError):  # TypeError: an unhashable dtype-like object
        pass
    try:
        name = np.dtype(d).name
    except TypeError:
        return str(d)
    try:
        _DTYPE_NAMES[d] = name
    except TypeError:
        pass
    return name


def shape_of(t: Any) -> tuple[int, ...]:
    return tuple(int(s) for s in t.shape)


def numel(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def require(**tensors: Any) -> None:
    """None for a required tensor is ACLNN_ERR_PARAM_NULLPTR (161001)."""
    for name, t in tensors.items():
        if t is None:
            raise null_error(name)


@functools.lru_cache(maxsize=1024)
def device_form(form: Any, tiling: Any) -> Any:
    """A frozen TilingData as ``form``, the namedtuple its kernel takes (the fields of ``form``'s names, properties
    included), built once per tiling: a small call spent a tenth of its time rebuilding it."""
    return form(*(getattr(tiling, f) for f in form._fields))


def replace(tiling: Any, **changes: Any) -> Any:
    """A copy of a frozen TilingData with some fields changed: for hand-made (possibly inconsistent) tilings."""
    return dataclasses.replace(tiling, **changes)
