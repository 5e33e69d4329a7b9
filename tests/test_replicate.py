"""make stability's replicate: the rows it reruns, their power, its seeds and kernels, its verdicts."""

import json
import math
import os
import re
import subprocess

import pandas as pd
import pytest
from conftest import ROOT

from distlab.results import machinekind
from distlab.scoring import replicate as rep

TINY = "tests/configs/tiny.yaml"


def _row(cid, verdict, est, lo, hi, *, test="less", metric="final_test_loss", measured=False, margin=math.nan,
         n=5, planned=math.nan, paper="P4"):
    return {"id": cid, "paper": paper, "verdict": verdict, "estimate": est, "ci_low": lo, "ci_high": hi,
            "test": test, "metric": metric, "measured": measured, "margin": margin, "n_seeds": n,
            "planned_n": planned, "ours": f"{est} [{lo}, {hi}]", "reason": "r", "seeds_needed": math.nan}


def test_the_rows_replicated_are_the_trained_decided_and_the_inconclusive_with_an_interval():
    card = pd.DataFrame([
        _row("trained.decided", "reproduced", -1.0, -1.5, -0.5),
        _row("trained.near", "inconclusive", -0.1, -0.5, 0.3),
        _row("trained.tie", "inconclusive", 0.0, 0.0, 0.0),                    # no interval: nothing to move
        _row("measured.decided", "reproduced", -1.0, -1.5, -0.5, metric="time_per_step", measured=True),
        _row("clock.decided", "reproduced", -1.0, -1.5, -0.5, metric="time_per_step"),
        _row("trained.untestable", "not testable here", -1.0, -1.5, -0.5),
        _row("steps.decided", "not reproduced", 2.0, 1.0, 3.0, metric="time_to_target_s")])
    assert list(rep.chosen(card)["id"]) == ["trained.decided", "trained.near", "steps.decided"]


def test_repeat_probability_is_eighty_percent_at_eighty_percent_power_and_the_rule_raises_n():
    """A verdict decided at 80 % power (estimate (z + 0.84) standard errors from the boundary)
    repeats with probability 0.8; a closer one gets the n that reaches 0.8, within the cap and
    the row's planned n; a row that repeats already keeps its n."""
    from scipy import stats

    z = stats.t.ppf(0.975, 4)
    se = 1.0
    at80 = _row("a", "reproduced", -(z + stats.norm.ppf(0.8)) * se, 0, 0)
    at80["ci_low"], at80["ci_high"] = at80["estimate"] - z * se, at80["estimate"] + z * se
    assert rep.repeat_probability(at80) == pytest.approx(0.8, abs=1e-9)
    assert rep.replicate_n(at80, 0.8, 50) == 5
    close = {**at80, "estimate": -1.1 * z, "ci_low": -2.1 * z, "ci_high": -0.1 * z}
    p = rep.repeat_probability(close)
    assert 0.5 < p < 0.8
    n = rep.replicate_n(close, 0.8, 50)
    # at that n the expected interval (standard error / sqrt(n / 5)) repeats it with 0.8
    shrink = math.sqrt(5 / n)
    assert stats.norm.cdf(1.1 * z / shrink - z) >= 0.8 > stats.norm.cdf(1.1 * z / math.sqrt(5 / (n - 1)) - z)
    assert rep.replicate_n(close, 0.8, 7) == 7
    assert rep.replicate_n({**close, "planned_n": 6}, 0.8, 50) == 6
    near = _row("b", "inconclusive", -0.1, -0.5, 0.3)
    assert 0 < rep.repeat_probability(near) < 1 and rep.replicate_n(near, 0.8, 50) == 5


def _released_control_card(control_jitter):
    """A scorecard row a released method's failed control decides: the learner is no slower than
    its baseline by its own test, but does not beat its control (crafted latencies by seed)."""
    from distlab.scoring import scorecard

    jitter = [0.0, 0.3, -0.2, 0.1, -0.15]
    rows = [{"method": m, "seed": s, "ms": v + j} for s, j in enumerate(jitter)
            for m, v in (("learner", 95.0), ("baseline", 100.0))]
    rows += [{"method": "control", "seed": s, "ms": 95.0 + j} for s, j in enumerate(control_jitter)]
    cond = {"toy.learns": {"kind": "control", "statement": "the learner beats its constant-reward control",
                           "table": "runs", "metric": "ms", "a": {"method": "learner"}, "b": {"method": "control"},
                           "test": "less", "released": "the released code"}}
    claim = {"id": "toy.noninferior", "paper": "P2", "source": "s", "table": "runs", "statement": "no slower",
             "metric": "ms", "test": "noninferior", "higher_is_better": False, "margin": 0.01,
             "margin_relative": True, "threshold": "1 %", "a": {"method": "learner"},
             "b": {"method": "baseline"}, "preconditions": ["toy.learns"]}
    stats_cfg = {"alpha": 0.05, "bootstrap": {"n_resamples": 200, "seed": 0, "confidence": 0.95}}
    return scorecard.evaluate_claims([claim], {"runs": pd.DataFrame(rows)}, stats_cfg, cond)


def test_the_scorecard_writes_the_deciding_preconditions_own_test_and_the_power_rule_reads_it():
    """A row a precondition decides repeats when the precondition is again not met: its repeat
    probability is 1 - P(the precondition's own test is met), from that test's interval (column
    decided_by), and it gets no extra seeds, however wide its own interval."""
    from scipy import stats

    card = _released_control_card([0.4, -0.1, 0.2, -0.3, 0.05])
    row = card.iloc[0].to_dict()
    assert row["verdict"] == "not reproduced" and rep.DECIDED_BY in row["reason"]
    pre = json.loads(row["decided_by"])
    d = [0.0 - 0.4, 0.3 + 0.1, -0.2 - 0.2, 0.1 + 0.3, -0.15 - 0.05]   # learner - control by seed
    ci = stats.t.interval(0.95, 4, loc=sum(d) / 5, scale=stats.sem(d))
    assert pre["precondition"] == "toy.learns" and pre["test"] == "less" and pre["n"] == 5
    assert (pre["estimate"], pre["ci_low"], pre["ci_high"]) == pytest.approx((sum(d) / 5, *ci))
    z, h = stats.t.ppf(0.975, 4), (ci[1] - ci[0]) / 2
    met = stats.norm.cdf(z * ((0.0 - pre["estimate"]) / h - 1))      # interval wholly below 0
    assert rep.repeat_probability(row) == pytest.approx(1 - met)
    assert rep.replicate_n(row, 0.999, 50) == 5
    assert rep.probability_of(row).startswith("precondition toy.learns not met again")
    # the same numbers read as a row its own interval decides ask for more seeds
    own = {**row, "decided_by": "", "estimate": -0.5, "ci_low": -1.0, "ci_high": -0.05, "test": "less",
           "margin": 0.0, "verdict": "reproduced"}
    assert rep.probability_of(own) == "the row's own interval" and rep.replicate_n(own, 0.8, 50) > 5
    # a scorecard without the column: its reason's marker keeps the n, with no probability to state
    old = {k: v for k, v in row.items() if k != "decided_by"}
    assert math.isnan(rep.repeat_probability(old)) and rep.replicate_n(old, 0.8, 50) == 5
    # a row no precondition decides has no decided_by
    assert _released_control_card([5.0, 5.3, 4.8, 5.1, 4.85]).iloc[0]["decided_by"] == ""
    # a deciding precondition without a paired interval (e.g. a bound on every run) is named, and
    # the row keeps its n with no probability to state
    bare = {**row, "decided_by": json.dumps({"precondition": "toy.bound"})}
    assert math.isnan(rep.repeat_probability(bare)) and rep.replicate_n(bare, 0.8, 50) == 5
    assert rep.probability_of(bare) == ("precondition toy.bound not met again (no interval of its test in "
                                        "this scorecard)")


def test_a_degenerate_interval_repeats_with_probability_one_and_gets_no_extra_seeds():
    flat = _row("flat", "reproduced", -0.4, -0.4, -0.4, margin=0.0)
    power = rep.power_table(pd.DataFrame([flat, _row("wide", "reproduced", -0.3, -0.55, -0.05, margin=0.0)]),
                            0.8, 50).set_index("id")
    assert power.at["flat", "repeat_probability"] == 1.0 and power.at["flat", "replicate_n"] == 5
    assert power.at["flat", "of"].startswith("a degenerate interval")
    assert power.at["wide", "of"] == "the row's own interval" and power.at["wide", "replicate_n"] > 5
    tie = _row("tie", "inconclusive", 0.0, 0.0, 0.0)   # on its boundary: the same tie again, inconclusive
    assert rep.repeat_probability(tie) == 1.0 and rep.replicate_n(tie, 0.8, 50) == 5
    none = _row("none", "reproduced", math.nan, math.nan, math.nan)
    assert rep.probability_of(none) == "no interval" and math.isnan(rep.repeat_probability(none))


def test_a_row_the_replicate_does_not_repeat_reads_unstable_with_both_estimates():
    card = pd.DataFrame([
        _row("held", "reproduced", -1.0, -1.5, -0.5),
        _row("flips", "reproduced", -0.6, -1.1, -0.1),
        _row("gone", "not reproduced", 0.7, 0.2, 1.2),
        _row("measured", "reproduced", -1.0, -1.5, -0.5, metric="time_per_step", measured=True),
        _row("far", "not testable here", math.nan, math.nan, math.nan)])
    again = pd.DataFrame([
        _row("held", "reproduced", -0.9, -1.4, -0.4),
        _row("flips", "inconclusive", -0.2, -0.7, 0.3)])
    out = rep.judge(card, again, ["held", "flips", "gone"], "seeds shifted by 1000, MKL_CBWR=COMPATIBLE")
    got = out.set_index("id")
    assert got.at["held", "verdict"] == "reproduced" and got.at["held", "replicated"].startswith("held: reproduced")
    assert got.at["flips", "verdict"] == "unstable here"
    assert "-0.6 [-1.1, -0.1]" in got.at["flips", "spread"] and "-0.2 [-0.7, 0.3]" in got.at["flips", "spread"]
    assert "-0.2 [-0.7, 0.3]" in got.at["flips", "reason"] and got.at["flips", "replicated"].startswith("did not hold")
    assert got.at["gone", "verdict"] == "unstable here" and "absent" in got.at["gone", "spread"]
    assert got.at["measured", "replicated"].startswith("no: measured")
    assert got.at["far", "replicated"] == ""
    skipped = rep.judge(card, None, ["held"], "x").set_index("id")
    assert skipped.at["held", "verdict"] == "reproduced" and skipped.at["held", "replicated"].startswith("no:")


def test_the_seed_block_is_disjoint_and_keeps_the_lists_relations():
    config = rep.merged_config(ROOT, [])
    shifted = rep.seed_lists(rep._merge(config, rep.shifted_seeds(config, 1000)))
    original = rep.seed_lists(config)
    assert shifted.keys() == original.keys() and shifted["seeds"] == [s + 1000 for s in original["seeds"]]
    assert not {s for v in original.values() for s in v} & {s for v in shifted.values() for s in v}
    rep.check_disjoint(config, int(config["replicate"]["seed_offset"]))
    with pytest.raises(ValueError, match="replicate.seed_offset: 20 does not give a disjoint seed block"):
        rep.check_disjoint(config, 20)


def test_the_replicate_adds_the_seeds_its_power_asks_for():
    config = {"seeds": [0, 1], "replicate": {"seed_offset": 1000}, "stats": {"extra_seeds": {"a": 3}}}
    power = pd.DataFrame([{"id": "a", "n": 5, "replicate_n": 9}, {"id": "b", "n": 5, "replicate_n": 5},
                          {"id": "c", "n": 5, "replicate_n": 7}])
    out = rep.overrides(config, power)
    assert out == {"seeds": [1000, 1001], "stats": {"extra_seeds": {"a": 7, "c": 2}}}
    # replicate.leave_out goes over the shifted seeds: a switched-off part keeps its seeds shifted
    config = {"pgc": {"real": {"enabled": True, "seeds": [0]}}, "replicate": {
        "seed_offset": 1000, "leave_out": {"pgc": {"real": {"enabled": False}}}}}
    assert rep.overrides(config, power.iloc[:0]) == {"pgc": {"real": {"enabled": False, "seeds": [1000]}},
                                                     "stats": {"extra_seeds": None}}


def test_configfiles_are_split_from_snakemakes_other_arguments():
    assert rep.split_configfiles(["--configfile", "a.yaml", "b.yaml", "--keep-going", "--configfile=c.yaml"]) == (
        ["a.yaml", "b.yaml", "c.yaml"], ["--keep-going"])


def test_cpuinfo_reads_the_machine_kind_and_two_kinds_differ_by_their_isa():
    text = ("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 1\n"
            "model name\t: AMD EPYC 7B13\nflags\t\t: fpu sse4_2 avx avx2 fma\n")
    kind = machinekind.cpuinfo(text)
    assert kind == {"vendor": "AuthenticAMD", "cpu_family": "25", "cpu_model_number": "1",
                    "cpu_model": "AMD EPYC 7B13", "isa": ["sse4_2", "avx", "avx2", "fma"]}
    other = {**kind, "isa": kind["isa"] + ["avx512f"]}
    assert machinekind.same_kind(kind, other) == ["isa"] and machinekind.same_kind(kind, dict(kind)) == []
    assert machinekind._versions("Intel(R) oneAPI Math Kernel Library Version 2024.2-Product Build 1\n"
                                 "  - Intel(R) MKL-DNN v3.12.0 (Git Hash x)") == {"mkl": "2024.2", "onednn": "3.12.0"}


@pytest.mark.slow
def test_the_replicates_jobs_run_on_disjoint_seeds_under_the_other_kernel_set(tmp_path):
    """On the tiny config: every job of the replicate's dry run is on a seed of the shifted block,
    none of the comparison's; a run of it records the kernel set it ran with in its manifest."""
    from conftest import workflow_tree

    tree = workflow_tree()  # Snakemake writes .snakemake/ where it runs: the copy, not the tree
    files, rest = rep.split_configfiles(["--configfile", TINY])
    config = rep.merged_config(tree, files)
    config["replicate"]["directory"] = str(tmp_path / "replicate")
    own = rep.prepare(tree, config, pd.DataFrame(columns=["id", "n", "replicate_n"]))
    env = rep.environment(config)
    dry = subprocess.run(rep.command(tree, config, 1, ["foundation"], files, ["-n"], own), cwd=tree, env=env,
                         capture_output=True, text=True, timeout=300)
    assert dry.returncode == 0, dry.stderr[-2000:]
    outputs = re.findall(r"output: (.*)", dry.stdout)
    seeds = {int(s) for o in outputs for s in re.findall(r"/seed(\d+)/", o)}
    comparison = {s for v in rep.seed_lists(config).values() for s in v}
    assert seeds and min(seeds) >= 1000 and not seeds & comparison
    manifest = next(o.split(", ")[0] for o in outputs if "baseline/simulated/" in o)
    done = subprocess.run(rep.command(tree, config, 1, [], files, [manifest], own), cwd=tree, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    record = json.loads((tmp_path / "replicate" / manifest).read_text())
    assert record["seed"] >= 1000
    kernels = record["hardware"]["kernels"]
    assert kernels["ATEN_CPU_CAPABILITY"] == "default" and kernels.get("MKL_CBWR") in (None, "")
    assert kernels["cpu_capability"] == "DEFAULT"
    assert record["hardware"]["kind"]["torch"] and "isa" in record["hardware"]["kind"]


def _replicate_plan(tree, tmp_path, leave_out):
    """The replicate's dry run of every paper's scorecard on the default config, as if nothing had
    run: (the rules with a job, the scorecard's table names), ``replicate.leave_out`` as given."""
    config = rep.merged_config(tree, [])
    config["replicate"]["directory"] = str(tmp_path / ("replicate" if leave_out else "whole"))
    if not leave_out:
        config["replicate"]["leave_out"] = {}
    own = rep.prepare(tree, config, pd.DataFrame(columns=["id", "n", "replicate_n"]))
    papers = ["P1", "P2", "P3", "P4", "atlas", "foundation"]
    dry = subprocess.run(rep.command(tree, config, 2, papers, [], ["-n", "--forceall", "-p"], own), cwd=tree,
                         capture_output=True, text=True, timeout=600)
    assert dry.returncode == 0, dry.stderr[-2000:]
    stats = dry.stdout.split("Job stats:", 1)[1].split("\n\n", 1)[0]
    rules = {w[0] for w in (line.split() for line in stats.splitlines()) if len(w) == 2 and w[1].isdigit()}
    return rules - {"total"}, set(re.findall(r"--table=(\w+)=", dry.stdout))


@pytest.mark.slow
def test_the_replicates_plan_runs_no_measured_rule_that_only_measured_rows_read(tmp_path):
    """With replicate.leave_out, the replicate's plan holds no measured rule but those whose runs
    also train what replicated rows read (replicate.MEASURED_AND_TRAINED); without it, the others
    are there.  What it leaves out only measured claims read: every claim (and every condition a
    claim names) reading a table the scorecard loses is measured, so no replicated row loses data."""
    import yaml
    from conftest import workflow_tree

    from distlab.scoring.stability import MEASURED_RULES

    tree = workflow_tree()
    rules, tables = _replicate_plan(tree, tmp_path, leave_out=True)
    whole_rules, whole_tables = _replicate_plan(tree, tmp_path, leave_out=False)
    assert set(rep.MEASURED_AND_TRAINED) <= set(MEASURED_RULES)
    assert rules & set(MEASURED_RULES) == set(rep.MEASURED_AND_TRAINED)
    assert {"local_bench_throughput", "local_bench_pc_cost", "pgc_train_real", "demo_train_real"} <= \
        (whole_rules - rules) & set(MEASURED_RULES)
    lost = whole_tables - tables
    assert lost and tables < whole_tables
    spec = yaml.safe_load((ROOT / "config/claims.yaml").read_text(encoding="utf-8"))

    def reads(entry):
        return {t for t in lost if f"'{t}'" in repr(entry)}

    reading = [c for c in spec["claims"] if reads(c) or any(
        reads(spec["conditions"][p if isinstance(p, str) else p["name"]]) for p in c.get("preconditions", []))]
    assert reading and [c["id"] for c in reading if c.get("measured") is not True] == []


def test_compare_snapshot_asks_digits_of_the_same_kind_and_held_verdicts_of_another():
    from distlab.scoring.compare_snapshot import compare

    snap = pd.DataFrame([
        {"id": "trained", "verdict": "reproduced", "ours": "-1.00 [-1.5, -0.5]", "measured": False,
         "replicated": "held: reproduced"},
        {"id": "measured", "verdict": "reproduced", "ours": "2.0x", "measured": True, "replicated": "no: measured"},
        {"id": "unheld", "verdict": "inconclusive", "ours": "0.1 [-0.2, 0.4]", "measured": False, "replicated": ""},
        {"id": "shaky", "verdict": "unstable here", "ours": "0.3", "measured": False, "replicated": "did not hold"}])
    digits = pd.DataFrame([
        {"id": "trained", "verdict": "reproduced", "ours": "-1.01 [-1.5, -0.5]"},
        {"id": "measured", "verdict": "not reproduced", "ours": "1.1x"},
        {"id": "unheld", "verdict": "reproduced", "ours": "-0.3 [-0.5, -0.1]"},
        {"id": "shaky", "verdict": "reproduced", "ours": "0.3"}])
    same = compare(snap, digits, same_kind=True).set_index("id")["status"]
    assert same.to_dict() == {"trained": "differs", "measured": "moved (measured)", "unheld": "differs",
                              "shaky": "not compared (unstable here in the snapshot)"}
    other = compare(snap, digits, same_kind=False).set_index("id")["status"]
    assert other["trained"] == "same" and other["unheld"] == "not compared (another machine kind)"
    flipped = compare(snap, digits.assign(verdict="inconclusive"), same_kind=False).set_index("id")["status"]
    assert flipped["trained"] == "differs"
    assert compare(snap, digits.iloc[1:], same_kind=False).set_index("id").at["trained", "status"] == "differs"


def test_compare_snapshot_command_runs_on_the_committed_snapshot(tmp_path):
    """`python -m distlab compare-snapshot`: the committed snapshot against itself passes (exit 0);
    a card whose held row reads another verdict fails (exit 1), naming the row."""
    import sys

    snap = tmp_path / "snap"
    snap.mkdir()
    card = pd.read_csv(ROOT / "paper/scorecard.csv")
    card.assign(replicated=["held: x" if v == "reproduced" else "" for v in card["verdict"]]).to_csv(
        snap / "scorecard.csv", index=False)
    cmd = [sys.executable, "-m", "distlab", "compare-snapshot", "--snapshot", str(snap)]
    same = subprocess.run([*cmd, "--card", str(ROOT / "paper/scorecard.csv")], capture_output=True,
                          text=True, timeout=120)
    assert same.returncode == 0 and "Another machine kind (the snapshot's record names no machine kind)" in same.stdout
    moved = card.assign(verdict=card["verdict"].replace("reproduced", "inconclusive"))
    moved.to_csv(tmp_path / "moved.csv", index=False)
    failed = subprocess.run([*cmd, "--card", str(tmp_path / "moved.csv")], capture_output=True, text=True,
                            timeout=120)
    assert failed.returncode == 1 and "| baseline.gloo_equals_single | reproduced | inconclusive |" in " ".join(
        failed.stdout.split())


def test_without_the_replicate_every_chosen_row_says_it_was_not_replicated(tmp_path):
    """replicate.enabled false: nothing runs, the power table is still written and every chosen
    row's column says the replicate did not run."""
    off = tmp_path / "off.yaml"
    off.write_text("replicate: {enabled: false}\n")
    card = pd.DataFrame([_row("t", "reproduced", -1.0, -1.5, -0.5), _row("u", "not testable here", 0, 0, 0)])
    judged, power, config = rep.run(card, 1, ROOT, ["--configfile", str(off)])
    assert config["replicate"]["enabled"] is False and list(power["id"]) == ["t"]
    got = judged.set_index("id")["replicated"]
    assert got["t"].startswith("no: the replicate did not run") and got["u"] == ""
    assert not (tmp_path / "replicate").exists()


def test_a_reported_finding_is_replicated_and_holds_only_on_the_same_side_of_its_boundary():
    """A reported row (an estimate beside a test) with an interval is replicated: it keeps its
    label, and holds only if the replicate's interval lies on the same side (the finding
    0.058 [0.012, 0.105] above 0 does not hold as 0.023 [-0.010, 0.057])."""
    reported = "reported (not a test)"
    card = pd.DataFrame([_row("abl", reported, 0.058, 0.012, 0.105, test="greater"),
                         _row("same", reported, 0.05, 0.01, 0.09, test="greater")])
    assert list(rep.chosen(card)["id"]) == ["abl", "same"]
    assert rep.side(card.iloc[0].to_dict()) == "above 0" and rep.decides(card.iloc[0].to_dict())
    again = pd.DataFrame([_row("abl", reported, 0.023, -0.010, 0.057, test="greater"),
                          _row("same", reported, 0.04, 0.005, 0.075, test="greater")])
    got = rep.judge(card, again, ["abl", "same"], "x").set_index("id")
    assert got.at["abl", "verdict"] == reported and got.at["abl", "replicated"].startswith("did not hold")
    assert "0.023 [-0.01, 0.057]" in got.at["abl", "spread"]
    assert got.at["same", "replicated"].startswith("held")


def test_make_stability_ends_with_the_replicate_and_a_verdict_it_does_not_repeat_reads_unstable(tmp_path, monkeypatch):
    """stability.run with Snakemake stood in for: the replicate's command carries the other kernel
    set in its environment and the shifted seeds in its config file; its scorecard disagrees on
    the foundation's trained row, which the settled scorecard then reads unstable here, and the
    report gains the replicate's section and power table."""
    from distlab.scoring import stability

    card = pd.read_csv(ROOT / "paper/scorecard/foundation.csv")
    (tmp_path / "paper").mkdir()
    card.to_csv(tmp_path / "paper/scorecard.csv", index=False)
    (tmp_path / "config").symlink_to(ROOT / "config")
    calls = []
    monkeypatch.setattr(stability, "_snakemake", lambda args, cwd: calls.append(args))
    monkeypatch.setattr(stability, "dag_rules", lambda cwd, targets, extra: {"baseline_train_dist"})
    monkeypatch.setattr("distlab.results.tables.record_graded_runs", lambda *a, **k: None)
    seen = {}

    def snakemake(cmd, cwd, check, env):
        seen["cmd"], seen["env"] = cmd, env
        tree = tmp_path / "replicate"
        seen["config"] = (tree / "replicate.yaml").read_text()
        (tree / "paper/scorecard").mkdir(parents=True)
        card.assign(verdict=card["verdict"].replace("reproduced", "inconclusive")).to_csv(
            tree / "paper/scorecard/foundation.csv", index=False)

    monkeypatch.setattr(rep.subprocess, "run", snakemake)
    stability.run(1, tmp_path / "paper/stability.md", cwd=tmp_path, k=2)
    assert seen["env"]["ATEN_CPU_CAPABILITY"] == "default"  # the config's kernel set, MKL left as it is
    assert seen["env"].get("MKL_CBWR") == os.environ.get("MKL_CBWR")
    assert "paper/scorecard/foundation.csv" in seen["cmd"] and "- 1000" in seen["config"]
    settled = pd.read_csv(tmp_path / "paper/scorecard_stable.csv").set_index("id")
    assert settled.at["baseline.gloo_equals_single", "verdict"] == "unstable here"
    assert settled.at["baseline.gloo_equals_single", "replicated"].startswith("did not hold: inconclusive")
    assert "## The replicate" in (tmp_path / "paper/stability.md").read_text()
    assert list(pd.read_csv(tmp_path / "paper/replicate_power.csv")["id"]) == ["baseline.gloo_equals_single"]
    # paper/ is then the settled evaluation's: its scorecard is the settled one, and the workflow's
    # default target runs last (the write-up, tables and figures made again with it)
    whole = pd.read_csv(tmp_path / "paper/scorecard.csv").set_index("id")
    assert whole.at["baseline.gloo_equals_single", "verdict"] == "unstable here"
    assert "**" in (tmp_path / "paper/scorecard.md").read_text() and calls[-1] == ["--cores", "1"]
