"""P2 HSDAG device placement: the paper's contract (distlab.pipeline.paper.Paper)."""

from ..pipeline.paper import Paper

PAPER = Paper(
    name="placement", order=2, title="P2 HSDAG device placement", scorecard="P2", section="placement",
    claims_prefix="placement", rule_file="workflow/rules/placement.smk",
    schema="workflow/schemas/placement.schema.yaml", doc="docs/placement.md",
    trainer="distlab.placement.train", config_check="distlab.placement.spec", cli="distlab.placement.cli",
    summarize=("placement", "summarize"), figures=("placement", "figure"), code=("src/distlab/placement",))
