"""Model registry: ``build_model(name, **kwargs)`` plus what each model's task is.

========  ==============  ===================================================
name      task            keyword arguments (defaults)
========  ==============  ===================================================
cnn       classification  in_channels=1, num_classes=10, image_size=8
resnet18  classification  num_classes=10, in_channels=3, small_input=False
gpt       lm              vocab_size=256, block_size=128, n_layer=4, n_head=4,
                          d_model=128, dropout=0.0
logreg    classification  in_features=64, num_classes=10
mlp       classification  in_features=64, num_classes=10, hidden=(128, 64)
========  ==============  ===================================================

Classification models map ``(B, ...)`` inputs to ``(B, num_classes)`` logits;
the language model maps token ids ``(B, T)`` to ``(B, T, vocab_size)`` logits.
:func:`loss_for` gives the matching cross-entropy.  No weights are ever
downloaded.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

Loss = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


# --------------------------------------------------------------------------- vision


def cnn(in_channels: int = 1, num_classes: int = 10, image_size: int = 8) -> nn.Module:
    """Two 3x3 conv layers (16, 32 channels) with ReLU and pooling, then an MLP head.

    Pooling brings any ``image_size >= 2`` down to at most 4x4, so the head and
    the parameter count (~38k) do not depend on the image size.
    """
    pooled = min(4, image_size // 2)
    if pooled < 1:
        raise ValueError(f"image_size must be >= 2, got {image_size}")
    return nn.Sequential(
        nn.Conv2d(in_channels, 16, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(pooled),
        nn.Flatten(),
        nn.Linear(32 * pooled * pooled, 64),
        nn.ReLU(),
        nn.Linear(64, num_classes),
    )


def resnet18(num_classes: int = 10, in_channels: int = 3, small_input: bool = False) -> nn.Module:
    """torchvision's ResNet-18, randomly initialised (``weights=None``).

    ``small_input`` (for 32x32 images) makes the stem a 3x3 stride-1 conv and
    drops the max-pool, as is usual for CIFAR.
    """
    from torchvision.models import resnet18 as tv_resnet18

    model = tv_resnet18(weights=None, num_classes=num_classes)
    if small_input or in_channels != 3:
        kernel, stride, padding = (3, 1, 1) if small_input else (7, 2, 3)
        model.conv1 = nn.Conv2d(in_channels, 64, kernel, stride, padding, bias=False)
        nn.init.kaiming_normal_(model.conv1.weight, mode="fan_out", nonlinearity="relu")
    if small_input:
        model.maxpool = nn.Identity()
    return model


def logreg(in_features: int = 64, num_classes: int = 10) -> nn.Module:
    """Multinomial logistic regression: flatten, then one linear layer."""
    return nn.Sequential(nn.Flatten(), nn.Linear(in_features, num_classes))


def mlp(in_features: int = 64, num_classes: int = 10, hidden: tuple[int, ...] | list[int] = (128, 64)
        ) -> nn.Module:
    """A multilayer perceptron with ReLU: flatten, then ``hidden`` layers, then the logits.

    Non-convex like the CNN, but its per-partition gradients cost a fraction of
    the CNN's (no convolutions): the simulated-cluster experiments, whose
    clock does not depend on the model, train it where many runs are needed."""
    layers: list[nn.Module] = [nn.Flatten()]
    width = int(in_features)
    for h in hidden:
        layers += [nn.Linear(width, int(h)), nn.ReLU()]
        width = int(h)
    layers.append(nn.Linear(width, num_classes))
    return nn.Sequential(*layers)


# --------------------------------------------------------------------------- GPT


def check_heads(d_model: int, n_head: int) -> None:
    """A model width that splits evenly among the attention heads."""
    if d_model % n_head:
        raise ValueError(f"d_model={d_model} is not divisible by n_head={n_head}")


def causal_attention(qkv: torch.Tensor, n_head: int, dropout_p: float = 0.0) -> torch.Tensor:
    """Multi-head causal attention (``F.scaled_dot_product_attention``) of the queries, keys
    and values packed in ``qkv`` ``(B, T, 3C)``: the heads' outputs side by side, ``(B, T, C)``."""
    B, T, C = qkv.shape[0], qkv.shape[1], qkv.shape[2] // 3
    q, k, v = (t.view(B, T, n_head, C // n_head).transpose(1, 2) for t in qkv.split(C, dim=2))
    y = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True)
    return y.transpose(1, 2).reshape(B, T, C)


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention through ``F.scaled_dot_product_attention``."""

    def __init__(self, d_model: int, n_head: int, dropout: float) -> None:
        super().__init__()
        check_heads(d_model, n_head)
        self.n_head = n_head
        self.dropout = dropout
        self.c_attn = nn.Linear(d_model, 3 * d_model)
        self.c_proj = nn.Linear(d_model, d_model)
        self.resid_dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = self.dropout if self.training else 0.0
        return self.resid_dropout(self.c_proj(causal_attention(self.c_attn(x), self.n_head, p)))


class Block(nn.Module):
    """Pre-LN transformer block: ``x + attn(ln(x))``, then ``x + mlp(ln(x))``."""

    def __init__(self, d_model: int, n_head: int, dropout: float) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_head, dropout)
        self.ln_2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model), nn.Dropout(dropout)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """GPT-style decoder with learned positions and an lm head tied to the token embedding.

    Weights are N(0, 0.02) (biases zero); the projections that write into the
    residual stream are scaled by ``1 / sqrt(2 * n_layer)`` as in GPT-2.
    """

    def __init__(
        self,
        vocab_size: int = 256,
        block_size: int = 128,
        n_layer: int = 4,
        n_head: int = 4,
        d_model: int = 128,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.block_size = block_size
        self.wte = nn.Embedding(vocab_size, d_model)
        self.wpe = nn.Embedding(block_size, d_model)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(Block(d_model, n_head, dropout) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
        for block in self.blocks:
            for proj in (block.attn.c_proj, block.mlp[2]):
                nn.init.normal_(proj.weight, std=0.02 / math.sqrt(2 * n_layer))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """Token ids ``(B, T)`` with ``T <= block_size`` -> logits ``(B, T, vocab_size)``."""
        T = idx.shape[1]
        if T > self.block_size:
            raise ValueError(f"sequence length {T} exceeds block_size {self.block_size}")
        x = self.drop(self.wte(idx) + self.wpe(torch.arange(T, device=idx.device)))
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def gpt_batchable(model: nn.Module) -> bool:
    """Whether :func:`gpt_stacked_logits` computes ``model``'s forward: a :class:`GPT` with its head
    tied to the token embedding and dropout 0 (the stacked forward draws none)."""
    if not isinstance(model, GPT) or model.lm_head.weight is not model.wte.weight:
        return False
    return all(m.p == 0.0 for m in model.modules() if isinstance(m, nn.Dropout)) and \
        all(b.attn.dropout == 0.0 for b in model.blocks)


def _stacked_linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    """``x (N, M, in)`` through N linear layers ``w (N, out, in)``, ``b (N, out)``."""
    wt = w.transpose(1, 2)
    return torch.bmm(x, wt) if b is None else torch.baddbmm(b.unsqueeze(1), x, wt)


def _stacked_ln(x: torch.Tensor, ln: nn.LayerNorm, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """N layer norms (``w``, ``b`` ``(N, C)``) of ``x (N, M, C)``."""
    return torch.addcmul(b.unsqueeze(1), F.layer_norm(x, ln.normalized_shape, eps=ln.eps), w.unsqueeze(1))


def gpt_stacked_logits(model: GPT, params: dict[str, torch.Tensor], idx: torch.Tensor) -> torch.Tensor:
    """N copies of ``model``'s forward at once: ``params`` maps each of its parameter names
    (``named_parameters``, the tied head as ``wte.weight``) to the N copies stacked ``(N, ...)``;
    token ids ``idx (N, B, T)`` -> logits ``(N, B * T, vocab)``.  Copy ``n`` computes
    ``model(idx[n])`` with weights ``params[...][n]`` (the same arithmetic, its matmuls batched over
    the copies, attention over the N * B windows); :func:`gpt_batchable` says when it applies."""
    N, B, T = idx.shape
    if T > model.block_size:
        raise ValueError(f"sequence length {T} exceeds block_size {model.block_size}")
    wte = params["wte.weight"]
    V, C = wte.shape[1], wte.shape[2]
    offset = (torch.arange(N, device=idx.device) * V).view(N, 1, 1)
    x = F.embedding(idx + offset, wte.reshape(N * V, C)).view(N, B, T, C) + params["wpe.weight"][:, :T].unsqueeze(1)
    x = x.reshape(N, B * T, C)
    for i, blk in enumerate(model.blocks):
        def p(name, i=i):
            return params[f"blocks.{i}.{name}"]
        h = _stacked_ln(x, blk.ln_1, p("ln_1.weight"), p("ln_1.bias"))
        qkv = _stacked_linear(h, p("attn.c_attn.weight"), p("attn.c_attn.bias")).reshape(N * B, T, 3 * C)
        a = causal_attention(qkv, blk.attn.n_head).reshape(N, B * T, C)
        x = x + _stacked_linear(a, p("attn.c_proj.weight"), p("attn.c_proj.bias"))
        h = _stacked_ln(x, blk.ln_2, p("ln_2.weight"), p("ln_2.bias"))
        h = F.gelu(_stacked_linear(h, p("mlp.0.weight"), p("mlp.0.bias")), approximate=blk.mlp[1].approximate)
        x = x + _stacked_linear(h, p("mlp.2.weight"), p("mlp.2.bias"))
    return torch.bmm(_stacked_ln(x, model.ln_f, params["ln_f.weight"], params["ln_f.bias"]), wte.transpose(1, 2))


# --------------------------------------------------------------------------- registry

MODELS: dict[str, Callable[..., nn.Module]] = {"cnn": cnn, "resnet18": resnet18, "gpt": GPT, "logreg": logreg,
                                               "mlp": mlp}
TASKS: dict[str, str] = {
    "cnn": "classification",
    "resnet18": "classification",
    "gpt": "lm",
    "logreg": "classification",
    "mlp": "classification",
}


def build_model(name: str, **kwargs: object) -> nn.Module:
    """Build model ``name`` from the registry with ``kwargs``; ``model.task`` names its task."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; known models: {', '.join(sorted(MODELS))}")
    model = MODELS[name](**kwargs)
    model.task = TASKS[name]
    return model


def classification_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of ``(B, K)`` logits against ``(B,)`` class ids."""
    return F.cross_entropy(logits, target)


def lm_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Next-token cross-entropy of ``(B, T, V)`` logits against ``(B, T)`` ids, over B*T."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))


def loss_for(name: str) -> Loss:
    """The training loss of model ``name`` (by its task)."""
    if name not in TASKS:
        raise ValueError(f"unknown model {name!r}; known models: {', '.join(sorted(MODELS))}")
    return classification_loss if TASKS[name] == "classification" else lm_loss


def batch_losses(model: nn.Module, batches: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
    """``lm_loss(model(x), y)`` of every batch ``(x, y)`` (all of one shape), in one forward of
    their windows together: a ``(len(batches),)`` tensor."""
    x, y = torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches])
    logits = model(x)
    tok = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="none")
    return tok.view(len(batches), -1).mean(1)


def count_parameters(model: nn.Module, trainable_only: bool = False) -> int:
    """Number of distinct parameters (tied weights counted once)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)
