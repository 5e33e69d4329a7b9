"""The learned baselines, on the same simulator and evaluation budget as HSDAG.

* ``rnn``: the placer of Mirhoseini et al. (2017): a GRU encoder over the
  co-location groups (in topological order) and a GRU decoder with attention
  that emits one device per group, trained with REINFORCE and a moving-average
  baseline, ``samples`` placements per update;
* ``placeto``: a Placeto-style placer (Addanki et al. 2019): node embeddings by
  message passing along and against the edges of the coarse graph from the
  node features plus the current placement; an episode visits the groups in
  topological order and re-places one group per step, the reward of a step
  is the latency improvement it causes (one evaluation per step); REINFORCE
  on discounted returns with a moving-average baseline.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from .features import coarse_features
from .problem import Problem


def categorical(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One draw per row of ``logits [batch, k]`` and its log-probability: the draw and the
    value of ``torch.distributions.Categorical(logits=logits)``'s ``sample`` and ``log_prob``
    (the same normalisation, the same ``multinomial`` call), without building the object."""
    logits = logits - logits.logsumexp(dim=-1, keepdim=True)
    a = torch.multinomial(torch.softmax(logits, dim=-1), 1, True).squeeze(-1)
    return a, logits.gather(-1, a.unsqueeze(-1)).squeeze(-1)


class RNNPlacer(nn.Module):
    def __init__(self, in_dim: int, n_devices: int, hidden: int = 64):
        super().__init__()
        self.embed = nn.Linear(in_dim, hidden)
        self.encoder = nn.GRU(hidden, hidden, batch_first=True, bidirectional=True)
        self.dev_embed = nn.Embedding(n_devices + 1, hidden)  # + a start token
        self.decoder = nn.GRUCell(hidden, 2 * hidden)
        self.attn = nn.Linear(2 * hidden, 2 * hidden, bias=False)
        self.out = nn.Linear(4 * hidden, n_devices)
        self.n_devices = n_devices

    def _encode(self, x: torch.Tensor, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
        enc, _ = self.encoder(self.embed(x).unsqueeze(0).expand(batch, -1, -1).contiguous())
        return enc, self.attn(enc)

    def sample(self, x: torch.Tensor, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``batch`` placements of the groups and their log-probabilities, one group at a
        time; call it under ``torch.no_grad()`` and score the placements with :meth:`log_prob`."""
        enc, keys = self._encode(x, batch)
        h = enc.mean(1)
        prev = torch.full((batch,), self.n_devices, dtype=torch.long)
        acts, logp = [], torch.zeros(batch)
        for t in range(x.shape[0]):
            h = self.decoder(self.dev_embed(prev), h)
            w = torch.softmax((keys @ h.unsqueeze(-1)).squeeze(-1), dim=1)
            ctx = (w.unsqueeze(-1) * enc).sum(1)
            a, lp = categorical(self.out(torch.cat([h, ctx], -1)))
            logp = logp + lp
            acts.append(a)
            prev = a
        return torch.stack(acts, 1), logp

    def log_prob(self, x: torch.Tensor, acts: torch.Tensor) -> torch.Tensor:
        """Log-probabilities ``[batch]`` of given placements ``acts [batch, groups]``, teacher
        forced: the decoder reads the given previous devices, so its steps run as one GRU over
        the sequence (the cell's weights) and the attention and output layers as one batched
        pass each.  The same quantity :meth:`sample` returns, in one graph for autograd."""
        batch = acts.shape[0]
        enc, keys = self._encode(x, 1)  # every placement reads the same groups: encoded once
        enc, keys = enc.expand(batch, -1, -1), keys.expand(batch, -1, -1)
        start = torch.full((batch, 1), self.n_devices, dtype=torch.long)
        inp = self.dev_embed(torch.cat([start, acts[:, :-1]], 1))
        d = self.decoder
        hs, _ = torch._VF.gru(inp, enc.mean(1).unsqueeze(0), [d.weight_ih, d.weight_hh, d.bias_ih, d.bias_hh],
                              True, 1, 0.0, self.training, False, True)
        w = torch.softmax(hs @ keys.transpose(1, 2), dim=-1)      # [batch, step, group]
        logits = self.out(torch.cat([hs, w @ enc], -1))
        return torch.log_softmax(logits, -1).gather(-1, acts.unsqueeze(-1)).squeeze(-1).sum(1)


def _reinforce(optim, logp: torch.Tensor, reward: torch.Tensor, baseline: float | None, decay: float) -> float:
    """One REINFORCE update of the log-probabilities ``logp`` against a moving-average
    baseline of the rewards (the first batch's mean starts it); returns the next baseline."""
    baseline = float(reward.mean()) if baseline is None else baseline
    loss = -(logp * (reward - baseline)).sum()
    optim.zero_grad()
    loss.backward()
    optim.step()
    return decay * baseline + (1 - decay) * float(reward.mean())


def _constant(opts: dict[str, Any]):
    """``reward: constant`` (the negative control): every reward the learner sees is the
    first one it saw.  The evaluations and the best placement found are scored as usual."""
    if opts.get("reward", "latency") != "constant":
        return lambda r: r
    first: list = []

    def f(r):
        r = np.asarray(r, dtype=float)
        if not first:
            first.append(float(r.flat[0]))
        return np.full_like(r, first[0])
    return f


def _learning(net: nn.Module, opts: dict[str, Any]):
    """A learner's optimizer (Adam at ``lr``, the fused kernel), its baseline's ``baseline_decay`` and the
    rewards it sees (:func:`_constant`)."""
    optim = torch.optim.Adam(net.parameters(), lr=float(opts.get("lr", 1e-3)), fused=True)
    return optim, float(opts.get("baseline_decay", 0.9)), _constant(opts)


def rnn_update(net: RNNPlacer, optim, x: torch.Tensor, problem: Problem, samples: int,
               baseline: float | None, decay: float, seen) -> tuple[np.ndarray, float]:
    """One update of the RNN placer: ``samples`` placements drawn without autograd, evaluated,
    scored in one teacher-forced pass, one REINFORCE step; their latencies and the next baseline."""
    with torch.no_grad():  # sampling builds no graph: the sampled placements are scored below
        acts, _ = net.sample(x, samples)
    lat = problem.evaluate_groups(acts.numpy())
    r = torch.from_numpy(seen(1.0 / lat)).float()
    return lat, _reinforce(optim, net.log_prob(x, acts), r, baseline, decay)


def rnn(problem: Problem, opts: dict[str, Any], seed: int, log=None) -> dict[str, Any]:
    torch.manual_seed(seed)
    x = torch.from_numpy(coarse_features(problem.graph, problem.group, problem.cedges))
    net = RNNPlacer(x.shape[1], problem.n_devices, int(opts.get("hidden", 64)))
    optim, decay, seen = _learning(net, opts)
    samples = int(opts.get("samples", 20))
    baseline = None
    updates = 0
    while problem.left > 0:
        lat, baseline = rnn_update(net, optim, x, problem, min(samples, problem.left), baseline, decay, seen)
        updates += 1
        if log:
            log(f"update {updates}: best {problem.best * 1e3:.3f} ms, batch mean {np.mean(lat) * 1e3:.3f} ms, "
                f"evaluations {len(problem.history)}")
    return {"updates": updates}


class PlacetoNet(nn.Module):
    def __init__(self, in_dim: int, n_devices: int, hidden: int = 64, rounds: int = 2):
        super().__init__()
        self.inp = nn.Linear(in_dim + n_devices + 2, hidden)
        self.fwd = nn.ModuleList(nn.Linear(hidden, hidden) for _ in range(rounds))
        self.bwd = nn.ModuleList(nn.Linear(hidden, hidden) for _ in range(rounds))
        self.head = nn.Sequential(nn.Linear(3 * hidden, hidden), nn.ReLU(), nn.Linear(hidden, n_devices))

    def forward(self, x, a_in, a_out, place_1h, cur, visited):
        h = torch.relu(self.inp(torch.cat([x, place_1h, cur[:, None], visited[:, None]], 1)))
        up, down = h, h
        for f, b in zip(self.fwd, self.bwd):
            up = torch.relu(f(a_in @ up) + up)      # messages from predecessors
            down = torch.relu(b(a_out @ down) + down)  # messages from successors
        i = int(torch.argmax(cur))
        return self.head(torch.cat([up[i], down[i], (up + down).mean(0)]))


def placeto(problem: Problem, opts: dict[str, Any], seed: int, log=None) -> dict[str, Any]:
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    g, k = problem.n_groups, problem.n_devices
    x = torch.from_numpy(coarse_features(problem.graph, problem.group, problem.cedges))
    a_in = torch.zeros(g, g)
    for u, v in problem.cedges:
        a_in[v, u] = 1.0
    a_in = a_in / a_in.sum(1, keepdim=True).clamp(min=1)
    a_out = torch.zeros(g, g)
    for u, v in problem.cedges:
        a_out[u, v] = 1.0
    a_out = a_out / a_out.sum(1, keepdim=True).clamp(min=1)
    net = PlacetoNet(x.shape[1], k, int(opts.get("hidden", 64)))
    optim, decay, seen = _learning(net, opts)
    gamma = float(opts.get("discount", 0.95))
    baseline = None
    episodes = 0
    while problem.left > 1:
        place = rng.integers(0, k, g)
        prev = float(problem.evaluate_groups(place)[0])
        scale = prev
        logps, rewards = [], []
        visited = torch.zeros(g)
        for i in range(g):
            if problem.left == 0:
                break
            cur = torch.zeros(g)
            cur[i] = 1.0
            p1h = torch.nn.functional.one_hot(torch.from_numpy(place), k).float()
            dist = torch.distributions.Categorical(logits=net(x, a_in, a_out, p1h, cur, visited))
            a = dist.sample()
            logps.append(dist.log_prob(a))
            place = place.copy()
            place[i] = int(a)
            lat = float(problem.evaluate_groups(place)[0])
            rewards.append(float(seen((prev - lat) / scale)))
            prev = lat
            visited[i] = 1.0
        ret, returns = 0.0, []
        for r in reversed(rewards):
            ret = r + gamma * ret
            returns.append(ret)
        returns = torch.tensor(returns[::-1])
        baseline = _reinforce(optim, torch.stack(logps), returns, baseline, decay)
        episodes += 1
        if log:
            log(f"episode {episodes}: best {problem.best * 1e3:.3f} ms, end of episode {prev * 1e3:.3f} ms, "
                f"evaluations {len(problem.history)}")
    if problem.left == 1:  # the last evaluation: the best placement seen, re-scored
        problem.evaluate(problem.best_placement)
    return {"episodes": episodes}
