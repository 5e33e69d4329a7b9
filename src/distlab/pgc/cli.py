"""PGC's own commands, ``python -m distlab pgc VERB`` (registered through ``register``; the
rules of ``workflow/rules/pgc.smk`` call them so):

  python -m distlab pgc summarize --runs DIR... --steps-out X.parquet --summary-out Y.csv
  python -m distlab pgc figure NAME --inputs JSON --options JSON --out PATH...
  python -m distlab pgc regime --options JSON --csv OUT.csv --png OUT.png [--unit-cost MANIFEST...]
  python -m distlab pgc regime-crosscheck --summary S.csv --options JSON --md OUT.md
  python -m distlab pgc trace-fit --trace CSV --csv OUT.csv --md OUT.md --png OUT.png
  python -m distlab pgc coding-profile --options JSON --out OUT.csv

Training goes through ``python -m distlab train --experiment pgc`` like every
paper's; these are the steps specific to this paper.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..clihelp import json_arg


def cmd_summarize(a: argparse.Namespace) -> int:
    from ..results.summarize import collect
    from ..results.tables import write_checked_table

    runs = [Path(p) for p in a.runs]
    steps, summary = collect(runs)
    # each with its record (the runs it summarises): readers refuse it cut short or a run gone
    write_checked_table(steps, a.steps_out, runs)
    write_checked_table(summary, a.summary_out, runs)
    return 0


def cmd_figure(a: argparse.Namespace) -> int:
    from . import figures as pgc

    pgc.make_one(a.name, a.inputs, [Path(p) for p in a.out], a.options)
    return 0


def cmd_regime(a: argparse.Namespace) -> int:
    from .regime import main_regime

    main_regime(a.options, Path(a.csv), Path(a.png), Path(a.md), a.unit_cost or [])
    return 0


def cmd_crosscheck(a: argparse.Namespace) -> int:
    from .regime import main_crosscheck

    main_crosscheck(Path(a.summary), a.options, Path(a.md))
    return 0


def cmd_trace_fit(a: argparse.Namespace) -> int:
    from .trace import main_fit

    main_fit(Path(a.trace), Path(a.csv), Path(a.md), Path(a.png))
    return 0


def cmd_coding_profile(a: argparse.Namespace) -> int:
    import torch

    from ..results.tables import write_table
    from .coding_cost import coding_profile

    torch.set_num_threads(1)  # what a simulated job's one thread pays
    o = a.options
    table = coding_profile(o["settings"], int(o["numel"]), o["dtype"], rounds=int(o.get("rounds", 9)))
    write_table(table, a.out)
    print(table.to_string(index=False))
    return 0


# a bad option, table or file of a PGC step: the user's (one line, exit 2)
ERRORS = (ValueError, OSError)


def register(parent: argparse._SubParsersAction) -> None:
    """``distlab pgc VERB``: PGC's steps as one subcommand of ``distlab``."""
    p = parent.add_parser("pgc", help="PGC's steps (summarize, figure, regime, trace-fit, coding-profile)",
                          description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_verbs(p)


def _add_verbs(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="pgc_command", required=True)
    q = sub.add_parser("summarize", help="run directories -> per-step (parquet) and run tables")
    q.add_argument("--runs", nargs="+", required=True)
    q.add_argument("--steps-out", required=True)
    q.add_argument("--summary-out", required=True)
    q.set_defaults(func=cmd_summarize)
    q = sub.add_parser("figure", help="one figure or table from the summary tables")
    q.add_argument("name")
    q.add_argument("--inputs", type=json_arg, required=True)
    q.add_argument("--options", type=json_arg, default={})
    q.add_argument("--out", nargs="+", required=True)
    q.set_defaults(func=cmd_figure)
    q = sub.add_parser("regime", help="where the paper's orderings hold, from the clock alone")
    q.add_argument("--options", type=json_arg, required=True)
    q.add_argument("--csv", required=True)
    q.add_argument("--md", required=True)
    q.add_argument("--png", required=True)
    q.add_argument("--unit-cost", nargs="*", help="run manifests with a measured unit compute cost")
    q.set_defaults(func=cmd_regime)
    q = sub.add_parser("regime-crosscheck", help="clock-only time per step beside the trained runs'")
    q.add_argument("--summary", required=True)
    q.add_argument("--options", type=json_arg, required=True)
    q.add_argument("--md", required=True)
    q.set_defaults(func=cmd_crosscheck)
    q = sub.add_parser("trace-fit", help="fit exponential and Pareto delays to a recorded trace")
    q.add_argument("--trace", required=True)
    q.add_argument("--csv", required=True)
    q.add_argument("--md", required=True)
    q.add_argument("--png", required=True)
    q.set_defaults(func=cmd_trace_fit)
    q = sub.add_parser("coding-profile", help="encoding/decoding seconds of every scheme (stored profile)")
    q.add_argument("--options", type=json_arg, required=True,
                   help='{"settings": [{"scheme", "n", "s", "code_seed"}...], "numel", "dtype", "rounds"}')
    q.add_argument("--out", required=True)
    q.set_defaults(func=cmd_coding_profile)
    for q in sub.choices.values():
        q.set_defaults(errors=ERRORS, error_context=f"pgc {q.prog.split()[-1]}")

