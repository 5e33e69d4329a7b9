"""Compare a ``make reproduce`` with the committed snapshot, row by row.

What is reproducible depends on the machine kind (docs/replication.md):

* on the snapshot's kind (the same CPU vendor, family, model and ISA, the same torch, MKL and
  oneDNN: :func:`distlab.results.machinekind.same_kind`), every row not marked measured repeats
  the snapshot's estimate to the printed digit and its verdict; a measured row may move (the
  measured reruns of ``make stability`` settle it), so its difference is listed, not failed;
* on another kind, the verdicts the replicate held: every row whose snapshot column
  ``replicated`` reads ``held`` must read the same verdict; digits are not compared.

A row the snapshot reads *unstable here* states no verdict, so it is not compared.

``python -m distlab compare-snapshot`` (after ``make reproduce``; the settled scorecard
of ``make stability`` when there is one) compares the snapshot HEAD commits in ``paper/`` (or a
folder named with ``--snapshot``) with ``paper/`` as the run left it, prints the differing rows
and exits 1 when one fails.  It opens with the record check of ``paper/``
(:func:`distlab.scoring.paperrecord.check`): a paper/ of another code tree or config says so.
"""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path

import pandas as pd


STATUS = ("same", "differs", "moved (measured)", "not compared (another machine kind)",
          "not compared (unstable here in the snapshot)")


def _str(v) -> str:
    return "" if v is None or (isinstance(v, float) and pd.isna(v)) else str(v)


def _status(old: dict, new: dict | None, same_kind: bool) -> str:
    """One row's status (:data:`STATUS`)."""
    if new is None:
        return "differs"
    if old["verdict"] == "unstable here":  # the snapshot states no verdict for it
        return "not compared (unstable here in the snapshot)"
    same = old["verdict"] == new["verdict"] and _str(old.get("ours")) == _str(new.get("ours"))
    if same_kind:
        if same:
            return "same"
        return "moved (measured)" if str(old.get("measured")).lower() in ("true", "1") else "differs"
    if _str(old.get("replicated")).startswith("held"):
        return "same" if old["verdict"] == new["verdict"] else "differs"
    return "not compared (another machine kind)"


def compare(snapshot: pd.DataFrame, card: pd.DataFrame, same_kind: bool) -> pd.DataFrame:
    """Every snapshot row: both verdicts and estimates, and its status (:data:`STATUS`)."""
    new = {r["id"]: r for r in card.to_dict("records")}
    rows = []
    for old in snapshot.to_dict("records"):
        now = new.get(old["id"])
        rows.append({"id": old["id"], "snapshot": old["verdict"], "now": now["verdict"] if now else "absent",
                     "snapshot_ours": _str(old.get("ours")), "ours": _str(now.get("ours")) if now else "",
                     "status": _status(old, now, same_kind)})
    return pd.DataFrame(rows, columns=["id", "snapshot", "now", "snapshot_ours", "ours", "status"])


def committed(snapshot_dir: Path, name: str) -> str | None:
    """``name`` of the snapshot: as HEAD holds it when ``snapshot_dir`` is a tracked folder (the
    repository's paper/, which a run rewrites in place), else the file as it is; None if neither."""
    folder = snapshot_dir.resolve()
    r = subprocess.run(["git", "show", f"HEAD:./{name}"], cwd=folder, capture_output=True, text=True) \
        if folder.is_dir() else None
    if r is not None and r.returncode == 0:
        return r.stdout
    path = snapshot_dir / name
    return path.read_text(encoding="utf-8") if path.is_file() else None


def machine_of_snapshot(snapshot_dir: Path) -> dict:
    """The machine kind the snapshot's record names (empty for a record written before it did)."""
    text = committed(snapshot_dir, "record.json")
    if text is None:
        return {}
    if len(text) > 1 << 20:  # --snapshot: a user's folder; a record is a few kB
        raise ValueError(f"{snapshot_dir / 'record.json'}: over 1 MiB, not a snapshot record")
    rec = json.loads(text)
    return ((rec.get("machine") or {}).get("kind") or {}) if isinstance(rec, dict) else {}


def record_lines(paper: Path = Path("paper")) -> list[str]:
    """What the record check of ``paper`` says when it is not of this checkout's tree and default
    config (:func:`distlab.scoring.paperrecord.banner`); none when it is."""
    from .paperrecord import banner

    paper = paper.resolve()
    text = banner(paper.parent, paper.name)
    return [text.strip()] if text else []


def run(snapshot_dir: Path = Path("paper"), card: Path | None = None) -> int:
    """Print the rows that differ from the snapshot in ``snapshot_dir`` (HEAD's version of it where
    it is tracked; ``card``: this run's scorecard; default paper/scorecard_stable.csv, else
    paper/scorecard.csv); 1 if one fails."""
    from ..results.machinekind import machine_kind, same_kind
    from ..results.tables import markdown_table

    card = card or next((c for c in (Path("paper/scorecard_stable.csv"), Path("paper/scorecard.csv"))
                         if c.exists()), Path("paper/scorecard.csv"))
    for line in record_lines(Path("paper")):
        print(line)
    theirs = machine_of_snapshot(snapshot_dir)
    differ = same_kind(theirs, machine_kind()) if theirs else ["the snapshot's record names no machine kind"]
    snap = committed(snapshot_dir, "scorecard.csv")
    if snap is None:
        raise FileNotFoundError(f"{snapshot_dir / 'scorecard.csv'}: no snapshot scorecard there or in HEAD")
    table = compare(pd.read_csv(io.StringIO(snap)), pd.read_csv(card), not differ)
    print(("Same machine kind as the snapshot: every row not marked measured must repeat its digits."
           if not differ else f"Another machine kind ({', '.join(differ)}): the replicated verdicts must repeat."))
    shown = table[table["status"] != "same"]
    print(markdown_table(shown) if len(shown) else "Every compared row is the same.")
    print(f"{len(table)} rows: " + ", ".join(f"{(table['status'] == s).sum()} {s}" for s in STATUS))
    return 1 if (table["status"] == "differs").any() else 0
