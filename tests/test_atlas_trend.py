"""The atlas's trend cells (``atlas.trend``): a few techniques, DDP among them, also at a larger
size and more workers, so the measured step-efficiency ratios span 3 sizes and 3 worker counts.
They join the ratios' fit and table; the map and the query rank only the full grid, where every
technique ran (a partial set is never ranked)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from conftest import ROOT

from distlab.atlas import train
from distlab.atlas.efficiency import efficiency_at, fit_log_ratio, measured_ratios
from distlab.atlas.projection import ClockSettings
from distlab.atlas.query import QueryError, check_complete, rank
from distlab.atlas.spec import SPEC_SCHEMA, check_spec
from distlab.atlas.workflow import run_specs, size_model
from distlab.config import specs

TINY = {"name": "gpt", "n_layer": 1, "block_size": 16}


def test_the_default_trend_spans_30x_in_parameters_and_three_worker_counts():
    """config/config.yaml: every trend technique gets its trend runs (the 32x model at N = 4, the
    large model at N = 8, every seed), labelled trend/, valid specs, none repeating a grid cell;
    a technique outside the trend gets none."""
    from distlab.models import build_model

    a = yaml.safe_load((ROOT / "config/config.yaml").read_text())["atlas"]
    tr = a["trend"]
    assert "ddp" in tr["techniques"]
    params = {name: sum(p.numel() for p in build_model("gpt", vocab_size=256, **{k: v for k, v in m.items()
                                                                                 if k != "name"}).parameters())
              for name, m in {**a["sizes"], **tr["sizes"]}.items()}
    assert max(params.values()) >= 30 * min(params.values())
    assert len(set(a["n_workers"]) | set(tr["n_workers"]) | {tr["size_n"]}) >= 3
    for t in a["techniques"]:
        specs_ = run_specs({**a, "compute": "measured"}, t, 0.01, None)
        trend = [(label, s) for label, s in specs_ if s.get("trend")]
        if t not in tr["techniques"]:
            assert trend == []
            continue
        want = len(a["seeds"]) * (len(tr["sizes"]) + len(tr["n_workers"]))
        assert len(trend) == want and all(label.startswith("trend/") for label, _ in trend)
        grid = {(json.dumps(s["model"], sort_keys=True), s["n_workers"], s["seed"]) for _, s in specs_
                if not s.get("trend") and s["cluster"]["straggler"]["model"] == "none"}
        for _, s in trend:
            assert (json.dumps(s["model"], sort_keys=True), s["n_workers"], s["seed"]) not in grid
            check_spec(specs.validate_spec(s, SPEC_SCHEMA, "atlas"))
    assert size_model(a, "xl") == tr["sizes"]["xl"] and size_model(a, "small") == a["sizes"]["small"]


@pytest.fixture(scope="module")
def trend_atlas(tmp_path_factory, pydoc_dir):
    """A small atlas: DDP, DiLoCo and GC-FR on two sizes at N = 2; DDP and DiLoCo also at a third
    size (N = 2) and at N = 4 (small size); 3 seeds, 30 steps; the target the highest loss every
    run reaches."""
    a = yaml.safe_load((ROOT / "config/config.yaml").read_text())["atlas"]
    a.pop("headline", None)
    a.update(techniques=["ddp", "diloco", "gc-fr"], compute="measured", steps=30, eval_every=5, eval_batches=1,
             batch_size=2, seeds=[0, 1, 2], n_workers=[2],
             sizes={"small": {**TINY, "d_model": 8, "n_head": 2}, "large": {**TINY, "d_model": 16, "n_head": 2}},
             train_under={"stragglers": [], "sizes": ["small"], "seeds": [0]},
             diloco={"H": 5, "outer_lr": 0.7, "outer_momentum": 0.9},
             trend={"techniques": ["ddp", "diloco"], "sizes": {"xl": {**TINY, "d_model": 32, "n_head": 2}},
                    "size_n": 2, "n_workers": [4], "workers_size": "small"})
    root = tmp_path_factory.mktemp("trend") / "techniques"
    mins = []
    for t in a["techniques"]:
        runs = []
        for label, spec in run_specs(a, t, 0.03, None):
            d = root / t / "runs" / label
            train.run_simulated(spec, pydoc_dir, d)
            runs.append(str(d))
            mins.append(min(s["val_loss"] for s in json.loads((d / "record.json").read_text())["steps"]
                            if s.get("val_loss") is not None))
        (root / t / "done.json").write_text(json.dumps({"runs": runs}))
    a["target_loss"] = float(max(mins)) + 1e-9
    return root, a


def test_the_trend_cells_join_the_ratios_not_the_ranking(trend_atlas):
    root, a = trend_atlas
    recs = check_complete(a, root)
    trend = [r for r in recs if r.trend]
    assert {r.technique for r in trend} == {"ddp", "diloco"} and len(trend) == 2 * 3 * 2
    cells, obs = measured_ratios(recs, a["target_loss"])
    dil = {(c.n_params, c.N) for c in cells if c.technique == "diloco"}
    gc = {(c.n_params, c.N) for c in cells if c.technique == "gc-fr"}
    assert len(dil) == 4 and len(gc) == 2 and gc < dil  # 3 sizes and 2 worker counts for DiLoCo
    xl = max(r.n_params for r in trend)
    sizes, nws = sorted({r.n_params for r in recs}), sorted({r.n for r in recs})
    fits = {t: f for t, f in ((t, fit_log_ratio(t, o)) for t, o in obs.items()) if f is not None}
    assert efficiency_at("diloco", xl, 2, cells, fits, sizes, nws, {}, False).basis == "measured"
    # GC-FR's own evidence is the grid's two sizes at N = 2: at the trend's size it is a fit or beyond,
    # never "measured"
    assert efficiency_at("gc-fr", xl, 2, cells, fits, sizes, nws, {}, False).basis != "measured"
    # the replay ranks a grid cell with every technique; a trend cell (two techniques) is not a
    # measured cell: it needs the projected clock
    small = min(r.n_params for r in recs)
    df, info = rank(recs, a, float(small), 2, 1.25e8, 1e-3, {"model": "none"}, 1, None)
    assert set(df["technique"]) == {"ddp", "diloco", "gc-fr"} and info["measured_cell"]
    with pytest.raises(QueryError, match="projected clock"):
        rank(recs, a, float(xl), 2, 1.25e8, 1e-3, {"model": "none"}, 1, None)
    df, _ = rank(recs, a, float(xl), 2, 1.25e8, 1e-3, {"model": "none"}, 1, ClockSettings(flops_per_s=1e10))
    assert set(df["technique"]) == {"ddp", "diloco", "gc-fr"}


def test_a_missing_trend_run_makes_the_atlas_partial(trend_atlas, tmp_path):
    root, a = trend_atlas
    done = json.loads((root / "ddp" / "done.json").read_text())
    kept = [d for d in done["runs"] if "/trend/" not in d or not d.endswith("n4/none/seed2")]
    assert len(kept) == len(done["runs"]) - 1
    import shutil

    copy = tmp_path / "techniques"
    shutil.copytree(root, copy)
    (copy / "ddp" / "done.json").write_text(json.dumps({"runs": kept}))
    with pytest.raises(QueryError, match=r"partial \(1 missing: ddp/trend/small/n4/none/seed2\)"):
        check_complete(a, copy)


def test_the_map_ranks_the_grid_and_tables_the_trend(trend_atlas, tmp_path, pydoc_dir):
    """build_map: cells.csv (the ranked map) holds no trend cell; efficiency.csv holds them, marked."""
    import pandas as pd

    from distlab.atlas.outputs import build_map

    root, a = trend_atlas
    ref = root.parent / "reference"
    runs = []
    for seed in (0,):
        spec = run_specs(a, "ddp", 0.03, None)[0][1]
        d = ref / f"seed{seed}"
        train.run_simulated(spec, pydoc_dir, d)
        runs.append(str(d))
    (ref / "done.json").parent.mkdir(parents=True, exist_ok=True)
    (ref / "done.json").write_text(json.dumps({"runs": runs}))
    floors = tmp_path / "floors.csv"
    pd.DataFrame({"split": ["val"], "bigram_nats": [2.4]}).to_csv(floors, index=False)
    a = {**a, "map": {"bandwidths": {"lo": 1.25e6, "hi": 5e10, "points": 3}, "latencies": [1e-3]},
         "extrapolate": {**a["extrapolate"], "sizes": [1e5], "workers": [4]}}
    build_map(a, [root / t / "done.json" for t in a["techniques"]], ref / "done.json", floors, tmp_path / "map")
    cells = pd.read_csv(tmp_path / "map/cells.csv")
    eff = pd.read_csv(tmp_path / "map/efficiency.csv")
    recs = check_complete(a, root)
    trend_pn = {(r.n_params, r.n) for r in recs if r.trend}
    sim = cells[cells["label"] == "simulated"] if "label" in cells else cells
    assert not {(int(p), int(n)) for p, n in zip(sim["n_params"], sim["N"])} & trend_pn
    assert eff["trend"].any() and not eff["trend"].all()
    # the winners are ranked entries, each naming its basis; a technique without a ratio is listed apart
    win = pd.read_csv(tmp_path / "map/winners.csv")
    ex = cells[cells["label"] == "extrapolated"]
    assert len(ex) and set(win["basis"]) <= {"replay", "reference", "measured", "fit", "published"}
    apart = set(ex.loc[~ex["ranked"].astype(bool), "technique"])
    assert not apart & set(win.loc[win["label"] == "extrapolated", "winner"])
    assert all(t in str(x) for t in apart for x in win.loc[win["label"] == "extrapolated", "apart"])
    assert {(int(p), int(n)) for p, n in zip(eff.loc[eff["trend"], "n_params"], eff.loc[eff["trend"], "N"])} \
        == trend_pn

    # the scorecard's table records its runs: read back whole, refused once one of them is gone
    from distlab.results.tables import ResultError, read_table_checked

    assert len(read_table_checked(tmp_path / "map/ttt.csv")) > 0
    # ... and only the runs it uses: the full grid's, not the trend cells'
    from distlab.results.tables import recorded_runs

    named = {p.resolve() for p in recorded_runs(tmp_path / "map/ttt.csv")}
    assert named == {Path(r.path).resolve() for r in recs if not r.trend} and trend_pn
    assert not named & {Path(r.path).resolve() for r in recs if r.trend}
    import shutil

    gone = json.loads((root / "gc-fr" / "done.json").read_text())["runs"][0]
    shutil.move(gone, tmp_path / "moved")
    try:
        with pytest.raises(ResultError, match="ttt.csv"):
            read_table_checked(tmp_path / "map/ttt.csv")
    finally:
        shutil.move(tmp_path / "moved", gone)

def test_the_config_check_names_a_trend_that_does_not_fit():
    """distlab.atlas.spec.check (found by the config checks): an unknown size, a trend without DDP,
    a trend size that redefines a grid size: one line each."""
    from distlab.atlas.spec import check
    from distlab.config.checks import paper_checks
    from distlab.papers import papers

    assert paper_checks()["atlas"] is check and paper_checks(papers())["atlas"] is check
    cfg = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    assert check(cfg) == []
    a = cfg["atlas"]
    a["trend"] = {**a["trend"], "techniques": ["demo"], "workers_size": "huge",
                  "sizes": {**a["trend"]["sizes"], "small": a["sizes"]["small"]}}
    errors = check(cfg)
    assert any(e.startswith("atlas.trend.workers_size: 'huge'") for e in errors)
    assert any("must include ddp" in e for e in errors)
    assert any(e.startswith("atlas.trend.sizes.small") for e in errors)
    assert len(errors) == 3
