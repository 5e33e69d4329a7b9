"""The scorecard's Markdown as a reader sees it: the compact table (id, verdict, ours, a short
statement) and, on a paper's page, each claim's long cells (its statement, the paper's figure,
the p-values, the preconditions, the verdict's reason) as a wrapped list."""

from __future__ import annotations

import math

import pandas as pd

from .claims import SHORT_MAX  # a statement in the compact table: at most this many characters
from .scorecard_links import POWER


def _figure_cell(r: pd.Series) -> str:
    pv = r["paper_value"]
    missing = pv is None or (isinstance(pv, float) and math.isnan(pv))
    text = f"{r['paper']}: {r['source']}" + ("" if missing else f"; paper: {pv}")
    if r.get("expected") == "fails":
        text += "; the source reports this test **fails**"
    th = r.get("threshold")
    if isinstance(th, str) and th:
        text += f"; threshold: {th}"
    return text


def _pvals_cell(r: pd.Series) -> str:
    if pd.isna(r["p_value"]):
        return ""
    adj = "" if pd.isna(r["p_holm"]) else f" / {r['p_holm']:.2g}"
    return f"{r['p_value']:.2g}{adj}"


def _statement_cell(r: pd.Series) -> str:
    at = r.get("tested_at")
    where = f" (tested at {at})" if isinstance(at, str) and at else ""
    mark = " [measured]" if bool(r.get("measured")) is True else ""
    return f"`{r['id']}`: {r['statement']}{where}{mark}"


def _why_cell(r: pd.Series) -> str:
    text = str(r["reason"])
    n = r.get("seeds_needed")
    if r["verdict"] == "inconclusive" and n is not None and not pd.isna(n):
        text += f"; about {int(n)} seeds would decide it at the observed effect and spread (power {POWER:g})"
    return text


def _pre_cell(r: pd.Series) -> str:
    v = r.get("preconditions")
    return v if isinstance(v, str) else ""


# ---------------------------------------------------------------- pages a reader reads

WRAP = 160       # a paragraph of a page is wrapped at this width (no line of a page over 300 characters)


def short_statement(text: str, limit: int = SHORT_MAX) -> str:
    """``text`` in at most ``limit`` characters: whole, or cut at a word with an ellipsis."""
    text = " ".join(str(text).split())
    if len(text) <= limit:
        return text
    cut = text[:limit - 1].rsplit(" ", 1)[0].rstrip(",;:")
    return cut + "…"


def compact_view(df: pd.DataFrame) -> pd.DataFrame:
    """The scorecard's compact table: id, verdict, ours and a short statement, one row a claim."""
    return pd.DataFrame({
        "id": [f"`{i}`" for i in df["id"]],
        "verdict": df["verdict"],
        "ours (95 % t CI)": df["ours"].fillna(""),
        "statement": [short_statement(s) + (" [measured]" if bool(m) is True else "")
                      for s, m in zip(df["statement"], df["measured"])],
    })


def wrapped_item(text: str, indent: str = "") -> list[str]:
    """One Markdown list item, wrapped: the first line ``- text``, the rest indented under it."""
    import textwrap

    return textwrap.wrap(" ".join(str(text).split()), width=WRAP, initial_indent=f"{indent}- ",
                         subsequent_indent=f"{indent}  ", break_long_words=False, break_on_hyphens=False)


def claim_details(df: pd.DataFrame) -> list[str]:
    """Every claim with its long cells as a wrapped list (the reason in full, the paper's figure,
    the p-values, the preconditions): what the compact table leaves out, for a paper's page."""
    lines: list[str] = []
    for _, r in df.iterrows():
        lines += wrapped_item(f"**{_statement_cell(r)}**: {r['verdict']}")
        ours = r["ours"] if isinstance(r["ours"], str) and r["ours"] else "n/a"
        p = _pvals_cell(r)
        lines += wrapped_item(f"ours: {ours}; n = {int(r['n_seeds'])}" + (f"; p raw / Holm: {p}" if p else ""), "  ")
        lines += wrapped_item(f"paper: {_figure_cell(r)}", "  ")
        if _pre_cell(r):
            lines += wrapped_item(f"preconditions: {_pre_cell(r)}", "  ")
        lines += wrapped_item(f"why: {_why_cell(r)}", "  ")
    return lines


def condition_details(conditions: pd.DataFrame) -> list[str]:
    """The preconditions and negative controls as a wrapped list, one item a condition."""
    lines: list[str] = []
    for _, c in conditions.iterrows():
        measured = c.get("measured")
        tail = f"; measured: {measured}" if isinstance(measured, str) and measured else ""
        lines += wrapped_item(f"**{c['name']}** ({c['kind']}): {c['status']}. {c['statement']}{tail}")
    return lines
