"""The tilings are remembered (``tiling.common.remembered``): a call whose tensors have the shapes and dtypes, and
whose other arguments the values and types, of an earlier call gets that call's tiling without computing it, and
nothing else may: not a call that must fail, not one whose arguments merely compare equal."""

from __future__ import annotations

import numpy as np
import pytest
import tilesim.tiling as tiling
from tilesim.tiling.common import TensorMeta, remembered

from tilesim.errors import AclnnError

pytestmark = pytest.mark.no_launch_here  # host tiling only


def _counting(tensors: int = 1, by_value: tuple[int, ...] = ()):
    """A remembered function that returns what it was called with, and the list of those calls."""
    calls = []

    @remembered(tensors, by_value=by_value)
    def fn(*args, **kwargs):
        calls.append((args, kwargs))
        return args, kwargs

    return fn, calls


def test_same_shapes_and_dtypes_reuse_the_result_whatever_the_data():
    fn, calls = _counting(2)
    a = fn(np.zeros((4, 8), np.float32), np.zeros(8, np.float32), 3)
    b = fn(np.ones((4, 8), np.float32), np.full(8, 7, np.float32), 3)
    assert b is a and len(calls) == 1
    fn(np.zeros((4, 8), np.float16), np.zeros(8, np.float32), 3)  # another dtype
    fn(np.zeros((8, 4), np.float32), np.zeros(8, np.float32), 3)  # another shape
    fn(np.zeros((4, 8), np.float32), None, 3)  # a missing tensor
    assert len(calls) == 4


def test_a_miss_runs_on_stand_ins_that_carry_no_data():
    fn, _ = _counting(1)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    args, _ = fn(x, "shared")
    assert args[0] == TensorMeta((2, 3), np.dtype(np.float32)) and not isinstance(args[0], np.ndarray)
    assert args[1] == "shared"


@pytest.mark.parametrize("values", [(1, True, 1.0, np.int64(1)), (0.0, -0.0)])
def test_values_that_compare_equal_but_differ_in_type_or_sign_are_kept_apart(values):
    fn, calls = _counting(0)
    for v in values:
        fn(v)
        fn(core_num=v)
    assert len(calls) == 2 * len(values)
    assert [c[0][0] for c in calls[::2]] == list(values)


def test_keyword_order_and_unhashable_arguments_are_handled():
    fn, calls = _counting(0)
    fn(a=1, b=2)
    fn(a=1, b=2)
    assert len(calls) == 1
    fn([1, 2])  # a list: no key, run every time
    fn([1, 2])
    fn(x=np.zeros(2))
    assert len(calls) == 4


def test_by_value_arguments_are_keyed_by_their_contents():
    fn, calls = _counting(0, by_value=(0,))
    fn([32, 64])
    fn(np.array([32, 64]))  # the same int64 contents
    assert len(calls) == 1
    fn([16, 64])
    fn(np.array([32, 64], np.int32))  # another dtype
    fn(np.array([[32, 64]]))  # another shape
    assert len(calls) == 4


def test_the_memo_forgets_its_oldest_entry_when_full(monkeypatch):
    monkeypatch.setattr("tilesim.tiling.common.MEMO_SIZE", 2)
    fn, calls = _counting(0)
    for v in (1, 2, 3, 1):
        fn(v)
    assert [c[0][0] for c in calls] == [1, 2, 3, 1]  # 1 was forgotten when 3 came in
    fn(3)
    assert len(calls) == 4


def test_a_refused_call_is_refused_every_time_even_after_a_good_one_of_that_shape():
    """NsaCompressGrad's actSeqLen is read by value: a good call is remembered, then ends that do not reach T must
    still be refused (161002), twice."""
    out_grad, x, w = TensorMeta((2, 2, 16), "float16"), TensorMeta((64, 2, 16), "float16"), \
        TensorMeta((32, 2), "float16")
    good = tiling.nsa_compress_grad(out_grad, x, w, [32, 64], 32, 16)
    assert tiling.nsa_compress_grad(out_grad, x, w, np.array([32, 64]), 32, 16) is good
    for _ in range(2):
        with pytest.raises(AclnnError, match="actSeqLen") as e:
            tiling.nsa_compress_grad(out_grad, x, w, [32, 48], 32, 16)
        assert e.value.status == 161002


def test_a_remembered_tiling_is_the_tiling_a_fresh_computation_gives(rng):
    """RmsNormGrad's official tiling, remembered, equals the unremembered function's; other data reuse it."""
    dy = rng.standard_normal((8, 128)).astype(np.float32)
    t1 = tiling.rms_norm_grad(dy, dy, np.ones(8, np.float32), np.ones(128, np.float32))
    fresh = tiling.rms_norm_grad.__wrapped__(dy, dy, np.ones(8, np.float32), np.ones(128, np.float32))
    assert tiling.rms_norm_grad(dy * 2, dy, np.ones(8, np.float32), np.ones(128, np.float32)) is t1
    assert t1 == fresh
