"""Node features of the coarse graph (HSDAG, Sec. 3 and its ablation table).

Per group of the coarsened graph:

* ``op``: one-hot operator type, averaged over the group's operators (as the
  released code does);
* ``shape``: output shape of the group's last operator, padded to 4
  dimensions, as ``log1p(dim) / 10``;
* ``node_id``: the group's index, divided by the number of groups (the
  released code appends the raw index; we scale it to [0, 1] so that it does
  not dominate the other features);
* ``structural``: closeness centrality and the node's local fractal dimension
  (slope of log |ball(r)| against log r over radii 1..4 on the undirected
  coarse graph, the quantity of the released code's ``nfd.py``).

Each block can be switched off (the ablations).
"""

from __future__ import annotations

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import shortest_path

BLOCKS = ("op", "shape", "node_id", "structural")


def structural(n: int, edges) -> np.ndarray:
    """``[n, 2]``: closeness centrality and local fractal dimension, from the hop distances of
    the undirected graph (breadth-first, all sources at once)."""
    out = np.zeros((n, 2))
    if n == 0:
        return out
    e = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    dist = shortest_path(csr_matrix((np.ones(len(e)), (e[:, 0], e[:, 1])), shape=(n, n)),
                         directed=False, unweighted=True)
    hops = np.where(np.isfinite(dist), dist, -1).astype(np.int64)  # -1: not reached
    radii = np.arange(1, 5)
    for i in range(n):
        d = hops[i]
        reach = d[d > 0]
        if reach.size:
            # closeness of networkx: (reached / (n - 1)) * reached / sum of distances
            out[i, 0] = (reach.size / max(1, n - 1)) * reach.size / reach.sum()
        counts = np.array([np.count_nonzero((d >= 0) & (d <= r)) for r in radii], dtype=float)
        if counts[-1] > counts[0] or counts[0] > 1:
            out[i, 1] = np.polyfit(np.log(radii), np.log(counts), 1)[0]
    return out


def coarse_features(graph: dict, group: np.ndarray, cedges, drop: tuple[str, ...] = ()) -> np.ndarray:
    """``[n_groups, F]`` float32 features; ``drop`` names blocks to leave out."""
    for b in drop:
        if b not in BLOCKS:
            raise ValueError(f"features.drop: {b!r} is not one of {BLOCKS}")
    nodes = graph["nodes"]
    g = int(group.max()) + 1
    vocab = sorted({n["op"] for n in nodes})
    col = {op: i for i, op in enumerate(vocab)}
    blocks = []
    if "op" not in drop:
        onehot = np.zeros((g, len(vocab)))
        np.add.at(onehot, (group, [col[n["op"]] for n in nodes]), 1.0)
        blocks.append(onehot / onehot.sum(1, keepdims=True))
    if "shape" not in drop:
        last = np.zeros(g, dtype=np.int64)
        np.maximum.at(last, group, np.arange(len(nodes)))
        shp = np.zeros((g, 4))
        for i, v in enumerate(last):
            dims = (nodes[v]["shape"] or [0])[:4]
            shp[i, : len(dims)] = np.log1p(dims) / 10.0
        blocks.append(shp)
    if "node_id" not in drop:
        blocks.append((np.arange(g) / max(1, g))[:, None])
    if "structural" not in drop:
        blocks.append(structural(g, cedges))
    if not blocks:
        raise ValueError("features.drop: at least one feature block must remain")
    return np.concatenate(blocks, axis=1).astype(np.float32)
