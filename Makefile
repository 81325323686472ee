# dybw — `make help` lists the targets.
PYTHON ?= python
# Offline copies of the datasets beside the checkout (this workplace, CI); elsewhere dybw reads ./data
# and downloads what is missing.
ifneq ($(wildcard ../shared/data),)
export DYBW_DATA_DIR ?= $(abspath ../shared/data)
endif
INSTALLED := .make/installed

.PHONY: help install test test-fast run smoke bench bench-mpi report clean

help:  ## show this help
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  %-12s %s\n", $$1, $$2}'

install: $(INSTALLED)  ## install dybw and its test tools with pip (editable; once per pyproject change)

$(INSTALLED): pyproject.toml
	$(PYTHON) -m pip install -e ".[test]"
	@mkdir -p $(dir $@) && touch $@

test: $(INSTALLED)  ## run the whole test suite (needs the datasets: DYBW_DATA_DIR, default ../shared/data)
	$(PYTHON) -m pytest -q

test-fast: $(INSTALLED)  ## the tests that need no real dataset run
	$(PYTHON) -m pytest -q -m "not slow"

run: $(INSTALLED)  ## the README's main job: cb-DyBW and cb-Full on MNIST
	$(PYTHON) run.py -m algo=cb_dybw,cb_full dataset=mnist

smoke: $(INSTALLED)  ## a seconds-long run on the synthetic task
	$(PYTHON) run.py experiment=smoke

bench: $(INSTALLED)  ## engine vs bare TF step; time per iteration vs N
	$(PYTHON) bench/bench_engine.py

bench-mpi: $(INSTALLED)  ## MPI exchange vs bare mpi4py; runner=mpi vs runner=local end to end (~3 min)
	$(PYTHON) bench/bench_mpi.py
	$(PYTHON) bench/bench_step_layout.py

report: $(INSTALLED)  ## W&B report of an experiment (EXPERIMENT=name, default the latest); offline: what it would create
	$(PYTHON) -m dybw.report $(if $(EXPERIMENT),--experiment $(EXPERIMENT))

.PHONY: figures figures-quick
figures: $(INSTALLED)  ## run what experiments/*.yaml need (finished jobs reused), draw paper_figures/ + REPRODUCTION.md (ONLY=spec)
	$(PYTHON) -m dybw.figures $(if $(ONLY),--only $(ONLY))

figures-quick: $(INSTALLED)  ## the same pipeline at tiny sizes (synthetic data, ~2 min), into results/quick_figures/
	$(PYTHON) -m dybw.figures --quick $(if $(ONLY),--only $(ONLY))

clean:  ## remove run outputs
	rm -rf results/ multirun/ outputs/ .make/
