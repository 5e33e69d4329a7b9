"""The simulated drivers' batched worker passes (distlab.techniques.batched) compute, per worker,
what the per-worker loop computes: its loss and its gradient on its own windows, within float
reordering (1e-5 relative); and where a worker's compute is measured the drivers still run and
time each worker on its own (calls counted, no clock read in an assert)."""

from __future__ import annotations

import copy

import pytest
import torch
import yaml

from conftest import ROOT
from distlab.atlas import train as atlas_train
from distlab.atlas.workflow import base_spec
from distlab.data import load_split
from distlab.demo import train as demo_train
from distlab.models import batch_losses, build_model, gpt_batchable, lm_loss
from distlab.techniques import batched
from distlab.techniques.catalogue import TECHNIQUES, kind
from distlab.techniques.comm import SimComm
from distlab.techniques.gradient_codes import CodingError
from distlab.techniques.registry import make_technique
from distlab.techniques.step import Coded, Technique, Wrapped

CONFIG = yaml.safe_load((ROOT / "config/config.yaml").read_text())
RTOL = 1e-5
NS = (1, 2, 5)


def close(a: torch.Tensor, b: torch.Tensor) -> None:
    """``a`` equals ``b`` within 1e-5 relative (elementwise, and against the tensor's scale where an
    element is near zero)."""
    torch.testing.assert_close(a, b, rtol=RTOL, atol=RTOL * float(b.abs().max()) + 1e-12)


def _gpt(seed: int, **kw) -> torch.nn.Module:
    torch.manual_seed(seed)
    return build_model("gpt", vocab_size=256, **kw)


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("shared", [True, False])
@pytest.mark.parametrize("shape", [dict(block_size=16, n_layer=1, n_head=2, d_model=16),
                                   dict(block_size=32, n_layer=2, n_head=4, d_model=32)])
def test_stacked_passes_give_each_worker_its_own_loss_and_gradient(n, shared, shape):
    base = _gpt(0, **shape)
    models = [base] * n if shared else [copy.deepcopy(base) for _ in range(n)]
    if not shared:  # workers that drifted apart (DiLoCo between syncs)
        with torch.no_grad():
            for w, m in enumerate(models):
                for p in m.parameters():
                    p.add_(0.02 * w * torch.randn_like(p))
    g = torch.Generator().manual_seed(n)
    T = shape["block_size"]
    xs, ys = (torch.randint(0, 256, (n, 3, T), generator=g) for _ in range(2))
    assert batched.stackable(models)
    losses, grads = batched.worker_grads(models, xs, ys)
    for w, m in enumerate(models):
        m.zero_grad(set_to_none=True)
        loss = lm_loss(m(xs[w]), ys[w])
        loss.backward()
        close(losses[w], loss.detach())
        for p, gk in zip(m.parameters(), grads):
            close(gk[w], p.grad)


def test_what_the_stacked_forward_cannot_compute_is_not_batched():
    assert not gpt_batchable(build_model("mlp"))
    assert not gpt_batchable(build_model("gpt", vocab_size=256, block_size=16, n_layer=1, n_head=2, d_model=8,
                                         dropout=0.1))
    m = _gpt(0, block_size=16, n_layer=1, n_head=2, d_model=8)
    assert batched.stackable([m, m])
    other = _gpt(0, block_size=16, n_layer=1, n_head=2, d_model=16)
    assert not batched.stackable([m, other])
    batched.LOOP = True
    try:
        assert not batched.stackable([m, m])
    finally:
        batched.LOOP = False


def test_the_validation_batches_in_one_forward_equal_each_batch_alone():
    m = _gpt(1, block_size=16, n_layer=1, n_head=2, d_model=16).eval()
    g = torch.Generator().manual_seed(0)
    evals = [tuple(torch.randint(0, 256, (4, 16), generator=g) for _ in range(2)) for _ in range(5)]
    with torch.no_grad():
        one = batch_losses(m, evals)
        for k, (x, y) in enumerate(evals):
            close(one[k], lm_loss(m(x), y))


# ------------------------------------------------------------------ every atlas technique


@pytest.fixture(scope="module")
def tokens(pydoc_dir):
    return load_split(pydoc_dir, "train")["tokens"]


def _technique(name: str, n: int, tokens) -> Technique:
    a = {**CONFIG["atlas"], "compute": "measured",
         "sizes": {"t": {"name": "gpt", "n_layer": 1, "d_model": 16, "n_head": 2, "block_size": 16}},
         "batch_size": 2, "diloco": {**CONFIG["atlas"]["diloco"], "H": 3}}
    # the stragglers a code tolerates: none at N = 1, and where its groups must divide N = 5, four
    a["s"] = 0 if n == 1 else 4 if n == 5 and name.endswith("-fr") else 1
    spec = base_spec(a, name, "t", n, 0, 0.01, {"model": "none"}, steps=3)
    atlas_train.check_spec(spec)
    model = atlas_train.build_lm(spec["model"], 0)
    return make_technique(name, model, n, range(n), spec, SimComm(n), tokens, 16, 2, torch.device("cpu"))


def _recording(tech: Technique) -> list:
    """What each worker hands its method (sync-kind wrappers): its loss and gradients."""
    rec = []
    if isinstance(tech, Wrapped):
        me, orig = tech.method, tech.method.after_backward

        def after_backward(w, loss):
            rec.append((w, loss.detach().clone(), [p.grad.detach().clone() for p in me.model_for(w).parameters()]))
            orig(w, loss)
        me.after_backward = after_backward
    return rec


def _update(tech: Technique, step: int) -> None:
    if tech.kind == "sync":
        tech.update(step)
    else:
        tech.update(step, list(range(tech.master_pattern()["wait_for"])))


# IS-GC places c = 2 partitions a worker, so it has no 1-worker form: it is tested at the other N,
# and test_a_code_that_cannot_be_built_at_n_1_says_why checks that one worker is refused
CASES = [(name, n) for name in TECHNIQUES for n in NS if not (name.startswith("is-gc") and n == 1)]


@pytest.mark.parametrize("name,n", CASES)
def test_every_technique_batched_equals_its_per_worker_loop(name, n, tokens):
    """At steps 0, 1 and 2 (two twins trained alike by the loop up to it; DiLoCo's workers have
    drifted apart by then, PGC computes one partition a worker after step 0) one twin computes the
    step per worker, the other batched: every worker's loss and gradients (codes: every worker's
    message and kept gradients) agree."""
    for step in range(3):
        tech, twin = _technique(name, n, tokens), _technique(name, n, tokens)
        for t in (tech, twin):
            for s in range(step):
                for w in range(n):
                    t.compute(w, w, s)
                _update(t, s)
        rec_loop, rec_b = _recording(tech), _recording(twin)
        passes = [tech.compute(w, w, step) for w in range(n)]
        assert twin.compute_all(step) == passes
        if isinstance(tech, Coded):
            for w in range(n):
                close(twin.msgs[w], tech.msgs[w])
                assert tech.workers[w].latest.keys() == twin.workers[w].latest.keys()
                for j, g in tech.workers[w].latest.items():
                    close(twin.workers[w].latest[j], g)
        else:
            assert [r[0] for r in rec_b] == [r[0] for r in rec_loop] == list(range(n))
            for (_, lb, gb), (_, la, ga) in zip(rec_b, rec_loop):
                close(lb, la)
                for b, a in zip(gb, ga):
                    close(b, a)
            # and what the worker did with them (DiLoCo's inner AdamW step reads .grad as it lies in
            # memory): every worker's weights after its step, within a tenth of a step of lr
            for w in range(n):
                for b, a in zip(twin.method.model_for(w).parameters(), tech.method.model_for(w).parameters()):
                    torch.testing.assert_close(b, a, rtol=0.0, atol=0.1 * float(tech.spec["lr"]))


# ------------------------------------------------------------------ the drivers: who batches


def _count(monkeypatch, cls, attr):
    calls = {"n": 0}
    real = getattr(cls, attr)

    def counted(self, *a, **k):
        calls["n"] += 1
        return real(self, *a, **k)
    monkeypatch.setattr(cls, attr, counted)
    return calls


@pytest.mark.parametrize("compute", ["stored", "measured"])
@pytest.mark.parametrize("name", ["ddp", "diloco", "pgc-fr"])
def test_the_atlas_batches_only_where_the_clock_charges_the_stored_profile(compute, name, pydoc_dir, tmp_path,
                                                                          monkeypatch):
    a = {**CONFIG["atlas"], "compute": compute, "diloco": {**CONFIG["atlas"]["diloco"], "H": 3}}
    spec = base_spec(a, name, "small", 2, 0, 0.01, {"model": "none"}, steps=3, eval_batches=1)
    assert spec["cluster"]["compute"]["mode"] == compute
    cls = Coded if kind(name) == "master" else Wrapped
    each, whole = _count(monkeypatch, cls, "compute"), _count(monkeypatch, cls, "compute_all")
    atlas_train.run_simulated(spec, pydoc_dir, tmp_path / "run")
    if compute == "measured":  # each worker on its own, timed on its own
        assert (each["n"], whole["n"]) == (2 * 3, 0)
    else:
        assert (each["n"], whole["n"]) == (0, 3)
    monkeypatch.setattr(batched, "LOOP", True)  # the benchmark's switch: the loop, whatever the mode
    each["n"] = whole["n"] = 0
    atlas_train.run_simulated(spec, pydoc_dir, tmp_path / "loop")
    assert each["n"] == 2 * 3


@pytest.mark.parametrize("mode", ["calibrated", "measured"])
@pytest.mark.parametrize("method", ["adamw", "demo", "diloco", "powersgd"])
def test_demo_batches_only_with_calibrated_compute(mode, method, pydoc_dir, tmp_path, monkeypatch):
    from test_demo_train import spec_for

    spec = spec_for(method, cluster={"compute": {"mode": mode, "unit_seconds": 0.1, "scale": 1.0},
                                     "network": {"latency_s": 0.001, "bandwidth_Bps": 1e9},
                                     "straggler": {"model": "none"}})
    each, whole = {"n": 0}, {"n": 0}
    real_each, real_whole = demo_train._worker_grad, batched.method_step

    def one(*a, **k):
        each["n"] += 1
        return real_each(*a, **k)

    def all_of_them(*a, **k):
        whole["n"] += 1
        return real_whole(*a, **k)
    monkeypatch.setattr(demo_train, "_worker_grad", one)
    monkeypatch.setattr(batched, "method_step", all_of_them)
    demo_train.run_simulated(spec, pydoc_dir, tmp_path / "run", {"checkpoint": {"every_s": 0, "every_steps": 0}})
    steps, n = int(spec["steps"]), int(spec["n_workers"])
    assert (each["n"], whole["n"]) == ((n * steps, 0) if mode == "measured" else (0, steps))


@pytest.mark.parametrize("name", [t for t in TECHNIQUES if t.startswith("is-gc")])
def test_a_code_that_cannot_be_built_at_n_1_says_why(name, tokens):
    with pytest.raises(CodingError, match="partitions per worker"):
        _technique(name, 1, tokens)
