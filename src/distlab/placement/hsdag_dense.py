"""HSDAG's forward pass and batched scoring on dense adjacency matrices: the implementation
before the sparse one of ``hsdag.py``, kept as its reference (:func:`train`,
the tests, :mod:`distlab.placement.hsdag_bench`).

The same network and parameters (a subclass adding none); each parsing level builds dense
``[n, n]`` matrices: the normalised adjacency the GCN multiplies by, the edge scores whose row
argmax is a node's dominant edge, a one-hot cluster matrix for the pooling and the pooled
adjacency; the batched scoring pads the samples to one ``[S, n, n]`` batch.  ``hsdag.py``
computes the same quantities from edge lists and sparse matrices.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from . import hsdag


class DenseHSDAGNet(hsdag.HSDAGNet):
    """:class:`hsdag.HSDAGNet` with the dense forward pass and scoring (the reference)."""

    def forward(self, x: torch.Tensor, adj: torch.Tensor):
        """Returns (logits [C, D], cluster of each input node [N], cluster embeddings [C, in_dim])."""
        h = self.input_trans(x)
        assign = np.arange(x.shape[0])
        # ``max_levels=None``: to the fixed point; every level that does not stop merges at
        # least two clusters, so it is reached within n levels
        levels = (x.shape[0] if self.max_levels is None else self.max_levels) if self.pooling else 0
        self.merged_levels = 0  # levels that merged something (the last forward pass)
        # the last pass's parsing: each merging level's clusters and dominant edges, and whether
        # it ended on a level that merged nothing (what :meth:`log_prob` replays)
        self.parsing = {"levels": [], "broke": False}
        for _ in range(levels):
            n = h.shape[0]
            hg = self.gnn(h, hsdag._norm_adj(adj))
            # score of every edge and self-loop: sigmoid(MLP(h_u * h_v)), as a dense matrix
            iu, iv = torch.nonzero(torch.triu(adj, 1), as_tuple=True)
            loops = torch.arange(n)
            if self.self_loops:
                su, sv = torch.cat([iu, loops]), torch.cat([iv, loops])
            else:  # the released config (link_ignore_self_loop): a node must join a neighbour
                su, sv = iu, iv
            score = torch.sigmoid(self.edge_net(hg[su] * hg[sv])).squeeze(-1)
            dense = torch.full((n, n), -1.0)
            dense[su, sv] = score.detach()
            dense[sv, su] = score.detach()
            # dominant edge of every node: its best incident edge (self-loop included when
            # self_loops; ties go to the lowest neighbour index); a node without any stays alone
            dom = dense.argmax(dim=1)
            alone = dense.max(dim=1).values < 0
            dom[alone] = loops[alone]
            idx = torch.full((n, n), -1, dtype=torch.long)
            idx[su, sv] = torch.arange(su.numel())
            idx[sv, su] = torch.arange(su.numel())
            pick = idx[loops, dom]
            dom_score = torch.where(alone, torch.ones(n), score[pick.clamp(min=0)] if score.numel() else torch.ones(n))
            label = hsdag._components(n, np.stack([np.arange(n), dom.numpy()], axis=1))
            c = int(label.max()) + 1
            if c == n:
                h = hg
                self.parsing["broke"] = True
                break
            self.parsing["levels"].append({"label": label, "dom": dom, "alone": alone})
            lab = torch.from_numpy(label)
            s = torch.zeros(n, c).index_put_((torch.arange(n), lab), torch.tensor(1.0))
            node_score = torch.zeros(c).index_add(0, lab, dom_score) / s.sum(0)
            pooled = s.t() @ self.pre(hg)
            h = self.post_norm(pooled + self.post(torch.relu(pooled))) * node_score[:, None]
            adj = ((s.t() @ adj @ s) > 0).float()
            adj.fill_diagonal_(0.0)
            assign = label[assign]
            self.merged_levels += 1
        else:
            h = self.gnn(h, hsdag._norm_adj(adj)) if not self.pooling else h
        return self.policy(h), assign, self.out_trans(h)

    def log_prob(self, xs: torch.Tensor, adj: torch.Tensor, parsings: list[dict], acts: list[torch.Tensor],
                 explore: float = 0.0) -> torch.Tensor:
        """Log-probabilities ``[S]`` of the placements ``acts`` (one device per cluster) that
        :meth:`forward` sampled from the inputs ``xs [S, n, F]``, its ``parsing`` replayed:
        all S samples in one batched pass (clusters padded, each sample's own adjacency), the
        same graph for autograd as S separate passes.  The parsing's choices (argmaxes of
        detached scores) carry no gradient; the dominant edges' scores do, as there."""
        S, n = xs.shape[:2]
        h = self.input_trans(xs)
        adj = adj.expand(S, n, n)
        if not self.pooling:
            return self._policy_log_prob(list(self.gnn(h, hsdag._norm_adj(adj))), acts, explore)
        finals: list = [None] * S
        active, sizes, level = list(range(S)), [n] * S, 0
        while active:
            depth = [len(parsings[s]["levels"]) for s in active]
            if any(d > level or parsings[s]["broke"] for s, d in zip(active, depth)):  # hg is read
                hg = self.gnn(h, hsdag._norm_adj(adj))
            on = [j for j, d in enumerate(depth) if d > level]
            for j, (s, d) in enumerate(zip(active, depth)):
                if d == level:
                    finals[s] = (hg[j] if parsings[s]["broke"] else h[j])[: sizes[s]]
            if not on:
                break
            active = [active[j] for j in on]
            h, adj = self._pool(hg[on], adj[on], [parsings[s]["levels"][level] for s in active])
            sizes = [0] * S
            for s in active:
                sizes[s] = int(parsings[s]["levels"][level]["label"].max()) + 1
            level += 1
        return self._policy_log_prob(finals, acts, explore)

    def _pool(self, hg: torch.Tensor, adj: torch.Tensor, levels: list[dict]) -> tuple[torch.Tensor, torch.Tensor]:
        """One parsing level for a batch, its clusters given: sum pooling scaled by the mean
        score of each cluster's dominant edges, and the clusters' adjacency (padded)."""
        S, n = hg.shape[:2]
        c = max(int(lv["label"].max()) + 1 for lv in levels)
        onehot = torch.zeros(S, n, c)
        dom = torch.arange(n).repeat(S, 1)
        scored = torch.zeros(S, n, dtype=torch.bool)
        for j, lv in enumerate(levels):
            m = len(lv["label"])
            onehot[j, torch.arange(m), torch.from_numpy(lv["label"])] = 1.0
            dom[j, :m] = lv["dom"]
            scored[j, :m] = ~lv["alone"]
        pair = hg * hg[torch.arange(S)[:, None], dom]
        score = torch.sigmoid(self.edge_net(pair)).squeeze(-1)
        dom_score = torch.where(scored, score, torch.ones(()))
        count = onehot.sum(1).clamp(min=1.0)
        node_score = (onehot.transpose(1, 2) @ dom_score[..., None]).squeeze(-1) / count
        pooled = onehot.transpose(1, 2) @ self.pre(hg)
        h = self.post_norm(pooled + self.post(torch.relu(pooled))) * node_score[..., None]
        adj = ((onehot.transpose(1, 2) @ adj @ onehot) > 0).float()
        adj = adj * (1.0 - torch.eye(c))
        return h, adj


def train(problem, opts: dict, seed: int, log=None) -> dict:
    """:func:`hsdag.train` on this dense network: the reference run the tests and the benchmark
    compare the sparse implementation with."""
    return hsdag.train(problem, opts, seed, log, reference=DenseHSDAGNet)
