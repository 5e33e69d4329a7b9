"""Shared fixtures: the embedded digits data set built once per test session."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
# OpenMP threads that wait sleep instead of spinning, in every process the session starts (the
# xdist workers inherit this, and from them every job, rank and Snakemake run): the suite runs
# three workers on two cores, so a torch process on two threads is mostly descheduled while its
# other thread spins at a barrier for it (libgomp's default spins up to ~300,000 times a wait,
# as it counts only its own threads against the cores).  Same threads, same work split, the
# same numbers; only the waiting changes.  A 2-thread MLP training loop on this 2-core machine
# with the cores busy: 151-257 s of CPU spinning against 6-7 s passive.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# SLURM on the machine that runs the suite, three cases:
# * no SLURM tool at all (a laptop, a fresh machine): the tests that need a SLURM client or a
#   controller skip, each with one line naming what to install (:func:`need_slurm`), unless
#   DISTLAB_REQUIRE_SLURM=1 (CI, which starts a cluster): then they fail;
# * sinfo without squeue and sacct: importing the SLURM executor plugin fails, and with it every
#   `snakemake` the suite starts: the session stops at once with one line (exit 2);
# * SLURM's client without a controller: Snakemake imports every installed executor plugin when
#   it starts, and the SLURM plugin's import runs `scontrol show config`, which retries for about
#   9 s before it fails, so every `snakemake` the suite starts waited 9 s doing nothing (on this
#   2-core machine: 954 s for the suite against 802 s with the controller up, the SLURM cluster
#   test included).  The session then puts a scontrol and a sinfo (those installed) that fail at
#   once first on PATH: what the real ones answer after their retries.
# A controller that answers (CI starts one) leaves PATH as it is.
NO_CONTROLLER_ENV = "DISTLAB_TEST_NO_SLURM_CONTROLLER"  # the stand-ins' folder, for xdist workers
REQUIRE_SLURM_ENV = "DISTLAB_REQUIRE_SLURM"  # "1": a test that needs SLURM fails where it would skip


def slurm_client_missing(path: str | None = None) -> str | None:
    """The suite's SLURM detection: one line naming what to install where ``path`` (default:
    $PATH) lacks SLURM's client tools (distlab.pipeline.slurmtools, what `snakemake --profile
    profiles/slurm` tells a user), else None."""
    from distlab.pipeline.slurmtools import client_problem

    return client_problem(path)


def need_slurm(why: str | None) -> None:
    """Skip the calling test with ``why`` (one line), or fail it under DISTLAB_REQUIRE_SLURM=1;
    nothing when ``why`` is None."""
    if why is None:
        return
    if os.environ.get(REQUIRE_SLURM_ENV) == "1":
        pytest.fail(f"{REQUIRE_SLURM_ENV}=1 but {why}", pytrace=False)
    pytest.skip(why)


def slurm_controller_answers(timeout_s: float = 5.0) -> bool:
    """Whether `scontrol ping` reports a controller UP within ``timeout_s``."""
    try:
        r = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "UP" in r.stdout


def stand_in_slurm_tools(folder: Path, tools=("scontrol", "sinfo")) -> Path:
    """``tools`` (of scontrol, sinfo) in ``folder``, each failing at once, naming why."""
    folder.mkdir(parents=True, exist_ok=True)
    for tool in tools:
        path = folder / tool
        path.write_text(f"#!/bin/sh\necho '{tool}: no SLURM controller answered when the test session "
                        "started (as root: scripts/slurm_up.sh starts one)' >&2\nexit 1\n")
        path.chmod(0o755)
    return folder


def pytest_configure(config):
    from distlab.pipeline.slurmtools import plugin_import_problem

    broken = plugin_import_problem()
    if broken:  # every snakemake the suite starts would fail on importing the SLURM plugin
        pytest.exit(broken, returncode=2)
    if os.environ.get(NO_CONTROLLER_ENV) or not shutil.which("scontrol"):
        return  # decided already (an xdist worker inherits the controller's PATH), or no client
    if slurm_controller_answers():
        return
    import tempfile

    tools = [t for t in ("scontrol", "sinfo") if shutil.which(t)]
    folder = stand_in_slurm_tools(Path(tempfile.mkdtemp(prefix="distlab-no-slurm-")), tools)
    os.environ[NO_CONTROLLER_ENV] = str(folder)
    os.environ["PATH"] = os.pathsep.join([str(folder), os.environ.get("PATH", "")])
    config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Every test starts with torch on one thread (a test that needs more sets them itself).
    The suite runs three workers on two cores, each with the jobs it starts beside it: torch's
    default of a thread a core then makes OpenMP's threads spin waiting for each other, and a
    small model's step costs 10-50x its single-threaded time (tests/test_batched.py and
    tests/test_demo_optim.py together: 240 CPU-s on two threads, 52 on one)."""
    import torch

    torch.set_num_threads(1)
    yield


def path_without_slurm(folder: Path) -> str:
    """A PATH with none of SLURM's tools: this interpreter's bin folder (python, snakemake) and
    ``folder`` holding links to the few system commands Snakemake and the SLURM plugin call
    (which, sh, bash, env, git)."""
    folder.mkdir(parents=True, exist_ok=True)
    for tool in ("which", "sh", "bash", "env", "git"):
        where = shutil.which(tool)
        if where and not (folder / tool).exists():
            (folder / tool).symlink_to(where)
    return os.pathsep.join([str(Path(sys.executable).parent), str(folder)])


@pytest.fixture(scope="session")
def digits_dir(tmp_path_factory) -> Path:
    from distlab.data import prepare_dataset

    out = tmp_path_factory.mktemp("data") / "digits"
    prepare_dataset({"name": "digits", "kind": "image", "source": "sklearn_digits",
                     "val_fraction": 0.1, "test_fraction": 0.2}, out, seed=0)
    return out


def pgc_spec(scheme: str, s: int, **over) -> dict:
    spec = {
        "experiment": "pgc", "group": "test", "scheme": scheme, "backend": "simulated",
        "n": 4, "s": s, "seed": 0, "model": {"name": "logreg"}, "lr": 0.1, "dtype": "float64",
        "batch_size": 16, "steps": 12, "eval_every": 4,
        "cluster": {"compute": {"mode": "calibrated", "unit_seconds": 0.5},
                    "network": {"latency_s": 0.001, "bandwidth_Bps": 1e9},
                    "straggler": {"model": "exponential", "mean": 1.0}},
        "checkpoint": {"every_s": 0, "every_steps": 0},
    }
    spec.update(over)
    return spec


def write_local_figure_inputs(folder: Path) -> None:
    """P3's figure inputs shaped like the workflow's, for the figure tests: throughput and memory
    of two methods with far-apart seeds (``tp.csv``) and the non-identifiability demonstration's
    result (``nonident.json``)."""
    import json

    import pandas as pd

    tp = pd.DataFrame([{"method": m, "seed": s, "tokens_per_s": t, "pss_mb": 1000.0 + s, "max_rss_mb": 1100.0,
                        "rss_sum_mb": 3100.0 + 40 * s}
                       for m, ts in [("bp", (2400, 2700, 3000)), ("rc-async", (900, 1000, 4200))]
                       for s, t in enumerate(ts)])
    tp.to_csv(folder / "tp.csv", index=False)
    res = {"toy": [{"h": h, "output": 1.0, "loss": 0.5625, "readout_grad": 1.5, "upstream_grad": 3.0 * h}
                   for h in (1.0, -1.0)],
           "model": [{"scale": sc, "report_rel_diff": 1e-4, "state_grad_rel_diff": 0.5, "section_grad_rel_diff": 0.3}
                     for sc in (0.5, 2.0)],
           "source": {"n_layer": 24, "sections": 4}}
    (folder / "nonident.json").write_text(json.dumps(res))


def tracked_copy(dest: Path) -> Path:
    """The repository's tracked and untracked-but-not-ignored files, copied to ``dest``
    (what a fresh clone would hold, plus work in progress), without the committed paper/: as
    ``make reproduce`` leaves a clone before Snakemake starts (scripts/snapshot.py ``clear``:
    Snakemake would take the committed pages for done and plan none of the runs behind them)."""
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                           cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    for f in files:
        if f.startswith("paper/"):
            continue
        src = ROOT / f
        if src.is_file():
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / f)
    return dest


_WORKFLOW_TREE: list[Path] = []


def workflow_tree() -> Path:
    """A fresh clone's files (:func:`tracked_copy`), made once per test process and removed at
    its exit: where the suite's dry runs run, so that none reads the results of the working
    tree or writes Snakemake's files (``.snakemake/``) into it, before or after
    ``make reproduce``."""
    if not _WORKFLOW_TREE:
        import atexit
        import tempfile

        base = Path(tempfile.mkdtemp(prefix="distlab-workflow-"))
        atexit.register(shutil.rmtree, base, True)
        _WORKFLOW_TREE.append(tracked_copy(base / "repo"))
    return _WORKFLOW_TREE[0]


@pytest.fixture(scope="session")
def clean_tree() -> Path:
    """A fresh clone's files in a temporary folder, for dry-runs that must not read (or
    depend on) the results the working tree holds after ``make reproduce``: the process's
    :func:`workflow_tree`, where the Snakemake helpers run by default."""
    return workflow_tree()


# the README's collective targets, and the benchmarks outside `all`
NAMED_TARGETS = ("figures", "tables", "paper", "scorecard", "demo_bench", "demo_bench_gpu")


def fake_results(work: Path, targets=NAMED_TARGETS + ("all",), forceall: bool = False) -> int:
    """Every output of ``targets`` written as a placeholder (a data manifest with splits,
    ``{}`` for other JSON, empty otherwise) and marked up to date (``snakemake --touch``):
    a tree as ``make reproduce`` leaves it, without running a job.  With ``forceall`` every
    job is touched, so each records its provenance (params, inputs) as if it had run.
    Returns the count."""
    import json

    env = {**os.environ, "PATH": bin_path(), "HF_DATASETS_OFFLINE": "1"}
    r = subprocess.run(["snakemake", "--summary", "--forceall", *targets], cwd=work, env=env,
                       capture_output=True, text=True, timeout=600, check=True)
    rows = [line.split("\t") for line in r.stdout.splitlines()[1:] if "\t" in line]
    for row in rows:
        path = work / row[0]
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.name == "manifest.json" and path.parts[-3] == "data":
            path.write_text(json.dumps({"num_classes": 10, "image_shape": [1, 8, 8],
                                        "splits": {k: {"size": 100} for k in ("train", "val", "test")}}))
        else:
            path.write_text("{}" if path.suffix == ".json" else "")
    subprocess.run(["snakemake", "--touch", "--cores", "1", *(["--forceall"] if forceall else []), *targets],
                   cwd=work, env=env, capture_output=True, text=True, timeout=900, check=True)
    return len(rows)


@pytest.fixture(scope="session")
def results_tree(tmp_path_factory) -> Path:
    """A fresh clone's files with every default target's outputs present and up to date, and
    every job's provenance recorded (``fake_results(forceall=True)``: as if each job had run).
    Made once a session and only dry-run afterwards: test_workflow's tree as after ``make
    reproduce`` and test_spec_complete's touched tree (its overlays changed settings against
    this one) are the same tree, so the two Snakemake passes over the whole default workflow
    that make it run once, not twice (about 30 s of CPU)."""
    work = tracked_copy(tmp_path_factory.mktemp("with_results") / "repo")
    assert fake_results(work, forceall=True) > 100
    return work


def makefile_scratch(tmp_path: Path) -> tuple[Path, Path]:
    """(work, bindir): the Makefile and scripts/snapshot.py in a scratch folder, and stand-ins for it:
    ``python`` (this interpreter) and a ``snakemake`` that writes its arguments, one a line, to
    work/snakemake.args and exits 0, so a test sees whether (and how) Snakemake was started."""
    work, bindir = tmp_path / "work", tmp_path / "bin"
    work.mkdir()
    bindir.mkdir()
    shutil.copy(ROOT / "Makefile", work / "Makefile")
    (work / "scripts").mkdir()  # the recipes' helper (paper/'s assembly, make dryrun's forced rules)
    shutil.copy(ROOT / "scripts/snapshot.py", work / "scripts/snapshot.py")
    (bindir / "python").write_text(f"#!/bin/sh\nexec {sys.executable} \"$@\"\n")
    (bindir / "snakemake").write_text(f"#!/bin/sh\nprintf '%s\\n' \"$@\" > {work}/snakemake.args\nexit 0\n")
    for f in bindir.iterdir():
        f.chmod(0o755)
    return work, bindir


def bin_path() -> str:
    """PATH with this interpreter's bin directory first (snakemake, distlab)."""
    return os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])


# a workflow run's jobs forked from one preloaded process, as `make reproduce` runs them
# (distlab.runtime.forkserver): about 4 s less a job
FORKSERVER = [sys.executable, "-m", "distlab", "forkserver", "--"]


def example_env(**extra: str) -> dict:
    """The environment an example script runs in under a test: this checkout's src/ first, the
    venv's bin on PATH, one thread."""
    return {**os.environ, "PATH": bin_path(), "OMP_NUM_THREADS": "1",
            "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""), **extra}


def run_example_torchrun(script: str, args: list[str], cwd: Path, nproc: int = 2,
                         timeout: float = 300) -> subprocess.CompletedProcess:
    """``examples/<script>`` under ``torchrun --standalone`` on ``nproc`` local processes."""
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
                           str(nproc), str(ROOT / "examples" / script), *args],
                          env=example_env(), capture_output=True, text=True, timeout=timeout, cwd=cwd)


def build_test_atlas(root: Path, section: dict, data_dir: Path, lr) -> Path:
    """Train every run a (test-sized) ``atlas:`` section asks for under ``root/techniques``, each
    technique's ``done.json`` listing its runs, then set the section's target to the highest loss
    every run reaches (so every technique reaches it on every seed) and write it to
    ``root/cfg.yaml``.  ``lr``: one learning rate, or a technique -> learning rate mapping."""
    import json

    import yaml

    from distlab.atlas import train
    from distlab.atlas.workflow import run_specs

    mins = []
    for t in section["techniques"]:
        runs = []
        for label, spec in run_specs(section, t, lr[t] if isinstance(lr, dict) else lr, None):
            d = root / "techniques" / t / "runs" / label
            train.run_simulated(spec, data_dir, d)
            runs.append(str(d))
            mins.append(min(s["val_loss"] for s in json.loads((d / "record.json").read_text())["steps"]
                            if s.get("val_loss") is not None))
        (root / "techniques" / t / "done.json").write_text(json.dumps({"runs": runs}))
    section["target_loss"] = float(max(mins)) + 1e-9
    cfg = root / "cfg.yaml"
    cfg.write_text(yaml.safe_dump({"atlas": section}))
    return cfg


@pytest.fixture(scope="session")
def tiny_workflow(tmp_path_factory):
    """One end-to-end run of the whole workflow (`snakemake --cores 2`, every paper) on
    tests/configs/tiny.yaml in a fresh copy of the repository, shared by each paper's
    end-to-end test: (work folder, completed process).  A test that edits the config
    writes its own copy (:func:`tiny_variant`) so the others see the run as it was."""
    work = tracked_copy(tmp_path_factory.mktemp("tiny") / "repo")
    env = {**os.environ, "PATH": bin_path(), "HF_DATASETS_OFFLINE": "1"}
    r = subprocess.run([*FORKSERVER, "snakemake", "--cores", "2", "--configfile", "tests/configs/tiny.yaml"],
                       cwd=work, env=env, capture_output=True, text=True, timeout=3000)
    return work, r


def tiny_variant(work: Path, name: str, edit) -> str:
    """A copy of the tiny config with ``edit(dict)`` applied, as a --configfile path."""
    import yaml

    data = yaml.safe_load((work / "tests/configs/tiny.yaml").read_text())
    edit(data)
    path = work / "tests/configs" / f"tiny_{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path.relative_to(work))


_SNAKEMAKE_LOOP = """
import json, sys
from snakemake.cli import main
for args in json.loads(sys.argv[1]):
    for stream in (sys.stdout, sys.stderr):
        print("=== snakemake " + " ".join(args), file=stream, flush=True)
    try:
        main(args)
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    for stream in (sys.stdout, sys.stderr):
        print("=== exit %s" % code, file=stream, flush=True)
"""


def snakemake_runs(arglists, cwd: Path | None = None, timeout: float = 600) -> list[subprocess.CompletedProcess]:
    """``snakemake *args`` for each of ``arglists``, one after the other in one interpreter
    (Snakemake's own command-line ``main``: the interpreter's and Snakemake's start-up, about
    three quarters of a dry run's time, are paid once): a CompletedProcess for each, with
    its own exit code, stdout and stderr."""
    import json

    arglists = [[str(a) for a in args] for args in arglists]
    r = subprocess.run([sys.executable, "-c", _SNAKEMAKE_LOOP, json.dumps(arglists)], cwd=cwd or workflow_tree(),
                       capture_output=True, text=True, timeout=timeout,
                       env={**os.environ, "PATH": bin_path(), "PYTHONPATH": str(ROOT / "src"),
                            "HF_DATASETS_OFFLINE": "1"})
    outs = [x.split("=== snakemake ")[1:] for x in (r.stdout, r.stderr)]
    assert all(len(o) == len(arglists) for o in outs), (r.stdout + r.stderr)[-3000:]
    done = []
    for args, out, err in zip(arglists, *outs):
        head = " ".join(args) + "\n"
        assert out.startswith(head) and err.startswith(head), (out[:300], err[:300])
        body, _, code = out[len(head):].rstrip().rpartition("=== exit ")
        done.append(subprocess.CompletedProcess(["snakemake", *args], int(code), body,
                                                err[len(head):].rstrip().rpartition("=== exit ")[0]))
    return done


def dry_runs(paths, cwd: Path | None = None, timeout: float = 600) -> dict[str, tuple[int, str]]:
    """``snakemake -n --configfile P`` for each of ``paths`` in one interpreter
    (:func:`snakemake_runs`): ``{str(P): (exit code, its output, stdout then stderr)}``."""
    paths = [str(p) for p in paths]
    runs = snakemake_runs([["-n", "--configfile", p] for p in paths], cwd, timeout)
    return {p: (r.returncode, r.stdout + r.stderr) for p, r in zip(paths, runs)}


# each paper's own target and the default one, dry-run with --forceall on both shipped configs
TARGET_DRY_RUNS = {
    (target, configfile): [*([target] if target else []), "-n", "--forceall",
                           *(["--quiet", "rules"] if target != "placement" else []), "--configfile", configfile]
    for target in ("", "demo", "local_learning", "placement")
    for configfile in ("config/config.yaml", "config/paper.yaml")
}
TARGET_DRY_RUNS[("netcheck", "config/config.yaml")] = ["netcheck", "-n", "--forceall", "--quiet", "rules",
                                                      "--configfile", "config/config.yaml"]


@pytest.fixture(scope="session")
def target_dry_runs(clean_tree) -> dict[tuple[str, str], subprocess.CompletedProcess]:
    """The dry runs of :data:`TARGET_DRY_RUNS` in a fresh copy of the repository, all in one
    interpreter: ``{(target, configfile): completed process}`` (target "" is the default)."""
    keys = list(TARGET_DRY_RUNS)
    return dict(zip(keys, snakemake_runs([TARGET_DRY_RUNS[k] for k in keys], cwd=clean_tree, timeout=1800)))


@pytest.fixture(scope="session")
def pydoc_dir(tmp_path_factory) -> Path:
    """The tiny text data set (the embedded pydoc topics), built once per test session."""
    from distlab.data import prepare_dataset

    out = tmp_path_factory.mktemp("data") / "pydoc"
    prepare_dataset({"name": "pydoc", "kind": "text", "source": "pydoc_topics", "val_fraction": 0.05,
                     "test_fraction": 0.05}, out, seed=0)
    return out


# Under pytest-xdist (`make test` runs two workers), a session or module fixture is built
# once per worker that asks for it: the tests sharing an expensive one run on one worker
# (--dist loadgroup), so the tiny end-to-end run, the dry-run trees, the ResNet-18 gloo jobs
# and the refused dry runs are built once, not twice.  ``tree`` asks for a tree through
# request.getfixturevalue, which the test's fixture names do not show: it is named here.  The
# tree with results (``results_tree``, also the spec-completeness test's touched tree, 25 dry
# runs) is a group of its own with the tests that read it, so another worker can take the dry-run
# trees.
# The atlas test modules' ``atlas`` fixtures (module scope, a minute to train) are built once
# per worker that runs one of their tests: one group, one worker, each built once.  So are P3's
# instruction-set reruns (test_local_isa's ``isa_runs``: two processes for its five tests).
_SHARED_FIXTURES = {"tiny_workflow": "tiny", "results_tree": "spec", "target_dry_runs": "trees",
                    "clean_tree": "trees", "tree": "spec", "resnet_gloo_runs": "resnet",
                    "dry_run_outputs": "dryruns", "touched_tree": "spec", "atlas": "atlas",
                    "isa_runs": "isa"}


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """The group goes into the test's id as ``<id>@<group>``, the suffix xdist's loadgroup
    scheduler reads.  xdist 3.8 writes it to ``item._nodeid``, which pytest 9 (pinned in
    envs/requirements.txt) no longer reads (its id is ``item._id``), so xdist's own
    ``xdist_group`` marker groups nothing here: the suffix is set on ``_id``."""
    if not getattr(config.option, "loadgroup", False):  # a worker of --dist loadgroup only
        return
    from _pytest.nodeid import coerce_node_id

    for item in items:
        group = next((g for f, g in _SHARED_FIXTURES.items() if f in getattr(item, "fixturenames", ())), None)
        if group is not None:
            item._id = coerce_node_id(f"{item.nodeid}@{group}")
