"""Out of reach named: a claim whose threshold lies beyond a bound this machine
imposes reads "not testable here" with the bound, computed from crafted measurements."""

from __future__ import annotations

import pandas as pd
import pytest
import yaml

from distlab.scoring import scorecard

STATS = {"alpha": 0.05, "bootstrap": {"n_resamples": 200, "seed": 0, "confidence": 0.95}}

REACH = {
    "kind": "reach", "statement": "the RC/BP bound of this machine reaches 1.38",
    "table": "local_throughput", "metric": "tokens_per_s", "test": "bound_reaches",
    "a": {"method": "bp-1thread"}, "b": {"method": "bp"}, "factor": 2, "reach": 1.38,
    "threshold": "RC/BP <= (c / s)(RC1 / BP1) <= c x BP1 / BP, c = 2 cores",
}
CLAIM = {
    "id": "local.rc.throughput", "paper": "P3", "source": "crafted", "statement": "RC >= 1.38x BP",
    "table": "local_throughput", "metric": "tokens_per_s", "test": "greater", "transform": "ratio",
    "a": {"method": "rc-par"}, "b": {"method": "bp"}, "margin": 0.38, "margin_relative": True,
    "threshold": "crafted: 1.38x", "preconditions": ["local.rc.reach"],
}


def _throughput(bp1: list[float], bp: list[float], rc: list[float]) -> pd.DataFrame:
    rows = []
    for seed, (x, y, z) in enumerate(zip(bp1, bp, rc)):
        rows += [{"method": "bp-1thread", "seed": seed, "tokens_per_s": x},
                 {"method": "bp", "seed": seed, "tokens_per_s": y},
                 {"method": "rc-par", "seed": seed, "tokens_per_s": z}]
    return pd.DataFrame(rows)


def _verdict(table: pd.DataFrame) -> pd.Series:
    df = scorecard.evaluate_claims([CLAIM], {"local_throughput": table}, STATS, {"local.rc.reach": REACH})
    return df.iloc[0]


def test_bound_below_the_threshold_makes_the_claim_not_testable():
    # BP's two-core speed-up s = 1.6: the bound 2 / 1.6 = 1.25 < 1.38, with a tight interval
    row = _verdict(_throughput([1000, 1010, 990, 1005], [1600, 1612, 1590, 1601], [1100, 1120, 1090, 1105]))
    assert row.verdict == "not testable here"
    assert "out of reach here" in row.reason and "1.25" in row.reason


def test_bound_above_the_threshold_lets_the_claim_be_tested():
    # s = 1.1: the bound 2 / 1.1 = 1.82 reaches 1.38, so the ratio's own test decides
    # (RC at 1.5x BP: reproduced)
    row = _verdict(_throughput([1000, 1010, 990, 1005], [1100, 1108, 1092, 1103], [1650, 1670, 1640, 1652]))
    assert row.verdict == "reproduced"
    assert "within reach" in row.preconditions


def test_an_interval_that_straddles_the_threshold_is_not_out_of_reach():
    # mean bound below 1.38 but its 95 % interval reaches it: not declared out of reach
    res = scorecard.evaluate_conditions(
        {"r": REACH}, {"local_throughput": _throughput([1000, 1000, 1000], [1300, 1700, 1400], [1, 1, 1])}, STATS)
    assert res["r"].status == "met"


def test_bound_keys_are_checked():
    bad = dict(REACH, reach=-1)
    with pytest.raises(scorecard.ClaimError, match="reach"):
        scorecard.evaluate_conditions({"r": bad}, {}, STATS)
    with pytest.raises(scorecard.ClaimError, match="factor"):
        scorecard.evaluate_conditions({"r": dict(REACH, test="less")}, {}, STATS)


def test_the_shipped_reach_condition_guards_both_throughput_rows():
    doc = yaml.safe_load(open("config/claims.yaml"))
    cond = doc["conditions"]["local.rc.reach"]
    assert cond["test"] == "bound_reaches" and cond["reach"] == 1.38
    rows = {c["id"]: c for c in doc["claims"]}
    for cid in ("local.rc.throughput", "local.rc.throughput_async"):
        assert "local.rc.reach" in rows[cid]["preconditions"]
