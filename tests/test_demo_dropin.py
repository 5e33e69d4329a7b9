"""DeMo as a user drops it in: the example script under torchrun (gloo, a DDP-wrapped model
with no_sync), the device choice of the CUDA path, and resumed jobs."""

from __future__ import annotations

import json

import pytest
import torch

from conftest import ROOT, run_example_torchrun


@pytest.mark.slow
def test_example_trains_on_two_gloo_processes_with_ddp_no_sync(tmp_path):
    out = tmp_path / "ex.json"
    r = run_example_torchrun("demo_ddp.py", ["--steps", "60", "--ddp", "--out", str(out)], cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    res = json.loads(out.read_text())
    assert res["world"] == 2 and res["ddp"] and res["steps"] == 60
    assert res["end"] < 0.2 * res["start"]        # it learned the teacher
    assert res["spread"] == 0.0                   # every rank holds the same parameters
    lines = [x for x in r.stdout.splitlines() if x.startswith("step ")]
    assert len(lines) >= 10                        # progress at least every 10 % of the steps


def test_docstring_and_docs_show_the_ddp_pattern():
    from distlab.demo import DeMo

    for text in (DeMo.__doc__, (ROOT / "docs/demo.md").read_text()):
        assert "no_sync" in text and "all-reduce" in text


def test_simulated_jobs_take_the_gpu_when_there_is_one(monkeypatch):
    """The CUDA path up to the device choice: with a GPU present the simulated workers run on it."""
    from distlab.demo import train

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert train.pick_device() == torch.device("cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert train.pick_device() == torch.device("cpu")


def test_every_buffer_of_a_step_lives_on_the_parameters_device():
    """DeMo on the ``meta`` device (no data, real shapes and devices): a CPU tensor mixed into the
    step (a mask, an index table) would raise here as it would copy or fail on a GPU.  The
    non-finite check decides on the device (``nonfinite="skip"``): a meta tensor has no value to read."""
    from torch import nn

    from distlab.demo import DeMo

    m = nn.Sequential(nn.Linear(128, 67), nn.LayerNorm(67), nn.Linear(67, 96)).to("meta")
    opts = [DeMo(m.parameters(), lr=1e-3, mean=mean, nonfinite="skip") for mean in ("senders", "all")]
    for o in opts:
        for step in range(2):
            for p in m.parameters():
                p.grad = None if (step and p.dim() == 1) else torch.empty_like(p)
            payload = o.encode()
            assert payload.device.type == "meta"
            o.apply(torch.stack([payload, payload]))
        for p in m.parameters():
            assert o.state[p]["delta_dct"].device.type == "meta"
