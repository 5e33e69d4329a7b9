"""The shared conventions every paper follows (docs/design.md; the claims: docs/conventions.md): specs
validated with the key named, run-time settings apart from the spec,
checkpoints keyed by their spec, per-paper Holm, by-construction and
constant-value claims, one t interval, and the first-failing rank named."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import torch
from scipy import stats as sps

from conftest import ROOT, bin_path
from distlab.scoring import scorecard, stats
from distlab.results.checkpoint import Checkpointer
from distlab.runtime.launch import root_causes
from distlab.config.specs import SpecError, runtime_defaults, spec_hash, validate_spec
from distlab.baseline import train as dataparallel

ENV = {**os.environ, "PATH": bin_path()}
STATS = {"alpha": 0.05, "bootstrap": {"n_resamples": 500, "seed": 0, "confidence": 0.95}}


def baseline_spec(**over):
    spec = {"experiment": "baseline", "method": "dgd", "backend": "simulated", "seed": 0,
            "model": {"name": "logreg"}, "n_workers": 2, "batch_size": 16, "lr": 0.1, "steps": 6,
            "eval_every": 3, "dtype": "float32",
            "cluster": {"compute": {"mode": "calibrated", "unit_seconds": 0.5},
                        "network": {"latency_s": 0.001, "bandwidth_Bps": 1e9},
                        "straggler": {"model": "none"}}}
    spec.update(over)
    return spec


def train_cli(spec, tmp_path, *extra, data="nowhere"):
    return subprocess.run([sys.executable, "-m", "distlab", "train", "--experiment", "baseline",
                           "--spec", json.dumps(spec), "--data", str(data), "--out",
                           str(tmp_path / "run"), *extra], cwd=ROOT, env=ENV, capture_output=True,
                          text=True, timeout=120)


# ------------------------------------------------------------------ specs
@pytest.mark.parametrize("mutate,key", [
    (lambda s: s.pop("lr"), "missing key 'lr'"),
    (lambda s: s["cluster"].pop("network"), "missing key 'cluster.network'"),
    (lambda s: s.__setitem__("backend", "mpi"), "'backend'"),
    (lambda s: s.__setitem__("lr", math.nan), "'lr' is not a finite number"),
    (lambda s: s.__setitem__("steps", 4.0), "'steps'"),
    (lambda s: s.__setitem__("stepz", 4), "stepz"),
    (lambda s: s.__setitem__("method", "ddp"), "'method'"),
])
def test_a_bad_spec_is_refused_naming_the_key(mutate, key):
    spec = baseline_spec()
    mutate(spec)
    with pytest.raises(SpecError, match=key.replace("(", r"\(")):
        validate_spec(spec, dataparallel.SPEC_SCHEMA, "baseline")


def test_the_train_cli_refuses_in_one_line_before_any_work(tmp_path):
    spec = baseline_spec(backend="mpi")
    r = train_cli(spec, tmp_path)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [r.stderr.strip()]  # one line, no traceback
    assert "backend" in r.stderr and "mpi" in r.stderr
    r = train_cli({k: v for k, v in baseline_spec().items() if k != "n_workers"}, tmp_path)
    assert r.returncode == 2 and "missing key 'n_workers'" in r.stderr
    assert not (tmp_path / "run").exists()


def test_runtime_settings_are_checked_and_defaulted():
    rt = runtime_defaults({"checkpoint": {"every_steps": 3}})
    assert rt["checkpoint"] == {"every_s": 60.0, "every_steps": 3} and rt["timeout_s"] == 60.0
    with pytest.raises(SpecError, match="timeout_s"):
        runtime_defaults({"timeout_s": -1})
    with pytest.raises(SpecError, match="checkpoin"):
        runtime_defaults({"checkpoin": {}})


def test_print_torchrun_gives_a_command_that_names_the_job(tmp_path):
    spec = baseline_spec(backend="gloo", n_workers=3)
    r = train_cli(spec, tmp_path, "--print-torchrun", "--runtime", '{"timeout_s": 5}')
    assert r.returncode == 0, r.stderr
    cmd = r.stdout.strip()
    assert "torch.distributed.run" in cmd and "--nproc_per_node=3" in cmd and "--standalone" in cmd
    import shlex

    argv = shlex.split(cmd)
    assert json.loads(argv[argv.index("--spec") + 1]) == spec
    assert json.loads(argv[argv.index("--runtime") + 1])["timeout_s"] == 5
    r = train_cli(baseline_spec(), tmp_path, "--print-torchrun")
    assert r.returncode == 2 and "simulated" in r.stderr


# ------------------------------------------------------------ checkpoints
def test_a_checkpoint_of_another_spec_is_refused(tmp_path, caplog):
    path = tmp_path / "checkpoint.pt"
    a, b = baseline_spec(lr=0.1), baseline_spec(lr=0.05)
    Checkpointer(path, spec=a).save({"step": 3})
    assert Checkpointer(path, spec=a).load()["step"] == 3
    assert spec_hash(a) != spec_hash(b)
    with caplog.at_level("WARNING"):
        assert Checkpointer(path, spec=b).load() is None
    assert "another run spec" in caplog.text
    assert not path.exists()


def test_a_killed_run_rerun_after_a_config_change_starts_from_scratch(tmp_path, digits_dir):
    old, new = baseline_spec(lr=0.5, steps=8), baseline_spec(lr=0.05, steps=8)
    out = tmp_path / "run"
    # the state a run of the old spec left when it was killed at step 3
    Checkpointer(out / "checkpoint.pt", spec=old).save(
        {"step": 3, "params": torch.zeros(650), "cluster": {}, "recorder": {"rows": [], "wall_s": 1.0}})
    dataparallel.run_simulated(new, digits_dir, out, {"checkpoint": {"every_s": 0, "every_steps": 0}})
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["spec"]["lr"] == 0.05 and "resumed" not in manifest
    fresh = tmp_path / "fresh"
    dataparallel.run_simulated(new, digits_dir, fresh, {"checkpoint": {"every_s": 0, "every_steps": 0}})
    pd.testing.assert_frame_equal(pd.read_csv(out / "metrics.csv"), pd.read_csv(fresh / "metrics.csv"))


# ------------------------------------------------------------ statistics
def test_t_interval_is_the_student_t_interval():
    x = np.array([1.0, 2.5, 0.7, 3.1, 2.2])
    ci = stats.t_interval(x, 0.95)
    lo, hi = sps.t.interval(0.95, len(x) - 1, loc=x.mean(), scale=sps.sem(x))
    assert ci.low == pytest.approx(lo) and ci.high == pytest.approx(hi) and ci.method == "t"
    assert stats.t_interval([2.0, 2.0]).low == 2.0


def _claims(n, **kw):
    return [{"id": f"c{i}", "paper": "P4", "source": "s", "statement": "a < b", "table": "t",
             "metric": "m", "test": "less", "a": {"k": "a"}, "b": {"k": f"b{i}"}, **kw}
            for i in range(n)]


def _table(gaps, seeds=6):
    rng = np.random.default_rng(0)
    rows = []
    for seed in range(seeds):
        base = rng.normal(10, 1)
        rows.append({"k": "a", "seed": seed, "m": base})
        for i, gap in enumerate(gaps):
            rows.append({"k": f"b{i}", "seed": seed, "m": base + gap + rng.normal(0, 0.5)})
    return pd.DataFrame(rows)


def test_holm_within_a_paper_turns_a_marginal_claim_inconclusive():
    # one clear effect and three marginal ones: each marginal raw p < 0.05
    table = _table([3.0, 0.55, 0.6, 0.5], seeds=6)
    df = scorecard.evaluate_claims(_claims(4), {"t": table}, STATS).set_index("id")
    raw_ok = df.index[df["p_value"] < 0.05]
    assert len(raw_ok) >= 2
    assert (df["p_holm"] >= df["p_value"]).all()
    np.testing.assert_allclose(df["p_holm"], stats.holm(df["p_value"].to_numpy()))
    for cid in raw_ok:
        assert (df.loc[cid, "verdict"] == "reproduced") == (df.loc[cid, "p_holm"] < 0.05)
    assert any("Holm" in r for r in df["reason"])


def test_papers_are_separate_families():
    claims = _claims(2)
    claims[1]["paper"] = "P1"
    df = scorecard.evaluate_claims(claims, {"t": _table([3.0, 3.0])}, STATS)
    assert (df["p_holm"] == df["p_value"]).all()  # a family of one: no adjustment


def test_by_construction_claims_are_labelled_and_not_counted():
    claims = _claims(2)
    claims[0]["by_construction"] = "the clock charges a fewer units"
    df = scorecard.evaluate_claims(claims, {"t": _table([3.0, 3.0])}, STATS).set_index("id")
    assert df.loc["c0", "verdict"] == "by construction"
    assert "holds by construction: the clock charges a fewer units" in df.loc["c0", "reason"]
    assert math.isnan(df.loc["c0", "p_holm"])
    assert df.loc["c1", "verdict"] == "reproduced"


def test_a_claim_against_a_constant():
    table = pd.DataFrame({"k": "ratio", "seed": range(5), "m": [35.0, 36.5, 34.2, 35.9, 36.1]})
    base = {"id": "r", "paper": "P4", "source": "s", "statement": "≥ 30× fewer bytes",
            "table": "t", "metric": "m", "a": {"k": "ratio"}, "value": 30,
            "threshold": "a made-up constant"}
    df = scorecard.evaluate_claims([{**base, "test": "greater"}], {"t": table}, STATS)
    assert df.iloc[0]["verdict"] == "reproduced"
    assert "35" in df.iloc[0]["ours"]
    df = scorecard.evaluate_claims([{**base, "test": "greater", "value": 40}], {"t": table}, STATS)
    assert df.iloc[0]["verdict"] == "not reproduced"
    with pytest.raises(scorecard.ClaimError, match="value"):
        scorecard.validate_claims([{**base, "test": "greater", "value": math.nan}])


def test_stale_runs_are_listed():
    t = pd.DataFrame({"seed": [0, 1, 2], "git_commit": ["abc", "def", "abc"],
                      "git_dirty": [False, False, True]})
    stale = scorecard.stale_runs({"t": t}, "abc")
    assert sorted(stale["seed"].tolist()) == [1, 2]
    assert scorecard.stale_runs({"t": t}, None).empty  # outside git: nothing to compare with
    # a commit whose code that decides results equals the current one's (docs or tests changed
    # since) leaves its runs current; a dirty run is listed whatever its commit
    asked = []
    stale = scorecard.stale_runs({"t": t}, "xyz", lambda c: asked.append(c) or c == "abc")
    assert sorted(stale["seed"].tolist()) == [1, 2] and sorted(asked) == ["abc", "def"]


def test_a_commit_that_changed_only_docs_leaves_its_runs_current(tmp_path):
    """code_unchanged_since compares the paths that decide results at a run's commit and at HEAD."""
    import subprocess

    from distlab.results.runs import code_unchanged_since

    def git(*a):
        return subprocess.run(["git", "-C", str(tmp_path), *a], capture_output=True, text=True, check=True).stdout.strip()

    git("init", "-q")
    git("config", "user.email", "t@t")
    git("config", "user.name", "t")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "m.py").write_text("x = 1\n")
    (tmp_path / "README.md").write_text("a\n")
    git("add", "-A")
    git("commit", "-qm", "one")
    run = git("rev-parse", "HEAD")
    (tmp_path / "README.md").write_text("b\n")
    git("commit", "-qam", "docs")
    assert code_unchanged_since(run, tmp_path)
    (tmp_path / "src" / "m.py").write_text("x = 2\n")
    git("commit", "-qam", "code")
    assert not code_unchanged_since(run, tmp_path)
    assert not code_unchanged_since("", tmp_path) and not code_unchanged_since("0" * 40, tmp_path)


# ---------------------------------------------------------- failed jobs
TORCHRUN_TAIL = """\
[rank0]: Traceback (most recent call last):
[rank0]: ConnectionResetError: Connection reset by peer
E1130 torch/distributed/elastic/multiprocessing/api.py] failed (exitcode: -9)
Traceback (most recent call last):
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-11-30_10:00:01
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 101)
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-30_10:00:00
  host      : vm
  rank      : 2 (local_rank: 2)
  exitcode  : -9 (pid: 103)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 103
============================================================
"""


def test_a_failed_job_names_the_rank_that_died_first():
    causes = root_causes(TORCHRUN_TAIL.splitlines())
    assert causes[0] == "rank 2 failed first (Signal 9 (SIGKILL) received by PID 103)"
    assert "rank 0: ConnectionResetError: Connection reset by peer" in causes[1:]


def test_a_rank_error_comes_first_when_it_is_the_root_cause():
    tail = ("[rank0]: RuntimeError: Found no NVIDIA driver on your system.\n"
            "Root Cause (first observed failure):\n[0]:\n  rank      : 0 (local_rank: 0)\n"
            "  exitcode  : 1 (pid: 7)\n  traceback : To enable traceback see: https://x\n=====\n")
    causes = root_causes(tail.splitlines())
    assert causes[0] == "rank 0 failed first (exit code 1 (pid: 7))"
    assert causes[1] == "rank 0: RuntimeError: Found no NVIDIA driver on your system."


@pytest.mark.slow
def test_an_nccl_job_names_its_cause_first(tmp_path, digits_dir):
    spec = baseline_spec(backend="nccl", steps=2)
    r = train_cli(spec, tmp_path, data=digits_dir)
    if torch.cuda.device_count() >= spec["n_workers"]:  # a GPU machine: the job runs
        assert r.returncode == 0, r.stderr[-2000:]
        assert (tmp_path / "run/manifest.json").exists()
        return
    assert r.returncode != 0
    first = next(line for line in r.stderr.splitlines() if line.startswith("distlab:"))
    after = r.stderr.split(first, 1)[1].splitlines()[:3]
    assert "failed first" in first
    assert any("NVIDIA driver" in line or "CUDA" in line for line in after), after
    assert not (tmp_path / "run/manifest.json").exists()


def test_launching_a_real_pgc_job_does_not_import_torch_in_the_launcher(tmp_path):
    """The process that validates a gloo spec and starts torchrun reads the spec's schema
    from a torch-free module (the launcher would otherwise spend ~2.4 s importing torch
    before torchrun and the workers import it again); the schema is the trainer's."""
    import distlab.pgc.spec as light
    import distlab.pgc.train as trainer
    from distlab.train.common import DTYPES

    from conftest import pgc_spec

    assert trainer.SPEC_SCHEMA is light.SPEC_SCHEMA and tuple(DTYPES) == light.DTYPES
    spec = pgc_spec("pgc-cr", 1, backend="gloo")
    spec.pop("checkpoint", None)
    code = ("import sys; from distlab.cli import main; "
            f"rc = main(['train', '--experiment', 'pgc', '--spec', {json.dumps(json.dumps(spec))}, "
            f"'--data', {str(tmp_path)!r}, '--out', {str(tmp_path / 'o')!r}, '--print-torchrun']); "
            "print('torch imported:', 'torch' in sys.modules); sys.exit(rc)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "--nproc_per_node=5" in r.stdout and "torch imported: False" in r.stdout


def test_a_checkpoint_written_without_torch_is_keyed_by_its_spec_too(tmp_path):
    """A job that never imports torch (a placement search without a network) pickles
    its checkpoint; it loads back, also in a process with torch, and a checkpoint of
    another spec is refused, as for torch's format."""
    path = tmp_path / "search.ckpt"
    code = ("import sys; from distlab.results.checkpoint import Checkpointer; "
            f"c = Checkpointer({str(path)!r}, spec={{'method': 'random'}}); "
            "c.save({'rows': [{'seed': 0, 'latency_s': 0.1}]}); "
            "print(c.load()['rows'][0]['seed'], 'torch' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["0", "False"]
    assert Checkpointer(path, spec={"method": "random"}).load()["rows"] == [{"seed": 0, "latency_s": 0.1}]
    assert Checkpointer(path, spec={"method": "heft"}).load() is None and not path.exists()
    # with torch imported (here), tensors go in torch's format and come back as tensors
    Checkpointer(path, spec={"method": "random"}).save({"w": torch.ones(2)})
    assert torch.equal(Checkpointer(path, spec={"method": "random"}).load()["w"], torch.ones(2))


def test_a_placement_search_without_a_network_starts_without_torch():
    """The simulator, the graph file and the baselines that need no network import no
    torch (about 2 s of each of the 24 single-device, random and HEFT jobs)."""
    code = ("import sys; import distlab.placement.train, distlab.placement.cli, distlab.results.runs; "
            "print('torch' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"


def test_a_peer_that_lost_its_connection_is_not_blamed_for_the_failure():
    """torchrun may see a worker end first because the master it talks to failed and
    closed the connection; the rank with an error of its own is named first."""
    tail = ("[rank1]: RuntimeError: [pair.cc:561] Connection closed by peer [127.0.0.1]:51384.\n"
            "[rank0]: StragglerTimeout: step 1: waited 3.0 s; worker 3 never answered\n"
            "Root Cause (first observed failure):\n[0]:\n  rank      : 1 (local_rank: 1)\n"
            "  exitcode  : 1 (pid: 24960)\n  traceback : To enable traceback see: https://x\n=====\n")
    causes = root_causes(tail.splitlines())
    assert causes[0].startswith("rank 0 failed first (an error of its own; torchrun saw rank 1 end first")
    assert causes[1] == "rank 0: StragglerTimeout: step 1: waited 3.0 s; worker 3 never answered"
