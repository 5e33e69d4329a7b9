"""A result cannot go missing silently: `summarize` refuses a run folder without its
manifest, or with metrics cut mid-line, in one line; a summary table carries a record (rows,
columns, checksum, the runs it summarises), so a reader refuses a table cut short or edited
and notices a run folder that vanished, naming the file."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from distlab.results.runs import seal
from distlab.results.summarize import ResultError, collect
from distlab.results.tables import read_table_checked, record_path, table_errors

ROOT = Path(__file__).resolve().parents[1]


def _run(folder: Path, seed: int) -> Path:
    folder.mkdir(parents=True)
    pd.DataFrame({"backend": "simulated", "clock": "simulated", "step": [0, 1, 2],
                  "time": [0.1, 0.2, 0.3], "step_time": 0.1, "loss": [2.0, 1.5, 1.2],
                  "bytes": 100.0}).to_csv(folder / "metrics.csv", index=False)
    (folder / "manifest.json").write_text(json.dumps(seal({
        "spec": {"experiment": "baseline", "method": "dgd", "seed": seed, "n_workers": 2},
        "seed": seed, "backend": "simulated", "clock": "simulated", "wall_s": 1.0}, folder, ["metrics.csv"])))
    return folder


def _summarize(*args):
    return subprocess.run([sys.executable, "-m", "distlab", "summarize", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture()
def summarized(tmp_path):
    runs = [_run(tmp_path / f"runs/seed{s}", s) for s in (0, 1)]
    r = _summarize("--runs", *(d / "manifest.json" for d in runs), "--steps-out", tmp_path / "steps.csv",
                   "--summary-out", tmp_path / "summary.csv")
    assert r.returncode == 0, r.stderr
    return tmp_path / "summary.csv", runs


def _one_line(r, *needles):
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])


def test_summarize_of_a_missing_manifest_or_folder_is_one_line(tmp_path):
    run = _run(tmp_path / "seed0", 0)
    (run / "manifest.json").unlink()
    _one_line(_summarize("--runs", run, "--steps-out", tmp_path / "a.csv", "--summary-out", tmp_path / "b.csv"),
              f"{run / 'manifest.json'}: missing")
    _one_line(_summarize("--runs", tmp_path / "nowhere", "--steps-out", tmp_path / "a.csv",
                         "--summary-out", tmp_path / "b.csv"), "the run folder is missing")
    assert not (tmp_path / "b.csv").exists()


def test_summarize_refuses_metrics_cut_mid_line(tmp_path):
    run = _run(tmp_path / "seed0", 0)
    data = (run / "metrics.csv").read_bytes()
    (run / "metrics.csv").write_bytes(data[:-7])
    with pytest.raises(ResultError, match=r"metrics.csv: truncated"):
        collect([run])


def test_a_bad_spec_json_is_one_line_without_the_usage(tmp_path):
    r = subprocess.run([sys.executable, "-m", "distlab", "train", "--experiment", "baseline", "--spec", "{bad",
                        "--data", str(tmp_path), "--out", str(tmp_path / "o")], cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
    _one_line(r, "--spec", "not valid JSON")
    assert "usage:" not in r.stderr


def test_a_summary_reads_back_with_its_record(summarized):
    summary, runs = summarized
    rec = json.loads(record_path(summary).read_text())
    assert rec["rows"] == 2 and len(rec["runs"]) == 2 and "final_loss" in rec["columns"]
    assert table_errors(summary) == [] and len(read_table_checked(summary)) == 2


def test_a_summary_cut_mid_line_or_at_a_line_fails_naming_the_file(summarized):
    summary, _ = summarized
    data = summary.read_bytes()
    summary.write_bytes(data[:-5])
    with pytest.raises(ResultError, match=rf"^{summary}: truncated"):
        read_table_checked(summary)
    summary.write_bytes(data[:data.rstrip(b"\n").rindex(b"\n") + 1])  # the last row gone, whole
    with pytest.raises(ResultError, match=rf"^{summary}: not the table its rule wrote \(1 rows now, 2 written"):
        read_table_checked(summary)


def test_a_vanished_run_folder_is_detected(summarized):
    summary, runs = summarized
    shutil.rmtree(runs[1])
    with pytest.raises(ResultError, match=rf"^{summary}: 1 of the 2 runs it summarises are gone \(first: {runs[1]}"):
        read_table_checked(summary)
