"""What every training run writes, and how it survives being killed.

A run directory holds:

* ``metrics.csv`` — tidy, one row per step (or per evaluation), with a
  ``time`` column whose meaning is given by ``clock`` (``simulated`` or
  ``measured``) and a ``backend`` column;
* ``manifest.json`` — the resolved run spec, seed, git revision, library
  versions, CPU/GPU, backend, wall time and peak RSS; written last, so a
  directory without it is not a finished run;
* ``checkpoint.pt`` (and the one before it, ``checkpoint.pt.prev``) while the run
  is in progress (removed at the end); each carries a checksum verified on load and
  holds tensors and plain data only, so loading one never runs code.

Outputs are written to a temporary file and renamed into place, so a run that
dies never leaves a file that looks complete.  A rerun of a killed run
resumes from its checkpoint; with the simulated backend and calibrated
compute its final metrics are identical to an uninterrupted run's.
"""

from __future__ import annotations

import json
import logging
import numbers
import os
import platform
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import pandas as pd
import psutil

from ..config.specs import SpecError
from ..config.yamlio import YamlLimitError, loads_json_bounded
from .tables import atomic_output, atomic_write_text

log = logging.getLogger(__name__)

LIBRARIES = ("torch", "torchvision", "numpy", "pandas", "scipy", "datasets", "snakemake",
             "distlab")


class DiskFull(SpecError):
    """A run's file could not be written for want of space: one line naming it, nothing half-written."""


def _no_space(e: OSError) -> bool:
    import errno

    return e.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC))


def disk_full(path: str | Path, e: OSError) -> DiskFull:
    return DiskFull(f"{path}: no space left on its device ({e.strerror}); free space and rerun: the file "
                    f"was not written (the earlier one, if any, is kept)")


def write_json(obj: Any, path: str | Path) -> None:
    try:
        atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")
    except OSError as e:
        if _no_space(e):
            raise disk_full(path, e) from None
        raise


def write_csv(df: pd.DataFrame, path: str | Path) -> None:
    try:
        with atomic_output(path) as tmp:
            df.to_csv(tmp, index=False)
    except OSError as e:
        if _no_space(e):
            raise disk_full(path, e) from None
        raise


# ---- the seal: a finished run's content hashes --------------------------------------------

SEAL = "sealed"   # the manifest's key: {"files": {name: sha256}, "manifest": sha256 of the rest}


class RunEdited(SpecError):
    """A run folder whose manifest or sealed files are not what the run wrote; one line naming
    the file and what to do."""


def _sha256_file(path: Path) -> str:
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _manifest_digest(manifest: dict, files: dict) -> str:
    """The digest of a manifest's content (its seal left out) with its sealed files' hashes, over
    the JSON text as it is stored (a value written with ``default=str`` reads back as its text)."""
    import hashlib

    body = json.loads(json.dumps({k: v for k, v in manifest.items() if k != SEAL}, default=str))
    text = json.dumps({"manifest": body, "files": files}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def seal(manifest: dict, run_dir: str | Path, files: list[str]) -> dict:
    """``manifest`` with its seal: the content hash of each of ``files`` in ``run_dir`` (written
    before the manifest) and of the manifest itself, which :func:`check_sealed` verifies."""
    hashes = {name: _sha256_file(Path(run_dir) / name) for name in files}
    body = {k: v for k, v in manifest.items() if k != SEAL}
    return {**body, SEAL: {"files": hashes, "manifest": _manifest_digest(body, hashes)}}


def check_sealed(run_dir: str | Path, manifest: dict) -> dict:
    """``manifest`` (read from ``run_dir``) when it and every file it sealed are as the run wrote
    them; else :class:`RunEdited` naming the file: edited after the run finished, missing, or
    never sealed."""
    d = Path(run_dir)
    fix = f"rerun the run (snakemake --forcerun the rule that writes {d}) or remove {d}"
    s = manifest.get(SEAL) if isinstance(manifest, dict) else None
    if not (isinstance(s, dict) and isinstance(s.get("files"), dict) and isinstance(s.get("manifest"), str)):
        raise RunEdited(f"{d / 'manifest.json'}: not sealed (no content hashes: written by hand or by an older "
                        f"distlab); {fix}")
    for name, want in s["files"].items():
        path = d / str(name)
        if not path.is_file():
            raise RunEdited(f"{path}: missing beside its manifest, which sealed it; {fix}")
        if _sha256_file(path) != want:
            raise RunEdited(f"{path}: edited after the run finished (its content hash is not the one the "
                            f"manifest sealed); {fix}")
    if _manifest_digest(manifest, s["files"]) != s["manifest"]:
        raise RunEdited(f"{d / 'manifest.json'}: edited after the run finished (its content hash is not the "
                        f"one it sealed); {fix}")
    return manifest


def git_revision(cwd: str | Path | None = None) -> dict:
    """The source tree's commit and whether it has uncommitted changes."""
    cwd = cwd or Path(__file__).resolve().parent
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True,
                             text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=cwd, capture_output=True, text=True, timeout=10)
        if rev.returncode == 0:
            return {"commit": rev.stdout.strip(), "dirty": bool(dirty.stdout.strip())}
    except (OSError, subprocess.TimeoutExpired):
        pass
    return {"commit": None, "dirty": None}


def library_versions() -> dict:
    out = {"python": platform.python_version()}
    for lib in LIBRARIES:
        try:
            out[lib] = metadata.version(lib)
        except metadata.PackageNotFoundError:
            out[lib] = None
    return out


def hardware() -> dict:
    import torch

    info = {"machine": platform.machine(), "processor": platform.processor() or None,
            "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
            "cuda": torch.cuda.is_available()}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu_model"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    if torch.cuda.is_available():
        info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    from .machinekind import kernel_set, machine_kind

    # the machine kind (CPU vendor, family, model, ISA; torch, MKL, oneDNN) and the kernel set the
    # run ran with (the environment that chooses it, and the capability torch dispatches to)
    return {**info, "kind": machine_kind(), "kernels": kernel_set()}


def provenance(manifest: dict) -> dict:
    """The code a run was made by, as summary-table columns (``git_commit``,
    ``git_dirty``): the scorecard lists runs whose code differs from the
    current revision, so stale results show."""
    git = manifest.get("git") or {}
    return {"git_commit": git.get("commit"), "git_dirty": bool(git.get("dirty"))}


def peak_rss_mb() -> float:
    """Peak resident set size of this process (and waited-for children), in MiB."""
    import resource

    self_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    child_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(self_kb, child_kb) / 1024.0


class CheckpointDamaged(Exception):
    """A checkpoint file that cannot be trusted (bad checksum, truncated, unreadable)."""


class CheckpointRefused(SpecError):
    """A checkpoint this version will not load: one whose loading could run code (an older
    version's pickle).  Its message is one line saying how to rerun from scratch."""


class SpecMismatch(Exception):
    """A checkpoint written under another run spec (read from its header alone)."""


# Version 2: the payload holds tensors and plain data only (see :func:`encode_state`), loaded
# with ``torch.load(weights_only=True)`` or as JSON, so loading a file never runs code.
# Version 1 (before) pickled arbitrary objects: such files are refused, never unpickled.
CHECKPOINT_MAGIC = b"DISTLAB-CHECKPOINT 2\n"
OLD_MAGICS = (b"DISTLAB-CHECKPOINT 1\n",)
HEADER_MAX = 4096  # bytes of the JSON header line

_TAG = "__distlab__"


def encode_state(obj: Any, tensors: bool = True, where: str = "state") -> Any:
    """``obj`` as tensors and plain data only, the form a checkpoint stores.

    Plain data is None, bool, int, float, str, bytes, list, dict (and tuples and
    OrderedDicts where ``tensors``, as ``torch.load(weights_only=True)`` reads them back);
    numpy arrays and scalars, sets, tuples and non-string keys (for JSON) are stored as
    tagged dicts that :func:`decode_state` turns back into the same objects.  Anything
    else is a TypeError naming where it is: a state that cannot be stored safely is a
    bug of the trainer, never silently pickled."""
    import numpy as np

    if isinstance(obj, np.generic):
        if obj.dtype.hasobject:
            raise TypeError(f"a checkpoint holds tensors and plain data only: {where} is a numpy object")
        return {_TAG: "npscalar", "dtype": obj.dtype.str, "data": _bytes(obj.tobytes(), tensors)}
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, bytes):
        return _bytes(obj, tensors)
    if isinstance(obj, np.ndarray):
        if obj.dtype.hasobject:
            raise TypeError(f"a checkpoint holds tensors and plain data only: {where} is an object array")
        return {_TAG: "ndarray", "dtype": obj.dtype.str, "shape": list(obj.shape),
                "data": _bytes(np.ascontiguousarray(obj).tobytes(), tensors)}
    if tensors:
        torch = sys.modules["torch"]
        if isinstance(obj, (torch.Tensor, torch.dtype, torch.device, torch.Size)):
            return obj
    if isinstance(obj, dict):
        plain = all(isinstance(k, str) and k != _TAG for k in obj) or (
            tensors and all(isinstance(k, (str, int)) and k != _TAG for k in obj))
        if plain:
            out = {k: encode_state(v, tensors, f"{where}[{k!r}]") for k, v in obj.items()}
            if tensors and type(obj) is not dict:
                from collections import OrderedDict

                ordered = OrderedDict(out)
                meta = getattr(obj, "_metadata", None)  # a module's state_dict versions
                if meta is not None:
                    ordered._metadata = encode_state(meta, tensors, f"{where}._metadata")
                return ordered
            return out
        return {_TAG: "dict", "items": [[encode_state(k, tensors, f"{where} key"),
                                         encode_state(v, tensors, f"{where}[{k!r}]")] for k, v in obj.items()]}
    if isinstance(obj, list):
        return [encode_state(v, tensors, f"{where}[{i}]") for i, v in enumerate(obj)]
    if type(obj) is tuple:
        items = [encode_state(v, tensors, f"{where}[{i}]") for i, v in enumerate(obj)]
        return tuple(items) if tensors else {_TAG: "tuple", "items": items}
    if isinstance(obj, (set, frozenset)):
        return {_TAG: "frozenset" if isinstance(obj, frozenset) else "set",
                "items": [encode_state(v, tensors, f"{where} item") for v in sorted(obj, key=repr)]}
    raise TypeError(f"a checkpoint holds tensors and plain data only: {where} is a "
                    f"{type(obj).__module__}.{type(obj).__qualname__}")


def _bytes(data: bytes, tensors: bool) -> Any:
    if tensors:
        return data
    import base64

    return {_TAG: "bytes", "b64": base64.b64encode(data).decode("ascii")}


def decode_state(obj: Any) -> Any:
    """The objects :func:`encode_state` stored (numpy arrays and scalars, tuples, sets...)."""
    if isinstance(obj, dict):
        kind = obj.get(_TAG)
        if kind is None:
            out = type(obj)((k, decode_state(v)) for k, v in obj.items())
            meta = getattr(obj, "_metadata", None)
            if meta is not None:
                out._metadata = meta
            return out
        import numpy as np

        if kind in ("ndarray", "npscalar"):
            data = decode_state(obj["data"])
            if not isinstance(data, bytes):
                raise ValueError(f"a stored {kind} without its bytes")
            dtype = np.dtype(str(obj["dtype"]))
            if dtype.hasobject:
                raise ValueError("a stored numpy object array")
            if kind == "npscalar":
                return np.frombuffer(data, dtype=dtype)[0]
            return np.frombuffer(data, dtype=dtype).reshape([int(n) for n in obj["shape"]]).copy()
        if kind == "bytes":
            import base64

            return base64.b64decode(obj["b64"], validate=True)
        if kind == "tuple":
            return tuple(decode_state(v) for v in obj["items"])
        if kind in ("set", "frozenset"):
            items = (decode_state(v) for v in obj["items"])
            return set(items) if kind == "set" else frozenset(items)
        if kind == "dict":
            return {decode_state(k): decode_state(v) for k, v in obj["items"]}
        raise ValueError(f"unknown stored kind {kind!r}")
    if isinstance(obj, list):
        return [decode_state(v) for v in obj]
    if type(obj) is tuple:
        return tuple(decode_state(v) for v in obj)
    return obj


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _checkpoint_temp(path: Path, state: Any, spec_hash: str | None) -> str:
    """``state`` with its header in a fsync'ed temporary file next to ``path``; its name."""
    import hashlib
    import io
    import tempfile

    # a state with tensors comes from a process that has torch; one without
    # (the placement searches' rows) is JSON, so such jobs start without torch
    if "torch" in sys.modules:
        buf = io.BytesIO()
        sys.modules["torch"].save(encode_state(state, tensors=True), buf)
        payload = buf.getbuffer()
        fmt = "torch"
    else:
        payload = json.dumps(encode_state(state, tensors=False)).encode()
        fmt = "json"
    header = {"sha256": hashlib.sha256(payload).hexdigest(), "bytes": len(payload),
              "format": fmt, "spec_hash": spec_hash}
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(CHECKPOINT_MAGIC)
            f.write(json.dumps(header, sort_keys=True).encode() + b"\n")
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp_name, 0o644)
    except BaseException:
        os.unlink(tmp_name)
        raise
    return tmp_name


def _keep_as(target: Path, previous: Path) -> None:
    """``previous`` becomes the file now at ``target``, which stays in place meanwhile (a
    hard link renamed over ``previous``), so a kill at any instant leaves ``target``."""
    link = previous.with_name(f".{previous.name}.{os.getpid()}.link")
    try:
        link.unlink(missing_ok=True)
        os.link(target, link)
        os.replace(link, previous)
    except OSError:  # no hard links here: a rename (for an instant, only `previous` exists)
        link.unlink(missing_ok=True)
        os.replace(target, previous)


def write_checkpoint_file(path: str | Path, state: Any, spec_hash: str | None = None,
                          keep_previous: str | Path | None = None) -> None:
    """Write ``state`` to ``path`` with a header carrying the SHA-256 of its content.

    The layout is a magic line, a one-line JSON header (``sha256``, ``bytes``,
    ``format``, ``spec_hash``) and the payload: ``torch.save``'s bytes of the state as
    tensors and plain data (:func:`encode_state`), or JSON in a process without torch.
    The bytes go to a temporary file in the same folder, are fsync'ed, and only then is
    the file renamed into place (and the folder fsync'ed), so a kill at any instant
    leaves the old file or the new one, never a half-written one under the final name.
    With ``keep_previous``, the file replaced is renamed there first."""
    from ..runtime.deadline import deadline_deferred

    target = Path(path)
    with deadline_deferred():  # a job timeout waits until the file is in place
        try:
            tmp_name = _checkpoint_temp(target, state, spec_hash)
        except OSError as e:
            if _no_space(e):
                raise disk_full(target, e) from None
            raise
        try:
            if keep_previous is not None and target.exists():
                _keep_as(target, Path(keep_previous))
            os.replace(tmp_name, target)
            _fsync_dir(target.parent)
        finally:
            if os.path.exists(tmp_name):
                os.unlink(tmp_name)


def _refuse_old(path: Path) -> CheckpointRefused:
    prev = path.with_name(path.name + ".prev") if not path.name.endswith(".prev") else path
    return CheckpointRefused(
        f"checkpoint {path} was written by an older distlab as a pickle, which loading could run "
        f"code from: not loaded. To rerun that run from scratch, delete it (rm -f {path} {prev}) "
        f"and run again")


def read_checkpoint_file(path: str | Path, spec_hash: str | None = None) -> tuple[dict, Any]:
    """The header and the state of a checkpoint written by :func:`write_checkpoint_file`.

    Nothing in the file can run code: the header is JSON; with ``spec_hash`` given, a
    header of another spec raises :class:`SpecMismatch` before the payload is read; the
    payload is loaded with ``torch.load(weights_only=True)`` (tensors and plain data) or as
    JSON.  Raises :class:`CheckpointRefused` for an older version's pickled checkpoint, and
    :class:`CheckpointDamaged` (with a short reason) when the file lacks the header, is
    shorter or longer than the header says, its checksum does not match, or its verified
    payload still does not load (a forged pickle among them)."""
    import hashlib

    path = Path(path)
    with open(path, "rb") as f:
        head = f.read(len(CHECKPOINT_MAGIC) + HEADER_MAX + 1)
        if any(head.startswith(m) for m in OLD_MAGICS):
            raise _refuse_old(path)
        if not head.startswith(CHECKPOINT_MAGIC):
            if len(head) < len(CHECKPOINT_MAGIC) and CHECKPOINT_MAGIC.startswith(head):
                raise CheckpointDamaged(f"truncated to {len(head)} bytes, inside its header")
            raise CheckpointDamaged("no distlab checkpoint header (damaged, or not a distlab "
                                    "checkpoint)")
        line, sep, _ = head[len(CHECKPOINT_MAGIC):].partition(b"\n")
        if not sep:
            if len(head) > len(CHECKPOINT_MAGIC) + HEADER_MAX:
                raise CheckpointDamaged(f"header longer than {HEADER_MAX} bytes")
            raise CheckpointDamaged(f"truncated to {len(head)} bytes, inside its header")
        try:
            header = loads_json_bounded(line.decode("utf-8"), "checkpoint header")
            expected, size = str(header["sha256"]), int(header["bytes"])
            fmt = header.get("format", "torch")
        except (ValueError, KeyError, TypeError, AttributeError, YamlLimitError) as e:
            raise CheckpointDamaged(f"unreadable header ({type(e).__name__})") from None
        if spec_hash is not None and header.get("spec_hash") != spec_hash:
            raise SpecMismatch(str(header.get("spec_hash")))
        if fmt not in ("torch", "json"):
            raise CheckpointDamaged(f"unknown payload format {str(fmt)[:20]!r}")
        f.seek(len(CHECKPOINT_MAGIC) + len(line) + 1)
        payload = f.read()
    if len(payload) != size:
        how = "truncated" if len(payload) < size else "longer than written"
        raise CheckpointDamaged(f"{how}: {len(payload)} of {size} payload bytes")
    actual = hashlib.sha256(payload).hexdigest()
    if actual != expected:
        raise CheckpointDamaged(f"checksum mismatch (sha256 {actual[:12]}..., written {expected[:12]}...)")
    try:
        if fmt == "torch":
            import io

            import torch

            raw = torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)
        else:
            raw = loads_json_bounded(payload.decode("utf-8"), "checkpoint payload", allow_nonfinite=True,
                                     max_chars=len(payload))
        state = decode_state(raw)
    except Exception as e:  # noqa: BLE001 - the checksum held, the content still does not load
        raise CheckpointDamaged(f"checksum verified but it does not load as tensors and plain data: "
                                f"{type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}") from None
    return header, state


class Checkpointer:
    """Saves the run state every ``every_s`` wall seconds or ``every_steps`` steps.

    ``state_fn`` returns everything needed to continue: model and optimizer
    state, the clock, per-worker memories, counters and the metrics rows so
    far.  Every paper's runs checkpoint through this one class.

    * Each file carries the SHA-256 of its content (:func:`write_checkpoint_file`),
      verified on load; it is written to a temporary file, fsync'ed and renamed.
    * The checkpoint it replaces is kept as ``<name>.prev``.  A damaged or
      truncated checkpoint is named in one log line and set aside as
      ``<name>.corrupt`` (never resumed); the run then continues from the
      previous good checkpoint, or from scratch when there is none.
    * A checkpoint holds tensors and plain data only (:func:`encode_state`) and loads
      without unpickling code; an older version's pickled checkpoint is refused
      (:class:`CheckpointRefused`, one line saying how to rerun from scratch).
    * A checkpoint carries the hash of the run spec that wrote it: ``load()``
      refuses one written under another spec (it is deleted and the run starts
      from scratch, with a log line), so a run killed and rerun after a config
      change never continues the old run.
    """

    def __init__(self, path: str | Path, spec: dict | None = None, every_s: float = 60.0,
                 every_steps: int = 0) -> None:
        from ..config.specs import spec_hash

        self.path = Path(path)
        self.prev = self.path.with_name(self.path.name + ".prev")
        self.every_s = every_s
        self.every_steps = every_steps
        self.spec_hash = spec_hash(spec) if spec is not None else None
        steps = (spec or {}).get("steps")
        # the run's planned steps: a state that claims a step beyond them is refused
        self.planned_steps = steps if isinstance(steps, int) and not isinstance(steps, bool) else None
        self._last = time.monotonic()
        self.set_aside: list[Path] = []  # damaged files this checkpointer renamed
        self.loaded: Path | None = None  # the file the last good state came from
        self._origin: dict[int, Path] = {}  # id of each state read -> its file

    def _set_aside(self, path: Path, why: str) -> None:
        aside = path.with_name(path.name + ".corrupt")
        try:
            os.replace(path, aside)
        except FileNotFoundError:  # another rank set it aside first
            pass
        self.set_aside.append(aside)
        log.warning("checkpoint %s is damaged (%s): set aside as %s, not resumed", path, why, aside.name)

    def _read(self, path: Path) -> dict | None:
        try:
            header, state = read_checkpoint_file(path, self.spec_hash)
        except FileNotFoundError:
            return None
        except SpecMismatch as e:
            log.warning("checkpoint %s was written under another run spec (%s, now %s): "
                        "discarded, starting from scratch", path, e, self.spec_hash)
            path.unlink(missing_ok=True)
            return None
        except CheckpointDamaged as e:
            self._set_aside(path, str(e))
            return None
        if not isinstance(state, dict):
            self._set_aside(path, f"holds a {type(state).__name__}, not a run state")
            return None
        self._check_step(path, state)
        self._check_finite(path, state)
        self.loaded = self._origin[id(state)] = path
        return state

    def _refuse(self, path: Path, why: str) -> CheckpointRefused:
        """The one-line refusal of a state whose checksum held but whose content does not fit
        this run; the file is set aside as ``<name>.corrupt`` first, so a rerun does not meet it."""
        aside = path.with_name(path.name + ".corrupt")
        try:
            os.replace(path, aside)
        except FileNotFoundError:  # another rank set it aside first
            pass
        self.set_aside.append(aside)
        if path != self.prev and self.prev.exists():
            then = f"a rerun resumes from the previous checkpoint {self.prev.name}"
        else:
            then = "a rerun starts from scratch"
        return CheckpointRefused(f"checkpoint {path} {why}: not resumed; moved aside to {aside.name}, "
                                 f"so {then}")

    def _check_step(self, path: Path, state: dict) -> None:
        key = "step" if "step" in state else "t" if "t" in state else None
        if key is None:
            return
        step = state[key]
        if not isinstance(step, numbers.Integral) or isinstance(step, bool):
            raise self._refuse(path, f"records its {key} as a {type(step).__name__}, not a step number")
        if step < 0:
            raise self._refuse(path, f"records {key} {step}, a negative step")
        if self.planned_steps is not None and step > self.planned_steps:
            raise self._refuse(path, f"records {key} {step}, beyond this run's {self.planned_steps} "
                                     f"planned steps")

    def _check_finite(self, path: Path, state: dict) -> None:
        """A state whose model values (``params``, a flat vector, or ``model``, a state dict) hold a
        NaN or an infinity is refused: resumed, it would end the run as diverged at once, and the
        learning rate would be blamed for the checkpoint's values."""
        torch = sys.modules.get("torch")
        if torch is None:
            return
        tensors = [("params", state.get("params"))]
        model = state.get("model")
        if isinstance(model, dict):
            tensors += [(f"model[{k!r}]", v) for k, v in model.items()]
        for name, t in tensors:
            if isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex()) \
                    and not bool(torch.isfinite(t).all()):
                bad = int((~torch.isfinite(t)).sum())
                raise self._refuse(path, f"holds {bad} non-finite value(s) (NaN or inf) in {name}, so the "
                                         f"run would diverge at once whatever its learning rate")

    @contextmanager
    def restoring(self, state: dict | None = None) -> Iterator[None]:
        """Around the code that puts a loaded state into the run's model and optimizers: a state
        that does not fit them (a parameter of another shape, a missing or unexpected entry) is a
        one-line :class:`CheckpointRefused` naming what does not fit, and the file it came from
        (``state``'s, where :meth:`load_all` read several; else the last read) is set aside."""
        try:
            yield
        except (RuntimeError, ValueError, KeyError, TypeError, IndexError) as e:
            path = self._origin.get(id(state), self.loaded) if state is not None else self.loaded
            if path is None or isinstance(e, CheckpointRefused):
                raise
            raise self._refuse(path, f"does not fit this run: {state_mismatch_line(e)}") from None

    def load(self) -> dict | None:
        """The last good state, or None (start from scratch)."""
        state = self._read(self.path)
        if state is not None:
            return state
        state = self._read(self.prev)
        if state is not None:
            log.warning("resuming from the previous checkpoint %s (step %s)", self.prev,
                        state.get("step", state.get("t", "?")))
        elif self.set_aside:
            log.warning("no good checkpoint left for %s: starting from scratch", self.path)
        return state

    def load_all(self) -> list[dict]:
        """Every good state this checkpointer holds, the newest first (the current file, then
        ``<name>.prev``): ranks that each keep their own file resume from a step they all hold,
        which after a kill between two ranks' saves is the previous one on the rank ahead."""
        return [s for s in (self._read(self.path), self._read(self.prev)) if s is not None]

    def save(self, state: dict) -> None:
        write_checkpoint_file(self.path, state, self.spec_hash, keep_previous=self.prev)
        self._last = time.monotonic()

    def maybe_save(self, step: int, state_fn: Callable[[], dict]) -> bool:
        from ..runtime.deadline import progress

        progress()  # every trainer's step passes here: a job's deadline follows its pace
        due_steps = self.every_steps > 0 and step % self.every_steps == 0
        due_time = self.every_s > 0 and time.monotonic() - self._last >= self.every_s
        if not (due_steps or due_time):
            return False
        self.save(state_fn())
        return True

    def clear(self) -> None:
        for path in (self.path, self.prev):
            path.unlink(missing_ok=True)


def state_mismatch_line(e: BaseException) -> str:
    """One line from an error raised while a state is loaded into a model: torch's
    ``load_state_dict`` lists each size mismatch or missing key on a line of its own; the first
    two are kept."""
    if isinstance(e, KeyError):
        return f"it has no entry {e.args[0]!r}" if e.args else "an entry is missing"
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    details = [ln for ln in lines if ln.startswith(("size mismatch", "Missing key", "Unexpected key"))]
    picked = details[:2] or lines[:1] or [type(e).__name__]
    more = f" (and {len(details) - 2} more)" if len(details) > 2 else ""
    return ("; ".join(picked) + more)[:400]


DIVERGENCE_FACTOR = 10.0  # a training loss this many times its first value: the run diverged


class RunDiverged(SpecError):
    """A run's training loss became non-finite or rose :data:`DIVERGENCE_FACTOR` times above its
    first value: the job fails (one line naming the step), so no result of it is graded."""


class RunRecorder:
    """Collects metric rows and writes the run's outputs at the end.

    With ``fail_on_divergence``, a logged ``loss`` that is NaN or infinite, or more than
    :data:`DIVERGENCE_FACTOR` times the first loss logged, raises :class:`RunDiverged`
    naming the step (the learning rate is the usual cause): the run writes no manifest."""

    def __init__(self, out_dir: str | Path, spec: dict, backend: str, clock: str,
                 fail_on_divergence: bool = False) -> None:
        if clock not in ("simulated", "measured"):
            raise ValueError(f"clock must be 'simulated' or 'measured', got {clock!r}")
        self.fail_on_divergence = fail_on_divergence
        self.out_dir = Path(out_dir)
        self.spec = spec
        self.backend = backend
        self.clock = clock
        self.rows: list[dict] = []
        self._t0 = time.perf_counter()
        self.wall_before_resume = 0.0
        self.extra: dict = {}
        self._resumed_rows: int | None = None

    def log(self, **row: Any) -> None:
        if self.fail_on_divergence and "loss" in row:
            self._check_loss(row)
        self.rows.append(row)

    def _check_loss(self, row: dict) -> None:
        import math

        loss = float(row["loss"])
        first = next((float(r["loss"]) for r in self.rows if "loss" in r), loss)
        step = row.get("step", len(self.rows))
        lr = self.spec.get("lr")
        hint = f" (lr {lr:g}: try a smaller one)" if isinstance(lr, (int, float)) else ""
        if self._resumed_rows is not None and len(self.rows) == self._resumed_rows:
            # the first step after a resume: the checkpoint's state, not the learning rate
            hint = (" at the first step after resuming from its checkpoint, so from the checkpoint's "
                    "state: remove the run's checkpoint files and rerun it")
        if not math.isfinite(loss):
            raise RunDiverged(f"the run diverged: training loss {loss} at step {step}{hint}; no result written")
        if math.isfinite(first) and first > 0 and loss > DIVERGENCE_FACTOR * first:
            raise RunDiverged(f"the run diverged: training loss {loss:.4g} at step {step}, over "
                              f"{DIVERGENCE_FACTOR:g} times its first value {first:.4g}{hint}; no result written")

    def state_dict(self) -> dict:
        return {"rows": list(self.rows), "wall_s": self.wall_s(), "extra": dict(self.extra)}

    def load_state_dict(self, state: dict) -> None:
        self.rows = list(state["rows"])
        self._resumed_rows = len(self.rows)  # the rows a resumed run starts from
        self.wall_before_resume = float(state["wall_s"])
        self.extra = dict(state.get("extra", {}))
        self._t0 = time.perf_counter()
        self.extra["resumed"] = self.extra.get("resumed", 0) + 1

    def wall_s(self) -> float:
        return self.wall_before_resume + time.perf_counter() - self._t0

    def frame(self) -> pd.DataFrame:
        df = pd.DataFrame(self.rows)
        df.insert(0, "backend", self.backend)
        df.insert(1, "clock", self.clock)
        return df

    def finish(self, metrics_name: str = "metrics.csv", **extra: Any) -> Path:
        """Write metrics, then the manifest (last: its presence marks completion)."""
        self.out_dir.mkdir(parents=True, exist_ok=True)
        write_csv(self.frame(), self.out_dir / metrics_name)
        manifest = {
            "spec": self.spec,
            "seed": self.spec.get("seed"),
            "backend": self.backend,
            "clock": self.clock,
            "git": git_revision(),
            "libraries": library_versions(),
            "hardware": hardware(),
            "argv": sys.argv,
            "wall_s": round(self.wall_s(), 3),
            "peak_rss_mb": round(peak_rss_mb(), 1),
            # forked from distlab.runtime.forkserver: its peak RSS includes the server's imports
            "process": "forked" if os.environ.get("DISTLAB_FORKED") else "fresh",
            "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            **self.extra,
            **extra,
        }
        write_json(seal(manifest, self.out_dir, [metrics_name]), self.out_dir / "manifest.json")
        return self.out_dir / "manifest.json"
