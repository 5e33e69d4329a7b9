"""A fork server for the workflow's jobs: each ``python -m distlab ...`` a rule runs is forked
from one process that has already imported torch, dynamo, the trainers and the plotting stack,
instead of importing them again (about 4.5 s of CPU a job, on some 300 jobs of a
``make reproduce``: a sixth of its work).

``python -m distlab forkserver -- snakemake --cores 2 ...`` imports those once, listens on a
Unix socket, and runs the command with ``DISTLAB_FORKSERVER`` naming the socket.  A
``python -m distlab`` started under it (:func:`delegate`, from ``__main__``) sends its argv,
working directory, environment and its stdin/stdout/stderr (``SCM_RIGHTS``) to the server and
waits; the server forks a child that takes those over and runs the CLI's ``main`` as the process
would have, and sends back its exit status.  The client forwards SIGTERM, SIGINT and
SIGHUP to the child's process group, and a client that dies (SIGKILL) takes the child with it.

What a forked child shares with a fresh process, and what not:

- the same computation, bit for bit: the server runs no torch operation, so torch's default
  generator and the OpenMP pool are as a fresh import leaves them; Python's and numpy's global
  generators are reseeded from the OS, as a fresh process's are; every run seeds its own.
- not its memory high-water mark: a run's manifest ``peak_rss_mb`` then includes the server's
  imports, so the manifest says ``"process": "forked"``.  Jobs that measure memory or time the
  machine itself (:data:`FRESH`), and any job whose import-time environment differs from the
  server's (:data:`IMPORT_ENV`, e.g. ``DISTLAB_CPU_ISA``), run in a fresh process as before.

Without ``DISTLAB_FORKSERVER``, or with the server gone, ``python -m distlab`` runs as it always
did; the cluster profile never sets it.  Only the standard library is imported here before
:func:`serve` preloads, so a delegating client starts in about 0.1 s.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import struct
import sys

ENV = "DISTLAB_FORKSERVER"
CHILD_ENV = "DISTLAB_FORKED"  # set in a forked child: its manifest says so

# argv prefixes that always run in a fresh process: they measure the process's memory for a
# claim (P3's throughput and memory benchmark, the DeMo bench's peak RSS) or time the machine.
# P3's training runs are forked like the others: their loss and throughput do not depend on
# the process; the memory they record beside them (table local's run columns, not a claim)
# then includes their share of the server's imports, and the manifest says "forked".
FRESH = (
    ("local-bench",), ("demo-bench",), ("placement-bench",), ("placement-profile",),
    ("placement-real",), ("calibrate",), ("allreduce",), ("netcheck",), ("techerror",),
    ("pgc", "coding-profile"), ("stability",), ("forkserver",),
)

# environment read when torch (or Python) starts: a client whose values differ runs fresh
# (PYTHONPATH is not compared: the rules prepend the workflow's src/ to it, and what it decides,
# which distlab is imported, is compared itself)
# (nor the thread counts Snakemake sets per job, OMP_NUM_THREADS, MKL_NUM_THREADS and the like:
# the child sets torch's, which sets OpenMP's and MKL's, from OMP_NUM_THREADS)
IMPORT_ENV = ("DISTLAB_CPU_ISA", "ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA", "PYTHONHASHSEED",
              "LD_PRELOAD", "LD_LIBRARY_PATH", "MALLOC_ARENA_MAX", "KMP_AFFINITY", "GOMP_CPU_AFFINITY")

_LEN = struct.Struct("!Q")


def needs_fresh(argv: list[str], environ: dict | None = None) -> str | None:
    """Why ``argv`` must run in a fresh process (None: it may be forked)."""
    words = [a for a in argv if a not in ("-v", "--verbose")]
    for prefix in FRESH:
        if tuple(words[:len(prefix)]) == prefix:
            return f"'{' '.join(prefix)}' measures its own process"
    env = os.environ if environ is None else environ
    if env.get("DISTLAB_CPU_ISA"):
        return "DISTLAB_CPU_ISA must apply before torch is imported"
    return None


def _package() -> str:
    """The folder of the distlab package this module belongs to (``distlab/runtime/..``)."""
    return os.path.dirname(os.path.dirname(os.path.realpath(__file__)))


def workflow_package(cwd: str) -> str | None:
    """The distlab a workflow's jobs import (its rules put ``<workflow>/src`` first on
    PYTHONPATH: workflow/rules/common.smk), when it is not this process's; else None."""
    here = os.path.join(cwd, "src", "distlab")
    if os.path.isdir(here) and os.path.realpath(here) != _package():
        return os.path.realpath(os.path.join(cwd, "src"))
    return None


def _import_env(environ) -> dict:
    return {k: environ.get(k) for k in IMPORT_ENV}


def _recv_exactly(conn: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("the peer closed the connection")
        buf += chunk
    return buf


# ----------------------------------------------------------------------------- the client
def delegate(argv: list[str]) -> int | None:
    """Run ``python -m distlab argv`` in the fork server named by ``DISTLAB_FORKSERVER``; its
    exit status, or None where it must (or can only) run here."""
    path = os.environ.get(ENV)
    if not path or needs_fresh(argv):
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError:
        sock.close()
        return None  # no server (it ended, or this process outlived it): run here
    request = json.dumps({"argv": [sys.argv[0], *argv], "cwd": os.getcwd(), "env": dict(os.environ),
                          "executable": sys.executable,
                          "package": _package()}).encode()
    socket.send_fds(sock, [_LEN.pack(len(request))], [0, 1, 2])
    sock.sendall(request)

    def forward(signum, _frame):
        try:
            sock.sendall(bytes([signum]))
        except OSError:
            pass

    previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    reply = b""
    while not reply.endswith(b"\n"):
        try:
            chunk = sock.recv(4096)
        except InterruptedError:
            continue
        if not chunk:
            print(f"distlab: the fork server at {path} went away while it ran {' '.join(argv[:3])}",
                  file=sys.stderr)
            return 1
        reply += chunk
    sock.close()
    for s, handler in previous.items():
        signal.signal(s, handler)
    answer = json.loads(reply)
    if "fallback" in answer:
        return None
    return int(answer["status"])


# ----------------------------------------------------------------------------- the server
def preload(modules) -> None:
    """What the jobs import: torch and dynamo (torch.optim imports it at an optimizer's first
    call) and ``modules`` (the CLI passes every trainer, the tables, statistics and plotting
    stack).  No torch operation runs."""
    import importlib

    import torch._dynamo  # noqa: F401

    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError:
            pass  # an optional part not installed: its jobs import it themselves and say so


def _child(conn: socket.socket, others: list[socket.socket], request: dict, fds: list[int],
           server: int, main):
    """What the forked child runs (:func:`distlab.runtime.launch.fork_run`, which ends it with the
    command's status): become the requesting process and run the command."""
    from .launch import die_with_parent

    def body() -> int | None:
        die_with_parent()  # a server killed outright (SIGKILL of the whole tree) leaves no job behind
        if os.getppid() != server:
            return 1
        os.setpgid(0, 0)  # its own group: the server stops it and its ranks together
        for s in (*others, conn):
            s.close()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
            signal.signal(s, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        os.environ[CHILD_ENV] = "1"
        sys.argv = list(request["argv"])
        sys.stdin = os.fdopen(0, "r", closefd=False)
        sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
        sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)
        import logging
        import random

        logging.root.handlers.clear()  # main() configures logging for this command
        random.seed()
        if "numpy" in sys.modules:
            sys.modules["numpy"].random.seed()
        threads = os.environ.get("OMP_NUM_THREADS")
        if threads and threads.isdigit() and int(threads) > 0:
            import torch

            torch.set_num_threads(int(threads))
        try:
            status = main(sys.argv[1:])
        except SystemExit as e:
            if isinstance(e.code, (int, type(None))):
                raise
            print(e.code, file=sys.stderr)  # as a fresh interpreter prints a non-integer exit
            return 1
        except KeyboardInterrupt:
            return 128 + signal.SIGINT
        return status if isinstance(status, int) and 0 <= status < 256 else (0 if status is None else 1)

    return body


def serve(command: list[str], main, modules, socket_path: str | None = None) -> int:
    """Preload ``modules``, run ``command`` with ``DISTLAB_FORKSERVER`` set, serve its jobs
    (each runs ``main(argv)`` in a forked child) until it ends; its exit status.  The CLI
    passes its own ``main``: this module is below it and does not import it."""
    import subprocess
    import tempfile

    preload(modules)
    tmp = tempfile.mkdtemp(prefix="distlab-forkserver-")
    path = socket_path or os.path.join(tmp, "socket")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    mine = _import_env(os.environ)
    package = _package()
    stopping: list[int] = []

    def stop(signum, _frame):
        stopping.append(signum)

    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, stop)
    sys.stdout.flush()
    sys.stderr.flush()
    proc = subprocess.Popen(command, env={**os.environ, ENV: path})
    children: dict[int, socket.socket] = {}  # child pid -> its client's connection
    conns: dict[socket.socket, int] = {}  # connection -> child pid
    try:
        while True:
            for pid in list(children):
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    conn = children.pop(pid)
                    conns.pop(conn, None)
                    code = os.waitstatus_to_exitcode(status)
                    try:
                        conn.sendall(json.dumps({"status": code if code >= 0 else 128 - code}).encode() + b"\n")
                    except OSError:
                        pass
                    conn.close()
            if stopping and proc.poll() is None:
                proc.send_signal(stopping[-1] if stopping[-1] != signal.SIGHUP else signal.SIGTERM)
                stopping.clear()
            if proc.poll() is not None and not children:
                return proc.returncode
            try:
                ready, _, _ = select.select([listener, *conns], [], [], 0.05)
            except InterruptedError:
                continue
            for r in ready:
                if r is listener:
                    _accept(listener, children, conns, mine, package, main)
                    continue
                # a running child's client: a forwarded signal, or the client is gone
                try:
                    data = r.recv(16)
                except OSError:
                    data = b""
                pid = conns[r]
                if not data:
                    _kill_group(pid, signal.SIGKILL)
                    conns.pop(r)
                    continue
                for signum in data:
                    _kill_group(pid, signum)
    finally:
        for pid in children:
            _kill_group(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        if proc.poll() is None:
            proc.terminate()
            proc.wait()
        listener.close()
        try:
            os.unlink(path)
            os.rmdir(tmp)
        except OSError:
            pass


def _kill_group(pid: int, signum: int) -> None:
    try:
        os.killpg(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _accept(listener, children, conns, mine, package, main) -> None:
    conn, _ = listener.accept()
    fds: list[int] = []
    try:
        conn.settimeout(10)
        msg, fds, _flags, _addr = socket.recv_fds(conn, _LEN.size, 3)
        request = json.loads(_recv_exactly(conn, _LEN.unpack(_recv_exactly_rest(conn, msg))[0]))
        conn.settimeout(None)
    except (OSError, ValueError, struct.error):
        for fd in fds:
            os.close(fd)
        conn.close()
        return
    why = None
    if len(fds) != 3:
        why = "stdin, stdout and stderr did not arrive"
    elif request.get("executable") != sys.executable or request.get("package") != package:
        why = "another interpreter or another copy of distlab"
    elif _import_env(request.get("env", {})) != mine:
        why = "its import-time environment differs from the server's"
    elif "OMP_NUM_THREADS" not in request["env"] and "OMP_NUM_THREADS" in os.environ:
        why = "no OMP_NUM_THREADS, where the server's OpenMP read one when it loaded"
    if why:
        print(f"distlab forkserver: {' '.join(request.get('argv', [])[1:3])} runs in a fresh process: {why}",
              file=sys.stderr, flush=True)
        for fd in fds:
            os.close(fd)
        conn.sendall(json.dumps({"fallback": why}).encode() + b"\n")
        conn.close()
        return
    from .launch import fork_run

    server = os.getpid()
    pid = fork_run(_child(conn, [listener, *conns], request, fds, server, main))
    try:
        os.setpgid(pid, pid)  # here too: a signal forwarded before the child's own call reaches it
    except OSError:
        pass
    for fd in fds:
        os.close(fd)
    children[pid] = conn
    conns[conn] = pid


def _recv_exactly_rest(conn: socket.socket, head: bytes) -> bytes:
    """The length prefix: what recv_fds gave, completed."""
    return head + (_recv_exactly(conn, _LEN.size - len(head)) if len(head) < _LEN.size else b"")
