"""The scorecard's Markdown table: each claim's row as a reader sees it (its statement, the
paper's figure, the p-values, the verdict and its reason)."""

from __future__ import annotations

import math

import pandas as pd

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


def claims_view(df: pd.DataFrame) -> pd.DataFrame:
    """The scorecard's Markdown table: one row per claim, its cells as a reader sees them."""
    return pd.DataFrame({
        "claim": [_statement_cell(r) for _, r in df.iterrows()],
        "paper's figure": [_figure_cell(r) for _, r in df.iterrows()],
        "ours (95 % t CI)": df["ours"].fillna(""),
        "seeds": df["n_seeds"].astype(int),
        "p raw / Holm": [_pvals_cell(r) for _, r in df.iterrows()],
        "preconditions": [_pre_cell(r) for _, r in df.iterrows()],
        "verdict": df["verdict"],
        "reason": [_why_cell(r) for _, r in df.iterrows()],
    })
