"""The machinery that makes fast mode fast (in-place loops, host threads, reused buffers, one UB per thread, plain
types for constants, streamed copy-outs), checked for what it must not change.

- Every element-wise instruction gives the same bits whether it computes in place (dst is a source) or not: the
  in-place cases run their own loops so that they vectorise.
- Div and Sqrt follow IEEE (x/0 = ±inf, 0/0 = NaN, sqrt(-1) = NaN), as the NPU does; they do not raise.
- In-place casts (narrowing over the source, widening from the upper half) equal the out-of-place ones, and in
  checked mode every cast's destination lanes take their source lanes' shadow state, whether the source is in
  one state (a fill) or not (the lane loop).
- ``run_cores`` runs every core once whatever the host thread count; ``host_threads`` runs small launches on one
  thread and restores the caller's count; a host thread reuses one workspace, and reused buffers never leak one
  launch into the next.
- A fast launch gives the cores of each host thread one UB (the kernel has one phase: nothing it keeps in UB
  outlives a core), a checked launch or one with SyncAll a UB per core; UB kept across SyncAll stays, as on the
  NPU. Every core's UB and shadow start on a 64 B line.
- A constant argument does not give a device function a second compiled version (``tilesim.jit.plain_types``).
- A GM access outside a tensor is reported in fast mode too (the movers copy raw bytes).
- Copy-outs into large GM tensors, written with non-temporal stores, write exactly the bytes a memcpy writes,
  whatever the alignment and length, and a kernel's results do not change.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import ml_dtypes
import numba
import numpy as np
import pytest
import tilesim.kernels as kernels
from conftest import as_asked
from numba import njit

import tilesim
from tilesim import machine as asc
from tilesim.core.records import SHADOW_COL, shadow_of
from tilesim.machine.movers import STREAM_TENSOR_BYTES as STREAMED  # copy-outs stream from this size
from tilesim.machine.tensor import X_BASE, X_ERR_AT, core_of, ctx_words
from tilesim.machine.vector import prefix_lanes
from tilesim.numerics.b16 import narrow, widen
from tilesim.runtime.host_threads import (
    SERIAL_BELOW,
    page_aligned,
    release_scratch,
    run_cores,
    scratch,
    thread_count,
    workspace,
)
from tilesim.runtime.launch import copy_back, write_targets
from tilesim.runtime.launcher import kernel, launch
from tilesim.soc import get_soc

SOC = get_soc("Ascend910B1")
N = 1000  # not a multiple of any vector width: the loops' tails run too


@dataclass(frozen=True)
class Rows:
    n: int


# Element-wise instructions: rows of UB A, B, C in one tile; (dst, src0, src1) per aliasing case of a binary
# instruction, the first two for a one-source one.
ELEMENTWISE = ("add", "sub", "mul", "div", "max", "min",  # binary
               "adds", "muls", "maxs", "mins",  # with a scalar
               "exp", "ln", "abs", "sqrt", "rsqrt", "reciprocal", "relu")
BINARY = 6
ALIASES = ((2, 0, 1), (0, 0, 1), (1, 0, 1), (0, 0, 0), (2, 0, 0))  # none, dst=a, dst=b, dst=a=b; C = A op A
ALIAS_IDS = ("none", "dst=a", "dst=b", "dst=a=b", "a=b")


@njit(cache=True)
def _elementwise(op, d, a, b, n):
    """Instruction ``op`` (an index into ELEMENTWISE) over ``n`` elements."""
    if op == 0:
        asc.add(d, a, b, n)
    elif op == 1:
        asc.sub(d, a, b, n)
    elif op == 2:
        asc.mul(d, a, b, n)
    elif op == 3:
        asc.div(d, a, b, n)
    elif op == 4:
        asc.max_(d, a, b, n)
    elif op == 5:
        asc.min_(d, a, b, n)
    elif op == 6:
        asc.adds(d, a, 0.25, n)
    elif op == 7:
        asc.muls(d, a, -1.5, n)
    elif op == 8:
        asc.maxs(d, a, 0.5, n)
    elif op == 9:
        asc.mins(d, a, -0.5, n)
    elif op == 10:
        asc.exp(d, a, n)
    elif op == 11:
        asc.ln(d, a, n)
    elif op == 12:
        asc.abs_(d, a, n)
    elif op == 13:
        asc.sqrt(d, a, n)
    elif op == 14:
        asc.rsqrt(d, a, n)
    elif op == 15:
        asc.reciprocal(d, a, n)
    else:
        asc.relu(d, a, n)


@kernel
def elementwise(ctx, t, x, y, out):
    """Row op·5 + k of ``out``: instruction ``op`` in aliasing case k (ALIASES; one-source instructions: out of
    place and in place), each on fresh copies of x in row A and y in row B of one tile."""
    pipe = asc.TPipe(ctx)
    q = pipe.init_buffer(asc.TQue(asc.VECIN, 1), 2, t.n * 4)
    qo = pipe.init_buffer(asc.TQue(asc.VECOUT, 1), 1, 3 * t.n * 4)
    xl, yl = q.alloc_tensor(x.dtype), q.alloc_tensor(x.dtype)
    asc.data_copy(xl, x, t.n)
    asc.data_copy(yl, y, t.n)
    q.enque(xl)
    xl = q.deque(x.dtype)
    q.enque(yl)
    yl = q.deque(x.dtype)
    for op in range(len(ELEMENTWISE)):
        for k in range(len(ALIASES) if op < BINARY else 2):
            o = qo.alloc_tensor(x.dtype)
            asc.data_copy(o, xl, t.n)
            asc.data_copy(o[t.n], yl, t.n)
            asc.pipe_barrier(ctx, asc.PIPE_V)
            d, a, b = ALIASES[k]
            _elementwise(op, o[d * t.n], o[a * t.n], o[b * t.n], t.n)
            qo.enque(o)
            o = qo.deque(x.dtype)
            asc.data_copy(out[(op * len(ALIASES) + k) * t.n], o[d * t.n], t.n)
            qo.free_tensor(o)
    q.free_tensor(xl)
    q.free_tensor(yl)


@pytest.fixture(scope="module")
def elementwise_rows() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """x, y and the rows of one launch of ``elementwise``: x and y with IEEE cases and special values first."""
    rng = np.random.default_rng(0)
    x, y = rng.uniform(-5, 5, N).astype(np.float32), rng.uniform(-5, 5, N).astype(np.float32)
    x[:4], y[:4] = [1.0, -1.0, 0.0, -4.0], [0.0, 0.0, 0.0, 2.0]  # x/0, 0/0, sqrt of < 0
    y[4:11] = [0.0, -0.0, 0.0, np.inf, np.nan, 1e-30, -3.0]
    out = np.zeros((len(ELEMENTWISE), len(ALIASES), N), np.float32)
    launch(elementwise, Rows(N), x, y, out, block_dim=1)
    return x, y, out


@pytest.mark.parametrize("op", range(len(ELEMENTWISE)), ids=ELEMENTWISE)
def test_in_place_equals_out_of_place(op, elementwise_rows):
    x, y, out = elementwise_rows
    bits = out[op].view(np.uint32)
    if op < BINARY:
        for k in (1, 2):
            np.testing.assert_array_equal(bits[k], bits[0], err_msg=ALIAS_IDS[k])
        np.testing.assert_array_equal(bits[3], bits[4], err_msg="dst=a=b")
    else:
        np.testing.assert_array_equal(bits[1], bits[0], err_msg="in place")
    with np.errstate(all="ignore"):  # the exactly rounded ones against numpy too
        want = {"add": (x + y, x + x), "sub": (x - y, x - x), "mul": (x * y, x * x), "div": (x / y, x / x),
                "adds": (x + np.float32(0.25),), "muls": (x * np.float32(-1.5),), "sqrt": (np.sqrt(x),),
                "abs": (np.abs(x),)}.get(ELEMENTWISE[op], ())
    for k, w in zip((0, 4), want, strict=False):
        np.testing.assert_array_equal(bits[k], w.view(np.uint32), err_msg=ALIAS_IDS[k])


def test_div_and_sqrt_are_ieee(elementwise_rows):
    _, _, out = elementwise_rows
    q = out[ELEMENTWISE.index("div"), 0, :4]
    assert q[0] == np.inf and q[1] == -np.inf and np.isnan(q[2]) and q[3] == -2.0
    r = out[ELEMENTWISE.index("sqrt"), 0, :4]
    assert r[0] == 1.0 and np.isnan(r[1]) and r[2] == 0.0 and np.isnan(r[3])


@kernel
def casts(ctx, t, x, narrowed, widened):
    """x narrowed out of place (row 0 of ``narrowed``) and over itself (row 1); row 0 narrowed widened out of
    place (row 0 of ``widened``) and from the upper half of its destination (row 1), as kernels widen in place.
    The upper half starts at element m, n rounded up to a 32 B block of b16: a vector operand starts on one."""
    b16, n = narrowed.dtype, t.n
    m = (n + 15) // 16 * 16
    pipe = asc.TPipe(ctx)
    f = pipe.init_buffer(asc.TBuf(asc.VECCALC), 14 * m).get(asc.float32)  # fp32 A | b16 C | fp32 B | fp32 D
    a, c, b, d = f, f[m].reinterpret_cast(b16), f[m + m // 2], f[2 * m + m // 2]
    upper = d.reinterpret_cast(b16)[m]
    asc.data_copy_pad(a, x, asc.DataCopyExtParams(1, n * 4, 0, 0), asc.DataCopyPadExtParams(True, 0, 0, 0))
    asc.set_flag(ctx, asc.HardEvent.MTE2_V, 0)
    asc.wait_flag(ctx, asc.HardEvent.MTE2_V, 0)
    asc.cast(c, a, asc.CAST_RINT, n)
    asc.cast(upper, a, asc.CAST_RINT, n)
    asc.pipe_barrier(ctx, asc.PIPE_V)
    asc.cast(a.reinterpret_cast(b16), a, asc.CAST_RINT, n)
    asc.cast(b, c, asc.CAST_NONE, n)
    asc.cast(d, upper, asc.CAST_NONE, n)
    asc.set_flag(ctx, asc.HardEvent.V_MTE3, 0)
    asc.wait_flag(ctx, asc.HardEvent.V_MTE3, 0)
    asc.data_copy_pad(narrowed, c, asc.DataCopyExtParams(1, n * 2, 0, 0))
    asc.data_copy_pad(narrowed[n], a.reinterpret_cast(b16), asc.DataCopyExtParams(1, n * 2, 0, 0))
    asc.data_copy_pad(widened, b, asc.DataCopyExtParams(1, n * 4, 0, 0))
    asc.data_copy_pad(widened[n], d, asc.DataCopyExtParams(1, n * 4, 0, 0))


@pytest.mark.parametrize("fmt", ["bfloat16", "float16"])
@pytest.mark.parametrize("n", [1, 255, 256, 257, 1000, 1536])
def test_in_place_casts_equal_out_of_place(fmt, n):
    x = np.random.default_rng(n).uniform(-70000, 70000, n).astype(np.float32)
    narrowed = np.zeros((2, n), ml_dtypes.bfloat16 if fmt == "bfloat16" else np.float16)
    widened = np.zeros((2, n), np.float32)
    launch(casts, Rows(n), x, narrowed, widened, block_dim=1, outputs=2)
    bits = narrow(x, fmt)
    u16 = narrowed.view(np.uint16)
    np.testing.assert_array_equal(u16[0], bits)
    np.testing.assert_array_equal(u16[1], bits)
    want = widen(bits, fmt).view(np.uint32)
    np.testing.assert_array_equal(widened[0].view(np.uint32), want)
    np.testing.assert_array_equal(widened[1].view(np.uint32), want)


A, C = 0, 16384  # byte offsets in the cast_shadow kernel's buffer


@dataclass(frozen=True)
class ShadowCase:
    which: int
    n: int


@kernel
def cast_shadow(ctx, t, states, got):
    """Checked mode only: the source bytes' shadow set from ``states``, one bf16 cast (``t.which``: widening in
    place from the upper half of the destination, narrowing over the source, widening, narrowing), and the
    destination bytes' shadow into ``got``."""
    n = t.n
    f = asc.TPipe(ctx).init_buffer(asc.TBuf(asc.VECCALC), C + 4 * n).get(asc.float32)
    h = f.reinterpret_cast(asc.bfloat16)
    sh = shadow_of(core_of(ctx))
    src_size, dst_size = (2, 4) if t.which == 0 or t.which == 2 else (4, 2)
    src_at = f.addr + (A + 2 * n if t.which == 0 else A)
    dst_at = f.addr + (C if t.which >= 2 else A)
    for i in range(n * src_size):
        sh[src_at + i] = states.get_value(i)
    if t.which == 0:
        asc.cast(f, h[n], asc.CAST_NONE, n)
    elif t.which == 1:
        asc.cast(h, f, asc.CAST_RINT, n)
    elif t.which == 2:
        asc.cast(f[C // 4], h, asc.CAST_NONE, n)
    else:
        asc.cast(f[C // 4].reinterpret_cast(asc.bfloat16), f, asc.CAST_RINT, n)
    for i in range(n * dst_size):
        got.set_value(i, sh[dst_at + i])


def _lane_states(src: np.ndarray, size: int) -> np.ndarray:
    """Each ``size``-byte lane's state: written if every byte is, else clobbered if any byte is, else unwritten."""
    lanes = src.reshape(-1, size)
    written = (lanes & 1).min(axis=1)
    clobbered = (lanes & 2).max(axis=1)
    return (written | clobbered).astype(np.uint8)


@pytest.mark.parametrize("states", ["written", "unwritten", "clobbered", "one unwritten byte", "mixed"])
@pytest.mark.parametrize("which, n", [(0, 1008), (1, 1008), (2, 1001), (3, 1001)],
                         ids=["widen in place", "narrow in place", "widen", "narrow"])
def test_cast_shadow_takes_the_source_lanes_state(states, which, n):
    """Checked mode's shadow through a cast: lane i of the destination gets the combined state of lane i of the
    source as it was before the cast, in place or not."""
    src_size, dst_size = (2, 4) if which in (0, 2) else (4, 2)
    rng = np.random.default_rng(n + which)
    src = {"written": np.full(n * src_size, 1), "unwritten": np.zeros(n * src_size),
           "clobbered": np.full(n * src_size, 2), "mixed": rng.integers(0, 3, n * src_size),
           "one unwritten byte": np.full(n * src_size, 1)}[states].astype(np.uint8)
    if states == "one unwritten byte":
        src[n * src_size - 1] = 0  # the last byte: past the whole 8-byte words for the odd n
    got = np.full(n * dst_size, 7, np.uint8)
    launch(cast_shadow, ShadowCase(which, n), src, got, block_dim=1, checks=True)
    np.testing.assert_array_equal(got.reshape(n, dst_size),
                                  np.repeat(_lane_states(src, src_size)[:, None], dst_size, axis=1))


@njit(cache=True, nogil=True)
def _mark(first, last, hits):
    for c in range(first, last):
        hits[c] += 1


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("block_dim", [1, 2, 3, 48])
def test_run_cores_runs_every_core_once(threads, block_dim):
    hits = np.zeros(block_dim, np.int64)
    run_cores(_mark, block_dim, (hits,), min(threads, numba.config.NUMBA_NUM_THREADS, block_dim))
    assert hits.tolist() == [1] * block_dim


def test_small_launches_run_on_one_thread_and_large_ones_split():
    """thread_count keeps a launch under SERIAL_BELOW bytes on the calling thread, and splits a larger one over
    the caller's thread count, at most one thread a core; run_cores gives each thread one contiguous range."""
    before = numba.get_num_threads()
    calls: list[tuple[int, int, int]] = []

    def cores(first: int, last: int) -> None:
        calls.append((first, last, threading.get_ident()))

    numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
    try:
        n = numba.get_num_threads()
        assert thread_count(48, SERIAL_BELOW - 1) == 1
        assert thread_count(48, SERIAL_BELOW) == n and thread_count(1, SERIAL_BELOW) == 1
        run_cores(cores, 48, (), thread_count(48, SERIAL_BELOW - 1))
        assert calls == [(0, 48, threading.get_ident())]
        calls.clear()
        run_cores(cores, 48, (), thread_count(48, SERIAL_BELOW))
        if n == 2:
            assert sorted(c[:2] for c in calls) == [(0, 24), (24, 48)] and len({c[2] for c in calls}) == 2
        else:
            assert calls == [(0, 48, threading.get_ident())]
    finally:
        numba.set_num_threads(before)


TILE = 64  # fp32 a core


@dataclass(frozen=True)
class Probe:
    n: int  # the elements each core loads
    peek: int  # 1: first copy out the tile as the core finds it in UB


@kernel
def probe(ctx, t, src, pad, out, where):
    """Each core writes where its UB and its checked-mode records are (``where``: UB address, record row address),
    copies out its UB tile before writing it when ``t.peek`` (a read of UB it has not written: in a fast launch,
    what the core before it on its host thread left), then loads t.n elements of ``src`` into the tile. ``pad``
    only makes the launch's GM large enough for two host threads."""
    c, w = asc.get_block_idx(ctx), ctx_words(ctx.ctx)
    where.set_value(2 * c, w[X_BASE])
    where.set_value(2 * c + 1, w[X_ERR_AT])
    q = asc.TPipe(ctx).init_buffer(asc.TQue(asc.VECIN, 1), 1, 2 * TILE * 4)
    x = q.alloc_tensor(asc.float32)
    if t.peek:
        asc.data_copy(out[c * TILE], x, TILE)
        asc.set_flag(ctx, asc.HardEvent.MTE3_MTE2, 0)
        asc.wait_flag(ctx, asc.HardEvent.MTE3_MTE2, 0)
    asc.data_copy(x, src[c * TILE], t.n)
    q.enque(x)
    q.free_tensor(q.deque(asc.float32))


def _probe(block_dim: int, peek: int, checks: bool, gm_bytes: int = 0,
           n: int = TILE) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``probe`` launched: src, the tiles the cores found (peek), and each core's UB and record row addresses."""
    src = np.arange(block_dim * TILE, dtype=np.float32) + 1
    out = np.zeros_like(src)
    where = np.zeros((block_dim, 2), np.int64)
    with as_asked():
        launch(probe, Probe(n, peek), src, np.zeros(max(gm_bytes, 1), np.uint8), out, where, block_dim=block_dim,
               outputs=2, checks=checks)
    return src.reshape(block_dim, TILE), out.reshape(block_dim, TILE), where


def test_a_fast_launch_gives_each_host_thread_one_ub_and_a_checked_one_each_core():
    """Fast: the cores a host thread runs (in core order) share one UB, so a core reading UB it has not written
    finds the previous one's tile; the threads' UBs lie apart, with a guard of rows between them. Checked: a UB a
    core, and the read is reported."""
    before = numba.get_num_threads()
    numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
    try:
        for gm_bytes, threads in ((0, 1), (SERIAL_BELOW, numba.get_num_threads())):
            src, out, where = _probe(48, 1, False, gm_bytes)
            ubs = sorted(set(where[:, 0].tolist()))
            assert len(ubs) == threads, (gm_bytes, ubs)
            for ub in ubs:
                cores = np.flatnonzero(where[:, 0] == ub)
                np.testing.assert_array_equal(out[cores[1:]], src[cores[:-1]])
            if threads == 2:
                assert ubs[1] - ubs[0] >= 2 * SOC.ub_size
    finally:
        numba.set_num_threads(before)
    _, _, where = _probe(48, 0, True)
    ubs = np.sort(where[:, 0])
    assert len(set(ubs.tolist())) == 48 and (np.diff(ubs) >= SOC.ub_size).all()
    with pytest.raises(tilesim.CheckError) as ei:
        _probe(4, 1, True)
    v = ei.value.violations[0]
    assert v.kind == "uninitialised read" and v.nbytes == TILE * 4, v


def test_every_cores_ub_and_shadow_start_on_a_64_byte_line():
    """numpy puts a large array 16 B past a page; a UB mapped there splits the host's cache lines under every
    vector access. The arena starts on a page, every core's UB and shadow on a 64 B line."""
    for checks in (False, True):
        _, _, where = _probe(48, 0, checks)
        assert where[0, 0] % 4096 == 0 and (where[:, 0] % 64 == 0).all(), where[:, 0]
        if checks:
            assert ((where[:, 1] + SHADOW_COL * 8) % 64 == 0).all()


@kernel
def keep_across_sync_all(ctx, t, src, dst, where):
    """Phase 0 loads each core's tile into UB; phase 1 copies that UB out: UB kept across SyncAll."""
    c = asc.get_block_idx(ctx)
    where.set_value(c, ctx_words(ctx.ctx)[X_BASE])
    x = asc.TPipe(ctx).init_buffer(asc.TBuf(asc.VECCALC), TILE * 4).get(asc.float32)
    asc.data_copy(x, src[c * TILE], TILE)
    asc.sync_all(ctx)
    asc.set_flag(ctx, asc.HardEvent.MTE2_MTE3, 0)
    asc.wait_flag(ctx, asc.HardEvent.MTE2_MTE3, 0)
    asc.data_copy(dst[c * TILE], x, TILE)


@pytest.mark.parametrize("checks", [False, True])
def test_a_kernel_with_sync_all_keeps_its_ub_across_it(checks):
    src = np.arange(4 * TILE, dtype=np.float32)
    dst, where = np.full_like(src, -1.0), np.zeros(4, np.int64)
    with as_asked():
        launch(keep_across_sync_all, Rows(0), src, dst, where, block_dim=4, outputs=2, checks=checks)
    np.testing.assert_array_equal(dst, src)
    assert len(set(where.tolist())) == 4  # a UB a core, fast mode too


def test_a_host_thread_reuses_one_workspace():
    release_scratch()
    w1 = workspace(4096)
    w2 = workspace(1024)
    assert w2.base is w1.base or np.shares_memory(w1, w2)  # one workspace per thread, reused
    release_scratch()


def test_workspaces_and_temporaries_start_on_a_page():
    release_scratch()
    assert workspace(1 << 20).ctypes.data % 4096 == 0
    assert scratch("aligned", (300, 7), np.float32).ctypes.data % 4096 == 0
    release_scratch()
    for fill in (None, 0, 0xFF):
        a = page_aligned((5, 3000), np.uint16, fill)
        assert a.shape == (5, 3000) and a.dtype == np.uint16 and a.flags.c_contiguous and a.ctypes.data % 4096 == 0
        if fill is not None:
            assert (a == fill).all()


def test_repeated_ops_with_reused_buffers_match_fresh_ones():
    """NsaCompressGrad with overlapping windows accumulates into reused shadows and workspace: a second call on
    other inputs must equal a call made after the buffers were released."""
    import ml_dtypes

    rng = np.random.default_rng(3)
    t, n, d, bs, stride = 128, 2, 32, 32, 16
    wins = (t - bs) // stride + 1
    bf = ml_dtypes.bfloat16

    def inputs():
        return (rng.standard_normal((wins, n, d)).astype(bf), rng.standard_normal((t, n, d)).astype(bf),
                rng.uniform(-1, 1, (bs, n)).astype(bf))

    first, second = inputs(), inputs()
    kernels.nsa_compress_grad(*first, [t], bs, stride)
    reused = kernels.nsa_compress_grad(*second, [t], bs, stride)
    release_scratch()
    fresh = kernels.nsa_compress_grad(*second, [t], bs, stride)
    for a, b in zip(reused, fresh, strict=True):
        np.testing.assert_array_equal(a.view(np.uint16), b.view(np.uint16))


def test_write_targets_give_temporaries_to_checked_runs_and_to_outputs_over_inputs():
    a, b, x = np.zeros((4, 8), np.float32), np.zeros(8, np.float16), np.ones((4, 8), np.float32)
    assert all(t is o for t, o in zip(write_targets((a, None, b), False, (x,)), (a, None, b), strict=True))
    for checks, inputs in ((True, (x,)), (False, (x, a[1:]))):  # checked; a overlaps an input
        targets = write_targets((a, None, b), checks, inputs)
        assert targets[1] is None
        for t, o in zip(targets[::2], (a, b), strict=True):
            assert t.shape == o.shape and t.dtype == o.dtype and not np.may_share_memory(t, o)
            assert not any(np.may_share_memory(t, i) for i in inputs)
            t[...] = 3
        copy_back((a, None, b), targets)
        assert (a == 3).all() and (b == 3).all()
        a[...], b[...] = 0, 0


@pytest.mark.parametrize("case", ["distinct owners", "same array", "view of it", "reshaped", "frombuffer twice",
                                  "disjoint slices", "other owner's view"])
def test_write_targets_see_every_output_that_may_share_memory_with_an_input(case):
    """The cheap test (distinct arrays that own their memory share none) falls back to np.may_share_memory for
    everything else, so its answer is that of np.may_share_memory over every pair."""
    raw = bytearray(256)
    base, other = np.zeros(64, np.float32), np.zeros(64, np.float32)
    out, inp = {
        "distinct owners": (base, other),
        "same array": (base, base),
        "view of it": (base, base[8:]),
        "reshaped": (base.reshape(8, 8), base),
        "frombuffer twice": (np.frombuffer(raw, np.float32), np.frombuffer(raw, np.float32)),
        "disjoint slices": (base[:32], base[32:]),
        "other owner's view": (base, other[1:]),
    }[case]
    shares = np.may_share_memory(out, inp)
    assert (write_targets((out,), False, (None, inp, [1.0]))[0] is not out) == shares
    assert shares == (case in ("same array", "view of it", "reshaped", "frombuffer twice"))


def test_by_identity_memoises_by_the_arguments_objects_not_their_values(monkeypatch):
    from tilesim.core import memo

    calls = []

    @memo.by_identity
    def f(a, b):
        calls.append((a, b))
        return (a, b)

    x, y = (1, [2]), (1, [2])  # equal, distinct
    assert f(x, 3) is f(x, 3) and len(calls) == 1
    assert f(y, 3) == f(x, 3) and len(calls) == 2  # an equal argument that is another object computes again
    monkeypatch.setattr(memo, "IDENTITY_MEMO_SIZE", 2)

    @memo.by_identity
    def g(a):
        calls.append(a)
        return a

    calls.clear()
    objs = [object() for _ in range(3)]
    for o in (*objs, objs[0], objs[2]):
        g(o)
    assert calls == [objs[0], objs[1], objs[2], objs[0]]  # the oldest went when the third came in


def test_outputs_over_inputs_get_the_results_of_separate_ones():
    """``out=`` arrays that are also inputs: the ops read each input element before they write over it."""
    import ml_dtypes

    rng = np.random.default_rng(5)
    t, n, d, bs, stride = 128, 2, 32, 32, 16
    wins = (t - bs) // stride + 1
    bf = ml_dtypes.bfloat16
    dy = rng.standard_normal((wins, n, d)).astype(bf)
    x, w = rng.standard_normal((t, n, d)).astype(bf), rng.uniform(-1, 1, (bs, n)).astype(bf)
    want = kernels.nsa_compress_grad(dy, x, w, [t], bs, stride)
    for checks in (False, True):
        xs, ws = x.copy(), w.copy()
        got = kernels.nsa_compress_grad(dy, xs, ws, [t], bs, stride, checks=checks, out=(xs, ws))
        assert got[0] is xs and got[1] is ws
        for a, b in zip(got, want, strict=True):
            np.testing.assert_array_equal(a.view(np.uint16), b.view(np.uint16))
    dyr, xr = rng.standard_normal((64, 96)).astype(np.float32), rng.uniform(-2, 2, (64, 96)).astype(np.float32)
    rstd, gamma = rng.uniform(0.5, 2, 64).astype(np.float32), rng.uniform(0.5, 1.5, 96).astype(np.float32)
    want = kernels.rms_norm_grad(dyr, xr, rstd, gamma)
    got = kernels.rms_norm_grad(dyr, xr, rstd, gamma, out=(xr, None))  # dx over x
    assert got[0] is xr
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])




@njit
def _two_call_sites(n):
    """Not cached: compiled in every run, so that it types its callee's calls here."""
    return prefix_lanes(np.uint64(0xFF), np.uint64(0), 64) + prefix_lanes(np.uint64(0xFF), np.uint64(0), n)


def test_a_constant_argument_compiles_no_second_version():
    """Test modules are not in tilesim.jit.plain_types.PACKAGES, so check a tilesim function called both ways."""
    assert _two_call_sites(32) == 16
    sigs = [str(s) for s in prefix_lanes.signatures]
    assert sigs and not any("Literal" in s for s in sigs), sigs


def test_gm_out_of_bounds_is_reported_in_fast_mode():
    with pytest.raises(tilesim.CheckError) as ei:
        _probe(1, 0, False, n=2 * TILE)  # 128 fp32 from a tensor of 64
    v = ei.value.violations[0]
    assert (v.kind, v.memory, v.offset, v.nbytes) == ("GM out of bounds", 'GM tensor "src"', 0, 512)


def test_cache_stamps_carry_the_machine_hash():
    """A cached kernel inlines tilesim's instructions and other kernel modules' device functions, so its cache stamp
    must change when those sources do (Numba's own stamp covers only the function's file); editing host code (an
    error message, the cost model, the explorer) must not make the kernels stale."""
    import sys
    from pathlib import Path

    from tilesim.jit import cache as jit_cache

    top = Path(tilesim.__file__).resolve().parents[1]
    hashed = {str(p.relative_to(top)) for p in jit_cache.device_sources()}
    for device in ("tilesim/machine/vector.py", "tilesim/core/records.py", "tilesim/runtime/launcher.py",
                   "tilesim/jit/intrinsics.py", "tilesim/numerics/b16.py", "tilesim/core/timeline.py",
                   "kernels/rms_norm.py", "kernels/common.py"):
        assert device in hashed, device
    for host in ("tilesim/errors.py", "tilesim/soc.py", "tilesim/precision.py", "tilesim/cost/model.py",
                 "tilesim/cost/params.py", "tilesim/tools/explore.py", "tilesim/checks/races.py",
                 "tiling/rms_norm.py"):
        assert host not in hashed, host
    for fn in (sys.modules["tilesim.kernels.rms_norm_grad"]._split_n_compute, probe.fn):
        stamp = fn._cache._cache_file._source_stamp
        assert isinstance(stamp, tuple) and stamp[-1] == jit_cache.MACHINE_HASH


def test_no_device_code_inlines_host_code():
    """The machine hash leaves the top-level modules and the host folders out, so no kernel or device module may
    call a compiled function of theirs: a kernel would keep the old machine code after an edit."""
    import importlib
    import pkgutil

    from numba.core.registry import CPUDispatcher

    from tilesim.jit import cache as jit_cache

    def walk(package):
        return [m.name for m in pkgutil.walk_packages(package.__path__, package.__name__ + ".")]

    folders = {m.name for m in pkgutil.iter_modules(tilesim.__path__) if m.ispkg}
    device = [f"tilesim.{f}" for f in sorted(folders - jit_cache.HOST_FOLDERS) if f not in ("kernels", "tiling")]
    names = [n for d in device for n in [d, *walk(importlib.import_module(d))]]
    names += walk(kernels) + ["examples.add_tail"]
    assert len(names) > 30

    def is_host(module):
        parts = module.split(".")
        return parts[0] == "tilesim" and (len(parts) == 2 or parts[1] in jit_cache.HOST_FOLDERS)

    for name in names:
        mod = importlib.import_module(name)
        for attr, v in vars(mod).items():
            if isinstance(v, CPUDispatcher):
                assert not is_host(v.py_func.__module__), f"{name}.{attr} is compiled code of a host module"


D_OFFS = (0, 2, 4, 30, 32, 62, 64, 65)  # the destination's offset from a 64 B line
LENGTHS = (1, 2, 63, 64, 65, 127, 256, 1000, 4097)
REGION = 8192  # bytes of the destination a case may write


@kernel
def copy_outs(ctx, t, src, dst):
    """Each (offset, length) of D_OFFS x LENGTHS: the first ``length`` bytes of ``src`` DataCopyPad'ed into its
    own region of ``dst`` (page-aligned, so that an offset into it is one from a 64 B line)."""
    u = asc.TPipe(ctx).init_buffer(asc.TBuf(asc.VECCALC), REGION).get(asc.uint8)
    asc.data_copy(u, src, REGION)
    asc.set_flag(ctx, asc.HardEvent.MTE2_MTE3, 0)
    asc.wait_flag(ctx, asc.HardEvent.MTE2_MTE3, 0)
    for i in range(len(D_OFFS)):
        for j in range(len(LENGTHS)):
            at = (i * len(LENGTHS) + j) * REGION + D_OFFS[i]
            asc.data_copy_pad(dst[at], u, asc.DataCopyExtParams(1, LENGTHS[j], 0, 0))


def test_streamed_copy_out_writes_exactly_what_memcpy_writes():
    """Into a GM tensor of 8 MiB: a head to the first 64 B line, whole lines by non-temporal stores, a tail;
    every byte of the run, no other, whatever the alignment and length."""
    src = np.random.default_rng(97).integers(0, 256, REGION, dtype=np.uint8)
    dst = page_aligned(STREAMED, np.uint8, 0xA5)  # a checked launch's temporary starts on a page too
    want = dst.copy()
    for i, d in enumerate(D_OFFS):
        for j, n in enumerate(LENGTHS):
            at = (i * len(LENGTHS) + j) * REGION + d
            want[at:at + n] = src[:n]
    launch(copy_outs, Rows(0), src, dst, block_dim=1)
    np.testing.assert_array_equal(dst, want)


def test_a_kernel_writing_a_large_output_gives_the_bits_of_a_small_one():
    """RmsNormGrad's dx of [2048, 1024] fp32 (8 MiB, written by streaming stores from both host threads) equals,
    row for row, that of its first 64 rows alone (a 256 KiB dx, written by cached stores): the split-N kernel
    computes each row of dx by the same instructions whatever the row count."""
    rng = np.random.default_rng(5)
    n, d = STREAMED // 4 // 1024, 1024
    x = rng.uniform(-2, 2, (n, d)).astype(np.float32)
    dy = rng.standard_normal((n, d), dtype=np.float32)
    rstd = (1 / np.sqrt((x.astype(np.float64) ** 2).mean(axis=1) + 1e-6)).astype(np.float32)
    gamma = rng.uniform(0.5, 1.5, d).astype(np.float32)
    big, _ = kernels.rms_norm_grad(dy, x, rstd, gamma)
    small, _ = kernels.rms_norm_grad(dy[:64], x[:64], rstd[:64], gamma)
    assert big.nbytes >= STREAMED
    np.testing.assert_array_equal(big[:64].view(np.uint32), small.view(np.uint32))
