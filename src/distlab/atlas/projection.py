"""The query's clock: time per step of a technique at any model size, worker count, network,
straggler model and accelerator, from FLOP and byte arithmetic.

What a step costs (every setting is an input; :class:`ClockSettings` names the defaults):

* **compute** ``passes x 6 P tokens / (flops_per_s x mfu)`` per worker (``tokens`` per worker
  per step; the 6ND rule: forward 1/3, backward 2/3 of it), ``passes`` the technique's (a code's
  s + 1 partitions);
* **messages**: the technique's own pattern (collectives, or master messages and broadcast) from
  its recording at the largest measured size, in bytes per parameter, scaled linearly to P (an
  upper bound for PowerSGD, whose factors grow like sqrt P), in the message dtype: the recordings
  are fp32; ``bf16`` halves a dense payload (DDP, DiLoCo, PowerSGD, the codes, IS-SGD); DeMo's,
  IS-DeMo's and DiLoCo-DeMo's payloads are their own (values and indices) and keep their bytes;
* **collectives**: alpha-beta ring all-reduce ``2 (N-1) lat + 2 (N-1)/N bytes / bw`` and ring
  all-gather ``(N-1) lat + (N-1) bytes / bw`` (the runtime's formulas);
* **overlap** (on by default): DDP's gradient all-reduce, and DiLoCo's outer all-reduce in the
  last inner step, leave in buckets as the backward pass produces them and go one after
  another over the link (as Douillard et al.'s DiLoCo bandwidth simulator does); the step then
  waits ``max(c / B, c - f T (1 - 1/B))`` after its compute ``T`` (``c`` the collective's
  seconds, ``B`` buckets -- ``bucket_bytes`` each, PyTorch DDP's 25 MB by default, or a given
  count --, ``f`` the backward's share of the step); the ring's latency is paid once, by the
  last bucket (the buckets stream back to back);
* **master link** (gradient coding, IS-*): the master's one link is shared: its broadcast of
  ``b`` bytes to N workers ends for all of them at ``lat + N b / bw`` (fair sharing), and the
  messages reach it one after another (``msg / bw`` each, in order of sending), so the
  ``(N - s)``-th arrival is what the step waits for;
* **stragglers**: the runtime's straggler models (delays drawn per step with seed 0, persistent
  compute factors, dead workers never answer).

:func:`utilisation_curve` gives compute utilisation from this clock (Table 7 of Charles et al. 2025
comes out of it: ``tests/test_atlas_clock.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..config.specs import SpecError
from ..runtime.stragglers import StragglerModel
from ..techniques.catalogue import passes_per_step
from .record import Recording
from .spec import TECHNIQUES, kind

SYNTH_STEPS = 200   # steps simulated per cell; the mean step over them is the time per step
# the most workers a projection simulates: its arrays are (cells, N) floats, 82 cells at a query
# (the break-even grid), so 10,000 workers are 6.6 MB an array and 200 steps seconds a technique;
# 10**9 would be 611 GiB
MAX_WORKERS = 10_000

# Accelerator presets: dense BF16 tensor-core peak FLOP/s from the vendors' datasheets (the
# "with sparsity" figures halved), and this machine's measured rate (``cpu``).
PRESETS: dict[str, tuple[float | None, str]] = {
    "cpu": (None, "this machine: FLOPs / measured compute seconds of the atlas's DDP runs (median)"),
    "a100": (312e12, "NVIDIA A100 datasheet: 312 TFLOPS dense BF16 tensor core (624 with sparsity)"),
    "h100": (989e12, "NVIDIA H100 SXM datasheet: 1,979 TFLOPS BF16 tensor core with sparsity, 989 dense"),
    "h200": (989e12, "NVIDIA H200 SXM datasheet: 1,979 TFLOPS BF16 tensor core with sparsity, 989 dense"),
}
DTYPES = {"fp32": 1.0, "bf16": 0.5}
OWN_PAYLOAD = tuple(t for t, spec in TECHNIQUES.items() if spec.payload != "dense")  # their own message format
OVERLAPPED = tuple(t for t, spec in TECHNIQUES.items() if spec.overlapped)  # collectives released in the backward

# The spread a projected time per step carries (its interval), each range with its source:
# * MFU, the fraction of a preset's datasheet peak a training run achieves (a preset's default 0.5
#   is the range's top; ``--mfu`` replaces the range by the value given);
MFU_RANGE = (0.2, 0.5)
MFU_SOURCE = ("Chowdhery et al. 2022, PaLM (arXiv 2204.02311), Table 3: model FLOPs utilisation of GPT-3 "
              "21.3 %, Gopher 32.5 %, Megatron-Turing NLG 30.2 %, PaLM 46.2 %; rounded out to 0.2..0.5")
# * the link's achieved fraction of its nominal bandwidth for a ring all-reduce (the clock's
#   central value is the nominal rate, the range's top):
LINK_RANGE = (0.5, 1.0)
LINK_SOURCE = ("Adnan082/diloco-measured, DDP and DiLoCo on 4 L40S over tc-shaped TCP at 50 Mbit/s..5 Gbit/s: "
               "the clock's ring all-reduce at the shaped rate against the seconds blocked per synchronisation "
               "there implies an achieved fraction within 0.5..1 wherever the window holds no run's first "
               "synchronisation (data/atlas/diloco_measured.csv, docs/atlas_answer.md)")


@dataclass(frozen=True)
class ClockSettings:
    flops_per_s: float
    mfu: float = 1.0
    tokens: int = 256            # tokens per worker per step
    dtype: str = "fp32"
    overlap: bool = True
    bucket_bytes: float = 25e6   # PyTorch DDP's default bucket_cap_mb
    buckets: int | None = None   # a fixed bucket count instead (e.g. one per layer)
    backward_frac: float = 2.0 / 3.0
    mfu_range: tuple[float, float] | None = None   # the MFU's stated range (None: ``mfu`` exactly)
    link_range: tuple[float, float] = (1.0, 1.0)   # the achieved fraction of the nominal bandwidth

    def compute_s(self, P: float, passes: int = 1) -> float:
        return passes * 6.0 * P * self.tokens / (self.flops_per_s * self.mfu)

    def bounds(self) -> tuple[tuple["ClockSettings", float], tuple["ClockSettings", float]]:
        """((settings, link fraction) of the fastest step, (settings, link fraction) of the slowest)
        within the stated ranges: the highest MFU and link fraction, and the lowest."""
        lo_m, hi_m = self.mfu_range if self.mfu_range is not None else (self.mfu, self.mfu)
        fast = replace(self, mfu=hi_m, mfu_range=None)
        slow = replace(self, mfu=lo_m, mfu_range=None)
        return (fast, float(self.link_range[1])), (slow, float(self.link_range[0]))

    def assumptions(self) -> str:
        """The ranges the interval of a time per step rests on, in words."""
        if self.mfu_range is None:
            m = f"MFU {self.mfu:g} exactly (given, or the rate is an achieved one)"
        else:
            m = f"MFU {self.mfu_range[0]:g}..{self.mfu_range[1]:g} ({MFU_SOURCE})"
        lo, hi = self.link_range
        link = (f"the link at {lo:g}..{hi:g} of its nominal bandwidth ({LINK_SOURCE})" if (lo, hi) == LINK_RANGE
                else f"the link at {lo:g}..{hi:g} of its nominal bandwidth")
        return f"{m}; {link}"


def measured_flops_per_s(recs: list[Recording]) -> float:
    """This machine's FLOP rate: median over steps and workers of FLOPs / measured compute seconds."""
    r = [rec.flops() / np.maximum(rec.compute(), 1e-12) for rec in recs if rec.technique == "ddp"] or \
        [rec.flops() / np.maximum(rec.compute(), 1e-12) for rec in recs]
    return float(np.median(np.concatenate([x.ravel() for x in r])))


@dataclass
class Pattern:
    """A technique's message pattern per parameter: ``colls[i]`` the (kind, bytes/param) of cycle
    step i (sync), or per-parameter message and broadcast bytes (master)."""

    technique: str
    cycle: int
    colls: list[list[tuple[str, float]]]
    msg: float = 0.0
    bcast: float = 0.0
    source: str = ""


def pattern_of(recs: list[Recording], technique: str, N: int) -> Pattern:
    """The pattern of the largest measured size's no-straggler recording of ``technique`` (the same
    N where there is one)."""
    cand = [r for r in recs if r.technique == technique and r.straggler.get("model") == "none"]
    if not cand:
        raise ValueError(f"no no-straggler recording of {technique}")
    same = [r for r in cand if r.n == N] or cand
    r = max(same, key=lambda r: (r.n_params, -abs(r.n - N)))
    P = float(r.n_params)
    cycle = int((r.spec or {}).get("diloco", {}).get("H", 10)) if technique.startswith("diloco") else 1
    src = f"{technique} at {r.n_params} parameters, N = {r.n}, seed {r.seed}"
    if kind(technique) == "sync":
        return Pattern(technique, cycle, [[(k, b / P) for k, b in r.steps[i]["colls"]] for i in range(cycle)],
                       source=src)
    s0 = r.steps[0]
    return Pattern(technique, 1, [], msg=s0["msg_bytes"] / P, bcast=s0["bcast_bytes"] / P, source=src)


def _ring(kind_: str, nbytes: float, n: int, lat, bw):
    """(latency seconds, bandwidth seconds) of one ring collective."""
    if n <= 1:
        return 0.0 * lat, 0.0 * bw
    if kind_ == "all_reduce":
        return 2 * (n - 1) * lat, 2.0 * (n - 1) / n * nbytes / bw
    if kind_ == "all_gather":
        return (n - 1) * lat, (n - 1) * nbytes / bw
    raise ValueError(f"unknown collective {kind_!r}")


def overlapped_stall(lat_s, bw_s, compute_s: float, backward_frac: float, buckets: int):
    """Seconds a step waits after its compute for a collective of ``bw_s`` bandwidth seconds sent
    in ``buckets`` equal parts as its backward pass releases them, one after another; the ring's
    latency ``lat_s`` is paid once, by the last bucket (the buckets stream back to back, so the
    earlier buckets' latency hides behind the later ones' transfer)."""
    return lat_s + np.maximum(bw_s / buckets, bw_s - backward_frac * compute_s * (1.0 - 1.0 / buckets))


def _buckets(cs: ClockSettings, nbytes: float) -> int:
    if cs.buckets is not None:
        return int(cs.buckets)
    return max(1, int(np.ceil(nbytes / cs.bucket_bytes)))


def step_seconds(pat: Pattern, P: float, N: int, s: int, cs: ClockSettings, lat, bw,
                 straggler: dict | None = None, steps: int = SYNTH_STEPS, seed: int = 0) -> np.ndarray:
    """Mean seconds per step over ``steps`` simulated steps, per (lat, bw) cell."""
    if not 1 <= N <= MAX_WORKERS:  # bounded before anything is allocated
        raise SpecError(f"--workers: {N} workers, outside 1 .. {MAX_WORKERS:,} (the projection simulates each)")
    lat = np.atleast_1d(np.asarray(lat, float))
    bw = np.atleast_1d(np.asarray(bw, float))
    C = np.broadcast(lat, bw).shape[0]
    lat, bw = np.broadcast_to(lat, (C,)), np.broadcast_to(bw, (C,))
    t = pat.technique
    comp = cs.compute_s(P, passes_per_step(t, s))
    strag = StragglerModel.from_config(straggler or {"model": "none"}, seed)
    f = strag.compute_factor(N)
    dense = 1.0 if t in OWN_PAYLOAD else DTYPES[cs.dtype]
    steps = max(steps, pat.cycle) // pat.cycle * pat.cycle
    now = np.zeros(C)
    ready = np.zeros((C, N))
    for step in range(steps):
        d = strag.delays(step, N)[None]
        fin = (ready + comp * f) + d
        if kind(t) == "sync":
            colls = pat.colls[step % pat.cycle]
            if colls:
                c = 0.0
                for k, b in colls:
                    nb = b * P * dense
                    ls, bs = _ring(k, nb, N, lat, bw)
                    if cs.overlap and t in OVERLAPPED and k == "all_reduce":
                        c = c + overlapped_stall(ls, bs, comp, cs.backward_frac, _buckets(cs, nb))
                    else:
                        c = c + (ls + bs)
                end = fin.max(axis=1) + c
                ready = np.repeat(end[:, None], N, axis=1)
            else:
                end = fin.max(axis=1)
                ready = fin
            now = end
        else:
            wait = N - s
            msg = pat.msg * P * dense
            bcast = (wait * msg) if TECHNIQUES[t].payload == "relayed" else pat.bcast * P * dense
            model_at = now + lat + N * bcast / bw            # the master's link shared by N sends
            start = np.maximum(model_at[:, None], ready)
            finish = (start + comp * f) + d
            order = np.sort(finish + (lat + msg / bw)[:, None], axis=1)
            per = (msg / bw)[:, None]
            j = np.arange(N)[None, :]
            # FIFO on the master's ingress: arrival_k = max_{j<=k} (sent_j + (k - j) msg / bw)
            arrival = np.maximum.accumulate(order - j * per, axis=1) + j * per
            now = arrival[:, wait - 1]
            ready = finish
    return now / steps


def step_interval(pat: Pattern, P: float, N: int, s: int, cs: ClockSettings, lat: float, bw: float,
                  straggler: dict | None = None) -> tuple[float, float]:
    """(fastest, slowest) mean seconds per step at one (lat, bw) over the stated ranges of
    ``cs`` (:meth:`ClockSettings.bounds`): the step time rises as MFU or the link's achieved
    fraction falls, so the two corners bound it."""
    (fast, f_hi), (slow, f_lo) = cs.bounds()
    lo = step_seconds(pat, P, N, s, fast, [lat], [bw * f_hi], straggler)[0]
    hi = step_seconds(pat, P, N, s, slow, [lat], [bw * f_lo], straggler)[0]
    return float(lo), float(hi)


def utilisation_curve(compute_s: float, payload_bytes: float, replicas: int, h: int, bw, lat: float = 0.0,
                      backward_frac: float = 2.0 / 3.0, buckets: int = 1, overlap: bool = True) -> np.ndarray:
    """Compute utilisation (compute seconds / clock seconds) of a data-parallel run that all-reduces
    ``payload_bytes`` every ``h`` steps (DDP: h = 1; DiLoCo: h = H), by :func:`step_seconds`."""
    pat = Pattern("ddp" if h == 1 else "diloco", h, [[] for _ in range(h - 1)] + [[("all_reduce", payload_bytes)]])
    cs = ClockSettings(flops_per_s=6.0, tokens=1, overlap=overlap, buckets=buckets, backward_frac=backward_frac)
    # compute_s(P=compute_s) = compute_s seconds: FLOPs 6 x P x 1 at 6 FLOP/s; payload per parameter scaled back
    pat.colls = [[(k, b / compute_s) for k, b in c] for c in pat.colls]
    per = step_seconds(pat, compute_s, replicas, 0, cs, lat, bw, steps=h)
    return compute_s / per
