"""P3 local credit assignment: the paper's contract (distlab.pipeline.paper.Paper).  Its config
section is ``local_learning`` and its rule file ``local_learning.smk``; everything else says ``local``."""

from ..pipeline.paper import Paper

PAPER = Paper(
    name="local", order=3, title="P3 Local credit assignment", scorecard="P3", section="local_learning",
    claims_prefix="local", rule_file="workflow/rules/local_learning.smk",
    schema="workflow/schemas/local_learning.schema.yaml", doc="docs/local_learning.md",
    trainer="distlab.local.train", config_check="distlab.local.spec", cli="distlab.local.cli",
    summarize=("local", "summarize"), figures=("local", "figure"), code=("src/distlab/local",),
    text_floors=True, batch_per_worker=True)
