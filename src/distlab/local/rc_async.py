"""Free-running asynchronous RC: section processes that never wait for each other.

The lock-step mode (:func:`.rc.train_rc_parallel`) meets at two barriers a
tick and computes the sequential mode's numbers.  Here every section runs its
own loop of ``steps`` updates, as fast as it can:

* section 0 reads batch ``i`` at its update ``i``; section k > 0 takes the
  *latest* activation section k-1 has published (with the index of the batch
  it carries, for the targets), whatever its age: it may train on an
  activation twice when it is faster than the section below, or skip some
  when it is slower.  The only wait between sections is for the very first
  activation (before it, section k has nothing to learn from);
* before each update a section copies the *latest* consensus readout
  (``version`` v), trains on its local objective (the readout's loss on its
  own output), and posts its readout gradient with v.  A section has one
  report slot: it waits for the coordinator to take its previous report (a
  queue of one; the coordinator polls every millisecond), never for another
  section;
* the coordinator takes whatever reports have arrived, averages those whose
  *staleness* (the number of consensus updates since the version the report
  was computed with) is at most ``staleness_bound``, drops the others
  (counted), takes one optimizer step on the readout and publishes version
  v + 1.

The held-out curve (with an evaluator): no step is shared by the sections, so the model
"at update i" is defined as every section's parameters right after its own update i, with
the consensus readout as it stood when the slowest section finished update i.  Each
section copies its parameters into a shared slot at each evaluation step (``eval_due``,
the last excepted: the final model is evaluated anyway) and the coordinator copies the
readout; the coordinator evaluates the snapshots after training, outside the timed
interval, into the rows of those steps, so the run has a validation curve like the
lock-step modes (what ``gap_shrink_late``, the settled-gap precondition, reads).  The
benchmarks pass no evaluator and take no snapshots (their memory is the training's).

Measured and reported per section (``Result.staleness``): the staleness of
the readout its applied reports saw (mean and max, never above the bound;
tested), the reports dropped, and the age of the activations it consumed (in
updates section k-1 had made since producing them).  Nothing is
deterministic here: the numbers depend on the machine's timing.

A section process that dies fails the run at the coordinator's next poll with
one line naming it (:class:`.rc.SectionFailure`); a section that stops
reporting for ``timeout`` seconds too.  The coordinator looks for dead sections
at every poll, also while the others keep posting, and never waits on a lock
without looking again: a section killed while it held the readout's lock leaves
the lock taken for good.
"""

from __future__ import annotations

import multiprocessing as mp
import sys
import time
from contextlib import contextmanager

import torch

from ..runtime.launch import die_with_parent
from . import memory
from .model import Split, TextData, build_gpt, flat, load_flat, split_gpt
from .processes import MEM_KEYS, dead_sections
from .rc import Coordinator, Evaluator, Result, SectionFailure, SectionTrainer, Tick, _row, eval_due, exit_reason

POLL_S = 0.001


def snapshot_steps(spec: dict) -> list[int]:
    """The updates after which the sections' parameters are kept for the held-out curve: every
    evaluation step but the last (:func:`.rc.eval_due`)."""
    steps = int(spec["steps"])
    return [i for i in range(steps - 1) if eval_due(i, spec)]


class AsyncShared:
    def __init__(self, split: Split, spec: dict, snaps: list[int] | None = None) -> None:
        K = int(spec["sections"])
        B, T = int(spec["batch_size"]), int(spec["model"]["block_size"])
        D = int(spec["model"]["d_model"])
        n_read = sum(p.numel() for p in split.readout.parameters())

        def z(*shape, dtype=torch.float32, fill=0):
            return torch.full(shape, fill, dtype=dtype).share_memory_()

        self.act = [z(B, T, D) for _ in range(K - 1)]
        self.act_meta = [z(2, dtype=torch.int64, fill=-1) for _ in range(K - 1)]  # batch, producer step
        self.steps = z(K, dtype=torch.int64)
        self.grads = z(K, n_read)
        self.rep = z(K, 3, dtype=torch.int64)  # posted, readout version used, section step
        self.rep_loss = z(K, dtype=torch.float64)
        self.readout = z(n_read)
        self.version = z(1, dtype=torch.int64)
        self.age = z(K, 3, dtype=torch.float64)  # activation age: sum, max, reads
        self.params = [z(sum(p.numel() for p in s.parameters())) for s in split.sections]
        self.mem = z(K, len(MEM_KEYS), dtype=torch.float64)
        self.ready = z(K, dtype=torch.int64)
        self.done = z(K, dtype=torch.int64)
        self.go = z(1, dtype=torch.int64)
        # the held-out curve's snapshots (with an evaluator only): update index -> slot
        self.snap_at = {int(i): j for j, i in enumerate(snaps or [])}
        n_snap = len(self.snap_at)
        self.snap_params = [z(n_snap, sum(p.numel() for p in s.parameters())) for s in split.sections] if n_snap else []
        self.snap_readout = z(n_snap, n_read) if n_snap else None


def _wait(cond, timeout: float, what: str) -> None:
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout:
            raise TimeoutError(f"{what} after {timeout} s")
        time.sleep(POLL_S)


def _async_worker(k: int, spec: dict, data_dir: str, sh: AsyncShared, act_locks, read_lock,
                  timeout: float) -> None:
    try:
        die_with_parent(f"rc-section-{k}")
        torch.set_num_threads(int(spec.get("worker_threads", 1)))
        K, steps = int(spec["sections"]), int(spec["steps"])
        split = split_gpt(build_gpt(spec["model"], int(spec["seed"])), K)
        data = TextData(data_dir, int(spec["model"]["block_size"]), int(spec["batch_size"]),
                        int(spec["seed"]), splits=("train",))
        w = SectionTrainer(k, split, spec)
        read_params = list(split.readout.parameters())
        sh.ready[k] = 1
        _wait(lambda: int(sh.go[0]) == 1, 10 * timeout, "the coordinator did not start the run")
        if k > 0:
            _wait(lambda: int(sh.act_meta[k - 1][1]) >= 0, timeout,
                  f"no activation from rc-section-{k - 1}")
        for i in range(steps):
            if k == 0:
                h_in, y = data.train_batch(i)
                batch = i
            else:
                with act_locks[k - 1]:
                    h_in = sh.act[k - 1].clone()
                    batch, made = sh.act_meta[k - 1].tolist()
                # updates section k-1 completed after the one that produced it (the producer
                # publishes during its update, before counting it: 0 while that one runs)
                age = max(0, int(sh.steps[k - 1]) - (made + 1))
                sh.age[k, 0] += age
                sh.age[k, 1] = max(float(sh.age[k, 1]), float(age))
                sh.age[k, 2] += 1
                y = data.train_batch(batch)[1]
            _wait(lambda: int(sh.rep[k, 0]) == 0, timeout, "the coordinator did not take a report")
            with read_lock:
                load_flat(read_params, sh.readout)
                version = int(sh.version[0])

            def emit(h: torch.Tensor, batch=batch, i=i) -> None:
                with act_locks[k]:
                    sh.act[k].copy_(h)
                    sh.act_meta[k][0] = batch
                    sh.act_meta[k][1] = i

            loss, g = w.step(h_in, y, None if k == K - 1 else emit, i)
            sh.grads[k].copy_(g)
            sh.rep_loss[k] = loss
            sh.rep[k, 1] = version
            sh.rep[k, 2] = i
            sh.rep[k, 0] = 1  # posted last: the coordinator reads the report after this flag
            sh.steps[k] = i + 1
            j = sh.snap_at.get(i)
            if j is not None:  # this section's parameters right after its update i
                sh.snap_params[k][j].copy_(flat([p.detach() for p in w.params]))
        sh.params[k].copy_(flat([p.detach() for p in w.params]))
        snap = memory.snapshot()
        sh.mem[k] = torch.tensor([snap[key] for key in MEM_KEYS], dtype=torch.float64)
        sh.done[k] = 1
        # stay alive (mapped) until the coordinator has read every process's memory
        _wait(lambda: int(sh.go[0]) == 2, 10 * timeout, "the coordinator did not finish")
    except BaseException as e:  # noqa: BLE001 - one line, the exit code tells the coordinator
        print(f"rc-section-{k}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        import os
        os._exit(1)


def _fail(why: str) -> SectionFailure:
    return SectionFailure(f"RC asynchronous run failed: {why}")


def _raise_if_dead(workers) -> None:
    dead = dead_sections(workers)
    if dead:
        raise _fail(", ".join(dead))


@contextmanager
def _held(lock, workers, timeout: float):
    """``lock``, taken in short tries that look for a dead section in between."""
    t_try = time.monotonic()
    while not lock.acquire(timeout=0.05):
        _raise_if_dead(workers)
        if time.monotonic() - t_try > timeout:
            raise _fail(f"the readout's lock was not free for {timeout} s")
    try:
        yield
    finally:
        lock.release()


def _start_sections(spec: dict, data_dir: str, sh: AsyncShared, timeout: float):
    """The K section processes, started: (workers, the readout's lock)."""
    K = int(spec["sections"])
    # fork (one imported torch for all) unless a section runs several threads: GNU OpenMP's
    # pool does not survive a fork (as in the lock-step mode)
    ctx = mp.get_context("fork" if int(spec.get("worker_threads", 1)) == 1 else "spawn")
    sys.stdout.flush()
    sys.stderr.flush()
    act_locks = [ctx.Lock() for _ in range(K - 1)]
    read_lock = ctx.Lock()
    workers = [ctx.Process(target=_async_worker, name=f"rc-section-{k}", daemon=True,
                           args=(k, spec, str(data_dir), sh, act_locks, read_lock, timeout))
               for k in range(K)]
    for w in workers:
        w.start()
    return workers, read_lock


def _await_start(sh: AsyncShared, workers, K: int, timeout: float) -> None:
    """Wait until every section is ready, failing on a dead one or after the start-up time."""
    t_start = time.monotonic()
    while int(sh.ready.sum()) < K:
        dead = dead_sections(workers)
        if dead:
            raise _fail(", ".join(dead) + " during start-up")
        if time.monotonic() - t_start > max(10 * timeout, 600.0):
            raise _fail("start-up timed out")
        time.sleep(0.01)


def _take_reports(sh: AsyncShared, posted: list[int], version: int, bound: int, stale: list[dict],
                  pending: list[float]) -> list:
    """The gradients of the ``posted`` reports no staler than ``bound`` (their losses into
    ``pending``); the staler ones are counted as dropped; every slot is freed."""
    fresh = []
    for k in posted:
        s = version - int(sh.rep[k, 1])
        if s <= bound:
            fresh.append(sh.grads[k].clone())
            pending.append(float(sh.rep_loss[k]))
            st = stale[k]
            st["sum"] += s
            st["max"] = max(st["max"], s)
            st["applied"] += 1
        else:
            stale[k]["dropped"] += 1
        sh.rep[k, 0] = 0
    return fresh


def _add_rows(res: Result, spec: dict, sh: AsyncShared, taken: int, pending: list[float], elapsed: float,
              on_tick: Tick | None) -> list[float]:
    """One row per K reports taken (the mean loss of ``pending``); the losses not yet in a row."""
    K = int(spec["sections"])
    B, T = int(spec["batch_size"]), int(spec["model"]["block_size"])
    while taken >= (len(res.rows) + 1) * K:
        t = len(res.rows)
        row = _row(t, spec, elapsed, {0: sum(pending) / max(len(pending), 1)})
        row["tokens"] = int(sh.steps[0]) * B * T
        pending = []
        res.rows.append(row)
        if on_tick:
            on_tick(t, row)
    return pending


def _coordinate(spec: dict, sh: AsyncShared, coord: Coordinator, workers, read_lock, res: Result,
                stale: list[dict], snaps: list[int], on_tick: Tick | None, timeout: float) -> None:
    """The coordinator's loop, from the start signal to the last section's last report."""
    K, steps = int(spec["sections"]), int(spec["steps"])
    bound = int(spec.get("staleness_bound", K))
    pending_snaps = list(enumerate(snaps))  # (slot, update) whose readout is not taken yet
    version, taken, pending = 0, 0, []
    t0 = time.perf_counter()
    last = time.monotonic()
    sh.go[0] = 1
    while True:
        _raise_if_dead(workers)  # every poll: the others' reports must not hide a dead section
        # the readout of a snapshot: as it stands once the slowest section finished update i
        while pending_snaps and int(sh.steps.min()) > pending_snaps[0][1]:
            sh.snap_readout[pending_snaps.pop(0)[0]].copy_(coord.vector())
        posted = [k for k in range(K) if int(sh.rep[k, 0]) == 1]
        if posted:
            fresh = _take_reports(sh, posted, version, bound, stale, pending)
            taken += len(posted)
            if fresh:
                coord.update(fresh, taken // K)
                with _held(read_lock, workers, timeout):
                    sh.readout.copy_(coord.vector())
                    version += 1
                    sh.version[0] = version
            last = time.monotonic()
            pending = _add_rows(res, spec, sh, taken, pending, time.perf_counter() - t0, on_tick)
            continue
        if int(sh.done.sum()) == K:
            break
        if time.monotonic() - last > timeout:
            slow = [f"rc-section-{k} (at update {int(sh.steps[k])} of {steps})"
                    for k in range(K) if not int(sh.done[k])]
            raise _fail(f"no report for {timeout} s from {', '.join(slow)}")
        time.sleep(POLL_S)
    res.train_s = time.perf_counter() - t0


def _stop_sections(sh: AsyncShared, workers) -> None:
    """Tell the sections the run is over and join them (killing one that does not end)."""
    sh.go[0] = 2
    for w in workers:
        w.join(timeout=10)
        if w.is_alive():
            w.kill()
            w.join()


def _staleness_rows(stale: list[dict], sh: AsyncShared, bound: int) -> list[dict]:
    """``Result.staleness``: one row per section."""
    return [{"section": k, "bound": bound, "applied": st["applied"], "dropped": st["dropped"],
             "readout_staleness_mean": st["sum"] / max(st["applied"], 1),
             "readout_staleness_max": st["max"],
             "activation_age_mean": float(sh.age[k, 0]) / max(float(sh.age[k, 2]), 1.0),
             "activation_age_max": float(sh.age[k, 1]), "updates": int(sh.steps[k])}
            for k, st in enumerate(stale)]


def train_rc_async(spec: dict, data_dir: str, data: TextData, split: Split,
                   on_tick: Tick | None = None, evaluator: Evaluator | None = None,
                   timeout: float = 60.0) -> Result:
    """K free-running section processes and this process as the coordinator (see the module
    docstring).  Rows: one per K reports taken (``step`` = reports // K - 1), ``time`` the
    wall time since the start, ``tokens`` what section 0 has read; the held-out loss at the
    end only."""
    K = int(spec["sections"])
    snaps = snapshot_steps(spec) if evaluator is not None else []
    sh = AsyncShared(split, spec, snaps)
    coord = Coordinator(split.readout, spec)
    sh.readout.copy_(coord.vector())
    workers, read_lock = _start_sections(spec, data_dir, sh, timeout)
    res = Result(processes=K + 1)
    stale = [{"sum": 0, "max": 0, "applied": 0, "dropped": 0} for _ in range(K)]
    try:
        _await_start(sh, workers, K, timeout)
        _coordinate(spec, sh, coord, workers, read_lock, res, stale, snaps, on_tick, timeout)
        res.per_process = [memory.snapshot()] + [dict(zip(MEM_KEYS, sh.mem[k].tolist()))
                                                 for k in range(K)]
        sh.go[0] = 2
    except BaseException:
        for w in workers:  # a failed run: nothing the sections compute now is used
            if w.is_alive():
                w.kill()
        raise
    finally:
        _stop_sections(sh, workers)
    bad = [f"{w.name} {exit_reason(w.exitcode)}" for w in workers if w.exitcode != 0]
    if bad:
        raise _fail(", ".join(bad) + " after training")
    if snaps and evaluator is not None:
        _evaluate_snapshots(res, split, sh, snaps, evaluator)
    for k, s in enumerate(split.sections):
        load_flat(list(s.parameters()), sh.params[k])
    if res.rows and evaluator is not None:
        res.rows[-1].update(evaluator.at_eval(split))
    res.memory = memory.combine(res.per_process)
    res.staleness = _staleness_rows(stale, sh, int(spec.get("staleness_bound", K)))
    return res


def _evaluate_snapshots(res: Result, split: Split, sh: AsyncShared, snaps: list[int], evaluator: Evaluator) -> None:
    """The held-out loss of each snapshot (sections after their own update i, the readout when
    the slowest finished it) into the row of step i; the final readout is put back after."""
    read_params = list(split.readout.parameters())
    final_readout = flat([p.detach() for p in read_params]).clone()
    for j, i in enumerate(snaps):
        if i >= len(res.rows):
            continue
        for k, s in enumerate(split.sections):
            load_flat(list(s.parameters()), sh.snap_params[k][j])
        load_flat(read_params, sh.snap_readout[j])
        res.rows[i].update(evaluator.at_eval(split))
    load_flat(read_params, final_readout)
