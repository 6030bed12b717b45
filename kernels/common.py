"""Host-side helpers every op API shares: numpy arrays to GM tensors and back, ``out=`` checking, checked mode's
default."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ml_dtypes
import numpy as np

from tilesim.cast import KIND_BF16, KIND_FP16
from tilesim.errors import invalid
from tilesim.launch import checks_enabled, scratch
from tiling.common import BF16, FP16, FP32, dtype_name

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


def write_targets(outs: Sequence[np.ndarray | None], checks: bool,
                  inputs: Sequence[Any] = ()) -> list[np.ndarray | None]:
    """Where a launch writes each of ``outs`` (None stays None): the array itself, or this host thread's reused
    temporary of its shape and dtype when the run is checked (a violation must leave the caller's arrays as they
    were) or an output overlaps one of ``inputs`` (the kernel would read what it had written). :func:`copy_back`
    moves the results in."""
    if not checks and not _overlap(outs, inputs):
        return list(outs)
    return [None if o is None else scratch(f"output {k}", o.shape, o.dtype) for k, o in enumerate(outs)]


def _owner(a: np.ndarray) -> bool:
    """``a`` allocated its own memory: two such arrays that are distinct objects share none."""
    return a.base is None and a.flags.owndata


def _overlap(outs: Sequence[np.ndarray | None], inputs: Sequence[Any]) -> bool:
    """Whether an output may share memory with an input array. Distinct arrays that own their memory (the usual
    case) are told apart without ``np.may_share_memory``, whose calls (one per pair) a small call paid for."""
    ins = [(i, _owner(i)) for i in inputs if isinstance(i, np.ndarray)]
    for o in outs:
        if o is None:
            continue
        own = _owner(o)
        for i, i_own in ins:
            if (o is i or not (own and i_own)) and np.may_share_memory(o, i):
                return True
    return False


def copy_back(outs: Sequence[np.ndarray | None], targets: Sequence[np.ndarray | None]) -> None:
    """The results of a launch into :func:`write_targets`'s temporaries, into the caller's arrays."""
    for o, t in zip(outs, targets, strict=True):
        if o is not None and t is not o:
            o[...] = t


def gm_out(a: np.ndarray) -> np.ndarray:
    """The bytes of a C-contiguous output array, as a kernel's GlobalTensor holds them (writes land in ``a``)."""
    return a.reshape(-1).view(U8)


def checks_default(checks: bool | None) -> bool:
    """``checks=None`` follows the TILESIM_CHECKS environment variable; ``pytest --tilesim-checks`` forces it on
    (:func:`tilesim.launch.checks_enabled`)."""
    return checks_enabled(checks)
