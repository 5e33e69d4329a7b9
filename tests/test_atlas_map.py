"""The atlas map ranks as the query does: a technique whose steps to target are unknown at a
cell's distance (basis none) is listed apart, never a cell's winner; a projected interval
carries the query's MFU and link-fraction ranges; a published ratio of one run says so."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import yaml

from conftest import ROOT

from distlab.atlas.grid import projected_cells, winners
from distlab.atlas.outputs import crossovers
from distlab.atlas.projection import LINK_RANGE, MFU_RANGE, ClockSettings, measured_flops_per_s, pattern_of, \
    step_interval

PACK = ROOT / "paper/atlas/query_pack.json.gz"
BWS = np.geomspace(1.25e6, 5e10, 5)  # 10 Mbit/s .. 400 Gbit/s
LAT = 1e-3

pytestmark = pytest.mark.skipif(not PACK.is_file(), reason=f"{PACK.relative_to(ROOT)} missing: no atlas pack "
                                                              "in this results snapshot")


@pytest.fixture(scope="module")
def shipped():
    """(recordings, atlas section, the map's clock) of the shipped pack."""
    from distlab.atlas.profile import apply as apply_profile
    from distlab.atlas.query import check_complete

    a = yaml.safe_load((ROOT / "config/config.yaml").read_text())["atlas"]
    recs = apply_profile(check_complete(a, PACK), a)
    return recs, a, ClockSettings(flops_per_s=measured_flops_per_s(recs), tokens=256, link_range=LINK_RANGE)


def _cells(recs, a, clock, P, N, s=1):
    df = projected_cells(recs, float(a["target_loss"]), P, N, s, clock, np.full(BWS.size, LAT), BWS,
                         {"model": "none"})
    return df.assign(straggler="none")


def test_a_technique_with_no_ratio_is_never_a_cells_winner(shipped):
    """1e9 parameters on 8 workers, 4e3x beyond the runs: only DDP (the reference) and DeMo (a
    published ratio) have steps to target; DiLoCo, cheaper per step at 10 Mbit/s, is listed apart."""
    recs, a, clock = shipped
    df = _cells(recs, a, clock, 1e9, 8)
    none = df[df["basis"] == "none"]
    assert len(none) >= 5 and not none["ranked"].any()
    assert none["time_s"].isna().all() and none["per_step_s"].gt(0).all()
    w = winners(df)
    assert len(w) == BWS.size
    assert set(w["winner"]) <= set(df.loc[df["ranked"], "technique"])
    assert set(w["basis"]) <= {"reference", "measured", "fit", "user", "published"}
    assert not set(w["runner_up"].dropna()) & set(none["technique"])
    slow = df[df["bandwidth_Bps"] == BWS[0]].set_index("technique")
    assert slow.loc["diloco", "per_step_s"] < slow.loc[w.iloc[0]["winner"], "per_step_s"]
    # every one apart is named in every cell, with the step ratio under which it matches the winner
    for _, r in w.iterrows():
        cell = df[df["bandwidth_Bps"] == r["bandwidth_Bps"]].set_index("technique")
        for t in none["technique"].unique():
            need = r["time_s"] / (cell.loc[t, "per_step_s"] * cell.loc[t, "ddp_steps"])
            assert f"{t} (matches {r['winner']} if steps/DDP <= {need:.3g})" in r["apart"]
    # no crossover is drawn for a technique without a time to target
    assert crossovers(df, "diloco", "ddp").empty


def test_a_cell_where_only_ddp_has_a_ratio_is_ddps_with_the_others_apart(shipped):
    recs, a, clock = shipped
    recs = [r for r in recs if r.technique != "demo"]  # no published ratio left at this distance
    df = _cells(recs, a, clock, 1e9, 8)
    assert set(df.loc[df["ranked"], "technique"]) == {"ddp"}
    w = winners(df)
    assert list(w["winner"]) == ["ddp"] * BWS.size
    assert w["runner_up"].isna().all() and not w["tie"].any()
    assert (w["steps_ratio"] == "1 exact").all()
    others = sorted(set(df["technique"]) - {"ddp"})
    for apart in w["apart"]:
        assert sorted(x.split(" (")[0] for x in apart.split("; ")) == others


def test_a_projected_interval_carries_the_querys_ranges(shipped):
    """The map's time per step at its clock's corners is the query's step_interval, bandwidth by
    bandwidth; the link's range alone widens it (an achieved rate: MFU exact), an MFU range widens
    it further; DeMo's published ratio of one run is printed as such, not as [1, 1]."""
    recs, a, clock = shipped
    df = _cells(recs, a, clock, 1e9, 8)
    ddp = df[df["technique"] == "ddp"].reset_index(drop=True)
    pat = pattern_of(recs, "ddp", 8)
    for i, bw in enumerate(BWS):
        lo, hi = step_interval(pat, 1e9, 8, 1, clock, LAT, bw, {"model": "none"})
        assert (ddp.loc[i, "per_step_lo_s"], ddp.loc[i, "per_step_hi_s"]) == pytest.approx((lo, hi))
    assert (ddp["hi_s"] > ddp["lo_s"]).all() and (ddp["lo_s"] == ddp["time_s"]).all()
    wide = _cells(recs, a, ClockSettings(flops_per_s=clock.flops_per_s, tokens=256, mfu=MFU_RANGE[1],
                                         mfu_range=MFU_RANGE, link_range=LINK_RANGE), 1e9, 8)
    wddp = wide[wide["technique"] == "ddp"].reset_index(drop=True)
    assert (wddp["hi_s"] / wddp["lo_s"] > ddp["hi_s"] / ddp["lo_s"]).all()
    demo = winners(df)
    demo = demo[demo["winner"] == "demo"]
    assert len(demo) and (demo["steps_ratio"] == "1 (one run)").all()
    assert (demo["hi_s"] > demo["lo_s"]).all()


def test_winners_on_constructed_cells():
    """A fast technique without a ratio never wins; the winner's runner-up is ranked; the tie reads
    the runner-up against the winner at the same clock corner."""
    base = {"n_params": 1e9, "N": 8, "straggler": "none", "bandwidth_Bps": 1e6, "latency_s": 1e-3,
            "valid": True, "label": "extrapolated", "ddp_steps": 100.0}

    def row(t, per, ratio, basis, lo=None, hi=None):
        ranked = basis != "none"
        r = ratio if ranked else np.nan
        return {**base, "technique": t, "per_step_s": per, "per_step_lo_s": per, "per_step_hi_s": 2 * per,
                "ratio": r, "ratio_lo": lo if lo else r, "ratio_hi": hi if hi else r, "basis": basis,
                "ranked": ranked, "ratio_spread": "95 % prediction interval" if ranked else "none",
                "time_s": per * r * 100, "lo_s": per * (lo or r) * 100, "hi_s": 2 * per * (hi or r) * 100}

    cells = pd.DataFrame([row("ddp", 1.0, 1.0, "reference"), row("diloco", 0.1, 1.0, "none"),
                          row("demo", 0.98, 1.2, "fit", 1.05, 1.3)])
    w = winners(cells).iloc[0]
    assert w["winner"] == "ddp" and w["runner_up"] == "demo" and w["basis"] == "reference"
    assert not w["tie"]  # 0.98 x 1.05 > 1.0 x 1.0 at both corners
    assert w["apart"] == "diloco (matches ddp if steps/DDP <= 10)"
    cells.loc[2, "ratio_lo"] = 1.0  # now demo can reach DDP's time at the same corner
    assert winners(cells).iloc[0]["tie"]


def test_the_colours_follow_the_catalogues_plot_order():
    from distlab.atlas.figures import COLORS, PALETTE
    from distlab.techniques.catalogue import TECHNIQUES

    assert len(TECHNIQUES) <= len(PALETTE)  # one colour each, none shared
    assert list(COLORS) == list(TECHNIQUES)
    assert [COLORS[t] for t in TECHNIQUES] == PALETTE[:len(TECHNIQUES)]
    assert len({tuple(np.atleast_1d(c)) for c in COLORS.values()}) == len(TECHNIQUES)


def test_the_map_figure_marks_the_cells_with_techniques_apart(shipped, tmp_path, monkeypatch):
    """The size map: an extrapolated cell whose techniques without a ratio are listed apart carries a
    dot, keyed once; the simulated cells (every technique's steps measured) carry none."""
    from distlab.atlas import figures
    from distlab.atlas.grid import simulated_cells

    recs, a, clock = shipped
    grid = [r for r in recs if not r.trend]
    P, N = max((r.n_params, r.n) for r in grid if r.n == max(x.n for x in grid))
    sim = simulated_cells([r for r in grid if (r.n_params, r.n) == (P, N)], float(a["target_loss"]), BWS, [LAT],
                          {"none": {"model": "none"}})
    far = _cells(recs, a, clock, 1e9, N)
    win = winners(pd.concat([sim, far], ignore_index=True))
    assert not win.loc[win["label"] == "simulated", "apart"].astype(bool).any()
    assert win.loc[win["label"] == "extrapolated", "apart"].astype(bool).all()
    win.to_csv(tmp_path / "winners.csv", index=False)
    saved = {}
    monkeypatch.setattr(figures.plots, "save", lambda fig, out: saved.__setitem__(str(out), fig))
    figures.winner_maps(tmp_path / "winners.csv", ["none"], tmp_path / "strag.png", tmp_path / "size.png")
    dots = [ln for ln in saved[str(tmp_path / "size.png")].axes[0].lines if ln.get_marker() == "o"]
    assert len(dots) == BWS.size  # one per extrapolated cell
    labels = [t.get_text() for t in saved[str(tmp_path / "size.png")].axes[0].get_legend().get_texts()]
    assert sum(x.startswith("dot:") for x in labels) == 1
    strag = saved[str(tmp_path / "strag.png")].axes[0]
    assert not [ln for ln in strag.lines if ln.get_marker() == "o"]


def test_the_spec_rules_read_the_catalogue():
    """check_spec: N divisible by s + 1 for every code whose workers form groups of s + 1 (the
    catalogue's in_groups), steps a multiple of H for every technique with DiLoCo's options."""
    from distlab.atlas.spec import check_spec, in_groups, option_sections
    from distlab.atlas.workflow import run_specs
    from distlab.config.specs import SpecError
    from distlab.techniques.catalogue import TECHNIQUES

    a = yaml.safe_load((ROOT / "config/config.yaml").read_text())["atlas"]
    grouped = [t for t in TECHNIQUES if in_groups(t)]
    assert set(grouped) == {"gc-fr", "pgc-fr"}
    for t in TECHNIQUES:
        spec = run_specs({**a, "compute": "measured"}, t, 1.0, None)[0][1]
        check_spec(spec)
        odd = {**spec, "n_workers": 5, "s": 1}
        if in_groups(t):
            with pytest.raises(SpecError, match="divisible by s"):
                check_spec(odd)
        else:
            check_spec(odd)
        if "diloco" in option_sections(t):
            with pytest.raises(SpecError, match="multiple of H"):
                check_spec({**spec, "diloco": {**spec.get("diloco", {}), "H": spec["steps"] + 1}})


def test_the_crossover_pairs_are_the_catalogues_techniques():
    from distlab.atlas.outputs import CROSSOVER_PAIRS
    from distlab.techniques.catalogue import TECHNIQUES

    assert CROSSOVER_PAIRS and all(a in TECHNIQUES and b in TECHNIQUES and a != b for a, b in CROSSOVER_PAIRS)


def test_the_winner_maps_label_round_bit_rates_parameter_counts_and_straggler_models_as_readers_write_them():
    """The maps' axes: ticks at the powers of ten of the bit rate placed on the cells' log grid (not
    the cells' own 0.0909 Gbit/s), parameter counts in words of three figures, straggler models by
    their definition (not the config's keys)."""
    from distlab.atlas import figures

    bws = np.geomspace(1.25e6, 5.0e10, 25)  # bytes a second: 10 Mbit/s .. 400 Gbit/s
    ticks, names = figures.decade_ticks(bws)
    assert names == ["10 Mbit/s", "100 Mbit/s", "1 Gbit/s", "10 Gbit/s", "100 Gbit/s"]
    assert ticks[0] == pytest.approx(0.5) and all(a < b for a, b in zip(ticks, ticks[1:]))
    step = 24 / np.log10(4e11 / 1e7)  # cells a decade
    assert np.diff(ticks) == pytest.approx(step)
    assert [figures.param_count(p) for p in (7920, 22016, 1e6, 1.234e8, 1e9)] == ["7,920", "22,000", "1 M", "123 M", "1 B"]
    label = figures.straggler_label
    assert label("exp_5ms", {"model": "exponential", "mean": 0.005}) == "exponential, mean 5 ms"
    assert label("p", {"model": "pareto", "mean": 0.01, "shape": 1.5}) == "pareto, mean 10 ms, shape 1.5"
    assert label("slow", {"model": "persistent", "slowdown": 4.0}) == "one worker 4x slower"
    assert label("dead_one", {"model": "dead"}) == "one worker dead"
    assert label("odd", {"model": "unknown"}) == "odd"
