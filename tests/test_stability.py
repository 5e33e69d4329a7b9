"""The stability report: which verdicts flipped between two runs of one commit, and whether
the claim was allowed to move (it rests on a measurement) or not (a determinism bug)."""

from __future__ import annotations

import pandas as pd
import pytest

from distlab.scoring import stability


def _card(verdicts: dict[str, str], measured: set[str]) -> pd.DataFrame:
    return pd.DataFrame({"id": list(verdicts), "paper": "P1", "verdict": list(verdicts.values()),
                         "measured": [k in measured for k in verdicts], "ours": "1.0 [0.9, 1.1]"})


def test_flips_are_listed_and_a_flip_of_a_simulated_claim_is_called_a_bug():
    first = _card({"a": "reproduced", "b": "inconclusive", "c": "reproduced"}, measured={"b"})
    second = _card({"a": "reproduced", "b": "reproduced", "c": "not reproduced"}, measured={"b"})
    table = stability.compare(first, second).set_index("id")
    assert table["flipped"].to_dict() == {"a": False, "b": True, "c": True}
    text = stability.report(table.reset_index())
    assert "2 verdicts flipped" in text and "1 of claims marked measured" in text
    assert "not deterministic, which is a bug" in text
    flat = " ".join(text.split())  # tabulate pads the cells
    assert "| c |" in flat and "| b |" in flat and "| a |" not in flat


def test_no_flip_says_so_and_a_claim_present_once_counts_as_a_flip():
    same = _card({"a": "reproduced"}, set())
    assert "No verdict flipped." in stability.report(stability.compare(same, same))
    more = _card({"a": "reproduced", "z": "not run"}, set())
    table = stability.compare(same, more).set_index("id")
    assert table.loc["z", "first"] == "absent" and table.loc["z", "flipped"]


def test_measured_rules_exist_in_the_workflow():
    """Every rule the stability target forces exists (a renamed rule would be skipped silently)."""
    from conftest import ROOT

    rules = stability.existing_rules(ROOT, [])   # what the target itself reads
    assert {"baseline_train_dist", "scorecard_paper", "scorecard"} <= rules
    assert not any(" " in r or "(" in r for r in rules)   # names, not docstrings
    missing = [r for r in stability.MEASURED_RULES if r not in rules]
    assert not missing, missing


def test_cpu_isa_pin_sets_every_kernel_family_and_keeps_the_users_choice():
    """DISTLAB_CPU_ISA=avx2 pins torch's kernels, MKL's branch and oneDNN to AVX2 (so simulated
    numbers are the same bits on any AVX2 machine); a variable the user set wins; an unknown
    value is refused in one line."""
    from distlab.cli import pin_cpu_isa
    from distlab.config.specs import SpecError

    assert pin_cpu_isa({}) == {}
    env = {"DISTLAB_CPU_ISA": "AVX2", "MKL_CBWR": "COMPATIBLE"}
    set_ = pin_cpu_isa(env)
    assert set_ == {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
    assert env["MKL_CBWR"] == "COMPATIBLE"
    with pytest.raises(SpecError, match="DISTLAB_CPU_ISA='sse9'"):
        pin_cpu_isa({"DISTLAB_CPU_ISA": "sse9"})


def test_cpu_isa_pin_gives_the_same_bits_whatever_the_machine_offers(tmp_path):
    """Pinned to AVX2, a float32 and a float64 training loop give the same bits whether the
    machine offers AVX-512 or only AVX2 (emulated: MKL and oneDNN limited to AVX2)."""
    import subprocess
    import sys

    script = tmp_path / "loop.py"
    script.write_text(
        "from distlab.cli import pin_cpu_isa\n"
        "pin_cpu_isa()\n"
        "import hashlib, torch\n"
        "torch.manual_seed(0); torch.set_num_threads(1)\n"
        "out = []\n"
        "for dt in (torch.float64, torch.float32):\n"
        "    m = torch.nn.Sequential(torch.nn.Conv2d(1, 8, 3), torch.nn.ReLU(), torch.nn.Flatten(),\n"
        "                            torch.nn.Linear(8 * 6 * 6, 10)).to(dt)\n"
        "    x = torch.randn(16, 1, 8, 8, dtype=dt); y = torch.randint(0, 10, (16,))\n"
        "    opt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "    for _ in range(10):\n"
        "        opt.zero_grad(); torch.nn.functional.cross_entropy(m(x), y).backward(); opt.step()\n"
        "    out.append(hashlib.sha1(b''.join(p.detach().numpy().tobytes() for p in m.parameters())).hexdigest())\n"
        "print(torch.backends.cpu.get_cpu_capability(), *out)\n")
    import os

    base = {k: v for k, v in os.environ.items()
            if k not in ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS")}
    runs = []
    for extra in ({}, {"MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}):
        env = {**base, **extra, "DISTLAB_CPU_ISA": "avx2", "OMP_NUM_THREADS": "1"}
        r = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]
        runs.append(r.stdout.split())
    assert runs[0][0] == "AVX2" and runs[0] == runs[1]


def test_only_the_measured_rules_of_the_targets_are_forced():
    """`--forcerun` would run a named rule the targets do not need: the foundation's scorecard
    forces the real gloo baseline and not, say, DeMo's optimizer benchmark."""
    from conftest import ROOT

    rules = stability.dag_rules(ROOT, ["paper/scorecard/foundation.csv"], [])
    assert "baseline_train_dist" in rules and "scorecard_paper" in rules
    assert not {"demo_bench", "local_train", "placement_profile", "pgc_train_real"} & rules


def _estimates(rows: list[tuple[str, str, float, float, float]]) -> pd.DataFrame:
    """One evaluation: (id, verdict, estimate, ci_low, ci_high) rows, all measured."""
    return pd.DataFrame({"id": [r[0] for r in rows], "paper": "P3", "verdict": [r[1] for r in rows],
                         "measured": True, "estimate": [r[2] for r in rows], "ci_low": [r[3] for r in rows],
                         "ci_high": [r[4] for r in rows], "ours": [f"{r[2]} [{r[3]}, {r[4]}]" for r in rows],
                         "reason": "r"})


def test_a_held_verdict_whose_estimate_leaves_its_interval_is_unstable_here():
    """The verdict held in all three evaluations, but one rerun's interval misses another's: the
    reruns measured different quantities, so the row reads unstable here (with the spread); a row
    whose intervals overlap, that has no interval, or whose verdict decides nothing (inconclusive),
    keeps its verdict."""
    runs = [_estimates([("moves", "not reproduced", 0.99, 0.82, 1.19), ("holds", "reproduced", 1.4, 1.3, 1.5),
                        ("no_ci", "inconclusive", float("nan"), float("nan"), float("nan")),
                        ("undecided", "inconclusive", 0.5, 0.0, 1.0)]),
            _estimates([("moves", "not reproduced", 1.00, 0.88, 1.15), ("holds", "reproduced", 1.45, 1.35, 1.55),
                        ("no_ci", "inconclusive", float("nan"), float("nan"), float("nan")),
                        ("undecided", "inconclusive", 0.5, 0.0, 1.0)]),
            _estimates([("moves", "not reproduced", 2.93, 2.5, 3.4), ("holds", "reproduced", 1.38, 1.2, 1.6),
                        ("no_ci", "inconclusive", float("nan"), float("nan"), float("nan")),
                        ("undecided", "inconclusive", 3.0, 2.0, 4.0)])]
    over = stability.compare_runs(runs).set_index("id")
    assert not over["flipped"].any()
    assert over["moved"].to_dict() == {"moves": True, "holds": False, "no_ci": False, "undecided": False}
    settled = stability.settle(runs).set_index("id")
    assert settled.loc["moves", "verdict"] == "unstable here"
    assert "estimate moved outside its own interval in 3 evaluations" in settled.loc["moves", "reason"]
    assert settled.loc["moves", "spread"].startswith("run 1: not reproduced (0.99 [0.82, 1.19]); run 2:")
    assert settled.loc["holds", "verdict"] == "reproduced" and settled.loc["no_ci", "verdict"] == "inconclusive"
    assert settled.loc["undecided", "verdict"] == "inconclusive" and settled.loc["undecided", "spread"] == ""
    table = stability.compare(runs[0], runs[1])
    table["flipped"] = table["id"].map(over["flipped"])
    table["moved"] = table["id"].map(over["moved"])
    text = " ".join(stability.report(table).split())
    assert "0 verdicts flipped" in text and "1 held verdicts whose estimate moved" in text
    assert "| moves |" in text and "| holds |" not in text and "bug" not in text


def test_intervals_apart_reads_only_finite_intervals():
    assert stability.intervals_apart([(0.0, 1.0), (1.0, 2.0)]) is False  # touching intervals overlap
    assert stability.intervals_apart([(0.0, 1.0), None, (1.5, 2.0)]) is True
    assert stability.intervals_apart([None, (0.0, 1.0)]) is False


def test_the_reruns_benchmarks_go_aside_and_the_first_runs_stay(tmp_path, monkeypatch):
    """The job-seconds a snapshot reports per paper are one run's: a rerun of the measured rules
    rewrites their benchmark files, which then move to results/stability/benchmarks/run<k>/ while
    benchmarks/ gets the first run's back (a file only the rerun wrote leaves benchmarks/)."""
    bench = tmp_path / stability.BENCHMARKS
    calls = []

    def fake_snakemake(args, cwd):
        calls.append(args)
        if "--forcerun" in args:  # a rerun: rewrites one job's time, adds one, leaves one
            (bench / "local/rc.tsv").write_text(f"s\n{100 + len(calls)}\n")
            (bench / "local/new.tsv").write_text("s\n7\n")
        else:
            (bench / "local").mkdir(parents=True)
            (bench / "local/rc.tsv").write_text("s\n50\n")
            (bench / "pgc/a.tsv").parent.mkdir(parents=True)
            (bench / "pgc/a.tsv").write_text("s\n3\n")

    class Done(Exception):
        pass

    def stop(*a, **k):
        raise Done

    monkeypatch.setattr(stability, "_snakemake", fake_snakemake)
    monkeypatch.setattr(stability, "dag_rules", lambda *a: set(stability.MEASURED_RULES))
    monkeypatch.setattr(stability, "read_table_checked", lambda c: _estimates([("x", "reproduced", 1, 0, 2)]))
    monkeypatch.setattr(stability, "compare", stop)
    with pytest.raises(Done):
        stability.run(2, tmp_path / "paper/stability.md", cwd=tmp_path, k=3, replicate=False)
    assert sum("--forcerun" in c for c in calls) == 2
    assert (bench / "local/rc.tsv").read_text() == "s\n50\n" and (bench / "pgc/a.tsv").read_text() == "s\n3\n"
    assert not (bench / "local/new.tsv").exists()
    aside = tmp_path / stability.RERUN_BENCHMARKS
    assert (aside / "run2/local/rc.tsv").read_text() == "s\n102\n"
    assert (aside / "run3/local/rc.tsv").read_text() == "s\n103\n"
    assert (aside / "run3/local/new.tsv").read_text() == "s\n7\n" and not (aside / "run2/pgc").exists()
