"""A user places their own model: the Python API and ``python -m distlab place`` on models the
project does not ship; the placed module gives the original's output; the CUDA path up to the
choice of torch device."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from torch import nn

from conftest import ROOT
from distlab.placement import api


class TwoTowers(nn.Module):
    """Not a model the project ships: two convolution towers joined by a residual sum."""

    def __init__(self):
        super().__init__()
        self.a = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1))
        self.b = nn.Sequential(nn.Conv2d(3, 8, 1), nn.GELU())
        self.head = nn.Linear(8, 5)

    def forward(self, x):
        h = torch.relu(self.a(x) + self.b(x))
        return self.head(h.mean(dim=(2, 3)))


def _pair():
    return {"devices": [{"name": "cpu", "kind": "profiled"},
                        {"name": "fast", "kind": "roofline", "peak_gflops": 50, "mem_gbps": 20, "launch_us": 5}],
            "link": {"gbps": 10, "latency_us": 5}}


@pytest.mark.parametrize("method", ["heft", "random", "hsdag_corrected"])
def test_placed_module_gives_the_original_output(method, tmp_path):
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model, x = TwoTowers().eval(), torch.randn(2, 3, 16, 16)
    opts = {"samples": 5, "lr": 0.01, "advantage": "normalised", "hidden": 16, "gcn_layers": 1,
            "max_levels": 1} if method.startswith("hsdag") else None
    placed = api.place(model, (x,), method=method, pair=_pair(), budget=20, options=opts, repeats=2)
    names = [n.name for n in placed.module.gm.graph.nodes if n.op not in ("output", "get_attr")]
    assert set(placed.placement) == set(names) and set(placed.placement.values()) <= {"cpu", "fast"}
    with torch.no_grad():
        torch.testing.assert_close(placed.module(x), model(x))
    saved = json.loads(placed.save(tmp_path / "p.json").read_text())
    assert saved["placement"] == placed.placement and saved["modelled"] == ["fast"]
    assert saved["clock"] == "simulated" and saved["simulated_latency_s"] > 0


def test_cuda_path_up_to_the_device_choice(monkeypatch):
    pair = _pair()
    assert api.torch_devices(pair, cuda_available=False) == ["cpu", "cpu"]
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert api.torch_devices(pair, cuda_available=True) == ["cpu", "cuda:0"]
    three = {"devices": pair["devices"] + [dict(pair["devices"][1], name="fast2")], "link": pair["link"]}
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert api.torch_devices(three, cuda_available=True) == ["cpu", "cuda:0", "cuda:1"]


def test_place_command_on_a_torchvision_model_not_shipped(tmp_path):
    out = tmp_path / "squeeze.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}
    r = subprocess.run([sys.executable, "-m", "distlab", "place", "--model", "torchvision.models:squeezenet1_1",
                        "--input-shape", "1,3,64,64", "--method", "heft", "--repeats", "1", "--out", str(out)],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "placed output equals the original's" in r.stdout
    p = json.loads(out.read_text())
    assert len(p["placement"]) > 20 and set(p["placement"].values()) <= {"cpu", "igpu"}
    assert p["modelled"] == ["igpu"] and np.isfinite(p["simulated_latency_s"])


USER_MODEL = '''
import torch
from torch import nn

from helper_layers import Scale  # a module beside the file: the file's folder is on sys.path


class Mine(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.s = nn.Linear(6, 4), Scale(2.0)

    def forward(self, x):
        return self.s(torch.tanh(self.a(x)))


class Branchy(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(6, 4)

    def forward(self, x):
        if x.sum() > 0:  # control flow on a tensor's value: torch.fx cannot trace it
            return self.a(x)
        return -self.a(x)


def make():
    return Mine()


def branchy():
    return Branchy()
'''


def _place(tmp_path, ref, cwd):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([sys.executable, "-m", "distlab", "place", "--model", ref, "--input-shape", "3,6",
                           "--method", "heft", "--repeats", "1", "--out", str(tmp_path / "p.json")],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture
def user_dir(tmp_path):
    d = tmp_path / "models"
    d.mkdir()
    (d / "mymodel.py").write_text(USER_MODEL)
    (d / "helper_layers.py").write_text("from torch import nn\n\n\nclass Scale(nn.Module):\n"
                                        "    def __init__(self, k):\n        super().__init__()\n"
                                        "        self.k = k\n\n    def forward(self, x):\n"
                                        "        return x * self.k\n")
    return d


@pytest.mark.parametrize("how", ["absolute", "relative"])
def test_place_command_from_a_file_path(tmp_path, user_dir, how):
    ref = f"{user_dir / 'mymodel.py'}:make" if how == "absolute" else "models/mymodel.py:make"
    r = _place(tmp_path, ref, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "placed output equals the original's" in r.stdout
    p = json.loads((tmp_path / "p.json").read_text())
    assert any("linear" in k or k.startswith("a") for k in p["placement"]), p["placement"]


def test_an_untraceable_model_gets_one_line(tmp_path, user_dir):
    r = _place(tmp_path, f"{user_dir / 'mymodel.py'}:branchy", cwd=tmp_path)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    line = lines[0]
    assert line.startswith("distlab: ") and "torch.fx cannot trace Branchy" in line
    at = 1 + next(i for i, t in enumerate(USER_MODEL.splitlines()) if "if x.sum() > 0" in t)
    assert f"{user_dir / 'mymodel.py'}:{at}: TraceError" in line  # the line of the `if` on a tensor
    assert "torch.fx.wrap" in line and "Traceback" not in r.stderr


@pytest.mark.parametrize("ref,expect", [
    ("nofile.py:make", "no file nofile.py"),
    ("no_such_pkg.models:make", "importing no_such_pkg.models failed"),
    ("{dir}/mymodel.py:nothing", "has no 'nothing'"),
    ("{dir}/mymodel.py", "names no factory"),
])
def test_a_model_reference_that_does_not_load_gets_one_line(tmp_path, user_dir, ref, expect):
    r = _place(tmp_path, ref.format(dir=user_dir), cwd=tmp_path)
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1 and expect in r.stderr, r.stderr
