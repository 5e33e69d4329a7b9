"""Limits in which the local methods are backprop, and the consensus arithmetic:

* RC with one section (K = 1) is BP, bit for bit (sequential and lock-step processes);
* fixed-prediction PC with T >= L + 1 iterations at eta = 1 is BP (float64 to 1e-12 on the GPT
  chain; a training run to float32 rounding); with T = L the embedding gets no error: truncated;
* the RC + PC hybrid with zero feedback (gamma = 0 or T = 0) is RC, bit for bit; its error
  at T >= K is backprop's error at every section boundary;
* the coordinator *averages* the reports: with plain SGD on the readout one tick moves it by
  exactly -lr * mean(reports), which a sum would miss by (K - 1) * lr * |mean|.
"""

from __future__ import annotations

import copy

import pytest
import torch

from distlab.local import pc, processes, rc
from distlab.local.model import TextData, build_gpt, flat, lm_loss, split_gpt
from distlab.local.train import method_label, train_pc

MODEL = {"name": "gpt", "n_layer": 4, "n_head": 2, "d_model": 16, "block_size": 16}


@pytest.fixture(scope="module")
def pydoc(tmp_path_factory):
    from distlab.data import prepare_dataset

    out = tmp_path_factory.mktemp("local_exact") / "pydoc"
    prepare_dataset({"name": "pydoc", "kind": "text", "source": "pydoc_topics",
                     "val_fraction": 0.05, "test_fraction": 0.05}, out, seed=0)
    return out


def spec_for(method="rc", **kw):
    s = {"experiment": "local", "method": method, "seed": 3, "model": dict(MODEL), "batch_size": 4,
         "steps": 5, "lr": 3e-3, "lr_warmup": 2, "eval_every": 100, "threads": 1,
         "eval": {"batches": 1, "batch_size": 4, "final_batches": 1}}
    if method == "rc":
        s.update(mode="sequential", sections=2, delay=1)
    s.update(kw)
    return s


def data_for(pydoc, s):
    return TextData(pydoc, s["model"]["block_size"], s["batch_size"], s["seed"])


def params_of(split):
    return flat([p.detach() for p in split.gpt.parameters()])


def test_rc_with_one_section_is_bp_bit_for_bit(pydoc):
    s = spec_for(sections=1)
    data = data_for(pydoc, s)
    bp, one = split_gpt(build_gpt(MODEL, 3), 1), split_gpt(build_gpt(MODEL, 3), 1)
    r_bp = rc.train_bp(dict(s, method="bp"), data, bp)
    r_rc = rc.train_rc_sequential(s, data, one)
    assert torch.equal(params_of(bp), params_of(one))
    assert [r["loss"] for r in r_bp.rows] == [r["loss"] for r in r_rc.rows]
    # and RC with two sections is not BP (the check above can tell them apart)
    two = split_gpt(build_gpt(MODEL, 3), 2)
    rc.train_rc_sequential(dict(s, sections=2), data, two)
    assert not torch.allclose(params_of(bp), params_of(two), atol=1e-4)


def test_lock_step_processes_with_one_section_are_bp(pydoc):
    torch.set_num_threads(1)
    s = spec_for(sections=1, mode="parallel", concurrency="process", worker_threads=1, steps=3)
    data = data_for(pydoc, s)
    bp, par = split_gpt(build_gpt(MODEL, 3), 1), split_gpt(build_gpt(MODEL, 3), 1)
    rc.train_bp(dict(s, method="bp"), data, bp)
    s["eval_every"] = 1  # the coordinator copies the worker's parameters at eval ticks
    processes.train_rc_parallel(s, str(pydoc), data, par, timeout=60)
    assert torch.equal(params_of(bp), params_of(par))


def _double_chain(n_layer):
    m = {"name": "gpt", "n_layer": n_layer, "n_head": 2, "d_model": 16, "block_size": 8}
    split = split_gpt(build_gpt(m, 0), 1)
    split.gpt.double()
    torch.manual_seed(1)
    x, y = torch.randint(0, 256, (2, 8)), torch.randint(0, 256, (2, 8))
    layers, readout = pc.gpt_chain(split)
    params = pc._params(list(layers) + [readout])
    g_bp = torch.autograd.grad(lm_loss(split.forward(x), y, reduction="sum"), params)
    return split, layers, readout, params, x, y, g_bp


def test_fixed_prediction_at_l_plus_one_iterations_is_bp_on_the_gpt():
    L = 4
    split, layers, readout, params, x, y, g_bp = _double_chain(L)
    assert len(layers) == L + 1  # embedding + L blocks

    def grads(T):
        pc.pc_gradients(layers, lambda h: lm_loss(readout(h), y, reduction="sum"), readout, x,
                        "fixed", T=T, eta=1.0, beta=1.0)
        return [p.grad.clone() for p in params]

    exact = grads(L + 1)
    for g, b in zip(exact, g_bp):
        assert (g - b).abs().max() <= 1e-12 * max(1.0, float(b.abs().max()))
    assert all(torch.equal(a, b) for a, b in zip(grads(L + 5), exact))  # converged: more changes nothing
    # truncated: at T = L the error never reaches the embedding (layer 0)
    trunc = grads(L)
    emb = [i for i, p in enumerate(params) if p is split.gpt.wte.weight][0]
    assert float(trunc[emb].abs().max()) == 0.0 and float(g_bp[emb].abs().max()) > 0


def test_a_fixed_prediction_run_at_l_plus_one_trains_like_bp(pydoc):
    s = spec_for(method="pc", variant="fixed", pc={"T": MODEL["n_layer"] + 1, "eta": 1.0, "beta": 1.0},
                 optimizer="sgd", lr=0.5, steps=4)
    data = data_for(pydoc, s)
    bp, pcs = split_gpt(build_gpt(MODEL, 3), 1), split_gpt(build_gpt(MODEL, 3), 1)
    rc.train_bp(dict(s, method="bp"), data, bp)
    train_pc(s, data, pcs)
    assert (params_of(bp) - params_of(pcs)).abs().max() < 1e-5
    assert method_label(s) == "pc-fixed"
    assert method_label(dict(s, pc=dict(s["pc"], T=MODEL["n_layer"]))) == "pc-fixed-trunc"


@pytest.mark.parametrize("fb", [{"T": 3, "eta": 1.0, "gamma": 0.0}, {"T": 0, "eta": 1.0, "gamma": 1.0}])
def test_the_hybrid_without_feedback_is_rc(pydoc, fb):
    m = dict(MODEL, n_layer=6)
    s = spec_for(model=m, sections=3, delay=0)
    data = data_for(pydoc, s)
    a, b = split_gpt(build_gpt(m, 3), 3), split_gpt(build_gpt(m, 3), 3)
    r_rc = rc.train_rc_sequential(s, data, a)
    r_h = rc.train_rc_sequential(dict(s, feedback=fb), data, b)
    assert torch.equal(params_of(a), params_of(b))
    assert [r["loss"] for r in r_rc.rows] == [r["loss"] for r in r_h.rows]
    # with feedback it is not RC
    c = split_gpt(build_gpt(m, 3), 3)
    rc.train_rc_sequential(dict(s, feedback={"T": 3, "eta": 1.0, "gamma": 1.0}), data, c)
    assert not torch.allclose(params_of(a), params_of(c), atol=1e-5)


def test_the_hybrid_error_at_t_ge_k_is_backprops_error():
    torch.manual_seed(0)
    m = dict(MODEL, n_layer=6)
    split = split_gpt(build_gpt(m, 3), 3)
    split.gpt.double()
    x, y = torch.randint(0, 256, (2, 16)), torch.randint(0, 256, (2, 16))
    ins, outs = [x], []
    for k, sec in enumerate(split.sections):
        outs.append(sec(ins[-1]))
        if k < 2:
            ins.append(outs[-1].detach().requires_grad_(True))
    top = outs[-1].detach().requires_grad_(True)
    top_grad = torch.autograd.grad(lm_loss(split.readout(top), y), top)[0]
    # backprop's dL/dh at every boundary, through the whole network
    hs, h = [], x
    for sec in split.sections:
        h = sec(h)
        h.retain_grad()
        hs.append(h)
    lm_loss(split.readout(h), y).backward()
    eps = rc.feedback_errors(outs, ins, top_grad, T=3, eta=1.0)
    for e, hk in zip(eps, hs):
        assert torch.allclose(e, -hk.grad, rtol=0, atol=1e-12)
    short = rc.feedback_errors(outs, ins, top_grad, T=1, eta=1.0)
    assert float(short[0].abs().max()) == 0.0  # one iteration reaches only the top boundary
    # skipping the products of the errors that are still zero gives the same bits
    for T in (1, 2, 3, 5):
        for eta in (1.0, 0.5):
            full = rc.feedback_errors(outs, ins, top_grad, T=T, eta=eta, skip_zero=False)
            fast = rc.feedback_errors(outs, ins, top_grad, T=T, eta=eta, skip_zero=True)
            assert all(torch.equal(a, b) for a, b in zip(full, fast)), (T, eta)
            assert any(float(e.abs().max()) > 0 for e in full)


def _sgd_tick(pydoc, mode, K=3):
    m = dict(MODEL, n_layer=6)
    s = spec_for(model=m, sections=K, delay=0, steps=1, optimizer="sgd", lr=0.5, lr_warmup=0,
                 mode=mode, concurrency="process", worker_threads=1)
    data = data_for(pydoc, s)
    split = split_gpt(build_gpt(m, 3), K)
    ref = copy.deepcopy(split)
    x, y = data.train_batch(0)
    read = list(ref.readout.parameters())
    reports, h = [], x
    for sec in ref.sections:  # each section's readout gradient of its own loss, by hand
        h = sec(h.detach() if h is not x else h)
        reports.append(flat(torch.autograd.grad(lm_loss(ref.readout(h), y), read)))
    r0 = flat([p.detach() for p in read])
    mean_step = r0 - s["lr"] * torch.stack(reports).mean(0)
    sum_step = r0 - s["lr"] * torch.stack(reports).sum(0)
    if mode == "sequential":
        rc.train_rc_sequential(s, data, split)
    else:
        torch.set_num_threads(1)
        processes.train_rc_parallel(s, str(pydoc), data, split, timeout=60)
    got = flat([p.detach() for p in split.readout.parameters()])
    return got, mean_step, sum_step


@pytest.mark.parametrize("mode", ["sequential", "parallel"])
def test_the_coordinator_averages_the_reports_under_plain_sgd(pydoc, mode):
    got, mean_step, sum_step = _sgd_tick(pydoc, mode)
    gap = float((mean_step - sum_step).abs().max())
    assert gap > 1e-2  # a coordinator that summed would be this far off: the test can tell
    assert float((got - mean_step).abs().max()) < 1e-6 < gap


def test_the_cosine_to_backprop_is_one_for_one_section_and_below_for_several(pydoc):
    s = spec_for(sections=1, eval_every=2, steps=3)
    data = data_for(pydoc, s)
    ev = rc.Evaluator(data, s)
    res = rc.train_rc_sequential(s, data, split_gpt(build_gpt(MODEL, 3), 1), evaluator=ev)
    cos = [r["cos0"] for r in res.rows if "cos0" in r]
    assert len(cos) == 2 and all(c == pytest.approx(1.0, abs=1e-5) for c in cos)
    s2 = spec_for(sections=2, delay=0, eval_every=2, steps=3)
    res = rc.train_rc_sequential(s2, data, split_gpt(build_gpt(MODEL, 3), 2), evaluator=ev)
    row = res.rows[-1]
    assert row["cos1"] == pytest.approx(1.0, abs=1e-5)  # the top section's local loss is the loss
    assert row["cos0"] < 0.999  # the lower section's is not
    assert {"probe0", "probe1"} <= set(row)


def test_separate_heads_train_each_head_by_its_own_section_only(pydoc):
    """The ablation: with a head per section, the last section's head (the model's readout)
    moves by its own report alone, so it differs from the consensus head; with one section
    the two are the same run."""
    s = spec_for(sections=2, delay=0, optimizer="sgd", lr=0.5, lr_warmup=0, steps=1)
    data = data_for(pydoc, s)
    shared, sep = split_gpt(build_gpt(MODEL, 3), 2), split_gpt(build_gpt(MODEL, 3), 2)
    ref = copy.deepcopy(shared)
    rc.train_rc_sequential(s, data, shared)
    rc.train_rc_sequential(dict(s, heads="separate"), data, sep)
    x, y = data.train_batch(0)
    read = list(ref.readout.parameters())
    h = ref.sections[1](ref.sections[0](x).detach())
    top = flat(torch.autograd.grad(lm_loss(ref.readout(h), y), read))
    want = flat([p.detach() for p in read]) - 0.5 * top
    got = flat([p.detach() for p in sep.readout.parameters()])
    assert float((got - want).abs().max()) < 1e-6
    assert float((got - flat([p.detach() for p in shared.readout.parameters()])).abs().max()) > 1e-3
    assert method_label(dict(s, heads="separate")) == "rc-heads"
