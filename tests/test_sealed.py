"""Results are sealed: a finished run's manifest carries the content hash of its metrics (the
atlas's: of its record) and of itself; every reader checks it, so a run edited after it
finished (a manifest's lr, a metrics row duplicated) is refused by name, and the summarize
rules take the metrics as inputs too, so plain `snakemake` remakes a summary whose run was
edited and the summarizer names the file."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pandas as pd
import pytest

from conftest import ROOT

from distlab.results.runs import RunEdited, RunRecorder, check_sealed


def _finished(tmp_path, seed=0):
    d = tmp_path / f"run{seed}"
    rec = RunRecorder(d, {"experiment": "baseline", "method": "dgd", "seed": seed, "lr": 0.1, "n_workers": 2},
                      "simulated", "simulated")
    for step in range(6):
        rec.log(step=step, time=0.1 * (step + 1), step_time=0.1, loss=2.0 - 0.1 * step, bytes=100.0)
    rec.finish(final={"val_loss": 1.5})
    return d


def _edit_manifest(d):
    man = json.loads((d / "manifest.json").read_text())
    man["spec"]["lr"], man["n_workers"] = 0.5, 7
    (d / "manifest.json").write_text(json.dumps(man))


def _duplicate_a_row(d):
    m = pd.read_csv(d / "metrics.csv")
    pd.concat([m, m.iloc[[2]]]).to_csv(d / "metrics.csv", index=False)


def _unseal(d):
    man = json.loads((d / "manifest.json").read_text())
    man.pop("sealed")
    (d / "manifest.json").write_text(json.dumps(man))


@pytest.mark.parametrize("edit,name,words", [
    (_edit_manifest, "manifest.json", "edited after the run finished"),
    (_duplicate_a_row, "metrics.csv", "edited after the run finished"),
    (lambda d: (d / "metrics.csv").unlink(), "metrics.csv", "missing beside its manifest"),
    (_unseal, "manifest.json", "not sealed"),
])
def test_a_run_edited_after_it_finished_is_refused_by_name(tmp_path, edit, name, words):
    d = _finished(tmp_path)
    check_sealed(d, json.loads((d / "manifest.json").read_text()))  # as written: accepted
    edit(d)
    with pytest.raises(RunEdited) as e:
        check_sealed(d, json.loads((d / "manifest.json").read_text()))
    msg = str(e.value)
    assert msg.startswith(str(d / name)) and words in msg and "rerun the run" in msg and f"remove {d}" in msg
    r = subprocess.run([sys.executable, "-m", "distlab", "summarize", "--runs", str(d / "manifest.json"),
                        "--steps-out", str(tmp_path / "s.csv"), "--summary-out", str(tmp_path / "t.csv")],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and str(d / name) in lines[0], r.stderr
    assert not (tmp_path / "t.csv").exists()


def test_an_atlas_run_is_sealed_over_its_record(tmp_path):
    from distlab.atlas.train import _write

    d = _write(tmp_path / "a", {"technique": "ddp"}, {"steps": [{"step": 0}]}, {"final_val_loss": 2.0})
    check_sealed(d, json.loads((d / "manifest.json").read_text()))
    (d / "record.json").write_text(json.dumps({"steps": [{"step": 0}, {"step": 0}]}))
    with pytest.raises(RunEdited, match=r"record.json: edited after the run finished"):
        check_sealed(d, json.loads((d / "manifest.json").read_text()))


SUMMARIZE_RULES = {"baseline.smk": "baseline_summarize", "pgc.smk": "pgc_summarize",
                   "demo.smk": "demo_summarize", "local_learning.smk": "local_summarize"}


@pytest.mark.parametrize("smk,rule", list(SUMMARIZE_RULES.items()))
def test_each_summarize_rule_takes_the_runs_metrics_as_inputs(smk, rule):
    text = (ROOT / "workflow/rules" / smk).read_text()
    block = re.search(rf"rule {rule}:\n(.*?)\n    output:", text, re.S).group(1)
    assert re.search(r"\n        runs=", block) and re.search(r"\n        metrics=", block), block


def test_the_metrics_inputs_are_beside_each_run(tmp_path):
    import yaml

    from distlab.baseline.workflow import BaselineWorkflow

    cfg = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    wf = BaselineWorkflow(cfg)
    assert wf.metrics() == [m.replace("manifest.json", "metrics.csv") for m in wf.runs()] and wf.metrics()


def test_a_full_disk_is_one_line_naming_the_file_and_nothing_half_written(tmp_path, monkeypatch):
    import errno

    from distlab.results import checkpoint, runs

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(runs, "atomic_write_text", full)
    with pytest.raises(runs.DiskFull, match=r"manifest.json: no space left on its device .*free space and rerun"):
        runs.write_json({"a": 1}, tmp_path / "manifest.json")
    monkeypatch.setattr(checkpoint, "_checkpoint_temp", full)
    with pytest.raises(runs.DiskFull, match=r"ckpt.pt: no space left"):
        checkpoint.write_checkpoint_file(tmp_path / "ckpt.pt", {"step": 1})
    monkeypatch.setattr("pandas.DataFrame.to_csv", full)
    with pytest.raises(runs.DiskFull, match=r"metrics.csv: no space left"):
        runs.write_csv(pd.DataFrame({"a": [1]}), tmp_path / "metrics.csv")
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no temporary file left behind
