"""Straggler models: the extra delay each worker suffers at each step.

Every draw is a pure function of ``(seed, step)``: the delays of a block of
``BLOCK`` consecutive steps come from their own ``numpy`` generator seeded
with ``SeedSequence([seed, STREAM, block, n])`` (drawing a block at a time keeps
the simulator's own cost small).  So the simulation is deterministic given the seed, a resumed
run sees exactly the delays an uninterrupted one would, and every scheme run
with the same seed faces the same stragglers (paired comparisons).

Models (``straggler.model`` in config):

* ``none`` — no delay.
* ``exponential`` — i.i.d. exponential delays with mean ``mean`` seconds (the
  Pipelined Gradient Coding paper's simulation, means 1 s and 2 s).
* ``pareto`` — heavy tail: Lomax (Pareto II) with shape ``shape`` and scale
  chosen so that the mean is ``mean`` (needs shape > 1).
* ``persistent`` — the workers in ``slow_workers`` are always ``slowdown``
  times slower at computing and also suffer exponential delays of mean
  ``mean`` (0 for none); the others suffer only the exponential delays.
* ``dead`` — the workers in ``slow_workers`` never answer (infinite delay):
  the extreme straggler of the paper's discussion.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np

STREAM = 0x5749  # namespaces straggler draws away from other seeded streams
BLOCK = 256      # steps drawn at once

MODELS = ("none", "exponential", "pareto", "persistent", "dead")


@dataclass(frozen=True)
class StragglerModel:
    model: str = "none"
    mean: float = 0.0
    shape: float = 2.5
    slowdown: float = 1.0
    slow_workers: tuple[int, ...] = field(default_factory=tuple)
    seed: int = 0

    def __post_init__(self) -> None:
        if self.model not in MODELS:
            raise ValueError(f"straggler.model must be one of {MODELS}, got {self.model!r}")
        if self.mean < 0:
            raise ValueError(f"straggler.mean must be >= 0, got {self.mean}")
        if self.model == "pareto" and self.shape <= 1:
            raise ValueError(f"straggler.shape must be > 1 for a finite mean, got {self.shape}")
        if self.slowdown < 1:
            raise ValueError(f"straggler.slowdown must be >= 1, got {self.slowdown}")

    @classmethod
    def from_config(cls, cfg: dict, seed: int) -> "StragglerModel":
        return cls(
            model=cfg.get("model", "none"),
            mean=float(cfg.get("mean", 0.0)),
            shape=float(cfg.get("shape", 2.5)),
            slowdown=float(cfg.get("slowdown", 1.0)),
            slow_workers=tuple(int(w) for w in cfg.get("slow_workers", ())),
            seed=int(seed),
        )

    def delays(self, step: int, n: int) -> np.ndarray:
        """Extra delay (s) of each of ``n`` workers at ``step`` (a fresh array)."""
        block, row = divmod(int(step), BLOCK)
        return self._block(block, n)[row].copy()

    @functools.lru_cache(maxsize=2)
    def _block(self, block: int, n: int) -> np.ndarray:
        rng = np.random.default_rng(np.random.SeedSequence([self.seed, STREAM, block, n]))
        shape = (BLOCK, n)
        if self.model == "none":
            return np.zeros(shape)
        if self.model in ("exponential", "persistent"):
            return rng.exponential(self.mean, size=shape) if self.mean > 0 else np.zeros(shape)
        if self.model == "pareto":
            return self.mean * (self.shape - 1) * rng.pareto(self.shape, size=shape)
        d = np.zeros(shape)  # dead
        for w in self.slow_workers:
            if w < n:
                d[:, w] = math.inf
        return d

    def compute_factor(self, n: int) -> np.ndarray:
        """Multiplier on each worker's compute time (persistently slow workers)."""
        f = np.ones(n)
        if self.model == "persistent":
            for w in self.slow_workers:
                if w < n:
                    f[w] = self.slowdown
        return f

    def describe(self) -> str:
        if self.model == "none":
            return "no stragglers"
        if self.model == "exponential":
            return f"exponential delays, mean {self.mean:g} s"
        if self.model == "pareto":
            return f"Pareto-II delays, mean {self.mean:g} s, shape {self.shape:g}"
        if self.model == "persistent":
            return f"workers {list(self.slow_workers)} {self.slowdown:g}x slower, exp. delays mean {self.mean:g} s"
        return f"workers {list(self.slow_workers)} never answer"
