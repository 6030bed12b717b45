"""Launches from several Python threads at once (a threaded Dask scheduler, a web service, torch's inter-op pool):
each owns what it writes, so every call gives the bits it gives alone, whatever the Python and host thread counts.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from tilesim.kernels.op_specs import OPS

from examples.add_tail import add_tail
from tilesim.soc import get_soc

THREADS = 4
CALLS = 3  # per thread and case
SOC = get_soc("Ascend910B1")
# per op: a small case (its cores run on the calling thread) and one of over 1 MiB of GM (spread over the host's
# threads); the small shapes are tests/golden.py's, whose kernels the suite compiles anyway
CASES = {
    "rms_norm_grad": ("bf16", [(16, 64), (256, 1024)]),
    "group_norm_backward": ("bf16", [(2, 32, 16), (4, 64, 1024)]),
    "swiglu_grad": ("bf16", [(8, 128), (256, 2048)]),
    "swiglu": ("bf16", [(8, 128), (256, 2048)]),
    "rms_norm": ("bf16", [(16, 64), (512, 1024)]),
    "softmax": ("fp16", [(16, 64), (1024, 1024)]),
    "layer_norm_grad": ("fp16", [(16, 64), (512, 1024)]),
    "nsa_compress_grad": ("bf16", [(128, 2, 64), (1024, 2, 128)]),
}


def _bits(outs: tuple[np.ndarray, ...]) -> list[bytes]:
    return [np.ascontiguousarray(o).view(np.uint8).tobytes() for o in outs]


def _concurrently(call, n: int = THREADS) -> list:  # type: ignore[no-untyped-def]
    """``call()`` CALLS times on each of ``n`` threads that start together; every result."""
    start = threading.Barrier(n)

    def work() -> list:  # type: ignore[type-arg]
        start.wait()
        return [call() for _ in range(CALLS)]

    with ThreadPoolExecutor(n) as pool:
        return [r for f in [pool.submit(work) for _ in range(n)] for r in f.result()]


@pytest.mark.parametrize("name", sorted(CASES))
def test_an_op_called_from_several_threads_gives_its_serial_bits(name: str) -> None:
    spec = OPS[name]
    dtype, shapes = CASES[name]
    for shape in shapes:
        inputs = spec.make_inputs(shape, dtype, 0)
        tiling = next(c for c in spec.candidates(inputs, SOC) if c.official).tiling
        alone = _bits(spec.run(inputs, tiling, SOC))
        results = _concurrently(lambda inputs=inputs, tiling=tiling: _bits(spec.run(inputs, tiling, SOC)))
        differ = sum(r != alone for r in results)
        assert differ == 0, f"{name} {shape} {dtype}: {differ} of {len(results)} concurrent calls differ"


def test_a_user_kernel_launched_checked_from_several_threads() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal(3000).astype(np.float32)
    y = rng.standard_normal(3000).astype(np.float32)
    alone = add_tail(x, y, checks=True)
    results = _concurrently(lambda: add_tail(x, y, checks=True))
    assert all(np.array_equal(r.view(np.uint32), alone.view(np.uint32)) for r in results)
