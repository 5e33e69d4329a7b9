"""Torch-free: the catalogue of the data-parallel techniques, their kinds and properties.

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

:data:`TECHNIQUES` names every technique of :mod:`distlab.techniques` a driver can run
(:func:`distlab.techniques.registry.make_technique`); :data:`CODED` maps a coded technique to its
gradient-coding scheme (:mod:`distlab.techniques.gradient_codes`).
"""

from __future__ import annotations

# One technique a line: name, kind, whether its trajectory depends on who arrives first, what.
# The last two are combinations none of the anchors measured.
_TABLE = """
ddp          sync    no   AdamW on the all-reduced mean gradient
demo         sync    no   DeMo: top-k DCT of decoupled momentum, all-gather
diloco       sync    no   DiLoCo: H local AdamW steps, outer Nesterov on the mean delta
powersgd     sync    no   PowerSGD rank r with error feedback, two all-reduces
is-sgd       master  yes  AdamW on the mean of the fastest n-s gradients
gc-fr        master  no   gradient coding, fractional repetition (exact decode)
gc-cr        master  no   gradient coding, cyclic repetition (exact decode)
pgc-fr       master  no   pipelined gradient coding, FR (exact pipelined decode)
pgc-cr       master  yes  pipelined gradient coding, CR (scaled arrived sum)
is-gc        master  yes  ignore-straggler gradient coding, CR, c = 2
diloco-demo  sync    no   ours: DiLoCo whose outer step is DeMo (top-k DCT, momentum as error feedback)
is-demo      master  yes  ours: DeMo payloads of the fastest n-s workers only
"""
# name -> (kind, arrival_dependent, what)
TECHNIQUES: dict[str, tuple[str, bool, str]] = {
    name: (k, dep == "yes", what) for name, k, dep, what in (ln.split(None, 3) for ln in _TABLE.strip().splitlines())}
CODED = {"is-sgd": "is-sgd", "gc-fr": "gc-fr", "gc-cr": "gc-cr", "pgc-fr": "pgc-fr", "pgc-cr": "pgc-cr",
         "is-gc": "is-gc-cr"}
OURS = ("diloco-demo", "is-demo")
# the option sections of a run spec a technique reads (the rest it ignores); ``s`` (the stragglers
# tolerated) only the master kind reads
OPTION_SECTIONS: dict[str, tuple[str, ...]] = {"demo": ("demo",), "is-demo": ("demo",), "diloco": ("diloco",),
                                               "diloco-demo": ("demo", "diloco"), "powersgd": ("powersgd",)}


def kind(technique: str) -> str:
    return TECHNIQUES[technique][0]


def arrival_dependent(technique: str) -> bool:
    return TECHNIQUES[technique][1]


def option_sections(technique: str) -> tuple[str, ...]:
    """The option sections (``demo``, ``diloco``, ``powersgd``) whose settings change the technique's run."""
    return OPTION_SECTIONS.get(technique, ())


def reads_s(technique: str) -> bool:
    """Whether the technique's run depends on ``s``, the stragglers tolerated (the master kind)."""
    return kind(technique) == "master"
