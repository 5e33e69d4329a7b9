"""``distlab`` subcommands of the DeMo paper (registered through ``register``)."""

from __future__ import annotations

from pathlib import Path

from ..clihelp import json_arg


def _summarize(a) -> int:
    from .analysis import main_summarize

    main_summarize(a.runs, a.networks, a.steps_out, a.summary_out)
    return 0


def _table(a) -> int:
    from .analysis import real_table, results_table, sweep_table

    if a.kind == "results":
        results_table(a.summary, a.csv, a.md, a.networks)
    elif a.kind == "sweep":
        sweep_table(a.summary, a.md, a.choice, a.follows)
    else:
        real_table(a.summary, a.sim_summary, a.md)
    return 0


def _figure(a) -> int:
    from .figures import figure, gap_figure, real_figure

    if a.kind == "real":
        real_figure(a.summary, a.sim_summary, a.out)
    elif a.kind == "gap_steps":
        gap_figure(a.steps, a.out, a.note)
    else:
        figure(a.kind, a.steps, a.out, a.networks, a.note)
    return 0


def _bytes(a) -> int:
    from .analysis import bytes_table

    bytes_table(a.csv, a.md, a.claims, a.claim_id, tuple(a.topk), a.chunk)
    return 0


def _bench(a) -> int:
    from .bench import main_bench

    main_bench(a.spec, a.data, a.out, a.threads)
    return 0


def register(sub) -> None:
    q = sub.add_parser("demo-summarize", help="DeMo runs -> per-step and run-level tables")
    q.add_argument("--runs", nargs="+", required=True)
    q.add_argument("--networks", type=json_arg, required=True)
    q.add_argument("--steps-out", type=Path, required=True)
    q.add_argument("--summary-out", type=Path, required=True)
    q.set_defaults(func=_summarize)

    q = sub.add_parser("demo-table", help="DeMo results table (simulated) or real-vs-simulated table")
    q.add_argument("--kind", choices=["results", "real", "sweep"], required=True)
    q.add_argument("--summary", type=Path, required=True)
    q.add_argument("--sim-summary", type=Path)
    q.add_argument("--networks", type=json_arg, default={})
    q.add_argument("--csv", type=Path)
    q.add_argument("--md", type=Path, required=True)
    q.add_argument("--choice", type=Path, help="sweep: where to write the chosen lr per method (JSON)")
    q.add_argument("--follows", type=json_arg, default={}, help="sweep: {follower: leader} learning rates")
    q.set_defaults(func=_table)

    q = sub.add_parser("demo-figure", help="one DeMo figure")
    q.add_argument("--kind", choices=["loss_steps", "gap_steps", "loss_bytes", "loss_time", "real"], required=True)
    q.add_argument("--steps", type=Path)
    q.add_argument("--summary", type=Path)
    q.add_argument("--sim-summary", type=Path)
    q.add_argument("--networks", type=json_arg, default={})
    q.add_argument("--note", default="")
    q.add_argument("--out", type=Path, required=True)
    q.set_defaults(func=_figure)

    q = sub.add_parser("demo-bytes", help="DeMo vs AdamW-DDP bytes per step at OLMo-300M/1B shapes")
    q.add_argument("--claims", type=Path, required=True)
    q.add_argument("--claim-id", required=True)
    q.add_argument("--topk", type=int, nargs="+", default=[32, 1])
    q.add_argument("--chunk", type=int, default=64)
    q.add_argument("--csv", type=Path, required=True)
    q.add_argument("--md", type=Path, required=True)
    q.set_defaults(func=_bytes)

    q = sub.add_parser("demo-bench", help="DeMo optimizer-step and whole-step benchmarks")
    q.add_argument("--spec", type=json_arg, required=True)
    q.add_argument("--data", type=Path, required=True)
    q.add_argument("--threads", type=int, default=2)
    q.add_argument("--out", type=Path, required=True)
    q.set_defaults(func=_bench)
