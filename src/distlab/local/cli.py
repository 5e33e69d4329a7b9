"""The local-learning subcommands of ``distlab`` (registered through ``register``).

  local-summarize   run directories -> steps table + runs table
  local-bench       throughput and memory (interleaved, repeated) or PC cost against T
  local-nonident    the non-identifiability demonstrations (toy and trained model)
  local-figure      one figure (loss-tokens, loss-time, throughput-memory, pc-cost, nonident,
                    probes, hybrid)
  local-table       the main table (ours beside the paper's values)
  local-map         the throughput map (RC over BP across width, sections, sequence length)
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..clihelp import json_arg


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


def register(sub) -> None:
    q = sub.add_parser("local-summarize", help="local learning: run directories -> tables")
    q.add_argument("--runs", nargs="+", required=True)
    q.add_argument("--steps-out", type=Path, required=True)
    q.add_argument("--summary-out", type=Path, required=True)
    q.add_argument("--staleness-out", type=Path, default=None)
    q.set_defaults(func=cmd_summarize)

    q = sub.add_parser("local-bench", help="local learning: throughput/memory or PC cost")
    q.add_argument("kind", choices=["throughput", "pc-cost"])
    q.add_argument("--options", type=json_arg, required=True)
    q.add_argument("--data", type=Path, required=True)
    q.add_argument("--out", type=Path, required=True)
    q.set_defaults(func=cmd_bench)

    q = sub.add_parser("local-nonident", help="local learning: non-identifiability demonstrations")
    q.add_argument("--model", type=Path, required=True, help="a BP run's model.pt")
    q.add_argument("--spec", type=json_arg, required=True, help="that run's spec")
    q.add_argument("--data", type=Path, required=True)
    q.add_argument("--scales", nargs="+", required=True)
    q.add_argument("--out", type=Path, required=True)
    q.set_defaults(func=cmd_nonident)

    q = sub.add_parser("local-figure", help="local learning: one figure")
    q.add_argument("figure", choices=sorted(FIGURES))
    q.add_argument("--input", type=Path, required=True)
    q.add_argument("--out", type=Path, required=True)
    q.set_defaults(func=cmd_figure)

    q = sub.add_parser("local-table", help="local learning: the main table")
    q.add_argument("--runs", type=Path, required=True)
    q.add_argument("--throughput", type=Path, required=True)
    q.add_argument("--claims", type=Path, required=True)
    q.add_argument("--options", type=json_arg, required=True)
    q.add_argument("--csv", type=Path, required=True)
    q.add_argument("--md", type=Path, required=True)
    q.add_argument("--floors", type=Path, default=None, help="the data set's floors.csv")
    q.set_defaults(func=cmd_table)

    q = sub.add_parser("local-map", help="local learning: the throughput map's figure and table")
    q.add_argument("--input", type=Path, required=True)
    q.add_argument("--out", type=Path, required=True)
    q.add_argument("--csv", type=Path, required=True)
    q.add_argument("--md", type=Path, required=True)
    q.add_argument("--claims", type=Path, required=True,
                   help="config/claims.yaml: the paper's ratio (local.rc.throughput) drawn as a line")
    q.set_defaults(func=cmd_map)
