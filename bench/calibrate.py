"""The cost model against measured NPU kernels: each case of the table below through tilesim's kernel on the
emulated Ascend910B2, its estimate beside the measured time.

    python -m bench.calibrate [--json PATH] [--op softmax|swiglu] [--l2-warm]

Ground truth (public): hicann/cann-bench, ``tasks/level2/<op>/cases.csv`` at commit 0f40c15d. The torch_npu
reference kernel on an Ascend910B2 (48 vector cores), msprof's kernel duration, the median of 20 runs after 5
warm-ups on the same inputs (data that fits the 192 MiB L2 may stay warm across runs), the kernel alone. Shapes are
x's, times in µs. The smallest kernels in those files take about 5 µs: a launch's fixed cost is below that.

Per case the script prints the estimate, the measured time, their ratio and the bottleneck; per op and over all
cases the geometric mean of the ratios, their min and max, and Spearman's rank correlation; and writes all of it to
a JSON file (``bench/calibration.json`` by default), which ``tests/test_calibration.py`` recomputes: a change to
the model shows up as a changed table in review. A case tilesim's kernel does not run (a dtype or an axis it
refuses) is listed with the kernel's reason and left out of the summary; a case whose error has a known cause
carries a note. The table names the cost figures fitted to these measurements (``CostParams.fitted``).

The table is made cold: no input is in the L2 when a kernel starts (``--l2-warm`` puts them there, as the previous
of cann-bench's runs could have; that table is printed and written only with ``--json``). Warm, the model puts the
small kernels at 0.56-0.71 of their measured times: the measurements do not look warm.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import tilesim.kernels as kernels
from tilesim.kernels.op_specs import DTYPES
from tilesim.tiling.softmax import check_args as softmax_args
from tilesim.tiling.swiglu import check_args as swiglu_args

from tilesim.cost.model import estimated, total_us
from tilesim.cost.params import cost_params
from tilesim.errors import AclnnError
from tilesim.soc import get_soc

SOC = "Ascend910B2"
SOURCE = "hicann/cann-bench tasks/level2/{op}/cases.csv @ 0f40c15d: torch_npu on Ascend910B2, msprof kernel duration"
JSON_PATH = Path(__file__).with_name("calibration.json")
INPUT_BLOCK = 1 << 20  # elements drawn for an input (case_input)


@dataclass(frozen=True)
class Case:
    """One measured kernel: ``op`` on x of ``shape`` and ``dtype`` along ``dim``; ``values`` says what x holds
    (random logits, or the case's special values)."""

    op: str
    case: str
    shape: tuple[int, ...]
    dtype: str
    dim: int
    measured_us: float
    values: str = "random"
    note: str = ""  # why the estimate is off, where that is known


# Why some cases are off: tilesim's softmax kernel is its own (the A2 SoftmaxV2 binary's source is not public), and
# the cold table takes every input from HBM.
_OWN_SOFTMAX = ("tilesim's softmax kernel is its own (the A2 SoftmaxV2 binary's source is not public) and moves "
                "these short rows one DataCopyPad burst each; the NPU's kernel does not take that time")
_L2 = ("x and y ({} MB) fit the 192 MiB L2, which cann-bench's repeated runs on the same input may keep warm; the "
       "table is cold (warm, the model gives 1.09)")


def _softmax(case: int, shape: tuple[int, ...], dtype: str, dim: int, us: float, values: str = "random",
             note: str = "") -> Case:
    return Case("softmax", str(case), shape, dtype, dim, us, values, note)


def _swiglu(case: int, shape: tuple[int, ...], dtype: str, dim: int, us: float, note: str = "") -> Case:
    return Case("swiglu", str(case), shape, dtype, dim, us, note=note)


CASES: tuple[Case, ...] = (
    _softmax(1, (1024, 1024), "fp16", -1, 20.64),
    _softmax(2, (2048, 2048), "fp32", -1, 37.98),
    _softmax(3, (4096, 4096), "bf16", -1, 91.76),
    _softmax(4, (8192, 8192), "fp16", 0, 1307.31),
    _softmax(5, (8192, 8192), "fp32", 1, 422.73),
    _softmax(6, (31, 67, 127, 257), "bf16", 2, 786.04),
    _softmax(7, (1023, 2047), "fp16", -1, 20.04),
    _softmax(8, (2049, 4097), "fp32", -1, 58.12),
    _softmax(9, (127, 257, 1023), "bf16", -2, 412.79),
    _softmax(10, (1009, 1021), "fp16", -1, 14.20),
    _softmax(11, (367, 373, 379), "fp32", 1, 1063.10),
    _softmax(12, (11, 13, 17, 4001), "bf16", -1, 62.58),
    _softmax(13, (1000003, 2), "fp16", -1, 187.26, "inf", _OWN_SOFTMAX),
    _softmax(14, (11, 13, 17, 67, 67), "fp32", -1, 294.31, "nan",
             "tilesim's softmax kernel is its own (the A2 SoftmaxV2 binary's source is not public); the NPU's "
             "kernel takes more than twice what this kernel's bytes and rows take"),
    _softmax(15, (3, 7, 11, 13, 1013), "bf16", -1, 30.46, "zeros"),
    _softmax(16, (512, 2049), "fp16", 0, 40.06),
    _softmax(17, (255, 8193), "fp32", 1, 18.64),
    _softmax(18, (2, 511, 2049), "bf16", -1, 20.12),
    _softmax(19, (4, 255, 2049), "fp16", 1, 53.56),
    _softmax(20, (2, 3, 17, 1024, 101), "fp32", 3, 818.16),
    _swiglu(1, (1024, 2048), "fp16", -1, 15.44),
    _swiglu(2, (2048, 4096), "fp32", -1, 35.86),
    _swiglu(3, (4096, 8192), "bf16", -1, 58.84, _L2.format(100)),
    _swiglu(4, (8192, 16384), "fp16", 0, 288.77),
    _swiglu(5, (2039, 65520), "fp32", -1, 748.86),
    _swiglu(6, (1009, 2016), "fp16", -1, 16.1),
    _swiglu(7, (363, 367, 14), "bf16", -1, 228.19),
    _swiglu(8, (2049, 1024), "fp16", 1, 15.46),
    _swiglu(9, (3, 7, 13, 1018), "fp32", -1, 9.62),
    _swiglu(10, (1000003, 2), "bf16", 1, 1655.61),
    _swiglu(11, (3, 7, 11, 13, 1012), "fp16", -1, 21.04),
    _swiglu(12, (512, 4096), "fp32", -1, 18.28),
    _swiglu(13, (2, 1023, 4096), "fp32", -1, 36.44),
    _swiglu(14, (2, 3, 17, 512, 100), "fp32", -1, 78.12),
)


def case_input(c: Case, seed: int = 0) -> np.ndarray:
    """x of case ``c``: N(0, 2²) logits in its dtype (SwiGlu: U(-3, 3)), or its special values: zeros, a tenth
    of the elements NaN, or a tenth each +inf and -inf. The draws are a block of ``INPUT_BLOCK`` elements repeated
    over x: a kernel's instructions, and so its estimate, do not depend on the values, and drawing each of the
    largest cases' hundreds of millions of elements took most of the table's time."""
    rng = np.random.default_rng(seed)
    if c.values == "zeros":
        return np.zeros(c.shape, DTYPES[c.dtype])
    n = min(math.prod(c.shape), INPUT_BLOCK)
    if c.op == "swiglu":
        x = rng.uniform(-3.0, 3.0, n).astype(np.float32)
    else:
        x = rng.standard_normal(n, dtype=np.float32) * np.float32(2.0)
    if c.values in ("nan", "inf"):
        pick = rng.random(n)
        if c.values == "nan":
            x[pick < 0.1] = np.nan
        else:
            x[pick < 0.1] = np.inf
            x[pick > 0.9] = -np.inf
    return np.resize(x.astype(DTYPES[c.dtype]), c.shape)


# The op's own argument checks, on x's shape and dtype alone: a case the kernel refuses costs no input
_CHECKS = {"softmax": lambda x, dim, soc: softmax_args(x, dim, None, soc), "swiglu": swiglu_args}


def run_case(c: Case, soc: str = SOC, l2_warm: bool = False) -> dict[str, Any]:
    """The estimate of case ``c`` on ``soc``: a row of the table (``est_us`` None and ``why`` where tilesim's kernel
    refuses the case); ``l2_warm``: x in the L2 when the kernel starts."""
    row: dict[str, Any] = {"op": c.op, "case": c.case, "shape": list(c.shape), "dtype": c.dtype, "dim": c.dim,
                           "values": c.values, "measured_us": c.measured_us, "note": c.note}
    api = getattr(kernels, c.op)
    try:
        _CHECKS[c.op](np.empty(c.shape, DTYPES[c.dtype]), c.dim, get_soc(soc))
        x = case_input(c)
        _, ests = estimated(lambda: api(x, c.dim, soc=soc), l2_warm=l2_warm)
    except AclnnError as e:
        return {**row, "est_us": None, "ratio": None, "bottleneck": None, "launches": 0, "why": str(e)}
    est = total_us(ests)
    slowest = max(ests, key=lambda e: e.total_us)
    return {**row, "est_us": round(est, 3), "ratio": round(est / c.measured_us, 4),
            "bottleneck": slowest.bottleneck, "launches": len(ests), "why": None}


def _ranks(v: np.ndarray) -> np.ndarray:
    """Ranks from 1, ties given their mean rank."""
    order = np.argsort(v, kind="stable")
    r = np.empty(len(v))
    r[order] = np.arange(1, len(v) + 1)
    for x in np.unique(v):
        tie = v == x
        r[tie] = r[tie].mean()
    return r


def spearman(a: list[float], b: list[float]) -> float | None:
    """Spearman's rank correlation of ``a`` and ``b`` (Pearson's of their ranks); None below 3 pairs."""
    if len(a) < 3:
        return None
    ra, rb = _ranks(np.asarray(a, float)), _ranks(np.asarray(b, float))
    ra, rb = ra - ra.mean(), rb - rb.mean()
    return float((ra * rb).sum() / math.sqrt((ra * ra).sum() * (rb * rb).sum()))


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Geometric mean, min and max of est/measured and Spearman's rho over the rows that ran."""
    ran = [r for r in rows if r["est_us"] is not None]
    if not ran:
        return {"cases": 0, "not_run": len(rows)}
    ratios = [r["ratio"] for r in ran]
    rho = spearman([r["est_us"] for r in ran], [r["measured_us"] for r in ran])
    return {"cases": len(ran), "not_run": len(rows) - len(ran),
            "geomean": round(math.exp(sum(math.log(x) for x in ratios) / len(ratios)), 4),
            "min": min(ratios), "max": max(ratios), "spearman": None if rho is None else round(rho, 4),
            "within_0.75_1.33": sum(0.75 <= x <= 1.33 for x in ratios)}


def calibrate(cases: tuple[Case, ...] = CASES, soc: str = SOC, l2_warm: bool = False) -> dict[str, Any]:
    """Every case's row, and the summaries per op and over all."""
    rows = [run_case(c, soc, l2_warm) for c in cases]
    ops = sorted({r["op"] for r in rows})
    p = cost_params(soc)
    return {"soc": soc, "source": SOURCE, "l2_warm": l2_warm, "fitted": {f: getattr(p, f) for f in sorted(p.fitted)},
            "rows": rows,
            "summary": {**{op: summary([r for r in rows if r["op"] == op]) for op in ops}, "all": summary(rows)}}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "&lt;")


def table(result: dict[str, Any]) -> str:
    """The result as a Markdown table (a row per case), then the figures fitted and the summaries: what this
    command prints, and what the documentation's cost-model page shows of ``bench/calibration.json``."""
    lines = ["| op | case | x | dtype | dim | measured µs | estimated µs | est/measured | bottleneck | note |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        shape = ", ".join(map(str, r["shape"]))
        if r["est_us"] is None:
            est, ratio, bottleneck, note = "–", "", "", f"not run: {r['why'].split('] ', 1)[-1]}"
        else:
            est, ratio, bottleneck, note = f"{r['est_us']:.2f}", f"{r['ratio']:.2f}", r["bottleneck"], r["note"]
        lines.append(f"| {r['op']} | {r['case']} | {shape} | {r['dtype']} | {r['dim']} | {r['measured_us']:.2f} | "
                     f"{est} | {ratio} | {bottleneck} | {_cell(note)} |")
    fitted = ", ".join(f"`{f}` {v}" for f, v in result["fitted"].items()) or "none"
    lines += ["", f"Measured: {_cell(result['source'])}; estimated on the emulated {result['soc']}, inputs "
                  f"{'warm in' if result['l2_warm'] else 'not in'} the L2 when a kernel starts. Cost figures fitted "
                  f"to these measurements (`CostParams.fitted`): {fitted}.", "",
              "| op | cases run | not run | geometric mean of est/measured | min | max | Spearman "
              "| within 0.75–1.33 |",
              "|---|---|---|---|---|---|---|---|"]
    for name, m in result["summary"].items():
        if m["cases"]:
            lines.append(f"| {name} | {m['cases']} | {m['not_run']} | {m['geomean']:.3f} | {m['min']:.2f} | "
                         f"{m['max']:.2f} | {m['spearman']} | {m['within_0.75_1.33']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.calibrate", description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", type=Path, default=JSON_PATH, help="where to write the table (default: %(default)s)")
    ap.add_argument("--op", choices=sorted({c.op for c in CASES}), help="only this op's cases")
    ap.add_argument("--l2-warm", action="store_true",
                    help="each kernel's inputs in the L2 when it starts (written only with --json)")
    args = ap.parse_args(argv)
    cases = tuple(c for c in CASES if args.op is None or c.op == args.op)
    result = calibrate(cases, l2_warm=args.l2_warm)
    print(table(result))
    if args.l2_warm and args.json == JSON_PATH:
        return 0  # the committed table is the cold one
    args.json.write_text(json.dumps(result, indent=1) + "\n")
    print(f"written: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
