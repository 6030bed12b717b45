"""The tiling explorer: run every legal tiling of an op in the emulator, check it against the untiled math, and rank
the tilings by estimated NPU time.

An op describes itself with an :class:`~tilesim.opspec.OpSpec`; nothing here knows an op. One candidate is one
row (:func:`evaluate`): its free choices, whether its outputs pass Ascend's precision standard, the cost model's
estimate of the call and the CPU time of the emulated run. :func:`explore` makes the rows of every candidate on
every SoC asked for, in this process, in local worker processes or on a Dask cluster, and ranks them.

The rows are the same whatever runs them: a worker rebuilds the inputs from (module, op, shape, dtype, seed) rather
than receiving arrays, the emulation and the estimate do not depend on the host thread count, and the rows are
sorted by a key that ties never leave open. Only ``wall_ms`` (and the sweep's own duration) are measurements.
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

from .cost import Estimate, estimate_all, total_us
from .launch import recorded
from .opspec import Candidate, Inputs, OpSpec
from .precision import compare
from .soc import SocSpec, get_soc

Row = dict[str, Any]
FAIL = "FAIL"  # what the table prints for a candidate that did not verify: loud on purpose


# ----------------------------------------------------------------------------------------------------------------
# one candidate


def load_ops(modules: Iterable[str]) -> dict[str, tuple[str, OpSpec]]:
    """Every op of the modules that expose ``OPS: dict[str, OpSpec]``, by name, with the module it came from (a
    worker process finds it there again). A name two modules define differently is an error."""
    found: dict[str, tuple[str, OpSpec]] = {}
    for module in modules:
        ops = getattr(importlib.import_module(module), "OPS", None)
        if not isinstance(ops, dict):
            raise ValueError(f"module {module} has no OPS dict of OpSpecs")
        for name, spec in ops.items():
            if name in found and found[name][1] is not spec:
                raise ValueError(f"op {name!r} is defined in both {found[name][0]} and {module}")
            found[name] = (module, spec)
    return found


def run_recorded(spec: OpSpec, inputs: Inputs, tiling: Any, soc: SocSpec,
                 stages: bool = False) -> tuple[tuple[np.ndarray, ...], list[Estimate]]:
    """The op's outputs with ``tiling`` and the cost model's estimate of each of the call's launches (``stages``:
    keep the per-stage timeline a trace draws)."""
    outputs, reports = recorded(lambda: spec.run(inputs, tiling, soc))
    return tuple(outputs), estimate_all(reports, stages=stages)


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def _verify(spec: OpSpec, outputs: Sequence[np.ndarray], golden: Sequence[np.ndarray]) -> Row:
    """Each output against the untiled math under Ascend's standard; the figures of the output furthest from its
    threshold (relative to it), so one column compares outputs of different dtypes."""
    if len(outputs) != len(golden):
        return {"verified": False, "error": f"{len(outputs)} outputs, the reference has {len(golden)}"}
    checks = [compare(a, g) for a, g in zip(outputs, golden, strict=True)]
    worst = max(range(len(checks)),
                key=lambda i: max(checks[i].mere / checks[i].threshold, checks[i].mare / (10 * checks[i].threshold)),
                default=None)
    if worst is None:
        return {"verified": True}
    p = checks[worst]
    return {"verified": all(c.ok for c in checks), "worst_output": spec.output_names[worst],
            "mere": _finite(p.mere), "mare": _finite(p.mare), "threshold": p.threshold}


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
             golden: Sequence[np.ndarray] | None = None) -> Row:
    """One row: the candidate's params, whether it is official, the SoC, whether every output passes the precision
    standard (and the worst output's figures), the estimated µs of the call with the cost model's figures, the
    per-core µs, and ``wall_ms`` of one emulated run in fast mode (after the recorded run, so it excludes loading
    the kernel). ``golden``: the reference outputs, when the caller already has them. A candidate whose run raises
    is a row too, not verified, with the error."""
    spec_soc = get_soc(soc)
    row: Row = {**candidate.params, "official": candidate.official, "soc": spec_soc.name}
    try:
        _, estimates = run_recorded(spec, inputs, candidate.tiling, spec_soc)
        t0 = time.perf_counter()
        outputs = tuple(spec.run(inputs, candidate.tiling, spec_soc))
        wall = (time.perf_counter() - t0) * 1e3
        ref = spec.reference(inputs) if golden is None else golden
        row.update(_combined(estimates))
        row.update(_verify(spec, outputs, ref))
        row["wall_ms"] = round(wall, 3)
    except Exception as e:  # a candidate that fails is a result of the sweep, not its end
        row.update(verified=False, error=f"{type(e).__name__}: {e}".strip())
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
    """One op, shape, dtype and seed in one process: the inputs, the reference outputs and each SoC's candidates,
    each built once however many candidates the process runs."""

    def __init__(self, spec: OpSpec, shape: tuple[int, ...], dtype: str, seed: int) -> None:
        self.spec = spec
        self.inputs = spec.make_inputs(shape, dtype, seed)
        self._golden: tuple[np.ndarray, ...] | None = None
        self._candidates: dict[str, list[Candidate]] = {}

    @property
    def golden(self) -> tuple[np.ndarray, ...]:
        if self._golden is None:
            self._golden = tuple(self.spec.reference(self.inputs))
        return self._golden

    def candidates(self, soc: str) -> list[Candidate]:
        if soc not in self._candidates:
            self._candidates[soc] = list(self.spec.candidates(self.inputs, get_soc(soc)))
        return self._candidates[soc]

    def run(self, job: Job) -> Row:
        cand = self.candidates(job.soc)[job.cand]
        if tuple(cand.params.items()) != job.params:
            raise RuntimeError(f"{job.op}: candidate {job.cand} on {job.soc} is {cand.params} here, "
                               f"{dict(job.params)} where the sweep was planned: candidates must be deterministic")
        return {"cand": job.cand, **evaluate(self.spec, self.inputs, cand, job.soc, self.golden)}


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
    """The ranked rows of a sweep: per SoC (in the order asked), the verified candidates fastest first, then the
    ones that failed; ``rank`` 1 is the fastest, ``best`` the fastest that verified, ``official`` the op's own."""

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
        return [r for r in self.rows if r["soc"] == soc]

    def best(self, soc: str) -> Row | None:
        return next((r for r in self.of(soc) if r["best"]), None)

    def official(self, soc: str) -> Row | None:
        return next((r for r in self.of(soc) if r["official"]), None)

    @property
    def failures(self) -> list[Row]:
        return [r for r in self.rows if not r["verified"]]

    @property
    def ok(self) -> bool:
        """Every candidate on every SoC verified (and every SoC had some)."""
        return not self.failures and not self.soc_errors

    @property
    def columns(self) -> list[str]:
        """Every row's keys: the ranking, the params, then the figures in the order an evaluated row has them."""
        head = ["op", "soc", "rank", "cand", *self.param_keys, "official", "best", "vs_best"]
        rest: dict[str, None] = {}
        for r in sorted(self.rows, key=lambda r: "error" in r):
            rest.update(dict.fromkeys(k for k in r if k not in head))
        return head + list(rest)

    def title(self) -> str:
        return f"{self.op} {list(self.shape)} {self.dtype}"

    def table(self, timings: bool = True, top: int | None = None) -> str:
        """A text table per SoC, then the SoCs side by side. ``timings``: with the CPU wall column (the one thing
        that differs between two runs of a sweep). ``top``: the fastest rows only (the official one and every
        failure are shown anyway)."""
        cols = ["rank", "cand", *self.param_keys, "est_us", "vs_best", "bottleneck", "imbalance", "ub_util",
                "launches", "verified", "worst_output", "mere", "mare"] + (["wall_ms"] if timings else []) + ["mark"]
        out = []
        for soc in self.socs:
            rows = self.of(soc)
            failed = [r for r in rows if not r["verified"]]
            if soc in self.soc_errors:
                out.append(f"== {self.title()} on {soc}: !! no tilings: {self.soc_errors[soc]}")
                continue
            verdict = (f"!! {len(failed)} of {len(rows)} tilings did NOT verify" if failed
                       else f"all {len(rows)} tilings verified")
            out.append(f"== {self.title()} on {soc}: {verdict}")
            shown = [r for i, r in enumerate(rows) if top is None or i < top or r["official"] or not r["verified"]]
            out.append(_text_table(cols, [_cells(r, cols) for r in shown]))
            if len(shown) < len(rows):
                out.append(f"({len(rows) - len(shown)} more rows in the CSV and JSON)")
            for r in failed:
                out.append(f"!! FAILED cand {r['cand']} {_params(r, self.param_keys)}: "
                           + (r.get("error") or f"{r.get('worst_output')} MERE {_fmt(r.get('mere'))} "
                                                f"MARE {_fmt(r.get('mare'))} (threshold {_fmt(r.get('threshold'))})"))
        out.append(self.side_by_side())
        return "\n".join(out)

    def side_by_side(self) -> str:
        """One line per SoC: its best and official tilings and how far apart they are."""
        rows = []
        for soc in self.socs:
            b, o, n = self.best(soc), self.official(soc), self.of(soc)
            rows.append([soc, str(len(n)), str(sum(r["verified"] for r in n)),
                         _params(b, self.param_keys) if b else "-", _fmt(b and b["est_us"]),
                         _params(o, self.param_keys) if o else "-", _fmt(o and o.get("est_us")),
                         _fmt(o and o.get("vs_best"))])
        return "== best and official tiling per SoC\n" + _text_table(
            ["soc", "tilings", "verified", "best", "best_us", "official", "official_us", "official/best"], rows)

    def to_json(self) -> dict[str, Any]:
        summary = {soc: {"best": self.best(soc), "official": self.official(soc), "error": self.soc_errors.get(soc)}
                   for soc in self.socs}
        return {"op": self.op, "shape": list(self.shape), "dtype": self.dtype, "seed": self.seed, "socs": self.socs,
                "param_keys": self.param_keys, "seconds": round(self.seconds, 3), "ok": self.ok,
                "summary": summary, "rows": self.rows}

    def write_json(self, path: str | Path) -> Path:
        path = Path(path)
        path.write_text(json.dumps(self.to_json(), indent=1, allow_nan=False) + "\n")
        return path

    def write_csv(self, path: str | Path) -> Path:
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
        for key, style in (("official", {"marker": "o", "s": 140, "facecolors": "none", "edgecolors": "red"}),
                           ("best", {"marker": "*", "s": 160, "color": "gold", "edgecolors": "black"}),
                           ("did not verify", {"marker": "x", "s": 90, "color": "red"})):
            pts = [(x_of(r), r["est_us"]) for r in rows if (r[key] if key in r else not r["verified"])]
            if pts:
                ax.scatter(*zip(*pts, strict=True), label=key, zorder=3, **style)
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
    """A table cell: booleans as yes / FAIL, small floats in 3 significant digits, others to 3 decimals."""
    if v is None or v == "":
        return "-"
    if isinstance(v, bool):
        return "yes" if v else FAIL
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1e-2 else f"{v:.3f}"
    return str(v)


def _cells(r: Row, cols: list[str]) -> list[str]:
    mark = " ".join(k for k in ("best", "official") if r[k])
    return [mark if c == "mark" else _fmt(r.get(c)) for c in cols]


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


def _rank(rows: list[Row], socs: list[str]) -> list[Row]:
    """Per SoC: verified rows fastest first, then unverified ones by time, then failed runs, candidate index
    breaking ties (so the order is the same whoever ran them); rank, best and vs_best set."""
    def key(r: Row) -> tuple[Any, ...]:
        est = r.get("est_us")
        return (socs.index(r["soc"]), not r["verified"], est is None, est if est is not None else 0.0, r["cand"])

    ranked = sorted(rows, key=key)
    for soc in socs:
        mine = [r for r in ranked if r["soc"] == soc]
        best = next((r for r in mine if r["verified"]), None)
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
    return ExploreResult(spec.name, shape, dtype, soc_names, keys, _rank(rows, soc_names), seed, soc_errors,
                         time.perf_counter() - t0)
