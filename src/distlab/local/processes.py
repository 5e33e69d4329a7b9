"""The process runtime of parallel RC (:func:`train_rc_parallel`): K section workers, OS
processes on shared-memory buffers or threads, meeting the coordinator (this process) at a
polling barrier each tick; a failed worker named in one line (:class:`.rc.SectionFailure`).

The tick arithmetic is :mod:`.rc`'s, the same as the sequential mode's: the lock-step
parallel mode changes the time, not the result.
"""

from __future__ import annotations

import copy
import multiprocessing as mp
import os
import sys
import threading
import time
import traceback

import torch

from ..runtime.deadline import DEFAULT_MARGIN, progress
from ..runtime.launch import die_with_parent
from . import memory
from .model import Split, TextData, build_gpt, flat, load_flat, split_gpt
from .rc import (Coordinator, Evaluator, Result, SectionFailure, SectionTrainer, Tick, _row, active,
                 eval_due, exit_reason, schedule)


class Shared:
    """The buffers the coordinator and the workers share (shared memory for processes)."""

    def __init__(self, split: Split, spec: dict, share: bool) -> None:
        K, d, _ = schedule(spec)
        B, T = int(spec["batch_size"]), int(spec["model"]["block_size"])
        D = int(spec["model"]["d_model"])
        n_read = sum(p.numel() for p in split.readout.parameters())

        def z(*shape, dtype=torch.float32):
            x = torch.zeros(*shape, dtype=dtype)
            return x.share_memory_() if share else x

        self.acts = [z(d + 1, B, T, D) for _ in range(K - 1)]
        self.grads = z(K, n_read)
        self.readout = z(n_read)
        self.losses = z(K, dtype=torch.float64)
        self.active = z(K, dtype=torch.int64)
        self.params = [z(sum(p.numel() for p in s.parameters())) for s in split.sections]
        self.mem = z(K, len(MEM_KEYS), dtype=torch.float64)  # each worker's memory.snapshot
        self.ready = z(K, dtype=torch.int64)  # set by each worker once it is built
        self.errors: list[str] = []  # thread workers' failures (processes report exit codes)


MEM_KEYS = ("rss_mb", "pss_mb", "uss_mb", "peak_rss_mb")
STOPPED = 3  # a worker's exit code when it stops because another one failed (not a cause)


def _stop_quietly(k: int, e: BaseException, barrier, sh: Shared) -> None:
    """A worker's end on an error: one line, no traceback.  A broken barrier means another
    participant failed first: this worker is not the cause and says so only in its exit code."""
    if isinstance(e, threading.BrokenBarrierError):
        if threading.current_thread() is threading.main_thread() or mp.parent_process() is not None:
            os._exit(STOPPED)
        return
    line = f"rc-section-{k}: {type(e).__name__}: {e}"
    print(line, file=sys.stderr, flush=True)
    barrier.abort()
    if threading.current_thread() is threading.main_thread() or mp.parent_process() is not None:
        os._exit(1)  # a process: its exit code tells the coordinator
    sh.errors.append(line)  # a thread: report it


def _worker(k: int, spec: dict, data_dir: str, sh: Shared, barrier, ready, threads: int,
            timeout: float, split: Split | None) -> None:
    """Section ``k``'s loop; the same arithmetic as one section of :func:`train_rc_sequential`."""
    try:
        if split is None:  # a process: its own copy of the model, same seed, same initial weights
            die_with_parent(f"rc-section-{k}")
            torch.set_num_threads(threads)
            split = split_gpt(build_gpt(spec["model"], int(spec["seed"])), int(spec["sections"]))
        K, d, ticks = schedule(spec)
        data = TextData(data_dir, int(spec["model"]["block_size"]), int(spec["batch_size"]),
                        int(spec["seed"]), splits=("train",))
        w = SectionTrainer(k, split, spec)
        read_params = list(split.readout.parameters())
        slots = d + 1

        def emit(h: torch.Tensor, t: int) -> None:
            sh.acts[k][t % slots].copy_(h)
            if d == 0:
                ready[k].release()

        sh.ready[k] = 1
        barrier.wait(timeout)  # every worker is up: the clock starts after this
        for t in range(ticks):
            on = active(k, t, d)
            if on:
                x, y = data.train_batch(t - k * d)
                if k == 0:
                    h_in = x
                else:
                    if d == 0 and not ready[k - 1].acquire(timeout=_limit(barrier, timeout)):
                        raise TimeoutError(f"no activations from rc-section-{k - 1} after "
                                           f"{_limit(barrier, timeout):.0f} s")
                    h_in = sh.acts[k - 1][(t - d) % slots].clone()
                loss, g = w.step(h_in, y, None if k == K - 1 else (lambda h: emit(h, t)), t)
                sh.grads[k].copy_(g)
                sh.losses[k] = loss
            sh.active[k] = int(on)
            if eval_due(t, spec):
                sh.params[k].copy_(flat([p.detach() for p in w.params]))
            barrier.wait(timeout)  # A: reports in
            barrier.wait(timeout)  # B: the consensus readout is out
            load_flat(read_params, sh.readout)
        snap = memory.snapshot()
        sh.mem[k] = torch.tensor([snap[key] for key in MEM_KEYS], dtype=torch.float64)
        barrier.wait(timeout)  # C: final state written
    except BaseException as e:  # noqa: BLE001 - every failure ends the worker in one line
        _stop_quietly(k, e, barrier, sh)


class PollBarrier:
    """The lock-step barrier of K section processes and the coordinator, on shared counters.

    ``multiprocessing.Barrier`` is a condition variable over semaphores: a participant killed
    inside it (SIGKILL, the OOM killer) leaves its counts behind, and the next ``abort`` or
    ``notify_all`` waits for it forever.  Here every counter has one writer: worker k bumps
    ``arrive[k]`` and polls ``release``; the coordinator polls the arrivals (and the workers'
    exit codes, so a dead one is named at once) and bumps ``release``.  Nobody holds a lock a
    dead process could take with it."""

    POLL_S = 0.0002

    def __init__(self, k: int) -> None:
        self.arrive = torch.zeros(k, dtype=torch.int64).share_memory_()
        self.release = torch.zeros(1, dtype=torch.int64).share_memory_()
        self.broken = torch.zeros(1, dtype=torch.int64).share_memory_()
        # a wait's limit beyond the floor: margin x the slowest tick so far (set by the
        # coordinator), so a loaded machine's slow ticks are not read as a hung section
        self.paced = torch.zeros(1, dtype=torch.float64).share_memory_()

    def party(self, k: int) -> "_Party":
        return _Party(self, k)

    def abort(self) -> None:
        self.broken[0] = 1

    def coordinator_wait(self, timeout: float, check: Callable[[], None]) -> None:
        timeout = max(timeout, float(self.paced[0]))
        n = int(self.release[0]) + 1
        t0 = time.monotonic()
        polls = 0
        while int(self.arrive.min()) < n:
            if int(self.broken[0]):
                raise threading.BrokenBarrierError("a section aborted the barrier")
            polls += 1
            if polls % 50 == 0:
                check()
                if time.monotonic() - t0 > timeout:
                    self.abort()
                    late = [f"rc-section-{k}" for k in range(len(self.arrive)) if int(self.arrive[k]) < n]
                    raise threading.BrokenBarrierError(f"{', '.join(late)} did not reach the barrier "
                                                       f"within {timeout} s")
            time.sleep(self.POLL_S)
        self.release[0] = n


class _Party:
    def __init__(self, barrier: PollBarrier, k: int) -> None:
        self.b, self.k = barrier, k

    def wait(self, timeout: float) -> None:
        b = self.b
        timeout = max(timeout, float(b.paced[0]))
        n = int(b.arrive[self.k]) + 1
        b.arrive[self.k] = n
        t0 = time.monotonic()
        while int(b.release[0]) < n:
            if int(b.broken[0]):
                raise threading.BrokenBarrierError()
            if time.monotonic() - t0 > timeout:
                raise TimeoutError(f"the coordinator did not release the barrier within {timeout} s")
            time.sleep(b.POLL_S)

    def abort(self) -> None:
        self.b.abort()


def _limit(barrier, timeout: float) -> float:
    """A wait's limit: the floor ``timeout``, or the paced one of a :class:`PollBarrier`."""
    paced = getattr(barrier, "paced", None)
    if paced is None:
        paced = getattr(getattr(barrier, "b", None), "paced", None)
    return max(timeout, float(paced[0])) if paced is not None else timeout


def dead_sections(workers: list) -> list[str]:
    """``"rc-section-k was killed by SIGKILL"`` for each process that ended abnormally by its
    own failure (not one that stopped because another failed first)."""
    return [f"{w.name} {exit_reason(w.exitcode)}" for w in workers
            if w.exitcode not in (None, 0, STOPPED)]


def _start_workers(spec: dict, data_dir: str, sh: Shared, K: int, use_procs: bool, timeout: float):
    """The K section workers, started: (workers, the barrier this process waits at)."""
    threads = int(spec.get("worker_threads", 1))
    if use_procs:
        # fork: a section starts from this process's imported torch instead of a fresh
        # interpreter (spawn cost ~5 s of CPU a section, torch and its optimizer's dynamo
        # import).  A forked child must not run OpenMP regions on more than one thread once
        # the parent has (GNU OpenMP's pool does not survive fork), so several threads a
        # section means spawn.
        ctx = mp.get_context("fork" if threads == 1 and "fork" in mp.get_all_start_methods()
                             else "spawn")
        sys.stdout.flush()
        sys.stderr.flush()
        ready = [ctx.Semaphore(0) for _ in range(K)]
        poll = PollBarrier(K)
        barrier = poll
        workers = [ctx.Process(target=_worker, name=f"rc-section-{k}", daemon=True,
                               args=(k, spec, str(data_dir), sh, poll.party(k), ready, threads, timeout, None))
                   for k in range(K)]
    else:
        torch.set_num_threads(threads)
        barrier, ready = threading.Barrier(K + 1), [threading.Semaphore(0) for _ in range(K)]
        copies = [split_gpt(build_gpt(spec["model"], int(spec["seed"])), K) for _ in range(K)]
        workers = [threading.Thread(target=_worker, name=f"rc-section-{k}", daemon=True,
                                    args=(k, spec, str(data_dir), sh, barrier, ready, threads,
                                          timeout, copies[k]))
                   for k in range(K)]
    for w in workers:
        w.start()
    return workers, barrier


def _await_ready(sh: Shared, workers, barrier, K: int, timeout: float) -> None:
    """Start-up (a spawned interpreter imports torch; slow on a busy machine) is not timed and
    gets its own, longer limit; a worker that dies meanwhile fails the run at once."""
    t_start = time.monotonic()
    while int(sh.ready.sum()) < K:
        dead = [w.name for w in workers if not w.is_alive()]
        if dead or time.monotonic() - t_start > max(10 * timeout, 600.0):
            barrier.abort()
            why = f"{', '.join(dead)} died during start-up" if dead else "start-up timed out"
            raise threading.BrokenBarrierError(why)
        time.sleep(0.05)


def _coordinate_ticks(spec: dict, sh: Shared, coord: Coordinator, split: Split, res: Result, wait, barrier,
                      use_procs: bool, on_tick: Tick | None, evaluator: Evaluator | None) -> None:
    """The coordinator's ticks: at barrier A the active sections' readout gradients are
    averaged into the consensus, a row is written, and barrier B lets the next tick start."""
    K, _, ticks = schedule(spec)
    section_params = [list(s.parameters()) for s in split.sections]
    slowest, t_end = 0.0, time.perf_counter()
    for t in range(ticks):
        t0 = time.perf_counter()
        wait()  # A
        act = sh.active.tolist()
        coord.update([sh.grads[k].clone() for k in range(K) if act[k]], t)
        sh.readout.copy_(coord.vector())
        res.train_s += time.perf_counter() - t0
        losses = {k: float(sh.losses[k]) for k in range(K) if act[k]}
        row = _row(t, spec, res.train_s, losses)
        if eval_due(t, spec):
            for k in range(K):
                load_flat(section_params[k], sh.params[k])
            if evaluator is not None:
                row.update(evaluator.at_eval(split))
        res.rows.append(row)
        if on_tick:
            on_tick(t, row)
        wait()  # B
        progress()  # the job's deadline (distlab train's) follows the pace
        # and so does the barrier's limit: margin x the slowest tick, end to end
        slowest = max(slowest, time.perf_counter() - t_end)
        t_end = time.perf_counter()
        if use_procs:
            barrier.paced[0] = DEFAULT_MARGIN * slowest


def train_rc_parallel(spec: dict, data_dir: str, data: TextData, split: Split,
                      on_tick: Tick | None = None, evaluator: Evaluator | None = None,
                      timeout: float = 60.0) -> Result:
    """K concurrent section workers (``spec["concurrency"]``: ``process`` or ``thread``) and
    this process as the coordinator.  ``split`` is the coordinator's copy of the model: its
    readout is the consensus and its sections receive the workers' parameters for evaluation.
    A failed worker fails the run with :class:`SectionFailure`, one line naming it."""
    K, _, _ = schedule(spec)
    use_procs = spec.get("concurrency", "process") == "process"
    sh = Shared(split, spec, share=use_procs)
    coord = Coordinator(split.readout, spec)
    sh.readout.copy_(coord.vector())
    workers, barrier = _start_workers(spec, data_dir, sh, K, use_procs, timeout)
    res = Result(processes=K + 1 if use_procs else 1)

    def check() -> None:
        dead = dead_sections(workers)
        if dead:
            barrier.abort()
            raise SectionFailure(f"RC parallel run failed: {', '.join(dead)}")

    def wait() -> None:
        if use_procs:
            barrier.coordinator_wait(timeout, check)
        else:
            barrier.wait(timeout)

    try:
        _await_ready(sh, workers, barrier, K, timeout)
        wait()
        _coordinate_ticks(spec, sh, coord, split, res, wait, barrier, use_procs, on_tick, evaluator)
        # memory now, while every process is alive (PSS splits a shared page among the
        # processes mapping it at the moment it is read; the workers read theirs before C)
        res.per_process = [memory.snapshot()]
        wait()  # C
    except threading.BrokenBarrierError as e:
        for w in workers:  # give a failing worker a moment to finish dying
            w.join(timeout=2)
        dead = (dead_sections(workers) if use_procs else []) + list(sh.errors)
        why = ", ".join(dead) if dead else (str(e) or f"a section worker did not reach the barrier "
                                                      f"within {timeout} s")
        raise SectionFailure(f"RC parallel run failed: {why}") from None
    except SectionFailure:
        for w in workers:  # a failed run: stop the others now
            if use_procs and w.is_alive():
                w.kill()
        raise
    except BaseException:  # the job's deadline (JobTimeout), an interrupt: the sections stop too
        barrier.abort()
        raise
    finally:
        for w in workers:
            w.join(timeout=10)
            if use_procs and w.is_alive():
                w.kill()
                w.join()
    if use_procs:
        res.per_process += [dict(zip(MEM_KEYS, sh.mem[k].tolist())) for k in range(K)]
    res.memory = memory.combine(res.per_process)
    return res
