"""Snakemake parses every --configfile itself, without bounds, before the workflow's
checks run; the Makefile's targets read each config file a user names (CONFIG=, or
--configfile in SNAKEMAKE_ARGS) with the bounded loader first (distlab.config.preflight).  The
Makefile runs in a scratch folder with a stand-in snakemake that records it was started."""

from __future__ import annotations

import re
import shutil
import subprocess
import time

import pytest

from conftest import makefile_scratch
from distlab.config.preflight import configfiles, main

# a "billion laughs": nine levels of ten aliases each, 10^9 strings once expanded
BOMB = "a: &a [" + ",".join(['"lol"'] * 10) + "]\n" + "".join(
    f"{c}: &{c} [" + ",".join([f"*{p}"] * 10) + "]\n" for p, c in zip("abcdefgh", "bcdefghi"))
BOMB += "#" * (520 - len(BOMB) - 1) + "\n"  # padded to the 520 bytes of the file


@pytest.fixture()
def scratch(tmp_path):
    work, bindir = makefile_scratch(tmp_path)  # snakemake stood in: work/snakemake.args says how it was started
    (work / "bomb.yaml").write_text(BOMB)
    (work / "ok.yaml").write_text("seeds: [0, 1]\n")
    return work, bindir


def _make(work, bindir, *args):
    t0 = time.monotonic()
    r = subprocess.run(["make", *args, f"BIN={bindir}", "STAMP=", "CORES=2", "JOBS_VIA="], cwd=work,
                       capture_output=True, text=True, timeout=120)
    return r, time.monotonic() - t0


def _ours(stderr: str) -> list[str]:
    """stderr's lines but make's own closing `make: *** [...] Error 2` (`make[1]: ***` where the
    test itself runs under make, as `make test` runs it)."""
    return [ln for ln in stderr.strip().splitlines() if not re.match(r"make(\[\d+\])?: \*\*\*", ln)]


def test_the_bomb_is_520_bytes():
    assert len(BOMB.encode()) == 520


@pytest.mark.parametrize("target,args", [
    ("reproduce", ["CONFIG=bomb.yaml"]),
    ("reproduce", ["CONFIG=ok.yaml bomb.yaml"]),
    ("dryrun", ["SNAKEMAKE_ARGS=--configfile=bomb.yaml"]),
    ("report", ["SNAKEMAKE_ARGS=--keep-going --configfiles ok.yaml bomb.yaml"]),
    ("stability", ["CONFIG=bomb.yaml"]),
])
def test_an_alias_bomb_stops_make_in_one_line_before_snakemake(scratch, target, args):
    work, bindir = scratch
    r, took = _make(work, bindir, target, *args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    ours = _ours(r.stderr)
    assert len(ours) == 1 and "Traceback" not in r.stderr, r.stderr
    assert ours[0].startswith("make: bomb.yaml: more than the limit of 200,000 values"), ours[0]
    assert not (work / "snakemake.args").exists()  # Snakemake never started (the bounds are structural:
    # the size by stat before reading, the values counted while streaming; no wall clock decides)


def test_a_valid_config_reaches_snakemake_last_on_its_line(scratch):
    work, bindir = scratch
    r, _ = _make(work, bindir, "dryrun", "CONFIG=ok.yaml", "SNAKEMAKE_ARGS=--keep-going")
    assert r.returncode == 0, r.stderr
    assert (work / "snakemake.args").read_text().split() == ["-n", "--cores", "2", "--keep-going",
                                                             "--configfile", "ok.yaml"]


def test_a_missing_or_oversized_or_deep_config_is_one_line(tmp_path, capsys):
    big = tmp_path / "big.yaml"
    big.write_text("# comment\n" * 120_000)  # 1.2 MB of comments
    deep = tmp_path / "deep.yaml"
    deep.write_text("seeds: " + "[" * 5000 + "]" * 5000 + "\n")
    listed = tmp_path / "list.yaml"
    listed.write_text("- 1\n- 2\n")
    for path, needle in ((tmp_path / "nowhere.yaml", "no such file"), (big, "over the limit of 1,048,576"),
                         (deep, "nested deeper than the limit of 64"), (listed, "not keys at its top level")):
        assert main(["--cores", "2", "--configfile", str(path)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"make: {path}") and needle in err[0], err


def test_configfiles_are_the_words_snakemake_takes():
    assert configfiles(["--cores", "2", "all", "--configfile", "a.yaml", "b.yaml", "-n"]) == ["a.yaml", "b.yaml"]
    assert configfiles(["--configfile=a.yaml", "--configfiles", "b.yaml", "--config", "seeds=[0]"]) \
        == ["a.yaml", "b.yaml"]
    assert configfiles(["--configf", "a.yaml"]) == ["a.yaml"]  # argparse's abbreviation
    assert configfiles(["--config", "x=1", "--cores", "2"]) == [] and main([]) == 0


def test_make_reproduce_makes_again_a_table_whose_run_vanished(scratch):
    """Snakemake alone says "Nothing to be done" when a run folder behind an up-to-date summary
    is deleted; make reproduce names the table in one line and passes it to --forcerun."""
    import pandas as pd

    from distlab.results.tables import write_checked_table

    work, bindir = scratch
    runs = []
    for s in (0, 1):
        (work / f"results/g/seed{s}").mkdir(parents=True)
        (work / f"results/g/seed{s}/manifest.json").write_text("{}")
        runs.append(work / f"results/g/seed{s}")
    write_checked_table(pd.DataFrame({"seed": [0, 1]}), work / "results/g/summary.csv", runs)
    r, _ = _make(work, bindir, "reproduce")
    assert r.returncode == 0, r.stderr
    assert "--forcerun" not in (work / "snakemake.args").read_text()  # every table holds: nothing forced
    shutil.rmtree(runs[1])
    r, _ = _make(work, bindir, "reproduce", "CONFIG=ok.yaml")
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if "summary.csv" in ln]
    assert len(lines) == 1 and "1 of the 2 runs it summarises are gone" in lines[0] and "made again" in lines[0]
    args = (work / "snakemake.args").read_text().split()
    assert args[args.index("--forcerun") + 1] == "results/g/summary.csv"
    assert args[-2:] == ["--configfile", "ok.yaml"]
