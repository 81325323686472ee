# dybw — `make help` lists the targets.
#
# Every target runs in a project virtualenv, .venv/, made on first use with `python3 -m venv` (no
# system site-packages: what the tests import must be declared in pyproject.toml).  To use an
# environment of your own instead: make <target> PYTHON=/path/to/python
VENV ?= .venv
PYTHON ?= $(VENV)/bin/python
# One install marker per interpreter, redone when pyproject.toml changes.
INSTALLED := .make/installed$(subst /,_,$(abspath $(PYTHON)))
OWN_VENV := $(filter $(VENV)/bin/python,$(PYTHON))

.PHONY: help install data test test-fast lint format run smoke bench bench-mpi bench-drift report figures figures-quick real-network clean

help:  ## show this help
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  %-14s %s\n", $$1, $$2}'

$(VENV)/bin/python:
	python3 -m venv $(VENV)

install: $(INSTALLED)  ## make .venv/ and pip install -e ".[test]" into it (again when pyproject.toml changes)

$(INSTALLED): pyproject.toml | $(OWN_VENV)
	$(PYTHON) -m pip install -e ".[test]"
	@mkdir -p $(dir $@) && touch $@

data:  ## link ./data to an offline copy of the datasets (DYBW_DATA_DIR, else ../shared/data) if there is one
	@if [ -e data ] || [ -L data ]; then echo "data: ./data is there ($$(readlink -f data))"; \
	elif [ -n "$$DYBW_DATA_DIR" ] && [ -d "$$DYBW_DATA_DIR" ]; then ln -s "$$(readlink -f "$$DYBW_DATA_DIR")" data && echo "data: ./data -> $$DYBW_DATA_DIR"; \
	elif [ -d ../shared/data ]; then ln -s "$$(readlink -f ../shared/data)" data && echo "data: ./data -> ../shared/data"; \
	else echo "data: no offline copy; dybw downloads into ./data on first use"; fi

# The tiers after `unit` on this many pytest-xdist workers (tests/conftest.py keeps the tests that share a
# Slurm, the emulated hosts or a costly fixture on one worker, longest first).  4 on 2 cores: the Slurm tests
# spend most of their 14 minutes waiting on Slurm's minute-resolution time limits, and many others wait on
# slept delays, so more workers than cores keep both cores busy (bench/cpu_per_test.py); five were slower
# than four (docs/results.md).  1: one process.
TEST_WORKERS ?= 4

test: $(INSTALLED) data  ## every tier: unit first (half a minute, on both cores), then the rest on TEST_WORKERS workers, naming the 25 slowest
	$(PYTHON) -m pytest -q -m unit $(if $(filter-out 1,$(TEST_WORKERS)),-n 2)
	$(PYTHON) -m pytest -q -m "not unit" --durations=25 $(if $(filter-out 1,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadgroup)

lint: $(INSTALLED)  ## ruff: lint and format check (make format rewrites the files)
	$(PYTHON) -m ruff check .
	$(PYTHON) -m ruff format --check .

format: $(INSTALLED)  ## ruff: fix what can be fixed, then format
	$(PYTHON) -m ruff check --fix .
	$(PYTHON) -m ruff format .

test-fast: $(INSTALLED) data  ## the unit tier: no TensorFlow, MPI or subprocess (make test runs every tier)
	$(PYTHON) -m pytest -q -m unit

run: $(INSTALLED) data  ## the README's main job: cb-DyBW and cb-Full on MNIST
	$(PYTHON) run.py -m algo=cb_dybw,cb_full dataset=mnist

smoke: $(INSTALLED)  ## a seconds-long run on the synthetic task
	$(PYTHON) run.py experiment=smoke

bench: $(INSTALLED) data  ## engine vs bare TF step; time per iteration vs N
	$(PYTHON) bench/bench_engine.py

bench-mpi: $(INSTALLED) data  ## MPI exchange vs bare mpi4py; runner=mpi vs runner=local end to end (~3 min)
	$(PYTHON) bench/bench_mpi.py
	$(PYTHON) bench/bench_step_layout.py

bench-drift: $(INSTALLED) data  ## where CPU drift enters, pinned vs unpinned (~15 min; PART=spread: hours)
	$(PYTHON) bench/bench_cpu_drift.py --part $(or $(PART),sources)

report: $(INSTALLED)  ## W&B report of an experiment (EXPERIMENT=name, default the latest training one); offline: what it would create
	$(PYTHON) -m dybw.report $(if $(EXPERIMENT),--experiment $(EXPERIMENT))

figures: $(INSTALLED) data  ## run what experiments/*.yaml need (finished jobs reused), draw paper_figures/ + REPRODUCTION.md (ONLY=spec, JOBS=n)
	$(PYTHON) -m dybw.figures $(if $(ONLY),--only $(ONLY)) $(if $(JOBS),--jobs $(JOBS))

figures-quick: $(INSTALLED)  ## the same pipeline at tiny sizes (synthetic data), into results/quick_figures/
	$(PYTHON) -m dybw.figures --quick $(if $(ONLY),--only $(ONLY)) $(if $(JOBS),--jobs $(JOBS))

# The links of make real-network: host=rate each (tc tbf rates); h3 is the slow host.
LINKS ?= h1=20mbit h2=20mbit h3=4mbit
HOSTS := tests/cluster/hosts.sh

real-network: $(INSTALLED) data  ## C2 on shaped TCP links (root): 3 emulated hosts, LINKS shaped, experiments/real_network.yaml (6 min)
	@ip netns list 2>/dev/null | grep -q '^dybw-h' || $(HOSTS) up 3
	@for link in $(LINKS); do $(HOSTS) shape $${link%%=*} $${link#*=}; done
	@mkdir -p results/$(if $(QUICK),quick_)real_network
	$(HOSTS) status | sed 's/: out.*limit/: limit/' >results/$(if $(QUICK),quick_)real_network/links.txt
	$(PYTHON) -m dybw.figures $(if $(QUICK),--quick) --only real_network; \
	status=$$?; for link in $(LINKS); do $(HOSTS) shape $${link%%=*} none; done; exit $$status

clean:  ## remove run outputs (not .venv/ or ./data)
	rm -rf results/ multirun/ outputs/ .make/
