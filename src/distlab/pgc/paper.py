"""P1 Pipelined Gradient Coding: the paper's contract (distlab.pipeline.paper.Paper)."""

from ..pipeline.paper import Paper

PAPER = Paper(
    name="pgc", order=1, title="P1 Pipelined Gradient Coding", scorecard="P1", section="pgc", claims_prefix="pgc",
    rule_file="workflow/rules/pgc.smk", schema="workflow/schemas/pgc.schema.yaml", doc="docs/pgc.md",
    trainer="distlab.pgc.train", spec_module="distlab.pgc.spec", config_check="distlab.pgc.spec",
    cli="distlab.pgc.cli", summarize=("pgc", "summarize"), figures=("pgc", "figure"),
    code=("src/distlab/pgc",), config_required=True)
