# The README's two commands are `make demo` (main job) and `make test` (test suite).
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TORCH_CPU := torch==2.13.0

.PHONY: setup test test-fast gpu-check demo bench compare lint format clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# Installs the CPU torch wheel first when no torch is present, so that the loose `torch>=2.4`
# range does not pull a multi-GB CUDA build; GPU users keep the torch they already have.
$(VENV)/.installed: $(BIN)/python pyproject.toml
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install -q $(TORCH_CPU)
	$(BIN)/python -m pip install -q -e ".[dev]"
	$(BIN)/python -m pip install -q --no-deps "verl==0.9.1"
	touch $@

setup: $(VENV)/.installed

test: setup
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q

# The edit loop: every test not marked slow.
test-fast: setup
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q -m "not slow"

# On a CUDA machine: the gpu-marked tests (CUDA graphs, bf16 on CUDA) and the benchmark, as JSON.
gpu-check: setup
	mkdir -p runs/gpu-check
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q -m gpu --junitxml=runs/gpu-check/pytest.xml
	$(BIN)/bandpo bench --json runs/gpu-check/bench.json

demo: setup
	HF_HUB_OFFLINE=1 $(BIN)/bandpo demo

bench: setup
	$(BIN)/bandpo bench --json runs/bench.json

compare: setup
	$(BIN)/bandpo compare --config configs/compare-tiny.yaml

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: setup
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean:
	rm -rf $(VENV) build dist *.egg-info src/*.egg-info .pytest_cache .ruff_cache
