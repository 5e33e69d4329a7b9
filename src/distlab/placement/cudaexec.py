"""Real execution of placements on this machine's CPU and CUDA device, serially (the paper's
HETERO scenario: one operator after another, an output copied to the other device when a
consumer there needs it), against the simulator's serial estimate.

``compare`` runs CPU-only, GPU-only, HEFT's placement, the exact serial optimum (a min cut) and
a learner's best placement (HSDAG corrected, searched on the pair's costs here, or read from a
run file) for one model, ``warmup`` + ``repeats`` forward passes each, interleaved, and reports
the median measured latency, the simulated serial latency of the same placement with the pair's
measured profile, and the simulator's error.  Where CUDA is not available every row reads
"not run: no GPU" (``device_names`` decides it: tested on the CPU with a stand-in second device).
"""

from __future__ import annotations

import copy
import time
from typing import Any

import numpy as np

NO_GPU = "not run: no GPU"


def device_names(cuda_available: bool | None = None) -> list[str] | None:
    """The torch devices of the pair (host CPU first), or None where no CUDA device exists."""
    if cuda_available is None:
        import torch

        cuda_available = torch.cuda.is_available()
    return ["cpu", "cuda"] if cuda_available else None


class SerialExecutor:
    """One model's traced graph, its weights on each device, run node by node on the device a
    placement gives it (inputs start on the host; results come back to it)."""

    def __init__(self, spec: dict[str, Any], graph: dict[str, Any], devices: list[str]):
        import torch

        from .graphs import build_model, trace

        model, self.inputs = build_model(spec)
        gm = trace(model)
        self.devices = devices
        self.gms = [gm if d == "cpu" else copy.deepcopy(gm).to(d) for d in devices]
        self.nodes = [n for n in gm.graph.nodes]
        self.index = {nd["name"]: i for i, nd in enumerate(graph["nodes"])}
        self.torch = torch
        self.cuda = any(d.startswith("cuda") for d in devices)

    def _sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def run(self, place: np.ndarray, outputs: bool = False):
        """One forward pass under ``place`` (device index per graph node); seconds (and the
        outputs on the host with ``outputs``)."""
        from torch import fx

        from .graphs import _fetch_attr, node_callable

        torch = self.torch
        env: dict[str, Any] = {}
        it = iter(self.inputs)
        self._sync()
        t0 = time.perf_counter()
        with torch.no_grad():
            out = None
            for node in self.nodes:
                if node.op == "placeholder":
                    env[node.name] = {0: next(it)}  # value per device index, inputs on the host
                    continue
                if node.op == "output":
                    res = fx.node.map_arg(node.args[0], lambda n: self._on(env[n.name], 0))
                    out = res
                    continue
                if node.op == "get_attr":  # a weight: resident on every device, never a transfer
                    env[node.name] = {i: _fetch_attr(g, node.target) for i, g in enumerate(self.gms)}
                    continue
                d = int(place[self.index[node.name]])
                args = fx.node.map_arg(node.args, lambda n: self._on(env[n.name], d))
                kwargs = fx.node.map_arg(node.kwargs, lambda n: self._on(env[n.name], d))
                env[node.name] = {d: node_callable(self.gms[d], node)(*args, **kwargs)}
        self._sync()
        dt = time.perf_counter() - t0
        return (dt, out) if outputs else dt

    def _on(self, vals: dict[int, Any], d: int):
        """A value on device ``d``: copied there once (a transfer), then reused."""
        if d not in vals:
            src = next(iter(vals.values()))
            vals[d] = _to(src, self.devices[d])
        return vals[d]


def _to(x, dev: str):
    import torch

    if isinstance(x, torch.Tensor):
        return x.to(dev)
    if isinstance(x, (tuple, list)):
        return type(x)(_to(v, dev) for v in x)
    return x


def placements(graph: dict, pair: dict, profile: str, learner: dict | None, seed: int = 0) -> dict[str, np.ndarray]:
    """CPU-only, GPU-only, HEFT, the serial optimum and (``learner``: HSDAG options with
    ``budget``) the learner's best placement, each from the pair's costs (``profile``: a profile
    with ``seconds`` and ``cuda_seconds``), plus the Problem they were found on."""
    from . import baselines, costs
    from .optimum import serial_optimum
    from .problem import Problem

    prof = costs.load_profile(profile, graph)
    cuda = costs.load_cuda_profile(profile, graph)
    n = graph["n_nodes"]
    out = {"cpu_only": np.zeros(n, np.int64), "gpu_only": np.ones(n, np.int64)}
    conc = Problem.build(graph, pair, prof, 1, cuda=cuda, order="rank")
    baselines.heft(conc)
    out["heft"] = np.asarray(conc.best_placement, np.int64)
    ser = Problem.build(graph, pair, prof, 1, cuda=cuda, order="serial")
    out["optimum"], _ = serial_optimum(ser.sim)
    if learner:
        import torch

        from . import hsdag

        torch.set_num_threads(1)
        opts = dict(learner)
        budget = int(opts.pop("budget", 200))
        p = Problem.build(graph, pair, prof, budget, cuda=cuda, order="serial")
        hsdag.train(p, opts, seed)
        out["hsdag_corrected"] = np.asarray(p.best_placement, np.int64)
    return out


def compare(spec: dict[str, Any], graph: dict, pair: dict, profile: str, repeats: int = 5, warmup: int = 2,
            learner: dict | None = None, devices: list[str] | None = None, progress=None) -> list[dict[str, Any]]:
    """One row per placement: measured median seconds (interleaved rounds) against the serial
    simulator's estimate with the pair's measured profile; rows "not run: no GPU" without CUDA."""
    from . import costs
    from .problem import Problem

    devs = devices if devices is not None else device_names()
    plan = placements(graph, pair, profile, learner)
    prof = costs.load_profile(profile, graph)
    sim = Problem.build(graph, pair, prof, 1, cuda=costs.load_cuda_profile(profile, graph), order="serial").sim
    est = {k: float(sim.evaluate(v)[0]) for k, v in plan.items()}
    model = spec.get("name", "")
    if devs is None:
        return [{"model": model, "placement": k, "status": NO_GPU, "simulated_ms": est[k] * 1e3,
                 "measured_ms": np.nan, "sim_error_pct": np.nan, "frac_on_device1": float(v.mean()),
                 "clock": "simulated"} for k, v in plan.items()]
    ex = SerialExecutor(spec, graph, devs)
    times: dict[str, list[float]] = {k: [] for k in plan}
    for r in range(warmup + repeats):
        for k, v in plan.items():  # interleaved: a slow spell of the machine hits every placement
            t = ex.run(v)
            if r >= warmup:
                times[k].append(t)
        if progress:
            progress(f"{model}: round {r + 1} of {warmup + repeats}")
    rows = []
    for k, v in plan.items():
        med = float(np.median(times[k]))
        rows.append({"model": model, "placement": k, "status": "measured", "devices": " + ".join(devs),
                     "simulated_ms": est[k] * 1e3, "measured_ms": med * 1e3,
                     "measured_iqr_ms": float(np.subtract(*np.percentile(times[k], [75, 25]))) * 1e3,
                     "sim_error_pct": (est[k] / med - 1) * 100, "frac_on_device1": float(v.mean()),
                     "repeats": repeats, "clock": "measured (wall, synchronised)"})
    return rows


def run_models(cfg: dict[str, Any], models: list[str], pair_name: str, repeats: int, warmup: int,
               budget: int, progress=None, cuda_available: bool | None = None) -> list[dict[str, Any]]:
    """``compare`` for each model of the ``placement`` config section on its pair ``pair_name``
    (the pair's ``profile_dir`` gives the measured profiles), graphs traced here; the learner is
    the config's ``hsdag_corrected`` with ``budget`` evaluations."""
    from .graphfile import GraphError
    from .graphs import extract

    pl = cfg["placement"] if "placement" in cfg else cfg
    if pair_name not in pl["pairs"]:
        raise GraphError(f"--pair: {pair_name!r} is not one of {sorted(pl['pairs'])}")
    pair = pl["pairs"][pair_name]
    if not pair.get("profile_dir"):
        raise GraphError(f"--pair: {pair_name!r} has no profile_dir (measured profiles of both devices)")
    devs = device_names(cuda_available)
    learner = {**pl.get("hsdag_corrected", {}), "budget": budget} if budget > 0 else None
    rows = []
    for m in models:
        if m not in pl["models"]:
            raise GraphError(f"--models: {m!r} is not one of {sorted(pl['models'])}")
        graph = extract(pl["models"][m])
        r = compare(pl["models"][m], graph, pair, f"{pair['profile_dir']}/{m}.json", repeats, warmup,
                    learner, devs, progress)
        rows += [{**row, "model": m, "pair": pair_name} for row in r]
    return rows
