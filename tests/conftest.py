"""Shared test helpers: inputs the way the op sees them, and shape-only stand-ins for tiling tests."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import ml_dtypes
import numpy as np
import pytest
from tilesim.tiling.common import TensorMeta as Spec  # noqa: F401  (shape-only stand-ins: what a tiling reads of a tensor)

from tilesim import options

DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


def rms_inputs(rng: np.random.Generator, shape: tuple, n_gamma: int = 1, dtype: str = "float32",
               gamma_dtype: str = "float32", offset: float = 0.0, eps: float = 1e-6, rstd_from_x: bool = True):
    """dy, x, rstd and gamma; gamma covers the last ``n_gamma`` axes. rstd is the forward's 1/sqrt(mean(x^2)+eps),
    or, with ``rstd_from_x=False``, drawn independently in [0.5, 2] as Ascend's TTK cases draw it."""
    dt, gdt = DTYPES[dtype], DTYPES[gamma_dtype]
    x = (offset + rng.uniform(-2, 2, shape)).astype(dt)
    dy = rng.uniform(-2, 2, shape).astype(dt)
    gshape = shape[len(shape) - n_gamma:]
    gamma = rng.uniform(-1.5, 1.5, gshape).astype(gdt)
    lead = shape[:len(shape) - n_gamma]
    x64 = x.astype(np.float64).reshape(int(np.prod(lead, dtype=np.int64)), -1)
    rstd = (1.0 / np.sqrt(np.mean(x64 * x64, axis=1) + eps)).astype(np.float32).reshape(lead)
    if not rstd_from_x:
        rstd = rng.uniform(0.5, 2, rstd.shape).astype(np.float32)
    return dy, x, rstd, gamma


def pytest_configure(config: pytest.Config) -> None:
    """pytest hook: the ``no_launch_here`` and ``checked_elsewhere`` markers."""
    config.addinivalue_line("markers", "no_launch_here: the test launches no kernel in the pytest process (it runs "
                                       "them in subprocesses, or host code only); pytest --tilesim-checks, a pass "
                                       "that exists to check every launch, leaves it out")
    config.addinivalue_line("markers", "checked_elsewhere: the test's launches are shipped kernels on large inputs "
                                       "whose checked runs other tests make on small ones; pytest --tilesim-checks "
                                       "leaves it out")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """pytest hook: with checked mode forced (``--tilesim-checks``, ``make test``'s second pass), the tests marked
    ``no_launch_here`` are deselected (forcing changes nothing they run, so they would repeat the first pass), and
    those marked ``checked_elsewhere`` (checking their large launches would find nothing the small ones miss)."""
    if not options.current().force_checks:
        return
    marked = [i for i in items if any(i.get_closest_marker(m) for m in ("no_launch_here", "checked_elsewhere"))]
    if marked:
        config.hook.pytest_deselected(items=marked)
        gone = {id(i) for i in marked}
        items[:] = [i for i in items if id(i) not in gone]


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(20261121)


@contextmanager
def as_asked() -> Iterator[None]:
    """Launches in the mode each asks for (its ``checks``): a fast one that shows what the NPU does with a broken
    kernel, or that looks at the fast build's code, stays fast under ``pytest --tilesim-checks``, which forces
    checked mode on every other launch. A scope of the calling thread's (:func:`tilesim.options.scope`)."""
    with options.scope(force_checks=False):
        yield


@pytest.fixture
def launches_as_asked() -> Iterator[None]:
    """The test's launches in the mode each asks for, as inside :func:`as_asked`."""
    with as_asked():
        yield
