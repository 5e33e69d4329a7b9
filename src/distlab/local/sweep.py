"""P3's learning-rate sweep, on the job's side (torch-free).

Every method trains at its own learning rate, chosen on the validation split by the sweep
(``local_learning.sweep``; table ``paper/tables/local_sweep.md``).  A comparison job's spec then
says where its lr comes from, ``lr: {"sweep": <choice file>, "key": "<group>/<method>"}``, read
here when the job starts (:func:`resolve_lr`); with ``reuse: {"<seed>": <picked folder>}`` (the
sweep's run of that seed at the chosen lr, copied there by the workflow's rule local_table_sweep)
a seed the sweep already trained, under a spec equal in everything but this provenance, is taken
from the sweep instead of trained again (:func:`take_from_sweep`).
"""

from __future__ import annotations

import json
from pathlib import Path

from ..config.specs import SpecError
from ..results import sweeps

# where a run's lr and the run itself came from: not what it trains
PROVENANCE = sweeps.PROVENANCE


def read_choice(path: str | Path) -> dict:
    """The sweep's choice file, ``{"<group>/<method>": lr}``; a missing or damaged one is a
    spec error naming it."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise SpecError(f"local spec: key 'lr.sweep': the sweep's choice {path} is unreadable: {e}") from e


def resolve_lr(spec: dict) -> dict:
    """``spec`` with a numeric ``lr``: a ``{"sweep", "key"}`` lr is looked up in the choice file."""
    if not isinstance(spec["lr"], dict):
        return spec
    where, key = spec["lr"]["sweep"], spec["lr"]["key"]
    choice = read_choice(where)
    if key in choice:
        return dict(spec, lr=float(choice[key]), lr_chosen_by=f"{where}:{key}")
    raise SpecError(f"local spec: key 'lr.key': {where} chose no lr for {key!r} (it holds {sorted(choice)})")


def take_from_sweep(spec: dict, out_dir: str | Path) -> bool:
    """Copy the sweep's run of this seed into ``out_dir`` when the spec's ``reuse`` names the
    folder the workflow picked it to (rule local_table_sweep) and its spec is this one's but for
    provenance: the same computation, so the same numbers (:func:`distlab.results.sweeps.take`).
    False when nothing is taken."""
    return sweeps.take(spec, out_dir, "local")
