"""Rows reported beside a test (``report_only``), on crafted tables.

One hypothesis, one row: a variant of the tested comparison (sequential RC beside the
source's asynchronous RC) or a second measure (summed RSS beside PSS) is shown with its
estimate and interval, reads "reported (not a test)", never enters a Holm family and is not
counted among the verdicts.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from distlab.scoring import scorecard, stats
from distlab.scoring.claims import ClaimError
from distlab.scoring.reported import REPORTED, counts_line

STATS = {"alpha": 0.05, "bootstrap": {"n_resamples": 2000, "seed": 0, "confidence": 0.95}}


def _claim(cid: str, **kw):
    base = {"id": cid, "paper": "P3", "source": "test", "statement": cid, "table": "t",
            "metric": "loss", "test": "greater", "a": {"method": "x"}, "b": {"method": "bp"}}
    base.update(kw)
    return base


def _runs(gaps: dict[str, float], n: int = 8, noise: float = 0.05, seed: int = 0) -> pd.DataFrame:
    """BP at 2.0 (+ a per-seed offset), every other method above it by its gap, with noise."""
    rng = np.random.default_rng(seed)
    rows = []
    for s in range(n):
        base = 2.0 + rng.normal(0, 0.3)
        rows.append({"method": "bp", "seed": s, "loss": base})
        for name, gap in gaps.items():
            rows.append({"method": name, "seed": s, "loss": base + gap + rng.normal(0, noise)})
    return pd.DataFrame(rows)


def test_a_reported_row_shows_its_estimate_but_is_no_test_and_no_member_of_a_holm_family():
    runs = _runs({"async": 0.3, "seq": 0.2, "other": 0.05})
    claims = [_claim("tested", a={"method": "async"}),
              _claim("other", a={"method": "other"}),
              _claim("beside", a={"method": "seq"}, report_only="sequential RC: our variant, not the source's")]
    df = scorecard.evaluate_claims(claims, {"t": runs}, STATS).set_index("id")
    row = df.loc["beside"]
    assert row["verdict"] == REPORTED
    # the estimate and its interval are the paired t interval of a - b, as a test row's would be
    p = stats.pair_by_seed(runs, "loss", {"method": "seq"}, {"method": "bp"})
    ci = stats.t_interval((p["a"] - p["b"]).to_numpy())
    assert (row["estimate"], row["ci_low"], row["ci_high"]) == pytest.approx((ci.estimate, ci.low, ci.high))
    assert row["n_seeds"] == 8 and row["ours"] in row["reason"]
    assert "not a test" in row["reason"] and "sequential RC: our variant" in row["reason"]
    # no p-value, no Holm p, no seeds to decide it: nothing that reads as a test
    assert all(math.isnan(row[c]) for c in ("p_value", "p_holm", "p_wilcoxon", "seeds_needed"))
    # the family is the two tested rows: Holm multiplies the smaller p by 2, not 3
    pv = df.loc[["tested", "other"], "p_value"].to_numpy()
    np.testing.assert_allclose(df.loc[["tested", "other"], "p_holm"].to_numpy(), stats.holm(pv))


def test_a_reported_row_is_not_a_verdict_in_the_counts(tmp_path):
    runs = _runs({"async": 0.3, "seq": 0.2})
    df = scorecard.evaluate_claims([_claim("tested", a={"method": "async"}),
                                    _claim("beside", a={"method": "seq"}, report_only="a variant")],
                                   {"t": runs}, STATS)
    line = counts_line(df, scorecard.VERDICTS)
    assert line.startswith("**1 claims:** 1 reproduced · 0 not reproduced")
    assert line.endswith("; and 1 reported beside a test (not tests: no verdict)")
    scorecard.write_scorecard(df, tmp_path / "s.md", tmp_path / "s.csv")
    text = (tmp_path / "s.md").read_text()
    assert line in text and "1 of 1 claims were testable and tested" in text
    # without reported rows the line is the plain tally
    assert "reported" not in counts_line(df.iloc[:1], scorecard.VERDICTS)


def test_a_reported_row_keeps_its_label_when_a_precondition_fails_or_its_table_is_missing():
    runs = _runs({"seq": 0.2})
    conds = {"floor": {"kind": "floor", "statement": "bp below 1", "table": "t", "metric": "loss",
                       "a": {"method": "bp"}, "test": "less", "value": 1.0, "threshold": "crafted"}}
    df = scorecard.evaluate_claims([
        _claim("blocked", a={"method": "seq"}, report_only="a variant", preconditions=["floor"]),
        _claim("missing", table="gone", a={"method": "seq"}, report_only="a variant"),
    ], {"t": runs}, STATS, conds).set_index("id")
    assert df.loc["blocked", "verdict"] == REPORTED and "precondition floor not met" in df.loc["blocked", "reason"]
    assert not math.isnan(df.loc["blocked", "estimate"])  # shown as measured, said so
    assert df.loc["missing", "verdict"] == REPORTED and "nothing to report" in df.loc["missing", "reason"]


@pytest.mark.parametrize("extra, why", [
    ({"report_only": ""}, "must say why"),
    ({"report_only": True}, "must say why"),
    ({"report_only": "x", "expected": "fails"}, "drop expected"),
    ({"report_only": "x", "by_construction": "clock"}, "no by_construction"),
    ({"report_only": "x", "planned_n": 5}, "no planned_n"),
])
def test_a_malformed_report_only_is_refused_naming_the_claim(extra, why):
    with pytest.raises(ClaimError, match=f"'c'.*report_only.*{why}"):
        scorecard.validate_claims([_claim("c", **extra)])
