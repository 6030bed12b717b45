"""MkDocs hooks (mkdocs.yml ``hooks:``): keep reference/machine.md complete as tilesim.machine grows, and show the
calibration table as ``bench/calibration.json`` holds it.

reference/machine.md lists the programming model by topic, one ``::: identifier`` per name. A name added to
``tilesim.machine.__all__``, or a method or attribute added with Numba's ``overload_method`` /
``overload_attribute`` in ``tilesim/machine/*.py``, that the page does not list is a warning, which fails
``mkdocs build --strict``. Read from the sources with ``ast``: nothing of tilesim's is imported for it.

A line ``<!-- calibration table -->`` in a page becomes the table ``python -m bench.calibrate`` wrote to
``bench/calibration.json`` (which ``tests/test_calibration.py`` recomputes), so the page shows the committed table,
never a copy of it, in the command's own format; a missing or unreadable file is a warning.
"""

from __future__ import annotations

import ast
import importlib
import json
import logging
from pathlib import Path
from typing import Any

_log = logging.getLogger("mkdocs.plugins.tilesim_docs")
_PAGE = "reference/machine.md"
_ROOT = Path(__file__).resolve().parents[2]
_MACHINE = _ROOT / "tilesim" / "machine"
_CALIBRATION = _ROOT / "bench" / "calibration.json"
_CALIBRATION_MARK = "<!-- calibration table -->"


def _exported() -> list[str]:
    """``tilesim.machine.__all__``."""
    tree = ast.parse((_MACHINE / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return [ast.literal_eval(e) for e in node.value.elts]  # type: ignore[attr-defined]
    return []


def _device_methods() -> list[str]:
    """``tilesim.machine.<module>.<function>`` of every function decorated with overload_method or
    overload_attribute (a method or attribute of a device type: nothing Python can see on an object)."""
    found = []
    for path in sorted(_MACHINE.glob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if not isinstance(node, ast.FunctionDef):
                continue
            for d in node.decorator_list:
                f = d.func if isinstance(d, ast.Call) else d
                if isinstance(f, ast.Name) and f.id in ("overload_method", "overload_attribute"):
                    found.append(f"tilesim.machine.{path.stem}.{node.name}")
                    break
    return found


def _calibration_table() -> str:
    """bench/calibration.json as ``python -m bench.calibrate`` prints it (``bench.calibrate.table``; ``make docs``
    runs mkdocs in the checkout's root, where ``bench`` imports)."""
    return importlib.import_module("bench.calibrate").table(json.loads(_CALIBRATION.read_text()))


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    if _CALIBRATION_MARK in markdown:
        try:
            table = _calibration_table()
        except (OSError, ImportError, ValueError, KeyError, TypeError) as e:
            _log.warning("%s: cannot show %s: %s", page.file.src_uri, _CALIBRATION, e)
        else:
            markdown = markdown.replace(_CALIBRATION_MARK, table)
    if page.file.src_uri != _PAGE:
        return markdown
    listed = {line.split(":::", 1)[1].strip() for line in markdown.splitlines() if line.startswith(":::")}
    for name in _exported():
        if f"tilesim.machine.{name}" not in listed:
            _log.warning("%s does not list tilesim.machine.%s (add a '::: tilesim.machine.%s')", _PAGE, name, name)
    for ident in _device_methods():
        if ident not in listed:
            _log.warning("%s does not list the device method %s (add a '::: %s' with a heading)", _PAGE, ident,
                         ident)
    return markdown
