"""Statistics against textbook answers computed independently of distlab.scoring.stats."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.weightstats import ttost_paired

from distlab.scoring import stats

# Student's sleep data (Cushny & Peebles 1905), R's `sleep`: extra hours of sleep
# under two drugs, the same 10 patients.  R: t.test(extra ~ group, paired = TRUE)
# gives t = -4.0621, df = 9, p-value = 0.002833.
SLEEP_1 = np.array([0.7, -1.6, -0.2, -1.2, -0.1, 3.4, 3.7, 0.8, 0.0, 2.0])
SLEEP_2 = np.array([1.9, 0.8, 1.1, 0.1, -0.1, 4.4, 5.5, 1.6, 4.6, 3.4])

# Hollander & Wolfe (1973, p. 29), R's ?wilcox.test example: Hamilton depression
# scores before (x) and after (y) therapy.  R: wilcox.test(x, y, paired = TRUE,
# alternative = "greater") gives V = 40, p-value = 0.01953 (= 10/512, exact).
HW_X = np.array([1.83, 0.50, 1.62, 2.48, 1.68, 1.88, 1.55, 3.06, 1.30])
HW_Y = np.array([0.878, 0.647, 0.598, 2.05, 1.06, 1.29, 1.06, 3.14, 1.29])

SMALL_A = np.array([10.0, 12.0, 9.0, 11.0, 13.0])
SMALL_B = np.array([9.0, 10.5, 8.0, 10.0, 11.0])


def hand_t(d: np.ndarray, mu: float = 0.0) -> float:
    """t = (mean(d) - mu) / (sd(d) / sqrt(n)), sd with n - 1 denominator."""
    return (d.mean() - mu) / (d.std(ddof=1) / np.sqrt(d.size))


# --- pairing ----------------------------------------------------------------


def _runs() -> pd.DataFrame:
    rows = []
    for seed in range(4):
        for s in (1, 2):
            for scheme in ("gc", "pgc"):
                rows.append({"seed": seed, "scheme": scheme, "s": s, "delay_mean": 1.0,
                             "t": 10 * s + (scheme == "pgc") + 0.1 * seed})
    return pd.DataFrame(rows)


def test_pair_by_seed_matches_yaml_types():
    df = _runs()
    # YAML may give ints for float columns and strings for numbers.
    p = stats.pair_by_seed(df, "t", {"scheme": "pgc", "s": 1, "delay_mean": 1},
                           {"scheme": "gc", "s": "1", "delay_mean": 1.0})
    assert list(p.columns) == ["seed", "a", "b"]
    assert p["seed"].tolist() == [0, 1, 2, 3]
    np.testing.assert_allclose(p["a"] - p["b"], 1.0)
    np.testing.assert_allclose(p["b"], [10.0, 10.1, 10.2, 10.3])


def test_pair_by_seed_inner_join_and_nan_dropped():
    df = _runs()
    df = df[~((df.scheme == "gc") & (df.seed == 0))].copy()
    df.loc[(df.scheme == "pgc") & (df.seed == 3), "t"] = np.nan
    p = stats.pair_by_seed(df, "t", {"scheme": "pgc", "s": 2}, {"scheme": "gc", "s": 2})
    assert p["seed"].tolist() == [1, 2]


def test_pair_by_seed_errors_name_selection():
    df = _runs()
    with pytest.raises(stats.EmptySelectionError, match="scheme.*nope"):
        stats.pair_by_seed(df, "t", {"scheme": "nope"}, {"scheme": "gc", "s": 1})
    with pytest.raises(ValueError, match=r"'scheme': 'gc'.*duplicate seeds \[0, 1, 2, 3\]"):
        stats.pair_by_seed(df, "t", {"scheme": "pgc", "s": 1}, {"scheme": "gc"})
    with pytest.raises(ValueError, match="no column 'lr'"):
        stats.pair_by_seed(df, "t", {"lr": 1}, {"scheme": "gc"})


# --- paired t -----------------------------------------------------------------


def test_paired_t_classic_sleep_data():
    r = stats.paired_t(SLEEP_1, SLEEP_2)
    assert r.statistic == pytest.approx(-4.0621, abs=1e-4)
    assert r.p_value == pytest.approx(0.002833, abs=1e-6)
    assert r.n == 10 and r.extra["df"] == 9
    assert r.extra["mean"] == pytest.approx(-1.58)


def test_paired_t_hand_computed_and_one_sided():
    d = SMALL_A - SMALL_B  # [1, 1.5, 1, 1, 2]: mean 1.3, sd 0.4472
    t = hand_t(d)
    assert t == pytest.approx(1.3 / (np.sqrt(0.2) / np.sqrt(5)))
    two = stats.paired_t(SMALL_A, SMALL_B)
    greater = stats.paired_t(SMALL_A, SMALL_B, "greater")
    less = stats.paired_t(SMALL_A, SMALL_B, "less")
    assert two.statistic == pytest.approx(t)
    assert greater.p_value == pytest.approx(sps.t.sf(t, df=4))
    assert two.p_value == pytest.approx(2 * greater.p_value)
    assert less.p_value == pytest.approx(1 - greater.p_value)


def test_paired_t_zero_variance_is_exact():
    a = np.array([2.0, 3.0, 4.0])
    assert stats.paired_t(a, a - 0.5, "greater").p_value == 0.0
    assert stats.paired_t(a, a - 0.5, "less").p_value == 1.0
    assert stats.paired_t(a, a - 0.5).p_value == 0.0
    same = stats.paired_t(a, a)
    assert same.p_value == 1.0 and same.statistic == 0.0


def test_paired_inputs_validated():
    with pytest.raises(ValueError, match="length"):
        stats.paired_t([1, 2, 3], [1, 2])
    with pytest.raises(ValueError, match="at least 2"):
        stats.paired_t([1], [2])
    with pytest.raises(ValueError, match="NaN"):
        stats.paired_t([1, np.nan], [2, 3])


def test_one_sample_less():
    x = np.array([0.8, 0.9, 1.1, 0.7, 0.85])
    r = stats.one_sample_less(x, 1.0)
    t = hand_t(x, 1.0)
    assert r.statistic == pytest.approx(t)
    assert r.p_value == pytest.approx(sps.t.cdf(t, df=4))
    assert r.alternative == "less"
    assert stats.one_sample_less([2.0, 2.0], 1.0).p_value == 1.0
    assert stats.one_sample_less([0.5, 0.5], 1.0).p_value == 0.0


# --- Wilcoxon -----------------------------------------------------------------


def test_wilcoxon_classic_example():
    r = stats.wilcoxon(HW_X, HW_Y, "greater")
    assert r.statistic == 40
    assert r.p_value == pytest.approx(10 / 512)
    assert stats.wilcoxon(HW_X, HW_Y).p_value == pytest.approx(20 / 512)


def test_wilcoxon_all_zero_differences():
    r = stats.wilcoxon([1.0, 2.0, 3.0], [1.0, 2.0, 3.0], "less")
    assert r.p_value == 1.0 and r.n == 3


# --- non-inferiority and TOST -------------------------------------------------


def test_noninferiority_higher_is_better_matches_shifted_t():
    # accuracy of a (new) vs b (baseline); margin 0.5: H0 mean(a - b) <= -0.5
    a, b = SMALL_B, SMALL_A  # a is worse by 1.3 on average
    d = a - b
    r = stats.noninferiority(a, b, margin=2.0, higher_is_better=True)
    t = hand_t(d, -2.0)
    assert r.statistic == pytest.approx(t)
    assert r.p_value == pytest.approx(sps.t.sf(t, df=4))
    assert r.p_value < 0.05  # -1.3 is clearly above -2
    assert stats.noninferiority(a, b, margin=0.5, higher_is_better=True).p_value > 0.5


def test_noninferiority_lower_is_better():
    # times: a slower than b by 1.3; non-inferior with margin 2, not with margin 1
    d = SMALL_A - SMALL_B
    r = stats.noninferiority(SMALL_A, SMALL_B, margin=2.0, higher_is_better=False)
    t = hand_t(d, 2.0)
    assert r.statistic == pytest.approx(t)
    assert r.p_value == pytest.approx(sps.t.cdf(t, df=4))
    assert r.p_value < 0.05
    assert stats.noninferiority(SMALL_A, SMALL_B, margin=1.0, higher_is_better=False).p_value > 0.5
    with pytest.raises(ValueError, match="margin"):
        stats.noninferiority(SMALL_A, SMALL_B, margin=-1.0)


@pytest.mark.parametrize("margin", [0.5, 1.0, 2.0])
def test_tost_matches_statsmodels(margin):
    p_sm, (t1, p1, _), (t2, p2, _) = ttost_paired(SMALL_A, SMALL_B, -margin, margin)
    r = stats.tost(SMALL_A, SMALL_B, margin)
    assert r.p_value == pytest.approx(p_sm)
    assert r.extra["t_lower"] == pytest.approx(t1) and r.extra["p_lower"] == pytest.approx(p1)
    assert r.extra["t_upper"] == pytest.approx(t2) and r.extra["p_upper"] == pytest.approx(p2)


def test_tost_matches_the_hand_formula():
    # t = (mean(d) - bound) / (sd(d) / sqrt(n)), one-sided p from Student's t with n - 1 df
    from scipy.stats import t as student

    d = np.asarray(SMALL_A, float) - np.asarray(SMALL_B, float)
    n, mean, se = d.size, d.mean(), d.std(ddof=1) / np.sqrt(d.size)
    for margin in (0.5, 1.0, 2.0):
        t_lo, t_hi = (mean + margin) / se, (mean - margin) / se
        p_lo, p_hi = student.sf(t_lo, n - 1), student.cdf(t_hi, n - 1)
        r = stats.tost(SMALL_A, SMALL_B, margin)
        assert r.extra["t_lower"] == pytest.approx(t_lo) and r.extra["t_upper"] == pytest.approx(t_hi)
        assert r.p_value == pytest.approx(max(p_lo, p_hi))


def test_tost_sleep_data_matches_statsmodels():
    p_sm = ttost_paired(SLEEP_1, SLEEP_2, -3.0, 3.0)[0]
    assert stats.tost(SLEEP_1, SLEEP_2, 3.0).p_value == pytest.approx(p_sm)


def test_tost_zero_variance():
    a = np.array([1.0, 2.0, 3.0])
    assert stats.tost(a, a - 0.1, 0.5).p_value == 0.0  # constant 0.1 inside (-0.5, 0.5)
    assert stats.tost(a, a - 0.9, 0.5).p_value == 1.0  # constant 0.9 outside
    assert stats.noninferiority(a, a - 0.1, 0.5, higher_is_better=False).p_value == 0.0


# --- Holm -------------------------------------------------------------------------


def test_holm_hand_example_and_statsmodels():
    p = [0.01, 0.04, 0.03, 0.005]
    # sorted 0.005*4=0.02, 0.01*3=0.03, 0.03*2=0.06, 0.04*1=0.04 -> running max 0.06
    np.testing.assert_allclose(stats.holm(p), [0.03, 0.06, 0.06, 0.02])
    rng = np.random.default_rng(3)
    q = rng.uniform(0, 0.2, size=12)
    np.testing.assert_allclose(stats.holm(q), multipletests(q, method="holm")[1])
    assert stats.holm([0.6, 0.7]).max() == 1.0
    # the hand formula: k-th smallest x (m - k + 1), running maximum, capped at 1
    order = np.argsort(q, kind="stable")
    hand = np.empty(q.size)
    hand[order] = np.minimum(np.maximum.accumulate(q[order] * (q.size - np.arange(q.size))), 1.0)
    np.testing.assert_allclose(stats.holm(q), hand)
    assert stats.holm([]).size == 0


# --- bootstrap ----------------------------------------------------------------------


def test_bootstrap_ci_contains_mean_and_is_deterministic():
    x = np.random.default_rng(0).normal(5.0, 1.0, size=20)
    ci = stats.bootstrap_ci(x, n_resamples=2000, seed=1)
    assert ci.estimate == pytest.approx(x.mean())
    assert ci.low < x.mean() < ci.high
    assert ci.n == 20 and ci.method == "BCa"
    # roughly the t interval: half-width ~ 2.09 * sd / sqrt(n)
    half = sps.t.ppf(0.975, 19) * x.std(ddof=1) / np.sqrt(20)
    assert (ci.high - ci.low) / 2 == pytest.approx(half, rel=0.2)
    assert stats.bootstrap_ci(x, n_resamples=2000, seed=1) == ci
    other = stats.bootstrap_ci(x, n_resamples=2000, seed=2)
    assert (other.low, other.high) != (ci.low, ci.high)
    with pytest.raises(dataclasses.FrozenInstanceError):
        ci.low = 0.0  # type: ignore[misc]


def test_bootstrap_bca_vs_percentile_on_skewed_sample():
    x = np.random.default_rng(1).exponential(size=15)
    bca = stats.bootstrap_ci(x, n_resamples=4000, seed=0, method="BCa")
    pct = stats.bootstrap_ci(x, n_resamples=4000, seed=0, method="percentile")
    assert (bca.method, pct.method) == ("BCa", "percentile")
    # right skew: BCa moves the interval to the right of the percentile interval
    assert bca.low > pct.low and bca.high > pct.high
    assert bca.high - x.mean() > x.mean() - bca.low  # and makes it asymmetric


def test_bootstrap_degenerate_inputs():
    one = stats.bootstrap_ci([3.5])
    assert (one.estimate, one.low, one.high, one.n) == (3.5, 3.5, 3.5, 1)
    same = stats.bootstrap_ci([2.0, 2.0, 2.0, 2.0])
    assert (same.low, same.high) == (2.0, 2.0) and not np.isnan(same.estimate)
    with pytest.raises(ValueError):
        stats.bootstrap_ci([])


def test_bootstrap_bca_failure_falls_back_to_percentile():
    # Every jackknife median of this sample is 1, so the BCa acceleration is
    # 0/0 and scipy returns NaN; the percentile interval is still defined.
    x = [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 5.0]
    ci = stats.bootstrap_ci(x, statistic=np.median, n_resamples=2000)
    assert ci.method == "percentile"
    assert (ci.estimate, ci.low) == (1.0, 1.0) and np.isfinite(ci.high)
