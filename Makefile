# The two commands of the README start from nothing but this repository.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test test-all lint clean

$(BIN)/activate:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip

$(VENV)/.installed-base: pyproject.toml | $(BIN)/activate
	$(BIN)/pip install -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/activate
	$(BIN)/pip install -e '.[test]'
	touch $@ $(VENV)/.installed-base

demo: $(VENV)/.installed-base
	$(BIN)/ember info resnet-18
	$(BIN)/python -m ember.testing.demo

test: $(VENV)/.installed-test
	$(BIN)/python -m pytest -q

test-all: $(VENV)/.installed-test
	$(BIN)/python -m pytest -q -m ''

lint: $(VENV)/.installed-test
	$(BIN)/ruff check ember tests
	$(BIN)/ruff format --check ember tests
	$(BIN)/mypy

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
