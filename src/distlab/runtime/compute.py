"""How the simulated clock charges compute.

A unit of work is whatever the technique declares (one partition's mini-batch
gradient for gradient coding, one local batch for data-parallel SGD).

* ``calibrated`` — each unit costs ``unit_seconds``: deterministic, and lets a
  figure be set in the paper's regime (e.g. ResNet-18 on one CPU thread is
  seconds a step) while the real arithmetic runs on a small model.
* ``measured`` — each unit costs the wall time the process really spent on
  it, times ``scale`` (e.g. to map this CPU onto a reference device).  Not
  deterministic: a rerun gives other times.

Either way the time is *simulated*: it is the clock of the modelled cluster,
never a measurement of one.
"""

from __future__ import annotations

from dataclasses import dataclass

MODES = ("calibrated", "measured")


@dataclass(frozen=True)
class ComputeModel:
    mode: str = "calibrated"
    unit_seconds: float = 0.1
    scale: float = 1.0

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"compute.mode must be one of {MODES}, got {self.mode!r}")
        if self.unit_seconds < 0 or self.scale <= 0:
            raise ValueError("compute.unit_seconds must be >= 0 and compute.scale > 0")

    @classmethod
    def from_config(cls, cfg: dict) -> "ComputeModel":
        return cls(mode=cfg.get("mode", "calibrated"),
                   unit_seconds=float(cfg.get("unit_seconds", 0.1)),
                   scale=float(cfg.get("scale", 1.0)))

    def cost(self, units: float, measured_s: float) -> float:
        """Simulated seconds for ``units`` of work that really took ``measured_s``."""
        if self.mode == "calibrated":
            return units * self.unit_seconds
        return measured_s * self.scale

    def describe(self) -> str:
        if self.mode == "calibrated":
            return f"compute calibrated at {self.unit_seconds:g} s per unit"
        return f"compute measured on this CPU x{self.scale:g}"
