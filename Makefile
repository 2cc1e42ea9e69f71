# make test: everything a fresh Debian machine needs, then ruff, mypy and pytest.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
ZK_JAR := /usr/share/java/zookeeper.jar
APT    := DEBIAN_FRONTEND=noninteractive apt-get install -y -q

.PHONY: test lint typecheck unit demo bench compose-check system-deps clean

$(STAMP): pyproject.toml
	@# Debian's python3 needs python3-venv (ensurepip) before it can make a venv
	@$(PYTHON) -c 'import ensurepip' 2>/dev/null || \
	  (apt-get update -q && $(APT) python3-venv)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

# Servers the tests start themselves: ZooKeeper (and a JRE), Redis; Chromium for the dashboard test.
system-deps:
	@missing=""; \
	[ -f $(ZK_JAR) ] || missing="$$missing zookeeper"; \
	command -v redis-server >/dev/null || missing="$$missing redis-server"; \
	[ -x /usr/bin/chromium ] || missing="$$missing chromium"; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  apt-get update -q && $(APT) $$missing; \
	fi

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check netdisco monitor

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP) system-deps
	$(BIN)/pytest

test: lint typecheck unit

# A live cluster on loopback, narrated: ZooKeeper, a demo site, an SMTP sink, three
# engines and the monitor; a graceful leave, a crash, the alert e-mail (about 15 s).
demo: $(STAMP) system-deps
	$(BIN)/netdisco demo

# The crawl benchmark beside Scrapy and the bare aiohttp loop (about 10 minutes).
bench: $(STAMP)
	bench/run.sh

# The compose stack for real, as root on Debian (not part of `make test`): installs
# docker.io, docker-compose and debootstrap if missing, builds every image locally, runs
# the stack on loopback, kills an engine, checks the alert and the crawl (compose/README.md).
compose-check: $(STAMP)
	$(BIN)/python compose/check.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
