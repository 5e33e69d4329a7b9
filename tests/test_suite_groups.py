"""`make test` runs the suite on two pytest-xdist workers; the tests sharing an expensive session
fixture (the tiny end-to-end run) must run on one worker, or each worker builds it again."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_tests_sharing_the_tiny_run_land_on_one_worker(tmp_path):
    (tmp_path / "conftest.py").write_text(  # the suite's own hook, from its conftest
        "import importlib.util\n"
        f"spec = importlib.util.spec_from_file_location('suite_conftest', {str(ROOT / 'tests/conftest.py')!r})\n"
        "suite = importlib.util.module_from_spec(spec)\nspec.loader.exec_module(suite)\n"
        "pytest_collection_modifyitems = suite.pytest_collection_modifyitems\n")
    body = "import os, pytest\n\n@pytest.fixture(scope='session')\ndef tiny_workflow():\n    return 1\n\n"
    body += "".join(f"def test_shared_{i}(tiny_workflow):\n    pass\n\n" for i in range(4))
    body += "".join(f"def test_alone_{i}():\n    pass\n\n" for i in range(4))
    (tmp_path / "test_groups.py").write_text(body)
    r = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-v", "-p", "no:cacheprovider",
                        "-o", "addopts=", str(tmp_path)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:]
    workers = {m.group(2): m.group(1) for m in re.finditer(r"\[(gw\d)\].*PASSED \S*::(test_\w+)", r.stdout)}
    assert len(workers) == 8, r.stdout[-2000:]
    assert len({workers[f"test_shared_{i}"] for i in range(4)}) == 1, workers


def test_without_a_slurm_controller_the_stand_ins_fail_at_once_and_the_slurm_plugin_reads_a_failure(tmp_path):
    """Where SLURM's client has no controller, the suite's stand-in scontrol and sinfo fail at once
    and the SLURM executor plugin's probe reads that as it reads a real failure (no MinJobAge)."""
    from conftest import need_slurm, slurm_client_missing, stand_in_slurm_tools

    need_slurm(slurm_client_missing())  # the plugin's import needs squeue or sacct beside sinfo
    folder = stand_in_slurm_tools(tmp_path / "bin")
    env = {**os.environ, "PATH": os.pathsep.join([str(folder), os.environ["PATH"]])}
    for tool in ("scontrol", "sinfo"):
        r = subprocess.run([tool, "ping"], env=env, capture_output=True, text=True, timeout=10)
        assert r.returncode == 1 and r.stdout == ""
        assert "no SLURM controller answered" in r.stderr and "scripts/slurm_up.sh" in r.stderr
    probe = ("from snakemake_executor_plugin_slurm.job_status_query import get_min_job_age;"
             "print(get_min_job_age())")
    r = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "None"


_NEEDS_SLURM = """
import importlib.util
spec = importlib.util.spec_from_file_location("suite_conftest", {conftest!r})
suite = importlib.util.module_from_spec(spec)
spec.loader.exec_module(suite)
pytest_configure = suite.pytest_configure
"""
_NEEDS_SLURM_TEST = """
def test_needs_a_slurm_client():
    from conftest import suite

    suite.need_slurm(suite.slurm_client_missing())
"""


def test_on_a_path_without_slurm_tools_the_suite_skips_what_needs_slurm_in_one_line(tmp_path):
    """A machine with none of sinfo, scontrol, sacct, squeue (a newcomer's): the suite's detection
    names what to install in one line, the SLURM executor plugin still imports (so every other
    `snakemake` runs), a test that needs SLURM skips with that line, and under
    DISTLAB_REQUIRE_SLURM=1 (CI) fails with it instead."""
    from conftest import path_without_slurm, slurm_client_missing

    from distlab.pipeline import slurmtools

    path = path_without_slurm(tmp_path / "bin")
    assert not any(slurmtools.found(path).values()), slurmtools.found(path)
    why = slurm_client_missing(path)
    assert why and "\n" not in why
    assert "sinfo" in why and "scontrol" in why and "sacct" in why and "squeue" in why
    assert "apt-get install slurm-client" in why and "scripts/slurm_up.sh" in why
    assert slurmtools.plugin_import_problem(path) is None
    env = {**os.environ, "PATH": path}
    env.pop("DISTLAB_REQUIRE_SLURM", None)
    env.pop("DISTLAB_TEST_NO_SLURM_CONTROLLER", None)
    r = subprocess.run([sys.executable, "-c", "import snakemake_executor_plugin_slurm"], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]

    (tmp_path / "conftest.py").write_text(_NEEDS_SLURM.format(conftest=str(ROOT / "tests/conftest.py")))
    args = [sys.executable, "-m", "pytest", "-rs", "-p", "no:cacheprovider", "-o", "addopts=", "-p", "no:xdist",
            str(tmp_path)]
    (tmp_path / "test_needs.py").write_text(_NEEDS_SLURM_TEST)
    r = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:]
    assert "1 skipped" in r.stdout and why in r.stdout, r.stdout[-3000:]
    r = subprocess.run(args, cwd=tmp_path, env={**env, "DISTLAB_REQUIRE_SLURM": "1"}, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 1 and "1 failed" in r.stdout, r.stdout[-3000:]
    assert f"DISTLAB_REQUIRE_SLURM=1 but {why}" in r.stdout, r.stdout[-3000:]


def test_sinfo_without_squeue_or_sacct_stops_the_session_in_one_line(tmp_path):
    """SLURM's sinfo without squeue and sacct: the SLURM plugin's import fails, and with it every
    `snakemake`; the suite (and `make reproduce`, through distlab.pipeline.slurmtools.main) stops with one line."""
    from conftest import path_without_slurm

    from distlab.pipeline import slurmtools

    path = path_without_slurm(tmp_path / "bin")
    sinfo = tmp_path / "bin" / "sinfo"
    sinfo.write_text("#!/bin/sh\nexit 1\n")
    sinfo.chmod(0o755)
    why = slurmtools.plugin_import_problem(path)
    assert why and "\n" not in why and "squeue" in why and "slurm-client" in why
    assert slurmtools.client_problem(path) == why
    env = {**os.environ, "PATH": path}
    env.pop("DISTLAB_TEST_NO_SLURM_CONTROLLER", None)
    r = subprocess.run([sys.executable, "-c", "import sys; from distlab.pipeline.slurmtools import main; sys.exit(main())"],
                       env=env, capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stdout, r.stderr) == (2, "", why + "\n")
    (tmp_path / "conftest.py").write_text(_NEEDS_SLURM.format(conftest=str(ROOT / "tests/conftest.py")))
    (tmp_path / "test_needs.py").write_text(_NEEDS_SLURM_TEST)
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-o", "addopts=", "-p", "no:xdist",
                        str(tmp_path)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stdout[-3000:] + r.stderr[-3000:]
    assert why in r.stdout + r.stderr and "Traceback" not in r.stdout + r.stderr


def test_the_session_decides_once_and_only_without_a_controller():
    from conftest import NO_CONTROLLER_ENV, slurm_controller_answers

    folder = os.environ.get(NO_CONTROLLER_ENV)
    if folder:  # no controller answered at the start: the stand-ins lead PATH in this worker too
        assert os.environ["PATH"].split(os.pathsep)[0] == folder
        assert shutil.which("scontrol") == os.path.join(folder, "scontrol")
        assert shutil.which("sinfo") == os.path.join(folder, "sinfo")
    else:  # no client, or a controller that answers: PATH untouched
        assert shutil.which("scontrol") is None or slurm_controller_answers()


def _listing(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in folder.rglob("*")} if folder.exists() else {}


def test_the_suites_dry_runs_run_in_a_copy_and_leave_the_working_tree_alone():
    """The suite's Snakemake helpers run in a fresh clone's files, not in the working tree, so
    that what the tree holds (a finished `make reproduce`) changes no test and no test writes
    Snakemake's own files (`.snakemake/`: logs, the I/O cache, locks) into it."""
    from conftest import snakemake_runs, workflow_tree

    tree = workflow_tree()
    assert tree != ROOT and workflow_tree() == tree  # one copy a test process
    assert (tree / "Snakefile").is_file() and (tree / "tests/configs/tiny.yaml").is_file()
    assert not (tree / "results").exists() and not (tree / ".venv").exists()
    cache = tree / ".snakemake/iocache/latest.pkl"  # written at the end of every run, dry or not
    before = cache.stat().st_mtime_ns if cache.exists() else None
    [r] = snakemake_runs([["baseline", "-n", "--forceall", "--quiet", "rules"]])
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "baseline_train_sim" in r.stdout
    # This run's Snakemake files are in the copy, so not in the working tree. (The working tree's
    # own .snakemake/ is not compared: another test process, or the user's own run, may write
    # there meanwhile; test_no_test_runs_snakemake_in_the_working_tree keeps the tests out.)
    assert cache.is_file() and cache.stat().st_mtime_ns != before


def test_no_test_runs_snakemake_in_the_working_tree():
    """Every test that starts Snakemake (as a program, as ``-m snakemake`` or through the
    replicate's command) gives it the copy's folder or a temporary one as its working directory,
    never the working tree: a run there writes ``.snakemake/`` into the user's tree."""
    import re

    starts = re.compile(r'\["snakemake"|"-m", "snakemake"|rep\.command\(')
    offenders = []
    for f in sorted((ROOT / "tests").glob("test_*.py")):
        lines = f.read_text().splitlines()
        for i, line in enumerate(lines):
            if starts.search(line):
                call = " ".join(lines[i:i + 3])
                if re.search(r"cwd=ROOT\b|cwd=str\(ROOT\)", call) or re.search(r"rep\.command\(ROOT\b", call):
                    offenders.append(f"{f.name}:{i + 1}")
    assert not offenders, offenders
