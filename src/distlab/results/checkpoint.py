"""A training run's checkpoints: written atomically beside the one before, each with a checksum
verified on load, holding tensors and plain data only (loading one never runs code), and refused
in one line when it does not fit the run that reads it."""

from __future__ import annotations

import json
import logging
import numbers
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from ..config.specs import SpecError
from ..config.yamlio import YamlLimitError, loads_json_bounded
from .runs import _no_space, disk_full

log = logging.getLogger(__name__)


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

    def _move_aside(self, path: Path) -> Path:
        """Rename ``path`` to ``<name>.corrupt`` (kept for a look, never resumed); the new path."""
        aside = path.with_name(path.name + ".corrupt")
        try:
            os.replace(path, aside)
        except FileNotFoundError:  # another rank set it aside first
            pass
        self.set_aside.append(aside)
        return aside

    def _set_aside(self, path: Path, why: str) -> None:
        aside = self._move_aside(path)
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
        aside = self._move_aside(path)
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
