SHELL := /bin/bash
# make test: everything a fresh Debian machine needs, then ruff, mypy and pytest.
# The virtual environment is installed from requirements.lock (what was tested, exactly);
# pyproject.toml keeps the lower bounds a library needs. `make lock` renews the lock.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
LOCK   := requirements.lock
CHECKOUT_PTH := import pathlib, sysconfig; pathlib.Path(sysconfig.get_paths()["purelib"], \
	"netdisco-checkout.pth").write_text("$(CURDIR)\n")
# Every Python process of a suite's run (NDTEST_RUN) writes its asyncio tasks on SIGUSR1,
# for the hang witness (tests/taskdump.py); a line of a .pth that starts with import runs
TASKDUMP_PTH := import pathlib, sysconfig; pathlib.Path(sysconfig.get_paths()["purelib"], \
	"netdisco-taskdump.pth").write_text("import os; exec(\"try: import tests.taskdump\\nexcept ImportError: pass\") if os.environ.get(\"NDTEST_RUN\") else None\n")
ZK_JAR := /usr/share/java/zookeeper.jar
APT    := DEBIAN_FRONTEND=noninteractive apt-get install -y -q

.PHONY: test lint typecheck unit demo demo-keep bench compose-check cluster-check partitions \
	faults memory system-deps test-stress \
	clean lock test-newest test-lowest

$(STAMP): pyproject.toml $(LOCK)
	@# Debian's python3 needs python3-venv (ensurepip) before it can make a venv
	@$(PYTHON) -c 'import ensurepip' 2>/dev/null || \
	  (apt-get update -q && $(APT) python3-venv)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c $(LOCK) -e '.[test]'
	@# mypy cannot follow setuptools' editable import hook: a plain .pth names the checkout
	@# too, so that files outside it (netdisco new's spiders) type-check against this install
	$(BIN)/python -c '$(CHECKOUT_PTH)'
	$(BIN)/python -c '$(TASKDUMP_PTH)'
	touch $(STAMP)

# The lock anew: the newest releases pyproject.toml allows, every extra, for Python 3.11.
lock: $(STAMP)
	$(BIN)/uv pip compile pyproject.toml --all-extras --python-version 3.11 --upgrade -q -o $(LOCK)

# The suite on the newest releases pyproject.toml allows (no lock), in a venv of its own,
# upgraded on every run: a release that breaks users fails here the day it appears.
NEWEST := .venv-newest
# the releases that differ from the lock, by normalised name (PEP 503)
NEWER_THAN_LOCK := import re, sys; \
	pins = lambda path: {re.sub(r"[-_.]+", "-", n).lower(): v for n, _, v in \
	(line.strip().partition("==") for line in open(path)) if v and not n.startswith("\#")}; \
	lock, new = pins(sys.argv[1]), pins(sys.argv[2]); \
	[print(f"newer than the lock: {n} {lock[n]} -> {v}") for n, v in sorted(new.items()) \
	if lock.get(n, v) != v]
test-newest: system-deps
	@[ -x $(NEWEST)/bin/python ] || $(PYTHON) -m venv $(NEWEST)
	$(NEWEST)/bin/pip install -q --upgrade pip
	$(NEWEST)/bin/pip install -q --upgrade --upgrade-strategy eager -e '.[test]'
	$(NEWEST)/bin/python -c '$(CHECKOUT_PTH)'
	$(NEWEST)/bin/python -c '$(TASKDUMP_PTH)'
	touch $(NEWEST)/.installed  # newer than the lock: the make below keeps these releases
	$(NEWEST)/bin/pip list --format=freeze > $(NEWEST)/versions.txt
	@$(NEWEST)/bin/python -c '$(NEWER_THAN_LOCK)' $(LOCK) $(NEWEST)/versions.txt
	$(MAKE) --no-print-directory VENV=$(NEWEST) STAMP=$(NEWEST)/.installed lint typecheck unit

# The lowest releases pyproject.toml allows: import, a crawl, an engine (tests/lowest_smoke.py).
LOWEST := .venv-lowest
test-lowest: $(STAMP) system-deps
	@[ -x $(LOWEST)/bin/python ] || $(PYTHON) -m venv $(LOWEST)
	$(BIN)/uv pip compile pyproject.toml --resolution lowest-direct --python-version 3.11 \
	  -q -o $(LOWEST)/lowest.txt
	$(LOWEST)/bin/pip install -q -r $(LOWEST)/lowest.txt
	$(LOWEST)/bin/pip install -q --no-deps -e .
	$(LOWEST)/bin/python tests/lowest_smoke.py

# Servers the tests start themselves: ZooKeeper (and a JRE), Redis; Chromium for the dashboard
# test; Prometheus (promtool checks the metrics, a real server scrapes an engine and the monitor).
system-deps:
	@missing=""; \
	[ -f $(ZK_JAR) ] || missing="$$missing zookeeper"; \
	command -v redis-server >/dev/null || missing="$$missing redis-server"; \
	[ -x /usr/bin/chromium ] || missing="$$missing chromium"; \
	command -v promtool >/dev/null || missing="$$missing prometheus"; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  apt-get update -q && $(APT) $$missing; \
	fi

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check netdisco monitor

typecheck: $(STAMP)
	$(BIN)/mypy

# The 25 slowest tests are named at the end (the suite has a budget: 6 minutes quiet).
# Four workers, each taking the next test: most tests wait on servers (ZooKeeper sessions,
# crawls over loopback, child processes), and two workers kept two cores half idle; no
# test may depend on a quiet machine (docs/development.md: a suite that never lies).
# Not --dist loadfile: after a worker crash it re-queues the crashed file's unit and can
# hang at the end with the workers idle (seen: no test running, the deadline passed).
# It always ends: a test overrunning its timeout (pyproject) ends its worker, which xdist
# replaces (up to 4 times, then it stops starting them); after SUITE_DEADLINE s the run
# names the tests still running and fails (tests/conftest.py); `timeout` is the backstop
# (--foreground: Ctrl-C still reaches pytest; the workers end when the controller does).
# Every process the run starts carries NDTEST_RUN (tests/reaper.py): the run stops what a
# crashed worker or a leaking test left and fails on the latter; the check after pytest is
# the backstop for a run that was itself killed.
SUITE_DEADLINE ?= 1500
WORKERS ?= 4
PYTEST_ARGS ?=
# scrapyd-client (its tests drive the monitor's Scrapyd API) brings Scrapy itself: a venv of
# its own, so that the suite's has no Scrapy (netdisco maps `import scrapy` where it is absent)
SCRAPYD_TOOLS := .venv-scrapyd
$(SCRAPYD_TOOLS)/.installed: $(LOCK)
	$(PYTHON) -m venv $(SCRAPYD_TOOLS)
	$(SCRAPYD_TOOLS)/bin/pip install -q -c $(LOCK) scrapyd-client
	touch $@

unit: $(STAMP) system-deps $(SCRAPYD_TOOLS)/.installed
	@run=$$($(BIN)/python -c 'import uuid; print(uuid.uuid4().hex)'); status=0; \
	NDTEST_RUN=$$run NETDISCO_SUITE_DEADLINE=$(SUITE_DEADLINE) \
	  timeout --foreground -k 30 $$(( $(SUITE_DEADLINE) + 60 )) \
	  $(BIN)/pytest -n $(WORKERS) --dist load --max-worker-restart 4 -m "not memory" --durations=25 \
	    $(PYTEST_ARGS) \
	  || status=$$?; \
	$(BIN)/python -m tests.reaper $$run || status=$${status/#0/1}; \
	exit $$status

# The locked suite five times in a fresh clone of HEAD: three times beside two CPU
# burners, once on one core, once in a random order (about an hour; tests/stress.sh).
test-stress: system-deps
	bash tests/stress.sh

# The memory bounds of long queues (issue 28): a million requests queued with state_dir,
# and in the memory frontier (spilled); minutes each, so not in make test.
memory: $(STAMP)
	$(BIN)/pytest -m memory -q -p no:cacheprovider tests/netdisco/test_disk_queue.py

test: lint typecheck unit

# The fuzz tests (also in make test, with few examples) with 20 times the examples and
# fresh random ones each run (about 10 minutes); what fails is kept in .hypothesis/.
fuzz: $(STAMP) system-deps
	NETDISCO_FUZZ_SCALE=20 $(BIN)/pytest -n 2 --dist loadfile -m fuzz --timeout=0 -q \
	  --hypothesis-show-statistics

# A live cluster on loopback, narrated: ZooKeeper, a demo site, an SMTP sink, three
# engines and the monitor; a graceful leave, a crash, the alert e-mail (about 15 s).
# `make demo ARGS=--keep` (or `make demo-keep`) keeps the cluster running until Ctrl-C.
demo: $(STAMP) system-deps
	$(BIN)/netdisco demo $(ARGS)

demo-keep: $(STAMP) system-deps
	$(BIN)/netdisco demo --keep $(ARGS)

# The crawl benchmark beside Scrapy and the bare aiohttp loop (about 10 minutes).
bench: $(STAMP)
	bench/run.sh

# The compose stack for real, as root on Debian (not part of `make test`): installs
# docker.io, docker-compose and debootstrap if missing, builds every image locally, runs
# the stack on loopback, kills an engine, checks the alert and the crawl (compose/README.md).
compose-check: $(STAMP)
	$(BIN)/python compose/check.py

clean:
	rm -rf $(VENV) $(NEWEST) $(LOWEST) .mypy_cache .ruff_cache .pytest_cache

# The fault suite of exact membership (real ZooKeeper, a 3-server ensemble, a delay
# proxy); prints a table of scenarios. Not part of `make test`: see README for its time.
faults: $(STAMP) system-deps
	NETDISCO_FAULTS=1 $(BIN)/pytest tests/faults -p no:cacheprovider -q
	NETDISCO_FAULTS=1 $(BIN)/pytest -p no:cacheprovider -q -s \
	  tests/netdisco/test_redis_cluster.py::test_a_master_killed_mid_crawl_is_replaced_and_nothing_is_lost

# The README's cluster journey on ten machines made of network namespaces (root; about
# 2 minutes): tests/cluster/journey.py. Addresses in 198.18.0.0/15, no route out; every
# namespace, link and process it makes is removed at the end (and leftovers at start).
cluster-check: $(STAMP) system-deps
	timeout --foreground -k 20 900 $(BIN)/python -m tests.cluster.journey

# Links cut at random moments under a shared crawl on those machines (root; NDC_CUTS
# cuts of each of five scenarios, about 5 minutes a scenario at 20): the table of
# docs/benchmarks.md (tests/cluster/partitions.py). It fails on a page lost, a late start,
# a false event, a crawl that does not end, a cut never recovered, or anything left
# behind. .ci/run runs it short (NDC_CUTS=3).
partitions: $(STAMP) system-deps
	NDC_PAGES=$${NDC_PAGES:-8000} timeout --foreground -k 20 3600 \
	  $(BIN)/python -m tests.cluster.partitions
