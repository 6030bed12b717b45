"""What a kernel calls: the Ascend C programming model under its own names (snake_case; the Ascend name in each
docstring). ``from tilesim.machine import *`` in a kernel module reads like ``using namespace AscendC``."""

from .datacopy import DataCopyExtParams, DataCopyPadExtParams, DataCopyParams, data_copy, data_copy_pad
from .dtypes import bfloat16, float32, half, int8, int16, int32, int64, uint8, uint16, uint32
from .pipe import VECCALC, VECIN, VECOUT, TBuf, TPipe, TQue
from .tensor import get_block_idx, get_block_num, get_user_workspace
from .vector import (
    MASK_PLACEHOLDER,
    BinaryRepeatParams,
    UnaryRepeatParams,
    abs_,
    add,
    adds,
    div,
    duplicate,
    exp,
    ln,
    max_,
    maxs,
    min_,
    mins,
    mul,
    muls,
    reciprocal,
    relu,
    rsqrt,
    set_mask_count,
    set_mask_norm,
    set_vector_mask,
    sqrt,
    sub,
)

__all__ = [
    "MASK_PLACEHOLDER", "VECCALC", "VECIN", "VECOUT", "BinaryRepeatParams", "DataCopyExtParams",
    "DataCopyPadExtParams", "DataCopyParams", "TBuf", "TPipe", "TQue", "UnaryRepeatParams", "abs_", "add", "adds",
    "bfloat16", "data_copy", "data_copy_pad", "div", "duplicate", "exp", "float32", "get_block_idx",
    "get_block_num", "get_user_workspace", "half", "int8", "int16", "int32", "int64", "ln", "max_", "maxs", "min_",
    "mins", "mul", "muls", "reciprocal", "relu", "rsqrt", "set_mask_count", "set_mask_norm", "set_vector_mask",
    "sqrt", "sub", "uint8", "uint16", "uint32",
]
