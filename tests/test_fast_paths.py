"""The machinery issue 7 added for speed, checked for what it must not change.

- Every elementwise instruction gives the same bits whether it computes in place (dst is a source) or not: the
  in-place cases run their own loops so that they vectorise.
- Div and Sqrt follow IEEE (x/0 = ±inf, 0/0 = NaN, sqrt(-1) = NaN), as the NPU does; they do not raise.
- In-place casts (narrowing over the source, widening from the upper half) equal the out-of-place ones, and in
  checked mode every cast's destination lanes take their source lanes' shadow state, whether the source is in
  one state (a fill) or not (the lane loop).
- ``run_cores`` runs every core once whatever the host thread count; ``host_threads`` runs small launches on one
  thread and restores the caller's count; reused workspaces and shadows never leak one launch into the next.
- A launch with ``phase_local_ub`` gives each host thread one UB in fast mode only, and checked mode reports a
  kernel that breaks the promise (reads UB an earlier phase wrote).
- A constant argument does not give a device function a second compiled version (``tilesim.specialise``).
- A GM access outside a tensor is reported in fast mode too (the movers copy raw bytes).
- Copy-outs into large GM tensors, written with non-temporal stores, write exactly the bytes a memcpy writes,
  whatever the alignment and length, and a kernel's results do not change.
"""

from __future__ import annotations

import threading

import numba
import numpy as np
import pytest
from numba import njit

import kernels
import tilesim
from tilesim import vector
from tilesim.cast import KIND_BF16, KIND_FP16, narrow, widen
from tilesim.datamove import STREAM_TENSOR_BYTES, _write_gm, data_copy, data_copy_out
from tilesim.device import SHADOW_COL, at, err_width, global_tensor, make_core, slot
from tilesim.launch import (
    SERIAL_BELOW,
    finish,
    host_threads,
    page_aligned,
    prepare,
    release_scratch,
    run_cores,
    scratch,
    workspace,
    zeros,
)
from tilesim.soc import get_soc
from tilesim.ub import LocalTensor, UbPlan

SOC = get_soc("Ascend910B1")
N = 1000  # not a multiple of any vector width: the loops' tails run too
A, B, C = 0, 8192, 16384  # byte addresses of three fp32 rows in the arena


def _arena_core_args():
    arena = np.zeros((1, SOC.ub_size), np.uint8)
    plan = np.array([[0, SOC.ub_size, 1]], np.int64)
    return arena, plan, np.zeros((1, 14), np.int64), np.zeros((1, err_width(False, SOC.ub_size)), np.int64)


@njit(cache=True)
def _binary(arena, plan, cnt, err, op, dst, a, b, n):
    core = make_core(0, 1, arena, plan, cnt, err, False)
    d, x, y = LocalTensor(0, dst, -1), LocalTensor(0, a, -1), LocalTensor(0, b, -1)
    if op == 0:
        vector.add(core, d, x, y, n)
    elif op == 1:
        vector.sub(core, d, x, y, n)
    elif op == 2:
        vector.mul(core, d, x, y, n)
    else:
        vector.div(core, d, x, y, n)


@njit(cache=True)
def _unary(arena, plan, cnt, err, op, dst, a, n):
    core = make_core(0, 1, arena, plan, cnt, err, False)
    d, x = LocalTensor(0, dst, -1), LocalTensor(0, a, -1)
    if op == 0:
        vector.muls(core, d, x, np.float32(-1.5), n)
    elif op == 1:
        vector.adds(core, d, x, np.float32(0.25), n)
    elif op == 2:
        vector.exp(core, d, x, n)
    else:
        vector.sqrt(core, d, x, n)


def _rows(arena: np.ndarray) -> np.ndarray:
    return arena[0].view(np.float32)


def _fill(arena: np.ndarray, rng: np.random.Generator) -> None:
    f = _rows(arena)
    f[A // 4:A // 4 + N] = rng.uniform(-5, 5, N).astype(np.float32)
    f[B // 4:B // 4 + N] = rng.uniform(-5, 5, N).astype(np.float32)
    f[B // 4:B // 4 + 7] = [0.0, -0.0, 0.0, np.inf, np.nan, 1e-30, -3.0]  # x/0, 0/0, specials


@pytest.mark.parametrize("op", range(4), ids=["add", "sub", "mul", "div"])
@pytest.mark.parametrize("alias", ["none", "dst=a", "dst=b", "dst=a=b"])
def test_binary_in_place_equals_out_of_place(op, alias):
    arena, plan, cnt, err = _arena_core_args()
    _fill(arena, np.random.default_rng(op))
    f = _rows(arena)
    x, y = f[A // 4:A // 4 + N].copy(), f[B // 4:B // 4 + N].copy()
    with np.errstate(all="ignore"):
        ref = [x + y, x - y, x * y, x / y][op] if alias != "dst=a=b" else [x + x, x - x, x * x, x / x][op]
    dst, a, b = {"none": (C, A, B), "dst=a": (A, A, B), "dst=b": (B, A, B), "dst=a=b": (A, A, A)}[alias]
    _binary(arena, plan, cnt, err, op, dst, a, b, N)
    np.testing.assert_array_equal(f[dst // 4:dst // 4 + N].view(np.uint32), ref.view(np.uint32))


@pytest.mark.parametrize("op", range(4), ids=["muls", "adds", "exp", "sqrt"])
@pytest.mark.parametrize("in_place", [False, True])
def test_unary_in_place_equals_out_of_place(op, in_place):
    arena, plan, cnt, err = _arena_core_args()
    _fill(arena, np.random.default_rng(10 + op))
    f = _rows(arena)
    x = f[A // 4:A // 4 + N].copy()
    _unary(arena, plan, cnt, err, op, C, A, N)
    out_of_place = f[C // 4:C // 4 + N].copy()
    _unary(arena, plan, cnt, err, op, A if in_place else C, A, N)
    got = f[(A if in_place else C) // 4:(A if in_place else C) // 4 + N]
    np.testing.assert_array_equal(got.view(np.uint32), out_of_place.view(np.uint32))
    with np.errstate(all="ignore"):
        if op == 0:
            np.testing.assert_array_equal(out_of_place, x * np.float32(-1.5))
        elif op == 1:
            np.testing.assert_array_equal(out_of_place, x + np.float32(0.25))
        elif op == 3:
            np.testing.assert_array_equal(out_of_place, np.sqrt(x))  # NaN below 0, no exception


def test_div_and_sqrt_are_ieee():
    arena, plan, cnt, err = _arena_core_args()
    f = _rows(arena)
    f[A // 4:A // 4 + 4] = [1.0, -1.0, 0.0, -4.0]
    f[B // 4:B // 4 + 4] = [0.0, 0.0, 0.0, 2.0]
    _binary(arena, plan, cnt, err, 3, C, A, B, 4)
    q = f[C // 4:C // 4 + 4]
    assert q[0] == np.inf and q[1] == -np.inf and np.isnan(q[2]) and q[3] == -2.0
    _unary(arena, plan, cnt, err, 3, C, A, 4)
    r = f[C // 4:C // 4 + 4]
    assert r[0] == 1.0 and np.isnan(r[1]) and r[2] == 0.0 and np.isnan(r[3])


@njit(cache=True)
def _casts(arena, plan, cnt, err, kind, mode, n):
    """Narrow row A out of place into C and in place; widen C's b16 out of place into B and from the upper half
    of row A (the kernels' in-place widening)."""
    core = make_core(0, 1, arena, plan, cnt, err, False)
    ta, tb, tc = LocalTensor(0, A, -1), LocalTensor(0, B, -1), LocalTensor(0, C, -1)
    vector.cast_from_f32(core, tc, ta, n, kind, mode)
    vector.cast_from_f32(core, ta, ta, n, kind, mode)
    vector.cast_to_f32(core, tb, tc, n, kind)
    vector.copy(core, at(ta, 2 * n), tb, (n + 1) // 2)  # the b16 bits again, now in A's upper half
    vector.cast_to_f32(core, ta, at(ta, 2 * n), n, kind)


@pytest.mark.parametrize("kind", [KIND_BF16, KIND_FP16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("n", [1, 255, 256, 257, 1000, 1536])
def test_in_place_casts_equal_out_of_place(kind, n):
    arena, plan, cnt, err = _arena_core_args()
    f = _rows(arena)
    x = np.random.default_rng(n).uniform(-70000, 70000, n).astype(np.float32)
    f[A // 4:A // 4 + n] = x
    _casts(arena, plan, cnt, err, kind, 1, n)
    fmt = "bfloat16" if kind == KIND_BF16 else "float16"
    bits = narrow(x, fmt)
    u16 = arena[0].view(np.uint16)
    np.testing.assert_array_equal(u16[C // 2:C // 2 + n], bits)
    np.testing.assert_array_equal(f[B // 4:B // 4 + n].view(np.uint32), widen(bits, fmt).view(np.uint32))


@njit(cache=True)
def _cast_in_checked_mode(arena, plan, cnt, err, which, n):
    core = make_core(0, 1, arena, plan, cnt, err, True)
    ta, tc = LocalTensor(0, A, -1), LocalTensor(0, C, -1)
    if which == 0:  # widening from the upper half of the destination
        vector.cast_to_f32(core, ta, at(ta, 2 * n), n, KIND_BF16)
    elif which == 1:  # narrowing over the source
        vector.cast_from_f32(core, ta, ta, n, KIND_BF16, 1)
    elif which == 2:
        vector.cast_to_f32(core, tc, ta, n, KIND_BF16)
    else:
        vector.cast_from_f32(core, tc, ta, n, KIND_BF16, 1)


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
    arena = np.zeros((1, SOC.ub_size), np.uint8)
    plan = np.array([[0, SOC.ub_size, 1]], np.int64)
    err = np.zeros((1, err_width(True, SOC.ub_size)), np.int64)
    shadow = err[0, SHADOW_COL:].view(np.uint8)
    src_size, dst_size = (2, 4) if which in (0, 2) else (4, 2)
    src_at = A + 2 * n if which == 0 else A
    dst_at = C if which >= 2 else A
    rng = np.random.default_rng(n + which)
    src = {"written": np.full(n * src_size, 1), "unwritten": np.zeros(n * src_size),
           "clobbered": np.full(n * src_size, 2), "mixed": rng.integers(0, 3, n * src_size),
           "one unwritten byte": np.full(n * src_size, 1)}[states].astype(np.uint8)
    if states == "one unwritten byte":
        src[n * src_size - 1] = 0  # the last byte: past the whole 8-byte words for the odd n
    shadow[src_at:src_at + n * src_size] = src
    _cast_in_checked_mode(arena, plan, np.zeros((1, 14), np.int64), err, which, n)
    got = shadow[dst_at:dst_at + n * dst_size].reshape(n, dst_size)
    np.testing.assert_array_equal(got, np.repeat(_lane_states(src, src_size)[:, None], dst_size, axis=1))


@njit(cache=True, nogil=True)
def _mark(first, last, hits):
    for c in range(first, last):
        hits[c] += 1


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("block_dim", [1, 2, 3, 48])
def test_run_cores_runs_every_core_once(threads, block_dim):
    before = numba.get_num_threads()
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    try:
        hits = np.zeros(block_dim, np.int64)
        run_cores(_mark, block_dim, hits)
    finally:
        numba.set_num_threads(before)
    assert hits.tolist() == [1] * block_dim


def test_host_threads_serialises_small_launches_and_restores_the_count():
    before = numba.get_num_threads()
    small = np.zeros(SERIAL_BELOW // 8, np.float32)
    big = np.zeros(SERIAL_BELOW // 4, np.float32)
    calls: list[tuple[int, int, int]] = []

    def cores(first: int, last: int) -> None:
        calls.append((first, last, threading.get_ident()))

    numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
    try:
        with host_threads(big) as n:
            assert n == numba.get_num_threads()
            with host_threads(small) as inner:  # the innermost block decides
                assert inner == 1
                run_cores(cores, 48)
                assert calls == [(0, 48, threading.get_ident())]
            calls.clear()
            run_cores(cores, 48)
            if n == 2:
                assert sorted(c[:2] for c in calls) == [(0, 24), (24, 48)] and len({c[2] for c in calls}) == 2
            else:
                assert calls == [(0, 48, threading.get_ident())]
        assert numba.get_num_threads() == min(2, numba.config.NUMBA_NUM_THREADS)
    finally:
        numba.set_num_threads(before)


def test_phase_local_ub_gives_each_host_thread_one_ub_in_fast_mode_only():
    """A fast launch with phase_local_ub hands each host thread's cores one arena row (a stride-0 view), the
    threads' rows apart; a checked launch, or one without the promise, gets the per-core arena itself."""
    before = numba.get_num_threads()
    seen: list[tuple[int, np.ndarray]] = []

    def cores(first: int, last: int, arena: np.ndarray, tag: int) -> None:
        assert tag == 7  # the other arguments pass unchanged
        seen.append((first, arena))

    plan = UbPlan(SOC.ub_size)
    plan.add("x", 256)
    big = np.zeros(SERIAL_BELOW // 4, np.float32)
    numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
    try:
        for checks, promise in ((False, True), (True, True), (False, False)):
            launch = prepare("ub", SOC, None, plan.check(), 48, checks, [], phase_local_ub=promise)
            a = launch.arena
            with host_threads(big) as n:
                seen.clear()
                run_cores(cores, 48, a, 7)
            finish(launch)
            assert len(seen) == n
            for first, view in seen:
                if checks or not promise:
                    assert view is a
                    continue
                k = 0 if first == 0 else 1
                assert view.shape == (48, SOC.ub_size) and view.strides == (0, 1)
                assert view.ctypes.data == a[k * (a.shape[0] // n)].ctypes.data
            if n == 2 and not checks and promise:  # a guard of rows between the threads' UBs
                assert abs(seen[0][1].ctypes.data - seen[1][1].ctypes.data) >= 2 * SOC.ub_size
    finally:
        numba.set_num_threads(before)


@njit(cache=True, nogil=True)
def _keep_across_phases(first, last, phase, block_dim, arena, plan, cnt, err, checks, src, dst):
    """Phase 0 loads each core's 64 fp32 into UB; phase 1 copies that UB out: it relies on UB kept across
    SyncAll, which a kernel with phase_local_ub promises not to do."""
    for c in range(first, last):
        core = make_core(c, block_dim, arena, plan, cnt, err, checks)
        x = slot(core, 0, 0)
        if phase == 0:
            data_copy(core, x, global_tensor(0, src), c * 64, 64)
        else:
            data_copy_out(core, global_tensor(1, dst), c * 64, x, 64)


def _run_keep(checks: bool, promise: bool) -> np.ndarray:
    plan = UbPlan(SOC.ub_size)
    plan.add("x", 256)
    block_dim = 4
    src = np.arange(block_dim * 64, dtype=np.float32)
    dst = np.full_like(src, -1.0)
    launch = prepare("keep", SOC, None, plan.check(), block_dim, checks, ["src", "dst"], phase_local_ub=promise)
    with host_threads(src, dst):
        for phase in range(2):
            run_cores(_keep_across_phases, block_dim, phase, block_dim, launch.arena, launch.plan_array,
                      launch.counters, launch.err, launch.core_checks, src, dst)
    finish(launch)
    return dst


def test_checked_mode_holds_a_kernel_to_its_phase_local_ub_promise():
    src = np.arange(4 * 64, dtype=np.float32)
    np.testing.assert_array_equal(_run_keep(True, False), src)  # UB kept across SyncAll, as on the NPU
    np.testing.assert_array_equal(_run_keep(False, False), src)
    with pytest.raises(tilesim.CheckError) as ei:  # the promise broken: phase 1 reads UB phase 0 wrote
        _run_keep(True, True)
    v = ei.value.violations[0]
    assert v.kind == "uninitialised read" and v.phase == 1, v
    # what fast mode then does: the cores of a host thread share one UB, so each copies out the last one's tile
    got = _run_keep(False, True).reshape(4, 64)
    np.testing.assert_array_equal(got, np.broadcast_to(src.reshape(4, 64)[3], (4, 64)))


def test_reused_buffers_start_clean_where_they_must():
    release_scratch()
    z = zeros("test", 1000)
    z[:] = 7.0
    again = zeros("test", 1000)
    assert again.dtype == np.float32 and not again.any()  # shadows are zeroed on every reuse
    again[:] = 7.0
    with host_threads(again):  # a small launch's block: this thread zeroes them itself
        assert not zeros("test", 1000).any()
    w1 = workspace(4096)
    w2 = workspace(1024)
    assert w2.base is w1.base or np.shares_memory(w1, w2)  # one workspace per thread, reused
    release_scratch()


def test_ub_workspaces_temporaries_and_shadows_start_on_a_page():
    """numpy puts a large array 16 B past a page; a UB mapped there splits the host's cache lines under every
    vector access. Every row of the arena, the reused buffers, and each core's shadow start on a 64 B line."""
    plan = UbPlan(SOC.ub_size)
    plan.add("x", 256)
    for checks in (False, True):
        launch = prepare("aligned", SOC, None, plan.check(), 48, checks, [])
        assert launch.arena.ctypes.data % 4096 == 0 and launch.arena.strides[0] % 64 == 0
        if checks:
            assert all(launch.err[c, SHADOW_COL:].ctypes.data % 64 == 0 for c in range(48))
            assert not launch.err.any()
        finish(launch)
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
    from kernels.common import copy_back, write_targets

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
    from kernels.common import write_targets

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
    from tilesim import memo

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


@njit(cache=True)
def _device_fn(core, t, n):
    vector.duplicate(core, t, 1.0, n)


@njit(cache=True)
def _two_call_sites(arena, plan, cnt, err, n):
    core = make_core(0, 1, arena, plan, cnt, err, False)
    _device_fn(core, LocalTensor(0, 0, -1), 64)  # a constant
    _device_fn(core, LocalTensor(0, 0, -1), n)  # a variable


def test_a_constant_argument_compiles_no_second_version():
    """Test modules are not in tilesim.specialise.PACKAGES, so check a tilesim function called both ways."""
    arena, plan, cnt, err = _arena_core_args()
    _two_call_sites(arena, plan, cnt, err, 32)
    sigs = [str(s) for s in vector.duplicate.signatures]
    assert not any("Literal" in s for s in sigs), sigs


@njit(cache=True)
def _read_past_the_end(arena, plan, cnt, err, src, n):
    core = make_core(0, 1, arena, plan, cnt, err, False)
    data_copy(core, LocalTensor(0, 0, -1), global_tensor(0, src), 0, n)


def test_gm_out_of_bounds_is_reported_in_fast_mode():
    plan = UbPlan(SOC.ub_size)
    plan.add("t", 4096)
    launch = prepare("oob", SOC, None, plan, 1, False, ["src"])
    src = np.ones(64, np.float32)
    _read_past_the_end(launch.arena, launch.plan_array, launch.counters, launch.err, src, 128)
    with pytest.raises(tilesim.CheckError) as ei:
        finish(launch)
    v = ei.value.violations[0]
    assert (v.kind, v.memory, v.offset, v.nbytes) == ("GM out of bounds", 'GM tensor "src"', 0, 512)


def test_cache_stamps_carry_the_machine_hash():
    """A cached kernel inlines tilesim's primitives, so its cache stamp must change when tilesim's device sources
    do (Numba's own stamp covers only the function's file)."""
    import hashlib
    import sys
    from pathlib import Path

    from tilesim import jit_cache

    h = hashlib.sha256()
    root = Path(jit_cache.__file__).parent
    for p in sorted(root.rglob("*.py")):  # tilesim/machine/ too
        if p.name in jit_cache.HOST_ONLY and p.parent == root:  # modules no kernel inlines
            continue
        h.update(str(p.relative_to(root)).encode())
        h.update(p.read_bytes())
    assert jit_cache.MACHINE_HASH == h.hexdigest()[:16]
    for fn in (sys.modules["kernels.rms_norm_grad"]._split_n_compute, _two_call_sites):
        stamp = fn._cache._cache_file._source_stamp
        assert isinstance(stamp, tuple) and stamp[-1] == jit_cache.MACHINE_HASH


def test_no_device_code_inlines_a_host_only_module():
    """The machine hash leaves the HOST_ONLY modules out, so no kernel or device module may call a compiled
    function of theirs: a kernel would keep the old machine code after an edit."""
    import importlib
    import pkgutil
    from pathlib import Path

    from numba.core.registry import CPUDispatcher

    from tilesim import jit_cache

    host = {"tilesim." + n[:-3] for n in jit_cache.HOST_ONLY}
    names = [f"tilesim.{m.name}" for m in pkgutil.iter_modules(tilesim.__path__) if f"tilesim.{m.name}" not in host]
    names += [f"kernels.{p.stem}" for p in Path(kernels.__file__).parent.glob("*.py")]
    names += ["examples.add_tail"]
    assert len(names) > 15
    for name in names:
        mod = importlib.import_module(name)
        for attr, v in vars(mod).items():
            if isinstance(v, CPUDispatcher):
                assert v.py_func.__module__ not in host, f"{name}.{attr} is compiled code of a HOST_ONLY module"


@njit(cache=True)
def _write_at(dst, d_off, src, s_off, n, stream):
    _write_gm(dst.ctypes.data + d_off, src.ctypes.data + s_off, n, stream)


@pytest.mark.parametrize("d_off", [0, 2, 4, 30, 32, 62, 64, 65])
@pytest.mark.parametrize("n", [0, 1, 2, 63, 64, 65, 127, 256, 1000, 4097])
def test_streamed_copy_out_writes_exactly_what_memcpy_writes(d_off, n):
    """Head to the first 64 B line, whole lines by non-temporal stores, tail: every byte of the run, no other."""
    rng = np.random.default_rng(n + 97 * d_off)
    src = rng.integers(0, 256, 8192, dtype=np.uint8)
    streamed, plain = np.full(8192, 0xA5, np.uint8), np.full(8192, 0xA5, np.uint8)
    base = -streamed.ctypes.data % 64  # a 64 B-aligned origin, so d_off sets the alignment
    _write_at(streamed, base + d_off, src, 3, n, True)
    _write_at(plain, base + d_off, src, 3, n, False)
    np.testing.assert_array_equal(streamed, plain)
    assert (plain[base + d_off:base + d_off + n] == src[3:3 + n]).all()


def test_a_kernel_writing_a_large_output_gives_the_bits_of_a_small_one():
    """RmsNormGrad's dx of [2048, 1024] fp32 (8 MiB, written by streaming stores from both host threads) equals,
    row for row, that of its first 64 rows alone (a 256 KiB dx, written by cached stores): the split-N kernel
    computes each row of dx by the same instructions whatever the row count."""
    rng = np.random.default_rng(5)
    n, d = STREAM_TENSOR_BYTES // 4 // 1024, 1024
    x = rng.uniform(-2, 2, (n, d)).astype(np.float32)
    dy = rng.standard_normal((n, d), dtype=np.float32)
    rstd = (1 / np.sqrt((x.astype(np.float64) ** 2).mean(axis=1) + 1e-6)).astype(np.float32)
    gamma = rng.uniform(0.5, 1.5, d).astype(np.float32)
    big, _ = kernels.rms_norm_grad(dy, x, rstd, gamma)
    small, _ = kernels.rms_norm_grad(dy[:64], x[:64], rstd[:64], gamma)
    assert big.nbytes >= STREAM_TENSOR_BYTES
    np.testing.assert_array_equal(big[:64].view(np.uint32), small.view(np.uint32))
