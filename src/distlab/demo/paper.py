"""P4 DeMo: the paper's contract (distlab.pipeline.paper.Paper)."""

from ..pipeline.paper import Paper

PAPER = Paper(
    name="demo", order=4, title="P4 DeMo", scorecard="P4", section="demo", claims_prefix="demo",
    rule_file="workflow/rules/demo.smk", schema="workflow/schemas/demo.schema.yaml", doc="docs/demo.md",
    trainer="distlab.demo.train", spec_module="distlab.demo.spec", config_check="distlab.demo.spec",
    cli="distlab.demo.cli", summarize=("demo", "summarize"), figures=("demo", "figure"),
    code=("src/distlab/demo",), text_floors=True, claim_registries=(("method", "methods"),),
    device_default="auto", batch_per_worker=True, gpu_tier_device=True)
