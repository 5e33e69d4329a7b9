"""Command line the Snakemake rules call: ``distlab <command> ...``.

Every setting arrives as an argument (a JSON run spec built by the rule from
its ``params``), never read from the config file behind Snakemake's back, so
that changing one experiment's setting reruns exactly that experiment.

Commands:
  prepare-data   build one data set into a directory (train/val/test + manifest)
  train          one training run (experiment baseline or pgc), either backend;
                 for gloo/nccl it launches itself under torchrun
  summarize      run directories -> a per-step table and a run-level table
  figures        an experiment's figures and tables from its summary tables
  scorecard      evaluate config/claims.yaml against the summary tables
  report         the reproduction write-up (paper/README.md) from the tables
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

log = logging.getLogger("distlab")


def _json_arg(text: str) -> dict:
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"not valid JSON: {e}") from e


def cmd_prepare_data(a: argparse.Namespace) -> int:
    from .data import prepare_dataset

    manifest = prepare_dataset(a.spec, a.out, seed=a.seed)
    log.info("data set %s ready in %s: %s", manifest["name"], a.out,
             {k: v["size"] for k, v in manifest["splits"].items()})
    return 0


TRAINERS = {
    "baseline": "distlab.train.dataparallel",
    "pgc": "distlab.pgc.train",
}


def _under_torchrun() -> bool:
    return "TORCHELASTIC_RUN_ID" in os.environ or ("RANK" in os.environ and "WORLD_SIZE" in os.environ)


def _nprocs(experiment: str, spec: dict) -> int:
    if experiment == "pgc":
        return int(spec["n"]) + 1  # a master and n workers
    return int(spec["n_workers"])


def cmd_train(a: argparse.Namespace) -> int:
    import importlib

    spec = a.spec
    module = importlib.import_module(TRAINERS[a.experiment])
    backend = spec.get("backend", "simulated")
    if backend == "simulated":
        module.run_simulated(spec, a.data, a.out)
        return 0
    if _under_torchrun():
        module.run_distributed(spec, a.data, a.out)
        return 0
    from .runtime.launch import run_torchrun

    nprocs = _nprocs(a.experiment, spec)
    try:
        run_torchrun(["train", "--experiment", a.experiment, "--spec", json.dumps(spec),
                      "--data", str(a.data), "--out", str(a.out)],
                     nprocs=nprocs, threads=a.threads,
                     timeout_s=float(spec.get("job_timeout_s", 3600)))
    except RuntimeError as e:
        # surface the cause (e.g. a worker that never answered) as the first line
        print(f"distlab: {str(e).splitlines()[0]}", file=sys.stderr)
        raise
    if not (Path(a.out) / "manifest.json").exists():
        raise RuntimeError(f"torchrun finished but {a.out}/manifest.json was not written")
    return 0


def cmd_summarize(a: argparse.Namespace) -> int:
    from .runs import write_csv
    from .summarize import collect

    runs = [Path(p) for p in a.runs]
    steps, summary = collect(runs)
    write_csv(steps, a.steps_out)
    write_csv(summary, a.summary_out)
    return 0


def cmd_figures(a: argparse.Namespace) -> int:
    import importlib

    mod = importlib.import_module(f"distlab.figures.{a.experiment}")
    mod.make(a.inputs, Path(a.out_dir), a.options)
    return 0


def cmd_scorecard(a: argparse.Namespace) -> int:
    from .scorecard import main_scorecard

    tables = dict(t.split("=", 1) for t in a.table)
    main_scorecard(a.claims, tables, a.stats, a.md, a.csv)
    return 0


def cmd_report(a: argparse.Namespace) -> int:
    from .report import write_report

    write_report(a.out, scorecard_csv=a.scorecard, meta=a.meta)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="distlab", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-v", "--verbose", action="store_true")
    sub = p.add_subparsers(dest="command", required=True)

    q = sub.add_parser("prepare-data", help="build one data set")
    q.add_argument("--spec", type=_json_arg, required=True)
    q.add_argument("--out", type=Path, required=True)
    q.add_argument("--seed", type=int, default=0)
    q.set_defaults(func=cmd_prepare_data)

    q = sub.add_parser("train", help="one training run")
    q.add_argument("--experiment", choices=sorted(TRAINERS), required=True)
    q.add_argument("--spec", type=_json_arg, required=True)
    q.add_argument("--data", type=Path, required=True)
    q.add_argument("--out", type=Path, required=True)
    q.add_argument("--threads", type=int, default=None,
                   help="threads for the whole job (split across torchrun processes)")
    q.set_defaults(func=cmd_train)

    q = sub.add_parser("summarize", help="run directories -> tidy tables")
    q.add_argument("--runs", nargs="+", required=True)
    q.add_argument("--steps-out", type=Path, required=True)
    q.add_argument("--summary-out", type=Path, required=True)
    q.set_defaults(func=cmd_summarize)

    q = sub.add_parser("figures", help="an experiment's figures and tables")
    q.add_argument("--experiment", required=True)
    q.add_argument("--inputs", type=_json_arg, required=True, help='{"name": "path", ...}')
    q.add_argument("--out-dir", type=Path, required=True)
    q.add_argument("--options", type=_json_arg, default={})
    q.set_defaults(func=cmd_figures)

    q = sub.add_parser("scorecard", help="evaluate the claims")
    q.add_argument("--claims", type=Path, required=True)
    q.add_argument("--table", action="append", default=[], help="name=path of a summary table")
    q.add_argument("--stats", type=_json_arg, required=True)
    q.add_argument("--md", type=Path, required=True)
    q.add_argument("--csv", type=Path, required=True)
    q.set_defaults(func=cmd_scorecard)

    q = sub.add_parser("report", help="the reproduction write-up")
    q.add_argument("--out", type=Path, required=True)
    q.add_argument("--scorecard", type=Path, required=True)
    q.add_argument("--meta", type=_json_arg, default={})
    q.set_defaults(func=cmd_report)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s", stream=sys.stderr)
    from .data import DataError

    try:
        return args.func(args)
    except DataError as e:  # one clear line, no traceback
        print(f"distlab: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
