"""Reading and writing operator-graph files, without torch.

A graph file is what :mod:`distlab.placement.graphs` extracts from a model;
the jobs that only read one (the simulator, the baselines that need no
network) import this module and so start without torch.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class GraphError(ValueError):
    """A model or graph spec that cannot be built, naming the key."""


def save_graph(graph: dict[str, Any], path: str | Path) -> None:
    from distlab.results.tables import atomic_write_text

    atomic_write_text(path, json.dumps(graph, indent=1))


def load_graph(path: str | Path) -> dict[str, Any]:
    g = json.loads(Path(path).read_text())
    validate_graph(g)
    return g


def validate_graph(g: dict[str, Any]) -> None:
    """Refuse a graph whose edges do not point forward (node order must be topological)."""
    n = len(g["nodes"])
    for u, v in g["edges"]:
        if not (0 <= u < v < n):
            raise GraphError(f"edges: ({u}, {v}) is not a forward edge of a {n}-node topological order")
