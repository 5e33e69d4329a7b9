"""HSDAG's structural node features: the all-sources distances give what one breadth-first
search per node gives."""

from __future__ import annotations

from collections import deque

import numpy as np

from distlab.placement.features import structural


def _reference(n, edges):
    """Closeness and local fractal dimension from one breadth-first search per node."""
    adj = [[] for _ in range(n)]
    for u, v in edges:
        adj[u].append(v)
        adj[v].append(u)
    out = np.zeros((n, 2))
    radii = np.arange(1, 5)
    for i in range(n):
        d = np.full(n, -1)
        d[i], q = 0, deque([i])
        while q:
            u = q.popleft()
            for w in adj[u]:
                if d[w] < 0:
                    d[w] = d[u] + 1
                    q.append(w)
        reach = d[d > 0]
        if reach.size:
            out[i, 0] = (reach.size / max(1, n - 1)) * reach.size / reach.sum()
        counts = np.array([np.count_nonzero((d >= 0) & (d <= r)) for r in radii], dtype=float)
        if counts[-1] > counts[0] or counts[0] > 1:
            out[i, 1] = np.polyfit(np.log(radii), np.log(counts), 1)[0]
    return out


def test_structural_features_equal_one_search_per_node():
    rng = np.random.default_rng(0)
    cases = [(1, []), (3, []), (4, [(0, 1), (0, 1), (2, 3)]), (6, [(i, i + 1) for i in range(5)])]
    for _ in range(100):  # random graphs, disconnected ones among them
        n = int(rng.integers(2, 30))
        cases.append((n, [(int(u), int(v)) for u, v in rng.integers(0, n, (int(rng.integers(0, 2 * n)), 2)) if u != v]))
    for n, edges in cases:
        got = structural(n, edges)
        assert np.array_equal(got, _reference(n, edges)), (n, edges)
    assert structural(6, cases[3][1])[:, 1].max() > 0  # a chain has a fractal dimension
