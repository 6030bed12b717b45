"""Helpers every op's tiling shares: arithmetic as the C++ tilings do it, and reading shapes and dtypes."""

from __future__ import annotations

import dataclasses
import functools
import math
import reprlib
import threading
from typing import Any

import numpy as np

from tilesim.errors import invalid, null_error

FP32, FP16, BF16 = "float32", "float16", "bfloat16"
ITEMSIZE = {FP32: 4, FP16: 2, BF16: 2}
U32 = 0xFFFFFFFF


def ceil_div(a: int, b: int) -> int:
    """``a / b`` rounded up, in integers (CeilDiv)."""
    return (a + b - 1) // b


def align_up(a: int, b: int) -> int:
    """``a`` rounded up to a multiple of ``b`` (AlignUp)."""
    return ceil_div(a, b) * b


_DTYPE_NAMES: dict[Any, str] = {}


def dtype_name(t: Any) -> str:
    """'float32', 'float16', 'bfloat16' (ml_dtypes, or torch's), or whatever numpy calls the dtype: a torch
    tensor's dtype is named as numpy names it (``torch.float32`` is 'float32'), so a tiling reads a tensor's
    ``.shape`` and ``.dtype`` as an array's."""
    d = t.dtype
    try:
        return _DTYPE_NAMES[d]
    except (KeyError, TypeError):  # TypeError: an unhashable dtype-like object
        pass
    try:
        name = np.dtype(d).name
    except TypeError:
        name = str(d)
        if not name.startswith("torch."):
            return name
        name = name.removeprefix("torch.")
    try:
        _DTYPE_NAMES[d] = name
    except TypeError:
        pass
    return name


def shape_of(t: Any) -> tuple[int, ...]:
    """A tensor's shape as a tuple of ints (an array's, a torch tensor's or a :class:`TensorMeta`'s)."""
    return tuple(map(int, t.shape))


def numel(shape: tuple[int, ...]) -> int:
    """The element count of ``shape`` (1 for a scalar's empty shape)."""
    n = 1
    for s in shape:
        n *= s
    return n


def require(**tensors: Any) -> None:
    """None for a required tensor is ACLNN_ERR_PARAM_NULLPTR (161001); anything without a ``.shape`` and a
    ``.dtype`` (a list given to a tiling function, which reads only those) is ACLNN_ERR_PARAM_INVALID (161002)."""
    for name, t in tensors.items():
        if t is None:
            raise null_error(name)
        if not (hasattr(t, "shape") and hasattr(t, "dtype")):
            raise invalid(name, f"must be an array or tensor (anything with .shape and .dtype), got "
                                f"{type(t).__name__}")


def integer(name: str, v: Any) -> int:
    """``v`` as an int where a parameter is an integer (an int64 of aclnn): an int or a numpy integer, not a bool,
    a float (1.5 would be truncated silently), a string or None (161002)."""
    if isinstance(v, bool | np.bool_) or not isinstance(v, int | np.integer):
        raise invalid(name, f"must be an integer, got {type(v).__name__} {reprlib.repr(v)}")
    return int(v)


def flag(name: str, v: Any) -> bool:
    """``v`` as a bool where a parameter is a bool: True or False (numpy's too), not 'yes' or 1 (161002)."""
    if not isinstance(v, bool | np.bool_):
        raise invalid(name, f"must be True or False, got {type(v).__name__} {reprlib.repr(v)}")
    return bool(v)


@dataclasses.dataclass(frozen=True)
class TensorMeta:
    """What a tiling reads of a tensor: its shape and dtype, no data."""

    shape: tuple[int, ...]
    dtype: Any


def _value_key(v: Any) -> Any:
    """``v`` with its type, so that equal keys mean interchangeable values: 1, 1.0, True and np.int64(1) are equal
    and hash alike in Python, but a check may refuse one of them; so may 0.0 and -0.0 (the sign goes in too)."""
    tp = type(v)
    if tp is bool or tp is int or tp is str:
        return tp, v
    if tp is float or isinstance(v, np.floating):
        return tp, v, math.copysign(1.0, v)
    if tp is tuple:
        return tp, tuple([_value_key(e) for e in v])
    hash(v)  # TypeError (a list, an array): the call is not remembered
    return tp, v


def _array_key(v: Any) -> Any:
    """An array-like read by value (``np.asarray``): its dtype, shape and bytes."""
    if v is None:
        return None
    a = np.asarray(v)
    if a.dtype.hasobject:
        raise TypeError("object arrays are not remembered")
    return a.dtype.str, a.shape, a.tobytes()


MEMO_SIZE = 1024  # entries per remembered function
_MISSING = object()


def remembered(tensors: int, by_value: tuple[int, ...] = ()) -> Any:
    """Memoise a tiling (or check) function whose first ``tensors`` positional parameters are tensors it reads
    only the ``.shape`` and ``.dtype`` of; positional parameters in ``by_value`` are array-likes it reads
    through ``np.asarray`` (NsaCompressGrad's actSeqLen); all other arguments must be hashable.

    On a miss the function runs on :class:`TensorMeta` stand-ins built from the key, so what it returns cannot
    depend on anything the key leaves out; a call that raises is not remembered (it raises every time), nor is a
    call the key cannot describe (tensors passed by keyword, a list argument), which runs as it is. A small call
    spent a fifth of its time making its tiling again."""
    def wrap(fn: Any) -> Any:
        memo: dict[tuple[Any, ...], Any] = {}
        lock = threading.Lock()  # for the eviction: op calls may come from several threads

        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            if len(args) < tensors:
                return fn(*args, **kwargs)
            try:
                key = [None if t is None else (t.shape, t.dtype) for t in args[:tensors]]
                if by_value:
                    key += [_array_key(v) if i in by_value else _value_key(v)
                            for i, v in enumerate(args[tensors:], tensors)]
                else:
                    key += map(_value_key, args[tensors:])
                if kwargs:
                    key += [(k, _value_key(v)) for k, v in kwargs.items()]
                key = tuple(key)
                out = memo.get(key, _MISSING)
            except (TypeError, AttributeError, ValueError):
                return fn(*args, **kwargs)
            if out is not _MISSING:
                return out
            # equal keys make this call's other arguments interchangeable with any other call's
            out = fn(*(None if k is None else TensorMeta(*k) for k in key[:tensors]), *args[tensors:], **kwargs)
            with lock:
                if len(memo) >= MEMO_SIZE:
                    del memo[next(iter(memo))]  # the oldest entry
                memo[key] = out
            return out

        call.cache_clear = memo.clear  # type: ignore[attr-defined]
        return call

    return wrap


def replace(tiling: Any, **changes: Any) -> Any:
    """A copy of a frozen TilingData with some fields changed: for hand-made (possibly inconsistent) tilings."""
    return dataclasses.replace(tiling, **changes)
