"""The element types of Ascend C (``half``, ``bfloat16_t``, ``float``, ``int32_t``, ...) as values a kernel passes
around: ``queue.alloc_tensor(float32)``, ``x.dtype``, ``t.reinterpret_cast(uint32)``.

Each is a Numba type of its own (an :class:`ElemType`), not a number: a tensor's element type is part of the
tensor's Numba type, so every instruction compiles for the types it meets, as an Ascend C template instantiates,
and costs nothing at run time. In UB, half and bfloat16 are stored as their 16 bits (``storage``); the
instructions do their arithmetic as the NPU does (half through fp32, rounded once, which is exact for + - * / and
sqrt).
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
from numba.extending import overload

from tilesim.jit import OVERLOAD_OPTIONS
from tilesim.machine.structs import ConstantType, constant_type


class DType:
    """An Ascend C element type: its C++ name, the numpy dtype of host arrays, the numpy type it is stored as in
    UB, its size in bytes and whether it is a float."""

    def __init__(self, name: str, numpy: Any, storage: Any, is_float: bool) -> None:
        self.name, self.numpy, self.storage, self.is_float = name, np.dtype(numpy), storage, is_float
        self.size = self.numpy.itemsize

    def __repr__(self) -> str:
        return self.name

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return by_name, (self.name,)


half = DType("half", np.float16, np.uint16, True)
bfloat16 = DType("bfloat16_t", ml_dtypes.bfloat16, np.uint16, True)
float32 = DType("float", np.float32, np.float32, True)
int8 = DType("int8_t", np.int8, np.int8, False)
uint8 = DType("uint8_t", np.uint8, np.uint8, False)
int16 = DType("int16_t", np.int16, np.int16, False)
uint16 = DType("uint16_t", np.uint16, np.uint16, False)
int32 = DType("int32_t", np.int32, np.int32, False)
uint32 = DType("uint32_t", np.uint32, np.uint32, False)
int64 = DType("int64_t", np.int64, np.int64, False)
ALL = (half, bfloat16, float32, int8, uint8, int16, uint16, int32, uint32, int64)
_BY_NAME = {d.name: d for d in ALL}
_BY_NUMPY = {d.numpy: d for d in ALL if d is not uint16} | {np.dtype(np.uint16): uint16}


def by_name(name: str) -> DType:
    """The element type of its Ascend C name (``"float"``, ``"half"``, ``"bfloat16_t"``, ...)."""
    return _BY_NAME[name]


def dtype_of(dtype: Any) -> DType:
    """The element type of a numpy dtype (float16 is ``half``, ml_dtypes' bfloat16 ``bfloat16_t``)."""
    hit = _BY_NUMPY.get(dtype)  # an array's dtype: no np.dtype() call
    if hit is not None:
        return hit
    d = np.dtype(dtype)
    if d not in _BY_NUMPY:
        raise TypeError(f"no Ascend C element type for numpy {d}")
    return _BY_NUMPY[d]


class ElemType(ConstantType):
    """The Numba type of one :class:`DType` value."""

    @property
    def dt(self) -> DType:
        """The :class:`DType` this type stands for."""
        return self.value


constant_type(DType, ElemType)


def size_of(dtype):  # type: ignore[no-untyped-def]
    """``sizeof(T)``: the element type's size in bytes, a compile-time constant."""


@overload(size_of, jit_options=OVERLOAD_OPTIONS)
def _size_of(dtype):  # type: ignore[no-untyped-def]
    if isinstance(dtype, ElemType):
        n = dtype.dt.size
        return lambda dtype: n
    return None
