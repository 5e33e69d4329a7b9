"""A precondition blocks a verdict only where its failure could explain the outcome, and
degenerate evidence decides: crafted tables, crafted conditions and the shipped P2 claims."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from distlab.scoring import scorecard
from distlab.placement.figures import add_optimum_columns

ROOT = Path(__file__).resolve().parents[1]
STATS = {"alpha": 0.05, "bootstrap": {"n_resamples": 500, "seed": 0, "confidence": 0.95}}
JITTER = [0.0, 0.3, -0.2, 0.1, -0.15]


def _table(learner: float, baseline: float, control: float, gap: float) -> dict[str, pd.DataFrame]:
    """Latencies (ms) of a learner, a baseline and the learner's constant-reward control, paired by
    seed, and the learner's search-space gap to the best baseline (relative, every seed)."""
    rows = [{"method": m, "seed": s, "ms": v + j} for s, j in enumerate(JITTER)
            for m, v in (("learner", learner), ("baseline", baseline), ("control", control))]
    space = [{"method": "learner", "seed": s, "gap_rel": gap} for s in range(len(JITTER))]
    return {"runs": pd.DataFrame(rows), "space": pd.DataFrame(space)}


def _conditions(released: str = "") -> dict:
    learns = {"kind": "control", "statement": "the learner beats its constant-reward control",
              "table": "runs", "metric": "ms", "a": {"method": "learner"}, "b": {"method": "control"},
              "test": "less"}
    if released:
        learns["released"] = released
    else:
        learns["testable_with"] = "a budget at which the learner beats its control"
    return {
        "toy.learns": learns,
        "toy.space": {"kind": "other", "statement": "the learner's space holds the baseline's answer to 1 %",
                      "table": "space", "metric": "gap_rel", "a": {"method": "learner"}, "test": "each_at_most",
                      "value": 0.01, "threshold": "the rows' 1 % margin", "blocks": "shortfall",
                      "testable_with": "a finer search space"},
    }


def _claim(pre: list[str], **kw) -> dict:
    base = {"id": "toy.noninferior", "paper": "P2", "source": "the paper's table", "table": "runs",
            "statement": "the learner is no slower than the baseline (1 % margin)", "metric": "ms",
            "test": "noninferior", "higher_is_better": False, "margin": 0.01, "margin_relative": True,
            "threshold": "the 1 % resolution", "a": {"method": "learner"}, "b": {"method": "baseline"},
            "preconditions": pre}
    base.update(kw)
    return base


def _row(claim: dict, tables: dict, released: str = "") -> pd.Series:
    return scorecard.evaluate_claims([claim], tables, STATS, _conditions(released)).iloc[0]


def test_a_space_gap_smaller_than_the_loss_decides():
    # the learner ends 10 % behind the baseline; its space misses the baseline's answer by 1.4 %
    row = _row(_claim(["toy.space"]), _table(learner=110.0, baseline=100.0, control=130.0, gap=0.014))
    assert row.verdict == "not reproduced", row.reason
    assert "precondition toy.space not met" in row.reason and "cannot explain the outcome" in row.reason


def test_a_space_gap_larger_than_the_loss_blocks_and_says_what_would_decide():
    # 2 % behind (1 % beyond the margin) with a 5 % gap: the space may be why
    row = _row(_claim(["toy.space"]), _table(learner=102.0, baseline=100.0, control=130.0, gap=0.05))
    assert row.verdict == "not testable here", row.reason
    assert "could explain the outcome" in row.reason and "testable with: a finer search space" in row.reason


def test_a_space_gap_cannot_explain_a_win():
    row = _row(_claim(["toy.space"]), _table(learner=90.0, baseline=100.0, control=130.0, gap=0.05))
    assert row.verdict == "reproduced", row.reason
    assert "a handicap cannot explain" in row.reason


def test_a_released_method_that_does_not_learn_decides_its_win_claims():
    # the method as released, at the source's budget, ends where its control does: a finding
    tables = _table(learner=95.0, baseline=100.0, control=95.0, gap=0.0)
    row = _row(_claim(["toy.learns"]), tables, released="the released code at the released budget")
    assert row.verdict == "not reproduced", row.reason
    assert "did not beat its control" in row.reason and "the released code at the released budget" in row.reason
    assert "the comparison alone gives: reproduced" in row.reason   # the test itself passed
    assert pd.isna(row.p_holm)   # decided by the control, not a member of the Holm family


def test_a_released_method_that_learns_is_tested():
    row = _row(_claim(["toy.learns"]), _table(learner=90.0, baseline=100.0, control=120.0, gap=0.0),
               released="the released code at the released budget")
    assert row.verdict == "reproduced", row.reason


def test_a_variant_of_ours_that_does_not_learn_stays_blocked():
    row = _row(_claim(["toy.learns"]), _table(learner=95.0, baseline=100.0, control=95.0, gap=0.0))
    assert row.verdict == "not testable here", row.reason
    assert "testable with: a budget at which the learner beats its control" in row.reason


def test_another_block_outranks_a_released_methods_finding():
    # the space's 5 % gap could explain a 2 % loss: that block stands, the control's finding waits
    row = _row(_claim(["toy.learns", "toy.space"]), _table(learner=102.0, baseline=100.0, control=102.0, gap=0.05),
               released="the released code")
    assert row.verdict == "not testable here", row.reason


def test_a_released_claim_the_source_reports_failing_stays_blocked():
    row = _row(_claim(["toy.learns"], expected="fails"), _table(learner=95.0, baseline=100.0, control=95.0, gap=0.0),
               released="the released code")
    assert row.verdict == "not testable here", row.reason


def test_blocks_and_released_are_checked():
    conds = _conditions()
    conds["toy.space"]["blocks"] = "improvement"
    with pytest.raises(scorecard.ClaimError, match="bad key 'blocks'"):
        scorecard.validate_claims([_claim(["toy.space"])], conds)
    conds = _conditions()
    conds["toy.space"]["released"] = "as released"
    with pytest.raises(scorecard.ClaimError, match="bad key 'released'"):
        scorecard.validate_claims([_claim(["toy.space"])], conds)


# ---------------------------------------------------------------- the shipped P2 claims


def _placement(cpu: float, gpu: float, opt: float, learner: list[float], control: list[float]) -> pd.DataFrame:
    rows = []
    for seed in range(5):
        for method, lat in (("cpu_only", cpu), ("gpu_only", gpu), ("optimum", opt), ("heft", cpu),
                            ("hsdag_corrected", learner[seed]), ("hsdag_corrected_const", control[seed])):
            rows.append({"pair": "cpu_igpu", "model": "inception_v3", "method": method, "seed": seed,
                         "scenario": "serial", "latency_ms": lat, "final_median_ms": lat, "final_policy_ms": lat,
                         "groups_optimum_ms": opt, "clock": "simulated"})
    return add_optimum_columns(pd.DataFrame(rows))


def _shipped(table: pd.DataFrame) -> pd.DataFrame:
    claims, conds = scorecard.load_claims_file(ROOT / "config/claims.yaml")
    return scorecard.evaluate_claims(claims, {"placement": table}, STATS, conds).set_index("id")


def test_a_policy_that_ends_on_cpu_only_at_every_seed_is_not_a_speedup():
    # every seed ends exactly at CPU-only's latency: a - b = 0 [0, 0], which excludes a speedup
    # of more than 1 %; the optimum is 27.5 % faster than CPU-only, so headroom does not block it
    t = _placement(cpu=125.7, gpu=151.4, opt=98.6, learner=[125.7] * 5, control=[140.0, 141, 139, 142, 138])
    v = _shipped(t)
    row = v.loc["placement.inception_v3.hsdag_corrected.speedup_over_cpu"]
    assert row.verdict == "not reproduced", row.reason
    assert row.ci_low == row.ci_high and "every seed gives the same difference" in row.reason


def test_headroom_blocks_only_an_improvement_it_cannot_hold():
    # 27.5 % of headroom holds a speedup of 1 % but not the abstract's 58.2 %
    t = _placement(cpu=125.7, gpu=151.4, opt=98.6, learner=[110.0, 110.5, 109.5, 110.2, 109.8],
                   control=[140.0, 141, 139, 142, 138])
    v = _shipped(t)
    assert v.loc["placement.inception_v3.hsdag_corrected.speedup_over_cpu"].verdict == "reproduced"
    row = v.loc["placement.inception_v3.hsdag_corrected.speedup_58pct"]
    assert row.verdict == "not testable here", row.reason
    assert ("the ceiling here, at most 27.5 % (worst run), cannot hold the claimed improvement of more than "
            "58.2 %") in row.reason
    assert "testable with:" in row.reason


def test_a_ceiling_on_improvement_blocks_only_a_larger_improvement():
    # a ceiling of 0.5 % (below its own 1 % bound: not met) on how much faster anything can be
    conds = {"toy.headroom": {"kind": "other", "statement": "some placement beats the baseline by 1 %",
                              "table": "space", "metric": "gap_rel", "a": {"method": "learner"},
                              "test": "each_at_least", "value": 1.0, "threshold": "ours", "blocks": "improvement"}}
    tables = _table(learner=99.0, baseline=100.0, control=130.0, gap=0.5)

    def row(claim: dict) -> pd.Series:
        return scorecard.evaluate_claims([claim], tables, STATS, conds).iloc[0]

    no_loss = row(_claim(["toy.headroom"]))
    assert no_loss.verdict == "reproduced", no_loss.reason
    assert "does not bear on a claim that is not one of improvement" in no_loss.reason
    sized = row(_claim(["toy.headroom"], test="less", higher_is_better=None))   # more than 1.01 % faster
    assert sized.verdict == "not testable here", sized.reason
    assert "cannot hold the claimed improvement of more than 1.01 %" in sized.reason
    absolute = row(_claim(["toy.headroom"], test="less", higher_is_better=None, margin=1.0, margin_relative=False))
    assert "cannot hold the claimed improvement of more than 1.01 %" in absolute.reason   # 1 ms of 100
    any_speedup = row({k: v for k, v in _claim(["toy.headroom"], test="less").items()
                       if k not in ("margin", "margin_relative", "higher_is_better", "threshold")})
    assert any_speedup.verdict == "reproduced", any_speedup.reason
    assert "can hold the claimed improvement of more than 0 %" in any_speedup.reason
