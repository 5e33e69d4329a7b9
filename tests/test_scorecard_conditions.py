"""Preconditions, the source's polarity, traced thresholds and power, on crafted tables.

A verdict means something only where the method works (below the data's
floor, ahead of its negative control, past its horizon) and only if it tests
what the source says; these tests pin both rules down.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from distlab.scoring import scorecard
from distlab.data import floors

ROOT = Path(__file__).resolve().parents[1]

STATS = {"alpha": 0.05, "bootstrap": {"n_resamples": 2000, "seed": 0, "confidence": 0.95}}
SEEDS = range(6)


def _runs(bp: float, rc: float, control: float, noise: float = 0.01) -> pd.DataFrame:
    """A local-learning-like table: held-out loss of BP, RC and a negative control, paired by seed."""
    rng = np.random.default_rng(0)
    rows = []
    for seed in SEEDS:
        shared = rng.normal(0, 0.02)
        for method, mean in (("bp", bp), ("rc", rc), ("control", control)):
            rows.append({"method": method, "seed": seed, "test_loss": mean + shared + rng.normal(0, noise)})
    return pd.DataFrame(rows)


FLOORS = pd.DataFrame({"dataset": "toy", "split": ["val", "test"], "bigram_nats": [2.30, 2.26]})

CONDITIONS = {
    "toy.bp_below_floor": {
        "kind": "floor", "statement": "BP's held-out loss is 0.2 below the bigram floor",
        "table": "runs", "metric": "test_loss", "a": {"method": "bp"}, "test": "less",
        "value_from": {"table": "floors", "metric": "bigram_nats", "where": {"split": "test"}},
        "margin": 0.2, "threshold": "the issue's 0.2 nats/byte below the floor",
    },
    "toy.rc_beats_control": {
        "kind": "control", "statement": "RC beats a negative control of equal budget",
        "table": "runs", "metric": "test_loss", "a": {"method": "rc"}, "b": {"method": "control"},
        "test": "less",
    },
}


def _claim(**kw):
    base = {"id": "toy.rc_gap", "paper": "P3", "source": "write-up", "table": "runs",
            "statement": "RC's held-out loss exceeds BP's", "metric": "test_loss", "test": "greater",
            "a": {"method": "rc"}, "b": {"method": "bp"},
            "preconditions": ["toy.bp_below_floor", "toy.rc_beats_control"]}
    base.update(kw)
    return base


def _evaluate(claims, runs, with_floors=True):
    tables = {"runs": runs, **({"floors": FLOORS} if with_floors else {})}
    return scorecard.evaluate_claims(claims, tables, STATS, CONDITIONS).set_index("id")


def test_met_preconditions_leave_the_verdict_alone():
    df = _evaluate([_claim()], _runs(bp=1.8, rc=1.9, control=3.2))
    row = df.loc["toy.rc_gap"]
    assert row.verdict == "reproduced"
    assert "toy.bp_below_floor: met" in row.preconditions and "toy.rc_beats_control: met" in row.preconditions


def test_a_model_above_its_floor_makes_the_claim_not_testable():
    # BP at 2.2 is below the floor (2.26) but not by the required 0.2: nothing learned to test
    df = _evaluate([_claim()], _runs(bp=2.2, rc=2.3, control=3.2))
    row = df.loc["toy.rc_gap"]
    assert row.verdict == "not testable here"
    assert "precondition toy.bp_below_floor not met" in row.reason
    assert "2.26" in row.reason or "2.06" in row.reason  # the measured value and its threshold are shown
    assert math.isnan(row.p_holm)  # kept out of the Holm family


def test_a_learner_no_better_than_its_control_is_not_testable():
    df = _evaluate([_claim()], _runs(bp=1.8, rc=1.9, control=1.9))
    row = df.loc["toy.rc_gap"]
    assert row.verdict == "not testable here"
    assert "toy.rc_beats_control not met" in row.reason


def test_a_precondition_whose_table_is_missing_is_not_run():
    df = _evaluate([_claim()], _runs(bp=1.8, rc=1.9, control=3.2), with_floors=False)
    assert df.loc["toy.rc_gap", "verdict"] == "not run"
    assert "floors" in df.loc["toy.rc_gap", "reason"]


def test_not_testable_is_counted_apart(tmp_path):
    df = _evaluate([_claim(), _claim(id="toy.other", preconditions=[])], _runs(bp=2.2, rc=2.3, control=3.2))
    md, csv = tmp_path / "s.md", tmp_path / "s.csv"
    results = scorecard.evaluate_conditions(CONDITIONS, {"runs": _runs(2.2, 2.3, 3.2), "floors": FLOORS}, STATS)
    scorecard.write_scorecard(df.reset_index(), md, csv, conditions=scorecard.conditions_frame(results),
                              conditions_csv=tmp_path / "s_conditions.csv", details=True)
    text = md.read_text()
    assert "1 reproduced · 0 not reproduced · 0 inconclusive · 1 not testable here" in text
    assert "## Preconditions and negative controls" in text and "toy.rc_beats_control" in text
    assert pd.read_csv(tmp_path / "s_conditions.csv")["status"].tolist() == ["not met", "met"]


@pytest.mark.parametrize(("rc", "verdict"), [(2.0, "reproduced"), (1.5, "not reproduced"), (1.8, "inconclusive")])
def test_a_test_the_source_says_fails(rc, verdict):
    """The source: RC fails the non-inferiority test against BP (margin 0.05).  Ours reproduces
    that only when our test fails conclusively too."""
    noise = 0.3 if verdict == "inconclusive" else 0.01
    claim = _claim(test="noninferior", higher_is_better=False, margin=0.05, expected="fails",
                   threshold="made up for the test", preconditions=[])
    df = _evaluate([claim], _runs(bp=1.5, rc=rc, control=3.0, noise=noise))
    row = df.loc["toy.rc_gap"]
    assert row.verdict == verdict
    assert row.reason.startswith("the source reports this test fails")


def test_a_directional_margin_shifts_the_test():
    runs = _runs(bp=1.5, rc=1.6, control=3.0)  # RC above BP by 0.1
    held = _evaluate([_claim(margin=0.05, threshold="t", preconditions=[])], runs).loc["toy.rc_gap"]
    fails = _evaluate([_claim(margin=0.2, threshold="t", preconditions=[])], runs).loc["toy.rc_gap"]
    assert held.verdict == "reproduced" and "a − b > 0.05" in held.reason
    assert fails.verdict == "not reproduced"


def test_a_margin_without_its_arithmetic_is_refused():
    with pytest.raises(scorecard.ClaimError, match="bad key 'threshold'"):
        scorecard.validate_claims([_claim(margin=0.05, preconditions=[])])
    with pytest.raises(scorecard.ClaimError, match="bad key 'by_construction'"):
        scorecard.validate_claims([_claim(by_construction=True, preconditions=[])])
    with pytest.raises(scorecard.ClaimError, match="bad key 'expected'"):
        scorecard.validate_claims([_claim(expected="maybe", preconditions=[])])
    with pytest.raises(scorecard.ClaimError, match="no condition named 'nope'"):
        scorecard.validate_claims([_claim(preconditions=["nope"])], CONDITIONS)
    with pytest.raises(scorecard.ClaimError, match="condition 'c': bad key 'kind'"):
        scorecard.validate_claims([], {"c": {**CONDITIONS["toy.rc_beats_control"], "kind": "vibes"}})


def test_inconclusive_rows_say_how_many_seeds_would_decide_them():
    rng = np.random.default_rng(3)
    rows = []
    for seed in range(4):
        rows += [{"method": "bp", "seed": seed, "test_loss": 1.5},
                 {"method": "rc", "seed": seed, "test_loss": 1.5 + 0.1 + rng.normal(0, 0.1)}]
    row = _evaluate([_claim(preconditions=[])], pd.DataFrame(rows)).loc["toy.rc_gap"]
    assert row.verdict == "inconclusive"
    d = np.array([r["test_loss"] for r in rows if r["method"] == "rc"]) - 1.5
    # the closed form at the same effect: n ~ ((z_a + z_b) / (mean / sd))^2, the t test needs a bit more
    from scipy.stats import norm

    z = ((norm.ppf(0.95) + norm.ppf(0.8)) / (d.mean() / d.std(ddof=1))) ** 2
    assert z <= row.seeds_needed <= z + 4
    assert row.seeds_needed > 4


def test_each_at_least_condition_is_a_horizon_check():
    runs = pd.DataFrame({"method": "demo", "seed": range(3), "steps": [1000, 1000, 600]})
    cond = {"h": {"kind": "horizon", "statement": "runs past the momentum's memory", "table": "runs",
                  "metric": "steps", "a": {"method": "demo"}, "test": "each_at_least", "value": 1000,
                  "threshold": "1 / (1 - 0.999) = 1000 steps"}}
    res = scorecard.evaluate_conditions(cond, {"runs": runs}, STATS)["h"]
    assert res.status == "not met" and "min steps over 3 runs = 600" in res.measured
    runs["steps"] = 1000
    assert scorecard.evaluate_conditions(cond, {"runs": runs}, STATS)["h"].status == "met"


def test_claims_file_with_conditions_and_duplicate_keys(tmp_path):
    p = tmp_path / "claims.yaml"
    p.write_text(yaml.safe_dump({"conditions": CONDITIONS, "claims": [_claim()]}, sort_keys=False))
    claims, conds = scorecard.load_claims_file(p)
    assert [c["id"] for c in claims] == ["toy.rc_gap"] and set(conds) == set(CONDITIONS)
    p.write_text("conditions: {}\nclaims: []\nconditions: {}\n")
    with pytest.raises(yaml.YAMLError, match="duplicate key 'conditions'"):
        scorecard.load_claims_file(p)


# ---------------------------------------------------------------- the data's floors


def _by_hand(train: bytes, held: bytes, alpha: float) -> tuple[float, float]:
    """Unigram and bigram cross-entropy by explicit counting (dicts, no numpy)."""
    uni = {b: 0 for b in range(256)}
    for b in train:
        uni[b] += 1
    total = len(train) + 256 * alpha
    h1 = -sum(math.log((uni[b] + alpha) / total) for b in held) / len(held)
    pair: dict[tuple[int, int], int] = {}
    for x, y in zip(train, train[1:]):
        pair[(x, y)] = pair.get((x, y), 0) + 1
    after = {x: sum(v for (p, _), v in pair.items() if p == x) for x in range(256)}
    h2 = -sum(math.log((pair.get((x, y), 0) + alpha) / (after[x] + 256 * alpha))
              for x, y in zip(held, held[1:])) / (len(held) - 1)
    return h1, h2


def test_the_bigram_floor_equals_an_independent_count():
    train, val, test = b"abracadabra abracadabra", b"cadabra abra", b"abra cadabra"
    table = floors.floors({"train": np.frombuffer(train, np.uint8), "val": np.frombuffer(val, np.uint8),
                           "test": np.frombuffer(test, np.uint8)}, "toy").set_index("split")
    for split, held in (("val", val), ("test", test)):
        h1, _ = _by_hand(train, held, table.loc[split, "unigram_alpha"])
        _, h2 = _by_hand(train, held, table.loc[split, "bigram_alpha"])
        assert table.loc[split, "unigram_nats"] == pytest.approx(h1, rel=1e-12)
        assert table.loc[split, "bigram_nats"] == pytest.approx(h2, rel=1e-12)
    # on text this regular, knowing the previous byte helps a lot
    assert table.loc["test", "bigram_nats"] < table.loc["test", "unigram_nats"] - 0.2
    # the smoothing is chosen on val alone: the alpha that scores val best
    best = min(floors.ALPHAS, key=lambda a: _by_hand(train, val, a)[1])
    assert table.loc["val", "bigram_alpha"] == best


def test_a_condition_whose_selection_matches_nothing_is_not_run():
    runs = pd.DataFrame({"method": "demo", "n": 2, "seed": range(3), "steps": 600})
    cond = {"h": {"kind": "horizon", "statement": "N = 4 runs past the horizon", "table": "runs",
                  "metric": "steps", "a": {"method": "demo", "n": 4}, "test": "each_at_least",
                  "value": 600, "threshold": "t"}}
    res = scorecard.evaluate_conditions(cond, {"runs": runs}, STATS)["h"]
    assert res.status == "not run" and "no rows" in res.measured


def test_p3_horizon_gap_settled_makes_quality_rows_not_testable():
    """P3's horizon (as P4's): the gap to BP must have stopped moving by the margin over the last
    third; local.summary computes it from the validation curves, the condition reads it."""
    from distlab.local.summary import gap_shrink_late, late_val_drop

    steps = np.arange(0, 501, 50)
    still_falling = pd.DataFrame({"step": steps, "val_loss": 3.0 - 0.002 * steps})  # 0.3 over the last third
    flat = pd.DataFrame({"step": steps, "val_loss": np.r_[3.0 - 0.004 * steps[:7], [1.8] * 4]})
    assert late_val_drop(still_falling) == pytest.approx(0.002 * (500 - 350))
    assert late_val_drop(flat) == pytest.approx(0.0)
    assert np.isnan(late_val_drop(pd.DataFrame({"step": [0, 500], "val_loss": [np.nan, 2.0]})))

    def runs(async_drop, seq_drop=0.0):
        rows = []
        for seed in range(5):
            rows += [{"group": "rc", "method": "bp", "seed": seed, "final_test_loss": 1.8, "late_val_drop": 0.02},
                     {"group": "rc", "method": "rc-async", "seed": seed, "final_test_loss": 1.9 + 0.01 * seed,
                      "late_val_drop": async_drop + 0.01 * seed},
                     {"group": "rc", "method": "rc-seq", "seed": seed, "final_test_loss": 1.85 + 0.01 * seed,
                      "late_val_drop": seq_drop + 0.01 * seed}]
        t = pd.DataFrame(rows)
        return t.assign(gap_shrink_late=gap_shrink_late(t))

    closing = runs(0.3)  # asynchronous RC's loss still falling 0.28 more than BP's: the gap is closing
    assert closing.loc[closing.method == "bp", "gap_shrink_late"].eq(0).all()
    assert closing.loc[closing.method == "rc-async", "gap_shrink_late"].tolist() == pytest.approx(
        [0.28 + 0.01 * s for s in range(5)])
    cfg_claims, cfg_conditions = scorecard.load_claims_file(ROOT / "config/claims.yaml")
    cond = {"local.rc_gap_settled": cfg_conditions["local.rc_gap_settled"]}
    claim = next(c for c in cfg_claims if c["id"] == "local.rc.noninferior")  # the one RC-gap row
    # its horizon is computed on the asynchronous runs it compares (scoped to its cell)
    scoped = {"name": "local.rc_gap_settled", "where": {"group": "rc", "method": "rc-async"}}
    assert scoped in claim["preconditions"]
    claim = {**claim, "preconditions": [scoped]}
    df = scorecard.evaluate_claims([claim], {"local_runs": closing}, STATS, cond).iloc[0]
    assert df.verdict == "not testable here" and "local.rc_gap_settled[group=rc,method=rc-async] not met" in df.reason
    settled = runs(0.0, seq_drop=0.3)  # the sequential gap still closing does not block the async row
    df = scorecard.evaluate_claims([claim], {"local_runs": settled}, STATS, cond).iloc[0]
    assert df.verdict == "reproduced"  # the source's significant gap: strict non-inferiority fails conclusively
    for cid in ("local.rc.noninferior", "local.pc.noninferior", "local.pc.equivalent"):
        pre = next(c for c in cfg_claims if c["id"] == cid)["preconditions"]
        names = [p if isinstance(p, str) else p["name"] for p in pre]
        assert any(n.endswith("_gap_settled") for n in names), cid


def test_learned_placers_are_compared_on_what_they_learned():
    """P2's rows compare the quantity the learning precondition tests (final policy on both sides),
    and an ablation is testable only when the full method's final policy beats CPU-only."""
    claims, conds = scorecard.load_claims_file(ROOT / "config/claims.yaml")
    p2 = [c for c in claims if c["id"].startswith("placement.") and not c.get("not_testable")]
    assert p2
    for c in p2:
        learned = [conds[n] for n in c["preconditions"] if n.endswith("_learns")]
        assert learned, c["id"]
        if c["id"].endswith(".noninferior_random"):  # a search against a search: best against best
            assert c["metric"] == "latency_ms", c["id"]
        elif c["metric"] == "final_policy_ms":
            # a speed claim on the final policy (its most likely placement, scored where the run
            # scores it) against a baseline, gated on the sampled final policy beating its control
            assert any(w in c["id"] for w in ("speedup", "beats_heft")), c["id"]
            assert all(k["metric"] == "final_median_ms" for k in learned), c["id"]
        else:  # a learned policy against a baseline's placement or another learner's policy
            assert all(k["metric"] == c["metric"] == "final_median_ms" for k in learned), c["id"]
        if ".ablation_" in c["id"]:
            model = c["id"].split(".")[1]
            assert f"placement.{model}.hsdag_corrected_ahead_of_cpu" in c["preconditions"]
    # crafted: the learner beats its control but converges to CPU-only; so do its ablations
    rows = []
    for seed in range(5):
        for method, final in (("hsdag_corrected", 126.0), ("hsdag_corrected_const", 137.0 + seed),
                              ("hsdag_corrected_no_shape", 126.0), ("cpu_only", 126.0)):
            rows.append({"pair": "cpu_igpu", "model": "m", "method": method, "seed": seed,
                         "final_median_ms": final + (0.001 * seed if method == "hsdag_corrected" else 0.0)})
    table = pd.DataFrame(rows)
    sel = lambda m: {"pair": "cpu_igpu", "model": "m", "method": m}  # noqa: E731
    cond = {"learns": {"kind": "control", "statement": "s", "table": "placement", "metric": "final_median_ms",
                       "a": sel("hsdag_corrected"), "b": sel("hsdag_corrected_const"), "test": "less"},
            "ahead": {"kind": "control", "statement": "s", "table": "placement", "metric": "final_median_ms",
                      "a": sel("hsdag_corrected"), "b": sel("cpu_only"), "test": "less"}}
    abl = {"id": "placement.m.ablation_no_shape", "paper": "P2", "source": "s", "statement": "s",
           "table": "placement", "metric": "final_median_ms", "test": "less", "a": sel("hsdag_corrected"),
           "b": sel("hsdag_corrected_no_shape"), "preconditions": ["learns", "ahead"]}
    row = scorecard.evaluate_claims([abl], {"placement": table}, STATS, cond).iloc[0]
    assert row.verdict == "not testable here" and "ahead not met" in row.reason
    assert "learns: met" in row.preconditions


def test_local_runs_table_carries_the_horizon_columns(tmp_path):
    """local.summary.collect_all writes late_val_drop and gap_shrink_late for every run (the columns
    the P3 horizon conditions read); a curve with one evaluation in its last third gives NaN, which
    the condition reads as not met (no horizon can be judged from one point)."""
    import json

    from distlab.local.summary import collect_all
    from distlab.results.runs import seal

    dirs = []
    for method, slope in (("bp", 0.004), ("rc-seq", 0.001)):
        d = tmp_path / method
        d.mkdir()
        steps = np.arange(0, 101, 10)
        pd.DataFrame({"step": steps, "tokens": steps * 10, "time": steps * 0.1, "loss": 2.0,
                      "val_loss": 3.0 - slope * steps}).to_csv(d / "metrics.csv", index=False)
        (d / "manifest.json").write_text(json.dumps(seal({  # sealed, as a finished run's
            "spec": {"group": "rc", "seed": 0, "model": {"n_layer": 2}, "steps": 100, "lr": 0.005}, "method": method,
            "final": {"val_loss": 2.0, "test_loss": 2.0}, "tokens_per_s": 1.0, "train_s": 1.0,
            "memory": {"pss_mb": 1.0}}, d, ["metrics.csv"])))
        dirs.append(d)
    _, runs, _ = collect_all(dirs)
    runs = runs.set_index("method")
    assert runs.loc["bp", "late_val_drop"] == pytest.approx(0.004 * 30)  # steps 70 -> 100
    assert runs.loc["rc-seq", "gap_shrink_late"] == pytest.approx(0.001 * 30 - 0.004 * 30)
    assert runs.loc["bp", "gap_shrink_late"] == 0
