"""The tiling explorer and the ``tilesim`` command: on every shipped op every candidate passes and the official
tiling is among the ranked rows; the report files are well formed; several SoCs give rows per SoC; local worker
processes, a Dask LocalCluster and a sweep in reverse order give the same rows as one process; verdicts tell a
tiling less precise than the standard (with its fp32 sum length against the official tiling's) from a wrong one
and from one that raised; ``explore``, ``trace`` and ``ops`` work from the command line, for a user's own kernel
too.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import matplotlib
import pytest
from tilesim.kernels.op_specs import OPS

from tilesim.tools.cli import main
from tilesim.tools.explore import TIMINGS, VERDICTS, ExploreResult, explore

matplotlib.use("Agg")

ROOT = Path(__file__).resolve().parents[1]
SOC = "Ascend910B1"
# Small shapes with tails, one dtype each (tests/test_explore_ops.py runs every dtype's candidates). A sweep records
# its launches, in the checked build, compiled per kernel and dtype: softmax's is fp32, as test_races.py's is.
CASES = {
    "rms_norm_grad": ((50, 200), "bf16"),
    "group_norm_backward": ((3, 64, 36), "fp32"),
    "swiglu_grad": ((26, 200), "fp16"),
    "swiglu": ((26, 200), "bf16"),
    "rms_norm": ((26, 200), "bf16"),
    "softmax": ((50, 100), "fp32"),
    "layer_norm_grad": ((50, 200), "fp32"),
    "nsa_compress_grad": ((256, 4, 32), "bf16"),
}
PNG = b"\x89PNG\r\n\x1a\n"


def test_every_shipped_op_has_a_case() -> None:
    assert set(CASES) == set(OPS)


@pytest.fixture(scope="module")
def swept() -> dict[str, ExploreResult]:
    """Each op's sweep, run once for the module."""
    return {}


def sweep(swept: dict[str, ExploreResult], op: str) -> ExploreResult:
    if op not in swept:
        shape, dtype = CASES[op]
        swept[op] = explore(OPS[op], shape, dtype, [SOC], progress=False)
    return swept[op]


def stable(result: ExploreResult) -> list[dict]:
    """The rows without their CPU times (the measured figures)."""
    return [{k: v for k, v in r.items() if k not in TIMINGS} for r in result.rows]


@pytest.mark.parametrize("op", sorted(CASES))
def test_explorer_finds_only_passing_tilings_with_the_official_one_ranked(swept, op: str) -> None:
    r = sweep(swept, op)
    spec = OPS[op]
    shape, dtype = CASES[op]
    cands = spec.candidates(spec.make_inputs(shape, dtype, 0), r.socs[0])
    assert r.ok, r.table()
    assert len(r.rows) == len(cands) and sorted(x["cand"] for x in r.rows) == list(range(len(cands)))
    assert all(x["verdict"] == "pass" and x["est_us"] > 0 and x["reason"] == "" for x in r.rows)
    assert all(x["wall_ms"] > 0 and x["estimate_ms"] > 0 and x["judge_ms"] > 0 for x in r.rows)
    assert all(0 <= x["err_vs_bound"] < 1 for x in r.rows)  # every shipped op has rounding bounds
    official = [x for x in r.rows if x["official"]]
    assert len(official) == 1
    assert {k: official[0][k] for k in r.param_keys} == next(c.params for c in cands if c.official)
    assert [x["rank"] for x in r.rows] == list(range(1, len(r.rows) + 1))
    est = [x["est_us"] for x in r.rows]
    assert est == sorted(est)
    assert r.rows[0]["best"] and sum(x["best"] for x in r.rows) == 1
    assert official[0]["vs_best"] >= 1.0
    assert all(len(x["core_us"]) == x["block_dim"] for x in r.rows)
    table = r.table()
    assert "official" in table and "best" in table and f"{len(r.rows)} tilings: {len(r.rows)} pass" in table
    assert "WRONG" not in table.split("verdict:")[0] and "imprecise" not in table.split("verdict:")[0]


def test_report_files_are_well_formed(swept, tmp_path: Path) -> None:
    r = sweep(swept, "rms_norm_grad")
    csv_path, json_path, png_path = r.write(tmp_path / "out")
    with csv_path.open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(r.rows) and rows[0]["rank"] == "1"
    assert {"soc", "cand", "est_us", "verdict", "reason", "err_vs_bound", "official", "best", *r.param_keys,
            *TIMINGS} <= set(rows[0])
    doc = json.loads(json_path.read_text())
    assert doc["op"] == "rms_norm_grad" and doc["ok"] and len(doc["rows"]) == len(r.rows)
    assert doc["summary"][SOC]["official"]["official"]
    assert doc["summary"][SOC]["verdicts"] == {"pass": len(r.rows), "imprecise": 0, "wrong": 0, "error": 0}
    assert png_path.read_bytes()[:8] == PNG


def test_several_socs_give_rows_per_soc_side_by_side() -> None:
    socs = ["Ascend910B1", "Ascend310P3"]
    r = explore(OPS["rms_norm_grad"], (50, 200), "fp32", socs, progress=False)
    assert r.socs == socs and r.ok
    assert [x["soc"] for x in r.rows] == sorted((x["soc"] for x in r.rows), key=socs.index)
    for soc in socs:
        rows = r.of(soc)
        assert rows and r.best(soc) is rows[0] and r.official(soc) is not None
        assert max(x["block_dim"] for x in rows) <= (48 if soc == "Ascend910B1" else 8)
    side = r.side_by_side()
    assert all(soc in side for soc in socs)


def test_a_soc_without_the_op_is_reported_and_the_others_run() -> None:
    r = explore(OPS["nsa_compress_grad"], (256, 4, 32), "bf16", ["Ascend910B1", "Ascend310P3"], progress=False)
    assert not r.ok and "Ascend310P3" in r.soc_errors and r.of("Ascend910B1") and not r.of("Ascend310P3")
    assert "no tilings" in r.table()


def test_worker_processes_give_the_same_table(swept) -> None:
    shape, dtype = CASES["rms_norm_grad"]
    r = explore(OPS["rms_norm_grad"], shape, dtype, [SOC], workers=2, progress=False)
    local = sweep(swept, "rms_norm_grad")
    assert r.table(timings=False) == local.table(timings=False)
    assert stable(r) == stable(local)


def test_dask_local_cluster_gives_the_same_table(swept) -> None:
    from dask.distributed import LocalCluster

    shape, dtype = CASES["swiglu_grad"]
    with LocalCluster(n_workers=1, processes=True, threads_per_worker=1, dashboard_address=None) as cluster:
        r = explore(OPS["swiglu_grad"], shape, dtype, [SOC], scheduler=cluster.scheduler_address, progress=False)
    local = sweep(swept, "swiglu_grad")
    assert r.table(timings=False) == local.table(timings=False)
    assert stable(r) == stable(local)


def test_a_failing_candidate_is_a_loud_row_not_a_crash() -> None:
    """One candidate raises, one returns numbers twice too large: both are rows, ranked after every one that
    passes (wrong, then error), and the table says so."""
    spec = OPS["swiglu_grad"]
    cands = spec.candidates(spec.make_inputs((26, 200), "fp32", 0), SOC)
    boom, wrong = cands[1].tiling, cands[2].tiling

    def run(inputs, tiling, soc):
        if tiling == boom:
            raise RuntimeError("boom")
        out = spec.run(inputs, tiling, soc)
        return tuple(o * 2 for o in out) if tiling == wrong else out

    r = explore(dataclasses.replace(spec, run=run), (26, 200), "fp32", [SOC], progress=False)
    assert not r.ok and {x["cand"] for x in r.failures} == {1, 2}
    assert [x["cand"] for x in r.rows[-2:]] == [2, 1]  # wrong with an estimate, then the one that raised
    failed = {x["cand"]: x for x in r.failures}
    assert failed[1]["verdict"] == "error" and failed[1]["reason"] == "RuntimeError: boom"
    assert failed[1].get("est_us") is None
    assert failed[2]["verdict"] == "wrong" and failed[2]["est_us"] > 0 and not failed[2]["best"]
    assert failed[2]["err_vs_bound"] > 1e3 and "x the most fp32 rounding explains" in failed[2]["reason"]
    table = r.table()
    assert "1 WRONG, 1 ERROR" in table and "!! WRONG cand 2" in table and "!! ERROR cand 1" in table
    assert "boom" in table


def test_an_error_the_standard_lets_pass_but_no_rounding_explains_is_wrong() -> None:
    """dgamma (fp32, a sum of 50 rows) with one element off by 1e-4 of itself: well inside the standard's MARE
    (1.2e-3), far outside what fp32 rounding of 50 terms can do. The reason names the element and the values."""
    spec = OPS["rms_norm_grad"]
    shape, dtype = CASES["rms_norm_grad"]
    one = spec.candidates(spec.make_inputs(shape, dtype, 0), SOC)[3].tiling

    def run(inputs, tiling, soc):
        dx, dgamma = spec.run(inputs, tiling, soc)
        if tiling == one:
            dgamma[7] *= 1 + 1e-4
        return dx, dgamma

    r = explore(dataclasses.replace(spec, run=run), shape, dtype, [SOC], progress=False)
    bad = r.having("wrong")
    assert [x["cand"] for x in bad] == [3] and not r.ok and bad[0]["mare"] < 10 * bad[0]["threshold"]
    assert bad[0]["worst_output"] == "dgamma" and 1 < bad[0]["err_vs_bound"] < 1e3
    assert bad[0]["reason"].startswith("dgamma[7] = ") and "1 element outside the bound" in bad[0]["reason"]


@pytest.fixture(scope="module")
def imprecise() -> ExploreResult:
    """[4096, 32] bf16, seed 1: dgamma summed over 512 to 4096 rows per core misses the fp32 standard's MARE by
    1.4 to 3.9x; the official tiling (48 cores, 86 rows each) meets it."""
    return explore(OPS["rms_norm_grad"], (4096, 32), "bf16", [SOC], progress=False, seed=1)


def test_a_tiling_less_precise_than_the_standard_is_imprecise_with_its_sum_length(imprecise) -> None:
    r = imprecise
    rows = r.having("imprecise")
    assert r.ok and rows and not r.failures  # a finding, not a failure of the sweep
    assert {x["block_dim"] for x in rows} == {1, 2, 4, 8} and r.official(SOC)["verdict"] == "pass"
    for x in rows:
        per_core = -(-4096 // x["block_dim"])
        assert x["worst_output"] == "dgamma" and x["mare"] > 10 * x["threshold"] and x["err_vs_bound"] < 1
        assert x["reason"].endswith(f"fp32 sums of {per_core} rows per core, the official tiling's 86"), x["reason"]
    assert [VERDICTS.index(x["verdict"]) for x in r.rows] == sorted(VERDICTS.index(x["verdict"]) for x in r.rows)
    assert r.best(SOC)["verdict"] == "pass" and r.rows[0]["best"]
    table = r.table()
    assert f"{len(r.rows)} tilings: {len(r.rows) - len(rows)} pass, {len(rows)} imprecise" in table
    assert "~  imprecise cand" in table and "the official tiling's 86" in table


def test_a_sweep_gives_the_same_rows_in_any_order(imprecise) -> None:
    """The candidates in reverse order (a 1-core tiling with a long instruction stream now runs before the
    48-core ones): the same rows, ranks and best, once each is matched to its candidate."""
    spec = OPS["rms_norm_grad"]
    backwards = dataclasses.replace(spec, candidates=lambda inputs, soc: list(reversed(spec.candidates(inputs, soc))))
    r = explore(backwards, (4096, 32), "bf16", [SOC], progress=False, seed=1)

    def by_params(result: ExploreResult) -> dict:
        return {tuple(x[k] for k in result.param_keys): {k: v for k, v in x.items() if k not in (*TIMINGS, "cand")}
                for x in result.rows}

    assert len(r.rows) == len(imprecise.rows) and by_params(r) == by_params(imprecise)


def test_cli_explore_writes_the_report(tmp_path: Path, capsys) -> None:
    out = tmp_path / "x"
    assert main(["explore", "swiglu_grad", "--shape", "26,200", "--dtype", "fp16", "--out", str(out), "--quiet",
                 "--top", "3"]) == 0
    text = capsys.readouterr().out
    assert "swiglu_grad [26, 200] fp16 on Ascend910B1: 18 tilings: 18 pass" in text and "official" in text
    assert (out / "explore.png").read_bytes()[:8] == PNG
    assert json.loads((out / "explore.json").read_text())["dtype"] == "fp16"


def test_cli_explores_a_users_kernel_in_worker_processes(tmp_path: Path, capsys) -> None:
    """examples/add_tail.py, a kernel of a user's own on tilesim.machine, found with --ops in each worker."""
    assert main(["explore", "add_tail", "--ops", "examples.add_tail", "--shape", "999", "--dtype", "bf16",
                 "--workers", "2", "--out", str(tmp_path), "--quiet"]) == 0
    table = capsys.readouterr().out.split("verdict:")[0]
    assert "add_tail [999] bf16 on Ascend910B1: " in table and " pass" in table and "WRONG" not in table


def test_cli_trace_writes_a_chrome_trace(tmp_path: Path, capsys) -> None:
    path = tmp_path / "t.json"
    assert main(["trace", "rms_norm_grad", "--shape", "50,200", "--candidate", "1", "--out", str(path)]) == 0
    text = capsys.readouterr().out
    assert "candidate 1" in text and "estimated" in text and "dx: pass" in text
    events = json.loads(path.read_text())["traceEvents"]
    assert any(e.get("ph") == "X" for e in events)


def test_cli_ops_lists_every_op(capsys) -> None:
    assert main(["ops"]) == 0
    text = capsys.readouterr().out
    assert all(name in text for name in OPS)


def test_cli_unknown_op_names_the_known_ones(capsys) -> None:
    with pytest.raises(SystemExit) as e:
        main(["explore", "rms_norm_gard"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "unknown op 'rms_norm_gard'" in err and all(name in err for name in OPS)


@pytest.mark.parametrize("argv, message", [
    (["explore", "rms_norm_grad", "--shape", "256x1024"], "comma-separated"),
    (["explore", "layer_norm_grad", "--dtype", "bf16"], "fp32, fp16"),
    (["explore", "rms_norm_grad", "--soc", "Ascend999"], "unknown SoC"),
    (["trace", "rms_norm_grad", "--shape", "8,-1"], "sizes of 0 or more"),
    (["trace", "rms_norm_grad", "--soc", "Ascend999"], "unknown SoC"),
    (["trace", "swiglu", "--shape", "4,7"], "odd size 7"),
    # a shape of the wrong rank: the op's shape notation, not an unpacking error alone
    (["explore", "group_norm_backward", "--shape", "1,8,4,1"], "its shape: [N, C, HxW]"),
    (["trace", "nsa_compress_grad", "--shape", "1,1"], "its shape: input [T, N, D]"),
    (["ops", "--ops", "no_such_ops_module"], "cannot import the ops module no_such_ops_module"),
    (["explore", "swiglu", "--soc", ","], "--soc: name one SoC or more"),
])
def test_cli_bad_arguments_are_usage_errors(argv: list[str], message: str, capsys) -> None:
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and message in err and "Traceback" not in err


def test_cli_scheduler_without_dask_names_the_extra(monkeypatch, capsys) -> None:
    monkeypatch.setitem(sys.modules, "dask.distributed", None)  # what an environment without dask imports
    with pytest.raises(SystemExit) as e:
        main(["explore", "swiglu", "--scheduler", "tcp://127.0.0.1:8786", "--quiet"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and 'the dask extra (pip install "tilesim[dask]")' in err and "Traceback" not in err


def test_cli_explore_of_a_shape_no_tiling_takes_says_why(tmp_path: Path, capsys) -> None:
    """No SoC takes the inputs: a usage error with the op's reason, as trace gives it, and nothing written."""
    with pytest.raises(SystemExit) as e:
        main(["explore", "swiglu", "--shape", "4,7", "--soc", "Ascend910B1,Ascend310P3", "--quiet",
              "--out", str(tmp_path / "x")])
    err = capsys.readouterr().err
    assert e.value.code == 2
    assert "no tilings on Ascend910B1, Ascend310P3: AclnnError: [161002] x: shape [4, 7]" in err and "odd" in err
    assert not (tmp_path / "x").exists()


def test_cli_explore_names_why_a_soc_has_no_tilings(tmp_path: Path, capsys) -> None:
    """One SoC of two takes the inputs: its rows are written, and the other's reason is on stderr too."""
    assert main(["explore", "swiglu", "--shape", "4,8", "--dtype", "bf16", "--soc", "Ascend910B1,Ascend310P3",
                 "--quiet", "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "!! no tilings on Ascend310P3: AclnnError: [161002] x: dtype bfloat16 not supported on Ascend310P3" in err
    assert (tmp_path / "explore.json").is_file()


@pytest.mark.parametrize("command", ["explore", "trace"])
@pytest.mark.parametrize("where", ["under a file", "a directory", "an unwritable directory"])
def test_cli_unwritable_out_is_a_usage_error_before_any_run(command: str, where: str, tmp_path: Path, capsys,
                                                            monkeypatch) -> None:
    """An --out the command cannot write stops it at once, with a message and exit status 2: no sweep or run
    first, no traceback."""
    import tilesim.tools.cli as cli

    def no_run(*args, **kwargs):
        raise AssertionError("ran before checking --out")

    monkeypatch.setattr(cli, "explore", no_run)
    monkeypatch.setattr(cli, "make_inputs", no_run)
    (tmp_path / "file").write_text("")
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "explore.json").mkdir()  # explore writes explore.json there
    out = {"under a file": tmp_path / "file" / "x", "a directory": tmp_path / "dir",
           "an unwritable directory": Path("/proc/tilesim-test/x")}[where]
    if command == "trace" and where == "a directory":
        message = "Is a directory"
    elif where == "under a file":
        message = "is not a directory"
    else:
        message = "cannot write"
    with pytest.raises(SystemExit) as e:
        main([command, "swiglu", "--shape", "4,8", "--out", str(out)] + (["--quiet"] if command == "explore" else []))
    err = capsys.readouterr().err
    assert e.value.code == 2 and f"--out {out}" in err and message in err and "Traceback" not in err


@pytest.mark.no_launch_here  # a subprocess
def test_python_dash_m_tilesim_runs_the_command() -> None:
    done = subprocess.run([sys.executable, "-m", "tilesim", "ops"], cwd=ROOT, capture_output=True, text=True,
                          check=True)
    assert "rms_norm_grad" in done.stdout


def test_tile_sizes_read_as_element_counts() -> None:
    from tilesim.tools.explore import tile_elements

    assert tile_elements("5x1024") == 5120 and tile_elements(64) == 64 and tile_elements("-") is None
