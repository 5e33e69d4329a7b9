"""Training under every gradient-coding scheme, on both backends.

One loop per role, the same components everywhere: the scheme's pure coding
functions (:mod:`distlab.techniques.gradient_codes`), the worker state
(:class:`distlab.techniques.coded_worker.CodedWorker`)
and the master's decode-and-step.  Data order: the training set is cut into
``n`` equal partitions after a seeded shuffle, and each partition draws a
fresh mini-batch of ``batch_size / n`` samples at every step, a pure function
of (seed, partition, step) — so every worker holding a partition evaluates
the same samples at the same step, and a resumed run draws what an
uninterrupted one would.

One rule on both backends: every worker processes every step's model, in
order (a late worker starts its next step late); the master uses the first
messages that satisfy the scheme and discards late ones.  Models with
BatchNorm send their running statistics with the model, and each message
carries the statistics its fresh partitions produced; the master adopts the
mean over the messages it used.

Simulated backend: all ``n`` workers live in this process.  Since every
worker evaluates a partition on the same model and the same mini-batch, each
needed partition gradient is computed once per step and handed to every
worker that holds it; each worker is *charged* for the partitions it
evaluates (GC's ``s+1``-fold work stays visible on the clock) and the timing
follows :meth:`SimulatedCluster.master_step`.  Coding time (each worker's
encoding, the master's decoding) is charged when ``cluster.coding.mode`` is
``measured`` (see :func:`.coding_cost.coding_costs`).

Real backend: rank 0 is the master, ranks ``1..n`` the workers, under
torchrun on gloo; straggler delays are real (interruptible) sleeps drawn from
the same model and seed, and the master proceeds on the first messages it
needs (see :mod:`distlab.runtime.dist`).  A worker process that dies is
tolerated (up to what the scheme tolerates): each worker rank runs its work
in a child process that torchrun does not watch, so one death does not tear
the job down, and the master carries on without it.

A spec may list ``seeds`` instead of one ``seed`` (simulated backend only):
the runs are made one after another in this process, each in
``out_dir/seed<k>``, each with its own manifest, exactly as separate jobs
would make them (saving a Python/torch start-up per run).
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import time
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from ..data import EpochBatcher, partition_indices
from ..results.checkpoint import Checkpointer
from ..results.runs import RunRecorder
from ..config.specs import each_seed
from ..runtime import device as devices
from ..runtime.compute import ComputeModel
from ..runtime.network import NetworkModel
from ..runtime.sim import SimulatedCluster
from ..runtime.stragglers import StragglerModel
from ..train.common import (DTYPES, buffer_numel, eval_columns, final_metrics, flat_buffers,
                            flat_params, load_image_data, make_classifier, nbytes_of,
                            partition_grads, partition_grads_loop, seed_everything,
                            set_flat_buffers, set_flat_params, sgd_apply)
from ..techniques.gradient_codes import Scheme, make_scheme
from .spec import CODING_MODES, SPEC_SCHEMA, check_spec, expendable_ranks, nprocs  # noqa: F401 (the trainer's interface)
from ..techniques.coded_worker import CodedWorker
from .coding_cost import coding_costs, profiled_coding_costs

# message metadata slots: fresh loss, compute seconds, staleness, model step, units,
# encode seconds, injected delay slept
META = 7
def _runtime(spec: dict, runtime: dict | None) -> dict:
    """Run-time settings (timeouts, checkpoint cadence), defaults filled in."""
    from ..config.specs import runtime_defaults

    return runtime_defaults(runtime)



def _checkpointer(path: Path, spec: dict, runtime: dict) -> Checkpointer:
    """The run's checkpoint, keyed by the spec: one written under another spec is refused."""
    return Checkpointer(path, spec=spec, **dict(runtime.get("checkpoint", {})))


class Setup:
    """Everything a run needs that follows from its spec and the data."""

    def __init__(self, spec: dict, data_dir: str | Path) -> None:
        # the spec was checked once, where it entered (run_simulated, run_distributed)
        self.spec = spec
        self.seed = int(spec["seed"])
        seed_everything(self.seed)
        self.dtype = DTYPES[spec.get("dtype", "float32")]
        self.n, self.s = int(spec["n"]), int(spec["s"])
        self.scheme: Scheme = make_scheme(spec["scheme"], self.n, self.s,
                                          seed=int(spec.get("code_seed", 0)), c=spec.get("c"))
        # pixels stay uint8 in memory, each batch is normalised as it is taken
        self.train = load_image_data(data_dir, "train", self.dtype, keep_uint8=True)
        self.val = load_image_data(data_dir, "val", self.dtype, keep_uint8=True)
        self.model = make_classifier(spec["model"], self.train, self.dtype, self.seed)
        # the workers' device (distlab.runtime.device; the CPU without the key): model and data there
        self.device = devices.of_spec(spec, "pgc") if spec.get("backend", "simulated") == "simulated" \
            else torch.device("cpu")
        if self.device.type != "cpu":
            self.model = self.model.to(self.device)
            self.train, self.val = self.train.to(self.device), self.val.to(self.device)
        self.nbuf = buffer_numel(self.model)
        # each partition's mini-batch is floor(batch_size / n), as in the authors' code
        # (batch 256 over 12 workers: 21 samples a partition, 252 a step)
        per = int(spec["batch_size"]) // self.n
        if per < 1:
            raise ValueError(f"batch_size: {spec['batch_size']} gives no sample per partition for n={self.n}")
        if self.nbuf and per < 2:
            raise ValueError(f"batch_size: {spec['batch_size']} gives {per} sample per partition for "
                             f"n={self.n}; a BatchNorm model needs at least 2")
        parts = partition_indices(len(self.train), self.n, self.seed)
        if per > len(parts[0]):
            raise ValueError(f"batch_size: per-partition batch {per} exceeds the partition size {len(parts[0])}")
        self.batchers = [EpochBatcher(p, per, self.seed, stream_id=j) for j, p in enumerate(parts)]
        self.lr = float(spec["lr"])
        if "epochs" in spec:  # one epoch = every partition's samples seen once
            self.steps = int(spec["epochs"]) * self.batchers[0].steps_per_epoch
        else:
            self.steps = int(spec["steps"])
        self.numel = flat_params(self.model).numel()
        # what travels: the coded gradient plus the buffers (BatchNorm statistics)
        self.msg_numel = self.numel + self.nbuf
        self.nbytes = nbytes_of(self.msg_numel, self.dtype)
        self.stragglers = StragglerModel.from_config(spec["cluster"]["straggler"], self.seed)

    def batches(self, parts, step: int):
        return [self.train.take(self.batchers[j].batch(step)) for j in parts]

    def compute(self, parts: list[int], step: int, vectorised: bool
                ) -> dict[int, tuple[float, torch.Tensor, torch.Tensor | None, float]]:
        """Loss, gradient, buffers and seconds of each partition in ``parts`` at
        the current model.  Vectorised (simulated backend): one batched call,
        its time split evenly; otherwise one pass per partition (a real worker)."""
        batches = self.batches(parts, step)
        if vectorised and len(parts) > 1:
            r = partition_grads(self.model, torch.stack([b[0] for b in batches]),
                                torch.stack([b[1] for b in batches]))
            secs = [r.seconds / len(parts)] * len(parts)
        else:
            r, secs = partition_grads_loop(self.model, batches)
        return {j: (float(r.losses[i]), r.grads[i], None if r.buffers is None else r.buffers[i], secs[i])
                for i, j in enumerate(parts)}

    def eval_cols(self, step: int) -> dict:
        return eval_columns(self.model, self.train, self.val, step, self.steps,
                            int(self.spec.get("eval_every", 10)))

    def final(self) -> dict:
        return final_metrics(self.model, self.train, self.val)

    def model_vector(self) -> torch.Tensor:
        """Parameters and buffers, what the master sends."""
        if not self.nbuf:
            return flat_params(self.model)
        return torch.cat([flat_params(self.model), flat_buffers(self.model, self.dtype)])

    def load_model_vector(self, flat: torch.Tensor) -> None:
        set_flat_params(self.model, flat[:self.numel])
        if self.nbuf:
            set_flat_buffers(self.model, flat[self.numel:])

    def decode_and_step(self, received: list[int], msgs: dict[int, torch.Tensor],
                        bufs: dict[int, torch.Tensor | None] | None = None) -> float:
        """Decode, apply one SGD step, adopt the received buffers; returns the decode seconds."""
        t0 = time.perf_counter()
        weights = self.scheme.decode_weights(received)
        g = msgs[received[0]].new_zeros(self.numel, dtype=self.dtype)  # on the messages' device
        for w, a in weights.items():
            if a != 0.0:
                g.add_(msgs[w][:self.numel], alpha=a)
        decode_s = time.perf_counter() - t0
        sgd_apply(self.model, g, self.lr)
        if self.nbuf and bufs:
            set_flat_buffers(self.model, torch.stack([bufs[w].to(torch.float64) for w in received]).mean(0))
        return decode_s


def _calibration(spec: dict) -> dict | None:
    """The measured compute and coding costs of the real run named by
    ``calibrate_from`` (a run directory), to charge a simulated prediction."""
    src = spec.get("calibrate_from")
    if not src:
        return None
    path = Path(src) / "manifest.json"
    try:
        man = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"calibrate_from: cannot read {path}: {e}") from e
    cal = man.get("calibration")
    if not cal:
        raise ValueError(f"calibrate_from: {path} has no calibration (not a real-backend pgc run)")
    return cal


def run_simulated(spec: dict, data_dir: str | Path, out_dir: str | Path,
                  runtime: dict | None = None) -> Path:
    """Train one scheme on the simulated cluster and write its run directory
    (or, with ``seeds``, one run directory per seed under ``out_dir``)."""
    check_spec(spec)  # once, for every seed: the rules do not depend on it
    if "seeds" in spec:
        for one in each_seed(spec):
            if "calibrate_from" in one:  # one measured run per seed: ".../seed{seed}"
                one["calibrate_from"] = one["calibrate_from"].replace("{seed}", str(one["seed"]))
            _run_one(one, data_dir, Path(out_dir) / f"seed{one['seed']}", runtime)
        return Path(out_dir)
    return _run_one(spec, data_dir, Path(out_dir), runtime)


def _charges(spec: dict, S: Setup) -> tuple[ComputeModel, np.ndarray | None, float, float]:
    """(compute model, each worker's speed factor or None, encode_s, decode_s) a simulated run
    charges: a real run's calibration, else the config's compute and coding mode."""
    cl = spec["cluster"]
    cal = _calibration(spec)
    compute = ComputeModel.from_config(cl["compute"])
    factor = None
    encode_s = decode_s = 0.0
    coding = dict(cl.get("coding", {"mode": "none"}))
    if coding.get("mode", "none") not in CODING_MODES:
        raise ValueError(f"cluster.coding.mode: must be one of {CODING_MODES}, got {coding.get('mode')!r}")
    if cal is not None:
        # charge what the real workers measured: their mean seconds per partition
        # (each worker's own speed) and the measured encoding and decoding
        unit = np.asarray(cal["unit_compute_s_per_worker"], dtype=float)
        compute = ComputeModel("calibrated", unit_seconds=float(unit.mean()))
        factor = unit / unit.mean()
        encode_s, decode_s = float(cal["encode_s"]), float(cal["decode_s"])
    elif coding.get("mode") == "measured":
        encode_s, decode_s = coding_costs(S.scheme, int(coding.get("numel", S.numel)), S.dtype)
    elif coding.get("mode") == "profile":
        encode_s, decode_s = profiled_coding_costs(coding["profile"], S.scheme,
                                                   int(coding.get("numel", S.numel)), spec.get("dtype", "float32"))
    return compute, factor, encode_s, decode_s


class _SimRun:
    """The state of one simulated run (model, cluster, workers, recorder, counters), the
    part a checkpoint holds."""

    def __init__(self, spec: dict, S: Setup, out_dir: Path, compute: ComputeModel, factor) -> None:
        cl = spec["cluster"]
        self.S = S
        self.cluster = SimulatedCluster(S.n, compute, NetworkModel(**cl["network"]), S.stragglers,
                                        compute_factor=factor)
        self.workers = [CodedWorker(S.scheme, w) for w in range(S.n)]
        self.rec = RunRecorder(out_dir, spec, backend=self.cluster.backend, clock=self.cluster.clock)
        self.units = np.zeros(S.n)
        self.counters = {"gradient_compute_s": 0.0, "simulator_overhead_s": 0.0, "compute_measured_s": 0.0}
        self.grad_s = 0.0
        self.overhead0 = self.measured0 = 0.0

    def load(self, state: dict | None) -> int:
        """Resume from a checkpoint's ``state`` (None: a fresh run); the first step to run."""
        start = 0
        if state is not None:
            self.S.load_model_vector(state["params"])
            self.cluster.load_state_dict(state["cluster"])
            self.rec.load_state_dict(state["recorder"])
            for w, ws in zip(self.workers, state["workers"]):
                w.load_state_dict(ws)
            start = state["step"] + 1
            self.units = np.asarray(state["units"], dtype=float)
            self.counters.update(state["counters"])
        self.overhead0, self.measured0 = self.cluster.overhead_s, self.cluster.measured_compute_s
        return start

    def totals(self) -> dict:
        """The run's compute and overhead seconds so far, a resumed run's earlier part included."""
        c, cluster = self.counters, self.cluster
        return {"gradient_compute_s": c["gradient_compute_s"] + self.grad_s,
                "simulator_overhead_s": c["simulator_overhead_s"] + cluster.overhead_s - self.overhead0,
                "compute_measured_s": c["compute_measured_s"] + cluster.measured_compute_s - self.measured0}

    def snapshot(self, step: int) -> dict:
        return {"step": step, "params": self.S.model_vector(), "cluster": self.cluster.state_dict(),
                "recorder": self.rec.state_dict(), "units": self.units.tolist(), "counters": self.totals(),
                "workers": [w.state_dict() for w in self.workers]}

    def step(self, step: int, encode_s: float, decode_s: float) -> None:
        """One step: every needed partition gradient computed once, each worker charged for
        its own, the master's step on the first messages the scheme needs, one row logged."""
        S, workers, cluster = self.S, self.workers, self.cluster
        todo = {w.worker: w.to_compute(step) for w in workers}
        needed = sorted({j for parts in todo.values() for j in parts})
        computed = S.compute(needed, step, vectorised=True)
        self.grad_s += sum(c[3] for c in computed.values())
        for w in workers:
            parts = todo[w.worker]
            for j in parts:
                loss, g, b, _ = computed[j]
                w.update(j, g, loss, step, b)
            cluster.charge(w.worker, len(parts), sum(computed[j][3] for j in parts))
            if encode_s:
                cluster.charge_seconds(w.worker, encode_s)
            self.units[w.worker] += len(parts)
        msgs = {w.worker: w.message() for w in workers}
        fresh = {w.worker: w.pop_fresh_loss() for w in workers}
        bufs = {w.worker: w.pop_fresh_buffers() for w in workers}
        res = cluster.master_step(step, S.nbytes, S.nbytes, S.scheme.ready, master_s=decode_s)
        ev = S.eval_cols(step)
        S.decode_and_step(res.received, msgs, bufs)
        self.rec.log(step=step, time=cluster.now, step_time=res.step_time,
                     loss=float(np.mean([fresh[w] for w in res.received])),
                     bytes=cluster.ledger.pop_step(), n_received=len(res.received),
                     received=" ".join(map(str, res.received)),
                     started_late=int(res.started_late.sum()),
                     staleness=max(workers[w].staleness(step) for w in res.received),
                     compute_max=float(res.compute.max()), delay_max=float(res.delays.max()), **ev)


def _run_one(spec: dict, data_dir: str | Path, out_dir: Path, runtime: dict | None) -> Path:
    rt = _runtime(spec, runtime)
    S = Setup(spec, data_dir)
    compute, factor, encode_s, decode_s = _charges(spec, S)
    run = _SimRun(spec, S, out_dir, compute, factor)
    ckpt = _checkpointer(out_dir / "checkpoint.pt", spec, rt)
    state = ckpt.load()
    with ckpt.restoring(state):  # a state that does not fit this run: one line, the file set aside
        start = run.load(state)
    stop = ThresholdStop(spec.get("threshold"), [r["loss"] for r in run.rec.rows])
    if stop.stopped_at is not None:  # killed after its last step, before writing its outputs
        start = S.steps
    for step in tqdm(range(start, S.steps), desc=f"{S.scheme.name} s={S.s} seed {S.seed}",
                     mininterval=5, initial=start, total=S.steps, file=sys.stderr):
        run.step(step, encode_s, decode_s)
        ckpt.maybe_save(step, lambda step=step: run.snapshot(step))
        if stop.update(run.rec.rows[-1]["loss"]):
            break
    total = run.totals()
    out = run.rec.finish(final=S.final(), cluster=run.cluster.describe(),
                         simulator_overhead_s=total["simulator_overhead_s"],
                         gradient_compute_s=total["gradient_compute_s"],
                         compute_charged_measured_s=total["compute_measured_s"],
                         # steps run (a stop ends early)
                         units_per_worker_step=float(run.units.sum() / S.n / max(1, len(run.rec.rows))),
                         encode_s=encode_s, decode_s=decode_s,
                         unit_seconds_charged=compute.unit_seconds if compute.mode == "calibrated" else None,
                         bytes_total=run.cluster.ledger.total_bytes, stopped_at_threshold=stop.stopped_at)
    ckpt.clear()
    return out


class ThresholdStop:
    """The stopping rule of a run whose spec has ``threshold.stop``: the run ends
    at the first step where both threshold rules hold, the paper's and the
    moving average's, as :mod:`distlab.results.summarize` defines them (so a run stops
    exactly where its summary says the threshold was reached); the run's
    ``steps`` is then a cap.  Without ``stop`` it never ends a run.  Built from
    the losses already logged, so a resumed run stops where an uninterrupted
    one does."""

    def __init__(self, threshold: dict | None, losses: list[float]) -> None:
        self.on = bool(threshold and threshold.get("stop", False))
        self.threshold = threshold or {}
        self.losses: list[float] = []
        self.stopped_at: int | None = None
        for v in losses:
            self.update(v)

    def update(self, loss: float) -> bool:
        """Add one step's mini-batch loss; True when the run should end here."""
        if not self.on or self.stopped_at is not None:
            return self.stopped_at is not None
        from ..results.summarize import steps_to_threshold, steps_to_threshold_ma

        self.losses.append(float(loss))
        level = float(self.threshold["loss"])
        if (steps_to_threshold(self.losses, level, int(self.threshold.get("repeat", 3))) is not None
                and steps_to_threshold_ma(self.losses, level, int(self.threshold.get("window", 10))) is not None):
            self.stopped_at = len(self.losses)
        return self.stopped_at is not None


# ------------------------------------------------------------------ real backend


def _supervise_worker() -> bool:
    """On a worker rank: fork; the child does the work and this process waits.

    torchrun tears the whole job down when one of *its* processes fails, which
    would make every worker death fatal (the fork launcher lets up to s rank
    processes die, see ``spec.expendable_ranks``).  The child (the real worker) may die
    (killed, crashed): this parent, the process torchrun watches, then reports
    it and exits 0, and the master decides whether the run can go on.  A child
    that fails with an exception (a bug, or the master gone) fails the parent
    with its exit code.  Returns True in the child, False in the parent (whose
    caller must return at once).
    """
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        from ..runtime.launch import die_with_parent

        # a launcher stops the processes it started, not their children; and a killed
        # rank process takes its work child with it (the launcher tolerates that death)
        die_with_parent(f"distlab-work{os.environ.get('RANK', '')}")
        return True
    _, status = os.waitpid(pid, 0)
    rank = os.environ.get("RANK", "?")
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        print(f"\npgc: worker rank {rank} (pid {pid}) died of signal {sig} "
              f"({signal.Signals(sig).name}); the master carries on without it if the scheme allows",
              file=sys.stderr, flush=True)
        return False
    code = os.WEXITSTATUS(status)
    if code:
        sys.stderr.flush()
        os._exit(code)
    return False


def run_distributed(spec: dict, data_dir: str | Path, out_dir: str | Path,
                    runtime: dict | None = None) -> Path | None:
    """Master (rank 0) and ``n`` workers (ranks 1..n) under torchrun."""
    from ..runtime import dist

    check_spec(spec)
    rt = _runtime(spec, runtime)
    timeout = float(rt["timeout_s"])
    if int(os.environ.get("RANK", "0")) != 0 and not _supervise_worker():
        return None
    child = int(os.environ.get("RANK", "0")) != 0
    code = 0
    try:
        ctx = dist.init_from_env("gloo", timeout)
        try:
            S = Setup(spec, data_dir)
            if ctx.world_size != S.n + 1:
                raise ValueError(f"n: launched {ctx.world_size} processes; scheme needs 1 master + {S.n}")
            if ctx.is_master:
                return _master(ctx, S, Path(out_dir), timeout, rt)
            _worker(ctx, S, ctx.rank - 1, timeout)
            return None
        finally:
            ctx.close()
    except BaseException:
        code = 1
        raise
    finally:
        if child:  # the forked worker never returns into the launcher's code
            if code:
                import traceback

                traceback.print_exc()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)


def _account_messages(tr, acc: dict, delays: list, sent_at: dict[int, float], step: int) -> None:
    """Every message the master took in (used or not) into the workers' measured costs
    ``acc`` and their response delays beyond compute; the transport's list is emptied."""
    for a in tr.messages:
        acc["compute_s"][a.worker] += float(a.meta[1])
        acc["units"][a.worker] += float(a.meta[4])
        acc["encode_s"] += float(a.meta[5])
        acc["messages"] += 1
        if a.step in sent_at:
            delays.append((a.step, a.worker, float(a.t_arrival - sent_at[a.step] - a.meta[1]
                                                   - a.meta[5] - a.meta[6])))
    for k in [k for k in sent_at if k < step - 64]:
        del sent_at[k]
    tr.messages.clear()


def _measured_costs(acc: dict) -> tuple[np.ndarray, dict]:
    """(each worker's seconds per partition, the calibration a simulated run charges)."""
    units = np.maximum(acc["units"], 1e-12)
    per_worker = acc["compute_s"] / units
    seen = acc["units"] > 0
    if seen.any():
        per_worker[~seen] = per_worker[seen].mean()  # a worker never heard from: the others' mean
    calibration = {"unit_compute_s_per_worker": per_worker.tolist(),
                   "encode_s": acc["encode_s"] / max(1, acc["messages"]),
                   "decode_s": acc["decode_s"] / max(1, acc["steps"])}
    return per_worker, calibration


def _master(ctx, S: Setup, out_dir: Path, timeout: float, rt: dict) -> Path:
    from ..runtime.dist import MasterTransport

    tr = MasterTransport(ctx, S.n, S.msg_numel, S.msg_numel, meta_len=META, dtype=S.dtype,
                         log=lambda m: print(f"\n{m}", file=sys.stderr, flush=True))
    rec = RunRecorder(out_dir, S.spec, backend=ctx.backend, clock="measured")
    # Only the master holds state worth saving: a restarted worker has no gradient
    # memory and evaluates all its partitions at its first step (CodedWorker).
    ckpt = _checkpointer(out_dir / "checkpoint.pt", S.spec, rt)
    start, elapsed = 0, 0.0
    acc = {"compute_s": np.zeros(S.n), "units": np.zeros(S.n), "encode_s": 0.0, "messages": 0,
           "decode_s": 0.0, "steps": 0}
    delays: list[tuple[int, int, float]] = []  # (step, worker, response delay beyond compute)
    sent_at: dict[int, float] = {}
    state = ckpt.load()
    if state is not None:
        with ckpt.restoring(state):  # a state that does not fit this run: one line, the file set aside
            S.load_model_vector(state["params"])
            rec.load_state_dict(state["recorder"])
        start, elapsed = state["step"] + 1, state["elapsed"]
        acc = state["acc"]
        delays = list(state.get("delays", []))
    try:
        for step in tqdm(range(start, S.steps), desc=f"{S.scheme.name} master", mininterval=5,
                         initial=start, total=S.steps, file=sys.stderr):
            ev = S.eval_cols(step)  # outside the timed region
            t0 = time.perf_counter()
            sent_at[step] = t0
            tr.broadcast_params(step, S.model_vector())
            arrivals = tr.gather(step, S.scheme.ready, timeout,
                                 hint=f"scheme {S.scheme.name} waits for {S.scheme.wait_for} of "
                                      f"{S.n} workers; use a straggler-tolerant scheme or raise "
                                      "runtime.timeout_s")
            received = [a.worker for a in arrivals]
            msgs = {a.worker: a.payload for a in arrivals}
            bufs = {a.worker: a.payload[S.numel:] for a in arrivals} if S.nbuf else None
            decode_s = S.decode_and_step(received, msgs, bufs)
            step_time = time.perf_counter() - t0
            elapsed += step_time
            _account_messages(tr, acc, delays, sent_at, step)
            acc["decode_s"] += decode_s
            acc["steps"] += 1
            meta = np.array([a.meta.numpy() for a in arrivals])
            rec.log(step=step, time=elapsed, step_time=step_time, loss=float(meta[:, 0].mean()),
                    bytes=ctx.ledger.pop_step(), n_received=len(arrivals),
                    received=" ".join(map(str, received)),
                    compute_max=float(meta[:, 1].max()), staleness=int(meta[:, 2].max()),
                    encode_max=float(meta[:, 5].max()), decode_s=decode_s,
                    late_messages=tr.late_messages, lost_workers=len(tr.lost), **ev)
            ckpt.maybe_save(step, lambda: {"step": step, "params": S.model_vector(),
                                           "recorder": rec.state_dict(), "elapsed": elapsed,
                                           "acc": acc, "delays": list(delays)})
    finally:
        tr.shutdown()
    per_worker, calibration = _measured_costs(acc)
    from ..results.summarize import write_table_file
    import pandas as pd

    write_table_file(pd.DataFrame(delays, columns=["step", "worker", "delay"]), out_dir / "delays.csv")
    out = rec.finish(final=S.final(), bytes_total=ctx.ledger.total_bytes,
                     late_messages=tr.late_messages, n_workers=S.n,
                     lost_workers={str(w): why for w, why in tr.lost.items()},
                     calibration=calibration, encode_s=calibration["encode_s"],
                     decode_s=calibration["decode_s"],
                     unit_compute_s=float(np.mean(per_worker)))
    ckpt.clear()
    return out


def _worker(ctx, S: Setup, wid: int, timeout: float) -> None:
    from ..runtime.dist import WorkerTransport

    tr = WorkerTransport(ctx, S.msg_numel, S.msg_numel, meta_len=META, dtype=S.dtype)
    w = CodedWorker(S.scheme, wid)
    factor = float(S.stragglers.compute_factor(S.n)[wid])
    crash_at = S.stragglers.crashes_at(wid)
    while True:
        got = tr.recv_params(timeout_s=timeout * 10)
        if got is None:
            return
        step, flat = got
        if crash_at is not None and step >= crash_at:
            sys.stderr.flush()
            os.kill(os.getpid(), signal.SIGKILL)  # fault injection: a real process death
        S.load_model_vector(flat)
        t0 = time.perf_counter()
        parts = w.to_compute(step)
        computed = S.compute(list(parts), step, vectorised=False)
        for j in parts:
            loss, g, b, _ = computed[j]
            w.update(j, g, loss, step, b)
        compute_s = time.perf_counter() - t0
        msg = w.message()
        b = w.pop_fresh_buffers()
        if b is not None:
            msg = torch.cat([msg, b.to(S.dtype)])
        fresh_loss = w.pop_fresh_loss()
        delay = float(S.stragglers.delays(step, S.n)[wid]) + (factor - 1.0) * compute_s
        if delay > 0 and not tr.sleep(delay):
            return
        tr.send(step, msg, [fresh_loss, compute_s, w.staleness(step), step, len(parts), w.encode_s,
                            delay if math.isfinite(delay) else 0.0])
