"""The shared baseline (synchronous data-parallel SGD against single-process SGD): its contract
(distlab.pipeline.paper.Paper).  Its scorecard section is ``foundation``; its config schema is
part of workflow/schemas/config.schema.yaml (its ``schema`` None)."""

from ..pipeline.paper import Paper

PAPER = Paper(
    name="baseline", order=0, title="Shared baseline (DGD = single-process SGD)",
    scorecard="foundation", section="baseline", claims_prefix="baseline", rule_file="workflow/rules/baseline.smk",
    doc="docs/runtime.md", trainer="distlab.baseline.train", config_check="distlab.baseline.spec",
    cli="distlab.baseline.cli", summarize=("summarize",), figures=("figures", "--experiment", "baseline"),
    code=("src/distlab/baseline", "src/distlab/train", "src/distlab/runtime"))
