"""The heavy rules' benchmark (``scripts/rulebench.py``): measured, never asserted; the test
checks what it writes, not how fast anything ran."""

from __future__ import annotations

import csv

import sys

from distlab.config.yamlio import load_yaml_strict

from conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
from rulebench import markdown, rulebench  # noqa: E402


def test_rulebench_writes_a_row_per_heavy_rule(tmp_path):
    config = load_yaml_strict(ROOT / "config/config.yaml")
    rows = rulebench(config, tmp_path / "b.csv", repeats=1, profile=None)
    names = [r["benchmark"] for r in rows]
    assert [n.split()[0] for n in names] == ["local_train_sweep", "atlas_job", "atlas_job", "demo_train_sim"]
    with open(tmp_path / "b.csv") as f:
        assert [r["benchmark"] for r in csv.DictReader(f)] == names
    assert all(r["gflop_per_step"] > 0 for r in rows)  # counted, not timed
    assert markdown(rows).count("\n") == len(rows) + 1
