# A newcomer needs two commands: `make demo` and `make test`. Both create .venv when it is missing.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test bench lint clean docs

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e ".[test]"
	touch $@ $(VENV)/.installed

$(VENV)/.installed-docs: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e ".[docs]"
	touch $@ $(VENV)/.installed

demo: $(VENV)/.installed
	$(BIN)/python -m bench.demo

# One pytest worker per core (pytest-xdist, at most 4: each holds its own inputs): the workers compile different
# kernels into the shared Numba cache side by side, which on a cold cache is most of the suite's time. A file's
# tests go to one worker (they share kernels), so that two workers seldom compile the same kernel.
XDIST := -n auto --maxprocesses 4 --dist loadfile

# The checked pass leaves out the tests marked no_launch_here (tests/conftest.py): they launch nothing in pytest's
# process, so forcing checked mode changes nothing they run.
test: $(VENV)/.installed-test docs  # the site too: a broken reference in a docstring or a page fails the run
	$(BIN)/python -m ruff check tilesim tiling kernels tests bench examples
	$(BIN)/python -m pytest -q $(XDIST)
	$(BIN)/python -m pytest -q $(XDIST) --tilesim-checks  # again, every launch checked: no false reports

# The documentation site (mkdocs.yml, docs/): the API pages from the docstrings, the guides in Markdown with code
# included from examples/; --strict: a warning (a broken link, snippet or API object) fails the build.
docs: $(VENV)/.installed-docs
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict --site-dir site

bench: $(VENV)/.installed-test
	$(BIN)/python -m pytest bench -q --benchmark-enable --benchmark-columns=median,mean,stddev,rounds

clean:
	rm -rf $(VENV) .pytest_cache .benchmarks
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
