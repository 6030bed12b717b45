"""The pytest plugin: run a user's tests with every kernel in checked mode, and judge outputs against untiled math.

Installing tilesim registers it (entry point ``pytest11``); pytest itself comes with the ``pytest`` extra
(``pip install "tilesim[pytest]"``: pytest alone) or the ``test`` extra (tilesim's own test suite's). Any project's
pytest then has:
- ``pytest --tilesim-checks`` (or ``tilesim_checks = true`` in the ini file): for the whole session the process's
  default options have :attr:`~tilesim.options.Options.force_checks` on (:func:`tilesim.options.set_defaults`), so
  every kernel launch, the shipped ops' and your own kernels' alike, runs checked, whatever ``checks=`` it was
  given; a test can still run some launches as they ask inside ``tilesim.options.scope(force_checks=False)``. A
  violation raises :class:`tilesim.CheckError` in the test that launched the kernel. From the environment:
  ``PYTEST_ADDOPTS=--tilesim-checks``. (``TILESIM_CHECKS=1`` keeps its own meaning: the default of ``checks=None``.)
- the fixture ``ascend_close``: ``ascend_close(actual, golden)`` asserts that a kernel's output passes Ascend's
  precision standard against float64 ``golden`` (:func:`tilesim.precision.compare`), with MERE, MARE and their
  thresholds in the failure message;
- the fixture ``tilesim_checks``: whether checked mode is forced in this session.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest

from tilesim import options
from tilesim.interop import as_array
from tilesim.precision import Precision, compare

_PREVIOUS = pytest.StashKey[bool]()  # the default force_checks before this session set it


def pytest_addoption(parser: pytest.Parser) -> None:
    """pytest hook: the ``--tilesim-checks`` option and the ``tilesim_checks`` ini setting."""
    group = parser.getgroup("tilesim")
    group.addoption("--tilesim-checks", action="store_true", default=False,
                    help="run every tilesim kernel launch in checked mode, whatever checks= its caller passes "
                         "(tilesim.options' force_checks as the session's default)")
    parser.addini("tilesim_checks", type="bool", default=False,
                  help="as --tilesim-checks: run every tilesim kernel launch in checked mode")


def _requested(config: pytest.Config) -> bool:
    return bool(config.getoption("tilesim_checks") or config.getini("tilesim_checks"))


def pytest_configure(config: pytest.Config) -> None:
    """pytest hook: with ``--tilesim-checks`` (or the ini setting), force checked mode for the session (the
    process's default ``force_checks``), keeping the default it found."""
    if _requested(config):
        config.stash[_PREVIOUS] = options.set_defaults(force_checks=True).force_checks


def pytest_unconfigure(config: pytest.Config) -> None:
    """pytest hook: give the default ``force_checks`` back the value the session found."""
    if _PREVIOUS in config.stash:  # restore, so a pytest run inside a test (pytester) leaves its caller as it was
        options.set_defaults(force_checks=config.stash[_PREVIOUS])
        del config.stash[_PREVIOUS]


def pytest_report_header(config: pytest.Config) -> str | None:
    """pytest hook: a header line when the session forces checked mode."""
    if _requested(config):
        return "tilesim: checked mode forced on every kernel launch (--tilesim-checks)"
    return None


@pytest.fixture
def tilesim_checks() -> bool:
    """Whether checked mode is forced (``--tilesim-checks``: the options' ``force_checks``): a test that compares
    fast mode with checked mode can skip or adapt."""
    return options.current().force_checks


def _names(what: str | Sequence[str], n: int, single: bool) -> list[str]:
    if isinstance(what, str):
        return [what] if single else [f"{what}[{i}]" for i in range(n)]
    names = list(what)
    if len(names) != n:
        raise ValueError(f"what: {len(names)} names for {n} outputs")
    return names


def _worst(actual: np.ndarray, golden: np.ndarray) -> str:
    """Where the largest absolute error is, against the golden rounded to actual's dtype as compare() rounds it."""
    a = actual.astype(np.float64)
    g = golden.astype(np.float64).astype(actual.dtype).astype(np.float64)
    err = np.abs(a - g)
    err[(a == g) | (np.isnan(a) & np.isnan(g))] = 0.0
    err[np.isnan(err)] = np.inf  # a NaN where the golden has a number (or the reverse) is the worst there is
    i = np.unravel_index(int(np.argmax(err)), a.shape) if a.ndim else ()
    return f"largest error at {list(map(int, i))}: actual {float(a[i])!r}, golden {float(g[i])!r}"


def _judge(actual: Any, golden: Any, dtype: str | None, what: str) -> tuple[Precision | None, str | None]:
    a, g = as_array(actual, what), as_array(golden, what)
    if a.shape != g.shape:
        return None, f"{what}: shape {list(a.shape)} but the golden's is {list(g.shape)}"
    p = compare(a, g, dtype)
    if p.ok:
        return p, None
    return p, f"{what} {a.dtype} {list(a.shape)}: {p}\n    {_worst(a, g)}"


def _check(actual: Any, golden: Any, dtype: str | Sequence[str | None] | None = None,
           what: str | Sequence[str] = "output") -> Precision | tuple[Precision, ...]:
    __tracebackhide__ = True
    single = not isinstance(actual, (tuple, list))
    acts = [actual] if single else list(actual)
    golds = [golden] if single else list(golden) if isinstance(golden, (tuple, list)) else None
    if golds is None or len(golds) != len(acts):
        n = 1 if golds is None else len(golds)
        raise ValueError(f"{len(acts)} outputs but {n} golden{'' if n == 1 else 's'}")
    dts = [dtype] * len(acts) if dtype is None or isinstance(dtype, str) else list(dtype)
    if len(dts) != len(acts):
        raise ValueError(f"dtype: {len(dts)} dtypes for {len(acts)} outputs")
    results, failures = [], []
    for a, g, dt, name in zip(acts, golds, dts, _names(what, len(acts), single), strict=True):
        p, failure = _judge(a, g, dt, name)
        results.append(p)
        if failure:
            failures.append(failure)
    if failures:
        raise AssertionError("not close under Ascend's precision standard (MERE < T and MARE < 10 T):\n  "
                             + "\n  ".join(failures))
    return results[0] if single else tuple(results)


@pytest.fixture
def ascend_close() -> Callable[..., Precision | tuple[Precision, ...]]:
    """``ascend_close(actual, golden, dtype=None, what="output")`` fails the test unless ``actual`` passes Ascend's
    precision standard against the float64 ``golden`` (:func:`tilesim.precision.compare`: MERE < T and
    MARE < 10 T, T = 2^-10 fp16, 2^-7 bf16, 2^-13 fp32; ``dtype`` picks T, default actual's dtype).

    ``actual`` and ``golden`` are arrays or torch CPU tensors, or tuples of them (an op's outputs and its
    reference's), judged pairwise; ``dtype`` and ``what`` may then be sequences too. The failure message names each
    failing output with its MERE, MARE, the thresholds and where its largest error is. Returns the
    :class:`tilesim.precision.Precision` (a tuple for tuples)::

        def test_dx(ascend_close):
            ascend_close(kernels.rms_norm_grad(dy, x, rstd, gamma), kernels.reference.rms_norm_grad(dy, x, rstd, gamma),
                         what=("dx", "dgamma"))
    """
    return _check
