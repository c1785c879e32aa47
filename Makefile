# The two front-door commands are `make run` and `make test` (see README.md).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
export DELTA_DATA_ROOT ?= $(CURDIR)/data/delta
# Python keeps compiled modules (__pycache__, ignored by git): every process the suite starts (servers,
# `oreo` children) then loads Oreo's modules compiled instead of compiling them again (0.2-0.4 s each),
# also when the calling shell sets PYTHONDONTWRITEBYTECODE. (No PYTHONPYCACHEPREFIX: under one, Python
# ignores the modules pip compiled beside the installed sources.)
unexport PYTHONDONTWRITEBYTECODE
# Two test processes, one per core (pytest-xdist): a worker takes a whole unit at a time (the
# browser tier, the cluster tier, or one module; tests/conftest.py), in the suite's order.
WORKERS := -n 2 --dist loadgroup --no-loadscope-reorder

.PHONY: run test test-fast setup setup-test jars jars-s3a chromium postgres promtool demo lint typecheck bench bench-cluster docs clean

## run: install everything, seed the demo workspace, start the app on http://localhost:8501
## and the HTTP API on http://localhost:8600 (scripts/run.sh: the API stops when the app does)
run: setup jars demo
	BIN=$(BIN) scripts/run.sh

## test: install everything (test tools, Chromium, PostgreSQL), then run the whole suite
test: setup-test jars jars-s3a chromium postgres promtool
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/pytest -q --durations=25 $(WORKERS)

## test-fast: the inner loop: everything but the browser (e2e) and loopback-cluster tiers
test-fast: setup-test jars postgres promtool
	$(BIN)/pytest -q --durations=10 $(WORKERS) -m "not e2e and not cluster"

setup: $(VENV)/.runtime

$(VENV)/.runtime: requirements.txt pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info[:2] == (3, 11), "Oreo needs Python 3.11"'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements.txt
	$(BIN)/pip install --quiet --no-deps -e .
	touch $@

setup-test: $(VENV)/.test

$(VENV)/.test: $(VENV)/.runtime requirements-test.txt
	$(BIN)/pip install --quiet -r requirements-test.txt
	touch $@

## jars: resolve the Delta jars once and copy them into .venv/oreo-jars, so Spark starts offline
## (Ivy, falling back to mvn; a file lock lets two setups run at once; a no-op once the folder is complete),
## then dump the classes a Spark start loads into .venv/oreo-spark.jsa, which every later start maps
jars: setup
	$(BIN)/python scripts/fetch_jars.py
	$(BIN)/python scripts/jvm_archive.py

## jars-s3a: Hadoop's s3a jars (hadoop-aws 3.4.2 and the ~640 MB AWS SDK bundle) into .venv/oreo-s3a-jars,
## for DELTA_DATA_ROOT=s3://... (tests/test_storage_s3.py starts Spark on a moto bucket with them)
jars-s3a: setup
	$(BIN)/python scripts/fetch_jars.py --s3a

postgres:
	@scripts/install_postgres.sh

chromium:
	@test -x /usr/bin/chromium -a -x /usr/bin/chromium-headless-shell || scripts/install_chromium.sh

## promtool: Debian's promtool binary into .venv/bin, for the alert-rule tests (no Prometheus server)
promtool: setup
	@test -x $(BIN)/promtool || scripts/install_promtool.sh $(BIN)

demo: setup
	$(BIN)/oreo demo

lint: setup-test
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports

## bench: each workload beside the bare engine doing the same work (`make bench ARGS=--cluster`: see bench-cluster)
bench: setup-test jars chromium
	$(BIN)/python -m bench $(ARGS)

## bench-cluster: page read, edit save, small submit/approve and the 10,000-cell approval,
## embedded and then on the loopback cluster (scripts/cluster.sh), with cluster/embedded ratios
bench-cluster: setup-test jars postgres chromium
	$(BIN)/python -m bench --cluster $(ARGS)

## docs: serve the manual (docs/, mkdocs.yml) on http://127.0.0.1:8000, rebuilt as the pages change
## (make test builds it with `mkdocs build --strict`: tests/test_docs.py)
docs: setup-test
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve

clean:
	rm -rf data spark-warehouse bench/.data
