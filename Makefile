# imagekit: two set-up commands for a fresh machine (run as root):
#   make rehearsal   the main job on the embedded default: the local stand-in rehearsal
#   make test        lint (ruff, mypy), then the test suite, starting every service it needs
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= python3
VENV := .venv
IK := $(VENV)/bin/imagekit
PY := $(VENV)/bin/python
PROFILE ?= local
# test worker processes: most of the suite waits on Pods, builds and engines, not on CPU
TEST_WORKERS ?= 3
export IMAGEKIT_EVIDENCE_DIR ?= $(CURDIR)/.evidence

.PHONY: venv venv-run infra rehearsal test test-unit lint images verify bench gpu-preflight clean-venv \
	schemas docs

# what imagekit itself runs on (the rehearsal, images, verify): no torch, no test tools
$(VENV)/.stamp-run: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e ".[infra,media]"
	touch $@

# the tests and linters on top of it
$(VENV)/.stamp: $(VENV)/.stamp-run
	# torch: the machine's CPU wheel (pip takes it from the local disk); never a hard dependency
	$(VENV)/bin/pip install -q "torch==2.13.0" || $(VENV)/bin/pip install -q torch
	$(VENV)/bin/pip install -q -e ".[infra,media,test]"
	touch $@

venv: $(VENV)/.stamp

venv-run: $(VENV)/.stamp-run

infra: venv
	$(IK) infra up --cluster

# infra up --cluster, stand-ins, images verify, promote staging -> production -> target,
# cluster probe of the promoted digest, reports (rehearsal-reports/<UTC>/index.md)
rehearsal: venv-run
	$(IK) rehearsal --profile $(PROFILE) $(if $(LAYERS),--layers $(LAYERS))

images: venv-run
	$(IK) infra up --no-cluster
	$(IK) standins build
	$(IK) build --all-images --profile $(PROFILE) --push

verify: venv-run
	$(IK) images verify --profile $(PROFILE)

# ruff (pyproject [tool.ruff]) and mypy (pyproject [tool.mypy]) with 0 findings; a finding
# fails `make test` before any test runs. mypy cold (a fresh clone, no .mypy_cache) is ~12 s CPU.
lint: venv
	$(PY) -m ruff check imagekit gpu_checks/preflight probes manifests
	$(PY) -m mypy

test: venv lint
	$(IK) infra up --cluster
	$(PY) -m pytest -q --durations=30 -n $(TEST_WORKERS) --dist loadfile -m "not serial" tests
	$(PY) -m pytest -q --durations=10 -m serial tests

test-unit: venv
	$(PY) -m pytest -q tests -m "not docker and not registry and not cluster and not gpu and not engine and not checker"

schemas: venv
	$(IK) schemas export imagekit/schemas

# docs/commands.md, written from the CLI (tests/unit/test_cli_surface.py fails when it is stale)
docs: venv
	$(IK) docs-commands > docs/commands.md

bench: venv
	$(IK) infra up --no-cluster
	mkdir -p bench/results
	for script in bench/bench_*.py; do $(PY) $$script --out bench/results || exit 1; done
	$(PY) bench/summary.py bench/results

gpu-preflight:
	PYTHONPATH=$(CURDIR)/gpu_checks$${PYTHONPATH:+:$$PYTHONPATH} $(PYTHON) -m torch.distributed.run --standalone --nproc-per-node $${NPROC:-1} -m preflight --json $${OUT:-.}/preflight.json $${PREFLIGHT_ARGS:-}

clean-venv:
	rm -rf $(VENV)
