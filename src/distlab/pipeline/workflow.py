"""What the rule files share, as named functions (torch-free): the shared rules' input
functions and params (the data sets, the scorecard), the params that pass a rule's inputs on to
its command, and the paths every rule writes its log and benchmark to.

A rule file holds rules; a function a rule calls with a job's wildcards (an input function, a
params or resources function) is a named function here or in its paper's ``workflow.py``, so a
reader finds it by name and a test can call it.
"""

from __future__ import annotations

import os
from typing import Any

from ..clihelp import as_json


def log_path(job: str) -> str:
    """The log of a job named ``job`` (``data/{dataset}``): ``logs/<job>.log``."""
    return f"logs/{job}.log"


def benchmark_path(job: str) -> str:
    """The benchmark table of a job named ``job``: ``benchmarks/<job>.tsv``."""
    return f"benchmarks/{job}.tsv"


def inputs_json(wildcards, input) -> str:
    """A figure or summary command's ``--inputs``: the rule's named inputs as JSON."""
    return as_json(dict(input.items()))


def input_dirs(wildcards, input) -> list[str]:
    """The folder of each of the rule's input files (run folders from their manifests)."""
    return [os.path.dirname(f) for f in input]


class SharedWorkflow:
    """The shared rules' functions of a job's wildcards (data sets, scorecard), bound to the
    config; the rule files' registries of summary tables and paper outputs."""

    def __init__(self, config: dict[str, Any], results: str = "results") -> None:
        self.config, self.results = config, results

    # -- data sets (workflow/rules/data.smk)
    def dataset_dir(self, wildcards) -> str:
        """The folder of the data set named by the ``dataset`` wildcard."""
        return f"{self.results}/data/{wildcards.dataset}"

    def dataset_spec(self, wildcards) -> str:
        """prepare_data's spec: the data set's config section and its name."""
        return as_json({"name": wildcards.dataset, **self.config["datasets"][wildcards.dataset]})

    def dataset_mem_mb(self, wildcards) -> int:
        """The embedded sets are small; a hub image set is decoded in full once (uint8)."""
        return 16000 if self.config["datasets"][wildcards.dataset]["source"] == "hf" else 2000
