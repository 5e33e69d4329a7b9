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
    from distlab.results.tables import write_table

    from .figures import summarize

    df, curves = summarize(a.runs)
    write_table(df, a.summary_out)
    write_table(curves, a.curves_out)


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
    try:
        model = api.load_factory(a.model)()
        inputs = api.example_inputs(a.input_shape, a.input_dtype, a.input_high)
        pair = api.default_pair() if a.pair is None else a.pair
        placed = api.place(model, inputs, method=a.method, pair=pair, budget=a.budget, seed=a.seed,
                           repeats=a.repeats)
    except api.ModelError as e:
        print(f"distlab: {a.model}: {e}" if not str(e).startswith("--model") else f"distlab: {e}",
              file=sys.stderr)
        return 2
    placed.save(a.out)
    with torch.no_grad():
        ref, got = model(*inputs), placed.module(*inputs)
    same = all(torch.allclose(x, y, rtol=1e-5, atol=1e-6) for x, y in
               zip(torch.utils._pytree.tree_leaves(ref), torch.utils._pytree.tree_leaves(got)))
    counts = {d: list(placed.placement.values()).count(d) for d in dict.fromkeys(placed.placement.values())}
    print(f"{a.model}: {len(placed.placement)} operators placed by {a.method}: {counts}; simulated "
          f"{placed.latency_s * 1e3:.3f} ms; torch devices {placed.torch_devices}; "
          f"placed output {'equals' if same else 'DIFFERS FROM'} the original's; wrote {a.out}")
    return 0 if same else 1


@_guard
def cmd_space(a):
    from distlab.results.tables import write_table

    from .space import table

    df = table(a.spec, a.graphs, a.profiles, a.runs)
    write_table(df, a.out, a.md)
    print(f"{len(df)} rows -> {a.out}")


def register(sub: argparse._SubParsersAction) -> None:
    q = sub.add_parser("place", help="place your own model (path/to/file.py:factory or package.module:factory) on a device pair")
    q.add_argument("--model", required=True, help="path/to/file.py:factory or package.module:factory; the factory returns an nn.Module")
    q.add_argument("--input-shape", nargs="+", required=True, help="one per input, e.g. 1,3,224,224")
    q.add_argument("--input-dtype", nargs="+", default=None, help="torch dtype per input (default float32)")
    q.add_argument("--input-high", type=int, default=2, help="integer inputs are drawn from [0, high)")
    q.add_argument("--method", default="heft", help="cpu_only, gpu_only, heft, random, rnn, placeto, hsdag, hsdag_corrected")
    q.add_argument("--pair", type=json_arg, default=None, help="a device pair as JSON (default: the config's default pair)")
    q.add_argument("--budget", type=int, default=200)
    q.add_argument("--seed", type=int, default=0)
    q.add_argument("--repeats", type=int, default=5, help="profiling rounds per operator")
    q.add_argument("--out", type=Path, required=True, help="the name -> device JSON")
    q.set_defaults(func=cmd_place)

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
