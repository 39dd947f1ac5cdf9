# Two commands: `make run` starts a node on port 7711, `make test` runs the whole suite.
# Both install the server and the Python client (clients/python) into .venv, once: again
# only when a pyproject.toml or setup.py changes. pip installs them as Python only
# (DISQ_NO_EXTENSIONS=1: quick); the C extensions and the modules mypyc compiles
# (setup.py's NATIVE) are built in place apart, once (`make compiled`, setup.py's
# build_in_place), and again when one of their sources changes: `make run` starts its
# node at once and builds them in the background (nice'd, .venv/compile.log) for the next
# start; `make test` waits for that build, or runs it, and never compiles again what
# `make run` built (the stamp files in .venv say what was installed and built). A node
# whose compiled modules are absent or older than their .py files runs the .py files
# (disq/__init__.py); DISQ_PURE_PYTHON=1 makes it run them anyway, and makes `make`
# build only the C extensions.
# `make bench` runs the benchmark harness (python -m bench), `make bench-disque` compares
# with antirez's Disque.
# `make faults` runs a long Jepsen-style fault run (docs/FAULTS.md).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
DATA := data
ARGS ?=
# setuptools tells, on every editable install of a package that sits at the top of its
# project (disq/, disq_client/), that a folder of the same name in the working directory
# may shadow it: here that folder is the package itself, so the note is only noise.
PIP_INSTALL := PYTHONWARNINGS="ignore:Editable installation" DISQ_NO_EXTENSIONS=1 \
	$(BIN)/pip install -q
# what `make compiled` builds from: setup.py and the C and Python sources it compiles
BUILT_FROM := pyproject.toml setup.py disq/_gcfree.c disq/_msgcost.c disq/_bustag.c $(shell sed -n 's/^ *"\(disq\/.*\.py\)",$$/\1/p' setup.py)
PURE_PYTHON := $(filter-out 0,$(DISQ_PURE_PYTHON))
COMPILED := $(VENV)/.compiled$(if $(PURE_PYTHON),-c-only)
# what setup.py needs to build (pip's isolated build environment has them for its own)
BUILD_REQUIRES := $(shell $(PYTHON) -c 'import tomllib; print(" ".join(repr(r) for r in \
	tomllib.load(open("pyproject.toml", "rb"))["build-system"]["requires"]))')

.PHONY: run test lint bench bench-disque faults install install-test install-bench compiled \
	chromium redis-tools clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.installed: $(BIN)/python pyproject.toml setup.py clients/python/pyproject.toml
	$(PIP_INSTALL) -e . -e clients/python
	touch $@

# the tests include disq_spark (spark/), which brings pyspark; `make run` does without.
# This installs everything `install` does, so it leaves that stamp too.
$(VENV)/.installed-test: $(BIN)/python pyproject.toml setup.py \
		clients/python/pyproject.toml spark/pyproject.toml
	$(PIP_INSTALL) -e '.[test]' -e clients/python -e spark
	touch $@ $(VENV)/.installed

$(VENV)/.installed-bench: $(BIN)/python pyproject.toml setup.py clients/python/pyproject.toml
	$(PIP_INSTALL) -e '.[bench]' -e clients/python
	touch $@

# One build at a time (flock): `make test` waits for the one `make run` left in the
# background, then finds it done. The stamp takes the build's start time, so a source
# edited during the build is newer and builds again.
compiled: | $(BIN)/python
	@flock $(VENV)/.compiling $(MAKE) --no-print-directory $(COMPILED)

$(COMPILED): $(BUILT_FROM) | $(BIN)/python
	touch $@.started
	$(PIP_INSTALL) $(BUILD_REQUIRES)
	$(BIN)/python setup.py -q build_in_place
	mv $@.started $@

# The dashboard's browser tests (tests/browser) drive Debian's Chromium with Playwright.
# Where it is missing and this runs as root (a fresh CI machine), apt-get installs it;
# if that fails, so does `make test`. Elsewhere, without it, those tests are skipped.
CHROMIUM ?= /usr/bin/chromium
chromium:
	@if [ ! -x "$(CHROMIUM)" ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "Installing Chromium for the browser tests (apt-get install chromium)..."; \
		apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive \
			apt-get install -y -qq chromium >/dev/null; \
	fi

# bench/scale_out.py (and its test) drives the nodes with redis-benchmark: installed the
# same way (Debian's redis-tools) where it is missing; elsewhere that test is skipped.
redis-tools:
	@if ! command -v redis-benchmark >/dev/null && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "Installing redis-benchmark for the benchmark's test (apt-get install redis-tools)..."; \
		apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive \
			apt-get install -y -qq redis-tools >/dev/null; \
	fi

install: $(VENV)/.installed compiled
install-test: $(VENV)/.installed-test compiled
install-bench: $(VENV)/.installed-bench compiled

# The node keeps its files (nodes.conf, the AOF if turned on) in data/, not in the checkout;
# its HTTP API, docs and dashboard are on http://127.0.0.1:7780/.
# (SUBMAKE: make -n would run a line naming $$(MAKE), and start the build)
SUBMAKE = $(MAKE)
# The first time it starts the node on the .py files and builds the compiled ones beside it
# (a minute or two on 2 cores, `nice`d): the next start runs them.
run: $(VENV)/.installed
	mkdir -p $(DATA)
	@if ! $(SUBMAKE) --no-print-directory -q $(COMPILED) 2>/dev/null; then \
		echo "Building the compiled hot path in the background for the next start" \
			"(.venv/compile.log); this node runs the .py files."; \
		nice -n 19 $(SUBMAKE) --no-print-directory compiled >$(VENV)/compile.log 2>&1 & \
	fi
	$(BIN)/disq-server --port 7711 --http-port 7780 --dir $(DATA) $(ARGS)

# The suite runs in TEST_WORKERS processes (pytest-xdist), a test file's tests in one of
# them (their module fixtures start nodes or Spark once); TEST_WORKERS=0 runs it serially.
# Twice the cores, at most 8: the tests mostly wait on real nodes' timers and sockets (two
# workers kept 2 cores about half busy; four took 57% of the time for the same CPU).
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); w=$$((n * 2)); \
	[ $$w -gt 8 ] && w=8; echo $$w)
test: install-test chromium redis-tools
	$(BIN)/ruff check disq tests clients bench spark
	$(BIN)/mypy
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

lint: $(VENV)/.installed-test
	$(BIN)/ruff check disq tests clients bench spark
	$(BIN)/mypy

# A long fault run (tests/faults/jepsen.py): 5 nodes, kill -9 and partitions, then a
# check that no acknowledged job is lost: `make faults ARGS="--nemesis mixed --seed 7"`.
FAULT_ARGS ?= --nemesis mixed --seed 1 --duration 300
faults: install-test
	$(BIN)/python tests/faults/jepsen.py $(if $(ARGS),$(ARGS),$(FAULT_ARGS))

# The benchmark harness (bench/): `make bench ARGS="--scenario cycle"`.
bench: install-bench
	$(BIN)/python -m bench $(ARGS)

# disq beside antirez's Disque (bench/vs_disque.py): Disque 1.0-rc1 is cloned
# and built once outside the checkout, in ~/.cache/disq-bench/disque (DISQUE_SRC or
# DISQUE_BIN elsewhere; bench/disque.py says where to put the source on a machine that
# cannot fetch), then every case runs against both, alternated: `make bench-disque
# ARGS="--runs 3"`.
bench-disque: install-bench
	$(BIN)/python -m bench.vs_disque $(ARGS)

clean:
	rm -rf $(VENV) build *.egg-info clients/python/build clients/python/*.egg-info \
		spark/build spark/*.egg-info
