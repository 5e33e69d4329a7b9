"""A learner's learning precondition (``blocks: learning``) blocks by its role in the claim: the
method's own learning as a control does; an opponent's or a baseline's only the decided outcome its
failure favours.  Crafted tables and conditions, then the shipped claims."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from distlab.scoring import scorecard
from distlab.scoring.claims import ClaimError, learner_side, learning_shift, load_claims_file, _normalize

ROOT = Path(__file__).resolve().parents[1]
STATS = {"alpha": 0.05, "bootstrap": {"n_resamples": 500, "seed": 0, "confidence": 0.95}}
# per-method jitter (ms) by seed, so that no paired difference is the same at every seed
JITTER = {"method": [0.0, 0.3, -0.2, 0.1, -0.15], "opponent": [0.2, -0.3, 0.25, -0.1, 0.05],
          "opponent_control": [-0.1, 0.15, 0.1, -0.25, 0.2], "method_control": [0.1, -0.2, 0.3, 0.0, -0.1]}
LEARNS = "a budget at which the learner beats its control"


def _tables(method: float, opponent: float, opponent_control: float, method_control: float = 130.0) -> dict:
    """Latencies (ms, lower is better) of a method, its opponent and each one's constant-reward control."""
    means = {"method": method, "opponent": opponent, "opponent_control": opponent_control,
             "method_control": method_control}
    rows = [{"method": m, "seed": s, "ms": v + JITTER[m][s], "loss": 2.0 + JITTER[m][s]}
            for m, v in means.items() for s in range(5)]
    return {"runs": pd.DataFrame(rows)}


def _learns(who: str, **kw) -> dict:
    cond = {"kind": "control", "statement": f"the {who} beats its constant-reward control", "table": "runs",
            "metric": "ms", "a": {"method": who}, "b": {"method": f"{who}_control"}, "test": "less",
            "blocks": "learning", "testable_with": LEARNS}
    cond.update(kw)
    return cond


CONDITIONS = {"toy.opponent_learns": _learns("opponent"), "toy.method_learns": _learns("method")}


def _claim(pre: list[str], **kw) -> dict:
    base = {"id": "toy.noninferior_opponent", "paper": "P2", "source": "the paper's table", "table": "runs",
            "statement": "the method is no slower than the opponent (1 % margin)", "metric": "ms",
            "test": "noninferior", "higher_is_better": False, "margin": 0.01, "margin_relative": True,
            "threshold": "the 1 % resolution", "a": {"method": "method"}, "b": {"method": "opponent"},
            "preconditions": pre}
    base.update(kw)
    return base


def _row(claim: dict, tables: dict, conditions: dict | None = None) -> pd.Series:
    return scorecard.evaluate_claims([claim], tables, STATS, conditions or CONDITIONS).iloc[0]


def test_a_method_that_lost_to_an_opponent_that_did_not_learn_is_decided_not_reproduced():
    # 10 % slower than an opponent that ends where its constant-reward control ends
    row = _row(_claim(["toy.opponent_learns"]), _tables(method=110.0, opponent=100.0, opponent_control=99.0))
    assert row.verdict == "not reproduced", row.reason
    assert "precondition toy.opponent_learns not met" in row.reason
    assert "the opponent (b) did not beat its control" in row.reason
    assert "decided against the claim (a loss), which the failure cannot explain" in row.reason


def test_a_method_that_won_against_an_opponent_that_did_not_learn_stays_blocked():
    row = _row(_claim(["toy.opponent_learns"]), _tables(method=90.0, opponent=100.0, opponent_control=99.0))
    assert row.verdict == "not testable here", row.reason
    assert "the outcome is for the claim (a win): the failure could explain it" in row.reason
    assert f"testable with: {LEARNS}" in row.reason and "would have been: reproduced" in row.reason


def test_an_undecided_row_beside_an_opponent_that_did_not_learn_stays_undecided():
    # a - b about 0.9 ms against a 1 ms margin: neither a win nor a loss at five seeds
    row = _row(_claim(["toy.opponent_learns"]), _tables(method=100.9, opponent=100.0, opponent_control=99.0))
    assert row.verdict == "inconclusive", row.reason
    assert "cannot explain an undecided outcome, which stays undecided" in row.reason


def test_an_opponent_that_learns_does_not_enter_the_reason():
    row = _row(_claim(["toy.opponent_learns"]), _tables(method=110.0, opponent=100.0, opponent_control=120.0))
    assert row.verdict == "not reproduced", row.reason
    assert "toy.opponent_learns" not in row.reason and "toy.opponent_learns: met" in row.preconditions


@pytest.mark.parametrize("method", [90.0, 110.0], ids=["win", "loss"])
def test_the_methods_own_learning_blocks_any_outcome(method):
    row = _row(_claim(["toy.method_learns"]), _tables(method=method, opponent=100.0, opponent_control=120.0,
                                                      method_control=method - 1.0))
    assert row.verdict == "not testable here", row.reason
    assert row.reason.startswith("precondition toy.method_learns not met") and f"testable with: {LEARNS}" in row.reason


def test_a_claim_that_a_is_higher_is_blocked_only_in_its_loss():
    # "the method is slower than the opponent": an opponent that did not learn is slower too, so its
    # failure moves the row against the claim: it can explain a loss, not a win
    claim = _claim(["toy.opponent_learns"], id="toy.slower", test="greater", higher_is_better=None,
                   margin=None, margin_relative=None, threshold=None)
    claim = {k: v for k, v in claim.items() if v is not None}
    won = _row(claim, _tables(method=110.0, opponent=100.0, opponent_control=99.0))
    assert won.verdict == "reproduced" and "decided for the claim (a win)" in won.reason, won.reason
    lost = _row(claim, _tables(method=90.0, opponent=100.0, opponent_control=99.0))
    assert lost.verdict == "not testable here", lost.reason
    assert "the outcome is against the claim (a loss): the failure could explain it" in lost.reason


def test_a_two_sided_claim_or_another_metric_is_blocked_whatever_the_outcome():
    equivalent = _claim(["toy.opponent_learns"], id="toy.equivalent", test="equivalent", higher_is_better=None)
    equivalent = {k: v for k, v in equivalent.items() if v is not None}
    row = _row(equivalent, _tables(method=110.0, opponent=100.0, opponent_control=99.0))
    assert row.verdict == "not testable here" and "does not move this row's test one way" in row.reason, row.reason
    other = _row(_claim(["toy.opponent_learns"], metric="loss", margin=0.05, margin_relative=False),
                 _tables(method=110.0, opponent=100.0, opponent_control=99.0))
    assert other.verdict == "not testable here" and "its ms beside the row's loss" in other.reason, other.reason


def test_learning_conditions_are_checked():
    with pytest.raises(ClaimError, match="'learning' reads which way"):
        scorecard.evaluate_claims([_claim(["toy.opponent_learns"])], _tables(110.0, 100.0, 99.0), STATS,
                                  {"toy.opponent_learns": _learns("opponent", test="equivalent", margin=0.5,
                                                                  threshold="crafted")})
    elsewhere = {"toy.opponent_learns": _learns("bystander")}
    with pytest.raises(ClaimError, match="neither side of the claim's one comparison"):
        scorecard.evaluate_claims([_claim(["toy.opponent_learns"])], _tables(110.0, 100.0, 99.0), STATS, elsewhere)
    chain = _claim(["toy.opponent_learns"], test="less", higher_is_better=None, margin=None, margin_relative=None,
                   threshold=None, chain=[{"method": "method"}, {"method": "opponent"}, {"method": "opponent_control"}])
    chain = {k: v for k, v in chain.items() if v is not None and k not in ("a", "b")}
    with pytest.raises(ClaimError, match="neither side of the claim's one comparison"):
        scorecard.evaluate_claims([chain], _tables(110.0, 100.0, 99.0), STATS, CONDITIONS)


def test_the_side_and_the_shift_of_a_learner():
    links = [({"model": "m", "method": "hsdag"}, {"model": "m", "method": "rnn"})]
    assert learner_side(links, {"model": "m", "method": "rnn"}) == "b"
    assert learner_side(links, {"model": "m", "method": "hsdag"}) == "a"
    assert learner_side(links, {"model": "other", "method": "rnn"}) is None
    assert learner_side(links, {"model": "m"}) is None  # names neither learner
    lower = {"metric": "ms", "test": "noninferior", "higher_is_better": False}
    assert learning_shift(lower, "less", "ms") == 1 and learning_shift(lower, "greater", "ms") == -1
    assert learning_shift({**lower, "higher_is_better": True}, "less", "ms") == -1
    assert learning_shift({"metric": "ms", "test": "less"}, "each_at_most", "ms") == 1
    assert learning_shift({"metric": "ms", "test": "greater"}, "less", "ms") == -1
    assert learning_shift({"metric": "ms", "test": "band"}, "less", "ms") == 0
    assert learning_shift(lower, "less", "loss") == 0


def test_the_shipped_learner_conditions_declare_learning_and_the_opponents_sit_on_b():
    """Every learner condition of the shipped claims that is not the released method's is a
    learning condition; P2's opponents (RNN, Placeto), P4's baselines and P3's BP are each claim's b."""
    claims, conditions = load_claims_file(ROOT / "config" / "claims.yaml")
    learners = {n: c for n, c in conditions.items() if n.endswith(("_learns", "_learned")) or "_learned_" in n}
    for name, cond in learners.items():
        assert cond.get("blocks", "always") == ("always" if cond.get("released") else "learning"), name
    opponents = ("rnn_learns", "placeto_learns", "adamw_learned", "allmean_learned", "bp24_learned", "bp12_learned")
    seen = set()
    for c in _normalize(claims):
        for name in c["preconditions"]:
            kind = next((o for o in opponents if name.split(".")[-1].startswith(o)), None)
            if kind:
                assert learner_side(c["links"], learners[name]["a"]) == "b", (c["id"], name)
                seen.add(kind)
    assert seen == set(opponents)


@pytest.mark.parametrize("method,verdict", [(110.0, "not reproduced"), (90.0, "not testable here")],
                         ids=["loss", "win"])
def test_a_released_method_against_an_opponent_that_did_not_learn(method, verdict):
    """Neither learns: the released method's failing its control decides its claim, unless the
    opponent's failure could explain the outcome (a win)."""
    released = {"kind": "control", "statement": "the method as released beats its control", "table": "runs",
                "metric": "ms", "a": {"method": "method"}, "b": {"method": "method_control"}, "test": "less",
                "released": "the source's rule at the source's budget"}
    conditions = {**CONDITIONS, "toy.released_learns": released}
    row = _row(_claim(["toy.released_learns", "toy.opponent_learns"]),
               _tables(method=method, opponent=100.0, opponent_control=99.0, method_control=method - 1.0), conditions)
    assert row.verdict == verdict, row.reason
    if verdict == "not reproduced":
        assert row.reason.startswith("decided by precondition toy.released_learns not met")
        assert "which the failure cannot explain" in row.reason
    else:
        assert row.reason.startswith("precondition toy.opponent_learns not met") and "could explain it" in row.reason
