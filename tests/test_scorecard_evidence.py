"""Verdicts that rest on evidence, on crafted tables with known truth.

* a row the clock or the arithmetic fixes (``by_construction``, ``model_prediction``) never
  enters a Holm family, whatever its p, and a model prediction states the boundary its sweep
  gives;
* a precondition scoped to the cell a claim compares ignores the other cells;
* a row whose n grew past its planned n is refused;
* an "about X" row (``test: band``) passes at exactly X and fails outside the band;
* a row whose verdict flips across three reruns reads "unstable here".
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from distlab.scoring import scorecard, stability, stats

STATS = {"alpha": 0.05, "bootstrap": {"n_resamples": 2000, "seed": 0, "confidence": 0.95}}


def _claim(cid: str, **kw):
    base = {"id": cid, "paper": "P1", "source": "test", "statement": cid, "table": "t",
            "metric": "time_per_step", "test": "less", "a": {"scheme": "fast"}, "b": {"scheme": "slow"}}
    base.update(kw)
    return base


def _runs(gaps: dict[str, float], n: int = 6, noise: float = 0.05, seed: int = 0) -> pd.DataFrame:
    """scheme 'slow' at 2.0, and every other scheme below it by its gap, per seed with noise."""
    rng = np.random.default_rng(seed)
    rows = []
    for s in range(n):
        base = 2.0 + rng.normal(0, 0.3)
        rows.append({"scheme": "slow", "seed": s, "time_per_step": base})
        for name, gap in gaps.items():
            rows.append({"scheme": name, "seed": s, "time_per_step": base - gap + rng.normal(0, noise)})
    return pd.DataFrame(rows)


# ------------------------------------------------------------------ item 1: not tests, not in Holm


def _sweep() -> pd.DataFrame:
    """A clock sweep over c/mu (3 seeds): gc = 3x + 1, dgd = x + 2.5, so gc > dgd iff x > 0.75."""
    rows = []
    for x in (0.1, 0.25, 0.5, 1.0, 2.0, 4.0):
        for seed in range(3):
            jitter = 0.01 * seed
            rows.append({"c_over_mu": x, "scheme": "gc", "s": 2, "seed": seed, "time_per_step": 3 * x + 1 + jitter})
            rows.append({"c_over_mu": x, "scheme": "dgd", "s": 2, "seed": seed, "time_per_step": x + 2.5 + jitter})
    return pd.DataFrame(rows)


MODEL = {"reason": "gc does s+1 units and waits for n-s; dgd 1 unit, all n", "x": "c_over_mu", "table": "sweep",
         "a": {"scheme": "gc", "s": 2}, "b": {"scheme": "dgd", "s": 2}}


def test_a_clock_fixed_row_never_enters_a_holm_family():
    runs = _runs({"fast": 0.3, "fast2": 0.02, "clock": 0.5, "twin": 0.4}, n=8)
    tested = _claim("tested", a={"scheme": "fast2"})
    claims = [
        _claim("tested0"),
        tested,
        _claim("clock", a={"scheme": "clock"}, by_construction="one unit less on the clock"),
        # a model prediction with its own runs: tested, then labelled; never in the family
        _claim("model", a={"scheme": "twin"}, test="less",
               model_prediction={**MODEL, "a": {"scheme": "dgd", "s": 2}, "b": {"scheme": "gc", "s": 2}, "at": 2.0}),
        # a model prediction that is the map itself: no test at all
        _claim("map", table="sweep", test="greater", a={"scheme": "gc", "s": 2}, b={"scheme": "dgd", "s": 2},
               model_prediction={"reason": MODEL["reason"], "x": "c_over_mu"}),
    ]
    df = scorecard.evaluate_claims(claims, {"t": runs, "sweep": _sweep()}, STATS).set_index("id")
    assert df.loc["clock", "verdict"] == "by construction" and np.isnan(df.loc["clock", "p_holm"])
    assert df.loc["model", "verdict"] == "by construction" and np.isnan(df.loc["model", "p_holm"])
    assert df.loc["map", "verdict"] == "by construction" and np.isnan(df.loc["map", "p_value"])
    # the family is the two tested rows only: Holm multiplies the smaller p by 2, not by 4 or 5
    p = df.loc[["tested0", "tested"], "p_value"].to_numpy()
    np.testing.assert_allclose(df.loc[["tested0", "tested"], "p_holm"].to_numpy(), stats.holm(p))
    assert df.loc["tested0", "p_holm"] == pytest.approx(min(1.0, 2 * p.min()))


def test_a_by_construction_row_reads_so_whatever_its_p_but_not_against_its_data():
    runs = _runs({"same": 0.0, "worse": -1.0}, n=6, noise=0.2)
    df = scorecard.evaluate_claims([
        _claim("noisy", a={"scheme": "same"}, by_construction="the clock charges the same"),
        _claim("broken", a={"scheme": "worse"}, by_construction="the clock charges less"),
    ], {"t": runs}, STATS).set_index("id")
    assert df.loc["noisy", "verdict"] == "by construction" and "(was: inconclusive)" in df.loc["noisy", "reason"]
    assert df.loc["broken", "verdict"] == "not reproduced"
    assert df.loc["broken", "reason"].startswith("should hold by construction")


def test_a_model_prediction_states_the_boundary_its_sweep_gives():
    claims = [_claim("map", table="sweep", test="greater", a={"scheme": "gc", "s": 2}, b={"scheme": "dgd", "s": 2},
                     model_prediction={"reason": MODEL["reason"], "x": "c_over_mu"})]
    row = scorecard.evaluate_claims(claims, {"sweep": _sweep()}, STATS).iloc[0]
    # gc - dgd = 2x - 1.5 is linear, so the interpolated crossing is exact: 0.75
    boundary = "holds iff c_over_mu ≥ 0.75 (on the model's sweep 0.1–4: interpolated between its points 0.5 and 1)"
    assert boundary in row.reason and row.verdict == "by construction"
    assert "tests nothing about the paper" in row.reason


@pytest.mark.parametrize(("at", "gap", "says", "verdict"), [
    (0.5, -0.5, "the model fails", "by construction"),       # predicted fails, data agree (gc faster)
    (2.0, 0.5, "the model holds", "by construction"),        # predicted holds, data agree
    (2.0, -0.5, "the model holds, but the data give", "not reproduced"),  # data against their clock
])
def test_a_model_prediction_with_runs_checks_the_data_against_the_prediction(at, gap, says, verdict):
    runs = _runs({"gc": -gap}, n=6, noise=0.02).replace({"scheme": {"slow": "dgd"}})
    claim = _claim("row", test="greater", a={"scheme": "gc"}, b={"scheme": "dgd"},
                   model_prediction={**MODEL, "at": at})
    row = scorecard.evaluate_claims([claim], {"t": runs, "sweep": _sweep()}, STATS).iloc[0]
    assert says in row.reason and "holds iff c_over_mu ≥ 0.75" in row.reason
    assert row.verdict == verdict and np.isnan(row.p_holm)


def test_a_model_prediction_must_be_an_ordering_and_not_also_by_construction():
    with pytest.raises(scorecard.ClaimError, match="model_prediction"):
        scorecard.validate_claims([_claim("x", test="equivalent", margin=0.1, threshold="t",
                                          model_prediction={"reason": "r", "x": "c"})])
    with pytest.raises(scorecard.ClaimError, match="model_prediction"):
        scorecard.validate_claims([_claim("x", by_construction="r", model_prediction={"reason": "r", "x": "c"})])


# ------------------------------------------------------------------ item 2: scoped preconditions


def _cells() -> pd.DataFrame:
    """Two cells: in the large one every DiLoCo run reached the target, in the small one none did."""
    rows = []
    for size, reached in (("large", 1), ("small", 0)):
        for seed in range(5):
            rows.append({"technique": "diloco", "size": size, "seed": seed, "reached": reached,
                         "time": 10.0 - 2 + 0.1 * seed})
            rows.append({"technique": "ddp", "size": size, "seed": seed, "reached": 1, "time": 10.0 + 0.13 * seed})
    return pd.DataFrame(rows)


COND = {"diloco_reached": {"kind": "other", "statement": "DiLoCo reached the target on every run",
                           "table": "cells", "metric": "reached", "a": {"technique": "diloco"},
                           "test": "each_at_least", "value": 1, "threshold": "1 = reached"}}


def _cell_claim(pre):
    return _claim("beats", paper="atlas", table="cells", metric="time", a={"technique": "diloco", "size": "large"},
                  b={"technique": "ddp", "size": "large"}, preconditions=pre)


def test_a_precondition_scoped_to_a_cell_ignores_other_cells():
    wide = scorecard.evaluate_claims([_cell_claim(["diloco_reached"])], {"cells": _cells()}, STATS, COND).iloc[0]
    assert wide.verdict == "not testable here" and "over 10 runs = 0" in wide.reason
    scoped = scorecard.evaluate_claims(
        [_cell_claim([{"name": "diloco_reached", "where": {"size": "large"}}])], {"cells": _cells()}, STATS,
        COND).iloc[0]
    assert scoped.verdict == "reproduced"
    assert "diloco_reached[size=large]: met (min reached over 5 runs = 1" in scoped.preconditions
    # and the same scope on the other cell blocks it: the scope reads its own cell's runs
    other = scorecard.evaluate_claims(
        [_cell_claim([{"name": "diloco_reached", "where": {"size": "small"}}])], {"cells": _cells()}, STATS,
        COND).iloc[0]
    assert other.verdict == "not testable here"


def test_a_scoped_precondition_is_written_by_main_scorecard(tmp_path):
    import yaml

    claims = tmp_path / "claims.yaml"
    claims.write_text(yaml.safe_dump({"conditions": COND, "claims": [
        _cell_claim([{"name": "diloco_reached", "where": {"size": "large"}}])]}))
    _cells().to_csv(tmp_path / "cells.csv", index=False)
    df = scorecard.main_scorecard(claims, {"cells": tmp_path / "cells.csv"}, STATS, tmp_path / "s.md",
                                  tmp_path / "s.csv", conditions_out=tmp_path / "c.csv")
    assert df.iloc[0].verdict == "reproduced"
    assert "diloco_reached[size=large]" in set(pd.read_csv(tmp_path / "c.csv")["name"])


def test_a_bad_scope_names_the_key():
    with pytest.raises(scorecard.ClaimError, match="preconditions"):
        scorecard.validate_claims([_cell_claim([{"name": "diloco_reached"}])], COND)
    with pytest.raises(scorecard.ClaimError, match="no condition named 'nope'"):
        scorecard.validate_claims([_cell_claim([{"name": "nope", "where": {"size": "large"}}])], COND)


# ------------------------------------------------------------------ item 4: the planned n


def test_a_seed_count_grown_after_the_fact_is_refused():
    runs = _runs({"fast": 0.3}, n=8)
    df = scorecard.evaluate_claims([_claim("grown", planned_n=5), _claim("planned", planned_n=8),
                                    _claim("short", planned_n=10)], {"t": runs}, STATS).set_index("id")
    assert df.loc["grown", "verdict"] == "not testable here"
    assert df.loc["grown", "reason"].startswith("refused: n = 8 seeds or repeats, more than the planned 5")
    assert "would have been: reproduced" in df.loc["grown", "reason"] and np.isnan(df.loc["grown", "p_holm"])
    assert df.loc["planned", "verdict"] == "reproduced" and df.loc["planned", "planned_n"] == 8
    assert df.loc["short", "verdict"] == "reproduced" and "n = 8 of the planned 10" in df.loc["short", "reason"]
    # the refused row is out of the family: the other two form it
    assert df["p_holm"].notna().sum() == 2


def test_a_planned_n_must_be_a_count():
    for bad in (1, 2.5, True, "5"):
        with pytest.raises(scorecard.ClaimError, match="planned_n"):
            scorecard.validate_claims([_claim("x", planned_n=bad)])


# ------------------------------------------------------------------ item 5: "about X" is a band


def _ratio_runs(ratio: float, n: int = 12, noise: float = 0.01) -> pd.DataFrame:
    rng = np.random.default_rng(3)
    rows = []
    for s in range(n):
        b = 100.0 * (1 + rng.normal(0, 0.2))
        rows.append({"method": "bp", "seed": s, "tokens_per_s": b})
        rows.append({"method": "rc", "seed": s, "tokens_per_s": b * ratio * np.exp(rng.normal(0, noise))})
    return pd.DataFrame(rows)


BAND = {"test": "band", "band": [1.38 / 1.1, 1.38 * 1.1], "threshold": "test band", "table": "t",
        "metric": "tokens_per_s", "a": {"method": "rc"}, "b": {"method": "bp"}}


@pytest.mark.parametrize(("ratio", "verdict"), [(1.38, "reproduced"), (1.2, "not reproduced"),
                                                (1.6, "not reproduced"), (2.5, "not reproduced")])
def test_a_band_row_passes_at_exactly_x_and_fails_outside(ratio, verdict):
    row = scorecard.evaluate_claims([_claim("about", **BAND)], {"t": _ratio_runs(ratio)}, STATS).iloc[0]
    assert row.verdict == verdict, row.reason
    assert row.estimate == pytest.approx(ratio, rel=0.01)  # the geometric-mean ratio, on the ratio scale
    assert row.ci_low <= row.estimate <= row.ci_high


def test_a_more_than_x_row_would_pass_at_x_only_by_chance_a_band_does_not():
    """The old reading ('a/b > 1.38', a relative margin) cannot reproduce a true 1.38; the band can."""
    runs = _ratio_runs(1.38)
    more = _claim("more", test="greater", table="t", metric="tokens_per_s", a={"method": "rc"}, b={"method": "bp"},
                  margin=0.38, margin_relative=True, transform="ratio", threshold="t")
    df = scorecard.evaluate_claims([more, _claim("about", **BAND)], {"t": runs}, STATS).set_index("id")
    assert df.loc["more", "verdict"] != "reproduced" and df.loc["about", "verdict"] == "reproduced"


def test_a_band_straddling_its_edge_is_inconclusive_with_its_seeds():
    row = scorecard.evaluate_claims([_claim("edge", **BAND)], {"t": _ratio_runs(1.51, n=4, noise=0.05)}, STATS).iloc[0]
    assert row.verdict == "inconclusive" and row.ci_low < 1.38 * 1.1 < row.ci_high


def test_a_band_needs_its_bounds_and_two_settings():
    for kw in ({"band": [1.5, 1.2]}, {"band": [0, 1]}, {"band": None}, {"margin": 0.1}):
        with pytest.raises(scorecard.ClaimError, match="band|margin"):
            scorecard.validate_claims([_claim("x", **{**BAND, **kw})])


# ------------------------------------------------------------------ item 8: k = 3 reruns


def _card(verdicts: dict[str, str]) -> pd.DataFrame:
    return pd.DataFrame({"id": list(verdicts), "paper": "P3", "verdict": list(verdicts.values()),
                         "measured": True, "ours": [f"{len(v)}.0 [1, 2]" for v in verdicts.values()],
                         "reason": "r", "seeds_needed": 4.0})


def test_a_row_that_flips_across_three_reruns_reads_unstable_here():
    runs = [_card({"steady": "reproduced", "flips": "reproduced"}),
            _card({"steady": "reproduced", "flips": "inconclusive"}),
            _card({"steady": "reproduced", "flips": "reproduced"})]
    settled = stability.settle(runs).set_index("id")
    assert settled.loc["steady", "verdict"] == "reproduced"
    assert settled.loc["flips", "verdict"] == "unstable here"
    reason = settled.loc["flips", "reason"]
    assert "not the same in 3 evaluations" in reason
    assert "run 1: reproduced (10.0 [1, 2]); run 2: inconclusive (12.0 [1, 2]); run 3: reproduced" in reason
    assert np.isnan(settled.loc["flips", "seeds_needed"])
    table = stability.compare_runs(runs).set_index("id")
    assert table["flipped"].to_dict() == {"steady": False, "flips": True}
    assert "unstable here" in scorecard.VERDICTS


def test_the_settled_scorecard_carries_the_last_evaluations_estimates():
    """The tables and figures left in paper/ are the last evaluation's, so the settled
    scorecard's estimates are too (a held row keeps its verdict, with the last run's number)."""
    runs = [_card({"steady": "reproduced"}), _card({"steady": "reproduced"})]
    runs[0].loc[0, "ours"], runs[1].loc[0, "ours"] = "1.0 [0.5, 1.5]", "1.2 [0.7, 1.7]"
    settled = stability.settle(runs).set_index("id")
    assert settled.loc["steady", "ours"] == "1.2 [0.7, 1.7]"
    assert settled.loc["steady", "verdict"] == "reproduced" and settled.loc["steady", "spread"] == ""


def test_stability_needs_two_evaluations_at_least():
    with pytest.raises(ValueError, match="at least 2"):
        stability.compare_runs([_card({"a": "reproduced"})])


# ------------------------------------------------------------------ item 3: P1's horizon


def _metrics(final: float, drop_per_step: float, steps: int = 160) -> pd.DataFrame:
    """A run's per-step table: whole-split loss every 10 steps and at the last, falling linearly."""
    step = np.arange(steps)
    full = np.where((step % 10 == 0) | (step == steps - 1), final + drop_per_step * (steps - 1 - step), np.nan)
    return pd.DataFrame({"step": step, "loss": final + 0.1, "step_time": 1.0, "time": step + 1.0, "bytes": 0.0,
                         "train_loss_full": full})


def test_a_run_summary_carries_its_drop_over_the_last_quarter():
    from distlab.results.summarize import summarize_run

    row = summarize_run(_metrics(1.0, 0.01), {"spec": {"scheme": "dgd", "seed": 0}, "clock": "simulated",
                                              "backend": "simulated"})
    # 3/4 of steps 0..159 is step 119.25: the eval step 120, 39 steps before the end
    assert row["train_loss_full_3q"] == pytest.approx(1.0 + 0.01 * 39)
    assert row["late_drop_train_loss_full"] == pytest.approx(0.39)


def _gap_runs(pgc_drop: float) -> pd.DataFrame:
    rng = np.random.default_rng(5)
    rows = []
    for seed in range(5):
        dgd = 0.10 + rng.normal(0, 0.002)
        rows.append({"scheme": "dgd", "seed": seed, "late_drop_train_loss_full": dgd, "final_train_loss_full": 1.0})
        late = dgd + pgc_drop + rng.normal(0, 0.002)
        rows.append({"scheme": "pgc-cr", "seed": seed, "late_drop_train_loss_full": late,
                     "final_train_loss_full": 1.02})
    return pd.DataFrame(rows)


SETTLED = {"gap_settled": {"kind": "horizon", "statement": "the gap moved by less than 0.05 over the last quarter",
                           "table": "t", "metric": "late_drop_train_loss_full", "a": {"scheme": "pgc-cr"},
                           "b": {"scheme": "dgd"}, "test": "equivalent", "margin": 0.05, "threshold": "the margin"}}


@pytest.mark.parametrize(("pgc_drop", "verdict"), [(0.0, "reproduced"), (0.064, "not testable here"),
                                                   (-0.08, "not testable here")])
def test_a_convergence_row_is_tested_only_once_its_gap_has_settled(pgc_drop, verdict):
    claim = _claim("conv", metric="final_train_loss_full", test="noninferior", higher_is_better=False, margin=0.05,
                   threshold="t", a={"scheme": "pgc-cr"}, b={"scheme": "dgd"}, preconditions=["gap_settled"])
    row = scorecard.evaluate_claims([claim], {"t": _gap_runs(pgc_drop)}, STATS, SETTLED).iloc[0]
    assert row.verdict == verdict
    assert "gap_settled: " in row.preconditions and "needs |a − b| < 0.05: TOST p = " in row.preconditions
