# Two commands do all the set-up on a fresh machine:
#   make reproduce   build the environment if missing, run the whole workflow
#   make test        build the environment if missing, run the test suite
# Every target is idempotent: the environment is rebuilt only when
# envs/requirements.txt or pyproject.toml changed.

PYTHON ?= python3
VENV   ?= .venv
CORES  ?= $(shell nproc 2>/dev/null || echo 2)
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.distlab-installed
export PATH := $(abspath $(BIN)):$(PATH)

.PHONY: env reproduce test lint dryrun report stability clean-results

$(STAMP): envs/requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -r envs/requirements.txt
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $(STAMP)

env: $(STAMP)

reproduce: $(STAMP)
	snakemake --profile profiles/default --cores $(CORES)

report: $(STAMP)
	snakemake --profile profiles/default --cores $(CORES) --report report.html

# the measured parts (real jobs, timed runs, profiles) run twice; every verdict that flips is listed
stability: $(STAMP)
	$(BIN)/python -m distlab stability --cores $(CORES)

# pytest exits 5 when it collects no test: say so and fail, rather than pass silently.
test: $(STAMP)
	@rc=0; $(BIN)/python -m pytest $(PYTEST_ARGS) || rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests" >&2; exit 1; fi; \
	exit $$rc

lint: $(STAMP)
	snakemake --lint
	snakemake -n --quiet rules
	snakemake -n --quiet rules --configfile config/paper.yaml

clean-results:
	rm -rf results logs benchmarks .snakemake paper/figures paper/tables paper/scorecard.* paper/README.md
