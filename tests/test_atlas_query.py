"""The atlas query's contract and its answers: every bad input is one line and exit 2, a partial
atlas is refused naming what is missing, the answer is time per step x a step-efficiency ratio
against DDP with prediction intervals that widen with distance, no answer 100x beyond the runs
without --efficiency, and the sanity an expert checks (DDP at a fast network and a small model,
DDP at a slow network and a large model, ties)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from conftest import ROOT, bin_path, build_test_atlas

from distlab.atlas.efficiency import evidence_distance, fit_log_ratio, parse_efficiency
from distlab.config.specs import SpecError

ENV = {**os.environ, "PATH": bin_path(), "HF_DATASETS_OFFLINE": "1"}
TECHS = ["ddp", "demo", "diloco", "gc-fr"]


def _atlas_section() -> dict:
    """The default atlas's sizes and settings, four techniques, 60 steps (a test-sized atlas)."""
    a = yaml.safe_load((ROOT / "config/config.yaml").read_text())["atlas"]
    a = {**a, "techniques": TECHS, "steps": 60, "eval_every": 10, "seeds": [0, 1, 2]}
    a.pop("headline", None)
    a.pop("trend", None)  # the trend cells' own test: tests/test_atlas_trend.py
    return a


@pytest.fixture(scope="module")
def atlas(tmp_path_factory, pydoc_dir):
    """(runs dir, config path, section): every run the section asks for, the target then set to
    the highest loss every run reaches (so every technique has steps to target on every seed)."""
    root = tmp_path_factory.mktemp("atlasq")
    a = _atlas_section()
    lrs = {"ddp": 0.03, "demo": 0.01, "diloco": 0.03, "gc-fr": 0.03}
    cfg = build_test_atlas(root, a, pydoc_dir, lrs)
    return root / "techniques", cfg, a


def _query(atlas, *args, timeout=300):
    runs, cfg, _ = atlas
    return subprocess.run([sys.executable, "-m", "distlab", "atlas", "query", "--runs", str(runs), "--config", str(cfg),
                           *args], env=ENV, capture_output=True, text=True, timeout=timeout)


def _one_line_exit_2(r, key: str) -> None:
    assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-2000:]
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and key in lines[0] and "Traceback" not in r.stderr, r.stderr


BASE = ["--params", "21984", "--workers", "4", "--bandwidth", "1Gbit/s", "--latency", "1ms"]


# ------------------------------------------------------------------ item 6: the contract

@pytest.mark.parametrize("args,key", [
    (["--flops-per-s", "-1e12"], "--flops-per-s"),
    (["--flops-per-s", "nan"], "--flops-per-s"),
    (["--flops-per-s", "0"], "--flops-per-s"),
    (["--flops-per-s", "inf"], "--flops-per-s"),
    (["--s", "4"], "--s"),
    (["--s", "9"], "--s"),
    (["--s", "-1"], "--s"),
    (["--mfu", "1.5"], "--mfu"),
    (["--mfu", "nan"], "--mfu"),
    (["--tokens", "0"], "--tokens"),
    (["--device", "tpu9"], "--device"),
    (["--dtype", "fp8"], "--dtype"),
    (["--efficiency", "diloco=-2"], "--efficiency"),
    (["--efficiency", "warp=2"], "--efficiency"),
    (["--efficiency", "diloco=nan"], "--efficiency"),
    (["--ddp-steps", "-3"], "--ddp-steps"),
])
def test_every_bad_option_is_one_line_and_exit_2(atlas, args, key):
    _one_line_exit_2(_query(atlas, *BASE, *args), key)


def test_an_unreadable_or_invalid_config_is_one_line_and_exit_2(atlas, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("atlas: [unclosed\n  - : :")
    _one_line_exit_2(_query(atlas, *BASE, "--config", str(bad)), "--config")
    nokey = tmp_path / "nokey.yaml"
    a = dict(atlas[2])
    a.pop("s")
    nokey.write_text(yaml.safe_dump({"atlas": a}))
    _one_line_exit_2(_query(atlas, *BASE, "--config", str(nokey)), "--config")
    notmap = tmp_path / "notmap.yaml"
    notmap.write_text("atlas: 3\n")
    _one_line_exit_2(_query(atlas, *BASE, "--config", str(notmap)), "--config")


def test_a_partial_atlas_is_refused_naming_the_missing_runs(atlas, tmp_path):
    runs, cfg, a = atlas
    # a job still running: its done.json is not there yet
    part = tmp_path / "partial"
    for t in TECHS[:-1]:
        (part / t).mkdir(parents=True)
        (part / t / "done.json").write_text((runs / t / "done.json").read_text())
    r = _query(atlas, *BASE, "--runs", str(part))
    _one_line_exit_2(r, "--runs")
    assert "gc-fr" in r.stderr and "partial" in r.stderr
    # an overlay config asking for runs that were never made (a third worker count, another seed)
    over = tmp_path / "overlay.yaml"
    over.write_text(yaml.safe_dump({"atlas": {**a, "n_workers": [2, 4, 8], "seeds": [0, 1, 2, 3]}}))
    r = _query(atlas, *BASE, "--config", str(over))
    _one_line_exit_2(r, "--runs")
    assert "n8" in r.stderr and "seed3" in r.stderr
    # a run listed as done whose record is gone
    gone = tmp_path / "gone"
    for t in TECHS:
        (gone / t).mkdir(parents=True)
        dirs = json.loads((runs / t / "done.json").read_text())["runs"]
        if t == "demo":
            dirs = dirs[:-1] + [str(tmp_path / "nowhere")]
        (gone / t / "done.json").write_text(json.dumps({"runs": dirs}))
    r = _query(atlas, *BASE, "--runs", str(gone))
    _one_line_exit_2(r, "--runs")
    assert "nowhere" in r.stderr


def test_a_query_100x_beyond_the_runs_needs_efficiency(atlas, tmp_path):
    r = _query(atlas, "--params", "1e9", "--workers", "8", "--bandwidth", "1Gbit/s", "--latency", "1ms")
    _one_line_exit_2(r, "--efficiency")
    r = _query(atlas, "--params", "1e4", "--workers", "500", "--bandwidth", "1Gbit/s", "--latency", "1ms")
    _one_line_exit_2(r, "--efficiency")
    f = tmp_path / "eff.yaml"
    f.write_text(yaml.safe_dump({"ddp": 1.0, "diloco": 1.9, "demo": 1.2, "gc-fr": 1.0}))
    for eff in ("diloco=1.9,demo=1.2", str(f), "published"):
        r = _query(atlas, "--params", "1e9", "--workers", "8", "--bandwidth", "1Gbit/s", "--latency", "1ms",
                   "--device", "h100", "--efficiency", eff)
        assert r.returncode == 0, r.stderr[-2000:]
        assert "s/step" in r.stdout and "steps/DDP" in r.stdout and "break-even" in r.stdout
    assert "published" in r.stdout and "arXiv 2411.19870" in r.stdout  # a published ratio carries its citation
    assert "steps to target unknown" in r.stdout and "not ranked:" in r.stdout  # the rest are listed apart


def test_parse_efficiency():
    assert parse_efficiency("diloco=1.9, demo=1.1") == {"diloco": 1.9, "demo": 1.1}
    assert parse_efficiency("published")["demo"] == 1.0
    for bad in ("diloco", "diloco=x", "diloco=0", "nosuch=1"):
        with pytest.raises(SpecError, match="--efficiency"):
            parse_efficiency(bad)


# ------------------------------------------------------------------ items 1-2: two factors, honest intervals

def test_prediction_intervals_widen_with_distance_on_a_crafted_fit():
    """log r = 0.1 + 0.05 log P - 0.02 log N plus a fixed pattern of residuals, on 2 sizes x 2 N x 3
    seeds: the interval contains the fitted value, and widens at every step away from the points."""
    rng = np.random.default_rng(0)
    obs = [(P, N, float(np.exp(0.1 + 0.05 * np.log(P) - 0.02 * np.log(N) + rng.normal(0, 0.1))))
           for P in (8e3, 2.2e4) for N in (2, 4) for _ in range(3)]
    f = fit_log_ratio("x", obs)
    assert f.terms == ("logP", "logN") and f.dof == 12 - 3
    widths = []
    for P in (1.3e4, 3e4, 6e4, 2e5):
        r, lo, hi = f.predict(P, 3)
        assert lo < r < hi
        widths.append(np.log(hi / lo))
    assert all(b > a for a, b in zip(widths, widths[1:])), widths
    # 4.7 decades outside, the interval is far wider than the residual spread alone would say
    _, lo, hi = f.predict(1e9, 3)
    assert np.log(hi / lo) > 5 * 2 * 1.96 * f.sigma  # measured: 7.5x
    # one observation: no interval at all
    one = fit_log_ratio("y", [(8e3, 2, 1.5)])
    assert one.predict(8e3, 2)[2] == np.inf
    assert evidence_distance(2.2e5, 4, [8e3, 2.2e4], [2, 4]) == pytest.approx((1.0, 0.0))


def test_the_answer_is_time_per_step_times_the_ratio(atlas):
    from distlab.atlas.projection import ClockSettings
    from distlab.atlas.query import check_complete, rank

    runs, _, a = atlas
    recs = check_complete(a, runs)
    cs = ClockSettings(flops_per_s=1e10)
    df, info = rank(recs, a, 3e4, 4, 1.25e8, 1e-3, {"model": "none"}, 1, cs)
    assert set(df["technique"]) == set(TECHS)
    ddp = df[df.technique == "ddp"].iloc[0]
    assert ddp["ratio"] == 1.0
    for _, r in df.iterrows():
        assert r["time_s"] == pytest.approx(r["per_step_s"] * r["ratio"] * info["K"])
        assert r["basis"] in (("reference",) if r["technique"] == "ddp" else ("fit", "measured"))
        if r["technique"] != "ddp":
            assert r["ratio_lo"] <= r["ratio"] <= r["ratio_hi"]  # gc-fr decodes the exact sum: DDP's steps
    # at a measured size and N the ratio is the measured one (geometric mean over seeds, paired with DDP)
    df2, _ = rank(recs, a, 21984.0, 4, 1.25e8, 1e-3, {"model": "none"}, 1, cs)
    d = df2[df2.technique == "diloco"].iloc[0]
    k = {r.seed: r.steps_to_target(a["target_loss"]) for r in recs if r.n_params == 21984 and r.n == 4
         and r.technique == "diloco"}
    kd = {r.seed: r.steps_to_target(a["target_loss"]) for r in recs if r.n_params == 21984 and r.n == 4
          and r.technique == "ddp"}
    assert d["basis"] == "measured"
    assert d["ratio"] == pytest.approx(np.exp(np.mean([np.log(k[s] / kd[s]) for s in k])))


def test_a_query_prints_both_factors_what_they_rest_on_and_is_fast(atlas):
    import time

    t0 = time.perf_counter()
    r = _query(atlas, "--params", "1e5", "--workers", "8", "--bandwidth", "10Gbit/s", "--latency", "10us",
               "--device", "a100")
    wall = time.perf_counter() - t0
    assert r.returncode == 0, r.stderr[-2000:]
    out = r.stdout
    assert "evidence: measured sizes" in out and "outside the sizes" in out
    assert "basis fit" in out and "DDP's steps" in out and "A100 datasheet" in out
    print(f"query wall time {wall:.2f} s (interpreter start included; a benchmark, not asserted)")


# ------------------------------------------------------------------ item 5: an expert's sanity

def _rank(atlas, P, N, bw, lat, device_rate, eff=None, mfu=1.0):
    from distlab.atlas.projection import ClockSettings
    from distlab.atlas.query import check_complete, rank

    runs, _, a = atlas
    recs = check_complete(a, runs)
    return rank(recs, a, P, N, bw, lat, {"model": "none"}, 1, ClockSettings(flops_per_s=device_rate, mfu=mfu),
                eff)


def test_at_100gbit_and_a_small_model_no_compressor_beats_ddp_by_more_than_the_compute_it_saves(atlas):
    from distlab.atlas.projection import ClockSettings, passes_per_step

    for bw_bits in (1e11, 4e11):
        df, info = _rank(atlas, 21984.0, 4, bw_bits / 8, 1e-5, 1e10)
        ddp = df[df.technique == "ddp"].iloc[0]
        comp = ClockSettings(flops_per_s=1e10, tokens=256).compute_s(21984.0)
        # DDP's step at this bandwidth is its compute and little else
        assert ddp["per_step_s"] <= 1.05 * comp
        for _, r in df[df.technique != "ddp"].iterrows():
            # what a technique can gain over DDP is DDP's communication plus the compute its steps save
            saved = ddp["per_step_s"] - comp + comp * max(0.0, 1.0 - r["ratio"] * passes_per_step(r["technique"], 1))
            assert r["time_s"] >= (ddp["per_step_s"] - saved) * info["K"] * (1 - 1e-9), r.to_dict()


def test_at_1gbit_and_1e9_parameters_ddp_is_not_first(atlas):
    for eff in ({"diloco": 1.9, "demo": 1.2}, {"diloco": 3.0, "demo": 2.0, "gc-fr": 1.0}):
        for bw_bits in (1e8, 1e9):
            df, _ = _rank(atlas, 1e9, 8, bw_bits / 8, 1e-3, 989e12, eff, mfu=0.5)
            assert df.iloc[0]["technique"] != "ddp", df[["technique", "time_s"]]


def test_overlapping_intervals_print_tie(atlas):
    from distlab.atlas.query import check_complete, format_ranking, rank

    runs, _, a = atlas
    recs = check_complete(a, runs)
    seen_tie = False
    for bw in (1.25e6, 1.25e8, 1.25e10):
        df, info = rank(recs, a, 21984.0, 4, bw, 1e-3, {"model": "none"}, 1, None)
        lead = df.iloc[0]
        for i, r in df.iloc[1:].iterrows():
            overlaps = bool(r["valid"] and r["lo_s"] <= lead["hi_s"])
            assert bool(r["tie"]) == overlaps
        text = format_ranking(df, info)
        if df["tie"].any():
            seen_tie = True
            assert lead["tie"] and "tie" in text.splitlines()[1]
    assert seen_tie  # four techniques, three seeds, one target: some cell is undecided
