"""Summary tables whose runs vanished, made again by ``make reproduce``.

Snakemake decides what to run from the files it is asked for: when a summary table is present
and newer than its inputs' records, a run folder deleted since does not make it run anything
("Nothing to be done"), and the table (and the scorecard made from it) goes on naming a run
that is gone.  Each summary table carries a record of the runs it summarises
(:func:`distlab.results.tables.write_table_record`); before Snakemake starts, the Makefile runs::

    python -m distlab.results.recheck results paper

which finds every recorded table under those folders that :func:`~distlab.results.tables.table_errors`
refuses (a run gone, or the table cut short or edited since its rule wrote it), says so in one
line each on stderr, and prints ``--forcerun`` with those tables for Snakemake's command line:
their rules run again, the vanished runs (now needed again) with them, and everything
downstream, the scorecard included.  Nothing is printed when every table holds.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from .tables import RECORD_SUFFIX, table_errors


def stale_tables(roots: list[str | os.PathLike[str]]) -> list[tuple[Path, str]]:
    """(table, its first problem) of each recorded table under ``roots`` that a reader would refuse."""
    out = []
    for root in roots:
        base = Path(root)
        if not base.is_dir():
            continue
        for rec in sorted(base.rglob(f"*{RECORD_SUFFIX}")):
            table = rec.with_name(rec.name[: -len(RECORD_SUFFIX)])
            if not table.exists():  # Snakemake makes a missing output by itself
                continue
            errs = table_errors(table)
            if errs:
                out.append((table, errs[0]))
    return out


def main(argv: list[str] | None = None) -> int:
    roots = list(sys.argv[1:] if argv is None else argv) or ["results", "paper"]
    stale = stale_tables(roots)
    for _, why in stale:
        print(f"make: {why.split('; rerun', 1)[0]}; made again by this run", file=sys.stderr)
    if stale:
        print(" ".join(["--forcerun", *(str(t) for t, _ in stale)]))
    return 0

