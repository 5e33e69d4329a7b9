# distlab: four papers on distributed training, reproduced side by side.
# Thin on purpose: configuration, validation, the rule files, the targets.
from snakemake.utils import min_version, validate

min_version("9.0")


configfile: "config/config.yaml"


validate(config, "workflow/schemas/config.schema.yaml")


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/baseline.smk"
include: "workflow/rules/pgc.smk"
include: "workflow/rules/paper.smk"
include: "workflow/rules/bench.smk"


rule all:
    input:
        "paper/README.md",
        "paper/scorecard.md",
    default_target: True
