"""The local-learning subcommands of ``distlab`` (registered through ``register``).

  local-summarize   run directories -> steps table + runs table
  local-bench       throughput and memory (interleaved, repeated) or PC cost against T
  local-nonident    the non-identifiability demonstrations (toy and trained model)
  local-figure      one figure (loss-tokens, loss-time, throughput-memory, pc-cost, nonident,
                    probes, hybrid)
  local-table       the main table (ours beside the paper's values)
  local-map         the throughput map (RC over BP across width, sections, sequence length)
  local-sweep       the learning-rate sweep's table and choice (validation split)
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..clihelp import JSON, JSON_OPT, OUT, OUT_OPT, PATH, PATH_OPT, PATHS, command


def cmd_summarize(a: argparse.Namespace) -> int:
    from .summary import summarize

    summarize([Path(p) for p in a.runs], a.steps_out, a.summary_out, a.staleness_out)
    return 0


def cmd_bench(a: argparse.Namespace) -> int:
    from . import bench

    o = a.options
    if a.kind == "throughput":
        bench.throughput(o["specs"], str(a.data), int(o["repeats"]), int(o["warmup"]),
                         int(o["measure"]), float(o.get("timeout_s", 120)), a.out)
    else:
        bench.pc_cost(o["spec"], str(a.data), [int(t) for t in o["T"]], o["variants"],
                      int(o["warmup"]), int(o["measure"]), a.out, int(o["repeats"]), int(o["training_T"]))
    return 0


def cmd_nonident(a: argparse.Namespace) -> int:
    from . import nonident

    nonident.run(a.model, a.spec, a.data, [float(s) for s in a.scales], a.out)
    return 0


FIGURES = {
    "loss-tokens": "loss_vs_tokens",
    "loss-time": "loss_vs_time",
    "throughput-memory": "throughput_memory",
    "pc-cost": "pc_cost",
    "nonident": "nonident_figure",
    "probes": "probes",
    "hybrid": "hybrid_vs_T",
}


def cmd_figure(a: argparse.Namespace) -> int:
    from . import figures

    getattr(figures, FIGURES[a.figure])(a.input, a.out)
    return 0


def cmd_table(a: argparse.Namespace) -> int:
    from . import figures

    figures.main_table(a.runs, a.throughput, a.claims, a.options, a.csv, a.md, a.floors)
    return 0


def cmd_map(a: argparse.Namespace) -> int:
    from . import figures

    target = figures._p3_claims(a.claims).get("local.rc.throughput", {}).get("paper_value")
    figures.throughput_map(a.input, a.out, a.csv, a.md, None if target is None else float(target))
    return 0


def cmd_sweep(a: argparse.Namespace) -> int:
    from .summary import sweep_table

    sweep_table([Path(p) for p in a.runs], a.md, a.csv, a.choice, a.follows)
    if a.picks:  # the sweep's runs at the choice that comparison jobs take
        from ..results.sweeps import pick_all

        pick_all(a.choice, a.picks)
    return 0


def register(sub) -> None:
    command(sub, "local-summarize", cmd_summarize, "local learning: run directories -> tables",
            runs=PATHS, steps_out=OUT, summary_out=OUT, staleness_out={**OUT_OPT, "default": None})
    q = command(sub, "local-bench", cmd_bench, "local learning: throughput/memory or PC cost",
                options=JSON, data=PATH, out=OUT)
    q.add_argument("kind", choices=["throughput", "pc-cost"])
    command(sub, "local-nonident", cmd_nonident, "local learning: non-identifiability demonstrations",
            model={**PATH, "help": "a BP run's model.pt"}, spec={**JSON, "help": "that run's spec"},
            data=PATH, scales=PATHS, out=OUT)
    q = command(sub, "local-figure", cmd_figure, "local learning: one figure", input=PATH, out=OUT)
    q.add_argument("figure", choices=sorted(FIGURES))
    command(sub, "local-table", cmd_table, "local learning: the main table",
            runs=PATH, throughput=PATH, claims=PATH, options=JSON, csv=OUT, md=OUT,
            floors={**PATH_OPT, "default": None, "help": "the data set's floors.csv"})
    command(sub, "local-map", cmd_map, "local learning: the throughput map's figure and table",
            input=PATH, out=OUT, csv=OUT, md=OUT,
            claims={**PATH, "help": "config/claims.yaml: the paper's ratio (local.rc.throughput) drawn as a line"})
    command(sub, "local-sweep", cmd_sweep, "local learning: the lr sweep's table and choice",
            runs=PATHS, md=OUT, csv=OUT, choice=OUT, follows={**JSON, "help": "{key: leader key}"},
            picks={**JSON_OPT, "help": "[{key, runs: {lr: run folder}, out}] runs to copy at the choice"})
