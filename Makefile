# Two commands: `make run` starts a node on port 7711, `make test` runs the whole suite.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
ARGS ?=

.PHONY: run test lint install install-test clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

install: $(BIN)/python
	$(BIN)/pip install -q -e .

install-test: $(BIN)/python
	$(BIN)/pip install -q -e '.[test]'

run: install
	$(BIN)/disq-server --port 7711 $(ARGS)

test: install-test
	$(BIN)/ruff check disq tests
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

lint: install-test
	$(BIN)/ruff check disq tests

clean:
	rm -rf $(VENV) build *.egg-info
