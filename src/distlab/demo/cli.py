"""``distlab`` subcommands of the DeMo paper (registered through ``register``)."""

from __future__ import annotations

from ..clihelp import JSON, JSON_OPT, OUT, OUT_OPT, PATH, PATH_OPT, PATHS, command


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
        if a.picks:  # the sweep's runs at the choice that comparison jobs take
            from ..results.sweeps import pick_all

            pick_all(a.choice, a.picks)
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
    command(sub, "demo-summarize", _summarize, "DeMo runs -> per-step and run-level tables",
            runs=PATHS, networks=JSON, steps_out=OUT, summary_out=OUT)
    command(sub, "demo-table", _table, "DeMo results table (simulated) or real-vs-simulated table",
            kind={"choices": ["results", "real", "sweep"], "required": True}, summary=PATH,
            sim_summary=PATH_OPT, networks=JSON_OPT, csv=OUT_OPT, md=OUT,
            choice={**OUT_OPT, "help": "sweep: where to write the chosen lr per method (JSON)"},
            follows={**JSON_OPT, "help": "sweep: {follower: leader} learning rates"},
            picks={**JSON_OPT, "help": "sweep: [{key, runs: {lr: run folder}, out}] runs to copy at the choice"})
    command(sub, "demo-figure", _figure, "one DeMo figure",
            kind={"choices": ["loss_steps", "gap_steps", "loss_bytes", "loss_time", "real"], "required": True},
            steps=PATH_OPT, summary=PATH_OPT, sim_summary=PATH_OPT, networks=JSON_OPT, note={"default": ""},
            out=OUT)
    command(sub, "demo-bytes", _bytes, "DeMo vs AdamW-DDP bytes per step at OLMo-300M/1B shapes",
            claims=PATH, claim_id={"required": True}, topk={"type": int, "nargs": "+", "default": [32, 1]},
            chunk={"type": int, "default": 64}, csv=OUT, md=OUT)
    command(sub, "demo-bench", _bench, "DeMo optimizer-step and whole-step benchmarks",
            spec=JSON, data=PATH, threads={"type": int, "default": 2}, out=OUT)
