"""A setting the config check accepts but that reaches only some of the runs it seems to
(the baseline's straggler model: the simulated runs only, as the real backends inject no
stragglers) is said in one line at config check, never dropped without a word."""

from __future__ import annotations

import subprocess
import sys

import yaml

from conftest import ROOT
from distlab.config.checks import check_config, config_notes
from distlab.papers import papers


def _config(**baseline) -> dict:
    cfg = yaml.safe_load((ROOT / "config/config.yaml").read_text(encoding="utf-8"))
    cfg["baseline"].update(baseline)
    return cfg


def test_a_straggler_model_with_a_real_backend_is_one_note_naming_both():
    notes = config_notes(_config(backends=["simulated", "gloo"],
                                 straggler={"model": "exponential", "mean": 0.1}), papers())
    assert notes == ["baseline.straggler: model 'exponential' applies to the simulated runs only; "
                     "the gloo runs inject no stragglers (their step times are this machine's)"]


def test_no_note_where_the_setting_reaches_every_run():
    assert config_notes(_config(backends=["simulated"], straggler={"model": "exponential", "mean": 0.1}),
                        papers()) == []
    assert config_notes(_config(backends=["simulated", "gloo"], straggler={"model": "none"}), papers()) == []


def test_the_workflows_config_check_prints_the_note_once(capsys):
    check_config(_config(backends=["simulated", "gloo"], straggler={"model": "pareto", "mean": 0.1, "shape": 3}),
                 ROOT / "workflow/schemas", ROOT / "config/claims.yaml", papers=papers())
    err = capsys.readouterr().err.splitlines()
    assert len([ln for ln in err if "baseline.straggler" in ln]) == 1
    assert err[0].startswith("distlab: note: baseline.straggler: model 'pareto'")


def test_check_config_prints_it_beside_valid(tmp_path):
    f = tmp_path / "gloo.yaml"
    f.write_text("baseline:\n  backends: [simulated, gloo]\n  straggler: {model: exponential, mean: 0.2}\n")
    r = subprocess.run([sys.executable, "-m", "distlab", "check-config", str(f)], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("distlab: note: baseline.straggler: model 'exponential'") == 1
