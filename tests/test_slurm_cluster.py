"""The tiny workflow's baseline on a real SLURM cluster through profiles/slurm.

Needs a running cluster with partitions `compute` and `gpu` (scripts/slurm_up.sh, as
root, starts a one-node one: .ci/run does so and sets DISTLAB_REQUIRE_SLURM=1, under
which a missing cluster fails this test instead of skipping it).  The run includes
real gloo jobs (two torchrun-style ranks each); every job but the target must have
gone through sbatch and completed in the partition its request names, and the results
must equal a local run's of the same target, commit and config (times aside).  The local run
is the test's own (the baseline target alone, a minute), not the session's whole tiny run: a
test that waited for that run shared its worker, and the two were the suite's longest path.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pandas as pd
import pytest

from conftest import FORKSERVER, ROOT, bin_path, need_slurm, slurm_client_missing, tracked_copy

ENV = {**os.environ, "PATH": bin_path(), "HF_DATASETS_OFFLINE": "1"}
TINY = "tests/configs/tiny.yaml"
# columns that hold times, memory or provenance: they differ between any two runs
VARYING = {"time", "step_time", "time_per_step", "total_time", "wall_s", "peak_rss_mb", "simulator_overhead_s",
           "compute_measured_s", "git_commit", "git_dirty", "bytes_per_step"}


def _cluster_answers() -> str | None:
    """None when a SLURM controller answers and has partitions compute and gpu, else why not."""
    missing = slurm_client_missing()
    if missing:
        return missing
    ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True)
    if "UP" not in ping.stdout:
        return "no SLURM controller answers (as root: scripts/slurm_up.sh starts one)"
    parts = subprocess.run(["sinfo", "-h", "-o", "%R"], capture_output=True, text=True).stdout.split()
    if not {"compute", "gpu"} <= set(parts):
        return f"the cluster has partitions {parts}, not compute and gpu (scripts/slurm_up.sh)"
    return None


@pytest.fixture(scope="module")
def cluster():
    need_slurm(_cluster_answers())


def _run(work, *args, timeout=600):
    return subprocess.run([sys.executable, "-m", "snakemake", *args, "--configfile", TINY], cwd=work, env=ENV,
                          capture_output=True, text=True, timeout=timeout)


def _rows(path):
    df = pd.read_csv(path)
    return df[[c for c in df.columns if c not in VARYING]]


@pytest.mark.slow
def test_the_tiny_baseline_runs_through_sbatch_and_equals_a_local_run(cluster, tmp_path):
    slurm = tracked_copy(tmp_path / "slurm")
    r = _run(slurm, "baseline", "--profile", "profiles/slurm",
             # poll often: the jobs here take seconds, the plugin's defaults suit hours
             "--slurm-init-seconds-before-status-checks", "1", "--seconds-between-status-checks", "2")
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]

    # every job but the target rule went through sbatch ...
    submitted = dict(re.findall(r"Job (\d+) has been submitted with SLURM jobid (\d+)", out))
    jobs = dict((jobid, rule) for rule, jobid in re.findall(r"\n(?:local)?rule (\w+):\n(?:.*\n)*?\s+jobid: (\d+)", out))
    local = {j for j, rule in jobs.items() if rule == "baseline"}
    assert set(submitted) == set(jobs) - local, (submitted, jobs)
    rules = {jobs[j] for j in submitted}
    assert {"prepare_data", "baseline_train_sim", "baseline_train_dist", "baseline_summarize"} <= rules
    assert sum(jobs[j] == "baseline_train_dist" for j in submitted) == 2  # the gloo runs, one per seed
    # ... and SLURM ran it to completion in the CPU partition (the tiny config has no NCCL job)
    for job, slurm_id in submitted.items():
        show = subprocess.run(["scontrol", "show", "job", slurm_id], capture_output=True, text=True).stdout
        assert "JobState=COMPLETED" in show, (jobs[job], show)
        assert "Partition=compute" in show, (jobs[job], show)
        assert "gres/gpu" not in show, (jobs[job], show)

    # after this partial run, the README's report command for it works, with the workflow's description
    r = _run(slurm, "baseline", "--report", "report.html", timeout=300)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    html = (slurm / "report.html").read_text()
    assert "baseline_loss.png" in html and "How the workflow runs" in html

    # the same results as a local run of the same target, commit and config (times and provenance aside)
    here = tracked_copy(tmp_path / "local")
    r = subprocess.run([*FORKSERVER, "snakemake", "--cores", "2", "baseline", "--configfile", TINY], cwd=here,
                       env=ENV, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    summary = "results/baseline/summary.csv"
    pd.testing.assert_frame_equal(_rows(slurm / summary), _rows(here / summary))
    runs = sorted(p.relative_to(here) for p in (here / "results/baseline").rglob("metrics.csv"))
    assert len(runs) == 6 and any("gloo" in str(p) for p in runs)
    for rel in runs:
        pd.testing.assert_frame_equal(_rows(slurm / rel), _rows(here / rel), obj=str(rel))
