"""The programming model (tilesim.machine, tilesim.runtime.launcher): the element-wise families against numpy statements
of their documented semantics, special values included; level-0 masks and strides; the queue rules and what
breaks them.

Semantics are checked in the checked build, which computes the fast build's bits (every op's checked-mode test
compares the two), so that its operand, bounds and sync checks see each form too and ``pytest --tilesim-checks``
finds these kernels compiled; a test of what the NPU does with a broken kernel runs fast."""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np
import pytest

from tilesim import CheckError, UbOverflowError
from tilesim.machine import (
    CMPMODE,
    MASK_PLACEHOLDER,
    PIPE_V,
    SELMODE,
    VECCALC,
    VECIN,
    VECOUT,
    BinaryRepeatParams,
    BrcbRepeatParams,
    CopyRepeatParams,
    DataCopyParams,
    HardEvent,
    TBuf,
    TPipe,
    TQue,
    UnaryRepeatParams,
    abs_,
    add,
    adds,
    brcb,
    broadcast,
    compare,
    copy,
    data_copy,
    div,
    duplicate,
    exp,
    gather,
    int16,
    int32,
    max_,
    maxs,
    min_,
    mul,
    muls,
    pipe_barrier,
    reduce_sum,
    relu,
    select,
    set_flag,
    set_mask_count,
    set_mask_norm,
    size_of,
    sqrt,
    sub,
    transpose,
    uint8,
    uint32,
    wait_flag,
    whole_reduce_sum,
)
from tilesim.numerics.expf import exp_values
from tilesim.runtime.launcher import KernelError, kernel, launch

N = 256  # elements per operand (1 KiB of fp32, 512 B of half)
SPECIAL = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-40, -1e-40, 65504.0, 3.0, -2.5], np.float32)


@dataclass(frozen=True)
class Rows:
    n: int


@kernel
def count_forms(ctx, t, a, b, out):
    """Row k of ``out`` = the k-th count-form instruction on a and b (in the order of COUNT_OPS)."""
    pipe = TPipe(ctx)
    q = pipe.init_buffer(TQue(VECIN, 1), 2, t.n * 4)
    tmp = pipe.init_buffer(TBuf(VECCALC), t.n * 4)
    qo = pipe.init_buffer(TQue(VECOUT, 1), 1, t.n * 4)
    x, y = q.alloc_tensor(a.dtype), q.alloc_tensor(a.dtype)
    data_copy(x, a, t.n)
    data_copy(y, b, t.n)
    q.enque(x)
    x = q.deque(a.dtype)
    q.enque(y)
    y = q.deque(a.dtype)
    z = tmp.get(a.dtype)
    for k in range(12):
        o = qo.alloc_tensor(a.dtype)
        if k == 0:
            add(o, x, y, t.n)
        elif k == 1:
            sub(o, x, y, t.n)
        elif k == 2:
            mul(o, x, y, t.n)
        elif k == 3:
            div(o, x, y, t.n)
        elif k == 4:
            max_(o, x, y, t.n)
        elif k == 5:
            min_(o, x, y, t.n)
        elif k == 6:
            adds(o, x, 1.5, t.n)
        elif k == 7:
            muls(o, x, -2.0, t.n)
        elif k == 8:
            maxs(o, x, 0.5, t.n)
        elif k == 9:
            abs_(o, x, t.n)
        elif k == 10:
            sqrt(o, x, t.n)
        else:
            relu(z, x, t.n)
            exp(o, z, t.n)
        qo.enque(o)
        o = qo.deque(a.dtype)
        data_copy(out[k * t.n], o, t.n)
        qo.free_tensor(o)
    q.free_tensor(x)
    q.free_tensor(y)


def _expected(x: np.ndarray, y: np.ndarray) -> list[np.ndarray]:
    with np.errstate(all="ignore"):
        return [x + y, x - y, x * y, x / y, np.maximum(x, y), np.minimum(x, y), x + np.float32(1.5),
                x * np.float32(-2), np.maximum(x, np.float32(0.5)), np.abs(x), np.sqrt(x),
                np.exp(np.where((x > 0) | np.isnan(x), x, np.float32(0)))]  # Relu passes NaN on


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_count_forms_match_numpy(dtype: type) -> None:
    rng = np.random.default_rng(1)
    x = rng.uniform(-3, 3, N).astype(np.float32)
    y = rng.uniform(0.5, 3, N).astype(np.float32) * rng.choice([-1, 1], N).astype(np.float32)
    x[:SPECIAL.size], y[:SPECIAL.size] = SPECIAL, SPECIAL[::-1]
    x, y = x.astype(dtype), y.astype(dtype)
    out = np.zeros(12 * N, dtype)
    launch(count_forms, Rows(N), x, y, out, block_dim=1, checks=True)
    got = out.reshape(12, N)
    x32 = x.astype(np.float32)
    relu_x = np.where((x32 > 0) | np.isnan(x32), x32, np.float32(0))
    for k, want in enumerate(_expected(x.astype(np.float32), y.astype(np.float32))):
        with np.errstate(over="ignore"):
            want = want.astype(dtype)  # half: computed in fp32, rounded once
        if k == 11 and dtype == np.float32:  # Exp: tilesim.numerics.expf's exponential, bit for bit
            np.testing.assert_array_equal(got[k].view(np.uint32), exp_values(relu_x).view(np.uint32))
            np.testing.assert_allclose(got[k], want, rtol=2e-7)  # within 1 ulp of the correctly rounded value
        elif k == 11:
            np.testing.assert_allclose(got[k], want, rtol=1e-3)
        else:
            np.testing.assert_array_equal(got[k], want, err_msg=f"instruction {k}")
    assert np.isnan(got[4, 0]) and np.isnan(got[5, 0]), "Max and Min propagate NaN"


@kernel
def level0(ctx, t, a, g, out):
    """out[r, :] = a[r, :] * g for 4 rows of 64 fp32 (src1RepStride 0 re-reads the one gamma row), with the mask
    pattern selecting the even lanes; the odd lanes keep Duplicate's -1."""
    pipe = TPipe(ctx)
    q = pipe.init_buffer(TQue(VECIN, 1), 2, 4 * 64 * 4)
    qo = pipe.init_buffer(TQue(VECOUT, 1), 1, 4 * 64 * 4)
    x, gamma = q.alloc_tensor(a.dtype), q.alloc_tensor(a.dtype)
    data_copy(x, a, 256)
    data_copy(gamma, g, 64)
    q.enque(x)
    x = q.deque(a.dtype)
    q.enque(gamma)
    gamma = q.deque(a.dtype)
    o = qo.alloc_tensor(a.dtype)
    duplicate(o, -1.0, 256)
    mask = (0x5555555555555555, 0)
    mul(o, x, gamma, mask, 4, BinaryRepeatParams(1, 1, 1, 8, 8, 0))
    add(o[128], o[128], o[128], 0, 2, BinaryRepeatParams(1, 1, 1, 8, 8, 8))  # mask 0: no instruction
    qo.enque(o)
    o = qo.deque(a.dtype)
    data_copy(out, o, 256)
    q.free_tensor(x)
    q.free_tensor(gamma)
    qo.free_tensor(o)


def test_level0_mask_and_broadcast_stride() -> None:
    rng = np.random.default_rng(2)
    a = rng.standard_normal((4, 64)).astype(np.float32)
    g = rng.standard_normal(64).astype(np.float32)
    out = np.zeros((4, 64), np.float32)
    rep = launch(level0, Rows(0), a, g, out, block_dim=1, checks=True)
    want = np.full((4, 64), -1.0, np.float32)
    want[:, ::2] = (a * g)[:, ::2]
    np.testing.assert_array_equal(out, want)
    assert rep.total("vec_binary") == 4  # the masked-off call is no instruction


@kernel
def level0_runs(ctx, t, a, g, out):
    """The mask as a count (the first t.n lanes of each repeat, a run): out = a * g (src1RepStride 0: one g
    repeat for all) then + 2, on 4 repeats of the lanes of a.dtype, with the lanes off keeping Duplicate's -1."""
    pipe = TPipe(ctx)
    q = pipe.init_buffer(TQue(VECIN, 1), 2, 1024)
    qo = pipe.init_buffer(TQue(VECOUT, 1), 1, 1024)
    x, gamma = q.alloc_tensor(a.dtype), q.alloc_tensor(a.dtype)
    lanes = 1024 // size_of(a.dtype)  # 4 repeats of 256 B
    data_copy(x, a, lanes)
    data_copy(gamma, g, lanes // 4)  # one repeat
    q.enque(x)
    x = q.deque(a.dtype)
    q.enque(gamma)
    gamma = q.deque(a.dtype)
    o = qo.alloc_tensor(a.dtype)
    duplicate(o, -1.0, lanes)
    pipe_barrier(ctx, PIPE_V)
    mul(o, x, gamma, t.n, 4, BinaryRepeatParams(1, 1, 1, 8, 8, 0))
    pipe_barrier(ctx, PIPE_V)
    adds(o, o, 2.0, t.n, 4, UnaryRepeatParams(1, 1, 8, 8))
    qo.enque(o)
    o = qo.deque(a.dtype)
    data_copy(out, o, lanes)
    q.free_tensor(x)
    q.free_tensor(gamma)
    qo.free_tensor(o)


@pytest.mark.parametrize("dtype,n", [(np.float32, 64), (np.float32, 37), (np.float16, 128), (np.float16, 100),
                                     (np.float16, 64), (np.float16, 7)])
def test_level0_mask_runs(dtype: type, n: int) -> None:
    """A mask that is a run of the first lanes takes a loop of its own, and one loop for all the repeats when they
    lie end to end (the Adds here with every lane on): the same results as the lane walk."""
    lanes = 256 // np.dtype(dtype).itemsize
    rng = np.random.default_rng(n)
    a = rng.standard_normal((4, lanes)).astype(dtype)
    g = rng.standard_normal(lanes).astype(dtype)
    out = np.zeros((4, lanes), dtype)
    launch(level0_runs, Rows(n), a, g, out, block_dim=1, checks=True)
    want = np.full((4, lanes), -1.0, dtype)
    prod = (a.astype(np.float32) * g.astype(np.float32)).astype(dtype)
    want[:, :n] = (prod.astype(np.float32) + 2).astype(dtype)[:, :n]
    np.testing.assert_array_equal(out, want)


@kernel
def counter_mask(ctx, t, a, out):
    """After SetMaskCount the mask (130, 0) of a level-0 call is a count of 130 elements, repeat_times (1) ignored:
    掩码.md's Adds (blocks 2 apart, repeats 16 blocks apart), then a Muls with MASK_PLACEHOLDER (the register the
    Adds left), both into out[:512] over Duplicate's -1; a WholeReduceSum with the same mask, a sum per repeat
    (128 and 2 lanes), into out[512:514]."""
    pipe = TPipe(ctx)
    q = pipe.init_buffer(TQue(VECIN, 1), 1, 1024)
    qo = pipe.init_buffer(TQue(VECOUT, 1), 1, 1056)
    x = q.alloc_tensor(a.dtype)
    data_copy(x, a, 512)
    q.enque(x)
    x = q.deque(a.dtype)
    o = qo.alloc_tensor(a.dtype)
    duplicate(o, -1.0, 528)
    pipe_barrier(ctx, PIPE_V)
    set_mask_count(ctx)
    adds(o, x, 1.0, (130, 0), 1, UnaryRepeatParams(2, 2, 16, 16))
    pipe_barrier(ctx, PIPE_V)
    muls(o, o, 2.0, MASK_PLACEHOLDER, 1, UnaryRepeatParams(2, 2, 16, 16))
    whole_reduce_sum(o[512], x, (130, 0), 1, 1, 1, 8)
    set_mask_norm(ctx)
    qo.enque(o)
    o = qo.deque(a.dtype)
    data_copy(out, o, 528)
    q.free_tensor(x)
    qo.free_tensor(o)


def test_counter_mode_takes_the_mask_argument_as_a_count() -> None:
    a = (np.arange(512) % 9 - 4).astype(np.float16)  # small integers: every sum exact in half
    out = np.zeros(528, np.float16)
    rep = launch(counter_mask, Rows(0), a, out, block_dim=1, checks=True)
    blocks = np.concatenate([np.arange(b * 16, b * 16 + 16) for b in range(0, 16, 2)] + [np.arange(256, 258)])
    want = np.full(528, -1.0, np.float16)
    want[blocks] = (a[blocks] + 1) * 2
    want[512:514] = [a[:128].astype(np.float32).sum(), a[128:130].astype(np.float32).sum()]
    np.testing.assert_array_equal(out, want)
    assert rep.total("vec_scalar") == 2 * 2  # two repeats each, the second of 2 lanes


@kernel
def fill_bf16(ctx, t, out):
    """Duplicate of a float scalar into bfloat16: the count form into out[:16], the level-0 form into out[16:]."""
    pipe = TPipe(ctx)
    qo = pipe.init_buffer(TQue(VECOUT, 1), 1, 64)
    o = qo.alloc_tensor(out.dtype)
    duplicate(o, 3.14159, 16)
    duplicate(o[16], -2.75, 16, 1, 1, 8)
    qo.enque(o)
    o = qo.deque(out.dtype)
    data_copy(out, o, 32)
    qo.free_tensor(o)


def test_duplicate_rounds_its_scalar_to_bfloat16() -> None:
    """The scalar is a bfloat16_t, rounded to nearest even (3.14159 is 0x4049), not its bits' integer."""
    out = np.zeros(32, ml_dtypes.bfloat16)
    launch(fill_bf16, Rows(0), out, block_dim=1, checks=True)
    want = np.repeat(np.array([3.14159, -2.75], np.float32).astype(ml_dtypes.bfloat16), 16)
    np.testing.assert_array_equal(out.view(np.uint16), want.view(np.uint16))


@kernel
def misuse(ctx, t, a, out):
    pipe = TPipe(ctx)
    q = pipe.init_buffer(TQue(VECIN, 1), 2, 1024)
    x = q.alloc_tensor(a.dtype)
    data_copy(x, a, 256)
    if t.n == 1:  # EnQue past depth 1
        q.enque(x)
        q.enque(q.alloc_tensor(a.dtype))
    elif t.n == 2:  # a third AllocTensor of a queue of two buffers
        q.alloc_tensor(a.dtype)
        q.alloc_tensor(a.dtype)
    elif t.n == 3:  # DeQue of an empty queue
        q.deque(a.dtype)
    elif t.n == 4:  # FreeTensor twice
        q.free_tensor(x)
        q.free_tensor(x)
    elif t.n == 5:  # a buffer larger than the UB
        pipe.init_buffer(TBuf(VECCALC), 1 << 20)
    elif t.n == 6:  # use after FreeTensor
        q.free_tensor(x)
        data_copy(out, x, 256)
    else:  # straight back out: MTE3 waits for MTE2 by a flag
        set_flag(ctx, HardEvent.MTE2_MTE3, 0)
        wait_flag(ctx, HardEvent.MTE2_MTE3, 0)
        data_copy(out, x, 256)


@pytest.mark.parametrize("case,error,words", [
    (1, KernelError, "EnQue past the queue's depth 1"), (2, KernelError, "AllocTensor with all 2 buffers"),
    (3, KernelError, "DeQue of an empty queue"), (4, KernelError, "FreeTensor of buffer 0"),
    (5, UbOverflowError, "more than the core's UB"),
    (6, CheckError, "use after free: a LocalTensor of allocation 0 used after its FreeTensor")])
def test_queue_misuse_stops_the_kernel(case: int, error: type, words: str) -> None:
    a = np.ones(256, np.float32)
    out = np.zeros(256, np.float32)
    with pytest.raises(error, match=words) as e:
        launch(misuse, Rows(case), a, out, block_dim=2, checks=True)
    if error is KernelError:
        assert "core 0, q" in str(e.value)
    launch(misuse, Rows(0), a, out, block_dim=1, checks=True)
    np.testing.assert_array_equal(out, a)


@kernel
def wrong_type(ctx, t, a, out):
    pipe = TPipe(ctx)
    b = pipe.init_buffer(TBuf(VECCALC), 1024)
    x = b.get(a.dtype)
    add(x, x, x, 16)


def test_an_instruction_on_a_type_its_api_does_not_take() -> None:
    a = np.zeros(16, ml_dtypes.bfloat16)
    with pytest.raises(KernelError, match="Add on bfloat16_t: the A2 API does not take"):
        launch(wrong_type, Rows(0), a, a.copy(), block_dim=1)


@kernel
def mixed_types(ctx, t, a, h, out):
    """Case ``t.n``: one instruction of a family with one element type T, given a float and a half tensor (or
    another type of T's size)."""
    pipe = TPipe(ctx)
    b = pipe.init_buffer(TBuf(VECCALC), 2048)
    x, y = b.get(a.dtype), b.get(h.dtype)
    bits, offs = b.get(uint8), b.get(uint32)
    if t.n == 1:
        adds(x, y, 1.0, 64)
    elif t.n == 2:
        add(y, x, x, 64)
    elif t.n == 3:
        exp(x, y, 64, 1, UnaryRepeatParams(1, 1, 8, 8))
    elif t.n == 4:
        copy(y, x, 64, 1, CopyRepeatParams(1, 1, 8, 8))
    elif t.n == 5:
        whole_reduce_sum(x, y, 64, 1, 1, 1, 8)
    elif t.n == 6:
        reduce_sum(x, x, y, 64)
    elif t.n == 7:
        brcb(x, x.reinterpret_cast(int32), 1, BrcbRepeatParams(1, 8))
    elif t.n == 8:
        compare(bits, x, y, CMPMODE.LT, 64)
    elif t.n == 9:
        select(x, bits, x, y, SELMODE.VSEL_TENSOR_TENSOR_MODE, 64)
    elif t.n == 10:
        gather(x, y, offs, 0, 64)
    elif t.n == 11:
        transpose(y, y.reinterpret_cast(int16))
    elif t.n == 12:
        broadcast(x, y, (2, 64), (1, 64), 0)
    else:
        data_copy(x, a, 64)
        set_flag(ctx, HardEvent.MTE2_MTE3, 0)
        wait_flag(ctx, HardEvent.MTE2_MTE3, 0)
        data_copy(out, x, 8)


def test_every_fault_kind_has_a_number_of_its_own() -> None:
    """The fault kinds, numbered in three modules (the pipe's, SyncAll's, the UB bounds'), never share a number:
    a shared one words one stop as the other."""
    from tilesim.core import records as device
    from tilesim.machine import pipe, sync

    kinds = {n: v for m in (pipe, sync, device) for n, v in vars(m).items()  # a name imported is one kind
             if n.startswith("FAULT_") and n not in ("FAULT_WORDS", "FAULT_TEXT")}
    assert len(set(kinds.values())) == len(kinds), kinds
    assert set(pipe.FAULT_TEXT) == set(kinds.values())


@pytest.mark.parametrize("checks", [False, True])
@pytest.mark.parametrize("case,words", [
    (1, "Adds with dst float and src half"), (2, "Add with dst half and src0 float"),
    (3, "Exp with dst float and src half"), (4, "Copy with dst half and src float"),
    (5, "WholeReduceSum with dst float and src half"), (6, "ReduceSum with dst float and sharedTmpBuffer half"),
    (7, "Brcb with dst float and src int32_t"), (8, "Compare with src0 float and src1 half"),
    (9, "Select with dst float and src1 half"), (10, "Gather with dst float and src half"),
    (11, "Transpose with dst half and src int16_t"), (12, "Broadcast with dst float and src half")])
def test_an_instruction_of_one_element_type_refuses_two(case: int, words: str, checks: bool) -> None:
    """Ascend C's instructions have one template T for their tensors (Adds<T>(dst, src, ...)): a call mixing
    types does not compile there, and stops the kernel here, in either build, naming both types (a run-time stop,
    so that a branch for another dtype may hold it; before, the call ran reading half bits as floats, or failed
    in Numba's typing)."""
    a, h, out = np.ones(64, np.float32), np.ones(64, np.float16), np.zeros(8, np.float32)
    with pytest.raises(KernelError, match=f"mixed_types, core 0, an instruction: {words}: the API has one element "
                                          "type T for these tensors"):
        launch(mixed_types, Rows(case), a, h, out, block_dim=1, checks=checks)
    np.testing.assert_array_equal(out, 0)
    launch(mixed_types, Rows(0), a, h, out, block_dim=1, checks=checks)  # the branches not taken hold them
    np.testing.assert_array_equal(out, 1)


@kernel
def copies(ctx, t, a, out):
    """out[0:64] = a copied by vcopy (level-0) and by a UB-to-UB DataCopy, then doubled by a masked Muls over a
    160 B buffer (40 lanes of a repeat: the access ends at the last lane, inside the buffer); out[64:128] = the
    same rows' even blocks interleaved by two strided Copys into one buffer."""
    pipe = TPipe(ctx)
    q = pipe.init_buffer(TQue(VECIN, 1), 1, 64 * 4)
    qo = pipe.init_buffer(TQue(VECOUT, 1), 1, 128 * 4)
    w = pipe.init_buffer(TBuf(VECCALC), 64 * 4)
    small = pipe.init_buffer(TBuf(VECCALC), 40 * 4)
    x = q.alloc_tensor(a.dtype)
    data_copy(x, a, 64)
    q.enque(x)
    x = q.deque(a.dtype)
    o = qo.alloc_tensor(a.dtype)
    wt, st = w.get(a.dtype), small.get(a.dtype)
    copy(wt, x, 64, 1, CopyRepeatParams(1, 1, 8, 8))
    pipe_barrier(ctx, PIPE_V)
    data_copy(st, wt, DataCopyParams(1, 5, 0, 0))  # 40 elements: five 32 B blocks, UB to UB
    pipe_barrier(ctx, PIPE_V)
    muls(st, st, 2.0, 40, 1, UnaryRepeatParams(1, 1, 8, 8))
    pipe_barrier(ctx, PIPE_V)
    data_copy(o, st, DataCopyParams(1, 5, 0, 0))
    duplicate(o[40], 0.0, 24)
    copy(o[64], x, 32, 1, CopyRepeatParams(2, 2, 8, 8))  # blocks 0, 2, 4, 6 of x to the same blocks of o[64:]
    copy(o[72], x[8], 32, 1, CopyRepeatParams(2, 2, 8, 8))  # blocks 1, 3, 5, 7: interleaved, no conflict
    qo.enque(o)
    o = qo.deque(a.dtype)
    data_copy(out, o, 128)
    qo.free_tensor(o)
    q.free_tensor(x)


@pytest.mark.parametrize("auto_sync", [True, False])
def test_copy_and_ub_to_ub_data_copy_and_masked_bounds(auto_sync: bool) -> None:
    a = np.arange(64, dtype=np.float32) - 20
    out = np.zeros(128, np.float32)
    rep = launch(copies, Rows(0), a, out, block_dim=1, checks=True, auto_sync=auto_sync)
    np.testing.assert_array_equal(out[:40], 2 * a[:40])
    np.testing.assert_array_equal(out[40:64], 0)
    np.testing.assert_array_equal(out[64:], a)
    assert rep.total("vec_dup") == 1 + 1 + 1 + 1 + 1 + 1  # three Copys, two UB-to-UB copies, a Duplicate
