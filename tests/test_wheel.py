"""tilesim as its users install it: the wheel's top-level names are tilesim's own, and installed into a fresh
virtual environment beside another package named ``kernels`` (Hugging Face's, say), it runs an op and its command
line and leaves that package alone."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.no_launch_here  # it builds and installs the wheel in subprocesses

ROOT = Path(__file__).resolve().parents[1]


def test_the_wheel_takes_no_top_level_name_but_tilesim_and_installs_beside_a_kernels_package(tmp_path):
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--outdir", str(tmp_path / "dist"), str(ROOT)],
                   check=True, capture_output=True)
    (wheel,) = (tmp_path / "dist").glob("tilesim-*.whl")
    files = zipfile.ZipFile(wheel).namelist()
    (meta,) = {f.split("/")[0] for f in files} - {"tilesim"}
    assert meta.startswith("tilesim-") and meta.endswith(".dist-info")
    for f in ("tilesim/machine/__init__.py", "tilesim/kernels/swiglu.py", "tilesim/tiling/swiglu.py"):
        assert f in files
    # the pytest extra the plugin's page names: pytest, and nothing heavier
    metadata = zipfile.ZipFile(wheel).read(f"{meta}/METADATA").decode()
    assert [line.split(":", 1)[1].strip() for line in metadata.splitlines()
            if line.startswith("Requires-Dist:") and 'extra == "pytest"' in line] == ['pytest>=8; extra == "pytest"']

    env = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    py = env / "bin" / "python"
    site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    stand_in = site / "kernels"
    stand_in.mkdir()
    (stand_in / "__init__.py").write_text("WHOSE = 'not tilesim'\n")
    # tilesim's dependencies from this environment (a path entry: its own .pth files, the editable tilesim's
    # among them, are not read), tilesim itself only from the wheel
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", str(wheel)],
                   check=True, capture_output=True)
    run_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "NUMBA_CACHE_DIR", "TILESIM_CACHE")}
    run_env["NUMBA_CACHE_DIR"] = str(tmp_path / "numba")
    code = ("import kernels, numpy as np, tilesim, tilesim.kernels as k\n"
            "assert kernels.WHOSE == 'not tilesim', kernels.__file__\n"
            f"assert tilesim.__file__.startswith({str(site)!r})\n"
            f"assert k.__file__ == {str(site / 'tilesim' / 'kernels' / '__init__.py')!r}, k.__file__\n"
            "x = np.linspace(-3, 3, 4 * 64, dtype=np.float32).reshape(4, 64)\n"
            "a, b = x[:, :32], x[:, 32:]\n"
            "y = k.swiglu(x)\n"
            "assert np.allclose(y, a / (1 + np.exp(-a)) * b, rtol=1e-5, atol=1e-6)\n"
            "import torch, tilesim.torch\n"  # the torch extra's module, and a tensor through the same op
            "yt = k.swiglu(torch.from_numpy(x))\n"
            "assert isinstance(yt, torch.Tensor) and np.array_equal(yt.numpy(), y)\n"
            "print('ok')\n")
    out = subprocess.run([str(py), "-c", code], cwd=tmp_path, env=run_env, capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-3000:]
    cli = subprocess.run([str(env / "bin" / "tilesim"), "--help"], cwd=tmp_path, env=run_env, capture_output=True,
                         text=True)
    assert cli.returncode == 0 and "explore" in cli.stdout, cli.stderr[-3000:]
    listed = subprocess.run([str(env / "bin" / "tilesim"), "ops"], cwd=tmp_path, env=run_env, capture_output=True,
                            text=True)
    assert listed.returncode == 0 and "swiglu" in listed.stdout, listed.stderr[-3000:]


def test_nothing_imports_the_repositorys_kernels_or_tiling_by_its_top_level_name():
    """From a checkout the repository root is on the path (examples/), where ``import kernels`` would load the op
    API a second time, under a name that is not tilesim's: every import goes through ``tilesim.``."""
    import re

    bare = re.compile(r"^\s*(import|from)\s+(kernels|tiling)\b", re.M)
    found = [str(p.relative_to(ROOT)) for d in ("tilesim", "kernels", "tiling", "tests", "bench", "examples", "docs")
             for p in (ROOT / d).rglob("*.py") if bare.search(p.read_text())]
    found += [p.name for p in (ROOT / "README.md", *(ROOT / "docs").rglob("*.md")) if bare.search(p.read_text())]
    assert found == []
