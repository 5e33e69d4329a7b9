"""The Snakemake workflow: lint, dry-runs of both configurations, the params
rerun trigger, and one tiny end-to-end run in a temporary folder."""

from __future__ import annotations

import json
import os
import subprocess

import pandas as pd
import pytest
import yaml

from conftest import FORKSERVER, NAMED_TARGETS, ROOT, bin_path, tiny_variant, workflow_tree

from distlab.scoring.reported import REPORTED

ENV = {**os.environ, "PATH": bin_path(), "HF_DATASETS_OFFLINE": "1"}


def smk(*args, cwd=None, timeout=300):
    return subprocess.run(["snakemake", *args], cwd=cwd or workflow_tree(), env=ENV, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(params=["clean", "with_results"])
def tree(request):
    """The repository as a fresh clone holds it, and as after ``make reproduce`` (every
    default output present and up to date): a dry-run must list the same jobs in both."""
    return request.getfixturevalue("clean_tree" if request.param == "clean" else "results_tree")


def test_lint_is_clean(clean_tree):
    r = smk("--lint", cwd=clean_tree)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Congratulations" in r.stdout + r.stderr


@pytest.mark.parametrize("configfile", ["config/config.yaml", "config/paper.yaml"])
def test_dry_run_resolves(configfile, target_dry_runs):
    r = target_dry_runs[("", configfile)]  # snakemake -n --forceall --quiet rules, in a fresh copy
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    for rule in ("prepare_data", "pgc_train_sim", "pgc_train_real", "baseline_train_sim",
                 "scorecard", "paper"):
        assert rule in out


def test_named_targets_resolve(tree):
    """The README's collective targets and the benchmark targets outside ``all`` (DeMo's, on gloo
    and on a GPU's NCCL) resolve, in one dry run (Snakemake names a target that does not; each
    paper's own target is resolved on its own below), in a fresh tree and in one whose outputs
    are all up to date (``--forceall``: an up-to-date target lists no job of its own)."""
    targets = list(NAMED_TARGETS)
    r = smk(*targets, "-n", "--forceall", "--quiet", "rules", cwd=tree)
    assert r.returncode == 0, r.stdout + r.stderr
    assert set(targets) <= {line.split()[0] for line in r.stdout.splitlines() if line.split()}


def _jobs(*args, cwd=None):
    r = smk(*args, "-n", "--forceall", "--quiet", "rules", cwd=cwd)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return {line.split()[0] for line in r.stdout.splitlines()
            if len(line.split()) == 2 and line.split()[1].isdigit()}


# a paper's target needs only its own rules (plus data and its scorecard section)
OWN = {"baseline": "baseline_", "pgc": "pgc_", "placement": "placement_",
       "local_learning": "local_", "demo": "demo_"}


@pytest.mark.parametrize("target", sorted(OWN))
def test_a_paper_target_runs_only_its_own_jobs(target, clean_tree):
    jobs = _jobs(target, cwd=clean_tree) - {target, "prepare_data", "data_floors", "scorecard_paper", "total"}
    foreign = {j for j in jobs if not j.startswith(OWN[target])}
    assert not foreign, f"{target} pulls in {foreign}"


@pytest.mark.slow
def test_tiny_end_to_end_run(tiny_workflow):
    work, r = tiny_workflow
    cfg = ["--configfile", "tests/configs/tiny.yaml"]
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    paper = work / "paper"
    for f in ["README.md", "scorecard.md", "scorecard.csv", "figures/baseline_loss.png",
              "figures/pgc_fig3.png", "figures/pgc_fig7.png", "figures/pgc_fig8.png",
              "figures/pgc_fig9.png", "figures/pgc_fig10.png", "tables/pgc_time_to_target.md",
              "tables/pgc_compute.md", "figures/pgc_real_vs_sim.png", "tables/pgc_real_vs_sim.md",
              "tables/baseline.md"]:
        p = paper / f
        assert p.exists() and p.stat().st_size > 0, f
    assert (paper / "figures/pgc_fig7.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    card = pd.read_csv(paper / "scorecard.csv").set_index("id")
    # a float64 identity, checked by tests/test_baseline.py: by construction (tests/test_scorecard_construction.py)
    assert card.loc["baseline.dgd_equals_single", "verdict"] == "by construction"
    assert card.loc["baseline.gloo_equals_single", "verdict"] == "reproduced"
    # not by construction: the stop reads the received workers' mean loss (tests/test_scorecard_construction.py)
    assert card.loc["pgc.fig9.gc_steps_equal_dgd", "verdict"] in {"reproduced", "not reproduced", "inconclusive"}
    # the tiny config leaves some settings out, so some claims are "not run" there
    assert set(card["verdict"]) <= {"reproduced", "not reproduced", "inconclusive", "by construction",
                                    "not testable here", "not run", REPORTED}
    summary = pd.read_csv(work / "results/pgc/simulation/summary.csv")
    assert set(summary["clock"]) == {"simulated"}
    assert set(summary["scheme"]) == {"dgd", "gc-cr", "pgc-cr", "is-sgd", "is-gc-cr"}
    real = pd.read_csv(work / "results/pgc/real/summary.csv")
    assert set(zip(real["backend"], real["clock"])) == {("gloo", "measured"),
                                                        ("simulated", "simulated")}
    base = pd.read_csv(work / "results/baseline/summary.csv")
    assert (base.loc[base["backend"] == "gloo", "params_max_abs_diff_across_ranks"] == 0).all()
    # every rule left a log and a benchmark
    assert any((work / "benchmarks/pgc").rglob("*.tsv"))
    assert any((work / "logs/pgc").rglob("*.log"))

    # nothing left to do; changing one experiment's setting reruns exactly that experiment
    r = smk("-n", *cfg, cwd=work)
    assert "Nothing to be done" in r.stdout + r.stderr
    # run-time settings (timeouts, checkpoint cadence) change no result: nothing reruns
    def runtime(c):
        c["runtime"]["checkpoint"] = {"every_s": 7, "every_steps": 2}
        c["runtime"]["timeout_s"] = 25

    r = smk("-n", "--configfile", tiny_variant(work, "runtime", runtime), cwd=work)
    assert "Nothing to be done" in r.stdout + r.stderr, r.stdout[-3000:]
    tiny = yaml.safe_load((work / "tests/configs/tiny.yaml").read_text())
    tiny["pgc"]["cloud"]["steps"] = 9
    r = smk("-n", "--quiet", "rules", "--configfile",
            tiny_variant(work, "cloud", lambda c: c["pgc"]["cloud"].__setitem__("steps", 9)), cwd=work)
    assert r.returncode == 0
    jobs = {line.split()[0]: int(line.split()[1]) for line in r.stdout.splitlines()
            if len(line.split()) == 2 and line.split()[1].isdigit()}
    n_cloud = len(tiny["pgc"]["cloud"]["schemes"])  # a simulated job runs every seed of its setting
    assert jobs.get("pgc_train_sim") == n_cloud
    assert "baseline_train_sim" not in jobs


def _rerun_then_score(work, targets, env=None, *extra):
    """Force the jobs of ``targets`` (and the scorecard's last job, nothing else) in one
    Snakemake run that brings the scorecard up to date: what reads the forced jobs reruns.
    Its output.  Jobs run forked from a preloaded server (:data:`FORKSERVER`), unless ``env``
    pins an instruction set: then every job runs fresh and a server would only cost its
    imports."""
    server = [] if (env or {}).get("DISTLAB_CPU_ISA") else FORKSERVER
    r = subprocess.run([*server, "snakemake", *targets, "scorecard", "--force", "--cores", "2",
                        "--configfile", "tests/configs/tiny.yaml", *extra],
                       cwd=work, env=env or ENV, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r.stdout + r.stderr


@pytest.mark.slow
def test_simulated_numbers_and_verdicts_do_not_depend_on_threads(tiny_workflow):
    """Rerun the tiny run's simulated baseline jobs and PGC's `simulation` group (every coding
    scheme) on two threads instead of one: the simulated numbers are bit for bit the same, and
    so is every verdict; rerun the PGC group on another instruction set: the same verdicts.
    (PGC's other groups run the same schemes at other settings.)"""
    work, r = tiny_workflow
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    tables = ["results/baseline/summary.csv", "results/pgc/simulation/summary.csv",
              "results/pgc/cloud/summary.csv", "paper/scorecard.csv"]
    before = {t: pd.read_csv(work / t) for t in tables}
    baseline = sorted(str(p.relative_to(work)) for p in work.glob("results/baseline/simulated/*/seed*/manifest.json"))
    group = sorted(str(p.relative_to(work)) for p in work.glob("results/pgc/simulation/s*/d*/simulated/*/seed0/manifest.json"))
    assert len(baseline) == 4 and len(group) == 5, (baseline, group)
    sims = ["baseline_train_sim", "pgc_train_sim"]
    out = _rerun_then_score(work, baseline + group, None, "--set-threads", *(f"{s}=2" for s in sims))
    assert "baseline_train_sim" in out and "pgc_train_sim" in out and "pgc_summarize" in out  # they ran again
    after = {t: pd.read_csv(work / t) for t in tables}
    # what the simulator measures about itself (its own wall time and memory, how long the
    # gradients took to compute here) moves; nothing it reports on the simulated clock may
    measured = {"wall_s", "peak_rss_mb", "simulator_overhead_s", "gradient_compute_s",
                "compute_charged_measured_s", "compute_measured_s"}
    # the horizon columns read the whole-split loss evaluated mid-run (float32 metrics, a reduction
    # whose order follows the thread count): equal to float32's resolution, not bit for bit
    midrun = {"train_loss_full_3q", "late_drop_train_loss_full"}
    for t in tables[:3]:
        b, a = before[t], after[t]
        keep = [c for c in b.columns if c not in measured | midrun]
        assert "final_train_loss_full" in keep
        pd.testing.assert_frame_equal(b[keep], a[keep], check_exact=True, obj=t)
        near = [c for c in b.columns if c in midrun]
        pd.testing.assert_frame_equal(b[near], a[near], check_exact=False, rtol=0, atol=1e-5, obj=t)
    card_b = before["paper/scorecard.csv"].set_index("id")["verdict"]
    card_a = after["paper/scorecard.csv"].set_index("id")["verdict"]
    timed = before["paper/scorecard.csv"].set_index("id")["measured"].astype(bool)
    flips = (card_b != card_a) & ~timed
    assert not flips.any(), card_b[flips].to_dict()

    # Another machine computes on other kernels (AVX2 rather than AVX-512, another MKL
    # branch): rerun PGC's group (the claims with margins; the baseline's are equalities
    # within 0.001) pinned to AVX2 (DISTLAB_CPU_ISA).  The numbers move in the last bits only,
    # and no verdict moves.
    out = _rerun_then_score(work, group, {**ENV, "DISTLAB_CPU_ISA": "avx2"})
    assert "pgc_train_sim" in out and "pgc_summarize" in out
    other = {t: pd.read_csv(work / t) for t in tables}
    for t in tables[1:2]:
        b, a = before[t], other[t]
        keep = [c for c in b.select_dtypes("number").columns if c not in measured | midrun]
        pd.testing.assert_frame_equal(b[keep], a[keep], check_exact=False, rtol=1e-6, atol=1e-9, obj=t)
        # the late drop is a difference of two close losses: its last bits are absolute, not relative
        near = [c for c in b.columns if c in midrun]
        pd.testing.assert_frame_equal(b[near], a[near], check_exact=False, rtol=0, atol=1e-5, obj=t)
    card_o = other["paper/scorecard.csv"].set_index("id")["verdict"]
    flips = (card_b != card_o) & ~timed
    assert not flips.any(), card_b[flips].to_dict()


@pytest.mark.slow
def test_extra_seeds_for_a_named_claim_add_runs_and_rerun_nothing(tiny_workflow):
    """stats.extra_seeds adds seeds to the settings one claim (or precondition) compares, as
    jobs of their own: no configured job reruns, only the new runs and what reads them."""
    work, r = tiny_workflow
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]

    def more(c):
        c.setdefault("stats", {"alpha": 0.05})["extra_seeds"] = {
            "pgc.fig9.pgc_fewer_steps_than_dgd": 2,      # a claim of PGC's simulated groups
            "baseline.dgd_equals_single": 1,             # the baseline: one job a seed
            "placement.bert.hsdag_learns": 1,            # a negative-control precondition
        }

    r = smk("-n", "--quiet", "rules", "--configfile", tiny_variant(work, "extra", more), cwd=work)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    jobs = {line.split()[0]: int(line.split()[1]) for line in r.stdout.splitlines()
            if len(line.split()) == 2 and line.split()[1].isdigit()}
    # a config file given on the command line is merged into config/config.yaml key by key, so
    # the default's own request (P1's planned n: pgc.fig9 ..._ma and pgc.fig10 rows) joins this
    # one's: 2 seeds x (pgc-cr, dgd) of the cloud setting from this request, and more from those
    assert jobs.get("pgc_train_sim_extra", 0) > 4
    assert jobs.get("baseline_train_sim") == 2   # seed 2 of simulated dgd and of single
    assert jobs.get("placement_run_extra") == 2  # seed 2 of hsdag and of hsdag_const on bert
    assert "demo_train_sim_extra" not in jobs    # DeMo's planned n asks for no extra seeds
    trained = {j for j in jobs if "train" in j or j.startswith("placement_run")} - {
        "pgc_train_sim_extra", "baseline_train_sim", "placement_run_extra", "demo_train_sim_extra"}
    assert not trained, trained  # no configured training job reruns
    for rule in ("pgc_summarize", "baseline_summarize", "placement_summarize", "scorecard_paper"):
        assert rule in jobs, rule
    r = smk("-n", "--configfile", tiny_variant(work, "extra", more), cwd=work)
    assert "cloud/s1/d0.5/simulated/pgc-cr/seed2/manifest.json" in r.stdout
    assert "cloud/s1/d0.5/simulated/gc-cr/seed2" not in r.stdout  # a setting the claim does not compare
    assert "baseline/simulated/dgd/seed2/manifest.json" in r.stdout
    assert "baseline/gloo/dgd/seed2" not in r.stdout            # the gloo row is another claim's
    assert "placement/extra/cpu_igpu/bert/hsdag_const/seed2.json" in r.stdout
    assert "placement/extra/cpu_igpu/bert/rnn" not in r.stdout


def test_an_extra_seed_job_trains_what_the_multi_seed_job_trains_for_that_seed():
    from types import SimpleNamespace

    from distlab.pipeline.extra_seeds import for_setting, requests
    from distlab.pgc.workflow import PGCWorkflow
    from distlab.pipeline.workflow import RulesContext
    from distlab.scoring.scorecard import load_claims
    from distlab.config.specs import each_seed

    cfg = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    cfg["stats"]["extra_seeds"] = {"pgc.fig9.pgc_fewer_steps_than_dgd": 3}
    reqs = requests(cfg, load_claims(ROOT / "config/claims.yaml"))
    wf = PGCWorkflow(cfg, RulesContext(extra_seeds=reqs))
    s, d = cfg["pgc"]["cloud"]["s"], f"{float(cfg['pgc']['cloud']['straggler']['mean']):g}"
    assert wf.extra_seeds("cloud", s, d, "pgc-cr") == [5, 6, 7]
    assert wf.extra_seeds("cloud", 0, d, "dgd") == [5, 6, 7]
    assert wf.extra_seeds("cloud", s, d, "gc-cr") == []
    assert for_setting(reqs, [0, 1, 2, 3, 4], "pgc_simulation", {"scheme": "pgc-cr", "s": 2}) == []
    w = SimpleNamespace(group="cloud", s=s, delay=d, scheme="pgc-cr")
    multi = each_seed(json.loads(wf.run_spec(w, "simulated", seeds=[0, 1, 2, 3, 4, 5])))
    single = each_seed(json.loads(wf.run_spec(w, "simulated", seeds=[5])))
    assert single == [multi[5]]
    with pytest.raises(ValueError, match="stats.extra_seeds: no claim or condition 'nope'"):
        requests({"stats": {"extra_seeds": {"nope": 1}}}, load_claims(ROOT / "config/claims.yaml"))
