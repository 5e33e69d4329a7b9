"""PGC's own commands, called by ``workflow/rules/pgc.smk``:

  python -m distlab.pgc summarize --runs DIR... --steps-out X.parquet --summary-out Y.csv
  python -m distlab.pgc figure NAME --inputs JSON --options JSON --out PATH...
  python -m distlab.pgc regime --options JSON --csv OUT.csv --png OUT.png [--unit-cost MANIFEST...]
  python -m distlab.pgc regime-crosscheck --summary S.csv --options JSON --md OUT.md
  python -m distlab.pgc trace-fit --trace CSV --csv OUT.csv --md OUT.md --png OUT.png
  python -m distlab.pgc coding-profile --options JSON --out OUT.csv

Training goes through ``python -m distlab train --experiment pgc`` like every
paper's; these are the steps specific to this paper.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _json(text: str) -> dict:
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"not valid JSON: {e}") from e


def cmd_summarize(a: argparse.Namespace) -> int:
    from ..summarize import collect, write_table_file

    steps, summary = collect([Path(p) for p in a.runs])
    write_table_file(steps, a.steps_out)
    write_table_file(summary, a.summary_out)
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

    from ..tables import write_table
    from .train import coding_profile

    torch.set_num_threads(1)  # what a simulated job's one thread pays
    o = a.options
    table = coding_profile(o["settings"], int(o["numel"]), o["dtype"], rounds=int(o.get("rounds", 9)))
    write_table(table, a.out)
    print(table.to_string(index=False))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m distlab.pgc", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    q = sub.add_parser("summarize", help="run directories -> per-step (parquet) and run tables")
    q.add_argument("--runs", nargs="+", required=True)
    q.add_argument("--steps-out", required=True)
    q.add_argument("--summary-out", required=True)
    q.set_defaults(func=cmd_summarize)
    q = sub.add_parser("figure", help="one figure or table from the summary tables")
    q.add_argument("name")
    q.add_argument("--inputs", type=_json, required=True)
    q.add_argument("--options", type=_json, default={})
    q.add_argument("--out", nargs="+", required=True)
    q.set_defaults(func=cmd_figure)
    q = sub.add_parser("regime", help="where the paper's orderings hold, from the clock alone")
    q.add_argument("--options", type=_json, required=True)
    q.add_argument("--csv", required=True)
    q.add_argument("--md", required=True)
    q.add_argument("--png", required=True)
    q.add_argument("--unit-cost", nargs="*", help="run manifests with a measured unit compute cost")
    q.set_defaults(func=cmd_regime)
    q = sub.add_parser("regime-crosscheck", help="clock-only time per step beside the trained runs'")
    q.add_argument("--summary", required=True)
    q.add_argument("--options", type=_json, required=True)
    q.add_argument("--md", required=True)
    q.set_defaults(func=cmd_crosscheck)
    q = sub.add_parser("trace-fit", help="fit exponential and Pareto delays to a recorded trace")
    q.add_argument("--trace", required=True)
    q.add_argument("--csv", required=True)
    q.add_argument("--md", required=True)
    q.add_argument("--png", required=True)
    q.set_defaults(func=cmd_trace_fit)
    q = sub.add_parser("coding-profile", help="encoding/decoding seconds of every scheme (stored profile)")
    q.add_argument("--options", type=_json, required=True,
                   help='{"settings": [{"scheme", "n", "s", "code_seed"}...], "numel", "dtype", "rounds"}')
    q.add_argument("--out", required=True)
    q.set_defaults(func=cmd_coding_profile)
    return p


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    try:
        return a.func(a)
    except (ValueError, OSError) as e:
        print(f"distlab.pgc {a.command}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
