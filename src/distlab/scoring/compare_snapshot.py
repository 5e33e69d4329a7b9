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
of ``make stability`` when there is one) prints the differing rows and exits 1 when one fails.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..config.yamlio import load_json_bounded

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


def machine_of_snapshot(snapshot_dir: Path) -> dict:
    """The machine kind the snapshot's record names (empty for a record written before it did)."""
    path = snapshot_dir / "record.json"
    rec = load_json_bounded(path, what="snapshot record") if path.exists() else {}  # --snapshot: a user's folder
    return (rec.get("machine") or {}).get("kind") or {}


def run(snapshot_dir: Path = Path("paper"), card: Path | None = None) -> int:
    """Print the rows that differ from the snapshot in ``snapshot_dir`` (``card``: this run's
    scorecard; default paper/scorecard_stable.csv, else paper/scorecard.csv); 1 if one fails."""
    from ..results.machinekind import machine_kind, same_kind
    from ..results.tables import markdown_table

    card = card or next((c for c in (Path("paper/scorecard_stable.csv"), Path("paper/scorecard.csv"))
                         if c.exists()), Path("paper/scorecard.csv"))
    theirs = machine_of_snapshot(snapshot_dir)
    differ = same_kind(theirs, machine_kind()) if theirs else ["the snapshot's record names no machine kind"]
    table = compare(pd.read_csv(snapshot_dir / "scorecard.csv"), pd.read_csv(card), not differ)
    print(("Same machine kind as the snapshot: every row not marked measured must repeat its digits."
           if not differ else f"Another machine kind ({', '.join(differ)}): the replicated verdicts must repeat."))
    shown = table[table["status"] != "same"]
    print(markdown_table(shown) if len(shown) else "Every compared row is the same.")
    print(f"{len(table)} rows: " + ", ".join(f"{(table['status'] == s).sum()} {s}" for s in STATUS))
    return 1 if (table["status"] == "differs").any() else 0
