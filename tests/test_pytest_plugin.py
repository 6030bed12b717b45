"""The pytest plugin (``tilesim.tools.pytest_plugin``, registered by the package's ``pytest11`` entry point): a user's
test session run with ``--tilesim-checks`` launches every kernel, shipped or the user's own, in checked mode and
leaves the flag as it found it; the ``ascend_close`` fixture passes close outputs and fails wrong ones with MERE,
MARE and the thresholds.

The user's sessions run in-process (``pytester.runpytest_inprocess``), so the kernels compile once for the whole test
run. pytester drops every module a session imported when it ends, and Numba imports some of its own lazily while it
compiles or loads a kernel: re-imported, they fail ("duplicate registration"). So the kernels' modules are imported
here, and the kernels the sessions launch are compiled here first (:func:`compiled`), in both modes."""

from __future__ import annotations

from collections.abc import Iterator

import ml_dtypes
import numpy as np
import pytest
import tilesim.kernels as kernels

from examples.add_tail import add_tail
from tilesim import options

pytest_plugins = ["pytester"]

HEADER = "tilesim: checked mode forced on every kernel launch*"

USER_TESTS = """
import numpy as np
import tilesim.kernels as kernels
import tilesim
from examples.add_tail import add_tail

FORCED = {forced}


def test_shipped_op(tilesim_checks):
    rng = np.random.default_rng(0)
    x, dy = rng.uniform(-2, 2, (2, 8, 33)).astype(np.float32)
    gamma = rng.uniform(-1, 1, 33).astype(np.float32)
    rstd = (1 / np.sqrt((x * x).mean(-1) + 1e-6)).astype(np.float32)
    with tilesim.capture() as runs:
        kernels.rms_norm_grad(dy, x, rstd, gamma, checks=False)
    assert runs and [r.checks for r in runs] == [FORCED] * len(runs)
    assert tilesim_checks is FORCED


def test_own_kernel(ascend_close):
    x, y = np.random.default_rng(1).uniform(-2, 2, (2, 1001)).astype(np.float32)
    with tilesim.capture() as runs:
        z = add_tail(x, y)
    assert [r.checks for r in runs] == [FORCED]
    ascend_close(z, (x.astype(np.float64) + y) * 0.5, what="z")
"""

CLOSE_TESTS = """
import ml_dtypes
import numpy as np

GOLDEN = np.linspace(-2, 2, 1000) ** 3


def test_close(ascend_close):
    p = ascend_close(GOLDEN.astype(np.float32), GOLDEN)
    assert p.ok and p.dtype == "float32"
    ps = ascend_close((GOLDEN.astype(ml_dtypes.bfloat16), GOLDEN.astype(np.float16)), (GOLDEN, GOLDEN),
                      what=("dx", "dgamma"))
    assert [q.dtype for q in ps] == ["bfloat16", "float16"]


def test_wrong(ascend_close):
    wrong = GOLDEN.astype(np.float32)
    wrong[123] += 0.5
    ascend_close((GOLDEN.astype(np.float32), wrong), (GOLDEN, GOLDEN), what=("dx", "dgamma"))
"""


@pytest.fixture(scope="module")
def compiled() -> None:
    """The kernels the user's sessions launch, compiled (or loaded from the cache) in both modes outside them."""
    x = np.ones((8, 33), np.float32)
    for checks in (False, True):
        kernels.rms_norm_grad(x, x, np.ones(8, np.float32), x[0], checks=checks)
        add_tail(x, x, checks=checks)


@pytest.fixture
def unforced(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Checked mode not forced while the user's session starts (this suite may itself run with --tilesim-checks),
    and no --tilesim-checks reaching it from the environment."""
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)
    was = options.set_defaults(force_checks=False).force_checks
    yield
    options.set_defaults(force_checks=was)


@pytest.mark.parametrize("how", ["off", "option", "ini"])
def test_sessions_run_every_kernel_checked_when_asked(pytester: pytest.Pytester, compiled: None, unforced: None,
                                                      how: str) -> None:
    forced = how != "off"
    pytester.makepyfile(test_user=USER_TESTS.format(forced=forced))
    if how == "ini":
        pytester.makeini("[pytest]\ntilesim_checks = true\n")
    result = pytester.runpytest_inprocess(*(["--tilesim-checks"] if how == "option" else []))
    result.assert_outcomes(passed=2)
    if forced:
        result.stdout.fnmatch_lines([HEADER])
    else:
        result.stdout.no_fnmatch_line(HEADER)
    assert not options.current().force_checks  # the session turned it off again at its end


def test_ascend_close_passes_close_outputs_and_names_the_wrong_one(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_close=CLOSE_TESTS)
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([
        "*not close under Ascend's precision standard (MERE < T and MARE < 10 T):",
        "*dgamma float32 [[]1000[]]: FAIL (float32): MERE * (< 0.000122), MARE * (< 0.00122)*",
        "*largest error at [[]123[]]: actual *, golden *",
    ])
    result.stdout.no_fnmatch_line("*dx float32*")  # the close one is not reported


def test_ascend_close_refuses_mismatched_outputs(ascend_close) -> None:
    g = np.ones(8)
    with pytest.raises(AssertionError, match=r"out: shape \[8\] but the golden's is \[4\]"):
        ascend_close(g.astype(np.float32), g[:4], what="out")
    with pytest.raises(ValueError, match="2 outputs but 1 golden$"):
        ascend_close((g, g), (g,))
    with pytest.raises(ValueError, match="3 names for 2 outputs"):
        ascend_close((g, g), (g, g), what=("a", "b", "c"))
    nan = g.astype(ml_dtypes.bfloat16)
    nan[5] = np.nan
    with pytest.raises(AssertionError, match=r"largest error at \[5\]: actual nan"):
        ascend_close(nan, g)
