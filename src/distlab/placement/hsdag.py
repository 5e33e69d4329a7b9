"""HSDAG (Duan et al., NeurIPS 2024), reimplemented from the paper and the
released code's structure (``Esthesia/HSDAG``: main.py, model.py, layer.py).

Pipeline on the coarse graph (``coarsen.py``, ``features.py``):

1. ``input_trans``: 2-layer MLP (hidden 128, LayerNorm inside);
2. GCN encoder: ``gcn_layers`` layers of ``Â h W`` on the symmetrised graph with
   self-loops (Â = D^-1/2 (A + I) D^-1/2), residual + LayerNorm;
3. graph-parsing pooling (Graph Parsing Network, Song et al. 2024): every edge,
   self-loops included, gets a score ``sigmoid(MLP(h_u ⊙ h_v))``; every node
   keeps its highest-scoring edge (its dominant edge); the connected
   components of the dominant edges are the clusters.  A node whose dominant
   edge is its self-loop stays alone, so the number of clusters is learned
   (the paper's text).  ``self_loops: false`` is the released config
   (``link_ignore_self_loop = True``): no self-loop is scored, so every node
   with a neighbour joins one, and parsing to the fixed point ends in one
   cluster per connected component;
   The clusters become the nodes of the next level (sum pooling through
   DeepSets MLPs, scaled by the mean score of the cluster's dominant edges so
   that the edge scorer receives gradients); repeated until a level merges
   nothing (``max_levels: fixed_point``, the released loop) or for
   ``max_levels`` levels;
4. policy per cluster: Linear(·, 128) → ReLU → Linear(128, #devices) →
   softmax; one device sampled per cluster and copied to its operators;
5. REINFORCE, reward 1 / latency: per episode ``samples`` placements
   (``loss_of``): the released code's loss ``-(Σ_t log π_t) · Σ_i γ^i r_(T-1-i)``
   (``advantage: none``, the "as released" variant); ``normalised`` (the
   "corrected" variant) uses per-sample advantages against the episode's mean
   reward over its standard deviation.  ``reward: constant`` is the negative
   control: the same learner, every reward replaced by the run's first.  Between samples
   of an episode the node features move by the (detached) cluster embedding
   of their cluster, as in the released code (``state_update``).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch
from torch import nn

from .features import coarse_features
from .problem import Problem


def _dense_adj(n: int, edges) -> torch.Tensor:
    a = torch.zeros(n, n)
    for u, v in edges:
        if u != v:
            a[u, v] = a[v, u] = 1.0
    return a


def _norm_adj(a: torch.Tensor) -> torch.Tensor:
    """D^-1/2 (A + I) D^-1/2 of an adjacency ``[n, n]`` or a batch of them ``[S, n, n]``."""
    a = a + torch.eye(a.shape[-1])
    d = a.sum(-1).rsqrt()
    return d[..., :, None] * a * d[..., None, :]


def _components(n: int, pairs: np.ndarray) -> np.ndarray:
    """Connected-component label (0..C-1, in order of first node) of each node of the graph of
    the edges ``pairs``: union-find, every component's root its least node."""
    parent = list(range(n))

    def find(a: int) -> int:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for u, v in np.asarray(pairs, dtype=np.int64).reshape(-1, 2).tolist():
        a, b = find(u), find(v)
        if a != b:
            parent[max(a, b)] = min(a, b)
    roots = np.fromiter((find(i) for i in range(n)), np.int64, n)
    return np.unique(roots, return_inverse=True)[1].astype(np.int64)


def _dominant_components(dom: np.ndarray) -> np.ndarray:
    """:func:`_components` of the graph whose edges are ``(i, dom[i])``, one per node: every
    component holds one cycle; by pointer doubling each node finds a node of its cycle (``n``
    steps on) and each cycle its least node, which names the component; labels in order of the
    components' least nodes."""
    n = len(dom)
    nodes = np.arange(n)
    on, low, jump, steps = dom, np.minimum(nodes, dom), dom, 1
    while steps < n:  # low[x]: least of x and the next 2 * steps - 1 nodes along the edges
        on = on[on]
        low = np.minimum(low, low[jump])
        jump, steps = jump[jump], 2 * steps
    name = low[on]  # the least node of the cycle each node reaches
    first = np.full(n, n)
    np.minimum.at(first, name, nodes)
    return np.unique(first[name], return_inverse=True)[1].astype(np.int64)


def _csr(rows: np.ndarray, cols: np.ndarray, vals: torch.Tensor, shape: tuple[int, int]) -> torch.Tensor:
    """A sparse CSR matrix of the entries (rows, cols, vals), each row's columns ascending."""
    order = np.lexsort((cols, rows))
    crow = np.zeros(shape[0] + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=shape[0]), out=crow[1:])
    with warnings.catch_warnings():  # torch's notice that its sparse CSR support is in beta
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(torch.from_numpy(crow), torch.from_numpy(cols[order]),
                                       vals[torch.from_numpy(order)], size=shape, check_invariants=False)


def _spmm(a: torch.Tensor, a_t: torch.Tensor | None, x: torch.Tensor) -> torch.Tensor:
    """``a @ x`` for a sparse CSR ``a``, through :class:`_SpMM` where autograd records it."""
    if torch.is_grad_enabled() and x.requires_grad:
        return _SpMM.apply(a, a_t, x)
    return a @ x


class _SpMM(torch.autograd.Function):
    """``a @ x`` for a sparse CSR ``a``, its gradient ``a_t @ g`` (``a_t``: the transpose)."""

    @staticmethod
    def forward(ctx, a, a_t, x):
        ctx.a_t = a_t
        return a @ x

    @staticmethod
    def backward(ctx, g):
        return None, None, ctx.a_t @ g


class Graph:
    """A graph of a parsing level, or several disjoint ones as one (a batch of samples): what
    the GCN and the edge scorer read.

    ``edges [E, 2]``: each undirected edge once (u < v, sorted), as ``torch.nonzero`` of the
    dense adjacency's upper triangle lists them; ``pairs``: the scored pairs, the edges then
    (``self_loops``) every node's self-loop; ``node``/``nbr``/``pid``: every node's incident
    scored pairs (each edge from both ends).  ``g @ x`` multiplies by the normalised adjacency
    D^-1/2 (A + I) D^-1/2 (built once, as a sparse matrix, on first use)."""

    def __init__(self, n: int, edges, self_loops: bool = True):
        e = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
        e = np.unique(np.sort(e[e[:, 0] != e[:, 1]], axis=1), axis=0)
        self.n, self.edges, self.self_loops = n, e, self_loops
        loops = np.arange(n)
        pairs = np.concatenate([e, np.stack([loops, loops], 1)]) if self_loops else e
        self.su, self.sv = torch.from_numpy(pairs[:, 0]), torch.from_numpy(pairs[:, 1])
        pid = torch.arange(len(pairs))
        self.node, self.nbr = torch.cat([self.su, self.sv]), torch.cat([self.sv, self.su])
        self.pid = torch.cat([pid, pid])
        self._prop = self._inc = None
        self._repeats: dict = {}

    @classmethod
    def from_dense(cls, adj: torch.Tensor, self_loops: bool = True) -> Graph:
        return cls(adj.shape[0], torch.nonzero(torch.triu(adj, 1)).numpy(), self_loops)

    def __matmul__(self, x: torch.Tensor) -> torch.Tensor:
        if self._prop is None:
            u, v, loops = self.edges[:, 0], self.edges[:, 1], np.arange(self.n)
            rows, cols = np.concatenate([u, v, loops]), np.concatenate([v, u, loops])
            d = torch.from_numpy(np.bincount(rows, minlength=self.n)).float().rsqrt()
            r, c = torch.from_numpy(rows), torch.from_numpy(cols)
            self._prop = _csr(rows, cols, d[r] * d[c], (self.n, self.n))  # symmetric: its own transpose
        return _spmm(self._prop, self._prop, x.reshape(-1, x.shape[-1])).view(x.shape)

    def repeat(self, k: int) -> Graph:
        """``k`` disjoint copies as one graph (node ``i`` of copy ``j`` is ``j * n + i``)."""
        if k not in self._repeats:
            off = (np.arange(k) * self.n)[:, None, None]
            self._repeats[k] = Graph(k * self.n, (self.edges[None] + off).reshape(-1, 2), self.self_loops)
        return self._repeats[k]

    def coarsen(self, label: np.ndarray, c: int) -> Graph:
        """The graph of the clusters ``label`` (an edge where an edge joins two clusters)."""
        return Graph(c, label[self.edges], self.self_loops)

    def dominant(self, score: torch.Tensor) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every node's dominant edge from the scores ``[P]`` of the pairs: its best incident
        pair (ties to the lowest neighbour), as the row argmax of the dense score matrix.
        Returns (dominant neighbour [n] (itself when alone), alone [n], pair index [n], -1 when alone)."""
        n, P = self.n, len(self.su)
        if self._inc is None:  # each node's incidences, one run per node: reduced with reduceat
            order = np.argsort(self.node.numpy(), kind="stable")
            node, nbr, pid = (t.numpy()[order] for t in (self.node, self.nbr, self.pid))
            deg = np.bincount(node, minlength=n)
            self._inc = (node, nbr, pid, deg > 0, np.concatenate([[0], np.cumsum(deg)[:-1]])[deg > 0])
        node, nbr, pid, has, start = self._inc
        vals = score.detach().numpy()[pid]
        best = np.full(n, -1.0, dtype=vals.dtype)
        dom, pick = np.arange(n), np.full(n, -1)
        if len(vals):
            best[has] = np.maximum.reduceat(vals, start)
        alone = best < 0
        win = vals == best[node]
        d = np.minimum.reduceat(np.where(win, nbr, n), start) if len(vals) else dom[has]
        dom[has] = np.where(alone[has], dom[has], d)
        if len(vals):
            p = np.minimum.reduceat(np.where(win & (nbr == dom[node]), pid, P), start)
            pick[has] = np.where(alone[has], -1, p)
        return dom, alone, pick


class MLP(nn.Module):
    def __init__(self, i: int, h: int, o: int):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(i, h), nn.LayerNorm(h), nn.ReLU(), nn.Linear(h, o))

    def forward(self, x):
        return self.net(x)


class GCN(nn.Module):
    def __init__(self, h: int, layers: int):
        super().__init__()
        self.lins = nn.ModuleList(nn.Linear(h, h) for _ in range(layers))
        self.norm = nn.LayerNorm(h)

    def forward(self, x, ahat):
        h = x
        for i, lin in enumerate(self.lins):
            h = ahat @ lin(h)
            if i < len(self.lins) - 1:
                h = torch.relu(h)
        return self.norm(x + h)


class HSDAGNet(nn.Module):
    def __init__(self, in_dim: int, n_devices: int, hidden: int = 128, gcn_layers: int = 2,
                 max_levels: int | None = 8, pooling: bool = True, self_loops: bool = True):
        super().__init__()
        self.input_trans = MLP(in_dim, hidden, hidden)
        self.gnn = GCN(hidden, gcn_layers)
        self.edge_net = MLP(hidden, hidden, 1)
        self.pre = nn.Linear(hidden, hidden)
        self.post = nn.Linear(hidden, hidden)
        self.post_norm = nn.LayerNorm(hidden)
        self.out_trans = nn.Linear(hidden, in_dim)
        self.policy = nn.Sequential(nn.Linear(hidden, 128), nn.ReLU(), nn.Linear(128, n_devices))
        self.max_levels, self.pooling, self.self_loops = max_levels, pooling, self_loops

    def _levels_to_run(self, n: int) -> int:
        # ``max_levels=None``: to the fixed point; every level that does not stop merges at
        # least two clusters, so it is reached within n levels
        return (n if self.max_levels is None else self.max_levels) if self.pooling else 0

    def _graph(self, g) -> Graph:
        return g if isinstance(g, Graph) else Graph.from_dense(g, self.self_loops)

    def forward(self, x: torch.Tensor, graph):
        """Returns (logits [C, D], cluster of each input node [N], cluster embeddings [C, in_dim]);
        ``graph``: a :class:`Graph` (made with this net's ``self_loops``) or a dense adjacency."""
        graph = self._graph(graph)
        h = self.input_trans(x)
        assign = np.arange(x.shape[0])
        levels = self._levels_to_run(x.shape[0])
        self.merged_levels = 0  # levels that merged something (the last forward pass)
        # the last pass's parsing: each merging level's clusters and dominant edges, and whether
        # it ended on a level that merged nothing (what :meth:`log_prob` replays)
        self.parsing = {"levels": [], "broke": False}
        for level in range(levels):
            n = graph.n
            hg = self.gnn(h, graph)
            # score of every edge and self-loop: sigmoid(MLP(h_u * h_v)); each node's dominant
            # edge: its best incident one (self-loop included when self_loops; ties to the
            # lowest neighbour index); a node without any stays alone
            score = torch.sigmoid(self.edge_net(hg.index_select(0, graph.su) * hg.index_select(0, graph.sv))).squeeze(-1)
            dom, alone, pick = graph.dominant(score)
            label = _dominant_components(dom)
            c = int(label.max()) + 1
            if c == n:
                h = hg
                self.parsing["broke"] = True
                break
            dom_score = torch.where(torch.from_numpy(alone), torch.ones(n),
                                    score[torch.from_numpy(pick).clamp(min=0)] if score.numel() else torch.ones(n))
            self.parsing["levels"].append({"label": label, "dom": dom, "alone": alone})
            h = self._pool(hg, label, c, dom_score)
            if level + 1 < levels:
                graph = graph.coarsen(label, c)
            assign = label[assign]
            self.merged_levels += 1
        else:
            h = self.gnn(h, graph) if not self.pooling else h
        return self.policy(h), assign, self.out_trans(h)

    def _pool(self, hg: torch.Tensor, label: np.ndarray, c: int, dom_score: torch.Tensor) -> torch.Tensor:
        """The clusters ``label`` (of the rows of ``hg``, ``c`` of them) as nodes: sum pooling
        through ``pre`` and ``post``, scaled by the mean score of each cluster's dominant edges.
        The sums add each cluster's rows in node order, as the one-hot product does."""
        lab = torch.from_numpy(label)
        node_score = torch.zeros(c).index_add(0, lab, dom_score) / torch.from_numpy(np.bincount(label, minlength=c)).float()
        pooled = torch.zeros(c, hg.shape[1]).index_add(0, lab, self.pre(hg))
        return self.post_norm(pooled + self.post(torch.relu(pooled))) * node_score[:, None]

    def log_prob(self, xs: torch.Tensor, graph, parsings: list[dict], acts: list[torch.Tensor],
                 explore: float = 0.0) -> torch.Tensor:
        """Log-probabilities ``[S]`` of the placements ``acts`` (one device per cluster) that
        :meth:`forward` sampled from the inputs ``xs [S, n, F]``, its ``parsing`` replayed:
        all S samples in one batched pass (clusters padded; the GCN reads the samples' graphs
        as one, their disjoint union), the same graph for autograd as S separate passes.  The
        parsing's choices (argmaxes of detached scores) carry no gradient; the dominant edges'
        scores do, as there."""
        S, n = xs.shape[:2]
        g = self._graph(graph).repeat(S)
        h = self.input_trans(xs)
        if not self.pooling:
            return self._policy_log_prob(list(self.gnn(h, g)), acts, explore)
        finals: list = [None] * S
        active, sizes, level = list(range(S)), [n] * S, 0
        while active:
            depth = [len(parsings[s]["levels"]) for s in active]
            if any(d > level or parsings[s]["broke"] for s, d in zip(active, depth)):  # hg is read
                hg = self.gnn(h, g)
            on = [j for j, d in enumerate(depth) if d > level]
            for j, (s, d) in enumerate(zip(active, depth)):
                if d == level:
                    finals[s] = (hg[j] if parsings[s]["broke"] else h[j])[: sizes[s]]
            if not on:
                break
            active = [active[j] for j in on]
            lvs = [parsings[s]["levels"][level] for s in active]
            h, g = self._pool_batch(hg if len(on) == hg.shape[0] else hg[on], g, on, lvs)
            sizes = [0] * S
            for s, lv in zip(active, lvs):
                sizes[s] = int(lv["label"].max()) + 1
            level += 1
        return self._policy_log_prob(finals, acts, explore)

    def _pool_batch(self, hg: torch.Tensor, g: Graph, on: list[int], levels: list[dict]) -> tuple[torch.Tensor, Graph]:
        """One parsing level for a batch ``hg [S, n, H]`` (rows padded to n; the samples ``on``
        of the graph ``g``), its clusters given: sum pooling scaled by the mean score of each
        cluster's dominant edges ``[S, c, H]`` (padded to the most clusters, c) and the
        clusters' graph (padding clusters alone)."""
        S, n, hid = hg.shape
        c = max(int(lv["label"].max()) + 1 for lv in levels)
        dom, scored = np.tile(np.arange(n), (S, 1)), np.zeros((S, n), dtype=bool)
        node, clus = [], []
        for j, lv in enumerate(levels):
            m = len(lv["label"])
            dom[j, :m], scored[j, :m] = lv["dom"], ~lv["alone"]
            node.append(j * n + np.arange(m))
            clus.append(j * c + lv["label"])
        node, clus = np.concatenate(node), np.concatenate(clus)
        # hg read as one [S, n, H] tensor at each use: its gradient sums its uses in one order
        pair = hg * hg[torch.arange(S)[:, None], torch.from_numpy(dom)]
        score = torch.sigmoid(self.edge_net(pair)).squeeze(-1)
        dom_score = torch.where(torch.from_numpy(scored), score, torch.ones(()))
        count = torch.from_numpy(np.bincount(clus, minlength=S * c)).float().clamp(min=1.0)
        # sums of each cluster's rows in node order (the one-hot product's floats); their
        # gradient copies each cluster's row back to its nodes, as the product's does
        rows, to = torch.from_numpy(node), torch.from_numpy(clus)
        node_score = torch.zeros(S * c).index_add(0, to, dom_score.reshape(S * n)[rows]) / count
        pooled = torch.zeros(S * c, hid).index_add(0, to, self.pre(hg).reshape(S * n, hid)[rows]).view(S, c, hid)
        h = self.post_norm(pooled + self.post(torch.relu(pooled))) * node_score.view(S, c, 1)
        local = np.full(g.n, -1)  # each node of g (sample on[j]'s node i: on[j] * n + i): its cluster
        local[np.concatenate([on[j] * n + np.arange(len(lv["label"])) for j, lv in enumerate(levels)])] = clus
        e = local[g.edges]
        return h, Graph(S * c, e[(e >= 0).all(1)], self.self_loops)

    def _policy_log_prob(self, finals: list[torch.Tensor], acts: list[torch.Tensor], explore: float) -> torch.Tensor:
        """Σ over each sample's clusters of log π(device), the policy run once on the padded batch."""
        h = nn.utils.rnn.pad_sequence(finals, batch_first=True)
        a = nn.utils.rnn.pad_sequence(acts, batch_first=True)
        mask = nn.utils.rnn.pad_sequence([torch.ones(len(f)) for f in finals], batch_first=True)
        logits = self.policy(h)
        if explore > 0:
            probs = (1 - explore) * torch.softmax(logits, dim=-1) + explore / logits.shape[-1]
            logp = torch.log(probs / probs.sum(-1, keepdim=True))
        else:
            logp = torch.log_softmax(logits, dim=-1)
        return (logp.gather(-1, a[..., None]).squeeze(-1) * mask).sum(1)


def _levels(v) -> int | None:
    """``max_levels``: a number of parsing levels, or ``fixed_point`` (None: until a level merges nothing)."""
    if v == "fixed_point" or v is None:
        return None
    return int(v)


def _reward(lat: float, opts: dict[str, Any], first: list) -> float:
    """1 / latency, or (``reward: constant``, the negative control) the reward of the
    run's first sample for every sample: the same learner, with nothing to learn from."""
    r = 1.0 / lat
    if opts.get("reward", "latency") == "constant":
        if not first:
            first.append(r)
        return first[0]
    return r


def loss_of(lp: torch.Tensor, rewards: list[float], opts: dict[str, Any], state: dict) -> torch.Tensor:
    """The policy-gradient loss of one episode's samples.

    * ``advantage: none`` (the released code): ``-(Σ_t log π_t) · Σ_i γ^i r_(T-1-i)``, one
      return for every sample, no baseline;
    * ``advantage: moving_average``: ``-Σ_t log π_t (r_t - b)``, ``b`` an exponential moving
      average of the episodes' mean rewards;
    * ``advantage: normalised`` (the corrected learner): per-sample advantages against the
      episode's mean reward, divided by the episode's standard deviation,
      ``-Σ_t log π_t (r_t - mean r) / (std r + ε)``.  A constant reward gives zero
      advantages (no update), so its control samples the initial policy.  Once the policy
      collapses to one placement every sample is that placement, every advantage is 0 and
      learning stops for good;
    * ``advantage: steady`` (the corrected learner that keeps learning, with ``explore``):
      ``-Σ_t log π_t (r_t - b) / s``, ``b`` and ``s`` moving averages (``baseline_decay``) of the
      episodes' mean reward and of the rewards' spread around it; with the exploration floor
      of ``train`` the samples of a collapsed policy still differ, and their advantages do not
      vanish.

    ``state["advantages"]``: the last episode's advantages (``normalised``, ``steady``).
    """
    kind = opts.get("advantage", opts.get("baseline", "none"))
    r = torch.tensor(rewards, dtype=torch.float64)
    if kind == "none":
        gamma = float(opts.get("discount", 0.95))
        ret = sum(float(v) * gamma**i for i, v in enumerate(reversed(rewards)))
        return -lp.sum() * ret
    if kind == "moving_average":
        decay = float(opts.get("baseline_decay", 0.9))
        if state.get("baseline") is None:
            state["baseline"] = float(r.mean())
        adv = r - state["baseline"]
        state["baseline"] = decay * state["baseline"] + (1 - decay) * float(r.mean())
        return -(lp * adv.float()).sum()
    if kind == "steady":
        # the learner that keeps learning: advantages against a moving average of the rewards
        # (not the episode's own mean, which every sample equals once the policy collapses),
        # scaled by a moving average of their spread, so an exploration sample that differs
        # from a collapsed policy's reward still moves it
        decay = float(opts.get("baseline_decay", 0.9))
        if state.get("baseline") is None:
            state["baseline"] = float(r.mean())
            state["spread"] = float(r.std(unbiased=False)) if r.numel() > 1 else 0.0
        adv = r - state["baseline"]
        spread = max(state["spread"], float(adv.abs().mean()))
        adv = adv / spread if spread > 1e-12 * max(float(r.abs().mean()), 1e-300) else torch.zeros_like(r)
        state["advantages"] = adv.tolist()
        state["baseline"] = decay * state["baseline"] + (1 - decay) * float(r.mean())
        state["spread"] = decay * state["spread"] + (1 - decay) * float((r - r.mean()).abs().mean())
        return -(lp * adv.float()).mean()
    if kind == "normalised":
        adv = r - r.mean()
        sd = float(r.std(unbiased=False)) if r.numel() > 1 else 0.0
        adv = adv / (sd + 1e-12) if sd > 1e-12 * max(float(r.abs().mean()), 1e-300) else torch.zeros_like(r)
        state["advantages"] = adv.tolist()
        return -(lp * adv.float()).mean()
    raise ValueError(f"hsdag.advantage: {kind!r} is not 'none', 'moving_average', 'steady' or 'normalised'")


def _draw(logits: torch.Tensor, explore: float, reference: bool = False) -> torch.Tensor:
    """One device per cluster (row of ``logits``); with ``explore``, from the policy mixed with
    the uniform floor.  The draw of ``torch.distributions.Categorical`` (the same normalisation,
    the same ``multinomial`` call: the same devices for one seed), without building the object
    (``reference``: through it)."""
    if explore > 0:  # the exploration floor: every device keeps probability >= explore / D
        probs = (1 - explore) * torch.softmax(logits, dim=-1) + explore / logits.shape[-1]
        if reference:
            return torch.distributions.Categorical(probs=probs).sample()
        probs = probs / probs.sum(-1, keepdim=True)
    else:
        if reference:
            return torch.distributions.Categorical(logits=logits).sample()
        probs = torch.softmax(logits - logits.logsumexp(dim=-1, keepdim=True), dim=-1)
    return torch.multinomial(probs, 1, True).squeeze(-1)


def _episode(net: HSDAGNet, x0: torch.Tensor, graph, problem: Problem, count: int, opts: dict[str, Any],
             first: list, reference: bool) -> tuple[list, list, list, list, list]:
    """``count`` placements sampled without autograd (their scoring is one batched pass) and
    evaluated one by one (the simulator's batched evaluation rounds its sums differently): the
    inputs, parsings, devices, rewards and cluster counts of the samples.  Between samples the
    node features move by their cluster's embedding (``state_update``)."""
    explore, state_update = float(opts.get("explore", 0.0)), bool(opts.get("state_update", True))
    x = x0.clone()
    xs, parsings, acts, rewards, clusters = [], [], [], [], []
    for _ in range(count):
        with torch.no_grad():  # sampling builds no graph: the samples are scored in one pass
            logits, assign, emb = net(x, graph)
            act = _draw(logits, explore, reference)
        xs.append(x)
        parsings.append(net.parsing)
        acts.append(act)
        lat = float(problem.evaluate_groups(act.numpy()[assign])[0])
        rewards.append(_reward(lat, opts, first))
        clusters.append(int(logits.shape[0]))
        if state_update:
            x = x + emb[torch.from_numpy(assign)]
    return xs, parsings, acts, rewards, clusters


def train(problem: Problem, opts: dict[str, Any], seed: int, log=None, reference: type | None = None) -> dict[str, Any]:
    """Run HSDAG until the evaluation budget is spent; returns the run record.  ``reference``: a
    network class on the dense adjacency (``hsdag_dense.train`` passes its own), the same numbers
    slower."""
    torch.manual_seed(seed)
    drop = tuple(opts.get("drop_features", ()))
    x0 = torch.from_numpy(coarse_features(problem.graph, problem.group, problem.cedges, drop))
    self_loops = bool(opts.get("self_loops", True))
    if reference is not None:
        cls, graph = reference, _dense_adj(problem.n_groups, problem.cedges)
    else:
        cls, graph = HSDAGNet, Graph(problem.n_groups, problem.cedges, self_loops)
    net = cls(x0.shape[1], problem.n_devices, hidden=int(opts.get("hidden", 128)),
              gcn_layers=int(opts.get("gcn_layers", 2)), max_levels=_levels(opts.get("max_levels", 8)),
              pooling=bool(opts.get("pooling", True)), self_loops=self_loops)
    optim = torch.optim.Adam(net.parameters(), lr=float(opts.get("lr", 1e-3)), fused=True)
    samples = int(opts.get("samples", 20))
    explore = float(opts.get("explore", 0.0))
    if not 0.0 <= explore < 1.0:
        raise ValueError(f"hsdag.explore: must be in [0, 1), got {explore!r}")
    greedy = bool(opts.get("final_greedy", False))
    if greedy and problem.left < 2:
        raise ValueError("hsdag.final_greedy: needs a budget of at least 2 evaluations")
    reserve = 1 if greedy else 0  # the last evaluation scores the final policy's most likely placement
    advantages = []
    state: dict = {}
    first: list = []
    clusters_seen = []
    episode = 0
    while problem.left > reserve:
        xs, parsings, acts, rewards, clusters = _episode(net, x0, graph, problem, min(samples, problem.left - reserve),
                                                         opts, first, reference is not None)
        clusters_seen += clusters
        logps = net.log_prob(torch.stack(xs), graph, parsings, acts, explore)
        loss = loss_of(logps, rewards, opts, state)
        if "advantages" in state:
            advantages.append(float(np.mean(np.abs(state["advantages"]))))
        optim.zero_grad()
        loss.backward()
        optim.step()
        episode += 1
        if log:
            lats = 1.0 / np.asarray(rewards) if opts.get("reward", "latency") != "constant" else None
            log(f"episode {episode}: best {problem.best * 1e3:.3f} ms"
                + (f", episode mean {lats.mean() * 1e3:.3f} ms" if lats is not None else "")
                + f", clusters {clusters_seen[-1]}, evaluations {len(problem.history)}")
    with torch.no_grad():  # the clusters of the final policy's parsing (input features, no state update)
        logits_last, assign_last, _ = net(x0, graph)
    out = {"episodes": episode, "clusters_mean": float(np.mean(clusters_seen)),
           "clusters_last": clusters_seen[-1], "assign_last": np.asarray(assign_last).tolist(),
           "mean_abs_advantage": advantages}
    if greedy:  # the final policy's most likely placement, one evaluation (reserved)
        act = logits_last.argmax(dim=-1).numpy()
        out["final_greedy_s"] = float(problem.evaluate_groups(act[assign_last])[0])
    return out
