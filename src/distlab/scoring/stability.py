"""Same commit, same verdicts: rerun the measured parts and list every verdict that flips.

A measured verdict counts as decided only if it is the same in ``K`` = 3 evaluations
(the scorecard, then the measured rules forced to run again, twice) and its estimate stays
within reach of its own interval: a row whose verdict differs between them, or a reproduced
or not-reproduced row whose 95 % intervals of two evaluations do not overlap (the estimate
moved further between reruns of one commit than its interval allows, so the interval does not
hold this machine's run-to-run variation, even where the verdict happened to hold), reads
*unstable here*, with the verdicts and the estimates of every run (:func:`settle`), in
``paper/scorecard_stable.csv`` and ``.md`` beside the report.  The settled scorecard's estimates are the last evaluation's; over the whole
scorecard it then becomes ``paper/scorecard.csv`` (and each paper's page), and the workflow's
default target runs again, so the write-up, tables and figures in ``paper/`` are all of the
settled evaluation (:func:`settle_paper`); the first evaluation's scorecard is kept as
``paper/stability_first.csv``.  The reruns' benchmark files go to
``results/stability/benchmarks/run<k>/``; ``benchmarks/`` keeps the first run's, so the
job-seconds per paper stay one run's (:func:`set_benchmarks_aside`).

Simulated runs are deterministic (seeded, on the spec's own thread count), so
rerunning them proves nothing; what can move between two runs of one commit
are the parts that measure wall time or a profile on this machine: real
gloo/NCCL jobs, timed local-learning runs, benchmarks, placement profiles and
real executions.  :func:`run` evaluates the scorecard, forces every measured
rule to run again, evaluates it once more and writes the comparison:
claim by claim, both verdicts, and whether the claim is marked ``measured``.
A flip of a claim that is not marked measured is a determinism bug.

Then the replicate (:mod:`distlab.scoring.replicate`): every decided trained row (and every
inconclusive one with an interval) rerun on a disjoint seed block under the other kernel set; a
verdict it does not repeat reads *unstable here* too, and column ``replicated`` of the settled
scorecard says for every decided row whether and how it was replicated.

``python -m distlab stability --cores 2`` (``make stability``) drives it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd

from ..results.tables import atomic_write_text, markdown_table, read_table_checked

K = 3  # evaluations a measured verdict must agree in (the first and two reruns of the measured rules)
# the verdicts an estimate decides: only these read unstable here for an estimate that moved (a row
# not testable here, reported beside a test or inconclusive decides nothing the estimate could undo)
DECIDED = ("reproduced", "not reproduced")

# Rules whose outputs are measured on this machine (wall time, memory, a profile).
MEASURED_RULES = (
    "baseline_train_dist", "pgc_train_real", "pgc_trace_fit", "demo_train_real", "demo_bench",
    "demo_train_sim",  # each worker's compute measured (demo.compute.mode): the demo.speed rows' time
    "local_train", "local_bench_throughput", "local_bench_pc_cost", "placement_profile",
    "placement_real", "placement_bench_sim", "bench_allreduce", "bench_calibrate", "pgc_coding_profile",
)


BENCHMARKS = "benchmarks"  # each job's Snakemake benchmark (the job-seconds a run reports per paper)
RERUN_BENCHMARKS = "results/stability/benchmarks"  # the reruns' own, one folder a rerun


def read_benchmarks(bench: Path) -> dict[Path, bytes]:
    """Every benchmark file under ``bench``, by path: the run's job times before the reruns."""
    return {f: f.read_bytes() for f in sorted(bench.rglob("*.tsv"))} if bench.is_dir() else {}


def set_benchmarks_aside(bench: Path, before: dict[Path, bytes], aside: Path) -> list[Path]:
    """After a rerun of the measured rules: the benchmark files it rewrote move to ``aside``
    (same relative paths), and ``bench`` holds the first run's files again, so the job-seconds
    a snapshot reports per paper are one run's, not the first run's with the reruns' mixed in.
    A file is written back with its bytes (a fresh time: it stays newer than the job's inputs,
    which the rerun rewrote).  Returns the files set aside."""
    moved = []
    for f in sorted(bench.rglob("*.tsv")) if bench.is_dir() else []:
        old = before.get(f)
        data = f.read_bytes()
        if old == data:
            continue
        dest = aside / f.relative_to(bench)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(data)
        moved.append(dest)
        if old is None:
            f.unlink()  # a job the first run did not have: its time is the rerun's only
        else:
            f.write_bytes(old)
    return moved


def compare(first: pd.DataFrame, second: pd.DataFrame) -> pd.DataFrame:
    """Claim by claim: the two verdicts, whether they differ, whether the claim is measured."""
    a = first.set_index("id")
    b = second.set_index("id")
    ids = [i for i in a.index if i in b.index] + [i for i in b.index if i not in a.index]
    rows = []
    for cid in ids:
        va = a["verdict"].get(cid, "absent")
        vb = b["verdict"].get(cid, "absent")
        measured = bool(a["measured"].get(cid, False) if "measured" in a else False) or bool(
            b["measured"].get(cid, False) if "measured" in b else False)
        rows.append({"id": cid, "paper": (a["paper"].get(cid) if cid in a.index else b["paper"].get(cid)),
                     "measured": measured, "first": va, "second": vb, "flipped": va != vb,
                     "first_ours": a["ours"].get(cid, "") if cid in a.index else "",
                     "second_ours": b["ours"].get(cid, "") if cid in b.index else ""})
    return pd.DataFrame(rows, columns=["id", "paper", "measured", "first", "second", "flipped",
                                       "first_ours", "second_ours"])


def _interval(card: pd.DataFrame, cid: str) -> tuple[float, float] | None:
    """A claim's interval ``[ci_low, ci_high]`` in one evaluation, or None (no finite interval)."""
    if cid not in card.index or "ci_low" not in card or "ci_high" not in card:
        return None
    lo, hi = pd.to_numeric(card["ci_low"].get(cid), errors="coerce"), pd.to_numeric(card["ci_high"].get(cid),
                                                                                     errors="coerce")
    return (float(lo), float(hi)) if pd.notna(lo) and pd.notna(hi) and lo <= hi else None


def intervals_apart(intervals: list[tuple[float, float] | None]) -> bool:
    """Whether two of the evaluations' intervals do not overlap (those without one are skipped):
    two independent 95 % intervals miss each other with probability well under 1 % when the
    quantity is the same, so a gap says the reruns measured different quantities."""
    have = [iv for iv in intervals if iv is not None]
    return any(a[1] < b[0] or b[1] < a[0] for i, a in enumerate(have) for b in have[i + 1:])


def compare_runs(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Claim by claim over ``k`` evaluations: each run's verdict and estimate, whether they all
    agree (``flipped`` when not; a claim missing from a run counts as a flip) and whether a
    verdict that held and is :data:`DECIDED` has two runs' intervals that do not overlap
    (``moved``, :func:`intervals_apart`)."""
    if len(frames) < 2:
        raise ValueError(f"stability: needs at least 2 evaluations to compare, got {len(frames)}")
    cards = [f.set_index("id") for f in frames]
    ids = list(dict.fromkeys(i for c in cards for i in c.index))
    rows = []
    for cid in ids:
        verdicts = [c["verdict"].get(cid, "absent") if cid in c.index else "absent" for c in cards]
        ours = [str(c["ours"].get(cid, "")) if cid in c.index and "ours" in c else "" for c in cards]
        measured = any(bool(c["measured"].get(cid, False)) for c in cards if "measured" in c and cid in c.index)
        paper = next(c["paper"].get(cid) for c in cards if cid in c.index)
        rows.append({"id": cid, "paper": paper, "measured": measured, "verdicts": " | ".join(verdicts),
                     "flipped": len(set(verdicts)) > 1, "moved": (len(set(verdicts)) == 1 and verdicts[0] in DECIDED
                               and intervals_apart([_interval(c, cid) for c in cards])),
                     "ours": " | ".join(ours)})
    return pd.DataFrame(rows, columns=["id", "paper", "measured", "verdicts", "flipped", "moved", "ours"])


def settle(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """The last evaluation's scorecard (the one whose tables and figures ``paper/`` then holds,
    so that a row's estimate and the tables agree) with every row whose verdict is not the same
    in all ``frames``, or whose intervals of two of them do not overlap (``moved``), relabelled
    *unstable here*: the verdicts and the estimates of each run in
    its reason and in its own column ``spread`` (empty for a row that held), its p-values and
    seed count left as the last run's; ``evaluations`` is how many evaluations were compared."""
    table = compare_runs(frames).set_index("id")
    out = frames[-1].copy()
    out["spread"] = ""
    out["evaluations"] = len(frames)
    for i, cid in enumerate(out["id"]):
        flipped, moved = bool(table.at[cid, "flipped"]), bool(table.at[cid, "moved"])
        if not (flipped or moved):
            continue
        runs = table.at[cid, "verdicts"].split(" | ")
        ours = table.at[cid, "ours"].split(" | ")
        spread = "; ".join(f"run {k + 1}: {v} ({o})" for k, (v, o) in enumerate(zip(runs, ours)))
        out.at[i, "spread"] = spread
        what = ("the verdict is not the same in" if flipped else
                "the verdict held but the estimate moved outside its own interval in")
        out.at[i, "reason"] = (f"unstable here: {what} {len(frames)} evaluations of "
                               f"this commit ({spread}); last run's reason: {out.at[i, 'reason']}")
        out.at[i, "verdict"] = "unstable here"
        if "seeds_needed" in out.columns:
            out.at[i, "seeds_needed"] = float("nan")
    return out


def report(table: pd.DataFrame) -> str:
    """The comparison's page: the flipped verdicts, then (where ``table`` has ``moved``) the
    held verdicts whose estimate moved outside its own interval; a claim that is not marked
    measured doing either is a determinism bug."""
    moved = table["moved"] if "moved" in table else pd.Series(False, index=table.index)
    flips = table[table["flipped"]]
    drift = table[moved]  # moved: the verdict held (compare_runs), so no row is in both lists
    bugs = table[(table["flipped"] | moved) & ~table["measured"]]
    lines = ["# Stability: the measured parts run again", "",
             f"{len(table)} claims; {len(flips)} verdicts flipped between the runs "
             f"({int(flips['measured'].sum())} of claims marked measured, {len(flips[~flips['measured']])} of claims "
             "that rest on simulated or deterministic results only); "
             f"{len(drift)} held verdicts whose estimate moved outside its own interval "
             "(two runs' 95 % intervals do not overlap).", ""]
    if len(bugs):
        lines += ["**Claims that are not marked measured flipped: their results are not "
                  "deterministic, which is a bug.**", ""]
    if len(flips):
        lines += [markdown_table(flips.drop(columns=["flipped", "moved"], errors="ignore")), ""]
    else:
        lines += ["No verdict flipped.", ""]
    if len(drift):
        lines += ["Verdicts that held while their estimate moved outside its own interval (also *unstable "
                  "here*):", "", markdown_table(drift.drop(columns=["flipped", "moved"], errors="ignore")), ""]
    return "\n".join(lines)


def _snakemake(args: list[str], cwd: Path) -> None:
    cmd = [sys.executable, "-m", "snakemake", *args]
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, cwd=cwd, check=True)


def existing_rules(cwd: Path, extra: list[str]) -> set[str]:
    out = subprocess.run([sys.executable, "-m", "snakemake", "--list-rules", *extra], cwd=cwd,
                         capture_output=True, text=True, check=True).stdout
    # one rule a line, its docstring (if any) after the name in parentheses, continued on
    # indented lines: the rule's name is the first word of an unindented line
    return {line.split()[0] for line in out.splitlines()
            if line.strip() and not line[0].isspace() and re.fullmatch(r"[A-Za-z_]\w*", line.split()[0])}


def dag_rules(cwd: Path, targets: list[str], extra: list[str]) -> set[str]:
    """The rules with a job in the DAG of ``targets`` (all of it, as if nothing had run)."""
    out = subprocess.run([sys.executable, "-m", "snakemake", *targets, "-n", "--forceall", "--quiet", "rules",
                          *extra], cwd=cwd, capture_output=True, text=True, check=True).stdout
    return {line.split()[0] for line in out.splitlines()
            if len(line.split()) == 2 and line.split()[1].isdigit() and line.split()[0] != "total"}


def run(cores: int, out: Path, extra: list[str] | None = None, cwd: Path | None = None,
        papers: list[str] | None = None, k: int = K, replicate: bool = True) -> pd.DataFrame:
    """Scorecard, then ``k - 1`` reruns of every measured rule, each followed by the scorecard;
    the comparison in ``out``, the settled scorecard (:func:`settle`) beside it.

    ``papers``: only those papers' scorecards (``paper/scorecard/<paper>.csv``) and the
    measured rules they depend on; by default the whole scorecard.  Returns the comparison of
    the first two evaluations with ``flipped`` true for a claim whose verdict differed in any of
    them and ``moved`` for one whose intervals of two of them do not overlap.  ``replicate``: then
    the replicate (:mod:`distlab.scoring.replicate`, when ``replicate.enabled``) judges the settled
    scorecard, and its section joins the report."""
    if k < 2:
        raise ValueError(f"stability: k must be at least 2 evaluations, got {k}")
    cwd = Path(cwd or os.getcwd())
    extra = list(extra or [])
    cards = ([cwd / "paper" / "scorecard" / f"{p}.csv" for p in papers] if papers
             else [cwd / "paper" / "scorecard.csv"])
    targets = [str(c.relative_to(cwd)) for c in cards] if papers else ["scorecard"]

    def read() -> pd.DataFrame:
        return pd.concat([read_table_checked(c) for c in cards], ignore_index=True)

    _snakemake(["--cores", str(cores), *targets, *extra], cwd)
    frames = [read()]
    keep = out.with_name(out.stem + "_first.csv")
    keep.parent.mkdir(parents=True, exist_ok=True)
    frames[0].to_csv(keep, index=False)
    # --forcerun runs a named rule even where the targets do not need it: name only the
    # measured rules of the targets' own DAG
    rules = [r for r in MEASURED_RULES if r in dag_rules(cwd, targets, extra)]
    if not rules:
        raise RuntimeError("stability: none of the measured rules is in the workflow of these targets "
                           f"({', '.join(MEASURED_RULES)}): nothing would run twice")
    reproduce_bench = read_benchmarks(cwd / BENCHMARKS)
    for i in range(k - 1):
        _snakemake(["--cores", str(cores), *targets, "--forcerun", *rules, *extra], cwd)
        set_benchmarks_aside(cwd / BENCHMARKS, reproduce_bench, cwd / RERUN_BENCHMARKS / f"run{i + 2}")
        frames.append(read())
    table = compare(frames[0], frames[1])
    over = compare_runs(frames).set_index("id")
    table["flipped"] = table["id"].map(over["flipped"]).fillna(True).astype(bool)
    table["moved"] = table["id"].map(over["moved"]).fillna(False).astype(bool)
    text = report(table) + "\n## All evaluations\n\n" + markdown_table(
        compare_runs(frames).drop(columns=["flipped", "moved"]))
    settled = settle(frames)
    if replicate:  # every decided trained row again, on other seeds under other kernels
        from . import replicate as rep

        settled, power, config = rep.run(settled, cores, cwd, extra)
        text += "\n" + rep.report(power, settled, config)
        power.to_csv(out.with_name("replicate_power.csv"), index=False)
    atomic_write_text(out, text)
    table.to_csv(out.with_suffix(".csv"), index=False)
    settled.to_csv(out.with_name("scorecard_stable.csv"), index=False)
    from .scorecard import write_scorecard

    from ..results.tables import record_graded_runs

    write_scorecard(settled, out.with_name("scorecard_stable.md"), out.with_name("scorecard_stable.csv"),
                    title=f"Reproduction scorecard, settled over {k} evaluations of the measured parts"
                    + (" and the replicate" if replicate else ""))
    # its record: the runs the evaluated scorecards graded (paper/'s assembly refuses it once one is gone)
    record_graded_runs(out.with_name("scorecard_stable.csv"), settled, cards)
    if not papers:
        settle_paper(settled, cores, cwd, extra)
    return table


def settle_paper(settled: pd.DataFrame, cores: int, cwd: Path, extra: list[str]) -> None:
    """paper/ wholly of the settled evaluation: its scorecard, whole and per paper, becomes the
    settled one (:func:`distlab.scoring.paperrecord.write_settled`), then the workflow's default
    target runs, so the write-up, tables and figures are made again from the last evaluation's
    results and the settled scorecard together, not left from the first evaluation."""
    from .paperrecord import write_settled

    write_settled(settled, cwd / "paper")
    _snakemake(["--cores", str(cores), *extra], cwd)
