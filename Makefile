# forestcoll: two entry points on a fresh machine (only Python >= 3.11 needed).
#   make demo   set up .venv, generate + verify an optimal allreduce for a 2x8 DGX-A100, export it to an MSCCL++ plan, run that
#   make test   set up .venv with the test, torch and jit extras, run the whole test suite (~9 min on 2 idle cores)
#   make check  the fast tier for the edit loop: the suite without the tests marked slow (~300 CPU-s: ~2.5 min on 2 cores)

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
OUT    := out

.PHONY: demo test check bench lint clean

# the package's bytecode, compiled once per change of a source: an editable install does not precompile, and with
# PYTHONDONTWRITEBYTECODE=1 (set on our machines) Python would compile every module it loads at every start
# (~0.07-0.1 s of each `forestcoll` process).  Python checks each .pyc against its source's mtime and size, so an
# edited module is compiled afresh (slower, never stale) until the next make.
SOURCES := $(shell find src -name '*.py' 2>/dev/null)

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "forestcoll needs Python >= 3.11 (set PYTHON=...)")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.base: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e .
	@touch $@

# torch: the CPU build 2.13.0 (on disk on our machines; pinned so pip never picks a CUDA build)
TORCH ?= torch==2.13.0

$(VENV)/.test: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q "$(TORCH)"
	$(BIN)/python -m pip install -q -e ".[test,torch,jit]"
	@touch $@ $(VENV)/.base

$(VENV)/.pyc: $(SOURCES) | $(BIN)/python
	$(BIN)/python -m compileall -q src
	@touch $@

demo: $(VENV)/.base $(VENV)/.pyc
	@mkdir -p $(OUT)
	$(BIN)/forestcoll bound dgx-a100:nodes=2
	$(BIN)/forestcoll generate dgx-a100:nodes=2 --collective allreduce -o $(OUT)/dgx-a100x2-allreduce.json
	$(BIN)/forestcoll verify $(OUT)/dgx-a100x2-allreduce.json
	$(BIN)/forestcoll export $(OUT)/dgx-a100x2-allreduce.json --format mscclpp -o $(OUT)/dgx-a100x2-allreduce.plan.json
	$(BIN)/forestcoll mscclpp run $(OUT)/dgx-a100x2-allreduce.plan.json
	$(BIN)/forestcoll simulate $(OUT)/dgx-a100x2-allreduce.plan.json -t dgx-a100:nodes=2 --size 1040MiB --trees $(OUT)/dgx-a100x2-allreduce.json

# two workers (pytest-xdist): the suite is CPU-bound and CI has 2 cores (each README/docs section is one
# test in tests/test_docs.py, so its blocks stay in order on one worker)
test: $(VENV)/.test $(VENV)/.pyc
	@echo "make test: the whole suite and every README/docs block, about 10 minutes on 2 idle cores (make check: the fast tier, about 2.5 minutes)"
	$(BIN)/python -m pytest -n 2

check: $(VENV)/.test $(VENV)/.pyc
	$(BIN)/python -m pytest -n 2 -m "not slow"

bench: $(VENV)/.base $(VENV)/.pyc
	$(BIN)/python benchmarks/generate.py
	$(BIN)/python benchmarks/maxflow_backends.py
	$(BIN)/python benchmarks/msccl.py
	$(BIN)/python benchmarks/simulate.py

lint: $(VENV)/.test
	$(BIN)/python -m pip install -q ruff
	$(BIN)/ruff check src tests benchmarks

clean:
	rm -rf $(VENV) $(OUT) .pytest_cache .hypothesis
	find src tests benchmarks -name __pycache__ -prune -exec rm -rf {} +
