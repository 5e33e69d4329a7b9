"""Shared fixtures: the embedded digits data set built once per test session."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


@pytest.fixture(scope="session")
def digits_dir(tmp_path_factory) -> Path:
    from distlab.data import prepare_dataset

    out = tmp_path_factory.mktemp("data") / "digits"
    prepare_dataset({"name": "digits", "kind": "image", "source": "sklearn_digits",
                     "val_fraction": 0.1, "test_fraction": 0.2}, out, seed=0)
    return out


def pgc_spec(scheme: str, s: int, **over) -> dict:
    spec = {
        "experiment": "pgc", "group": "test", "scheme": scheme, "backend": "simulated",
        "n": 4, "s": s, "seed": 0, "model": {"name": "logreg"}, "lr": 0.1, "dtype": "float64",
        "batch_size": 16, "steps": 12, "eval_every": 4,
        "cluster": {"compute": {"mode": "calibrated", "unit_seconds": 0.5},
                    "network": {"latency_s": 0.001, "bandwidth_Bps": 1e9},
                    "straggler": {"model": "exponential", "mean": 1.0}},
        "checkpoint": {"every_s": 0, "every_steps": 0},
    }
    spec.update(over)
    return spec


def tracked_copy(dest: Path) -> Path:
    """The repository's tracked and untracked-but-not-ignored files, copied to ``dest``
    (what a fresh clone would hold, plus work in progress)."""
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                           cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    for f in files:
        src = ROOT / f
        if src.is_file():
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / f)
    return dest


@pytest.fixture(scope="session")
def clean_tree(tmp_path_factory) -> Path:
    """A fresh clone's files in a temporary folder, for dry-runs that must not read (or
    depend on) the results the working tree holds after ``make reproduce``."""
    return tracked_copy(tmp_path_factory.mktemp("clean") / "repo")


# the README's collective targets, and the benchmarks outside `all`
NAMED_TARGETS = ("figures", "tables", "paper", "scorecard", "demo_bench", "demo_bench_gpu")


def fake_results(work: Path, targets=NAMED_TARGETS + ("all",)) -> int:
    """Every output of ``targets`` written as a placeholder (a data manifest with splits,
    ``{}`` for other JSON, empty otherwise) and marked up to date (``snakemake --touch``):
    a tree as ``make reproduce`` leaves it, without running a job.  Returns the count."""
    import json

    env = {**os.environ, "PATH": bin_path(), "HF_DATASETS_OFFLINE": "1"}
    r = subprocess.run(["snakemake", "--summary", "--forceall", *targets], cwd=work, env=env,
                       capture_output=True, text=True, timeout=600, check=True)
    rows = [line.split("\t") for line in r.stdout.splitlines()[1:] if "\t" in line]
    for row in rows:
        path = work / row[0]
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.name == "manifest.json" and path.parts[-3] == "data":
            path.write_text(json.dumps({"num_classes": 10, "image_shape": [1, 8, 8],
                                        "splits": {k: {"size": 100} for k in ("train", "val", "test")}}))
        else:
            path.write_text("{}" if path.suffix == ".json" else "")
    subprocess.run(["snakemake", "--touch", "--cores", "1", *targets], cwd=work, env=env,
                   capture_output=True, text=True, timeout=600, check=True)
    return len(rows)


@pytest.fixture(scope="session")
def results_tree(tmp_path_factory) -> Path:
    """A fresh clone's files with every default target's outputs present and up to date."""
    work = tracked_copy(tmp_path_factory.mktemp("with_results") / "repo")
    assert fake_results(work) > 100
    return work


def bin_path() -> str:
    """PATH with this interpreter's bin directory first (snakemake, distlab)."""
    return os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])


@pytest.fixture(scope="session")
def tiny_workflow(tmp_path_factory):
    """One end-to-end run of the whole workflow (`snakemake --cores 2`, every paper) on
    tests/configs/tiny.yaml in a fresh copy of the repository, shared by each paper's
    end-to-end test: (work folder, completed process).  A test that edits the config
    writes its own copy (:func:`tiny_variant`) so the others see the run as it was."""
    work = tracked_copy(tmp_path_factory.mktemp("tiny") / "repo")
    env = {**os.environ, "PATH": bin_path(), "HF_DATASETS_OFFLINE": "1"}
    r = subprocess.run(["snakemake", "--cores", "2", "--configfile", "tests/configs/tiny.yaml"],
                       cwd=work, env=env, capture_output=True, text=True, timeout=3000)
    return work, r


def tiny_variant(work: Path, name: str, edit) -> str:
    """A copy of the tiny config with ``edit(dict)`` applied, as a --configfile path."""
    import yaml

    data = yaml.safe_load((work / "tests/configs/tiny.yaml").read_text())
    edit(data)
    path = work / "tests/configs" / f"tiny_{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path.relative_to(work))


@pytest.fixture(scope="session")
def pydoc_dir(tmp_path_factory) -> Path:
    """The tiny text data set (the embedded pydoc topics), built once per test session."""
    from distlab.data import prepare_dataset

    out = tmp_path_factory.mktemp("data") / "pydoc"
    prepare_dataset({"name": "pydoc", "kind": "text", "source": "pydoc_topics", "val_fraction": 0.05,
                     "test_fraction": 0.05}, out, seed=0)
    return out
