"""The high-level Broadcast and InitOutput (tilesim.machine) against numpy statements of their documented
semantics. Broadcast<T, dim, axis> (``高阶API/张量变换/Broadcast.md``): dim 1 and 2, along each axis, in each A2 type,
dst past the broadcast untouched, counted as Duplicate's 256 B repeats of dst; the shapes that are not a broadcast
along ``axis`` and a type outside the table stop the kernel, and checked mode reports src and dst overlapping.
InitOutput (``kernel_operator_common_intf_impl.h``): ``size`` elements of a float, half or bfloat16 GM tensor set to
``value`` (rounded to the type) and the rest untouched, counted as one MTE3 transfer and its V_MTE3 pair; another
type stops the kernel.

Semantics are checked in the checked build, which computes the fast build's bits (every op's checked-mode test
compares the two), so that its operand, bounds and sync checks see each form too and ``pytest --tilesim-checks``
finds these kernels compiled; a test of what the NPU does with a broken kernel runs fast."""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np
import pytest

from tilesim import CheckError
from tilesim.core.records import COUNTER_NAMES
from tilesim.machine import (
    VECCALC,
    VECIN,
    HardEvent,
    TBuf,
    TPipe,
    TQue,
    broadcast,
    data_copy,
    init_output,
    set_flag,
    size_of,
    uint8,
    wait_flag,
)
from tilesim.runtime.launcher import KernelError, kernel, launch

NB = 2048  # bytes of each tile


@dataclass(frozen=True)
class BrcTiling:
    dim: int  # 1 or 2: the length of the shape tuples
    axis: int
    rows: int  # dstShape: (rows, cols), or (cols,) with dim 1
    cols: int
    s_rows: int  # srcShape, likewise
    s_cols: int
    overlap: int = 0  # 1: dst is src's own tensor, from element ``shift``
    shift: int = 0


@kernel
def broadcast_kernel(ctx, t, a, init, out):
    """``out`` is ``init`` with Broadcast<T, dim, axis>(a) over it from element 0 (overlapping: ``a`` with the
    Broadcast over itself from element ``shift``)."""
    pipe = TPipe(ctx)
    que = pipe.init_buffer(TQue(VECIN, 1), 2, NB)
    tmp = pipe.init_buffer(TBuf(VECCALC), NB)
    n = NB // size_of(a.dtype)
    x = que.alloc_tensor(a.dtype)
    data_copy(x, a, n)
    que.enque(x)
    x = que.deque(a.dtype)
    z = que.alloc_tensor(init.dtype)
    data_copy(z, init, n)
    que.enque(z)
    z = que.deque(init.dtype)
    dst = x[t.shift] if t.overlap else z
    if t.dim == 2:
        broadcast(dst, x, (t.rows, t.cols), (t.s_rows, t.s_cols), t.axis, tmp.get(uint8))
    else:
        broadcast(dst, x, (t.cols,), (t.s_cols,), t.axis, tmp.get(uint8))
    set_flag(ctx, HardEvent.V_MTE3, 0)
    wait_flag(ctx, HardEvent.V_MTE3, 0)
    data_copy(out, x if t.overlap else z, n)
    que.free_tensor(x)
    que.free_tensor(z)


def run_broadcast(t: BrcTiling, dtype: type, checks: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """(a, init, out, vec_dup repeats) of one launch: ``a`` distinct values, ``init`` a sentinel."""
    n = NB // np.dtype(dtype).itemsize
    a = (np.arange(n) % 120 - 60).astype(dtype)
    a[0] = 7
    init = np.full(n, 99, dtype)
    out = np.zeros(n, dtype)
    rep = launch(broadcast_kernel, t, a, init, out, block_dim=1, checks=checks)
    return a, init, out, int(rep.total("vec_dup"))


def bits(a: np.ndarray) -> np.ndarray:
    return a.view(f"u{a.itemsize}")


# (dim, axis, dst shape, src shape): a row of src repeated down the rows, a column across, 32 B-aligned rows or not
BROADCASTS = [
    (2, 0, (5, 24), (1, 24)),
    (2, 0, (3, 64), (1, 64)),
    (2, 1, (7, 13), (7, 1)),
    (2, 1, (4, 64), (4, 1)),
    (1, 0, (1, 40), (1, 1)),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int8, np.uint8])
@pytest.mark.parametrize("dim,axis,dst_shape,src_shape", BROADCASTS)
def test_broadcast(dtype, dim, axis, dst_shape, src_shape):
    (rows, cols), (s_rows, s_cols) = dst_shape, src_shape
    a, init, out, dup = run_broadcast(BrcTiling(dim, axis, rows, cols, s_rows, s_cols), dtype)
    src = a[: s_rows * s_cols].reshape(s_rows, s_cols)
    want = init.copy()
    want[: rows * cols] = np.broadcast_to(src, (rows, cols)).reshape(-1)  # numpy's broadcast of a 1-long axis
    np.testing.assert_array_equal(bits(out), bits(want))
    assert dup == -(-rows * cols * np.dtype(dtype).itemsize // 256)


def test_broadcast_checked_mode_agrees():
    t = BrcTiling(2, 1, 7, 13, 7, 1)
    fast, checked = run_broadcast(t, np.float32), run_broadcast(t, np.float32, checks=True)
    np.testing.assert_array_equal(bits(fast[2]), bits(checked[2]))


@pytest.mark.parametrize("t", [BrcTiling(2, 0, 4, 16, 2, 16, 0), BrcTiling(2, 1, 4, 16, 4, 2, 0),
                               BrcTiling(2, 0, 4, 16, 1, 8, 0), BrcTiling(2, 2, 4, 16, 1, 16, 0),
                               BrcTiling(1, 1, 1, 16, 1, 1, 0)])
def test_broadcast_of_shapes_that_are_not_one_stops_the_kernel(t):
    with pytest.raises(KernelError, match="Broadcast on float and float with mode"):
        run_broadcast(t, np.float32)


@pytest.mark.parametrize("dtype", [np.int16, ml_dtypes.bfloat16, np.int32])
def test_broadcast_types(dtype):
    name = {np.int16: "int16_t", ml_dtypes.bfloat16: "bfloat16_t", np.int32: "int32_t"}[dtype]
    with pytest.raises(KernelError, match=f"Broadcast on {name}: the A2 API does not take this element type"):
        run_broadcast(BrcTiling(2, 1, 4, 16, 4, 1), dtype)


def test_broadcast_onto_its_source_is_a_finding():
    """Broadcast.md states no overlap rule: src and dst must not overlap (along axis 0, dst past src's start)."""
    with pytest.raises(CheckError, match="API rule broken: Broadcast's destination overlaps a source it reads"):
        run_broadcast(BrcTiling(2, 0, 4, 16, 1, 16, 1, 8), np.float32, checks=True)


@pytest.mark.parametrize("t", [BrcTiling(2, 0, 4, 16, 1, 16, 1, 0), BrcTiling(2, 1, 4, 16, 4, 1, 1, 0)])
def test_broadcast_in_place_as_the_v220_implementation_runs_it(t):
    """The overlaps the module tolerates: dst == src along axis 0, and along axis 1 src read whole first."""
    a, _, out, _ = run_broadcast(t, np.float32, checks=True)
    want = a.copy()
    want[: t.rows * t.cols] = np.broadcast_to(a[: t.s_rows * t.s_cols].reshape(t.s_rows, t.s_cols),
                                              (t.rows, t.cols)).reshape(-1)
    np.testing.assert_array_equal(bits(out), bits(want))


# --- InitOutput ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class InitTiling:
    off: int  # the first element set
    size: int
    value: float


@kernel
def init_output_kernel(ctx, t, out):
    """InitOutput(out[off], size, value)."""
    init_output(out[t.off], t.size, t.value)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16])
@pytest.mark.parametrize("off,size,value", [(0, 100, 0.0), (3, 5000, -1 / 3), (17, 1, np.inf), (0, 0, 1.0)])
def test_init_output(dtype, off, size, value):
    """``size`` elements from ``off`` set to value in the tensor's type (a b16 one rounded to nearest even, as
    Duplicate<T> takes it), the rest untouched."""
    out = np.full(6000, 3.0, dtype)
    rep = launch(init_output_kernel, InitTiling(off, size, value), out, block_dim=1, checks=True)
    want = np.full(6000, 3.0, dtype)
    want[off:off + size] = np.float32(value).astype(dtype)
    np.testing.assert_array_equal(bits(out), bits(want))
    assert rep.total("mte3_bytes") == size * out.itemsize and rep.total("mte3_transfers") == 1
    assert rep.total("mte2_bytes") == 0 and sum(rep.total(k) for k in COUNTER_NAMES if k.startswith("vec_")) == 0
    assert rep.total("set_flags") == rep.total("wait_flags") == 1


def test_init_output_checked_mode_agrees():
    out = np.full(256, 3.0, np.float32)
    launch(init_output_kernel, InitTiling(8, 200, 0.5), out, block_dim=1, checks=True)
    assert (out[8:208] == 0.5).all() and (out[:8] == 3.0).all() and (out[208:] == 3.0).all()


def test_init_output_past_the_tensor_is_a_finding():
    with pytest.raises(CheckError, match="out of bounds"):
        launch(init_output_kernel, InitTiling(100, 200, 0.5), np.zeros(256, np.float32), block_dim=1, checks=True)


def test_init_output_types():
    with pytest.raises(KernelError, match="InitOutput on int32_t: the A2 API does not take this element type"):
        launch(init_output_kernel, InitTiling(0, 16, 0.0), np.zeros(64, np.int32), block_dim=1)
