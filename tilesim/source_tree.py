"""kernels/ and tiling/ as tilesim.kernels and tilesim.tiling in a source checkout (imported first by tilesim).

Installed, the two are tilesim's subpackages. In a checkout they sit beside tilesim/; there the checkout's root
joins tilesim's package path, so that its own kernels and tiling are tilesim's whether or not (and wherever) it is
installed: an editable install of another checkout would otherwise map them to that checkout's (the paired
benches run two trees side by side), and a checkout on PYTHONPATH alone would have none.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

if not (ROOT / "tilesim" / "kernels").is_dir() and (ROOT / "kernels" / "__init__.py").is_file():
    sys.modules[__package__].__path__.append(str(ROOT))
