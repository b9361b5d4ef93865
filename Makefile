# `make run` and `make test` each bootstrap .venv from pyproject.toml, then do their job.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Two install levels: `make run` needs only the broker's own dependencies; `make test` (and the
# other developer targets) add the test extra (PySpark, mypy, ruff, ...).
RUN_STAMP := $(VENV)/.installed-run
STAMP := $(VENV)/.installed-test

CLIENTS_TS := tests/clients/ts
CLIENTS_STAMP := $(CLIENTS_TS)/node_modules/.installed

.PHONY: setup clients run test lint types contracts unit suite bench mutate faults sim sim-ha sim-timing clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(RUN_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e .
	touch $(RUN_STAMP)

$(STAMP): $(RUN_STAMP)
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

setup: $(STAMP)

# The TypeScript client generators and compiler, as pinned in tests/clients/ts/package-lock.json
# (openapi-typescript, openapi-fetch, typescript), for tests/e2e/test_generated_clients.py.
$(CLIENTS_STAMP): $(CLIENTS_TS)/package.json $(CLIENTS_TS)/package-lock.json
	cd $(CLIENTS_TS) && npm ci --no-audit --no-fund --loglevel=error
	touch $(CLIENTS_STAMP)

clients: $(CLIENTS_STAMP)

run: $(RUN_STAMP)
	$(BIN)/twinlog dev

lint: setup
	$(BIN)/ruff check app store ha jobs bench tests

types: setup
	$(BIN)/mypy store ha jobs app

# The layer rules ([tool.importlinter] in pyproject.toml): store imports nothing of ha or app, ha
# nothing of app, the DLedger node core no socket, thread or clock, the admin commands HTTP only.
contracts: setup
	$(BIN)/lint-imports

# The inner loop: every test that starts no JVM and no child process, and not the wider runs
# of what narrower tests check here (`-m "not jvm and not processes and not wide"`, markers
# in pyproject.toml; the simulations run seeds 0-39 here, 0-99 in `make test`; TWINLOG_TIER=unit
# gives the costly generated tests whose past bugs are pinned by explicit cases half their
# examples, tests/support/examples.py), on two workers, one test file at a time each, in
# collection order (tests/conftest.py puts the files with `slow` tests first; without
# --no-loadscope-reorder xdist would start with the files that hold the most tests). Budget:
# under 2 minutes on a 2-core machine (docs/testing.md). `make test` runs the rest too, and
# every test at full strength.
UNIT_SIM_SEEDS := 40
unit: setup
	TWINLOG_TIER=unit TWINLOG_SIM_SEEDS=$(UNIT_SIM_SEEDS) $(BIN)/pytest -q -n 2 --dist loadfile --no-loadscope-reorder -m "not jvm and not processes and not wide"

# The whole suite, Spark and real processes included, the same way: tests/conftest.py puts
# the Spark files first, as one unit of work, so one worker runs them all on one Spark
# session while the other goes through the rest. The 30 slowest tests are listed at the end (the
# suite has a 10-minute budget on a quiet 2-core machine: a new slow test shows there).
suite: setup clients
	$(BIN)/pytest -q -n 2 --dist loadfile --no-loadscope-reorder --durations=30

# What CI runs (.ci/run): the checks first (a new one goes in this list), then the whole suite.
test: lint types contracts suite

bench: setup
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	$(BIN)/python bench/store_append.py
	$(BIN)/python bench/ha_replication.py
	$(BIN)/python bench/http_produce.py
	$(BIN)/python bench/http_consume.py
	$(BIN)/python bench/consume_lane_cost.py
	$(BIN)/python bench/snapshot.py
	$(BIN)/python bench/failover.py
	$(BIN)/python bench/hostile.py
	$(BIN)/python bench/dledger.py
	$(BIN)/python bench/idle_memory.py

# Replication under seeded link faults between real processes, and the seeded DLedger state
# workload (produces, commits, deletes, leader kills), with many more seeds than `make test`
# runs (3 and 1): `make faults SEEDS=100`. A failure names its seed.
faults: setup
	TWINLOG_FAULT_SEEDS=$(or $(SEEDS),25) TWINLOG_DLEDGER_STATE_SEEDS=$(or $(SEEDS),25) \
		$(BIN)/pytest -q tests/e2e/test_ha_link_faults.py tests/ha/test_epochs.py \
		tests/e2e/test_dledger_state.py::test_seeded_produces_commits_deletes_and_leader_kills_keep_every_promise

# Mutation testing of the promise-bearing modules, one mutant at a time (not part of `make test`).
# `make mutate MODULE=store/record.py` mutates one module; see docs/mutation.md.
mutate: setup
	$(BIN)/python scripts/mutate.py $(MODULE)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .mutmut-cache

# The DLedger simulation over many seeds (not part of `make test`, which runs seeds 0-99;
# TWINLOG_SIM_SEEDS=N widens the test's own run):
# `make sim` runs 10,000 over 2 processes and prints how many and how long (`SEEDS=N`,
# `WORKERS=N`); a failure prints its seed, `python -m ha.dledger.simulation.sim --seed N` replays it.
# The timing model (failover p50/max, quiet healthy group): `make sim-timing`.
sim: setup
	$(BIN)/python -m ha.dledger.simulation.sim --seeds $(or $(SEEDS),10000) --workers $(or $(WORKERS),2)

# The classic (master/slave) replication simulation over many seeds (`make test` runs seeds
# 0-99; TWINLOG_SIM_SEEDS=N widens the test's own run): `make sim-ha` runs 10,000 over 2
# processes and prints how many and how long (`SEEDS=N`, `WORKERS=N`); a failure prints its
# seed, and `python -m ha.classic.simulation.sim --seed N` replays it (docs/replication.md).
sim-ha: setup
	$(BIN)/python -m ha.classic.simulation.sim --seeds $(or $(SEEDS),10000) --workers $(or $(WORKERS),2)

sim-timing: setup
	$(BIN)/python -m ha.dledger.simulation.scenarios --seeds $(or $(SEEDS),200)
