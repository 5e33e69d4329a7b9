"""The paired test of one a-vs-b comparison of a scorecard claim (a link of it).

What :mod:`distlab.scoring.scorecard` builds a claim's verdict from: the test a claim names
(``less``/``greater`` with an optional margin, ``noninferior``, ``equivalent``) on the
paired differences of two settings (or of a setting and a constant), its t interval,
the Wilcoxon cross-check, the seeds that would decide an inconclusive link, and the exact
check of a one-value by-construction row.  See :mod:`distlab.scoring.scorecard` for the rules.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from distlab.scoring import stats
from distlab.results.tables import fmt_ci

from .claims import VALUE, VALUE_FROM, ClaimError

POWER = 0.8  # the power at which seeds_needed is computed


@dataclass(frozen=True)
class StatsSettings:
    """Significance level and bootstrap settings, parsed from the config's ``stats``."""

    alpha: float
    n_resamples: int = 9999
    seed: int = 0
    confidence: float = 0.95
    seeds_cap: int = 50  # above it an inconclusive row reads "no effect detected at this size"

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> StatsSettings:
        boot = dict(cfg.get("bootstrap") or {})
        if "alpha" not in cfg or set(boot) - {"n_resamples", "seed", "confidence"}:
            raise ValueError(
                "stats config needs 'alpha' and optional bootstrap keys "
                f"n_resamples/seed/confidence; got {dict(cfg)}"
            )
        settings = cls(
            alpha=float(cfg["alpha"]),
            n_resamples=int(boot.get("n_resamples", cls.n_resamples)),
            seed=int(boot.get("seed", cls.seed)),
            confidence=float(boot.get("confidence", cls.confidence)),
            seeds_cap=int(cfg.get("seeds_cap") or cls.seeds_cap),
        )
        if not (0 < settings.alpha < 1 and 0 < settings.confidence < 1 and settings.n_resamples > 0
                and settings.seeds_cap >= 2):
            raise ValueError(f"stats config out of range: {settings}")
        return settings


@dataclass(frozen=True)
class _Link:
    """Outcome of one a-vs-b comparison."""

    label: str
    n: int
    ours: str
    shown: stats.CI | None  # CI of the claim's transform
    p_value: float
    p_wilcoxon: float
    verdict: str
    reason: str
    seeds_needed: float = math.nan  # seeds that would decide an inconclusive link (power 0.8)
    # the (margin-shifted) differences oriented so that mean > 0 is the claimed direction
    toward: np.ndarray | None = None
    mean_b: float = math.nan  # the mean of b over the pairs (scales a relative handicap or margin)


class _NotRun(Exception):
    """A table (or a row of one) that a claim or condition needs has not been produced."""


def _num(x: float) -> str:
    return f"{x:.3g}"


def _link_label(a: Mapping[str, Any], b: Mapping[str, Any]) -> str:
    if VALUE in b:
        return f"{','.join(f'{k}={v}' for k, v in a.items())} vs {_num(b[VALUE])}"
    keys = [k for k in dict.fromkeys([*a, *b]) if a.get(k) != b.get(k)] or list(a)
    side = lambda s: ",".join(f"{k}={s.get(k)}" for k in keys)  # noqa: E731
    return f"{side(a)} vs {side(b)}"


def seeds_needed(d: np.ndarray, alpha: float, power: float = POWER) -> float:
    """Seeds a one-sided paired t test needs to reject at ``alpha`` with ``power``,
    if the mean and spread of the (margin-shifted) differences ``d`` are the truth.

    ``d`` is oriented so that the hypothesis to show is mean(d) > 0; an estimate
    on the wrong side (or no spread) gives NaN: no number of seeds decides it
    that way.
    """
    d = np.asarray(d, float)
    mean, sd = float(np.mean(d)), float(np.std(d, ddof=1)) if d.size > 1 else math.nan
    if not (mean > 0 and sd > 0 and math.isfinite(sd)):
        return math.nan
    from statsmodels.stats.power import TTestPower

    try:
        n = TTestPower().solve_power(effect_size=mean / sd, alpha=alpha, power=power, alternative="larger")
    except (ValueError, RuntimeError):
        return math.nan
    n = float(np.squeeze(n))
    return float(max(2, math.ceil(n))) if math.isfinite(n) else math.nan


def seeds_to_decide(toward: np.ndarray, level: float, confidence: float) -> tuple[float, str]:
    """(seeds, which way) that would decide an inconclusive link at the observed effect and spread.

    ``toward`` is oriented so that mean > 0 is the claimed direction.  A mean on the
    claim's side needs the test to reject at ``level`` (the Holm-adjusted level the
    verdict uses); a mean on the wrong side needs the t interval (``confidence``) to
    exclude the claimed effect, i.e. a one-sided rejection at (1 - confidence) / 2.
    """
    toward = np.asarray(toward, float)
    if float(np.mean(toward)) > 0:
        return seeds_needed(toward, level), "reproduced"
    return seeds_needed(-toward, (1 - confidence) / 2), "not reproduced"


def _directional(claim: dict[str, Any], a: np.ndarray, b: np.ndarray, dci: stats.CI,
                 alpha: float) -> tuple[float, float, str, str, np.ndarray]:
    """``less``/``greater`` (with an optional margin): (p, Wilcoxon p, verdict, why, oriented d).

    Reproduced if the one-sided paired t test rejects; not reproduced only if the
    t interval of a - b excludes every value the claim allows (wholly at or above
    -m for ``less``, at or below +m for ``greater``); anything else, a mean in the
    wrong direction included, is inconclusive.
    """
    test = claim["test"]
    m = _margin(claim, b)
    # a - b < -m  <=>  (a + m) - b < 0;   a - b > m  <=>  (a - m) - b > 0
    shifted = a + m if test == "less" else a - m
    main = stats.paired_t(shifted, b, test)
    p_w = stats.wilcoxon(shifted, b, test).p_value
    d = shifted - b
    toward = -d if test == "less" else d
    rel = "<" if test == "less" else ">"
    bound = (-m if test == "less" else m) if m else 0.0
    shown_bound = f"a − b {rel} {_num(bound)}" if m else f"a {rel} b"
    p, name = main.p_value, f"paired t ({shown_bound})"
    if p < alpha:
        return p, p_w, "reproduced", f"{name} p = {p:.2g} < {alpha:g}", toward
    # a zero-width interval (every seed gives the same difference) is that value: on the bound or
    # beyond it, it excludes the strict effect the claim states, so it decides like any other
    excluded = dci.low >= bound if test == "less" else dci.high <= bound
    if excluded:
        side = "at or above" if test == "less" else "at or below"
        what = ("every seed gives the same difference: the interval is that value, "
                if dci.low == dci.high else "CI ")
        why = f"{what}wholly {side} {_num(bound)}: excludes the claimed effect (p = {p:.2g})"
        return p, p_w, "not reproduced", why, toward
    wrong = " (mean in the wrong direction, CI contains the claimed side)" if float(np.mean(toward)) <= 0 else ""
    return p, p_w, "inconclusive", f"{name} p = {p:.2g} ≥ {alpha:g}{wrong}", toward


def _margin(claim: dict[str, Any], b: np.ndarray) -> float:
    if claim["margin"] is None:
        return 0.0
    return claim["margin"] * (abs(float(np.mean(b))) if claim["margin_relative"] else 1.0)


def _with_margin(claim: dict[str, Any], a: np.ndarray, b: np.ndarray, dci: stats.CI,
                 alpha: float) -> tuple[float, float, str, str, np.ndarray]:
    """``noninferior``/``equivalent``: (p, Wilcoxon p, verdict, why, oriented d)."""
    margin = _margin(claim, b)
    m_txt = f"margin {_num(margin)}"
    if claim["margin_relative"]:
        m_txt += f" = {_num(claim['margin'])} × |mean b|"
    # Wilcoxon versions of the same hypotheses, on the margin-shifted differences
    w_above = stats.wilcoxon(a + margin, b, "greater").p_value  # H1: a - b > -margin
    w_below = stats.wilcoxon(a - margin, b, "less").p_value  # H1: a - b < +margin
    d = a - b
    if claim["test"] == "noninferior":
        hib = claim["higher_is_better"]
        p = stats.noninferiority(a, b, margin, higher_is_better=hib).p_value
        p_w = w_above if hib else w_below
        beyond = dci.high <= -margin if hib else dci.low >= margin
        name, outside = "non-inferiority t", f"CI wholly beyond {'−' if hib else '+'}{m_txt}"
        toward = d + margin if hib else margin - d
    else:
        p = stats.tost(a, b, margin).p_value
        p_w = max(w_above, w_below)
        beyond = dci.high <= -margin or dci.low >= margin
        name, outside = "TOST", f"CI wholly outside ±{m_txt}"
        # the binding side: the bound the mean is nearer to
        toward = d + margin if float(np.mean(d)) < 0 else margin - d
    if p < alpha:
        return p, p_w, "reproduced", f"{name} ({m_txt}) p = {p:.2g} < {alpha:g}", toward
    if beyond:
        return p, p_w, "not reproduced", f"{outside} (p = {p:.2g})", toward
    return p, p_w, "inconclusive", f"{name} ({m_txt}) p = {p:.2g} ≥ {alpha:g}", toward


def _evaluate_link(claim: dict[str, Any], paired: pd.DataFrame, label: str,
                   cfg: StatsSettings) -> _Link:
    """Test one a-vs-b pair; the verdict's CI is the t interval of the mean of a - b."""
    a, b = paired["a"].to_numpy(float), paired["b"].to_numpy(float)
    if len(a) == 1 and claim["by_construction"]:
        return _exact_link(claim, a, b, label, VALUE in paired.attrs)
    if len(a) < 2:
        what = (f"one seed (n = {len(a)}): a = {_num(a[0])}" + ("" if VALUE in paired.attrs else f", b = {_num(b[0])}")
                if len(a) else "no seed with both sides")
        return _Link(label, len(a), fmt_ci(a[0], a[0], a[0]) if len(a) else "", None, math.nan, math.nan,
                     "inconclusive", f"n < 2: {what}; no test is possible on one seed: run more seeds "
                     "(stats.extra_seeds) to decide it")
    if claim["test"] == "band":
        return _band_link(claim, a, b, label, cfg)
    dci = stats.t_interval(a - b, cfg.confidence)
    if claim["transform"] == "ratio":
        if np.any(b == 0):
            raise ClaimError(f"claim {claim['id']!r}: transform ratio with b = 0 ({label})")
        shown = ratio_interval(dci, float(np.mean(b)))
    elif VALUE in paired.attrs:
        shown = stats.t_interval(a, cfg.confidence)  # a itself, beside the constant
    else:
        shown = dci
    judge = _directional if claim["test"] in ("less", "greater") else _with_margin
    p, p_w, verdict, why, toward = judge(claim, a, b, dci, cfg.alpha)
    n_more = seeds_to_decide(toward, cfg.alpha, cfg.confidence)[0] if verdict == "inconclusive" else math.nan
    reason = f"mean a−b = {_num(dci.estimate)} [{_num(dci.low)}, {_num(dci.high)}], {why}"
    ours = fmt_ci(shown.estimate, shown.low, shown.high)
    return _Link(label, len(a), ours, shown, p, p_w, verdict, reason, n_more, toward, float(np.mean(b)))


def _band_link(claim: dict[str, Any], a: np.ndarray, b: np.ndarray, label: str, cfg: StatsSettings) -> _Link:
    """``band`` ("about X"): the paired log-ratios log a - log b inside (log low, log high).

    Reproduced when both one-sided tests reject (the t interval of the mean log-ratio inside
    the band); not reproduced when that interval lies wholly outside it (at or below log low, or
    at or above log high); inconclusive otherwise.  Shown: the geometric-mean ratio and its
    interval, exp of the log-ratio's, so the row's numbers and its verdict say the same thing.
    """
    if np.any(a <= 0) or np.any(b <= 0):
        raise ClaimError(f"claim {claim['id']!r}: test band needs positive values on both sides ({label})")
    low, high = claim["band"]
    lo, hi = math.log(low), math.log(high)
    d = np.log(a) - np.log(b)
    dci = stats.t_interval(d, cfg.confidence)
    shown = stats.CI(math.exp(dci.estimate), math.exp(dci.low), math.exp(dci.high), dci.n,
                     f"{dci.method}, exp of the mean log-ratio")
    res = stats.band(d, lo, hi)
    p = res.p_value
    p_w = max(stats.wilcoxon(d - lo, np.zeros_like(d), "greater").p_value,
              stats.wilcoxon(d - hi, np.zeros_like(d), "less").p_value)
    # the binding side: the bound the mean is nearer to (in log terms), oriented toward the band
    toward = d - lo if float(np.mean(d)) - lo < hi - float(np.mean(d)) else hi - d
    band_txt = f"band {_num(low)} < a/b < {_num(high)}"
    if p < cfg.alpha:
        verdict, why = "reproduced", f"{band_txt}: two one-sided t on log a − log b p = {p:.2g} < {cfg.alpha:g}"
    elif dci.high <= lo or dci.low >= hi:
        verdict, why = "not reproduced", f"CI of the ratio wholly outside the {band_txt} (p = {p:.2g})"
    else:
        verdict, why = "inconclusive", f"{band_txt}: two one-sided t on log a − log b p = {p:.2g} ≥ {cfg.alpha:g}"
    n_more = seeds_to_decide(toward, cfg.alpha, cfg.confidence)[0] if verdict == "inconclusive" else math.nan
    reason = (f"geometric-mean ratio a/b = {_num(shown.estimate)} [{_num(shown.low)}, {_num(shown.high)}] "
              f"(paired log-ratios), {why}")
    return _Link(label, len(a), fmt_ci(shown.estimate, shown.low, shown.high), shown, p, p_w, verdict, reason,
                 n_more, toward)


def ratio_interval(dci: stats.CI, mean_b: float) -> stats.CI:
    """The tested interval of a - b on the ratio scale: 1 + (a - b) / mean(b), the ratio of
    the means.  The test reads a/b > r as a - b > (r - 1) x mean(b) (a relative margin), so
    this interval excludes r exactly when the test's interval excludes its margin: the row's
    numbers and its verdict say the same thing (a mean of per-seed ratios need not)."""
    lo, hi = sorted((1 + dci.low / mean_b, 1 + dci.high / mean_b))
    return stats.CI(1 + dci.estimate / mean_b, lo, hi, dci.n, f"{dci.method}, a−b / mean(b)")


def _exact_link(claim: dict[str, Any], a: np.ndarray, b: np.ndarray, label: str, is_value: bool) -> _Link:
    """One deterministic pair of a by-construction row (arithmetic on shapes, one bit-for-bit seed).

    No test on one value: the row checks the construction itself, exactly: the
    inequality (or equality within the margin) the claim states holds for this value.
    """
    d = float(a[0] - b[0])
    m = _margin(claim, b)
    test = claim["test"]
    if test == "band":
        r = float(a[0] / b[0]) if b[0] else math.nan
        low, high = claim["band"]
        ok, rule = low < r < high, f"{_num(low)} < a/b = {_num(r)} < {_num(high)}"
    elif test == "less":
        ok, rule = d < -m, f"a − b = {_num(d)} < {_num(-m)}"
    elif test == "greater":
        ok, rule = d > m, f"a − b = {_num(d)} > {_num(m)}"
    elif test == "noninferior":
        hib = claim["higher_is_better"]
        ok = d > -m if hib else d < m
        rule = f"a − b = {_num(d)} {'>' if hib else '<'} {'−' if hib else '+'}{_num(m)}"
    else:
        ok, rule = abs(d) < m, f"|a − b| = {_num(abs(d))} < {_num(m)}"
    if claim["transform"] == "ratio" and b[0]:
        value = float(a[0] / b[0])
    else:
        value = float(a[0]) if is_value else d
    shown = stats.CI(value, value, value, 1, "exact")
    verdict = "reproduced" if ok else "not reproduced"
    reason = f"one deterministic value, checked exactly (no test): {rule} {'holds' if ok else 'fails'}"
    return _Link(label, 1, _num(shown.estimate), shown, math.nan, math.nan, verdict, reason)


def _largest(values: Sequence[float]) -> float:
    """Largest value, or NaN if any is NaN (a link that could not be tested)."""
    return math.nan if any(math.isnan(v) for v in values) else max(values)


def _scalar(spec: Mapping[str, Any], tables: Mapping[str, pd.DataFrame]) -> float:
    """The single value ``spec`` (``value_from``) names in a results table."""
    table = tables.get(spec["table"])
    if table is None:
        raise _NotRun(f"table {spec['table']!r} not available")
    try:
        rows = stats.select(table, spec["where"]) if spec["where"] else table
    except stats.EmptySelectionError as err:
        raise _NotRun(str(err)) from err
    if spec["metric"] not in rows.columns:
        raise ValueError(f"value_from: table {spec['table']!r} has no column {spec['metric']!r}")
    values = rows[spec["metric"]].dropna().unique()
    if len(values) != 1:
        raise ValueError(f"value_from: {spec['table']}[{spec['where']}].{spec['metric']} gives "
                         f"{len(values)} distinct values, not one")
    return float(values[0])


def _resolve(b: Mapping[str, Any], tables: Mapping[str, pd.DataFrame]) -> Mapping[str, Any]:
    """``b`` with a ``value_from`` replaced by its value."""
    if VALUE_FROM in b:
        return {VALUE: _scalar(b[VALUE_FROM], tables)}
    return b


def _pair(table: pd.DataFrame, metric: str, a: Mapping[str, Any], b: Mapping[str, Any]) -> pd.DataFrame:
    """Seeds with a's metric and b's (or the constant ``value``)."""
    if VALUE not in b:
        return stats.pair_by_seed(table, metric, a, b)
    paired = stats.pair_by_seed(table, metric, a, a)
    paired["b"] = b[VALUE]
    paired.attrs[VALUE] = b[VALUE]
    return paired
