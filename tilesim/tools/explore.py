"""The tiling explorer: run every legal tiling of an op in the emulator, check it against the untiled math, and rank
the tilings by estimated NPU time.

An op describes itself with an :class:`~tilesim.tools.opspec.OpSpec`; nothing here knows an op. One candidate is one
row (:func:`evaluate`): its free choices, its verdict, the cost model's estimate of the call and the CPU time of
the emulated run. :func:`explore` makes the rows of every candidate on every SoC asked for, in this process, in
local worker processes or on a Dask cluster, and ranks them.

What a candidate costs beyond its fast run: a second run that schedules itself on the cost model as it goes
(:func:`tilesim.cost.model.estimated`: no instruction log, so memory does not grow with the instructions and does not
depend on the order of the sweep), and one compiled pass over each output (:func:`tilesim.precision.judge`).

The verdict (:data:`VERDICTS`): ``pass`` (every output meets Ascend's precision standard), ``imprecise`` (one
does not, but fp32 rounding explains its error: the reason names its longest fp32 sum against the official
tiling's), ``wrong`` (an element lies further from the golden than any rounding can take it) or ``error`` (the run
raised).

The rows are the same whatever runs them: a worker rebuilds the inputs from (module, op, shape, dtype, seed) rather
than receiving arrays, the emulation and the estimate do not depend on the host thread count, and the rows are
sorted by a key that ties never leave open. Only :data:`TIMINGS` (and the sweep's own duration) are measurements.
"""

from __future__ import annotations

import csv
import importlib
import json
import math
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np

from tilesim.cost.model import Estimate, estimate_all, estimated, total_us
from tilesim.errors import AclnnError
from tilesim.precision import Expected, Judgement, judge
from tilesim.runtime.report import capture, recorded
from tilesim.soc import SocSpec, get_soc
from tilesim.tools.opspec import Candidate, Inputs, OpSpec

Row = dict[str, Any]
VERDICTS = ("pass", "imprecise", "wrong", "error")  # best first: the ranking's tiers
TIMINGS = ("wall_ms", "estimate_ms", "judge_ms")  # a row's CPU times: what differs between two runs of a sweep
LOUD = {"pass": "pass", "imprecise": "imprecise", "wrong": "WRONG", "error": "ERROR"}  # as the table prints them


# ----------------------------------------------------------------------------------------------------------------
# one candidate


def load_ops(modules: Iterable[str]) -> dict[str, tuple[str, OpSpec]]:
    """Every op of the modules that expose ``OPS: dict[str, OpSpec]``, by name, with the module it came from (a
    worker process finds it there again). A name two modules define differently is an error."""
    found: dict[str, tuple[str, OpSpec]] = {}
    for module in modules:
        try:
            imported = importlib.import_module(module)
        except ImportError as e:  # the module named, whatever it failed to import
            raise ImportError(f"cannot import the ops module {module}: {e}") from e
        ops = getattr(imported, "OPS", None)
        if not isinstance(ops, dict):
            raise ValueError(f"module {module} has no OPS dict of OpSpecs")
        for name, spec in ops.items():
            if name in found and found[name][1] is not spec:
                raise ValueError(f"op {name!r} is defined in both {found[name][0]} and {module}")
            found[name] = (module, spec)
    return found


def make_inputs(spec: OpSpec, shape: Sequence[int], dtype: str, seed: int = 0) -> Inputs:
    """The op's inputs (``spec.make_inputs``). A shape its maker cannot read (a wrong rank, say) is a ValueError
    that names the op, the shape and the op's own shape notation (``shape_help``); an AclnnError, the op's own
    refusal, is raised as it is."""
    try:
        return spec.make_inputs(tuple(shape), dtype, seed)
    except AclnnError:
        raise
    except (ValueError, TypeError, IndexError, KeyError, ZeroDivisionError) as e:
        raise ValueError(f"{spec.name}: no inputs of shape {list(shape)} {dtype} ({e}); its shape: "
                         f"{spec.shape_help}") from e


def run_recorded(spec: OpSpec, inputs: Inputs, tiling: Any, soc: SocSpec,
                 stages: bool = False) -> tuple[tuple[np.ndarray, ...], list[Estimate]]:
    """The op's outputs with ``tiling`` and the cost model's estimate of each of the call's launches (``stages``:
    keep the per-stage timeline a trace draws)."""
    outputs, reports = recorded(lambda: spec.run(inputs, tiling, soc))
    return tuple(outputs), estimate_all(reports, stages=stages)


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def expectations(spec: OpSpec, inputs: Inputs, golden: Sequence[np.ndarray],
                 outputs: Sequence[np.ndarray]) -> list[Expected]:
    """Each output's golden prepared for :func:`~tilesim.precision.judge`, in the dtype ``outputs`` (a run's)
    have, with the op's rounding bounds when its spec has them."""
    if len(outputs) != len(golden):
        raise ValueError(f"{spec.name}: {len(outputs)} outputs, the reference has {len(golden)}")
    bounds = spec.bounds(inputs) if spec.bounds is not None else [None] * len(golden)
    return [Expected.of(g, np.dtype(o.dtype).name, b) for g, o, b in zip(golden, outputs, bounds, strict=True)]


def _closeness(j: Judgement) -> float:
    p = j.precision
    return max(p.mere / p.threshold, p.mare / (10 * p.threshold))


def _judged(spec: OpSpec, outputs: Sequence[np.ndarray], expected: Sequence[Expected], tiling: Any,
            official: Any) -> Row:
    """The verdict of a run's outputs, the figures of the output that decided it (the one furthest outside its
    rounding bound when one is wrong, else the one furthest from its threshold, relative to it: one column
    compares outputs of different dtypes) and why. ``err_vs_bound``: that output's largest error over its
    rounding bound."""
    js = [judge(o, e) for o, e in zip(outputs, expected, strict=True)]
    verdict = max((j.verdict for j in js), key=VERDICTS.index, default="pass")
    if not js:
        return {"verdict": verdict, "reason": ""}
    k = max(range(len(js)), key=lambda i: js[i].excess if verdict == "wrong" else _closeness(js[i]))
    j, name = js[k], spec.output_names[k]
    p = j.precision
    row = {"verdict": verdict, "worst_output": name, "mere": _finite(p.mere), "mare": _finite(p.mare),
           "threshold": p.threshold, "err_vs_bound": None if math.isnan(j.excess) else _finite(j.excess)}
    if verdict == "wrong":
        at = tuple(int(i) for i in np.unravel_index(j.index, np.shape(outputs[k])))
        row["reason"] = (f"{name}[{', '.join(map(str, at))}] = {j.actual:.6g} where {j.expected:.6g} is expected: "
                         f"{abs(j.actual - j.expected):.3g} off, {j.excess:.3g}x the most fp32 rounding explains "
                         f"({j.bound:.3g}); {j.wrong} element{'s' if j.wrong > 1 else ''} outside the bound")
    elif verdict == "imprecise":
        limit = (f"MARE {p.mare:.3g} above {10 * p.threshold:.3g}" if p.mare >= 10 * p.threshold
                 else f"MERE {p.mere:.3g} above {p.threshold:.3g}")
        row["reason"] = f"{name}: {limit}, within fp32 rounding ({j.excess:.2g}x its bound)" + _sums(
            spec, name, tiling, official)
    else:
        row["reason"] = ""
    return row


def _sums(spec: OpSpec, output: str, tiling: Any, official: Any) -> str:
    """``: fp32 sums of 4096 rows per core, the official tiling's 86`` when the op says how long the output's
    fp32 sums are with a tiling."""
    if spec.accumulations is None:
        return ""
    mine = spec.accumulations(tiling).get(output)
    if mine is None:
        return ""
    theirs = spec.accumulations(official).get(output) if official is not None else None
    text = f": fp32 sums of {mine.terms} {mine.unit}"
    if theirs is None:
        return text
    return text + (", as the official tiling's" if theirs.terms == mine.terms
                   else f", the official tiling's {theirs.terms}")


def _combined(estimates: list[Estimate]) -> Row:
    """The figures of the call: time, padding, GM bytes, phases and per-core time summed over its launches; the
    bottleneck, imbalance, UB use and pipe times those of its slowest launch (where time is to be won)."""
    slow = max(estimates, key=lambda e: e.total_us)
    width = max(e.block_dim for e in estimates)
    core_us = np.zeros(width)
    for e in estimates:
        core_us[:e.block_dim] += e.core_us
    return {**slow.summary(), "est_us": round(total_us(estimates), 3), "launches": len(estimates),
            "phases": sum(len(e.phase_us) for e in estimates), "pad_bytes": sum(e.pad_bytes for e in estimates),
            "gm_bytes": sum(e.gm_bytes for e in estimates), "core_us": [round(float(v), 3) for v in core_us]}


def evaluate(spec: OpSpec, inputs: Inputs, candidate: Candidate, soc: str | SocSpec,
             expected: Sequence[Expected] | None = None, official: Candidate | None = None) -> Row:
    """One row: the candidate's params, whether it is official, the SoC, the verdict (:data:`VERDICTS`) with the
    deciding output's figures and the reason, the estimated µs of the call with the cost model's figures, the
    per-core µs, and what it cost on this CPU: ``wall_ms`` its emulated run in fast mode, ``estimate_ms`` the run
    that schedules itself on the cost model, ``judge_ms`` the judging of its outputs. ``expected``: the outputs'
    goldens prepared once for a sweep (:func:`expectations`); ``official``: the op's own tiling, which the reason of
    an imprecise candidate compares with. A candidate whose run raises is a row too, verdict "error", with the
    reason."""
    spec_soc = get_soc(soc)
    row: Row = {**candidate.params, "official": candidate.official, "soc": spec_soc.name}

    def call() -> tuple[np.ndarray, ...]:
        return tuple(spec.run(inputs, candidate.tiling, spec_soc))

    try:
        t0 = time.perf_counter()
        with capture() as fast:
            outputs = call()
        t1 = time.perf_counter()
        _, estimates = estimated(call, fast)
        t2 = time.perf_counter()
        if expected is None:
            expected = expectations(spec, inputs, spec.reference(inputs), outputs)
        row.update(_combined(estimates))
        row.update(_judged(spec, outputs, expected, candidate.tiling, official.tiling if official else None))
        t3 = time.perf_counter()
        row.update(wall_ms=round((t1 - t0) * 1e3, 3), estimate_ms=round((t2 - t1) * 1e3, 3),
                   judge_ms=round((t3 - t2) * 1e3, 3))
    except Exception as e:  # a candidate that fails is a result of the sweep, not its end
        row.update(verdict="error", reason=f"{type(e).__name__}: {e}".strip())
    return row


# ----------------------------------------------------------------------------------------------------------------
# jobs: what a worker needs to rebuild a candidate


@dataclass(frozen=True)
class Job:
    """Candidate ``cand`` of op ``op`` (found in ``module``'s OPS) on ``soc``, with inputs rebuilt from shape,
    dtype and seed; ``params`` are the candidate's as the submitter saw them (the worker checks it built the same
    candidate). ``threads``: the host threads a worker gives the emulation (None: leave them)."""

    module: str | None
    op: str
    shape: tuple[int, ...]
    dtype: str
    seed: int
    soc: str
    cand: int
    params: tuple[tuple[str, Any], ...]
    threads: int | None = None


class Sweep:
    """One op, shape, dtype and seed in one process: the inputs, the goldens prepared for judging and each SoC's
    candidates, each built once however many candidates the process runs."""

    def __init__(self, spec: OpSpec, shape: tuple[int, ...], dtype: str, seed: int) -> None:
        self.spec = spec
        self.inputs = make_inputs(spec, shape, dtype, seed)
        self._expected: list[Expected] | None = None
        self._candidates: dict[str, list[Candidate]] = {}

    def expected(self, soc: str) -> list[Expected]:
        """The outputs' goldens as :func:`expectations` makes them, in the dtypes of a run of the official tiling
        on ``soc``, made once; the run also loads the kernel, so that no candidate's ``wall_ms`` includes that."""
        if self._expected is None:
            official = next(c for c in self.candidates(soc) if c.official)
            outputs = tuple(self.spec.run(self.inputs, official.tiling, get_soc(soc)))
            self._expected = expectations(self.spec, self.inputs, self.spec.reference(self.inputs), outputs)
        return self._expected

    def candidates(self, soc: str) -> list[Candidate]:
        """The op's candidate tilings on ``soc`` for these inputs (``OpSpec.candidates``), listed once."""
        if soc not in self._candidates:
            self._candidates[soc] = list(self.spec.candidates(self.inputs, get_soc(soc)))
        return self._candidates[soc]

    def run(self, job: Job) -> Row:
        """The row of one job: its candidate run, timed, estimated and judged (:func:`evaluate`). A job planned with
        other params than the candidate has here is a RuntimeError: candidates must be deterministic."""
        cands = self.candidates(job.soc)
        cand = cands[job.cand]
        if tuple(cand.params.items()) != job.params:
            raise RuntimeError(f"{job.op}: candidate {job.cand} on {job.soc} is {cand.params} here, "
                               f"{dict(job.params)} where the sweep was planned: candidates must be deterministic")
        try:
            expected = self.expected(job.soc)
        except Exception:  # the official tiling fails to run: evaluate prepares the goldens from its own outputs
            expected = None
        official = next((c for c in cands if c.official), None)
        return {"cand": job.cand, **evaluate(self.spec, self.inputs, cand, job.soc, expected, official)}


_sweeps: dict[tuple[Any, ...], Sweep] = {}  # a worker's current sweep, kept for its next job (one at a time)


def run_job(job: Job) -> Row:
    """The row of one job in a worker process (local or Dask): the op found by module and name, the inputs rebuilt
    (once per sweep), the candidate run on ``job.threads`` host threads."""
    if job.threads is not None:
        import numba

        numba.set_num_threads(job.threads)
    key = (job.module, job.op, job.shape, job.dtype, job.seed)
    if key not in _sweeps:
        _sweeps.clear()
        if job.module is None:
            raise ValueError(f"{job.op}: a worker finds the op through its module's OPS; the job names none")
        _sweeps[key] = Sweep(load_ops([job.module])[job.op][1], job.shape, job.dtype, job.seed)
    return _sweeps[key].run(job)


def _worker_init() -> None:
    """A local worker process runs its candidates on one host thread: the workers are the parallelism."""
    import numba

    numba.set_num_threads(1)


def home_module(spec: OpSpec) -> str | None:
    """The imported module whose OPS holds ``spec`` (so a worker can find it by name), or None."""
    for name, mod in list(sys.modules.items()):
        ops = getattr(mod, "__dict__", {}).get("OPS")  # not getattr: a lazy module would import on it
        if name != "__main__" and isinstance(ops, dict) and ops.get(spec.name) is spec:
            return name
    return None


# ----------------------------------------------------------------------------------------------------------------
# runners: the same jobs in this process, in worker processes, or on a Dask cluster


def _run_pool(jobs: list[Job], workers: int) -> Iterator[Row]:
    # spawn, not fork: the parent may hold the emulator's host threads, which a forked child would not have
    n = max(1, min(workers, len(jobs)))
    with ProcessPoolExecutor(n, mp_context=get_context("spawn"), initializer=_worker_init) as pool:
        for f in as_completed([pool.submit(run_job, j) for j in jobs]):
            yield f.result()


def _run_dask(jobs: list[Job], scheduler: str) -> Iterator[Row]:
    from dask.distributed import Client
    from dask.distributed import as_completed as dask_completed

    with Client(scheduler) as client:
        futures = client.map(run_job, jobs, pure=False)
        for f in dask_completed(futures):
            yield f.result()


def _progress(total: int, desc: str, enabled: bool) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="tiling", file=sys.stderr,
                disable=not (enabled and sys.stderr.isatty()), leave=False)


# ----------------------------------------------------------------------------------------------------------------
# the sweep and its report


def tile_elements(tile: Any) -> float | None:
    """A tile parameter as a number of elements: a number as it is, "5x1024" as 5120; None when it is not one."""
    if isinstance(tile, bool):
        return None
    if isinstance(tile, int | float):
        return float(tile)
    try:
        return float(np.prod([int(p) for p in str(tile).split("x")]))
    except ValueError:
        return None


@dataclass
class ExploreResult:
    """The ranked rows of a sweep: per SoC (in the order asked), by verdict (:data:`VERDICTS`: those that pass,
    then the imprecise, the wrong and those that raised), each fastest first; ``rank`` 1 is the fastest that
    passes, ``best`` the fastest that passes, ``official`` the op's own."""

    op: str
    shape: tuple[int, ...]
    dtype: str
    socs: list[str]
    param_keys: list[str]
    rows: list[Row]
    seed: int = 0
    soc_errors: dict[str, str] = field(default_factory=dict)  # a SoC the op has no candidates on: why
    seconds: float = 0.0  # the sweep's wall time

    def of(self, soc: str) -> list[Row]:
        """The rows of ``soc``, in their rank order."""
        return [r for r in self.rows if r["soc"] == soc]

    def best(self, soc: str) -> Row | None:
        """The fastest row of ``soc`` that passes, or None."""
        return next((r for r in self.of(soc) if r["best"]), None)

    def official(self, soc: str) -> Row | None:
        """The row of the op's official tiling on ``soc``, or None (it has none, or it was not run)."""
        return next((r for r in self.of(soc) if r["official"]), None)

    def having(self, verdict: str) -> list[Row]:
        """The rows of every SoC with the verdict ``verdict`` (one of :data:`VERDICTS`)."""
        return [r for r in self.rows if r["verdict"] == verdict]

    @property
    def failures(self) -> list[Row]:
        """The candidates that are wrong or did not run: what a sweep must not have."""
        return [r for r in self.rows if r["verdict"] in ("wrong", "error")]

    @property
    def ok(self) -> bool:
        """No candidate on any SoC is wrong or failed to run, and every SoC had some (a tiling less precise than
        the standard is a finding about the tiling, not a failure of the sweep)."""
        return not self.failures and not self.soc_errors

    @property
    def columns(self) -> list[str]:
        """Every row's keys: the ranking, the params, then the figures in the order an evaluated row has them."""
        head = ["op", "soc", "rank", "cand", *self.param_keys, "official", "best", "vs_best"]
        rest: dict[str, None] = {}
        for r in sorted(self.rows, key=lambda r: r["verdict"] == "error"):
            rest.update(dict.fromkeys(k for k in r if k not in head))
        return head + list(rest)

    def title(self) -> str:
        """The sweep in a few words: the op, the shape and the dtype."""
        return f"{self.op} {list(self.shape)} {self.dtype}"

    def table(self, timings: bool = True, top: int | None = None) -> str:
        """A text table per SoC, then the SoCs side by side. ``timings``: with the CPU wall column (the one thing
        that differs between two runs of a sweep). ``top``: the fastest rows only (the official one and every
        failure are shown anyway)."""
        cols = ["rank", "cand", *self.param_keys, "est_us", "vs_best", "bottleneck", "imbalance", "ub_util",
                "launches", "verdict", "worst_output", "mere", "mare", "err_vs_bound"] + (
                   ["wall_ms"] if timings else []) + ["mark"]
        out = []
        for soc in self.socs:
            rows = self.of(soc)
            if soc in self.soc_errors:
                out.append(f"== {self.title()} on {soc}: !! no tilings: {self.soc_errors[soc]}")
                continue
            out.append(f"== {self.title()} on {soc}: {_tally(rows)}")
            shown = [r for i, r in enumerate(rows)
                     if top is None or i < top or r["official"] or r["verdict"] != "pass"]
            out.append(_text_table(cols, [_cells(r, cols) for r in shown]))
            if len(shown) < len(rows):
                out.append(f"({len(rows) - len(shown)} more rows in the CSV and JSON)")
            for r in rows:
                if r["verdict"] != "pass":
                    mark = "!!" if r["verdict"] in ("wrong", "error") else "~ "
                    out.append(f"{mark} {LOUD[r['verdict']]} cand {r['cand']} {_params(r, self.param_keys)}: "
                               f"{r['reason']}")
        out.append(self.side_by_side())
        out.append("verdict: pass = every output meets Ascend's precision standard; imprecise = fails it, within what "
                   "fp32 rounding explains (err_vs_bound < 1); WRONG = beyond any rounding (err_vs_bound > 1); "
                   "ERROR = the run raised")
        return "\n".join(out)

    def side_by_side(self) -> str:
        """One line per SoC: its best and official tilings and how far apart they are."""
        rows = []
        for soc in self.socs:
            b, o, n = self.best(soc), self.official(soc), self.of(soc)
            rows.append([soc, str(len(n)), str(sum(r["verdict"] == "pass" for r in n)),
                         _params(b, self.param_keys) if b else "-", _fmt(b and b["est_us"]),
                         _params(o, self.param_keys) if o else "-", _fmt(o and o.get("est_us")),
                         _fmt(o and o.get("vs_best"))])
        return "== best and official tiling per SoC\n" + _text_table(
            ["soc", "tilings", "pass", "best", "best_us", "official", "official_us", "official/best"], rows)

    def to_json(self) -> dict[str, Any]:
        """The sweep as JSON-ready data: what was swept, per SoC its best and official rows, any error and the
        count of each verdict, then every row."""
        summary = {soc: {"best": self.best(soc), "official": self.official(soc), "error": self.soc_errors.get(soc),
                         "verdicts": {v: sum(r["verdict"] == v for r in self.of(soc)) for v in VERDICTS}}
                   for soc in self.socs}
        return {"op": self.op, "shape": list(self.shape), "dtype": self.dtype, "seed": self.seed, "socs": self.socs,
                "param_keys": self.param_keys, "seconds": round(self.seconds, 3), "ok": self.ok,
                "summary": summary, "rows": self.rows}

    def write_json(self, path: str | Path) -> Path:
        """Write :meth:`to_json` to ``path`` (NaN refused: every figure is finite or None); returns the path."""
        path = Path(path)
        path.write_text(json.dumps(self.to_json(), indent=1, allow_nan=False) + "\n")
        return path

    def write_csv(self, path: str | Path) -> Path:
        """Write the rows to ``path`` as CSV, one column per key of :attr:`columns`; returns the path."""
        path = Path(path)
        cols = self.columns
        with path.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(cols)
            for r in self.rows:
                w.writerow([_csv_cell(r.get(c)) for c in cols])
        return path

    def plot(self, path: str | Path) -> Path:
        """A PNG with a column per SoC: estimated time against tile size, a colour per block_dim (the line joins
        each size's fastest variant, the markers tell the variants apart), and the per-core time of the best and
        the official tiling."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        n = len(self.socs)
        fig, axes = plt.subplots(2, n, figsize=(7 * n, 9), squeeze=False)
        for j, soc in enumerate(self.socs):
            self._plot_tiles(axes[0, j], soc)
            self._plot_cores(axes[1, j], soc)
        fig.suptitle(f"{self.title()}: estimated NPU time of each tiling")
        fig.tight_layout()
        path = Path(path)
        fig.savefig(path, dpi=90)
        plt.close(fig)
        return path

    def _variant(self, r: Row) -> str:
        return ", ".join(f"{k} {r[k]}" for k in self.param_keys if k not in ("block_dim", "tile")) or "-"

    def _plot_tiles(self, ax: Any, soc: str) -> None:
        import matplotlib

        rows = [r for r in self.of(soc) if r.get("est_us") is not None]
        has_tile = "tile" in self.param_keys and any(tile_elements(r["tile"]) is not None for r in rows)
        x_of: Callable[[Row], float | None] = ((lambda r: tile_elements(r["tile"])) if has_tile
                                               else (lambda r: float(r["cand"])))
        markers = "osD^v<>pPX*h"
        variants = sorted({self._variant(r) for r in rows})
        dims = sorted({r.get("block_dim", 0) for r in rows})
        cmap = matplotlib.colormaps["viridis"]
        rows = [r for r in rows if x_of(r) is not None]
        for i, bd in enumerate(dims):
            colour = cmap(i / max(len(dims) - 1, 1))
            mine = [r for r in rows if r.get("block_dim", 0) == bd]
            fastest: dict[float, float] = {}
            for r in mine:
                fastest[x_of(r)] = min(fastest.get(x_of(r), math.inf), r["est_us"])
            xs = sorted(fastest)
            ax.plot(xs, [fastest[x] for x in xs], color=colour, lw=1, label=f"block_dim {bd}")
            for k, v in enumerate(variants):
                pts = [(x_of(r), r["est_us"]) for r in mine if self._variant(r) == v]
                if pts:
                    ax.scatter(*zip(*pts, strict=True), color=colour, s=18, marker=markers[k % len(markers)])
        for label, pick, style in (
                ("official", lambda r: r["official"], {"marker": "o", "s": 140, "facecolors": "none",
                                                       "edgecolors": "red"}),
                ("best", lambda r: r["best"], {"marker": "*", "s": 160, "color": "gold", "edgecolors": "black"}),
                ("imprecise (fails the standard within fp32 rounding)", lambda r: r["verdict"] == "imprecise",
                 {"marker": "v", "s": 70, "facecolors": "none", "edgecolors": "darkorange"}),
                ("WRONG (beyond any rounding)", lambda r: r["verdict"] == "wrong",
                 {"marker": "x", "s": 90, "color": "red"})):
            pts = [(x_of(r), r["est_us"]) for r in rows if pick(r)]
            if pts:
                ax.scatter(*zip(*pts, strict=True), label=label, zorder=3, **style)
        for k, v in enumerate(variants):
            ax.scatter([], [], color="grey", marker=markers[k % len(markers)], label=v)
        ax.set_xlabel("tile size (elements)" if has_tile else "candidate")
        if has_tile:
            ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_ylabel("estimated µs")
        ax.set_title(soc + (f": {self.soc_errors[soc]}"[:80] if soc in self.soc_errors else ""))
        ax.grid(True, which="both", alpha=0.3)
        if rows:
            ax.legend(fontsize=7, ncol=2)

    def _plot_cores(self, ax: Any, soc: str) -> None:
        b, o = self.best(soc), self.official(soc)
        shown = [("best = official", b)] if b is not None and b is o else [("best", b), ("official", o)]
        shown = [(label, r) for label, r in shown if r is not None and r.get("core_us")]
        width = 0.8 / max(len(shown), 1)
        for k, (label, r) in enumerate(shown):
            us = r["core_us"]
            ax.bar(np.arange(len(us)) + k * width, us, width,
                   label=f"{label}: {_params(r, self.param_keys)}, {r['est_us']:.2f} µs")
        ax.set_xlabel("core")
        ax.set_ylabel("busy µs (summed over launches)")
        ax.set_title(f"{soc}: per-core time")
        if shown:
            ax.legend(fontsize=7)

    def write(self, out_dir: str | Path, stem: str = "explore") -> list[Path]:
        """CSV, JSON and PNG into ``out_dir`` (made if missing)."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        return [self.write_csv(out / f"{stem}.csv"), self.write_json(out / f"{stem}.json"),
                self.plot(out / f"{stem}.png")]


def _fmt(v: Any) -> str:
    """A table cell: a verdict as :data:`LOUD` says, booleans as yes / no, small floats in 3 significant digits,
    others to 3 decimals."""
    if v is None or v == "":
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, str) and v in LOUD:
        return LOUD[v]
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1e-2 else f"{v:.3f}"
    return str(v)


def _cells(r: Row, cols: list[str]) -> list[str]:
    mark = " ".join(k for k in ("best", "official") if r[k])
    return [mark if c == "mark" else _fmt(r.get(c)) for c in cols]


def _tally(rows: list[Row]) -> str:
    """``56 tilings: 36 pass, 20 imprecise`` (WRONG and ERROR counts loud)."""
    counts = [(v, sum(r["verdict"] == v for r in rows)) for v in VERDICTS]
    text = ", ".join(f"{n} {LOUD[v]}" for v, n in counts if n)
    return f"{len(rows)} tilings: {text}" if rows else "no tilings"


def _params(r: Row, keys: list[str]) -> str:
    return " ".join(f"{k}={r[k]}" for k in keys)


def _text_table(cols: list[str], rows: list[list[str]]) -> str:
    widths = [max([len(c), *(len(r[i]) for r in rows)]) for i, c in enumerate(cols)]
    line = lambda cells: "  ".join(s.rjust(w) for s, w in zip(cells, widths, strict=True)).rstrip()  # noqa: E731
    return "\n".join([line(cols), *(line(r) for r in rows)])


def _csv_cell(v: Any) -> Any:
    if isinstance(v, list):
        return " ".join(str(x) for x in v)
    return "" if v is None else v


def _rank(rows: list[Row], socs: list[str], param_keys: list[str]) -> list[Row]:
    """Per SoC: by verdict (:data:`VERDICTS`), each fastest first; between equal estimates the official tiling
    first, then the params (so the order is the same whoever ran the candidates, in whatever order); rank, best
    (the fastest that passes) and vs_best set."""
    def key(r: Row) -> tuple[Any, ...]:
        est = r.get("est_us")
        return (socs.index(r["soc"]), VERDICTS.index(r["verdict"]), est is None, est if est is not None else 0.0,
                not r["official"], tuple(str(r.get(k)) for k in param_keys), r["cand"])

    ranked = sorted(rows, key=key)
    for soc in socs:
        mine = [r for r in ranked if r["soc"] == soc]
        best = next((r for r in mine if r["verdict"] == "pass"), None)
        for i, r in enumerate(mine, 1):
            r["rank"] = i
            r["best"] = r is best
            est = r.get("est_us")
            r["vs_best"] = round(est / best["est_us"], 3) if best and est is not None and best["est_us"] else None
    return ranked


def explore(spec: OpSpec, shape: Sequence[int], dtype: str, socs: Sequence[str] | str, workers: int = 1,
            scheduler: str | None = None, progress: bool = True, seed: int = 0,
            module: str | None = None) -> ExploreResult:
    """Run every candidate of ``spec`` at ``shape`` and ``dtype`` on each SoC of ``socs`` and rank them.

    ``workers`` > 1: that many local processes (spawned; each runs its candidates on one host thread).
    ``scheduler``: the address of a running Dask scheduler (``dask.distributed``), whose workers need tilesim and
    the op's module installed. Both find the op by ``module`` (default: the imported module whose ``OPS`` holds
    ``spec``). ``progress``: a progress bar on stderr when it is a terminal."""
    t0 = time.perf_counter()
    shape = tuple(int(s) for s in shape)
    soc_names = [get_soc(s).name for s in ([socs] if isinstance(socs, str) else socs)]
    remote = scheduler is not None or workers > 1
    if remote:
        module = module or home_module(spec)
        if module is None:
            raise ValueError(f"{spec.name}: workers find an op through a module's OPS dict; pass module=")
    sweep = Sweep(spec, shape, dtype, seed)
    jobs: list[Job] = []
    soc_errors: dict[str, str] = {}
    for soc in soc_names:
        try:
            cands = sweep.candidates(soc)
        except Exception as e:  # e.g. an op or dtype this SoC does not support: the other SoCs go on
            soc_errors[soc] = f"{type(e).__name__}: {e}"
            continue
        jobs += [Job(module, spec.name, shape, dtype, seed, soc, k, tuple(c.params.items()), 1 if remote else None)
                 for k, c in enumerate(cands)]
    runner = (_run_dask(jobs, scheduler) if scheduler is not None else _run_pool(jobs, workers) if workers > 1
              else map(sweep.run, jobs))
    rows: list[Row] = []
    with _progress(len(jobs), f"{spec.name} {list(shape)} {dtype}", progress) as bar:
        for row in runner:
            rows.append({"op": spec.name, **row})
            bar.update()
    keys = [k for k, _ in jobs[0].params] if jobs else []
    return ExploreResult(spec.name, shape, dtype, soc_names, keys, _rank(rows, soc_names, keys), seed, soc_errors,
                         time.perf_counter() - t0)
