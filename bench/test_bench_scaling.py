"""Linear scaling: RmsNormGrad fp32 on [N, 1024] for N = 1024, 4096, 16384, 65536 and 262144 (1, 4, 16, 64 and
256 M elements), tilesim only. A bandwidth-bound kernel should take the same time per element at every size;
the fixed cost of a call shows at the small end (and the 1 M case's 12 MiB of arrays can stay in L3, 32 MiB here).

Timed: ``kernels.rms_norm_grad(..., checks=False, out=(dx, dgamma))`` after one warm-up call, in the benchmark
group "scaling", by ``benchmark.pedantic``: up to 30 rounds for the small sizes, 3 for the 64 M and 256 M ones (a
256 M call moves 3 GiB), so the file runs in about a minute. Each benchmark records the elements and, when
timed, ns per element (median / elements) in ``extra_info``; the summary prints them in its "scaling" section.

Bytes counted as in test_bench_rms_norm_grad.py: read dy, x (N x 1024 fp32), rstd (N fp32) and gamma (1024 fp32),
write dx (N x 1024 fp32) and dgamma (1024 fp32). The inputs are made per case and freed after it (the 256 M case
holds dy, x and dx: 3 GiB), not cached.
"""

from __future__ import annotations

import numpy as np
import pytest
import tilesim.kernels as kernels

from bench.record import record
from bench.test_bench_rms_norm_grad import op_bytes
from tilesim.precision import compare

GROUP = "scaling"  # bench/conftest.py's SCALING_GROUP
D = 1024
ROWS = (1024, 4096, 16384, 65536, 262144)  # 1, 4, 16, 64, 256 M elements
EPS = 1e-6
MI = 1 << 20


def rounds(elements: int) -> int:
    """Timed rounds: about 64 M elements' worth (3 at least, 30 at most)."""
    return max(3, min(30, 64 * MI // elements))


def make_inputs(rows: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(dy, x, rstd, gamma) fp32: x ~ U(-2, 2) and dy ~ U(-1, 1) of [rows, D] drawn as float32 in place (no
    float64 copy of 1 GiB arrays), rstd = 1 / sqrt(mean(x²) + 1e-6) per row, gamma ~ U(0.5, 1.5)."""
    rng = np.random.default_rng(2024)
    x = rng.random((rows, D), dtype=np.float32)
    x *= np.float32(4.0)
    x -= np.float32(2.0)
    dy = rng.random((rows, D), dtype=np.float32)
    dy *= np.float32(2.0)
    dy -= np.float32(1.0)
    ms = np.einsum("ij,ij->i", x, x) / np.float32(D)
    rstd = (np.float32(1.0) / np.sqrt(ms + np.float32(EPS))).astype(np.float32)
    gamma = rng.uniform(0.5, 1.5, D).astype(np.float32)
    return dy, x, rstd, gamma


@pytest.mark.benchmark(group=GROUP)
@pytest.mark.parametrize("rows", ROWS, ids=[f"{r * D // MI}M" for r in ROWS])
def test_scaling(benchmark, rows):
    """kernels.rms_norm_grad fp32 on [rows, 1024], checks off, into preallocated outputs; the timed run's first
    64 rows of dx checked against the float64 reference."""
    elements = rows * D
    dy, x, rstd, gamma = make_inputs(rows)
    dx, dgamma = np.empty_like(dy), np.empty(D, np.float32)
    out = (dx, dgamma)
    kernels.rms_norm_grad(dy, x, rstd, gamma, checks=False, out=out)  # warm-up: compile / load the Numba cache
    benchmark.pedantic(kernels.rms_norm_grad, args=(dy, x, rstd, gamma), kwargs={"checks": False, "out": out},
                       rounds=rounds(elements), iterations=1)
    record(benchmark, "tilesim", "fp32", op_bytes(dy, x, rstd, gamma),
           "kernels.rms_norm_grad(..., checks=False, out=(dx, dgamma)), benchmark.pedantic", shape=[rows, D],
           kernel="rms_norm_grad", elements=elements)
    if benchmark.stats is not None:
        benchmark.extra_info["ns_per_element"] = benchmark.stats.stats.median / elements * 1e9
    golden_dx, _ = kernels.reference.rms_norm_grad(dy[:64], x[:64], rstd[:64], gamma)
    precision = compare(dx[:64], golden_dx)
    del dy, x, dx, out  # the big arrays go now, not when pytest drops the frame
    assert precision.ok, f"dx: {precision}"
