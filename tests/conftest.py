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
