"""The atlas (ours): the study's contract (distlab.pipeline.paper.Paper).  Its scorecard section
exists even when the atlas is outside the default target (its rows then read "not run")."""

from ..pipeline.paper import Paper

PAPER = Paper(
    name="atlas", order=5, title="Atlas (ours)", scorecard="atlas", section="atlas", claims_prefix="atlas",
    rule_file="workflow/rules/atlas.smk", schema="workflow/schemas/atlas.schema.yaml", doc="docs/atlas.md",
    trainer="distlab.atlas.train", config_check="distlab.atlas.spec", cli="distlab.atlas.cli",
    summarize=("atlas", "map"),
    figures=("atlas", "figures"), code=("src/distlab/atlas",), scored_without_tables=True,
    gpu_tier_device=True, claim_registries=(("technique", "techniques"),))
