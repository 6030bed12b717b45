"""DataCopy and DataCopyPad between a GlobalTensor and a LocalTensor, in the units of the Ascend C API.

- ``data_copy(dst, src, count)``: contiguous; ``count`` elements, a whole number of 32 B blocks: the NPU moves
  the length rounded down to 32 B and drops the rest silently, and so does tilesim (checked mode reports it).
- ``data_copy(dst, src, DataCopyParams(block_count, block_len, src_stride, dst_stride))``: ``block_count`` rows of
  ``block_len`` 32 B blocks; the strides are the gaps between rows, in 32 B blocks on both sides.
- ``data_copy(dst_ub, src_ub, count or DataCopyParams)``: UB to UB, on the vector pipe (counted as a Duplicate's
  class: its 256 B repeats).
- ``data_copy_pad(dst_ub, src_gm, DataCopyExtParams(...), DataCopyPadExtParams(...))``: rows of ``block_len``
  bytes; the GM gap ``src_stride`` in bytes, the UB gap ``dst_stride`` in 32 B blocks; each UB row starts on a
  32 B boundary, ``left_padding`` and ``right_padding`` elements around the data, then dummy bytes to the row's
  32 B end (``DataCopyPad（GMToUB非对齐数据搬运）.md``, 参数解释 and 示例2): with no padding the dummy bytes repeat
  the row's first element (``is_pad`` or not); with padding, ``is_pad`` fills the padding and the dummy bytes
  with ``padding_value`` (a T: rounded to the type, as Duplicate's scalar), and without it they are undefined
  (tilesim writes ``padding_value``). Checked mode takes the undefined and the dummy bytes as never written:
  element-wise work on them is fine, a use of them (a reduction, a copy out, a GetValue) is a finding.
- ``data_copy_pad(dst_gm, src_ub, DataCopyExtParams(...))``: each UB row read from a 32 B boundary, exactly
  ``block_len`` bytes written to GM; the UB gap ``src_stride`` in 32 B blocks, the GM gap ``dst_stride`` in bytes.
- ``init_output(dst_gm, size, value)``: InitOutput (``kernel_operator_common_intf_impl.h``; deprecated for Fill):
  ``size`` elements of GM set to ``value``. On A2 it Duplicates ``value`` into a stack buffer of UB past the
  TPipe's, waits V_MTE3 (an id from FetchEventID) and DataCopyPads that buffer out in bursts of 2040 floats; here
  the UB side is not modelled: the syncs are made and counted, the fill is counted as one MTE3 transfer of ``size``
  elements from no UB tensor, no vector repeats. float, half and bfloat16 (the types the ported kernels fill).
- ``set_atomic_add(ctx, float32)`` / ``set_atomic_none(ctx)``: SetAtomicAdd<T> / SetAtomicNone (DisableDmaAtomic):
  between them every copy to GM adds to what GM holds, as T (float, half, bfloat16, int32, int16, int8 on A2; a
  b16 sum rounded to nearest even). The adds land in core order (one of the orders the NPU may take), whatever
  the host threads: the adds a core makes before the cores ahead of it have finished the phase wait in a log
  (:mod:`tilesim.machine.atomic`).

Direction follows the operand types, as the overloads of the C++ API do. (DataCopyParams' fields are uint16 and
DataCopyExtParams' uint32; the emulator takes Python ints.)
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np
from numba import types
from numba.extending import overload

from tilesim.core.pipes import LANE_MTE2, LANE_MTE3, LANE_VECTOR
from tilesim.core.records import count_mte3
from tilesim.jit import OVERLOAD_OPTIONS, njit
from tilesim.machine.atomic import atomic_rows
from tilesim.machine.dtypes import ALL, ElemType
from tilesim.machine.hazard import hz_issue, hz_rows, op_code
from tilesim.machine.movers import fill_gm, gm_to_ub, out_ok, ub_to_gm, ub_to_ub, whole_blocks
from tilesim.machine.pipe import FAULT_DTYPE
from tilesim.machine.sync import HardEvent, fetch_id, set_event, wait_event
from tilesim.machine.tensor import (
    X_ATOMIC,
    GlobalTensorType,
    KernelContextType,
    LocalTensorType,
    core_of,
    ctx_words,
    fault,
    gm_view,
    plan_tensor,
)
from tilesim.machine.vector import element_bits, scalar_bits

DataCopyParams = namedtuple("DataCopyParams", ["block_count", "block_len", "src_stride", "dst_stride"],
                            defaults=(1, 0, 0, 0))
DataCopyExtParams = namedtuple("DataCopyExtParams", ["block_count", "block_len", "src_stride", "dst_stride"],
                               defaults=(1, 0, 0, 0))
DataCopyPadExtParams = namedtuple("DataCopyPadExtParams", ["is_pad", "left_padding", "right_padding",
                                                           "padding_value"], defaults=(False, 0, 0, 0))
DataCopyParams.__doc__ = """DataCopyParams(blockCount, blockLen, srcStride, dstStride) of DataCopy: ``block_count`` rows
of ``block_len`` 32 B blocks; the strides are the gaps from one row's end to the next one's start, in 32 B blocks
on both sides."""
DataCopyExtParams.__doc__ = """DataCopyExtParams(blockCount, blockLen, srcStride, dstStride) of DataCopyPad:
``block_count`` rows of ``block_len`` bytes; the gaps from one row's end to the next one's start are in bytes on the
GM side and in 32 B blocks on the UB side."""
DataCopyPadExtParams.__doc__ = """DataCopyPadExtParams<T>(isPad, leftPadding, rightPadding, paddingValue) of
DataCopyPad GM to UB: ``left_padding`` and ``right_padding`` elements (each at most 32 B) before and after each
row's data in UB, and ``padding_value``, the value they take with ``is_pad``."""
BLOCK = 32
_DATA_COPY, _DATA_COPY_PAD, _INIT_OUTPUT = op_code("DataCopy"), op_code("DataCopyPad"), op_code("InitOutput")
_V_MTE3 = int(HardEvent.V_MTE3)


_ATOMIC_KIND = {"float": 0, "half": 1, "bfloat16_t": 2, "int32_t": 3, "int16_t": 4, "int8_t": 5}


@njit(cache=True)
def _to_gm(core, w, g, off, src, rows, row_b, gm_pitch, ub_pitch, whole):
    """The MTE3 copy, plain or under SetAtomicAdd."""
    if w[X_ATOMIC]:
        if out_ok(core, g, off, src, rows, row_b, gm_pitch, ub_pitch, whole):
            n = row_b // g.isz
            atomic_rows(w, g.addr + off, core.base + src.addr, rows, n, gm_pitch, ub_pitch, w[X_ATOMIC] - 1)
            count_mte3(core, g, src, off // g.isz, rows, n, gm_pitch // g.isz, True)
    else:
        ub_to_gm(core, g, off, src, rows, row_b, gm_pitch, ub_pitch, whole)


def set_atomic_add(ctx, dtype):  # type: ignore[no-untyped-def]
    """SetAtomicAdd<T>(): the copies to GM that follow add into GM as ``dtype``."""


@overload(set_atomic_add, jit_options=OVERLOAD_OPTIONS)
def _set_atomic_add(ctx, dtype):  # type: ignore[no-untyped-def]
    if not (isinstance(ctx, KernelContextType) and isinstance(dtype, ElemType)):
        return None
    name = dtype.dt.name
    if name not in _ATOMIC_KIND:
        code = op_code("SetAtomicAdd") * 100 + [d.name for d in ALL].index(name)
        return lambda ctx, dtype: fault(ctx_words(ctx.ctx), FAULT_DTYPE, np.int64(-1), code)
    kind = _ATOMIC_KIND[name] + 1

    def set_add(ctx, dtype):  # type: ignore[no-untyped-def]
        ctx_words(ctx.ctx)[X_ATOMIC] = kind
    return set_add


@njit(cache=True)
def set_atomic_none(ctx):
    """SetAtomicNone (DisableDmaAtomic): copies to GM write again."""
    ctx_words(ctx.ctx)[X_ATOMIC] = 0


def data_copy(dst, src, params):  # type: ignore[no-untyped-def]
    """DataCopy: GM to UB or UB to GM, by a count of elements or by :class:`DataCopyParams`."""


@overload(data_copy, jit_options=OVERLOAD_OPTIONS)
def _data_copy(dst, src, params):  # type: ignore[no-untyped-def]
    to_ub = isinstance(dst, LocalTensorType) and isinstance(src, GlobalTensorType)
    to_gm = isinstance(dst, GlobalTensorType) and isinstance(src, LocalTensorType)
    ub_ub = isinstance(dst, LocalTensorType) and isinstance(src, LocalTensorType)
    if not (to_ub or to_gm or ub_ub):
        return None
    sz = dst.dtype.dt.size
    if ub_ub:
        def local(dst, src, params):  # type: ignore[no-untyped-def]
            rows, row_b, gap_src, gap_dst = _rows(dst, params, sz)
            core = core_of(dst)
            ub_to_ub(core, plan_tensor(dst), plan_tensor(src), rows, row_b, row_b + gap_src, row_b + gap_dst)
            found = hz_rows(core, LANE_VECTOR, _DATA_COPY, src.buf, src.addr, rows, row_b, row_b + gap_src, False,
                            src.gen >= 0)
            hz_rows(core, LANE_VECTOR, _DATA_COPY, dst.buf, dst.addr, rows, row_b, row_b + gap_dst, True,
                    dst.gen >= 0, found)
            hz_issue(core, LANE_VECTOR)
        return local

    def copy(dst, src, params):  # type: ignore[no-untyped-def]
        if to_ub:
            rows, row_b, gap_src, gap_dst = _rows(dst, params, sz)
            core = core_of(dst)
            gm_to_ub(core, plan_tensor(dst), gm_view(src), src.off, rows, row_b, row_b + gap_src,
                     row_b + gap_dst, 0, 0, np.uint64(0), False, True)
            hz_rows(core, LANE_MTE2, _DATA_COPY, dst.buf, dst.addr, rows, row_b, row_b + gap_dst, True, dst.gen >= 0)
            hz_issue(core, LANE_MTE2)
        else:
            rows, row_b, gap_src, gap_dst = _rows(src, params, sz)
            core = core_of(src)
            _to_gm(core, ctx_words(src.ctx), gm_view(dst), dst.off, plan_tensor(src), rows, row_b, row_b + gap_dst,
                   row_b + gap_src, True)
            hz_rows(core, LANE_MTE3, _DATA_COPY, src.buf, src.addr, rows, row_b, row_b + gap_src, False, src.gen >= 0)
            hz_issue(core, LANE_MTE3)
    return copy


def _rows(t, params, sz):  # type: ignore[no-untyped-def]
    """A DataCopy's rows: (rows, bytes a row, the source's and the destination's gaps) from a count of ``sz``-byte
    elements or :class:`DataCopyParams` (32 B blocks). The count form moves its length rounded down to whole 32 B
    blocks, as the NPU does (``DataCopy（GM与UB连续数据搬运）.md``, ``DataCopy（UBToUB连续数据搬运）.md``); checked
    mode reports the rest, at ``t``, the UB operand."""


@overload(_rows, jit_options=OVERLOAD_OPTIONS)
def _rows_impl(t, params, sz):  # type: ignore[no-untyped-def]
    if isinstance(params, types.BaseNamedTuple) and params.instance_class is DataCopyParams:
        return lambda t, params, sz: (np.int64(params.block_count), np.int64(params.block_len) * BLOCK,
                                      np.int64(params.src_stride) * BLOCK, np.int64(params.dst_stride) * BLOCK)

    def count(t, params, sz):  # type: ignore[no-untyped-def]
        asked = np.int64(params) * sz
        whole_blocks(core_of(t), plan_tensor(t), asked)
        return np.int64(1), asked // BLOCK * BLOCK, np.int64(0), np.int64(0)
    return count


def data_copy_pad(dst, src, params, pad_params=None):  # type: ignore[no-untyped-def]
    """DataCopyPad: GM to UB with :class:`DataCopyExtParams` and :class:`DataCopyPadExtParams`, or UB to GM with
    DataCopyExtParams (or DataCopyParams: the same fields and units)."""


@overload(data_copy_pad, jit_options=OVERLOAD_OPTIONS)
def _data_copy_pad(dst, src, params, pad_params=None):  # type: ignore[no-untyped-def]
    to_ub = isinstance(dst, LocalTensorType) and isinstance(src, GlobalTensorType)
    to_gm = isinstance(dst, GlobalTensorType) and isinstance(src, LocalTensorType)
    if not (to_ub or to_gm):
        return None
    sz = dst.dtype.dt.size
    if to_ub:
        def pad_in(dst, src, params, pad_params=None):  # type: ignore[no-untyped-def]
            rows, row_b = np.int64(params.block_count), np.int64(params.block_len)
            left = right = np.int64(0)
            value = np.uint64(0)
            is_pad = False
            if pad_params is not None:
                left, right = np.int64(pad_params.left_padding) * sz, np.int64(pad_params.right_padding) * sz
                value = element_bits(dst.dtype, pad_params.padding_value)  # a T, as Duplicate's scalar
                is_pad = bool(pad_params.is_pad)
            filled = (left + row_b + right + BLOCK - 1) // BLOCK * BLOCK
            ub_pitch = filled + np.int64(params.dst_stride) * BLOCK
            core = core_of(dst)
            gm_to_ub(core, plan_tensor(dst), gm_view(src), src.off, rows, row_b,
                     row_b + np.int64(params.src_stride), ub_pitch, left, right, value, is_pad, False)
            hz_rows(core, LANE_MTE2, _DATA_COPY_PAD, dst.buf, dst.addr, rows, filled, ub_pitch, True, dst.gen >= 0)
            hz_issue(core, LANE_MTE2)
        return pad_in

    def pad_out(dst, src, params, pad_params=None):  # type: ignore[no-untyped-def]
        rows, row_b = np.int64(params.block_count), np.int64(params.block_len)
        ub_pitch = (row_b + BLOCK - 1) // BLOCK * BLOCK + np.int64(params.src_stride) * BLOCK
        core = core_of(src)
        _to_gm(core, ctx_words(src.ctx), gm_view(dst), dst.off, plan_tensor(src), rows, row_b,
               row_b + np.int64(params.dst_stride), ub_pitch, False)
        hz_rows(core, LANE_MTE3, _DATA_COPY_PAD, src.buf, src.addr, rows, row_b, ub_pitch, False, src.gen >= 0)
        hz_issue(core, LANE_MTE3)
    return pad_out


def init_output(dst, size, value=0.0):  # type: ignore[no-untyped-def]
    """InitOutput<T>(gmWorkspaceAddr, size, value): ``size`` elements of the GlobalTensor ``dst`` (float, half or
    bfloat16) set to ``value``."""


@overload(init_output, jit_options=OVERLOAD_OPTIONS)
def _init_output(dst, size, value=0.0):  # type: ignore[no-untyped-def]
    if not isinstance(dst, GlobalTensorType):
        return None
    name = dst.dtype.dt.name
    if name not in ("float", "half", "bfloat16_t"):
        code = _INIT_OUTPUT * 100 + [d.name for d in ALL].index(name)
        return lambda dst, size, value=0.0: fault(ctx_words(dst.ctx), FAULT_DTYPE, np.int64(-1), code)
    sz = dst.dtype.dt.size

    def fill(dst, size, value=0.0):  # type: ignore[no-untyped-def]
        core = core_of(dst)
        w = ctx_words(dst.ctx)
        k = fetch_id(w, _V_MTE3)  # the Duplicate into the stack buffer, then its copies out
        set_event(core, w, _V_MTE3, k, 1)
        wait_event(core, w, _V_MTE3, k)
        # value as Duplicate<T> takes it (b16: rounded to nearest even, its bits)
        fill_gm(core, gm_view(dst), dst.off // sz, np.int64(size), scalar_bits(dst.dtype, value))
        hz_issue(core, LANE_MTE3)
    return fill
