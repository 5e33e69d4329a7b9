"""Scorecard verdicts on synthetic run-level tables with known truth."""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import pytest
import yaml

from distlab import scorecard

STATS = {"alpha": 0.05, "bootstrap": {"n_resamples": 2000, "seed": 0, "confidence": 0.95}}
SEEDS = range(8)


def _table() -> pd.DataFrame:
    """time_per_step for schemes x s x seeds; per-seed noise shared across settings."""
    rng = np.random.default_rng(42)
    seed_effect = rng.normal(0, 0.5, size=len(SEEDS))
    rows = []
    for seed in SEEDS:
        for s in (1, 2, 3):
            base = 1.0 + 0.5 * s + seed_effect[seed]
            rows += [
                # pgc is clearly faster than gc (by 0.3 +- 0.02)
                {"scheme": "gc", "s": s, "delay_mean": 1.0, "seed": seed, "time_per_step": base},
                {"scheme": "pgc", "s": s, "delay_mean": 1.0, "seed": seed,
                 "time_per_step": base - 0.3 + rng.normal(0, 0.02)},
                # same-ish as gc: tiny differences
                {"scheme": "gc-twin", "s": s, "delay_mean": 1.0, "seed": seed,
                 "time_per_step": base + rng.normal(0, 0.001)},
                # noisy null: no true difference, large per-pair noise
                {"scheme": "noisy", "s": s, "delay_mean": 1.0, "seed": seed,
                 "time_per_step": base + rng.normal(0, 1.0)},
            ]
    return pd.DataFrame(rows)


def claim(**kw):
    base = {
        "id": "c", "paper": "P1", "source": "Fig. 7", "statement": "pgc is faster than gc",
        "table": "pgc_sim", "metric": "time_per_step", "paper_value": None, "test": "less",
        "a": {"scheme": "pgc", "s": 2, "delay_mean": 1},
        "b": {"scheme": "gc", "s": 2, "delay_mean": 1},
    }
    base.update(kw)
    if ("margin" in kw or "value" in kw) and "threshold" not in kw:
        base["threshold"] = "test: a made-up threshold"
    return {k: v for k, v in base.items() if v is not ...}


def evaluate(*claims, tables=None):
    return scorecard.evaluate_claims(list(claims), tables if tables is not None else {"pgc_sim": _table()}, STATS)


def test_true_less_claim_is_reproduced():
    df = evaluate(claim())
    row = df.iloc[0]
    assert list(df.columns) == list(scorecard.COLUMNS)
    assert row.verdict == "reproduced"
    assert row.n_seeds == 8
    assert row.estimate == pytest.approx(-0.3, abs=0.03)
    assert row.ci_low < -0.3 < row.ci_high < 0
    assert row.p_value < 1e-6 and row.p_wilcoxon == pytest.approx(1 / 256)  # all 8 ranks negative
    assert row.ours.startswith("-0.") and "[" in row.ours
    assert "paired t (a < b) p = " in row.reason and row.reason.endswith("< 0.05")


def test_false_less_claim_is_not_reproduced():
    row = evaluate(claim(a={"scheme": "gc", "s": 2}, b={"scheme": "pgc", "s": 2})).iloc[0]
    assert row.verdict == "not reproduced"
    assert row.p_value > 0.99
    assert "opposite direction" in row.reason


def test_greater_claim_is_reproduced():
    row = evaluate(claim(test="greater", a={"scheme": "gc", "s": 1}, b={"scheme": "pgc", "s": 1})).iloc[0]
    assert row.verdict == "reproduced" and row.estimate > 0


def test_wrong_direction_needs_five_seeds():
    # a - b = [0.5, -0.4, 0.6, -0.3, 0.2, -0.1]: mean > 0 against a claimed a < b,
    # but far from significant in either direction.
    d = [0.5, -0.4, 0.6, -0.3, 0.2, -0.1]
    tab = pd.DataFrame(
        [{"scheme": "b", "seed": i, "time_per_step": 1.0} for i in range(6)]
        + [{"scheme": "a", "seed": i, "time_per_step": 1.0 + x} for i, x in enumerate(d)]
    )
    c = claim(a={"scheme": "a"}, b={"scheme": "b"})
    row = evaluate(c, tables={"pgc_sim": tab}).iloc[0]
    assert row.p_value > 0.5 and row.verdict == "not reproduced"
    assert "wrong direction with n = 6" in row.reason
    four = evaluate(c, tables={"pgc_sim": tab[tab.seed < 4]}).iloc[0]
    assert four.estimate == pytest.approx(0.1) and four.verdict == "inconclusive"


def test_noisy_null_is_inconclusive():
    row = evaluate(claim(a={"scheme": "noisy", "s": 3}, b={"scheme": "gc", "s": 3})).iloc[0]
    # the noisy-vs-gc difference is pure noise: neither direction is significant
    assert 0.05 < row.p_value < 0.95
    assert row.ci_low < 0 < row.ci_high
    assert row.verdict == "inconclusive"


def test_noisy_null_with_few_seeds_is_inconclusive():
    few = _table()[lambda t: t.seed < 3]
    row = evaluate(claim(a={"scheme": "noisy", "s": 3}, b={"scheme": "gc", "s": 3}), tables={"pgc_sim": few}).iloc[0]
    assert row.verdict == "inconclusive" and row.n_seeds == 3
    assert "≥ 0.05" in row.reason


def test_chain_all_links_hold():
    chain = [{"scheme": "gc", "s": s} for s in (1, 2, 3)]
    row = evaluate(claim(a=..., b=..., chain=chain, statement="time grows with s")).iloc[0]
    assert row.verdict == "reproduced"
    assert row.ours.count(" → ") == 1
    assert row.estimate == pytest.approx(-0.5)  # each step of s adds 0.5
    assert row.reason.startswith("2/2 links hold; s=")


def test_chain_with_failing_link():
    chain = [{"scheme": "gc", "s": 1}, {"scheme": "gc", "s": 3}, {"scheme": "gc", "s": 2}]
    row = evaluate(claim(a=..., b=..., chain=chain)).iloc[0]
    assert row.verdict == "not reproduced"
    assert "1/2 links hold; s=3 vs s=2" in row.reason


def test_equivalence_tiny_vs_large_difference():
    eq = claim(test="equivalent", margin=0.05, a={"scheme": "gc-twin", "s": 2}, b={"scheme": "gc", "s": 2})
    row = evaluate(eq).iloc[0]
    assert row.verdict == "reproduced" and row.p_value < 0.05 and row.margin == 0.05
    big = dict(eq, a={"scheme": "pgc", "s": 2})
    row = evaluate(big).iloc[0]
    assert row.verdict == "not reproduced" and "outside" in row.reason


def test_relative_margin_and_ratio_transform():
    # pgc/gc ~ 0.85 at s=2 (base ~ 2 +- 0.5): 30 % relative margin holds, 5 % does not
    c = claim(test="noninferior", margin=0.3, margin_relative=True, higher_is_better=False,
              a={"scheme": "pgc", "s": 2}, b={"scheme": "gc", "s": 2}, transform="ratio")
    row = evaluate(c).iloc[0]
    t = _table()
    gc, pgc = (t[(t.scheme == k) & (t.s == 2)].sort_values("seed").time_per_step.to_numpy() for k in ("gc", "pgc"))
    assert row.estimate == pytest.approx(np.mean(pgc / gc))
    assert row.verdict == "reproduced"
    worse = dict(c, a={"scheme": "gc", "s": 2}, b={"scheme": "pgc", "s": 2}, margin=0.05)
    row = evaluate(worse).iloc[0]
    assert row.verdict == "not reproduced" and "beyond" in row.reason


def test_missing_table_and_missing_setting_are_not_run():
    df = evaluate(claim(table="p3_runs"), claim(id="d", a={"scheme": "pgc", "s": 9}), tables={"pgc_sim": _table()})
    assert df.verdict.tolist() == ["not run", "not run"]
    assert "p3_runs" in df.reason[0] and "matches no rows" in df.reason[1]
    assert df.n_seeds.tolist() == [0, 0]


def test_single_seed_is_inconclusive():
    one = _table()[lambda t: t.seed == 0]
    row = evaluate(claim(), tables={"pgc_sim": one}).iloc[0]
    assert (row.verdict, row.reason, row.n_seeds) == ("inconclusive", "n < 2", 1)


@pytest.mark.parametrize(
    ("kw", "key"),
    [
        ({"tset": "less"}, "tset"),
        ({"test": "smaller"}, "test"),
        ({"paper": "P9"}, "paper"),
        ({"test": "equivalent"}, "margin"),
        ({"test": "noninferior", "margin": 0.1}, "higher_is_better"),
        ({"chain": [{"s": 1}, {"s": 2}]}, "chain"),
        ({"transform": "log"}, "transform"),
        ({"statement": ...}, "statement"),
    ],
)
def test_bad_claim_names_id_and_key(kw, key):
    with pytest.raises(scorecard.ClaimError, match=rf"claim 'bad.claim': bad key '{key}'"):
        evaluate(claim(id="bad.claim", **kw))


def test_duplicate_ids_rejected():
    with pytest.raises(scorecard.ClaimError, match=r"claim 'x'.*duplicated"):
        evaluate(claim(id="x"), claim(id="x"))


def test_ambiguous_selection_names_claim():
    with pytest.raises(scorecard.ClaimError, match=r"claim 'amb'.*duplicate seeds"):
        evaluate(claim(id="amb", a={"scheme": "pgc"}))


def test_write_and_main_scorecard(tmp_path):
    claims = [claim(id="p1.fast", paper_value="2x faster"), claim(id="p3.x", paper="P3", table="p3_runs")]
    claims_path = tmp_path / "claims.yaml"
    claims_path.write_text(yaml.safe_dump(copy.deepcopy(claims), sort_keys=False))
    md, csv = tmp_path / "out" / "scorecard.md", tmp_path / "out" / "scorecard.csv"
    for tab in (tmp_path / "pgc_sim.parquet", tmp_path / "pgc_sim.csv"):  # csv last: checked below
        getattr(_table(), "to_" + tab.suffix[1:])(tab, index=False)
        df = scorecard.main_scorecard(claims_path, {"pgc_sim": str(tab)}, STATS, md, csv)
        assert df.verdict.tolist() == ["reproduced", "not run"]
    text = md.read_text()
    assert text.startswith("# Reproduction scorecard\n")
    assert ("**2 claims:** 1 reproduced · 0 not reproduced · 0 inconclusive · 0 not testable here · "
            "0 by construction · 1 not run") in text
    assert ("| claim | paper's figure | ours (95 % t CI) | seeds | p raw / Holm | preconditions | verdict "
            "| reason |") in text
    assert "P1: Fig. 7; paper: 2x faster" in text
    back = pd.read_csv(csv)
    assert list(back.columns) == list(scorecard.COLUMNS)
    assert back.verdict.tolist() == ["reproduced", "not run"]


def test_load_claims_validates(tmp_path):
    p = tmp_path / "claims.yaml"
    p.write_text(yaml.safe_dump({"claims": [claim(id="ok")]}))
    assert [c["id"] for c in scorecard.load_claims(p)] == ["ok"]
    p.write_text(yaml.safe_dump([claim(id="k", margin=-0.1)]))
    with pytest.raises(scorecard.ClaimError, match="claim 'k': bad key 'margin'"):
        scorecard.load_claims(p)
