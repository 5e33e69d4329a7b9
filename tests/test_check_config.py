"""`distlab check-config`: a config file Snakemake refuses without naming it (empty, comments
only, a list) is named, one line each; a valid file passes; a bad key is named as the workflow's
own check names it."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _check(*files):
    return subprocess.run([sys.executable, "-m", "distlab", "check-config", *map(str, files)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_files_snakemake_refuses_without_a_name_are_named(tmp_path):
    cases = {"empty.yaml": "", "comments.yaml": "# nothing but a comment\n",
             "list.yaml": "- seeds\n- 0\n", "scalar.yaml": "seeds\n"}
    for name, text in cases.items():
        (tmp_path / name).write_text(text)
    r = _check(*(tmp_path / n for n in cases), tmp_path / "missing.yaml")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == len(cases) + 1, r.stderr
    for name in (*cases, "missing.yaml"):
        assert sum(str(tmp_path / name) in x for x in lines) == 1, (name, r.stderr)
    assert all(x.startswith("distlab: ") for x in lines)
    assert "comments only" in r.stderr and "a YAML list" in r.stderr and "no such file" in r.stderr


def test_a_valid_file_passes_and_a_bad_key_is_named(tmp_path):
    r = _check("tests/configs/tiny.yaml")
    assert r.returncode == 0, r.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("demo:\n  steps: 0\nseeds: []\n")
    r = _check(bad)
    assert r.returncode == 2
    assert "demo.steps" in r.stderr and "seeds" in r.stderr
    assert "Traceback" not in r.stderr
