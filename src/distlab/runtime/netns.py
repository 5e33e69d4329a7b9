"""Real ranks on shaped links: one Linux network namespace per rank, joined through a bridge.

Layout of one job (``tag`` = ``<pid>x<n>``, the creating process's id, so a
later job can tell a dead job's leftovers from a live one's):

* ``dlns-<tag>-hub``: a namespace holding only the bridge ``br0`` and the
  host ends ``vh<i>`` of the veth pairs (nothing is added to the caller's own
  namespace: no address, link or route outside the job's namespaces);
* ``dlns-<tag>-<i>``: rank ``i``'s namespace, its end of the pair named
  ``eth0`` with address ``10.77.0.<i+1>/24`` (private, reachable only from
  the job's namespaces) and ``lo`` up.

Shaping: a token-bucket filter (``tc qdisc ... tbf``) on both ends of each
rank's pair, so each rank's link carries at most ``rate`` bit/s each way
(full duplex).  The bucket holds ``max(MTU + header, rate x 1 ms)`` bytes: a
tbf whose burst is below one packet drops every packet.  The kernel of the
project's machines has no ``netem`` (nor ``fq``, ``cake``, ``etf``), so no
delay can be added by ``tc``: latency is the link's own, and
:mod:`distlab.bench.netcheck` adds latency in the process, in rows of their own.

Teardown: deleting a namespace deletes its end of every veth pair, so removing
the job's namespaces removes everything the job made.  :class:`ShapedCluster`
is a context manager that removes them on exit, on SIGTERM/SIGINT/SIGHUP (the
signal is then re-raised as the default would) and at interpreter exit;
:func:`remove_stale` (run by every new job) removes what a SIGKILLed job
left, i.e. every ``dlns-<pid>x...`` whose ``pid`` is no longer alive.

Without root or without the kernel features, :func:`unavailable` returns a
one-line reason and callers write "not run" rows.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from typing import TextIO

PREFIX = "dlns-"
SUBNET = "10.77.0"
MTU = 1500
_NAME = re.compile(rf"^{PREFIX}(\d+)x(\d+)-(hub|\d+)$")
_counter = iter(range(1, 1 << 30))


def _ip(*args: str, ns: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    cmd = ["ip", *(["-n", ns] if ns else []), *args]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {r.stderr.strip() or r.stdout.strip()}")
    return r


def _batch(lines: Sequence[str], ns: str | None = None, tool: str = "ip") -> None:
    """Run many ``ip``/``tc`` commands in one process (``-batch -``): setup stays well under 1 s."""
    cmd = ["ip", "netns", "exec", ns, tool, "-batch", "-"] if ns else [tool, "-batch", "-"]
    r = subprocess.run(cmd, input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        raise RuntimeError(f"{tool} -batch in {ns or 'this namespace'}: {r.stderr.strip()}")


def namespaces() -> list[str]:
    """Every namespace of this module's naming, of any job."""
    r = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30)
    return [ln.split()[0] for ln in r.stdout.splitlines() if ln.split() and _NAME.match(ln.split()[0])]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale() -> list[str]:
    """Delete the namespaces of jobs whose creating process is gone; returns their names."""
    gone = [ns for ns in namespaces() if not _alive(int(_NAME.match(ns).group(1)))]
    for ns in gone:
        _ip("netns", "delete", ns, check=False)
    return gone


_reason: str | None = None
_probed = False


def unavailable() -> str | None:
    """None where shaped namespaces work here, else one line saying why not (cached)."""
    global _reason, _probed
    if _probed:
        return _reason
    _probed = True
    if not sys.platform.startswith("linux"):
        _reason = "shaped links need Linux network namespaces; this is " + sys.platform
    elif os.geteuid() != 0:
        _reason = "shaped links need root (ip netns, veth, tc); this process is not root"
    elif not (shutil.which("ip") and shutil.which("tc")):
        _reason = "shaped links need iproute2's ip and tc, not found on PATH"
    else:
        ns = f"{PREFIX}{os.getpid()}x0-probe"
        try:
            _ip("netns", "add", ns)
            _ip("link", "add", "p0", "type", "veth", "peer", "name", "p1", ns=ns)
            r = subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "p0", "root",
                                "tbf", "rate", "10mbit", "burst", "4kb", "latency", "100ms"],
                               capture_output=True, text=True, timeout=30)
            if r.returncode != 0:
                _reason = f"the kernel has no tbf qdisc: {r.stderr.strip()}"
        except (RuntimeError, OSError, subprocess.SubprocessError) as e:
            _reason = f"network namespaces or veth pairs do not work here: {str(e).splitlines()[0]}"
        finally:
            subprocess.run(["ip", "netns", "delete", ns], capture_output=True, timeout=30)
    return _reason


def burst_bytes(rate_bps: float) -> int:
    """tbf bucket: at least one full packet (MTU plus Ethernet header), else 1 ms at ``rate``."""
    return int(max(MTU + 14 + 50, rate_bps / 8 * 1e-3))


def _tbf(dev: str, rate_bps: float) -> str:
    # queue limit: 2 s of traffic at the rate, at least 64 packets (a sender never sees drops
    # from a short queue; TCP paces itself on the queue instead)
    limit = int(max(64 * (MTU + 64), rate_bps / 8 * 2.0))
    return (f"qdisc replace dev {dev} root tbf rate {int(rate_bps)}bit burst {burst_bytes(rate_bps)} "
            f"limit {limit}")


class ShapedCluster:
    """``n`` rank namespaces on one bridge, each link shaped to ``rate_bps`` (None: unshaped)."""

    def __init__(self, n: int, rate_bps: float | None = None) -> None:
        if n < 1:
            raise ValueError(f"ShapedCluster: n must be >= 1, got {n}")
        if rate_bps is not None and rate_bps <= 0:
            raise ValueError(f"ShapedCluster: rate_bps must be > 0 or None, got {rate_bps}")
        self.n, self.rate_bps = n, rate_bps
        self.tag = f"{os.getpid()}x{next(_counter)}"
        self.hub = f"{PREFIX}{self.tag}-hub"
        self.ranks = [f"{PREFIX}{self.tag}-{i}" for i in range(n)]
        self.up = False
        self._old: dict[int, object] = {}

    # addresses inside the job's namespaces only
    def addr(self, rank: int) -> str:
        return f"{SUBNET}.{rank + 1}"

    @property
    def master_addr(self) -> str:
        return self.addr(0)

    def names(self) -> list[str]:
        return [self.hub, *self.ranks]

    def create(self) -> "ShapedCluster":
        remove_stale()
        self._arm()
        try:
            _batch([f"netns add {ns}" for ns in self.names()])
            self.up = True
            hub = [f"link add br0 type bridge", "link set br0 up", "link set lo up"]
            for i, ns in enumerate(self.ranks):
                hub += [f"link add vh{i} type veth peer name eth0 netns {ns}",
                        f"link set vh{i} master br0", f"link set vh{i} up"]
            _batch(hub, ns=self.hub)
            for i, ns in enumerate(self.ranks):
                _batch(["link set lo up", f"addr add {self.addr(i)}/24 dev eth0", "link set eth0 up"], ns=ns)
            if self.rate_bps is not None:
                self.shape(self.rate_bps)
        except BaseException:
            self.destroy()
            raise
        return self

    def shape(self, rate_bps: float | None) -> None:
        """(Re)shape every link both ways; None removes the shaping."""
        self.rate_bps = rate_bps
        if rate_bps is None:
            for i, ns in enumerate(self.ranks):
                subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", "eth0", "root"],
                               capture_output=True, timeout=30)
                subprocess.run(["ip", "netns", "exec", self.hub, "tc", "qdisc", "del", "dev", f"vh{i}", "root"],
                               capture_output=True, timeout=30)
            return
        _batch([_tbf(f"vh{i}", rate_bps) for i in range(self.n)], ns=self.hub, tool="tc")
        for ns in self.ranks:
            _batch([_tbf("eth0", rate_bps)], ns=ns, tool="tc")

    def destroy(self) -> None:
        mine = set(self.names())
        present = [ns for ns in namespaces() if ns in mine]
        if present:
            r = subprocess.run(["ip", "-force", "-batch", "-"], input="".join(f"netns delete {ns}\n" for ns in present),
                               capture_output=True, text=True, timeout=30)
            if r.returncode != 0:  # one by one, so one failure does not keep the rest
                for ns in present:
                    _ip("netns", "delete", ns, check=False)
        self.up = False
        self._disarm()

    # ---- signal-safe cleanup: remove the namespaces, then die of the signal as before
    def _arm(self) -> None:
        atexit.register(self.destroy)
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            self._old[sig] = signal.getsignal(sig)
            signal.signal(sig, self._on_signal)

    def _disarm(self) -> None:
        atexit.unregister(self.destroy)
        if threading.current_thread() is threading.main_thread():
            for sig, old in self._old.items():
                signal.signal(sig, old)
        self._old.clear()

    def _on_signal(self, sig, frame) -> None:
        old = self._old.get(sig)
        self.destroy()
        if callable(old):
            old(sig, frame)
        else:
            signal.signal(sig, signal.SIG_DFL)
            os.kill(os.getpid(), sig)

    def __enter__(self) -> "ShapedCluster":
        return self.create()

    def __exit__(self, *exc) -> None:
        self.destroy()

    # ---- running processes inside
    def popen(self, rank: int, argv: Sequence[str], env: Mapping[str, str] | None = None,
              **kw) -> subprocess.Popen:
        """Start ``argv`` in rank ``rank``'s namespace (``ip netns exec``)."""
        return subprocess.Popen(["ip", "netns", "exec", self.ranks[rank], *argv], env=dict(env or os.environ), **kw)

    def rank_env(self, rank: int, port: int = 29500, threads: int | None = None) -> dict[str, str]:
        """torchrun's environment for ``rank``, the store hosted by rank 0 at its namespace address."""
        threads = threads or os.cpu_count() or 1
        return {**os.environ, "RANK": str(rank), "LOCAL_RANK": str(rank), "GROUP_RANK": "0",
                "WORLD_SIZE": str(self.n), "LOCAL_WORLD_SIZE": str(self.n),
                "MASTER_ADDR": self.master_addr, "MASTER_PORT": str(port),
                "GLOO_SOCKET_IFNAME": "eth0", "TP_SOCKET_IFNAME": "eth0",
                "OMP_NUM_THREADS": str(max(1, threads // self.n)), "DISTLAB_THREADS": str(threads),
                "PYTHONUNBUFFERED": "1"}


CLONE_NEWNET = 0x40000000


def enter(name: str) -> None:
    """Move this process (one thread: call it in a fresh fork) into namespace ``name``."""
    fd = os.open(f"/var/run/netns/{name}", os.O_RDONLY)
    try:
        if hasattr(os, "setns"):  # Python 3.12
            os.setns(fd, CLONE_NEWNET)
            return
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns into {name}: {os.strerror(err)}")
    finally:
        os.close(fd)


class _ForkedRank:
    """A rank forked from this process, with the parts of ``Popen`` :func:`run_ranks` reads."""

    def __init__(self, pid: int, out_fd: int) -> None:
        self.pid, self.returncode = pid, None
        self.stdout = os.fdopen(out_fd, "r", errors="replace")

    def _set(self, status: int) -> None:
        self.returncode = os.waitstatus_to_exitcode(status)

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self._set(status)
        return self.returncode

    def wait(self) -> int:
        if self.returncode is None:
            self._set(os.waitpid(self.pid, 0)[1])
        return self.returncode


def _fork_rank(cluster: ShapedCluster, rank: int, args: Sequence[str], threads: int | None) -> _ForkedRank:
    """``python -m distlab *args`` as rank ``rank``, forked from this process (its imports shared:
    torch is not imported again a rank) and moved into the rank's namespace before any socket.
    The command runs through the dispatcher registered in :mod:`distlab.runtime.entry`."""
    from . import entry
    from .launch import die_with_parent, fork_run, wire_output

    r_out, w_out = os.pipe()

    def body() -> int | None:
        os.close(r_out)
        os.setsid()  # its own group, as start_new_session gives the commands' ranks
        wire_output(w_out)
        die_with_parent(f"distlab-rank{rank}")
        enter(cluster.ranks[rank])
        os.environ.update(cluster.rank_env(rank, threads=threads))
        # the dispatcher, as `python -m distlab` would run it (registered: the runtime imports no CLI)
        return entry.main(args)

    pid = fork_run(body)  # the rank runs body, never returns from it
    os.close(w_out)
    return _ForkedRank(pid, r_out)


def run_ranks(cluster: ShapedCluster, argv: Sequence[str] | None, timeout_s: float, threads: int | None = None,
              stream: TextIO | None = None, distlab_args: Sequence[str] | None = None) -> None:
    """Run ``argv`` once per rank, rank ``i`` inside ``cluster``'s namespace ``i``, to completion;
    or, with ``distlab_args`` (``argv`` None), ``python -m distlab *distlab_args`` in ranks forked
    from this process (:func:`_fork_rank`: no interpreter start or torch import a rank).

    What the ranks print goes, prefixed ``[rankK]: ``, to ``stream`` (stderr by
    default).  A failing rank stops the others; RuntimeError names the rank and
    its cause first (:func:`distlab.runtime.launch.root_causes`); past
    ``timeout_s`` all are killed.
    """
    from .launch import _blame, _kill_tree, root_causes

    out = stream or sys.stderr
    kept: deque[str] = deque(maxlen=4000)
    lock = threading.Lock()
    if distlab_args is not None:
        procs = []
        try:
            for r in range(cluster.n):
                procs.append(_fork_rank(cluster, r, distlab_args, threads))
        except BaseException:
            for p in procs:
                _kill_tree(p.pid)
                p.wait()
            raise
    else:
        procs = [cluster.popen(r, argv, cluster.rank_env(r, threads=threads), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, errors="replace", bufsize=1,
                               start_new_session=True) for r in range(cluster.n)]

    def pump(rank: int, p: subprocess.Popen) -> None:
        for line in p.stdout:
            line = f"[rank{rank}]: {line.rstrip(chr(10))}"
            with lock:
                out.write(line + "\n")
                out.flush()
                kept.append(line)

    readers = [threading.Thread(target=pump, args=(r, p), daemon=True) for r, p in enumerate(procs)]
    for t in readers:
        t.start()
    deadline = time.monotonic() + timeout_s
    failed: dict[int, str] = {}
    try:
        while any(p.poll() is None for p in procs) and not failed:
            for r, p in enumerate(procs):
                if p.poll() not in (None, 0):
                    failed[r] = f"exit code {p.returncode}"
            if time.monotonic() > deadline:
                raise RuntimeError(f"shaped job of {cluster.n} ranks ran past {timeout_s:.0f} s and was killed")
            time.sleep(0.02)
        for r, p in enumerate(procs):
            if p.poll() not in (None, 0):
                failed.setdefault(r, f"exit code {p.returncode}")
    finally:
        if failed:
            time.sleep(1.0)  # the peers' own error lines
        for p in procs:
            if p.poll() is None:
                _kill_tree(p.pid)
            p.wait()
        for t in readers:
            t.join(5)
    if failed:
        rank = next(iter(failed))
        causes = root_causes(list(kept))
        if not causes:  # a rank that printed its own one-line reason ("distlab: ...") and exited
            own = [ln for ln in kept if ln.startswith(f"[rank{rank}]: ") and "Warning" not in ln]
            causes = [f"rank {rank}: {own[-1].split(': ', 1)[1]}"] if own else []
        raise RuntimeError("\n".join(_blame(rank, failed[rank], causes)) + f"\nshaped job of {cluster.n} ranks failed")


def preload(module_args: Sequence[str]) -> None:
    """Import here what ``python -m distlab *module_args`` imports (torch, the trainer), once, so
    the ranks forked for it start from those imports (:func:`run_shaped`), by the dispatcher
    registered in :mod:`distlab.runtime.entry`."""
    from . import entry

    entry.preload(module_args)


def run_shaped(module_args: Sequence[str], nprocs: int, rate_bps: float | None, timeout_s: float,
               threads: int | None = None, stream: TextIO | None = None, fork: bool = True) -> None:
    """``python -m distlab *module_args`` on ``nprocs`` ranks, each in a network namespace of its
    own with its link shaped to ``rate_bps`` (None: unshaped); the launcher mode of this module.
    ``fork``: the ranks are forked from this process after :func:`preload` (a job of a few steps
    is otherwise mostly four interpreters importing torch on two cores); else each rank is a
    fresh ``python -m distlab`` started by ``ip netns exec``."""
    if fork:
        preload(module_args)
    with ShapedCluster(nprocs, rate_bps) as cluster:
        if fork:
            run_ranks(cluster, None, timeout_s, threads, stream, distlab_args=module_args)
        else:
            run_ranks(cluster, [sys.executable, "-m", "distlab", *module_args], timeout_s, threads, stream)
