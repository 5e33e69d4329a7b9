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
K concurrent workers (:func:`.processes.train_rc_parallel`: OS processes with
shared-memory buffers and a barrier, or threads), which compute the same
numbers: the lock-step parallel mode changes the time, not the result.  The
free-running asynchronous mode (sections never wait for each other) is
:mod:`.rc_async`; the RC + PC hybrid (an error signal from above besides the
readout's) is the ``feedback`` option of :func:`train_rc_sequential`.
"""

from __future__ import annotations

import copy
import logging
import signal
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

import torch

from . import memory
from .model import Split, TextData, flat, heldout_loss, lm_loss, make_optimizer, set_lr

log = logging.getLogger(__name__)

Tick = Callable[[int, dict], None]


@dataclass
class Result:
    """What a training engine returns: per-tick rows and the final state."""

    rows: list[dict] = field(default_factory=list)
    train_s: float = 0.0
    memory: dict = field(default_factory=dict)  # memory.combine of the run's processes
    per_process: list[dict] = field(default_factory=list)  # memory.snapshot of each process
    processes: int = 1
    staleness: list[dict] = field(default_factory=list)  # per section (asynchronous mode)


class SectionFailure(RuntimeError):
    """A section worker died or stopped reporting; the message names it in one line."""


def exit_reason(code: int | None) -> str:
    if code is None:
        return "did not exit"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


# ----------------------------------------------------------------------- the pieces


class SectionTrainer:
    """One section: its blocks, its optimizer, and the readout it reports through."""

    def __init__(self, k: int, split: Split, spec: dict, readout: torch.nn.Module | None = None) -> None:
        self.k = k
        self.spec = spec
        self.section = split.sections[k]
        self.readout = split.readout if readout is None else readout
        self.params = list(self.section.parameters())
        self.readout_params = list(self.readout.parameters())
        self.opt = make_optimizer(self.params, spec)
        self.keep_grad = False  # set for one update to keep its block gradient (last_grad)
        self.last_grad: torch.Tensor | None = None

    def step(self, h_in: torch.Tensor, y: torch.Tensor,
             emit: Callable[[torch.Tensor], None] | None, t: int = 0) -> tuple[float, torch.Tensor]:
        """Forward, hand the detached output on (``emit``), local loss, update the
        blocks (update ``t`` of the learning-rate schedule); returns (local loss, readout
        gradient as a flat vector)."""
        h = self.section(h_in)
        if emit is not None:
            emit(h.detach())
        return self.update(h, y, t)

    def update(self, h: torch.Tensor, y: torch.Tensor, t: int,
               feedback: tuple[float, torch.Tensor] | None = None) -> tuple[float, torch.Tensor]:
        """The local loss of output ``h`` through the readout; with ``feedback`` = (gamma,
        eps), also the PC-style error from above: the surrogate ``-gamma <h, eps>`` whose
        gradient is ``gamma`` times the error sent back (eps ~ -dL/dh)."""
        loss = lm_loss(self.readout(h), y)
        for p in self.params + self.readout_params:
            p.grad = None
        if feedback is not None:
            gamma, eps = feedback
            h.backward(-gamma * eps, retain_graph=True)  # reaches the blocks only, not the readout
        loss.backward()
        if self.keep_grad:
            self.last_grad = flat([p.grad if p.grad is not None else torch.zeros_like(p)
                                   for p in self.params])
            self.keep_grad = False
        set_lr([self.opt], self.spec, t)
        self.opt.step()
        return float(loss.detach()), flat([p.grad for p in self.readout_params])


class Coordinator:
    """Holds the readout's optimizer; averages the reports and updates the readout."""

    def __init__(self, readout: torch.nn.Module, spec: dict) -> None:
        self.spec = spec
        self.params = list(readout.parameters())
        self.opt = make_optimizer(self.params, spec)

    def update(self, reports: list[torch.Tensor], t: int = 0) -> None:
        if not reports:
            return
        g = torch.stack(reports).mean(0)
        i = 0
        for p in self.params:
            n = p.numel()
            p.grad = g[i:i + n].view_as(p).clone()
            i += n
        set_lr([self.opt], self.spec, t)
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
    """Held-out loss of the full model on fixed validation windows (and the test split at the
    end), and the *probe* losses: the readout applied to each section's output."""

    def __init__(self, data: TextData, spec: dict) -> None:
        ev = spec["eval"]
        self.val = data.heldout_batches("val", int(ev["batches"]), int(ev["batch_size"]))
        self.data, self.spec = data, spec

    def val_loss(self, split: Split) -> float:
        return heldout_loss(split.forward, self.val)

    @torch.no_grad()
    def probes(self, split: Split) -> dict[str, float]:
        """``probe{k}``: validation loss of the readout on section k's output (the last one
        is the model's own loss)."""
        totals = [0.0] * len(split.sections)
        count = 0
        for x, y in self.val:
            h = x
            for k, sec in enumerate(split.sections):
                h = sec(h)
                totals[k] += float(lm_loss(split.readout(h), y, reduction="sum"))
            count += y.numel()
        return {f"probe{k}": v / count for k, v in enumerate(totals)}

    def at_eval(self, split: Split) -> dict[str, float]:
        probes = self.probes(split)
        return {"val_loss": probes[f"probe{len(split.sections) - 1}"], **probes}

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
        row.update(evaluator.at_eval(split))
    res.rows.append(row)
    resume.tick(t + 1, res)
    if on_tick:
        on_tick(t, row)


def _own_peak(res: "Result") -> "Result":
    """A one-process engine's memory (read at the end of training), recorded on its result."""
    res.per_process = [memory.snapshot()]
    res.memory = memory.combine(res.per_process)
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
    after a tick and the tick to start from.  ``ckpt`` is a :class:`distlab.results.checkpoint.Checkpointer`
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
        with self.ckpt.restoring():  # a state that does not fit the model: one line, file set aside
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
        set_lr([opt], spec, t)
        opt.step()
        res.train_s += time.perf_counter() - t0
        row = _row(t, spec, res.train_s, {0: float(loss.detach())})
        _end_tick(t, row, spec, res, evaluator, split, resume, on_tick)
    return _own_peak(res)


# ----------------------------------------------------------------------- RC, sequential


def feedback_errors(outs: list[torch.Tensor], ins: list[torch.Tensor], top_grad: torch.Tensor,
                    T: int, eta: float, skip_zero: bool = True) -> list[torch.Tensor]:
    """PC's fixed-prediction error relaxation at the section boundaries: ``eps[k]`` at
    section k's output, ``T`` Jacobi iterations of step ``eta`` (the errors of the previous
    iteration, every section at once), starting from zero.  The top error tends to
    ``-top_grad`` (dL/dh of the last section's output); each iteration carries it one
    section further down through the vector-Jacobian product of the section above
    (``ins[k + 1]`` is section k + 1's input, with its graph).  With ``eta`` = 1 and
    ``T`` >= K it is the exact backprop error ``-dL/dh_k`` at every boundary.

    ``skip_zero``: before iteration i (from 0), only ``eps[k]`` with k >= K - i can be non-zero
    (the readout's error moves down one section an iteration), so the products of the others
    are exact zeros and are not computed (the same bits, tested; T = 1 then costs no product)."""
    K = len(outs)
    eps = [torch.zeros_like(h) for h in outs]
    for i in range(T):
        live = K - i if skip_zero else 1  # eps[k + 1] may be non-zero only for k + 1 >= live
        back = [torch.autograd.grad(outs[k + 1], ins[k + 1], grad_outputs=eps[k + 1], retain_graph=True)[0]
                if k + 1 >= live else torch.zeros_like(eps[k]) for k in range(K - 1)]
        eps = [e - eta * (e - b) for e, b in zip(eps[:K - 1], back)] + \
              [eps[K - 1] - eta * (eps[K - 1] + top_grad)]
    return eps


def bp_section_grads(split: Split, data: TextData, batches: dict[int, int]) -> dict[int, torch.Tensor]:
    """Backprop's gradient of each section's blocks on the batch it trains on this tick
    (``batches``: section -> batch index), at the current weights."""
    out: dict[int, torch.Tensor] = {}
    by_batch: dict[int, list[int]] = {}
    for k, b in batches.items():
        by_batch.setdefault(b, []).append(k)
    for b, ks in by_batch.items():
        x, y = data.train_batch(b)
        params = [list(split.sections[k].parameters()) for k in ks]
        grads = torch.autograd.grad(lm_loss(split.forward(x), y), [p for ps in params for p in ps],
                                    allow_unused=True)
        i = 0
        for k, ps in zip(ks, params):
            out[k] = flat([g if g is not None else torch.zeros_like(p)
                           for g, p in zip(grads[i:i + len(ps)], ps)])
            i += len(ps)
    return out


def _bp_probe(workers: list, split: Split, data: TextData, t: int, d: int, fb) -> dict[int, torch.Tensor]:
    """Backprop's gradient of each section training at tick ``t`` (the sections are told to
    keep their RC gradient, for the cosine of :func:`_add_cosines`)."""
    K = len(workers)
    batches = {k: (t if fb is not None else t - k * d) for k in range(K)
               if fb is not None or active(k, t, d)}
    bp_g = bp_section_grads(split, data, batches)
    for k in batches:
        workers[k].keep_grad = True
    return bp_g


def _add_cosines(row: dict, workers: list, bp_g: dict[int, torch.Tensor]) -> None:
    """``cos<k>``: the cosine between section k's RC gradient and backprop's on the same batch."""
    for k, g in bp_g.items():
        rcg = workers[k].last_grad
        if rcg is not None:
            row[f"cos{k}"] = float(torch.nn.functional.cosine_similarity(rcg, g, dim=0))
            workers[k].last_grad = None


def _feedback_tick(workers: list, split: Split, data: TextData, t: int, fb: dict, losses: dict,
                   reports: list) -> None:
    """One tick of the RC + PC hybrid: every section forward on batch ``t``, the top error
    relaxed down the boundaries, each section trained on its readout loss plus gamma x its error."""
    K = len(workers)
    x, y = data.train_batch(t)
    ins, outs = [x], []
    for k in range(K):
        outs.append(workers[k].section(ins[-1]))
        if k < K - 1:
            ins.append(outs[-1].detach().requires_grad_(True))
    top = outs[-1].detach().requires_grad_(True)
    top_grad = torch.autograd.grad(lm_loss(split.readout(top), y), top)[0]
    eps = feedback_errors(outs, ins, top_grad, int(fb["T"]), float(fb["eta"]))
    for k in range(K):
        extra = None if k == K - 1 else (float(fb["gamma"]), eps[k])
        losses[k], g = workers[k].update(outs[k], y, t, extra)
        reports.append((k, g))


def _chain_tick(workers: list, data: TextData, fifo: list[deque], t: int, d: int, losses: dict,
                reports: list) -> None:
    """One tick of the RC chain: each active section steps on its batch (section k on batch
    t - k d), its input the section below's output of ``d`` ticks ago (through ``fifo``)."""
    K = len(workers)
    new: list[torch.Tensor | None] = [None] * K
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
        losses[k], g = workers[k].step(h_in, y, emit, t)
        reports.append((k, g))
    if d > 0:
        for k in range(K - 1):
            if new[k] is not None:
                fifo[k].append(new[k])


def train_rc_sequential(spec: dict, data: TextData, split: Split, on_tick: Tick | None = None,
                        evaluator: Evaluator | None = None, ckpt=None) -> Result:
    """All K sections in this process, one after another within each tick (deterministic).

    With ``spec["feedback"]`` = {T, eta, gamma} (the RC + PC hybrid; lock-step chain,
    ``delay`` 0): every section first runs forward on the tick's batch, then the error of
    the top section's loss relaxes down the section boundaries for T iterations
    (:func:`feedback_errors`), and each section trains on its readout loss plus ``gamma``
    times the error that reached it.  T = 0 or gamma = 0 is RC."""
    K, d, ticks = schedule(spec)
    if spec.get("heads", "shared") == "separate":
        # the ablation: every section its own head (a copy of the initial readout), trained by
        # its own report alone; the model's output is the last section's head (split.readout)
        heads = [copy.deepcopy(split.readout) for _ in range(K - 1)] + [split.readout]
    else:
        heads = [split.readout] * K
    workers = [SectionTrainer(k, split, spec, heads[k]) for k in range(K)]
    coords = [Coordinator(h, spec) for h in heads[:-1] if h is not split.readout] + [Coordinator(split.readout, spec)]
    coord = coords[-1]
    fifo: list[deque] = [deque() for _ in range(K - 1)]  # section k's outputs awaiting k + 1
    fb = spec.get("feedback")
    if fb is not None and d != 0:
        raise ValueError("feedback: the RC + PC hybrid runs the lock-step chain (delay: 0)")
    res = Result()

    def set_fifo(saved: list[list[torch.Tensor]]) -> None:
        for q, items in zip(fifo, saved):
            q.clear()
            q.extend(items)

    separate = len(coords) > 1
    own_heads = [h for h in heads[:-1]] if separate else []

    def get_extra():
        return {"fifo": [list(q) for q in fifo], "heads": [h.state_dict() for h in own_heads]}

    def set_extra(extra) -> None:
        if isinstance(extra, list):  # a checkpoint written before the heads ablation
            extra = {"fifo": extra, "heads": []}
        set_fifo(extra["fifo"])
        for h, st in zip(own_heads, extra["heads"]):
            h.load_state_dict(st)

    resume = Resume(ckpt, split.gpt, [w.opt for w in workers] + [c.opt for c in coords],
                    get_extra=get_extra, set_extra=set_extra)
    for t in range(resume.start(res), ticks):
        # at evaluation ticks: the cosine between each section's RC gradient and backprop's
        # gradient of its blocks on the same batch and weights (outside the timed tick)
        bp_g = _bp_probe(workers, split, data, t, d, fb) if evaluator is not None and eval_due(t, spec) else {}
        t0 = time.perf_counter()
        losses, reports = {}, []
        if fb is not None:
            _feedback_tick(workers, split, data, t, fb, losses, reports)
        else:
            _chain_tick(workers, data, fifo, t, d, losses, reports)
        if separate:  # each head its own section's report
            for k, g in reports:
                coords[k].update([g], t)
        else:
            coord.update([g for _, g in reports], t)
        res.train_s += time.perf_counter() - t0
        row = _row(t, spec, res.train_s, losses)
        _add_cosines(row, workers, bp_g)
        _end_tick(t, row, spec, res, evaluator, split, resume, on_tick)
    return _own_peak(res)
