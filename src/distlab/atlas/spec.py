"""Torch-free: the atlas run spec, its techniques and their properties.

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
"""

from __future__ import annotations

from ..config import specs
from ..demo.spec import DEMO_COMPRESSION, DILOCO_OPTIONS, POWERSGD_OPTIONS

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

SPEC_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["experiment", "technique", "backend", "seed", "model", "n_workers", "batch_size", "lr",
                 "steps", "cluster"],
    "properties": {
        "experiment": {"const": "atlas"},
        "technique": {"enum": list(TECHNIQUES)},
        "backend": specs.BACKEND,
        "seed": specs.NONNEG_INT,
        "model": {"type": "object", "required": ["name"], "additionalProperties": False,
                  "properties": {"name": {"enum": ["gpt"]}, "n_layer": specs.POS_INT, "d_model": specs.POS_INT,
                                 "n_head": specs.POS_INT, "block_size": specs.POS_INT}},
        "n_workers": specs.POS_INT,
        "batch_size": specs.POS_INT,
        "lr": specs.POS_NUM,
        "steps": specs.POS_INT,
        "eval_every": specs.POS_INT,
        "eval_batches": specs.POS_INT,
        "s": specs.NONNEG_INT,
        "demo": {"type": "object", "additionalProperties": False, "properties": DEMO_COMPRESSION},
        "diloco": DILOCO_OPTIONS,
        "powersgd": POWERSGD_OPTIONS,
        "cluster": specs.CLUSTER,
        "device": {"enum": ["auto", "cpu", "cuda"]},   # distlab.runtime.device; absent: the CPU
        "trend": {"const": True},  # a trend cell (atlas.trend): the efficiency fit's, not the map's
    },
}


def kind(technique: str) -> str:
    return TECHNIQUES[technique][0]


def arrival_dependent(technique: str) -> bool:
    return TECHNIQUES[technique][1]


def nprocs(spec: dict) -> int:
    return int(spec["n_workers"])


def check_spec(spec: dict) -> None:
    """Cross-field rules; SpecError naming the key."""
    t, n, s = spec["technique"], int(spec["n_workers"]), int(spec.get("s", 1))
    if kind(t) == "master" and not 0 <= s < n:
        raise specs.SpecError(f"atlas spec: key 's': {t} needs 0 <= s < n_workers = {n}, got {s}")
    if t in ("gc-fr", "pgc-fr") and n % (s + 1):
        raise specs.SpecError(f"atlas spec: key 's': {t} needs n_workers divisible by s+1 ({n}, s={s})")
    if t.startswith("diloco") and spec["steps"] % int(spec.get("diloco", {}).get("H", 10)):
        raise specs.SpecError("atlas spec: key 'diloco.H': steps must be a multiple of H")
    m = spec["model"]
    if m.get("d_model", 64) % m.get("n_head", 4):
        raise specs.SpecError("atlas spec: key 'model.n_head': must divide model.d_model")


CONFIG_SECTION = "atlas"  # distlab.config.checks.paper_checks finds check() by it


def check(config) -> list[str]:
    """Cross-field rules of the ``atlas:`` section, one ``"key: why"`` line each: every size a
    part names is defined (the trend's sizes beside ``atlas.sizes``, not redefining one of them)
    and the trend pairs with DDP.  A headline or trend technique outside ``atlas.techniques`` is
    not an error: an overlay that runs fewer techniques runs their cells for those it keeps."""
    a = config.get("atlas")
    if not isinstance(a, dict) or not isinstance(a.get("sizes"), dict):
        return []
    errors: list[str] = []
    tr = a.get("trend") or {}
    trend_sizes = tr.get("sizes") or {}
    known = set(a["sizes"]) | set(trend_sizes)
    for key, size in (("headline.size", (a.get("headline") or {}).get("size")),
                      ("sweep.size", (a.get("sweep") or {}).get("size")),
                      ("reference.size", (a.get("reference") or {}).get("size")),
                      ("trend.workers_size", tr.get("workers_size"))):
        if size is not None and size not in a["sizes"]:
            errors.append(f"atlas.{key}: {size!r} is not one of atlas.sizes ({', '.join(sorted(a['sizes']))})")
    for size in (a.get("train_under") or {}).get("sizes") or []:
        if size not in known:
            errors.append(f"atlas.train_under.sizes: {size!r} is not a defined size")
    for name in sorted(set(trend_sizes) & set(a["sizes"])):
        errors.append(f"atlas.trend.sizes.{name}: already one of atlas.sizes; name the trend's own sizes apart")
    if tr and "ddp" not in (tr.get("techniques") or []):
        errors.append("atlas.trend.techniques: must include ddp (the step-efficiency ratios' denominator)")
    return errors
