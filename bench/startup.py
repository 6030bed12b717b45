"""Start-up cost, each measurement in a fresh subprocess (``sys.executable``, run from the repository root).

Warm start (the target: under 1.5 s): a new interpreter imports kernels and gets its first
``kernels.rms_norm_grad`` result on a [8, 128] fp32 input, the Numba cache already filled. Reported: process
start to result (the parent's wall clock at launch, handed to the child, against the child's wall clock at the
result: fork, exec and interpreter start included), the part after interpreter start (the child's own clock from
its first statement: the import of kernels, then the first call, which loads the kernel from the cache), and the
wall time of the whole subprocess as the parent sees it (exit included). One untimed run first (it fills the
cache if the sources changed since it was written), then 3 timed runs; the medians are reported.

Cold start (``--cold``; the target: under 90 s): a new interpreter with ``NUMBA_CACHE_DIR`` set to a new,
empty directory, so every kernel compiles (and is written to that cache), runs each kernel variant the demo and
the tests use once on a small input: RmsNormGrad split-N and split-D (whole rows, or column tiles of rows too long
for the UB), each in fp32, bf16 with fp32 gamma, bf16 with bf16 gamma and fp16 with fp16 gamma; GroupNormBackward
and SwiGluGrad in fp32 and bf16; NsaCompressGrad in bf16 and fp16 (it has no fp32); the layer-norm backward and
LayerNormGradBeta in fp32 and fp16. Reported: each case's first call (compile + run) and second call (run), their
totals (the first calls' total is the compile wall time the target is about), the import and the whole
subprocess. The directory is removed afterwards. ``make bench`` does not run it (it takes a minute or more)::

    python -m bench.startup           # warm start, median of 3
    python -m bench.startup --cold    # and the cold start: every kernel compiled from scratch

``bench/test_bench_startup.py`` runs the warm measurement under pytest-benchmark (group "startup"), so the bench
summary shows it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MARK = "STARTUP-RESULT "  # the child's result line: this prefix, then JSON
T0_ENV = "TILESIM_STARTUP_T0"  # the parent's time.time() at launch, for the child
WARM_RUNS = 3
WARM_TARGET_S = 1.5
COLD_TARGET_S = 90.0
WARM_WHAT = "fresh interpreter, import tilesim.kernels, first rms_norm_grad on [8, 128] fp32, Numba cache warm"

# The warm child: what a user's script does, and nothing else before the result.
WARM_CODE = f"""
import time
t_start = time.perf_counter()
import numpy as np
import tilesim.kernels as kernels
t_import = time.perf_counter()
rng = np.random.default_rng(0)
x = rng.uniform(-2.0, 2.0, (8, 128)).astype(np.float32)
dy = rng.standard_normal((8, 128), dtype=np.float32)
rstd = (1.0 / np.sqrt(np.mean(x * x, axis=1) + np.float32(1e-6))).astype(np.float32)
gamma = np.ones(128, np.float32)
dx, dgamma = kernels.rms_norm_grad(dy, x, rstd, gamma)
t_result = time.perf_counter()
wall_result = time.time()
import json, os
ok = bool(np.isfinite(dx).all() and np.isfinite(dgamma).all())
print({MARK!r} + json.dumps({{"to_result_s": wall_result - float(os.environ[{T0_ENV!r}]),
                             "after_start_s": t_result - t_start, "import_s": t_import - t_start,
                             "first_call_s": t_result - t_import, "ok": ok}}))
"""

COLD_CODE = "from bench.startup import cold_child; cold_child()"


def _run(code: str, env_extra: dict[str, str] | None = None, timeout: float = 1800.0) -> dict[str, Any]:
    """Run ``code`` in a fresh ``sys.executable -c`` from the repository root; the child's result (its MARK
    line) with ``process_s``, the subprocess's wall time as this process sees it."""
    env = dict(os.environ)
    env.update(env_extra or {})
    t0_wall = time.time()
    env[T0_ENV] = repr(t0_wall)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)
    process_s = time.perf_counter() - t0
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(MARK)]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"start-up child failed (exit {proc.returncode}):\n{proc.stdout[-2000:]}\n"
                           f"{proc.stderr[-4000:]}")
    res = json.loads(lines[-1][len(MARK):])
    res["process_s"] = process_s
    return res


def warm_once() -> dict[str, Any]:
    """One warm start: ``to_result_s``, ``after_start_s``, ``import_s``, ``first_call_s`` (measured by the
    child), ``process_s`` (the whole subprocess) and ``ok`` (the result is finite)."""
    return _run(WARM_CODE)


def warm(runs: int = WARM_RUNS) -> dict[str, Any]:
    """One untimed warm start (it refills the Numba cache if it is stale), then ``runs`` timed ones: the median
    of each figure, and the runs."""
    warm_once()
    results = [warm_once() for _ in range(runs)]
    med = {k: statistics.median(r[k] for r in results) for k in results[0] if k != "ok"}
    return {**med, "ok": all(r["ok"] for r in results), "runs": results}


def _cold_cases() -> list[tuple[str, Any]]:
    """(label, call) for every kernel variant the demo and tests use, on small inputs; built in the child."""
    import ml_dtypes
    import numpy as np
    import tilesim.kernels as kernels

    f32, bf16, fp16 = np.dtype(np.float32), np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16)
    names = {f32: "fp32", bf16: "bf16", fp16: "fp16"}
    rng = np.random.default_rng(0)

    def arr(shape, dt, lo=-1.0, hi=1.0):
        return rng.uniform(lo, hi, shape).astype(np.float32).astype(dt)

    cases = []
    for d, split in ((128, "split-N"), (12288, "split-D")):
        for dt, gdt in ((f32, f32), (bf16, f32), (bf16, bf16), (fp16, fp16)):
            dy, x, g = arr((8, d), dt), arr((8, d), dt), arr(d, gdt, 0.5, 1.5)
            rstd = np.ones(8, np.float32)
            cases.append((f"rms_norm_grad {split} [8, {d}] {names[dt]} gamma {names[gdt]}",
                          lambda a=(dy, x, rstd, g): kernels.rms_norm_grad(*a)))
    for dt in (f32, bf16):
        n, c, hxw, grp = 2, 8, 16, 2
        a = (arr((n, c, hxw), dt), arr((n, c, hxw), dt), arr((n, grp), dt), arr((n, grp), dt, 0.5, 1.5),
             arr(c, dt, 0.5, 1.5))
        cases.append((f"group_norm_backward [{n}, {c}, {hxw}] G={grp} {names[dt]}",
                      lambda a=a, s=(n, c, hxw, grp): kernels.group_norm_backward(*a, *s)))
    for dt in (f32, bf16):
        a = (arr((8, 128), dt), arr((8, 256), dt, -3.0, 3.0))
        cases.append((f"swiglu_grad x [8, 256] {names[dt]}", lambda a=a: kernels.swiglu_grad(*a, -1)))
    for dt in (f32, fp16):
        a = (arr((8, 128), dt), arr((8, 128), dt), arr(8, dt, 0.5, 1.5), arr(8, dt), arr(128, dt, 0.5, 1.5))
        cases.append((f"layer_norm_grad [8, 128] {names[dt]}", lambda a=a: kernels.layer_norm_grad(*a)))
        b = (arr((1, 8, 16), dt), arr((1, 8, 16), dt))  # H: 32 B aligned in fp16 too
        cases.append((f"layer_norm_grad_beta [1, 8, 16] {names[dt]}", lambda b=b: kernels.layer_norm_grad_beta(*b)))
    for dt in (bf16, fp16):
        a = (arr((3, 1, 128), dt), arr((64, 1, 128), dt), arr((32, 1), dt))
        cases.append((f"nsa_compress_grad [64, 1, 128] bs 32/16 {names[dt]}",
                      lambda a=a: kernels.nsa_compress_grad(*a, [64], 32, 16)))
    return cases


def cold_child() -> None:
    """The cold child's body (run with NUMBA_CACHE_DIR empty): import tilesim.kernels, then each case twice, timed."""
    t_start = time.perf_counter()
    import tilesim.kernels as kernels  # noqa: F401

    import_s = time.perf_counter() - t_start
    cases = []
    for label, call in _cold_cases():
        t0 = time.perf_counter()
        call()
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        call()
        cases.append({"case": label, "first_s": first, "second_s": time.perf_counter() - t0})
    print(MARK + json.dumps({"import_s": import_s, "cases": cases, "after_start_s": time.perf_counter() - t_start}))


def cold() -> dict[str, Any]:
    """The cold start in a child with an empty NUMBA_CACHE_DIR (removed afterwards): per case first and second
    call, ``compile_s`` (the first calls' total: compile + a small run each), ``run_s`` (the second calls'),
    ``import_s`` and ``process_s``."""
    cache = tempfile.mkdtemp(prefix="tilesim-numba-cold-")
    try:
        res = _run(COLD_CODE, {"NUMBA_CACHE_DIR": cache})
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    res["compile_s"] = sum(c["first_s"] for c in res["cases"])
    res["run_s"] = sum(c["second_s"] for c in res["cases"])
    return res


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.startup", description=__doc__.split("\n\n")[0])
    parser.add_argument("--cold", action="store_true", help="also the cold start: every kernel compiled into an "
                                                            "empty NUMBA_CACHE_DIR (a minute or more)")
    args = parser.parse_args(argv)
    w = warm()
    print(f"warm start ({WARM_WHAT}), median of {WARM_RUNS} after one untimed run:")
    print(f"  process start to result {w['to_result_s']:.3f} s = interpreter start "
          f"{w['to_result_s'] - w['after_start_s']:.3f} s + after it {w['after_start_s']:.3f} s (import "
          f"{w['import_s']:.3f} s, first call {w['first_call_s']:.3f} s); whole subprocess {w['process_s']:.3f} s")
    print("  runs: " + ", ".join(f"{r['to_result_s']:.3f} s" for r in w["runs"]))
    print(f"  target < {WARM_TARGET_S:g} s: {_verdict(w['to_result_s'] < WARM_TARGET_S)}")
    if args.cold:
        c = cold()
        width = max(len(k["case"]) for k in c["cases"])
        print(f"\ncold start (empty NUMBA_CACHE_DIR, every kernel variant compiled), {len(c['cases'])} cases:")
        print(f"  {'case':<{width}} {'first call s':>12} {'second s':>9}")
        for k in c["cases"]:
            print(f"  {k['case']:<{width}} {k['first_s']:>12.2f} {k['second_s']:>9.3f}")
        print(f"  compile (first calls) {c['compile_s']:.1f} s, of which running {c['run_s']:.1f} s; import "
              f"{c['import_s']:.2f} s; whole subprocess {c['process_s']:.1f} s")
        print(f"  target < {COLD_TARGET_S:g} s (compile): {_verdict(c['compile_s'] < COLD_TARGET_S)}")


if __name__ == "__main__":
    main()
