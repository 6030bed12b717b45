"""Torch CPU tensors in and out of an op function, without copies.

:func:`accepts_torch` wraps an op function (numpy in, numpy out): a ``torch.Tensor`` among its arguments, or in its
``out=`` tuple, is passed on as a numpy array over the tensor's memory (``Tensor.numpy()``; bfloat16, which numpy
does not know, as an int16 view read as ``ml_dtypes.bfloat16``), and the results come back as tensors over the
arrays' memory, ``out=`` tensors as the caller's own objects. A call with no tensor in it is the op function's
call as it was, and torch is never imported here: a process without torch pays one dictionary lookup.
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import ml_dtypes
import numpy as np

from tilesim.errors import invalid

F = TypeVar("F", bound=Callable[..., Any])
_BF16 = np.dtype(ml_dtypes.bfloat16)
_I16 = np.dtype(np.int16)


def to_numpy(t: Any, name: str) -> np.ndarray:
    """A CPU tensor's memory as a numpy array of its shape, strides and dtype (no copy). Autograd is left out
    (``detach``): the kernels see values. A tensor on another device is refused (161002): tilesim runs on the host,
    and a silent copy to it would hide the transfer."""
    import torch

    if t.device.type != "cpu":
        raise invalid(name, f"a torch tensor must be on the CPU, got device {t.device}")
    t = t.detach().resolve_conj().resolve_neg()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(_BF16)
    return t.numpy()


def as_array(a: Any, name: str = "array") -> np.ndarray:
    """``a`` as a numpy array: a torch tensor by :func:`to_numpy`, anything else by ``np.asarray``."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(a, torch.Tensor):
        return to_numpy(a, name)
    return np.asarray(a)


def to_torch(a: np.ndarray) -> Any:
    """A numpy array's memory as a tensor (``torch.from_numpy``; ml_dtypes' bfloat16 through an int16 view)."""
    import torch

    if a.dtype == _BF16:
        return torch.from_numpy(a.view(_I16)).view(torch.bfloat16)
    return torch.from_numpy(a)


_PLAIN = frozenset({np.ndarray, int, float, bool, str, type(None)})  # what an op's arguments mostly are


def _any_tensor(tensor: type, args: tuple[Any, ...], values: Any) -> bool:
    # plain loops, the usual arguments passed over by their exact type: a call without tensors pays about a µs
    for a in args:
        if type(a) not in _PLAIN and isinstance(a, tensor):
            return True
    for v in values:
        t = type(v)
        if t in _PLAIN:
            continue
        if t is tuple or t is list:  # out=, or an op's tuple argument (a mask)
            for o in v:
                if type(o) not in _PLAIN and isinstance(o, tensor):
                    return True
        elif isinstance(v, tensor):
            return True
    return False


def accepts_torch(op: F) -> F:
    """``op`` taking torch CPU tensors as well as numpy arrays: see the module. With a tensor in the call, every
    array the op returns is a tensor, but for an ``out=`` numpy array, which comes back as itself; an ``out=``
    tensor must not require grad (torch's own ``out=`` rule: the write is not differentiable) and must be
    C-contiguous, as an ``out=`` array must."""
    names = list(inspect.signature(op).parameters)

    @functools.wraps(op)
    def with_tensors(*args: Any, **kwargs: Any) -> Any:
        torch = sys.modules.get("torch")
        if torch is None:
            return op(*args, **kwargs)
        tensor = torch.Tensor
        if not _any_tensor(tensor, args, kwargs.values()):
            return op(*args, **kwargs)
        out = kwargs.get("out")
        outs = out if isinstance(out, (tuple, list)) else (out,)
        args = tuple(to_numpy(a, names[i]) if isinstance(a, tensor) else a for i, a in enumerate(args))
        kwargs = {k: to_numpy(v, k) if isinstance(v, tensor) and k != "out" else v for k, v in kwargs.items()}
        given: dict[int, Any] = {}  # id of an out= array -> the caller's tensor or array
        arrays = []
        for o in outs:
            if isinstance(o, tensor):
                if o.requires_grad:
                    raise invalid("out", "an out= tensor must not require grad: the write is not differentiable")
                a = to_numpy(o, "out")
                given[id(a)] = o
                o = a
            elif isinstance(o, np.ndarray):
                given[id(o)] = o
            arrays.append(o)
        if out is not None:
            kwargs["out"] = tuple(arrays) if isinstance(out, (tuple, list)) else arrays[0]
        result = op(*args, **kwargs)

        def back(r: Any) -> Any:
            if isinstance(r, np.ndarray):
                return given[id(r)] if id(r) in given else to_torch(r)
            return r

        return tuple(back(r) for r in result) if isinstance(result, tuple) else back(result)

    return with_tensors  # type: ignore[return-value]


__all__ = ["accepts_torch", "as_array", "to_numpy", "to_torch"]
