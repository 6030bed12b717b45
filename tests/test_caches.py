"""Damaged, read-only, vanishing and shared caches (tilesim.jit.cache, tilesim.runtime.launcher's core loops): a bad or
missing entry is a miss (a CacheWarning, then a compile, in memory where nothing can be written), never a crash
and never a wrong result; a checkout's kernels/ and tiling/ are imported as tilesim's only.

Every case runs in subprocesses on caches of their own (NUMBA_CACHE_DIR, TILESIM_CACHE and HOME in a temporary
directory): small functions of a module written here, or examples/add_tail.py's kernel (its device code from the
suite's cache, only its core loop in the temporary one)."""

from __future__ import annotations

import importlib.util
import json
import os
import pkgutil
import random
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import tilesim.kernels
import tilesim.tiling

import tilesim

pytestmark = pytest.mark.no_launch_here  # its cases run in subprocesses

ROOT = Path(__file__).resolve().parents[1]

# What every child runs first: CacheWarnings recorded (by their class's name: the tree before them had none), and
# ``done(**results)`` to report them with its results
_PRELUDE = """
import json, sys, warnings
warnings.simplefilter("always")
CAUGHT = warnings.catch_warnings(record=True).__enter__()
def done(**results):
    results["warnings"] = [str(w.message) for w in CAUGHT if type(w.message).__name__ == "CacheWarning"]
    print("RESULT " + json.dumps(results))
"""


def _env(tmp: Path, **extra: Path | str) -> dict[str, str]:
    """The suite's environment, the home and the core loops' cache in ``tmp``; ``extra`` on top (NUMBA_CACHE_DIR:
    the suite's own unless given, so that examples/add_tail.py's kernel loads from it)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYTHONPATH=str(ROOT), HOME=str(tmp / "home"), TILESIM_CACHE=str(tmp / "tilesim"))
    env.update({k: str(v) for k, v in extra.items()})
    return env


def _run(code: str, *args: object, env: dict[str, str], read_only: tuple[Path, ...] = ()) -> dict:
    """Run ``code`` after the prelude in a new interpreter, with the directories ``read_only`` made read-only for
    it, and return what it passed to ``done``; a crash fails the test with its traceback."""
    cmd = [sys.executable, "-c", _PRELUDE + textwrap.dedent(code), *map(str, args)]
    if read_only and os.geteuid() == 0:  # root writes through permission bits: read-only mounts of its own
        probe = subprocess.run(["unshare", "--mount", "true"], capture_output=True)
        if probe.returncode:
            pytest.skip("root without a mount namespace cannot make a directory read-only for itself")
        mounts = " && ".join(f"mount --bind -o ro {shlex.quote(str(p))} {shlex.quote(str(p))}" for p in read_only)
        cmd = ["unshare", "--mount", "sh", "-c", f'{mounts} && exec "$@"', "sh", *cmd]
    for p in read_only if os.geteuid() else ():
        p.chmod(0o555)
    try:
        out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    finally:
        for p in read_only if os.geteuid() else ():
            p.chmod(0o755)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
    assert out.returncode == 0 and lines, f"the child crashed (rc {out.returncode}):\n{out.stderr[-4000:]}"
    return json.loads(lines[-1][len("RESULT "):])


def _damage(path: Path, how: str) -> None:
    """Truncate ``path``, overwrite it with text, or replace it by random bytes of its size."""
    data = path.read_bytes()
    path.write_bytes({"truncated": data[:len(data) // 2], "garbage": b"not a cache file\n" * 8,
                      "random": random.Random(52).randbytes(len(data))}[how])


HOWS = ("truncated", "garbage", "random")
# Small functions, a pair per case: a device function (cached as bitcode, tilesim.jit.link) and the host function
# that links it (cached as object code)
CASES = [f"{part}_{how}" for part in ("data", "index") for how in HOWS]


def _pairs(names: list[str]) -> str:
    return "import numpy as np\nfrom tilesim.jit import njit\n" + "".join(f"""

@njit(cache=True)
def d_{n}(a, k):
    for i in range(a.size):
        a[i] = a[i] * k - 3


@njit(cache=True, host=True)
def h_{n}(a):
    d_{n}(a, a.dtype.type(2))
    return a
""" for n in names)


_CALL_PAIRS = """
import importlib, numpy as np
sys.path[:0] = json.loads(sys.argv[1])
import tilesim
results = {}
for module, name in json.loads(sys.argv[2]):
    host = getattr(importlib.import_module(module), "h_" + name)
    a = host(np.arange(4, dtype=np.dtype(sys.argv[3])))
    results[name] = [a.tolist() == [-3, -1, 1, 3], sum(host.stats.cache_hits.values())]
done(results=results)
"""


def test_damaged_numba_entries_are_misses_that_warn_and_are_written_again(tmp_path: Path) -> None:
    """Each kind of Numba cache file (the index, a device function's bitcode, a host function's object code)
    truncated, overwritten with text or with random bytes; and an entry written by a process that imported the
    module under another name (a package's module on the path by itself): each a miss with a warning, the results
    right, and the next process loads what this one wrote."""
    src = tmp_path / "src"
    for d in ("flat", "pkg"):
        (src / d).mkdir(parents=True)
    (src / "flat" / "tiny.py").write_text(_pairs(CASES))
    (src / "pkg" / "__init__.py").write_text("")
    (src / "pkg" / "renamed.py").write_text(_pairs(["renamed"]))
    env, cache = _env(tmp_path, NUMBA_CACHE_DIR=tmp_path / "numba"), tmp_path / "numba"
    calls = [["tiny", n] for n in CASES]

    first = _run(_CALL_PAIRS, json.dumps([str(src / "flat"), str(src)]),
                 json.dumps([*calls, ["pkg.renamed", "renamed"]]), "float32", env=env)
    assert all(ok and hits == 0 for ok, hits in first["results"].values()) and first["warnings"] == []
    for n in CASES:
        part, how = n.split("_")
        files = sorted(cache.rglob(f"tiny.[dh]_{n}-*.{'nbc' if part == 'data' else 'nbi'}"))
        assert len(files) == 2
        for f in files:
            _damage(f, how)

    # the module imported as `renamed`: its entries name a module `pkg.renamed`, which this process cannot import
    calls.append(["renamed", "renamed"])
    path = json.dumps([str(src / "flat"), str(src / "pkg")])
    second = _run(_CALL_PAIRS, path, json.dumps(calls), "float32", env=env)
    assert all(ok and hits == 0 for ok, hits in second["results"].values()), second
    text = "\n".join(second["warnings"])
    for how in HOWS:
        assert f"tiny.h_data_{how}" in text and f"tiny.h_index_{how}" in text, text  # the index and the entry
    assert "renamed.h_renamed" in text and "No module named 'pkg'" in text, text

    third = _run(_CALL_PAIRS, path, json.dumps(calls), "float32", env=env)
    assert all(ok and hits == 1 for ok, hits in third["results"].values()) and third["warnings"] == [], third


_RACE = """
import time, numpy as np
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from numba.core import caching
import tilesim, tiny
me, other, steps = sys.argv[3], "b" if sys.argv[3] == "a" else "a", Path(sys.argv[4])
# The order forced on the host function's save: each process reads the index before either writes it; a writes
# the index, then b; b writes its data file, then a
WAITS = {("a", "load_index"): "b-read", ("b", "load_index"): "a-read", ("b", "save_index"): "a-index",
         ("a", "save_data"): "b-data"}
MARKS = {"load_index": "read", "save_index": "index", "save_data": "data"}
saving = []

def wait(mark):
    for _ in range(6000):  # 60 s at most
        if (steps / mark).exists():
            return
        time.sleep(0.01)

def ordered(name, method):
    def run(self, *args):
        if not (saving and "h_data_random" in self._index_name):
            return method(self, *args)
        if name != "load_index" and (me, name) in WAITS:
            wait(WAITS[me, name])
        r = method(self, *args)
        (steps / f"{me}-{MARKS[name]}").touch()
        if name == "load_index":
            wait(WAITS[me, name])
        return r
    return run

def save(self, key, data, numba_save=caching.IndexDataCacheFile.save):
    saving.append(1)
    try:
        return numba_save(self, key, data)
    finally:
        saving.pop()

caching.IndexDataCacheFile.save = save
for name in MARKS:
    setattr(caching.IndexDataCacheFile, "_" + name, ordered(name, getattr(caching.IndexDataCacheFile, "_" + name)))
a = tiny.h_data_random(np.arange(4, dtype=np.dtype(sys.argv[2])))
done(ok=a.tolist() == [-3, -1, 1, 3])
"""


def test_two_processes_compiling_into_one_empty_cache_leave_no_wrong_entry(tmp_path: Path) -> None:
    """Two processes compile one function on two types into one empty cache and read its index before either
    writes it: both number their entry 1, the index keeps b's key and the data file a's code. A third process
    that calls it on b's type compiles it again (where it ran a's code on b's data), and right."""
    src, steps = tmp_path / "src", tmp_path / "steps"
    src.mkdir()
    steps.mkdir()
    (src / "tiny.py").write_text(_pairs(CASES))
    env = _env(tmp_path, NUMBA_CACHE_DIR=tmp_path / "numba")
    cmds = [[sys.executable, "-c", _PRELUDE + _RACE, str(src), dt, who, str(steps)]
            for who, dt in (("a", "float32"), ("b", "int64"))]
    procs = [subprocess.Popen(c, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for c in cmds]
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0 and '"ok": true' in out, err[-3000:]
    assert {f.name for f in steps.iterdir()} >= {"a-read", "b-read", "a-index", "b-index", "a-data", "b-data"}
    third = _run(_CALL_PAIRS, json.dumps([str(src)]), json.dumps([["tiny", "data_random"]]), "int64", env=env)
    assert third["results"]["data_random"] == [True, 0], third


def test_damaged_core_loop_files_are_misses(tmp_path: Path) -> None:
    """Every file of TILESIM_CACHE (the generated core loop, its bytecode, Numba's entries of its code) damaged:
    the launch compiles the loop again, and right."""
    code = """
    import numpy as np
    from examples.add_tail import add_tail
    x, y = np.arange(100, dtype=np.float32), np.ones(100, np.float32)
    done(ok=bool(np.array_equal(add_tail(x, y), (x + y) * np.float32(0.5))))
    """
    env = _env(tmp_path)
    assert _run(code, env=env)["ok"]
    files = sorted(p for p in (tmp_path / "tilesim").rglob("*") if p.is_file())
    assert any(f.suffix == ".py" for f in files)
    for i, f in enumerate(files):
        _damage(f, "random" if f.suffix == ".py" else HOWS[i % 3])
    assert _run(code, env=env)["ok"]


def test_no_writable_numba_cache_directory_compiles_in_memory(tmp_path: Path) -> None:
    """NUMBA_CACHE_DIR, the __pycache__ beside a module's source and ~/.cache/numba all read-only: Numba would
    refuse to decorate the module's functions; they compile in memory, after one warning."""
    src, numba_dir, home = tmp_path / "src", tmp_path / "numba", tmp_path / "home"
    for d in (src, numba_dir, home):
        d.mkdir()
    (src / "tiny.py").write_text(_pairs(["x", "y"]))
    r = _run(_CALL_PAIRS, json.dumps([str(src)]), json.dumps([["tiny", "x"], ["tiny", "y"]]), "float32",
             env=_env(tmp_path, NUMBA_CACHE_DIR=numba_dir), read_only=(src, numba_dir, home))
    assert r["results"] == {"x": [True, 0], "y": [True, 0]}
    assert r["warnings"] and set(r["warnings"]) == {
        f"tilesim: {src}: no writable cache directory (NUMBA_CACHE_DIR, its __pycache__, ~/.cache/numba): its "
        f"functions compile in memory, in every process"}, r
    assert list(numba_dir.iterdir()) == [] and not (src / "__pycache__").exists()


def test_a_read_only_core_loop_cache_compiles_the_loop_in_memory(tmp_path: Path) -> None:
    """TILESIM_CACHE/launchers read-only: the core loop compiles in memory, after a warning that names it."""
    launchers = tmp_path / "tilesim" / "launchers"
    launchers.mkdir(parents=True)
    r = _run("""
    import numpy as np
    from examples.add_tail import add_tail
    x, y = np.arange(100, dtype=np.float32), np.ones(100, np.float32)
    done(ok=bool(np.array_equal(add_tail(x, y), (x + y) * np.float32(0.5))))
    """, env=_env(tmp_path), read_only=(launchers,))
    assert r["ok"] and len(r["warnings"]) == 1, r
    assert r["warnings"][0].startswith(f"tilesim: cannot write the generated core loops to {launchers} (") \
        and "they compile in memory" in r["warnings"][0], r
    assert list(launchers.iterdir()) == []


def test_a_core_loop_whose_file_vanished_still_makes_its_sync_all_entries(tmp_path: Path) -> None:
    """The core loops' directory deleted (a user clearing ~/.cache) after a SyncAll kernel's loop was loaded and
    before its first launch in a build made that build's C entry: the entry compiles in memory."""
    r = _run("""
    import shutil, numpy as np
    sys.path.insert(0, "tests")
    from tilesim.runtime import launcher
    from test_sync_all import N, Case, two_phases
    x = np.arange(N, dtype=np.float32)
    parts, total = np.zeros(4 * N, np.float32), np.zeros(N, np.float32)
    launcher._core_loop(two_phases, Case(0), (launcher.dtypes.dtype_of(x.dtype),) * 3)
    shutil.rmtree(sys.argv[1])
    launcher.launch(two_phases, Case(0), x, parts, total, block_dim=4, outputs=2, checks=False)
    done(ok=bool(np.array_equal(total, 4 * x + 6)))
    """, tmp_path / "tilesim", env=_env(tmp_path))
    assert r["ok"] and len(r["warnings"]) == 1, r
    assert r["warnings"][0].startswith(f"tilesim: {tmp_path}/tilesim/launchers/launch_") \
        and r["warnings"][0].endswith(".py is gone: its functions compile in memory"), r


@pytest.mark.parametrize("package", ["kernels", "tiling"])
def test_a_checkouts_package_is_refused_under_its_top_level_name(package: str, tmp_path: Path) -> None:
    """In a checkout's root, ``import kernels`` would load the op modules a second time, under names whose Numba
    cache entries no process that imports tilesim.kernels can load: refused, with the import to write."""
    out = subprocess.run([sys.executable, "-c", f"import {package}"], cwd=ROOT, env=_env(tmp_path),
                         capture_output=True, text=True)
    assert out.returncode == 1 and out.stderr.strip().splitlines()[-1] == (
        f"ImportError: '{package}' is tilesim's {package}/ imported under a name of its own: import it as "
        f"`import tilesim.{package}` (or `from tilesim import {package}`)")


def test_a_checkouts_tilesim_kernels_and_tiling_are_found_by_their_names_alone() -> None:
    """In a checkout, tilesim.kernels and tilesim.tiling are the checkout's kernels/ and tiling/, and nothing else of
    the checkout is a part of tilesim: a walk of tilesim's modules (as the tests make) would import tilesim again as
    ``tilesim.tilesim``, its patches of Numba's cache applied twice, its entries unreadable to other processes."""
    assert Path(tilesim.kernels.__file__) == ROOT / "kernels" / "__init__.py"
    assert Path(tilesim.tiling.__file__) == ROOT / "tiling" / "__init__.py"
    assert [m.name for m in pkgutil.iter_modules(tilesim.__path__) if m.ispkg] == [
        "checks", "core", "cost", "jit", "machine", "numerics", "runtime", "tools"]
    for name in ("tilesim", "examples", "bench"):
        assert importlib.util.find_spec(f"tilesim.{name}") is None


_EDITED_KERNEL = '''from dataclasses import dataclass
from tilesim.runtime.launcher import kernel

@dataclass(frozen=True)
class T:
    n: int

@kernel
def edited(ctx, t, x):
    if t.n > 0:
        raise ValueError("version {v}")
'''


def test_a_kernel_edited_while_a_process_runs_it_compiles_again(tmp_path: Path) -> None:
    """A kernel's file edited after a process imported it: that process's core loop (the old code) is cached under
    the source it ran, so a new process runs the file as it is now."""
    code = """
    import sys
    from pathlib import Path
    import numpy as np
    sys.path.insert(0, sys.argv[1])
    path, edit = Path(sys.argv[1]) / "edited_kernel.py", sys.argv[2]
    import edited_kernel
    if edit:
        path.write_text(edit)
    from tilesim.runtime.launcher import launch
    try:
        launch(edited_kernel.edited, edited_kernel.T(1), np.zeros(8, np.float32), block_dim=1, outputs=0)
    except ValueError as e:
        done(raised=str(e))
    """
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "edited_kernel.py").write_text(_EDITED_KERNEL.format(v="A"))
    env = _env(tmp_path)
    edit = _EDITED_KERNEL.format(v="B") + "# edited\n"
    assert _run(code, mods, edit, env=env)["raised"] == "version A"  # the code it imported
    assert _run(code, mods, "", env=env)["raised"] == "version B"
