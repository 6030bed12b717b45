"""What a kernel calls: the Ascend C programming model under its own names (snake_case; the Ascend name in each
docstring). A kernel module imports what it uses from here, as an Ascend C kernel uses ``namespace AscendC``."""

from tilesim.core.pipes import PIPE_ALL, PIPE_MTE2, PIPE_MTE3, PIPE_S, PIPE_V
from tilesim.machine.compare import CMPMODE, SELMODE, compare, compare_scalar, select
from tilesim.machine.convert import axpy, cast
from tilesim.machine.datacopy import (
    DataCopyExtParams,
    DataCopyPadExtParams,
    DataCopyParams,
    data_copy,
    data_copy_pad,
    init_output,
    set_atomic_add,
    set_atomic_none,
)
from tilesim.machine.dtypes import bfloat16, float32, half, int8, int16, int32, int64, size_of, uint8, uint16, uint32
from tilesim.machine.pipe import VECCALC, VECIN, VECOUT, TBuf, TPipe, TQue, pop_stack_buffer
from tilesim.machine.rearrange import broadcast, gather, transpose
from tilesim.machine.reduce import (
    BrcbRepeatParams,
    ReduceOrder,
    block_reduce_max,
    block_reduce_min,
    block_reduce_sum,
    brcb,
    pair_reduce_sum,
    reduce_max,
    reduce_min,
    reduce_sum,
    whole_reduce_max,
    whole_reduce_min,
    whole_reduce_sum,
)
from tilesim.machine.sync import (
    HardEvent,
    pipe_barrier,
    set_flag,
    sync_all,
    wait_flag,
)
from tilesim.machine.tensor import get_block_idx, get_block_num, get_user_workspace
from tilesim.machine.vector import (
    MASK_PLACEHOLDER,
    BinaryRepeatParams,
    CopyRepeatParams,
    UnaryRepeatParams,
    abs_,
    add,
    adds,
    copy,
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
from tilesim.numerics.b16 import CAST_CEIL, CAST_FLOOR, CAST_NONE, CAST_ODD, CAST_RINT, CAST_ROUND, CAST_TRUNC

__all__ = [
    "PIPE_ALL", "PIPE_MTE2", "PIPE_MTE3", "PIPE_S", "PIPE_V", "HardEvent", "pipe_barrier", "set_flag", "wait_flag",
    "set_atomic_add", "set_atomic_none", "sync_all", "init_output", "broadcast",
    "copy", "CopyRepeatParams",
    "CAST_CEIL", "CAST_FLOOR", "CAST_NONE", "CAST_ODD", "CAST_RINT", "CAST_ROUND", "CAST_TRUNC", "MASK_PLACEHOLDER",
    "VECCALC", "VECIN", "VECOUT", "pop_stack_buffer", "BinaryRepeatParams", "DataCopyExtParams", "DataCopyPadExtParams",
    "DataCopyParams", "TBuf", "TPipe", "TQue", "UnaryRepeatParams", "abs_", "add", "adds", "bfloat16", "cast",
    "data_copy", "data_copy_pad", "div", "duplicate", "exp", "float32", "get_block_idx", "get_block_num",
    "get_user_workspace", "half", "int8", "int16", "int32", "int64", "ln", "max_", "maxs", "min_", "mins", "mul",
    "muls", "reciprocal", "relu", "rsqrt", "set_mask_count", "set_mask_norm", "set_vector_mask", "size_of", "sqrt",
    "sub", "uint8", "uint16", "uint32",
    "BrcbRepeatParams", "ReduceOrder", "block_reduce_max", "block_reduce_min", "block_reduce_sum", "brcb",
    "pair_reduce_sum", "reduce_max", "reduce_min", "reduce_sum", "whole_reduce_max", "whole_reduce_min",
    "whole_reduce_sum",
    "CMPMODE", "SELMODE", "axpy", "compare", "compare_scalar", "gather", "select", "transpose",
]
