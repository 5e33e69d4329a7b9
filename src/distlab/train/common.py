"""Pieces every training driver shares: determinism, model and data set-up,
gradient arithmetic on flat vectors, and evaluation."""

from __future__ import annotations

import os
import random
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad_and_value, vmap

from ..data import load_split
from ..models import build_model

DTYPES = {"float32": torch.float32, "float64": torch.float64}


def seed_everything(seed: int) -> None:
    """One place for determinism switches: seeds and deterministic kernels."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True, warn_only=True)
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")


@dataclass
class ImageData:
    """A labelled image split held in memory as tensors."""

    x: torch.Tensor
    y: torch.Tensor

    def __len__(self) -> int:
        return len(self.y)

    def take(self, idx: np.ndarray | torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        idx = torch.as_tensor(idx, dtype=torch.long)
        return self.x[idx], self.y[idx]


def load_image_data(data_dir: str | Path, split: str, dtype: torch.dtype) -> ImageData:
    d = load_split(data_dir, split)
    return ImageData(d["x"].to(dtype), d["y"].long())


def make_classifier(model_cfg: dict, data: ImageData, dtype: torch.dtype, seed: int) -> nn.Module:
    """Builds the configured model for the data's shape with seeded initial weights.

    The same seed gives the same initial weights for every scheme (paired runs).
    """
    torch.manual_seed(seed)
    cfg = dict(model_cfg)
    name = cfg.pop("name")
    _, c, h, _ = data.x.shape
    num_classes = int(data.y.max()) + 1
    if name == "logreg":
        cfg.setdefault("in_features", c * h * h)
    else:
        cfg.setdefault("in_channels", c)
    if name == "cnn":
        cfg.setdefault("image_size", h)
    cfg.setdefault("num_classes", num_classes)
    return build_model(name, **cfg).to(dtype)


def params_of(model: nn.Module) -> list[nn.Parameter]:
    return [p for p in model.parameters() if p.requires_grad]


def flat_params(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in params_of(model)])


def set_flat_params(model: nn.Module, flat: torch.Tensor) -> None:
    i = 0
    with torch.no_grad():
        for p in params_of(model):
            p.copy_(flat[i:i + p.numel()].view_as(p))
            i += p.numel()


def loss_and_grad(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[float, torch.Tensor, float]:
    """Mean cross-entropy on (x, y), its gradient as one flat vector, and the seconds it took."""
    t0 = time.perf_counter()
    params = params_of(model)
    loss = F.cross_entropy(model(x), y)
    grads = torch.autograd.grad(loss, params)
    flat = torch.cat([g.reshape(-1) for g in grads])
    return float(loss.detach()), flat, time.perf_counter() - t0


def batched_loss_and_grads(model: nn.Module, xs: torch.Tensor, ys: torch.Tensor
                           ) -> tuple[torch.Tensor, torch.Tensor, float]:
    """Losses and flat gradients of ``P`` independent mini-batches at once.

    ``xs`` is (P, b, ...) and ``ys`` (P, b); row ``j`` of the result is what
    :func:`loss_and_grad` gives for ``(xs[j], ys[j])`` (to float rounding), but
    computed in one vectorised call (``torch.func.vmap``).  The simulated
    cluster uses it to evaluate every partition a step needs; it charges each
    worker for its own partitions, so the saving changes no simulated time.
    """
    t0 = time.perf_counter()
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    params = {n: p.detach() for n, p in model.named_parameters() if p.requires_grad}

    def loss_fn(p: dict, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(functional_call(model, p, (x,)), y)

    grads, losses = vmap(grad_and_value(loss_fn), in_dims=(None, 0, 0))(params, xs, ys)
    flat = torch.cat([grads[n].reshape(len(xs), -1) for n in names], dim=1)
    return losses.detach(), flat, time.perf_counter() - t0


def sgd_apply(model: nn.Module, flat_grad: torch.Tensor, lr: float) -> None:
    """Plain SGD (no momentum), as in the papers' distributed baselines."""
    i = 0
    with torch.no_grad():
        for p in params_of(model):
            p.add_(flat_grad[i:i + p.numel()].view_as(p), alpha=-lr)
            i += p.numel()


@torch.no_grad()
def evaluate(model: nn.Module, data: ImageData, batch: int = 4096) -> tuple[float, float]:
    """Mean loss and accuracy over a whole split."""
    model.eval()
    total, correct, n = 0.0, 0, len(data)
    for i in range(0, n, batch):
        x, y = data.x[i:i + batch], data.y[i:i + batch]
        logits = model(x)
        total += float(F.cross_entropy(logits, y, reduction="sum"))
        correct += int((logits.argmax(1) == y).sum())
    model.train()
    return total / n, correct / n


def eval_columns(model: nn.Module, train: ImageData, val: ImageData, step: int, steps: int,
                 every: int) -> dict:
    """Whole-split losses (and validation accuracy) every ``every`` steps and at the
    last step; NaN otherwise, so the per-step table stays tidy."""
    if step % every and step != steps - 1:
        return {"train_loss_full": np.nan, "val_loss": np.nan, "val_acc": np.nan}
    return final_metrics(model, train, val)


def final_metrics(model: nn.Module, train: ImageData, val: ImageData) -> dict:
    tl, _ = evaluate(model, train)
    vl, va = evaluate(model, val)
    return {"train_loss_full": tl, "val_loss": vl, "val_acc": va}


def nbytes_of(numel: int, dtype: torch.dtype) -> int:
    return numel * torch.tensor([], dtype=dtype).element_size()
