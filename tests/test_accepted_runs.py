"""Accepted means it runs: every value the configuration check accepts runs, or the
check refuses it first, one line naming the key; a diverged run fails its job naming the step."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import yaml

from distlab.config.checks import config_errors
from distlab.results.runs import DIVERGENCE_FACTOR, RunDiverged, RunRecorder

ROOT = Path(__file__).resolve().parents[1]
BASE = yaml.safe_load((ROOT / "config/config.yaml").read_text())


def _errors(**override):
    config = copy.deepcopy(BASE)
    for dotted, value in override.items():
        *path, last = dotted.split("__")
        node = config
        for p in path:
            node = node[p]
        node[last] = value
    return config_errors(config, ROOT / "workflow/schemas")


def test_the_default_config_is_still_accepted():
    assert _errors() == []


@pytest.mark.parametrize("override, key, needle", [
    ({"seeds": [0, 2**64]}, "seeds", "past the largest seed 2,147,483,647"),
    ({"seeds": [10**23]}, "seeds", "past the largest seed"),
    ({"data_seed": 2**32}, "data_seed", "past the largest seed"),
    ({"baseline__straggler": {"model": "exponential", "mean": 1e308}}, "baseline.straggler.mean", "outside 0 to 3600"),
    ({"baseline__straggler": {"model": "dead", "slow_workers": [1]}}, "baseline.straggler.model",
     "'dead' cannot run in the baseline"),
    ({"cluster__network": {"latency_s": 0.001, "bandwidth_Bps": 1e-300}}, "cluster.network.bandwidth_Bps",
     "outside 1 to 1e+15"),
    ({"cluster__network": {"latency_s": 1e300, "bandwidth_Bps": 1e9}}, "cluster.network.latency_s", "outside 0 to 3600"),
    ({"baseline__lr": 1e300}, "baseline.lr", "outside 0 to 1e+06"),
    ({"datasets__digits__val_fraction": 0.4999, "datasets__digits__test_fraction": 0.4999}, "datasets.digits",
     "leaves under half the data"),
])
def test_values_that_would_crash_or_mean_nothing_are_refused_naming_the_key(override, key, needle):
    errs = _errors(**override)
    assert any(e.startswith(key + ":") and needle in e for e in errs), errs
    assert all("\n" not in e for e in errs)


def test_a_run_spec_given_directly_is_held_to_the_same_ranges():
    from distlab.config.specs import SpecError, validate_spec

    with pytest.raises(SpecError, match="seed 4294967296 is past the largest seed"):
        validate_spec({"seed": 2**32}, {"type": "object"}, "baseline")
    with pytest.raises(SpecError, match="bandwidth_Bps: 1e-300 is outside"):
        validate_spec({"cluster": {"network": {"bandwidth_Bps": 1e-300}}}, {"type": "object"}, "baseline")


@pytest.mark.parametrize("losses, step, needle", [
    ([2.3, 2.0, float("nan")], 2, "training loss nan at step 2"),
    ([2.3, 2.0, float("inf")], 2, "training loss inf at step 2"),
    ([2.3, 5.0, 2.3 * DIVERGENCE_FACTOR * 1.01], 2, "over 10 times its first value 2.3"),
])
def test_a_diverged_loss_fails_the_run_naming_the_step(tmp_path, losses, step, needle):
    rec = RunRecorder(tmp_path, {"lr": 1e4}, "simulated", "simulated", fail_on_divergence=True)
    with pytest.raises(RunDiverged) as e:
        for i, loss in enumerate(losses):
            rec.log(step=i, loss=loss)
    assert needle in str(e.value) and "lr 10000" in str(e.value) and "\n" not in str(e.value)
    assert len(rec.rows) == step


def test_a_diverging_baseline_fails_and_writes_no_manifest(tmp_path, digits_dir):
    """lr 1e5 in float64 (accepted: under the 1e6 cap): the loss blows up within a few steps;
    the run fails naming the step and leaves no manifest, so nothing of it is graded."""
    from distlab.baseline import train as dataparallel

    spec = {"experiment": "baseline", "method": "dgd", "backend": "simulated", "seed": 0,
            "model": {"name": "logreg"}, "n_workers": 2, "batch_size": 16, "lr": 1e5, "steps": 20,
            "eval_every": 10, "dtype": "float64",
            "cluster": {"compute": {"mode": "calibrated", "unit_seconds": 0.5},
                        "network": {"latency_s": 0.001, "bandwidth_Bps": 1e9},
                        "straggler": {"model": "none"}}}
    with pytest.raises(RunDiverged, match=r"the run diverged: training loss .* at step \d"):
        dataparallel.run_simulated(spec, digits_dir, tmp_path / "run", {"checkpoint": {"every_s": 0}})
    assert not (tmp_path / "run" / "manifest.json").exists()
    assert math.isfinite(DIVERGENCE_FACTOR)


# ---- overrides typed as YAML reads them ------------------------------------------------------------
def test_config_overrides_get_their_yaml_types():
    """`--config 'seeds=[0,1]'` and `'baseline={n_workers: 4}'`: Snakemake's base loader makes
    their numbers strings; the workflow's check types them as YAML would, and accepts them."""
    from snakemake.cli import parse_config

    from distlab.config.checks import retype_overrides
    from snakemake.utils import update_config

    overrides = parse_config(["seeds=[0,1,2]", "baseline={n_workers: 4, dtype: float32}"])
    assert overrides["seeds"] == ["0", "1", "2"]  # what Snakemake hands over
    config = copy.deepcopy(BASE)
    update_config(config, overrides)
    retype_overrides(config, overrides)
    assert config["seeds"] == [0, 1, 2] and config["baseline"]["n_workers"] == 4
    assert config["baseline"]["dtype"] == "float32"
    assert config_errors(config, ROOT / "workflow/schemas") == []


def test_too_many_workers_for_memory_names_n_workers():
    errs = _errors(baseline__n_workers=64, jobs={"max_mem_mb": 20000})
    assert any(e.startswith("baseline.n_workers: ") and "64 processes" in e for e in errs), errs


def test_a_quoted_number_is_told_to_lose_its_quotes():
    errs = _errors(baseline__lr="0.1")
    assert any(e.startswith("baseline.lr: ") and "it is quoted; write 0.1 without quotes" in e for e in errs), errs
