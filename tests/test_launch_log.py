"""A failed real job's log starts with the rank that failed first and its cause, every
rank's output (tracebacks included) after it (distlab.runtime.launch.lead_log)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import ROOT
from distlab.runtime.launch import lead_log

JOB = textwrap.dedent("""
    import os, sys, time
    from distlab.runtime.launch import run_forked

    def target():
        rank = int(os.environ["RANK"])
        print(f"hello from {rank}", flush=True)
        if rank == 0:  # rank 0 prints a long traceback of its own first, then waits to be stopped
            for i in range(20):
                print(f"  File 'x.py', line {i}, in deep", flush=True)
            time.sleep(600)
        time.sleep(0.5)
        raise ValueError("rank one gives up")

    print("distlab: the job starts", flush=True)
    try:
        run_forked(target, 2, threads=2, timeout_s=120)
    except RuntimeError as e:
        print(f"distlab: {e}", file=sys.stderr)
        sys.exit(1)
""")


def test_the_log_of_a_failed_forked_job_starts_with_the_rank_that_failed(tmp_path):
    log = tmp_path / "job.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    with log.open("w") as f:  # as a rule's `> {log} 2>&1`: stdout and stderr one file
        r = subprocess.run([sys.executable, "-c", JOB], stdout=f, stderr=subprocess.STDOUT, env=env,
                           timeout=300)
    assert r.returncode == 1
    lines = log.read_text().splitlines()
    assert lines[0] == "rank 1 failed first (exit code 1)", lines[:4]
    assert lines[1] == "rank 1: ValueError: rank one gives up"
    # then every rank's output as it came, rank 0's traceback included, and what came before
    follows = lines.index("--- every rank's output, as it came, follows ---")
    body = lines[follows + 1:]
    assert body[0] == "distlab: the job starts"
    assert "[rank0]: hello from 0" in body and "[rank0]:   File 'x.py', line 19, in deep" in body
    assert any(x.startswith("[rank1]: ValueError: rank one gives up") for x in body)
    # the caller's own lines, last
    assert lines[-1] == "forked job of 2 ranks failed" and "distlab: rank 1 failed first (exit code 1)" in body


def test_a_stream_that_is_no_file_is_left_alone():
    s = io.StringIO("ranks' lines\n")
    assert lead_log(s, "rank 1 failed first") is False
    assert s.getvalue() == "ranks' lines\n"


def test_an_appended_log_keeps_its_earlier_lines_after_the_summary(tmp_path):
    log = tmp_path / "a.log"
    log.write_text("earlier\n")
    with log.open("a") as f:
        f.write("[rank0]: x\n")
        assert lead_log(f, "rank 0 failed first (signal 9 (SIGKILL))")
        f.write("after\n")
    assert log.read_text().splitlines() == [
        "rank 0 failed first (signal 9 (SIGKILL))", "--- every rank's output, as it came, follows ---",
        "earlier", "[rank0]: x", "after"]


# ------------------------------------------------------- a torchrun without a flag

STANDIN = textwrap.dedent("""
    # a torchrun that does not know --log-line-prefix-template (as torch 2.11's), nor reads its
    # environment variable: its --help without the option, a refusal as argparse words it, else
    # the real torchrun
    import os, runpy, subprocess, sys
    FLAGS = ("--log-line-prefix-template", "--log_line_prefix_template")
    if "--help" in sys.argv[1:]:
        text = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--help"],
                              capture_output=True, text=True).stdout
        print("\\n".join(x for x in text.splitlines() if not any(f in x for f in FLAGS)))
        sys.exit(0)
    if any(a.split("=")[0] in FLAGS for a in sys.argv[1:]):
        print("usage: torchrun [-h] ...", file=sys.stderr)
        print("torchrun: error: unrecognized arguments: --log-line-prefix-template", file=sys.stderr)
        sys.exit(2)
    os.environ.pop("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", None)
    sys.argv[0] = "torchrun"
    runpy.run_module("torch.distributed.run", run_name="__main__")
""")

RANKS = textwrap.dedent("""
    import os, sys, time
    rank = int(os.environ["RANK"])
    print(f"hello from {rank}", flush=True)
    if sys.argv[1:] == ["fail"] and rank == 1:
        time.sleep(0.5)
        raise ValueError("rank one gives up")
""")


def _standin(tmp_path, monkeypatch):
    from distlab.runtime import launch

    (tmp_path / "torchrun_standin.py").write_text(STANDIN)
    (tmp_path / "ranks.py").write_text(RANKS)
    monkeypatch.setattr(launch, "TORCHRUN", [sys.executable, str(tmp_path / "torchrun_standin.py")])
    monkeypatch.setenv("PYTHONPATH", str(ROOT / "src"))
    return launch


def test_a_torchrun_that_refuses_the_prefix_flag_is_found_out_and_the_ranks_still_prefixed(tmp_path, monkeypatch):
    launch = _standin(tmp_path, monkeypatch)
    real = [sys.executable, "-m", "torch.distributed.run"]
    assert launch.torchrun_accepts("--log-line-prefix-template", real)  # this torch's (2.14) has it
    assert not launch.torchrun_accepts("--log-line-prefix-template")  # the stand-in's help lacks it
    assert launch.torchrun_accepts("--nproc-per-node")  # the probe reads its help
    log = tmp_path / "job.log"
    with log.open("w") as f:
        launch.run_torchrun([], 2, threads=2, timeout_s=240, script=tmp_path / "ranks.py", stream=f)
    lines = log.read_text().splitlines()
    assert "[rank0]: hello from 0" in lines and "[rank1]: hello from 1" in lines
    assert not any(x.startswith("[default") for x in lines)


def test_a_failed_job_under_that_torchrun_names_its_rank(tmp_path, monkeypatch):
    launch = _standin(tmp_path, monkeypatch)
    log = tmp_path / "job.log"
    with log.open("w") as f, pytest.raises(RuntimeError) as e:
        launch.run_torchrun(["fail"], 2, threads=2, timeout_s=240, script=tmp_path / "ranks.py", stream=f)
    first = str(e.value).splitlines()
    assert first[0].startswith("rank 1 failed first"), first[:3]
    assert "rank 1: ValueError: rank one gives up" in first
    assert "--log-line-prefix-template" not in str(e.value)  # the command it ran, without the flag
