"""A BERT-base encoder in plain torch (no ``transformers``), written so that
``torch.fx`` traces it into one node per tensor operation.

Shapes are fixed at construction (batch, sequence), so the trace holds no
``size()`` calls: attention is spelled out as two batched matmuls around a
softmax, as in the original model (Devlin et al. 2019), which is what the
placement problem sees as separate operators.
"""

from __future__ import annotations

import math

import torch
from torch import nn


class SelfAttention(nn.Module):
    def __init__(self, hidden: int, heads: int, batch: int, seq: int):
        super().__init__()
        if hidden % heads:
            raise ValueError(f"bert: hidden {hidden} is not a multiple of heads {heads}")
        self.heads, self.head_dim, self.batch, self.seq = heads, hidden // heads, batch, seq
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, hidden)
        self.scale = 1.0 / math.sqrt(self.head_dim)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(self.batch, self.seq, self.heads, self.head_dim).transpose(1, 2)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        q, k, v = self._split(self.query(x)), self._split(self.key(x)), self._split(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) * self.scale + mask
        probs = torch.softmax(scores, dim=-1)
        ctx = torch.matmul(probs, v).transpose(1, 2).reshape(self.batch, self.seq, -1)
        return self.out(ctx)


class Layer(nn.Module):
    def __init__(self, hidden: int, heads: int, ffn: int, batch: int, seq: int):
        super().__init__()
        self.attn = SelfAttention(hidden, heads, batch, seq)
        self.ln1 = nn.LayerNorm(hidden, eps=1e-12)
        self.ffn_in = nn.Linear(hidden, ffn)
        self.ffn_out = nn.Linear(ffn, hidden)
        self.ln2 = nn.LayerNorm(hidden, eps=1e-12)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = self.ln1(x + self.attn(x, mask))
        h = self.ffn_out(nn.functional.gelu(self.ffn_in(x)))
        return self.ln2(x + h)


class BertEncoder(nn.Module):
    """Embeddings (word, position, token type, LayerNorm), ``layers`` encoder
    layers and the pooler; BERT-base is 12 layers, hidden 768, 12 heads, FFN 3072."""

    def __init__(self, layers: int = 12, hidden: int = 768, heads: int = 12, ffn: int = 3072,
                 vocab: int = 30522, max_positions: int = 512, batch: int = 1, seq: int = 128):
        super().__init__()
        if seq > max_positions:
            raise ValueError(f"bert: seq {seq} exceeds max_positions {max_positions}")
        self.word = nn.Embedding(vocab, hidden)
        self.position = nn.Embedding(max_positions, hidden)
        self.token_type = nn.Embedding(2, hidden)
        self.ln = nn.LayerNorm(hidden, eps=1e-12)
        self.layers = nn.ModuleList(Layer(hidden, heads, ffn, batch, seq) for _ in range(layers))
        self.pooler = nn.Linear(hidden, hidden)
        self.register_buffer("position_ids", torch.arange(seq).unsqueeze(0), persistent=False)
        self.register_buffer("token_type_ids", torch.zeros(1, seq, dtype=torch.long), persistent=False)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        x = self.word(input_ids) + self.position(self.position_ids) + self.token_type(self.token_type_ids)
        x = self.ln(x)
        mask = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0
        for layer in self.layers:
            x = layer(x, mask)
        return torch.tanh(self.pooler(x[:, 0]))
