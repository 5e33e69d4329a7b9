"""One placement problem: a graph, a device pair, its simulator and the
co-location groups, plus the evaluation budget every method shares."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import coarsen, costs
from .sim import Simulator


PARTITIONS = ("coarsen", "coarsen_weightless", "operators")


class BudgetExhausted(RuntimeError):
    pass


@dataclass
class Problem:
    graph: dict
    sim: Simulator
    group: np.ndarray            # [n_nodes] co-location group of each operator
    cedges: list                 # coarse edges
    n_devices: int
    single_device: str = "allow"  # or "invalid": all-on-one-device scored as INVALID_LATENCY
    budget: int = 500
    history: list = field(default_factory=list)  # every evaluated latency, in order
    best: float = float("inf")
    best_placement: np.ndarray | None = None

    INVALID_LATENCY = 1e10  # the released code's score for invalid placements

    @property
    def n_groups(self) -> int:
        return int(self.group.max()) + 1

    @classmethod
    def build(cls, graph: dict, pair: dict, profiled: np.ndarray | None, budget: int,
              single_device: str = "allow", cuda: np.ndarray | None = None,
              order: str = "topological", partition: str = "coarsen") -> Problem:
        """``partition``: ``coarsen`` (the released code's co-location groups on the paper-like
        graph, where every operator with weights has a weight node as one more predecessor),
        ``coarsen_weightless`` (the same rule on the traced graph without weight nodes: the
        ablation, a handful of groups) or ``operators`` (every operator its own group: the
        operator-level graph, a space that holds any placement)."""
        compute, transfer = costs.pair_costs(graph, pair, profiled, cuda=cuda)
        pinned = np.array([n["op"] == "input" for n in graph["nodes"]])
        sim = Simulator(graph["n_nodes"], graph["edges"], compute, transfer, pinned, order=order)
        if partition == "operators":
            group = np.arange(graph["n_nodes"], dtype=np.int64)
        elif partition == "coarsen":
            group = coarsen.coarsen(graph["n_nodes"], graph["edges"], coarsen.weighted_nodes(graph))
        elif partition == "coarsen_weightless":
            group = coarsen.coarsen(graph["n_nodes"], graph["edges"])
        else:
            raise ValueError(f"partition: {partition!r} is not one of {PARTITIONS}")
        return cls(graph, sim, group, coarsen.coarse_edges(group, graph["edges"]),
                   compute.shape[1], single_device, budget)

    def reset(self) -> None:
        self.history, self.best, self.best_placement = [], float("inf"), None

    @property
    def left(self) -> int:
        return self.budget - len(self.history)

    def expand(self, group_place: np.ndarray) -> np.ndarray:
        """Operator placement(s) from group placement(s) ``[..., n_groups]``."""
        return np.asarray(group_place)[..., self.group]

    def evaluate(self, place: np.ndarray) -> np.ndarray:
        """Latencies of operator placements ``[batch, n]``; each costs one evaluation."""
        place = np.atleast_2d(place)
        if place.shape[0] > self.left:
            raise BudgetExhausted(f"{place.shape[0]} evaluations asked, {self.left} left")
        lat = self.sim.evaluate(place)
        if self.single_device == "invalid":
            # the pinned inputs sit on the host whatever the placement: judge the others
            free = ~self.sim.pinned
            one = np.array([np.unique(p[free]).size == 1 for p in place])
            lat = np.where(one, self.INVALID_LATENCY, lat)
        for p, t in zip(place, lat):
            self.history.append(float(t))
            if t < self.best:
                self.best, self.best_placement = float(t), p.copy()
        from ..runtime.deadline import progress

        progress(len(place))  # a search's deadline follows its pace in evaluations
        return lat

    def evaluate_groups(self, group_place: np.ndarray) -> np.ndarray:
        return self.evaluate(self.expand(np.atleast_2d(group_place)))

    def curve(self) -> np.ndarray:
        """Best latency after each evaluation."""
        return np.minimum.accumulate(np.asarray(self.history, dtype=float))
