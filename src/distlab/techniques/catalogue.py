"""Torch-free: every technique, declared once (:func:`distlab.techniques.spec.technique`).

Two registries:

* :data:`METHODS` — the synchronous methods DeMo's comparison trains
  (:func:`distlab.techniques.methods.make_method` builds one by its name);
* :data:`TECHNIQUES` — the atlas's techniques, each behind the step interface of
  :mod:`distlab.techniques.step` (:func:`distlab.techniques.registry.make_technique`).

A technique's *kind* says how the cluster clock times its step:

* ``sync`` — every worker computes, then collectives (all-reduce, all-gather);
  a step without a collective (DiLoCo between synchronisations) lets each
  worker run ahead on its own clock until the next collective.
* ``master`` — a master broadcasts, workers compute and send one message, the
  master proceeds with the fastest ``wait_for`` (gradient coding, ignore-stragglers).

``arrival_dependent`` marks the techniques whose *trajectory* depends on who
arrives first: the master uses only the messages it received and the result
differs with the set (IS-SGD averages the fastest n-s gradients; IS-GC keeps
the disjoint subset of them; PGC-CR scales the arrived sum; IS-DeMo applies the
arrived payloads).  GC-FR, GC-CR and PGC-FR decode the exact (pipelined) sum
from any n-s arrivals, so their trajectory is the same under every straggler
model; the sync techniques wait for everyone.  An arrival-dependent technique
is trained under each straggler model of the map's straggler axis.

Adding a technique is one entry here and its code; the schemas' enums, the rules' wildcard
constraints, the option tables, the figures' labels and orders read these registries.
"""

from __future__ import annotations

from .spec import Registry, technique

_M = "distlab.techniques"
_DEMO_SWEEP = ("demo", "topk")


def _demo(name: str, label: str, order: int, **args) -> object:
    """A variant of DeMo as a method: DeMo's options, its own payload; ``args`` its encoding
    and how the gathered payloads are averaged (:class:`distlab.techniques.demo.method.DeMoMethod`)."""
    return technique(name=name, kind="sync", options=("demo",), builder=f"{_M}.demo.method:DeMoMethod",
                     label=label, order=order, payload="own", sweep_key=_DEMO_SWEEP, args=args)


METHODS = Registry("method", [
    technique(name="adamw", kind="sync", options=("adamw",), builder=f"{_M}.ddp:AdamWDDP", label="AdamW-DDP",
              order=0, payload="dense", sweep_key=None),
    _demo("demo", "DeMo", 1, encoding="reference", mean="senders"),
    _demo("demo-compact", "DeMo (compact)", 2, encoding="compact", mean="senders"),
    # Algorithm 1's "synchronize" read literally: the plain mean over all N workers at each index
    _demo("demo-allmean", "DeMo (plain mean, ablation)", 3, encoding="reference", mean="all"),
    technique(name="diloco", kind="sync", options=("adamw", "diloco"), builder=f"{_M}.diloco:DiLoCo",
              label="DiLoCo", order=4, payload="dense", sweep_key=("diloco", "H")),
    technique(name="powersgd", kind="sync", options=("adamw", "powersgd"), builder=f"{_M}.powersgd:PowerSGD",
              label="PowerSGD", order=5, payload="dense", sweep_key=("powersgd", "rank")),
])


def _atlas(name, kind, what, order, builder, payload="dense", sweep_key=None, options=(), dep=False,
           overlapped=False, label=None, **args):
    """An atlas technique; ``label`` its name in figures and tables (the name written in capitals
    when not given: GC-FR, IS-SGD)."""
    return technique(name=name, kind=kind, options=options, builder=f"{_M}.{builder}",
                     label=label or name.upper(), order=order,
                     payload=payload, sweep_key=sweep_key, args=args, what=what, arrival_dependent=dep,
                     overlapped=overlapped)


_WRAPPED, _CODED = "step:Wrapped", "step:Coded"
# the coded techniques' ``scheme`` is their gradient-coding scheme (distlab.techniques.gradient_codes)
TECHNIQUES = Registry("technique", [
    _atlas("ddp", "sync", "AdamW on the all-reduced mean gradient", 0, _WRAPPED, overlapped=True, method="adamw",
           label="AdamW (DDP)"),
    _atlas("demo", "sync", "DeMo: top-k DCT of decoupled momentum, all-gather", 1, _WRAPPED, "own", _DEMO_SWEEP,
           ("demo",), method="demo", label="DeMo"),
    _atlas("diloco", "sync", "DiLoCo: H local AdamW steps, outer Nesterov on the mean delta", 2, _WRAPPED,
           sweep_key=("diloco", "H"), options=("diloco",), overlapped=True, method="diloco", label="DiLoCo"),
    _atlas("powersgd", "sync", "PowerSGD rank r with error feedback, two all-reduces", 3, _WRAPPED,
           sweep_key=("powersgd", "rank"), options=("powersgd",), method="powersgd", label="PowerSGD"),
    _atlas("is-sgd", "master", "AdamW on the mean of the fastest n-s gradients", 4, _CODED, dep=True, scheme="is-sgd"),
    _atlas("gc-fr", "master", "gradient coding, fractional repetition (exact decode)", 5, _CODED, scheme="gc-fr"),
    _atlas("gc-cr", "master", "gradient coding, cyclic repetition (exact decode)", 6, _CODED, scheme="gc-cr"),
    _atlas("pgc-fr", "master", "pipelined gradient coding, FR (exact pipelined decode)", 7, _CODED, scheme="pgc-fr"),
    _atlas("pgc-cr", "master", "pipelined gradient coding, CR (scaled arrived sum)", 8, _CODED, dep=True,
           scheme="pgc-cr"),
    _atlas("is-gc", "master", "ignore-straggler gradient coding, CR, c = 2", 9, _CODED, dep=True, scheme="is-gc-cr"),
    # the last two are combinations none of the anchors measured (ours)
    _atlas("diloco-demo", "sync", "ours: DiLoCo whose outer step is DeMo (top-k DCT, momentum as error feedback)",
           10, "combinations:DiLoCoDeMo", "own", ("diloco", "H"), ("demo", "diloco"), method="diloco",
           label="DiLoCo + DeMo"),
    _atlas("is-demo", "master", "ours: DeMo payloads of the fastest n-s workers only", 11, "combinations:ISDeMo",
           "relayed", _DEMO_SWEEP, ("demo",), dep=True, method="demo", label="IS-DeMo"),
])

# by the name a schema's ``x-registry`` gives (distlab.config.checks.load_schema)
REGISTRIES = {"methods": METHODS, "techniques": TECHNIQUES}
CODED = {n: s.args["scheme"] for n, s in TECHNIQUES.items() if "scheme" in s.args}
OURS = tuple(n for n, s in TECHNIQUES.items() if s.what.startswith("ours:"))
OPTION_SECTIONS = {n: s.options for n, s in TECHNIQUES.items() if s.options}


def kind(technique: str) -> str:
    return TECHNIQUES[technique].kind


def arrival_dependent(technique: str) -> bool:
    return TECHNIQUES[technique].arrival_dependent


def option_sections(technique: str) -> tuple[str, ...]:
    """The option sections (``demo``, ``diloco``, ``powersgd``) whose settings change the technique's run."""
    return TECHNIQUES[technique].options


def reads_s(technique: str) -> bool:
    """Whether the technique's run depends on ``s``, the stragglers tolerated (the master kind)."""
    return kind(technique) == "master"


def in_groups(technique: str) -> bool:
    """Whether its code is a fractional repetition: the workers form groups of s + 1, so N must
    be a multiple of s + 1 (distlab.techniques.gradient_codes)."""
    return CODED.get(technique, "").endswith("-fr")


def passes_per_step(technique: str, s: int) -> int:
    """Gradient passes a worker computes a step with ``s`` stragglers tolerated: its code's
    (:func:`distlab.techniques.gradient_codes.passes_per_step`), one for an uncoded technique."""
    TECHNIQUES[technique]  # refuses an unknown name
    if technique not in CODED:
        return 1
    from .gradient_codes import passes_per_step as code_passes  # numpy, only when a code is asked

    return code_passes(CODED[technique], s)


def setting_key(technique: str) -> tuple[str, str] | None:
    """The (section, option) of the technique's natural sweep, or None."""
    return TECHNIQUES[technique].sweep_key
