"""Bit-for-bit comparison of kernel outputs, shared by the test modules."""

from __future__ import annotations

import numpy as np

BITS = {"float32": np.uint32, "float16": np.uint16, "bfloat16": np.uint16}


def bits(a: np.ndarray) -> np.ndarray:
    """The raw bits of a float array (fp32 as uint32, fp16 and bf16 as uint16)."""
    a = np.ascontiguousarray(a)
    return a.view(BITS[np.dtype(a.dtype).name])


def assert_bitwise(a: np.ndarray, b: np.ndarray, what: str = "output") -> None:
    assert a.dtype == b.dtype and a.shape == b.shape, f"{what}: {a.dtype}{a.shape} vs {b.dtype}{b.shape}"
    diff = bits(a) != bits(b)
    assert not diff.any(), f"{what}: {int(diff.sum())} of {diff.size} elements differ, first at " \
                           f"{np.argwhere(diff)[0].tolist()}"
