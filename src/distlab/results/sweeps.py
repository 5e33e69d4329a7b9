"""A learning-rate sweep's runs reused by the comparison, as workflow steps with declared files.

A paper that chooses each method's learning rate by a sweep on the validation split (P3, P4)
trains the sweep at the comparison's horizon on some of the comparison's seeds: the comparison's
run of such a seed at the chosen lr is the sweep's run at that lr (the same computation, the
same numbers).  Two steps share it, each with its inputs and outputs declared in its rule:

* :func:`pick` (the paper's ``*_sweep_pick`` rule): after the sweep's choice is written, copy
  the sweep's run at the chosen lr of one method and seed to a folder of its own (a declared
  output).  The rule names every file: the choice, the run of each swept lr (``runs``), the
  destination; nothing here derives a path from a folder layout.
* :func:`take` (the comparison's trainer): a comparison spec lists the picked folders it may
  take, ``"reuse": {"<seed>": <picked folder>}`` (a declared input of its rule); a seed whose
  picked run was trained under this very spec (but for :data:`PROVENANCE`) is copied, not
  trained again.  Any other difference (a setting changed since the sweep) trains the seed.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from ..config.specs import SpecError, spec_hash
from .tables import atomic_write_text

# where a run's lr and the run itself came from, not what it trains
PROVENANCE = ("lr_chosen_by", "reuse", "reuse_from")
# a run folder's files a reuse copies (model.pt: P3's BP keeps its trained model)
FILES = ("metrics.csv", "model.pt")


def bare(spec: dict) -> dict:
    """``spec`` without its provenance (what the run computes)."""
    return {k: v for k, v in spec.items() if k not in PROVENANCE}


def chosen_lr(choice_file: str | Path, key: str) -> float:
    """The lr a sweep's choice file (``{key: lr}``) holds for ``key``; a missing file or key is
    a spec error naming both."""
    try:
        choice = json.loads(Path(choice_file).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise SpecError(f"sweep choice {choice_file}: unreadable: {e}") from e
    if key not in choice:
        raise SpecError(f"sweep choice {choice_file}: no lr for {key!r} (it holds {sorted(choice)})")
    return float(choice[key])


def _copy_run(src: Path, out: Path, manifest: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name in FILES:
        if (src / name).is_file():
            shutil.copyfile(src / name, out / f"{name}.part")
            (out / f"{name}.part").replace(out / name)
    # the manifest last, as a finished run's, sealed over the copies
    from .runs import seal

    manifest = seal(manifest, out, [n for n in FILES if (out / n).is_file() and n != "manifest.json"])
    atomic_write_text(out / "manifest.json", json.dumps(manifest, indent=1, sort_keys=True) + "\n")


def pick(choice_file: str | Path, key: str, runs: dict, out_dir: str | Path) -> Path:
    """Copy the sweep's run at ``key``'s chosen lr (``runs``: ``{lr: run folder}``, every swept
    lr of one method and seed) to ``out_dir``; its manifest records ``picked_from``."""
    lr = chosen_lr(choice_file, key)
    by_lr = {float(k): Path(v) for k, v in runs.items()}
    if lr not in by_lr:
        raise SpecError(f"sweep pick {key}: the chosen lr {lr:g} is none of the swept runs' {sorted(by_lr)}")
    src = by_lr[lr]
    try:
        manifest = json.loads((src / "manifest.json").read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise SpecError(f"sweep pick {key}: the sweep's run {src} is unreadable: {e}") from e
    if float(manifest.get("spec", {}).get("lr", float("nan"))) != lr:
        raise SpecError(f"sweep pick {key}: {src} was not trained at lr {lr:g}")
    _copy_run(src, Path(out_dir), {**manifest, "picked_from": str(src)})
    return Path(out_dir)


def pick_all(choice_file: str | Path, picks: list[dict]) -> list[Path]:
    """:func:`pick` of each ``{"key", "runs", "out"}`` (one job for every method and seed)."""
    return [pick(choice_file, p["key"], p["runs"], p["out"]) for p in picks]


def source(spec: dict) -> Path | None:
    """The picked folder of this one-seed ``spec`` (lr resolved) when its run was trained under
    this spec but for provenance; None otherwise (no ``reuse`` for this seed, other settings)."""
    where = (spec.get("reuse") or {}).get(str(spec.get("seed")))
    if not where or isinstance(spec.get("lr"), dict):
        return None
    src = Path(where)
    try:
        theirs = json.loads((src / "manifest.json").read_text()).get("spec") or {}
    except (OSError, json.JSONDecodeError):
        return None
    if not (src / "metrics.csv").is_file():
        return None
    return src if spec_hash(bare(theirs)) == spec_hash(bare(spec)) else None


def take(spec: dict, out_dir: str | Path, label: str) -> bool:
    """Copy the sweep's run of this seed (:func:`source`) into ``out_dir``: the metrics (and a
    saved model), then the manifest, holding this spec and ``reused_from`` (the sweep's run
    folder).  False, with nothing written, when there is nothing to take."""
    src = source(spec)
    if src is None:
        return False
    manifest = json.loads((src / "manifest.json").read_text())
    origin = manifest.pop("picked_from", str(src))
    _copy_run(src, Path(out_dir), {**manifest, "spec": spec, "reused_from": origin})
    print(f"{label} {spec['method']} seed {spec['seed']}: the sweep's run at lr {float(spec['lr']):g} "
          f"({origin}), reused", flush=True)
    return True
