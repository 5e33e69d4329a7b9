"""``distlab atlas <verb>``: the atlas's jobs and the query for a user's own cluster.

Verbs: ``technique`` (one technique's sweep and runs), ``reference`` (the DDP
reference), ``map`` (tables), ``figures``, ``bench`` (the step against a plain
AdamW step), ``query``.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..clihelp import JSON, OUT, PATH, PATHS, command


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


def _bench(a) -> int:
    from ..results.tables import write_table
    from .bench import step_overhead

    df = step_overhead(a.config, a.data, a.out.parent)
    write_table(df, a.out)
    print(df.to_string(index=False))
    return 0


def _query(a) -> int:
    import yaml

    from ..config.specs import SpecError
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


# the query's numbers may be negative (then refused by its own check, naming the option):
# a value such as -1Gbit/s is read as the option's value, not as an unknown option
_NEGATIVE_VALUE = re.compile(r"^-\.?\d")


def register(sub) -> None:
    p = sub.add_parser("atlas", help="the atlas: every technique on one task, mapped over clusters")
    s = p.add_subparsers(dest="atlas_cmd", required=True)
    job = {"config": {**JSON, "help": "the atlas: config section (JSON)"}, "data": PATH}
    command(s, "technique", _technique, "one technique's sweep and runs",
            technique={"required": True}, **job, out=OUT)
    command(s, "reference", _reference, "the DDP reference runs (against the bigram floor)", **job, out=OUT)
    command(s, "map", _map, "the map's tables from the runs", config=JSON, done=PATHS,
            reference={"required": True}, floors={"required": True}, out=OUT)
    command(s, "figures", _figures, "the map's figures", config=JSON, map={"required": True},
            out_strag=OUT, out_size=OUT, out_time=OUT)
    command(s, "bench", _bench, "the atlas step against a plain AdamW step of the same model (measured)",
            config=JSON, data=PATH, out=OUT)
    q = command(s, "query", _query, "rank the techniques on your cluster",
                params={"type": float, "required": True}, workers={"type": int, "required": True},
                bandwidth={"required": True, "help": "e.g. 1Gbit/s, 10Mb/s, 125MB/s"},
                latency={"required": True, "help": "e.g. 30ms, 10us"},
                stragglers={"default": "none",
                            "help": "none, exp:MEAN, pareto:MEAN[:SHAPE], persistent:X[:K], dead:K"},
                s={"type": int, "default": None, "help": "stragglers the codes tolerate (default: atlas.s)"},
                flops_per_s={"type": float, "default": None,
                             "help": "the device's FLOP rate (default: atlas.extrapolate)"},
                runs={"default": "results/atlas/techniques"}, config={"default": "config/config.yaml"})
    q._negative_number_matcher = _NEGATIVE_VALUE
