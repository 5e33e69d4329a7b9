"""``distlab atlas <verb>``: the atlas's jobs and the query for a user's own cluster.

Verbs: ``technique`` (one technique's sweep and runs), ``reference`` (the DDP
reference), ``map`` (tables), ``figures``, ``query``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def _json(text: str) -> dict:
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"not valid JSON: {e}") from e


def _technique(a) -> int:
    from .train import technique_job

    technique_job(a.config, a.technique, a.data, a.out)
    return 0


def _reference(a) -> int:
    from .train import reference_job

    reference_job(a.config, a.data, a.out)
    return 0


def _map(a) -> int:
    from .outputs import build_map

    build_map(a.config, a.done, a.reference, a.floors, a.out)
    return 0


def _figures(a) -> int:
    from .figures import time_vs_bandwidth, winner_maps

    d = Path(a.map)
    winner_maps(d / "winners.csv", list(a.config["straggler_axis"]), a.out_strag, a.out_size)
    time_vs_bandwidth(d / "cells.csv", d / "crossovers.csv", a.out_time)
    return 0


def _query(a) -> int:
    import yaml

    from ..specs import SpecError
    from .query import QueryError, format_ranking, parse_bandwidth, parse_latency, parse_stragglers, rank

    if not (a.params > 0):
        raise QueryError(f"--params: must be a positive number of parameters, got {a.params:g}")
    if a.workers < 2:
        raise QueryError(f"--workers: need at least 2, got {a.workers}")
    bw, lat = parse_bandwidth(a.bandwidth), parse_latency(a.latency)
    strag = parse_stragglers(a.stragglers, a.workers)
    try:
        cfg = yaml.safe_load(Path(a.config).read_text())["atlas"]
    except (OSError, KeyError, TypeError) as e:
        raise SpecError(f"--config: {a.config} has no readable atlas: section ({e})") from e
    done = sorted(Path(a.runs).glob("*/done.json"))
    if not done:
        raise QueryError(f"--runs: no atlas runs under {a.runs} (run `snakemake atlas` first)")
    from .outputs import load_runs

    recs = load_runs(done)
    ex = cfg["extrapolate"]
    flops = a.flops_per_s if a.flops_per_s is not None else (
        None if ex["flops_per_s"] == "measured" else float(ex["flops_per_s"]))
    tokens = int(cfg["batch_size"]) * int(next(iter(cfg["sizes"].values())).get("block_size", 32))
    df = rank(recs, float(cfg["target_loss"]), a.params, a.workers, bw, lat, strag, int(a.s if a.s is not None else cfg["s"]),
              flops, tokens, float(ex["max_params_ratio"]))
    print(f"target loss {cfg['target_loss']} nats/byte; {a.params:g} parameters, {a.workers} workers, "
          f"{bw * 8:.4g} bit/s, {lat:g} s latency, stragglers {strag}")
    print(f"compute at {df['flops_per_s'].iloc[0]:.4g} FLOP/s "
          f"({'given' if flops else 'measured on this machine'}); label per row")
    print(format_ranking(df))
    if (df["label"] == "extrapolated").any():
        print("extrapolated: step times from FLOP and byte arithmetic (message sizes scaled linearly in parameters "
              "from the largest measured size), steps to target from a fitted trend log k = a + b log P + c log N; "
              "the interval is the trend's residual error only")
    return 0


def register(sub) -> None:
    p = sub.add_parser("atlas", help="the atlas: every technique on one task, mapped over clusters")
    s = p.add_subparsers(dest="atlas_cmd", required=True)
    q = s.add_parser("technique", help="one technique's sweep and runs")
    q.add_argument("--config", type=_json, required=True, help="the atlas: config section (JSON)")
    q.add_argument("--technique", required=True)
    q.add_argument("--data", type=Path, required=True)
    q.add_argument("--out", type=Path, required=True)
    q.set_defaults(func=_technique)
    q = s.add_parser("reference", help="the DDP reference runs (against the bigram floor)")
    q.add_argument("--config", type=_json, required=True)
    q.add_argument("--data", type=Path, required=True)
    q.add_argument("--out", type=Path, required=True)
    q.set_defaults(func=_reference)
    q = s.add_parser("map", help="the map's tables from the runs")
    q.add_argument("--config", type=_json, required=True)
    q.add_argument("--done", nargs="+", required=True)
    q.add_argument("--reference", required=True)
    q.add_argument("--floors", required=True)
    q.add_argument("--out", type=Path, required=True)
    q.set_defaults(func=_map)
    q = s.add_parser("figures", help="the map's figures")
    q.add_argument("--config", type=_json, required=True)
    q.add_argument("--map", required=True)
    q.add_argument("--out-strag", type=Path, required=True)
    q.add_argument("--out-size", type=Path, required=True)
    q.add_argument("--out-time", type=Path, required=True)
    q.set_defaults(func=_figures)
    q = s.add_parser("query", help="rank the techniques on your cluster")
    q.add_argument("--params", type=float, required=True)
    q.add_argument("--workers", type=int, required=True)
    q.add_argument("--bandwidth", required=True, help="e.g. 1Gbit/s, 10Mb/s, 125MB/s")
    q.add_argument("--latency", required=True, help="e.g. 30ms, 10us")
    q.add_argument("--stragglers", default="none", help="none, exp:MEAN, pareto:MEAN[:SHAPE], persistent:X[:K], dead:K")
    q.add_argument("--s", type=int, default=None, help="stragglers the codes tolerate (default: atlas.s)")
    q.add_argument("--flops-per-s", type=float, default=None, help="the device's FLOP rate (default: atlas.extrapolate)")
    q.add_argument("--runs", default="results/atlas/techniques")
    q.add_argument("--config", default="config/config.yaml")
    q.set_defaults(func=_query)
