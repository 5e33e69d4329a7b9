"""The toy's rule helpers (torch-free)."""

from __future__ import annotations

import json


class ToyWorkflow:
    def __init__(self, config: dict, results: str, paper: str) -> None:
        self.c, self.results = config["toy"], results
        self.summary = f"{results}/toy/summary.csv"
        self.table = f"{paper}/tables/toy.md"
        self.manifests = [f"{results}/toy/seed{s}/manifest.json" for s in self.c["seeds"]]
        self.tables, self.outputs = {"toy": self.summary}, [self.table]

    def run_dir(self, wildcards) -> str:
        return f"{self.results}/toy/seed{wildcards.seed}"

    def spec(self, wildcards) -> str:
        return json.dumps({"experiment": "toy", "seed": int(wildcards.seed), "steps": self.c["steps"],
                           "lr": self.c["lr"]}, sort_keys=True)
