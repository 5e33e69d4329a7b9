"""The real backend: processes under ``torchrun`` talking through torch.distributed.

Two communication patterns, both recorded in the context's :class:`ByteLedger`
with the same rule as the simulated cluster:

* SPMD collectives for synchronous data parallel (:func:`all_reduce_mean_`,
  :func:`all_gather_tensor`, :func:`broadcast_`);
* a master–worker transport for the gradient-coding schemes
  (:class:`MasterTransport` on rank 0, :class:`WorkerTransport` on ranks
  ``1..n``; worker id = rank − 1) built on tagged point-to-point messages.

The master–worker transport always runs on a gloo group (the default group
under gloo, a CPU side group under NCCL), and gloo's point-to-point ``Work``
cannot be polled: ``is_completed()`` stays False until ``wait()`` is called,
``get_future()`` is not implemented, and a ``wait(timeout)`` that expires
*closes the TCP pair* to that peer for good.  So every posted send/receive
gets a daemon thread blocked in ``wait()`` with a practically infinite
timeout, which flags completion (:class:`_Pending`); the owning transport
blocks on one queue of such completions, so arrival order is completion
order and no step ever waits on a slow peer's C++ call.

Exit: those waiter threads are the one hazard.  A thread still blocked in
``wait()`` when the interpreter finalizes (a receive nobody will match) wakes
up when a peer exits, tries to take the GIL, and CPython 3.11 kills it with
``pthread_exit``, whose forced unwind through C++ aborts the process
("terminate called without an active exception", exit −6).  So
:meth:`DistContext.close` first releases every such thread, using the same
gloo behaviour: a 1 ms wait on a dummy receive from each peer that still has
operations outstanding closes the pair, which fails all of them at once;
then it destroys the process group.  Every process must therefore end with
``ctx.close()`` (in a ``finally``).  The master ends a run with
:meth:`MasterTransport.shutdown`: it stops every worker, even one in
:meth:`WorkerTransport.sleep` forever, and waits for their acknowledgements,
so that its own ``close`` (which cuts the pairs) cannot race a stop message;
then every process exits and torchrun's job ends.  If the master fails
instead, its ``close`` makes the workers' receives fail with a clear error.
"""

from __future__ import annotations

import collections
import math
import os
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta

import torch
import torch.distributed as dist
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

from .ledger import ByteLedger
from .stragglers import StragglerTimeout  # noqa: F401 (raised here, caught by callers)

PARAMS, MSG, CONTROL, _RELEASE = 1, 2, 3, 4  # point-to-point tags (nothing is sent on _RELEASE)
_STOP = 1.0  # the only control message
_FOREVER = timedelta(days=365)  # gloo closes the pair when a wait() times out
_PARAM_HEAD = 1  # params message: [step, *flat]
_MSG_HEAD = 2  # worker message: [step, worker, *meta, *payload]
MAX_PENDING = 2  # model sends in flight per worker = receives a worker keeps posted
MAX_BACKLOG = 512  # models queued for one worker before it is given up as lost
_ACK_WAIT_S = 1.0  # how long a worker lets its stop acknowledgement leave before going on


def set_thread_budget(total_threads: int | None, nprocs: int) -> int:
    """Share ``total_threads`` (default: env DISTLAB_THREADS, else all cores)
    among ``nprocs`` processes on this machine; returns the per-process count."""
    total = total_threads or int(os.environ.get("DISTLAB_THREADS") or os.cpu_count() or 1)
    per = max(1, total // max(1, nprocs))
    os.environ["OMP_NUM_THREADS"] = str(per)
    torch.set_num_threads(per)
    return per


@dataclass
class DistContext:
    """This process's place in the job and its communication ledger."""

    rank: int
    world_size: int
    backend: str
    device: torch.device
    timeout_s: float
    ledger: ByteLedger = field(default_factory=ByteLedger)
    p2p_group: dist.ProcessGroup | None = None  # gloo group for the master–worker transport

    @property
    def is_master(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.backend == "nccl":
            dist.barrier(device_ids=[self.device.index])
        else:
            dist.barrier()

    def close(self, release_s: float = 5.0) -> None:
        """Fail this process's outstanding point-to-point operations (waiting at
        most ``release_s`` for their threads), then destroy the process group.
        Idempotent; see the module docstring for why every process needs it."""
        if dist.is_initialized():
            _release_pending(release_s)
            dist.destroy_process_group()


def init_from_env(backend: str = "auto", timeout_s: float = 60.0) -> DistContext:
    """Join the torchrun job described by the environment.

    ``backend="auto"`` picks NCCL when CUDA is available, else gloo.  Every
    collective fails after ``timeout_s`` instead of hanging.  The thread
    budget is shared among the processes of this node.
    """
    missing = [k for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT") if k not in os.environ]
    if missing:
        raise RuntimeError(
            f"init_from_env: {', '.join(missing)} not set; launch with torchrun "
            "(see distlab.runtime.launch)"
        )
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend not in ("nccl", "gloo"):
        raise ValueError(f"backend must be 'auto', 'nccl' or 'gloo', got {backend!r}")
    set_thread_budget(None, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    local_rank = int(os.environ["LOCAL_RANK"])
    if backend == "nccl":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    timeout = timedelta(seconds=timeout_s)
    dist.init_process_group(backend, timeout=timeout)
    p2p_group = dist.new_group(backend="gloo", timeout=timeout) if backend == "nccl" else None
    return DistContext(
        rank=dist.get_rank(), world_size=dist.get_world_size(), backend=backend,
        device=device, timeout_s=timeout_s, p2p_group=p2p_group,
    )


# ---------------------------------------------------------------- SPMD collectives


def _flat(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    if len({t.dtype for t in tensors}) != 1:
        raise ValueError("collectives need tensors of one dtype")
    return _flatten_dense_tensors([t.detach() for t in tensors])


def _copy_back(flat: torch.Tensor, tensors: Sequence[torch.Tensor]) -> None:
    with torch.no_grad():
        for t, v in zip(tensors, _unflatten_dense_tensors(flat, tensors)):
            t.copy_(v)


def all_reduce_mean_(ctx: DistContext, tensors: list[torch.Tensor]) -> None:
    """Replace every tensor by its mean over ranks: one all-reduce of one buffer."""
    if not tensors:
        return
    flat = _flat(tensors)
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    flat.div_(ctx.world_size)
    _copy_back(flat, tensors)
    ctx.ledger.all_reduce(flat.nbytes, ctx.world_size)


def all_gather_tensor(ctx: DistContext, t: torch.Tensor) -> list[torch.Tensor]:
    """Every rank's ``t`` (equal shapes on all ranks), in rank order."""
    t = t.detach().contiguous()
    out = [torch.empty_like(t) for _ in range(ctx.world_size)]
    dist.all_gather(out, t)
    ctx.ledger.all_gather(t.nbytes, ctx.world_size)
    return out


def broadcast_(ctx: DistContext, tensors: list[torch.Tensor], src: int = 0) -> None:
    """Overwrite ``tensors`` with rank ``src``'s (initial parameter sync)."""
    if not tensors:
        return
    flat = _flat(tensors)
    dist.broadcast(flat, src=src)
    if ctx.rank == src:
        ctx.ledger.send(flat.nbytes, ctx.world_size - 1)
    else:
        _copy_back(flat, tensors)


def params_max_abs_diff(ctx: DistContext, tensors: list[torch.Tensor]) -> float:
    """Largest |x_r − x_0| over ranks r and elements (a check, not in the ledger)."""
    flat = _flat(tensors).to(torch.float64)
    out = [torch.empty_like(flat) for _ in range(ctx.world_size)]
    dist.all_gather(out, flat)
    return max((o - out[0]).abs().max().item() for o in out) if flat.numel() else 0.0


# ------------------------------------------------------ master–worker transport


class WorkerLostError(RuntimeError):
    """Workers died (or were given up) and the rest can no longer satisfy the scheme."""


@dataclass(frozen=True)
class Arrival:
    """One worker message for the step being gathered."""

    worker: int
    step: int
    payload: torch.Tensor
    meta: torch.Tensor
    t_arrival: float  # time.perf_counter() when the receive completed


class _Pending:
    """A posted gloo send/receive whose completion a daemon thread observes.

    ``buf`` stays referenced until completion (gloo reads/writes it
    asynchronously).  When done, the object is put on ``done_q`` if given.
    Outstanding ones are listed in ``_OUTSTANDING`` for :func:`_release_pending`.
    """

    __slots__ = ("buf", "kind", "peer", "group", "error", "t_done", "event", "_work", "_done_q")

    def __init__(self, work: dist.Work, buf: torch.Tensor, kind: int, peer: int,
                 group: dist.ProcessGroup | None, done_q: queue.SimpleQueue | None = None) -> None:
        self.buf, self.kind, self.peer, self.group = buf, kind, peer, group
        self.error: Exception | None = None
        self.t_done = math.nan
        self.event = threading.Event()
        self._work, self._done_q = work, done_q
        _OUTSTANDING.add(self)
        threading.Thread(target=self._wait, daemon=True, name=f"distlab-wait-{kind}-{peer}").start()

    def _wait(self) -> None:
        try:
            self._work.wait(_FOREVER)
        except Exception as e:  # peer gone, or released by _release_pending
            self.error = e
        self.t_done = time.perf_counter()
        _OUTSTANDING.discard(self)
        self.event.set()
        if self._done_q is not None:
            self._done_q.put(self)

    def check(self, what: str) -> None:
        if self.error is not None:
            raise RuntimeError(f"{what}: {self.error}") from self.error


_OUTSTANDING: set[_Pending] = set()


def _isend(buf: torch.Tensor, dst: int, tag: int, group: dist.ProcessGroup | None,
           done_q: queue.SimpleQueue | None = None) -> _Pending:
    return _Pending(dist.isend(buf, dst, group=group, tag=tag), buf, tag, dst, group, done_q)


def _irecv(buf: torch.Tensor, src: int, tag: int, group: dist.ProcessGroup | None,
           done_q: queue.SimpleQueue | None = None) -> _Pending:
    return _Pending(dist.irecv(buf, src, group=group, tag=tag), buf, tag, src, group, done_q)


def _release_pending(timeout_s: float) -> None:
    """Make every outstanding operation fail now, and wait for its thread.

    A gloo wait that times out closes the pair to that peer, failing every
    operation on it (here and at the peer): one 1 ms wait on a dummy receive
    per (group, peer) with operations outstanding.
    """
    pending = list(_OUTSTANDING)
    for group, peer in {(p.group, p.peer) for p in pending}:
        try:
            dist.irecv(torch.empty(1), peer, group=group, tag=_RELEASE).wait(timedelta(milliseconds=1))
        except RuntimeError:
            pass  # the expected timeout, or the pair was already closed
    deadline = time.perf_counter() + timeout_s
    for p in pending:
        p.event.wait(max(0.0, deadline - time.perf_counter()))


def _names(workers: Sequence[int]) -> str:
    return ("worker " if len(workers) == 1 else "workers ") + ", ".join(map(str, workers))


class MasterTransport:
    """Rank 0's side: send models, gather worker messages by step.

    Worker ``w`` is rank ``w + 1``.  Models are ``[step, *flat]`` of
    ``param_numel`` values, worker messages ``[step, worker, *meta, *payload]``
    with ``meta_len`` metadata slots and ``msg_numel`` payload values, all in
    ``dtype``.  The ledger counts payload bytes (not the header) at the sender.

    Every model reaches every live worker, in step order: at most
    ``MAX_PENDING`` sends are in flight to a worker and the rest wait in its
    queue (a slow worker works through its backlog, as a Ray actor runs its
    queued tasks).  A worker whose send or receive fails (its process died)
    is *lost*: the master logs it once, stops talking to it and carries on
    with the others; so does a worker whose queue exceeds ``MAX_BACKLOG``
    models.  :meth:`gather` fails at once, naming the lost workers, when the
    scheme can no longer be satisfied by the workers left.
    """

    def __init__(self, ctx: DistContext, n_workers: int, param_numel: int, msg_numel: int,
                 meta_len: int = 4, dtype: torch.dtype = torch.float64,
                 log: Callable[[str], None] | None = None) -> None:
        if ctx.rank != 0:
            raise ValueError(f"MasterTransport runs on rank 0, not rank {ctx.rank}")
        if n_workers != ctx.world_size - 1:
            raise ValueError(f"{n_workers} workers need {n_workers + 1} processes, job has {ctx.world_size}")
        self.ctx, self.n_workers = ctx, n_workers
        self.param_numel, self.msg_numel, self.meta_len, self.dtype = param_numel, msg_numel, meta_len, dtype
        self.late_messages = 0
        self.lost: dict[int, str] = {}  # worker -> why it was given up
        self.messages: list[Arrival] = []  # every message received (used, late or early), for statistics
        self._log = log or (lambda msg: print(msg, flush=True))
        self._group = ctx.p2p_group
        self._q: queue.SimpleQueue[_Pending] = queue.SimpleQueue()
        self._sends: list[list[_Pending]] = [[] for _ in range(n_workers)]
        self._backlog: list[collections.deque] = [collections.deque() for _ in range(n_workers)]
        self._early: list[Arrival] = []
        for w in range(n_workers):
            self._post(w)

    def alive(self) -> list[int]:
        return [w for w in range(self.n_workers) if w not in self.lost]

    def _lose(self, w: int, why: str) -> None:
        if w in self.lost:
            return
        self.lost[w] = why
        self._backlog[w].clear()
        self._log(f"master: worker {w} (rank {w + 1}) lost at {time.strftime('%H:%M:%S')}: {why}; "
                  f"carrying on with {len(self.alive())} of {self.n_workers} workers")

    def _post(self, w: int) -> None:
        buf = torch.empty(_MSG_HEAD + self.meta_len + self.msg_numel, dtype=self.dtype)
        try:
            _irecv(buf, w + 1, MSG, self._group, self._q)
        except RuntimeError as e:
            self._lose(w, f"cannot receive from it ({str(e).splitlines()[0]})")

    def _send_model(self, w: int, buf: torch.Tensor) -> None:
        try:
            self._sends[w].append(_isend(buf, w + 1, PARAMS, self._group, self._q))
        except RuntimeError as e:
            self._lose(w, f"cannot send to it ({str(e).splitlines()[0]})")
            return
        self.ctx.ledger.send(self.param_numel * buf.element_size())

    def _pump(self, w: int) -> None:
        """Reap worker ``w``'s completed model sends; send its queued models in order."""
        if w in self.lost:
            return
        for p in self._sends[w]:
            if p.event.is_set() and p.error is not None:
                self._lose(w, f"sending it a model failed ({str(p.error).splitlines()[0]})")
                return
        self._sends[w] = [p for p in self._sends[w] if not p.event.is_set()]
        while self._backlog[w] and len(self._sends[w]) < MAX_PENDING and w not in self.lost:
            self._send_model(w, self._backlog[w].popleft())
        if len(self._backlog[w]) > MAX_BACKLOG:
            self._lose(w, f"more than {MAX_BACKLOG} models queued (unresponsive)")

    def broadcast_params(self, step: int, flat: torch.Tensor) -> None:
        """Queue model ``step`` for every live worker and send what can be sent now."""
        if flat.numel() != self.param_numel:
            raise ValueError(f"model has {flat.numel()} values, transport expects {self.param_numel}")
        buf = torch.empty(_PARAM_HEAD + self.param_numel, dtype=self.dtype)
        buf[0] = step
        buf[_PARAM_HEAD:].copy_(flat.detach().reshape(-1))
        for w in self.alive():
            self._backlog[w].append(buf)
            self._pump(w)

    def gather(self, step: int, ready: Callable[[list[int]], bool], timeout_s: float,
               hint: str = "use a straggler-tolerant scheme or raise runtime.timeout_s") -> list[Arrival]:
        """Worker messages for ``step`` in arrival order, as soon as ``ready(ids)``.

        Messages for earlier steps are late: discarded and counted in
        ``late_messages``.  Messages for later steps are kept for their own
        gather.  Raises :class:`WorkerLostError` as soon as the live workers can no
        longer make ``ready`` hold, and :class:`StragglerTimeout` (naming the
        workers that never answered, followed by ``hint``) after ``timeout_s``.
        """
        t0 = time.perf_counter()
        arrivals = [a for a in self._early if a.step == step]
        self._early = [a for a in self._early if a.step > step]
        while not ready([a.worker for a in arrivals]):
            got = {a.worker for a in arrivals}
            if self.lost and not ready(sorted(got | set(self.alive()))):
                dead = sorted(self.lost)
                raise WorkerLostError(
                    f"step {step}: {_names(dead)} died ({'; '.join(self.lost[w] for w in dead)}); "
                    f"the {len(self.alive())} left cannot satisfy the scheme ({hint})")
            left = timeout_s - (time.perf_counter() - t0)
            try:
                p = self._q.get(timeout=max(left, 0.0)) if left > 0 else self._q.get_nowait()
            except queue.Empty:
                missing = [w for w in range(self.n_workers) if w not in got]
                raise StragglerTimeout(
                    f"step {step}: waited {timeout_s:.1f} s, got {len(got)} of {self.n_workers} workers; "
                    f"{_names(missing)} never answered ({hint})"
                ) from None
            w = p.peer - 1
            if p.kind == PARAMS:
                self._pump(w)
                continue
            if p.error is not None:
                self._lose(w, f"receiving from it failed ({str(p.error).splitlines()[0]})")
                continue
            if w in self.lost:
                continue
            self._post(w)
            buf = p.buf
            a = Arrival(worker=w, step=int(buf[0]),
                        meta=buf[_MSG_HEAD:_MSG_HEAD + self.meta_len],
                        payload=buf[_MSG_HEAD + self.meta_len:], t_arrival=p.t_done)
            self.messages.append(a)
            if a.step < step:
                self.late_messages += 1
            elif a.step > step:
                self._early.append(a)
            else:
                arrivals.append(a)
        return arrivals

    def shutdown(self, grace_s: float = 5.0) -> list[int]:
        """Tell every live worker to stop; wait at most ``grace_s`` for their acknowledgements.

        Returns the workers that did not acknowledge (lost, gone, or busy past
        the grace).  After it, :meth:`DistContext.close` cannot cut a stop short.
        """
        while True:  # failures queued since the last gather: a worker died meanwhile
            try:
                p = self._q.get_nowait()
            except queue.Empty:
                break
            if p.error is not None and p.kind in (MSG, PARAMS):
                self._lose(p.peer - 1, f"its connection failed ({str(p.error).splitlines()[0]})")
        acks: dict[int, _Pending] = {}
        for w in self.alive():
            try:
                acks[w] = _irecv(torch.empty(1, dtype=self.dtype), w + 1, CONTROL, self._group)
                _isend(torch.full((1,), _STOP, dtype=self.dtype), w + 1, CONTROL, self._group)
            except RuntimeError:
                self._lose(w, "cannot tell it to stop")
        deadline = time.perf_counter() + grace_s
        silent = []
        for w, p in acks.items():
            if not p.event.wait(max(0.0, deadline - time.perf_counter())):
                silent.append(w)
            elif p.error is not None:
                self._lose(w, f"gone at the end ({str(p.error).splitlines()[0]})")
        return sorted(set(silent) | set(self.lost))


class WorkerTransport:
    """A worker's side (rank ``w + 1``): receive models, send messages, sleep."""

    def __init__(self, ctx: DistContext, param_numel: int, msg_numel: int,
                 meta_len: int = 4, dtype: torch.dtype = torch.float64) -> None:
        if ctx.rank == 0:
            raise ValueError("WorkerTransport runs on ranks 1..n, rank 0 is the master")
        self.ctx, self.worker = ctx, ctx.rank - 1
        self.param_numel, self.msg_numel, self.meta_len, self.dtype = param_numel, msg_numel, meta_len, dtype
        self._group = ctx.p2p_group
        self._q: queue.SimpleQueue[_Pending] = queue.SimpleQueue()
        self._sends: list[_Pending] = []
        self._models: list[_Pending] = []  # completed model receives not yet consumed
        for _ in range(MAX_PENDING):
            self._post_params()
        self._stop = _irecv(torch.empty(1, dtype=dtype), 0, CONTROL, self._group, self._q)
        self._ack: _Pending | None = None

    def _post_params(self) -> None:
        _irecv(torch.empty(_PARAM_HEAD + self.param_numel, dtype=self.dtype), 0, PARAMS, self._group, self._q)

    def _stopping(self) -> bool:
        """True once the master said stop, which is then acknowledged (once)."""
        if not self._stop.event.is_set():
            return False
        self._stop.check(f"worker {self.worker} waiting for the master")
        if self._ack is None:
            try:
                self._ack = _isend(torch.ones(1, dtype=self.dtype), 0, CONTROL, self._group)
            except RuntimeError:  # the master gave up waiting and closed: nothing to acknowledge
                return True
            self._ack.event.wait(_ACK_WAIT_S)
        return True

    def recv_params(self, timeout_s: float) -> tuple[int, torch.Tensor] | None:
        """The next model in step order as ``(step, flat)``, or None once the master said stop.

        Every model is returned once, oldest first (a late worker works
        through its queue).  Raises TimeoutError if neither a model nor a stop
        comes within ``timeout_s``.
        """
        deadline = time.perf_counter() + timeout_s
        while True:
            if self._stopping():
                return None
            self._drain()
            if self._models:
                oldest = min(self._models, key=lambda p: p.buf[0].item())
                self._models.remove(oldest)
                return int(oldest.buf[0]), oldest.buf[_PARAM_HEAD:]
            left = deadline - time.perf_counter()
            try:
                self._take(self._q.get(timeout=left) if left > 0 else self._q.get_nowait())
            except queue.Empty:
                raise TimeoutError(
                    f"worker {self.worker}: no model and no stop from the master in {timeout_s:.1f} s"
                ) from None

    def _take(self, p: _Pending) -> None:
        """Keep a completed model receive and post a fresh one in its place."""
        if p.kind == PARAMS:
            p.check(f"worker {self.worker} receiving a model")
            self._models.append(p)
            self._post_params()

    def _drain(self) -> None:
        """Take every completion already queued, without blocking."""
        while True:
            try:
                self._take(self._q.get_nowait())
            except queue.Empty:
                return

    def send(self, step: int, payload: torch.Tensor, meta: Sequence[float]) -> None:
        """Send the message for ``step`` to the master without waiting for it to leave.

        Dropped once the master said stop (it listens no more).
        """
        if self._stopping():
            return
        if payload.numel() != self.msg_numel:
            raise ValueError(f"message has {payload.numel()} values, transport expects {self.msg_numel}")
        if len(meta) > self.meta_len:
            raise ValueError(f"{len(meta)} metadata values, transport has {self.meta_len} slots")
        for p in self._sends:
            if p.event.is_set():
                p.check(f"worker {self.worker} sending to the master")
        self._sends = [p for p in self._sends if not p.event.is_set()]
        buf = torch.zeros(_MSG_HEAD + self.meta_len + self.msg_numel, dtype=self.dtype)
        buf[0], buf[1] = step, self.worker
        buf[_MSG_HEAD:_MSG_HEAD + len(meta)] = torch.tensor(list(meta), dtype=self.dtype)
        buf[_MSG_HEAD + self.meta_len:].copy_(payload.detach().reshape(-1))
        self._sends.append(_isend(buf, 0, MSG, self._group))
        self.ctx.ledger.send(self.msg_numel * buf.element_size())

    def sleep(self, seconds: float) -> bool:
        """Really sleep ``seconds`` (``math.inf``: until stopped).

        False if the master said stop meanwhile (RuntimeError if it is gone):
        the injected straggler delay, interruptible so that even a "dead"
        worker exits.
        """
        if seconds > 0:
            self._stop.event.wait(None if math.isinf(seconds) else seconds)
        return not self._stopping()
