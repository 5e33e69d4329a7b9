"""Reproduction scorecard: test each paper claim against our run-level results.

A claim compares two settings ``a`` and ``b`` of one results table (or each
consecutive pair of a ``chain`` of settings, or ``a`` against a constant
``value`` or a scalar read from another table, ``value_from``), paired by seed:

* ``less`` / ``greater``: one-sided paired t test of a < b (a > b); with a
  ``margin`` m, of a - b < -m (a - b > m).  Reproduced if p < alpha; not
  reproduced only if the t interval of a - b excludes the claimed effect
  (wholly at or above -m, at or below +m): a mean in the wrong direction whose
  interval reaches the claimed side is inconclusive, whatever n.
* ``noninferior``: paired non-inferiority t test with the claim's margin.
  Not reproduced if the CI of a - b lies wholly beyond the margin.
* ``equivalent``: TOST with bounds (-margin, +margin).  Not reproduced if the
  CI of a - b lies wholly outside the bounds.

Anything else is *inconclusive*, with the number of seeds that would decide it
at the observed effect and spread (power 0.8), at the level the verdict uses
(the row's Holm step-down level), or "no effect detected at this size" above
``stats.seeds_cap``; claims whose table has not been produced are *not run*.
A chain holds only if every link holds
(intersection-union test, so the chain's p-value is the largest link p-value,
with no multiplicity penalty).  The Wilcoxon signed-rank p-value of the same
hypothesis is reported alongside as a distribution-free cross-check; it does
not enter the verdict.

What makes a verdict mean something:

* ``expected``: what the source found.  ``holds`` (default) or ``fails`` (the
  source reports that this test fails): then "reproduced" means our test
  fails conclusively too, and "not reproduced" that ours holds.
* ``preconditions``: names of ``conditions`` (a top-level mapping of
  ``config/claims.yaml``) under which the claim is testable at all -- a
  language model below its data's bigram floor, a learner ahead of its
  negative control of equal budget, an optimizer run past its horizon.  Each
  is computed from results and shown with its measured value; one not met makes
  the verdict *not testable here*, counted apart, where its failure could explain
  the outcome (its ``blocks`` rule; a released method's failed control decides
  instead: :func:`distlab.scoring.scorecard_conditions.blocking`).
* ``threshold``: every margin or constant carries the source's numbers and the
  arithmetic that gives it, shown in the row.
* ``by_construction``: the reason a row holds whatever the data (a string);
  such rows are labelled so and kept out of the reproduced count.
* ``not_testable``: why a claim of the source cannot be tested here (a
  string): the row is listed, *not testable here*, with that reason.
* ``report_only``: why the row is reported beside a test and is not one (a string): its
  estimate and interval are shown, it reads *reported (not a test)*, stays out of the Holm
  families and the verdict counts (:mod:`distlab.scoring.reported`).

Tests are always on the paired differences a - b (a relative margin is
``margin × |mean(b)|``); ``transform: ratio`` only changes what ``ours``,
``estimate`` and ``ci_*`` report: the tested interval of a - b on the ratio
scale, 1 + (a - b) / mean(b) (the ratio of the means), so a shown interval
excludes the claimed ratio exactly when the test does.
"""

from __future__ import annotations

import math
import os
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from distlab.scoring import stats
from distlab.results.tables import atomic_write_text, markdown_table_plain, write_table

from .claims import (VALUE, VALUE_FROM, ClaimError, _check_condition, _check_references,  # noqa: F401
                     _normalize, _normalize_conditions, load_claims, load_claims_file, scoped_conditions,
                     validate_claims)
from .scorecard_conditions import (COND_COLUMNS, ConditionResult, blocking, conditions_frame,  # noqa: F401
                                   deciding_test, evaluate_condition, evaluate_conditions)
from .scorecard_links import (POWER, StatsSettings, _evaluate_link, _largest, _link_label,  # noqa: F401
                              _Link, _NotRun, _pair, _resolve, seeds_needed, seeds_to_decide)
from .scorecard_view import WRAP, claim_details, compact_view, condition_details
from .reported import REPORTED, apply_report_only, counts_line  # noqa: F401

VERDICTS = ("reproduced", "not reproduced", "inconclusive", "not testable here", "by construction",
            "not run", "unstable here")
# what a row reads before the last steps: "refused" (its n grew past the plan) becomes *not
# testable here*, "model prediction" (the clock's map itself) *by construction*; neither is a test,
# so neither enters a Holm family
NOT_TESTS = ("refused", "model prediction")
COLUMNS = (
    "id", "paper", "statement", "source", "metric", "test", "expected", "paper_value", "threshold",
    "ours", "estimate", "ci_low", "ci_high", "n_seeds", "p_value", "p_holm", "p_wilcoxon", "margin",
    "tested_at", "preconditions", "measured", "verdict", "reason", "seeds_needed", "planned_n", "decided_by",
)


# ---------------------------------------------------------------- claims


def _row(claim: dict[str, Any], **values: Any) -> dict[str, Any]:
    """A scorecard row; unset results are empty/NaN (for claims that were not run)."""
    base = {k: claim[k] for k in ("id", "paper", "statement", "source", "metric", "test", "expected",
                                  "paper_value", "threshold", "tested_at", "measured")}
    empty = {"ours": "", "estimate": math.nan, "ci_low": math.nan, "ci_high": math.nan,
             "n_seeds": 0, "p_value": math.nan, "p_holm": math.nan, "p_wilcoxon": math.nan,
             "preconditions": "", "seeds_needed": math.nan, "decided_by": ""}
    margin = math.nan if claim["margin"] is None else claim["margin"]
    planned = claim.get("planned_n")
    return {**base, **empty, "margin": margin, "planned_n": math.nan if planned is None else planned,
            "_model": claim.get("_model"), **values}


def _model_map(mp: dict[str, Any], tables: Mapping[str, pd.DataFrame]) -> tuple[np.ndarray, np.ndarray, str]:
    """The model's sweep: (x grid, the smallest seed-mean margin over the links at each x (> 0: the
    ordering holds on the clock), the region where it holds as text, with the crossings
    interpolated linearly between grid points)."""
    table = tables.get(mp["table"])
    if table is None:
        raise _NotRun(f"table {mp['table']!r} (the model's sweep) not available")
    x = mp["x"]
    if x not in table.columns or mp["metric"] not in table.columns:
        raise ClaimError(f"model_prediction: table {mp['table']!r} needs columns {x!r} and {mp['metric']!r}")
    grid = np.sort(table[x].dropna().unique().astype(float))
    test = mp["test"]
    worst = []
    for xv in grid:
        margins = []
        for a, b in mp["links"]:
            at = table[np.isclose(table[x].astype(float), xv)]
            paired = stats.pair_by_seed(at, mp["metric"], a, b)
            d = float(np.mean(paired["a"].to_numpy(float) - paired["b"].to_numpy(float)))
            margins.append(-d if test == "less" else d)
        worst.append(min(margins))
    worst = np.asarray(worst)
    return grid, worst, _region(grid, worst, x)


def _crossing(x0: float, x1: float, y0: float, y1: float) -> float:
    return x0 + (x1 - x0) * (0.0 - y0) / (y1 - y0) if y1 != y0 else (x0 + x1) / 2


def _region(grid: np.ndarray, worst: np.ndarray, x: str) -> str:
    """Where the ordering holds on the sweep, as text: 'holds iff x >= B' and the like."""
    on = worst > 0
    span = f"{grid[0]:.3g}–{grid[-1]:.3g}"
    if on.all():
        return f"holds at every {x} of the model's sweep ({span})"
    if not on.any():
        return f"fails at every {x} of the model's sweep ({span})"
    cuts = [(i, _crossing(grid[i], grid[i + 1], worst[i], worst[i + 1])) for i in range(len(grid) - 1)
            if on[i] != on[i + 1]]
    if len(cuts) == 1:
        i, c = cuts[0]
        side = "≥" if on[i + 1] else "≤"
        return (f"holds iff {x} {side} {c:.3g} (on the model's sweep {span}: interpolated between its points "
                f"{grid[i]:.3g} and {grid[i + 1]:.3g})")
    parts, start = [], (grid[0] if on[0] else None)
    for i, c in cuts:
        if on[i]:
            parts.append(f"{start:.3g}–{c:.3g}")
        else:
            start = c
    if on[-1]:
        parts.append(f"{start:.3g}–{grid[-1]:.3g}")
    return f"holds for {x} in {', '.join(parts)} (on the model's sweep {span}, crossings interpolated)"


def _predicted_at(grid: np.ndarray, worst: np.ndarray, at: float) -> bool | None:
    """Whether the model makes the ordering hold at ``at`` (interpolated); None off the sweep."""
    if not grid[0] <= at <= grid[-1]:
        return None
    return bool(np.interp(at, grid, worst) > 0)


def _under_load(claim: Mapping[str, Any], table: pd.DataFrame, resolved) -> str:
    """For a measured row, the runs it read that shared the machine (a table's ``loaded``
    column, from each run's load record: :func:`distlab.runtime.machine_load.saw_load_above_cores`):
    its timing is not this machine's alone.  Empty for a row that is not measured or a table without the column."""
    if not claim.get("measured") or "loaded" not in table.columns:
        return ""
    rows = [stats.select(table, side) for a, b in resolved for side in (a, b) if VALUE not in side]
    runs = pd.concat(rows).drop_duplicates() if rows else table.iloc[:0]
    loaded = int(runs["loaded"].fillna(False).astype(bool).sum())
    if not loaded:
        return ""
    return f"; measured on a shared machine: in {loaded} of {len(runs)} runs other processes took CPU time from it"


def _evaluate_claim(claim: dict[str, Any], tables: Mapping[str, pd.DataFrame],
                    cfg: StatsSettings) -> tuple[dict[str, Any], list[_Link]]:
    """The claim's row and its links (whose oriented differences the power step reuses)."""
    if claim["not_testable"]:  # listed with its reason: nothing here can test it
        return _row(claim, verdict="not testable here", reason=f"not testable here: {claim['not_testable']}"), []
    mp = claim["model_prediction"]
    if mp:
        try:
            grid, worst, region = _model_map({**mp, "test": claim["test"]}, tables)
        except (stats.EmptySelectionError, _NotRun) as err:
            return _row(claim, verdict="not run", reason=f"model prediction: {err}"), []
        predicted = None if mp["at"] is None else _predicted_at(grid, worst, mp["at"])
        claim = {**claim, "_model": (region, predicted)}
        if mp["at"] is None:  # the map itself: the clock's region, no test of data
            return _row(claim, verdict="model prediction", reason=f"model prediction: {mp['reason']}; {region}; "
                        "the paper's own setting of it is unknown, so the row tests nothing about the paper"), []
    table = tables.get(claim["table"])
    if table is None:
        return _row(claim, verdict="not run", reason=f"table {claim['table']!r} not available"), []
    try:
        resolved = [(a, _resolve(b, tables)) for a, b in claim["links"]]  # value_from read once
        pairs = [_pair(table, claim["metric"], a, b) for a, b in resolved]
    except (stats.EmptySelectionError, _NotRun) as err:
        return _row(claim, verdict="not run", reason=str(err)), []
    except ValueError as err:
        raise ClaimError(f"claim {claim['id']!r}: {err}") from err
    links = [_evaluate_link(claim, paired, _link_label(a, b), cfg) for paired, (a, b) in zip(pairs, resolved)]

    verdicts = [lk.verdict for lk in links]
    if all(v == "reproduced" for v in verdicts):
        verdict = "reproduced"
    elif "not reproduced" in verdicts:
        verdict = "not reproduced"
    else:
        verdict = "inconclusive"
    if verdict == "not reproduced":
        key = next(lk for lk in links if lk.verdict == "not reproduced")
    else:  # the weakest link: untestable first, then the largest p-value
        key = max(links, key=lambda lk: (math.isnan(lk.p_value), lk.p_value))
    reason = key.reason
    if claim["is_chain"]:
        ok = verdicts.count("reproduced")
        reason = f"{ok}/{len(links)} links hold; {key.label}: {reason}"
    shown = key.shown
    reason += _under_load(claim, table, resolved)
    undecided = [lk.seeds_needed for lk in links if lk.verdict == "inconclusive"]
    n_min = min(lk.n for lk in links)
    planned = claim.get("planned_n")
    if planned is not None and n_min > planned:
        reason = (f"refused: n = {n_min} seeds or repeats, more than the planned {planned} (planned_n, fixed "
                  f"before the run): a count grown after a result was seen cannot decide the row; rerun "
                  f"with the plan (would have been: {verdict}; {reason})")
        verdict = "refused"
    elif planned is not None and n_min < planned:
        reason = f"{reason}; n = {n_min} of the planned {planned} (planned_n)"
    return _row(
        claim,
        ours=" → ".join(lk.ours or "n/a" for lk in links),
        estimate=shown.estimate if shown else math.nan,
        ci_low=shown.low if shown else math.nan,
        ci_high=shown.high if shown else math.nan,
        n_seeds=min(lk.n for lk in links),
        p_value=_largest([lk.p_value for lk in links]),
        p_wilcoxon=_largest([lk.p_wilcoxon for lk in links]),
        verdict=verdict,
        reason=reason,
        seeds_needed=_largest(undecided) if undecided and verdict == "inconclusive" else math.nan,
    ), links


def evaluate_claims(
    claims: Sequence[Mapping[str, Any]],
    tables: Mapping[str, pd.DataFrame],
    stats_cfg: Mapping[str, Any],
    conditions: Mapping[str, Any] | None = None,
    condition_results: Mapping[str, ConditionResult] | None = None,
) -> pd.DataFrame:
    """Evaluate every claim against ``tables`` (name -> tidy run-level table).

    ``stats_cfg`` is ``{"alpha": ..., "bootstrap": {"n_resamples", "seed",
    "confidence"}}``.  ``conditions`` are the named preconditions the claims
    refer to (evaluated here unless ``condition_results`` are given).  Returns
    one row per claim, in claim order, with the columns of :data:`COLUMNS`.
    For a chain, ``estimate``/``ci_*`` belong to the decisive link (the first
    failing one, else the weakest one), ``n_seeds`` is the smallest link n and
    the p-values are the largest.

    The order of judgement: the test's own outcome; Holm within each paper
    (over the claims that are testable, not by construction, not reported); then
    the source's polarity (``expected: fails`` swaps reproduced and not
    reproduced); then preconditions (one not met that could explain the outcome: *not
    testable here*; a released method's failed control: *not reproduced*; one not run:
    *not run*); then ``by_construction``, ``report_only``; last the seeds an
    inconclusive row needs, at the level its verdict uses (Holm-adjusted).
    """
    cfg = StatsSettings.from_config(stats_cfg)
    checked = _normalize(list(claims))
    conds = _normalize_conditions(conditions)
    _check_references(checked, conds)
    if condition_results is None:
        condition_results = evaluate_conditions(scoped_conditions(checked, conditions or {}), tables, stats_cfg)
    evaluated = [_evaluate_claim(c, tables, cfg) for c in checked]
    models = {row["id"]: row["_model"] for row, _ in evaluated if row.get("_model")}
    blocked = {}
    for c, (row, links) in zip(checked, evaluated):  # a precondition blocks only where it could explain the outcome
        blocked[c["id"]], note = blocking(c, condition_results, links, cfg.confidence)
        row["reason"] = f"{row['reason']}; {note}" if note else row["reason"]
    df = pd.DataFrame([row for row, _ in evaluated], columns=list(COLUMNS))
    for i, c in enumerate(checked):
        df.at[i, "preconditions"] = "; ".join(condition_results[n].line() for n in c["preconditions"])
    df = _holm_within_papers(df, checked, cfg.alpha, blocked)
    df = _apply_polarity(df, checked)
    df = _apply_preconditions(df, checked, blocked)
    df["decided_by"] = [deciding_test(c, condition_results) if (blocked.get(c["id"]) or ("",))[0] == "not reproduced"
                        and v == "not reproduced" else "" for c, v in zip(checked, df["verdict"])]
    df = apply_report_only(_apply_construction(df, checked, models), checked, blocked)
    df = _power_at_level(df, checked, [links for _, links in evaluated], cfg)
    return df.astype({"n_seeds": int})


def _holm_within_papers(df: pd.DataFrame, claims: Sequence[dict[str, Any]], alpha: float,
                        blocked: Mapping[str, Any] | None = None) -> pd.DataFrame:
    """Holm-adjust the p-values of each paper's tested claims; judge by the adjusted value.

    The family is a paper's claims that were tested (a p-value), whose
    preconditions hold and that do not hold by construction.  A claim whose
    test held at its raw p-value but not at its adjusted one becomes
    inconclusive; "not reproduced" outcomes rest on the opposite test or the
    CI and are left as they are.
    """
    df = df.copy()
    blocked = blocked or {}
    out = {c["id"] for c in claims
           if c["by_construction"] or c["model_prediction"] or c["report_only"] or blocked.get(c["id"])}
    out |= set(df.loc[df["verdict"].isin(NOT_TESTS), "id"])
    in_family = df["p_value"].notna() & ~df["id"].isin(out)
    for _, idx in df[in_family].groupby("paper").groups.items():
        df.loc[idx, "p_holm"] = stats.holm(df.loc[idx, "p_value"].to_numpy(float))
    for i in df.index[in_family]:
        if df.at[i, "verdict"] == "reproduced" and not df.at[i, "p_holm"] < alpha:
            df.at[i, "verdict"] = "inconclusive"
            df.at[i, "reason"] = (f"{df.at[i, 'reason']}; Holm-adjusted within {df.at[i, 'paper']}: "
                                  f"p = {df.at[i, 'p_holm']:.2g} ≥ {alpha:g}")
    return df


def holm_levels(pvalues: Sequence[float], alpha: float) -> np.ndarray:
    """The level each p-value must reach under Holm's step-down: alpha / (m - rank + 1).

    ``p_holm < alpha`` exactly when every smaller p-value, and this one, is below its
    level; so a row that is to reproduce needs its own p below this level.
    """
    p = np.asarray(pvalues, float)
    order = np.argsort(p, kind="stable")
    levels = np.empty(p.size)
    levels[order] = alpha / (p.size - np.arange(p.size))
    return levels


def _power_at_level(df: pd.DataFrame, claims: Sequence[dict[str, Any]], links: Sequence[Sequence[_Link]],
                    cfg: StatsSettings) -> pd.DataFrame:
    """Seeds that would decide each inconclusive row, at the level its verdict uses.

    A tested row in a paper's Holm family must reach alpha / (m - rank + 1), not alpha;
    a row outside it (no family) uses alpha.  Every link that has not decided at that
    level counts (the chain's largest).  Above ``cfg.seeds_cap`` seeds the row says
    "no effect detected at this size" instead: an effect that small is not one the
    runs can decide, and a seed count there would read as a promise.
    """
    df = df.copy()
    level = pd.Series(cfg.alpha, index=df.index, dtype=float)
    fam = df["p_holm"].notna()
    for _, idx in df[fam].groupby("paper").groups.items():
        level.loc[idx] = holm_levels(df.loc[idx, "p_value"].to_numpy(float), cfg.alpha)
    for i, c in enumerate(claims):
        if df.at[i, "verdict"] != "inconclusive":
            continue
        lv = float(level.iat[i])
        need, ways = [], set()
        for lk in links[i]:
            if lk.toward is None or (lk.verdict == "reproduced" and lk.p_value < lv):
                continue
            n, way = seeds_to_decide(lk.toward, lv, cfg.confidence)
            need.append(n)
            ways.add(way)
        if not need:
            continue
        n = _largest(need)
        at = f"α = {lv:.2g}" + (f" (Holm: {cfg.alpha:g} / {round(cfg.alpha / lv)})" if fam.iat[i] else "")
        if math.isnan(n):
            df.at[i, "seeds_needed"] = math.nan
        elif n > cfg.seeds_cap:
            df.at[i, "seeds_needed"] = math.nan
            df.at[i, "reason"] = (f"{df.at[i, 'reason']}; no effect detected at this size: about {int(n)} seeds "
                                  f"would be needed at {at}, beyond the cap of {cfg.seeds_cap} (stats.seeds_cap)")
        else:
            df.at[i, "seeds_needed"] = n
            toward = " or ".join(sorted(ways))
            if c["expected"] == "fails":
                toward = {"reproduced": "our test holding", "not reproduced": "our test failing"}.get(toward, toward)
            df.at[i, "reason"] = f"{df.at[i, 'reason']}; seeds counted at {at}, toward {toward}"
    return df


def _apply_polarity(df: pd.DataFrame, claims: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """``expected: fails``: the source found the test fails, so ours failing reproduces it."""
    swap = {"reproduced": "not reproduced", "not reproduced": "reproduced"}
    for i, c in enumerate(claims):
        if c["expected"] != "fails" or df.at[i, "verdict"] in ("not run", "not testable here", *NOT_TESTS):
            continue
        v = df.at[i, "verdict"]
        ours = {"reproduced": "our test holds", "not reproduced": "our test fails conclusively",
                "inconclusive": "our test is inconclusive"}[v]
        df.at[i, "verdict"] = swap.get(v, v)
        df.at[i, "reason"] = f"the source reports this test fails; {ours}: {df.at[i, 'reason']}"
    return df


def _apply_preconditions(df: pd.DataFrame, claims: Sequence[dict[str, Any]],
                         blocked: Mapping[str, Any]) -> pd.DataFrame:
    for i, c in enumerate(claims):
        hit = blocked.get(c["id"])
        if hit is None or df.at[i, "verdict"] == "not run":
            continue
        verdict, why = hit
        was = "would have been" if verdict in ("not run", "not testable here") else "the comparison alone gives"
        df.at[i, "reason"] = f"{why} ({was}: {df.at[i, 'verdict']}; {df.at[i, 'reason']})"
        df.at[i, "verdict"] = verdict
        df.at[i, "seeds_needed"] = math.nan
    return df


def _apply_construction(df: pd.DataFrame, claims: Sequence[dict[str, Any]],
                        models: Mapping[str, tuple[str, bool | None]] | None = None) -> pd.DataFrame:
    """Rows the code fixes whatever the data are labelled so, with what fixes them.

    ``by_construction``: the row reads *by construction* whatever its p (reproduced or
    inconclusive alike: the data's p measures nothing the code does not fix); only data
    that decide against it (*not reproduced*) keep their verdict, and say that the
    construction did not show: a broken construction is a finding, not a label.

    ``model_prediction``: the clock fixes the row as a function of a setting (e.g. c/mu);
    the row reads *by construction* and states where the model makes it hold.  A row with
    its own runs (``at``) says what the model predicts there and what the data give; data
    that decide against the prediction keep their verdict (the simulator contradicts its
    own clock: a finding).  A "refused" row (its n grew past the plan) reads *not testable
    here*.  ``models``: claim id -> (the model's region as text, its prediction at ``at``).
    """
    models = models or {}
    for i, c in enumerate(claims):
        v = df.at[i, "verdict"]
        if v == "refused":
            df.at[i, "verdict"] = "not testable here"
            df.at[i, "seeds_needed"] = math.nan
            continue
        if v in ("not run", "not testable here"):
            continue
        if c["model_prediction"]:
            mp = c["model_prediction"]
            region, predicted = models.get(c["id"]) or ("", None)
            if v == "model prediction":
                df.at[i, "verdict"] = "by construction"
                continue
            if predicted is None:
                where = f"{mp['x']} = {mp['at']:g} lies off the model's sweep: no prediction there"
                df.at[i, "reason"] = f"model prediction: {mp['reason']}; {region}; {where}; the data give {v}: " \
                                     f"{df.at[i, 'reason']}"
                continue
            says = "holds" if predicted else "fails"
            against = (v == "not reproduced" and predicted) or (v == "reproduced" and not predicted)
            head = f"model prediction: {mp['reason']}; {region}; here ({mp['x']} = {mp['at']:g}) the model {says}"
            if against:
                df.at[i, "reason"] = f"{head}, but the data give {v} (the runs contradict their own clock): " \
                                     f"{df.at[i, 'reason']}"
                continue
            df.at[i, "reason"] = f"{head}; the data give {v}: {df.at[i, 'reason']}"
            df.at[i, "verdict"] = "by construction"
            df.at[i, "seeds_needed"] = math.nan
            continue
        if not c["by_construction"]:
            continue
        if v == "not reproduced":
            df.at[i, "reason"] = (f"should hold by construction ({c['by_construction']}), but the data give "
                                  f"{v}: {df.at[i, 'reason']}")
            continue
        df.at[i, "reason"] = (f"holds by construction: {c['by_construction']} (was: {v}); "
                              f"{df.at[i, 'reason']}")
        df.at[i, "verdict"] = "by construction"
        df.at[i, "seeds_needed"] = math.nan
    return df


# ----------------------------------------------------------------------------
# Output
# ----------------------------------------------------------------------------


def write_scorecard(
    df: pd.DataFrame,
    md_path: str | os.PathLike[str],
    csv_path: str | os.PathLike[str],
    title: str = "Reproduction scorecard",
    stale: pd.DataFrame | None = None,
    conditions: pd.DataFrame | None = None,
    conditions_csv: str | os.PathLike[str] | None = None,
    details: bool = False,
) -> None:
    """Write the scorecard as Markdown (the counts line, the notes, the compact table: id,
    verdict, ours, a short statement) and CSV (all columns; the conditions in ``conditions_csv``).

    With ``details`` (a paper's page) every claim's long cells follow as a wrapped list, and the
    preconditions and negative controls too; without, the page names where they are (the CSV
    and the papers' pages).  No line of the page is padded or longer than its content needs.
    ``stale`` lists runs made by other code than the current revision (or a dirty tree); they
    are named under the table so that stale results show.
    """
    text = "\n\n".join([f"# {title}", counts_line(df, VERDICTS), _scorecard_notes(df),
                         markdown_table_plain(compact_view(df))])
    if details:
        text += "\n## Each claim\n\n" + "\n".join(claim_details(df)) + "\n"
        if conditions is not None and len(conditions):
            text += ("\n## Preconditions and negative controls\n\nEach condition is computed from the "
                     "results; a claim that names one is tested only where it is met.\n\n"
                     + "\n".join(condition_details(conditions[list(COND_COLUMNS)])) + "\n")
    else:
        text += ("\nEach claim's source, threshold, p-values, preconditions and the reason for its verdict: "
                 "the CSV beside this page and the papers' pages (scorecard/<paper>.md).\n")
    if stale is not None and len(stale):
        text += ("\n## Results made by other code\n\nThese runs were recorded at another revision "
                 "than the current one, or from a tree with uncommitted changes; rerun them "
                 "(`snakemake --forcerun <rule>`) before trusting the rows that use them.\n\n"
                 + markdown_table_plain(stale))
    atomic_write_text(md_path, text)
    write_table(df, csv_path)
    if conditions_csv is not None:
        frame = conditions if conditions is not None else pd.DataFrame(columns=list(COND_COLUMNS))
        write_table(frame, conditions_csv)


def _scorecard_notes(df: pd.DataFrame) -> str:
    """How the scorecard's rows are read (tests, Holm, intervals, the verdicts), wrapped."""
    counts = df["verdict"].value_counts()
    tested = int(sum(counts.get(v, 0) for v in ("reproduced", "not reproduced", "inconclusive")))
    notes = ("p-values: one-sided paired t (or non-inferiority / TOST) on per-seed differences; "
             "Holm-adjusted within each paper over the testable claims, and the verdict uses the "
             "adjusted value. Intervals: Student-t over seeds. A claim is *not testable here* when a "
             "precondition (the method below its data's floor, ahead of its negative control, past "
             "its horizon) is not met where its failure could explain the outcome: it is neither reproduced nor "
             "not reproduced; a method run as its source released it that does not beat its control is a "
             "finding (its win claims: not reproduced). *Not reproduced* "
             "needs the interval to exclude the claimed effect (or margin); a mean in the wrong direction "
             "whose interval reaches the claim is inconclusive. Seeds that would decide an inconclusive row "
             "are counted at its Holm-adjusted level; beyond the declared cap (stats.seeds_cap) the row "
             "reads *no effect detected at this size*. A row *reported (not a test)* shows an estimate beside "
             "a test (no p, no Holm family, not counted). "
             f"{tested} of {int((df['verdict'] != REPORTED).sum())} claims were testable and tested.")
    return "\n".join(textwrap.wrap(notes, width=WRAP, break_long_words=False, break_on_hyphens=False))


def _read_table(path: str | os.PathLike[str]) -> pd.DataFrame:
    """A summary table the scorecard grades, after :func:`distlab.results.tables.read_table_checked`:
    a table cut mid-line, one that is not what its rule wrote (its record) or one naming a run
    that is gone raises ``ResultError`` naming the file, so a missing run is never graded."""
    from ..results.tables import read_table_checked

    return read_table_checked(path)


def stale_runs(tables: Mapping[str, pd.DataFrame], current: str | None, same_code=None) -> pd.DataFrame:
    """Runs of the summary tables whose recorded code differs from ``current``.

    Reads the ``git_commit`` and ``git_dirty`` columns a summary table carries
    (one row per run); tables without them are skipped, and so is everything
    when there is no current revision to compare with (a tree outside git).
    ``same_code(commit)``: whether a commit's code that decides results equals the current one's
    (:func:`distlab.results.runs.code_unchanged_since`: a commit that changed only docs or tests since the run leaves
    its runs current); without it, any other commit is other code.
    """
    rows = []
    if not current:
        return pd.DataFrame(rows, columns=["table", "run", "seed", "commit", "dirty"])
    verdict: dict[str, bool] = {}

    def other_code(commit: str) -> bool:
        if commit == str(current):
            return False
        if commit not in verdict:
            verdict[commit] = not (same_code is not None and same_code(commit))
        return verdict[commit]

    for name, t in tables.items():
        if "git_commit" not in t.columns:
            continue
        dirty = t["git_dirty"].fillna(False).astype(bool) if "git_dirty" in t.columns else False
        other = t["git_commit"].astype(str).map(other_code).astype(bool)
        bad = t[other | dirty]
        for _, r in bad.iterrows():
            rows.append({"table": name, "run": r.get("run", ""), "seed": r.get("seed", ""),
                         "commit": str(r["git_commit"])[:10],
                         "dirty": bool(r.get("git_dirty", False))})
    return pd.DataFrame(rows, columns=["table", "run", "seed", "commit", "dirty"])


def main_scorecard(
    claims_path: str | os.PathLike[str],
    summaries: Mapping[str, str | os.PathLike[str]],
    stats_cfg: Mapping[str, Any],
    md_out: str | os.PathLike[str],
    csv_out: str | os.PathLike[str],
    paper: str | None = None,
    conditions_out: str | os.PathLike[str] | None = None,
) -> pd.DataFrame:
    """Load claims and summary tables (CSV or parquet by suffix), evaluate, write, return.

    With ``paper``, only that paper's claims (and the conditions they name)
    are evaluated (its own tables suffice): the scorecard section a paper's
    target needs.
    """
    from ..results.runs import code_unchanged_since, git_revision
    from ..results.tables import record_graded_runs

    tables = {name: _read_table(p) for name, p in summaries.items()}
    claims, conditions = load_claims_file(claims_path)
    if paper is not None:
        claims = [c for c in claims if c["paper"] == paper]
    checked = _normalize(claims)
    used = {n for c in checked for n in c["preconditions"]}
    conditions = {n: c for n, c in scoped_conditions(checked, conditions).items()
                  if n in used or any(n == base for c in checked for base, _ in c["precondition_scopes"].values())}
    results = evaluate_conditions({n: c for n, c in conditions.items() if n in used}, tables, stats_cfg)
    df = evaluate_claims(claims, tables, stats_cfg, conditions, results)
    title = "Reproduction scorecard" + (f": {paper}" if paper else "")
    write_scorecard(df, md_out, csv_out, title=title,
                    stale=stale_runs(tables, git_revision()["commit"], code_unchanged_since),
                    conditions=conditions_frame(results), conditions_csv=conditions_out, details=True)
    record_graded_runs(csv_out, df, list(summaries.values()))
    return df


def merge_scorecards(parts: Sequence[str | os.PathLike[str]], md_out: str | os.PathLike[str],
                     csv_out: str | os.PathLike[str]) -> pd.DataFrame:
    """One scorecard from the per-paper sections (each already Holm-adjusted within its paper).

    Each part ``X.csv`` may have its conditions beside it in ``X_conditions.csv``.
    """
    frames = [_read_table(p) for p in parts]  # a part cut short, or grading a run now gone, is refused
    df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=list(COLUMNS))
    df = df.astype({"n_seeds": int})
    conds, stale_parts = [], []
    for p in parts:
        side = Path(p).with_name(f"{Path(p).stem}_conditions.csv")
        if side.exists() and side.stat().st_size:
            conds.append(pd.read_csv(side))
        md = Path(p).with_suffix(".md")
        if md.exists() and "## Results made by other code" in md.read_text(encoding="utf-8"):
            stale_parts.append(Path(p).stem)
    stale = pd.DataFrame({"table": [f"see paper/scorecard/{s}.md" for s in stale_parts],
                          "run": "", "seed": "", "commit": "", "dirty": ""}) if stale_parts else None
    conditions = pd.concat(conds, ignore_index=True) if conds else None
    write_scorecard(df, md_out, csv_out, stale=stale, conditions=conditions)
    from ..results.tables import record_graded_runs

    record_graded_runs(csv_out, df, list(parts))
    return df
