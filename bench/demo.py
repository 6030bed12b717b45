"""``make demo``: RmsNormGrad on the emulated Ascend910B1, both of its kernels, in one table.

Runs ``kernels.rms_norm_grad`` on [4096, 4096] bf16 (split-N: whole rows per UB tile) and on [64, 12288] fp32
(split-D: rows too long for the UB, cut into column tiles) with realistic inputs, and prints, per run, the
tiling the host chose, the UB plan's size, the bytes the data movers carried, the error of dx against untiled
float64 math under Ascend's precision standard, and the wall time on this CPU.

    python -m bench.demo
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import ml_dtypes
import numpy as np

import kernels
import tilesim
from tilesim.precision import compare

EPS = 1e-6
REPEATS = 5
SPLIT = {1: "split-N", 2: "split-D"}
CASES = [((4096, 4096), "bf16"), ((64, 12288), "fp32")]
DTYPES = {"fp32": np.dtype(np.float32), "bf16": np.dtype(ml_dtypes.bfloat16)}


def make_inputs(shape: tuple[int, int], dtype: str, seed: int = 0) -> tuple[np.ndarray, ...]:
    """dy ~ N(0, 1) and x ~ U(-2, 2) in ``dtype``; rstd = 1 / sqrt(mean(x^2) + 1e-6) of the rounded x, in fp32
    (what the forward RmsNorm saves); gamma ~ U(0.5, 1.5) fp32."""
    rng = np.random.default_rng(seed)
    dt = DTYPES[dtype]
    x = rng.uniform(-2.0, 2.0, shape).astype(np.float32).astype(dt)
    dy = rng.standard_normal(shape, dtype=np.float32).astype(dt)
    x32 = x.astype(np.float32)
    rstd = (np.float32(1.0) / np.sqrt(np.mean(x32 * x32, axis=1) + np.float32(EPS))).astype(np.float32)
    gamma = rng.uniform(0.5, 1.5, shape[1]).astype(np.float32)
    return dy, x, rstd, gamma


def run_case(shape: tuple[int, int], dtype: str) -> dict[str, Any]:
    dy, x, rstd, gamma = make_inputs(shape, dtype)
    with tilesim.capture() as runs:
        t0 = time.perf_counter()
        dx, dgamma = kernels.rms_norm_grad(dy, x, rstd, gamma)  # compiles, or loads the Numba cache
        first = time.perf_counter() - t0
    report = runs[-1]
    times = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        kernels.rms_norm_grad(dy, x, rstd, gamma, out=(dx, dgamma))
        times.append(time.perf_counter() - t0)
    golden_dx, _ = kernels.reference.rms_norm_grad(dy, x, rstd, gamma)
    p = compare(dx, golden_dx)
    t = report.tiling
    return {
        "op": report.op,
        "shape": "x".join(map(str, shape)),
        "dtype": dtype,
        "SoC": report.soc,
        "tiling key": f"{t.tiling_key} {SPLIT.get(t.tiling_key, '?')}",
        "block_dim": str(report.block_dim),
        "UB used/cap B": f"{report.ub_plan.used}/{report.ub_plan.capacity}",
        "MTE2 bytes": f"{report.total('mte2_bytes'):,}",
        "MTE3 bytes": f"{report.total('mte3_bytes'):,}",
        "dx MARE": f"{p.mare:.2e}",
        "limit": f"{10 * p.threshold:.2e}",
        "check": "pass" if p.ok else "FAIL",
        "first call": f"{first:.1f} s" if first >= 1 else f"{first * 1e3:.0f} ms",
        "wall": f"{statistics.median(times) * 1e3:.1f} ms",
    }


RIGHT = {"block_dim", "UB used/cap B", "MTE2 bytes", "MTE3 bytes", "dx MARE", "limit", "first call", "wall"}


def table(rows: list[dict[str, str]]) -> str:
    cols = list(rows[0])
    width = {c: max(len(c), *(len(r[c]) for r in rows)) for c in cols}

    def line(cells: dict[str, str]) -> str:
        return "  ".join(cells[c].rjust(width[c]) if c in RIGHT else cells[c].ljust(width[c]) for c in cols)

    return "\n".join([line({c: c for c in cols}), "  ".join("-" * width[c] for c in cols)]
                     + [line(r) for r in rows])


def main() -> None:
    print(f"tilesim demo: aclnnRmsNormGrad on the emulated {tilesim.DEFAULT_SOC}, checks off\n")
    rows = [run_case(shape, dtype) for shape, dtype in CASES]
    print(table(rows))
    print(f"\nUB: per-core UB plan / capacity (bytes); MTE2/MTE3: bytes GM->UB / UB->GM, all cores; dx MARE: max "
          f"relative error vs float64 math, pass = MERE < T and MARE < limit (10T); first call: with Numba "
          f"compile/cache load; wall: median of {REPEATS} later calls.")


if __name__ == "__main__":
    main()
