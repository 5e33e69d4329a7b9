"""Non-identifiability: same output, same loss, same readout reports, different upstream credit."""

from __future__ import annotations

import pytest
import torch

from distlab.local import nonident
from distlab.local.model import build_gpt, split_gpt

MODEL = {"name": "gpt", "n_layer": 4, "n_head": 2, "d_model": 16, "block_size": 8}


def test_toy_square_same_output_and_readout_gradient_opposite_upstream():
    plus, minus = nonident.toy((1.0, -1.0))
    assert plus["output"] == minus["output"] == 1.0
    assert plus["loss"] == minus["loss"]
    assert plus["readout_grad"] == minus["readout_grad"]
    assert plus["upstream_grad"] == -minus["upstream_grad"] != 0.0


def _trained(steps=20, seed=0):
    """A briefly trained model (the construction must hold away from initialisation too)."""
    torch.manual_seed(seed)
    split = split_gpt(build_gpt(MODEL, seed), 2)
    opt = torch.optim.AdamW(split.gpt.parameters(), lr=1e-2)
    x = torch.randint(0, 256, (4, 8))
    y = torch.roll(x, -1, 1)
    for _ in range(steps):
        loss = torch.nn.functional.cross_entropy(split.forward(x).reshape(-1, 256), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return split, x, y


@pytest.mark.parametrize("s", [0.5, 2.0, 4.0])
def test_rescaled_model_is_the_same_function_with_the_same_reports(s):
    split, x, y = _trained()
    rows = nonident.in_model(split, x, y, [s])
    assert len(rows) == 2
    for r in rows:
        # same function and loss, same readout reports from every section, up to LayerNorm's
        # epsilon (1e-5 against a residual variance of ~1e-2 here: ~1e-3 relative)
        assert r["logit_max_abs_diff"] < 1e-2
        assert r["loss_abs_diff"] < 1e-3
        assert r["report_rel_diff"] < 1e-2
        # but the correction the section's output needs is scaled by 1/s ...
        assert r["state_grad_ratio"] == pytest.approx(1 / s, rel=1e-2)
        assert r["state_grad_rel_diff"] == pytest.approx(abs(1 / s - 1), rel=1e-2)
        # ... and the section's own weights need a different update
        assert r["section_grad_rel_diff"] > 0.1


def test_rescaling_needs_a_positive_scale():
    split, _, _ = _trained(steps=0)
    with pytest.raises(ValueError, match="scale s must be > 0"):
        nonident.rescaled(split, -1.0)


def test_rescaled_copy_leaves_the_original_alone():
    split, x, _ = _trained(steps=0)
    before = [p.detach().clone() for p in split.gpt.parameters()]
    nonident.rescaled(split, 3.0)
    assert all(torch.equal(a, b) for a, b in zip(before, split.gpt.parameters()))
