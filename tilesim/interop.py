"""Torch CPU tensors in and out of an op function, without copies.

:func:`accepts_torch` wraps an op function (numpy in, numpy out): a ``torch.Tensor`` among its arguments, or in its
``out=`` tuple, is passed on as a numpy array over the tensor's memory (``Tensor.numpy()``; bfloat16, which numpy
does not know, as an int16 view read as ``ml_dtypes.bfloat16``), and the results come back as tensors over the
arrays' memory, ``out=`` tensors as the caller's own objects. A call with no tensor in it is the op function's
call as it was, and torch is never imported here: a process without torch pays one dictionary lookup.
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
    """A CPU tensor's memory as a numpy array of its shape, strides and dtype (no copy). Autograd is left out
    (``detach``): the kernels see values. A tensor on another device is refused (161002): tilesim runs on the host,
    and a silent copy to it would hide the transfer."""
    if not t.is_cpu:
        raise invalid(name, f"a torch tensor must be on the CPU, got device {t.device}")
    if t.requires_grad:
        t = t.detach()
    torch = sys.modules["torch"]  # imported: here is one of its tensors
    bf16 = t.dtype is torch.bfloat16
    if bf16:
        t = t.view(torch.int16)
    try:
        a = t.numpy()
    except RuntimeError:  # a conjugate or negative view: numpy() wants the bits resolved
        a = t.resolve_conj().resolve_neg().numpy()
    return a.view(_BF16) if bf16 else a


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
    # the usual arguments passed over by their exact type, in plain loops: a call without tensors pays about a µs
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


def accepts_torch(op: F) -> F:
    """``op`` taking torch CPU tensors as well as numpy arrays: see the module. With a tensor in the call, every
    array the op returns is a tensor, but for an ``out=`` numpy array, which comes back as itself; an ``out=``
    tensor must not require grad (torch's own ``out=`` rule: the write is not differentiable) and must be
    C-contiguous, as an ``out=`` array must."""
    names = list(inspect.signature(op).parameters)

    modules = sys.modules

    @functools.wraps(op)
    def with_tensors(*args: Any, **kwargs: Any) -> Any:
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

    return with_tensors  # type: ignore[return-value]


__all__ = ["accepts_torch", "as_array", "to_numpy", "to_torch"]
