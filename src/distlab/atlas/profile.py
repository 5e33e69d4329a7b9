"""The atlas's stored compute profile: what a worker's step costs, measured once and shipped.

With ``atlas.compute: stored`` (the default) the simulated clock charges every worker of
every run, and the replay of every recording on every cell, the compute of the stored
profile (``atlas.compute_profile``, ``data/atlas/compute_profile.json``) instead of the
seconds measured while the run trained.  A step of worker w costs

    ``passes_w x pass_s + extra_s``      (and the master's update ``master_s``, master kinds)

``pass_s`` one forward and backward pass of one worker's batch at the model size,
``extra_s`` the technique's own arithmetic a worker step beyond its passes (the update every
worker of a sync technique runs, DeMo's transform, a code's encoding) at that size and N,
``master_s`` a master technique's update.  The recorded passes and the profile fix the
simulated times: a busier machine while the atlas trained changes nothing.  With
``atlas.compute: measured`` the seconds measured during the run are charged, as before the
profile (then the map moves with the machine's load and its verdicts are measured ones).

``python -m distlab atlas profile`` measures a profile (:func:`distlab.atlas.profiler.measure`):
per model size a plain loop times single passes, and the simulated driver runs every
technique and N for ``steps`` steps; each number is the median over ``repeats`` of a
repeat's mean, and the file records how, where and when (the machine's load included).
Torch-free.
"""

from __future__ import annotations

import functools
import hashlib
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..config.specs import SpecError
from ..config.yamlio import YamlLimitError, loads_json_bounded, read_bounded_bytes
from .spec import TECHNIQUES, kind

DEFAULT_PATH = "data/atlas/compute_profile.json"
MODES = ("stored", "measured")
ROOT = Path(__file__).resolve().parents[3]


class ProfileError(SpecError):
    """A compute profile that is unreadable, malformed or lacks an entry; the message names it."""


def mode(a: dict) -> str:
    """``atlas.compute`` (stored when the section does not say).  A section whose workers compute on
    an accelerator (``atlas.device`` auto or cuda: config/gpu.yaml) charges what it measures there:
    the stored profile is a CPU's."""
    m = a.get("compute", "stored")
    if m not in MODES:
        raise ProfileError(f"atlas.compute: {m!r}; use {' or '.join(MODES)}")
    return "measured" if a.get("device", "cpu") != "cpu" else m


def size_key(model: dict, batch_size: int) -> str:
    """A model size and batch as the profile names it (the model's shape, not the config's label)."""
    return (f"{model.get('name', 'gpt')}-L{int(model['n_layer'])}-d{int(model['d_model'])}-h{int(model['n_head'])}"
            f"-T{int(model.get('block_size', 32))}-B{int(batch_size)}")


def resolve(path) -> Path:
    """A relative profile path from the working directory, else from the project's root."""
    p = Path(path)
    if p.is_absolute() or p.exists():
        return p
    return ROOT / p if (ROOT / p).exists() else p


def merge(base: dict, over: dict) -> dict:
    """``over`` merged into a copy of ``base`` (nested mappings key by key, anything else replaced):
    what ``snakemake --configfile`` does with an overlay."""
    out = dict(base)
    for k, v in over.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _finite(v, positive: bool) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and (
        v > 0 if positive else v >= 0)


def validate(prof: dict, where: str = "compute profile") -> dict:
    """Raise :class:`ProfileError` naming the first malformed key; return ``prof``."""
    def bad(key, why):
        raise ProfileError(f"{where}: key {key!r}: {why}")

    if not isinstance(prof, dict):
        bad("(top)", "not a mapping")
    if prof.get("label") != "measured":
        bad("label", "must be 'measured' (the profile is measured on a machine)")
    prov = prof.get("provenance")
    if not isinstance(prov, dict):
        bad("provenance", "missing (how, where and when the profile was measured)")
    for k in ("command", "date_utc", "machine", "load", "statistic", "repeats", "steps"):
        if k not in prov:
            bad(f"provenance.{k}", "missing")
    sizes = prof.get("sizes")
    if not isinstance(sizes, dict) or not sizes:
        bad("sizes", "missing or empty")
    for name, e in sizes.items():
        if not isinstance(e, dict):
            bad(f"sizes.{name}", "not a mapping")
        if "model" not in e or "batch_size" not in e or size_key(e["model"], e["batch_size"]) != name:
            bad(f"sizes.{name}", "its model and batch_size must be the ones the key names")
        if not _finite(e.get("pass_s"), True):
            bad(f"sizes.{name}.pass_s", f"must be a positive finite number, got {e.get('pass_s')!r}")
        techs = e.get("techniques")
        if not isinstance(techs, dict) or not techs:
            bad(f"sizes.{name}.techniques", "missing or empty")
        for t, per_n in techs.items():
            if t not in TECHNIQUES:
                bad(f"sizes.{name}.techniques.{t}", "unknown technique")
            for n, c in per_n.items():
                k = f"sizes.{name}.techniques.{t}.{n}"
                if not str(n).isdigit() or int(n) < 1:
                    bad(k, "N must be a positive integer")
                if not _finite(c.get("extra_s"), False):
                    bad(f"{k}.extra_s", f"must be a finite number >= 0, got {c.get('extra_s')!r}")
                if kind(t) == "master" and not _finite(c.get("master_s"), True):
                    bad(f"{k}.master_s", f"must be a positive finite number, got {c.get('master_s')!r}")
    return prof


@functools.lru_cache(maxsize=8)
def _load(path: str, mtime: float) -> tuple[dict, str]:
    try:
        raw = read_bounded_bytes(path, what="compute profile")
        prof = loads_json_bounded(raw.decode("utf-8"), str(path))
    except YamlLimitError as e:  # over a bound, not a regular file, not JSON: one line naming it
        raise ProfileError(f"atlas.compute_profile: {e}") from None
    except ValueError as e:
        raise ProfileError(f"atlas.compute_profile: {path} is not JSON ({e})") from None
    return validate(prof, f"atlas.compute_profile {path}"), hashlib.sha256(raw).hexdigest()[:12]


def load(path=DEFAULT_PATH) -> tuple[dict, str]:
    """(the validated profile, the first 12 hex digits of its SHA-256)."""
    p = resolve(path)
    try:
        return _load(str(p), p.stat().st_mtime)
    except OSError as e:
        raise ProfileError(f"atlas.compute_profile: cannot read {p} ({e.strerror}); measure one with "
                           f"`python -m distlab atlas profile` or set atlas.compute: measured") from None


@dataclass(frozen=True)
class Charge:
    """What the clock charges a step of one technique at one size and N."""

    pass_s: float
    extra_s: float
    master_s: float
    source: str

    def compute(self, passes) -> np.ndarray:
        """Each worker's compute seconds of a step from its passes (the one formula the driver and
        the replay share, so both give the same floats)."""
        return np.asarray(passes, dtype=float) * self.pass_s + self.extra_s

    def as_spec(self) -> dict:
        return {"mode": "stored", "pass_s": self.pass_s, "extra_s": self.extra_s, "master_s": self.master_s,
                "profile": self.source}


def charge(prof: dict, sha: str, model: dict, batch_size: int, technique: str, n: int) -> Charge:
    key = size_key(model, batch_size)
    e = prof["sizes"].get(key)
    hint = "measure it with `python -m distlab atlas profile` or set atlas.compute: measured"
    if e is None:
        raise ProfileError(f"atlas.compute_profile: no size {key} (have {', '.join(sorted(prof['sizes']))}); {hint}")
    c = e["techniques"].get(technique, {}).get(str(int(n)))
    if c is None:
        raise ProfileError(f"atlas.compute_profile: size {key} has no {technique} at N = {n}; {hint}")
    return Charge(float(e["pass_s"]), float(c["extra_s"]), float(c.get("master_s", 0.0)), f"{key} sha256:{sha}")


def spec_compute(a: dict, model: dict, batch_size: int, technique: str, n: int) -> dict:
    """The run spec's ``cluster.compute`` for the section's ``atlas.compute``."""
    if mode(a) == "measured":
        return {"mode": "measured", "unit_seconds": 0.0, "scale": 1.0}
    prof, sha = load(a.get("compute_profile", DEFAULT_PATH))
    return charge(prof, sha, model, batch_size, technique, n).as_spec()


def spec_charge(spec: dict) -> Charge | None:
    """The charge a run spec asks its driver for (None: measured compute)."""
    c = spec["cluster"]["compute"]
    if c.get("mode", "measured") == "measured":
        return None
    if c["mode"] != "stored":
        raise SpecError(f"atlas spec: key 'cluster.compute.mode': {c['mode']!r}; use measured or stored")
    for k in ("pass_s", "extra_s", "master_s"):
        if not _finite(c.get(k), k == "pass_s"):
            raise SpecError(f"atlas spec: key 'cluster.compute.{k}': must be a finite number"
                            f"{' > 0' if k == 'pass_s' else ' >= 0'}, got {c.get(k)!r}")
    return Charge(float(c["pass_s"]), float(c["extra_s"]), float(c["master_s"]), str(c.get("profile", "")))


def apply(recs: list, a: dict) -> list:
    """The recordings as the section's ``atlas.compute`` charges them: unchanged (measured), or
    copies whose compute and master seconds are the stored profile's, from each step's recorded
    passes (the recorded seconds are not read)."""
    if mode(a) == "measured":
        return recs
    from dataclasses import replace

    prof, sha = load(a.get("compute_profile", DEFAULT_PATH))
    out = []
    for r in recs:
        spec = r.spec or {}
        if "model" not in spec or "batch_size" not in spec:
            raise ProfileError(f"atlas.compute: stored: a {r.technique} recording has no model or batch size "
                               f"in its manifest to look the profile up by")
        ch = charge(prof, sha, spec["model"], int(spec["batch_size"]), r.technique, r.n)
        steps = []
        for s in r.steps:
            s = dict(s)
            s["compute_s"] = ch.compute(s["passes"]).tolist()
            if r.kind == "master":
                s["master_s"] = ch.master_s
            steps.append(s)
        out.append(replace(r, steps=steps))
    return out
