"""Both configurations validate; a wrong type, an unknown key or an out-of-range
value stops the run before any job, with an error that names the key."""

from __future__ import annotations

import copy
import subprocess

import pytest
import yaml
from conftest import ROOT, bin_path, workflow_tree
from distlab.config.checks import validate_defaults
from distlab.papers import papers

SCHEMA_DIR = ROOT / "workflow/schemas"


def validate(cfg, schema_dir):
    """Snakemake's validate as the Snakefile runs it: config.schema.yaml and each registered
    paper's own schema over its section."""
    validate_defaults(cfg, schema_dir, papers())


def _load(name):
    return yaml.safe_load((ROOT / "config" / name).read_text())


@pytest.mark.parametrize("name", ["config.yaml", "paper.yaml"])
def test_shipped_configs_validate(name):
    validate(_load(name), SCHEMA_DIR)


def test_paper_config_names_the_real_data_and_models():
    cfg = _load("paper.yaml")
    assert cfg["datasets"]["cifar10"]["source"] == "hf"
    assert cfg["datasets"]["imagenet32"]["source"] == "hf"
    assert cfg["pgc"]["model"]["name"] == "resnet18"
    assert cfg["pgc"]["n"] == 12 and cfg["pgc"]["lr"] == 0.01
    # the authors' effective batches: 21 (of 256) and 5 (of 64) samples per partition, n = 12
    assert cfg["pgc"]["motivating"]["batch_size"] == 60
    assert cfg["pgc"]["simulation"]["batch_size"] == 252
    assert cfg["pgc"]["simulation"]["dataset"] == "imagenet32"


@pytest.mark.parametrize("mutate,key", [
    (lambda c: c["pgc"].__setitem__("n", "twelve"), "n"),                       # wrong type
    (lambda c: c["pgc"].__setitem__("nn", 12), "nn"),                           # unknown key
    (lambda c: c["stats"].__setitem__("alpha", 0.9), "alpha"),                  # out of range
    (lambda c: c["pgc"]["simulation"].__setitem__("schemes", ["pgc-xx"]), "pgc-xx"),
    (lambda c: c["cluster"]["compute"].__setitem__("mode", "guess"), "guess"),
    (lambda c: c["baseline"].__setitem__("n_workers", 0), "n_workers"),
])
def test_bad_values_are_named(mutate, key):
    cfg = copy.deepcopy(_load("config.yaml"))
    mutate(cfg)
    with pytest.raises(Exception) as err:
        validate(cfg, SCHEMA_DIR)
    assert key in str(err.value)


def test_snakemake_stops_before_any_job_on_a_bad_key(tmp_path):
    cfg = _load("config.yaml")
    cfg["pgc"]["simulation"]["stepz"] = 5
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(cfg))
    r = subprocess.run([f"{bin_path().split(':')[0]}/snakemake", "-n", "--configfile", str(path)],
                       cwd=workflow_tree(), capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert "stepz" in r.stdout + r.stderr
    assert "Job stats" not in r.stdout
