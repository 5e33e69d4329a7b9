"""Workflow helpers of workflow/rules/placement.smk (torch-free): which runs
exist, the JSON spec of each, and the outputs of the ``placement`` target."""

from __future__ import annotations

import json
from typing import Any


def as_json(x: Any) -> str:
    return json.dumps(x, sort_keys=True)


def models(pl: dict) -> list[str]:
    """The models that run (``run_models``; a list, so an overlay config replaces it)."""
    return list(pl.get("run_models") or pl["models"])


def pairs(pl: dict) -> list[str]:
    return list(pl.get("run_pairs") or pl["pairs"])


def runs(pl: dict, root: str) -> list[str]:
    """Every run file: all methods on every pair, the ablations on the default pair."""
    out = []
    for pair in pairs(pl):
        for model in models(pl):
            methods = list(pl["methods"]) + (list(pl["ablations"]) if pair == pl["default_pair"] else [])
            out += [f"{root}/runs/{pair}/{model}/{m}.json" for m in methods]
    return out


def run_spec(pl: dict, pair: str, model: str, method: str) -> str:
    return as_json({
        "method": method, "pair_name": pair, "pair": pl["pairs"][pair],
        "model_name": model, "model": pl["models"][model], "seeds": pl["seeds"],
        "single_device": pl["single_device"], "sim_order": pl.get("sim_order", "topological"),
        "hsdag": pl["hsdag"], "rnn": pl["rnn"],
        "placeto": pl["placeto"],
    })


def profile_spec(pl: dict, model: str) -> str:
    cuda = any(d.get("measure_on_cuda", False) for pr in pl["pairs"].values() for d in pr["devices"])
    return as_json({"model": pl["models"][model], **pl["profile"], "cuda": cuda})


def options(pl: dict) -> str:
    return as_json({"methods": pl["methods"], "default_pair": pl["default_pair"]})


def tables(paper: str) -> dict[str, list[str]]:
    main = [f"{paper}/tables/placement_{t}.{ext}" for t in ("main", "graphs", "convergence", "headline")
            for ext in ("csv", "md")]
    return {"main": main,
            "ablation": [f"{paper}/tables/placement_ablation.{ext}" for ext in ("csv", "md")],
            "real": [f"{paper}/tables/placement_sim_error.{ext}" for ext in ("csv", "md")],
            "figures": [f"{paper}/figures/placement_curves.png", f"{paper}/figures/placement_learned.png"]}


def outputs(pl: dict, paper: str) -> list[str]:
    t = tables(paper)
    out = t["main"] + t["figures"]
    if pl.get("ablations"):
        out += t["ablation"]
    if pl.get("real", {}).get("enabled", False) and pl["real"]["models"]:
        out += t["real"]
    return out
