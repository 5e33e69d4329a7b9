# Helpers only: paths, parameter grids, run specs.  No rules here.  The helpers themselves are
# named functions of distlab.pipeline.workflow (a rule's functions of its wildcards, the papers'
# registries of summary tables and outputs); the papers' own are in src/distlab/<paper>/workflow.py.
import json
import os

# The rules call the library as `python -m distlab`; with the Makefile's
# virtualenv it is installed, and in a conda env (envs/distlab.yaml) it is
# found through PYTHONPATH.
SRC = os.path.abspath(os.path.join(workflow.basedir, "src"))
shell.prefix(f'export PYTHONPATH="{SRC}${{{{PYTHONPATH:+:$PYTHONPATH}}}}"; ')
ENV = "../../envs/distlab.yaml"

RESULTS = "results"
PAPER = "paper"
SIM = "simulated"

wildcard_constraints:
    seed=r"\d+",
    dataset=r"[A-Za-z0-9_]+",


from distlab.clihelp import as_json
from distlab.pipeline.workflow import (DATA_SPLITS, SharedWorkflow, benchmark_path, csv_and_beside, data_manifest,
                                       extra_seed_requests,
                                       floors_table, input_dirs, inputs_json, log_path, mem_for, mem_of_inputs,
                                       report_figure, run_files, seed_files, train_params, with_report_figure)

SHARED = SharedWorkflow(config, RESULTS)  # the shared rules' functions of a job's wildcards, the registries
register_tables, register_outputs, scorecard_inputs = SHARED.register_tables, SHARED.register_outputs, SHARED.scorecard_inputs
all_outputs, scorecard_papers, stats_json = SHARED.all_outputs, SHARED.scorecard_papers, SHARED.stats_json
runtime_json, train_resources, partition_for_gpus = SHARED.runtime_json, SHARED.train_resources, SHARED.partition_for_gpus

# stats.extra_seeds: more seeds for the settings of named claims (distlab.pipeline.extra_seeds)
from distlab.scoring.claims import load_claims_file

EXTRA_SEED_REQUESTS = extra_seed_requests(config, f"{workflow.basedir}/config/claims.yaml", load_claims_file)
