"""tilesim.options: what the environment sets, how a launch resolves its ``checks`` against the options in force (the
call's True or False first, None for the options; forced checked mode over a False, except as asked; anything else
refused with 161002 before anything is written), scopes that belong to their thread, and the aclnn forms and a
kernel of one's own following them. The launches are examples/add_tail.py's and SwiGlu's small fp32 ones, which the
suite compiles anyway."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tilesim.kernels as kernels
from tilesim.kernels import aclnn

import tilesim
from examples.add_tail import add_tail, add_tail_kernel, add_tail_tiling
from tilesim import AclnnError, Options, options
from tilesim.runtime import launcher
from tilesim.runtime.launcher import launch

ROOT = Path(__file__).resolve().parent.parent
X, Y = np.random.default_rng(0).uniform(-2, 2, (2, 1000)).astype(np.float32)


@pytest.fixture
def plain() -> Iterator[None]:
    """The process's defaults as a plain session has them (no TILESIM_CHECKS, nothing forced), put back after: this
    suite's checked pass forces checked mode by them."""
    before = options.set_defaults(checks=False, force_checks=False)
    yield
    options.set_defaults(checks=before.checks, force_checks=before.force_checks)


def checks_of(call) -> list[bool]:  # type: ignore[no-untyped-def]
    """Whether each launch of ``call()`` ran checked."""
    with tilesim.capture() as runs:
        call()
    return [r.checks for r in runs]


def test_the_environment_sets_the_defaults() -> None:
    assert Options.from_environ({}) == Options() == Options(False, False, True, "~/.cache/tilesim")
    for value, on in (("1", True), ("yes", True), ("0", False), ("", False)):
        assert Options.from_environ({"TILESIM_CHECKS": value}).checks is on
    assert Options.from_environ({"TILESIM_CACHE": "/tmp/c"}).cache_dir == "/tmp/c"
    assert Options.from_environ({"TILESIM_CACHE": ""}).cache_dir == "~/.cache/tilesim"


@pytest.mark.no_launch_here
def test_a_process_takes_its_defaults_from_its_environment() -> None:
    code = "import tilesim; print(tilesim.options.current())"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TILESIM_CHECKS": "1", "TILESIM_CACHE": "/nowhere/tilesim"}
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == repr(Options(checks=True, cache_dir="/nowhere/tilesim"))


def test_a_calls_checks_against_the_options() -> None:
    """The call's True or False beats the default; None takes it; forcing beats a False."""
    for default in (False, True):
        o = Options(checks=default)
        assert (o.resolve_checks(True), o.resolve_checks(False), o.resolve_checks(None)) == (True, False, default)
        assert o.resolve_checks(np.False_) is False and o.resolve_checks(np.True_) is True
        forced = Options(checks=default, force_checks=True)
        assert forced.resolve_checks(False) and forced.resolve_checks(None) and forced.resolve_checks(True)
    assert Options(auto_sync=False).resolve_auto_sync(None) is False
    assert Options(auto_sync=False).resolve_auto_sync(True) is True


@pytest.mark.parametrize(("field", "value"), [("checks", "yes"), ("checks", 1), ("checks", 0.0), ("checks", []),
                                              ("auto_sync", "no"), ("auto_sync", 1)])
def test_a_value_neither_bool_nor_none_is_refused(field: str, value: object) -> None:
    with pytest.raises(AclnnError) as e:
        getattr(Options(), f"resolve_{field}")(value)
    assert e.value.status == 161002 and e.value.message.startswith(f"{field}: must be True, False or None")
    with pytest.raises(AclnnError) as e:
        Options(**{field: value})
    assert e.value.status == 161002 and e.value.message.startswith(f"{field}: must be True or False")


def test_scopes_nest_check_their_values_first_and_end() -> None:
    outer = options.current()
    with options.scope(checks=True) as o:
        assert o == options.current() and o.checks and o.auto_sync == outer.auto_sync
        with options.scope(auto_sync=False, cache_dir=Path("/tmp/x")) as inner:
            assert (inner.checks, inner.auto_sync, inner.cache_dir) == (True, False, "/tmp/x")
        with pytest.raises(TypeError, match="no 'chekcs': the options are checks, force_checks, auto_sync, cache_dir"):
            with options.scope(chekcs=False):
                pytest.fail("the block ran")
        with pytest.raises(AclnnError, match="cache_dir: must be a directory's path"):
            with options.scope(cache_dir=""):
                pytest.fail("the block ran")
        assert options.current() == o
    assert options.current() == outer


def test_a_default_set_inside_a_scope_shows_through_it(plain: None) -> None:
    with options.scope(checks=True):
        options.set_defaults(auto_sync=False)
        try:
            assert (options.current().checks, options.current().auto_sync) == (True, False)
        finally:
            options.set_defaults(auto_sync=True)
        assert options.current().auto_sync


def test_a_launch_follows_the_scope_over_the_defaults(plain: None) -> None:
    """checks=None: the process's default (which TILESIM_CHECKS sets), a scope over it; the call's own value
    beats both."""
    call = lambda checks=None: add_tail(X, Y, checks=checks)  # noqa: E731
    assert checks_of(call) == [False]
    with options.scope(checks=True):
        assert checks_of(call) == [True]
        assert checks_of(lambda: call(False)) == [False]
    options.set_defaults(checks=True)  # as TILESIM_CHECKS=1 sets it
    assert checks_of(call) == [True]
    with options.scope(checks=False):
        assert checks_of(call) == [False]
        assert checks_of(lambda: call(True)) == [True]


def test_forced_checked_mode_beats_a_false_except_as_asked(plain: None) -> None:
    options.set_defaults(force_checks=True)  # as pytest --tilesim-checks sets it
    assert checks_of(lambda: add_tail(X, Y, checks=False)) == [True]
    with options.scope(force_checks=False):  # tests/conftest.py's as_asked
        assert checks_of(lambda: add_tail(X, Y, checks=False)) == [False]
        assert checks_of(lambda: add_tail(X, Y)) == [False]
        with options.scope(force_checks=True):
            assert checks_of(lambda: add_tail(X, Y, checks=False)) == [True]


def test_the_aclnn_form_follows_the_options_when_it_runs(plain: None) -> None:
    x = np.random.default_rng(1).uniform(-2, 2, (8, 128)).astype(np.float32)
    y = np.zeros((8, 64), np.float32)
    status, size, executor = aclnn.swi_glu_get_workspace_size(x, -1, y)
    assert status == 0
    with options.scope(checks=True):
        assert checks_of(lambda: aclnn.swi_glu(np.empty(size, np.uint8), size, executor)) == [True]
    assert checks_of(lambda: aclnn.swi_glu(np.empty(size, np.uint8), size, executor)) == [False]
    np.testing.assert_array_equal(y, kernels.swiglu(x))


@pytest.mark.parametrize(("field", "value"), [("checks", "yes"), ("auto_sync", 1)])
def test_a_bad_value_is_refused_before_anything_is_written(field: str, value: object) -> None:
    t = add_tail_tiling(X)
    z = np.full_like(X, 7)
    with pytest.raises(AclnnError) as e:
        launch(add_tail_kernel, t, X, Y, z, block_dim=t.block_dim, **{field: value})
    assert e.value.status == 161002 and e.value.message.startswith(f"{field}: must be True, False or None")
    assert (z == 7).all()
    with pytest.raises(AclnnError, match="checks: must be True, False or None"):
        kernels.swiglu(np.ones((8, 128), np.float32), checks="yes", out=z[:512].reshape(8, 64))
    assert (z == 7).all()


def test_a_scope_is_its_threads_alone(plain: None) -> None:
    """Two threads launch at once, one inside a scope: each launch follows its own thread's options; a default
    set meanwhile reaches every thread."""
    inside_open, outside_done = threading.Event(), threading.Event()
    seen: dict[str, object] = {}

    def inside() -> None:
        with options.scope(checks=True):
            inside_open.set()
            seen["inside"] = checks_of(lambda: add_tail(X, Y))
            outside_done.wait(60)  # the scope stays open while the other thread launches
            seen["inside after"] = checks_of(lambda: add_tail(X, Y))

    def outside() -> None:
        inside_open.wait(60)
        seen["outside"] = checks_of(lambda: add_tail(X, Y))
        seen["outside options"] = options.current()
        outside_done.set()

    threads = [threading.Thread(target=f) for f in (inside, outside)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    assert seen == {"inside": [True], "outside": [False], "outside options": options.current(),
                    "inside after": [True]}
    options.set_defaults(force_checks=True)
    other: list[bool] = []
    th = threading.Thread(target=lambda: other.extend(checks_of(lambda: add_tail(X, Y, checks=False))))
    th.start()
    th.join(120)
    assert other == [True]


def test_the_core_loops_go_to_the_options_cache_dir(tmp_path: Path) -> None:
    with options.scope(cache_dir=tmp_path / "c"):
        path = launcher._cache_file("probe.py", "x = 1\n")
    assert path == tmp_path / "c" / "launchers" / "probe.py" and path.read_text() == "x = 1\n"
