"""Real execution of a placed graph on two CPU "devices", and the simulator's error.

Each device is a Python thread that runs its operators in topological order,
one at a time, with torch limited to one intra-op thread (so a device is one
core); each device has a bus thread that copies (``clone``) an output for
another device in FIFO order, as the simulator's per-sender bus does.  Inputs
start on device 0 (the host) and every result is copied back to it; the
latency is the wall time until the last result is there.  Tensors are handed
across in memory; the link's latency and bandwidth are measured by timing
the same bus on a small and a large tensor.

The simulated prediction uses the profiled per-operator CPU times for both
devices and the measured link.  Times taken on a shared machine are
contended; the job records the host and thread settings with the numbers.
"""

from __future__ import annotations

import json
import queue
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from . import baselines, costs, graphs
from .problem import Problem


class TwoCPUExecutor:
    def __init__(self, spec: dict[str, Any], graph: dict[str, Any]):
        import torch

        torch.set_num_threads(1)
        model, self.inputs = graphs.build_model(spec)
        self.gm = graphs.trace(model)
        self.torch = torch
        names = [n["name"] for n in graph["nodes"]]
        self.index = {nm: i for i, nm in enumerate(names)}
        self.nodes = []   # (index, fx node, fn)
        self.consts = {}
        for node in self.gm.graph.nodes:
            if node.op == "get_attr":
                self.consts[node.name] = graphs._fetch_attr(self.gm, node.target)
            elif node.op in ("call_module", "call_function", "call_method", "placeholder"):
                fn = None if node.op == "placeholder" else graphs.node_callable(self.gm, node)
                self.nodes.append((self.index[node.name], node, fn))
        if len(self.nodes) != len(names):
            raise ValueError("real execution: the traced model does not match the graph file")
        self.succs = [[] for _ in names]
        for u, v in graph["edges"]:
            self.succs[u].append(v)

    def run(self, place: np.ndarray, host: int = 0) -> float:
        """Wall seconds of one inference under ``place`` (inputs pinned to the host)."""
        torch = self.torch
        k = int(place.max()) + 1 if place.size else 1
        k = max(k, host + 1)
        env = [dict() for _ in range(k)]
        ready = {}
        lock = threading.Lock()

        def event(v, d):
            with lock:
                return ready.setdefault((v, d), threading.Event())

        buses = [queue.Queue() for _ in range(k)]
        errors = []
        sinks = [i for i, s in enumerate(self.succs) if not s]
        inputs = iter(self.inputs)
        pl = place.tolist()
        for i, node, fn in self.nodes:
            if fn is None:
                pl[i] = host

        def device(d):
            try:
                for i, node, fn in self.nodes:
                    if pl[i] != d:
                        continue
                    if fn is None:
                        out = next(inputs)
                    else:
                        def val(n):
                            if n.name in self.consts:
                                return self.consts[n.name]
                            j = self.index[n.name]
                            event(j, d).wait()
                            return env[d][j]
                        from torch import fx
                        args = fx.node.map_arg(node.args, val)
                        kwargs = fx.node.map_arg(node.kwargs, val)
                        with torch.no_grad():
                            out = fn(*args, **kwargs)
                    env[d][i] = out
                    event(i, d).set()
                    dests = {pl[w] for w in self.succs[i]}
                    if i in sinks:
                        dests.add(host)
                    dests.discard(d)
                    for dst in sorted(dests):
                        buses[d].put((i, dst))
            except BaseException as e:  # surface in the caller
                errors.append(e)
            finally:
                buses[d].put(None)

        def bus(d):
            while True:
                item = buses[d].get()
                if item is None:
                    return
                i, dst = item
                t = env[d][i]
                env[dst][i] = t.clone() if isinstance(t, torch.Tensor) else t
                event(i, dst).set()

        threads = [threading.Thread(target=device, args=(d,)) for d in range(k)]
        threads += [threading.Thread(target=bus, args=(d,)) for d in range(k)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for s in sinks:
            while not event(s, host).wait(timeout=1.0):
                if errors:
                    break
            if errors:
                break
        t1 = time.perf_counter()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        self.last_outputs = {s: env[host][s] for s in sinks}
        return t1 - t0


def measure_link(repeats: int = 20) -> dict[str, float]:
    """Latency (µs) and bandwidth (GB/s) of a thread-to-thread hand-off with a clone."""
    import torch

    torch.set_num_threads(1)

    def handoff(t):
        q_in, done = queue.Queue(), threading.Event()
        box = {}

        def worker():
            x = q_in.get()
            box["y"] = x.clone()
            done.set()
        th = threading.Thread(target=worker)
        th.start()
        t0 = time.perf_counter()
        q_in.put(t)
        done.wait()
        dt = time.perf_counter() - t0
        th.join()
        return dt

    small, big = torch.zeros(16), torch.zeros(4 * 2**20)  # 64 B, 16 MiB
    ts = statistics.median(handoff(small) for _ in range(repeats))
    tb = statistics.median(handoff(big) for _ in range(repeats))
    bw = big.numel() * 4 / max(tb - ts, 1e-9)
    return {"latency_us": ts * 1e6, "gbps": bw / 1e9}


def compare(spec: dict[str, Any], graph_path: str | Path, profile_path: str | Path) -> dict[str, Any]:
    """Measured vs simulated latency of a few placements of one model on two CPU devices."""
    import platform

    graph = graphs.load_graph(graph_path)
    prof = costs.load_profile(profile_path, graph)
    link = measure_link()
    pair = {"devices": [{"name": "cpu0", "kind": "profiled"}, {"name": "cpu1", "kind": "profiled"}],
            "link": link}
    prob = Problem.build(graph, pair, prof, budget=10)
    ex = TwoCPUExecutor(spec["model"], graph)
    placements = {"cpu_only": np.zeros(graph["n_nodes"], dtype=np.int64)}
    baselines.heft(prob)
    placements["heft"] = prob.best_placement
    placements["alternate_groups"] = prob.expand(np.arange(prob.n_groups) % 2)
    rows = []
    for name, place in placements.items():
        for _ in range(int(spec["warmup"])):
            ex.run(place)
        real = statistics.median(ex.run(place) for _ in range(int(spec["repeats"])))
        simulated = float(prob.sim.evaluate(place)[0])
        rows.append({"model": spec["model_name"], "placement": name, "measured_ms": real * 1e3,
                     "simulated_ms": simulated * 1e3, "error_pct": (simulated / real - 1) * 100,
                     "frac_on_device1": float(np.mean(place == 1))})
    import os

    return {"link": link, "host": platform.node(), "threads_per_device": 1, "load_avg_1min": os.getloadavg()[0],
            "note": "two worker threads on a shared machine: contended unless the host was idle",
            "rows": rows, "clock": "measured"}


def error_table(inputs: list[str], out_csv: str | Path, out_md: str | Path) -> None:
    from distlab.tables import write_table

    rows = [r for f in inputs for r in json.loads(Path(f).read_text())["rows"]]
    write_table(pd.DataFrame(rows), out_csv, out_md)


def sim_speed(graph_path, profile_path, spec, out) -> None:
    """Evaluations per second of the simulator on one graph, every queue order, batch sizes
    1, 20, 200.  The (order, batch) cases are timed in interleaved rounds of ``seconds / 10``
    each, so a slow spell of a shared machine lands on all of them; the row gives the median
    round's rate and the slowest and fastest rounds."""
    from distlab.tables import write_table

    from .sim import ORDERS

    graph = graphs.load_graph(graph_path)
    prof = costs.load_profile(profile_path, graph)
    rng = np.random.default_rng(0)
    cases = []
    for order in ORDERS:
        prob = Problem.build(graph, spec["pair"], prof, budget=1, order=order)
        for b in (1, 20, 200):
            cases.append((order, b, prob.sim, prob.expand(rng.integers(0, prob.n_devices, (b, prob.n_groups)))))
    rounds, each = 10, float(spec.get("seconds", 2.0)) / 10
    rates: dict[tuple[str, int], list[float]] = {(o, b): [] for o, b, _, _ in cases}
    for _ in range(rounds):
        for order, b, s, p in cases:
            n, t0 = 0, time.perf_counter()
            while True:
                s.evaluate(p)
                n += b
                dt = time.perf_counter() - t0
                if dt >= each:
                    break
            rates[(order, b)].append(n / dt)
    rows = [{"model": spec["model_name"], "n_nodes": graph["n_nodes"], "order": o, "batch": b,
             "evals_per_s": float(np.median(r)), "min_round": float(min(r)), "max_round": float(max(r)),
             "rounds": rounds, "load_avg_1min": costs._loadavg()} for (o, b), r in rates.items()]
    write_table(pd.DataFrame(rows), out)
