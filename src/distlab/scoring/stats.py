"""Paired statistics for seed-replicated experiments.

Every experiment is run once per seed for each setting, so two settings are
compared *paired by seed*: the unit of analysis is the per-seed difference
``d = a - b``.  Tests here are the paired t test (and its one-sided,
non-inferiority and TOST variants), the Wilcoxon signed-rank test as a
distribution-free cross-check, bootstrap confidence intervals and Holm's
multiple-testing correction.  Thresholds (alpha, margins) always come from the
caller, i.e. from the workflow config.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from numbers import Number
from typing import Any, Literal

import numpy as np
import pandas as pd
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.weightstats import ttost_paired

Alternative = Literal["two-sided", "less", "greater"]

_REL_TOL = 1e-12


class EmptySelectionError(ValueError):
    """A selection matched no rows of the table (the setting has not been run)."""


@dataclass(frozen=True)
class CI:
    """A point estimate with a confidence interval ``[low, high]``."""

    estimate: float
    low: float
    high: float
    n: int
    method: str


@dataclass(frozen=True)
class TestResult:
    """Outcome of a hypothesis test; ``extra`` holds test-specific details."""

    __test__ = False  # not a pytest test class

    name: str
    statistic: float
    p_value: float
    alternative: str
    n: int
    extra: dict[str, Any] = field(default_factory=dict, hash=False)


# ----------------------------------------------------------------------------
# Pairing runs by seed
# ----------------------------------------------------------------------------


def _as_number(value: Any) -> float | None:
    """``value`` as a float if it is numeric (or a numeric string), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, Number):
        num = float(value)  # type: ignore[arg-type]
    elif isinstance(value, str):
        try:
            num = float(value)
        except ValueError:
            return None
    else:
        return None
    return None if np.isnan(num) else num


def _matches(col: pd.Series, value: Any) -> pd.Series:
    """Rows of ``col`` equal to a config value, tolerant of int/float/str types.

    Numbers (and numeric strings, as YAML may deliver them) are compared
    numerically with a tight relative tolerance, so ``1`` matches ``1.0`` and
    ``"0.5"``; everything else is compared as text.
    """
    if value is None:
        return col.isna()
    if isinstance(value, bool) and pd.api.types.is_bool_dtype(col):
        return col == value
    num = _as_number(value)
    if num is not None and not pd.api.types.is_bool_dtype(col):
        if pd.api.types.is_numeric_dtype(col):
            as_num = col.to_numpy(dtype=float, na_value=np.nan)
        else:
            as_num = pd.to_numeric(col.astype(object), errors="coerce").to_numpy(dtype=float)
        return pd.Series(np.isclose(as_num, num, rtol=1e-9, atol=1e-12), index=col.index)
    return col.astype(str) == str(value)


def select(df: pd.DataFrame, selection: Mapping[str, Any]) -> pd.DataFrame:
    """Rows of ``df`` matching every ``key: value`` of ``selection``."""
    mask = pd.Series(True, index=df.index)
    for key, value in selection.items():
        if key not in df.columns:
            raise ValueError(
                f"selection {dict(selection)}: no column {key!r} (columns: {list(df.columns)})"
            )
        mask &= _matches(df[key], value)
    return df[mask]


def pair_by_seed(
    df: pd.DataFrame,
    metric: str,
    a: Mapping[str, Any],
    b: Mapping[str, Any],
    seed_col: str = "seed",
) -> pd.DataFrame:
    """Pair the ``metric`` of selections ``a`` and ``b`` by seed.

    Returns a frame with columns ``seed, a, b`` (sorted by seed) holding the
    seeds present in both selections; runs whose metric is NaN are dropped.
    Raises :class:`EmptySelectionError` if a selection matches no row and
    ``ValueError`` if it matches several rows with the same seed.
    """
    for col in (metric, seed_col):
        if col not in df.columns:
            raise ValueError(f"table has no column {col!r} (columns: {list(df.columns)})")
    sides = []
    for name, sel in (("a", a), ("b", b)):
        rows = select(df, sel)
        if rows.empty:
            raise EmptySelectionError(f"selection {name}={dict(sel)} matches no rows")
        dup = rows[seed_col][rows[seed_col].duplicated()].unique()
        if len(dup):
            raise ValueError(
                f"selection {name}={dict(sel)} has duplicate seeds {sorted(dup.tolist())}; "
                "make it more specific"
            )
        sides.append(rows[[seed_col, metric]].rename(columns={seed_col: "seed", metric: name}))
    paired = sides[0].merge(sides[1], on="seed", how="inner").dropna(subset=["a", "b"])
    return paired.sort_values("seed").reset_index(drop=True)


# ----------------------------------------------------------------------------
# Bootstrap
# ----------------------------------------------------------------------------


def bootstrap_ci(
    x: Sequence[float] | np.ndarray,
    statistic: Callable[..., Any] = np.mean,
    confidence: float = 0.95,
    n_resamples: int = 9999,
    seed: int = 0,
    method: str = "BCa",
) -> CI:
    """Bootstrap confidence interval of ``statistic(x)``.

    BCa (bias-corrected and accelerated) corrects the percentile interval for
    the bias and skewness of the bootstrap distribution; it is second-order
    accurate but undefined for degenerate bootstrap distributions, in which case
    the plain percentile interval is used and ``method`` says so.  One value or
    identical values give the zero-width interval ``[estimate, estimate]``.
    Deterministic for a fixed ``seed``.
    """
    arr = np.asarray(x, dtype=float).ravel()
    if arr.size == 0 or np.isnan(arr).any():
        raise ValueError("bootstrap_ci needs a non-empty sample without NaN")
    estimate = float(statistic(arr))
    if arr.size == 1 or np.all(arr == arr[0]):
        return CI(estimate, estimate, estimate, int(arr.size), "degenerate")

    def run(m: str) -> tuple[float, float, bool]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            res = sps.bootstrap(
                (arr,),
                statistic,
                n_resamples=n_resamples,
                confidence_level=confidence,
                method=m,
                rng=np.random.default_rng(seed),
            )
        lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
        degenerate = any(issubclass(w.category, sps.DegenerateDataWarning) for w in caught)
        return lo, hi, degenerate or not (np.isfinite(lo) and np.isfinite(hi))

    low, high, failed = run(method)
    if failed and method.lower() != "percentile":
        method = "percentile"
        low, high, _ = run(method)
    return CI(estimate, low, high, int(arr.size), method)


def t_interval(x: Sequence[float] | np.ndarray, confidence: float = 0.95) -> CI:
    """Student-t confidence interval of the mean of ``x``.

    The project's one interval, in tables, scorecard and figure bands alike.
    With the 3-10 seeds an experiment has, a bootstrap interval under-covers
    (its resampling distribution has at most n distinct points and it ignores
    the extra uncertainty of estimating the spread from n values), while the
    t interval is exact for normal per-seed values and, by the t test's
    robustness, close to nominal for the mild skew of final losses and
    times.  One value or identical values give a zero-width interval.
    """
    arr = np.asarray(x, dtype=float).ravel()
    if arr.size == 0 or np.isnan(arr).any():
        raise ValueError("t_interval needs a non-empty sample without NaN")
    estimate = float(arr.mean())
    if arr.size == 1 or np.all(arr == arr[0]):
        return CI(estimate, estimate, estimate, int(arr.size), "degenerate")
    half = float(sps.t.ppf(0.5 + confidence / 2, arr.size - 1) * arr.std(ddof=1) / np.sqrt(arr.size))
    return CI(estimate, estimate - half, estimate + half, int(arr.size), "t")


def t_errorbar(confidence: float = 0.95) -> Callable[[Sequence[float]], tuple[float, float]]:
    """:func:`t_interval` as a seaborn ``errorbar`` callable."""

    def bar(values: Sequence[float]) -> tuple[float, float]:
        ci = t_interval(values, confidence)
        return ci.low, ci.high

    return bar


# ----------------------------------------------------------------------------
# Tests
# ----------------------------------------------------------------------------


def _pair(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> np.ndarray:
    """Paired differences ``a - b`` (validated: same length, n >= 2, no NaN)."""
    a_, b_ = np.asarray(a, dtype=float).ravel(), np.asarray(b, dtype=float).ravel()
    if a_.shape != b_.shape:
        raise ValueError(f"paired samples differ in length: {a_.size} vs {b_.size}")
    if a_.size < 2:
        raise ValueError("paired tests need at least 2 pairs")
    if np.isnan(a_).any() or np.isnan(b_).any():
        raise ValueError("paired samples contain NaN")
    return a_ - b_


def _is_constant(x: np.ndarray) -> bool:
    return bool(np.ptp(x) <= _REL_TOL * np.max(np.abs(x)))


def _t_test(d: np.ndarray, popmean: float, alternative: Alternative, name: str) -> TestResult:
    """One-sample t test of ``mean(d)`` against ``popmean``: t = (mean - popmean)/(sd/sqrt(n)).

    With zero variance the t statistic is ±inf (or 0/0 at the boundary); the
    exact p-value is then 0 if the constant lies strictly inside the alternative
    region and 1 otherwise.
    """
    n = int(d.size)
    extra: dict[str, Any] = {"mean": float(np.mean(d)), "df": n - 1}
    if _is_constant(d):
        gap = float(d[0]) - popmean
        if abs(gap) <= _REL_TOL * max(abs(float(d[0])), abs(popmean)):
            gap = 0.0
        inside = {"greater": gap > 0, "less": gap < 0, "two-sided": gap != 0}[alternative]
        stat = float(np.sign(gap) * np.inf) if gap else 0.0
        return TestResult(name, stat, 0.0 if inside else 1.0, alternative, n, extra)
    res = sps.ttest_1samp(d, popmean, alternative=alternative)
    return TestResult(name, float(res.statistic), float(res.pvalue), alternative, n, extra)


def paired_t(
    a: Sequence[float] | np.ndarray,
    b: Sequence[float] | np.ndarray,
    alternative: Alternative = "two-sided",
) -> TestResult:
    """Paired t test of H0: mean(a - b) = 0 (``scipy.stats.ttest_rel``)."""
    d = _pair(a, b)
    if _is_constant(d):
        return _t_test(d, 0.0, alternative, "paired t")
    res = sps.ttest_rel(np.asarray(a, float), np.asarray(b, float), alternative=alternative)
    extra = {"mean": float(np.mean(d)), "df": d.size - 1}
    return TestResult("paired t", float(res.statistic), float(res.pvalue), alternative, d.size, extra)


def one_sample_less(x: Sequence[float] | np.ndarray, popmean: float) -> TestResult:
    """One-sample t test of H0: mean(x) >= popmean against H1: mean(x) < popmean."""
    arr = np.asarray(x, dtype=float).ravel()
    if arr.size < 2 or np.isnan(arr).any():
        raise ValueError("one_sample_less needs at least 2 values without NaN")
    return _t_test(arr, float(popmean), "less", "one-sample t")


def wilcoxon(
    a: Sequence[float] | np.ndarray,
    b: Sequence[float] | np.ndarray,
    alternative: Alternative = "two-sided",
) -> TestResult:
    """Wilcoxon signed-rank test on ``a - b`` (``scipy.stats.wilcoxon``).

    Zero differences are dropped (Wilcoxon's convention); if all differences are
    zero there is no evidence of a shift and p = 1.
    """
    d = _pair(a, b)
    if np.all(d == 0):
        return TestResult("wilcoxon", 0.0, 1.0, alternative, int(d.size), {})
    res = sps.wilcoxon(d, alternative=alternative)
    return TestResult("wilcoxon", float(res.statistic), float(res.pvalue), alternative, int(d.size), {})


def noninferiority(
    a: Sequence[float] | np.ndarray,
    b: Sequence[float] | np.ndarray,
    margin: float,
    higher_is_better: bool = True,
) -> TestResult:
    """One-sided paired t test that ``a`` is not worse than ``b`` by ``margin`` or more.

    Higher is better: H0 mean(a - b) <= -margin vs H1 mean(a - b) > -margin.
    Lower is better:  H0 mean(a - b) >= +margin vs H1 mean(a - b) < +margin.
    Rejecting H0 shows non-inferiority.
    """
    if margin < 0:
        raise ValueError(f"margin must be >= 0, got {margin}")
    d = _pair(a, b)
    if higher_is_better:
        res = _t_test(d, -margin, "greater", "non-inferiority t")
    else:
        res = _t_test(d, margin, "less", "non-inferiority t")
    extra = {**res.extra, "margin": float(margin), "higher_is_better": higher_is_better}
    return TestResult(res.name, res.statistic, res.p_value, res.alternative, res.n, extra)


def tost(
    a: Sequence[float] | np.ndarray,
    b: Sequence[float] | np.ndarray,
    margin: float,
) -> TestResult:
    """Two one-sided paired t tests (TOST) for equivalence within ``(-margin, +margin)``.

    H0: mean(a - b) <= -margin or mean(a - b) >= +margin; each side is tested
    at level alpha and the TOST p-value is the larger of the two, so rejecting
    shows the mean difference lies inside the bounds.  ``statistic`` is the t of
    the binding (larger-p) side.
    """
    if margin < 0:
        raise ValueError(f"margin must be >= 0, got {margin}")
    d = _pair(a, b)
    if _is_constant(d):
        # statsmodels divides by a rounding-level standard deviation here (for a and
        # a - 0.1: t = 2.2e16, p = 3.7e-49 rather than the exact 0; NaN for exact
        # zeros), so constant differences keep the exact answer of _t_test
        lower = _t_test(d, -margin, "greater", "tost lower")
        upper = _t_test(d, margin, "less", "tost upper")
    else:
        _, (t1, p1, _df1), (t2, p2, _df2) = ttost_paired(np.asarray(a, float).ravel(), np.asarray(b, float).ravel(),
                                                         -margin, margin)
        lower = TestResult("tost lower", float(t1), float(p1), "greater", d.size, {})
        upper = TestResult("tost upper", float(t2), float(p2), "less", d.size, {})
    binding = lower if lower.p_value >= upper.p_value else upper
    extra = {
        "mean": float(np.mean(d)),
        "df": d.size - 1,
        "margin": float(margin),
        "t_lower": lower.statistic,
        "p_lower": lower.p_value,
        "t_upper": upper.statistic,
        "p_upper": upper.p_value,
    }
    return TestResult("tost", binding.statistic, binding.p_value, "equivalence", d.size, extra)


def band(
    d: Sequence[float] | np.ndarray,
    low: float,
    high: float,
) -> TestResult:
    """Two one-sided one-sample t tests that mean(d) lies inside ``(low, high)``: TOST with
    bounds that need not be symmetric (``d`` the paired log-ratios log a - log b of an
    "about X" claim, the bounds log of the ratios the wording allows).

    H0: mean(d) <= low or mean(d) >= high; the p-value is the larger of the two sides',
    so rejecting at alpha shows the mean inside the band.
    """
    if not low < high:
        raise ValueError(f"band needs low < high, got ({low}, {high})")
    arr = np.asarray(d, dtype=float).ravel()
    if arr.size < 2 or np.isnan(arr).any():
        raise ValueError("band needs at least 2 values without NaN")
    lower = _t_test(arr, float(low), "greater", "band lower")
    upper = _t_test(arr, float(high), "less", "band upper")
    binding = lower if lower.p_value >= upper.p_value else upper
    extra = {"mean": float(np.mean(arr)), "df": arr.size - 1, "low": float(low), "high": float(high),
             "p_lower": lower.p_value, "p_upper": upper.p_value}
    return TestResult("band", binding.statistic, binding.p_value, "equivalence", arr.size, extra)


def holm(pvalues: Sequence[float] | np.ndarray) -> np.ndarray:
    """Holm–Bonferroni step-down adjusted p-values (family-wise error control),
    ``statsmodels.stats.multitest.multipletests(p, method="holm")``.

    The k-th smallest of m p-values is multiplied by (m - k + 1); adjusted
    values are made monotone with a running maximum and capped at 1
    (tests/test_stats.py checks this against the hand formula).
    """
    p = np.asarray(pvalues, dtype=float).ravel()
    if p.size == 0:
        return p.copy()
    return np.asarray(multipletests(p, method="holm")[1], dtype=float)
