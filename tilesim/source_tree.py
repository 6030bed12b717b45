"""kernels/ and tiling/ as tilesim.kernels and tilesim.tiling in a source checkout (imported first by tilesim).

Installed, the two are tilesim's subpackages. In a checkout they sit beside tilesim/; there a finder ahead of
every other maps exactly these two names to the checkout's directories, so that its own kernels and tiling are
tilesim's whether or not (and wherever) it is installed: an editable install of another checkout would otherwise
map them to that checkout's (the paired benches run two trees side by side), and a checkout on PYTHONPATH alone
would have none. Only these two: the checkout's root on tilesim's package path would also make its tilesim/,
bench/ and examples/ subpackages of tilesim, and a walk of tilesim's modules would import tilesim a second time
as ``tilesim.tilesim`` (its patches of Numba applied twice).
"""

from __future__ import annotations

import importlib.util
import sys
from importlib.machinery import ModuleSpec
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("kernels", "tiling")


class CheckoutFinder:
    """Finds ``tilesim.kernels`` and ``tilesim.tiling`` in the checkout's ``kernels/`` and ``tiling/`` (their
    modules then in those directories, through the packages' paths)."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> ModuleSpec | None:
        """The spec of ``tilesim.kernels`` or ``tilesim.tiling`` from the checkout; None for any other name."""
        package, _, child = name.partition(".")
        if package != __package__ or child not in PACKAGES:
            return None
        d = ROOT / child
        return importlib.util.spec_from_file_location(name, d / "__init__.py", submodule_search_locations=[str(d)])


if not (ROOT / "tilesim" / "kernels").is_dir() and all((ROOT / p / "__init__.py").is_file() for p in PACKAGES):
    sys.meta_path.insert(0, CheckoutFinder())
