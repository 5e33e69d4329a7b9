"""`make` hands CONFIG and SNAKEMAKE_ARGS to Snakemake as words, never to the shell as code, and
the record of a `make reproduce` names the configuration it ran with, which paper/'s record
check names when it is not the default configuration."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, makefile_scratch

sys.path.insert(0, str(ROOT / "scripts"))
import snapshot  # noqa: E402


@pytest.fixture()
def scratch(tmp_path):
    """The Makefile in a scratch folder, with a stand-in snakemake that writes its arguments."""
    work, bindir = makefile_scratch(tmp_path)
    (work / "t.yaml").write_text("seeds: [0, 1]\n")
    return work, bindir


def _make(work, bindir, *args):
    return subprocess.run(["make", *args, f"BIN={bindir}", "STAMP=", "CORES=2", "JOBS_VIA="], cwd=work,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("target", ["dryrun", "report", "stability"])
@pytest.mark.parametrize("var,value", [
    ("CONFIG", "t.yaml; touch F"),
    ("CONFIG", "t.yaml $(touch F)"),
    ("SNAKEMAKE_ARGS", "--keep-going `touch F` && touch F"),
    ("SNAKEMAKE_ARGS", "--keep-going $$(touch F) | touch F"),
])
def test_a_shell_line_in_config_or_args_is_words_never_run(scratch, target, var, value):
    work, bindir = scratch
    _make(work, bindir, target, f"{var}={value}")
    assert not (work / "F").exists(), f"make {target} {var}={value!r} ran a command"


def test_the_words_reach_snakemake_unchanged_and_unglobbed(scratch):
    work, bindir = scratch
    (work / "a.yaml").write_text("seeds: [0]\n")
    r = _make(work, bindir, "dryrun", "CONFIG=t.yaml a.yaml", "SNAKEMAKE_ARGS=--keep-going --allowed-rules *")
    assert r.returncode == 0, r.stderr
    assert (work / "snakemake.args").read_text().split("\n")[:-1] == [
        "-n", "--cores", "2", "--keep-going", "--allowed-rules", "*", "--configfile", "t.yaml", "a.yaml"]


def test_a_config_word_with_a_semicolon_is_a_file_name_the_preflight_refuses(scratch):
    work, bindir = scratch
    r = _make(work, bindir, "dryrun", "CONFIG=t.yaml; touch F")
    assert r.returncode != 0 and "t.yaml;: no such file" in r.stderr, r.stderr
    assert not (work / "snakemake.args").exists()


def _record(tmp_path, *words) -> dict:
    out = tmp_path / "reproduce.json"
    assert snapshot.main(["record", "--out", str(out), "--start", "0", "--end", "1", "--rc", "0",
                          "--", *words]) == 0
    return json.loads(out.read_text())


def test_the_record_names_the_config_files_and_overrides_of_its_run(tmp_path):
    cfg = tmp_path / "mine.yaml"
    cfg.write_text("seeds: [0]\n")
    rec = _record(tmp_path, "--cores", "2", "--config", "seeds=[1]", "--configfile", str(cfg))
    import hashlib

    assert rec["config"] == {"files": [{"path": str(cfg), "sha256": hashlib.sha256(cfg.read_bytes()).hexdigest()}],
                             "overrides": ["seeds=[1]"]}
    assert _record(tmp_path, "--cores", "2")["config"] == {"files": [], "overrides": []}


def test_a_paper_of_another_configs_run_says_so_by_name(tmp_path):
    """paper/'s record check (distlab.scoring.paperrecord) names each config file and override of a
    run that was not of the default configuration; a record without its config says so."""
    from distlab.scoring.paperrecord import config_changes

    assert config_changes(ROOT, _record(tmp_path, "--cores", "2")) == []  # the default
    other = config_changes(ROOT, _record(tmp_path, "--configfile", "config/paper.yaml", "--config", "seeds=[1]"))
    assert other == ["made with config file config/paper.yaml (unchanged), not the default configuration",
                     "made with the override --config seeds=[1], not the default configuration"]
    assert config_changes(ROOT, {"commit": "x"}) == ["no config files recorded"]
