"""Checked mode's overlap rule (tilesim.machine.overlap, ``通用说明和约束.md`` 通用地址重叠约束): the overlaps the
documentation forbids are findings, family by family, and the ones it allows (in place lane for lane, the
Add/Sub/Mul/Max/Min accumulate idiom on src1, a Cast in place, a reduction's results over their own repeat, a
destination behind its source) run clean with the right values. One kernel, a case a branch."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from tilesim import CheckError
from tilesim.machine import (
    CAST_NONE,
    CAST_RINT,
    CMPMODE,
    SELMODE,
    VECCALC,
    BinaryRepeatParams,
    BrcbRepeatParams,
    CopyRepeatParams,
    HardEvent,
    TBuf,
    TPipe,
    UnaryRepeatParams,
    add,
    adds,
    brcb,
    cast,
    compare,
    copy,
    data_copy,
    duplicate,
    gather,
    half,
    select,
    set_flag,
    sub,
    uint8,
    uint32,
    wait_flag,
    whole_reduce_sum,
)
from tilesim.runtime.launcher import kernel, launch

N = 512  # fp32 elements of each TBuf: 8 repeats


@dataclass(frozen=True)
class Case:
    case: int


@kernel
def overlaps(ctx, t, a, out):
    """w = a, v = 0; then the case's instruction; out = w then v."""
    pipe = TPipe(ctx)
    w = pipe.init_buffer(TBuf(VECCALC), N * 4).get(a.dtype)
    v = pipe.init_buffer(TBuf(VECCALC), N * 4).get(a.dtype)
    data_copy(w, a, N)
    duplicate(v, 0.0, N)
    set_flag(ctx, HardEvent.MTE2_V, 0)
    wait_flag(ctx, HardEvent.MTE2_V, 0)
    h = v.reinterpret_cast(half)
    c = t.case
    if c == 1:  # within a repeat: dst 32 B past src (the count form: one instruction in counter mode)
        adds(w[8], w, 1.0, 64)
    elif c == 2:  # across repeats: dst = src0 + 256 B, 2 repeats: repeat 1 reads what repeat 0 wrote
        add(w[64], w, v, 64, 2, BinaryRepeatParams(1, 1, 1, 8, 8, 8))
    elif c == 3:  # the exception: dst == src1, dst and src1 repeat strides 0 (v[0:64] += each row of w)
        add(v, w, v, 64, 4, BinaryRepeatParams(1, 1, 1, 0, 8, 0))
    elif c == 4:  # the same on src0: no exception
        sub(v, v, w, 64, 4, BinaryRepeatParams(1, 1, 1, 0, 0, 8))
    elif c == 5:  # a scalar instruction in place with repeat strides 0: no exception
        adds(v, v, 1.0, 64, 4, UnaryRepeatParams(1, 1, 0, 0))
    elif c == 6:  # Brcb.md: src and dst must not share memory
        brcb(w, w, 1, BrcbRepeatParams(1, 8))
    elif c == 7:  # Compare.md states no overlap rule: none is allowed
        compare(w.reinterpret_cast(uint8), w, v, CMPMODE.LT, 64)
    elif c == 8:  # a Cast widening in place from the upper half: no repeat reads what another wrote
        cast(h[N], w, CAST_RINT, N)
        cast(v, h[N], CAST_NONE, N)
    elif c == 9:  # widening in place from the start: repeat 1 reads what repeat 0 wrote (Cast.md's warning)
        cast(h, w, CAST_RINT, N)
        cast(v, h, CAST_NONE, N)
    elif c == 10:  # narrowing in place
        cast(w.reinterpret_cast(half), w, CAST_RINT, N)
    elif c == 11:  # a reduction in place: each repeat's sum over its own (or an earlier repeat's) source
        whole_reduce_sum(w, w, 64, 8, 1, 1, 8)
    elif c == 12:  # repeat 0's sum lands on repeat 1's source
        whole_reduce_sum(w[64], w, 64, 2, 1, 1, 8)
    elif c == 13:  # a destination a repeat behind its source (the count form)
        adds(w, w[64], 1.0, 2 * 64)
    elif c == 14:  # Copy (level-0) within a repeat: dst block 0 is src's block 2
        copy(w[16], w, 64, 1, CopyRepeatParams(1, 1, 8, 8))
    elif c == 15:  # Select's selMask (another type) over dst
        select(v, v.reinterpret_cast(uint8), w, w[64], SELMODE.VSEL_TENSOR_TENSOR_MODE, 64)
    elif c == 16:  # Gather.md: the offsets are a source too
        gather(v, w, v.reinterpret_cast(uint32), 0, 64)
    set_flag(ctx, HardEvent.V_MTE3, 0)
    wait_flag(ctx, HardEvent.V_MTE3, 0)
    data_copy(out, w, N)
    data_copy(out[N], v, N)


RULE = "API rule broken"
# case -> (UB buffer, byte offset and bytes of the finding, words of its sentence)
FOUND = {
    1: ("w", 32, 32, "Adds's destination overlaps a source it reads (src) partly within repeat 0: dst block 0 is "
        "src's block 1; within a repeat the two must overlap 100% or not at all"),
    2: ("w", 256, 32, "Add's destination overlaps a source it reads (src0) across repeats: repeat 1 reads block 0 "
        "of its src0, which repeat 0 writes (its block 0); a later repeat must not read what an earlier one wrote"),
    4: ("v", 0, 32, "Sub's destination overlaps a source it reads (src0) across repeats: repeat 1 reads block 0"),
    5: ("v", 0, 32, "Adds's destination overlaps a source it reads (src) across repeats: repeat 1 reads block 0"),
    6: ("w", 0, 32, "Brcb's destination overlaps a source it reads (src): Brcb.md does not allow src and dst in "
        "the same memory"),
    7: ("w", 0, 8, "Compare's destination overlaps a source it reads (src0): its API states no overlap rule, so "
        "allows none"),
    9: ("v", 2, 2, "Cast's destination overlaps a source it reads (src) within repeat 0: dst block 0 lies on src's "
        "block 0 and writes over lanes the repeat reads after it"),
    12: ("w", 256, 4, "WholeReduceSum's destination overlaps a source it reads (src) across repeats: repeat 1 "
         "reads block 0 of its src, which repeat 0 writes"),
    14: ("w", 64, 32, "Copy's destination overlaps a source it reads (src) partly within repeat 0: dst block 0 is "
         "src's block 2"),
    15: ("v", 0, 8, "Select's destination overlaps a source it reads (selMask): selMask is of another type"),
    16: ("v", 0, 256, "Gather's destination overlaps a source it reads (srcOffset): Gather.md does not allow"),
}


def _run(case: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    a = (np.arange(N, dtype=np.float32) % 61 - 30) / 8
    out = np.zeros(2 * N, np.float32)
    launch(overlaps, Case(case), a, out, block_dim=1, checks=True)
    return a, out[:N], out[N:]


@pytest.mark.parametrize("case", sorted(FOUND))
def test_a_forbidden_overlap_is_a_finding(case: int) -> None:
    buf, offset, nbytes, words = FOUND[case]
    with pytest.raises(CheckError) as e:
        _run(case)
    v = e.value.violations[0]
    assert (v.kind, v.memory, v.offset, v.nbytes) == (RULE, f'UB buffer "{buf}"', offset, nbytes), str(v)
    assert words in v.detail, v.detail
    assert "通用地址重叠约束" in v.detail or case in (6, 16), v.detail


def test_the_accumulate_idiom_on_src1_is_clean() -> None:
    a, w, v = _run(3)
    want = np.zeros(64, np.float32)
    for r in range(4):
        want = want + a[64 * r:64 * (r + 1)]
    np.testing.assert_array_equal(v[:64], want)
    np.testing.assert_array_equal(w, a)


def test_a_cast_in_place_is_clean() -> None:
    a, w, v = _run(8)  # widened from the upper half of its own buffer
    np.testing.assert_array_equal(v, a.astype(np.float16).astype(np.float32))
    a, w, v = _run(10)  # narrowed in place
    np.testing.assert_array_equal(w[:N // 2].view(np.float16), a.astype(np.float16))


def test_a_reduction_in_place_is_clean() -> None:
    a, w, v = _run(11)
    np.testing.assert_allclose(w[:8], a.reshape(8, 64).sum(axis=1), rtol=1e-6)
    np.testing.assert_array_equal(w[8:], a[8:])


def test_a_destination_behind_its_source_is_clean() -> None:
    a, w, v = _run(13)
    np.testing.assert_array_equal(w[:128], a[64:192] + 1)
    np.testing.assert_array_equal(w[128:], a[128:])
