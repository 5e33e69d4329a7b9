"""The repository as a user receives it: the README's paths exist, the conda
environment equals the lock, the SLURM profile claims GPUs for NCCL jobs, and
every command an error message suggests works."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import yaml

from conftest import ROOT, bin_path, workflow_tree

ENV = {**os.environ, "PATH": bin_path(), "HF_DATASETS_OFFLINE": "1"}


def smk(*args, timeout=180):
    return subprocess.run(["snakemake", *args], cwd=workflow_tree(), env=ENV, capture_output=True, text=True,
                          timeout=timeout)


def tracked(path: str) -> bool:
    out = subprocess.run(["git", "ls-files", path], cwd=ROOT, capture_output=True, text=True).stdout
    return bool(out.strip())


def test_every_repository_path_the_readme_names_is_tracked():
    text = (ROOT / "README.md").read_text()
    named = set(re.findall(r"`([A-Za-z0-9_.-]+/[A-Za-z0-9_./-]*)`", text))
    # outputs the workflow writes are not part of the repository
    outputs = ("results/", "logs/", "benchmarks/", "paper/", ".venv/", ".snakemake/")
    missing = [p for p in sorted(named) if not p.startswith(outputs) and "*" not in p and not tracked(p)]
    assert not missing, f"README names paths that are not in git ls-files: {missing}"
    # and the images it shows
    for img in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text):
        assert tracked(img), img


def test_no_project_file_points_outside_the_project():
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    offenders = []
    for f in files:
        p = ROOT / f
        if p.suffix in (".py", ".md", ".yaml", ".smk", ".rst", ".txt") or p.name in ("Snakefile", "Makefile"):
            text = p.read_text(errors="replace")
            if "PAPERS.md" in text or "../shared" in text:
                offenders.append(f)
    offenders = [f for f in offenders if f != "tests/test_repo.py"]
    assert not offenders


def test_no_environment_or_build_output_is_tracked():
    """The environment and the workflow's outputs are made on each machine: a tracked link or
    file there (a worktree's .venv link, say) would replace a user's environment on checkout.
    paper/ is tracked (the reader's copy of one evaluation), but never a table's record, which
    names this machine's run folders."""
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    made_here = (".venv", "results", "logs", "benchmarks", ".snakemake")
    tracked = [f for f in files if f.split("/")[0] in made_here
               or (f.startswith("paper/") and f.endswith(".record.json"))]
    assert not tracked, f"made on each machine, yet tracked: {tracked[:5]}"
    assert "paper/record.json" in files and "paper/scorecard.csv" in files


def test_conda_environment_lists_the_lock():
    sys.path.insert(0, str(ROOT / "envs"))
    import lock2conda

    assert (ROOT / "envs/distlab.yaml").read_text() == lock2conda.render(ROOT / "envs/requirements.txt")
    env = yaml.safe_load((ROOT / "envs/distlab.yaml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert "torch==2.14.1" in pip and "torchvision==0.29.1" in pip
    assert not any(p.startswith("-r") for p in pip)


def test_the_workflow_profile_caps_no_resource():
    # profiles/default is loaded beside any --profile: it must not cap gpu or memory
    prof = yaml.safe_load((ROOT / "profiles/default/config.yaml").read_text())
    assert "resources" not in prof and "default-resources" not in prof


@pytest.mark.slow
def test_slurm_profile_requests_gpus_for_an_nccl_job(tmp_path):
    cfg = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    cfg["baseline"]["backends"] = ["nccl"]
    path = tmp_path / "nccl.yaml"
    path.write_text(yaml.safe_dump(cfg))
    # conda is not needed to plan the jobs; env-modules stands in for it here
    r = smk("baseline", "-n", "--forceall", "--profile", "profiles/slurm", "--sdm", "env-modules",
            "--configfile", str(path))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    blocks = r.stdout.split("\nrule ")
    dist = [b for b in blocks if b.startswith("baseline_train_dist")]
    assert dist
    n = cfg["baseline"]["n_workers"]
    for b in dist:
        assert f"gpu={n}" in b, b
    sim = [b for b in blocks if b.startswith("baseline_train_sim")]
    assert sim and all("gpu=" not in b or "gpu=0" in b for b in sim)


def test_the_command_a_missing_data_error_suggests_works():
    from distlab.data.store import RERUN

    cmd = re.search(r"`([^`]+)`", RERUN).group(1).split()
    assert cmd[0] == "snakemake"
    r = smk(*cmd[1:], "-n", "--forceall")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "prepare_data" in r.stdout


def test_a_killed_data_build_leaves_no_hidden_folder_after_the_next(tmp_path):
    from distlab.data import prepare_dataset

    out = tmp_path / "digits"
    left = tmp_path / ".digits.tmp-abc123"
    left.mkdir()
    (left / "train.pt").write_bytes(b"half written")
    prepare_dataset({"name": "digits", "kind": "image", "source": "sklearn_digits",
                     "val_fraction": 0.1, "test_fraction": 0.2}, out, seed=0)
    assert not left.exists()
    assert (out / "manifest.json").exists()


@pytest.mark.slow
def test_a_killed_snakemake_is_recovered_with_unlock_then_the_same_command(tmp_path):
    import signal
    import time

    from conftest import tracked_copy

    work = tracked_copy(tmp_path / "repo")
    targets = [f"results/baseline/simulated/dgd/seed{s}/manifest.json" for s in (0, 1)]
    cmd = ["snakemake", *targets, "--cores", "1", "--configfile", "tests/configs/tiny.yaml"]
    proc = subprocess.Popen(cmd, cwd=work, env=ENV, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 120
    logs = work / "logs/baseline/simulated"
    while time.time() < deadline and not (logs.exists() and any(logs.rglob("*.log"))):
        assert proc.poll() is None, "snakemake ended before it could be killed"
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)  # the whole tree, as a closed terminal would
    proc.wait()
    r = subprocess.run(cmd, cwd=work, env=ENV, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "lock" in (r.stdout + r.stderr).lower()
    r = subprocess.run(["snakemake", "--unlock", "--configfile", "tests/configs/tiny.yaml"],
                       cwd=work, env=ENV, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    r = subprocess.run(cmd, cwd=work, env=ENV, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    for t in targets:
        assert (work / t).exists()
    assert not list(work.glob("results/baseline/simulated/*/*/checkpoint.pt"))
