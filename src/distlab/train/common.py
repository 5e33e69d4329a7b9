"""Pieces every training driver shares: determinism, model and data set-up,
gradient arithmetic on flat vectors, and evaluation."""

from __future__ import annotations

import os
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, vmap

from ..config.specs import SpecError
from ..data import load_split
from ..models import build_model

DTYPES = {"float32": torch.float32, "float64": torch.float64}


def seed_everything(seed: int) -> None:
    """One place for determinism switches: seeds and deterministic kernels."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    use_deterministic_kernels()
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")


def use_deterministic_kernels() -> None:
    """``torch.use_deterministic_algorithms(True, warn_only=True)`` without its
    import of ``torch._inductor`` (about 2 s a process here, paid by every
    job of the workflow).  The ATen switch is the one eager kernels read; the
    inductor flag matters only to ``torch.compile``, which distlab does not
    use, and is set too when inductor is already loaded."""
    if "torch._inductor.config" in sys.modules:
        torch.use_deterministic_algorithms(True, warn_only=True)
    else:
        torch._C._set_deterministic_algorithms(True, warn_only=True)


@dataclass
class ImageData:
    """A labelled image split held in memory.

    ``x`` is either already a float tensor (then :meth:`take` returns it as
    is) or the stored ``uint8`` pixels, kept as ``uint8`` in memory (a quarter
    of float32, an eighth of float64) and normalised per batch: :meth:`take`
    returns ``x[idx].to(dtype) / pixel_max``.
    """

    x: torch.Tensor
    y: torch.Tensor
    pixel_max: float | None = None
    dtype: torch.dtype | None = None

    def __post_init__(self) -> None:
        if self.x.dtype == torch.uint8 and (self.pixel_max is None or self.dtype is None):
            raise ValueError("uint8 images need pixel_max and dtype to be normalised per batch")

    def __len__(self) -> int:
        return len(self.y)

    def _norm(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.uint8:
            return x.to(self.dtype).div_(self.pixel_max)
        return x

    def take(self, idx: np.ndarray | torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        idx = torch.as_tensor(idx, dtype=torch.long)
        return self._norm(self.x[idx]), self.y[idx]

    def rows(self, start: int, stop: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Contiguous rows ``start:stop``, normalised."""
        return self._norm(self.x[start:stop]), self.y[start:stop]

    def to(self, device: torch.device | str) -> "ImageData":
        return ImageData(self.x.to(device), self.y.to(device), self.pixel_max, self.dtype)


def load_image_data(data_dir: str | Path, split: str, dtype: torch.dtype,
                    keep_uint8: bool = False) -> ImageData:
    """One image split; with ``keep_uint8`` the pixels stay ``uint8`` in memory
    and every batch is normalised when it is taken (same values, to rounding)."""
    if keep_uint8:
        d = load_split(data_dir, split, normalize=False)
        return ImageData(d["x"], d["y"].long(), float(d["pixel_max"]), dtype)
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
    if name in ("logreg", "mlp"):
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


def _check_flat(model: nn.Module, flat: torch.Tensor, tensors: list[tuple[str, torch.Tensor]],
                what: str) -> None:
    """A :class:`SpecError` (one line) when ``flat`` is not one vector of exactly the values of
    ``tensors`` (a state saved for another model): it names the first tensor that does not fit."""
    total = sum(t.numel() for _, t in tensors)
    shape = tuple(flat.shape) if isinstance(flat, torch.Tensor) else type(flat).__name__
    if isinstance(flat, torch.Tensor) and flat.dim() == 1 and flat.numel() == total:
        return
    i, culprit = 0, ""
    n = flat.numel() if isinstance(flat, torch.Tensor) and flat.dim() == 1 else 0
    for name, t in tensors:
        if i + t.numel() > n:
            culprit = f"; {name} of shape {tuple(t.shape)} starts at value {i} of {n}"
            break
        i += t.numel()
    raise SpecError(f"{what}: a tensor of shape {shape}, where the model's {len(tensors)} "
                    f"{'parameters' if what == 'params' else what} "
                     f"take one vector of {total} values{culprit}")


def set_flat_params(model: nn.Module, flat: torch.Tensor) -> None:
    _check_flat(model, flat, [(n, p) for n, p in model.named_parameters() if p.requires_grad], "params")
    i = 0
    with torch.no_grad():
        for p in params_of(model):
            p.copy_(flat[i:i + p.numel()].view_as(p))
            i += p.numel()


def buffers_of(model: nn.Module) -> list[torch.Tensor]:
    """The model's buffers (BatchNorm running statistics and step counters)."""
    return [b for b in model.buffers()]


def flat_buffers(model: nn.Module, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Every buffer as one vector (empty for a model without buffers); the
    integer step counters are exact in float64 up to 2**53."""
    bufs = buffers_of(model)
    if not bufs:
        return torch.zeros(0, dtype=dtype)
    return torch.cat([b.detach().reshape(-1).to(dtype) for b in bufs])


def set_flat_buffers(model: nn.Module, flat: torch.Tensor) -> None:
    _check_flat(model, flat, list(model.named_buffers()), "buffers")
    i = 0
    with torch.no_grad():
        for b in buffers_of(model):
            b.copy_(flat[i:i + b.numel()].view_as(b).to(b.dtype))
            i += b.numel()


def buffer_numel(model: nn.Module) -> int:
    return sum(b.numel() for b in buffers_of(model))


def loss_and_grad(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[float, torch.Tensor, float]:
    """Mean cross-entropy on (x, y), its gradient as one flat vector, and the seconds it took.

    The forward pass runs in training mode: a BatchNorm layer normalises with
    the batch's statistics and updates its running statistics in place.
    """
    t0 = time.perf_counter()
    params = params_of(model)
    loss = F.cross_entropy(model(x), y)
    grads = torch.autograd.grad(loss, params)
    flat = torch.cat([g.reshape(-1) for g in grads])
    return float(loss.detach()), flat, time.perf_counter() - t0


@dataclass
class PartitionGrads:
    """Per-partition results of one model on ``P`` mini-batches.

    ``buffers`` row ``j`` is the model's buffers after one training-mode
    forward pass on batch ``j`` from the model's buffers at call time (each
    BatchNorm running statistic moved once towards batch ``j``'s statistics);
    ``None`` for a model without buffers.
    """

    losses: torch.Tensor            # (P,)
    grads: torch.Tensor             # (P, numel)
    buffers: torch.Tensor | None    # (P, buffer_numel) float64
    seconds: float                  # wall time of the whole call


def partition_grads_loop(model: nn.Module, batches: list[tuple[torch.Tensor, torch.Tensor]]
                         ) -> tuple[PartitionGrads, list[float]]:
    """:class:`PartitionGrads` by one :func:`loss_and_grad` per batch (what a
    real worker does), each starting from the same buffers; also the seconds
    of each batch.  The model's buffers are left as they were."""
    t0 = time.perf_counter()
    has_buf = buffer_numel(model) > 0
    b0 = flat_buffers(model) if has_buf else None
    losses, grads, bufs, secs = [], [], [], []
    for x, y in batches:
        if has_buf:
            set_flat_buffers(model, b0)
        loss, g, sec = loss_and_grad(model, x, y)
        losses.append(loss)
        grads.append(g)
        secs.append(sec)
        if has_buf:
            bufs.append(flat_buffers(model))
    if has_buf:
        set_flat_buffers(model, b0)
    return PartitionGrads(torch.tensor(losses, dtype=torch.float64), torch.stack(grads),
                          torch.stack(bufs) if has_buf else None, time.perf_counter() - t0), secs


def partition_grads(model: nn.Module, xs: torch.Tensor, ys: torch.Tensor) -> PartitionGrads:
    """Losses, flat gradients and buffer updates of ``P`` independent mini-batches at once.

    ``xs`` is (P, b, ...) and ``ys`` (P, b); row ``j`` is what
    :func:`partition_grads_loop` gives for ``(xs[j], ys[j])`` (to float
    rounding), computed in one vectorised call (``torch.func.vmap``).  Buffers
    (BatchNorm running statistics) are handed to the call as a batched input,
    one copy per mini-batch, so each batch updates its own copy and nothing
    captured is mutated; the model's own buffers are left as they were.
    """
    t0 = time.perf_counter()
    P = len(xs)
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    # one copy of the parameters per mini-batch, as leaves: row j of each gradient is
    # mini-batch j's, since its loss reads only copy j (plain autograd through a vmapped
    # forward; torch.func's grad transform would import dynamo, ~2 s a process)
    params = {n: p.detach().unsqueeze(0).expand(P, *p.shape).clone().requires_grad_(True)
              for n, p in model.named_parameters() if p.requires_grad}
    frozen = {n: p.detach() for n, p in model.named_parameters() if not p.requires_grad}
    bnames = [n for n, _ in model.named_buffers()]
    bufs = {n: b.detach().unsqueeze(0).expand(P, *b.shape).clone() for n, b in model.named_buffers()}

    def loss_fn(p: dict, b: dict, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        # cross-entropy written out: under vmap, F.cross_entropy runs nll_loss's Python
        # decomposition every step, whose checks import sympy (~1 s a process)
        logp = functional_call(model, ({**p, **frozen}, b), (x,)).log_softmax(-1)
        return -logp.gather(-1, y.unsqueeze(-1)).mean()

    with torch.enable_grad():
        losses = vmap(loss_fn, in_dims=(0, 0, 0, 0))(params, bufs, xs, ys)
        gl = torch.autograd.grad(losses.sum(), [params[n] for n in names])
    grads = dict(zip(names, gl))
    flat = torch.cat([grads[n].reshape(P, -1) for n in names], dim=1)
    fbuf = (torch.cat([bufs[n].reshape(P, -1).to(torch.float64) for n in bnames], dim=1)
            if bnames else None)
    return PartitionGrads(losses.detach(), flat, fbuf, time.perf_counter() - t0)


def batched_loss_and_grads(model: nn.Module, xs: torch.Tensor, ys: torch.Tensor
                           ) -> tuple[torch.Tensor, torch.Tensor, float]:
    """Losses, flat gradients and seconds of ``P`` mini-batches (see :func:`partition_grads`)."""
    r = partition_grads(model, xs, ys)
    return r.losses, r.grads, r.seconds


def sgd_apply(model: nn.Module, flat_grad: torch.Tensor, lr: float) -> None:
    """Plain SGD (no momentum), as in the papers' distributed baselines."""
    i = 0
    with torch.no_grad():
        for p in params_of(model):
            p.add_(flat_grad[i:i + p.numel()].view_as(p), alpha=-lr)
            i += p.numel()


@torch.no_grad()
def evaluate(model: nn.Module, data: ImageData, batch: int = 512) -> tuple[float, float]:
    """Mean loss and accuracy over a whole split."""
    model.eval()
    total, correct, n = 0.0, 0, len(data)
    for i in range(0, n, batch):
        x, y = data.rows(i, i + batch)
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
