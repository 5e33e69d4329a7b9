# Helpers only: no rules here.  The helpers are named functions of distlab.pipeline.workflow
# (paths, a rule's functions of its wildcards, the papers' registries of summary tables and
# outputs, RESULTS / PAPER / SIM / ENV); each paper's own are in src/distlab/<paper>/workflow.py.
from distlab.pipeline.workflow import *  # noqa: F403 (its __all__)

# the shared rules' functions of a job's wildcards, the registries, stats.extra_seeds's requests
SHARED = SharedWorkflow(config, workflow.basedir, RESULTS, papers())  # papers: the registry (the Snakefile's import)
shell.prefix(SHARED.shell_prefix)  # the jobs import this tree's src/ (PYTHONPATH; also in a conda env)
# what every paper's rule helper is built with besides the config, Helper(config, RULES): the
# folders, stats.extra_seeds's requests (RULES.extra_seeds), the partition, Snakemake's workflow
RULES = SHARED.context(workflow)

wildcard_constraints:
    seed=r"\d+",
    dataset=r"[A-Za-z0-9_]+",
