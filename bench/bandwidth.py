"""A memory-bandwidth probe for this host: the STREAM triad ``a[i] = b[i] + s * c[i]`` in Numba.

The figure is the ceiling a bandwidth-bound kernel on this CPU can hope for, so benchmarks can say what fraction
of it they reach. Arrays are float32 and much larger than the caches (256 MiB each by default); the loop runs on
all of Numba's threads (``numba.config.NUMBA_NUM_THREADS``: every host core unless NUMBA_NUM_THREADS says
otherwise).

Bytes counted per triad: 3 arrays x n x 4 B, i.e. 2 reads (b, c) + 1 write (a). Write-allocate traffic (the CPU
reading a's lines before overwriting them) is not counted, as STREAM does not count it.

Run ``python -m bench.bandwidth [MiB]`` to print the figure.
"""

from __future__ import annotations

import sys
import time

import numba
import numpy as np
from numba import njit, prange

MIB = 1024 * 1024
ARRAYS = 3  # 2 reads + 1 write per element


@njit(parallel=True, cache=True)
def triad(a, b, c, s):
    """``a[i] = b[i] + s * c[i]`` over float32 arrays, split over the Numba threads."""
    for i in prange(a.size):
        a[i] = b[i] + s * c[i]


def make_arrays(mib: int = 256) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Three float32 arrays of ``mib`` MiB each, every page touched (a zeroed, b and c filled)."""
    n = mib * MIB // 4
    a = np.zeros(n, np.float32)
    b = np.full(n, 1.0, np.float32)
    c = np.full(n, 2.0, np.float32)
    return a, b, c


def triad_bytes(a: np.ndarray) -> int:
    """Bytes one triad over ``a`` moves: 3 arrays (2 reads + 1 write)."""
    return ARRAYS * a.nbytes


def probe_gbs(mib: int = 256, repeats: int = 5, threads: int | None = None) -> float:
    """Memory bandwidth in GB/s (1e9 B/s): the best of ``repeats`` triads over float32 arrays of ``mib`` MiB each,
    after one warm-up triad (which also loads or compiles the Numba function).

    Bytes per triad are counted as 3 arrays x ``mib`` MiB: 2 reads + 1 write. ``threads`` defaults to all of
    Numba's threads (all host cores).
    """
    if mib < 1 or repeats < 1:
        raise ValueError(f"mib ({mib}) and repeats ({repeats}) must be at least 1")
    a, b, c = make_arrays(mib)
    s = np.float32(3.0)
    prev = numba.get_num_threads()
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS if threads is None else int(threads))
    try:
        triad(a, b, c, s)  # warm-up: compile or load from the cache, fault in every page
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            triad(a, b, c, s)
            best = min(best, time.perf_counter() - t0)
    finally:
        numba.set_num_threads(prev)
    if a[0] != np.float32(7.0) or a[-1] != np.float32(7.0):  # 1 + 3 * 2: the writes landed
        raise RuntimeError("triad produced a wrong result")
    return triad_bytes(a) / best / 1e9


if __name__ == "__main__":
    size = int(sys.argv[1]) if len(sys.argv) > 1 else 256
    print(f"triad over 3 x {size} MiB float32 on {numba.config.NUMBA_NUM_THREADS} threads: "
          f"{probe_gbs(size):.2f} GB/s (2 reads + 1 write counted)")
