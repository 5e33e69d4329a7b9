"""The shaped benchmark's planning, fit and prediction; a short shaped run where root."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import ROOT

from distlab.bench import netcheck, techerror
from distlab.runtime import netns
from distlab.runtime.network import NetworkModel

WHY = netns.unavailable()


def test_the_fit_recovers_alpha_and_beta():
    n = 4
    rounds, nbytes, t = [], [], []
    for op in ("all_reduce", "all_gather"):
        for size in netcheck.SIZES:
            r, b = netcheck.model_terms(op, size, n)
            rounds.append(r)
            nbytes.append(b)
            t.append(r * 3e-4 + b / 1.2e7)
    alpha, beta, rms = netcheck.fit_alpha_beta(rounds, nbytes, t)
    assert alpha == pytest.approx(3e-4, rel=1e-6) and beta == pytest.approx(1.2e7, rel=1e-6) and rms < 1e-9


def test_model_terms_are_the_network_models():
    net = NetworkModel(latency_s=1e-3, bandwidth_Bps=1e6)
    for op, fn in (("all_reduce", net.all_reduce), ("all_gather", net.all_gather)):
        r, b = netcheck.model_terms(op, 65536, 4)
        assert r * net.latency_s + b / net.bandwidth_Bps == pytest.approx(fn(65536, 4))


def test_slow_links_skip_long_points_and_say_why():
    run, skipped = netcheck.plan(10e6, 4, 1.5)
    assert ("all_reduce", 4096) in run and ("all_reduce", 64 * 2**20) not in run
    assert {(s["op"], s["size_bytes"]) for s in skipped} == \
        {(op, s) for op in netcheck.OPS for s in netcheck.SIZES} - set(run)
    assert all("nominal rate" in s["reason"] for s in skipped)
    run_fast, skipped_fast = netcheck.plan(None, 4, 1.5)
    assert not skipped_fast and len(run_fast) == len(netcheck.OPS) * len(netcheck.SIZES)


def test_not_root_rows_read_not_run(monkeypatch):
    monkeypatch.setattr(netns, "_probed", True)
    monkeypatch.setattr(netns, "_reason", "no root here")
    points, fits, skipped = netcheck.run_bench()
    assert not points and fits and all(f["status"] == "not run: no root here" for f in fits)
    steps, summary = techerror.run_table(None, None)
    assert steps.empty and (summary["status"] == "not run: no root here").all()


def test_prediction_is_the_network_model_of_the_recorded_pattern():
    m = pd.DataFrame({"compute_s": [0.01, 0.02], "rounds": [6, 3], "bytes": [1.5e5, 3e5]})
    got = techerror.predict_steps(m, "demo", 10e6, 4)
    net = NetworkModel(latency_s=techerror.DEFAULT_LATENCY_S, bandwidth_Bps=10e6 / 8)
    assert np.allclose(got, [0.01 + 6 * net.latency_s + 1.5e5 / net.bandwidth_Bps,
                             0.02 + 3 * net.latency_s + 3e5 / net.bandwidth_Bps])
    p = pd.DataFrame({"bytes": [3000.0], "compute_max": [0.1], "encode_max": [0.01], "decode_s": [0.002]})
    got = techerror.predict_steps(p, "pgc", 10e6, 3)
    assert got[0] == pytest.approx(2 * net.p2p(1000.0) + 0.112)


@pytest.mark.skipif(WHY is not None, reason=f"shaped runs skipped: {WHY}")
def test_a_short_shaped_run_gives_fit_rows(tmp_path):
    points, fits, skipped = netcheck.run_bench(n=2, max_point_s=0.02, inject_ms=0.0,
                                               rates={"100Mbit": 100e6}, timeout_s=120)
    ops = {p["op"] for p in points}
    assert ops == set(netcheck.OPS)
    assert all(p["median_s"] > 0 and p["min_s"] <= p["median_s"] <= p["max_s"] for p in points)
    fit = [f for f in fits if f.get("rate") == "100Mbit"]
    assert {f["op"] for f in fit} == set(netcheck.OPS) and all(f["beta_Bps"] > 0 for f in fit)
    assert skipped and all(s["rate"] == "100Mbit" for s in skipped)
    netcheck.write_outputs(points, fits, skipped, tmp_path / "nc.csv")
    assert (tmp_path / "nc.md").read_text().startswith("# Gloo on shaped links (measured")


def test_the_netcheck_target_resolves_and_stays_outside_all(target_dry_runs):
    def jobs(target):  # snakemake <target> -n --forceall --quiet rules, in a fresh copy
        r = target_dry_runs[(target, "config/config.yaml")]
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        return {ln.split()[0] for ln in r.stdout.splitlines() if len(ln.split()) == 2 and ln.split()[1].isdigit()}

    assert {"netcheck_bench", "netcheck_error"} <= jobs("netcheck")
    assert not {j for j in jobs("") if j.startswith("netcheck")}


def test_a_fitted_link_replaces_the_nominal_one(tmp_path):
    pd.DataFrame([{"rate": "10Mbit", "latency": "link", "op": "all_reduce", "alpha_s": 2e-3, "beta_Bps": 1e6},
                  {"rate": "-", "latency": "-", "op": "namespaces setup", "alpha_s": float("nan"),
                   "beta_Bps": float("nan")}]).to_csv(tmp_path / "fit.csv", index=False)
    fits = techerror.load_fits(tmp_path / "fit.csv")
    assert fits == {("10Mbit", "all_reduce"): (2e-3, 1e6)}
    m = pd.DataFrame({"compute_s": [0.01], "rounds": [6], "bytes": [1.5e5]})
    got = techerror.predict_steps(m, "demo", 10e6, 4, fit=fits[("10Mbit", "all_reduce")])
    assert got[0] == pytest.approx(0.01 + 6 * 2e-3 + 1.5e5 / 1e6)


def test_an_atlas_record_reads_as_per_step_ring_bytes_and_rounds(tmp_path):
    # DiLoCo at H = 2 on 4 workers: a step without a collective, then one all-reduce of 1000 bytes
    rec = {"n": 4, "steps": [
        {"step": 0, "step_time": 0.05, "compute_s": [0.01], "colls": [], "loss": 5.0},
        {"step": 1, "step_time": 0.20, "compute_s": [0.02], "colls": [["all_reduce", 1000]], "loss": 4.5},
        {"step": 2, "step_time": 0.30, "compute_s": [0.03], "colls": [["all_gather", 100], ["all_reduce", 8]],
         "loss": 4.0}]}
    (tmp_path / "record.json").write_text(json.dumps(rec))
    m = techerror.atlas_metrics(tmp_path)
    assert m["bytes"].tolist() == [0.0, 1500.0, 300.0 + 12.0]
    assert m["rounds"].tolist() == [0.0, 6.0, 3.0 + 6.0]
    assert m["compute_s"].tolist() == [0.01, 0.02, 0.03] and m["loss"].tolist() == [5.0, 4.5, 4.0]
    net = NetworkModel(latency_s=techerror.DEFAULT_LATENCY_S, bandwidth_Bps=10e6 / 8)
    got = techerror.predict_steps(m, "atlas", 10e6, 4)
    assert got[1] == pytest.approx(0.02 + net.all_reduce(1000, 4))
    spec = techerror.atlas_spec("diloco", 5, 1)
    assert spec["experiment"] == "atlas" and spec["backend"] == "gloo" and spec["n_workers"] == 4


def test_time_to_target_sums_each_runs_steps_until_the_shared_target():
    rows = []
    for rep, losses, meas in ((0, [5.0, 4.0, 3.0], [1.0, 1.0, 1.0]), (1, [5.0, 3.5, 3.4], [2.0, 2.0, 2.0])):
        for i, (loss, m) in enumerate(zip(losses, meas)):
            rows.append({"technique": "DiLoCo", "rate": "10Mbit", "repeat": rep, "step": i + 1, "loss": loss,
                         "measured_s": m, "simulated_s": 0.5 * m})
    ttt = techerror.time_to_target(pd.DataFrame(rows))
    # target: the higher of the two last losses (3.4); run 0 reaches it at its third step, run 1 at its third
    assert ttt["target_loss"].tolist() == [3.4, 3.4] and ttt["steps_to_target"].tolist() == [3, 3]
    assert ttt["measured_s"].tolist() == [3.0, 6.0] and ttt["simulated_s"].tolist() == [1.5, 3.0]
    s = techerror._ttt_summary(ttt, "DiLoCo", "10Mbit")
    assert s["error_to_target"] == pytest.approx(-0.5) and s["error_to_target_ci95_lo"] == pytest.approx(-0.5)


@pytest.mark.skipif(WHY is not None, reason=f"shaped runs skipped: {WHY}")
def test_dilocos_shaped_run_through_the_atlas_driver_gives_error_rows(monkeypatch, tmp_path):
    import distlab.cli  # noqa: F401 (the ranks run a distlab command: `python -m distlab` registers it)
    from distlab.data import prepare_dataset

    data = tmp_path / "pydoc"
    prepare_dataset(dict(name="pydoc", kind="text", source="pydoc_topics", val_fraction=0.05, test_fraction=0.05),
                    data, seed=0)
    monkeypatch.setattr(techerror, "DEMO_METHODS", {})
    monkeypatch.setattr(techerror, "PGC_SCHEMES", {})
    steps, summary = techerror.run_table(Path(data), None, steps=4, repeats=1, rates={"100Mbit": 100e6})
    assert summary["technique"].tolist() == ["DiLoCo"] and summary["repeats"].iloc[0] == 1
    assert np.isfinite(summary[["error", "error_to_target"]].to_numpy()).all()
    assert (steps["step"] > 1).all()  # steps up to the first synchronisation (step H - 1 = 1) left out


def test_the_technique_error_figure_is_saved_legible_with_its_clocks(tmp_path):
    """A measured technique-error table drawn again: saved through plots.save (the
    legibility record in the PNG is empty: the legend moved off the points), titled with
    both clocks; and a table that did not run draws its reason.  The table is a copy of
    snakemake netcheck's output in the ef521fe snapshot (tests/data/), so the suite does not
    depend on whether the current snapshot ran netcheck."""
    from PIL import Image

    summary = pd.read_csv(ROOT / "tests/data/netcheck_techerror.csv")
    techerror.figure(summary, tmp_path / "t.png")
    meta = Image.open(tmp_path / "t.png").text
    assert json.loads(meta["distlab:legibility"]) == []
    title = " ".join(json.loads(meta["distlab:titles"]))
    assert "measured" in title and "simulated" in title
    techerror.figure(pd.DataFrame({"status": ["not run: no root"]}), tmp_path / "n.png")
    assert json.loads(Image.open(tmp_path / "n.png").text["distlab:legibility"]) == []
