"""The shared baseline's config checks (torch-free).

``check(config)`` returns one ``"key: why"`` string per problem of the ``baseline:`` config
section (its data set configured and fit for its model, its batch divisible among its
workers, a straggler model its DGD can run), which the Snakefile's
``distlab.config.checks.check_config`` runs before any job.  The section's schema is part of
``workflow/schemas/config.schema.yaml``; the run spec's is the trainer's
(:data:`distlab.baseline.train.SPEC_SCHEMA`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..config.checks import check_dataset, check_workers

CONFIG_SECTION = "baseline"


def check(config: Mapping[str, Any]) -> list[str]:
    b = config.get("baseline")
    if not b:
        return []
    errors: list[str] = []
    check_dataset(errors, config, "baseline.dataset", b.get("dataset"), b.get("model"))
    check_workers(errors, "baseline", b, b.get("n_workers", 1))
    strag = b.get("straggler") or {}
    if strag.get("model") == "dead":
        errors.append("baseline.straggler.model: 'dead' cannot run in the baseline: its DGD waits for "
                      "every worker (a dead one never answers) and the real backends inject no "
                      "stragglers; use none, exponential, pareto or persistent (P1's schemes tolerate dead workers)")
    return errors


def notes(config: Mapping[str, Any]) -> list[str]:
    """Settings the config check accepts but that do not reach every run they seem to: a
    straggler model reaches only the simulated runs, as the real backends' DGD injects no
    stragglers (its times are the machine's own).  One line each, printed at config check."""
    b = config.get("baseline") or {}
    model = (b.get("straggler") or {}).get("model", "none")
    real = [x for x in (b.get("backends") or []) if x != "simulated"]
    if model == "none" or not real:
        return []
    return [f"baseline.straggler: model {model!r} applies to the simulated runs only; the "
            f"{', '.join(real)} runs inject no stragglers (their step times are this machine's)"]
