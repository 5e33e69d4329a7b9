"""`python -m distlab toy summarize|table`: the toy's summarize and figure steps."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from ..clihelp import OUT, PATH, PATHS, command


def _summarize(a) -> int:
    rows = [{"seed": m["spec"]["seed"], "final_loss": m["final_loss"]}
            for m in (json.loads((Path(r) / "manifest.json").read_text()) for r in a.runs)]
    with open(a.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["seed", "final_loss"])
        w.writeheader()
        w.writerows(sorted(rows, key=lambda r: r["seed"]))
    return 0


def _table(a) -> int:
    with open(a.summary) as f:
        rows = list(csv.DictReader(f))
    lines = ["| seed | final loss (simulated) |", "|---|---|", *(f"| {r['seed']} | {float(r['final_loss']):.3g} |" for r in rows)]
    Path(a.out).write_text("\n".join(lines) + "\n")
    return 0


def register(sub) -> None:
    p = sub.add_parser("toy", help="the toy paper's steps (summarize, table)")
    verbs = p.add_subparsers(dest="toy_command", required=True)
    command(verbs, "summarize", _summarize, "run folders -> one row a seed", runs=PATHS, out=OUT)
    command(verbs, "table", _table, "the summary as a markdown table", summary=PATH, out=OUT)
