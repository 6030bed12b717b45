"""The Python on the site's pages and in the README runs as written.

Every fenced ``python`` block of ``docs/**/*.md`` and ``README.md`` runs, page by page: a page's blocks in order,
in one namespace of the page's own, in one interpreter for all pages whose working directory is a temporary one (a
block may write files) and whose path has the repository's root first (``examples`` imports, and the checkout's
tilesim). A block that raises
fails the page's test with the page, the block's line and the traceback. The conventions, for whoever writes a page:

- A block that only includes ``examples/`` (a ``--8<--`` snippet line) is not run here: the example is run, with
  its own tests, by ``tests/test_example_kernel.py``.
- ``<!-- docs-test: setup`` on a line of its own, Python, then ``-->``: code that runs before the next block, hidden
  on the site and on GitHub (an HTML comment). A page that calls an op on inputs another page made (``dy, x, rstd,
  gamma`` of Getting started) makes them there, small.
- ``<!-- docs-test: skip: <why> -->`` on the line before a block: the block is a fragment by intent (device code out
  of its kernel, a test body with ``...`` in it) and is not run; the reason is required.

Blocks of other languages (shell commands, printed output) are not run. A page runs its code as shown, so its shapes
are the ones a user would start from, not the largest the ops take: a token batch, not a training step's.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.no_launch_here  # the pages' code runs in a subprocess

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md"]
FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[^\s`]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.M | re.S)
SETUP = re.compile(r"^<!-- docs-test: setup[ \t]*\n(?P<code>.*?)^-->[ \t]*$", re.M | re.S)
SKIP = re.compile(r"^<!-- docs-test: skip: (?P<why>\S.*?) -->[ \t]*$", re.M)
SNIPPET = re.compile(r"^\s*-+8<-+\s")


def blocks(text: str) -> list[tuple[int, str]]:
    """The code a page runs: (line, source) of each Python block and setup comment in page order, without the
    skipped blocks and the snippet includes."""
    found: list[tuple[int, int, str]] = []  # (offset, line, source)
    for m in SETUP.finditer(text):
        found.append((m.start(), text.count("\n", 0, m.start()) + 2, m["code"]))
    skipped_before = {text.find("\n", m.end()) + 1 for m in SKIP.finditer(text)}
    for m in FENCE.finditer(text):
        if m["lang"] not in ("python", "py") or m.start() in skipped_before or SNIPPET.match(m["body"]):
            continue
        indent = len(m["indent"])
        body = "".join(line[indent:] for line in m["body"].splitlines(keepends=True))
        found.append((m.start(), text.count("\n", 0, m.start()) + 2, body))
    return [(line, code) for _, line, code in sorted(found)]


def _page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


# The child runs every page, each in a namespace of its own, in one interpreter (tilesim and torch imported once),
# and prints a JSON line: per page, None or the error of the block that raised. Each block is compiled under the
# page's path with its own line numbers, so that a traceback names the page and shows its lines.
RUNNER = """
import json, sys, traceback
pages, result = eval(sys.stdin.read()), {}
for page, blocks in pages:
    namespace = {"__name__": "__main__"}
    result[page] = None
    for line, code in blocks:
        try:
            exec(compile("\\n" * (line - 1) + code, page, "exec"), namespace)
        except BaseException:
            result[page] = f"the block at line {line} raised:\\n" + traceback.format_exc()
            break
print("DOCS-RESULT " + json.dumps(result))
"""


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str | None]:
    """Every page's code, run once for the module: per page (its path), None or what raised."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(ROOT)
    env["MPLBACKEND"] = "Agg"
    pages = [(str(p), blocks(p.read_text())) for p in PAGES]
    done = subprocess.run([sys.executable, "-c", RUNNER], input=repr([pg for pg in pages if pg[1]]),
                          cwd=tmp_path_factory.mktemp("docs-code"), env=env, capture_output=True, text=True,
                          timeout=1800)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("DOCS-RESULT ")]
    assert done.returncode == 0 and lines, done.stderr[-6000:]
    return json.loads(lines[-1].removeprefix("DOCS-RESULT "))


def test_conventions_are_read_as_written() -> None:
    """A setup comment runs before the next block, a skipped block and a snippet include do not run, and a skip
    without a reason is no skip."""
    page = ("text\n<!-- docs-test: setup\nx = 1\n-->\n\n```python\nprint(x)\n```\n\n"
            "<!-- docs-test: skip: a fragment -->\n```python\nasc.add(z, x, y, n)\n```\n\n"
            "```python\n--8<-- \"examples/add_tail.py:op\"\n```\n\n```\n$ tilesim ops\n```\n\n"
            "<!-- docs-test: skip: -->\n```python\ny = 2\n```\n\n  ```python\n  z = 3\n  ```\n")
    assert blocks(page) == [(3, "x = 1\n"), (7, "print(x)\n"), (25, "y = 2\n"), (29, "z = 3\n")]


def test_every_skip_says_why_and_precedes_a_block() -> None:
    for page in PAGES:
        text = page.read_text()
        for m in re.finditer(r"<!-- docs-test:.*", text):
            assert SETUP.match(text, m.start()) or SKIP.match(text, m.start()), \
                f"{_page_id(page)}: {m.group(0)!r} is neither a setup nor a skip with its reason"
        for m in SKIP.finditer(text):
            assert text[m.end() + 1:].startswith("```python"), f"{_page_id(page)}: a skip not before a block"


@pytest.mark.parametrize("page", [p for p in PAGES if blocks(p.read_text())], ids=_page_id)
def test_page_code_runs(page: Path, ran: dict[str, str | None]) -> None:
    assert ran[str(page)] is None, f"{_page_id(page)}: {ran[str(page)]}"
