"""The cost model's calibration table against measured NPU kernels (``bench/calibration.json``, written by
``python -m bench.calibrate``) is what the model gives now: a change to the cost model's figures or to a kernel's
instructions shows up as a changed table in review, and is committed with its new ratios."""

import json

import pytest

from bench.calibrate import CASES, JSON_PATH, calibrate, spearman, summary


@pytest.mark.checked_elsewhere  # softmax's and swiglu's checked runs are their own tests'
def test_the_committed_table_is_what_the_model_gives():
    committed = json.loads(JSON_PATH.read_text())
    now = calibrate()
    assert [r["case"] for r in now["rows"]] == [r["case"] for r in committed["rows"]]
    for row, was in zip(now["rows"], committed["rows"], strict=True):
        assert row == was, f"{row['op']} case {row['case']}: run `python -m bench.calibrate` and commit the table"
    assert now == committed


def test_every_case_is_in_the_table_once():
    keys = [(c.op, c.case) for c in CASES]
    assert len(keys) == len(set(keys)) == 34
    assert {c.op for c in CASES} == {"softmax", "swiglu"}


@pytest.mark.parametrize(("a", "b", "rho"), [
    ([1, 2, 3, 4], [10, 20, 30, 40], 1.0),
    ([1, 2, 3, 4], [4, 3, 2, 1], -1.0),
    ([1, 2, 2, 3], [1, 2, 3, 4], 0.9486832980505138),  # a tie takes its mean rank: ranks 1, 2.5, 2.5, 4
])
def test_spearman_is_pearson_of_the_ranks(a, b, rho):
    assert spearman(a, b) == pytest.approx(rho)


def test_summary_leaves_out_the_cases_not_run():
    rows = [{"est_us": 2.0, "measured_us": 1.0, "ratio": 2.0}, {"est_us": 1.0, "measured_us": 2.0, "ratio": 0.5},
            {"est_us": None, "measured_us": 3.0, "ratio": None}]
    s = summary(rows)
    assert (s["cases"], s["not_run"], s["geomean"], s["min"], s["max"]) == (2, 1, 1.0, 0.5, 2.0)
    assert s["spearman"] is None and s["within_0.75_1.33"] == 0
