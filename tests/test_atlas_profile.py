"""The atlas's stored compute profile: the shipped file validates and covers the configs' sizes,
the replay with it does not move with the seconds measured while a run trained (crafted
perturbations), the driver charges what the replay charges, and the claims say which compute
they rest on."""

from __future__ import annotations

import copy
import json
import math
import os
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import yaml

from conftest import ROOT, bin_path

from distlab.atlas import profile, train
from distlab.atlas.profile import merge
from distlab.atlas.profiler import check_covers
from distlab.atlas.grid import simulated_cells
from distlab.atlas.outputs import ttt_table
from distlab.atlas.record import Recording
from distlab.atlas.replay import replay
from distlab.atlas.workflow import base_spec

ENV = {**os.environ, "PATH": bin_path(), "HF_DATASETS_OFFLINE": "1"}
CONFIG = yaml.safe_load((ROOT / "config/config.yaml").read_text())   # as shipped (atlas.compute: stored)
# the stored profile's mechanism, under test whatever the shipped default
BASE = {**CONFIG, "atlas": {**CONFIG["atlas"], "compute": "stored"}}


def _section(overlay: str | None = None) -> dict:
    cfg = BASE if overlay is None else merge(BASE, yaml.safe_load((ROOT / overlay).read_text()))
    return cfg["atlas"]


@pytest.mark.parametrize("overlay", [None, "tests/configs/tiny.yaml"])
def test_the_shipped_profile_validates_and_covers_every_atlas_size(overlay):
    a = _section(overlay)
    assert BASE["atlas"]["compute_profile"] == profile.DEFAULT_PATH and CONFIG["atlas"]["compute"] == "stored"
    prof, sha = profile.load(a["compute_profile"])
    assert len(sha) == 12 and prof["label"] == "measured"
    prov = prof["provenance"]
    assert prov["command"].startswith("python -m distlab atlas profile") and prov["repeats"] >= 5
    assert prov["load"]["loadavg_1_5_15_before"] and prov["machine"]["cpu"] and prov["date_utc"].endswith("Z")
    assert check_covers(prof, a) == []          # every size x N x technique the section runs
    for size in a["sizes"].values():
        e = prof["sizes"][profile.size_key(size, a["batch_size"])]
        assert math.isfinite(e["pass_s"]) and e["pass_s"] > 0
        for t in a["techniques"]:
            for n in a["n_workers"]:
                c = e["techniques"][t][str(n)]
                assert math.isfinite(c["extra_s"]) and c["extra_s"] >= 0
                assert "master_s" not in c or (math.isfinite(c["master_s"]) and c["master_s"] > 0)


def test_a_malformed_profile_is_refused_naming_the_key():
    prof, _ = profile.load()
    key = next(iter(prof["sizes"]))
    for path, value, named in ((("sizes", key, "pass_s"), -1.0, "pass_s"),
                               (("sizes", key, "pass_s"), float("nan"), "pass_s"),
                               (("sizes", key, "techniques", "gc-fr", "2", "master_s"), 0.0, "master_s"),
                               (("sizes", key, "techniques", "ddp", "2", "extra_s"), float("inf"), "extra_s"),
                               (("label",), "simulated", "label")):
        bad = copy.deepcopy(prof)
        d = bad
        for k in path[:-1]:
            d = d[k]
        d[path[-1]] = value
        with pytest.raises(profile.ProfileError, match=named):
            profile.validate(bad)
    bad = copy.deepcopy(prof)
    del bad["provenance"]["load"]
    with pytest.raises(profile.ProfileError, match="provenance.load"):
        profile.validate(bad)
    a = {**BASE["atlas"], "sizes": {"odd": {"name": "gpt", "n_layer": 3, "d_model": 24, "n_head": 2,
                                            "block_size": 32}}}
    with pytest.raises(profile.ProfileError, match="no size gpt-L3-d24.*atlas profile"):
        base_spec(a, "ddp", "odd", 2, 0, 0.01, {"model": "none"})
    with pytest.raises(profile.ProfileError, match="atlas.compute"):
        profile.mode({"compute": "fast"})


def test_measured_compute_keeps_the_old_spec_and_recordings():
    a = {**BASE["atlas"], "compute": "measured"}
    spec = base_spec(a, "ddp", "small", 2, 0, 0.01, {"model": "none"})
    assert spec["cluster"]["compute"] == {"mode": "measured", "unit_seconds": 0.0, "scale": 1.0}
    recs = [object()]
    assert profile.apply(recs, a) is recs
    # the GPU tier's sections (atlas.device) charge what they measure on the accelerator
    assert profile.mode({**BASE["atlas"], "device": "cuda"}) == "measured"
    assert profile.mode({**BASE["atlas"], "device": "cpu"}) == "stored"
    stored = base_spec(BASE["atlas"], "pgc-fr", "large", 4, 0, 0.01, {"model": "none"})["cluster"]["compute"]
    assert stored["mode"] == "stored" and stored["pass_s"] > 0 and stored["master_s"] > 0


def _perturbed(rec: Recording, seed: int) -> Recording:
    """The same recording with every measured second scaled by a random factor (0.3x .. 5x): a run
    of the same code on a machine that was busier or idler, step by step."""
    rng = np.random.default_rng(seed)
    steps = []
    for s in rec.steps:
        s = dict(s)
        s["compute_s"] = (np.asarray(s["compute_s"]) * rng.uniform(0.3, 5.0, len(s["compute_s"]))).tolist()
        if "master_s" in s:
            s["master_s"] = float(s["master_s"]) * rng.uniform(0.3, 5.0)
        steps.append(s)
    return replace(rec, steps=steps)


@pytest.fixture(scope="module")
def tiny_runs(tmp_path_factory, pydoc_dir):
    """Real runs of the tiny atlas's sizes with the stored profile: DDP, DiLoCo, PGC-FR without
    stragglers, IS-SGD (arrival-dependent) under exponential stragglers; N = 4, 6 steps."""
    a = {**_section("tests/configs/tiny.yaml"), "steps": 6, "eval_every": 1}
    root = tmp_path_factory.mktemp("profiled")
    recs = []
    for t, strag in (("ddp", {"model": "none"}), ("diloco", {"model": "none"}), ("pgc-fr", {"model": "none"}),
                     ("is-sgd", {"model": "exponential", "mean": 0.003})):
        spec = base_spec(a, t, "large", 4, 0, 0.03, strag)
        assert spec["cluster"]["compute"]["mode"] == "stored"
        train.run_simulated(spec, pydoc_dir, root / t)
        recs.append(Recording.load(root / t))
    # the target: the highest loss every run reaches, so each has steps to target
    a["target_loss"] = max(float(np.nanmin(r.curve()[1])) for r in recs) + 1e-9
    return a, recs


def test_the_driver_charges_what_the_replay_with_the_profile_charges(tiny_runs):
    a, recs = tiny_runs
    for rec in recs:
        mine = profile.apply([rec], a)[0]
        assert [s["compute_s"] for s in mine.steps] == [s["compute_s"] for s in rec.steps]
        assert all("measured_compute_s" in s for s in rec.steps)      # what was measured, kept beside
        net = rec.network
        t, miss = replay(mine, net["latency_s"], net["bandwidth_Bps"])
        assert t[0] == rec.clock()[-1] and miss[0] == 0.0               # bit for bit; the same arrivals


def test_stored_compute_cells_do_not_move_with_the_measured_seconds(tiny_runs):
    a, recs = tiny_runs
    bws, lats = np.geomspace(1.25e6, 5e10, 7), [1e-5, 1e-3]
    strag = {"none": {"model": "none"}, "pareto_10ms": {"model": "pareto", "mean": 0.01, "shape": 1.5},
             "exp_20ms": {"model": "exponential", "mean": 0.02}}
    target = a["target_loss"]
    stored = simulated_cells(profile.apply(recs, a), target, bws, lats, strag)
    ttt = ttt_table(a, profile.apply(recs, a))
    for seed in (1, 2):
        shaken = [_perturbed(r, seed) for r in recs]
        pd.testing.assert_frame_equal(simulated_cells(profile.apply(shaken, a), target, bws, lats, strag), stored,
                                      check_exact=True)
        pd.testing.assert_frame_equal(ttt_table(a, profile.apply(shaken, a)), ttt, check_exact=True)
    # the cells are not trivially constant: the network and the stragglers still move them
    fin = stored[np.isfinite(stored["time_s"])]
    assert fin["valid"].all() and fin.groupby("technique")["time_s"].nunique().min() > 1
    # measured compute (as before the profile): the same perturbation moves the cells
    m = {**a, "compute": "measured"}
    before = simulated_cells(profile.apply(recs, m), target, bws, lats, strag)
    after = simulated_cells(profile.apply([_perturbed(r, 1) for r in recs], m), target, bws, lats, strag)
    moved = before["technique"].isin(["ddp", "diloco", "pgc-fr"]) & np.isfinite(before["time_s"])
    assert not np.allclose(before.loc[moved, "time_s"], after.loc[moved, "time_s"])


def test_the_atlas_claims_say_which_compute_they_rest_on():
    claims = yaml.safe_load((ROOT / "config/claims.yaml").read_text())["claims"]
    rows = [c for c in claims if c["paper"] == "atlas"]
    assert len(rows) >= 4
    stored = profile.mode(CONFIG["atlas"]) == "stored"
    for c in rows:
        # the stored profile: a verdict of the recorded steps and the shipped file, the same at any
        # load (not measured); measured compute would make the time of every row a measured one
        assert c.get("measured") is (not stored), c["id"]
        assert ("stored compute profile" in c["tested_at"]) is stored, c["id"]


@pytest.mark.parametrize("args,named", [(["--repeats", "0"], "--repeats"), (["--techniques", "ddp,warp"], "--techniques"),
                                        (["--config", "no/such.yaml"], "--config")])
def test_the_profile_command_refuses_bad_input_in_one_line(tmp_path, args, named):
    r = subprocess.run([sys.executable, "-m", "distlab", "atlas", "profile", "--data", str(tmp_path),
                        "--out", str(tmp_path / "p.json"), *args], cwd=ROOT, env=ENV, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2 and named in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_the_profiler_measures_every_shape_a_config_runs_and_covers_it(tmp_path, pydoc_dir):
    """The profile command's measurement on the tiny atlas, one technique, one repeat of two
    steps: a profile that validates, with a pass time and a technique cost for each shape,
    that covers the config it was measured for."""
    from distlab.atlas.profiler import measure

    a = _section("tests/configs/tiny.yaml")
    prof = profile.validate(measure([a], pydoc_dir, tmp_path, 1, 2, "test", ["ddp"]))
    assert prof["sizes"] and all(s["pass_s"] > 0 and len(s["pass_s_repeats"]) == 1 for s in prof["sizes"].values())
    assert all(c["extra_s"] >= 0 for s in prof["sizes"].values() for c in s["techniques"]["ddp"].values())
    assert check_covers(prof, {**a, "compute": "measured"}, ["ddp"]) == []
