# Two commands do all the set-up on a fresh machine:
#   make reproduce   build the environment if missing, run the whole workflow
#   make test        build the environment if missing, run the test suite
# Every target is idempotent: the environment is rebuilt only when
# envs/requirements.txt or pyproject.toml changed.

PYTHON ?= python3
VENV   ?= .venv
CORES  ?= $(shell nproc 2>/dev/null || echo 2)
# the suite on three pytest-xdist workers (on 2 cores: a third fills the time the others spend
# waiting on subprocesses, timeouts and SLURM; 698 s against 860 s with two, one run each, SLURM up;
# a fourth only adds contention: 800 s against 735 s with three, the cores 98 % busy);
# tests sharing an expensive session fixture run on one (tests/conftest.py); PYTEST_ARGS= (empty)
# runs it in one process
PYTEST_ARGS ?= -n 3 --dist loadgroup
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.distlab-installed
export PATH := $(abspath $(BIN)):$(PATH)

.PHONY: env reproduce test lint dryrun report stability clean-results

# the first run installs the environment (torch and the rest: about 2.4 minutes on the project's
# 2-core machine with a fast network; .venv ends at about 6.2 GB), with pip's own progress shown
$(STAMP): envs/requirements.txt pyproject.toml
	@echo "make: installing the environment into $(VENV) (first run only: a few minutes, about 6.2 GB)"
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --progress-bar on -r envs/requirements.txt
	$(BIN)/python -m pip install --no-deps --no-build-isolation -e .
	touch $(STAMP)
	@echo "make: environment ready ($$(du -sh $(VENV) 2>/dev/null | cut -f1) in $(VENV))"

env: $(STAMP)

# make reproduce runs the workflow's jobs forked from one process that has imported torch and the
# trainers (distlab.runtime.forkserver: about 4 s less a job, the same numbers); JOBS_VIA= runs each job
# as a fresh process
JOBS_VIA ?= env PYTHONPATH=$(CURDIR)/src$${PYTHONPATH:+:$$PYTHONPATH} $(BIN)/python -m distlab forkserver --

# the console: one line per finished job (rule, wildcards, seconds) with the run's progress; each
# job's full command at the end of its own log (the logger plugin in src/snakemake_logger_plugin_distlab);
# SNAKEMAKE_CONSOLE= gives Snakemake's own, a block per job.  Snakemake loads profiles/default (the
# workflow's profile) by itself: naming it again with --profile only printed it twice.
SNAKEMAKE_CONSOLE ?= --logger distlab

# Config files and Snakemake's other options for reproduce, dryrun, report and stability:
#   make reproduce CONFIG="config/paper.yaml mine.yaml" SNAKEMAKE_ARGS="--keep-going"
# CONFIG becomes Snakemake's --configfile (given last: it takes every word after it).  Every config
# file named in CONFIG or SNAKEMAKE_ARGS (--configfile X, --configfile=X) is first read by the
# project's bounded loader (distlab.config.preflight: at most 1 MiB, 64 levels deep, 200,000
# values with aliases expanded), because Snakemake's own parse of --configfile has no bounds and
# runs before the workflow's checks (a 50 MB file parses for minutes, a list nested 5,000 deep is
# a 3,000-line traceback): a file over a bound, not YAML or not keys at its top level is one line
# naming it and exit 2, in under a second, before Snakemake starts.  The schema checks follow in
# the workflow (`python -m distlab check-config FILE...` runs both without Snakemake).
#
# CONFIG and SNAKEMAKE_ARGS reach the shell as words, never as code: each recipe reads them from
# the environment and splits them on blanks with globbing off (SMK_WORDS), so a `;`, `$(...)` or
# `*` in them is part of a word Snakemake gets, never a command the shell runs.
CONFIG ?=
SNAKEMAKE_ARGS ?=
override CONFIG := $(value CONFIG)
override SNAKEMAKE_ARGS := $(value SNAKEMAKE_ARGS)
export CONFIG SNAKEMAKE_ARGS
SMK_WORDS = set -f; set -- $$SNAKEMAKE_ARGS; if [ -n "$$CONFIG" ]; then set -- "$$@" --configfile $$CONFIG; fi
PREFLIGHT = $(SMK_WORDS); $(BIN)/python -c 'import sys; from distlab.config.preflight import main; sys.exit(main())' "$$@" || exit 2

# A summary table present and up to date does not make Snakemake look at the runs it was made
# from: one deleted since, it reports "Nothing to be done".  Each table records its runs
# (distlab.results.tables); distlab.results.recheck lists the tables whose runs are gone (or that
# were cut or edited since), one line each, and make reproduce passes them to --forcerun: those
# runs and tables, and the scorecard, are made again.
# make reproduce first empties paper/ unless it was assembled from this checkout's last run
# (a clone's or a pull's paper/ is another machine's evaluation: Snakemake would take its pages
# for done and skip the runs behind them); then it records its own run in results/reproduce.json (commit, dirty tree: uncommitted changes in what decides results, start and
# end, exit code, load average, machine, config files) and then makes paper/ wholly of this run
# (scripts/snapshot.py): the workflow's pages, the benchmarks, netcheck's outputs when run since
# it started, the atlas's query pack; every other file in paper/ removed; the record in
# paper/record.json; the README's generated blocks refilled.  paper/ is tracked: `git diff paper/`
# is what this run changed.
# SLURM's sinfo without squeue or sacct breaks every snakemake (its SLURM plugin's import): one
# line naming what to install first (distlab.pipeline.slurmtools.main)
reproduce: $(STAMP)
	@$(PREFLIGHT)
	@$(BIN)/python -c 'import sys; from distlab.pipeline.slurmtools import main; sys.exit(main())' || exit 2
	@mkdir -p results; start=$$(date +%s); load=$$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null); \
	commit=$$(git rev-parse HEAD 2>/dev/null); \
	dirty=$$($(BIN)/python -c 'from distlab.results.runs import uncommitted; print(uncommitted(".") or 0)') || dirty=1; rc=0; \
	$(BIN)/python scripts/snapshot.py clear || exit 2; \
	force=$$($(BIN)/python -c 'import sys; from distlab.results.recheck import main; sys.exit(main())' results paper) || exit 2; \
	$(SMK_WORDS); $(JOBS_VIA) snakemake --cores $(CORES) $(SNAKEMAKE_CONSOLE) $$force "$$@" || rc=$$?; \
	$(BIN)/python scripts/snapshot.py record --out results/reproduce.json --start "$$start" \
	  --rc $$rc --commit "$$commit" --dirty "$$dirty" --load-start "$$load" --cores $(CORES) -- "$$@"; \
	$(BIN)/python scripts/snapshot.py || { [ $$rc -ne 0 ] || rc=2; }; \
	exit $$rc

report: $(STAMP)
	@$(PREFLIGHT)
	@$(SMK_WORDS); snakemake --cores $(CORES) --report report.html "$$@"

# the plan of what make reproduce (with the same CONFIG and SNAKEMAKE_ARGS) would run: with a
# paper/ that make reproduce would empty first (a clone's), every rule writing into it forced
dryrun: $(STAMP)
	@$(PREFLIGHT)
	@$(SMK_WORDS); force=$$($(BIN)/python scripts/snapshot.py forcerun -- "$$@") || exit 2; \
	snakemake -n --cores $(CORES) $$force "$$@"

# the measured parts (real jobs, timed runs, profiles) run twice; every verdict that flips is listed;
# then paper/ is made again wholly of the settled evaluation (scorecard, write-up, tables, figures)
# and its record names this run and its commit
stability: $(STAMP)
	@$(PREFLIGHT)
	@start=$$(date +%s); commit=$$(git rev-parse HEAD 2>/dev/null); \
	dirty=$$($(BIN)/python -c 'from distlab.results.runs import uncommitted; print(uncommitted(".") or 0)') || dirty=1; \
	$(SMK_WORDS); $(BIN)/python -m distlab stability --cores $(CORES) $${1+--} "$$@" || exit $$?; \
	$(BIN)/python scripts/snapshot.py --stability-commit "$$commit" --stability-dirty "$$dirty" \
	  --stability-start "$$start"

# pytest exits 5 when it collects no test: say so and fail, rather than pass silently.
test: $(STAMP)
	@rc=0; $(BIN)/python -m pytest $(PYTEST_ARGS) || rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests" >&2; exit 1; fi; \
	exit $$rc

lint: $(STAMP)
	snakemake --lint
	snakemake -n --quiet rules
	snakemake -n --quiet rules --configfile config/paper.yaml

# paper/ is tracked: `git checkout paper/` brings the committed evaluation back
clean-results:
	rm -rf results logs benchmarks .snakemake paper/figures paper/tables paper/scorecard.* paper/README.md
