"""Checkpoint integrity: every paper checkpoints through :class:`distlab.results.checkpoint.Checkpointer`.

A checkpoint carries the SHA-256 of its content, verified on load; a damaged or
truncated one is named in one log line, set aside as ``*.corrupt`` and never
resumed: the run continues from the previous good checkpoint (``*.prev``) or
from scratch, and ends where an uninterrupted run ends."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import torch

from conftest import ROOT, bin_path, pgc_spec
from distlab.results import checkpoint, runs
from distlab.results.checkpoint import Checkpointer, read_checkpoint_file

SPEC = {"experiment": "unit", "lr": 0.1}


def _tensor_offset(path, tensor: torch.Tensor) -> int:
    """Where ``tensor``'s bytes lie in the file (torch.save stores them raw)."""
    raw = tensor.detach().cpu().contiguous().numpy().tobytes()
    data = path.read_bytes()
    at = data.find(raw[:64])
    assert at > 0, "tensor bytes not found in the checkpoint"
    return at


def _overwrite(path, offset: int, n: int = 256, seed: int = 0) -> None:
    junk = np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()
    with open(path, "r+b") as f:
        f.seek(offset)
        old = f.read(n)
        assert old != junk
        f.seek(offset)
        f.write(junk)


def _saved(tmp_path, steps=(1, 2)):
    path = tmp_path / "checkpoint.pt"
    ck = Checkpointer(path, spec=SPEC)
    w = {}
    for step in steps:
        w[step] = torch.arange(400, dtype=torch.float32) * (step + 1)
        ck.save({"step": step, "w": w[step]})
    return path, w


def _one_line(caplog, path) -> list[str]:
    lines = [r.getMessage() for r in caplog.records if " is damaged (" in r.getMessage()]
    assert len(lines) == 1 and "\n" not in lines[0] and str(path) in lines[0], lines
    return lines


def test_a_checkpoint_carries_a_checksum_and_round_trips(tmp_path):
    path, w = _saved(tmp_path)
    header, state = read_checkpoint_file(path)
    assert len(header["sha256"]) == 64 and header["spec_hash"] == Checkpointer(path, spec=SPEC).spec_hash
    assert torch.equal(state["w"], w[2])
    assert torch.equal(Checkpointer(path, spec=SPEC).load()["w"], w[2])
    # the one before it is kept, and both go at the end of the run
    assert (tmp_path / "checkpoint.pt.prev").exists()
    Checkpointer(path, spec=SPEC).clear()
    assert not path.exists() and not (tmp_path / "checkpoint.pt.prev").exists()
    # no temporary file is left behind by the atomic write
    assert [p.name for p in tmp_path.iterdir()] == []


@pytest.mark.parametrize("damage", ["tensor256", "truncated", "mid_file", "header", "empty", "appended"])
def test_a_damaged_checkpoint_is_set_aside_and_the_previous_one_resumed(tmp_path, caplog, damage):
    path, w = _saved(tmp_path)
    size = path.stat().st_size
    if damage == "tensor256":
        _overwrite(path, _tensor_offset(path, w[2]) + 64)
    elif damage == "truncated":
        os.truncate(path, size // 2)
    elif damage == "mid_file":
        _overwrite(path, size // 2, n=16)
    elif damage == "header":
        _overwrite(path, 5, n=8)
    elif damage == "empty":
        os.truncate(path, 0)
    else:
        with open(path, "ab") as f:
            f.write(b"\0" * 10)
    with caplog.at_level("WARNING"):
        state = Checkpointer(path, spec=SPEC).load()   # no UnpicklingError, no exception at all
    assert state is not None and state["step"] == 1 and torch.equal(state["w"], w[1])
    _one_line(caplog, path)
    assert (tmp_path / "checkpoint.pt.corrupt").exists() and not path.exists()
    # a second rerun does not trip over it again
    caplog.clear()
    with caplog.at_level("WARNING"):
        assert Checkpointer(path, spec=SPEC).load()["step"] == 1
    assert " is damaged (" not in caplog.text


def test_with_no_good_checkpoint_left_the_run_starts_from_scratch(tmp_path, caplog):
    path, w = _saved(tmp_path)
    os.truncate(path, 100)
    _overwrite(tmp_path / "checkpoint.pt.prev", _tensor_offset(tmp_path / "checkpoint.pt.prev", w[1]) + 8)
    with caplog.at_level("WARNING"):
        assert Checkpointer(path, spec=SPEC).load() is None
    assert "starting from scratch" in caplog.text
    assert {p.name for p in tmp_path.iterdir()} == {"checkpoint.pt.corrupt", "checkpoint.pt.prev.corrupt"}


def test_an_unchecksummed_pickle_is_never_unpickled(tmp_path, caplog):
    """A file without the header (foreign bytes) is set aside, not loaded."""
    path = tmp_path / "checkpoint.pt"
    path.write_bytes(pickle.dumps({"step": 7}))
    with caplog.at_level("WARNING"):
        assert Checkpointer(path, spec=SPEC).load() is None
    assert "no distlab checkpoint header" in caplog.text


class _Plant:
    """A pickle that, when unpickled, creates the file it names (it runs code)."""

    def __init__(self, target):
        self.target = str(target)

    def __reduce__(self):
        return (open, (self.target, "w"))


def _forge(path, payload: bytes, magic: bytes, fmt: str, spec_hash) -> None:
    """A checkpoint whose checksum matches its (malicious) payload, as a forger writes it."""
    import hashlib

    header = {"sha256": hashlib.sha256(payload).hexdigest(), "bytes": len(payload),
              "format": fmt, "spec_hash": spec_hash}
    path.write_bytes(magic + json.dumps(header).encode() + b"\n" + payload)


@pytest.mark.parametrize("fmt", ["torch", "json", "pickle"])
def test_a_forged_checkpoint_never_runs_its_pickle(tmp_path, caplog, fmt):
    """A checkpoint in the current format with a valid checksum whose payload is a pickle
    that would create a file: loading it creates no file; the checkpoint is set aside."""
    path = tmp_path / "checkpoint.pt"
    planted = tmp_path / "planted"
    payload = pickle.dumps({"step": 3, "x": _Plant(planted)})
    if fmt == "torch":  # a torch.save zip whose data.pkl is the forged pickle
        import io

        buf = io.BytesIO()
        torch.save({"step": 3, "x": _Plant(planted)}, buf)
        payload = buf.getvalue()
    _forge(path, payload, checkpoint.CHECKPOINT_MAGIC, fmt, Checkpointer(path, spec=SPEC).spec_hash)
    with caplog.at_level("WARNING"):
        assert Checkpointer(path, spec=SPEC).load() is None
    assert not planted.exists()
    assert " is damaged (" in caplog.text and (tmp_path / "checkpoint.pt.corrupt").exists()


def test_an_old_pickled_checkpoint_is_refused_in_one_line_without_unpickling(tmp_path):
    """A version-1 checkpoint (a pickle, or torch.save of arbitrary objects) with a matching
    checksum and spec: refused, one line saying how to rerun from scratch; nothing runs."""
    path = tmp_path / "checkpoint.pt"
    planted = tmp_path / "planted"
    _forge(path, pickle.dumps(_Plant(planted)), b"DISTLAB-CHECKPOINT 1\n", "pickle",
           Checkpointer(path, spec=SPEC).spec_hash)
    with pytest.raises(checkpoint.CheckpointRefused) as e:
        Checkpointer(path, spec=SPEC).load()
    msg = str(e.value)
    assert "\n" not in msg and str(path) in msg and "from scratch" in msg and "rm -f" in msg
    assert not planted.exists() and path.exists()   # refused, not deleted behind the user's back


def test_the_spec_hash_is_checked_before_the_payload_is_read(tmp_path, monkeypatch):
    """A checkpoint of another spec is discarded from its header alone: its payload is never
    loaded (torch.load is not called)."""
    path = tmp_path / "checkpoint.pt"
    Checkpointer(path, spec={"other": 1}).save({"step": 1, "w": torch.zeros(3)})
    calls = []
    monkeypatch.setattr(torch, "load", lambda *a, **k: calls.append(1))
    assert Checkpointer(path, spec=SPEC).load() is None
    assert calls == [] and not path.exists()


def test_a_state_of_numpy_tuples_sets_and_int_keys_round_trips_exactly(tmp_path):
    """What trainers checkpoint besides tensors (numpy arrays and scalars of any dtype, a
    generator's state, tuples, int keys) comes back as the same objects and values."""
    rng = np.random.default_rng(5)
    rng.random(3)
    state = {"step": np.int64(4), "f32": np.float32(0.1), "arr": np.arange(6, dtype=np.uint32).reshape(2, 3),
             "rng": rng.bit_generator.state, "py": __import__("random").Random(1).getstate(),
             "rows": [{"loss": np.float64(0.25), "received": "0 1"}], "keys": {3: "a", 5: (1, 2)},
             "s": {1, 2}, "nan": float("nan"), "raw": b"\x00\xff", "w": torch.arange(4.0)}
    path = tmp_path / "checkpoint.pt"
    Checkpointer(path, spec=SPEC).save(state)
    got = Checkpointer(path, spec=SPEC).load()
    assert type(got["step"]) is np.int64 and got["step"] == 4
    assert type(got["f32"]) is np.float32 and got["f32"] == np.float32(0.1)
    assert got["arr"].dtype == np.uint32 and (got["arr"] == state["arr"]).all()
    r2 = np.random.default_rng(0)
    r2.bit_generator.state = got["rng"]
    assert r2.random() == rng.random()
    assert got["py"] == state["py"] and got["keys"] == {3: "a", 5: (1, 2)} and got["s"] == {1, 2}
    assert type(got["rows"][0]["loss"]) is np.float64 and got["raw"] == b"\x00\xff"
    assert np.isnan(got["nan"]) and torch.equal(got["w"], state["w"])


def test_a_state_that_cannot_be_stored_safely_is_refused_at_save(tmp_path):
    with pytest.raises(TypeError, match=r"tensors and plain data only: state\['x'\]"):
        Checkpointer(tmp_path / "c.pt", spec=SPEC).save({"x": object()})


def test_a_process_without_torch_writes_json_and_reads_it_back(tmp_path):
    """The placement searches' jobs checkpoint without torch: JSON, no pickle."""
    code = ("import sys, json; from distlab.results.checkpoint import Checkpointer, read_checkpoint_file; "
            f"p = {str(tmp_path / 'c.ckpt')!r}; Checkpointer(p, spec={{'a': 1}}).save("
            "{'rows': [{'seed': 0, 'latency_s': 0.5, 'groups': (1, 2)}]}); "
            "h, s = read_checkpoint_file(p); assert 'torch' not in sys.modules; "
            "print(json.dumps([h['format'], s['rows'][0]['groups'] == (1, 2)]))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == ["json", True]


# --------------------------------------------------------------- every paper's runs
class Killed(BaseException):
    pass


def _kill_after_saves(monkeypatch, n: int) -> None:
    """The process dies right after its n-th checkpoint write (as a kill -9 would leave it)."""
    orig = Checkpointer.save
    count = {"n": 0}

    def save(self, state):
        orig(self, state)
        count["n"] += 1
        if count["n"] == n:
            raise Killed()

    monkeypatch.setattr(Checkpointer, "save", save)


def _baseline(digits_dir, out, runtime):
    from distlab.baseline import train as dataparallel

    spec = {"experiment": "baseline", "method": "dgd", "backend": "simulated", "seed": 0,
            "model": {"name": "logreg"}, "n_workers": 2, "batch_size": 16, "lr": 0.1, "steps": 6,
            "eval_every": 3, "dtype": "float32",
            "cluster": {"compute": {"mode": "calibrated", "unit_seconds": 0.5},
                        "network": {"latency_s": 0.001, "bandwidth_Bps": 1e9},
                        "straggler": {"model": "none"}}}
    dataparallel.run_simulated(spec, digits_dir, out, runtime)
    return pd.read_csv(out / "metrics.csv")


def _pgc(digits_dir, out, runtime):
    from distlab.pgc import train

    spec = pgc_spec("pgc-cr", 1, steps=6)
    spec.pop("checkpoint", None)
    train.run_simulated(spec, digits_dir, out, runtime)
    return pd.read_csv(out / "metrics.csv")


def _demo(pydoc_dir, out, runtime):
    from distlab.config import specs
    from distlab.demo import train

    spec = {"experiment": "demo", "method": "demo", "backend": "simulated", "seed": 0,
            "model": {"name": "gpt", "n_layer": 1, "d_model": 32, "n_head": 2, "block_size": 16},
            "n_workers": 2, "batch_size": 2, "lr": 1e-3, "steps": 6, "eval_every": 3, "eval_batches": 1,
            "dtype": "float32", "demo": {"topk": 8, "chunk": 16, "decay": 0.999, "weight_decay": 0.0},
            "cluster": {"compute": {"mode": "calibrated", "unit_seconds": 0.1, "scale": 1.0},
                        "network": {"latency_s": 0.001, "bandwidth_Bps": 1e9},
                        "straggler": {"model": "none"}}}
    spec = specs.validate_spec(spec, train.SPEC_SCHEMA, "demo")
    train.run_simulated(spec, pydoc_dir, out, runtime)
    return pd.read_csv(out / "metrics.csv")


def _local(pydoc_dir, out, runtime):
    import yaml

    from distlab.local import workflow
    from distlab.local.train import run_simulated

    text = (ROOT / "tests/configs/tiny.yaml").read_text()
    start = text.index("\nlocal_learning:")
    section = yaml.safe_load(text[start:text.index("# ---", start)])["local_learning"]
    run_simulated(workflow.spec(section, "rc", "rc-seq", 1), pydoc_dir, out, runtime)
    return pd.read_csv(out / "metrics.csv")


def _first_tensor(state: dict) -> torch.Tensor:
    """The largest tensor of a state (a model's weights)."""
    found = []

    def walk(x):
        if isinstance(x, torch.Tensor):
            found.append(x)
        elif isinstance(x, dict):
            for v in x.values():
                walk(v)
        elif isinstance(x, (list, tuple)):
            for v in x:
                walk(v)
    walk(state)
    return max(found, key=lambda t: t.numel())


@pytest.fixture(scope="module")
def pydoc_dir(tmp_path_factory):
    from distlab.data import prepare_dataset

    out = tmp_path_factory.mktemp("data") / "pydoc"
    prepare_dataset({"name": "pydoc", "kind": "text", "source": "pydoc_topics", "val_fraction": 0.05,
                     "test_fraction": 0.05}, out, seed=0)
    return out


# paper -> (driver, data fixture)
DRIVERS = {"baseline": (_baseline, "digits_dir"), "pgc": (_pgc, "digits_dir"),
           "demo": (_demo, "pydoc_dir"), "local_learning": (_local, "pydoc_dir")}


@pytest.mark.parametrize("paper", sorted(DRIVERS))
@pytest.mark.parametrize("both", [False, True], ids=["previous", "scratch"])
def test_a_rerun_after_damage_ends_as_a_clean_run(tmp_path, request, monkeypatch, caplog, paper, both):
    """256 bytes of a tensor overwritten in the checkpoint a killed run left: the rerun names it,
    sets it aside and ends with the same losses as an uninterrupted run (from the previous
    checkpoint, or, when that one is damaged too, from scratch)."""
    run, fixture = DRIVERS[paper]
    data = request.getfixturevalue(fixture)
    runtime = {"timeout_s": 60, "checkpoint": {"every_s": 0, "every_steps": 1}}
    clean = run(data, tmp_path / "clean", runtime)
    out = tmp_path / "killed"
    with monkeypatch.context() as m:
        _kill_after_saves(m, 3)
        with pytest.raises(Killed):
            run(data, out, runtime)
    ckpt = out / "checkpoint.pt"
    damaged = [ckpt, out / "checkpoint.pt.prev"] if both else [ckpt]
    for i, path in enumerate(damaged):
        tensor = _first_tensor(torch.load(_payload(path), weights_only=True))
        _overwrite(path, _tensor_offset(path, tensor) + 16, seed=i)
    with caplog.at_level("WARNING"):
        resumed = run(data, out, runtime)
    assert sum(" is damaged (" in r.getMessage() for r in caplog.records) == len(damaged)
    assert all(path.with_name(path.name + ".corrupt").exists() for path in damaged)
    assert not ckpt.exists() and not (out / "checkpoint.pt.prev").exists()   # cleared at the end
    if paper != "local_learning":  # its manifest does not count resumptions
        manifest = json.loads((out / "manifest.json").read_text())
        assert ("resumed" in manifest) != both
    cols = ["step", "loss"]
    pd.testing.assert_frame_equal(clean[cols], resumed[cols])
    assert resumed["loss"].iloc[-1] == clean["loss"].iloc[-1]


def _payload(path):
    import io

    data = path.read_bytes()
    header_end = data.index(b"\n", len(checkpoint.CHECKPOINT_MAGIC)) + 1
    return io.BytesIO(data[header_end:])


def test_the_cli_names_a_damaged_checkpoint_in_one_line_and_exits_0(tmp_path, digits_dir):
    """Through `distlab train`: a truncated checkpoint gives one warning line naming the
    file (no traceback, no UnpicklingError) and the run completes from scratch."""
    spec = {"experiment": "baseline", "method": "single", "backend": "simulated", "seed": 0,
            "model": {"name": "logreg"}, "n_workers": 1, "batch_size": 16, "lr": 0.1, "steps": 3,
            "eval_every": 3, "dtype": "float32",
            "cluster": {"compute": {"mode": "calibrated", "unit_seconds": 0.5},
                        "network": {"latency_s": 0.001, "bandwidth_Bps": 1e9},
                        "straggler": {"model": "none"}}}
    out = tmp_path / "run"
    Checkpointer(out / "checkpoint.pt", spec=spec).save({"step": 0, "params": torch.zeros(650)})
    os.truncate(out / "checkpoint.pt", 300)
    env = {**os.environ, "PATH": bin_path(), "PYTHONPATH": str(ROOT / "src")}
    r = subprocess.run([sys.executable, "-m", "distlab", "train", "--experiment", "baseline",
                        "--spec", json.dumps(spec), "--data", str(digits_dir), "--out", str(out)],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if " is damaged (" in ln]
    assert len(lines) == 1 and str(out / "checkpoint.pt") in lines[0] and "truncated" in lines[0]
    assert "Traceback" not in r.stderr and "Unpickling" not in r.stderr
    assert (out / "checkpoint.pt.corrupt").exists() and (out / "manifest.json").exists()


def test_a_deadline_during_saves_never_leaves_a_run_without_its_checkpoint(tmp_path):
    """The job deadline (SIGALRM) is held back while a checkpoint is put in place: however
    often it strikes during saves, the checkpoint is there and loads."""
    from distlab.runtime.deadline import JobTimeout, job_deadline

    path = tmp_path / "checkpoint.pt"
    ck = Checkpointer(path, spec=SPEC)
    ck.save({"step": 0, "w": torch.zeros(10)})
    for delay in (0.001, 0.003, 0.007, 0.013):
        with pytest.raises(JobTimeout):
            with job_deadline(delay):
                step = 1
                while True:
                    ck.save({"step": step, "w": torch.randn(50_000)})
                    step += 1
        state = Checkpointer(path, spec=SPEC).load()
        assert state is not None and path.exists()
        assert not list(tmp_path.glob(".*.tmp"))


def test_the_cli_refuses_an_old_pickled_checkpoint_in_one_line_and_exit_2(tmp_path, digits_dir):
    """`distlab train` over a run folder holding a version-1 (pickled) checkpoint: one line
    saying how to rerun from scratch, exit 2, nothing unpickled; deleting it as told works."""
    spec = {"experiment": "baseline", "method": "single", "backend": "simulated", "seed": 0,
            "model": {"name": "logreg"}, "n_workers": 1, "batch_size": 16, "lr": 0.1, "steps": 3,
            "eval_every": 3, "dtype": "float32",
            "cluster": {"compute": {"mode": "calibrated", "unit_seconds": 0.5},
                        "network": {"latency_s": 0.001, "bandwidth_Bps": 1e9},
                        "straggler": {"model": "none"}}}
    out = tmp_path / "run"
    out.mkdir()
    planted = tmp_path / "planted"
    _forge(out / "checkpoint.pt", pickle.dumps(_Plant(planted)), b"DISTLAB-CHECKPOINT 1\n", "pickle",
           Checkpointer(out / "checkpoint.pt", spec=spec).spec_hash)
    env = {**os.environ, "PATH": bin_path(), "PYTHONPATH": str(ROOT / "src")}
    cmd = [sys.executable, "-m", "distlab", "train", "--experiment", "baseline", "--spec", json.dumps(spec),
           "--data", str(digits_dir), "--out", str(out)]
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("distlab: ")]
    assert len(lines) == 1 and "from scratch" in lines[0] and str(out / "checkpoint.pt") in lines[0]
    assert not planted.exists() and not (out / "manifest.json").exists()
    (out / "checkpoint.pt").unlink()
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and (out / "manifest.json").exists(), r.stderr
