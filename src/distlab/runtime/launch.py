"""Launch a real multi-process job on this machine with ``torchrun --standalone``.

``--standalone`` starts a local c10d rendezvous on ``localhost:0``, i.e. a
free port chosen by the OS, so concurrent jobs (parallel Snakemake rules,
tests) never collide on a port.

torchrun starts each rank in its own session, so killing torchrun's process
group does not reach the ranks; on timeout :func:`run_torchrun` terminates
the whole process tree it finds under torchrun.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections import deque
from collections.abc import Sequence
from typing import TextIO

import psutil

_KILL_GRACE_S = 3.0


def torchrun_command(module_args: Sequence[str], nprocs: int, threads: int | None = None,
                     script: str | os.PathLike | None = None) -> list[str]:
    """The torchrun command line for ``python -m distlab *module_args`` on ``nprocs`` ranks.

    With ``script``, runs that file with ``module_args`` instead.  ``threads``
    does not appear on the command line (torchrun has no such option): the
    thread budget travels in the environment, see :func:`run_torchrun`.
    """
    if nprocs < 1:
        raise ValueError(f"nprocs must be >= 1, got {nprocs}")
    if threads is not None and threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    target = [str(script)] if script is not None else ["-m", "distlab"]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes=1",
            f"--nproc_per_node={nprocs}", *target, *module_args]


def _kill_tree(pid: int) -> None:
    """SIGTERM ``pid`` and all its descendants, SIGKILL whatever survives the grace period."""
    try:
        root = psutil.Process(pid)
        procs = [*root.children(recursive=True), root]
    except psutil.NoSuchProcess:
        return
    for p in procs:
        try:
            p.send_signal(signal.SIGTERM)
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(procs, timeout=_KILL_GRACE_S)
    for p in alive:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=_KILL_GRACE_S)


# the launcher's tee prefix, and torch's own on tracebacks: "[rank0]: [rank0]: Error: ..."
_CAUSE = re.compile(r"^\[rank(\d+)\]: (?:\[rank\d+\]: )*([\w.]*(?:Error|Timeout|Exception)): (.*)$")
_FIRST = re.compile(r"Root Cause \(first observed failure\)")
_FIELD = re.compile(r"^\s*(rank|exitcode|traceback)\s*:\s*(.*)$")


def root_causes(lines: Sequence[str]) -> list[str]:
    """Why a torchrun job failed, most telling first.

    First the rank torchrun saw fail first, with its exit code or signal
    (from torchrun's "Root Cause" summary), so that a worker killed from
    outside is named rather than a surviving peer that then lost its
    connection; then the exception lines the ranks printed
    (``[rankK]: SomeError: message``), the first-failing rank's first,
    one of each.
    """
    first: dict[str, str] = {}
    in_root = False
    for line in lines:
        if _FIRST.search(line):
            in_root = True
            continue
        if in_root:
            m = _FIELD.match(line)
            if m:
                first.setdefault(m.group(1), m.group(2).strip())
            elif line.startswith("===") and first:
                break
    seen: dict[str, None] = {}
    for line in lines:
        m = _CAUSE.match(line.strip())
        if m:
            seen.setdefault(f"rank {m.group(1)}: {m.group(2).rsplit('.', 1)[-1]}: {m.group(3)}")
    causes = list(seen)
    if first.get("rank"):
        rank = first["rank"].split()[0]
        how = first.get("traceback") or ""
        if not how or how.startswith("To enable traceback"):
            how = f"exit code {first.get('exitcode', '?')}"
        own = [c for c in causes if c.startswith(f"rank {rank}:")]
        rest = [c for c in causes if not c.startswith(f"rank {rank}:")]
        causes = [f"rank {rank} failed first ({how})", *own, *rest]
    return causes


def run_torchrun(module_args: Sequence[str], nprocs: int, threads: int | None, timeout_s: float,
                 script: str | os.PathLike | None = None, stream: TextIO | None = None) -> None:
    """Run :func:`torchrun_command` to completion.

    Each rank gets ``max(1, threads // nprocs)`` OpenMP threads (``threads``
    defaults to all cores) and DISTLAB_THREADS = ``threads``.  What the
    ranks print goes, line by line, to ``stream`` (this process's stderr by
    default: under Snakemake, the rule's ``log:``), and nowhere else.
    Raises RuntimeError whose first line names the rank that failed first
    and its cause if the job fails, or runs past ``timeout_s`` (then its
    whole process tree is killed).
    """
    cmd = torchrun_command(module_args, nprocs, threads, script)
    # every rank's lines prefixed "[rankK]: ", so a cause can be attributed; torchrun's
    # own copies of the tee'd streams go to a folder removed at the end
    logdir = tempfile.mkdtemp(prefix="distlab-torchrun-")
    cmd = [*cmd[:3], "--tee", "3", "--log-dir", logdir,
           "--log-line-prefix-template", "[rank${rank}]: ", *cmd[3:]]
    try:
        _run(cmd, nprocs, threads, timeout_s, stream)
    finally:
        shutil.rmtree(logdir, ignore_errors=True)


def _run(cmd: list[str], nprocs: int, threads: int | None, timeout_s: float,
         stream: TextIO | None) -> None:
    threads = threads or os.cpu_count() or 1
    env = {**os.environ, "OMP_NUM_THREADS": str(max(1, threads // nprocs)),
           "DISTLAB_THREADS": str(threads), "PYTHONUNBUFFERED": "1"}
    out = stream or sys.stderr
    kept: deque[str] = deque(maxlen=4000)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True, text=True, errors="replace", bufsize=1)

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            out.write(line)
            out.flush()
            kept.append(line.rstrip("\n"))

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        rc = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_tree(proc.pid)
        proc.wait()
        reader.join(5)
        raise RuntimeError(
            f"torchrun job ran past {timeout_s:.0f} s and was killed (runtime.job_timeout_s): "
            f"{' '.join(cmd)}"
        ) from None
    reader.join(10)
    if rc != 0:
        causes = root_causes(list(kept)) or [f"exit code {rc}"]
        raise RuntimeError("\n".join(causes) + f"\ntorchrun job failed with exit code {rc}: "
                           f"{' '.join(cmd)}")
