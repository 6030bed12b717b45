"""Torch CPU tensors in and out of an op function, without copies.

:func:`accepts_torch` wraps an op function (numpy in, numpy out): a ``torch.Tensor`` among its arguments, or in its
``out=`` tuple, is passed on as a numpy array over the tensor's memory (``Tensor.numpy()``; bfloat16, which numpy
does not know, as an int16 view read as ``ml_dtypes.bfloat16``), and the results come back as tensors over the
arrays' memory, ``out=`` tensors as the caller's own objects. A call with no tensor in it is the op function's
call as it was, and torch is never imported here: a process without torch pays one dictionary lookup. The op's
input parameters named to it also take array-likes (a list of numbers), read as numpy reads them.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import ml_dtypes
import numpy as np

from tilesim.errors import invalid

F = TypeVar("F", bound=Callable[..., Any])
_BF16 = np.dtype(ml_dtypes.bfloat16)


def _torch() -> Any:
    """The torch module, imported (here only where a tensor exists, or a caller asked for one)."""
    return sys.modules.get("torch") or importlib.import_module("torch")
_I16 = np.dtype(np.int16)


def to_numpy(t: Any, name: str) -> np.ndarray:
    """A CPU tensor's memory as a numpy array of its shape, strides and dtype (no copy; a negative or conjugate
    view's values are resolved into a copy, as its memory holds other values than it shows). Autograd is left out
    (``detach``): the kernels see values. Refused (161002): a tensor on another device (tilesim runs on the host,
    and a silent copy to it would hide the transfer), a sparse or otherwise non-strided one, and a dtype numpy
    has no form of (quantized, float8)."""
    if not t.is_cpu:
        raise invalid(name, f"a torch tensor must be on the CPU, got device {t.device}")
    torch = sys.modules["torch"]  # imported: here is one of its tensors
    if t.layout is not torch.strided:
        raise invalid(name, f"a torch tensor must be dense (strided), got layout {t.layout}: convert it with "
                            ".to_dense()")
    if t.requires_grad:
        t = t.detach()
    if t.is_neg() or t.is_conj():
        t = t.resolve_neg().resolve_conj()
    bf16 = t.dtype is torch.bfloat16
    if bf16:
        t = t.view(torch.int16)
    try:
        a = t.numpy()
    except TypeError:  # "Got unsupported ScalarType"
        raise invalid(name, f"dtype {t.dtype} has no numpy equivalent") from None
    return a.view(_BF16) if bf16 else a


def array_like(a: Any, name: str) -> Any:
    """An op's tensor argument as the op reads it: an array as it is; None (the op's null check refuses it) and a
    torch tensor (:func:`accepts_torch` converts it) as they are; an array-like (a list, a scalar, anything
    ``np.asarray`` reads) as an array, whose dtype the op then checks as an array's (a list of Python floats is
    float64). What numpy cannot read as numbers is refused (161002)."""
    if a is None or isinstance(a, np.ndarray):
        return a
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(a, torch.Tensor):
        return a
    try:
        arr = np.asarray(a)
    except (ValueError, TypeError):  # a ragged list, an object numpy cannot read
        arr = None
    if arr is None or arr.dtype.kind in "OSU":
        raise invalid(name, f"must be an array or tensor (or a list of numbers), got {type(a).__name__}")
    return arr


def as_array(a: Any, name: str = "array") -> np.ndarray:
    """``a`` as a numpy array: a torch tensor by :func:`to_numpy`, anything else by ``np.asarray``."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(a, torch.Tensor):
        return to_numpy(a, name)
    return np.asarray(a)


def to_torch(a: np.ndarray) -> Any:
    """A numpy array's memory as a tensor (``torch.from_numpy``; ml_dtypes' bfloat16 through an int16 view)."""
    torch = _torch()
    if a.dtype == _BF16:
        return torch.from_numpy(a.view(_I16)).view(torch.bfloat16)
    return torch.from_numpy(a)


_PLAIN = frozenset({np.ndarray, int, float, bool, str, type(None)})  # what an op's arguments mostly are


def _any_tensor(tensor: type, args: tuple[Any, ...], values: Any, plain: frozenset[type] = _PLAIN) -> bool:
    # the usual arguments passed over by their exact type, in plain loops: a call without tensors stays cheap
    for a in args:
        if type(a) not in plain and isinstance(a, tensor):
            return True
    for v in values:
        if type(v) in plain:
            continue
        if type(v) is tuple or type(v) is list:  # out=, or an op's tuple argument (a mask)
            for o in v:
                if type(o) not in plain and isinstance(o, tensor):
                    return True
        elif isinstance(v, tensor):
            return True
    return False


def _outs(out: Any, tensor: type, given: dict[int, Any]) -> Any:
    """``out=`` with its tensors as arrays; ``given`` learns which array is whose."""
    many = isinstance(out, (tuple, list))
    arrays = []
    for o in out if many else (out,):
        if isinstance(o, tensor):
            if o.requires_grad:
                raise invalid("out", "an out= tensor must not require grad: the write is not differentiable")
            if o.is_neg() or o.is_conj():
                raise invalid("out", "an out= tensor must not be a negative or conjugate view: its memory holds "
                                     "other values than it shows, so a write to it would not be what it shows")
            a = to_numpy(o, "out")
            given[id(a)] = o
            o = a
        elif isinstance(o, np.ndarray):
            given[id(o)] = o
        arrays.append(o)
    return tuple(arrays) if many else arrays[0]


def _back(r: Any, given: dict[int, Any]) -> Any:
    """A result as the caller passed it (an ``out=`` tensor or array), or as a tensor."""
    if type(r) is not np.ndarray:
        return r
    mine = given.get(id(r))
    return to_torch(r) if mine is None else mine


def accepts_torch(op: F | None = None, *, arrays: tuple[str, ...] = ()) -> Any:
    """``op`` taking torch CPU tensors as well as numpy arrays: see the module. With a tensor in the call, every
    array the op returns is a tensor, but for an ``out=`` numpy array, which comes back as itself; an ``out=``
    tensor must not require grad (torch's own ``out=`` rule: the write is not differentiable), must not be a
    negative or conjugate view (a write to its memory would not be what it shows) and must be C-contiguous, as
    an ``out=`` array must. The parameters named in ``arrays`` (the op's input tensors) also take array-likes
    (:func:`array_like`). Used bare (``@accepts_torch``) or with ``arrays`` (``@accepts_torch(arrays=(...))``)."""
    if op is None:
        return functools.partial(accepts_torch, arrays=arrays)
    names = list(inspect.signature(op).parameters)
    positions = [(i, n) for i, n in enumerate(names) if n in arrays]

    modules = sys.modules

    @functools.wraps(op)
    def with_tensors(*args: Any, **kwargs: Any) -> Any:
        if positions:
            args, kwargs = _array_likes(args, kwargs, positions)
        torch = modules.get("torch")
        if torch is None or not _any_tensor(torch.Tensor, args, kwargs.values()):
            return op(*args, **kwargs)
        tensor = torch.Tensor
        args = tuple(to_numpy(a, names[i]) if isinstance(a, tensor) else a for i, a in enumerate(args))
        given: dict[int, Any] = {}  # id of an out= array -> the caller's tensor or array
        for k, v in kwargs.items():
            if k == "out":
                kwargs[k] = _outs(v, tensor, given)
            elif isinstance(v, tensor):
                kwargs[k] = to_numpy(v, k)
        result = op(*args, **kwargs)
        if type(result) is tuple:
            return tuple(_back(r, given) for r in result)
        return _back(result, given)

    return with_tensors


def _array_likes(args: tuple[Any, ...], kwargs: dict[str, Any],
                 positions: list[tuple[int, str]]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The call with its array parameters read by :func:`array_like`; a call of arrays (the usual case) is
    returned as it is, looked over by exact type."""
    n = len(args)
    listed = None
    for i, name in positions:
        if i < n:
            v = args[i]
            if type(v) is not np.ndarray and v is not None:
                if listed is None:
                    listed = list(args)
                listed[i] = array_like(v, name)
        elif name in kwargs:
            v = kwargs[name]
            if type(v) is not np.ndarray and v is not None:
                kwargs[name] = array_like(v, name)
    return (args if listed is None else tuple(listed)), kwargs


__all__ = ["accepts_torch", "array_like", "as_array", "to_numpy", "to_torch"]
