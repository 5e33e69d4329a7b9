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
import os
import platform
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import pandas as pd
import psutil

from ..config.specs import SpecError
from .tables import atomic_output, atomic_write_text

log = logging.getLogger(__name__)

LIBRARIES = ("torch", "torchvision", "numpy", "pandas", "scipy", "datasets", "snakemake",
             "distlab")

# the paths whose content decides the results (the code, workflow, config and data); what a run
# records as uncommitted changes, and what paper/'s record compares with HEAD
DECIDING = ("src", "workflow", "Snakefile", "config", "data")


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


def uncommitted(cwd: str | Path | None = None) -> int | None:
    """How many tracked files have uncommitted changes in the paths that decide results
    (:data:`DECIDING`, from the repository's top whatever ``cwd``): a change elsewhere (paper/,
    docs/, which a run itself may rewrite) makes no other code.  None outside a git checkout."""
    cwd = cwd or Path(__file__).resolve().parent
    try:
        r = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--",
                            *(f":(top){p}" for p in DECIDING)], cwd=cwd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return len(r.stdout.splitlines()) if r.returncode == 0 else None


def code_unchanged_since(commit: str, cwd: str | Path | None = None) -> bool:
    """Whether the paths that decide results (:data:`DECIDING`) are the same at ``commit`` as at
    HEAD of the checkout ``cwd`` is in (default: this package's): a commit that changed only docs
    or tests since leaves a run of ``commit`` current.  False where it cannot be checked (no git,
    no commit recorded, a commit not in the clone)."""
    cwd = cwd or Path(__file__).resolve().parent
    if not commit or str(commit) in ("None", "nan"):
        return False
    try:
        known = subprocess.run(["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=cwd, capture_output=True,
                               timeout=10)
        if known.returncode != 0:
            return False
        diff = subprocess.run(["git", "diff", "--quiet", str(commit), "HEAD", "--",
                               *(f":(top){p}" for p in DECIDING)], cwd=cwd, capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return diff.returncode == 0


def git_revision(cwd: str | Path | None = None) -> dict:
    """The source tree's commit and whether it has uncommitted changes that decide results
    (:func:`uncommitted`)."""
    cwd = cwd or Path(__file__).resolve().parent
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True,
                             text=True, timeout=10)
        if rev.returncode == 0:
            n = uncommitted(cwd)
            return {"commit": rev.stdout.strip(), "dirty": None if n is None else n > 0}
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
