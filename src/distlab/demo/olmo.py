"""An OLMo-shaped decoder: the parameter shapes of OLMo-1B / OLMo-300M.

OLMo (Groeneveld et al., 2024) blocks: a fused QKV projection ``(3d, d)``,
an output projection ``(d, d)``, a SwiGLU MLP whose fused input projection is
``(mlp_ratio * d, d)`` and output projection ``(mlp_ratio * d / 2, ...)``
transposed, i.e. ``(d, mlp_ratio * d / 2)``; no biases; non-parametric layer
norms; token embedding tied to the output head.  Sizes used here:

* OLMo-1B: d = 2048, 16 layers, 16 heads, mlp_ratio 8, vocabulary 50304;
* OLMo-300M (the DeMo paper's smaller model): d = 1024, 16 layers, 16 heads,
  same ratio and vocabulary (the paper gives d and the layer count; the rest
  follows OLMo-1B, our choice).

Built on the ``meta`` device it allocates nothing: the bytes table reads the
real shapes from it.  It also trains (``config/paper.yaml``), with the byte
vocabulary of the project's text data.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..models import causal_attention, check_heads

SIZES = {
    "olmo-300m": dict(d_model=1024, n_layer=16, n_head=16, mlp_ratio=8, vocab_size=50304),
    "olmo-1b": dict(d_model=2048, n_layer=16, n_head=16, mlp_ratio=8, vocab_size=50304),
}


class _Block(nn.Module):
    def __init__(self, d: int, n_head: int, mlp_ratio: int) -> None:
        super().__init__()
        check_heads(d, n_head)
        self.n_head = n_head
        self.att_proj = nn.Linear(d, 3 * d, bias=False)
        self.attn_out = nn.Linear(d, d, bias=False)
        hidden = mlp_ratio * d
        self.ff_proj = nn.Linear(d, hidden, bias=False)
        self.ff_out = nn.Linear(hidden // 2, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        C = x.shape[-1]
        x = x + self.attn_out(causal_attention(self.att_proj(F.layer_norm(x, (C,))), self.n_head))
        a, g = self.ff_proj(F.layer_norm(x, (C,))).chunk(2, dim=-1)
        return x + self.ff_out(F.silu(g) * a)


class OLMo(nn.Module):
    """OLMo-shaped causal LM: ``(B, T)`` token ids -> ``(B, T, vocab)`` logits."""

    def __init__(self, vocab_size: int = 256, block_size: int = 128, d_model: int = 128,
                 n_layer: int = 2, n_head: int = 4, mlp_ratio: int = 8) -> None:
        super().__init__()
        if mlp_ratio % 2:
            raise ValueError(f"mlp_ratio must be even (SwiGLU halves it), got {mlp_ratio}")
        self.block_size = block_size
        self.wte = nn.Embedding(vocab_size, d_model)
        self.wpe = nn.Embedding(block_size, d_model)
        self.blocks = nn.ModuleList(_Block(d_model, n_head, mlp_ratio) for _ in range(n_layer))
        if self.wte.weight.device.type != "meta":
            for m in self.modules():
                if isinstance(m, (nn.Linear, nn.Embedding)):
                    nn.init.normal_(m.weight, std=0.02)
            for b in self.blocks:
                for proj in (b.attn_out, b.ff_out):
                    nn.init.normal_(proj.weight, std=0.02 / math.sqrt(2 * n_layer))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        T = idx.shape[1]
        if T > self.block_size:
            raise ValueError(f"sequence length {T} exceeds block_size {self.block_size}")
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.blocks:
            x = b(x)
        return F.layer_norm(x, (x.shape[-1],)) @ self.wte.weight.T


def olmo_on_meta(size: str, block_size: int = 2048) -> OLMo:
    """OLMo-300M or OLMo-1B with its real shapes on the meta device (no memory).

    OLMo uses rotary positions (no position table): ``wpe`` is removed so the
    parameter list is OLMo's."""
    if size not in SIZES:
        raise ValueError(f"unknown OLMo size {size!r}; known: {sorted(SIZES)}")
    with torch.device("meta"):
        m = OLMo(block_size=block_size, **SIZES[size])
    del m.wpe
    return m
