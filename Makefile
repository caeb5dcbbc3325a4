# The two commands of the README:
#   make demo   install everything, start the local stack, ingest the sample sessions, search
#   make test   install everything (incl. test tools), run the whole test suite against a real broker
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: install install-test-tools demo test lint bench faults eval down clean

$(BIN)/usl: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[test]"
	@touch $(BIN)/usl

install: $(BIN)/usl

# Prometheus (metrics test) and Chromium (search page test) come from Debian's packages.
install-test-tools:
	@bash scripts/install-test-tools

demo: install
	@bash scripts/demo

# Test files are spread over PYTEST_WORKERS processes (pytest-xdist, a file stays whole in one
# worker, each worker with its own broker): most tests wait on a broker or a child process, so
# the suite takes about half the time of one process. PYTEST_WORKERS=0 runs it in one process.
PYTEST_WORKERS ?= 3
test: install install-test-tools
	$(BIN)/python -m pytest -q -p no:cacheprovider -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

lint: install
	$(BIN)/ruff check streams sinks planner deploy tests benchmarks reliability
	$(BIN)/mypy

# BENCHMARKS.md and benchmarks/plots/ from one run on this machine (~30 min on 2 cores);
# BENCH_ARGS="--scale tiny" for a quick check, "--scale large" for rows up to 1M chunks (~30-45 min).
bench: install
	$(BIN)/pip install --quiet -e ".[bench]"
	@bash scripts/bench $(BENCH_ARGS)

# The long fault suite (own broker, 40 rounds: ~20 min on 2 idle cores); RELIABILITY.md from one run.
# Every fault kind by default; the shard and object-store faults (kill-shard, store-unavailable,
# partial-upload) run on a second stack with two sink shards and its own S3Proxy (docs/operations.md,
# "Fault suite"); FAULT_ARGS="--faults kill-shard,store-unavailable,partial-upload" runs only those.
FAULT_ARGS ?= --rounds 5 --seed 1
faults: install
	$(BIN)/python -m reliability $(FAULT_ARGS) --out RELIABILITY.md

# EVAL.md and benchmarks/results/{eval,heldout}*.json: search quality on real public transcripts,
# two sets (~3 min). EVAL_ARGS="--label after" adds a labelled table, "--set heldout" (or main)
# runs one set; a set is rebuilt from snapshots (EVAL_ARGS="--snapshots DIR") when its folder
# (benchmarks/eval_data/sessions/, sessions-heldout/) is missing.
eval: install
	USL_EVAL_VIA_MAKE=1 $(BIN)/python -W ignore -m benchmarks.eval $(EVAL_ARGS)

down:
	$(BIN)/usl down

clean:
	rm -rf .usl
