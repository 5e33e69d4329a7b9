"""Backprop and readout-gradient consensus (RC), sequential and truly parallel.

RC, as built here (the paper's design is not published; these choices are ours,
see docs/local_learning.md):

* The GPT is cut into K sections (:func:`.model.split_gpt`).  Time advances in
  *ticks*.  At tick ``t`` section ``k`` consumes the activations section
  ``k-1`` produced at tick ``t - d`` (``d`` = ``delay``, detached; the batch it
  carries is batch ``t - k d``), runs its blocks, and trains on its *local*
  objective: the next-token loss of the shared readout applied to its own
  output.  Its gradient reaches its own blocks and the readout; it updates its
  blocks with its own AdamW and *reports* the readout gradient.
* The coordinator averages the reports of the sections that were active at
  tick ``t`` and takes one AdamW step on the readout: the readout is the
  consensus.  Every section then continues with the new readout.
* Staleness is bounded by construction: activations are exactly ``d`` ticks
  old (``d`` = 0 is a lock-step chain on the current weights of the section
  below; ``d`` = 1 pipelines the sections so that all K run at once), and the
  readout is never stale (the reports of tick ``t`` are averaged before tick
  ``t + 1`` starts).

The *same* tick arithmetic runs in one process, section after section
(:func:`train_rc_sequential`, deterministic, for tests and statistics) and in
K concurrent workers (:func:`train_rc_parallel`: OS processes with
shared-memory buffers and a barrier, or threads), which compute the same
numbers: the parallel mode changes the time, not the result.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import resource
import sys
import threading
import time
import traceback
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

import torch

from ..runtime.launch import die_with_parent
from .model import (Split, TextData, build_gpt, flat, heldout_loss, lm_loss, load_flat,
                    make_optimizer, split_gpt)

log = logging.getLogger(__name__)

Tick = Callable[[int, dict], None]


@dataclass
class Result:
    """What a training engine returns: per-tick rows and the final state."""

    rows: list[dict] = field(default_factory=list)
    train_s: float = 0.0
    peak_rss_mb: float = 0.0
    rss_per_process_mb: list[float] = field(default_factory=list)
    processes: int = 1


def peak_rss_self_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


# ----------------------------------------------------------------------- the pieces


class SectionTrainer:
    """One section: its blocks, its optimizer, and the readout it reports through."""

    def __init__(self, k: int, split: Split, spec: dict) -> None:
        self.k = k
        self.section = split.sections[k]
        self.readout = split.readout
        self.params = list(self.section.parameters())
        self.readout_params = list(self.readout.parameters())
        self.opt = make_optimizer(self.params, spec)

    def step(self, h_in: torch.Tensor, y: torch.Tensor,
             emit: Callable[[torch.Tensor], None] | None) -> tuple[float, torch.Tensor]:
        """Forward, hand the detached output on (``emit``), local loss, update the
        blocks; returns (local loss, readout gradient as a flat vector)."""
        h = self.section(h_in)
        if emit is not None:
            emit(h.detach())
        loss = lm_loss(self.readout(h), y)
        for p in self.params + self.readout_params:
            p.grad = None
        loss.backward()
        self.opt.step()
        return float(loss.detach()), flat([p.grad for p in self.readout_params])


class Coordinator:
    """Holds the readout's optimizer; averages the reports and updates the readout."""

    def __init__(self, readout: torch.nn.Module, spec: dict) -> None:
        self.params = list(readout.parameters())
        self.opt = make_optimizer(self.params, spec)

    def update(self, reports: list[torch.Tensor]) -> None:
        if not reports:
            return
        g = torch.stack(reports).mean(0)
        i = 0
        for p in self.params:
            n = p.numel()
            p.grad = g[i:i + n].view_as(p).clone()
            i += n
        self.opt.step()

    def vector(self) -> torch.Tensor:
        return flat([p.detach() for p in self.params])


def schedule(spec: dict) -> tuple[int, int, int]:
    """(K, d, ticks) of an RC spec."""
    return int(spec["sections"]), int(spec.get("delay", 1)), int(spec["steps"])


def active(k: int, t: int, d: int) -> bool:
    return t >= k * d


def eval_due(t: int, spec: dict) -> bool:
    return t % int(spec["eval_every"]) == 0 or t == int(spec["steps"]) - 1


class Evaluator:
    """Held-out loss of the full model on fixed validation windows (and the test split at the end)."""

    def __init__(self, data: TextData, spec: dict) -> None:
        ev = spec["eval"]
        self.val = data.heldout_batches("val", int(ev["batches"]), int(ev["batch_size"]))
        self.data, self.spec = data, spec

    def val_loss(self, split: Split) -> float:
        return heldout_loss(split.forward, self.val)

    def final(self, split: Split) -> dict:
        ev = self.spec["eval"]
        test = self.data.heldout_batches("test", int(ev["final_batches"]), int(ev["batch_size"]))
        return {"val_loss": heldout_loss(split.forward, self.val),
                "test_loss": heldout_loss(split.forward, test)}


def _end_tick(t: int, row: dict, spec: dict, res: "Result", evaluator, split, resume,
              on_tick) -> None:
    """What every sequential engine does after a tick: evaluate when due, record the
    row, let the checkpoint see the tick, report it."""
    if evaluator is not None and eval_due(t, spec):
        row["val_loss"] = evaluator.val_loss(split)
    res.rows.append(row)
    resume.tick(t + 1, res)
    if on_tick:
        on_tick(t, row)


def _own_peak(res: "Result") -> "Result":
    """A one-process engine's peak memory, recorded on its result."""
    res.peak_rss_mb = peak_rss_self_mb()
    res.rss_per_process_mb = [res.peak_rss_mb]
    return res


def _row(t: int, spec: dict, train_s: float, losses: dict[int, float]) -> dict:
    tokens = (t + 1) * int(spec["batch_size"]) * int(spec["model"]["block_size"])
    vals = list(losses.values())
    last = losses.get(max(losses)) if losses else float("nan")
    return {"step": t, "tokens": tokens, "time": train_s,
            "loss": sum(vals) / len(vals) if vals else float("nan"),
            "loss_top": last, "active_sections": len(vals), "val_loss": float("nan")}


class Resume:
    """Checkpoint glue of the sequential engines (BP, sequential RC, PC): the state to save
    after a tick and the tick to start from.  ``ckpt`` is a :class:`distlab.runs.Checkpointer`
    (keyed by the run spec) or None.  Nothing random happens after initialisation (batches
    are pure functions of the step), so a resumed run computes what an uninterrupted one does."""

    def __init__(self, ckpt, model: torch.nn.Module, optimizers: list, get_extra=None,
                 set_extra=None) -> None:
        self.ckpt, self.model, self.optimizers = ckpt, model, optimizers
        self.get_extra = get_extra or (lambda: None)
        self.set_extra = set_extra or (lambda extra: None)

    def start(self, res: Result) -> int:
        state = self.ckpt.load() if self.ckpt is not None else None
        if state is None:
            return 0
        self.model.load_state_dict(state["model"])
        for opt, st in zip(self.optimizers, state["optimizers"]):
            opt.load_state_dict(st)
        res.rows, res.train_s = list(state["rows"]), float(state["train_s"])
        self.set_extra(state["extra"])
        log.info("resumed from %s at step %d", self.ckpt.path, state["t"])
        return int(state["t"])

    def tick(self, t_done: int, res: Result) -> None:
        if self.ckpt is not None:
            self.ckpt.maybe_save(t_done, lambda: {
                "t": t_done, "model": self.model.state_dict(),
                "optimizers": [o.state_dict() for o in self.optimizers],
                "rows": list(res.rows), "train_s": res.train_s, "extra": self.get_extra()})


# ----------------------------------------------------------------------- backprop


def train_bp(spec: dict, data: TextData, split: Split, on_tick: Tick | None = None,
             evaluator: Evaluator | None = None, ckpt=None) -> Result:
    """Standard end-to-end backprop of the whole (untied) GPT, one AdamW."""
    params = [p for s in split.sections for p in s.parameters()] + list(split.readout.parameters())
    opt = make_optimizer(params, spec)
    res = Result()
    resume = Resume(ckpt, split.gpt, [opt])
    for t in range(resume.start(res), int(spec["steps"])):
        t0 = time.perf_counter()
        x, y = data.train_batch(t)
        loss = lm_loss(split.forward(x), y)
        for p in params:
            p.grad = None
        loss.backward()
        opt.step()
        res.train_s += time.perf_counter() - t0
        row = _row(t, spec, res.train_s, {0: float(loss.detach())})
        _end_tick(t, row, spec, res, evaluator, split, resume, on_tick)
    return _own_peak(res)


# ----------------------------------------------------------------------- RC, sequential


def train_rc_sequential(spec: dict, data: TextData, split: Split, on_tick: Tick | None = None,
                        evaluator: Evaluator | None = None, ckpt=None) -> Result:
    """All K sections in this process, one after another within each tick (deterministic)."""
    K, d, ticks = schedule(spec)
    workers = [SectionTrainer(k, split, spec) for k in range(K)]
    coord = Coordinator(split.readout, spec)
    fifo: list[deque] = [deque() for _ in range(K - 1)]  # section k's outputs awaiting k + 1
    res = Result()

    def set_fifo(saved: list[list[torch.Tensor]]) -> None:
        for q, items in zip(fifo, saved):
            q.clear()
            q.extend(items)

    resume = Resume(ckpt, split.gpt, [w.opt for w in workers] + [coord.opt],
                    get_extra=lambda: [list(q) for q in fifo], set_extra=set_fifo)
    for t in range(resume.start(res), ticks):
        t0 = time.perf_counter()
        new: list[torch.Tensor | None] = [None] * K
        losses, reports = {}, []
        for k in range(K):
            if not active(k, t, d):
                continue
            x, y = data.train_batch(t - k * d)
            if k == 0:
                h_in = x
            elif d == 0:
                h_in = new[k - 1]
            else:
                h_in = fifo[k - 1].popleft()
            emit = None if k == K - 1 else (lambda h, k=k: new.__setitem__(k, h))
            losses[k], g = workers[k].step(h_in, y, emit)
            reports.append(g)
        if d > 0:
            for k in range(K - 1):
                if new[k] is not None:
                    fifo[k].append(new[k])
        coord.update(reports)
        res.train_s += time.perf_counter() - t0
        row = _row(t, spec, res.train_s, losses)
        _end_tick(t, row, spec, res, evaluator, split, resume, on_tick)
    return _own_peak(res)


# ----------------------------------------------------------------------- RC, parallel


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
        self.rss = z(K, dtype=torch.float64)
        self.ready = z(K, dtype=torch.int64)  # set by each worker once it is built
        self.errors: list[str] = []  # thread workers' failures (processes report exit codes)


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
                    if d == 0 and not ready[k - 1].acquire(timeout=timeout):
                        raise TimeoutError(f"section {k}: no activations from section {k - 1} "
                                           f"after {timeout} s")
                    h_in = sh.acts[k - 1][(t - d) % slots].clone()
                loss, g = w.step(h_in, y, None if k == K - 1 else (lambda h: emit(h, t)))
                sh.grads[k].copy_(g)
                sh.losses[k] = loss
            sh.active[k] = int(on)
            if eval_due(t, spec):
                sh.params[k].copy_(flat([p.detach() for p in w.params]))
            barrier.wait(timeout)  # A: reports in
            barrier.wait(timeout)  # B: the consensus readout is out
            load_flat(read_params, sh.readout)
        sh.rss[k] = peak_rss_self_mb()
        barrier.wait(timeout)  # C: final state written
    except BaseException as e:
        traceback.print_exc()
        barrier.abort()
        if threading.current_thread() is threading.main_thread() or mp.parent_process() is not None:
            raise  # a process: its exit code tells the coordinator
        sh.errors.append(f"rc-section-{k}: {type(e).__name__}: {e}")  # a thread: report it


def train_rc_parallel(spec: dict, data_dir: str, data: TextData, split: Split,
                      on_tick: Tick | None = None, evaluator: Evaluator | None = None,
                      timeout: float = 60.0) -> Result:
    """K concurrent section workers (``spec["concurrency"]``: ``process`` or ``thread``) and
    this process as the coordinator.  ``split`` is the coordinator's copy of the model: its
    readout is the consensus and its sections receive the workers' parameters for evaluation."""
    K, d, ticks = schedule(spec)
    mode = spec.get("concurrency", "process")
    threads = int(spec.get("worker_threads", 1))
    use_procs = mode == "process"
    sh = Shared(split, spec, share=use_procs)
    coord = Coordinator(split.readout, spec)
    sh.readout.copy_(coord.vector())
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
        barrier, ready = ctx.Barrier(K + 1), [ctx.Semaphore(0) for _ in range(K)]
        workers = [ctx.Process(target=_worker, name=f"rc-section-{k}", daemon=True,
                               args=(k, spec, str(data_dir), sh, barrier, ready, threads, timeout, None))
                   for k in range(K)]
    else:
        torch.set_num_threads(threads)
        barrier, ready = threading.Barrier(K + 1), [threading.Semaphore(0) for _ in range(K)]
        copies = [split_gpt(build_gpt(spec["model"], int(spec["seed"])), K) for _ in range(K)]
        workers = [threading.Thread(target=_worker, name=f"rc-section-{k}", daemon=True,
                                    args=(k, spec, str(data_dir), sh, barrier, ready, threads,
                                          timeout, copies[k]))
                   for k in range(K)]
    res = Result(processes=K + 1 if use_procs else 1)
    for w in workers:
        w.start()
    section_params = [list(s.parameters()) for s in split.sections]
    try:
        # start-up (a spawned interpreter imports torch; slow on a busy machine) is not timed and
        # gets its own, longer limit; a worker that dies meanwhile fails the run at once
        t_start = time.monotonic()
        while int(sh.ready.sum()) < K:
            dead = [w.name for w in workers if not w.is_alive()]
            if dead or time.monotonic() - t_start > max(10 * timeout, 600.0):
                barrier.abort()
                why = f"{', '.join(dead)} died during start-up" if dead else "start-up timed out"
                raise threading.BrokenBarrierError(why)
            time.sleep(0.05)
        barrier.wait(timeout)
        for t in range(ticks):
            t0 = time.perf_counter()
            barrier.wait(timeout)  # A
            act = sh.active.tolist()
            coord.update([sh.grads[k].clone() for k in range(K) if act[k]])
            sh.readout.copy_(coord.vector())
            res.train_s += time.perf_counter() - t0
            losses = {k: float(sh.losses[k]) for k in range(K) if act[k]}
            row = _row(t, spec, res.train_s, losses)
            if eval_due(t, spec):
                for k in range(K):
                    load_flat(section_params[k], sh.params[k])
                if evaluator is not None:
                    row["val_loss"] = evaluator.val_loss(split)
            res.rows.append(row)
            if on_tick:
                on_tick(t, row)
            barrier.wait(timeout)  # B
        barrier.wait(timeout)  # C
    except threading.BrokenBarrierError as e:
        for w in workers:  # give a failing worker a moment to finish dying
            w.join(timeout=2)
        dead = [f"{w.name} (exit code {w.exitcode})" for w in workers
                if use_procs and w.exitcode not in (None, 0)] + list(sh.errors)
        raise RuntimeError("RC parallel run failed: " + (", ".join(dead) if dead else str(e) or
                           f"a section worker did not reach the barrier within {timeout} s")) from e
    finally:
        if any(w.is_alive() for w in workers):
            barrier.abort()
        for w in workers:
            w.join(timeout=10)
            if use_procs and w.is_alive():
                w.kill()
                w.join()
    own = peak_rss_self_mb()
    if use_procs:
        res.rss_per_process_mb = [own] + [float(x) for x in sh.rss]
    else:
        res.rss_per_process_mb = [own]
    res.peak_rss_mb = sum(res.rss_per_process_mb)
    return res
