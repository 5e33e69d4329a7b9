"""P3's learning-rate sweep: every method at its own lr, chosen on the validation
split by the lowest worst-seed loss; the comparison runs read the choice when they start and take
the seeds the sweep trained at the chosen lr from it (same spec but for provenance)."""

from __future__ import annotations

import copy
import json

from pathlib import Path

import pandas as pd
import pytest

from distlab.local import workflow
from distlab.local.summary import choose, sweep_table
from distlab.local.sweep import resolve_lr, take_from_sweep
from distlab.results.sweeps import pick_all, source as sweep_source
from distlab.config.specs import SpecError, each_seed

from test_local_workflow import config, tiny_section

ROOT = Path(__file__).resolve().parents[1]


def _run(d, spec, val, test=None):
    d.mkdir(parents=True)
    (d / "metrics.csv").write_text("step,loss\n0,1.0\n")
    (d / "manifest.json").write_text(json.dumps({"spec": spec, "method": "bp",
                                                 "final": {"val_loss": val, "test_loss": test or val}}))


def test_the_choice_is_the_lowest_worst_seed_not_the_lowest_mean():
    """lr 0.03 has the lower mean, but one of its seeds went astray: 0.01 is chosen."""
    rows = pd.DataFrame([{"key": "rc/bp", "lr": 0.01, "seed": 1, "final_val_loss": 1.90},
                         {"key": "rc/bp", "lr": 0.01, "seed": 2, "final_val_loss": 1.92},
                         {"key": "rc/bp", "lr": 0.03, "seed": 1, "final_val_loss": 1.70},
                         {"key": "rc/bp", "lr": 0.03, "seed": 2, "final_val_loss": 2.05},
                         {"key": "pc/bp", "lr": 0.01, "seed": 1, "final_val_loss": 2.2},
                         {"key": "pc/bp", "lr": 0.01, "seed": 2, "final_val_loss": 2.3}])
    t = choose(rows)
    assert t.groupby(["key", "lr"]).size().eq(1).all() and len(t) == 3
    assert t.loc[t["chosen"], ["key", "lr"]].values.tolist() == [["pc/bp", 0.01], ["rc/bp", 0.01]]
    assert t.set_index(["key", "lr"]).loc[("rc/bp", 0.03), "mean"] == pytest.approx(1.875)
    assert t.set_index(["key", "lr"]).loc[("rc/bp", 0.03), "worst"] == pytest.approx(2.05)
    # rc/bp's choice is its grid's lower edge; pc/bp has a one-point grid, which has no edge to flag
    assert t.set_index(["key", "lr"])["edge"].to_dict() == {
        ("pc/bp", 0.01): "", ("rc/bp", 0.01): "lower", ("rc/bp", 0.03): ""}


def test_a_choice_inside_its_grid_is_not_flagged_and_one_on_the_upper_edge_is(tmp_path):
    rows = pd.DataFrame([{"key": k, "lr": lr, "seed": 1, "final_val_loss": v}
                         for k, vals in (("rc/bp", (1.96, 1.88, 1.83)), ("rc/rc-seq", (1.94, 1.84, 1.88)))
                         for lr, v in zip((0.0025, 0.005, 0.01), vals)])
    t = choose(rows).set_index(["key", "lr"])
    assert t.loc[t["chosen"], "edge"].to_dict() == {("rc/bp", 0.01): "upper", ("rc/rc-seq", 0.005): ""}
    runs = []
    for r in rows.itertuples(index=False):
        g, m = r.key.split("/")
        d = tmp_path / f"sweep/lr{r.lr:g}/{g}/{m}/seed1"
        _run(d, {"lr": r.lr, "seed": 1}, r.final_val_loss)
        runs.append(d / "manifest.json")
    sweep_table(runs, tmp_path / "t.md", tmp_path / "t.csv", tmp_path / "c.json")
    md = (tmp_path / "t.md").read_text()
    assert "| rc/bp | 0.01 | 1 | 1.830 | n/a | 1.830 | 1.830 | **chosen** (upper edge of the grid) |" in md
    assert "| rc/rc-seq | 0.005 | 1 | 1.840 | n/a | 1.840 | 1.840 | **chosen** |" in md
    assert pd.read_csv(tmp_path / "t.csv")["edge"].fillna("").tolist().count("upper") == 1


def test_the_sweep_table_marks_the_choice_and_writes_followers(tmp_path):
    runs = []
    for lr, vals in ((0.003, (2.0, 2.1)), (0.01, (1.9, 1.95))):
        for seed, v in zip((1, 2), vals):
            d = tmp_path / f"sweep/lr{lr:g}/rc/rc-seq/seed{seed}"
            _run(d, {"lr": lr, "seed": seed}, v)
            runs.append(d / "manifest.json")
    chosen = sweep_table(runs, tmp_path / "t.md", tmp_path / "t.csv", tmp_path / "c.json",
                         {"rc/rc-par": "rc/rc-seq"})
    assert chosen == {"rc/rc-seq": 0.01, "rc/rc-par": 0.01}
    assert json.loads((tmp_path / "c.json").read_text()) == chosen
    md = (tmp_path / "t.md").read_text()
    assert "| rc/rc-seq | 0.01 | 2 | 1.925 |" in md and md.count("**chosen**") == 1
    assert "| rc/rc-seq | 0.003 | 2 | 2.050 |" in md
    with pytest.raises(ValueError, match="follows"):
        sweep_table(runs, tmp_path / "t.md", tmp_path / "t.csv", tmp_path / "c.json", {"pc/bp": "rc/bp"})


def test_a_comparison_run_reads_its_lr_from_the_choice(tmp_path):
    (tmp_path / "c.json").write_text(json.dumps({"rc/bp": 0.003}))
    spec = {"lr": {"sweep": str(tmp_path / "c.json"), "key": "rc/bp"}, "seed": 0}
    out = resolve_lr(spec)
    assert out["lr"] == 0.003 and out["lr_chosen_by"].endswith("c.json:rc/bp")
    assert resolve_lr({"lr": 0.01}) == {"lr": 0.01}
    with pytest.raises(SpecError, match="lr.key"):
        resolve_lr({"lr": {"sweep": str(tmp_path / "c.json"), "key": "pc/bp"}})
    with pytest.raises(SpecError, match="lr.sweep"):
        resolve_lr({"lr": {"sweep": str(tmp_path / "none.json"), "key": "rc/bp"}})


@pytest.mark.parametrize("group,method", [("rc", "bp"), ("rc", "rc-seq"), ("rc", "rc-pc-T2"), ("pc", "pc-fixed")])
def test_the_sweep_trains_exactly_the_comparison_runs_of_its_seeds(tmp_path, group, method):
    """A sweep run at lr x is the comparison's run of that seed at lr x but for where the lr came
    from: the workflow's pick step (local_table_sweep's picks) copies it at the chosen lr to the
    folder the comparison spec's ``reuse`` names, and the job takes it (metrics copied, manifest
    last with reused_from), and not when any setting differs or nothing was picked."""
    c = copy.deepcopy(tiny_section())
    c["sweep"]["lrs"][f"{group}/{method}"] = [0.01, 0.003]
    c["sweep"]["follows"].pop(f"{group}/{method}", None)
    assert workflow.swept(c, group, method)
    root = str(tmp_path / "sweep")
    seeds = [0, 1]
    (tmp_path / "sweep").mkdir()
    (tmp_path / "sweep/chosen_lr.json").write_text(json.dumps({f"{group}/{method}": 0.003}))
    ss = workflow.sweep_seeds(c, group, method, seeds)
    sweep = workflow.sweep_spec(c, group, method, "0.003", seeds)
    assert sweep["lr"] == 0.003 and sweep["seeds"] == ss and not sweep["timed"]
    for one in each_seed(sweep):
        _run(tmp_path / f"sweep/lr0.003/{group}/{method}/seed{one['seed']}", one, 1.5)
    job = (workflow.untimed_bp_spec(c, ss, root) if (group, method) == ("rc", "bp")
           else workflow.seeds_spec(c, group, method, ss, root))
    assert job["lr"] == {"sweep": f"{root}/chosen_lr.json", "key": f"{group}/{method}"}
    assert job["reuse"] == {str(s): workflow.picked_run(root, group, method, s) for s in ss}
    one = each_seed(resolve_lr(job))[0]
    assert sweep_source(one) is None  # not picked yet
    for s in ss:  # the pick step, as rule local_table_sweep runs it for these seeds
        pick_all(tmp_path / "sweep/chosen_lr.json", [{
            "key": f"{group}/{method}", "out": workflow.picked_run(root, group, method, s),
            "runs": {f"{lr:g}": f"{root}/lr{lr:g}/{group}/{method}/seed{s}" for lr in (0.003,)}}])
    assert sweep_source(one) is not None
    assert take_from_sweep(one, tmp_path / "run")
    man = json.loads((tmp_path / "run/manifest.json").read_text())
    assert man["spec"] == one and man["reused_from"].endswith(f"lr0.003/{group}/{method}/seed{one['seed']}")
    assert (tmp_path / "run/metrics.csv").read_text() == "step,loss\n0,1.0\n"
    assert sweep_source(dict(one, steps=one["steps"] + 1)) is None  # another setting: trained
    assert sweep_source({k: v for k, v in one.items() if k != "reuse"}) is None


def test_timed_runs_read_the_choice_and_never_take_a_sweep_run():
    c = tiny_section()
    for method in ("bp", "rc-par", "rc-async"):
        s = workflow.spec(c, "rc", method, 0, sweep_root="S")
        assert s["timed"] and "reuse" not in s
        assert s["lr"] == {"sweep": "S/chosen_lr.json", "key": workflow.leader(c, "rc", method)}
    assert workflow.leader(c, "rc", "rc-par") == "rc/rc-seq"
    assert workflow.spec(c, "rc", "bp", 0)["lr"] == c["lr"]  # no sweep root: the benchmarks' lr
    assert workflow.sweep_inputs(c, "rc", "rc-par", [0], [0, 1], "S") == ["S/chosen_lr.json"]
    assert workflow.sweep_inputs(c, "rc", "rc-seq", [0, 1], [0, 1], "S") == [
        "S/chosen_lr.json", "S/chosen/rc/rc-seq/seed1/manifest.json"]


def test_the_sweep_config_is_checked():
    from distlab.local.spec import check

    for name in ("config/config.yaml", "tests/configs/tiny.yaml"):
        assert check(config(name)) == [], name
    c = config()
    s = c["local_learning"]["sweep"]
    s["follows"]["rc/rc-par"] = "rc/nothing"
    s["seeds"] = [1, 9]
    s["lrs"].pop("pc/bp")
    errs = check(c)
    assert "local_learning.sweep.seeds: 9 is not among the configured seeds" in errs
    assert "local_learning.sweep.follows.rc/rc-par: follows rc/nothing, which is not swept here" in errs
    assert "local_learning.sweep: pc/bp is neither swept (lrs) nor follows a swept method" in errs
    assert len(errs) == 3, errs
    c["local_learning"].pop("sweep")
    assert check(c) == ["local_learning.lr_from_sweep: true, but there is no local_learning.sweep"]


def test_the_default_sweep_costs_what_the_docs_say():
    """The default config's sweep: which jobs it adds and which seeds it trains (the budget
    arithmetic of docs/local_learning.md counts these runs)."""
    c = config()["local_learning"]
    seeds = [0, 1, 2, 3, 4]
    pts = workflow.sweep_points(c)
    runs = workflow.sweep_runs(c, seeds, "S")
    per = {(g, m): len(workflow.sweep_seeds(c, g, m, seeds)) for g, m, _ in pts}
    assert per == {("rc", "bp"): 2, ("rc", "rc-seq"): 2, ("pc", "bp"): 2, ("pc", "pc-fixed-trunc"): 2}
    assert all(workflow.leader(c, "rc", m) == "rc/rc-seq" for m in ("rc-par", "rc-async"))
    assert all(len(workflow.sweep_lrs(c, g, m)) == 3 for g, m in per)  # a choice inside is bracketed
    assert len(runs) == sum(per[(g, m)] for g, m, _ in pts) == 24
    # every run the sweep trains at the chosen lr is a comparison run: the extra runs are the
    # other lrs' only, 16 (two lrs of two seeds of each swept method), which with the 5 seeds'
    # comparison runs of the 4 methods makes the docs' budget paragraph's 36
    extra = sum(per[(g, m)] * (len(workflow.sweep_lrs(c, g, m)) - 1) for g, m in per)
    assert extra == len(runs) - sum(per.values()) == 16
    assert extra + len(per) * len(seeds) == 36
    text = " ".join((ROOT / "docs/local_learning.md").read_text().split())
    assert "the sweep trains 24 runs" in text and "36 runs in all" in text
