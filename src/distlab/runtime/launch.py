"""Launch a real multi-process job on this machine.

Two launchers start the same ranks with the same environment, so a trainer's
``run_distributed`` cannot tell them apart:

* :func:`run_forked` (the default on one node, ``runtime.launcher: fork``):
  this process imports torch and the trainer once, then forks one child per
  rank.  The ranks skip the interpreter and torch start-up (about 2.5 s of
  CPU each; a PGC job of one master and four workers spent 18 of its 22 CPU
  seconds there).  It hosts the rendezvous store itself, as torchrun's agent
  does, and tears the job down when a rank fails, as torchrun does.
* :func:`run_torchrun` (``runtime.launcher: torchrun``, and the command that
  ``--print-torchrun`` prints for several nodes) runs ``torchrun --standalone``.

``--standalone`` starts a local c10d rendezvous on ``localhost:0``, i.e. a
free port chosen by the OS, so concurrent jobs (parallel Snakemake rules,
tests) never collide on a port.

torchrun starts each rank in its own session, so killing torchrun's process
group does not reach the ranks; on timeout :func:`run_torchrun` terminates
the whole process tree it finds under torchrun.
"""

from __future__ import annotations

import functools
import importlib.util
import io
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TextIO

import psutil

_KILL_GRACE_S = 3.0


# how torchrun is started: the interpreter's own torch (a test puts a stand-in here)
TORCHRUN: list[str] = [sys.executable, "-m", "torch.distributed.run"]
_PREFIX_FLAG = "--log-line-prefix-template"
_PREFIX_TEMPLATE = "[rank${rank}]: "
# torchrun's default tee prefix, "[default3]:" (role "default", local rank 3 = rank on one node)
_DEFAULT_PREFIX = re.compile(r"^\[default(\d+)\]:(?: )?")


def torchrun_accepts(flag: str, torchrun: Sequence[str] | None = None) -> bool:
    """Whether ``torchrun`` (default :data:`TORCHRUN`) knows the option ``flag``, found out once
    per process and command.  torchrun options come and go between torch versions (torch 2.11's
    refuses ``--log-line-prefix-template``, which 2.14's has).  The interpreter's own torchrun is
    read from its source (no import, no process); any other command from its ``--help``."""
    return _accepts(flag, tuple(torchrun or TORCHRUN))


@functools.lru_cache(maxsize=None)
def _accepts(flag: str, torchrun: tuple[str, ...]) -> bool:
    cmd = list(torchrun)
    if cmd == [sys.executable, "-m", "torch.distributed.run"]:
        spec = importlib.util.find_spec("torch")  # a top-level spec: torch is not imported
        if spec is not None and spec.origin:
            try:
                return flag in (Path(spec.origin).parent / "distributed" / "run.py").read_text(errors="replace")
            except OSError:
                pass
    try:
        r = subprocess.run([*cmd, "--help"], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return flag in r.stdout + r.stderr


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
    return [*TORCHRUN, "--standalone", "--nnodes=1", f"--nproc_per_node={nprocs}", *target, *module_args]


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
        # torchrun names the rank it saw end first, which may be a peer that lost its
        # connection to the rank that really failed: prefer a rank with an error of its own
        # (the same rule as run_forked's), unless torchrun's rank was killed by a signal
        if "signal" not in how.lower() and not _own_error(rank, causes):
            other = next((c for c in causes if not _PEER_LOST.search(c)), None)
            if other is not None:
                real = other.split(":", 1)[0].split()[1]
                how = f"an error of its own; torchrun saw rank {rank} end first, {how}"
                rank = real
        causes = _blame(rank, how, causes)
    return causes


# errors a rank reports because a peer went away: a consequence, not a cause
_PEER_LOST = re.compile(r"Connection (closed|reset) by peer|Broken pipe|Connection refused", re.I)


def _own_error(rank: int | str, causes: Sequence[str]) -> bool:
    """Whether ``rank`` reported an error other than a lost peer."""
    return any(c.startswith(f"rank {rank}:") and not _PEER_LOST.search(c) for c in causes)


def _blame(rank: int | str, how: str, causes: Sequence[str]) -> list[str]:
    """``causes`` led by "rank R failed first (how)" and that rank's own lines."""
    own = [c for c in causes if c.startswith(f"rank {rank}:")]
    rest = [c for c in causes if not c.startswith(f"rank {rank}:")]
    return [f"rank {rank} failed first ({how})", *own, *rest]


def check_timeout(timeout_s: float, key: str = "runtime.job_timeout_s") -> float:
    """``timeout_s`` as a float within (0, 30 days], else SpecError in one line naming ``key``
    (1e300 would overflow the deadline's clocks: an OverflowError deep in the launch)."""
    import math

    from ..config.specs import MAX_TIMEOUT_S, SpecError

    try:
        t = float(timeout_s)
    except (TypeError, ValueError):
        t = math.nan
    if not (math.isfinite(t) and 0 < t <= MAX_TIMEOUT_S):
        raise SpecError(f"{key}: {timeout_s!r} s; give a number of seconds in (0, {MAX_TIMEOUT_S:,}] (30 days)")
    return t


def run_torchrun(module_args: Sequence[str], nprocs: int, threads: int | None, timeout_s: float,
                 script: str | os.PathLike | None = None, stream: TextIO | None = None,
                 work: int | None = None) -> None:
    """Run :func:`torchrun_command` to completion.

    Each rank gets ``max(1, threads // nprocs)`` OpenMP threads (``threads``
    defaults to all cores) and DISTLAB_THREADS = ``threads``.  What the
    ranks print goes, line by line, to ``stream`` (this process's stderr by
    default: under Snakemake, the rule's ``log:``), and nowhere else.
    Raises RuntimeError whose first line names the rank that failed first
    and its cause if the job fails, or runs past its deadline (then its
    whole process tree is killed): ``timeout_s`` (bounded, :func:`check_timeout`), or, given ``work`` (the
    steps the job runs), the deadline that scales with the ranks' measured
    pace, as :func:`run_forked`'s (each rank counts its steps into a file
    named in ``DISTLAB_STEPS_FILE``).
    """
    timeout_s = check_timeout(timeout_s)
    cmd = torchrun_command(module_args, nprocs, threads, script)
    # every rank's lines prefixed "[rankK]: ", so a cause can be attributed: by torchrun's
    # --log-line-prefix-template where it has one; else its default prefix "[defaultK]:",
    # rewritten as the lines pass (and the template offered in its environment variable, which
    # some versions read).  torchrun's own copies of the tee'd streams go to a folder removed at
    # the end
    logdir = tempfile.mkdtemp(prefix="distlab-torchrun-")
    n = len(TORCHRUN)
    template = torchrun_accepts(_PREFIX_FLAG)
    cmd = [*cmd[:n], "--tee", "3", "--log-dir", logdir,
           *([_PREFIX_FLAG, _PREFIX_TEMPLATE] if template else []), *cmd[n:]]
    try:
        _run(cmd, nprocs, threads, timeout_s, stream, work, logdir, rewrite=not template)
    finally:
        shutil.rmtree(logdir, ignore_errors=True)


def _run(cmd: list[str], nprocs: int, threads: int | None, timeout_s: float,
         stream: TextIO | None, work: int | None = None, tmp: str | None = None,
         rewrite: bool = False) -> None:
    from .deadline import STEPS_FILE, make_pace, steps_file

    threads = threads or os.cpu_count() or 1
    env = {**os.environ, "OMP_NUM_THREADS": str(max(1, threads // nprocs)),
           "DISTLAB_THREADS": str(threads), "PYTHONUNBUFFERED": "1"}
    if rewrite:
        env["TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"] = _PREFIX_TEMPLATE
    env.pop(STEPS_FILE, None)
    pace = make_pace(timeout_s, work) if tmp else None
    mem = None
    if pace is not None:
        path = os.path.join(tmp, "steps")
        mem = steps_file(path, nprocs)
        env[STEPS_FILE] = path
    out = stream or sys.stderr
    kept: deque[str] = deque(maxlen=4000)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True, text=True, errors="replace", bufsize=1)

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if rewrite:
                line = _DEFAULT_PREFIX.sub(r"[rank\1]: ", line)
            out.write(line)
            out.flush()
            kept.append(line.rstrip("\n"))

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            rc = proc.wait(timeout=0.1)
            break
        except subprocess.TimeoutExpired:
            pass
        deadline = _deadline_now(pace, mem, nprocs, deadline)
        if time.monotonic() > deadline:
            _kill_tree(proc.pid)
            proc.wait()
            reader.join(5)
            message = f"{_overdue('torchrun job', nprocs, timeout_s, pace)}: {' '.join(cmd)}"
            lead_log(out, message)
            raise RuntimeError(message)
    reader.join(10)
    if rc != 0:
        causes = root_causes(list(kept)) or [f"exit code {rc}"]
        message = "\n".join(causes) + f"\ntorchrun job failed with exit code {rc}: {' '.join(cmd)}"
        lead_log(out, message)
        raise RuntimeError(message)


def _deadline_now(pace, mem, nprocs: int, deadline: float) -> float:
    """A launcher's deadline now: a paced one (``pace``) moves with the steps its ranks
    counted into ``mem``; else the fixed ``deadline``."""
    if pace is None:
        return deadline
    from .deadline import steps_counted

    counted = steps_counted(mem, nprocs)
    if counted > pace.steps:
        pace.tick(time.monotonic(), counted - pace.steps)
    return pace.deadline


def _overdue(what: str, nprocs: int, timeout_s: float, pace) -> str:
    """The one line naming a launched job stopped at its deadline."""
    from .deadline import pace_message

    if pace is not None:
        return pace_message(f"{what} of {nprocs} ranks", timeout_s, pace)
    return f"{what} of {nprocs} ranks ran past {timeout_s:.0f} s and was killed (runtime.job_timeout_s)"


def lead_log(out: TextIO, summary: str) -> bool:
    """Put ``summary`` (the rank that failed first and its cause) at the head of the log
    ``out`` writes to, the ranks' output after it, when ``out`` is a regular file (a
    rule's ``log:``, which the ranks' lines reached as they came).  Elsewhere (a
    terminal, a pipe) nothing changes: the summary is the error the caller prints.
    Returns whether the log was rewritten."""
    try:
        out.flush()
        fd = out.fileno()
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        with open(f"/proc/self/fd/{fd}", "rb") as f:  # the same file, opened for reading
            body = f.read()
        head = (summary.rstrip("\n") + "\n--- every rank's output, as it came, follows ---\n").encode()
        data = head + body
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)  # (an O_APPEND file writes at its end, now 0, anyway)
        while data:
            data = data[os.write(fd, data):]
        return True
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        return False


# ------------------------------------------------------------------ the fork launcher

_PR_SET_PDEATHSIG, _PR_SET_NAME = 1, 15


def die_with_parent(name: str | None = None) -> None:
    """Linux: the kernel kills this process when its parent dies (a killed job leaves no
    ranks or workers behind); with ``name``, the process is named so (15 bytes at most;
    a forked process would otherwise show its parent's name)."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if name:
            libc.prctl(_PR_SET_NAME, ctypes.c_char_p(name.encode()[:15]), 0, 0, 0)
    except (OSError, AttributeError):
        pass


def wire_output(fd: int) -> None:
    """In a forked child: fds 1 and 2, and sys.stdout/stderr, write to ``fd`` (closed after)."""
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    # the parent's sys.stdout may not write to fd 1 (a test runner's capture)
    sys.stdout = open(1, "w", buffering=1, errors="replace", closefd=False)
    sys.stderr = open(2, "w", buffering=1, errors="replace", closefd=False)


def run_child(body: Callable[[], int | None]) -> None:
    """In a forked child: run ``body`` and end the process with its exit code (None: 0; a
    SystemExit's code; 1 after printing any other exception), its output flushed; never returns."""
    code = 1
    try:
        code = body() or 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def fork_run(body: Callable[[], int | None]) -> int:
    """Fork; the child runs ``body`` under :func:`run_child` (its exit status ends the child,
    which never returns here); the parent gets the child's pid.

    The one fork of the runtime: the fork server's jobs (:mod:`distlab.runtime.forkserver`),
    the ranks of the fork launcher (:func:`run_forked`) and the ranks forked into network
    namespaces (:func:`distlab.runtime.netns.run_ranks`) all start here, so a forked process
    flushes, reports and ends the same way wherever it came from.  What the child must close
    or rewire (the parent's pipe ends, its sockets) is the first thing ``body`` does."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        run_child(body)  # never returns
    return pid


def _rank_body(target: Callable[[], object], rank: int, nprocs: int, threads: int,
               out_fd: int, port_fd: int, close: Sequence[int], steps_mem=None) -> Callable[[], None]:
    """What a forked rank runs: close the launcher's and the other ranks' pipe ends (``close``),
    wire its output and environment, run ``target``."""

    def body() -> None:
        for fd in close:
            os.close(fd)
        if steps_mem is not None:
            from .deadline import count_steps_into

            count_steps_into(steps_mem, rank)
        die_with_parent(f"distlab-rank{rank}")  # `ps` tells the ranks apart
        wire_output(out_fd)
        port = b""
        while not port.endswith(b"\n"):
            chunk = os.read(port_fd, 64)
            if not chunk:
                raise RuntimeError("the launcher went away before the rendezvous store started")
            port += chunk
        os.close(port_fd)
        os.environ.update({
            "RANK": str(rank), "LOCAL_RANK": str(rank), "GROUP_RANK": "0", "ROLE_RANK": str(rank),
            "WORLD_SIZE": str(nprocs), "LOCAL_WORLD_SIZE": str(nprocs), "ROLE_WORLD_SIZE": str(nprocs),
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port.decode().strip(),
            # the launcher hosts the store, as torchrun's agent does
            "TORCHELASTIC_USE_AGENT_STORE": "True", "TORCHELASTIC_RESTART_COUNT": "0",
            "TORCHELASTIC_RUN_ID": "distlab-fork",
            "OMP_NUM_THREADS": str(max(1, threads // nprocs)), "DISTLAB_THREADS": str(threads),
            "PYTHONUNBUFFERED": "1",
        })
        target()

    return body


def _describe(status: int) -> str:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        return f"signal {sig} ({signal.Signals(sig).name})"
    return f"exit code {os.WEXITSTATUS(status)}"


def run_forked(target: Callable[[], object], nprocs: int, threads: int | None, timeout_s: float,
               stream: TextIO | None = None, expendable: Sequence[int] = (), max_lost: int = 0,
               work: int | None = None) -> None:
    """Run ``target()`` in ``nprocs`` forked ranks of one torch.distributed job.

    Each rank finds the environment torchrun would give it (RANK, WORLD_SIZE,
    MASTER_ADDR/PORT, ...), ``max(1, threads // nprocs)`` threads and
    DISTLAB_THREADS = ``threads``.  What a rank prints goes, prefixed
    ``[rankK]: ``, to ``stream`` (this process's stderr by default).  When a
    rank fails (an exception, a non-zero exit, a signal), the others are
    stopped and RuntimeError names that rank and its cause first; past
    ``timeout_s`` the whole job is killed.  Call it from a process that has
    not run torch operations yet (forked OpenMP pools do not survive).

    ``expendable`` ranks may die of a signal (kill -9 by an operator or the
    OOM killer), up to ``max_lost`` of them, without ending the job: the death
    is logged in one line and the others carry on (a job whose trainer
    tolerates lost workers, such as gradient coding's master with s of them).
    Any other failure, or one death more, stops the job as above.

    ``work`` (the steps the job runs): the deadline scales with the ranks' measured pace
    (:mod:`distlab.runtime.deadline`: each rank counts its steps into shared memory),
    at least ``timeout_s``; without it, ``timeout_s``.
    """
    import mmap

    from torch.distributed import TCPStore

    from .deadline import make_pace

    timeout_s = check_timeout(timeout_s)
    from datetime import timedelta

    if nprocs < 1:
        raise ValueError(f"nprocs must be >= 1, got {nprocs}")
    threads = threads or os.cpu_count() or 1
    out = stream or sys.stderr
    sys.stdout.flush()
    sys.stderr.flush()
    steps_mem = mmap.mmap(-1, 8 * nprocs) if work else None  # each rank's steps, shared
    children, outputs, port_w = _fork_ranks(target, nprocs, threads, steps_mem)
    kept: deque[str] = deque(maxlen=4000)
    lock = threading.Lock()
    readers = _pump_outputs(outputs, out, kept, lock)
    failures: dict[int, tuple[float, str]] = {}  # rank -> (when seen, how), before any was stopped
    lost: dict[int, str] = {}                     # expendable ranks that died, tolerated
    store = None
    try:
        store = TCPStore("127.0.0.1", 0, nprocs, True, timedelta(seconds=max(timeout_s, 1.0)),
                         wait_for_workers=False)
        for fd in port_w.values():
            os.write(fd, f"{store.port}\n".encode())
            os.close(fd)
        port_w.clear()
        alive = dict(children)
        pace = make_pace(timeout_s, work)
        _watch_ranks(alive, failures, lost, expendable, max_lost, pace, steps_mem, timeout_s,
                     lambda line: _log_line(out, kept, lock, line), lambda: [t.join(5) for t in readers], out)
        _stop(alive)  # a rank failed: stop the rest, as torchrun does
    finally:
        for fd in port_w.values():
            os.close(fd)
        for t in readers:
            t.join(5)
        del store
    if failures:
        causes = root_causes(list(kept))  # no torchrun summary here: the ranks' error lines
        rank = _root_rank(failures, causes)
        message = "\n".join(_blame(rank, failures[rank][1], causes)) + f"\nforked job of {nprocs} ranks failed"
        lead_log(out, message)
        raise RuntimeError(message)


_SETTLE_S = 2.0


def _log_line(out: TextIO, kept: deque, lock: threading.Lock, line: str) -> None:
    with lock:
        out.write(line + "\n")
        out.flush()
        kept.append(line)


def _watch_ranks(alive: dict, failures: dict, lost: dict, expendable: Sequence[int], max_lost: int, pace,
                 steps_mem, timeout_s: float, log_line: Callable[[str], None], join_readers: Callable[[], object],
                 out: TextIO) -> None:
    """Wait for the ranks in ``alive`` (pid -> rank, emptied as they end): a tolerated death of an
    expendable rank is logged in ``lost``, any other failure recorded in ``failures`` (the peers
    then get _SETTLE_S to end on their own); past the deadline (which follows the ranks' pace)
    the rest are stopped and RuntimeError names them."""
    nprocs = len(alive)
    deadline = time.monotonic() + timeout_s
    settle = None
    while alive:
        for pid in list(alive):
            got, status = os.waitpid(pid, os.WNOHANG)
            if got == 0:
                continue
            rank = alive.pop(pid)
            if (status != 0 and rank in expendable and os.WIFSIGNALED(status)
                    and len(lost) < max_lost and not failures):
                lost[rank] = _describe(status)
                log_line(f"[launcher]: rank {rank} died of {lost[rank]}; the job carries on without it "
                         f"({len(lost)} of at most {max_lost} such deaths tolerated)")
            elif status != 0:
                failures[rank] = (time.monotonic(), _describe(status))
                settle = settle or time.monotonic() + _SETTLE_S
        if settle is not None and time.monotonic() > settle:
            return
        deadline = _deadline_now(pace, steps_mem, nprocs, deadline)
        if time.monotonic() > deadline:
            _stop(alive)
            message = (f"{_overdue('forked job', nprocs, timeout_s, pace)}; ranks still running: "
                       f"{sorted(alive.values())}")
            join_readers()
            lead_log(out, message)
            raise RuntimeError(message)
        time.sleep(0.02)


def _fork_ranks(target, nprocs: int, threads: int, steps_mem) -> tuple[dict, dict, dict]:
    """Fork the ``nprocs`` ranks: (pid -> rank, rank -> read end of its output, rank -> write end
    of its port pipe); every rank forked so far is killed if one fork fails."""
    children: dict[int, int] = {}
    outputs: dict[int, int] = {}
    port_w: dict[int, int] = {}
    try:
        for rank in range(nprocs):
            r_out, w_out = os.pipe()
            r_port, w_port = os.pipe()
            # the rank closes what belongs to the launcher and the other ranks
            pid = fork_run(_rank_body(target, rank, nprocs, threads, w_out, r_port,
                                      [r_out, w_port, *outputs.values(), *port_w.values()], steps_mem))
            os.close(w_out)
            os.close(r_port)
            children[pid] = rank
            outputs[rank] = r_out
            port_w[rank] = w_port
    except BaseException:
        for pid in children:
            _kill_tree(pid)
        raise
    return children, outputs, port_w


def _pump_outputs(outputs: dict[int, int], out: TextIO, kept: deque,
                  lock: threading.Lock) -> list[threading.Thread]:
    """One thread a rank copying its lines, prefixed ``[rankK]: ``, to ``out`` and to ``kept``."""

    def pump(rank: int, fd: int) -> None:
        with os.fdopen(fd, "r", errors="replace") as f:
            for line in f:
                _log_line(out, kept, lock, f"[rank{rank}]: {line.rstrip(chr(10))}")

    readers = [threading.Thread(target=pump, args=(r, fd), daemon=True) for r, fd in outputs.items()]
    for t in readers:
        t.start()
    return readers


def _root_rank(failures: dict[int, tuple[float, str]], causes: Sequence[str]) -> int:
    """The rank to blame: one killed by a signal, else one whose own error is not a
    lost peer, else the first seen to fail (each tier in the order seen)."""
    def tier(rank: int) -> int:
        if failures[rank][1].startswith("signal"):
            return 0
        return 1 if _own_error(rank, causes) else 2
    return min(failures, key=lambda r: (tier(r), failures[r][0]))


def _stop(pids) -> None:
    """Kill the process trees of ``pids`` and reap them."""
    for pid in pids:
        _kill_tree(pid)
    for pid in pids:
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass

