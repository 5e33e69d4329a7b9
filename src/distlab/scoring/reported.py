"""Rows *reported beside a test*: an estimate shown next to a claim's one test, never a test.

``report_only: <why>`` in ``config/claims.yaml`` marks a row that computes what a test row
would (the paired estimate of a - b, or of the ratio, and its t interval over seeds) but
reads ``reported (not a test)``, whatever the numbers: a variant of the tested comparison
that the source did not run (sequential RC beside the source's asynchronous RC), or a second
measure of the same quantity (summed RSS beside PSS).  One hypothesis is tested once; what
stands beside it must not become a second verdict on it.  So a reported row

* never enters a Holm family (:func:`distlab.scoring.scorecard._holm_within_papers` leaves it
  out, so it neither inflates nor shrinks its paper's family),
* carries no p-value and no seed count to decide it (both blanked here: a p beside an
  estimate would read as a test), and
* is not counted among the verdicts (the scorecard's counts line lists it apart, see
  :func:`counts_line`).

Its reason says what it reports and why it is not a test; a precondition not met, or a table
not produced, is said in the reason too (the estimate, where there is one, is still shown).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

REPORTED = "reported (not a test)"


def apply_report_only(df: pd.DataFrame, claims: Sequence[Mapping[str, Any]],
                      blocked: Mapping[str, Any] | None = None) -> pd.DataFrame:
    """Rows of ``claims`` with ``report_only`` read :data:`REPORTED`: the estimate and its
    interval kept, the p-values and seeds-to-decide blanked, the reason rebuilt."""
    df = df.copy()
    blocked = blocked or {}
    for i, c in enumerate(claims):
        why = c.get("report_only") or ""
        if not why:
            continue
        v, ours, n = df.at[i, "verdict"], df.at[i, "ours"], int(df.at[i, "n_seeds"])
        head = f"reported beside a test, not a test (no verdict, no Holm family): {why}"
        if v == "not run" or not isinstance(ours, str) or not ours:
            text = f"{head}; nothing to report: {df.at[i, 'reason']}"
        else:
            text = f"{head}; {c['metric']}: {ours} (n = {n}, 95 % t interval over the pairs)"
            hit = blocked.get(c["id"])
            if hit is not None:
                text += f"; {hit[1]} (the estimate is shown as measured)"
        df.at[i, "verdict"] = REPORTED
        df.at[i, "reason"] = text
        for col in ("p_value", "p_holm", "p_wilcoxon", "seeds_needed"):
            df.at[i, col] = math.nan
    return df


def counts_line(df: pd.DataFrame, verdicts: Sequence[str]) -> str:
    """The scorecard's counts line: ``**N claims:** a reproduced · b not reproduced ...`` over
    the rows with a verdict, and the reported rows apart (they are not claims tested)."""
    rep = df["verdict"] == REPORTED
    counts = df.loc[~rep, "verdict"].value_counts()
    # "unstable here" comes only from the stability run (distlab.scoring.stability.settle): named when present
    tally = " · ".join(f"{int(counts.get(v, 0))} {v}" for v in verdicts
                       if v != "unstable here" or counts.get(v, 0))
    extra = f"; and {int(rep.sum())} reported beside a test (not tests: no verdict)" if rep.any() else ""
    return f"**{int((~rep).sum())} claims:** {tally}{extra}"
