# distlab: four papers on distributed training, reproduced side by side.
# Thin on purpose: configuration, validation, the rule files, the targets.
import sys

from snakemake.utils import min_version

sys.path.insert(0, f"{workflow.basedir}/src")
from distlab.config.checks import check_config, validate_defaults
from distlab.papers import papers  # the registry: every paper, one line each
from distlab.pipeline.smkfix import keep_one_reevaluation_timer

# Snakemake 9.27.1's scheduler multiplies its re-evaluation timers with every job: a version-checked
# hook keeps one pending timer instead (distlab/pipeline/smkfix.py: the problem, the versions it
# was written for; under another it leaves Snakemake as it is and says so in one line)
keep_one_reevaluation_timer()

min_version("9.0")

# Warnings the jobs wrote to their logs (NumPy's, pandas') are summed up at the end of the run
# (distlab.pipeline.runlog), from the logs written since this run started
from distlab.pipeline.runlog import RunWarnings

_RUN_WARNINGS = RunWarnings("logs")  # the logs written from now on


onsuccess:
    _RUN_WARNINGS.report()


onerror:
    _RUN_WARNINGS.report()


# Submitting through SLURM (profiles/slurm) without SLURM's client tools: one line naming what
# to install before any job, rather than each job failing three times (distlab.pipeline.slurmtools)
onstart:
    if getattr(workflow.executor_plugin, "name", None) == "slurm":
        from distlab.pipeline.slurmtools import client_problem

        if client_problem():
            print(f"profiles/slurm: {client_problem()}", file=sys.stderr)
            sys.exit(2)


configfile: "config/config.yaml"
report: "workflow/report/workflow.rst"


# One pass first: duplicate YAML keys in every config file loaded, strict types,
# count bounds, cross-field rules, each paper's own rules and config/claims.yaml.
# A bad configuration stops here listing every problem, one line each with its
# key, before any job (and before Snakemake's validate, which stops at the first).
check_config(config, f"{workflow.basedir}/workflow/schemas", f"{workflow.basedir}/config/claims.yaml",
             config_files=list(dict.fromkeys(workflow.configfiles)),
             overrides=workflow.config_settings.config,  # --config's values typed as YAML reads them
             papers=papers())
# schema defaults (config.schema.yaml with each registered paper's own schema under its section)
validate_defaults(config, f"{workflow.basedir}/workflow/schemas", papers())


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
# each registered paper's rule file (distlab.papers: each package found), in the write-up order;
# all before paper.smk, whose targets gather what they register (the atlas's, with
# atlas.in_default_target, join the default target)
for _paper in papers():

    include: _paper.rule_file

include: "workflow/rules/paper.smk"
include: "workflow/rules/bench.smk"
include: "workflow/rules/netcheck.smk"


rule all:
    input:
        "paper/README.md",
        "paper/scorecard.md",
    default_target: True
