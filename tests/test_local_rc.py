"""Readout-gradient consensus and backprop: the tick arithmetic, the consensus, staleness,
sequential/parallel equivalence, and bad specs refused with the key named."""

from __future__ import annotations

import copy

import pytest
import torch

from distlab.data import prepare_dataset
from distlab.local import processes, rc
from distlab.local.model import TextData, build_gpt, flat, lm_loss, split_gpt
from distlab.local.train import SPEC_SCHEMA, check_spec
from distlab.config.specs import SpecError, validate_spec

MODEL = {"name": "gpt", "n_layer": 4, "n_head": 2, "d_model": 16, "block_size": 16}


@pytest.fixture(scope="module")
def pydoc(tmp_path_factory):
    out = tmp_path_factory.mktemp("local") / "pydoc"
    prepare_dataset({"name": "pydoc", "kind": "text", "source": "pydoc_topics",
                     "val_fraction": 0.05, "test_fraction": 0.05}, out, seed=0)
    return out


def spec_for(method="rc", **kw):
    s = {"experiment": "local", "method": method, "seed": 3, "model": dict(MODEL), "batch_size": 4,
         "steps": 6, "lr": 3e-3, "eval_every": 3, "threads": 1,
         "eval": {"batches": 1, "batch_size": 4, "final_batches": 1}}
    if method == "rc":
        s.update(mode="sequential", sections=2, delay=1)
    s.update(kw)
    return s


def data_for(pydoc, spec):
    return TextData(pydoc, spec["model"]["block_size"], spec["batch_size"], spec["seed"])


def params_of(split):
    return flat([p.detach() for p in split.gpt.parameters()])


def test_split_shares_the_gpt_and_unties_the_readout():
    gpt = build_gpt(MODEL, 0)
    split = split_gpt(gpt, 2)
    assert gpt.lm_head.weight is not gpt.wte.weight
    assert torch.equal(gpt.lm_head.weight, gpt.wte.weight)  # same initial values
    x = torch.randint(0, 256, (2, 16))
    # the split's forward is the GPT's forward
    assert torch.allclose(split.forward(x), gpt(x), atol=1e-6)
    n_sec = sum(p.numel() for s in split.sections for p in s.parameters())
    n_read = sum(p.numel() for p in split.readout.parameters())
    assert n_sec + n_read == sum(p.numel() for p in gpt.parameters())
    with pytest.raises(ValueError, match="sections: 3 does not divide n_layer = 4"):
        split_gpt(gpt, 3)


def test_same_seed_same_initial_weights_and_batches(pydoc):
    s = spec_for()
    a, b = split_gpt(build_gpt(MODEL, 3), 2), split_gpt(build_gpt(MODEL, 3), 2)
    assert torch.equal(params_of(a), params_of(b))
    assert not torch.equal(params_of(a), params_of(split_gpt(build_gpt(MODEL, 4), 2)))
    d = data_for(pydoc, s)
    x1, y1 = d.train_batch(5)
    x2, y2 = data_for(pydoc, s).train_batch(5)
    assert torch.equal(x1, x2) and torch.equal(y1, y2)
    assert torch.equal(y1[:, :-1], x1[:, 1:])


def test_consensus_is_the_mean_of_the_section_reports(pydoc):
    """One tick by hand: each section's readout gradient of its own local loss, averaged, is
    exactly what the coordinator applies (checked through AdamW's first step: the update of a
    parameter is lr * sign-like g/|g|, so compare with an optimizer fed the mean directly)."""
    s = spec_for(delay=0, steps=1)
    data = data_for(pydoc, s)
    split = split_gpt(build_gpt(MODEL, 3), 2)
    ref = copy.deepcopy(split)
    x, y = data.train_batch(0)
    # reports by hand on the initial weights
    h0 = ref.sections[0](x)
    g0 = torch.autograd.grad(lm_loss(ref.readout(h0), y), list(ref.readout.parameters()))
    h1 = ref.sections[1](h0.detach())
    g1 = torch.autograd.grad(lm_loss(ref.readout(h1), y), list(ref.readout.parameters()))
    mean = [(a + b) / 2 for a, b in zip(g0, g1)]
    opt = torch.optim.AdamW(list(ref.readout.parameters()), lr=s["lr"], betas=(0.9, 0.95),
                            weight_decay=0.0, foreach=False)
    for p, g in zip(ref.readout.parameters(), mean):
        p.grad = g
    opt.step()
    rc.train_rc_sequential(s, data, split)
    for p, q in zip(split.readout.parameters(), ref.readout.parameters()):
        assert torch.allclose(p, q, atol=1e-7)
    # a section's blocks are trained by its own loss only: section 0 differs from BP's update
    assert not torch.allclose(flat(list(split.sections[0].parameters())),
                              flat(list(ref.sections[0].parameters())))


def test_staleness_is_exactly_the_delay(pydoc, monkeypatch):
    """Section k at tick t trains on batch t - k d, reading section k-1's tick t - d output."""
    seen = []
    orig = rc.SectionTrainer.step

    def spy(self, h_in, y, emit, t=0):
        seen.append((self.k, int(y.sum())))
        return orig(self, h_in, y, emit, t)

    monkeypatch.setattr(rc.SectionTrainer, "step", spy)
    s = spec_for(model=dict(MODEL, n_layer=6), sections=3, delay=2, steps=7)
    data = data_for(pydoc, s)
    res = rc.train_rc_sequential(s, data, split_gpt(build_gpt(s["model"], 3), 3))
    batch_id = {int(data.train_batch(b)[1].sum()): b for b in range(7)}
    ticks = []
    for t, row in enumerate(res.rows):
        ticks += [t] * row["active_sections"]
    for (k, ysum), t in zip(seen, ticks):
        assert batch_id[ysum] == t - k * 2
    assert [r["active_sections"] for r in res.rows] == [1, 1, 2, 2, 3, 3, 3]


@pytest.mark.parametrize("delay", [0, 1])
@pytest.mark.parametrize("concurrency", ["thread", "process"])
def test_parallel_computes_the_sequential_arithmetic(pydoc, delay, concurrency):
    torch.set_num_threads(1)
    s = spec_for(delay=delay, steps=5)
    data = data_for(pydoc, s)
    seq = split_gpt(build_gpt(MODEL, 3), 2)
    r_seq = rc.train_rc_sequential(s, data, seq)
    par = split_gpt(build_gpt(MODEL, 3), 2)
    ps = dict(s, mode="parallel", concurrency=concurrency, worker_threads=1)
    r_par = processes.train_rc_parallel(ps, str(pydoc), data, par, timeout=60)
    # the coordinator's copy holds the workers' final parameters (the last tick is an eval tick)
    assert (params_of(par) - params_of(seq)).abs().max() < 1e-6
    for a, b in zip(r_seq.rows, r_par.rows):
        assert a["active_sections"] == b["active_sections"]
        assert a["loss"] == pytest.approx(b["loss"], abs=1e-6)
    assert r_par.processes == (3 if concurrency == "process" else 1)
    assert len(r_par.per_process) == r_par.processes
    mem = r_par.memory
    assert mem["pss_mb"] == pytest.approx(sum(p["pss_mb"] for p in r_par.per_process))
    assert mem["max_rss_mb"] == max(p["peak_rss_mb"] for p in r_par.per_process)
    # each page once: the processes' PSS adds up to less than their resident sets do
    assert 0 < mem["uss_mb"] <= mem["pss_mb"] <= sum(p["rss_mb"] for p in r_par.per_process) + 1e-6


def test_rc_differs_from_bp_and_both_learn(pydoc):
    s = spec_for(steps=12)
    data = data_for(pydoc, s)
    ev = rc.Evaluator(data, s)
    bp_split, rc_split = split_gpt(build_gpt(MODEL, 3), 2), split_gpt(build_gpt(MODEL, 3), 2)
    init = ev.val_loss(split_gpt(build_gpt(MODEL, 3), 2))
    rc.train_bp(dict(s, method="bp"), data, bp_split, evaluator=ev)
    rc.train_rc_sequential(s, data, rc_split, evaluator=ev)
    assert ev.val_loss(bp_split) < init - 0.2 and ev.val_loss(rc_split) < init - 0.2
    assert not torch.allclose(params_of(bp_split), params_of(rc_split))


def test_a_worker_failure_fails_the_run_naming_it(pydoc, monkeypatch):
    """A section that dies breaks the barrier: the run raises instead of hanging."""
    s = dict(spec_for(steps=4), mode="parallel", concurrency="thread")
    calls = {"n": 0}
    orig = rc.SectionTrainer.step

    def boom(self, h_in, y, emit, t=0):
        calls["n"] += 1
        if self.k == 1:
            raise RuntimeError("section exploded")
        return orig(self, h_in, y, emit, t)

    monkeypatch.setattr(rc.SectionTrainer, "step", boom)
    data = data_for(pydoc, s)
    with pytest.raises(RuntimeError, match="RC parallel run failed: rc-section-1: RuntimeError: section exploded"):
        processes.train_rc_parallel(s, str(pydoc), data, split_gpt(build_gpt(MODEL, 3), 2), timeout=20)


@pytest.mark.parametrize("change,key", [
    ({"method": "sgd"}, "method"),
    ({"lr": float("nan")}, "lr"),
    ({"model": dict(MODEL, n_layer="4")}, "model.n_layer"),
    ({"sections": 0}, "sections"),
    ({"delay": -1}, "delay"),
    ({"mode": None}, "mode"),
])
def test_bad_specs_name_the_key(change, key):
    bad = {**spec_for(), **change}
    if change.get("mode", 1) is None:
        del bad["mode"]
    with pytest.raises(SpecError, match=key.replace(".", r"\.")):
        validate_spec(bad, SPEC_SCHEMA, "local")


def test_cross_field_spec_checks():
    with pytest.raises(ValueError, match="sections: 3 does not divide"):
        check_spec(spec_for(sections=3))
    with pytest.raises(ValueError, match="model.d_model"):
        check_spec(spec_for(model=dict(MODEL, d_model=15)))


def test_a_worker_that_dies_during_start_up_fails_the_run_at_once(pydoc, monkeypatch):
    s = dict(spec_for(steps=4), mode="parallel", concurrency="thread")

    def broken(*a, **k):
        raise OSError("no such data")

    monkeypatch.setattr(processes, "TextData", broken)
    with pytest.raises(RuntimeError, match="rc-section-.*OSError: no such data"):  # the cause, not the start-up limit
        processes.train_rc_parallel(s, str(pydoc), None, split_gpt(build_gpt(MODEL, 3), 2), timeout=60)


def test_a_parallel_run_follows_its_pace_and_a_hung_one_is_stopped(pydoc, monkeypatch):
    """Parallel RC (section processes) under a job deadline of 5 s for 10 ticks (the sections'
    start-up counts against it) and a 1.2 s barrier floor: ticks slowed by 0.6 s each (6 s
    in all, past the job's floor) finish; a coordinator hung at its 4th tick is stopped in
    one line naming the step."""
    import time

    from distlab.runtime.deadline import JobTimeout, job_deadline

    torch.set_num_threads(1)
    s = dict(spec_for(steps=10, delay=0), mode="parallel", concurrency="process", worker_threads=1)
    data = data_for(pydoc, s)
    monkeypatch.setenv("DISTLAB_TEST_STEP_SLEEP_S", "0.6")
    t0 = time.monotonic()
    with job_deadline(5.0, "simulated local job", work=10):
        res = processes.train_rc_parallel(s, str(pydoc), data, split_gpt(build_gpt(MODEL, 3), 2), timeout=1.2)
    assert len(res.rows) == 10 and time.monotonic() - t0 > 6
    monkeypatch.delenv("DISTLAB_TEST_STEP_SLEEP_S")
    monkeypatch.setenv("DISTLAB_TEST_HANG_AT_STEP", "4")
    with pytest.raises(JobTimeout, match="simulated local job ran past .* stopped at step 3 of 10"):
        with job_deadline(5.0, "simulated local job", work=10):
            processes.train_rc_parallel(s, str(pydoc), data, split_gpt(build_gpt(MODEL, 3), 2), timeout=1.2)
