"""The benchmark summary: after a run with ``--benchmark-enable``, a table of kernel, shape, op, dtype, median,
effective GB/s, its share of the memory-bandwidth probe, the speedups over torch and over numpy and the cost of
checked mode; then the small calls (µs), the scaling run (ns per element), the warm start, the explorer's sweeps
and the targets (speed, the explorer's cost), each a short section printed only when its benchmarks ran.
Everything is also written to ``bench/results.json``. Nothing is printed or written when benchmarks are disabled
(the default addopts).

The benchmarks put ``op``, ``dtype`` and (but for the start-up) ``bytes`` (what the op must move) in their
``extra_info``; GB/s here is bytes / median time / 1e9, the probe's GB/s is the triad's (2 reads + 1 write
counted). The kernel is ``extra_info["kernel"]`` when given, else the first word of the benchmark group;
speedups compare rows of one group (one kernel, dtype and shape), torch's row being the op named ``torch ...``,
numpy's ``numpy ...``, the hand-written untiled Numba kernel's ``numba untiled`` (``bench/untiled.py``, where
there is one: vs untiled is its median over tilesim's, the share of a fused kernel's speed the emulation keeps);
checked/fast is the median of the group's ``tilesim checked`` row over its ``tilesim`` row's, shown on the
latter. paired, on the ``tilesim`` row, is the torch row's ``paired_speedup``: torch's time over tilesim's in
rounds of one call of each back to back (``bench.record.pair_with_fast``), which the target "faster than torch"
is judged on where a run has it. Every bench file runs the probe (it imports it), so a full run has one probe per
file, minutes apart on a host whose bandwidth drifts: the fastest is the probe row every share is taken of (the
most the memory gave in this run, so the shares err low), and ``probe_runs`` in its info lists all of them.

A tilesim row whose ``extra_info`` has the emulated kernel's own traffic (``gm_bytes``, ``ub_bytes``: see
``bench.record.kernel_traffic``) also shows GM/op and UB/op, those bytes over the op's, and GM % probe, the
kernel's GM bytes per second as a share of the probe: a low % of probe with a high GM/op is the kernel's design
(it moves more than the op needs), with a high UB/op the emulated vector passes. Given the rows of the vector pass
(``bench.instructions.vector_pass``) and of the probe on one thread, timed in every bench file like the probe
(the fastest run kept), it also shows its floor (``_floor_s``): the least time this host can take to emulate the
kernel instruction by instruction, as the share of the probe it would reach (``floor %``) and over the median
(``of floor``); a share target above its floor % is out of reach of any such emulation here, and the targets
section says so.

Sections by benchmark group: ``small calls`` (test_bench_small_calls.py), ``scaling`` (test_bench_scaling.py),
``startup`` (test_bench_startup.py), ``explore`` (test_bench_explore.py: each demo case's sweep, and what its
candidates cost beyond their fast runs); every other group is a row of the main table.
"""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path
from typing import Any

import numba

from bench.record import REPEAT_BYTES

RESULTS = Path(__file__).with_name("results.json")
PROBE_OP = "bandwidth probe"
PROBE1_OP = "probe, one thread"  # the triad on one host thread
PASS_OP = "vector pass"  # the cheapest emulated vector pass (bench.instructions.vector_pass)
HOST_OPS = (PROBE_OP, PROBE1_OP, PASS_OP)  # what the host can do, timed in every bench file: the fastest run kept
TORCH_OP = "torch"  # prefix of the torch baseline's op name ("torch autograd", "torch aten")
NUMPY_OP = "numpy"  # prefix of the numpy baseline's op name
UNTILED_OP = "numba untiled"  # a hand-written fused Numba kernel of the same op (bench/untiled.py)
FAST_OP = "tilesim"
CHECKED_OP = "tilesim checked"  # the same call with checks=True, in the fast row's group
SMALL_GROUP = "small calls"
SCALING_GROUP = "scaling"
STARTUP_GROUP = "startup"
EXPLORE_GROUP = "explore"

# The speed targets.
NORMS = ("rms_norm_grad", "group_norm_backward", "layer_norm_grad")
NORM_PCT = {"fp32": 60.0, "bf16": 50.0, "fp16": 50.0}  # % of the probe, by dtype (b16: bf16 and fp16)
OTHER_PCT = 40.0  # swiglu_grad, nsa_compress_grad: % of the probe, any dtype
CHECKED_MAX = 5.0  # checked median / fast median, the UB shadow and the race checks included
SMALL_MAX_US = 200.0  # per small call
WARM_MAX_S = 1.5  # warm start: process start to the first result
# The explorer's targets.
EXTRA_MAX = 3.0  # what a candidate costs beyond its fast run (estimate and judging), over that run
SWEEP_MAX_S = 15.0  # the sweep of SWEEP_CASE, one process
SWEEP_CASE = ("rms_norm_grad", "bf16", [4096, 4096])


def _section(group: str | None) -> str:
    if group == SMALL_GROUP:
        return "small"
    if group == SCALING_GROUP:
        return "scaling"
    if group == STARTUP_GROUP:
        return "startup"
    if group == EXPLORE_GROUP:
        return "explore"
    return "main"


def _rows(config: Any) -> list[dict[str, Any]]:
    """One dict per benchmark that ran and recorded an op (the probe once: its fastest run), with its section,
    median and GB/s."""
    bs = getattr(config, "_benchmarksession", None)
    if bs is None or bs.disabled:
        return []
    rows = []
    ran = [b for b in bs.benchmarks if "op" in b.extra_info and b]
    runs = {op: [b for b in ran if b.extra_info["op"] == op] for op in HOST_OPS}  # in the order they ran
    fastest = {op: min(bs_, key=lambda b: b.stats.median, default=None) for op, bs_ in runs.items()}
    for bench in ran:
        info = bench.extra_info
        host = info["op"] in HOST_OPS
        if host and bench is not fastest[info["op"]]:
            continue
        if info["op"] == PROBE_OP:
            probes = runs[PROBE_OP]
            info = {**info, "probe_runs": len(probes),
                    "probe_gbs": [round(info["bytes"] / float(b.stats.median) / 1e9, 2) for b in probes]}
        median = float(bench.stats.median)
        kernel = "-" if host else info.get("kernel") or (bench.group or "").split(" ")[0]
        nbytes = info.get("bytes")
        rows.append({"section": _section(bench.group), "kernel": kernel, "op": info["op"], "dtype": info["dtype"],
                     "shape": info.get("shape"), "group": bench.group, "test": bench.fullname,
                     "median_ms": median * 1e3, "min_ms": float(bench.stats.min) * 1e3,
                     "rounds": int(bench.stats.rounds), "bytes": None if nbytes is None else int(nbytes),
                     "gbs": None if nbytes is None else nbytes / median / 1e9, "timed": info.get("timed"),
                     "info": {k: v for k, v in info.items() if k not in ("op", "dtype", "shape", "bytes", "timed")}})
    probe = next((r["gbs"] for r in rows if r["op"] == PROBE_OP), None)
    probe1 = next((r["gbs"] for r in rows if r["op"] == PROBE1_OP), None)
    repeat_s = next((r["median_ms"] / 1e3 / r["info"]["repeats"] for r in rows if r["op"] == PASS_OP), None)
    main = [r for r in rows if r["section"] == "main"]
    torch_ms = {r["group"]: r["median_ms"] for r in main if r["op"].startswith(TORCH_OP)}
    torch_paired = {r["group"]: r["info"]["paired_speedup"] for r in main
                    if r["op"].startswith(TORCH_OP) and "paired_speedup" in r["info"]}
    numpy_ms = {r["group"]: r["median_ms"] for r in main if r["op"].startswith(NUMPY_OP)}
    untiled_ms = {r["group"]: r["median_ms"] for r in main if r["op"] == UNTILED_OP}
    checked_ms = {r["group"]: r["median_ms"] for r in main if r["op"] == CHECKED_OP}
    for r in rows:
        main_row = r["section"] == "main" and r["op"] not in HOST_OPS
        r["pct_of_probe"] = 100.0 * r["gbs"] / probe if probe and r["gbs"] is not None and r["op"] != PASS_OP \
            else None
        t, n = (torch_ms.get(r["group"]), numpy_ms.get(r["group"])) if main_row else (None, None)
        r["speedup_vs_torch"] = t / r["median_ms"] if t else None
        r["paired_vs_torch"] = torch_paired.get(r["group"]) if main_row and r["op"] == FAST_OP else None
        r["speedup_vs_numpy"] = n / r["median_ms"] if n else None
        u = untiled_ms.get(r["group"]) if main_row and r["op"] != UNTILED_OP else None
        r["speedup_vs_untiled"] = u / r["median_ms"] if u else None
        c = checked_ms.get(r["group"]) if main_row and r["op"] == FAST_OP else None
        r["checked_over_fast"] = c / r["median_ms"] if c else None
        gm, ub = r["info"].get("gm_bytes"), r["info"].get("ub_bytes")
        own = main_row and gm is not None and bool(r["bytes"])
        r["gm_over_op"] = gm / r["bytes"] if own else None
        r["ub_over_op"] = ub / r["bytes"] if own and ub is not None else None
        r["gm_pct_of_probe"] = 100.0 * gm / (r["median_ms"] / 1e3) / 1e9 / probe if own and probe else None
        floor = _floor_s(gm, ub, repeat_s, probe, probe1) if own and r["op"] == FAST_OP else None
        r["floor_ms"] = None if floor is None else floor * 1e3
        r["floor_pct"] = None if floor is None else 100.0 * r["bytes"] / floor / 1e9 / probe
        r["of_floor"] = None if floor is None else floor * 1e3 / r["median_ms"]
        if r["section"] == "small":
            r["median_us"] = r["median_ms"] * 1e3
        if r["section"] == "scaling":
            n = r["info"].get("elements")
            r["elements"], r["ns_per_element"] = n, r["median_ms"] * 1e6 / n if n else None

    def order(op: str) -> int:
        return (0 if op == FAST_OP else 1 if op == CHECKED_OP else 2 if op == UNTILED_OP
                else 3 if op.startswith(NUMPY_OP) else 4 if op.startswith(TORCH_OP) else 9)

    rows.sort(key=lambda r: (r["op"] in HOST_OPS, r["op"] == PROBE_OP, r["kernel"], r["dtype"],
                             r["info"].get("elements", 0), list(r["shape"] or []), order(r["op"]), r["op"]))
    return rows


def _floor_s(gm_bytes: int, ub_bytes: int | None, repeat_s: float | None, probe_gbs: float | None,
             probe1_gbs: float | None) -> float | None:
    """The least time an emulation of the kernel, instruction by instruction, can take on this host. A host thread
    runs its cores' copies and their instructions one after the other, so with the work split evenly over the
    threads each takes its share of the vector repeats at the cheapest pass's cost plus its share of the GM bytes
    at one thread's bandwidth (``probe1_gbs``), the other threads computing meanwhile; and all of them together
    move the GM bytes no faster than the probe. Optimistic on purpose: every repeat as cheap as a Muls in L1."""
    if ub_bytes is None or repeat_s is None or not probe_gbs or not probe1_gbs:
        return None
    per_thread = (ub_bytes / REPEAT_BYTES * repeat_s + gm_bytes / (probe1_gbs * 1e9)) / numba.config.NUMBA_NUM_THREADS
    return max(per_thread, gm_bytes / (probe_gbs * 1e9))


def _fmt(v: float | None, spec: str, unit: str = "") -> str:
    return "-" if v is None else format(v, spec) + unit


def _shape(shape: Any) -> str:
    return "-" if not shape else "x".join(str(s) for s in shape)


def _warm(r: dict[str, Any]) -> dict[str, float | None]:
    """The warm start's figures in seconds: the whole subprocess (the benchmark's median), and the medians the
    subprocess measured itself: process start to result, interpreter start to result, import, first call."""
    info = r["info"]
    return {"process_s": r["median_ms"] / 1e3, "to_result_s": info.get("to_result_s"),
            "after_start_s": info.get("after_start_s"), "import_s": info.get("import_s"),
            "first_call_s": info.get("first_call_s")}


def _targets(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The speed targets, one entry per (subject, target) that has its figures: the bandwidth share, the speedup
    over torch and checked/fast of each fast tilesim row; each small call; the warm start."""
    out = []

    def add(subject: str, target: str, value: float | None, limit: float, ok: bool | None, shown: str,
            limit_shown: str, beyond_floor: bool = False) -> None:
        if value is not None:
            out.append({"subject": subject, "target": target, "value": value, "limit": limit, "pass": ok,
                        "shown": shown, "limit_shown": limit_shown, "beyond_floor": beyond_floor})

    for r in rows:
        if r["section"] != "main" or r["op"] != FAST_OP:
            continue
        subject = f"{r['kernel']} {r['dtype']} {_shape(r['shape'])}"
        need = NORM_PCT.get(r["dtype"]) if r["kernel"] in NORMS else OTHER_PCT
        pct = r["pct_of_probe"]
        if need is not None and pct is not None:
            floor = r.get("floor_pct")
            beyond = floor is not None and floor < need
            add(subject, "% of probe", pct, need, pct >= need, f"{pct:.1f}%",
                f">= {need:.0f}%" + ("" if floor is None else f"  (floor {floor:.1f}%{' < target' * beyond})"), beyond)
        vt, paired = r["speedup_vs_torch"], r["paired_vs_torch"]
        if paired is not None:  # the figure this VM's drift does not move: see bench.record.pair_with_fast
            add(subject, "vs torch, paired", paired, 1.0, paired > 1.0, f"{paired:.2f}x", "> 1x")
        elif vt is not None:
            add(subject, "vs torch", vt, 1.0, vt > 1.0, f"{vt:.2f}x", "> 1x")
        cf = r["checked_over_fast"]
        if cf is not None:
            add(subject, "checked/fast", cf, CHECKED_MAX, cf <= CHECKED_MAX, f"{cf:.2f}", f"<= {CHECKED_MAX:g}")
    for r in rows:
        if r["section"] == "small":
            us = r["median_ms"] * 1e3
            add(f"{r['kernel']} {r['dtype']} {_shape(r['shape'])}", "small call", us, SMALL_MAX_US,
                us < SMALL_MAX_US, f"{us:.0f} µs", f"< {SMALL_MAX_US:.0f} µs")
    for r in rows:
        if r["section"] == "startup":
            s = _warm(r)["to_result_s"]
            add(r["op"], "start to result", s, WARM_MAX_S, s is not None and s < WARM_MAX_S, f"{s:.2f} s",
                f"< {WARM_MAX_S:g} s")
    for r in rows:
        if r["section"] == "explore":
            info, subject = r["info"], f"{r['op']} {r['dtype']} {_shape(r['shape'])}"
            x = info["worst_extra"]
            add(subject, "extra/fast, worst candidate", x, EXTRA_MAX, x <= EXTRA_MAX, f"{x:.2f}x",
                f"<= {EXTRA_MAX:g}x")
            if (r["kernel"], r["dtype"], r["shape"]) == SWEEP_CASE:
                s = info["sweep_s"]
                add(subject, "sweep", s, SWEEP_MAX_S, s < SWEEP_MAX_S, f"{s:.1f} s", f"< {SWEEP_MAX_S:g} s")
    return out


def _main_table(tr: Any, rows: list[dict[str, Any]]) -> None:
    kw = max(len("kernel"), *(len(r["kernel"]) for r in rows))
    sw = max(len("shape"), *(len(_shape(r["shape"])) for r in rows))
    head = (f"{'kernel':<{kw}} {'shape':<{sw}} {'op':<16} {'dtype':<6} {'median ms':>10} {'GB/s':>7} {'% probe':>8} "
            f"{'vs torch':>9} {'paired':>7} {'vs numpy':>9} {'vs untiled':>10} {'checked/fast':>12} {'GM/op':>6} "
            f"{'GM % probe':>10} {'UB/op':>6} {'floor %':>8} {'of floor':>8}")
    tr.write_line(head)
    tr.write_line("-" * len(head))
    for r in rows:
        pct = _fmt(r["pct_of_probe"], ".1f", "%")
        vt, vn = _fmt(r["speedup_vs_torch"], ".2f", "x"), _fmt(r["speedup_vs_numpy"], ".2f", "x")
        vp = _fmt(r["paired_vs_torch"], ".2f", "x")
        vu, cf = _fmt(r["speedup_vs_untiled"], ".2f", "x"), _fmt(r["checked_over_fast"], ".2f", "x")
        gm, gp, ub = (_fmt(r["gm_over_op"], ".2f", "x"), _fmt(r["gm_pct_of_probe"], ".1f", "%"),
                      _fmt(r["ub_over_op"], ".1f", "x"))
        fp, of = _fmt(r.get("floor_pct"), ".1f", "%"), _fmt(r.get("of_floor"), ".2f")
        tr.write_line(f"{r['kernel']:<{kw}} {_shape(r['shape']):<{sw}} {r['op']:<16} {r['dtype']:<6} "
                      f"{r['median_ms']:>10.2f} {_fmt(r['gbs'], '.2f'):>7} {pct:>8} {vt:>9} {vp:>7} {vn:>9} {vu:>10} "
                      f"{cf:>12} {gm:>6} {gp:>10} {ub:>6} {fp:>8} {of:>8}")
    tr.write_line("GB/s = bytes the op must move (each input read once, each output written once; see each bench's "
                  "op_bytes) / median; probe = triad, 2 reads + 1 write; vs torch / vs numpy = that baseline's "
                  "median / this median, same kernel, dtype and shape (> 1: faster); paired = torch's time / this "
                  "time, the median over rounds of one call of each back to back (bench.record.pair_with_fast: what "
                  "the target is judged on, since the two medians are minutes apart); vs untiled = the hand-written "
                  "fused Numba kernel's median / this median (bench/untiled.py); checked/fast = median with "
                  "checks=True / median with checks=False, same call; GM/op = the GM bytes the emulated kernel "
                  "moved (MTE2 reads + MTE3 writes, atomic adds included, from its counters) / the bytes the op must "
                  "move; GM % probe = those kernel bytes / median, as a share of the probe; UB/op = the UB bytes its "
                  "vector instructions covered (256 B a repeat) / the bytes the op must move; floor % = the share of "
                  "the probe this kernel could reach here at best when emulated instruction by instruction: on each "
                  f"of {numba.config.NUMBA_NUM_THREADS} threads its share of the repeats at the vector pass's cost "
                  "(the cheapest: Muls in L1) plus its share of the GM bytes at the one-thread probe's speed, and no "
                  "faster than the probe; of floor = that least time / the median (1.00: at the floor); vector "
                  "pass GB/s = the UB it covers a second")
    runs = next((r["info"]["probe_gbs"] for r in rows if r["op"] == PROBE_OP and r["info"].get("probe_runs", 0) > 1),
                None)
    if runs:
        tr.write_line(f"probe: the fastest of its {len(runs)} runs (one per bench file), GB/s in the order they ran: "
                      f"{', '.join(f'{g:.1f}' for g in runs)}")


def _small_table(tr: Any, rows: list[dict[str, Any]]) -> None:
    tr.write_sep("-", f"small calls (tiny inputs, checks off, preallocated out; target < {SMALL_MAX_US:.0f} µs)")
    kw = max(len("kernel"), *(len(r["kernel"]) for r in rows))
    sw = max(len("shape"), *(len(_shape(r["shape"])) for r in rows))
    head = f"{'kernel':<{kw}} {'shape':<{sw}} {'dtype':<6} {'median µs':>10} {'min µs':>9} {'rounds':>7} {'target':>7}"
    tr.write_line(head)
    tr.write_line("-" * len(head))
    for r in rows:
        us = r["median_ms"] * 1e3
        tr.write_line(f"{r['kernel']:<{kw}} {_shape(r['shape']):<{sw}} {r['dtype']:<6} {us:>10.1f} "
                      f"{r['min_ms'] * 1e3:>9.1f} {r['rounds']:>7} {'PASS' if us < SMALL_MAX_US else 'FAIL':>7}")
    tr.write_line(f"min µs = the fastest round; Numba: {numba.config.NUMBA_NUM_THREADS} threads, threading layer "
                  f"{_threading_layer()}")


def _scaling_table(tr: Any, rows: list[dict[str, Any]]) -> None:
    kernels = sorted({f"{r['kernel']} {r['dtype']}" for r in rows})
    tr.write_sep("-", f"scaling ({', '.join(kernels)}, tilesim, checks off)")
    sw = max(len("shape"), *(len(_shape(r["shape"])) for r in rows))
    head = (f"{'elements':>12} {'shape':<{sw}} {'median ms':>10} {'ns/element':>11} {'vs largest':>10} {'GB/s':>7} "
            f"{'% probe':>8} {'rounds':>7}")
    tr.write_line(head)
    tr.write_line("-" * len(head))
    largest = max(rows, key=lambda r: r["elements"] or 0)["ns_per_element"]
    for r in rows:
        n, ns = r["elements"], r["ns_per_element"]
        rel = ns / largest if ns is not None and largest else None
        pct = _fmt(r["pct_of_probe"], ".1f", "%")
        tr.write_line(f"{_fmt(n, ',d'):>12} {_shape(r['shape']):<{sw}} {r['median_ms']:>10.2f} {_fmt(ns, '.3f'):>11} "
                      f"{_fmt(rel, '.2f', 'x'):>10} {_fmt(r['gbs'], '.2f'):>7} {pct:>8} {r['rounds']:>7}")
    tr.write_line("vs largest = ns/element / the largest size's: 1.00x at every size is linear scaling; above it at "
                  "the small end, the call's fixed cost")


def _startup_lines(tr: Any, rows: list[dict[str, Any]]) -> None:
    tr.write_sep("-", f"startup (target: process start to first result < {WARM_MAX_S:g} s)")
    for r in rows:
        w = _warm(r)
        after, to_result = w["after_start_s"], w["to_result_s"]
        interp = to_result - after if to_result is not None and after is not None else None
        tr.write_line(f"{r['op']}: {r['info'].get('what', '')}; median of {r['rounds']} runs")
        tr.write_line(f"  process start to result {_fmt(to_result, '.3f', ' s')} = interpreter start "
                      f"{_fmt(interp, '.3f', ' s')} + after it {_fmt(after, '.3f', ' s')} (import "
                      f"{_fmt(w['import_s'], '.3f', ' s')}, first call {_fmt(w['first_call_s'], '.3f', ' s')}); "
                      f"whole subprocess {w['process_s']:.3f} s")


def _targets_lines(tr: Any, targets: list[dict[str, Any]]) -> None:
    tr.write_sep("-", "targets (speed; the explorer)")
    sw = max(len(t["subject"]) for t in targets)
    tw = max(len(t["target"]) for t in targets)
    for t in targets:
        tr.write_line(f"{'PASS' if t['pass'] else 'FAIL'}  {t['subject']:<{sw}}  {t['target']:<{tw}}  "
                      f"{t['shown']:>10}  {t['limit_shown']}")
    passed = sum(1 for t in targets if t["pass"])
    tr.write_line(f"{passed} of {len(targets)} pass")
    beyond = sum(1 for t in targets if t["beyond_floor"])
    if beyond:
        tr.write_line(f"{beyond} share targets lie above their floor: no emulation that runs the kernel's "
                      "instructions one by one reaches them on this host")


def _explore_table(tr: Any, rows: list[dict[str, Any]]) -> None:
    tr.write_sep("-", f"explore (Ascend910B1; target: extra/fast <= {EXTRA_MAX:g}x per candidate)")
    cw = max(len("case"), *(len(f"{r['kernel']} {_shape(r['shape'])} {r['dtype']}") for r in rows))
    head = (f"{'case':<{cw}} {'tilings':>7} {'sweep s':>8} {'fast s':>7} {'estimate s':>10} {'judge s':>8} "
            f"{'rest s':>7} {'median extra':>12} {'worst extra':>11}  worst candidate")
    tr.write_line(head)
    tr.write_line("-" * len(head))
    for r in rows:
        i = r["info"]
        case = f"{r['kernel']} {_shape(r['shape'])} {r['dtype']}"
        params = " ".join(f"{k}={v}" for k, v in i["worst_params"].items())
        tr.write_line(f"{case:<{cw}} {i['candidates']:>7} {i['sweep_s']:>8.1f} {i['fast_s']:>7.2f} "
                      f"{i['estimate_s']:>10.2f} {i['judge_s']:>8.2f} {i['rest_s']:>7.2f} "
                      f"{i['median_extra']:>11.2f}x {i['worst_extra']:>10.2f}x  {i['worst_cand']}: {params}")
    tr.write_line("fast / estimate / judge s = the sweep's fast runs, runs that schedule themselves on the cost model "
                  "and judging of outputs, summed; rest = the sweep's other time (inputs, goldens and rounding bounds, "
                  "candidates, ranking); extra = a candidate's (estimate + judge) / its fast run: median of the "
                  "sweep's single measurements; worst, where a single one was above 2x, the median of "
                  "rounds that pair the two (bench/test_bench_explore.py)")


def _threading_layer() -> str | None:
    """The Numba threading layer the parallel kernels ran on (None before any parallel launch)."""
    try:
        return numba.threading_layer()
    except ValueError:
        return None


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: Any) -> None:
    rows = _rows(config)
    if not rows:
        return
    tr = terminalreporter
    tr.write_sep("=", "bench summary")
    by = {s: [r for r in rows if r["section"] == s] for s in ("main", "small", "scaling", "startup", "explore")}
    if by["main"]:
        _main_table(tr, by["main"])
    if by["small"]:
        _small_table(tr, by["small"])
    if by["scaling"]:
        _scaling_table(tr, by["scaling"])
    if by["startup"]:
        _startup_lines(tr, by["startup"])
    if by["explore"]:
        _explore_table(tr, by["explore"])
    targets = _targets(rows)
    if targets:
        _targets_lines(tr, targets)
    for r in by["startup"]:
        r.update(_warm(r))
    payload = {"host": {"machine": platform.machine(), "cpus": os.cpu_count(), "python": platform.python_version(),
                        "numba_threads": numba.config.NUMBA_NUM_THREADS,
                        "threading_layer": _threading_layer()},
               "rows": by["main"], "small_calls": by["small"], "scaling": by["scaling"], "startup": by["startup"],
               "explore": by["explore"], "targets": targets}
    RESULTS.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    tr.write_line(f"written to {RESULTS}")
