"""The public API as the documentation writes it: ``tilesim.kernels`` and ``tilesim.tiling`` work after a plain
``import tilesim`` (without importing them with it), and every public module, function, class and method of
tilesim, kernels/ and tiling/ has a docstring (the API pages are drawn from them).

Public: a module whose file name does not start with ``_`` (a package's ``__init__.py`` is the package), and in it
every top-level ``def`` and ``class`` whose name does not, every method and property of such a class whose name
does not, and every namedtuple made at top level (``X = namedtuple(...)``, which needs an ``X.__doc__ = ...``).
The sources are read with ``ast``, nothing imported: tilesim.torch would import torch for it.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.no_launch_here  # it reads the sources

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {"tilesim": ROOT / "tilesim",
            **{f"tilesim.{d.name}": d for d in sorted((ROOT / "tilesim").iterdir()) if (d / "__init__.py").is_file()},
            "tilesim.kernels": ROOT / "kernels", "tilesim.tiling": ROOT / "tiling"}


def _modules() -> list[tuple[str, Path]]:
    found = []
    for package, folder in PACKAGES.items():
        for path in sorted(folder.glob("*.py")):
            if path.stem == "__init__":
                found.append((package, path))
            elif not path.stem.startswith("_"):
                found.append((f"{package}.{path.stem}", path))
    return found


def _namedtuples(tree: ast.Module) -> list[str]:
    """The public names assigned a ``namedtuple(...)`` call at the module's top level."""
    names = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            f = node.value.func
            called = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
            if called == "namedtuple":
                names += [t.id for t in node.targets if isinstance(t, ast.Name) and not t.id.startswith("_")]
    return names


def _doc_assigned(tree: ast.Module) -> set[str]:
    """The names given a docstring by ``X.__doc__ = ...`` at the module's top level."""
    return {t.value.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets
            if isinstance(t, ast.Attribute) and t.attr == "__doc__" and isinstance(t.value, ast.Name)}


def _undocumented(module: str, tree: ast.Module) -> list[str]:
    missing = [] if ast.get_docstring(tree) else [module]
    defs = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    for node in tree.body:
        if not isinstance(node, defs) or node.name.startswith("_"):
            continue
        if not ast.get_docstring(node):
            missing.append(f"{module}.{node.name}")
        if isinstance(node, ast.ClassDef):
            missing += [f"{module}.{node.name}.{m.name}" for m in node.body
                        if isinstance(m, defs) and not m.name.startswith("_") and not ast.get_docstring(m)]
    documented = _doc_assigned(tree)
    missing += [f"{module}.{n}" for n in _namedtuples(tree) if n not in documented]
    return missing


def test_every_public_name_has_a_docstring():
    modules = _modules()
    assert len(modules) > 60 and ("tilesim.torch", ROOT / "tilesim" / "torch.py") in modules
    missing = [m for name, path in modules for m in _undocumented(name, ast.parse(path.read_text()))]
    assert not missing, f"{len(missing)} public names without a docstring:\n" + "\n".join(missing)


def test_the_walk_finds_what_lacks_a_docstring():
    """The walk itself: a function, a method, a property and a namedtuple without docstrings are found."""
    tree = ast.parse('"""m"""\n'
                     "from collections import namedtuple\n"
                     "def f(): pass\n"
                     "def _g(): pass\n"
                     "class C:\n    '''c'''\n    def m(self): pass\n    @property\n    def p(self): return 1\n"
                     "    def _h(self): pass\n"
                     "T = namedtuple('T', ['a'])\nU = namedtuple('U', ['a'])\nU.__doc__ = 'u'\n")
    assert _undocumented("m", tree) == ["m.f", "m.C.m", "m.C.p", "m.T"]


def test_op_packages_after_plain_import():
    """``import tilesim`` leaves the cost model, the trace, the explorer and the op packages unimported, and
    ``tilesim.kernels`` and ``tilesim.tiling`` work after it, as the pages write them."""
    code = ("import sys, tilesim\n"
            "heavy = ['cost.model', 'cost.trace', 'tools.explore', 'tools.opspec', 'tools.cli', 'kernels', 'tiling']\n"
            "print(sorted(n for n in heavy if 'tilesim.' + n in sys.modules))\n"
            "print(all(n in dir(tilesim) for n in ('kernels', 'tiling')))\n"
            "print(callable(tilesim.kernels.rms_norm_grad), callable(tilesim.tiling.rms_norm_grad))\n"
            "try:\n    tilesim.no_such_name\nexcept AttributeError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["[]", "True", "True True", "module 'tilesim' has no attribute 'no_such_name'"]


def test_assert_close_fails_under_python_O():
    """tilesim.precision.assert_close fails a wrong output in every interpreter, ``python -O`` (which strips
    assert statements) included, and passes a right one."""
    code = ("import numpy as np\n"
            "from tilesim.precision import assert_close\n"
            "g = np.linspace(-2, 2, 64)\n"
            "assert_close(g.astype(np.float32), g)\n"
            "try:\n    assert_close((g + 1).astype(np.float32), g, what='z')\n"
            "except AssertionError as e:\n    print(str(e).split(':')[0])\n")
    out = subprocess.run([sys.executable, "-O", "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["z"]
