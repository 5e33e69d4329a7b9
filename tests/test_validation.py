"""One validation pass: every problem of a configuration listed, one line each
with its key, before any job, by the project's checker and through ``snakemake -n``.

The malformed configurations live in tests/configs/bad/<paper>/ (ten for each paper,
two for the baseline); each names its problems in ``# expect: KEY [| TEXT]`` lines, and
the checker must list exactly those: none missing, no line without its key, nothing else."""

from __future__ import annotations

import json

import subprocess
from pathlib import Path

import pytest
import yaml
from snakemake.utils import update_config

from conftest import ROOT, bin_path, dry_runs, workflow_tree
from distlab.config.checks import (COUNT_LIMITS, ConfigError, check_config, config_errors,
                            duplicate_key_errors)
from distlab.config.checks import _line_key as line_key

SCHEMAS = ROOT / "workflow/schemas"
CLAIMS = ROOT / "config/claims.yaml"
DEFAULT = ROOT / "config/config.yaml"
BAD = sorted((ROOT / "tests/configs/bad").glob("*/*.yaml"))
PAPERS = ("pgc", "demo", "placement", "local_learning")


def _expected(path: Path) -> list[tuple[str, str]]:
    out = []
    for line in path.read_text().splitlines():
        if line.startswith("# expect:"):
            key, _, text = line.split(":", 1)[1].partition("|")
            out.append((key.strip(), text.strip()))
    return out


def _merged(path: Path) -> dict:
    """config/config.yaml with ``path`` merged in, as ``snakemake --configfile`` does."""
    # a plain copy first: YAML aliases in the default (one link shared by two pairs) would let
    # the in-place merge change both, which Snakemake's own merge does not
    cfg = json.loads(json.dumps(yaml.safe_load(DEFAULT.read_text())))
    update_config(cfg, yaml.safe_load(path.read_text()))
    return cfg


def _assert_lists_exactly(lines: list[str], expected: list[tuple[str, str]], where: str) -> None:
    left = list(lines)
    for key, text in expected:
        hit = [ln for ln in left if line_key(ln) == key and text in ln]
        assert hit, f"{where}: no line for {key!r} ({text!r}) in:\n" + "\n".join(lines)
        left.remove(hit[0])
    assert not left, f"{where}: lines not expected:\n" + "\n".join(left)


def test_ten_malformed_configs_for_every_paper():
    for paper in PAPERS:
        assert len([p for p in BAD if p.parent.name == paper]) >= 10, paper
    for path in BAD:
        assert len(_expected(path)) >= 1, path


@pytest.mark.parametrize("path", BAD, ids=[f"{p.parent.name}/{p.stem}" for p in BAD])
def test_the_checker_lists_every_problem_with_its_key(path):
    expected = _expected(path)
    cfg = _merged(path)
    errors = config_errors(cfg, SCHEMAS, CLAIMS, [DEFAULT, path])
    _assert_lists_exactly(errors, expected, path.name)
    with pytest.raises(ConfigError, match=rf"\({len(expected)} problem\(s\)\); nothing was run"):
        check_config(cfg, SCHEMAS, CLAIMS, [DEFAULT, path])


@pytest.mark.slow
def test_snakemake_n_lists_every_problem_before_any_job():
    """Every bad config through Snakemake's command line (`snakemake -n --configfile X`),
    one interpreter for all of them (Snakemake's own `main`, so its start-up is paid once)."""
    runs = dry_runs(BAD, timeout=300)
    for path in BAD:
        code, chunk = runs[str(path)]
        assert code == 1, chunk[-2000:]
        assert "Job stats" not in chunk and "Building DAG" not in chunk
        assert "Error validating config file" not in chunk   # the checker ran first
        lines = [ln[4:] for ln in chunk.splitlines() if ln.startswith("  - ")]
        _assert_lists_exactly(lines, _expected(path), f"snakemake -n --configfile {path.name}")


@pytest.mark.slow
def test_the_snakemake_command_itself_refuses_a_config_with_two_mistakes():
    path = ROOT / "tests/configs/bad/pgc/01-two-mistakes.yaml"
    r = subprocess.run([f"{bin_path().split(':')[0]}/snakemake", "-n", "--configfile", str(path)],
                       cwd=workflow_tree(), capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    lines = [ln[4:] for ln in (r.stdout + r.stderr).splitlines() if ln.startswith("  - ")]
    _assert_lists_exactly(lines, _expected(path), "snakemake -n")


# --------------------------------------------------------------- the pieces
def test_the_shipped_configs_and_claims_have_no_duplicate_keys():
    for path in (DEFAULT, ROOT / "config/paper.yaml", CLAIMS, ROOT / "tests/configs/tiny.yaml"):
        assert duplicate_key_errors(path) == [], path
    assert config_errors(yaml.safe_load(DEFAULT.read_text()), SCHEMAS, CLAIMS, [DEFAULT]) == []
    paper = ROOT / "config/paper.yaml"
    cfg = yaml.safe_load(DEFAULT.read_text())
    update_config(cfg, yaml.safe_load(paper.read_text()))
    assert config_errors(cfg, SCHEMAS, CLAIMS, [DEFAULT, paper]) == []


def test_duplicate_keys_at_any_level_name_the_key_and_lines(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("a:\n  b: [1, {c: 1, c: 2}]\n  d: 1\na: 3\n")
    assert [line_key(e) for e in duplicate_key_errors(path)] == ["a.b.1.c", "a"]
    assert "lines 1 and 4" in duplicate_key_errors(path)[1]
    path.write_text("a: [1\n")
    assert "not valid YAML" in duplicate_key_errors(path)[0]


def test_a_duplicate_key_in_the_claims_file_is_refused(tmp_path):
    text = CLAIMS.read_text()
    first_id = next(ln for ln in text.splitlines() if ln.startswith("- id:"))
    bad = tmp_path / "claims.yaml"
    bad.write_text(text.replace(first_id, f"{first_id}\n  id: again", 1))
    errors = config_errors(yaml.safe_load(DEFAULT.read_text()), SCHEMAS, bad, [DEFAULT])
    assert len(errors) == 1 and "duplicate key" in errors[0] and str(bad) in errors[0]


@pytest.mark.parametrize("key", ["baseline.steps", "pgc.simulation.steps", "pgc.cloud.steps",
                                 "pgc.real.steps", "pgc.regime.steps", "demo.steps", "demo.sweep.steps",
                                 "demo.real.steps", "demo.bench.steps", "local_learning.steps",
                                 "placement.budget"])
def test_ten_to_the_twelve_is_refused_for_every_paper(key):
    cfg = yaml.safe_load(DEFAULT.read_text())
    *head, last = key.split(".")
    node = cfg
    for k in head:
        node = node[k]
    node[last] = 10**12
    errors = config_errors(cfg, SCHEMAS, CLAIMS)
    assert [line_key(e) for e in errors] == [key], errors
    assert f"{COUNT_LIMITS[last]:,}" in errors[0]


def test_a_run_spec_given_directly_has_the_same_count_bounds():
    """`distlab train --spec` without the workflow: steps 10**12 refused naming the key."""
    from distlab.config.specs import SpecError, validate_spec

    schema = {"type": "object"}
    assert validate_spec({"steps": 10**6, "seeds": [0, 1]}, schema, "x")["steps"] == 10**6
    for spec, key in (({"steps": 10**12}, "steps"), ({"hsdag": {"episodes": 10**12}}, "hsdag.episodes"),
                      ({"seeds": list(range(500))}, "seeds")):
        with pytest.raises(SpecError, match=rf"x spec: key {key}: "):
            validate_spec(spec, schema, "x")
