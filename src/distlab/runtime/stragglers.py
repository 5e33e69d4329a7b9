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
* ``dead`` — the workers in ``slow_workers`` never answer (infinite delay)
  from step ``from_step`` on (default 0): the extreme straggler of the
  paper's discussion; every worker also suffers exponential delays of mean
  ``mean`` (0, the default: none).  On the real backend such a worker sleeps until told
  to stop.
* ``crash`` — like ``dead`` in the simulator; on the real backend the worker
  process kills itself (SIGKILL) when it reaches step ``from_step``: a real
  process death, which the master must survive for up to ``s`` workers.
* ``trace`` — replays measured delays from the CSV file ``trace`` (columns
  ``step``, ``worker``, ``delay`` in seconds): worker ``w`` at step ``t``
  suffers the delay recorded for ``(t mod T, w mod W)`` (``T`` steps and
  ``W`` workers in the file), times ``scale`` (default 1).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np


class StragglerTimeout(RuntimeError):
    """The master cannot get the messages its scheme needs: in the simulator
    (:mod:`distlab.runtime.sim`) a worker never answers; over torch.distributed
    (:mod:`distlab.runtime.dist`) the master waited ``timeout_s`` and the scheme's ready
    rule never held.  One class for both backends (also importable from
    :mod:`distlab.techniques.comm`)."""


STREAM = 0x5749  # namespaces straggler draws away from other seeded streams
BLOCK = 256      # steps drawn at once

MODELS = ("none", "exponential", "pareto", "persistent", "dead", "crash", "trace")


@functools.lru_cache(maxsize=8)
def load_trace(path: str) -> np.ndarray:
    """A delay trace as a (steps, workers) array; errors name the file and the problem."""
    import pandas as pd

    try:
        df = pd.read_csv(path)
    except (OSError, ValueError) as e:
        raise ValueError(f"straggler.trace: cannot read {path}: {e}") from e
    missing = {"step", "worker", "delay"} - set(df.columns)
    if missing:
        raise ValueError(f"straggler.trace: {path} lacks columns {sorted(missing)}")
    if df.empty or not np.all(np.isfinite(df["delay"])) or (df["delay"] < 0).any():
        raise ValueError(f"straggler.trace: {path} needs finite delays >= 0")
    if df.duplicated(["step", "worker"]).any():
        raise ValueError(f"straggler.trace: {path} has duplicate (step, worker) rows")
    wide = df.pivot(index="step", columns="worker", values="delay").sort_index()
    if wide.isna().any().any():
        raise ValueError(f"straggler.trace: {path} lacks some (step, worker) pairs")
    return wide.to_numpy(dtype=float)


@dataclass(frozen=True)
class StragglerModel:
    model: str = "none"
    mean: float = 0.0
    shape: float = 2.5
    slowdown: float = 1.0
    slow_workers: tuple[int, ...] = field(default_factory=tuple)
    seed: int = 0
    from_step: int = 0
    trace: str = ""
    scale: float = 1.0

    def __post_init__(self) -> None:
        if self.model not in MODELS:
            raise ValueError(f"straggler.model must be one of {MODELS}, got {self.model!r}")
        if self.mean < 0:
            raise ValueError(f"straggler.mean must be >= 0, got {self.mean}")
        if self.model == "pareto" and self.shape <= 1:
            raise ValueError(f"straggler.shape must be > 1 for a finite mean, got {self.shape}")
        if self.slowdown < 1:
            raise ValueError(f"straggler.slowdown must be >= 1, got {self.slowdown}")
        if self.from_step < 0:
            raise ValueError(f"straggler.from_step must be >= 0, got {self.from_step}")
        if self.model == "trace":
            if not self.trace:
                raise ValueError("straggler.trace: the trace model needs a CSV file")
            if not (self.scale > 0 and math.isfinite(self.scale)):
                raise ValueError(f"straggler.scale must be > 0, got {self.scale}")
            load_trace(self.trace)

    @classmethod
    def from_config(cls, cfg: dict, seed: int) -> "StragglerModel":
        return cls(
            model=cfg.get("model", "none"),
            mean=float(cfg.get("mean", 0.0)),
            shape=float(cfg.get("shape", 2.5)),
            slowdown=float(cfg.get("slowdown", 1.0)),
            slow_workers=tuple(int(w) for w in cfg.get("slow_workers", ())),
            seed=int(seed),
            from_step=int(cfg.get("from_step", 0)),
            trace=str(cfg.get("trace", "")),
            scale=float(cfg.get("scale", 1.0)),
        )

    def crashes_at(self, worker: int) -> int | None:
        """The step at which ``worker``'s process dies (``crash`` model), else None."""
        if self.model == "crash" and worker in self.slow_workers:
            return self.from_step
        return None

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
        if self.model == "trace":
            tr = load_trace(self.trace)
            steps = (block * BLOCK + np.arange(BLOCK)) % tr.shape[0]
            return self.scale * tr[steps][:, np.arange(n) % tr.shape[1]]
        # dead, crash: the others suffer exponential delays of mean `mean` (0: none)
        d = rng.exponential(self.mean, size=shape) if self.mean > 0 else np.zeros(shape)
        first = max(0, self.from_step - block * BLOCK)
        for w in self.slow_workers:
            if w < n and first < BLOCK:
                d[first:, w] = math.inf
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
        if self.model == "trace":
            return f"delays replayed from {self.trace} (x{self.scale:g})"
        verb = "crash" if self.model == "crash" else "never answer"
        return f"workers {list(self.slow_workers)} {verb} from step {self.from_step}"
