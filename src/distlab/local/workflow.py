"""Run specs of the local-learning workflow, from the ``local_learning`` config section.

Torch-free: the rule file imports it at parse time, and the tests build the very specs
the rules pass (``distlab train --experiment local --spec ...``).
"""

from __future__ import annotations

GROUPS = ("rc", "pc")


def timed(group: str, method: str) -> bool:
    """Jobs whose wall time is compared (BP and parallel RC on the deep model) get the
    section's ``threads`` cores; every other job runs on one."""
    return group == "rc" and method in ("bp", "rc-par")


def spec(c: dict, group: str, method: str, seed: int, threads: int | None = None) -> dict:
    """The run spec of ``method`` in ``group`` (``rc``: the deep model, ``pc``: the shallow one)."""
    g = c[group]
    out = {
        "experiment": "local", "group": group, "seed": int(seed), "dataset": c["dataset"],
        "model": dict(g["model"]), "batch_size": c["batch_size"], "steps": c["steps"], "lr": c["lr"],
        "betas": list(c.get("betas", [0.9, 0.95])), "weight_decay": c.get("weight_decay", 0.0),
        "warmup_steps": c.get("warmup_steps", 10), "eval_every": c["eval_every"],
        "eval": dict(c["eval"]),
        "threads": int(threads or (c["threads"] if timed(group, method) else 1)),
    }
    if method == "bp":
        out.update(method="bp", save_model=(group == "rc"))
    elif method.startswith("rc"):
        out.update(method="rc", sections=g["sections"], delay=g["delay"],
                   mode="parallel" if method in ("rc-par", "rc-thread") else "sequential")
        if out["mode"] == "parallel":
            out.update(threads=1, worker_threads=g.get("worker_threads", 1),
                       concurrency="thread" if method == "rc-thread" else g["concurrency"])
    elif method.startswith("pc-"):
        variant = method.split("-", 1)[1]
        out.update(method="pc", variant=variant, pc={"T": g["T"], **g["variants"][variant]})
    else:
        raise ValueError(f"local_learning.{group}.methods: unknown method {method!r}")
    return out


# (group, method) pairs of the untimed jobs, as the rule's wildcard ``lrun`` = "group/method"
UNTIMED_RUNS = r"rc/rc-seq|pc/bp|pc/pc-fixed|pc/pc-strict"


def seeds_spec(c: dict, group: str, method: str, seeds: list[int]) -> dict:
    """One untimed job for every seed of ``method`` (one process start-up, not one a seed)."""
    if timed(group, method):
        raise ValueError(f"{group}/{method} is timed: one job a seed")
    out = spec(c, group, method, seeds[0])
    out.pop("seed")
    out["seeds"] = [int(s) for s in seeds]
    return out


def untimed_job_spec(c: dict, run: str, seeds: list[int]) -> dict:
    """:func:`seeds_spec` of the rule's wildcard ``run`` = "group/method"."""
    group, method = run.split("/")
    return seeds_spec(c, group, method, seeds)


def seeds_of(c: dict, group: str, method: str, seeds: list[int]) -> list[int]:
    """Every configured seed, except for parallel RC: ``rc.parallel_seeds`` when given (its
    numbers are the sequential mode's; its runs are there to be timed)."""
    if group == "rc" and method == "rc-par":
        return list(c["rc"].get("parallel_seeds") or seeds)
    return list(seeds)


def run_dirs(c: dict, seeds: list[int], results: str = "results") -> list[str]:
    return [f"{results}/local/{group}/{m}/seed{s}/manifest.json"
            for group in GROUPS for m in c[group]["methods"] for s in seeds_of(c, group, m, seeds)]


def bench_specs(c: dict) -> dict[str, dict]:
    """The throughput benchmark's specs: the deep model's methods at the benchmark shape."""
    b = c["bench"]
    out = {}
    for m in b["methods"]:
        if m == "bp-1thread":  # BP on one core: what RC's sections are each given
            s = spec(c, "rc", "bp", 0, threads=1)
        else:
            s = spec(c, "rc", "rc-par" if m == "rc-thread" else m, 0, threads=c["threads"])
        s.update(model=dict(b["model"]), batch_size=b["batch_size"])
        if m == "rc-thread":
            s.update(concurrency="thread", threads=1)
        s.pop("save_model", None)
        out[m] = s
    return out


def pc_cost_options(c: dict) -> dict:
    b, g = c["bench"], c["pc"]
    return {"spec": spec(c, "pc", "bp", 0, threads=1), "T": list(b["pc_T"]),
            "variants": dict(g["variants"]), "warmup": b["pc_warmup"], "measure": b["pc_measure"]}
