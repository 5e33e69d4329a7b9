"""Real execution of a placed graph on two CPU "devices", and the simulator's error.

``TwoProcessExecutor`` (what the workflow uses): each device is a process pinned to a core of
its own (``os.sched_setaffinity``; the two devices share no core), torch on one thread,
running its operators in topological order; an output another device needs is copied into
shared memory by the sender's own thread and queued (the queue's feeder thread, on the
sender's core, writes only a small handle).  So a transfer takes the sender's time where the
simulator's bus runs beside the device: one of the differences the error table measures.

Inputs start on device 0 (the host) and every result is copied back to it; the latency is the
host's wall time until the last result is there.  The link's latency and bandwidth are
measured on the same mechanism (:func:`measure_process_link`): a message's round trip to
another process, and a copy into shared memory.

The simulated prediction uses the profiled per-operator CPU times for both
devices and the measured link.  Times taken on a shared machine are
contended; the job records the host and thread settings with the numbers.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from . import baselines, costs, graphs
from .problem import Problem


def _worker(d: int, spec: dict[str, Any], graph: dict[str, Any], core: int | None, inbox, outboxes, ctrl) -> None:
    """One device: a process pinned to one core (``os.sched_setaffinity``), torch on one
    thread, running its operators in topological order.  An output another device needs is
    moved to shared memory and queued for it by this process's own thread, right after the
    operator (so a transfer costs the sender's time, as a bus that shares nothing would not);
    the queue's feeder thread only writes the small handle."""
    import os

    import torch
    from torch import fx

    if core is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {core})
    torch.set_num_threads(1)
    torch.multiprocessing.set_sharing_strategy("file_system")  # no descriptor-passing thread
    model, inputs = graphs.build_model(spec)
    gm = graphs.trace(model)
    index = {n["name"]: i for i, n in enumerate(graph["nodes"])}
    nodes, consts = [], {}
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            consts[node.name] = graphs._fetch_attr(gm, node.target)
        elif node.op in ("call_module", "call_function", "call_method", "placeholder"):
            nodes.append((index[node.name], node, None if node.op == "placeholder" else graphs.node_callable(gm, node)))
    succs = [[] for _ in graph["nodes"]]
    for u, v in graph["edges"]:
        succs[u].append(v)
    sinks = [i for i, x in enumerate(succs) if not x]
    host = 0
    while True:
        msg = ctrl.recv()
        if msg[0] == "stop":
            return
        pl, want_outputs = msg[1], msg[2]
        ctrl.send("ready")
        ctrl.recv()                              # go
        t0, c0 = time.perf_counter(), time.thread_time()
        env, got = {}, {}
        it = iter(inputs)

        def fetch(j):
            while j not in got:
                k, t = inbox.get()
                got[k] = t
            return got[j]

        def val(n):
            if n.name in consts:
                return consts[n.name]
            j = index[n.name]
            return env[j] if pl[j] == d else fetch(j)

        with torch.no_grad():
            for i, node, fn in nodes:
                if pl[i] != d:
                    continue
                out = next(it) if fn is None else fn(*fx.node.map_arg(node.args, val),
                                                     **fx.node.map_arg(node.kwargs, val))
                env[i] = out
                dests = sorted({pl[w] for w in succs[i]} | ({host} if i in sinks else set()) - {d})
                if dests:
                    sent = _to_shared(out)               # one copy, on this device's own thread
                    for dst in dests:
                        outboxes[dst].put((i, sent))
        cpu = time.thread_time() - c0            # this device's own work, waiting for a core excluded
        if d == host:
            results = {s_: (env[s_] if pl[s_] == host else fetch(s_)) for s_ in sinks}
            dt = time.perf_counter() - t0
            ctrl.send(("done", dt, {k: v.clone() for k, v in results.items()} if want_outputs else None, cpu))
        else:
            ctrl.send(("done", None, None, cpu))


def _to_shared(x):
    """A copy of ``x`` (tensors, nested in tuples and lists) in shared memory: the receiver
    reads it without another copy, and the sender's later in-place operators cannot touch it."""
    import torch

    if isinstance(x, torch.Tensor):
        y = torch.empty_like(x).share_memory_()
        y.copy_(x)
        return y
    if isinstance(x, (tuple, list)):
        return type(x)(_to_shared(v) for v in x)
    return x


class TwoProcessExecutor:
    """Two CPU devices as two processes, each pinned to its own core; see ``_worker``.  The
    latency is the host's wall time from its start signal until every result is on it."""

    def __init__(self, spec: dict[str, Any], graph: dict[str, Any], cores: tuple[int, int] | None = None):
        import os

        import torch.multiprocessing as mp

        ctx = mp.get_context("spawn")
        if cores is None:
            avail = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
            cores = (avail[0], avail[1]) if len(avail) >= 2 else (None, None)
        self.cores = cores
        self.queues = [ctx.Queue() for _ in range(2)]
        self.ctrls, self.procs = [], []
        for d in range(2):
            a, b = ctx.Pipe()
            p = ctx.Process(target=_worker, args=(d, spec, graph, cores[d], self.queues[d], self.queues, b),
                            daemon=True)
            p.start()
            self.ctrls.append(a)
            self.procs.append(p)
        self.pinned = pinned_cores(graph)
        self.last_outputs: dict[int, Any] = {}

    def run(self, place: np.ndarray, outputs: bool = False) -> float:
        pl = [0 if self.pinned[i] else int(x) for i, x in enumerate(np.asarray(place).tolist())]
        for c in self.ctrls:
            c.send(("run", pl, outputs))
        for c in self.ctrls:
            if c.recv() != "ready":
                raise RuntimeError("real execution: a device did not get ready")
        for c in self.ctrls:
            c.send("go")
        res = [c.recv() for c in self.ctrls]
        if outputs:
            self.last_outputs = res[0][2]
        self.last_cpu = [float(r[3]) for r in res]  # each device's thread CPU time of the run
        return float(res[0][1])

    def close(self, wait_s: float = 30.0) -> None:
        for c in self.ctrls:
            try:
                c.send(("stop",))
            except OSError:  # a device process already gone
                pass
        # wait for the exit itself (waitpid), not for the sentinel pipe: torch's shared-memory
        # manager, started by a worker, inherits that pipe and holds it open for ~30 s after the
        # worker has exited (measured: close() took 60 s with join(timeout=30))
        deadline = time.monotonic() + wait_s
        for p in self.procs:
            while p.is_alive() and time.monotonic() < deadline:
                time.sleep(0.005)
            if p.is_alive():
                p.kill()
                while p.is_alive():
                    time.sleep(0.005)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close(30.0 if exc[0] is None else 3.0)  # after a failure (a deadline), no long wait


def pinned_cores(graph: dict[str, Any]) -> list[bool]:
    return [n["op"] == "input" for n in graph["nodes"]]


def _echo(conn) -> None:
    while True:
        x = conn.recv()
        if x is None:
            return
        conn.send(x)


def measure_process_link(repeats: int = 20) -> dict[str, float]:
    """The link between two device processes: latency (µs) = half a small message's round trip
    to another process; bandwidth (GB/s) from copying 16 MiB into shared memory (what a
    transfer costs its sender, ``_to_shared``)."""
    import torch
    import torch.multiprocessing as mp

    torch.set_num_threads(1)
    ctx = mp.get_context("spawn")
    a, b = ctx.Pipe()
    p = ctx.Process(target=_echo, args=(b,), daemon=True)
    p.start()
    a.send(0)
    a.recv()                                              # the child is up
    rt = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        a.send(0)
        a.recv()
        rt.append(time.perf_counter() - t0)
    a.send(None)
    p.join(timeout=10)
    big = torch.zeros(4 * 2**20)
    cp = []
    for _ in range(max(3, repeats // 4)):
        t0 = time.perf_counter()
        _to_shared(big)
        cp.append(time.perf_counter() - t0)
    return {"latency_us": statistics.median(rt) / 2 * 1e6,
            "gbps": big.numel() * 4 / statistics.median(cp) / 1e9}


def best_placements(run_files: list[str | Path]) -> dict[str, np.ndarray]:
    """Each run file's best placement (the seed with the lowest simulated latency)."""
    out = {}
    for f in run_files:
        res = json.loads(Path(f).read_text())
        row = min(res["rows"], key=lambda r: (r["latency_s"], r["seed"]))
        out[res["spec"]["method"]] = np.asarray(row["placement"], dtype=np.int64)
    return out


def _rounds(ex, spec, placements, times, cpus, progress) -> None:
    """The warm-up rounds, then the measured ones, each running every placement once."""
    for _ in range(int(spec["warmup"])):
        for place in placements.values():
            ex.run(place)
            progress()
    for _ in range(int(spec["repeats"])):
        for name, place in placements.items():
            times[name].append(ex.run(place))
            cpus[name].append(ex.last_cpu)
            progress()


def compare(spec: dict[str, Any], graph_path: str | Path, profile_path: str | Path,
            run_files: list[str | Path] = (), timeout_s: float | None = None,
            startup_s: float | None = None) -> dict[str, Any]:
    """Measured vs simulated latency of every method's best placement of one model (and
    CPU-only) on two CPU devices: two processes pinned to two cores.  Rounds interleave the
    placements (each round runs each once) so a slow spell of the machine lands on all of them;
    each placement's latency is the median of its rounds, and so is each device's thread CPU
    time (its own work, which a loaded machine does not inflate), compared with the simulated
    busy time of its operators.  The simulated latency uses this run's measured profile for both devices, the measured process link, and the topological
    queue (what each device process does).

    With ``timeout_s``, the rounds run under a deadline that scales with their measured
    pace (:func:`distlab.runtime.deadline.job_deadline`, at least ``timeout_s``): a device
    process that hangs stops the job with :class:`~distlab.runtime.deadline.JobTimeout`.
    The device processes' start-up (a spawned interpreter imports torch: slow on a loaded
    machine, and no round's pace) is bounded apart, by ``startup_s`` (default ``timeout_s``),
    through one unmeasured run of CPU-only."""
    from distlab.runtime.deadline import job_deadline, progress

    import os
    import platform

    graph = graphs.load_graph(graph_path)
    prof = costs.load_profile(profile_path, graph)
    link = measure_process_link()
    pair = {"devices": [{"name": "cpu0", "kind": "profiled"}, {"name": "cpu1", "kind": "profiled"}],
            "link": link}
    prob = Problem.build(graph, pair, prof, budget=10 ** 6, order="topological")
    placements = {"cpu_only": np.zeros(graph["n_nodes"], dtype=np.int64)}
    placements.update(best_placements(run_files))
    if len(placements) == 1:  # no run files: HEFT on the two CPUs and alternating groups
        baselines.heft(prob)
        placements["heft"] = prob.best_placement
        placements["alternate_groups"] = prob.expand(np.arange(prob.n_groups) % 2)
    times: dict[str, list[float]] = {k: [] for k in placements}
    cpus: dict[str, list[list[float]]] = {k: [] for k in placements}
    rounds = (int(spec["warmup"]) + int(spec["repeats"])) * len(placements)
    with TwoProcessExecutor(spec["model"], graph) as ex:
        cores = ex.cores
        with job_deadline(startup_s or timeout_s, "real execution's start-up (placement-real)"):
            ex.run(placements["cpu_only"])
        with job_deadline(timeout_s, "real execution (placement-real)", work=rounds):
            _rounds(ex, spec, placements, times, cpus, progress)
    rows = []
    for name, place in placements.items():
        t = np.asarray(times[name])
        real = float(np.median(t))
        simulated = float(prob.sim.evaluate(place)[0])
        q = np.quantile(t, [0.25, 0.75])
        # each device's busy time: measured as its thread CPU time (robust to a loaded machine),
        # simulated as the compute of its operators under the two-CPU pair
        cpu = np.median(np.asarray(cpus[name]), axis=0)
        pl = place.copy()
        pl[prob.sim.pinned] = 0
        busy = [float(prob.sim.compute[pl == d, d].sum()) for d in range(2)]
        rows.append({"model": spec["model_name"], "placement": name, "measured_ms": real * 1e3,
                     "device_cpu_ms": "/".join(f"{c * 1e3:.1f}" for c in cpu),
                     "simulated_busy_ms": "/".join(f"{b * 1e3:.1f}" for b in busy),
                     "busy_error_pct": (sum(busy) / max(float(cpu.sum()), 1e-12) - 1) * 100,
                     "measured_iqr_ms": float(q[1] - q[0]) * 1e3, "rounds": len(t),
                     "simulated_ms": simulated * 1e3, "error_pct": (simulated / real - 1) * 100,
                     "frac_on_device1": float(np.mean(place[~prob.sim.pinned] == 1)), "measured": True})
    return {"link": link, "host": platform.node(), "cores": list(cores), "threads_per_device": 1,
            "load_avg_1min": os.getloadavg()[0], "executor": "two processes, one pinned core each",
            "note": "measured on this machine; contended unless it was idle", "rows": rows, "clock": "measured"}


def error_table(inputs: list[str], out_csv: str | Path, out_md: str | Path) -> None:
    from distlab.results.tables import write_table

    rows = [r for f in inputs for r in json.loads(Path(f).read_text())["rows"]]
    write_table(pd.DataFrame(rows), out_csv, out_md)


def sim_speed(graph_path, profile_path, spec, out) -> None:
    """Evaluations per second of the simulator on one graph, every queue order, batch sizes
    1, 20, 200.  The (order, batch) cases are timed in interleaved rounds of ``seconds / 10``
    each, so a slow spell of a shared machine lands on all of them; the row gives the median
    round's rate and the slowest and fastest rounds."""
    from distlab.results.tables import write_table

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
