"""One placement job (`distlab train --experiment placement`): every seed of one method on one
(model, device pair), on the simulator.

The job's spec (a JSON document from the workflow) holds everything that
changes its numbers: the method and its options, the device pair, the
seeds, the evaluation budget, the single-device rule; the graph and the CPU
profile come as files, named in the spec's ``inputs`` (:data:`.spec.SPEC_SCHEMA`),
which :func:`run_simulated` takes out: the run records the spec without them, as
before they were part of it.  Output: one JSON file with a row per seed (best
latency, evaluations needed to come within 1 % of the run's best, clusters),
the best-so-far curve and the best placement of every seed.

Per-seed results go into a checkpoint keyed by the spec
(``checkpoint.Checkpointer``), so a killed job resumes at the first unfinished seed
and a job rerun under another spec starts again.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np

from . import baselines, costs
from .graphfile import load_graph
from .problem import Problem
from .spec import ALGOS, SPEC_SCHEMA  # noqa: F401 (the trainer's interface)

log = logging.getLogger("distlab.placement")

# the trainer's interface (distlab.cli.cmd_train): a search reads no prepared data set (its
# graph and profile are the spec's inputs), and imports torch only for a learned method,
# setting its threads there (run_seed)
NEEDS_DATA = False
SETS_THREADS = True

DETERMINISTIC = ("cpu_only", "gpu_only", "heft", "optimum")
FINAL_FRACTION = 0.1  # the learned policy's latency: median of the last 10 % of a run's samples


class BudgetProgress:
    """A learner's progress as a few lines, not one an update: each of the learner's own lines
    (an episode's or an update's) goes to the DEBUG log (``--verbose``), and one INFO line is
    logged each time another tenth of the evaluation budget is spent (at most ``parts`` lines
    a run, whatever the budget): evaluations done of the budget and the best latency so far."""

    def __init__(self, problem: Problem, label: str, parts: int = 10) -> None:
        self.problem, self.label, self.parts = problem, label, parts
        self.shown = 0  # tenths of the budget already announced
        self.lines = 0  # INFO lines logged

    def __call__(self, msg: str) -> None:
        log.debug("%s: %s", self.label, msg)
        done, budget = len(self.problem.history), max(1, int(self.problem.budget))
        part = min(self.parts, done * self.parts // budget)
        if part > self.shown:
            self.shown = part
            self.lines += 1
            log.info("%s: %d of %d evaluations (%d%%), best %.3f ms", self.label, done, budget,
                     100 * done // budget, self.problem.best * 1e3)


def run_seed(problem: Problem, spec: dict[str, Any], seed: int) -> dict[str, Any]:
    algo = spec["algo"]
    problem.reset()
    t0 = time.perf_counter()
    opts = dict(spec.get("options") or {})
    if algo in ("rnn", "placeto", "hsdag"):
        import torch

        torch.set_num_threads(1)  # the same numbers whatever the machine's core count
        opts["reward"] = spec.get("reward", "latency")
        opts["drop_features"] = list(spec.get("drop_features") or [])

    progress = BudgetProgress(problem, f"{spec['pair_name']} {spec['model_name']} {spec['method']} seed {seed}")

    if algo == "cpu_only":
        info = baselines.single_device(problem, 0)
    elif algo == "gpu_only":
        info = baselines.single_device(problem, 1)
    elif algo == "heft":
        info = baselines.heft(problem)
    elif algo == "optimum":
        info = baselines.optimum(problem)
    elif algo == "random":
        info = baselines.random_search(problem, opts, seed)
    elif algo == "rnn":  # the learned methods import torch; the others start without it
        from . import learned

        info = learned.rnn(problem, opts, seed, log=progress)
    elif algo == "placeto":
        from . import learned

        info = learned.placeto(problem, opts, seed, log=progress)
    elif algo == "hsdag":
        from . import hsdag

        info = hsdag.train(problem, opts, seed, log=progress)
    else:
        raise ValueError(f"algo: {algo!r} is not one of {ALGOS}")
    wall = time.perf_counter() - t0
    curve = problem.curve()
    best = float(curve[-1])
    within = int(np.argmax(curve <= best * 1.01)) + 1
    place = problem.best_placement
    hist = np.asarray(problem.history, dtype=float)
    tail = hist[-max(1, int(round(len(hist) * FINAL_FRACTION))):]
    return {
        "seed": seed, "latency_s": best, "evaluations": len(curve), "evals_to_1pct": within,
        "final_median_s": float(np.median(tail)),
        "frac_on_device1": float(np.mean(place[~problem.sim.pinned] == 1)),
        "wall_s": wall, "curve": curve.tolist(), "placement": place.tolist(),
        "clusters_mean": float(info.get("clusters_mean", np.nan)),
        **({"heft_estimate_s": info["estimate_s"]} if "estimate_s" in info else {}),
        **({"groups_optimum_s": info["groups_optimum_s"]} if "groups_optimum_s" in info else {}),
        **({"final_greedy_s": info["final_greedy_s"]} if "final_greedy_s" in info else {}),
        # the operators' clusters of the final policy (HSDAG: its last parsing), for the space table
        **({"clusters": np.asarray(info["assign_last"])[problem.group].tolist()} if "assign_last" in info else {}),
    }


def work(spec: dict[str, Any]) -> int:
    """The simulator evaluations a search job runs, all its seeds: its deadline scales with them."""
    return (1 if spec["algo"] in DETERMINISTIC else int(spec["budget"])) * len(spec["seeds"])


def run(spec: dict[str, Any], graph_path: str | Path, profile_path: str | Path, out: str | Path,
        runtime: dict[str, Any] | None = None) -> Path:
    from distlab.results.checkpoint import Checkpointer
    from distlab.results.tables import atomic_write_text

    graph = load_graph(graph_path)
    prof = costs.load_profile(profile_path, graph, spec.get("model"))
    det = spec["algo"] in DETERMINISTIC
    budget = 1 if det else int(spec["budget"])
    # the single-device rule is about what a search may return: the single-device
    # baselines themselves (and HEFT's one schedule) are always scored as they are
    rule = "allow" if det else spec.get("single_device", "allow")
    problem = Problem.build(graph, spec["pair"], prof, budget, rule,
                            cuda=costs.load_cuda_profile(profile_path, graph),
                            order=spec.get("sim_order", "topological"),
                            partition=(spec.get("options") or {}).get("partition", "coarsen"))
    out = Path(out)
    ck_cfg = (runtime or {}).get("checkpoint", {"every_s": 0.0, "every_steps": 1})
    ck = Checkpointer(out.with_suffix(".ckpt"), spec=spec, every_s=float(ck_cfg.get("every_s", 0.0)),
                      every_steps=1)
    state = ck.load() or {"rows": []}
    rows = state["rows"]
    done = {r["seed"] for r in rows}
    for seed in spec["seeds"]:
        if seed in done:
            continue
        if det and rows:
            # one evaluation decides it: every seed shares the value
            rows.append({**rows[0], "seed": seed})
        else:
            rows.append(run_seed(problem, spec, seed))
        log.info("%s %s %s seed %d: %.3f ms", spec["pair_name"], spec["model_name"], spec["method"],
                 seed, rows[-1]["latency_s"] * 1e3)
        ck.save({"rows": rows})
    result = {"spec": spec, "clock": "simulated", "profile": str(profile_path), "n_nodes": graph["n_nodes"],
              "n_edges": graph["n_edges"], "n_groups": problem.n_groups,
              "n_coarse_edges": len(problem.cedges), "rows": rows}
    atomic_write_text(out, json.dumps(result))
    ck.clear()
    return out


def run_simulated(spec: dict[str, Any], data: str | Path | None, out: str | Path,
                  runtime: dict[str, Any] | None = None) -> Path:
    """``distlab train --experiment placement``: :func:`run` on the spec's ``inputs``, with the
    spec recorded (and its checkpoint keyed) without them.  ``data`` is not read."""
    from distlab.config.specs import SpecError

    from .costs import CostError
    from .graphfile import GraphError
    from .sim import PlacementError

    logging.getLogger("distlab.placement").setLevel(logging.INFO)
    job = {k: v for k, v in spec.items() if k != "inputs"}
    for key, path in spec["inputs"].items():
        if not Path(path).is_file():
            raise SpecError(f"placement spec: inputs.{key}: no such file {path}")
    try:
        return run(job, spec["inputs"]["graph"], spec["inputs"]["profile"], out, runtime)
    except (GraphError, CostError, PlacementError) as e:  # a malformed input: the user's (one line, exit 2)
        raise SpecError(str(e)) from e
