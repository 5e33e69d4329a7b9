"""Scorecard conditions: the preconditions a claim is testable under, evaluated on results.

Each condition of ``config/claims.yaml`` (validated by :mod:`distlab.scoring.claims`) is met, not
met, or not run, and shows what was measured: a paired comparison, every run past a
bound, or a bound within reach (``bound_reaches``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from distlab.scoring import stats
from distlab.results.tables import fmt_ci

from .claims import VALUE, ClaimError, _normalize_conditions
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

    def line(self) -> str:
        return f"{self.name}: {self.status} ({self.measured})"


def evaluate_condition(cond: dict[str, Any], tables: Mapping[str, pd.DataFrame],
                       cfg: StatsSettings) -> ConditionResult:
    """Evaluate one validated condition (see :func:`_check_condition`)."""
    def result(status: str, measured: str) -> ConditionResult:
        return ConditionResult(cond["name"], cond["kind"], cond["statement"], status, measured)

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
            return result("met" if ok else "not met", text + (f" ({cond['threshold']})" if cond["threshold"] else ""))
        paired = _pair(table, cond["metric"], cond["a"], b)
    except (_NotRun, stats.EmptySelectionError) as err:
        return result("not run", str(err))
    a_, b_ = paired["a"].to_numpy(float), paired["b"].to_numpy(float)
    if len(a_) < 2:
        return result("not met", f"n = {len(a_)} < 2 seeds")
    dci = stats.t_interval(a_ - b_, cfg.confidence)
    aci = stats.t_interval(a_, cfg.confidence)
    other = f"{_num(b[VALUE])}" if VALUE in b else f"b (mean {_num(float(np.mean(b_)))})"
    if test == "equivalent":  # TOST: a - b inside (-m, +m), e.g. a gap that no longer moves by the margin
        p = stats.tost(a_, b_, m).p_value
        text = (f"a = {fmt_ci(aci.estimate, aci.low, aci.high)} vs {other}; a − b = "
                f"{_num(dci.estimate)} [{_num(dci.low)}, {_num(dci.high)}], needs |a − b| < {_num(m)}: "
                f"TOST p = {p:.2g}, n = {len(a_)}")
        return result("met" if p < cfg.alpha else "not met", text)
    shifted = a_ + m if test == "less" else a_ - m
    p = stats.paired_t(shifted, b_, test).p_value
    rel = "<" if test == "less" else ">"
    bound = f" {'−' if test == 'less' else '+'} {_num(m)}" if m else ""
    text = (f"a = {fmt_ci(aci.estimate, aci.low, aci.high)} vs {other}; a − b = "
            f"{_num(dci.estimate)} [{_num(dci.low)}, {_num(dci.high)}], needs a {rel} b{bound}: "
            f"paired t p = {p:.2g}, n = {len(a_)}")
    return result("met" if p < cfg.alpha else "not met", text)


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
