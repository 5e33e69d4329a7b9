"""Per-operator cost model: profiled CPU times and roofline devices.

* ``profile``: every compute node of a traced model is executed on its real
  inputs in ``warmup + repeats`` interleaved rounds (each round times every
  operator once) on one thread; its cost is the median of the ``repeats``
  timed calls, stored with a distribution-free 95 % CI of that median.  ``clock: thread_cpu`` (default) times the
  calling thread's CPU time, which on a shared machine does not count the
  time spent waiting for a core (wall time does; ``clock: wall``); with torch
  limited to one thread an operator's work is all on the calling thread.  The result is a data artifact of its own
  workflow rule (``placement_profile``), cached like a data set.
* ``roofline``: a device described by a spec, an operator costs
  ``flops / (peak × efficiency(op)) + bytes / bandwidth + launch overhead``,
  where bytes = input + output + parameter bytes; operators that only
  re-label a tensor (views, transposes, flatten, dropout in eval mode, inputs)
  cost nothing.
* A link moves ``b`` bytes in ``latency + b / bandwidth``.

Units: seconds, bytes, FLOP/s and bytes/s inside the library; the config
speaks GFLOP/s, GB/s (10^9 bytes) and microseconds, converted here.
"""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np

FREE_OPS = frozenset({"input", "view", "transpose", "flatten", "getitem", "dropout", "size"})


class CostError(ValueError):
    """A device or link spec that cannot be costed, naming the key."""


def profile(spec: dict[str, Any], repeats: int, warmup: int, device: str = "cpu",
            threads: int = 1, clock: str = "thread_cpu") -> dict[str, Any]:
    """Median seconds of every node of ``spec``'s graph on ``device``.

    Nodes appear in the order of ``graphs.extract`` (inputs included, cost 0).
    """
    import torch

    from . import graphs

    if repeats < 1 or warmup < 0:
        raise CostError(f"profile: repeats must be >= 1 and warmup >= 0 (got {repeats}, {warmup})")
    if clock not in ("thread_cpu", "wall"):
        raise CostError(f"profile.clock: {clock!r} is not 'thread_cpu' or 'wall'")
    if device.startswith("cuda"):
        clock = "wall"  # kernels run on the GPU: only wall time (after a synchronize) sees them
    model, inputs = graphs.build_model(spec)
    return profile_module(model, inputs, repeats, warmup, device, threads, clock, spec)


def profile_module(model, inputs, repeats: int, warmup: int, device: str = "cpu", threads: int = 1,
                   clock: str = "thread_cpu", spec: Any = None) -> dict[str, Any]:
    """``profile`` of any module ``torch.fx`` can trace, on example ``inputs``."""
    import torch

    from . import graphs

    if repeats < 1 or warmup < 0:
        raise CostError(f"profile: repeats must be >= 1 and warmup >= 0 (got {repeats}, {warmup})")
    if device.startswith("cuda"):
        clock = "wall"
    now = time.thread_time if clock == "thread_cpu" else time.perf_counter
    torch.set_num_threads(threads)
    gm = (model if isinstance(model, torch.fx.GraphModule) else graphs.trace(model)).to(device)
    inputs = tuple(x.to(device) for x in inputs)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    names, calls = [], []
    for node, fn, args, kwargs, _ in graphs.walk(gm, inputs):
        if node.op == "get_attr":
            continue
        names.append(node.name)
        calls.append(None if fn is None else (fn, args, kwargs))
    # interleaved rounds: each round times every operator once, in graph order, so a slow
    # spell of the machine lands on all operators alike instead of on a few
    times = np.zeros((repeats, len(calls)))
    with torch.no_grad():
        for r in range(warmup + repeats):
            for i, c in enumerate(calls):
                if c is None:
                    continue
                fn, args, kwargs = c
                sync()
                t0 = now()
                fn(*args, **kwargs)
                sync()
                if r >= warmup:
                    times[r - warmup, i] = now() - t0
    seconds = np.median(times, axis=0)
    q = np.quantile(times, [0.25, 0.75], axis=0)
    lo, hi = median_ci(times)
    total = times.sum(axis=1)
    tlo, thi = median_ci(total[:, None])
    return {
        "model": spec, "device": device, "threads": threads, "repeats": repeats, "warmup": warmup,
        "clock": clock, "interleaved": True, "load_avg_1min": _loadavg(),
        "host": platform.node(), "processor": platform.processor() or platform.machine(),
        "torch": torch.__version__, "names": names, "seconds": seconds.tolist(),
        "iqr_seconds": (q[1] - q[0]).tolist(), "ci95_low_seconds": lo.tolist(), "ci95_high_seconds": hi.tolist(),
        "total_seconds": float(seconds.sum()),
        "round_total_seconds": {"median": float(np.median(total)), "ci95": [float(tlo[0]), float(thi[0])]},
    }


def median_ci(x: np.ndarray, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Distribution-free CI of the median of each column of ``x`` ``[repeats, k]``: the order
    statistics ``(j, n + 1 - j)`` with ``P(j <= Bin(n, 1/2) < n + 1 - j) >= level``
    (the whole range when ``n`` is too small for the level)."""
    from math import comb

    x = np.sort(np.asarray(x, dtype=float), axis=0)
    n = x.shape[0]
    cdf = np.cumsum([comb(n, i) / 2.0**n for i in range(n + 1)])
    j = 0  # largest 0-based j whose interval (x_(j), x_(n-1-j)) covers: 1 - 2 P(Bin <= j) >= level
    for cand in range(1, n // 2):
        if 1 - 2 * cdf[cand] >= level:
            j = cand
    return x[j], x[n - 1 - j]


def _loadavg() -> float | None:
    try:
        import os

        return float(os.getloadavg()[0])
    except (OSError, AttributeError):
        return None


def load_profile(path: str | Path, graph: dict[str, Any], model: dict[str, Any] | None = None) -> np.ndarray:
    """Per-node seconds of a profile, checked against the graph's node names (and, given
    ``model``, against the model spec it was measured for)."""
    prof = json.loads(Path(path).read_text())
    if model is not None and prof.get("model") != model:
        raise CostError(f"profile {path} was measured for {prof.get('model')}, not {model}: measure it again "
                        "(rule placement_profile) and store it (docs/placement.md)")
    names = [n["name"] for n in graph["nodes"]]
    if prof["names"] != names:
        raise CostError(f"profile {path} does not match the graph ({len(prof['names'])} vs {len(names)} "
                        "nodes or different names): rerun the profile rule")
    sec = np.asarray(prof["seconds"], dtype=float)
    if not np.all(np.isfinite(sec)) or np.any(sec < 0):
        raise CostError(f"profile {path}: non-finite or negative seconds")
    return sec


def load_cuda_profile(path: str | Path, graph: dict[str, Any]) -> np.ndarray | None:
    """Per-node CUDA seconds of a profile, or None when it was taken without a GPU."""
    prof = json.loads(Path(path).read_text())
    cuda = prof.get("cuda_seconds")
    if cuda is None:
        return None
    if len(cuda) != len(graph["nodes"]):
        raise CostError(f"profile {path}: cuda_seconds has {len(cuda)} entries for {len(graph['nodes'])} nodes")
    return np.asarray(cuda, dtype=float)


def _positive(spec: dict[str, Any], key: str, where: str) -> float:
    v = spec.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v) or v <= 0:
        raise CostError(f"{where}.{key}: must be a positive finite number, got {v!r}")
    return float(v)


def roofline(graph: dict[str, Any], dev: dict[str, Any], where: str = "device") -> np.ndarray:
    """Per-node seconds on a roofline device.

    ``dev``: ``{"peak_gflops": float, "mem_gbps": float, "launch_us": float,
    "efficiency": {op: fraction}, "default_efficiency": fraction}``.
    """
    peak = _positive(dev, "peak_gflops", where) * 1e9
    bw = _positive(dev, "mem_gbps", where) * 1e9
    launch = float(dev.get("launch_us", 0.0)) * 1e-6
    if not np.isfinite(launch) or launch < 0:
        raise CostError(f"{where}.launch_us: must be >= 0, got {dev.get('launch_us')!r}")
    eff_default = float(dev.get("default_efficiency", 1.0))
    eff = dict(dev.get("efficiency", {}))
    for k, e in list(eff.items()) + [("default_efficiency", eff_default)]:
        if not (0 < float(e) <= 1):
            raise CostError(f"{where}.efficiency.{k}: must be in (0, 1], got {e!r}")
    out = np.zeros(len(graph["nodes"]))
    for i, n in enumerate(graph["nodes"]):
        if n["op"] in FREE_OPS:
            continue
        e = float(eff.get(n["op"], eff_default))
        # a lookup reads only the rows it gathers, not its whole table
        params = 0 if n["op"] == "embedding" else n["param_bytes"]
        moved = n["in_bytes"] + n["out_bytes"] + params
        out[i] = n["flops"] / (peak * e) + moved / bw + launch
    return out


def device_costs(graph: dict[str, Any], dev: dict[str, Any], profiled: np.ndarray | None,
                 where: str = "device", cuda: np.ndarray | None = None) -> np.ndarray:
    """Per-node seconds of one device of a pair: ``kind: profiled`` (this
    machine's measured times, times ``scale``), ``kind: measured_cuda`` (the profile's
    ``cuda_seconds``: a GPU measured on the same host as the CPU) or ``kind: roofline``; a
    roofline device with ``measure_on_cuda: true`` takes the measured CUDA
    times instead when the profile holds them (it was taken with a GPU)."""
    kind = dev.get("kind")
    if kind == "measured_cuda":  # the profile's own CUDA times: both devices measured on one host
        if cuda is None:
            raise CostError(f"{where}: kind measured_cuda needs a profile taken with a GPU (cuda_seconds)")
        return np.asarray(cuda, dtype=float) * float(dev.get("scale", 1.0))
    if kind == "roofline" and dev.get("measure_on_cuda") and cuda is not None:
        return np.asarray(cuda, dtype=float)
    if kind == "profiled":
        if profiled is None:
            raise CostError(f"{where}: kind profiled needs a profile")
        scale = float(dev.get("scale", 1.0))
        if not (np.isfinite(scale) and scale > 0):
            raise CostError(f"{where}.scale: must be positive, got {dev.get('scale')!r}")
        return profiled * scale
    if kind == "roofline":
        return roofline(graph, dev, where)
    raise CostError(f"{where}.kind: {kind!r} is not 'profiled', 'measured_cuda' or 'roofline'")


def link_seconds(nbytes: np.ndarray | float, link: dict[str, Any], where: str = "link") -> np.ndarray:
    """Seconds to move ``nbytes`` over a link ``{"gbps": GB/s, "latency_us": µs}``."""
    bw = _positive(link, "gbps", where) * 1e9
    lat = float(link.get("latency_us", 0.0)) * 1e-6
    if not np.isfinite(lat) or lat < 0:
        raise CostError(f"{where}.latency_us: must be >= 0, got {link.get('latency_us')!r}")
    return lat + np.asarray(nbytes, dtype=float) / bw


def pair_costs(graph: dict[str, Any], pair: dict[str, Any], profiled: np.ndarray | None,
               where: str = "pair", cuda: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(compute [n_nodes, n_devices], transfer [n_nodes])`` seconds of a device pair."""
    devs = pair["devices"]
    compute = np.stack([device_costs(graph, d, profiled, f"{where}.devices[{i}]", cuda)
                        for i, d in enumerate(devs)], axis=1)
    out_bytes = np.array([n["out_bytes"] for n in graph["nodes"]], dtype=float)
    transfer = link_seconds(out_bytes, pair["link"], f"{where}.link")
    return compute, transfer
