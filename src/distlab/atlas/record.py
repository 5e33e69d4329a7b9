"""What an atlas run writes, read back: the per-step recording and its derived curves."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass
class Recording:
    technique: str
    kind: str
    n: int
    seed: int
    flops_per_pass: float
    straggler: dict
    network: dict
    steps: list[dict]
    n_params: int = 0
    spec: dict | None = None
    path: str | None = None      # the run's folder as its job named it (done.json)

    @classmethod
    def load(cls, run_dir: str | Path) -> "Recording":
        run_dir = Path(run_dir)
        r = json.loads((run_dir / "record.json").read_text())
        man = json.loads((run_dir / "manifest.json").read_text())
        from ..results.runs import check_sealed

        check_sealed(run_dir, man)  # the record and manifest as the run wrote them, else one line
        return cls(technique=r["technique"], kind=r["kind"], n=int(r["n"]), seed=int(r["seed"]),
                   flops_per_pass=float(r["flops_per_pass"]), straggler=r["straggler"], network=r["network"],
                   steps=r["steps"], n_params=int(man.get("n_params", 0)), spec=man.get("spec"),
                   path=str(run_dir))

    @property
    def trend(self) -> bool:
        """A trend cell's run (``atlas.trend``): for the step-efficiency fit, never ranked on the map."""
        return bool((self.spec or {}).get("trend"))

    def curve(self) -> tuple[np.ndarray, np.ndarray]:
        """(step, validation loss) at every evaluation (the model after ``step`` updates)."""
        pts = [(s["step"], s["val_loss"]) for s in self.steps if s.get("val_loss") is not None]
        return np.array([p[0] for p in pts]), np.array([p[1] for p in pts], dtype=float)

    def steps_to_target(self, target: float) -> int | None:
        """Updates until the first evaluation at or below ``target`` (None: never within the run)."""
        st, v = self.curve()
        hit = np.flatnonzero(v <= target)
        return int(st[hit[0]]) if hit.size else None

    def clock(self) -> np.ndarray:
        """The simulated clock after each step, as the run logged it."""
        return np.array([s["time"] for s in self.steps], dtype=float)

    def flops(self) -> np.ndarray:
        """FLOPs of each worker at each step (passes x FLOPs per pass), shape (steps, n)."""
        return np.array([s["passes"] for s in self.steps], dtype=float) * self.flops_per_pass

    def compute(self) -> np.ndarray:
        """Measured compute seconds of each worker at each step, shape (steps, n)."""
        return np.array([s["compute_s"] for s in self.steps], dtype=float)

    def bytes_per_step(self) -> float:
        """Mean bytes a worker sends per step (collectives by the ring rule; master messages)."""
        from ..runtime.network import all_gather_bytes, ring_all_reduce_bytes

        tot = 0.0
        for s in self.steps:
            if self.kind == "sync":
                for k, b in s["colls"]:
                    tot += ring_all_reduce_bytes(b, self.n) if k == "all_reduce" else all_gather_bytes(b, self.n)
            else:
                tot += s["msg_bytes"]
        return tot / max(1, len(self.steps))
