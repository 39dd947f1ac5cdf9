# Two commands: `make run` starts a node on port 7711, `make test` runs the whole suite.
# Both install the server and the Python client (clients/python) into .venv.
# `make bench` runs the benchmark harness (python -m bench).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
ARGS ?=

.PHONY: run test lint bench install install-test install-bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

install: $(BIN)/python
	$(BIN)/pip install -q -e . -e clients/python

# the tests include disq_spark (spark/), which brings pyspark; `make run` does without
install-test: $(BIN)/python
	$(BIN)/pip install -q -e '.[test]' -e clients/python -e spark

install-bench: $(BIN)/python
	$(BIN)/pip install -q -e '.[bench]'

run: install
	$(BIN)/disq-server --port 7711 $(ARGS)

test: install-test
	$(BIN)/ruff check disq tests clients bench spark
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

lint: install-test
	$(BIN)/ruff check disq tests clients bench spark

# The benchmark harness (bench/, issue #7): `make bench ARGS="--scenario cycle"`.
bench: install-bench
	$(BIN)/python -m bench $(ARGS)

clean:
	rm -rf $(VENV) build *.egg-info clients/python/build clients/python/*.egg-info \
		spark/build spark/*.egg-info
