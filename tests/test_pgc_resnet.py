"""Paper-scale path: ResNet-18 (BatchNorm) under every PGC scheme, on both
backends, on a few CIFAR-shaped images; BatchNorm statistics reach the master."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import datasets
import numpy as np
import pandas as pd
import pytest
import torch

from conftest import bin_path, pgc_spec

from distlab.data import prepare_dataset
from distlab.pgc.coding import SCHEMES
from distlab.train.common import (flat_buffers, load_image_data, make_classifier, partition_grads,
                                  partition_grads_loop)

CIFAR = {"name": "cifar10", "kind": "image", "source": "hf", "hf_path": "uoft-cs/cifar10",
         "hf_name": None, "image_key": "img", "label_key": "label", "val_fraction": 0.2}


@pytest.fixture(scope="module")
def cifar_dir(tmp_path_factory):
    """A CIFAR-10-shaped data set (32x32 RGB, 10 classes) of 60 images, built through
    the hub path with ``datasets.load_dataset`` replaced by an in-memory set."""
    rng = np.random.default_rng(0)

    def split(k):
        return datasets.Dataset.from_dict(
            {"img": [rng.integers(0, 256, (32, 32, 3), dtype=np.uint8) for _ in range(k)],
             "label": [i % 10 for i in range(k)]})

    hub = datasets.DatasetDict({"train": split(50), "test": split(10)})
    orig = datasets.load_dataset
    datasets.load_dataset = lambda path, name=None: hub
    try:
        out = tmp_path_factory.mktemp("data") / "cifar10"
        prepare_dataset(CIFAR, out, seed=0)
    finally:
        datasets.load_dataset = orig
    return out


def _spec(scheme, backend, **over):
    s = 0 if scheme == "dgd" else 1
    spec = pgc_spec(scheme, s, backend=backend, n=2, batch_size=8, steps=3, eval_every=10,
                    dtype="float32", model={"name": "resnet18"},
                    cluster={"compute": {"mode": "calibrated", "unit_seconds": 0.5},
                             "network": {"latency_s": 0.001, "bandwidth_Bps": 1e9},
                             "straggler": {"model": "exponential", "mean": 0.01}})
    spec.pop("checkpoint", None)
    spec.update(over)
    return spec


def test_vectorised_partition_grads_handle_batchnorm(cifar_dir):
    """The vmap path (simulated backend) equals one pass per partition (a real
    worker), gradients and BatchNorm running statistics alike."""
    train = load_image_data(cifar_dir, "train", torch.float64, keep_uint8=True)
    model = make_classifier({"name": "resnet18"}, train, torch.float64, 0)
    b0 = flat_buffers(model)
    batches = [train.take(np.arange(k * 2, k * 2 + 2)) for k in range(2)]
    vec = partition_grads(model, torch.stack([b[0] for b in batches]), torch.stack([b[1] for b in batches]))
    loop, _ = partition_grads_loop(model, batches)
    assert torch.allclose(vec.grads, loop.grads, atol=1e-10)
    assert torch.allclose(vec.losses, loop.losses, atol=1e-12)
    assert torch.allclose(vec.buffers, loop.buffers, atol=1e-12)
    assert not torch.equal(vec.buffers[0], b0)          # the statistics moved ...
    assert torch.equal(flat_buffers(model), b0)          # ... in the copies, not in the model


def test_images_stay_uint8_and_are_normalised_per_batch(cifar_dir):
    raw = load_image_data(cifar_dir, "train", torch.float32, keep_uint8=True)
    ref = load_image_data(cifar_dir, "train", torch.float32)
    assert raw.x.dtype == torch.uint8 and ref.x.dtype == torch.float32
    x, y = raw.take([3, 1, 4])
    assert x.dtype == torch.float32 and torch.allclose(x, ref.x[[3, 1, 4]]) and torch.equal(y, ref.y[[3, 1, 4]])


@pytest.mark.parametrize("scheme", SCHEMES)
def test_every_scheme_trains_resnet18_on_the_simulated_backend(tmp_path, cifar_dir, scheme):
    from distlab.pgc.train import run_simulated

    run_simulated(_spec(scheme, "simulated"), cifar_dir, tmp_path)
    m = pd.read_csv(tmp_path / "metrics.csv")
    man = json.loads((tmp_path / "manifest.json").read_text())
    assert len(m) == 3 and np.isfinite(m["loss"]).all()
    assert np.isfinite(man["final"]["val_loss"])


def test_master_evaluates_with_the_workers_batchnorm_statistics(tmp_path, cifar_dir):
    """The master's running statistics after a run are those the workers' batches
    produced, not the initial ones (mean 0, variance 1)."""
    from distlab.pgc.train import run_simulated

    spec = _spec("pgc-cr", "simulated", checkpoint={"every_s": 0, "every_steps": 1}, steps=2)
    captured = {}
    import distlab.pgc.train as T

    orig = T.Setup.final

    def final(self):
        captured["bn"] = self.model.bn1.running_mean.clone()
        captured["nbt"] = int(self.model.bn1.num_batches_tracked)
        return orig(self)

    T.Setup.final = final
    try:
        run_simulated(spec, cifar_dir, tmp_path)
    finally:
        T.Setup.final = orig
    assert captured["nbt"] == 2                       # one update per step
    assert captured["bn"].abs().max() > 0             # moved away from the initial zeros


# Every scheme's gloo job from one interpreter: the CLI's main() once a scheme, each forking
# its ranks (one torch and torchvision import for all ten, about 3 s a scheme saved).
_GLOO_DRIVER = """
import json, sys
from distlab.cli import main
codes = {}
for scheme, argv in json.loads(sys.argv[1]).items():
    codes[scheme] = main(argv)
print(json.dumps(codes))
"""


@pytest.fixture(scope="module")
def resnet_gloo_runs(tmp_path_factory, cifar_dir):
    """Each scheme's 3-step gloo job (2 workers, --threads 2): {scheme: out dir}, and the
    driver's exit codes a scheme."""
    root = tmp_path_factory.mktemp("resnet_gloo")
    argvs = {scheme: ["train", "--experiment", "pgc", "--threads", "2",
                      "--spec", json.dumps(_spec(scheme, "gloo")),
                      "--runtime", json.dumps({"timeout_s": 60, "job_timeout_s": 300}),
                      "--data", str(cifar_dir), "--out", str(root / scheme)] for scheme in SCHEMES}
    env = {**os.environ, "PATH": bin_path(), "HF_DATASETS_OFFLINE": "1"}
    r = subprocess.run([sys.executable, "-c", _GLOO_DRIVER, json.dumps(argvs)], env=env,
                       capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stderr[-3000:]
    codes = json.loads(r.stdout.strip().splitlines()[-1])
    return {scheme: root / scheme for scheme in SCHEMES}, codes, r.stderr


@pytest.mark.slow
@pytest.mark.parametrize("scheme", SCHEMES)
def test_every_scheme_trains_resnet18_on_gloo(resnet_gloo_runs, scheme):
    dirs, codes, err = resnet_gloo_runs
    assert codes[scheme] == 0, err[-3000:]
    m = pd.read_csv(dirs[scheme] / "metrics.csv")
    man = json.loads((dirs[scheme] / "manifest.json").read_text())
    assert man["spec"]["scheme"] == scheme
    assert m["step"].tolist() == [0, 1, 2] and np.isfinite(m["loss"]).all()
    assert np.isfinite(man["final"]["val_loss"])
    assert len(man["calibration"]["unit_compute_s_per_worker"]) == 2
