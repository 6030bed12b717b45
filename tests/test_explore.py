"""The tiling explorer and the ``tilesim`` command: on every shipped op every candidate verifies and the official
tiling is among the ranked rows; the report files are well formed; several SoCs give rows per SoC; local worker
processes and a Dask LocalCluster give the same table as one process; a failing candidate is a loud row, not a
crash; ``explore``, ``trace`` and ``ops`` work from the command line, for a user's own kernel too.
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

from kernels.ops import OPS
from tilesim.cli import main
from tilesim.explore import ExploreResult, explore

matplotlib.use("Agg")

ROOT = Path(__file__).resolve().parents[1]
SOC = "Ascend910B1"
# Small shapes with tails, one dtype each (tests/test_explore_ops.py runs every dtype's candidates)
CASES = {
    "rms_norm_grad": ((50, 200), "bf16"),
    "group_norm_backward": ((3, 64, 36), "fp32"),
    "swiglu_grad": ((26, 200), "fp16"),
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
    """The rows without the CPU wall time (the one measured figure)."""
    return [{k: v for k, v in r.items() if k != "wall_ms"} for r in result.rows]


@pytest.mark.parametrize("op", sorted(CASES))
def test_explorer_finds_only_verified_tilings_with_the_official_one_ranked(swept, op: str) -> None:
    r = sweep(swept, op)
    spec = OPS[op]
    shape, dtype = CASES[op]
    cands = spec.candidates(spec.make_inputs(shape, dtype, 0), r.socs[0])
    assert r.ok, r.table()
    assert len(r.rows) == len(cands) and sorted(x["cand"] for x in r.rows) == list(range(len(cands)))
    assert all(x["verified"] and x["est_us"] > 0 and "error" not in x for x in r.rows)
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
    assert "official" in table and "best" in table and "NOT verify" not in table


def test_report_files_are_well_formed(swept, tmp_path: Path) -> None:
    r = sweep(swept, "rms_norm_grad")
    csv_path, json_path, png_path = r.write(tmp_path / "out")
    with csv_path.open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(r.rows) and rows[0]["rank"] == "1"
    assert {"soc", "cand", "est_us", "verified", "official", "best", *r.param_keys} <= set(rows[0])
    doc = json.loads(json_path.read_text())
    assert doc["op"] == "rms_norm_grad" and doc["ok"] and len(doc["rows"]) == len(r.rows)
    assert doc["summary"][SOC]["official"]["official"]
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
    """One candidate raises, one returns wrong numbers: both are unverified rows, after every verified one, and
    the table says so."""
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
    assert [x["cand"] for x in r.rows[-2:]] == [2, 1]  # unverified with an estimate, then the one that raised
    failed = {x["cand"]: x for x in r.failures}
    assert failed[1]["error"] == "RuntimeError: boom" and failed[1].get("est_us") is None
    assert failed[2]["est_us"] > 0 and failed[2]["mere"] > 0.1 and not failed[2]["best"]
    table = r.table()
    assert "!! 2 of" in table and "did NOT verify" in table and "FAIL" in table and "boom" in table


def test_cli_explore_writes_the_report(tmp_path: Path, capsys) -> None:
    out = tmp_path / "x"
    assert main(["explore", "swiglu_grad", "--shape", "26,200", "--dtype", "fp16", "--out", str(out), "--quiet",
                 "--top", "3"]) == 0
    text = capsys.readouterr().out
    assert "swiglu_grad [26, 200] fp16 on Ascend910B1: all" in text and "official" in text
    assert (out / "explore.png").read_bytes()[:8] == PNG
    assert json.loads((out / "explore.json").read_text())["dtype"] == "fp16"


def test_cli_explores_a_users_kernel_in_worker_processes(tmp_path: Path, capsys) -> None:
    """examples/add_tail.py, a kernel written with tilesim's primitives, found with --ops in each worker."""
    assert main(["explore", "add_tail", "--ops", "examples.add_tail", "--shape", "999", "--dtype", "bf16",
                 "--workers", "2", "--out", str(tmp_path), "--quiet"]) == 0
    assert "add_tail [999] bf16 on Ascend910B1: all" in capsys.readouterr().out


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
])
def test_cli_bad_arguments_are_usage_errors(argv: list[str], message: str, capsys) -> None:
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_python_dash_m_tilesim_runs_the_command() -> None:
    done = subprocess.run([sys.executable, "-m", "tilesim", "ops"], cwd=ROOT, capture_output=True, text=True,
                          check=True)
    assert "rms_norm_grad" in done.stdout


def test_tile_sizes_read_as_element_counts() -> None:
    from tilesim.explore import tile_elements

    assert tile_elements("5x1024") == 5120 and tile_elements(64) == 64 and tile_elements("-") is None
