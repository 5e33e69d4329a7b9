"""The GPT of the library cut into sections, a readout head, data and evaluation.

Every method of this package trains the same network: :class:`distlab.models.GPT`
(pre-LN blocks, SDPA causal attention) built from the run's seed, with one
change made to the *instance*, never to the class: the readout's weight is
untied from the token embedding (a copy of the same initial values).  Tied,
the readout would also be section 0's embedding, so the coordinator's
consensus update would write into one section's parameters; untied, the
readout (``ln_f`` + ``lm_head``) is a module of its own for every method, and
backprop trains exactly the same parameterisation as the local methods.

Sections: section 0 owns the embeddings (``wte``, ``wpe``) and the first
``n_layer / K`` blocks; section k owns the next ``n_layer / K`` blocks.  The
sections and the readout are views of one GPT object's modules, so a
:class:`Split` and the full model share parameters.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..data import load_split, text_batch
from ..models import GPT

EVAL_SEED = 1_000_003  # the stream of held-out windows, fixed for every run and seed


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def build_gpt(model_cfg: dict, seed: int) -> GPT:
    """The run's GPT with seeded initial weights and an untied readout."""
    torch.manual_seed(seed)
    cfg = {k: v for k, v in model_cfg.items() if k != "name"}
    gpt = GPT(vocab_size=256, block_size=int(cfg["block_size"]), n_layer=int(cfg["n_layer"]),
              n_head=int(cfg["n_head"]), d_model=int(cfg["d_model"]), dropout=0.0)
    gpt.lm_head.weight = nn.Parameter(gpt.wte.weight.detach().clone())
    return gpt


class _Part(nn.Module):
    """Some of a GPT's modules, by name: shared with the GPT, not copied."""

    def __init__(self, gpt: GPT, *names: str) -> None:
        super().__init__()
        for name in names:
            setattr(self, name, getattr(gpt, name))


class Embed(_Part):
    """Token + position embedding of a GPT (its modules, shared)."""

    def __init__(self, gpt: GPT) -> None:
        super().__init__(gpt, "wte", "wpe")

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))


class Section(nn.Module):
    """A contiguous run of blocks, with the embedding in front for section 0."""

    def __init__(self, blocks: list[nn.Module], embed: Embed | None = None) -> None:
        super().__init__()
        self.embed = embed
        self.blocks = nn.ModuleList(blocks)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.embed is not None:
            x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        return x


class Readout(_Part):
    """``lm_head(ln_f(h))``: the head every section's local objective goes through."""

    def __init__(self, gpt: GPT) -> None:
        super().__init__(gpt, "ln_f", "lm_head")

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.ln_f(h))


@dataclass
class Split:
    gpt: GPT
    sections: list[Section]
    readout: Readout

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        h = idx
        for s in self.sections:
            h = s(h)
        return self.readout(h)


def split_gpt(gpt: GPT, k: int) -> Split:
    """Cut ``gpt`` into ``k`` sections of equal depth plus the readout."""
    n = len(gpt.blocks)
    if k < 1 or n % k:
        raise ValueError(f"sections: {k} does not divide n_layer = {n}")
    per = n // k
    sections = [Section(list(gpt.blocks[i * per:(i + 1) * per]), Embed(gpt) if i == 0 else None)
                for i in range(k)]
    return Split(gpt, sections, Readout(gpt))


def lm_loss(logits: torch.Tensor, y: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction=reduction)


def make_optimizer(params, spec: dict) -> torch.optim.Optimizer:
    """The spec's optimizer: AdamW (default; lr, betas, weight decay; the fused kernel: one
    call a step for all tensors, each element's arithmetic the same however the parameters are
    grouped, so one section's RC is still BP bit for bit) or plain SGD (``optimizer: sgd``, no
    momentum, single-tensor path: an update is exactly ``-lr * grad``, which the consensus
    tests use)."""
    if spec.get("optimizer", "adamw") == "sgd":
        return torch.optim.SGD(list(params), lr=float(spec["lr"]), foreach=False)
    return torch.optim.AdamW(list(params), lr=float(spec["lr"]),
                             betas=tuple(spec.get("betas", (0.9, 0.95))),
                             weight_decay=float(spec.get("weight_decay", 0.0)), fused=True)


def lr_at(spec: dict, step: int) -> float:
    """The learning rate of update ``step`` (0-based): a linear warm-up over ``lr_warmup``
    updates (the deep GPT at a large rate needs it), then constant."""
    lr, warm = float(spec["lr"]), int(spec.get("lr_warmup", 0))
    return lr * min(1.0, (step + 1) / warm) if warm > 0 else lr


def set_lr(opts, spec: dict, step: int) -> None:
    lr = lr_at(spec, step)
    for opt in opts:
        for group in opt.param_groups:
            group["lr"] = lr


class TextData:
    """The train/val/test byte tokens of a prepared text data set and the batch streams."""

    def __init__(self, data_dir: str | Path, block_size: int, batch_size: int, seed: int,
                 splits: tuple[str, ...] = ("train", "val", "test")) -> None:
        self.split = {s: load_split(data_dir, s)["tokens"] for s in splits}
        self.block_size, self.batch_size, self.seed = block_size, batch_size, seed
        for s, tok in self.split.items():
            if len(tok) <= block_size:
                raise ValueError(f"model.block_size: {block_size} is not below the {s} split's "
                                 f"{len(tok)} tokens")

    def train_batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Batch ``step`` of the training stream: a pure function of (seed, step), so every
        method and every section sees the same batch for the same index (pairing by seed)."""
        return text_batch(self.split["train"], self.block_size, self.batch_size, self.seed, 0, step)

    def heldout_batches(self, split: str, n: int, batch_size: int):
        """``n`` fixed windows batches of ``split``, the same for every run."""
        return [text_batch(self.split[split], self.block_size, batch_size, EVAL_SEED, 1, i)
                for i in range(n)]


@torch.no_grad()
def heldout_loss(forward, batches) -> float:
    """Mean next-token cross-entropy (nats per token) of ``forward`` over ``batches``."""
    total, count = 0.0, 0
    for x, y in batches:
        total += float(lm_loss(forward(x), y, reduction="sum"))
        count += y.numel()
    return total / count


def flat(tensors) -> torch.Tensor:
    return torch.cat([t.reshape(-1) for t in tensors])


def load_flat(params, vector: torch.Tensor) -> None:
    i = 0
    with torch.no_grad():
        for p in params:
            n = p.numel()
            p.copy_(vector[i:i + n].view_as(p))
            i += n
