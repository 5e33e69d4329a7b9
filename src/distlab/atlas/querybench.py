"""The query's own benchmark: a fixed set of representative queries, each timed as a user runs it.

Each query runs as ``python -m distlab atlas query ...`` in a fresh interpreter (its start and
imports included: what a user waits for), once against the techniques' runs folder and once
against the pack the snapshot carries (:mod:`distlab.atlas.pack`); the table holds each one's
wall seconds (**measured**, on this machine at this load: the load average is recorded), its
exit status against the expected one, and whether the pack gave the same answer as the runs
folder (it must: a difference fails the job).  The queries are the four of the issue that asked
for a query under 3 s, and one 100x beyond the runs without ``--efficiency``, which must be refused
(exit 2).  Timings are a benchmark, never a test's pass/fail.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

from ..results.tables import ResultError, atomic_write_text, markdown_table, write_table

# (label, the query's options, the exit status it must give)
QUERIES: tuple[tuple[str, tuple[str, ...], int], ...] = (
    ("1e9 P, N 64, 1 Gbit/s, 30 ms, exp:0.2, published",
     ("--params", "1e9", "--workers", "64", "--bandwidth", "1Gbit/s", "--latency", "30ms",
      "--stragglers", "exp:0.2", "--efficiency", "published"), 0),
    ("1e9 P, N 8, 10 Gbit/s, 10 us, published",
     ("--params", "1e9", "--workers", "8", "--bandwidth", "10Gbit/s", "--latency", "10us",
      "--efficiency", "published"), 0),
    ("2e10 P, N 8, 400 Gbit/s, 10 us, h100, published",
     ("--params", "2e10", "--workers", "8", "--bandwidth", "400Gbit/s", "--latency", "10us",
      "--device", "h100", "--efficiency", "published"), 0),
    ("21,984 P, N 4, 10 Gbit/s, 1 ms (replay)",
     ("--params", "21984", "--workers", "4", "--bandwidth", "10Gbit/s", "--latency", "1ms"), 0),
    ("1e9 P, N 8, 10 Gbit/s, 10 us, no --efficiency",
     ("--params", "1e9", "--workers", "8", "--bandwidth", "10Gbit/s", "--latency", "10us"), 2),
)


def _loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return ""


def _answer(out: str, err: str, rc: int) -> str:
    """The leader (rank 1's technique) or the refusal's first words."""
    if rc != 0:
        last = err.strip().splitlines()[-1] if err.strip() else ""
        what = last.split(":")[1].strip() if last.count(":") >= 2 else f"exit {rc}"
        return f"refused ({what})"
    for line in out.splitlines():
        parts = line.split()
        if len(parts) > 1 and parts[0] == "1":
            return parts[1] + (" (tie)" if " tie " in line else "")
    return ""


def run_one(args, config: str, runs: str) -> dict:
    cmd = [sys.executable, "-m", "distlab", "atlas", "query", *args, "--config", config, "--runs", runs]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=os.environ.copy(), timeout=600)
    return {"seconds": time.perf_counter() - t0, "rc": r.returncode, "stdout": r.stdout, "stderr": r.stderr}


def bench(config: str, runs: str, pack: str, out_csv, out_md) -> pd.DataFrame:
    """Run :data:`QUERIES` against ``runs`` and ``pack``; write the table (CSV and Markdown)."""
    load0 = _loadavg()
    rows = []
    for label, args, expect in QUERIES:
        a, b = run_one(args, config, runs), run_one(args, config, pack)
        for res in (a, b):
            if res["rc"] not in (0, 2):
                raise ResultError(f"atlas query {' '.join(args)}: exit {res['rc']} "
                                  f"({' '.join(res['stderr'].strip().splitlines()[-1:])[:200]})")
        same = (a["rc"], a["stdout"], a["stderr"].replace(runs, "RUNS")) == \
               (b["rc"], b["stdout"], b["stderr"].replace(pack, "RUNS"))
        if not same:
            raise ResultError(f"atlas query {' '.join(args)}: the pack {pack} answers otherwise than the runs "
                              f"under {runs}; make the pack again (snakemake --forcerun atlas_query_pack)")
        rows.append({"query": label, "options": " ".join(args), "seconds_runs": round(a["seconds"], 2),
                     "seconds_pack": round(b["seconds"], 2), "exit": a["rc"], "expected_exit": expect,
                     "as_expected": a["rc"] == expect, "answer": _answer(a["stdout"], a["stderr"], a["rc"]),
                     "pack_same_answer": same})
    df = pd.DataFrame(rows)
    write_table(df, out_csv)
    load1 = _loadavg()
    show = df[["query", "seconds_runs", "seconds_pack", "exit", "answer"]].rename(columns={
        "seconds_runs": "s (runs folder)", "seconds_pack": "s (pack)"})
    ok = "each exit as expected" if df["as_expected"].all() else "NOT every exit as expected (bench.csv)"
    md = ["Wall seconds of `python -m distlab atlas query` (**measured**, a fresh interpreter each: start "
          f"and imports included) on the runs folder and on the pack; load average {load0 or '?'} before, "
          f"{load1 or '?'} after, {os.cpu_count()} cores.  P parameters, N workers; the pack answered as "
          f"the runs folder every time; {ok}.", "",
          markdown_table(show, floatfmt=".2f")]
    atomic_write_text(out_md, "\n".join(md))
    return df
