"""Deterministic partitioning and mini-batch streams without hidden state.

Every batch is a pure function of ``(seed, stream_id, step)``: two workers
holding the same partition and stream id draw the same mini-batch at the same
step, and a run resumed at step ``s`` draws exactly the batches it would have
drawn.  Seeds and stream ids must be non-negative integers.
"""

from __future__ import annotations

import numpy as np
import torch


def partition_indices(n_items: int, n_parts: int, seed: int) -> list[np.ndarray]:
    """Split ``range(n_items)`` into ``n_parts`` equal, disjoint partitions after a seeded shuffle.

    The remainder ``n_items % n_parts`` (the last items of the shuffle) is
    dropped so that all partitions have exactly ``n_items // n_parts`` indices.
    """
    if n_parts < 1 or n_items < n_parts:
        raise ValueError(f"cannot split {n_items} items into {n_parts} non-empty partitions")
    size = n_items // n_parts
    perm = np.random.default_rng(seed).permutation(n_items)
    return [perm[i * size : (i + 1) * size] for i in range(n_parts)]


class EpochBatcher:
    """Mini-batches drawn without replacement from ``indices``, reshuffled each epoch.

    Epoch ``e`` is a permutation of ``indices`` seeded by ``(seed, stream_id, e)``
    cut into ``len(indices) // batch_size`` full batches; the last
    ``len(indices) % batch_size`` items of that permutation are skipped in that
    epoch (different ones each epoch).
    """

    def __init__(self, indices: np.ndarray, batch_size: int, seed: int, stream_id: int = 0) -> None:
        self.indices = np.asarray(indices)
        if not 1 <= batch_size <= len(self.indices):
            raise ValueError(f"batch_size {batch_size} must be in [1, {len(self.indices)}]")
        self.batch_size = batch_size
        self.seed = seed
        self.stream_id = stream_id
        self.steps_per_epoch = len(self.indices) // batch_size
        self._cached: tuple[int, np.ndarray] | None = None  # memo of the last epoch's order

    def epoch(self, step: int) -> int:
        """The epoch that ``step`` belongs to."""
        return step // self.steps_per_epoch

    def order(self, epoch: int) -> np.ndarray:
        """The shuffled ``indices`` of ``epoch``."""
        if self._cached is None or self._cached[0] != epoch:
            rng = np.random.default_rng([self.seed, self.stream_id, epoch])
            self._cached = (epoch, self.indices[rng.permutation(len(self.indices))])
        return self._cached[1]

    def batch(self, step: int) -> np.ndarray:
        """The indices of mini-batch ``step`` (a pure function of seed, stream_id, step)."""
        if step < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        start = (step % self.steps_per_epoch) * self.batch_size
        return self.order(self.epoch(step))[start : start + self.batch_size]


def text_batch(
    tokens: torch.Tensor, block_size: int, batch_size: int, seed: int, stream_id: int, step: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """``batch_size`` random contiguous windows of ``tokens``: inputs and next-token targets.

    Returns ``(x, y)``, both int64 ``(batch_size, block_size)`` with
    ``y[:, t] == x[:, t + 1]``; start positions are drawn uniformly with a
    generator seeded by ``(seed, stream_id, step)``.
    """
    n_starts = len(tokens) - block_size
    if n_starts < 1:
        raise ValueError(f"need more than block_size={block_size} tokens, got {len(tokens)}")
    starts = np.random.default_rng([seed, stream_id, step]).integers(0, n_starts, size=batch_size)
    window = torch.from_numpy(starts)[:, None] + torch.arange(block_size + 1)
    chunk = tokens[window].long()
    return chunk[:, :-1].contiguous(), chunk[:, 1:].contiguous()
