"""The shared baseline's spec builders and paths, for workflow/rules/baseline.smk (torch-free).

The rule file holds rules; what they pass is built here from the config: every run of the
baseline (the configured seeds, then the extra seeds a claim asked for) and the run spec of
each job, built once a job (its params and its resources read the same text).
"""

from __future__ import annotations

import functools
from typing import Any

from ..clihelp import as_json
from ..pipeline.extra_seeds import for_setting
from ..pipeline.workflow import RulesContext

SIM = "simulated"


class BaselineWorkflow:
    def __init__(self, config: dict[str, Any], context: RulesContext | None = None) -> None:
        ctx = context or RulesContext()
        results, paper = ctx.results, ctx.paper
        self.config, self.b = config, config["baseline"]
        self.results, self.paper = results, paper
        self.extra_seeds = ctx.extra_seeds
        self.outputs = [f"{paper}/figures/baseline_loss.png", f"{paper}/tables/baseline.md"]
        self.steps = f"{results}/baseline/steps.csv"      # rule baseline_summarize
        self.summary = f"{results}/baseline/summary.csv"
        self.spec = functools.lru_cache(maxsize=None)(self._spec)

    def runs(self) -> list[str]:
        """Every run of the baseline: each seed (one job a seed), then the extra seeds that
        stats.extra_seeds asks of a setting (new jobs only: no configured run changes)."""
        seeds = [int(k) for k in self.config["seeds"]]
        settings = [(backend, "dgd") for backend in self.b["backends"]] + [(SIM, "single")]
        runs = [self._manifest(backend, method, seed) for seed in seeds for backend, method in settings]
        for backend, method in settings:
            more = for_setting(self.extra_seeds, seeds, "baseline", {"backend": backend, "method": method})
            runs += [self._manifest(backend, method, seed) for seed in more]
        return runs

    def metrics(self) -> list[str]:
        """baseline_summarize's other inputs: each run's metrics (an edit of one remakes the summary,
        which refuses the edited run by name)."""
        from ..pipeline.workflow import metrics_beside

        return metrics_beside(self.runs())

    def _manifest(self, backend: str, method: str, seed: int) -> str:
        return f"{self.results}/baseline/{backend}/{method}/seed{seed}/manifest.json"

    def cluster(self, straggler: dict) -> dict:
        cfg = self.config["cluster"]
        return {"compute": cfg["compute"], "network": cfg["network"], "straggler": straggler}

    def _spec(self, backend: str, method: str, seed) -> str:
        b = self.b
        return as_json({
            "experiment": "baseline", "method": method, "backend": backend,
            "seed": int(seed), "model": b["model"], "n_workers": b["n_workers"],
            "batch_size": b["batch_size"], "lr": b["lr"], "steps": b["steps"],
            "eval_every": b["eval_every"], "dtype": b["dtype"],
            "cluster": self.cluster(b.get("straggler", {"model": "none"})),
        })

    def sim_spec(self, w) -> str:
        """baseline_train_sim: one seed of a method on the simulated cluster."""
        return self.spec(SIM, w.method, str(w.seed))

    def dist_spec(self, w) -> str:
        """baseline_train_dist: one seed of data-parallel SGD on a real backend."""
        return self.spec(w.backend, "dgd", str(w.seed))
