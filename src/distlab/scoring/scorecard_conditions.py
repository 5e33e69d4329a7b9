"""Scorecard conditions: the preconditions a claim is testable under, evaluated on results.

Each condition of ``config/claims.yaml`` (validated by :mod:`distlab.scoring.claims`) is met, not
met, or not run, and shows what was measured: a paired comparison, every run past a
bound, or a bound within reach (``bound_reaches``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from distlab.scoring import stats
from distlab.results.tables import fmt_ci

from .claims import VALUE, ClaimError, _normalize_conditions, learner_side, learning_shift
from .scorecard_links import StatsSettings, _NotRun, _num, _pair, _resolve

COND_COLUMNS = ("name", "kind", "statement", "measured", "status")


@dataclass(frozen=True)
class ConditionResult:
    """A precondition evaluated on results: met, not met, or not run (with what was measured)."""

    name: str
    kind: str
    statement: str
    status: str  # "met" | "not met" | "not run"
    measured: str
    blocks: str = "always"  # when a condition not met blocks a claim (claims.BLOCKS)
    released: str = ""  # a control of a method run as its source released it: not learning decides
    testable_with: str = ""  # what would make a blocked row testable
    worst: float = math.nan  # each_* tests: the worst value over the runs
    bound: float = math.nan  # each_* tests: the value it is held to
    # blocks "learning": the learner's selection, and the test and metric that say which way learning moves it
    learner: Mapping[str, Any] = field(default_factory=dict)
    test: str = ""
    metric: str = ""
    # a paired test's own interval, for a row this condition decides (:func:`deciding_test`)
    interval: tuple = ()  # (test, margin, estimate of a - b, ci_low, ci_high, n)

    def line(self) -> str:
        return f"{self.name}: {self.status} ({self.measured})"


def evaluate_condition(cond: dict[str, Any], tables: Mapping[str, pd.DataFrame],
                       cfg: StatsSettings) -> ConditionResult:
    """Evaluate one validated condition (see :func:`_check_condition`)."""
    def result(status: str, measured: str, worst: float = math.nan, bound: float = math.nan,
               interval: tuple = ()) -> ConditionResult:
        return ConditionResult(cond["name"], cond["kind"], cond["statement"], status, measured,
                               cond.get("blocks", "always"), cond.get("released", ""),
                               cond.get("testable_with", ""), worst, bound, dict(cond["a"]), cond["test"],
                               cond["metric"], interval)

    table = tables.get(cond["table"])
    if table is None:
        return result("not run", f"table {cond['table']!r} not available")
    if cond["test"] == "bound_reaches":
        return _evaluate_bound(cond, table, cfg, result)
    try:
        b = _resolve(cond["b"], tables)
        m, test = cond["margin"], cond["test"]
        if test.startswith("each_"):
            rows = stats.select(table, cond["a"])
            if cond["metric"] not in rows.columns:
                raise ValueError(f"table {cond['table']!r} has no column {cond['metric']!r}")
            vals = rows[cond["metric"]].to_numpy(float)
            if vals.size == 0:
                return result("not run", f"no rows of {cond['table']!r} match {cond['a']}")
            bound = b[VALUE] + m if test == "each_at_least" else b[VALUE] - m
            worst = float(np.nanmin(vals) if test == "each_at_least" else np.nanmax(vals))
            ok = not np.isnan(vals).any() and (worst >= bound if test == "each_at_least" else worst <= bound)
            sign = "≥" if test == "each_at_least" else "≤"
            what = "min" if test == "each_at_least" else "max"
            text = f"{what} {cond['metric']} over {len(vals)} runs = {_num(worst)}, needs {sign} {_num(bound)}"
            return result("met" if ok else "not met", text + (f" ({cond['threshold']})" if cond["threshold"] else ""),
                          worst, bound)
        paired = _pair(table, cond["metric"], cond["a"], b)
    except (_NotRun, stats.EmptySelectionError) as err:
        return result("not run", str(err))
    a_, b_ = paired["a"].to_numpy(float), paired["b"].to_numpy(float)
    if len(a_) < 2:
        return result("not met", f"n = {len(a_)} < 2 seeds")
    dci = stats.t_interval(a_ - b_, cfg.confidence)
    aci = stats.t_interval(a_, cfg.confidence)
    other = f"{_num(b[VALUE])}" if VALUE in b else f"b (mean {_num(float(np.mean(b_)))})"
    own = (test, m, dci.estimate, dci.low, dci.high, len(a_))
    if test == "equivalent":  # TOST: a - b inside (-m, +m), e.g. a gap that no longer moves by the margin
        p = stats.tost(a_, b_, m).p_value
        text = (f"a = {fmt_ci(aci.estimate, aci.low, aci.high)} vs {other}; a − b = "
                f"{_num(dci.estimate)} [{_num(dci.low)}, {_num(dci.high)}], needs |a − b| < {_num(m)}: "
                f"TOST p = {p:.2g}, n = {len(a_)}")
        return result("met" if p < cfg.alpha else "not met", text, interval=own)
    shifted = a_ + m if test == "less" else a_ - m
    p = stats.paired_t(shifted, b_, test).p_value
    rel = "<" if test == "less" else ">"
    bound = f" {'−' if test == 'less' else '+'} {_num(m)}" if m else ""
    text = (f"a = {fmt_ci(aci.estimate, aci.low, aci.high)} vs {other}; a − b = "
            f"{_num(dci.estimate)} [{_num(dci.low)}, {_num(dci.high)}], needs a {rel} b{bound}: "
            f"paired t p = {p:.2g}, n = {len(a_)}")
    return result("met" if p < cfg.alpha else "not met", text, interval=own)


def _evaluate_bound(cond: dict[str, Any], table: pd.DataFrame, cfg: StatsSettings, result) -> ConditionResult:
    """``bound_reaches``: the per-seed bound ``factor x a / b`` with its t interval; met while the
    interval's upper end reaches ``reach`` (the claim may hold here), not met when the whole
    interval lies below it (the claim is out of this machine's reach, whatever the method does)."""
    try:
        paired = stats.pair_by_seed(table, cond["metric"], cond["a"], cond["b"])
    except stats.EmptySelectionError as err:
        return result("not run", str(err))
    bound = cond["factor"] * paired["a"].to_numpy(float) / paired["b"].to_numpy(float)
    if len(bound) < 2:
        return result("not met", f"n = {len(bound)} < 2 seeds")
    ci = stats.t_interval(bound, cfg.confidence)
    ok = ci.high >= cond["reach"]
    text = (f"bound {_num(cond['factor'])} × a / b = {fmt_ci(ci.estimate, ci.low, ci.high)}, n = {len(bound)}; "
            f"the claim needs {_num(cond['reach'])}: " + ("within reach" if ok else "out of reach here")
            + f" ({cond['threshold']})")
    return result("met" if ok else "not met", text)


def evaluate_conditions(conditions: Mapping[str, Any], tables: Mapping[str, pd.DataFrame],
                        stats_cfg: Mapping[str, Any]) -> dict[str, ConditionResult]:
    """Every condition, evaluated: name -> :class:`ConditionResult`."""
    cfg = StatsSettings.from_config(stats_cfg)
    checked = _normalize_conditions(conditions)
    out = {}
    for name, cond in checked.items():
        try:
            out[name] = evaluate_condition(cond, tables, cfg)
        except ValueError as err:
            raise ClaimError(f"condition {name!r}: {err}") from err
    return out


def conditions_frame(results: Mapping[str, ConditionResult]) -> pd.DataFrame:
    return pd.DataFrame([{"name": r.name, "kind": r.kind, "statement": r.statement,
                          "measured": r.measured, "status": r.status} for r in results.values()],
                        columns=list(COND_COLUMNS))


# a claim that the method wins (or is no worse): what a released method's failing its control decides
WIN_TESTS = ("less", "greater", "noninferior")
# how the reason of a row that such a control decided begins (its test is in column decided_by)
DECIDED_BY = "decided by precondition"


def _with_fix(r: ConditionResult, text: str) -> str:
    return f"{text} (testable with: {r.testable_with})" if r.testable_with else text


def _claimed_improvement(claim: Mapping[str, Any], links: Sequence[Any]) -> float:
    """The improvement in % over ``b`` that a ``less`` claim needs: a − b < −m·|b| means
    b / a − 1 > 1 / (1 − m) − 1 (m relative, or the absolute margin over |mean b|)."""
    m = claim.get("margin") or 0.0
    if m and not claim.get("margin_relative"):
        mean_b = links[0].mean_b if len(links) == 1 else math.nan
        m = m / abs(mean_b) if mean_b else math.nan
    if math.isnan(m):
        return math.nan
    return 100.0 * (1.0 / (1.0 - m) - 1.0) if m < 1 else math.inf


def _improvement_block(claim: Mapping[str, Any], r: ConditionResult, links: Sequence[Any]) -> tuple[bool, str] | None:
    """A ceiling on the improvement (e.g. the exact optimum's headroom over a single device, in %)
    blocks only a claim of an improvement it cannot hold."""
    if claim["test"] != "less":
        if r.status != "not met":
            return None
        return False, (f"precondition {r.name} not met ({r.measured}), but a ceiling on improvement does not "
                       "bear on a claim that is not one of improvement: not blocking")
    need = _claimed_improvement(claim, links)
    if math.isnan(r.worst) or math.isnan(need):
        if r.status != "not met":
            return None
        return True, _with_fix(r, f"precondition {r.name} not met: {r.measured}")
    if r.worst > need:
        if r.status != "not met":
            return None
        return False, (f"precondition {r.name} not met ({r.measured}), but the ceiling, {_num(r.worst)} %, can hold "
                       f"the claimed improvement of more than {_num(need)} %: not blocking")
    return True, _with_fix(r, f"precondition {r.name} {r.status}: {r.measured}; the ceiling here, at most "
                              f"{_num(r.worst)} % (worst run), cannot hold the claimed improvement of more than "
                              f"{_num(need)} %")


def _shortfall_block(r: ConditionResult, links: Sequence[Any], confidence: float) -> tuple[bool, str]:
    """A handicap (e.g. a search space's gap to the best baseline, relative) blocks only an outcome
    against the claim that it could explain: a shortfall, the smallest the row's interval allows,
    no larger than the handicap x |mean b|.  An outcome that leans toward the claim is decided: a
    handicap cannot explain a win."""
    head = f"precondition {r.name} not met: {r.measured}"
    lk = links[0] if len(links) == 1 else None
    if lk is None or lk.toward is None or len(lk.toward) < 2 or math.isnan(lk.mean_b) or math.isnan(r.worst):
        return True, _with_fix(r, f"{head}; the row's shortfall cannot be measured, so the handicap may explain it")
    handicap = r.worst * abs(lk.mean_b)
    gap = f"the handicap, {_num(handicap)} (= {_num(r.worst)} × |mean b| {_num(abs(lk.mean_b))})"
    if float(np.mean(lk.toward)) > 0:
        return False, (f"precondition {r.name} not met ({r.measured}), but the data lean toward the claim, "
                       "which a handicap cannot explain: not blocking")
    ci = stats.t_interval(lk.toward, confidence)
    shortfall = max(0.0, -ci.high)
    if handicap >= shortfall:
        return True, _with_fix(r, f"{head}; {gap}, is at least the row's shortfall, {_num(shortfall)} (the smallest "
                                  "its interval allows): it could explain the outcome")
    return False, (f"precondition {r.name} not met ({r.measured}), but {gap}, is smaller than the row's shortfall "
                   f"of at least {_num(shortfall)}: it cannot explain the outcome, so the row is decided")


def _learning_block(claim: Mapping[str, Any], r: ConditionResult, links: Sequence[Any]) -> tuple[bool, str]:
    """A learner that did not learn.  The method's own (the claim's a) blocks, as a control does.  The
    opponent's or baseline's (the claim's b) moves b one way (:func:`distlab.scoring.claims.learning_shift`),
    so it blocks only the decided outcome on the side it favours: toward the claim, a win (a loss is
    decided, its reason saying why the failure cannot explain it).  An undecided row stays undecided: the
    failure can only have pushed it toward the side it favours, so it hides no decided outcome the other
    way, and a decided outcome on its side, reached with more seeds, would be blocked by it."""
    head = f"precondition {r.name} not met: {r.measured}"
    if learner_side(claim["links"], r.learner) != "b":
        return True, _with_fix(r, head)
    shift = learning_shift(claim, r.test, r.metric)
    if shift == 0:
        return True, _with_fix(r, f"{head}; the opponent's failure does not move this row's test one way "
                                  f"(its {r.metric} beside the row's {claim['metric']} under test {claim['test']}), "
                                  "so it could explain any outcome")
    lk = links[0] if len(links) == 1 else None
    if lk is None:
        return True, _with_fix(r, f"{head}; the row has no outcome to read, so the opponent's failure may explain it")
    way, favoured, other = (("toward", "for the claim (a win)", "against the claim (a loss)") if shift > 0
                            else ("against", "against the claim (a loss)", "for the claim (a win)"))
    moved = "higher" if r.test in ("less", "each_at_most") else "lower"
    why = (f"the opponent (b) did not beat its control: its {r.metric} stays {moved} than a learning opponent's, "
           f"which can only move the row {way} the claim")
    if lk.verdict == ("reproduced" if shift > 0 else "not reproduced"):
        return True, _with_fix(r, f"{head}; {why}, and the outcome is {favoured}: the failure could explain it")
    if lk.verdict == "inconclusive":
        return False, (f"precondition {r.name} not met ({r.measured}), but {why}: it cannot explain an undecided "
                       f"outcome, which stays undecided (a decided outcome {favoured} would be blocked by it): "
                       "not blocking")
    return False, (f"precondition {r.name} not met ({r.measured}), but {why}; the outcome is decided {other}, "
                   "which the failure cannot explain: not blocking")


def deciding_test(claim: Mapping[str, Any], results: Mapping[str, ConditionResult]) -> str:
    """Column ``decided_by`` of a row a released method's failed control decides (:func:`blocking`):
    that precondition as JSON (``precondition``) with its own paired test where it has one
    (``test``, ``margin``, ``estimate``, ``ci_low``, ``ci_high``, ``n``: a − b and its interval),
    so what reads the row (the replicate's power rule) has the interval that decided it; empty
    for any other row."""
    for key in claim["preconditions"]:
        r = results[key]
        if r.status == "not met" and r.released:
            own = {}
            if r.interval:
                test, margin, est, low, high, n = r.interval
                own = {"test": test, "margin": float(margin), "estimate": float(est), "ci_low": float(low),
                       "ci_high": float(high), "n": int(n)}
            return json.dumps({"precondition": r.name, **own})
    return ""


def blocking(claim: Mapping[str, Any], results: Mapping[str, ConditionResult], links: Sequence[Any],
             confidence: float) -> tuple[tuple[str, str] | None, str]:
    """``((verdict, reason) or None, note)`` for a claim whose own test gave ``links``.

    A precondition not run makes the row *not run*.  One not met blocks (*not testable here*) only
    where its failure could explain the outcome, by its ``blocks`` rule; a control of a method run as
    its source released it (``released``) that is not met decides a claim that the method wins:
    *not reproduced*, the learner did not beat its control (unless another precondition blocks).  One on
    the learning of the opponent or baseline (``blocks: learning``, the claim's b) blocks only the decided
    outcome its failure favours (:func:`_learning_block`).  ``note`` says why a precondition not met did
    not block."""
    conds = [results[k] for k in claim["preconditions"]]
    missing = [r for r in conds if r.status == "not run"]
    if missing:
        return ("not run", "; ".join(f"precondition {r.name} not run: {r.measured}" for r in missing)), ""
    blocks, notes, findings = [], [], []
    for r in conds:
        if r.blocks == "improvement":
            hit = _improvement_block(claim, r, links)
        elif r.status != "not met":
            continue
        elif r.blocks == "shortfall":
            hit = _shortfall_block(r, links, confidence)
        elif r.blocks == "learning":
            hit = _learning_block(claim, r, links)
        elif r.released and claim["expected"] == "holds" and claim["test"] in WIN_TESTS:
            findings.append(r)
            continue
        else:
            hit = True, _with_fix(r, f"precondition {r.name} not met: {r.measured}")
        if hit is not None:
            (blocks if hit[0] else notes).append(hit[1])
    note = "; ".join(notes)
    if blocks:
        return ("not testable here", "; ".join(blocks)), note
    if findings:
        why = "; ".join(f"{DECIDED_BY} {r.name} not met: {r.measured}; the method as its source released "
                        f"it ({r.released}) did not beat its control, a finding: a claim that it wins is not "
                        "reproduced" for r in findings)
        return ("not reproduced", why), note
    return None, note
