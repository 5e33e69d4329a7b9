"""Scorecard verdicts on synthetic run-level tables with known truth."""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import pytest
import yaml

from distlab.scoring import scorecard, stats

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
    assert "excludes the claimed effect" in row.reason


def test_greater_claim_is_reproduced():
    row = evaluate(claim(test="greater", a={"scheme": "gc", "s": 1}, b={"scheme": "pgc", "s": 1})).iloc[0]
    assert row.verdict == "reproduced" and row.estimate > 0


def _pair_table(d):
    return pd.DataFrame(
        [{"scheme": "b", "seed": i, "time_per_step": 1.0} for i in range(len(d))]
        + [{"scheme": "a", "seed": i, "time_per_step": 1.0 + x} for i, x in enumerate(d)]
    )


def test_wrong_direction_with_zero_inside_is_inconclusive_with_its_seeds():
    # mean a - b > 0 against a claimed a < b, but the interval contains zero: no negative
    # finding (the old rule read n >= 5 in the wrong direction as "not reproduced")
    d = np.array([0.5, -0.1, 0.6, 0.0, 0.3, -0.2])
    c = claim(a={"scheme": "a"}, b={"scheme": "b"})
    row = evaluate(c, tables={"pgc_sim": _pair_table(d)}).iloc[0]
    assert row.ci_low < 0 < row.ci_high
    assert row.verdict == "inconclusive" and "wrong direction" in row.reason
    # the seeds that would decide it: those at which the t interval would exclude a < b
    # (one-sided at (1 - 0.95) / 2) at the observed mean and spread
    from scipy.stats import norm

    z = ((norm.ppf(0.975) + norm.ppf(0.8)) / (d.mean() / d.std(ddof=1))) ** 2
    assert z <= row.seeds_needed <= z + 4 and row.seeds_needed <= 50
    assert "toward not reproduced" in row.reason


def test_seeds_beyond_the_cap_read_no_effect_detected():
    # a mean near zero: ~200 seeds would be needed, beyond stats.seeds_cap (default 50)
    d = [0.5, -0.4, 0.6, -0.3, 0.2, -0.1]
    c = claim(a={"scheme": "a"}, b={"scheme": "b"})
    row = evaluate(c, tables={"pgc_sim": _pair_table(d)}).iloc[0]
    assert row.verdict == "inconclusive" and np.isnan(row.seeds_needed)
    assert "no effect detected at this size" in row.reason and "cap of 50" in row.reason
    wide = scorecard.evaluate_claims([c], {"pgc_sim": _pair_table(d)}, {**STATS, "seeds_cap": 1000}).iloc[0]
    assert 150 < wide.seeds_needed < 1000 and "no effect detected" not in wide.reason


def test_wholly_outside_interval_is_not_reproduced():
    # every seed in the wrong direction, tight: the interval excludes the claimed a < b
    tab = pd.DataFrame(
        [{"scheme": "b", "seed": i, "time_per_step": 1.0} for i in range(4)]
        + [{"scheme": "a", "seed": i, "time_per_step": 1.2 + 0.01 * i} for i in range(4)]
    )
    row = evaluate(claim(a={"scheme": "a"}, b={"scheme": "b"}), tables={"pgc_sim": tab}).iloc[0]
    assert row.ci_low > 0 and row.verdict == "not reproduced" and "excludes the claimed effect" in row.reason
    assert np.isnan(row.seeds_needed)
    # and with a margin: a - b < -0.1 is excluded by an interval wholly above -0.1, not by one that crosses it
    near = tab.assign(time_per_step=np.where(tab.scheme == "a", 0.95 + 0.01 * tab.seed, 1.0))
    row = evaluate(claim(a={"scheme": "a"}, b={"scheme": "b"}, margin=0.1, threshold="ours"),
                   tables={"pgc_sim": near}).iloc[0]
    assert row.ci_low > -0.1 and row.verdict == "not reproduced"
    cross = tab.assign(time_per_step=np.where(tab.scheme == "a", [0.85, 0.97, 0.88, 0.99] * 2, 1.0))
    row = evaluate(claim(a={"scheme": "a"}, b={"scheme": "b"}, margin=0.1, threshold="ours"),
                   tables={"pgc_sim": cross}).iloc[0]
    assert row.ci_low < -0.1 < row.ci_high and row.verdict == "inconclusive"


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
    # the ratio of the means, with the test's own interval of a - b on the ratio scale
    assert row.estimate == pytest.approx(np.mean(pgc) / np.mean(gc))
    d = stats.t_interval(pgc - gc, 0.95)
    assert (row.ci_low, row.ci_high) == pytest.approx((1 + d.low / gc.mean(), 1 + d.high / gc.mean()))
    assert row.verdict == "reproduced"
    assert row.ci_high < 1.3  # non-inferior at a 30 % relative margin: the shown interval says so too
    worse = dict(c, a={"scheme": "gc", "s": 2}, b={"scheme": "pgc", "s": 2}, margin=0.05)
    row = evaluate(worse).iloc[0]
    assert row.verdict == "not reproduced" and "beyond" in row.reason


def test_a_ratio_row_shows_the_interval_its_verdict_reads():
    """A row whose per-seed ratios scatter (a throughput benchmark on a shared machine): the mean
    of a/b with its t interval reached past the claimed 1.38 while the test on a - b excluded it,
    so the row read "1.01 [0.63, 1.39], not reproduced".  The shown interval is the tested one."""
    bp = np.array([1700.0, 2560.0, 2380.0])
    rc = np.array([2030.0, 2390.0, 2160.0])  # a/b = 1.19, 0.93, 0.91
    tab = pd.DataFrame([{"method": m, "seed": i, "tps": v} for m, vals in (("bp", bp), ("rc", rc))
                        for i, v in enumerate(vals)])
    c = claim(table="tp", metric="tps", test="greater", margin=0.38, margin_relative=True, transform="ratio",
              a={"method": "rc"}, b={"method": "bp"})
    row = evaluate(c, tables={"tp": tab}).iloc[0]
    assert stats.t_interval(rc / bp, 0.95).high > 1.38  # what the row used to show
    assert row.verdict == "not reproduced" and row.ci_high <= 1.38
    assert row.estimate == pytest.approx(rc.mean() / bp.mean())


def test_missing_table_and_missing_setting_are_not_run():
    df = evaluate(claim(table="p3_runs"), claim(id="d", a={"scheme": "pgc", "s": 9}), tables={"pgc_sim": _table()})
    assert df.verdict.tolist() == ["not run", "not run"]
    assert "p3_runs" in df.reason[0] and "matches no rows" in df.reason[1]
    assert df.n_seeds.tolist() == [0, 0]


def test_single_seed_is_inconclusive():
    one = _table()[lambda t: t.seed == 0]
    row = evaluate(claim(), tables={"pgc_sim": one}).iloc[0]
    assert (row.verdict, row.n_seeds) == ("inconclusive", 1)
    assert row.reason.startswith("n < 2: one seed (n = 1)") and "stats.extra_seeds" in row.reason


@pytest.mark.parametrize(
    ("kw", "key"),
    [
        ({"tset": "less"}, "tset"),
        ({"test": "smaller"}, "test"),
        ({"paper": "P 9"}, "paper"),  # an unregistered one (P9): the config check (test_registry)
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
    assert "| id | verdict | ours (95 % t CI) | statement |\n|---|---|---|---|\n" in text  # unpadded
    assert "## Each claim" in text and "- why: table 'p3_runs' not available" in text  # a paper's page
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


def test_holm_inconclusive_row_gets_its_seed_count_at_the_adjusted_level():
    # three claims of one paper: one whose raw p (~0.026) passes 0.05 and two null ones.  The
    # weak one has the smallest p, so Holm judges it at 0.05 / 3: inconclusive, and its seed
    # count must be the one at that level, not at the raw 0.05.
    from scipy.stats import norm

    d_weak = np.array([0.1, 0.35, -0.05, 0.3, 0.2, 0.05])
    d_null = np.array([0.1, -0.1, 0.2, -0.2, 0.05, -0.04])
    tabs = {"w": _pair_table(d_weak), "n1": _pair_table(d_null), "n2": _pair_table(-d_null)}
    claims = [claim(id=f"x.{t}", table=t, test="greater", a={"scheme": "a"}, b={"scheme": "b"}) for t in tabs]
    df = scorecard.evaluate_claims(claims, tabs, STATS).set_index("id")
    w = df.loc["x.w"]
    assert w.p_value < 0.05 <= w.p_holm
    assert w.verdict == "inconclusive" and "Holm-adjusted" in w.reason
    level = scorecard.holm_levels(df.p_value.to_numpy(float), 0.05)[list(df.index).index("x.w")]
    assert level == pytest.approx(0.05 / 3)
    z = ((norm.ppf(1 - level) + norm.ppf(0.8)) / (d_weak.mean() / d_weak.std(ddof=1))) ** 2
    raw = scorecard.seeds_needed(d_weak, 0.05)
    assert z <= w.seeds_needed <= z + 4 and w.seeds_needed > raw
    assert "Holm: 0.05 / 3" in w.reason and "toward reproduced" in w.reason


def test_holm_levels_follow_the_step_down():
    levels = scorecard.holm_levels([0.04, 0.001, 0.02], 0.05)
    assert levels.tolist() == pytest.approx([0.05, 0.05 / 3, 0.05 / 2])


def test_by_construction_relabels_only_rows_whose_data_show_it():
    holds = claim(id="h", by_construction="pgc does fewer units on the clock")
    broken = claim(id="b", by_construction="gc does fewer units", a={"scheme": "gc", "s": 2},
                   b={"scheme": "pgc", "s": 2})
    df = evaluate(holds, broken).set_index("id")
    assert df.loc["h", "verdict"] == "by construction"
    # a construction the data contradict is a finding: the row keeps its verdict and says so
    assert df.loc["b", "verdict"] == "not reproduced"
    assert df.loc["b", "reason"].startswith("should hold by construction (gc does fewer units)")


def test_one_deterministic_value_is_checked_exactly():
    # arithmetic rows (one value, no seeds): the inequality is checked on the value itself
    tab = pd.DataFrame([{"model": "m", "seed": 0, "ratio": 21.3}])
    base = dict(table="bytes", metric="ratio", test="greater", a={"model": "m"}, b=..., threshold="t",
                by_construction="arithmetic on shapes")
    df = scorecard.evaluate_claims([claim(id="ok", value=20, **base), claim(id="no", value=25, **base)],
                                   {"bytes": tab}, STATS).set_index("id")
    assert df.loc["ok", "verdict"] == "by construction" and "21.3 − " not in df.loc["ok", "reason"]
    assert "checked exactly" in df.loc["ok", "reason"] and df.loc["ok", "estimate"] == pytest.approx(21.3)
    assert df.loc["no", "verdict"] == "not reproduced" and "fails" in df.loc["no", "reason"]
    # an equality of one bit-for-bit pair (two modes of one computation, seed 0)
    pair = pd.DataFrame([{"mode": "par", "seed": 0, "loss": 1.25}, {"mode": "seq", "seed": 0, "loss": 1.25}])
    eq = dict(table="p", metric="loss", test="equivalent", a={"mode": "par"}, b={"mode": "seq"}, margin=0.001,
              threshold="t", by_construction="lock-step")
    row = scorecard.evaluate_claims([claim(id="eq", **eq)], {"p": pair}, STATS).iloc[0]
    assert row.verdict == "by construction" and "|a − b| = 0 < 0.001 holds" in row.reason
    off = pair.assign(loss=[1.25, 1.3])
    row = scorecard.evaluate_claims([claim(id="eq", **eq)], {"p": off}, STATS).iloc[0]
    assert row.verdict == "not reproduced"


def test_not_testable_rows_are_listed_with_their_reason():
    c = claim(id="nt", not_testable="the source gives no setting")
    df = evaluate(c, claim(id="t"), claim(id="ntf", expected="fails", not_testable="no setting either"))
    assert df.set_index("id").loc["ntf", "verdict"] == "not testable here"
    row = df.set_index("id").loc["nt"]
    assert row.verdict == "not testable here" and row.reason == "not testable here: the source gives no setting"
    assert np.isnan(row.p_holm) and np.isnan(row.seeds_needed)
    with pytest.raises(scorecard.ClaimError, match="bad key 'not_testable'"):
        scorecard.validate_claims([claim(not_testable=True)])


def test_the_shipped_claims_evaluate_without_tables():
    from pathlib import Path

    claims, conds = scorecard.load_claims_file(Path(__file__).resolve().parents[1] / "config/claims.yaml")
    df = scorecard.evaluate_claims(claims, {}, STATS, conds)
    listed = {c["id"] for c in claims if c.get("not_testable")}
    assert set(df.loc[df.id.isin(listed), "verdict"]) == {"not testable here"}
    reported = {c["id"] for c in claims if c.get("report_only")}  # beside a test: no verdict, even unrun
    assert set(df.loc[df.id.isin(reported), "verdict"]) == {scorecard.REPORTED}
    assert df.loc[df.id.isin(reported), "reason"].str.contains("nothing to report").all()
    assert set(df.loc[~df.id.isin(listed | reported), "verdict"]) == {"not run"}
    assert len(listed) >= 5 and len(reported) >= 2


def test_tied_seeds_on_the_bound_decide_against_a_strict_claim():
    # every seed the same for both schemes: d = [0, 0], the interval [0, 0] is that value and
    # excludes "a < b"; strictly beyond the bound (d = [1, 1]) likewise
    tied = _pair_table([0.0, 0.0])
    row = evaluate(claim(a={"scheme": "a"}, b={"scheme": "b"}), tables={"pgc_sim": tied}).iloc[0]
    assert row.verdict == "not reproduced" and "every seed gives the same difference" in row.reason
    beyond = _pair_table([1.0, 1.0])
    row = evaluate(claim(a={"scheme": "a"}, b={"scheme": "b"}), tables={"pgc_sim": beyond}).iloc[0]
    assert row.verdict == "not reproduced"


def test_a_measured_row_names_the_runs_it_read_under_load():
    """A timed run that saw a load above its cores is named in its measured row's reason; the
    same table without a loaded run, or a row not marked measured, says nothing of load."""
    t = _table()
    t["loaded"] = False
    pick = (t["scheme"] == "pgc") & (t["s"] == 2) & (t["seed"].isin([1, 4]))
    t.loc[pick, "loaded"] = True
    row = evaluate(claim(measured=True), tables={"pgc_sim": t}).iloc[0]
    assert "measured on a shared machine: in 2 of 16 runs" in row["reason"]
    assert "shared machine" not in evaluate(claim(), tables={"pgc_sim": t}).iloc[0]["reason"]
    t["loaded"] = False
    assert "shared machine" not in evaluate(claim(measured=True), tables={"pgc_sim": t}).iloc[0]["reason"]
