# Two commands for a newcomer: `make study` (set up, run a small study with its report) and
# `make test` (set up, run the tests). Both create ./.venv on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# A CPU build of torch by default. GPU users: make setup TORCH="torch" (PyPI's Linux wheel is the
# CUDA build) or the wheel for their CUDA version; see README "Installing".
TORCH ?= torch==2.13.0
STUDY_OUT ?= runs/exor-small

.PHONY: setup test test-long study docs clean
setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet "$(TORCH)"
	$(BIN)/pip install --quiet -e '.[dev,text]'
	touch $@

# The tests also need the optional integrations (the `test` extra: huggingface_hub, transformers,
# tensorboard), so that only GPU tests skip; the torch installed above stays (pip keeps a
# dependency that is already satisfied).
$(VENV)/.installed-test: $(VENV)/.installed
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

# On every core (pytest-xdist; an idle worker takes tests from a busy one); the
# tests marked `long` (whole runs or studies killed, resumed, raced or launched two ways to
# compare them) run in `make test-long`; CI runs both.
test: $(VENV)/.installed-test
	$(BIN)/pytest -q -n auto --dist worksteal -m "not long"

test-long: $(VENV)/.installed-test
	$(BIN)/pytest -q -n auto --dist worksteal -m long

# The documentation site, offline, into build/site (git-ignored); --strict fails on a broken
# link or a missing reference. Its packages come with the `test` extra (the `docs` extra).
docs: $(VENV)/.installed-test
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

study: setup
	$(BIN)/dhwt study experiments/exor_small.toml --out $(STUDY_OUT) --overwrite

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
