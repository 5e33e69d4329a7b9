"""Graph coarsening of HSDAG's released code (``merge_operations``), reimplemented.

The rule, walking the nodes in topological order:

* a node with exactly one predecessor joins that predecessor's group;
* a node also takes in its only successor when it is that successor's only
  predecessor (already implied by the first rule, kept for fidelity);
* any other node (no predecessor, or several) starts a new group.

So each group is a tree hanging from a node whose in-degree is not 1 (an
input, a concatenation, a residual addition, ...).  Groups are numbered in the
topological order of their roots, and the coarse graph has an edge between two
groups when an edge of the operator graph joins them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def coarsen(n: int, edges: Sequence[Sequence[int]]) -> np.ndarray:
    """Group index of every node of a DAG whose node order is topological."""
    preds: list[list[int]] = [[] for _ in range(n)]
    succs: list[list[int]] = [[] for _ in range(n)]
    for u, v in edges:
        if not (0 <= u < n and 0 <= v < n) or u >= v:
            raise ValueError(f"edge ({u}, {v}) is not a forward edge of a {n}-node topological order")
        preds[v].append(u)
        succs[u].append(v)
    group = np.full(n, -1, dtype=np.int64)
    n_groups = 0
    for v in range(n):
        if group[v] < 0:
            if len(set(preds[v])) == 1:
                group[v] = group[preds[v][0]]
            else:
                group[v] = n_groups
                n_groups += 1
        uniq = set(succs[v])
        if len(uniq) == 1:
            (w,) = uniq
            if set(preds[w]) == {v}:
                group[w] = group[v]
    return group


def coarse_edges(group: np.ndarray, edges: Sequence[Sequence[int]]) -> list[tuple[int, int]]:
    """Edges between distinct groups (deduplicated, sorted)."""
    return sorted({(int(group[u]), int(group[v])) for u, v in edges if group[u] != group[v]})
