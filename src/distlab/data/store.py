"""Prepared data sets on disk: atomic, checksummed, build-once.

A prepared data set is a directory holding ``train.pt``, ``val.pt``,
``test.pt`` (``torch.save`` of plain dicts of tensors) and ``manifest.json``.
Image splits hold ``x`` uint8 ``(N, C, H, W)`` and ``y`` int64 ``(N,)``; text
splits hold ``tokens`` uint8 ``(N,)`` (byte ids).

``torch.save`` embeds a random serialization id, so the file checksums
(``sha256``, used to detect corruption) differ between two builds; the
per-split ``content_sha256`` (over names, dtypes, shapes and raw bytes of the
tensors) is the reproducibility fingerprint and is identical for the same spec
and seed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import shutil
import tempfile
import uuid
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from distlab.data.errors import DataError, one_line
from distlab.data.sources import build, validate_spec

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
SPLITS = ("train", "val", "test")
MANIFEST = "manifest.json"
RERUN = "rebuild it with `snakemake --cores 1 data` (every configured data set)"


def prepare_dataset(spec: dict[str, Any], out_dir: str | Path, seed: int) -> dict[str, Any]:
    """Build the data set described by ``spec`` into ``out_dir`` once; return its manifest.

    If ``out_dir`` already holds a complete, checksum-valid build of the same
    spec and seed, its manifest is returned untouched.  Otherwise the data set
    is built in memory, written to a temporary sibling directory and renamed
    into place (replacing any stale ``out_dir``), so ``out_dir`` is never
    half-written; the temporary directory is removed on failure.

    Manifest keys: ``format_version``, ``name``, ``kind``, ``source``, ``seed``,
    ``spec``, ``splits`` (per split: ``file``, ``size``, ``sha256``,
    ``content_sha256``, ``tensors`` {name: {``shape``, ``dtype``}}),
    ``versions`` (python and libraries), and for images ``classes``,
    ``num_classes``, ``pixel_max``, ``image_shape`` [C, H, W]; for text
    ``vocab_size``, ``tokenizer``, ``num_chars``.
    """
    out_dir = Path(out_dir)
    spec = json.loads(json.dumps(spec))  # plain JSON types, as stored in the manifest
    kind, source = validate_spec(spec)
    existing = _reusable(out_dir, spec, seed)
    if existing is not None:
        return existing
    built = build(spec, seed)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    _remove_leftovers(out_dir)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    try:
        tmp.chmod(0o755)  # mkdtemp makes it private; the result is a normal directory
        splits = {}
        for split in SPLITS:
            tensors = built.splits[split]
            _save_split(tensors, tmp / f"{split}.pt")
            splits[split] = {
                "file": f"{split}.pt",
                "size": len(next(iter(tensors.values()))),
                "sha256": file_sha256(tmp / f"{split}.pt"),
                "content_sha256": content_sha256(tensors),
                "tensors": {k: {"shape": list(v.shape), "dtype": str(v.dtype).removeprefix("torch.")}
                            for k, v in tensors.items()},
            }
        manifest = {
            "format_version": FORMAT_VERSION,
            "name": spec.get("name", out_dir.name),
            "kind": kind,
            "source": source,
            "seed": seed,
            "spec": spec,
            **built.meta,
            "splits": splits,
            "versions": _versions(),
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        _move_into_place(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return manifest


def load_manifest(data_dir: str | Path) -> dict[str, Any]:
    """Read ``data_dir/manifest.json``; DataError if missing, unreadable or of another format."""
    path = Path(data_dir) / MANIFEST
    if not path.is_file():
        raise DataError(f"{path} not found: the data set is not prepared; {RERUN}")
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise DataError(f"{path} is corrupt ({one_line(exc)}); delete {data_dir} and {RERUN}") from exc
    if not isinstance(manifest, dict) or manifest.get("format_version") != FORMAT_VERSION:
        raise DataError(f"{path} is not a format-{FORMAT_VERSION} manifest; delete {data_dir} and {RERUN}")
    return manifest


def load_split(data_dir: str | Path, split: str, verify: bool = True,
               normalize: bool = True) -> dict[str, Any]:
    """Load one split of a prepared data set, checking its sha256 against the manifest.

    Returns ``{"x": float32 (N, C, H, W) in [0, 1], "y": int64 (N,)}`` for
    images and ``{"tokens": int64 (N,)}`` for text.  With ``normalize=False``
    image pixels stay as stored, ``uint8`` (a quarter of the memory), and the
    result also holds ``"pixel_max"`` to normalise each batch with (text is
    unaffected).  Missing, corrupt or unreadable files raise DataError.
    """
    data_dir = Path(data_dir)
    manifest = load_manifest(data_dir)
    if split not in manifest["splits"]:
        raise DataError(f"unknown split {split!r} in {data_dir}; available: {sorted(manifest['splits'])}")
    info = manifest["splits"][split]
    path = data_dir / info["file"]
    fix = f"delete {data_dir} and {RERUN}"
    if not path.is_file():
        raise DataError(f"{path} is missing; {fix}")
    if verify and file_sha256(path) != info["sha256"]:
        raise DataError(f"{path} is corrupt (sha256 mismatch with {MANIFEST}); {fix}")
    try:
        raw = torch.load(path, weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unpickling failure means a bad file
        raise DataError(f"{path} is corrupt (torch.load failed: {one_line(exc)[:200]}); {fix}") from exc
    if not isinstance(raw, dict) or set(raw) != set(info["tensors"]):
        raise DataError(f"{path} is corrupt (tensors differ from {MANIFEST}); {fix}")
    if manifest["kind"] == "image":
        if not normalize:
            return {"x": raw["x"], "y": raw["y"].long(), "pixel_max": float(manifest["pixel_max"])}
        return {"x": raw["x"].float().div_(manifest["pixel_max"]), "y": raw["y"].long()}
    return {"tokens": raw["tokens"].long()}


def file_sha256(path: str | Path) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def content_sha256(tensors: dict[str, torch.Tensor]) -> str:
    """Hex sha256 over the names, dtypes, shapes and bytes of ``tensors`` (sorted by name)."""
    digest = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        digest.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        digest.update(t.numpy().tobytes())
    return digest.hexdigest()


def _save_split(tensors: dict[str, torch.Tensor], path: Path) -> None:
    torch.save(tensors, path)


def _reusable(out_dir: Path, spec: dict[str, Any], seed: int) -> dict[str, Any] | None:
    """The manifest of ``out_dir`` if it is a complete, valid build of ``spec`` and ``seed``."""
    try:
        manifest = load_manifest(out_dir)
    except DataError:
        return None
    if manifest.get("spec") != spec or manifest.get("seed") != seed:
        return None
    for split in SPLITS:
        info = manifest["splits"].get(split)
        path = out_dir / f"{split}.pt"
        if info is None or not path.is_file() or file_sha256(path) != info["sha256"]:
            return None
    return manifest


def _remove_leftovers(out_dir: Path) -> None:
    """Delete the hidden work folders of an earlier build of ``out_dir`` that was
    killed mid-way (``.NAME.tmp-*``); one data set is built by one job at a time."""
    for old in out_dir.parent.glob(f".{out_dir.name}.tmp-*"):
        log.info("removing %s, left by a build that did not finish", old)
        shutil.rmtree(old, ignore_errors=True)


def _move_into_place(tmp: Path, out_dir: Path) -> None:
    """Rename ``tmp`` to ``out_dir``, first moving any existing ``out_dir`` aside."""
    if out_dir.exists():
        old = out_dir.with_name(f".{out_dir.name}.old-{uuid.uuid4().hex[:8]}")
        os.replace(out_dir, old)
        os.replace(tmp, out_dir)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, out_dir)


def _versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for dist in ("torch", "numpy", "scikit-learn", "datasets", "pillow"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return versions
