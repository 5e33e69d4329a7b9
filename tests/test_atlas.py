"""The atlas: replay equals the simulated clock for every technique, the clock equals the
runtime's simulator, one technique gives the same updates on the simulated and the gloo
driver, arrival dependence as stated, the query against a hand computation, bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from conftest import ROOT, bin_path

from distlab.config import specs
from distlab.atlas import train
from distlab.atlas.clock import Clock, tie_order
from distlab.atlas.record import Recording
from distlab.atlas.replay import replay
from distlab.atlas.spec import SPEC_SCHEMA, TECHNIQUES, arrival_dependent
from distlab.runtime.compute import ComputeModel
from distlab.runtime.network import NetworkModel
from distlab.runtime.sim import SimulatedCluster
from distlab.runtime.stragglers import StragglerModel

ENV = {**os.environ, "PATH": bin_path(), "HF_DATASETS_OFFLINE": "1"}
MODEL = {"name": "gpt", "n_layer": 1, "d_model": 8, "n_head": 2, "block_size": 16}
NET = {"latency_s": 0.002, "bandwidth_Bps": 3e6}


def spec_for(technique: str, **over) -> dict:
    spec = {"experiment": "atlas", "technique": technique, "backend": "simulated", "seed": 0, "model": MODEL,
            "n_workers": 4, "batch_size": 2, "lr": 1e-2, "steps": 6, "eval_every": 2, "eval_batches": 1, "s": 1,
            "demo": {"topk": 4, "chunk": 16}, "diloco": {"H": 2}, "powersgd": {"rank": 1},
            "cluster": {"compute": {"mode": "measured"}, "network": dict(NET),
                        "straggler": {"model": "exponential", "mean": 0.003}}}
    spec.update(over)
    return specs.validate_spec(spec, SPEC_SCHEMA, "atlas")


def _run(spec, data, out) -> Recording:
    train.run_simulated(spec, data, out)
    return Recording.load(out)


@pytest.mark.parametrize("technique", list(TECHNIQUES))
def test_replay_equals_the_simulated_clock_exactly(tmp_path, pydoc_dir, technique):
    rec = _run(spec_for(technique), pydoc_dir, tmp_path / technique)
    logged = rec.clock()
    for k in (1, 3, len(rec.steps)):
        t, miss = replay(rec, NET["latency_s"], NET["bandwidth_Bps"], upto=k)
        assert t[0] == logged[k - 1]  # bit for bit, not approximately
        assert miss[0] == 0.0
    # on other cells the same recording gives other times: bytes and rounds matter
    t2, _ = replay(rec, [NET["latency_s"], 0.05], [NET["bandwidth_Bps"], 1e5])
    assert t2[0] == logged[-1] and t2[1] > t2[0]


def test_the_clock_charges_what_the_runtime_simulator_charges():
    rng = np.random.default_rng(3)
    n = 4
    net = NetworkModel(latency_s=0.003, bandwidth_Bps=2e7)
    strag = StragglerModel(model="persistent", mean=0.01, slowdown=3.0, slow_workers=(2,), seed=5)
    sim = SimulatedCluster(n, ComputeModel(mode="measured"), net, strag)
    clock = Clock(n, net.latency_s, net.bandwidth_Bps, strag.compute_factor(n))
    for step in range(5):
        c = rng.uniform(0.01, 0.02, n)
        for w in range(n):
            sim.charge(w, 1, c[w])
        coll = net.all_reduce(4000, n) + net.all_gather(300, n)
        sim.sync_step(step, coll)
        clock.sync(c, strag.delays(step, n)[None], [("all_reduce", 4000), ("all_gather", 300)])
        assert clock.now[0] == sim.now
    for step in range(5, 12):
        c = rng.uniform(0.01, 0.02, n)
        for w in range(n):
            sim.charge(w, 1, c[w])
        ms = sim.master_step(step, 5000.0, 8000.0, lambda r: len(r) >= n - 1, master_s=0.001)
        _, mask = clock.master(c, strag.delays(step, n)[None], 5000.0, 8000.0, n - 1, 0.001,
                               tie_order(strag.seed, step, n))
        assert clock.now[0] == sim.now
        assert set(np.flatnonzero(mask[0])) == set(ms.received)


# Compute seconds the clock charges from each step's passes, not from this machine's wall clock:
# arrival order is then the straggler model's alone, the same on an idle and a loaded machine.
INJECTED = {"mode": "stored", "pass_s": 0.01, "extra_s": 0.0, "master_s": 0.0, "profile": "injected by the test"}


def test_arrival_dependence_is_as_declared(tmp_path, pydoc_dir):
    """Techniques declared arrival-independent follow the same trajectory under any straggler
    model; IS-SGD's trajectory changes with who arrives first.  The compute is injected, so the
    arrival order is the seeded straggler draws', whatever the machine's load."""
    for t in ("gc-fr", "pgc-fr", "gc-cr", "is-sgd"):
        cl = {"compute": dict(INJECTED), "network": dict(NET)}
        a = _run(spec_for(t, cluster={**cl, "straggler": {"model": "exponential", "mean": 0.003}}),
                 pydoc_dir, tmp_path / f"{t}_exp")
        b = _run(spec_for(t, cluster={**cl, "straggler": {"model": "pareto", "mean": 0.01, "shape": 1.5}}),
                 pydoc_dir, tmp_path / f"{t}_par")
        if arrival_dependent(t):  # the injected arrival orders differ on some step
            assert [s["received"] for s in a.steps] != [s["received"] for s in b.steps], t
        same = np.allclose(a.curve()[1], b.curve()[1], rtol=0, atol=1e-6)
        assert same != arrival_dependent(t), t


@pytest.mark.slow
@pytest.mark.parametrize("technique", ["ddp", "gc-fr", "demo"])
def test_one_technique_gives_the_same_updates_on_simulated_and_gloo(tmp_path, pydoc_dir, technique):
    spec = spec_for(technique, n_workers=2, steps=3, backend="gloo",
                    cluster={"compute": {"mode": "measured"}, "network": dict(NET), "straggler": {"model": "none"}})
    cmd = [sys.executable, "-m", "distlab", "train", "--experiment", "atlas", "--threads", "2",
           "--spec", json.dumps(spec), "--runtime", json.dumps({"timeout_s": 60, "job_timeout_s": 600}),
           "--data", str(pydoc_dir), "--out", str(tmp_path / "gloo")]
    r = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    man = json.loads((tmp_path / "gloo/manifest.json").read_text())
    assert man["clock"] == "measured" and man["params_max_abs_diff_across_ranks"] == 0.0
    real = Recording.load(tmp_path / "gloo")
    sim = _run({**spec, "backend": "simulated"}, pydoc_dir, tmp_path / "sim")
    assert np.allclose([s["loss"] for s in real.steps], [s["loss"] for s in sim.steps], atol=1e-5)
    assert [s.get("colls") for s in real.steps] == [s.get("colls") for s in sim.steps]
    assert abs(man["final_val_loss"] - json.loads((tmp_path / "sim/manifest.json").read_text())["final_val_loss"]) < 1e-5


# ------------------------------------------------------------------ query

@pytest.fixture(scope="module")
def runs_dir(tmp_path_factory, pydoc_dir) -> Path:
    """Two seeds of DDP and IS-SGD at N = 2, no stragglers, in the layout the query reads."""
    root = tmp_path_factory.mktemp("atlas") / "techniques"
    for t in ("ddp", "is-sgd"):
        runs = []
        for seed in (0, 1):
            d = root / t / f"seed{seed}"
            train.run_simulated(spec_for(t, n_workers=2, seed=seed, steps=6,
                                         cluster={"compute": {"mode": "measured"}, "network": dict(NET),
                                                  "straggler": {"model": "none"}}), pydoc_dir, d)
            runs.append(str(d))
        (root / t / "done.json").write_text(json.dumps({"runs": runs}))
    return root


def _query_config(tmp_path: Path, target: float) -> Path:
    """The atlas section of the runs of ``runs_dir``: DDP and IS-SGD, one size, N = 2, two seeds."""
    import yaml

    a = yaml.safe_load((ROOT / "config/config.yaml").read_text())["atlas"]
    a.pop("headline", None)
    a.pop("trend", None)
    a.update(target_loss=target, techniques=["ddp", "is-sgd"], sizes={"only": MODEL}, n_workers=[2], seeds=[0, 1],
             train_under={"stragglers": [], "sizes": ["only"], "seeds": [0]},
             compute="measured")  # the runs charged their measured compute: the hand computation adds it up
    p = tmp_path / "cfg.yaml"
    p.write_text(yaml.safe_dump({"atlas": a}))
    return p


def _hand_time(rec: Recording, k: int, lat: float, bw: float) -> float:
    """Sum over the first k steps of max_w compute + (2(n-1) lat + 2(n-1)/n bytes / bw) per all-reduce."""
    n, t = rec.n, 0.0
    for s in rec.steps[:k]:
        t += max(s["compute_s"]) + sum(2 * (n - 1) * lat + 2 * (n - 1) / n * b / bw for _, b in s["colls"])
    return t


def test_query_a_cell_against_a_hand_computation(tmp_path, runs_dir):
    recs = [Recording.load(runs_dir / "ddp" / f"seed{k}") for k in (0, 1)]
    target = float(max(r.curve()[1][2] for r in recs))  # reached at step 4 or earlier by both seeds
    lat, bw = 0.03, 1e9 / 8
    hand = np.array([_hand_time(r, r.steps_to_target(target), lat, bw) for r in recs])
    h = stats.t.ppf(0.975, 1) * hand.std(ddof=1) / np.sqrt(2)
    from distlab.atlas.query import rank

    df, _ = rank(recs, {"target_loss": target, "s": 1}, float(recs[0].n_params), 2, bw, lat, {"model": "none"}, 1,
                 None)
    row = df[df.technique == "ddp"].iloc[0]
    assert row["label"] == "simulated"
    assert np.isclose(row["time_s"], hand.mean(), rtol=1e-9)
    assert np.isclose(row["hi_s"] - row["time_s"], h, rtol=1e-6)
    cfg = _query_config(tmp_path, target)
    r = subprocess.run([sys.executable, "-m", "distlab", "atlas", "query", "--params", str(recs[0].n_params),
                        "--workers", "2", "--bandwidth", "1Gbit/s", "--latency", "30ms", "--runs", str(runs_dir),
                        "--config", str(cfg)], env=ENV, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert f"{hand.mean():.4g} s" in r.stdout and "replayed recordings" in r.stdout, r.stdout


@pytest.mark.parametrize("args,key", [
    (["--bandwidth", "-1Gbit/s"], "--bandwidth"),
    (["--bandwidth", "1Gfurlong/s"], "--bandwidth"),
    (["--latency", "30parsecs"], "--latency"),
    (["--stragglers", "weibull:2"], "--stragglers"),
    (["--params", "1e30"], "--params"),
    (["--params", "-1e9"], "--params"),
    (["--workers", "-2"], "--workers"),
])
def test_query_refuses_bad_input_naming_the_key(tmp_path, runs_dir, args, key):
    base = {"--params": "1e9", "--workers": "64", "--bandwidth": "1Gbit/s", "--latency": "30ms",
            "--stragglers": "exp:0.2"}
    base.update(dict(zip(args[::2], args[1::2])))
    # each value a separate argument, as a shell passes `--bandwidth -1Gbit/s`
    cmd = [sys.executable, "-m", "distlab", "atlas", "query", *(x for kv in base.items() for x in kv),
           "--runs", str(runs_dir), "--config", str(_query_config(tmp_path, 5.0))]
    r = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stdout + r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and key in lines[0] and "Traceback" not in r.stderr


def test_query_parsers():
    from distlab.atlas.query import parse_bandwidth, parse_latency, parse_stragglers

    assert parse_bandwidth("1Gbit/s") == 1.25e8 and parse_bandwidth("10Mb/s") == 1.25e6
    assert parse_bandwidth("125MB/s") == 1.25e8 and parse_bandwidth("400Gb/s") == 5e10
    assert parse_latency("30ms") == pytest.approx(0.03) and parse_latency("10us") == pytest.approx(1e-5)
    assert parse_stragglers("exp:0.2", 64) == {"model": "exponential", "mean": 0.2}
    assert parse_stragglers("dead:1", 8)["slow_workers"] == [7]


# ------------------------------------------------------------------ the jobs and the benchmark

def _shrunk_atlas() -> dict:
    import yaml

    a = yaml.safe_load((ROOT / "config/config.yaml").read_text())["atlas"]
    a.update(sizes={"small": MODEL, "large": {**MODEL, "d_model": 16}}, n_workers=[2], seeds=[0, 1], batch_size=2,
             steps=4, eval_every=2, eval_batches=1, demo={"topk": 4, "chunk": 16, "decay": 0.999},
             diloco={"H": 2, "outer_lr": 0.7, "outer_momentum": 0.9})
    a["sweep"] = {**a["sweep"], "lrs": [0.01, 0.03], "widen": 1,
                  "settings": {**a["sweep"]["settings"], "diloco": [5, 10]}}
    a["headline"] = {**a["headline"], "n_workers": 2, "seeds": [2]}
    a.pop("trend", None)  # the trend cells' own test: tests/test_atlas_trend.py
    a["bench"] = {**a["bench"], "techniques": ["ddp", "pgc-fr"], "sizes": ["small"], "n_workers": [2],
                  "steps": 2, "repeats": 1}
    return a


def test_widened_lr_steps_one_grid_ratio_past_the_edge():
    from distlab.atlas.workflow import widened_lr

    assert widened_lr([0.01, 0.03], 0.03) == pytest.approx(0.09)
    assert widened_lr([0.01, 0.03], 0.01) == pytest.approx(0.01 / 3)
    assert widened_lr([0.003, 0.01, 0.03], 0.01) is None


def test_a_technique_job_widens_its_grid_and_reuses_the_chosen_sweep_run(tmp_path, pydoc_dir):
    a = _shrunk_atlas()
    choice = train.technique_job(a, "ddp", pydoc_dir, tmp_path / "ddp")
    # of two lrs the better is at an edge: one more lr beyond it, a grid ratio (x3) further
    first = min(("lr0.01", "lr0.03"), key=choice["sweep"].get)
    assert choice["lr_grid"] == pytest.approx(sorted([0.01, 0.03, 0.09 if first == "lr0.03" else 0.01 / 3]))
    assert len(choice["sweep"]) == 3 and min(choice["sweep"].values()) == choice["sweep"][choice["chosen"]]
    runs = json.loads((tmp_path / "ddp/done.json").read_text())["runs"]
    # sizes x N x seeds, plus the headline's seed 2 at the large size: the chosen sweep run is one of them
    assert len(runs) == 2 * 1 * 2 + 1 and str(tmp_path / "ddp/sweep" / choice["chosen"]) in runs
    assert not (tmp_path / "ddp/runs/small/n2/none/seed0").exists()
    assert (tmp_path / "ddp/runs/large/n2/none/seed2/record.json").exists()


def test_diloco_sweeps_its_outer_lr_momentum_and_h(tmp_path, pydoc_dir):
    """sweep.settings.diloco as a mapping: the product of H, outer lr and outer momentum (3 x 3 x 2)
    at every lr, chosen on the validation windows, and the runs at the whole chosen setting."""
    from distlab.atlas.workflow import sweep_specs

    a = _shrunk_atlas()
    a["sweep"] = {**a["sweep"], "widen": 0,
                  "settings": {"diloco": {"H": [1, 2, 4], "outer_lr": [0.5, 0.7, 1.0], "outer_momentum": [0.8, 0.9]}}}
    todo = sweep_specs(a, "diloco")
    assert len(todo) == 2 * 3 * 3 * 2 and len({label for label, _ in todo}) == len(todo)
    assert {(s["diloco"]["H"], s["diloco"]["outer_lr"], s["diloco"]["outer_momentum"]) for _, s in todo} == \
        {(h, lr, m) for h in (1, 2, 4) for lr in (0.5, 0.7, 1.0) for m in (0.8, 0.9)}
    # the list form is unchanged (labels too: DiLoCo-DeMo's sweep runs keep their names)
    assert [label for label, _ in sweep_specs(_shrunk_atlas(), "diloco")] == \
        ["lr0.01_H5", "lr0.01_H10", "lr0.03_H5", "lr0.03_H10"]
    choice = train.technique_job(a, "diloco", pydoc_dir, tmp_path / "diloco")
    best = min(choice["sweep"], key=choice["sweep"].get)
    assert choice["chosen"] == best and set(choice["setting"]["diloco"]) == {"H", "outer_lr", "outer_momentum"}
    runs = json.loads((tmp_path / "diloco/done.json").read_text())["runs"]
    for d in runs:
        spec = json.loads((Path(d) / "manifest.json").read_text())["spec"]
        assert {k: spec["diloco"][k] for k in choice["setting"]["diloco"]} == choice["setting"]["diloco"]


def test_the_step_benchmark_compares_with_a_plain_adamw_step(tmp_path, pydoc_dir):
    r = subprocess.run([sys.executable, "-m", "distlab", "atlas", "bench", "--config", json.dumps(_shrunk_atlas()),
                        "--data", str(pydoc_dir), "--out", str(tmp_path / "bench.csv")],
                       env=ENV, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    import pandas as pd

    df = pd.read_csv(tmp_path / "bench.csv")
    assert df["technique"].tolist() == ["ddp", "pgc-fr"] and set(df["label"]) == {"measured"}
    assert (df["driver_cpu_ms_per_step"] > 0).all() and (df["plain_adamw_cpu_ms_per_step"] > 0).all()
    assert np.allclose(df["ratio"], df["driver_cpu_ms_per_step"] / df["plain_adamw_cpu_ms_per_step"])


# ------------------------------------------------------------------ the workflow, shrunk

@pytest.mark.slow
def test_snakemake_atlas_on_the_tiny_config(tiny_workflow):
    """The atlas of the session's tiny run (the tiny config, like the default one, puts it in
    the default target): its own target has nothing left to do, and its outputs are there."""
    work, r = tiny_workflow
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    r = subprocess.run(["snakemake", "atlas", "-n", "--configfile", "tests/configs/tiny.yaml"],
                       cwd=work, env=ENV, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and "Nothing to be done" in r.stdout + r.stderr, r.stdout[-3000:] + r.stderr[-3000:]
    import pandas as pd

    win = pd.read_csv(work / "results/atlas/map/winners.csv")
    cells = pd.read_csv(work / "results/atlas/map/cells.csv")
    assert set(cells["label"]) <= {"simulated", "extrapolated"} and (cells["label"] == "simulated").any()
    assert set(win["winner"]) <= set(TECHNIQUES) and len(win) > 0
    for f in ("winners_bandwidth_straggler.png", "winners_bandwidth_size.png", "time_vs_bandwidth.png"):
        assert (work / "results/atlas/figures" / f).stat().st_size > 1000
    bench = json.loads((work / "results/atlas/map/summary.json").read_text())["replay_bench"]
    assert bench["cells"] == 10_000
    # the atlas in the default target (the tiny config's atlas.in_default_target): its claims are
    # the paper scorecard's atlas section, scored once, not again in results/atlas/
    card = pd.read_csv(work / "paper/scorecard/atlas.csv")
    assert not (work / "results/atlas/scorecard.csv").exists()
    assert set(card["id"]) == {"atlas.diloco_beats_ddp_10mbit", "atlas.ddp_beats_diloco_100gbit",
                               "atlas.pgc_fr_beats_ddp_pareto", "atlas.diloco_demo_beats_diloco_10mbit"}


@pytest.mark.parametrize("technique,method", [("ddp", "adamw"), ("demo", "demo"), ("diloco", "diloco"),
                                              ("powersgd", "powersgd")])
def test_demo_comparison_is_a_slice_of_the_atlas(tmp_path, pydoc_dir, technique, method):
    """The atlas's DDP, DeMo, DiLoCo and PowerSGD compute exactly what DeMo's own trainer
    computes for the same spec (same weights, windows, updates): the same losses."""
    import pandas as pd

    from distlab.demo import train as demo_train

    common = {"seed": 0, "model": MODEL, "n_workers": 2, "batch_size": 2, "lr": 1e-2, "steps": 4,
              "eval_every": 2, "eval_batches": 1}
    net = {"compute": {"mode": "measured", "unit_seconds": 0.0, "scale": 1.0}, "network": dict(NET),
           "straggler": {"model": "none"}}
    dspec = specs.validate_spec({**common, "experiment": "demo", "method": method, "backend": "simulated",
                                 "dtype": "float32", "cluster": net,
                                 "demo": {"topk": 4, "chunk": 16, "decay": 0.999, "weight_decay": 0.0},
                                 "diloco": {"H": 2, "outer_lr": 0.7, "outer_momentum": 0.9},
                                 "powersgd": {"rank": 1}}, demo_train.SPEC_SCHEMA, "demo")
    demo_train.run_simulated(dspec, pydoc_dir, tmp_path / "demo", {"checkpoint": {"every_s": 0, "every_steps": 0}})
    ref = pd.read_csv(tmp_path / "demo/metrics.csv")
    rec = _run(spec_for(technique, **common, cluster=net,
                        demo={"topk": 4, "chunk": 16, "decay": 0.999},
                        diloco={"H": 2, "outer_lr": 0.7, "outer_momentum": 0.9}, powersgd={"rank": 1}),
               pydoc_dir, tmp_path / "atlas")
    assert [s["loss"] for s in rec.steps] == ref["loss"].tolist()
    st, v = rec.curve()
    assert v.tolist() == ref["val_loss"].dropna().tolist()
    assert [sum(b for _, b in s["colls"]) for s in rec.steps] == ref["payload_bytes"].tolist()
