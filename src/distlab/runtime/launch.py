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
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

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


def _tail(path: Path, n: int = 40) -> str:
    lines = path.read_text(errors="replace").splitlines()
    return "\n".join(lines[-n:])


_CAUSE = re.compile(r"^\[rank(\d+)\]: ([\w.]*(?:Error|Timeout|Exception)): (.*)$")


def root_causes(path: Path) -> list[str]:
    """The exception lines the ranks printed (``[rankK]: SomeError: message``),
    first occurrence of each, so a failed job can say why before torchrun's summary."""
    seen: dict[str, None] = {}
    try:
        for line in path.read_text(errors="replace").splitlines():
            m = _CAUSE.match(line.strip())
            if m:
                seen.setdefault(f"rank {m.group(1)}: {m.group(2).rsplit('.', 1)[-1]}: {m.group(3)}")
    except OSError:
        pass
    return list(seen)


def run_torchrun(module_args: Sequence[str], nprocs: int, threads: int | None, timeout_s: float,
                 log_path: str | os.PathLike | None = None,
                 script: str | os.PathLike | None = None) -> Path:
    """Run :func:`torchrun_command` to completion; return the log path.

    Each rank gets ``max(1, threads // nprocs)`` OpenMP threads (``threads``
    defaults to all cores) and DISTLAB_THREADS = ``threads``.  stdout and
    stderr of every rank go to ``log_path`` (a temporary file if None).
    Raises RuntimeError with the log's tail if the job fails or runs past
    ``timeout_s`` (then its whole process tree is killed).
    """
    cmd = torchrun_command(module_args, nprocs, threads, script)
    threads = threads or os.cpu_count() or 1
    env = {**os.environ, "OMP_NUM_THREADS": str(max(1, threads // nprocs)),
           "DISTLAB_THREADS": str(threads), "PYTHONUNBUFFERED": "1"}
    if log_path is None:
        fd, name = tempfile.mkstemp(prefix="distlab-torchrun-", suffix=".log")
        os.close(fd)
        log_path = name
    log = Path(log_path)
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_tree(proc.pid)
            proc.wait()
            raise RuntimeError(
                f"torchrun job ran past {timeout_s:.0f} s and was killed: {' '.join(cmd)}\n"
                f"--- last lines of {log} ---\n{_tail(log)}"
            ) from None
    if rc != 0:
        causes = "".join(f"{c}\n" for c in root_causes(log))
        raise RuntimeError(
            f"{causes}torchrun job failed with exit code {rc}: {' '.join(cmd)}\n"
            f"--- last lines of {log} ---\n{_tail(log)}"
        )
    return log
