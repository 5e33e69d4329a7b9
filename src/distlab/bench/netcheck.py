"""Gloo collectives on shaped links against the alpha-beta model (measured; a benchmark).

Four ranks, each in a network namespace of its own (:mod:`distlab.runtime.netns`),
run, at each link rate (10 Mbit/s, 100 Mbit/s, 1 Gbit/s and unshaped), for sizes
from 4 kB to 64 MB:

* ``p2p``: rank 0 sends ``size`` bytes to rank 1, which answers with 4 bytes
  (the time is the round trip; the model: two messages, one of ``size``);
* ``all_reduce``: gloo's all-reduce of a ``size``-byte float32 tensor;
* ``all_gather``: gloo's all-gather of ``size`` bytes from every rank.

One job serves all rates: between rates the ranks wait at a file barrier while
the launcher reshapes the links (so torch starts once per rank, not once per
rate).  A point's time is the median over repeats of the slowest rank's time
(each repeat starts at a barrier).  Points whose model time at the nominal rate
exceeds ``--max-point-s`` are skipped, and listed as skipped with that reason,
so a slow link's point finishes in seconds.

Per (rate, collective), the alpha-beta fit ``t = rounds x alpha + bytes / beta``
is made with the model's own rounds and per-worker bytes
(:mod:`distlab.runtime.network`: ring all-reduce ``2(N-1)`` rounds and
``2(N-1)/N x size``, all-gather ``N-1`` rounds and ``(N-1) x size``), least
squares weighted by ``1/t`` (every size counts alike).  ``achieved/nominal`` =
``beta`` over the link rate.

Latency: this kernel has no ``netem``, so no delay can be added to a link; the
rows of kind ``injected`` run a ring all-reduce written with point-to-point
sends, sleeping ``--inject-ms`` before each of its ``2(N-1)`` rounds, at 100
Mbit/s, against the model with ``alpha`` = fitted + injected.  They are kept
apart from the link rows (column ``latency``).

Without root or the kernel features the table has one row per rate reading
"not run" and the reason.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

RATES: dict[str, float | None] = {"10Mbit": 10e6, "100Mbit": 100e6, "1Gbit": 1e9, "unshaped": None}
SIZES = [4096 * 4**i for i in range(8)]  # 4 kB ... 64 MB
OPS = ("p2p", "all_reduce", "all_gather")
UNSHAPED_BPS = 100e9  # used only to decide skips: no cap on the unshaped link


def model_terms(op: str, size: int, n: int) -> tuple[int, float]:
    """(latency rounds, per-worker bytes on the critical path) of ``op`` by the project's model."""
    from ..runtime.network import all_gather_bytes, ring_all_reduce_bytes

    if op == "p2p":
        return 2, float(size)
    if op in ("all_reduce", "ring_all_reduce_injected"):
        return 2 * (n - 1), ring_all_reduce_bytes(size, n)
    if op == "all_gather":
        return n - 1, all_gather_bytes(size, n)
    raise ValueError(op)


def plan(rate_bps: float | None, n: int, max_point_s: float) -> tuple[list[tuple[str, int]], list[dict]]:
    """The (op, size) points to run at a rate and the skipped ones with their reason."""
    run, skipped = [], []
    bps = (rate_bps or UNSHAPED_BPS) / 8
    for op in OPS:
        for size in SIZES:
            rounds, nbytes = model_terms(op, size, n)
            t = nbytes / bps
            if t > max_point_s:
                skipped.append({"op": op, "size_bytes": size,
                                "reason": f"model time {t:.1f} s per call at the nominal rate > {max_point_s} s"})
            else:
                run.append((op, size))
    return run, skipped


def fit_alpha_beta(rounds: Sequence[float], nbytes: Sequence[float], t: Sequence[float]) -> tuple[float, float, float]:
    """Least squares of ``t = rounds alpha + bytes / beta`` weighted by ``1/t``:
    (alpha s, beta bytes/s, rms relative error).  ``alpha`` is clipped at 0."""
    r, b, y = (np.asarray(v, dtype=float) for v in (rounds, nbytes, t))
    w = 1.0 / y
    a = np.stack([r * w, b * w], axis=1)
    (alpha, inv_beta), *_ = np.linalg.lstsq(a, y * w, rcond=None)
    if alpha < 0:  # refit with no latency term
        alpha = 0.0
        inv_beta = float(np.sum(b * w * w * y) / np.sum((b * w) ** 2))
    pred = r * alpha + b * inv_beta
    rms = float(np.sqrt(np.mean(((pred - y) / y) ** 2)))
    return float(alpha), (1.0 / inv_beta if inv_beta > 0 else math.inf), rms


# ------------------------------------------------------------------ the ranks


def _wait_file(path: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"netcheck: the launcher did not write {path} within {timeout_s:.0f} s")
        time.sleep(0.01)


def _ring_all_reduce_injected(x, rank: int, n: int, inject_s: float) -> None:
    """Ring all-reduce by point-to-point sends (reduce-scatter then all-gather, ``2(N-1)``
    rounds), sleeping ``inject_s`` before each round: latency added in the process."""
    import torch
    import torch.distributed as dist

    chunks = list(x.chunk(n))
    right, left = (rank + 1) % n, (rank - 1) % n
    for step in range(2 * (n - 1)):
        time.sleep(inject_s)
        if step < n - 1:
            send_i, recv_i = (rank - step) % n, (rank - step - 1) % n
        else:
            s = step - (n - 1)
            send_i, recv_i = (rank + 1 - s) % n, (rank - s) % n
        buf = torch.empty_like(chunks[recv_i])
        reqs = [dist.isend(chunks[send_i].contiguous(), right), dist.irecv(buf, left)]
        for q in reqs:
            q.wait()
        if step < n - 1:
            chunks[recv_i].add_(buf)
        else:
            chunks[recv_i].copy_(buf)


def worker(sync: str | Path, out: str | Path, phases: str) -> None:
    """One rank of the benchmark (``distlab netcheck --worker``): every phase's points, between
    phases a file barrier while the launcher reshapes the links; rank 0 writes the rows to ``out``."""
    import torch
    import torch.distributed as dist

    from ..runtime.dist import init_from_env

    ctx = init_from_env("gloo", timeout_s=300.0)
    rank, n = ctx.rank, ctx.world_size
    sync, rows_file = Path(sync), Path(out)
    phases = json.loads(phases)
    rows = []
    for k, ph in enumerate(phases):
        if rank == 0:
            (sync / f"ready-{k}").write_text("")
        _wait_file(sync / f"go-{k}", 120.0)
        dist.barrier()
        for op, size, repeats in ph["points"]:
            numel = size // 4
            x = torch.ones(numel, dtype=torch.float32)
            out = torch.empty(n * numel, dtype=torch.float32) if op == "all_gather" else None
            ack = torch.zeros(1, dtype=torch.float32)
            gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor

            def call():
                if op == "p2p":
                    if rank == 0:
                        dist.send(x, 1)
                        dist.recv(ack, 1)
                    elif rank == 1:
                        dist.recv(x, 0)
                        dist.send(ack, 0)
                elif op == "all_reduce":
                    dist.all_reduce(x)
                elif op == "all_gather":
                    gather(out, x)
                else:
                    _ring_all_reduce_injected(x, rank, n, ph["inject_s"])

            times = []
            for i in range(1 + repeats):  # one warm-up call
                dist.barrier()
                t0 = time.perf_counter()
                call()
                dt = time.perf_counter() - t0
                if i:
                    times.append(dt)
            slow = torch.tensor(times, dtype=torch.float64)
            dist.all_reduce(slow, op=dist.ReduceOp.MAX)
            if rank == 0:
                v = slow.tolist()
                rows.append({"phase": k, "op": op, "size_bytes": size, "repeats": repeats,
                             "median_s": statistics.median(v), "min_s": min(v), "max_s": max(v)})
    if rank == 0:
        rows_file.write_text(json.dumps(rows))
    ctx.close()


# ------------------------------------------------------------------ the launcher


def _repeats(t_model: float) -> int:
    """More repeats where a call is short: about 1.5 s per point, 2 to 7 repeats."""
    return int(max(2, min(7, 1.5 / max(t_model, 1e-3))))


def _phases(rates: dict[str, float | None], n: int, max_point_s: float, inject_ms: float):
    """(phases the ranks run, skipped points, (rate, bits/s, latency) of each phase): one phase
    per link rate, and one with injected latency at 100 Mbit/s."""
    phases, skipped, meta = [], [], []
    for label, bps in rates.items():
        pts, skip = plan(bps, n, max_point_s)
        phases.append({"points": [(op, s, _repeats(model_terms(op, s, n)[1] / ((bps or UNSHAPED_BPS) / 8)))
                                  for op, s in pts], "inject_s": 0.0})
        meta.append((label, bps, "link"))
        skipped += [{"rate": label, **s} for s in skip]
    if "100Mbit" in rates and inject_ms > 0:
        bps = rates["100Mbit"]
        pts = [("ring_all_reduce_injected", s) for s in SIZES
               if model_terms("all_reduce", s, n)[1] / (bps / 8) <= max_point_s]
        phases.append({"points": [(op, s, 3) for op, s in pts], "inject_s": inject_ms / 1e3})
        meta.append(("100Mbit", bps, f"injected {inject_ms:g} ms/round"))
    return phases, skipped, meta


def _point_rows(raw: list[dict], meta: list[tuple], n: int) -> list[dict]:
    """One row per measured point, beside the model's rounds and bytes of its collective."""
    points = []
    for r in raw:
        label, bps, lat = meta[r["phase"]]
        rounds, nbytes = model_terms(r["op"], r["size_bytes"], n)
        points.append({"rate": label, "nominal_bps": bps or float("nan"), "latency": lat, "op": r["op"],
                       "size_bytes": r["size_bytes"], "repeats": r["repeats"], "median_s": r["median_s"],
                       "min_s": r["min_s"], "max_s": r["max_s"], "model_rounds": rounds, "model_bytes": nbytes,
                       "achieved_Bps": nbytes / r["median_s"]})
    return points


def _add_fits(fits: list[dict], points: list[dict], meta: list[tuple], n: int, inject_ms: float) -> None:
    """Fit alpha and beta per (rate, latency, op) with two points or more; an injected row is
    also read against the model whose alpha is the link's plus the injected latency."""
    for label, bps, lat in meta:
        for op in sorted({p["op"] for p in points if p["rate"] == label and p["latency"] == lat}):
            ps = [p for p in points if p["rate"] == label and p["latency"] == lat and p["op"] == op]
            if len(ps) < 2:
                continue
            alpha, beta, rms = fit_alpha_beta([p["model_rounds"] for p in ps], [p["model_bytes"] for p in ps],
                                              [p["median_s"] for p in ps])
            row = {"rate": label, "latency": lat, "op": op, "status": "measured", "points": len(ps),
                   "alpha_s": alpha, "beta_Bps": beta, "fit_rms_rel_err": rms,
                   "achieved_over_nominal": (beta * 8 / bps) if bps else float("nan")}
            if lat != "link":  # the injected rows against the model with alpha = link's + injected
                link = next((f for f in fits if f.get("rate") == label and f.get("latency") == "link"
                             and f.get("op") == "all_reduce"), None)
                if link:
                    from ..runtime.network import NetworkModel

                    m = NetworkModel(latency_s=link["alpha_s"] + inject_ms / 1e3, bandwidth_Bps=link["beta_Bps"])
                    errs = [m.all_reduce(p["size_bytes"], n) / p["median_s"] - 1 for p in ps]
                    row["model_err_mean"] = float(np.mean(errs))
                    row["model_err_maxabs"] = float(np.max(np.abs(errs)))
            fits.append(row)


def run_bench(n: int = 4, max_point_s: float = 1.5, inject_ms: float = 2.0,
              rates: dict[str, float | None] | None = None, timeout_s: float = 600.0,
              stream=None) -> tuple[list[dict], list[dict], list[dict]]:
    """(point rows, fit rows, skipped rows); see the module docstring."""
    from ..runtime.netns import ShapedCluster, run_ranks, unavailable

    rates = RATES if rates is None else rates
    why = unavailable()
    if why:
        print(f"netcheck: not run: {why}", file=sys.stderr)
        return ([], [{"rate": r, "latency": "link", "op": op, "status": f"not run: {why}"}
                     for r in rates for op in OPS], [])
    phases, skipped, meta = _phases(rates, n, max_point_s, inject_ms)
    with tempfile.TemporaryDirectory(prefix="distlab-netcheck-") as tmp:
        sync, out = Path(tmp), Path(tmp) / "rows.json"
        t0 = time.perf_counter()
        cluster = ShapedCluster(n, None)
        cluster.create()
        setup_s = time.perf_counter() - t0
        stop = threading.Event()

        def conductor():  # reshape between phases, then let the ranks go
            for k, (_, bps, _) in enumerate(meta):
                while not (sync / f"ready-{k}").exists():
                    if stop.wait(0.01):
                        return
                cluster.shape(bps)
                (sync / f"go-{k}").write_text("")

        th = threading.Thread(target=conductor, daemon=True)
        th.start()
        try:
            run_ranks(cluster, [sys.executable, "-m", "distlab", "netcheck", "--worker", "--sync", tmp,
                                "--out", str(out), "--phases", json.dumps(phases)], timeout_s, stream=stream)
        finally:
            stop.set()
            t1 = time.perf_counter()
            cluster.destroy()
            teardown_s = time.perf_counter() - t1
        raw = json.loads(out.read_text())
    points = _point_rows(raw, meta, n)
    fits = [{"rate": "-", "latency": "-", "op": f"namespaces setup / teardown ({n} ranks)", "status": "measured",
             "setup_s": setup_s, "teardown_s": teardown_s}]
    _add_fits(fits, points, meta, n, inject_ms)
    return points, fits, skipped


def write_outputs(points, fits, skipped, out: Path) -> None:
    import pandas as pd

    from ..results.tables import atomic_write_text, markdown_table

    out.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(points).to_csv(out, index=False)
    pd.DataFrame(fits).to_csv(out.with_name(out.stem + "_fit.csv"), index=False)
    pd.DataFrame(skipped).to_csv(out.with_name(out.stem + "_skipped.csv"), index=False)
    text = ("# Gloo on shaped links (measured, 4 ranks in network namespaces, this machine)\n\n"
            "## alpha-beta fit per collective\n\n" + markdown_table(pd.DataFrame(fits))
            + "\n\n## skipped points\n\n" + (markdown_table(pd.DataFrame(skipped)) if skipped else "none")
            + "\n\n## points\n\n" + (markdown_table(pd.DataFrame(points)) if points else "not run") + "\n")
    atomic_write_text(out.with_suffix(".md"), text)


def netcheck(out: Path, nprocs: int = 4, max_point_s: float = 1.5, inject_ms: float = 2.0) -> None:
    """The benchmark and its tables (``distlab netcheck --out X.csv``; its ranks run
    ``distlab netcheck --worker``)."""
    points, fits, skipped = run_bench(nprocs, max_point_s, inject_ms)
    write_outputs(points, fits, skipped, Path(out))
