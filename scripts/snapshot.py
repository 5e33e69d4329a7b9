"""paper/, the reader's copy: one evaluation, assembled at the end of ``make reproduce`` and
of ``make stability``, and its record ``paper/record.json``.

Verbs:

``python scripts/snapshot.py clear`` (make reproduce, before Snakemake)
    empties paper/ unless it was assembled from this checkout's last run (a clone's or a pull's
    paper/ is another machine's: Snakemake would take its pages for done and skip their runs).

``python scripts/snapshot.py record --out results/reproduce.json --start T0 --rc RC ... -- WORDS``
    called by ``make reproduce`` after the workflow ends: the commit it ran (and whether the tree
    was dirty), its start and end, exit code, load average, the machine (CPU model, cores,
    memory, instruction set, kind), the config files and overrides, and Snakemake's words.

``python scripts/snapshot.py [--stability-commit C --stability-start T]`` (make reproduce, make stability)
    makes paper/ wholly of the recorded run: the workflow's pages as it wrote them, plus
    ``benchmarks/`` (paper/benchmarks/), ``snakemake netcheck``'s outputs when written since the
    run started (paper/netcheck/, paper/benchmarks/netcheck/; another run's are left out and the
    record says why), the atlas's query files (paper/atlas/: the pack ``distlab atlas query``
    reads, refused when incomplete or when its record fails), and make stability's files when its
    settled scorecard grades this run's claims (written after the run started; its run and commit
    recorded).  Every other file in paper/ is removed: one the workflow's DAG does not name
    (``snakemake --summary`` with the run's words) and the assembly did not write.  The previous
    verdicts are those of the paper/ HEAD holds (``previous_verdicts.csv``), the changes listed
    with the commit range (``verdict_changes.md``); the record goes to ``record.json``, the record
    check and the counts line atop ``paper/README.md`` (:mod:`distlab.scoring.paperrecord`), the
    README's verdict table from the settled scorecard's counts, and the pages' generated blocks
    (``<!-- snapshot:KIND ARG -->`` ... ``<!-- /snapshot -->``) from paper/.

``python scripts/snapshot.py blocks``
    refills the record check atop paper/README.md, the README's verdict table and the pages'
    generated blocks from paper/ as it is.

``python scripts/snapshot.py atlas``
    the atlas's query files alone into paper/ of the same run.

A settled scorecard (make stability, :func:`distlab.scoring.stability.settle_paper`) reads
*unstable here* for a measured row whose verdict was not the same in every evaluation, with its
``spread``; the README's table and the ``counts`` blocks count it in its own column and the
``unstable PAPER`` blocks list those rows with their spread.
"""

from __future__ import annotations

import argparse
import calendar
import csv
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _registry():
    """The registered papers (distlab.papers), from this checkout's src/."""
    if str(ROOT / "src") not in sys.path:
        sys.path.insert(0, str(ROOT / "src"))
    from distlab.papers import papers

    return papers()


# scorecard paper code -> (README label, its page), and the code whose commits may explain a
# paper's verdict changes: each registered paper's (distlab.pipeline.paper.Paper)
PAPERS = {p.scorecard: (p.title, p.doc) for p in _registry()}
PAPER_PATHS = {p.scorecard: list(p.code) for p in _registry()}
# rows reported beside a test, not counted among the claims: the scorecard's own name and counts line
from distlab.scoring.paperrecord import HEADER_END, banner, put_header, read_card, tally  # noqa: E402
from distlab.scoring.reported import REPORTED, counts_line  # noqa: E402  (src/ is on the path now)
# the scorecard's verdicts, in its order; UNSTABLE only from `make stability` (a measured verdict
# that was not the same in its k evaluations, distlab.scoring.stability.settle)
from distlab.scoring.replicate import UNSTABLE  # noqa: E402
from distlab.scoring.scorecard import VERDICTS  # noqa: E402
SHARED_PATHS = ["config/claims.yaml", "config/config.yaml", "src/distlab/scoring/scorecard.py",
                "src/distlab/scoring/stats.py"]
BEGIN = "<!-- verdicts:begin"
END = "<!-- verdicts:end -->"
STALE = "## Results made by other code"
PAPER_FILES = ("scorecard.md", "scorecard.csv", "README.md")
PAPER_DIRS = ("scorecard", "figures", "tables")
# benchmark folders of no paper (the jobs every paper shares)
JOB_FOLDERS = {"data": "data preparation", "paper": "scorecard and write-up", "netcheck": "netcheck (outside make reproduce)",
               "bench": "shared benchmarks"}


# what `snakemake netcheck` writes (workflow/rules/netcheck.smk): per rule, its outputs in
# results/netcheck/ and its benchmark in benchmarks/netcheck/
NETCHECK_RULES = {
    "netcheck_bench": (("netcheck.csv", "netcheck.md", "netcheck_fit.csv", "netcheck_skipped.csv"),
                       "bench.tsv"),
    "netcheck_error": (("techerror.csv", "techerror.md", "techerror.png", "techerror_steps.csv"),
                       "error.tsv"),
}
NOT_RUN = "netcheck: not run in this snapshot"
# what `make stability` writes beside paper/scorecard.csv: the scorecard settled over its k
# evaluations, and the comparison of the evaluations
STABLE_CARD = "scorecard_stable.csv"
STABILITY_FILES = ("stability.md", "stability.csv", "replicate_power.csv")  # the last: the replicate's power table
NO_STABILITY = "make stability: not run for this snapshot (measured verdicts from one evaluation)"
NO_FINDINGS = ("the last column is empty until `make stability` has settled and replicated this evaluation "
               "(a finding cites only rows that held)")


class Refused(Exception):
    """A snapshot that would not be the landed code's (or a missing input)."""


def git(*args: str, cwd: Path = ROOT, check: bool = True) -> str:
    r = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise Refused(f"git {' '.join(args)}: {r.stderr.strip()}")
    return r.stdout.strip()


# ------------------------------------------------------------------ the machine

def machine() -> dict:
    info = {"platform": platform.platform(), "machine": platform.machine(),
            "cores": os.cpu_count(), "cpu_model": None, "memory_gb": None, "isa": None,
            "isa_pinned": os.environ.get("DISTLAB_CPU_ISA") or None}
    try:
        text = Path("/proc/cpuinfo").read_text()
        m = re.search(r"^model name\s*:\s*(.+)$", text, re.M)
        info["cpu_model"] = m.group(1).strip() if m else None
        m = re.search(r"^flags\s*:\s*(.+)$", text, re.M)
        flags = set(m.group(1).split()) if m else set()
        info["isa"] = ("avx512" if "avx512f" in flags else "avx2" if "avx2" in flags
                       else "sse" if flags else None)
    except OSError:
        pass
    try:
        m = re.search(r"^MemTotal:\s*(\d+) kB", Path("/proc/meminfo").read_text(), re.M)
        info["memory_gb"] = round(int(m.group(1)) / 2**20, 1) if m else None
    except OSError:
        pass
    from distlab.results.machinekind import machine_kind

    # the machine kind (vendor, family, model, ISA; torch, MKL, oneDNN): what a run must share with
    # this snapshot to repeat its digits (python -m distlab compare-snapshot)
    info["kind"] = machine_kind()
    return info


def loadavg() -> list[float] | None:
    try:
        return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
    except (OSError, ValueError):
        return None


def record(args: argparse.Namespace) -> dict:
    end = args.end if args.end is not None else time.time()
    rec = {
        "command": args.command_line,
        "commit": args.commit or None,
        "dirty": args.dirty > 0,
        "start_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(args.start)),
        "end_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(end)),
        "wall_s": round(end - args.start, 1),
        "exit_code": args.rc,
        "cores_used": args.cores,
        "load_start": [float(x) for x in args.load_start.split()] if args.load_start.strip() else None,
        "load_end": loadavg(),
        "machine": machine(),
        "config": run_config(args.snakemake_args),
        "snakemake_args": list(args.snakemake_args),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(rec, indent=2) + "\n")
    tmp.replace(out)
    return rec


def run_config(words: list[str]) -> dict:
    """The configuration a run was made with: each config file Snakemake read (its path and
    content hash, None where it could not be read) and the ``--config`` overrides."""
    import hashlib

    from distlab.config.preflight import configfiles

    files = []
    for name in configfiles(words):
        try:
            digest = hashlib.sha256(Path(name).read_bytes()).hexdigest()
        except OSError:
            digest = None
        files.append({"path": name, "sha256": digest})
    overrides, taking = [], False
    for w in words:
        if w.startswith("-"):
            taking = w in ("--config", "-C")
            if w.startswith("--config="):
                overrides.append(w.split("=", 1)[1])
            continue
        if taking:
            overrides.append(w)
    return {"files": files, "overrides": overrides}


def check_runs_present(*cards: Path) -> None:
    """A scorecard the snapshot publishes is refused when it is not what its rule wrote or grades
    a run that is gone since (its record, ``distlab.results.tables.table_errors``): a verdict
    of a vanished run never reaches paper/.  Not overridable."""
    from distlab.results.tables import table_errors

    for card in cards:
        if card.exists():
            errs = table_errors(card)
            if errs:
                raise Refused(errs[0])


def utc(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def epoch(stamp: str) -> float:
    return float(calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")))


def check_netcheck(rec: dict, outputs: Path, benchmarks: Path,
                   without: bool) -> tuple[dict, list[tuple[Path, str]]]:
    """(the record's ``netcheck``, the files to copy as (source, path under paper/)) of the
    ``snakemake netcheck`` run in ``outputs``: left out when its outputs are another run's
    (written before make reproduce started); refused when a rule's are incomplete."""
    if without:
        return {"run": False, "status": NOT_RUN, "left_out": "--without-netcheck"}, []
    rules, files, written = {}, [], []
    for rule, (names, bench) in NETCHECK_RULES.items():
        have = [n for n in names if (outputs / n).is_file()]
        if not have:
            rules[rule] = NOT_RUN
            continue
        if len(have) < len(names):
            missing = ", ".join(n for n in names if n not in have)
            raise Refused(f"{outputs}: {rule}'s outputs are incomplete (missing {missing}); rerun "
                          "snakemake netcheck, or pass --without-netcheck")
        paths = [(outputs / n, f"netcheck/{n}") for n in names]
        if (benchmarks / bench).is_file():
            paths.append((benchmarks / bench, f"benchmarks/netcheck/{bench}"))
        times = [src.stat().st_mtime for src, _ in paths]
        rules[rule] = {"outputs": list(names),
                       "benchmark": bench if (benchmarks / bench).is_file() else None,
                       "written_utc": [utc(min(times)), utc(max(times))]}
        files += paths
        written += times
    if not files:
        return {"run": False, "status": NOT_RUN}, []
    start, end = epoch(rec["start_utc"]), epoch(rec["end_utc"])
    first = min(written)
    if first < start:
        return {"run": False, "status": NOT_RUN,
                "left_out": f"results/netcheck/ was written {utc(first)}, before make reproduce started "
                            f"({rec['start_utc']}): another run's"}, []
    return {"run": True,
            "rules": rules,
            "written_utc": [utc(first), utc(max(written))],
            "reproduce_utc": [rec["start_utc"], rec["end_utc"]],
            "when": ("after make reproduce" if first >= end
                     else "during make reproduce (sharing its cores: its times may be inflated)"),
            "tree": "the reproduce run's (its outputs record no commit of their own)"}, files


# the atlas's query files (workflow/rules/atlas.smk: atlas_query_pack, atlas_query_bench): what
# `distlab atlas query` reads, packed, and the query's benchmark table -> paper/atlas/
ATLAS_QUERY_FILES = {"pack.json.gz": "atlas/query_pack.json.gz", "bench.csv": "atlas/query_bench.csv",
                     "bench.md": "atlas/query_bench.md"}
NO_ATLAS = "atlas query files: not in this snapshot"


def check_atlas(rec: dict, outputs: Path) -> tuple[dict, list[tuple[Path, str]]]:
    """(the snapshot's ``atlas`` record, the files to copy as (source, path under the snapshot)) of
    the atlas's query files in ``outputs`` (results/atlas/query/): none there, the record says
    so; some, or a pack whose record fails (:func:`distlab.results.tables.table_errors`: edited,
    or made from runs that are gone since) or that does not read back
    (:func:`distlab.atlas.pack.read_pack`): refused."""
    have = [n for n in ATLAS_QUERY_FILES if (outputs / n).is_file()]
    if not have:
        return {"run": False, "status": NO_ATLAS}, []
    if len(have) < len(ATLAS_QUERY_FILES):
        missing = ", ".join(n for n in ATLAS_QUERY_FILES if n not in have)
        raise Refused(f"{outputs}: the atlas's query files are incomplete (missing {missing}); "
                      "rerun snakemake atlas_query_bench")
    from distlab.atlas.pack import PackError, read_pack
    from distlab.results.tables import table_errors

    pack = outputs / "pack.json.gz"
    for table in (pack, outputs / "bench.csv"):
        errs = table_errors(table)
        if errs:
            raise Refused(errs[0])
    if not (outputs / "pack.json.gz.record.json").is_file():
        raise Refused(f"{pack}: no record of the runs it was made from; rerun snakemake atlas_query_pack")
    try:
        head, runs = read_pack(pack)
    except PackError as e:
        raise Refused(str(e)) from None
    files = [(outputs / n, rel) for n, rel in ATLAS_QUERY_FILES.items()]
    times = [src.stat().st_mtime for src, _ in files]
    start = epoch(rec["start_utc"]) if rec.get("start_utc") else None
    end = epoch(rec["end_utc"]) if rec.get("end_utc") else None
    when = ("not known (no start or end recorded)" if start is None or end is None
            else "before make reproduce started (up to date from an earlier run)" if min(times) < start
            else "during make reproduce" if max(times) <= end
            else "after make reproduce, from its runs")
    return {"run": True, "files": [rel for _, rel in files], "pack_bytes": pack.stat().st_size,
            "runs": sum(len(v) for v in runs.values()), "techniques": len(head["techniques"]),
            "compute": head["compute"], "written_utc": [utc(min(times)), utc(max(times))], "when": when}, files


def copy_atlas(dest: Path, files: list[tuple[Path, str]]) -> None:
    """paper/atlas/ holds exactly these files: none of an earlier snapshot's."""
    shutil.rmtree(dest / "atlas", ignore_errors=True)
    for src, rel in files:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest / rel)


def atlas_only(args: argparse.Namespace) -> dict:
    """``snapshot.py atlas``: the atlas's query files alone into the snapshot in ``dest``, from
    results/atlas/query/ of the same make reproduce run as the snapshot (its record's commit and
    start must be the snapshot's: refused otherwise), its ``atlas`` record in record.json, and
    the pages' blocks refilled."""
    root = Path(args.root).resolve()
    dest = root / args.dest
    record_path = root / args.record
    if not record_path.exists() or not (dest / "record.json").exists():
        raise Refused(f"{record_path} and {dest / 'record.json'}: both needed (the run and its snapshot)")
    rec = json.loads(record_path.read_text())
    snap = json.loads((dest / "record.json").read_text())
    if (rec.get("commit"), rec.get("start_utc")) != (snap.get("commit"), snap.get("start_utc")):
        raise Refused(f"{record_path}: the run of {str(rec.get('commit'))[:10]} started {rec.get('start_utc')}, "
                      f"the snapshot's of {str(snap.get('commit'))[:10]} started {snap.get('start_utc')}: "
                      "another run's; use make reproduce")
    atlas, files = check_atlas(rec, root / args.atlas_query)
    copy_atlas(dest, files)
    # made apart from make reproduce: by this tree's code (the pack's fields are the runs' own)
    atlas["copied_by"] = f"snapshot.py atlas at {git('rev-parse', 'HEAD', cwd=root)[:10]}"
    snap["atlas"] = atlas
    (dest / "record.json").write_text(json.dumps(snap, indent=2) + "\n")
    rewrite_blocks(root, dest)
    return atlas


def settled_by(args: argparse.Namespace) -> dict:
    """The make stability run that settled paper/ (its commit, dirty or not, start and end), as the
    Makefile passes it; empty outside make stability."""
    if not getattr(args, "stability_commit", None) and getattr(args, "stability_start", None) is None:
        return {}
    out = {"commit": args.stability_commit or None, "dirty": (args.stability_dirty or 0) > 0}
    if args.stability_start is not None:
        out |= {"start_utc": utc(args.stability_start), "end_utc": utc(time.time())}
    return out


def check_stability(rec: dict, paper: Path, without: bool, run: dict | None = None) -> tuple[dict, Path | None]:
    """(the record's ``stability``, the settled scorecard) of a make stability run over this
    evaluation's paper/ (``run``: its commit and times): its ``scorecard_stable.csv`` must be
    written after the reproduce run started and grade the same claims as paper/scorecard.csv;
    else it is another run's and is left out (and removed with the other stale files)."""
    stable = paper / STABLE_CARD
    if without or not stable.is_file():
        return {"run": False, "status": NO_STABILITY,
                **({"left_out": "--without-stability"} if without and stable.is_file() else {})}, None
    written = stable.stat().st_mtime
    start = epoch(rec["start_utc"]) if rec.get("start_utc") else 0.0
    with stable.open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    ids, card_ids = {r.get("id") for r in rows}, set(read_verdicts(paper / "scorecard.csv"))
    why = (f"written {utc(written)}, before make reproduce started ({rec.get('start_utc')})" if written < start
           else "no verdicts" if not rows or "verdict" not in rows[0]
           else f"grades {len(ids)} claims, paper/scorecard.csv {len(card_ids)}" if ids != card_ids else None)
    if why:
        return {"run": False, "status": NO_STABILITY, "left_out": f"{STABLE_CARD}: {why}: another run's"}, None
    k = max((int(float(r["evaluations"])) for r in rows if r.get("evaluations")), default=None)
    unstable = [r for r in rows if r["verdict"] == UNSTABLE]
    return {"run": True, "evaluations": k, "unstable": len(unstable),
            "unstable_by_paper": dict(Counter(r.get("paper", "") for r in unstable)),
            "replicate": replicate_record(rows), "written_utc": utc(written),
            "settled_by": run or {"commit": "not recorded (settled outside make stability)"}}, stable


def replicate_record(rows: list[dict]) -> dict:
    """The replicate's outcome over the settled scorecard's column ``replicated``: whether it ran,
    how many rows held and how many did not (distlab.scoring.replicate)."""
    outcomes = [str(r.get("replicated") or "") for r in rows]
    held = sum(o.startswith("held") for o in outcomes)
    failed = sum(o.startswith("did not hold") for o in outcomes)
    return {"run": bool(held or failed), "held": held, "did_not_hold": failed}


# ------------------------------------------------------------------ verdicts

SPREAD = re.compile(r"(?:not the same|moved outside its own interval) in \d+ evaluations of this commit "
                    r"\((.*?)\); (?:first|last) run's reason")


def spread_of(row: dict) -> str:
    """An *unstable here* row's spread: each evaluation's verdict and estimate (its ``spread``
    column, or read from its reason where an older settle wrote none); a reported row's finding
    that did not hold in the replicate has one too (its ``spread`` column)."""
    if row.get("spread"):
        return row["spread"]
    if row.get("verdict") != UNSTABLE:
        return ""
    m = SPREAD.search(row.get("reason") or "")
    return m.group(1) if m else ""


def read_verdicts(path: Path) -> dict[str, tuple[str, str]]:
    """id -> (paper, verdict) of a scorecard CSV (empty when there is none)."""
    if not path.exists():
        return {}
    with path.open(newline="", encoding="utf-8") as f:
        return {r["id"]: (r.get("paper", ""), r["verdict"]) for r in csv.DictReader(f)}


def counts(verdicts: dict[str, tuple[str, str]]) -> dict[str, Counter]:
    out: dict[str, Counter] = {p: Counter() for p in PAPERS}
    for paper, verdict in verdicts.values():
        out.setdefault(paper, Counter())[verdict] += 1
    return out


def commits_between(old: str | None, new: str | None, paths: list[str], root: Path,
                    limit: int = 12) -> list[str]:
    if not old or not new:
        return []
    out = git("log", "--format=%h %s", f"{old}..{new}", "--", *paths, cwd=root, check=False)
    lines = [ln[:120] + ("…" if len(ln) > 120 else "") for ln in out.splitlines() if ln]
    if len(lines) > limit:
        lines = lines[:limit] + [f"… and {len(lines) - limit} more (`git log {old[:10]}..{new[:10]}`)"]
    return lines


def verdict_changes(old: dict, new: dict, old_commit: str | None, new_commit: str | None,
                    root: Path) -> tuple[list[dict], str]:
    rows = []
    for cid in sorted(set(old) | set(new)):
        before = old.get(cid, ("", "—"))[1]
        after = new.get(cid, ("", "—"))[1]
        if before != after:
            paper = (new.get(cid) or old.get(cid))[0]
            rows.append({"id": cid, "paper": paper, "previous": before, "now": after})
    rng = f"{(old_commit or 'unrecorded')[:10]}..{(new_commit or 'unrecorded')[:10]}"
    lines = ["# Verdict changes", "",
             f"Written by `make reproduce`: every claim whose verdict differs from the committed "
             f"paper/'s (`previous_verdicts.csv`), commit range `{rng}`. \"—\" marks a claim "
             "that did not exist on that side. Under each paper, the commits of the range that "
             "touched its code or the claims; the closing note of the snapshot's commit says why "
             "each verdict changed.", ""]
    if not rows:
        lines += ["No verdict changed.", ""]
    for paper in PAPERS:
        mine = [r for r in rows if r["paper"] == paper]
        if not mine:
            continue
        lines += [f"## {PAPERS[paper][0]}", "", "| claim | previous | now |", "|---|---|---|"]
        lines += [f"| `{r['id']}` | {r['previous']} | {r['now']} |" for r in mine]
        lines.append("")
        commits = commits_between(old_commit, new_commit, PAPER_PATHS[paper] + SHARED_PATHS, root)
        if commits:
            lines += [f"Commits in `{rng}` touching this paper's code or the claims:", ""]
            lines += [f"- {c}" for c in commits]
            lines.append("")
    return rows, "\n".join(lines)


# ------------------------------------------------------------------ the README's table

def verdict_table(card: dict[str, Counter], findings: dict[str, str]) -> str:
    head = "| paper | " + " | ".join(VERDICTS) + " | what it found |"
    lines = [head, "|---|" + "---:|" * len(VERDICTS) + "---|"]
    total: Counter = Counter()
    for paper, (label, page) in PAPERS.items():
        c = card.get(paper, Counter())
        total.update(c)
        lines.append(f"| [{label}]({page}) | " + " | ".join(str(c[v]) for v in VERDICTS)
                     + f" | {findings.get(paper, '')} |")
    lines.append("| **all claims** | " + " | ".join(str(total[v]) for v in VERDICTS) + " | |")
    return "\n".join(lines)


def parse_table(readme: str) -> tuple[dict[str, dict[str, int]], dict[str, str]]:
    """The README's verdict table: paper -> {verdict: count}, paper -> finding."""
    if BEGIN not in readme or END not in readme:
        raise Refused(f"README.md: no verdict table markers ('{BEGIN} ...' and '{END}')")
    block = readme.split(BEGIN, 1)[1].split(END, 1)[0]
    got, findings = {}, {}
    labels = {f"[{label}]({page})": paper for paper, (label, page) in PAPERS.items()}
    # the columns by the header's names: a verdict without a column (a table written before it
    # existed, e.g. "unstable here") counts 0
    head = ["paper", *VERDICTS, "what it found"]
    for line in block.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells and cells[0] == "paper":
            head = cells
        elif cells and cells[0] in labels:
            paper = labels[cells[0]]
            row = dict(zip(head, cells))
            got[paper] = {v: int(row.get(v) or 0) for v in VERDICTS}
            findings[paper] = row.get("what it found", "")
    return got, findings


def decided_basis(card: Path) -> dict[str, int]:
    """The snapshot's decided rows (reproduced, not reproduced) by what they rest on
    (distlab.scoring.basis): measured, trained, trained x clock, clock, arithmetic."""
    from distlab.scoring.basis import KINDS, UnknownMetric, decided_by_basis

    try:
        c = decided_by_basis(_rows(card))
    except UnknownMetric as e:
        raise Refused(f"{card}: {e}") from None
    return {k: c[k] for k in KINDS}


# ------------------------------------------------------------------ findings that held

CITED = re.compile(r"`([A-Za-z0-9_][A-Za-z0-9_.\-]*\.[A-Za-z0-9_.\-]+)`")  # a claim id in backticks


def not_held(row: dict) -> str | None:
    """Why a finding may not rest on ``row`` (None: the row held): it reads *unstable here* (its
    spread named), or it rests on trained or seeded quantities and the replicate on another seed
    block under another kernel set did not repeat it (distlab.scoring.replicate)."""
    from distlab.scoring.replicate import chosen

    if row.get("verdict") == UNSTABLE:
        return f"reads {UNSTABLE} ({spread_of(row) or 'no spread recorded'})"
    import pandas as pd

    if chosen(pd.DataFrame([row])).empty or str(row.get("replicated") or "").startswith("held"):
        return None
    said = str(row.get("replicated") or "")
    if said.startswith("did not hold"):
        return f"did not hold in the replicate ({spread_of(row) or said})"
    return f"was not replicated ({said or 'no replicate: run make stability'})"


def check_findings(findings: dict[str, str], rows: list[dict], replicated: bool) -> None:
    """The README's findings state only rows that held: every claim a finding cites (a scorecard
    id in backticks) must hold (:func:`not_held`); once the replicate has run, a finding that
    cites no row is refused too, since whether it held cannot be checked.  Refused, naming each."""
    by_id = {r["id"]: r for r in rows}
    problems = []
    for paper, text in findings.items():
        cited = [c for c in CITED.findall(text or "") if c in by_id]
        if replicated and (text or "").strip() and not cited:
            problems.append(f"{paper}: the finding cites no scorecard row (`id`), so whether it held cannot be checked")
        for cid in cited:
            why = not_held(by_id[cid])
            if why:
                problems.append(f"{paper}: the finding cites `{cid}`, which {why}")
    if problems:
        raise Refused("README.md: findings that did not hold are not stated; rewrite them (the last column):\n  "
                      + "\n  ".join(problems))


def rewrite_readme(readme: Path, card: dict[str, Counter], rec: dict, rows: list[dict] | None = None) -> None:
    """The README's verdict table from the snapshot's counts, its findings checked against the
    snapshot's rows (``rows``: :func:`check_findings`) and its summary line."""
    text = readme.read_text(encoding="utf-8")
    _, findings = parse_table(text)
    replicate = (rec.get("stability") or {}).get("replicate") or {}
    if replicate.get("run"):
        check_findings(findings, rows or [], True)
    else:  # no row of this evaluation has held yet: the findings (a settled evaluation's, in git) are not stated
        findings = {p: "" for p in findings}
    before, rest = text.split(BEGIN, 1)
    marker_line, _ = rest.split("\n", 1)
    after = rest.split(END, 1)[1]
    table = verdict_table(card, findings)
    when = (rec.get("end_utc") or "")[:10]
    commit = (rec.get("commit") or "unrecorded")[:10]
    st = rec.get("stability") or {}
    settled = (f"; measured verdicts settled over {st.get('evaluations') or 'k'} evaluations by `make stability` "
               f"({st.get('unstable', 0)} {UNSTABLE}, each with its spread in `paper/scorecard.csv`)"
               if st.get("run") else f"; {NO_STABILITY}")
    if not replicate.get("run"):
        settled += f"; {NO_FINDINGS}"
    if replicate.get("run"):
        settled += (f"; trained verdicts replicated on another seed block under another kernel set: "
                    f"{replicate['held']} held, {replicate['did_not_hold']} did not ({UNSTABLE}); the findings "
                    "cite only rows that held")
    basis = ""
    if rec.get("decided_basis") is not None:
        from distlab.scoring.basis import sentence

        basis = " " + sentence(Counter(rec["decided_basis"]))
    check = banner(readme.parent, "paper")
    block = (f"{BEGIN}{marker_line}\n{table}\n\nCounts from paper/ of commit `{commit}` "
             f"({when}), `paper/record.json`{settled}.{basis}\n" + (f"\n{check}" if check else "") + END)
    readme.write_text(before + block + after, encoding="utf-8")


# ------------------------------------------------------------------ whether the write-up is settled

SETTLEMENT_BEGIN, SETTLEMENT_END = "<!-- settlement -->", "<!-- /settlement -->"


def settlement(rec: dict) -> str:
    """One line for the write-up's top: whether its verdicts are settled (make stability's
    evaluations and replicate, with their counts) or of one evaluation."""
    st = rec.get("stability") or {}
    rep = st.get("replicate") or {}
    if not st.get("run"):
        return ("**Not settled.** Every verdict here is of one evaluation: `make stability` has not rerun the "
                "measured parts nor replicated the trained rows on another seed block under another kernel set, "
                "so no verdict below is known to survive either (`record.json`).")
    text = (f"**Settled.** Measured verdicts agree over {st.get('evaluations') or 'k'} evaluations or read "
            f"*{UNSTABLE}* ({st.get('unstable', 0)} of them)")
    if rep.get("run"):
        text += (f"; trained verdicts replicated on another seed block under another kernel set: {rep['held']} held, "
                 f"{rep['did_not_hold']} did not (*{UNSTABLE}*)")
    return text + " (`record.json`)."


def put_settlement(page: Path, rec: dict) -> bool:
    """:func:`settlement`'s line as a block right below the write-up's record block (at the top
    without one), over its previous version.  True when the page changed."""
    text = page.read_text(encoding="utf-8")
    block = f"{SETTLEMENT_BEGIN}\n{settlement(rec)}\n{SETTLEMENT_END}\n"
    if SETTLEMENT_BEGIN in text and SETTLEMENT_END in text:
        before, rest = text.split(SETTLEMENT_BEGIN, 1)
        new = before + block + "\n" + rest.split(SETTLEMENT_END, 1)[1].lstrip("\n")
    elif HEADER_END in text:
        before, after = text.split(HEADER_END, 1)
        new = before + HEADER_END + "\n\n" + block + "\n" + after.lstrip("\n")
    else:
        new = block + "\n" + text
    if new != text:
        page.write_text(new, encoding="utf-8")
    return new != text


# ------------------------------------------------------------------ the pages' generated blocks

BLOCK = re.compile(r"(<!-- snapshot:(\w+) ([\w.-]+) -->\n)(.*?)(<!-- /snapshot -->)", re.S)
BLOCK_PAGES = ("README.md", "docs/*.md")


def block_text(kind: str, arg: str, dest: Path) -> str:
    """What a block of ``kind`` over ``arg`` holds, from the snapshot in ``dest``:
    ``counts P1`` the verdict counts of a scorecard section, ``table NAME`` a table of
    ``tables/NAME.md`` as the workflow wrote it."""
    if kind == "counts" and _stability(dest).get("run"):
        return settled_counts(arg, dest)
    if kind == "unstable":
        return unstable_block(arg, dest)
    if kind == "counts":
        path = dest / "scorecard" / f"{arg}.md"
        line = next((ln for ln in path.read_text(encoding="utf-8").splitlines()
                     if ln.startswith("**") and "claims" in ln), None)
        if line is None:
            raise Refused(f"{path}: no counts line ('**N claims:** ...')")
        return f"{line} (`paper/scorecard/{arg}.md`)\n"
    if kind == "table":
        path = dest / "tables" / f"{arg}.md"
        if not path.exists():
            raise Refused(f"{path}: missing; a block names a table the snapshot does not have")
        return path.read_text(encoding="utf-8").strip() + f"\n\n(`paper/tables/{arg}.md`)\n"
    if kind == "netcheck":
        return netcheck_block(arg, dest)
    if kind == "atlas" and arg == "query_bench":
        return atlas_block(dest)
    if kind == "run" and arg == "reproduce":
        return run_block(dest)
    if kind == "run" and arg == "jobs":
        return jobs_block(dest)
    if kind == "finding":
        return finding_block(arg, dest)
    if kind == "clock" and arg == "measured_points":
        return clock_points_block()
    raise Refused(f"unknown generated block kind {kind!r} (counts, unstable, table, netcheck, run reproduce, "
                  "run jobs, atlas query_bench, finding, clock measured_points)")


def clock_points_block() -> str:
    """The atlas's clock against the points measured over shaped links: computed from the source's
    numbers in the repository (no run of ours), so the block is the code's, not the snapshot's."""
    from distlab.atlas.measured import compare, load_points, markdown

    return (markdown(compare(load_points())).strip()
            + "\n\n(`python -m distlab atlas measured`, from `data/atlas/diloco_measured.csv`)\n")


def finding_block(cid: str, dest: Path) -> str:
    """``finding ID``: a row's estimate and verdict, stated only if it held (:func:`not_held`);
    refused otherwise, naming why and the spread."""
    row = next((r for r in _rows(dest / "scorecard.csv") if r["id"] == cid), None)
    if row is None:
        raise Refused(f"finding {cid}: no such claim in {dest / 'scorecard.csv'}")
    why = not_held(row)
    if why:
        raise Refused(f"finding {cid}: not stated: it {why}")
    how = row.get("replicated") or "not replicated: it rests on no trained or seeded quantity"
    return f"`{cid}`: {row.get('ours')}, {row['verdict']} ({how}; `paper/scorecard.csv`)\n"


def _stability(dest: Path) -> dict:
    path = dest / "record.json"
    return (json.loads(path.read_text(encoding="utf-8")).get("stability") or {}) if path.exists() else {}


def _card_rows(dest: Path, paper: str) -> list[dict]:
    return [r for r in _rows(dest / "scorecard.csv") if paper in ("all", r.get("paper"))]


def settled_counts(paper: str, dest: Path) -> str:
    """``counts P1`` after `make stability`: the section's verdict counts from the settled
    scorecard (its measured rows that flipped counted *unstable here*), as the scorecard
    writes its counts line."""
    rows = _card_rows(dest, paper)
    if not rows:
        raise Refused(f"{dest / 'scorecard.csv'}: no claims of {paper}")
    import pandas as pd

    k = _stability(dest).get("evaluations") or "k"
    return (f"{counts_line(pd.DataFrame(rows), VERDICTS)} (settled over {k} evaluations by "
            f"`make stability`; `paper/scorecard.csv`)\n")


def unstable_block(paper: str, dest: Path) -> str:
    """``unstable P3`` (or ``unstable all``): the rows that read *unstable here*, each with its
    spread (every evaluation's verdict and estimate), or why there are none."""
    st = _stability(dest)
    if not st.get("run"):
        return f"{NO_STABILITY}.\n"
    rows = [r for r in _card_rows(dest, paper) if r["verdict"] == UNSTABLE]
    # the replicate's: a trained verdict another seed block under another kernel set did not repeat
    also = " and the replicate" if (st.get("replicate") or {}).get("run") else ""
    if not rows:
        return (f"No verdict of {'any paper' if paper == 'all' else paper} changed over the "
                f"{st.get('evaluations') or 'k'} evaluations{also} of `make stability` "
                "(`paper/scorecard.csv`).\n")
    return (_md_table(["claim", "spread: each evaluation's verdict (estimate)"],
                      [[f"`{r['id']}`", spread_of(r).replace("|", "\\|")] for r in rows])
            + f"\n\n({len(rows)} {UNSTABLE}, settled over {st.get('evaluations') or 'k'} evaluations{also} by "
              "`make stability`; `paper/scorecard.csv`)\n")


def run_block(dest: Path) -> str:
    """``run reproduce``: how long the snapshot's `make reproduce` took, on what (record.json)."""
    rec = json.loads((dest / "record.json").read_text(encoding="utf-8"))
    m = rec.get("machine") or {}
    what = ", ".join(x for x in (m.get("cpu_model"), f"{m['memory_gb']} GB memory" if m.get("memory_gb") else None) if x)
    load = rec.get("load_start") or []
    return (f"`{rec.get('command', 'make reproduce')}` of `{str(rec['commit'])[:10]}` ({rec['start_utc'][:10]}): "
            f"{rec['wall_s'] / 60:.1f} min wall time on {rec.get('cores_used')} cores"
            + (f" ({what})" if what else "") + f", exit code {rec.get('exit_code')}"
            + (f", load average {load[0]:g} at the start" if load else "")
            + " (`paper/record.json`, measured)." + "".join(f" {n}" for n in rec.get("notes") or []) + "\n")


def add_note(record_path: Path, text: str) -> None:
    """A sentence the record of make reproduce carries into paper/record.json and the run's block
    (say how a run that is not one uninterrupted run came about: its time is then not the budget's)."""
    if not record_path.is_file():
        raise Refused(f"{record_path}: missing; run make reproduce (it writes this record) first")
    text = " ".join(text.split())
    if not text:
        raise Refused("note: empty")
    rec = json.loads(record_path.read_text(encoding="utf-8"))
    rec["notes"] = [*(rec.get("notes") or []), text if text.endswith(".") else text + "."]
    record_path.write_text(json.dumps(rec, indent=2) + "\n", encoding="utf-8")


def jobs_block(dest: Path) -> str:
    """``run jobs``: the job-seconds of the snapshot's jobs per paper, from the benchmark file
    Snakemake wrote for each job (``paper/benchmarks/<folder>/``): what each paper costs a
    `make reproduce`, whatever the order the jobs ran in and however many cores ran them."""
    from distlab.pipeline.paper import find

    rows: dict[str, list[float]] = {}
    for tsv in sorted((dest / "benchmarks").rglob("*.tsv")):
        lines = tsv.read_text(encoding="utf-8").splitlines()
        try:
            s = float(lines[1].split("\t")[0])
        except (IndexError, ValueError):
            continue
        rows.setdefault(tsv.relative_to(dest / "benchmarks").parts[0], []).append(s)
    if not rows:
        raise Refused(f"{dest / 'benchmarks'}: no benchmark files; run make reproduce first")
    found = {k: find(k) for k in rows}
    order = sorted(rows, key=lambda k: (found[k] is None, found[k].order if found[k] else 0, k))
    total = sum(sum(v) for v in rows.values())
    body = [[found[k].title if found[k] else JOB_FOLDERS.get(k, k), str(len(rows[k])), f"{sum(rows[k]):,.0f}",
             f"{100 * sum(rows[k]) / total:.0f} %"] for k in order]
    body.append(["**all jobs**", str(sum(len(v) for v in rows.values())), f"{total:,.0f}", "100 %"])
    return (_md_table(["part", "jobs", "job-seconds (measured)", "share"], body)
            + "\n\n(`paper/benchmarks/`: Snakemake's benchmark of each job, its wall time)\n")


# ------------------------------------------------------------------ netcheck's blocks

def _num(row: dict, key: str) -> float | None:
    try:
        x = float(row.get(key) or "nan")
    except ValueError:
        return None
    return None if x != x else x


def _fmt(x: float | None, spec: str, scale: float = 1.0, unit: str = "") -> str:
    return "" if x is None else format(x * scale, spec) + unit


def _pct(x: float | None) -> str:
    return "" if x is None else f"{x * 100:+.0f} %"


def _ci(row: dict, mean: str, lo: str, hi: str) -> str:
    m, a, b = _num(row, mean), _num(row, lo), _num(row, hi)
    if m is None:
        return ""
    return _pct(m) + (f" [{a * 100:+.0f}, {b * 100:+.0f}]" if a is not None and b is not None else "")


def _rows(path: Path) -> list[dict]:
    if not path.exists():
        raise Refused(f"{path}: missing; record.json lists it as part of the snapshot")
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _md_table(head: list[str], rows: list[list[str]]) -> str:
    return "\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
                      + ["| " + " | ".join(r) + " |" for r in rows])


def netcheck_block(arg: str, dest: Path) -> str:
    """``netcheck status`` whether and when ``snakemake netcheck`` ran for this snapshot,
    ``netcheck time`` its rules' wall and CPU time, ``netcheck fit`` the alpha-beta fit of
    the shaped benchmark, ``netcheck error`` the simulator's error per technique and its
    figure (a link relative to ``docs/``): what ``paper/`` holds."""
    if arg not in ("status", "time", "fit", "error"):
        raise Refused(f"unknown netcheck block {arg!r} (status, time, fit, error)")
    meta = (json.loads((dest / "record.json").read_text()).get("netcheck")
            if (dest / "record.json").exists() else None) or {"run": False}
    rule = {"fit": "netcheck_bench", "error": "netcheck_error"}.get(arg)
    rules = meta.get("rules", {}) if meta.get("run") else {}
    if not rules or (rule and not isinstance(rules.get(rule), dict)):
        what = f" (rule `{rule}`)" if rule and rules else ""
        return f"{NOT_RUN}{what}: `paper/record.json` records no run of it.\n"
    nc = dest / "netcheck"
    if arg == "status":
        ran = [r for r, v in rules.items() if isinstance(v, dict)]
        table = {"netcheck_bench": "netcheck_fit.csv", "netcheck_error": "techerror.csv"}
        unmeasured = []  # a run without root or the kernel's features: every row reads "not run: why"
        for r in ran:
            status = {row.get("status", "") for row in _rows(nc / table[r])}
            if status and all(st.startswith("not run") for st in status):
                unmeasured.append(f"`{r}`'s rows read \"{sorted(status)[0]}\"")
        if unmeasured:
            return (f"Part of this snapshot, but nothing measured: {'; '.join(unmeasured)} "
                    f"(outputs written {meta['written_utc'][0]}; `paper/record.json`).\n")
        return (f"Part of this snapshot (measured): `snakemake netcheck` ({', '.join(ran)}), "
                f"its outputs written {meta['written_utc'][0]} to {meta['written_utc'][1]}, "
                f"{meta['when']}, which ran {meta['reproduce_utc'][0]} to {meta['reproduce_utc'][1]}; "
                f"tree: {meta['tree']}.  Tables and figure: `paper/netcheck/` "
                "(`paper/record.json`).\n")
    if arg == "time":
        out = []
        for r, v in rules.items():
            if not isinstance(v, dict):
                out.append([f"`{r}`", NOT_RUN[len("netcheck: "):], "", ""])
            elif not v.get("benchmark"):
                out.append([f"`{r}`", "no benchmark recorded", "", ""])
            else:
                b = _rows_tsv(dest / "benchmarks" / "netcheck" / v["benchmark"])
                wall, cpu, load = _num(b, "s"), _num(b, "cpu_time"), _num(b, "mean_load")
                out.append([f"`{r}`", "" if wall is None else f"{wall:.0f} s ({wall / 60:.1f} min)",
                            _fmt(cpu, ".0f", unit=" s"), _fmt(load, ".0f", unit=" %")])
        return (_md_table(["rule", "wall time (measured)", "CPU time", "mean CPU load"], out)
                + "\n\n(`paper/benchmarks/netcheck/`, Snakemake's benchmark of each rule)\n")
    if arg == "fit":
        fits = _rows(nc / "netcheck_fit.csv")
        points = _rows(nc / "netcheck.csv")
        out, notes = [], []
        for f in fits:
            if f.get("setup_s"):
                notes.append(f"{f['op']}: {_fmt(_num(f, 'setup_s'), '.3f', unit=' s')} / "
                             f"{_fmt(_num(f, 'teardown_s'), '.3f', unit=' s')} (measured).")
                continue
            if f.get("status", "").startswith("not run"):
                out.append([f.get("rate", ""), f.get("latency", ""), f.get("op", ""), f["status"]]
                           + [""] * 6)
                continue
            mine = [p for p in points if (p.get("rate"), p.get("latency"), p.get("op"))
                    == (f.get("rate"), f.get("latency"), f.get("op"))]
            big = max(mine, key=lambda p: float(p["size_bytes"]), default=None)
            last = None
            if big and _num(big, "nominal_bps"):
                last = _fmt(_num(big, "achieved_Bps") * 8 / _num(big, "nominal_bps"), ".2f") + (
                    f" ({float(big['size_bytes']) / 2**20:g} MB)")
            inj = ""
            if _num(f, "model_err_mean") is not None:
                inj = f"{_pct(_num(f, 'model_err_mean'))} / {_num(f, 'model_err_maxabs') * 100:.0f} %"
            out.append([f.get("rate", ""), f.get("latency", ""), f.get("op", ""), f.get("points", ""),
                        _fmt(_num(f, "alpha_s"), ".2f", 1e3), _fmt(_num(f, "beta_Bps"), ".1f", 1e-6),
                        _fmt(_num(f, "achieved_over_nominal"), ".2f"), last or "",
                        _fmt(_num(f, "fit_rms_rel_err"), ".0f", 100, " %"), inj])
        table = _md_table(["rate", "latency", "collective", "points", "alpha (ms)", "beta (MB/s)",
                           "beta / nominal", "largest point / nominal", "fit rms error",
                           "model error, injected (mean / largest)"], out)
        return (table + "\n\n" + (" ".join(notes) + "\n\n" if notes else "")
                + "(`paper/netcheck/netcheck_fit.csv`, `paper/netcheck/netcheck.md`)\n")
    rows = _rows(nc / "techerror.csv")
    out, within = [], {"error": 0, "error_with_fitted_link": 0, "error_calibrated": 0}
    cells = 0
    for r in rows:
        if _num(r, "measured_step_s") is None:
            out.append([r.get("technique", ""), r.get("rate", ""), r.get("status", "")] + [""] * 6)
            continue
        cells += 1
        for k in within:
            within[k] += _num(r, k) is not None and abs(_num(r, k)) <= 0.10
        out.append([r["technique"], r["rate"], _fmt(_num(r, "measured_step_s"), ".1f", 1e3),
                    _fmt(_num(r, "simulated_step_s"), ".1f", 1e3),
                    _ci(r, "error", "error_ci95_lo", "error_ci95_hi"),
                    _pct(_num(r, "error_with_fitted_link")), _pct(_num(r, "error_calibrated")),
                    _fmt(_num(r, "measured_to_target_s"), ".2f", unit=" s"),
                    _ci(r, "error_to_target", "error_to_target_ci95_lo", "error_to_target_ci95_hi")])
    reps = sorted({r.get("repeats", "") for r in rows if r.get("repeats")})
    table = _md_table(["technique", "rate", "measured step (ms)", "simulated, nominal (ms)",
                       "error, nominal [95 % CI]", "error, fitted link", "error, calibrated",
                       "measured to target", "error to target [95 % CI]"], out)
    summary = (f"Within 10 %: {within['error']} of {cells} cells at the nominal link, "
               f"{within['error_with_fitted_link']} with the fitted link, {within['error_calibrated']} "
               f"calibrated; repeats per cell: {', '.join(reps) or 'none'}.\n\n" if cells else "")
    return (table + "\n\n" + summary
            + "(`paper/netcheck/techerror.csv`, `paper/netcheck/techerror.md`)\n\n"
            "![measured vs simulated step time per technique and link rate]"
            "(../paper/netcheck/techerror.png)\n")


def atlas_block(dest: Path) -> str:
    """``atlas query_bench``: the query's benchmark table of the snapshot and where it came from."""
    meta = (json.loads((dest / "record.json").read_text()).get("atlas")
            if (dest / "record.json").exists() else None) or {"run": False}
    if not meta.get("run"):
        return f"{NO_ATLAS}: `paper/record.json` records none.\n"
    path = dest / "atlas" / "query_bench.md"
    if not path.exists():
        raise Refused(f"{path}: missing; record.json lists it as part of the snapshot")
    return (path.read_text(encoding="utf-8").strip() + "\n\n"
            f"(`paper/atlas/query_bench.csv`; written {meta['written_utc'][1]}, {meta['when']}; the pack, "
            f"`paper/atlas/query_pack.json.gz`: {meta['runs']} runs of {meta['techniques']} techniques, "
            f"{meta['pack_bytes'] / 1e3:.0f} kB)\n")


def _rows_tsv(path: Path) -> dict:
    if not path.exists():
        raise Refused(f"{path}: missing; record.json lists it as part of the snapshot")
    with path.open(newline="", encoding="utf-8") as f:
        return next(csv.DictReader(f, delimiter="\t"), {})


def fill_blocks(text: str, dest: Path) -> str:
    return BLOCK.sub(lambda m: m.group(1) + block_text(m.group(2), m.group(3), dest) + m.group(5), text)


def block_pages(root: Path) -> list[Path]:
    return sorted({p for pat in BLOCK_PAGES for p in root.glob(pat)
                   if not p.is_relative_to(root / "paper")})


def rewrite_blocks(root: Path, dest: Path) -> list[Path]:
    """Refill every page's generated blocks from the snapshot; the pages it changed."""
    changed = []
    for page in block_pages(root):
        text = page.read_text(encoding="utf-8")
        new = fill_blocks(text, dest)
        if new != text:
            page.write_text(new, encoding="utf-8")
            changed.append(page)
    return changed


# ------------------------------------------------------------------ paper/ assembled

EXTRA = ("record.json", "previous_verdicts.csv", "verdict_changes.md")
# measurements made apart from the workflow, each with its own machine and date: the GPU tier's
# snapshot (scripts/gpu/run_tier.py --snapshot) and the heavy rules' step benchmark
# (scripts/rulebench.py): kept by make reproduce, neither removed as stale nor emptied
APART = ("gpu", "rulebench")


def same_run(a: dict, b: dict) -> bool:
    """Whether two records are of one make reproduce (its commit and its start)."""
    return bool(a.get("commit")) and all(a.get(k) == b.get(k) for k in ("commit", "start_utc"))


def previous(root: Path, dest: Path, rec: dict | None = None) -> tuple[dict, str | None]:
    """The verdicts and commit of the paper/ HEAD holds (the committed evaluation this one follows);
    the folder as it is when it is not in HEAD (another --dest).  When HEAD's paper/ is of this
    very run (``rec``: assembled again, e.g. after ``make stability``), the evaluation it follows
    is the one HEAD's ``previous_verdicts.csv`` names: comparing the run with itself would write
    "no change" over the committed comparison."""
    rel = dest.relative_to(root).as_posix() if dest.is_relative_to(root) else None
    card = git("show", f"HEAD:{rel}/scorecard.csv", cwd=root, check=False) if rel else ""
    if card:
        head_rec = git("show", f"HEAD:{rel}/record.json", cwd=root, check=False)
        head = json.loads(head_rec) if head_rec else {}
        prev = git("show", f"HEAD:{rel}/previous_verdicts.csv", cwd=root, check=False)
        if rec is not None and same_run(head, rec) and prev:
            rows = list(csv.DictReader(prev.splitlines()))
            return ({r["id"]: (r.get("paper", ""), r["verdict"]) for r in rows},
                    next((r["commit"] for r in rows if r.get("commit")), None))
        return ({r["id"]: (r.get("paper", ""), r["verdict"]) for r in csv.DictReader(card.splitlines())},
                head.get("commit"))
    old_rec = json.loads((dest / "record.json").read_text()) if (dest / "record.json").exists() else {}
    return read_verdicts(dest / "scorecard.csv"), old_rec.get("commit")


def planned_outputs(root: Path, words: list[str]) -> set[str] | None:
    """Every file the workflow's DAG names (``snakemake --summary`` with the run's own words):
    what paper/ may hold of this evaluation; None when Snakemake cannot say."""
    r = subprocess.run([sys.executable, "-m", "snakemake", "--summary", *words], cwd=root,
                       capture_output=True, text=True)
    if r.returncode != 0:
        return None
    return {ln.split("\t")[0] for ln in r.stdout.splitlines()[1:] if "\t" in ln}


def prune(root: Path, dest: Path, keep: set[Path], planned: set[str] | None) -> list[str]:
    """Remove every file in ``dest`` that this evaluation did not make: neither an output the
    workflow plans (``planned``, relative to ``root``; a table's ``.record.json`` with it) nor one
    the assembly wrote (``keep``).  Returns what it removed, relative to ``root``."""
    if planned is None:
        return []
    from distlab.results.tables import RECORD_SUFFIX

    gone = []
    for path in sorted(p for p in dest.rglob("*") if p.is_file() or p.is_symlink()):
        if path.relative_to(dest).parts[0] in APART:
            continue
        rel = path.relative_to(root).as_posix()
        base = rel[: -len(RECORD_SUFFIX)] if rel.endswith(RECORD_SUFFIX) else rel
        if base in planned or path in keep or path.with_name(path.name.removesuffix(RECORD_SUFFIX)) in keep:
            continue
        path.unlink()
        gone.append(rel)
    for d in sorted((d for d in dest.rglob("*") if d.is_dir()), key=lambda d: -len(d.parts)):
        if not any(d.iterdir()):
            d.rmdir()
    return gone


def copy_into(dest: Path, files: list[tuple[Path, str]], folders: tuple[str, ...]) -> set[Path]:
    """``files`` (source, path under ``dest``) into ``dest``, ``folders`` emptied first (none of an
    earlier run's); the paths written."""
    for name in folders:
        shutil.rmtree(dest / name, ignore_errors=True)
    out = set()
    for src, rel in files:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest / rel)
        out.add(dest / rel)
    return out


def gathered(root: Path, paper: Path, args: argparse.Namespace, settled: Path | None) -> list[tuple[Path, str]]:
    """The files paper/ gains beside the workflow's own: the benchmarks (each rule's time), and,
    when ``dest`` is not paper/ itself, the workflow's pages."""
    files = []
    bench = root / args.benchmarks
    if bench.is_dir():
        files += [(f, "benchmarks/" + f.relative_to(bench).as_posix()) for f in sorted(bench.rglob("*"))
                  if f.is_file() and f.relative_to(bench).parts[0] != "netcheck"]
    if paper != root / args.dest:
        for name in PAPER_FILES + (STABILITY_FILES if settled else ()):
            if (paper / name).exists():
                files.append((paper / name, name))
        for name in PAPER_DIRS:
            files += [(f, f.relative_to(paper).as_posix()) for f in sorted((paper / name).rglob("*"))
                      if f.is_file() and not f.name.endswith(".record.json")]
    return files


def snapshot(args: argparse.Namespace) -> dict:
    """paper/ assembled at the end of make reproduce (and of make stability): what the workflow
    wrote, plus the benchmarks, netcheck's outputs of this run, the atlas's query files and the
    stability files; every other file removed; the record written; the pages' blocks refilled."""
    root = Path(args.root).resolve()
    paper = root / args.paper
    dest = root / args.dest
    record_path = root / args.record
    if not (paper / "scorecard.csv").exists():
        raise Refused(f"{paper / 'scorecard.csv'}: missing; run make reproduce first")
    if not record_path.exists():
        raise Refused(f"{record_path}: missing; run make reproduce (it writes this record) first")
    rec = json.loads(record_path.read_text())
    check_runs_present(paper / "scorecard.csv", paper / STABLE_CARD)
    netcheck, netcheck_files = check_netcheck(rec, root / args.netcheck, root / args.benchmarks / "netcheck",
                                              args.without_netcheck)
    stability, settled = check_stability(rec, paper, args.without_stability, settled_by(args))
    atlas, atlas_files = check_atlas(rec, root / args.atlas_query)
    old, old_commit = previous(root, dest, rec)
    dest.mkdir(parents=True, exist_ok=True)
    keep = copy_into(dest, gathered(root, paper, args, settled) + netcheck_files + atlas_files,
                     ("benchmarks", "netcheck", "atlas") + (PAPER_DIRS if paper != dest else ()))
    if settled:  # make stability wrote paper/'s scorecard settled (distlab.scoring.stability.settle_paper)
        if paper != dest:
            write_settled(settled, dest)
        keep |= {dest / n for n in STABILITY_FILES + (STABLE_CARD, "scorecard_stable.md", "stability_first.csv")}
    new = read_verdicts(dest / "scorecard.csv")
    if old:
        with (dest / "previous_verdicts.csv").open("w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(["id", "paper", "verdict", "commit"])
            for cid, (p, v) in sorted(old.items()):
                w.writerow([cid, p, v, old_commit or ""])
    rows, text = verdict_changes(old, new, old_commit, rec.get("commit"), root)
    (dest / "verdict_changes.md").write_text(text + "\n", encoding="utf-8")
    keep |= {dest / n for n in EXTRA}
    planned = (set(args.planned.read_text().split()) if args.planned
               else planned_outputs(root, rec.get("snakemake_args") or []))
    removed = prune(root, dest, keep, planned)
    whole, _ = tally(read_card(dest / "scorecard.csv"))
    reported = whole.get(REPORTED, 0)
    snap = {**rec, "previous_commit": old_commit, "claims": sum(whole.values()) - reported, "reported": reported,
            "verdicts": dict(whole), "verdict_changes": len(rows),
            "decided_basis": decided_basis(dest / "scorecard.csv"),
            "netcheck": netcheck, "stability": stability, "atlas": atlas,
            "stale_removed": (len(removed) if planned is not None
                              else "not checked: snakemake --summary failed, nothing removed")}
    (dest / "record.json").write_text(json.dumps(snap, indent=2) + "\n")
    if (dest / "README.md").exists():
        put_header(dest / "README.md", root, dest.relative_to(root).as_posix())
        put_settlement(dest / "README.md", snap)
    if args.readme:
        rewrite_readme(root / args.readme, per_paper(dest), snap, _rows(dest / "scorecard.csv"))
    rewrite_blocks(root, dest)
    return snap


def would_clear(dest: Path, record_path: Path) -> bool:
    """Whether paper/ is not of this checkout's last make reproduce (:func:`clear` empties it)."""
    mine = json.loads(record_path.read_text()) if record_path.is_file() else {}
    made = json.loads((dest / "record.json").read_text()) if (dest / "record.json").is_file() else {}
    return not (mine and made and all(mine.get(k) == made.get(k) for k in ("commit", "start_utc")))


def forcerun(root: Path, dest: Path, record_path: Path, words: list[str]) -> list[str]:
    """make dryrun's words for a paper/ that make reproduce would empty first: ``--forcerun`` with
    every rule that writes into it (``snakemake --summary``), so the plan is the one make
    reproduce runs (those pages and the runs behind them), not Snakemake's take of the committed
    pages as done.  None otherwise."""
    if not would_clear(dest, record_path) or not dest.is_dir() or all(p.name in APART for p in dest.iterdir()):
        return []
    r = subprocess.run([sys.executable, "-m", "snakemake", "--summary", *words], cwd=root,
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise Refused(f"snakemake --summary: {r.stderr.strip().splitlines()[-1:] or r.returncode}")
    prefix = dest.relative_to(root).as_posix() + "/"
    rules = sorted({row[2] for row in (ln.split("\t") for ln in r.stdout.splitlines()[1:])
                    if len(row) > 2 and row[0].startswith(prefix)})
    return ["--forcerun", *rules] if rules else []


def clear(root: Path, dest: Path, record_path: Path) -> bool:
    """Before make reproduce runs the workflow: paper/ emptied unless it was assembled from this
    checkout's own last run (its record's commit and start are those of ``results/reproduce.json``).
    Snakemake takes an output that exists for done even where its inputs are missing, so a paper/
    that came with the clone (or a pull) would keep the committed evaluation's pages and skip the
    runs they were made from; emptied, every page of paper/ is this run's.  True when emptied."""
    if not would_clear(dest, record_path):
        return False
    gone = [p for p in dest.iterdir() if p.name not in APART] if dest.is_dir() else []
    for p in gone:
        shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
    return bool(gone)


def per_paper(dest: Path) -> dict[str, Counter]:
    """Each paper's verdict counts, from the one settled scorecard (distlab.scoring.paperrecord.tally)."""
    _, per = tally(read_card(dest / "scorecard.csv"))
    return {p: per.get(p, Counter()) for p in PAPERS} | per


def write_settled(settled: Path, dest: Path) -> None:
    """paper/scorecard.csv and .md from `make stability`'s settled scorecard: every row's
    verdict over the k evaluations, a ``spread`` column (each evaluation's verdict and estimate)
    filled for the *unstable here* rows."""
    with settled.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
        fields = list(reader.fieldnames or [])
    if "spread" not in fields:
        fields.append("spread")
    for r in rows:
        r["spread"] = spread_of(r)
    with (dest / "scorecard.csv").open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    md = settled.with_suffix(".md")
    if md.exists():
        shutil.copy2(md, dest / "scorecard.md")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="verb")
    r = sub.add_parser("record", help="write the record of one make reproduce")
    r.add_argument("--out", default="results/reproduce.json")
    r.add_argument("--start", type=float, required=True, help="start time, seconds since the epoch")
    r.add_argument("--end", type=float, default=None)
    r.add_argument("--rc", type=int, required=True)
    r.add_argument("--commit", default="")
    r.add_argument("--dirty", type=int, default=0, help="how many tracked files that decide results (src, workflow, config, data) had uncommitted changes")
    r.add_argument("--load-start", default="")
    r.add_argument("--cores", type=int, default=None)
    r.add_argument("--command-line", default="make reproduce")
    r.add_argument("snakemake_args", nargs="*", default=[],
                   help="after --: the words make reproduce gave Snakemake (its config files are recorded)")
    sub.add_parser("blocks", help="refill the pages' generated blocks from paper/")
    nt = sub.add_parser("note", help="add a sentence to the record of the last make reproduce (shown after its time)")
    nt.add_argument("text", help="one sentence, e.g. how the run was interrupted and resumed")
    sub.add_parser("atlas", help="the atlas's query files alone into the snapshot of the same run")
    sub.add_parser("clear", help="before make reproduce: empty paper/ unless it is of this checkout's last run")
    fr = sub.add_parser("forcerun", help="make dryrun: --forcerun for paper/'s rules when make reproduce would empty it")
    fr.add_argument("snakemake_args", nargs="*", default=[], help="after --: the words make dryrun gives Snakemake")
    for a in (ap,):
        a.add_argument("--root", default=str(ROOT))
        a.add_argument("--paper", default="paper")
        a.add_argument("--benchmarks", default="benchmarks")
        a.add_argument("--netcheck", default="results/netcheck",
                       help="where snakemake netcheck writes its tables")
        a.add_argument("--record", default="results/reproduce.json")
        a.add_argument("--atlas-query", default="results/atlas/query",
                       help="where the atlas's query pack and benchmark lie (atlas_query_pack, atlas_query_bench)")
        a.add_argument("--dest", default="paper")
        a.add_argument("--readme", default="README.md", help="'' to leave the README alone")
        a.add_argument("--planned", type=Path, default=None,
                       help="a file listing the workflow's outputs (default: snakemake --summary with the run's words)")
        a.add_argument("--without-netcheck", action="store_true",
                       help="leave results/netcheck/ out of paper/")
        a.add_argument("--without-stability", action="store_true",
                       help="leave make stability's settled scorecard (paper/scorecard_stable.csv) out: "
                            "the verdicts of one evaluation")
        a.add_argument("--stability-commit", default="", help="make stability: the commit it ran at")
        a.add_argument("--stability-dirty", type=int, default=0, help="make stability: uncommitted tracked files that decide results")
        a.add_argument("--stability-start", type=float, default=None, help="make stability: its start, epoch seconds")
    args = ap.parse_args(argv)
    try:
        if args.verb == "record":
            record(args)
            return 0
        if args.verb == "note":
            add_note(Path(args.root).resolve() / args.record, args.text)
            print(f"snapshot: noted in {args.record}: {args.text}")
            return 0
        if args.verb == "atlas":
            atlas = atlas_only(args)
            print(f"snapshot: the atlas's query files: {', '.join(atlas['files'])}" if atlas["run"] else
                  f"snapshot: {NO_ATLAS}")
            return 0
        if args.verb == "clear":
            root = Path(args.root).resolve()
            if clear(root, root / args.dest, root / args.record):
                print(f"snapshot: emptied {args.dest}/ (not of this checkout's last make reproduce; "
                      f"`git checkout {args.dest}/` brings the committed one back)")
            return 0
        if args.verb == "forcerun":
            root = Path(args.root).resolve()
            print(" ".join(forcerun(root, root / args.dest, root / args.record, args.snakemake_args)))
            return 0
        if args.verb == "blocks":
            root = Path(args.root).resolve()
            rec_path = root / args.dest / "record.json"
            page = root / args.dest / "README.md"
            if page.exists() and (put_header(page, root, args.dest)
                                  | (rec_path.exists() and put_settlement(page, json.loads(rec_path.read_text())))):
                print(f"snapshot: rewrote the record's lines atop {args.dest}/README.md")
            if args.readme and rec_path.exists():
                rewrite_readme(root / args.readme, per_paper(root / args.dest), json.loads(rec_path.read_text()),
                               _rows(root / args.dest / "scorecard.csv"))
            for page in rewrite_blocks(root, root / args.dest):
                print(f"snapshot: rewrote the generated blocks of {page.relative_to(root)}")
            return 0
        if not (Path(args.root).resolve() / args.paper / "scorecard.csv").exists():
            print(f"snapshot: {args.paper}/scorecard.csv is missing (the run made no scorecard): "
                  f"{args.paper}/ not assembled, no record written", file=sys.stderr)
            return 0
        snap = snapshot(args)
    except Refused as err:
        print(f"snapshot: {err}", file=sys.stderr)
        return 2
    print(f"paper/ of {str(snap.get('commit'))[:10]}: {snap['claims']} claims, {snap['stale_removed']} stale files removed, "
          f"{snap['verdict_changes']} verdict changes (paper/verdict_changes.md); "
          + (f"netcheck {snap['netcheck']['when']}" if snap["netcheck"]["run"] else NOT_RUN) + "; "
          + (f"settled over {snap['stability']['evaluations']} evaluations by make stability, "
             f"{snap['stability']['unstable']} {UNSTABLE}" if snap["stability"]["run"] else NO_STABILITY))
    return 0


if __name__ == "__main__":
    sys.exit(main())
