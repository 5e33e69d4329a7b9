"""A vanished run never passes as a result in any paper's summary.  Each paper's
summarize verb (P1 `pgc summarize`, P2 `placement-summarize`, P3 `local-summarize`, P4
`demo-summarize`) writes its tables with a record naming the runs they summarise; a figure's
or the scorecard's reader refuses the table, in one line naming the file, once a run is gone
or the table is cut mid-line.  The scorecard's own table carries the runs it graded, so the
merge and the report refuse it too."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from distlab.results.runs import seal
from distlab.results.tables import (ResultError, read_table_checked, recorded_runs, record_path,
                                    table_errors, write_table)

ROOT = Path(__file__).resolve().parents[1]


def _distlab(*args):
    return subprocess.run([sys.executable, "-m", "distlab", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


def _ok(r):
    assert r.returncode == 0, r.stderr[-2000:]


def _one_line(r, *needles):
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    for n in needles:
        assert str(n) in lines[0], (n, lines[0])


def _metrics(folder: Path, **cols) -> None:
    base = {"step": [0, 1, 2, 3], "time": [0.1, 0.2, 0.3, 0.4], "step_time": 0.1,
            "loss": [2.0, 1.6, 1.3, 1.1], "bytes": 100.0}
    pd.DataFrame({**base, **cols}).to_csv(folder / "metrics.csv", index=False)


# ---------------------------------------------------------------- crafted runs, one kind a paper

def _pgc_run(folder: Path, seed: int) -> Path:
    folder.mkdir(parents=True)
    _metrics(folder)
    (folder / "manifest.json").write_text(json.dumps(seal({  # sealed, as a finished run's
        "spec": {"experiment": "pgc", "group": "fig8", "scheme": "pgc", "n": 4, "s": 1, "seed": seed},
        "seed": seed, "backend": "simulated", "clock": "simulated", "wall_s": 1.0}, folder, ["metrics.csv"])))
    return folder / "manifest.json"


def _demo_run(folder: Path, seed: int, method: str) -> Path:
    folder.mkdir(parents=True)
    _metrics(folder, payload_bytes=80.0, compute_s=0.05, rounds=1,
             val_loss=[2.1, None, 1.5, 1.3])
    (folder / "manifest.json").write_text(json.dumps(seal({  # sealed, as a finished run's
        "spec": {"experiment": "demo", "method": method, "n_workers": 2, "backend": "simulated",
                 "seed": seed, "lr": 0.001},
        "seed": seed, "backend": "simulated", "clock": "simulated", "wall_s": 1.0,
        "final": {"val_loss": 1.3 + 0.01 * seed, "test_loss": 1.31 + 0.01 * seed}}, folder, ["metrics.csv"])))
    return folder


def _local_run(folder: Path, seed: int) -> Path:
    folder.mkdir(parents=True)
    pd.DataFrame({"step": [0, 1, 2, 3], "loss": [3.0, 2.5, 2.2, 2.0], "tokens": [64, 128, 192, 256],
                  "val_loss": [3.1, None, 2.4, 2.2]}).to_csv(folder / "metrics.csv", index=False)
    (folder / "manifest.json").write_text(json.dumps(seal({  # sealed, as a finished run's
        "spec": {"group": "rc", "seed": seed, "model": {"n_layer": 2}, "lr": 0.01, "steps": 4},
        "method": "bp", "final": {"val_loss": 2.2, "test_loss": 2.25}, "tokens_per_s": 1000.0,
        "train_s": 0.25, "memory": {"peak_rss_mb": 100.0}}, folder, ["metrics.csv"])))
    return folder / "manifest.json"


def _placement_run(path: Path, seed: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    row = {"seed": seed, "latency_s": 0.01, "evaluations": 10, "evals_to_1pct": 3,
           "frac_on_device1": 0.5, "clusters_mean": 4.0, "wall_s": 0.1, "curve": [0.02, 0.015, 0.01]}
    path.write_text(json.dumps({
        "spec": {"pair_name": "cpu_gpu", "model_name": "tiny", "method": "cpu_only",
                 "pair": {"devices": [{"name": "cpu"}, {"name": "gpu", "kind": "roofline"}]}},
        "rows": [row], "n_nodes": 5, "n_edges": 4, "n_groups": 3, "clock": "simulated"}))
    return path


def _summaries(tmp_path: Path, paper: str) -> tuple[list[Path], list[Path], Path]:
    """``paper``'s summarize verb on two crafted runs: (its tables, the run paths, the run to delete)."""
    runs_dir = tmp_path / "runs"
    if paper == "P1":
        runs = [_pgc_run(runs_dir / f"seed{s}", s) for s in (0, 1)]
        tables = [tmp_path / "steps.parquet", tmp_path / "summary.csv"]
        _ok(_distlab("pgc", "summarize", "--runs", *runs, "--steps-out", tables[0], "--summary-out", tables[1]))
        return tables, runs, runs[1].parent
    if paper == "P2":
        runs = [_placement_run(runs_dir / f"seed{s}.json", s) for s in (0, 1)]
        tables = [tmp_path / "summary.csv", tmp_path / "curves.csv"]
        _ok(_distlab("placement-summarize", "--runs", *runs, "--summary-out", tables[0],
                     "--curves-out", tables[1]))
        return tables, runs, runs[1]
    if paper == "P3":
        runs = [_local_run(runs_dir / f"seed{s}", s) for s in (0, 1)]
        tables = [tmp_path / "steps.csv", tmp_path / "runs.csv", tmp_path / "staleness.csv"]
        _ok(_distlab("local-summarize", "--runs", *runs, "--steps-out", tables[0], "--summary-out", tables[1],
                     "--staleness-out", tables[2]))
        return tables, runs, runs[1].parent
    runs = [_demo_run(runs_dir / f"{m}/seed{s}", s, m) for m in ("adamw", "demo") for s in (0, 1)]
    tables = [tmp_path / "steps.csv", tmp_path / "summary.csv"]
    nets = json.dumps({"lan": {"latency_s": 0.001, "bandwidth_Bps": 1e9}})
    _ok(_distlab("demo-summarize", "--runs", *runs, "--networks", nets, "--steps-out", tables[0],
                 "--summary-out", tables[1]))
    return tables, runs, runs[3]


PAPERS = ("P1", "P2", "P3", "P4")


@pytest.mark.parametrize("paper", PAPERS)
def test_each_papers_summary_is_refused_once_a_run_is_gone(tmp_path, paper):
    tables, runs, victim = _summaries(tmp_path, paper)
    for t in tables:
        rec = json.loads(record_path(t).read_text())
        assert len(rec["runs"]) == len(runs) and rec["rows"] == len(read_table_checked(t)), t
        assert table_errors(t) == [] and sorted(recorded_runs(t)) == sorted(Path(r).resolve() for r in runs)
    before = {t: t.read_bytes() for t in tables}
    (shutil.rmtree if victim.is_dir() else Path.unlink)(victim)
    for t in tables:
        with pytest.raises(ResultError, match=rf"^{t}: 1 of the {len(runs)} runs it summarises are gone "
                                              rf"\(first: {victim.resolve()}"):
            read_table_checked(t)
        assert t.read_bytes() == before[t]  # refused, not rewritten


@pytest.mark.parametrize("paper", PAPERS)
def test_each_papers_summary_cut_mid_line_is_refused(tmp_path, paper):
    tables, _, _ = _summaries(tmp_path, paper)
    for t in tables:
        data = t.read_bytes()
        t.write_bytes(data[: len(data) // 2 + 3])
        pattern = rf"^{t}: truncated" if t.suffix == ".csv" else rf"^{t}: not the table its rule wrote"
        with pytest.raises(ResultError, match=pattern):
            read_table_checked(t)


def test_the_records_survive_a_moved_results_tree(tmp_path):
    """Runs are recorded relative to the table: a tree copied elsewhere still checks, and a run
    deleted in the copy is noticed there."""
    tables, _, _ = _summaries(tmp_path / "a", "P3")
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    shutil.rmtree(tmp_path / "a")
    moved = tmp_path / "b" / tables[1].name
    assert table_errors(moved) == []
    shutil.rmtree(tmp_path / "b" / "runs" / "seed0")
    assert "1 of the 2 runs it summarises are gone" in table_errors(moved)[0]


@pytest.mark.parametrize("paper,which,reader", [
    ("P2", 0, lambda t, out: ("placement-tables", "--kind", "main", "--summary", t, "--out-dir", out,
                              "--options", json.dumps({"default_pair": "cpu_gpu"}))),
    ("P3", 0, lambda t, out: ("local-figure", "loss-tokens", "--input", t, "--out", out / "f.png")),
    ("P4", 1, lambda t, out: ("demo-table", "--kind", "results", "--summary", t,
                              "--networks", json.dumps({"lan": {}}), "--csv", out / "t.csv", "--md", out / "t.md")),
])
def test_a_figure_or_table_reader_refuses_in_one_line(tmp_path, paper, which, reader):
    tables, _, victim = _summaries(tmp_path, paper)
    (shutil.rmtree if victim.is_dir() else Path.unlink)(victim)
    out = tmp_path / "out"
    _one_line(_distlab(*reader(tables[which], out)), f"{tables[which]}: 1 of the", "runs it summarises are gone")
    assert not out.exists() or not any(out.iterdir())


def test_the_scorecard_records_the_runs_it_graded_and_its_readers_refuse_a_vanished_one(tmp_path):
    from distlab.scoring.report import write_report
    from distlab.results.tables import record_graded_runs
    from distlab.scoring.scorecard import merge_scorecards

    tables, runs, victim = _summaries(tmp_path, "P1")
    part = tmp_path / "paper" / "scorecard" / "P1.csv"
    card = pd.DataFrame({"id": ["pgc.x"], "paper": ["P1"], "verdict": ["reproduced"], "n_seeds": [2]})
    write_table(card, part)
    record_graded_runs(part, card, [tables[1]])
    assert sorted(recorded_runs(part)) == sorted(Path(r).resolve() for r in runs)
    shutil.rmtree(victim)
    with pytest.raises(ResultError, match=rf"^{part}: 1 of the 2 runs"):
        merge_scorecards([part], tmp_path / "m.md", tmp_path / "m.csv")
    with pytest.raises(ResultError, match=rf"^{part}: 1 of the 2 runs"):
        write_report(tmp_path / "paper" / "README.md", part)
