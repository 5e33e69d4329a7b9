"""P3's learning-rate sweep, on the job's side (torch-free).

Every method trains at its own learning rate, chosen on the validation split by the sweep
(``local_learning.sweep``; table ``paper/tables/local_sweep.md``).  A comparison job's spec then
says where its lr comes from, ``lr: {"sweep": <choice file>, "key": "<group>/<method>"}``, read
here when the job starts (:func:`resolve_lr`); with ``reuse_from: <sweep root>/lr{lr}/<group>/<method>`` a seed the
sweep already trained at the chosen lr, under a spec equal in everything but this provenance,
is taken from the sweep instead of trained again (:func:`take_from_sweep`).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from ..config.specs import SpecError, spec_hash

# where a run's lr and the run itself came from: not what it trains
PROVENANCE = ("lr_chosen_by", "reuse_from")


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


def sweep_dir(pattern: str, lr: float, seed: int) -> Path:
    """A sweep run's directory: ``pattern`` (``<sweep root>/lr<lr>/<group>/<method>``, the rule's
    layout) at this lr, then ``seed<k>``."""
    return Path(pattern.replace("<lr>", f"{float(lr):g}")) / f"seed{int(seed)}"


def _bare(spec: dict) -> dict:
    return {k: v for k, v in spec.items() if k not in PROVENANCE}


def sweep_source(spec: dict) -> Path | None:
    """The finished sweep run of this one-seed spec (lr resolved) when its spec is this one's
    but for provenance; None otherwise (no ``reuse_from``, not swept at this lr or seed, other
    settings, or not finished)."""
    root = spec.get("reuse_from")
    if not root or isinstance(spec["lr"], dict):
        return None
    src = sweep_dir(root, spec["lr"], spec["seed"])
    man = src / "manifest.json"
    if not (man.is_file() and (src / "metrics.csv").is_file()):
        return None
    try:
        theirs = json.loads(man.read_text()).get("spec") or {}
    except (OSError, json.JSONDecodeError):
        return None
    return src if spec_hash(_bare(theirs)) == spec_hash(_bare(spec)) else None


def take_from_sweep(spec: dict, out_dir: str | Path) -> bool:
    """Copy the sweep's run of this seed into ``out_dir`` when :func:`sweep_source` finds one:
    the same computation, so the same numbers.  The metrics are copied, then the manifest (last,
    as a finished run's), holding this spec and ``reused_from``.  False when nothing is taken."""
    src = sweep_source(spec)
    if src is None:
        return False
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name in ("metrics.csv", "model.pt"):
        if (src / name).is_file():
            shutil.copyfile(src / name, out / f"{name}.part")
            (out / f"{name}.part").replace(out / name)
    manifest = json.loads((src / "manifest.json").read_text())
    manifest.update(spec=spec, reused_from=str(src))
    (out / "manifest.json.part").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    (out / "manifest.json.part").replace(out / "manifest.json")
    print(f"local {spec['method']} seed {spec['seed']}: the sweep's run at lr {spec['lr']:g} ({src}), taken",
          flush=True)
    return True
