# The two commands of the README start from nothing but this repository.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test test-all lint clean host-compiler cross-tools arm-boards

$(BIN)/activate:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip

$(VENV)/.installed-base: pyproject.toml | $(BIN)/activate
	$(BIN)/pip install -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/activate
	$(BIN)/pip install -e '.[test]'
	touch $@ $(VENV)/.installed-base $(VENV)/.installed-examples

$(VENV)/.installed-examples: pyproject.toml | $(BIN)/activate
	$(BIN)/pip install -e '.[examples]'
	touch $@ $(VENV)/.installed-base

# Compiles the pretrained EfficientNet-Lite0 of examples/classify and the built-in
# ResNet-18 (NHWC), runs them, classifies the example's photo, then tunes a small
# MobileNet briefly and times it untuned and tuned; artifacts in build/demo.
demo: $(VENV)/.installed-examples host-compiler
	$(BIN)/python -m ember.testing.demo

# On x86-64 Ember compiles native code with clang 19 or newer where it is installed with
# its OpenMP runtime: it compiles kernels in about 0.6 of GCC's time, which is most of a
# tuning run (ember/toolchain.py, PREFERRED_CLANG). Installed when none is there and we
# can (root with apt-get; never removing a package); otherwise Ember uses gcc.
HOST_COMPILER_PACKAGES := clang-19 libomp-19-dev
host-compiler: $(VENV)/.installed-base
	@if [ "$$(uname -m)" = x86_64 ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null \
	    && ! $(BIN)/python -c 'import sys, ember.toolchain as t; sys.exit(t.preferred_clang() is None)'; then \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	    apt-get install -y -qq --no-remove $(HOST_COMPILER_PACKAGES)) >/dev/null 2>&1 || true; \
	fi

# The aarch64 and 32-bit ARM tests cross-compile kernels and run them under qemu. Install the tools
# when we can (root with apt-get); otherwise those tests skip and say why.
CROSS_PACKAGES := gcc-aarch64-linux-gnu libc6-dev-arm64-cross gcc-arm-linux-gnueabihf \
  libc6-dev-armhf-cross qemu-user
cross-tools: host-compiler
	@if ! command -v aarch64-linux-gnu-gcc >/dev/null || ! command -v arm-linux-gnueabihf-gcc >/dev/null \
	    || ! command -v qemu-aarch64 >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	      apt-get install -y -qq $(CROSS_PACKAGES)) >/dev/null 2>&1 || true; \
	  fi; \
	fi

# Emulated ARM boards (ember/testing/arm_board.py): Debian's arm64 and armhf Pythons run
# under qemu-aarch64 / qemu-arm. Set up when we can (root with apt); otherwise those tests
# skip and say why.
arm-boards: $(VENV)/.installed-base cross-tools
	@if [ "$$(id -u)" = 0 ]; then \
	  for arch in arm64 armhf; do \
	    $(BIN)/python -m ember.testing.arm_board --setup --arch $$arch >/dev/null 2>&1 || true; \
	  done; \
	fi

test: $(VENV)/.installed-test host-compiler cross-tools arm-boards
	$(BIN)/python -m pytest -q

test-all: $(VENV)/.installed-test host-compiler cross-tools arm-boards
	HYPOTHESIS_PROFILE=explore $(BIN)/python -m pytest -q -m ''

lint: $(VENV)/.installed-test
	$(BIN)/ruff check ember tests examples
	$(BIN)/ruff format --check ember tests examples
	$(BIN)/mypy

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
