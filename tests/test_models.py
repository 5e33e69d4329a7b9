"""Tests for the model registry."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from distlab.models import MODELS, TASKS, build_model, count_parameters, loss_for


@pytest.mark.parametrize(
    ("name", "kwargs", "x", "out"),
    [
        ("cnn", {"in_channels": 1, "num_classes": 10, "image_size": 8}, torch.rand(2, 1, 8, 8), (2, 10)),
        ("cnn", {"in_channels": 3, "num_classes": 100, "image_size": 32}, torch.rand(2, 3, 32, 32), (2, 100)),
        ("resnet18", {"num_classes": 10, "small_input": True}, torch.rand(2, 3, 32, 32), (2, 10)),
        ("resnet18", {"num_classes": 7, "in_channels": 1}, torch.rand(2, 1, 64, 64), (2, 7)),
        ("logreg", {"in_features": 64, "num_classes": 10}, torch.rand(2, 1, 8, 8), (2, 10)),
        ("mlp", {"in_features": 64, "num_classes": 10}, torch.rand(2, 1, 8, 8), (2, 10)),
        ("mlp", {"in_features": 3072, "num_classes": 100, "hidden": [32]}, torch.rand(2, 3, 32, 32), (2, 100)),
        ("gpt", {"block_size": 16, "n_layer": 2, "n_head": 2, "d_model": 32}, torch.randint(0, 256, (2, 16)), (2, 16, 256)),
    ],
)
def test_forward_shapes(name, kwargs, x, out):
    model = build_model(name, **kwargs).eval()
    with torch.no_grad():
        assert model(x).shape == out
    assert model.task == TASKS[name]


def test_registry_and_errors():
    assert set(MODELS) == set(TASKS) == {"cnn", "resnet18", "gpt", "logreg", "mlp"}
    with pytest.raises(ValueError, match="known models: cnn, gpt, logreg, mlp, resnet18"):
        build_model("vgg")
    with pytest.raises(ValueError, match="known models"):
        loss_for("vgg")
    with pytest.raises(ValueError, match="exceeds block_size"):
        build_model("gpt", block_size=4, n_layer=1, n_head=1, d_model=8)(torch.zeros(1, 5, dtype=torch.long))


def test_parameter_counts():
    assert 20_000 < count_parameters(build_model("cnn", in_channels=1, image_size=8)) < 60_000
    assert count_parameters(build_model("cnn", in_channels=3, image_size=32)) < 60_000
    assert count_parameters(build_model("logreg", in_features=64, num_classes=10)) == 650
    small = build_model("resnet18", num_classes=10, small_input=True)
    assert 11_000_000 < count_parameters(small) < 11_300_000
    assert small.conv1.kernel_size == (3, 3) and small.conv1.stride == (1, 1)
    assert isinstance(small.maxpool, torch.nn.Identity)
    d, layers, vocab, block = 64, 2, 256, 32
    gpt = build_model("gpt", vocab_size=vocab, block_size=block, n_layer=layers, n_head=4, d_model=d)
    per_block = 2 * 2 * d + (d * 3 * d + 3 * d) + (d * d + d) + (d * 4 * d + 4 * d) + (4 * d * d + d)
    assert count_parameters(gpt) == vocab * d + block * d + layers * per_block + 2 * d  # lm head tied
    assert gpt.lm_head.weight is gpt.wte.weight


def test_gpt_init():
    torch.manual_seed(0)
    gpt = build_model("gpt", block_size=16, n_layer=8, n_head=4, d_model=128)
    assert abs(gpt.blocks[0].attn.c_attn.weight.std().item() - 0.02) < 0.002
    assert abs(gpt.blocks[0].attn.c_proj.weight.std().item() - 0.02 / math.sqrt(16)) < 0.001
    assert gpt.blocks[0].mlp[0].bias.abs().max() == 0


def test_gpt_is_causal():
    torch.manual_seed(0)
    gpt = build_model("gpt", block_size=12, n_layer=2, n_head=2, d_model=32).eval()
    idx = torch.randint(0, 256, (2, 12))
    changed = idx.clone()
    changed[:, 8] = (changed[:, 8] + 1) % 256
    with torch.no_grad():
        a, b = gpt(idx), gpt(changed)
    assert torch.allclose(a[:, :8], b[:, :8], atol=1e-6)
    assert not torch.allclose(a[:, 8:], b[:, 8:], atol=1e-3)


def test_gpt_attention_matches_manual_softmax():
    torch.manual_seed(0)
    gpt = build_model("gpt", block_size=10, n_layer=1, n_head=4, d_model=32).eval()
    attn = gpt.blocks[0].attn
    x = torch.randn(3, 10, 32)
    B, T, C, H = 3, 10, 32, 4
    q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in attn.c_attn(x).split(C, dim=2))
    scores = q @ k.transpose(-2, -1) / math.sqrt(C // H)
    scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    manual = attn.c_proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, C))
    with torch.no_grad():
        assert torch.allclose(attn(x), manual, atol=1e-5)


@pytest.mark.parametrize("name", ["cnn", "logreg", "mlp"])
def test_sgd_step_reduces_loss(name):
    torch.manual_seed(0)
    kwargs = {"in_features": 64} if name in ("logreg", "mlp") else {"image_size": 8}
    model = build_model(name, **kwargs)
    x, y = torch.rand(32, 1, 8, 8), torch.randint(0, 10, (32,))
    loss_fn = loss_for(name)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    before = loss_fn(model(x), y)
    before.backward()
    opt.step()
    with torch.no_grad():
        assert loss_fn(model(x), y) < before


def test_lm_loss_shape_handling():
    logits, target = torch.randn(2, 5, 256), torch.randint(0, 256, (2, 5))
    expected = F.cross_entropy(logits.reshape(10, 256), target.reshape(10))
    assert torch.allclose(loss_for("gpt")(logits, target), expected)
    assert loss_for("cnn")(logits[:, 0], target[:, 0]) == F.cross_entropy(logits[:, 0], target[:, 0])


@pytest.mark.parametrize("name, kwargs", [("cnn", {"image_size": 8}), ("logreg", {"in_features": 64}),
                                          ("mlp", {"in_features": 64})])
def test_vectorised_partition_gradients_equal_one_pass_per_partition(name, kwargs):
    """What the simulated backend computes in one vmap call is what real workers compute
    one partition at a time, for every small image model of the registry."""
    from distlab.train.common import partition_grads, partition_grads_loop

    torch.manual_seed(0)
    model = build_model(name, **kwargs).double()
    xs, ys = torch.rand(3, 4, 1, 8, 8, dtype=torch.float64), torch.randint(0, 10, (3, 4))
    vec = partition_grads(model, xs, ys)
    loop, _ = partition_grads_loop(model, [(xs[k], ys[k]) for k in range(3)])
    assert torch.allclose(vec.grads, loop.grads, atol=1e-12)
    assert torch.allclose(vec.losses, loop.losses, atol=1e-12)
