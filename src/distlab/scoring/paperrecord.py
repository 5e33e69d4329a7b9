"""paper/'s record (``paper/record.json``), checked on read, and the one source of every count.

``paper/`` is the reader's copy of one evaluation; its record names the commit it was made at
(whether the tree was dirty), the config files and overrides it ran with, the machine, and the
``make stability`` run that settled it.  :func:`check` compares that record with the checkout
being read: the code, workflow, config and data (:data:`DECIDING`) of the recorded commit
against HEAD's (``git diff --quiet COMMIT HEAD -- PATHS``), and the config files it names
against theirs now.  A paper/ of another tree or config says so at the top of what reads it
(:func:`banner`: the write-up, the README's generated blocks, ``distlab compare-snapshot``).

Every verdict count (the README's table, the write-up, the scorecard's header, each paper's
page, the record) is computed from the one settled scorecard, ``paper/scorecard.csv``, by
:func:`tally` and written as :func:`line` writes it (the scorecard's counts line,
:func:`distlab.scoring.reported.counts_line`).  :func:`lines_in` reads such a line back from
any page, whatever else the page looks like: every line that starts ``**N claims:**``.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ..results.runs import DECIDING

# a paper/ of a commit that differs from HEAD in one of the paths deciding the results is of
# another code tree
RECORD = "record.json"
SAME, OTHER, UNCHECKED = "this tree", "another tree", "cannot be checked"


@dataclass
class Check:
    """What :func:`check` found: ``state`` (:data:`SAME`, :data:`OTHER` or :data:`UNCHECKED`)
    and, unless the same, why (one sentence each)."""

    state: str
    commit: str | None = None
    why: list[str] = field(default_factory=list)

    @property
    def same(self) -> bool:
        return self.state == SAME


def _git(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)


def config_changes(root: Path, rec: dict) -> list[str]:
    """The record's config: files or overrides of the run's own (not the default configuration),
    and any named file whose content differs from what the run read."""
    cfg = rec.get("config")
    if not isinstance(cfg, dict):
        return ["no config files recorded"]
    why = []
    for f in cfg.get("files") or []:
        path = root / str(f.get("path"))
        now = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
        state = "changed since" if now and now != f.get("sha256") else "absent here" if not now else "unchanged"
        why.append(f"made with config file {f.get('path')} ({state}), not the default configuration")
    for o in cfg.get("overrides") or []:
        why.append(f"made with the override --config {o}, not the default configuration")
    return why


def _tree_changes(root: Path, commit: str) -> tuple[str, list[str]]:
    """(state, why) of ``commit`` against HEAD over :data:`DECIDING`."""
    if _git(root, "cat-file", "-e", f"{commit}^{{commit}}").returncode != 0:
        return UNCHECKED, [f"its commit {commit[:10]} is not in this clone (a shallow clone, or another "
                           "repository's), so its code cannot be compared with this checkout's"]
    paths = [p for p in DECIDING if (root / p).exists()]
    r = _git(root, "diff", "--name-only", commit, "HEAD", "--", *paths)
    if r.returncode != 0:
        return UNCHECKED, [f"git diff {commit[:10]} HEAD failed: {r.stderr.strip()}"]
    changed = sorted({n.split("/", 1)[0] + ("/" if "/" in n else "") for n in r.stdout.split()})
    if not changed:
        return SAME, []
    return OTHER, [f"made at {commit[:10]}, whose {', '.join(changed)} differ from HEAD's"]


def check(root: str | Path, paper: str = "paper") -> Check:
    """paper/'s record against the checkout at ``root`` (module docstring)."""
    root = Path(root)
    path = root / paper / RECORD
    if not path.is_file():
        return Check(UNCHECKED, None, [f"{paper}/{RECORD} is missing: no record says which tree made it"])
    rec = json.loads(path.read_text(encoding="utf-8"))
    commit = rec.get("commit")
    if not commit:
        return Check(UNCHECKED, None, ["its record names no commit (made outside a git checkout)"])
    state, why = _tree_changes(root, commit)
    if rec.get("dirty"):
        state = OTHER if state == OTHER else UNCHECKED
        why.append(f"made from a tree with uncommitted changes at {commit[:10]}")
    if rec.get("exit_code") not in (0, None):
        state = OTHER if state in (SAME, OTHER) else state
        why.append(f"its make reproduce exited {rec['exit_code']}: a partial evaluation")
    cfg = config_changes(root, rec)
    if cfg:
        state = OTHER if state in (SAME, OTHER) else state
        why += cfg
    return Check(state, commit, why)


def banner(root: str | Path, paper: str = "paper") -> str:
    """The lines a page of paper/ (or about it) opens with when paper/ is not of this checkout's
    tree and default config: empty when it is."""
    c = check(root, paper)
    if c.same:
        return ""
    head = ("**paper/ is of another code tree or config**"
            if c.state == OTHER else "**Whether paper/ is of this code tree cannot be checked**")
    return head + ": " + "; ".join(c.why) + f" (`{paper}/{RECORD}`; `make reproduce` remakes it).\n"


# ------------------------------------------------------------------ the counts

COUNTS_LINE = re.compile(r"^\*\*(\d+) claims:\*\* (.*)$", re.M)


def read_card(card: str | Path) -> pd.DataFrame:
    return pd.read_csv(card, dtype=str, keep_default_na=False)


def tally(card: pd.DataFrame) -> tuple[Counter, dict[str, Counter]]:
    """(verdict counts of the whole scorecard, verdict counts per paper) of one scorecard."""
    whole = Counter(card["verdict"])
    per = {str(p): Counter(g["verdict"]) for p, g in card.groupby("paper", sort=False)}
    return whole, per


def line(card: pd.DataFrame) -> str:
    """The counts line of ``card`` (the whole scorecard or one paper's rows)."""
    from .reported import counts_line
    from .scorecard import VERDICTS

    return counts_line(card, VERDICTS)


def lines(card: pd.DataFrame) -> tuple[str, dict[str, str]]:
    """(the whole scorecard's counts line, each paper's)."""
    return line(card), {str(p): line(g) for p, g in card.groupby("paper", sort=False)}


def parse_line(text: str) -> Counter:
    """A counts line back to its counts: ``claims`` (the rows with a verdict), each verdict and
    ``reported`` (rows beside a test)."""
    m = COUNTS_LINE.search(text)
    if not m:
        raise ValueError(f"no counts line ('**N claims:** ...') in {text[:80]!r}")
    out = Counter({"claims": int(m.group(1))})
    # a page may cite where the line comes from, in parentheses with a path in backticks
    body = re.sub(r"(\s*\([^()]*`[^()]*\))+\s*$", "", m.group(2))
    tally_part, _, extra = body.partition("; and ")
    for item in tally_part.split(" · "):
        n, _, verdict = item.strip().partition(" ")
        out[verdict.strip()] += int(n)
    if extra:
        out["reported"] = int(extra.split()[0])
    return out


def lines_in(text: str) -> list[Counter]:
    """Every counts line of a page, parsed (:func:`parse_line`)."""
    return [parse_line(m.group(0)) for m in COUNTS_LINE.finditer(text)]


def counts_of_card(card: pd.DataFrame) -> Counter:
    """What :func:`parse_line` reads back from :func:`line` of ``card``, computed directly."""
    return parse_line(line(card))


# ------------------------------------------------------------------ the settled scorecard

def write_settled(settled: pd.DataFrame, paper: str | Path) -> list[Path]:
    """paper/'s scorecard, whole (``scorecard.csv``, ``.md``) and per paper
    (``scorecard/P.csv``, ``.md``: a paper's page keeps every claim's reason, p-values and
    preconditions below its table, as the ``paper`` rule writes it), rewritten from ``make
    stability``'s settled scorecard, each with its record (the runs its previous version graded), so that every page counts the same
    verdicts; the per-paper files first, the whole last, so the workflow's later rules (the
    write-up) see it newer than their inputs and run again.  Returns the files written."""
    from .scorecard import write_scorecard

    paper = Path(paper)
    written = []
    for p, rows in settled.groupby("paper", sort=False):
        part = paper / "scorecard" / f"{p}.csv"
        if not part.is_file():
            continue
        cond = part.with_name(f"{p}_conditions.csv")
        conditions = pd.read_csv(cond) if cond.is_file() and cond.stat().st_size > 1 else None
        rows = rows.reset_index(drop=True)
        _rewrite(part, rows, lambda r=rows, pt=part, c=conditions, name=p: write_scorecard(
            r, pt.with_suffix(".md"), pt, title=f"Reproduction scorecard: {name}", conditions=c,
            details=True))
        written += [part, part.with_suffix(".md")]
    whole = paper / "scorecard.csv"
    k = int(settled["evaluations"].max()) if "evaluations" in settled and len(settled) else None
    title = "Reproduction scorecard" + (f", settled over {k} evaluations of the measured parts" if k else "")
    _rewrite(whole, settled, lambda: write_scorecard(settled, whole.with_suffix(".md"), whole, title=title))
    return written + [whole, whole.with_suffix(".md")]


def _rewrite(path: Path, df: pd.DataFrame, write) -> None:
    """Write a scorecard over its previous version; its record names the runs the previous
    version's record named (read before it is overwritten)."""
    from ..results.tables import recorded_runs, write_table_record

    runs = recorded_runs(path)
    write()
    write_table_record(path, df, runs)


# ------------------------------------------------------------------ the write-up's first lines

HEADER_BEGIN, HEADER_END = "<!-- record -->", "<!-- /record -->"


def header(root: str | Path, paper: str = "paper") -> str:
    """The write-up's first lines: what the record check says (:func:`banner`: nothing when paper/
    is of this checkout's tree and default config) and the counts line of the settled scorecard."""
    root = Path(root)
    card = root / paper / "scorecard.csv"
    text = banner(root, paper)
    if card.is_file():
        text += ("\n" if text else "") + line(read_card(card)) + f" (`{paper}/scorecard.csv`)\n"
    return f"{HEADER_BEGIN}\n{text}{HEADER_END}\n"


def put_header(page: str | Path, root: str | Path, paper: str = "paper") -> bool:
    """Write :func:`header` into ``page`` (the write-up): over its previous header, else after its
    title line (at the top without one).  True when the page changed."""
    page = Path(page)
    text = page.read_text(encoding="utf-8")
    new_head = header(root, paper)
    if HEADER_BEGIN in text and HEADER_END in text:
        before, rest = text.split(HEADER_BEGIN, 1)
        after = rest.split(HEADER_END, 1)[1].lstrip("\n")
        new = before + new_head + ("\n" + after if after else "")
    elif text.startswith("# "):
        title, _, body = text.partition("\n")
        new = f"{title}\n\n{new_head}\n{body.lstrip(chr(10))}"
    else:
        new = f"{new_head}\n{text}"
    if new != text:
        page.write_text(new, encoding="utf-8")
    return new != text
