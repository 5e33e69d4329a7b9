"""Command line the Snakemake rules call: ``distlab <command> ...``.

Every setting arrives as an argument (a JSON run spec built by the rule from
its ``params``), never read from the config file behind Snakemake's back, so
that changing one experiment's setting reruns exactly that experiment.

Commands:
  prepare-data   build one data set into a directory (train/val/test + manifest)
  data-floors    unigram and bigram cross-entropy floors of a prepared text data set
  train          one training run of an experiment, either backend; for gloo/nccl
                 it launches itself under torchrun (--print-torchrun shows how)
  summarize      run directories -> a per-step table and a run-level table
  figures        an experiment's figures and tables from its summary tables
  scorecard      evaluate config/claims.yaml against the summary tables
  report         the reproduction write-up (paper/README.md) from the tables
  stability      rerun the measured parts of the workflow and list every verdict that flips
  compare-snapshot   a make reproduce against the committed snapshot, row by row
  calibrate, allreduce, netcheck, techerror   the benchmarks (distlab.bench.cli): unit compute
                 cost, all-reduce bandwidth, collectives and the simulator's error on shaped links
  check-config   config files as snakemake --configfile reads them, each problem naming its file or key
  forkserver     run a command (make reproduce: snakemake) whose distlab jobs fork from one
                 process that has imported torch and the trainers (distlab.runtime.forkserver)
  pgc, placement, local, demo, atlas   each paper's own steps: `distlab <paper> <verb>` (its
                 Paper's cli plugin; the flat `<paper>-<verb>` names of the rule files also answer)

Every command follows one error contract (:mod:`distlab.clihelp`): a user's mistake is one
line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import sys
from pathlib import Path

from .clihelp import JSON, JSON_OPT, OUT, PATH, PATHS, PREFIX, call, command, json_arg
from .config.specs import SpecError
from .runtime import entry as _entry

log = logging.getLogger("distlab")


def cmd_prepare_data(a: argparse.Namespace) -> int:
    from .data import prepare_dataset

    manifest = prepare_dataset(a.spec, a.out, seed=a.seed)
    log.info("data set %s ready in %s: %s", manifest["name"], a.out,
             {k: v["size"] for k, v in manifest["splits"].items()})
    return 0


def cmd_data_floors(a: argparse.Namespace) -> int:
    from .data.floors import floors_of_prepared
    from .results.tables import write_table

    table = floors_of_prepared(a.data)
    write_table(table, a.out)
    log.info("floors of %s (nats/byte):\n%s", a.data, table.to_string(index=False))
    return 0


# Every paper (its trainer, torch-free spec module and command plugin) is found by its package
# (distlab.papers: each distlab/<package>/paper.py); each module is checked against its protocol
# (distlab.pipeline.paper: Trainer, DistributedTrainer, SpecModule, CliPlugin), not with hasattr.
# A trainer may also set nprocs(spec), work(spec) (the steps its deadline scales with, when not
# the spec's steps), expendable_ranks(spec) (each its protocol), NEEDS_DATA = False (no --data: placement's inputs
# are files its spec names) and SETS_THREADS = True (it sets torch's threads itself).
from .papers import papers, trainers
from .pipeline.paper import CountsProcesses, CountsWork, DistributedTrainer, LosesRanks, PaperError

# shared packages that add subcommands of their own through register(subparsers); each paper's
# plugin is its Paper's ``cli``
PLUGINS = ("distlab.bench.cli", "distlab.gpu.cli")


def _under_torchrun() -> bool:
    return "TORCHELASTIC_RUN_ID" in os.environ or ("RANK" in os.environ and "WORLD_SIZE" in os.environ)


def _trainer(experiment: str):
    try:
        return trainers()[experiment].trainer_module()
    except PaperError as e:
        raise SpecError(f"experiment {experiment!r}: {e}") from e


def _spec_module(experiment: str):
    """The paper's torch-free spec module (SpecModule), or None."""
    try:
        return trainers()[experiment].spec_module_loaded()
    except PaperError as e:
        raise SpecError(f"experiment {experiment!r}: {e}") from e


def preload(argv: list[str]) -> None:
    """Import what ``main(argv)`` imports for a run (torch, the experiment's trainer, and dynamo,
    which torch.optim imports at an optimizer's first call: seconds of CPU a process), so ranks
    forked after it (:func:`distlab.runtime.netns.run_shaped`) start from those imports."""
    import torch._dynamo  # noqa: F401

    if argv[:1] == ["train"] and "--experiment" in argv[:-1]:
        experiment = argv[argv.index("--experiment") + 1]
        if experiment in trainers():
            _trainer(experiment)


def _nprocs(module, spec: dict) -> int:
    """Processes of a real job: the trainer's nprocs(spec), else one per worker."""
    if isinstance(module, CountsProcesses):
        return int(module.nprocs(spec))
    return int(spec["n_workers"])


def _torchrun_args(a: argparse.Namespace, spec: dict, runtime: dict) -> list[str]:
    return ["train", "--experiment", a.experiment, "--spec", json.dumps(spec, sort_keys=True),
            "--runtime", json.dumps(runtime, sort_keys=True), "--data", str(a.data),
            "--out", str(a.out)]


def _work(spec: dict, data: str | None, module=None) -> int | None:
    """Steps the job runs (all its runs): its deadline scales with them (runtime.deadline)."""
    from .pipeline import jobs

    if isinstance(module, CountsWork):
        return int(module.work(spec))
    n = jobs.steps(spec, str(Path(data) / "manifest.json")) if data else None
    return n * jobs.runs(spec) if n else None


def cmd_train(a: argparse.Namespace) -> int:
    from .runtime.launch import run_torchrun, torchrun_command
    from .config.specs import runtime_defaults, validate_spec

    light = trainers()[a.experiment].spec_module is not None and not _under_torchrun()
    module = _spec_module(a.experiment) if light else _trainer(a.experiment)
    spec = validate_spec(a.spec, module.SPEC_SCHEMA, a.experiment)
    runtime = runtime_defaults(a.runtime)
    backend = spec.get("backend", "simulated")
    if light and backend == "simulated":
        module = _trainer(a.experiment)
    if a.data is None and getattr(module, "NEEDS_DATA", True):
        raise SpecError(f"train --experiment {a.experiment}: --data DIR (its prepared data set) is required")
    if a.print_torchrun:
        if backend == "simulated":
            raise SpecError("--print-torchrun: this spec runs on the simulated backend, in one process; "
                            "run the same command without --print-torchrun")
        cmd = torchrun_command(_torchrun_args(a, spec, runtime), _nprocs(module, spec))
        print(" ".join(shlex.quote(c) for c in cmd))
        return 0
    if backend == "simulated":
        # A simulated run's numbers must not depend on the job's threads (OMP_NUM_THREADS,
        # --cores, --set-threads): it computes on its spec's own count, one unless the spec
        # says otherwise (a timed local-learning run).
        if not getattr(module, "SETS_THREADS", False):
            import torch

            torch.set_num_threads(int(spec.get("threads", 1)))
        # the same job limit as a real job's launcher enforces
        from .runtime.deadline import JobTimeout, job_deadline

        try:
            with job_deadline(float(runtime["job_timeout_s"]), f"simulated {a.experiment} job",
                              work=_work(spec, a.data, module)):
                module.run_simulated(spec, a.data, a.out, runtime)
        except JobTimeout as e:
            print(f"distlab: {e}", file=sys.stderr)
            return 1
        return 0
    if not light and not isinstance(module, DistributedTrainer):
        raise SpecError(f"{a.experiment} spec: key 'backend': {backend!r} is not supported by this "
                        f"experiment (only 'simulated')")
    if _under_torchrun():
        module.run_distributed(spec, a.data, a.out, runtime)
        return 0
    try:
        # CUDA does not survive a fork once the parent has touched it: NCCL jobs use torchrun
        if runtime["launcher"] == "fork" and backend == "gloo":
            from .runtime.launch import run_forked

            if light:
                module = _trainer(a.experiment)
            # ranks the trainer can lose (PGC: up to s workers) do not end the job when they die
            ranks, most = module.expendable_ranks(spec) if isinstance(module, LosesRanks) else ((), 0)
            run_forked(lambda: module.run_distributed(spec, a.data, a.out, runtime),
                       nprocs=_nprocs(module, spec), threads=a.threads,
                       timeout_s=float(runtime["job_timeout_s"]), expendable=ranks, max_lost=most,
                       work=_work(spec, a.data))
        else:
            run_torchrun(_torchrun_args(a, spec, runtime), nprocs=_nprocs(module, spec),
                         threads=a.threads, timeout_s=float(runtime["job_timeout_s"]),
                         work=_work(spec, a.data))
    except RuntimeError as e:
        # the cause (the rank that died first and why) as the first line of the rule's log
        print(f"distlab: {e}", file=sys.stderr)
        return 1
    if not (Path(a.out) / "manifest.json").exists():
        raise RuntimeError(f"the real job finished but {a.out}/manifest.json was not written")
    return 0


def cmd_summarize(a: argparse.Namespace) -> int:
    from .results.runs import write_csv
    from .results.summarize import collect

    from .results.tables import write_table_record

    runs = [Path(p) for p in a.runs]
    steps, summary = collect(runs)
    write_csv(steps, a.steps_out)
    write_csv(summary, a.summary_out)
    write_table_record(a.summary_out, summary, runs)  # readers check it (tables.read_table_checked)
    return 0


def cmd_figures(a: argparse.Namespace) -> int:
    import importlib

    from .papers import paper

    try:
        mod = importlib.import_module(f"{paper(a.experiment).package}.figures")  # a registered paper's
    except PaperError as e:
        raise SpecError(f"figures --experiment {a.experiment}: {e}") from e
    mod.make(a.inputs, Path(a.out_dir), a.options)
    return 0


def cmd_scorecard(a: argparse.Namespace) -> int:
    from .scoring.scorecard import main_scorecard, merge_scorecards

    if a.merge:
        merge_scorecards(a.merge, a.md, a.csv)
        return 0
    if a.claims is None or a.stats is None:
        raise SpecError("scorecard: --claims and --stats are required unless --merge is given")
    tables = dict(t.split("=", 1) for t in a.table)
    main_scorecard(a.claims, tables, a.stats, a.md, a.csv, paper=a.paper, conditions_out=a.conditions_csv)
    return 0


def cmd_stability(a: argparse.Namespace) -> int:
    from .scoring.stability import run

    table = run(a.cores, a.out, extra=a.snakemake_args, papers=a.papers)
    flips, moved = table[table["flipped"]], table[table["moved"]]  # moved: the verdict held
    print(f"stability: {len(flips)} of {len(table)} verdicts flipped, {len(moved)} held with the estimate "
          f"outside its own interval; see {a.out}")
    return 1 if len(table[(table["flipped"] | table["moved"]) & ~table["measured"]]) else 0


def cmd_compare_snapshot(a: argparse.Namespace) -> int:
    from .scoring.compare_snapshot import run

    return run(a.snapshot, a.card)


def cmd_report(a: argparse.Namespace) -> int:
    from .scoring.report import write_report

    write_report(a.out, scorecard_csv=a.scorecard, meta=a.meta, claims=a.claims)
    return 0


def _yaml_kind(data) -> str:
    return {list: "list", str: "single string", int: "number", float: "number", bool: "boolean"}.get(
        type(data), type(data).__name__)


def cmd_check_config(a: argparse.Namespace) -> int:
    """Check config files as ``snakemake --configfile`` would read them over the default config,
    each problem one line naming its file or key.  Snakemake refuses an empty, comment-only or
    list-shaped file before the workflow runs, in words that do not name the file; this names it."""
    import yaml
    from snakemake.utils import update_config

    from .config.checks import config_errors
    from .config.yamlio import YamlLimitError, load_file_bounded, yaml_error_line

    root = Path(a.root)
    base = root / "config" / "config.yaml"
    problems, loaded = [], []
    if not base.is_file():  # run outside the repository: say where it looked
        problems.append(f"{base}: no default config here; run from the repository or give --root")
    for name in a.configfiles:
        path = Path(name)
        if not path.is_file():
            problems.append(f"{name}: no such file")
            continue
        try:
            data = load_file_bounded(path)
        except YamlLimitError as e:
            problems.append(str(e))
            continue
        except OSError as e:
            problems.append(f"{name}: cannot be read ({e.strerror or e})")
            continue
        except (yaml.YAMLError, UnicodeDecodeError) as e:  # its place, never the file's lines
            problems.append(f"{name}: not valid YAML ({yaml_error_line(e)[:160]})")
            continue
        if data is None:
            problems.append(f"{name}: empty or comments only; a config file holds keys at its top level, "
                            f"for instance `seeds: [0, 1]`")
        elif not isinstance(data, dict):
            problems.append(f"{name}: a YAML {_yaml_kind(data)}, not keys at its top level; write "
                            f"`key: value` lines, for instance `seeds: [0, 1]`")
        else:
            loaded.append(data)
    if not problems:
        from .config.checks import foreign_file_errors

        problems = foreign_file_errors([Path(n) for n in a.configfiles], root / "workflow" / "schemas", papers())
    if not problems:
        config = load_file_bounded(base)
        for data in loaded:
            update_config(config, data)  # Snakemake's own merge of --configfile over configfile:
        problems = config_errors(config, root / "workflow" / "schemas", root / "config" / "claims.yaml",
                                 config_files=[base, *map(Path, a.configfiles)], papers=papers())
    for line in problems:
        print(f"{PREFIX}: {line}", file=sys.stderr)
    if not problems:
        from .config.checks import config_notes

        for line in config_notes(config, papers()):  # accepted, but reaching some runs only
            print(f"{PREFIX}: note: {line}", file=sys.stderr)
        print(f"{', '.join(a.configfiles)}: valid over {base}")
    return 2 if problems else 0


def cmd_forkserver(a: argparse.Namespace) -> int:
    from .runtime.forkserver import serve, workflow_package

    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    if not cmd:
        raise SpecError("forkserver: no command to run; write e.g. "
                        "`python -m distlab forkserver -- snakemake --cores 2`")
    src = workflow_package(os.getcwd())
    if src:  # serve the distlab the workflow's jobs import: start again from its src/
        path = os.environ.get("PYTHONPATH")
        env = {**os.environ, "PYTHONPATH": src + (os.pathsep + path if path else "")}
        os.execve(sys.executable, [sys.executable, "-m", "distlab", *sys.argv[1:]], env)
    modules = (*(m for p in papers() for m in p.modules()), *PLUGINS, "distlab.plotting.plots", "distlab.scoring.scorecard", "distlab.results.summarize",
               "distlab.results.tables", "distlab.scoring.stats")
    return serve(cmd, main, modules, a.socket)


class OneLineParser(argparse.ArgumentParser):
    """A usage mistake is the error contract's one line (``distlab: <command>: <what>``) and exit
    status 2, not argparse's usage block first; ``--help`` still shows the usage."""

    def error(self, message: str):  # noqa: D401 - argparse's hook
        cmd = self.prog.split(" ", 1)[1] if " " in self.prog else ""
        print(f"{PREFIX}: {cmd + ': ' if cmd else ''}{' '.join(message.split())} "
              f"(see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)


def nest_flat_verbs(sub: argparse._SubParsersAction, name: str, added) -> None:
    """One style for every paper, ``distlab <paper> <verb>``: a plugin's flat verbs
    ``<paper>-<verb>`` (the rule files' command lines; changing those would rerun their jobs)
    also answer as ``<paper> <verb>``, the same parser under a second name."""
    flat = sorted(c for c in added if c.startswith(name + "-"))
    if not flat or name in sub.choices:
        return
    verbs = [c[len(name) + 1:] for c in flat]
    nested = sub.add_parser(name, help=f"{name}'s steps ({', '.join(verbs)}; also as {name}-<verb>)")
    nested_sub = nested.add_subparsers(dest=f"{name}_verb", required=True, metavar="VERB",
                                       help=", ".join(verbs))
    for flat_name, verb in zip(flat, verbs):
        nested_sub.choices[verb] = sub.choices[flat_name]


def _add_train(sub) -> None:
    """``train``: one training run."""
    q = sub.add_parser("train", help="one training run")
    q.add_argument("--experiment", choices=sorted(trainers()), required=True)
    q.add_argument("--spec", type=json_arg, required=True,
                   help="the run spec (JSON): every setting that changes the results")
    q.add_argument("--runtime", type=json_arg, default={},
                   help='run-time settings (JSON): {"timeout_s", "job_timeout_s", "checkpoint": '
                        '{"every_s", "every_steps"}}; they change no result')
    q.add_argument("--print-torchrun", action="store_true",
                   help="print the torchrun command of this job (one node) and exit; for several "
                        "nodes see the README")
    q.add_argument("--data", type=Path, default=None,
                   help="the prepared data set (every experiment but placement, whose spec names its inputs)")
    q.add_argument("--out", type=Path, required=True)
    q.add_argument("--threads", type=int, default=None,
                   help="threads for the whole job (split across torchrun processes)")
    q.set_defaults(func=cmd_train)


def _add_scorecard(sub) -> None:
    """``scorecard``: evaluate the claims (or merge per-paper scorecards)."""
    q = sub.add_parser("scorecard", help="evaluate the claims")
    q.add_argument("--claims", type=Path)
    q.add_argument("--table", action="append", default=[], help="name=path of a summary table")
    q.add_argument("--stats", type=json_arg)
    q.add_argument("--paper", default=None, help="evaluate only this paper's claims (P1..P4, foundation)")
    q.add_argument("--merge", nargs="+", default=None,
                   help="per-paper scorecard CSVs to merge into one (no evaluation)")
    q.add_argument("--md", type=Path, required=True)
    q.add_argument("--csv", type=Path, required=True)
    q.add_argument("--conditions-csv", type=Path, default=None,
                   help="where to write the evaluated preconditions and negative controls")
    q.set_defaults(func=cmd_scorecard)


def _add_reproduction_checks(sub) -> None:
    """``stability`` and ``compare-snapshot``: a reproduction checked again."""
    q = sub.add_parser("stability", help="rerun the measured parts, list the verdicts that flip")
    q.add_argument("--cores", type=int, default=os.cpu_count() or 2)
    q.add_argument("--out", type=Path, default=Path("paper/stability.md"))
    q.add_argument("--papers", nargs="+", default=None, metavar="PAPER",
                   help="only these papers' scorecards (foundation P1 P2 P3 P4; default: the whole scorecard)")
    q.add_argument("snakemake_args", nargs="*", help="passed on to snakemake (e.g. --configfile X)")
    q.set_defaults(func=cmd_stability)

    q = sub.add_parser("compare-snapshot", help="a make reproduce against the committed snapshot, row by row")
    q.add_argument("--snapshot", type=Path, default=Path("paper"),
                   help="the snapshot's folder (default paper/, as HEAD holds it: a run rewrites it in place)")
    q.add_argument("--card", type=Path, default=None,
                   help="this run's scorecard (default: paper/scorecard_stable.csv, else paper/scorecard.csv)")
    q.set_defaults(func=cmd_compare_snapshot)


def _add_tools(sub) -> None:
    """``check-config`` and ``forkserver``: the workflow's tools."""
    q = sub.add_parser("check-config", help="check config files as snakemake --configfile reads them, "
                       "naming the file of each problem")
    q.add_argument("configfiles", nargs="+", metavar="FILE")
    q.add_argument("--root", default=".", help="the repository (its config/, workflow/schemas/)")
    q.set_defaults(func=cmd_check_config)

    q = sub.add_parser("forkserver", help="run a command (snakemake) whose `python -m distlab` jobs are "
                       "forked from one process that has imported torch and the trainers")
    q.add_argument("--socket", default=None, help="the Unix socket (default: a fresh temporary one)")
    q.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- COMMAND",
                   help="the command to run under it, after --")
    q.set_defaults(func=cmd_forkserver)


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="distlab", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-v", "--verbose", action="store_true")
    sub = p.add_subparsers(dest="command", required=True)

    command(sub, "prepare-data", cmd_prepare_data, "build one data set", spec=JSON, out=OUT,
            seed={"type": int, "default": 0})
    command(sub, "data-floors", cmd_data_floors, "n-gram floors of a prepared text data set", data=PATH, out=OUT)

    _add_train(sub)

    command(sub, "summarize", cmd_summarize, "run directories -> tidy tables",
            runs=PATHS, steps_out=OUT, summary_out=OUT)
    command(sub, "figures", cmd_figures, "an experiment's figures and tables", experiment={"required": True},
            inputs={**JSON, "help": '{"name": "path", ...}'}, out_dir=OUT, options=JSON_OPT)

    _add_scorecard(sub)
    _add_reproduction_checks(sub)

    command(sub, "report", cmd_report, "the reproduction write-up", out=OUT, scorecard=PATH, meta=JSON_OPT,
            claims={"type": Path, "default": Path("config/claims.yaml")})

    _add_tools(sub)

    import importlib

    for plugin in PLUGINS:
        importlib.import_module(plugin).register(sub)
    for paper in papers():
        if paper.cli:
            before = set(sub.choices)
            paper.cli_plugin().register(sub)
            nest_flat_verbs(sub, paper.name, set(sub.choices) - before)
    return p


# ``DISTLAB_CPU_ISA=avx2``: every kernel on one instruction set (torch's own kernels, MKL's
# conditional numerical reproducibility, oneDNN), so that simulated numbers are bit for bit the
# same on any x86-64 machine with AVX2, not only the verdicts.  Opt-in: it costs speed on an
# AVX-512 machine (ResNet-18's step 1.7x slower here).  Read before torch is imported; a
# variable the user set already wins.
_ISA_PINS = {"avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2,STRICT", "ONEDNN_MAX_CPU_ISA": "AVX2"}}


def pin_cpu_isa(environ: dict | None = None) -> dict[str, str]:
    """Apply ``DISTLAB_CPU_ISA`` to ``environ`` (default ``os.environ``); return what it set."""
    env = os.environ if environ is None else environ
    want = env.get("DISTLAB_CPU_ISA", "").strip().lower()
    if not want:
        return {}
    if want not in _ISA_PINS:
        raise SpecError(f"DISTLAB_CPU_ISA={want!r}: supported: {sorted(_ISA_PINS)}")
    if environ is None and "torch" in sys.modules:
        raise SpecError("DISTLAB_CPU_ISA must take effect before torch is imported")
    done = {}
    for k, v in _ISA_PINS[want].items():
        if k not in env:
            env[k] = done[k] = v
    return done


def main(argv: list[str] | None = None) -> int:
    try:
        pin_cpu_isa()
    except SpecError as e:
        print(f"distlab: {e}", file=sys.stderr)
        return 2
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s", stream=sys.stderr)
    return call(args.func, args)  # a user's error: one clear line, exit 2, no traceback


# ranks the runtime forks run this dispatcher in-process (distlab.runtime.netns.run_shaped): it
# hands them its main and preload, as the runtime does not import a higher layer
_entry.register(main, preload)

if __name__ == "__main__":
    raise SystemExit(main())
