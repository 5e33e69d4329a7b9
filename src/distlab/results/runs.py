"""What every training run writes, and how it survives being killed.

A run directory holds:

* ``metrics.csv`` — tidy, one row per step (or per evaluation), with a
  ``time`` column whose meaning is given by ``clock`` (``simulated`` or
  ``measured``) and a ``backend`` column;
* ``manifest.json`` — the resolved run spec, seed, git revision, library
  versions, CPU/GPU, backend, wall time and peak RSS; written last, so a
  directory without it is not a finished run;
* ``checkpoint.pt`` (and the one before it, ``checkpoint.pt.prev``) while the run
  is in progress (removed at the end); each carries a checksum verified on load.

Outputs are written to a temporary file and renamed into place, so a run that
dies never leaves a file that looks complete.  A rerun of a killed run
resumes from its checkpoint; with the simulated backend and calibrated
compute its final metrics are identical to an uninterrupted run's.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import platform
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any, Callable

import pandas as pd
import psutil

from .tables import atomic_output, atomic_write_text

log = logging.getLogger(__name__)

LIBRARIES = ("torch", "torchvision", "numpy", "pandas", "scipy", "datasets", "snakemake",
             "distlab")


def write_json(obj: Any, path: str | Path) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def write_csv(df: pd.DataFrame, path: str | Path) -> None:
    with atomic_output(path) as tmp:
        df.to_csv(tmp, index=False)


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
    return info


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


CHECKPOINT_MAGIC = b"DISTLAB-CHECKPOINT 1\n"


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

    buf = io.BytesIO()
    # a state with tensors comes from a process that has torch; one without
    # (the placement searches' rows) is pickled, so such jobs start without torch
    if "torch" in sys.modules:
        sys.modules["torch"].save(state, buf)
        fmt = "torch"
    else:
        pickle.dump(state, buf, protocol=pickle.HIGHEST_PROTOCOL)
        fmt = "pickle"
    payload = buf.getbuffer()
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
    ``format``, ``spec_hash``) and the payload (``torch.save``'s bytes, or a
    pickle in a process without torch).  The bytes go to a temporary file in
    the same folder, are fsync'ed, and only then is the file renamed into place
    (and the folder fsync'ed), so a kill at any instant leaves the old file or
    the new one, never a half-written one under the final name.  With
    ``keep_previous``, the file replaced is renamed there first."""
    from ..runtime.deadline import deadline_deferred

    target = Path(path)
    with deadline_deferred():  # a job timeout waits until the file is in place
        tmp_name = _checkpoint_temp(target, state, spec_hash)
        try:
            if keep_previous is not None and target.exists():
                _keep_as(target, Path(keep_previous))
            os.replace(tmp_name, target)
            _fsync_dir(target.parent)
        finally:
            if os.path.exists(tmp_name):
                os.unlink(tmp_name)


def read_checkpoint_file(path: str | Path) -> tuple[dict, Any]:
    """The header and the state of a checkpoint written by :func:`write_checkpoint_file`.

    Raises :class:`CheckpointDamaged` (with a short reason) when the file lacks
    the header, is shorter or longer than the header says, its checksum does not
    match, or its verified payload still does not load."""
    import hashlib

    data = Path(path).read_bytes()
    if not data.startswith(CHECKPOINT_MAGIC):
        if len(data) < len(CHECKPOINT_MAGIC) and CHECKPOINT_MAGIC.startswith(data):
            raise CheckpointDamaged(f"truncated to {len(data)} bytes, inside its header")
        raise CheckpointDamaged("no distlab checkpoint header (damaged, or written without a checksum "
                                "by an older version)")
    rest = data[len(CHECKPOINT_MAGIC):]
    line, sep, payload = rest.partition(b"\n")
    if not sep:
        raise CheckpointDamaged(f"truncated to {len(data)} bytes, inside its header")
    try:
        header = json.loads(line)
        expected, size = str(header["sha256"]), int(header["bytes"])
        fmt = header.get("format", "torch")
    except (ValueError, KeyError, TypeError) as e:
        raise CheckpointDamaged(f"unreadable header ({type(e).__name__})") from None
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

            state = torch.load(io.BytesIO(payload), map_location="cpu", weights_only=False)
        else:
            state = pickle.loads(payload)
    except Exception as e:  # noqa: BLE001 - the checksum held, the content still does not load
        raise CheckpointDamaged(f"checksum verified but it does not load: "
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
        self._last = time.monotonic()
        self.set_aside: list[Path] = []  # damaged files this checkpointer renamed

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
            header, state = read_checkpoint_file(path)
        except FileNotFoundError:
            return None
        except CheckpointDamaged as e:
            self._set_aside(path, str(e))
            return None
        written = header.get("spec_hash")
        if self.spec_hash is not None and written != self.spec_hash:
            log.warning("checkpoint %s was written under another run spec (%s, now %s): "
                        "discarded, starting from scratch", path, written, self.spec_hash)
            path.unlink(missing_ok=True)
            return None
        if not isinstance(state, dict):
            self._set_aside(path, f"holds a {type(state).__name__}, not a run state")
            return None
        return state

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


class RunRecorder:
    """Collects metric rows and writes the run's outputs at the end."""

    def __init__(self, out_dir: str | Path, spec: dict, backend: str, clock: str) -> None:
        if clock not in ("simulated", "measured"):
            raise ValueError(f"clock must be 'simulated' or 'measured', got {clock!r}")
        self.out_dir = Path(out_dir)
        self.spec = spec
        self.backend = backend
        self.clock = clock
        self.rows: list[dict] = []
        self._t0 = time.perf_counter()
        self.wall_before_resume = 0.0
        self.extra: dict = {}

    def log(self, **row: Any) -> None:
        self.rows.append(row)

    def state_dict(self) -> dict:
        return {"rows": list(self.rows), "wall_s": self.wall_s(), "extra": dict(self.extra)}

    def load_state_dict(self, state: dict) -> None:
        self.rows = list(state["rows"])
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
        write_json(manifest, self.out_dir / "manifest.json")
        return self.out_dir / "manifest.json"
