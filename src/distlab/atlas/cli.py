"""``distlab atlas <verb>``: the atlas's jobs and the query for a user's own cluster.

Verbs: ``technique`` (one technique's sweep and runs), ``reference`` (the DDP
reference), ``map`` (tables), ``figures``, ``bench`` (the step against a plain
AdamW step), ``profile`` (the stored compute profile), ``query``, ``pack`` (the recordings the
query reads, in one small file), ``query-bench`` (the query's wall time on a fixed set of queries).
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
    winner_maps(d / "winners.csv", dict(a.config["straggler_axis"]), a.out_strag, a.out_size)
    time_vs_bandwidth(d / "cells.csv", d / "crossovers.csv", a.out_time)
    return 0


def _measured(a) -> int:
    from .measured import compare, load_points, markdown

    print(markdown(compare(load_points())))
    return 0


def _bench(a) -> int:
    from ..results.tables import write_table
    from .bench import step_overhead

    df = step_overhead(a.config, a.data, a.out.parent)
    write_table(df, a.out)
    print(df.to_string(index=False))
    return 0


def _pack(a) -> int:
    from .pack import write_pack
    from .profile import mode

    info = write_pack(a.done, a.out, mode(a.config))
    print(f"{a.out}: {info['runs']} runs of {info['techniques']} techniques, {info['bytes']:,} bytes")
    return 0


def _query_bench(a) -> int:
    import json
    import tempfile

    from .querybench import bench

    with tempfile.TemporaryDirectory() as work:
        cfg = Path(work) / "atlas.json"   # the query reads a config file: the section as the rule passes it
        cfg.write_text(json.dumps({"atlas": a.config}))
        df = bench(str(cfg), a.runs, a.pack, a.out, a.md)
    print(df[["query", "seconds_runs", "seconds_pack", "exit"]].to_string(index=False))
    return 0


def _profile(a) -> int:
    import json
    import shlex
    import sys
    import tempfile

    import yaml

    from ..config.specs import SpecError
    from ..config.yamlio import YamlLimitError, load_user_file
    from ..results.tables import atomic_write_text
    from .profile import ROOT, merge, validate
    from .profiler import check_covers, measure

    from ..config.specs import COUNT_LIMITS

    for key, v in (("repeats", a.repeats), ("steps", a.steps)):  # bounded before anything runs
        if not 1 <= v <= COUNT_LIMITS[key]:
            raise SpecError(f"--{key}: {v:,}; give 1 .. {COUNT_LIMITS[key]:,}")
    techniques = None
    if a.techniques:
        from .spec import TECHNIQUES

        techniques = [t.strip() for t in a.techniques.split(",") if t.strip()]
        unknown = [t for t in techniques if t not in TECHNIQUES]
        if unknown:
            raise SpecError(f"--techniques: unknown {', '.join(unknown)}; known: {', '.join(TECHNIQUES)}")
    base = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    sections = []
    for path in a.config:
        try:
            over = load_user_file(path, "config file")
            section = merge(base, over if isinstance(over, dict) else {})["atlas"]
            section["sizes"], section["n_workers"], section["batch_size"]  # noqa: B018 (what a profile needs)
        except YamlLimitError as e:  # over a bound, not a regular file, not YAML: one line naming it
            raise SpecError(f"--config: {e}") from None
        except (OSError, yaml.YAMLError, KeyError, TypeError) as e:
            raise SpecError(f"--config: {path} gives no atlas section over config/config.yaml "
                            f"({type(e).__name__}: {e})") from None
        sections.append(section)
    command = "python -m distlab atlas profile " + " ".join(shlex.quote(x) for x in sys.argv[3:])
    with tempfile.TemporaryDirectory() as work:
        prof = validate(measure(sections, a.data, work, a.repeats, a.steps, command, techniques))
    for sec, path in zip(sections, a.config):
        lack = check_covers(prof, {**sec, "compute": "measured"}, techniques or None)
        if lack:
            raise SpecError(f"profile: {path}: not covered: {'; '.join(lack[:4])}")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(a.out, json.dumps(prof, indent=1, sort_keys=True) + "\n")
    print(f"{a.out}: {len(prof['sizes'])} sizes, {prof['provenance']['seconds']} s, load "
          f"{prof['provenance']['load']['loadavg_1_5_15_before']} -> {prof['provenance']['load']['loadavg_1_5_15_after']}")
    return 0


def _check_query_options(a) -> None:
    """Each option of `atlas query` in range, one line naming it where not."""
    import math

    from .projection import DTYPES, MAX_WORKERS, PRESETS
    from .query import QueryError

    def positive(name, v):
        if v is not None and not (math.isfinite(v) and v > 0):
            raise QueryError(f"--{name}: must be a positive finite number, got {v:g}")

    positive("params", a.params)
    positive("flops-per-s", a.flops_per_s)
    positive("tokens", a.tokens)
    positive("ddp-steps", a.ddp_steps)
    if a.mfu is not None and not (math.isfinite(a.mfu) and 0 < a.mfu <= 1):
        raise QueryError(f"--mfu: must be in (0, 1], got {a.mfu:g}")
    if not 2 <= a.workers <= MAX_WORKERS:
        raise QueryError(f"--workers: need 2 .. {MAX_WORKERS:,} (the projection simulates each worker), "
                         f"got {a.workers:,}")
    if a.s is not None and not 0 <= a.s < a.workers:
        raise QueryError(f"--s: need 0 <= s < workers = {a.workers}, got {a.s}")
    if a.buckets is not None and a.buckets < 1:
        raise QueryError(f"--buckets: need at least 1, got {a.buckets}")
    if a.device is not None and a.flops_per_s is not None:
        raise QueryError("--device: give --device or --flops-per-s, not both")
    if a.device is not None and a.device not in PRESETS:
        raise QueryError(f"--device: unknown {a.device!r}; presets: {', '.join(PRESETS)}")
    if a.dtype not in DTYPES:
        raise QueryError(f"--dtype: {a.dtype!r}; use {' or '.join(DTYPES)}")
    if a.format not in ("table", "csv"):
        raise QueryError(f"--format: {a.format!r}; use table or csv")
    if a.overlap not in ("on", "off"):
        raise QueryError(f"--overlap: {a.overlap!r}; use on or off")


def _query_config(path) -> tuple[dict, int, int, object]:
    """The atlas section of ``--config`` (read bounded) and what the query takes from it: the
    codes' s, the tokens per worker-step, the FLOP rate to extrapolate with."""
    import yaml

    from ..config.specs import SpecError
    from ..config.yamlio import YamlLimitError, load_user_file

    try:
        cfg = load_user_file(path, "config file")
        if not isinstance(cfg, dict):
            raise TypeError("not keys at its top level")
        cfg = cfg["atlas"]
        if not isinstance(cfg, dict):
            raise TypeError("atlas: is not a mapping")
        float(cfg["target_loss"])
        s_cfg = int(cfg["s"])
        tokens_cfg = int(cfg["batch_size"]) * int(next(iter(cfg["sizes"].values())).get("block_size", 32))
        rate_cfg = cfg.get("extrapolate", {}).get("flops_per_s", "measured")
    except YamlLimitError as e:
        raise SpecError(f"--config: {e}") from None
    except (OSError, KeyError, TypeError, ValueError, AttributeError, StopIteration, yaml.YAMLError) as e:
        raise SpecError(f"--config: {path} has no readable atlas: section ({type(e).__name__}: {e})") from None
    return cfg, s_cfg, tokens_cfg, rate_cfg


def _query_clock(a, recs, cfg, tokens_cfg, rate_cfg, link):
    """(the projected clock's settings, or None for the replay; the clock's description)."""
    from .profile import DEFAULT_PATH
    from .profile import mode as compute_mode
    from .projection import MFU_RANGE, PRESETS, ClockSettings, measured_flops_per_s

    # the replay at a measured size and N on this machine, unless a device or a clock setting is
    # asked for; else the projected clock
    asked = any(x is not None for x in (a.device, a.flops_per_s, a.mfu, a.tokens, a.buckets, a.link_fraction)) or \
        a.dtype != "fp32" or a.overlap != "on"
    measured = (float(a.params) == int(a.params)) and (int(a.params), a.workers) in {(r.n_params, r.n) for r in recs}
    device = ("replayed recordings: " + ("the stored compute profile " + str(cfg.get("compute_profile", DEFAULT_PATH))
                                         if compute_mode(cfg) == "stored" else "compute measured while they trained")
              + ", the runtime's network model")
    if not (asked or not measured):
        return None, device
    if a.flops_per_s is not None:
        rate, device = a.flops_per_s, f"{a.flops_per_s:.4g} FLOP/s (given)"
    elif a.device not in (None, "cpu"):
        rate, src = PRESETS[a.device]
        device = f"{a.device}: {src}"
    elif rate_cfg != "measured" and a.device is None:
        rate, device = float(rate_cfg), f"{float(rate_cfg):.4g} FLOP/s (atlas.extrapolate.flops_per_s)"
    else:
        rate, device = measured_flops_per_s(recs), (PRESETS["cpu"][1] if compute_mode(cfg) == "measured" else
                                                    "FLOPs / the stored compute profile's seconds of the DDP runs")
    preset = a.device not in (None, "cpu") and a.flops_per_s is None
    mfu = a.mfu if a.mfu is not None else (MFU_RANGE[1] if preset else 1.0)
    # a preset's datasheet peak carries the published MFU range; --mfu (or an achieved rate) is exact
    clock = ClockSettings(flops_per_s=float(rate), mfu=mfu, tokens=int(a.tokens or tokens_cfg), dtype=a.dtype,
                          overlap=a.overlap == "on", buckets=a.buckets,
                          mfu_range=MFU_RANGE if preset and a.mfu is None else None, link_range=link)
    device = (f"{device}; {rate:.4g} FLOP/s x MFU {mfu:g}" + (" (assumed for a preset's peak; --mfu)"
                                                               if a.mfu is None and mfu != 1.0 else ""))
    return clock, device


def _query(a) -> int:
    from .efficiency import parse_efficiency
    from .profile import apply as apply_profile
    from .projection import LINK_RANGE
    from .query import (QueryError, check_complete, format_ranking, parse_bandwidth, parse_latency,
                        parse_stragglers, rank)

    _check_query_options(a)
    link = _link_fraction(a.link_fraction, LINK_RANGE)
    bw, lat = parse_bandwidth(a.bandwidth), parse_latency(a.latency)
    strag = parse_stragglers(a.stragglers, a.workers)
    published = (a.efficiency or "").strip() == "published"
    eff = {} if published else parse_efficiency(a.efficiency)
    cfg, s_cfg, tokens_cfg, rate_cfg = _query_config(a.config)
    s = a.s if a.s is not None else s_cfg
    if not 0 <= s < a.workers:
        raise QueryError(f"--s: atlas.s = {s} needs 0 <= s < workers = {a.workers}; give --s")
    recs = apply_profile(check_complete(cfg, a.runs), cfg)  # atlas.compute: stored profile or measured
    cap = float(cfg.get("extrapolate", {}).get("max_params_ratio", float("inf"))) * max(r.n_params for r in recs)
    if a.params > cap:
        raise QueryError(f"--params: {a.params:g} is beyond atlas.extrapolate.max_params_ratio x the largest measured "
                         f"size ({cap:g}), even with --efficiency")
    clock, device = _query_clock(a, recs, cfg, tokens_cfg, rate_cfg, link)
    df, info = rank(recs, cfg, a.params, a.workers, bw, lat, strag, s, clock, eff,
                    use_published=published, ddp_steps=a.ddp_steps)
    if a.format == "csv":
        from .query import ranking_csv

        print(ranking_csv(df, info), end="")
        return 0
    print(f"target loss {info['target']} nats/byte; {a.params:g} parameters, {a.workers} workers, "
          f"{bw * 8:.4g} bit/s, {lat:g} s latency, stragglers {strag}, s = {s}")
    if clock is None:
        print(f"clock: {device}")
    else:
        print(f"clock (projected): {device}; {clock.tokens} tokens per worker per step; {clock.dtype} dense "
              f"messages (DeMo-family payloads their own); overlap of the bucketed all-reduce with the backward "
              f"pass {'on (' + (str(clock.buckets) + ' buckets' if clock.buckets else '25 MB buckets') + ')' if clock.overlap else 'off'}; "
              f"the master's link shared by its N sends and N - s receives")
    print(format_ranking(df, info))
    return 0


def _link_fraction(text: str | None, default: tuple[float, float]) -> tuple[float, float]:
    """``--link-fraction``: X or LO..HI, the link's achieved fraction of its nominal bandwidth, in (0, 1]."""
    from .query import QueryError

    if text is None:
        return default
    try:
        lo, hi = (float(x) for x in text.split("..")) if ".." in text else (float(text),) * 2
    except ValueError:
        raise QueryError(f"--link-fraction: cannot read {text!r}; write e.g. 0.9 or 0.5..1") from None
    if not (0 < lo <= hi <= 1):
        raise QueryError(f"--link-fraction: need 0 < LO <= HI <= 1, got {text!r}")
    return lo, hi


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
    command(s, "pack", _pack, "the recordings the query reads, in one small file (the snapshot carries it)",
            config=JSON, done=PATHS, out=OUT)
    command(s, "query-bench", _query_bench, "the query's wall time on a fixed set of queries (measured)",
            config=JSON, runs={"required": True}, pack={"required": True}, out=OUT, md=OUT)
    command(s, "measured", _measured, "the clock against the points measured over shaped links (docs/atlas_answer.md)")
    command(s, "bench", _bench, "the atlas step against a plain AdamW step of the same model (measured)",
            config=JSON, data=PATH, out=OUT)
    command(s, "profile", _profile, "measure the stored compute profile the atlas's clock charges (measured)",
            config={"nargs": "+", "default": ["config/config.yaml"],
                    "help": "configuration files, each merged over config/config.yaml: every atlas size, N "
                            "and technique they run is profiled"},
            data=PATH, out=OUT, repeats={"type": int, "default": 7}, steps={"type": int, "default": 20},
            techniques={"default": None, "help": "comma-separated (default: every technique)"})
    q = command(s, "query", _query, "rank the techniques on your cluster",
                params={"type": float, "required": True}, workers={"type": int, "required": True},
                bandwidth={"required": True, "help": "e.g. 1Gbit/s, 10Mb/s, 125MB/s"},
                latency={"required": True, "help": "e.g. 30ms, 10us"},
                stragglers={"default": "none",
                            "help": "none, exp:MEAN, pareto:MEAN[:SHAPE], persistent:X[:K], dead:K"},
                s={"type": int, "default": None, "help": "stragglers the codes tolerate (default: atlas.s)"},
                flops_per_s={"type": float, "default": None,
                             "help": "the device's achieved FLOP rate (default: atlas.extrapolate, or --device)"},
                device={"default": None, "help": "FLOP-rate preset: cpu (measured here), a100, h100, h200 "
                                                 "(datasheet dense bf16 peaks)"},
                mfu={"type": float, "default": None,
                     "help": "fraction of the FLOP rate achieved (default 0.5 with a GPU preset, else 1)"},
                tokens={"type": int, "default": None,
                        "help": "tokens per worker per step (default: atlas batch_size x block_size)"},
                dtype={"default": "fp32", "help": "dense message dtype: fp32 or bf16"},
                overlap={"default": "on", "help": "overlap the bucketed all-reduce with the backward pass: on/off"},
                buckets={"type": int, "default": None, "help": "all-reduce buckets (default: 25 MB each)"},
                link_fraction={"default": None,
                               "help": "the link's achieved fraction of its nominal bandwidth: X or LO..HI "
                                       "(default 0.5..1, measured over tc-shaped TCP: docs/atlas.md)"},
                efficiency={"default": None,
                            "help": "steps-to-target ratios against DDP: name=ratio,... or a YAML file, or "
                                    "'published' (the shipped ones with their citations)"},
                ddp_steps={"type": float, "default": None,
                           "help": "DDP's steps to the target at your size (default: the nearest measured)"},
                format={"default": "table", "help": "table (for people) or csv (one row per technique)"},
                runs={"default": "results/atlas/techniques",
                      "help": "the techniques' runs folder, or a pack of them (.json.gz: `atlas pack`; the "
                              "snapshot's paper/atlas/query_pack.json.gz)"},
                config={"default": "config/config.yaml"})
    q._negative_number_matcher = _NEGATIVE_VALUE
