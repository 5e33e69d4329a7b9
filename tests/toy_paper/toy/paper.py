"""The toy paper's contract: everything the workflow and the command line need to find it."""

from ..pipeline.paper import Paper

PAPER = Paper(
    name="toy", order=6, title="A toy paper", scorecard="TOY", section="toy", claims_prefix="toy",
    rule_file="src/distlab/toy/toy.smk", schema="src/distlab/toy/toy.schema.yaml", doc="src/distlab/toy/__init__.py",
    trainer="distlab.toy.train", spec_module="distlab.toy.spec", config_check="distlab.toy.spec",
    cli="distlab.toy.cli", summarize=("toy", "summarize"), figures=("toy", "table"), code=("src/distlab/toy",))
