"""``distlab placement-*`` subcommands (registered by ``distlab.cli``).  A search job, one method
on one model and device pair, is ``distlab train --experiment placement`` (:mod:`.train`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..clihelp import JSON, JSON_OPT, OUT, PATH, PATHS, command, guard, json_arg


def _placement_errors():
    """A malformed graph, cost profile or placement: the user's (one line, exit 2)."""
    from .costs import CostError
    from .graphfile import GraphError
    from .sim import PlacementError

    return (GraphError, CostError, PlacementError)


_guard = guard(_placement_errors)


@_guard
def cmd_graph(a):
    from .graphs import extract, save_graph

    g = extract(a.spec)
    save_graph(g, a.out)
    print(f"{a.spec['name']}: {g['n_nodes']} nodes, {g['n_edges']} edges (weights not nodes)")


@_guard
def cmd_profile(a):
    from distlab.results.tables import atomic_write_text

    from .costs import profile

    import torch

    p = profile(a.spec["model"], repeats=int(a.spec["repeats"]), warmup=int(a.spec["warmup"]),
                clock=a.spec.get("clock", "thread_cpu"))
    p["cuda_seconds"] = None
    if a.spec.get("cuda") and torch.cuda.is_available():  # a roofline device asks to be measured
        c = profile(a.spec["model"], repeats=int(a.spec["repeats"]), warmup=int(a.spec["warmup"]),
                    device="cuda")
        p["cuda_seconds"], p["cuda_device"] = c["seconds"], torch.cuda.get_device_name()
    atomic_write_text(a.out, json.dumps(p))
    print(f"{a.spec['model']['name']}: {p['total_seconds'] * 1e3:.1f} ms summed over {len(p['names'])} nodes")


@_guard
def cmd_summarize(a):
    from distlab.results.tables import write_checked_table

    from .figures import summarize

    df, curves = summarize(a.runs)
    # each with its record (the run files it summarises): readers refuse it cut short or a run gone
    write_checked_table(df, a.summary_out, a.runs)
    write_checked_table(curves, a.curves_out, a.runs)


@_guard
def cmd_tables(a):
    from .figures import write_ablation, write_tables

    (write_ablation if a.kind == "ablation" else write_tables)(a.summary, a.out_dir, a.options)


@_guard
def cmd_figure(a):
    from .figures import fig_curves, fig_placement

    if a.kind == "curves":
        fig_curves(a.inputs["curves"], a.out, a.options)
    else:
        fig_placement(a.inputs["run"], a.inputs["graph"], a.out, a.options)


@_guard
def cmd_real(a):
    from distlab.results.tables import atomic_write_text

    from .realexec import compare

    from ..runtime.deadline import JobTimeout
    from ..config.specs import runtime_defaults

    try:
        res = compare(a.spec, a.graph, a.profile, a.runs or [],
                      timeout_s=float(runtime_defaults(a.runtime)["job_timeout_s"]))
    except JobTimeout as e:
        print(f"distlab: {e}", file=sys.stderr)
        return 1
    atomic_write_text(a.out, json.dumps(res, indent=1))


@_guard
def cmd_real_table(a):
    from .realexec import error_table

    error_table(a.inputs, a.out_csv, a.out_md)


@_guard
def cmd_bench(a):
    from .realexec import sim_speed

    sim_speed(a.graph, a.profile, a.spec, a.out)


def cmd_place(a):
    import torch

    from . import api

    torch.set_num_threads(1)
    # the user's file runs in a watched child from its first import (a loop at its top level, a
    # factory that catches BaseException, os._exit: each one line, and nothing left running)
    return api.run_in_child(lambda: _place_here(a), a.model)


def _place_here(a) -> int:
    import torch

    from . import api

    try:
        inputs = api.example_inputs(a.input_shape, a.input_dtype, a.input_high)
        pair = api.default_pair() if a.pair is None else api.check_pair(a.pair)
        model = api.build_model(api.load_factory(a.model, a.timeout_s), a.model, a.timeout_s)
        placed = api.place(model, inputs, method=a.method, pair=pair, budget=a.budget, seed=a.seed,
                           repeats=a.repeats, timeout_s=a.timeout_s)
        with torch.no_grad():
            ref = api.run_user_code(lambda: model(*inputs), f"{a.model}: the model's forward", a.timeout_s)
            got = api.run_user_code(lambda: placed.module(*inputs), f"{a.model}: the placed model's forward",
                                    a.timeout_s)
        leaves = torch.utils._pytree.tree_leaves(ref)
        if not leaves or not all(isinstance(x, torch.Tensor) for x in leaves):
            got_what = ("None" if ref is None else f"a {type(ref).__name__} holding non-tensors" if leaves
                        else f"an empty {type(ref).__name__}")
            raise api.ModelError(f"the model's forward returned {got_what}; it must return a tensor "
                                 f"(or a tuple, list or dict of tensors)")
    except api.ModelError as e:
        print(f"distlab: {e}" if str(e).startswith("--") else f"distlab: {a.model}: {e}", file=sys.stderr)
        return 2
    try:
        placed.save(a.out)
    except OSError as e:
        print(f"distlab: --out {a.out}: cannot be written ({e.strerror or e})", file=sys.stderr)
        return 2
    same = all(torch.allclose(x, y, rtol=1e-5, atol=1e-6) for x, y in
               zip(torch.utils._pytree.tree_leaves(ref), torch.utils._pytree.tree_leaves(got)))
    counts = {d: list(placed.placement.values()).count(d) for d in dict.fromkeys(placed.placement.values())}
    print(f"{a.model}: {len(placed.placement)} operators placed by {a.method}: {counts}; simulated "
          f"{placed.latency_s * 1e3:.3f} ms; torch devices {placed.torch_devices}; "
          f"placed output {'equals' if same else 'DIFFERS FROM'} the original's; wrote {a.out}")
    return 0 if same else 1


def _whole(low: int, high: int | None = None):
    """argparse ``type=``: a whole number in [low, high] (a usage error names the range)."""
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if v < low or (high is not None and v > high):
            raise argparse.ArgumentTypeError(f"{v} is out of range: give {low} to {high:,}" if high is not None
                                             else f"{v} is out of range: give at least {low}")
        return v
    return parse


def _seconds(text: str) -> float:
    import math

    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(v) or v <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give a positive number of seconds")
    return v


@_guard
def cmd_space(a):
    from distlab.results.tables import write_table, write_table_record

    from .space import table

    df = table(a.spec, a.graphs, a.profiles, a.runs)
    write_table(df, a.out, a.md)
    write_table_record(a.out, df, list(a.runs or []))  # the scorecard's input: readers check it
    print(f"{len(df)} rows -> {a.out}")


@_guard
def cmd_regime(a):
    from distlab.results.tables import write_table, write_table_record

    from .regime import fig_regime, table

    from ..clihelp import fail

    try:
        df = table(a.spec, a.graphs, a.profiles)
    except ValueError as e:  # no pair, a pair without a roofline GPU, a graph without weighted operators
        return fail(e, "placement-regime")
    write_table(df, a.out, a.md)
    write_table_record(a.out, df)  # the scorecard's input (a model, no run): readers check it
    if a.fig is not None:
        fig_regime(df, a.fig, a.spec.get("paper_pct"))
    print(f"{len(df)} rows -> {a.out}")


@_guard
def cmd_realexec_cuda(a):
    import pandas as pd

    from distlab.results.tables import write_table
    from distlab.config.yamlio import load_yaml_strict

    from .cudaexec import run_models

    if a.repeats < 1 or a.warmup < 0 or a.budget < 0:
        from ..clihelp import fail

        return fail("--repeats must be >= 1, --warmup and --budget >= 0", "placement-realexec-cuda")
    cfg = load_yaml_strict(a.config)
    rows = run_models(cfg, a.models, a.pair, a.repeats, a.warmup, a.budget,
                      progress=lambda msg: print(msg, flush=True))
    df = pd.DataFrame(rows)
    write_table(df, a.out, a.md)
    print(df.to_string(index=False))


def register(sub: argparse._SubParsersAction) -> None:
    # the lists --help shows, without importing torch (api.py imports it): kept equal by a test
    METHODS = ("cpu_only", "gpu_only", "heft", "random", "rnn", "placeto", "hsdag", "hsdag_corrected")
    DEFAULT_TIMEOUT_S, MAX_BUDGET = 300.0, 1_000_000
    q = sub.add_parser("place", help="place your own model (path/to/file.py:factory or package.module:factory) on a device pair")
    q.add_argument("--model", required=True, help="path/to/file.py:factory or package.module:factory; the factory returns an nn.Module")
    q.add_argument("--input-shape", nargs="+", required=True, help="one per input, e.g. 1,3,224,224")
    q.add_argument("--input-dtype", nargs="+", default=None, help="torch dtype per input (default float32)")
    q.add_argument("--input-high", type=_whole(1), default=2, help="integer inputs are drawn from [0, high)")
    q.add_argument("--method", default="heft", choices=METHODS, metavar="METHOD",
                   help=f"one of {', '.join(METHODS)} (default heft)")
    q.add_argument("--pair", type=json_arg, default=None, help="a device pair as JSON (default: the config's default pair)")
    q.add_argument("--budget", type=_whole(1, MAX_BUDGET), default=200,
                   help="simulator evaluations of a searched method (default 200)")
    q.add_argument("--seed", type=_whole(0, 2**32 - 1), default=0)
    q.add_argument("--repeats", type=_whole(1, 1000), default=5, help="profiling rounds per operator")
    q.add_argument("--timeout-s", type=_seconds, default=DEFAULT_TIMEOUT_S,
                   help=f"the factory, and each pass of the model's forward, is stopped after this many "
                        f"seconds (default {DEFAULT_TIMEOUT_S:g}; profiling's rounds together get "
                        f"repeats + 1 times it)")
    q.add_argument("--out", type=Path, required=True, help="the name -> device JSON")
    q.set_defaults(func=cmd_place)

    b = sub.add_parser("placement-bench-hsdag", help="HSDAG's update time against its dense reference "
                                                     "(interleaved repeats, the ratio and the load; never asserted)")
    from .hsdag_bench import add_arguments, run

    add_arguments(b)
    b.set_defaults(func=run)

    command(sub, "placement-graph", cmd_graph, "trace a model's operator graph", spec=JSON, out=OUT)
    command(sub, "placement-profile", cmd_profile, "per-operator CPU times of a model",
            spec={**JSON, "help": '{"model": {...}, "repeats", "warmup"}'}, out=OUT)
    command(sub, "placement-summarize", cmd_summarize, "run files -> summary and curves tables",
            runs=PATHS, summary_out=OUT, curves_out=OUT)
    command(sub, "placement-tables", cmd_tables, "main / ablation tables",
            kind={"choices": ["main", "ablation"], "required": True}, summary=PATH, out_dir=OUT, options=JSON)
    command(sub, "placement-figure", cmd_figure, "one placement figure",
            kind={"choices": ["curves", "placement"], "required": True}, inputs=JSON, out=OUT, options=JSON)
    command(sub, "placement-real", cmd_real, "two CPU devices: measured vs simulated latency",
            spec=JSON, graph=PATH, profile=PATH, out=OUT,
            runs={"nargs": "*", "default": [], "help": "run files whose best placements are executed"},
            runtime=JSON_OPT)
    command(sub, "placement-real-table", cmd_real_table, "simulator error per model",
            inputs=PATHS, out_csv=OUT, out_md=OUT)
    command(sub, "placement-bench", cmd_bench, "simulator evaluations per second",
            spec=JSON, graph=PATH, profile=PATH, out=OUT)
    command(sub, "placement-space", cmd_space, "can each learner's clusters express HEFT's placement? (simulated)",
            spec={**JSON, "help": "JSON: pair, pair_name, sim_order, learners"},
            graphs={**JSON, "help": "JSON: model -> graph file"},
            profiles={**JSON, "help": "JSON: model -> profile file"},
            runs=PATHS, out=OUT, md={"type": Path, "default": None})
    command(sub, "placement-realexec-cuda", cmd_realexec_cuda,
            "CPU-only, GPU-only, HEFT, the serial optimum and HSDAG's placement run on this machine's CPU + CUDA device "
            "(serial), measured against the simulator; rows 'not run: no GPU' without CUDA",
            config={"type": Path, "default": Path("config/config.yaml")},
            models={"nargs": "+", "default": ["inception_v3", "resnet50", "bert"]},
            pair={"default": "cpu_h200"}, repeats={"type": int, "default": 5}, warmup={"type": int, "default": 2},
            budget={"type": int, "default": 200, "help": "HSDAG corrected's evaluations (0: no learner)"},
            out=OUT, md={"type": Path, "default": None})
    command(sub, "placement-regime", cmd_regime,
            "sweep the roofline GPU's conv/linear speed: where does a mixed placement pay? (simulated)",
            spec={**JSON, "help": "JSON: pair (device 1 a roofline), pair_name, ratios, heft, paper_pct"},
            graphs={**JSON, "help": "JSON: model -> graph file"},
            profiles={**JSON, "help": "JSON: model -> profile file"},
            out=OUT, md={"type": Path, "default": None}, fig={"type": Path, "default": None})
