"""Turn a data-set spec into in-memory train/val/test splits of tensors.

Supported ``(kind, source)`` pairs and their spec keys (besides ``name``,
``kind``, ``source``, ``val_fraction``, ``test_fraction``):

* ``image / sklearn_digits`` -- scikit-learn's bundled 8x8 digits (offline).
* ``text / pydoc_topics`` -- the standard library's pydoc help topics (offline).
* ``image / hf`` -- ``hf_path``, ``hf_name``, ``image_key`` ("image"),
  ``label_key`` ("label"), ``channels`` (3 = RGB, or 1 = grayscale),
  ``train_split`` ("train"), ``test_split`` ("test"; e.g. "validation" for
  ImageNet, whose test split is unlabelled).
* ``text / hf`` -- ``hf_path``, ``hf_name``, ``text_key`` ("text"),
  ``max_chars`` (all), ``train_split`` ("train").

Image splits are stratified by label and seeded.  The pool is the whole data
set, or the official train split of a hub data set whose ``test_split`` exists
(that split is then the test split); ``test_fraction`` (when there is no
official test split) and ``val_fraction`` are fractions of the pool.
Text splits are contiguous blocks of the byte-token stream (train, then val,
then test) so no window straddles two splits; they do not depend on the seed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from distlab.data.errors import DataError, one_line

DEFAULT_FRACTION = 0.1
COMMON_KEYS = frozenset({"name", "kind", "source", "val_fraction", "test_fraction"})
SOURCE_KEYS: dict[tuple[str, str], frozenset[str]] = {
    ("image", "sklearn_digits"): frozenset(),
    ("text", "pydoc_topics"): frozenset(),
    ("image", "hf"): frozenset(
        {"hf_path", "hf_name", "image_key", "label_key", "channels", "train_split", "test_split"}
    ),
    ("text", "hf"): frozenset({"hf_path", "hf_name", "text_key", "max_chars", "train_split"}),
}
OFFLINE_HINT = (
    "use an embedded data set (source: sklearn_digits or pydoc_topics in config/config.yaml) "
    "or pre-download it into HF_DATASETS_CACHE"
)

Splits = dict[str, dict[str, torch.Tensor]]


@dataclass
class Built:
    """A data set in memory: its splits and the kind-specific manifest entries."""

    splits: Splits
    meta: dict[str, Any]


def validate_spec(spec: dict[str, Any]) -> tuple[str, str]:
    """Check a spec's kind, source, keys and fractions; return ``(kind, source)``."""
    if not isinstance(spec, dict):
        raise DataError(f"a data set spec must be a mapping, got {type(spec).__name__}")
    kind, source = spec.get("kind"), spec.get("source")
    allowed = SOURCE_KEYS.get((str(kind), str(source)))
    if allowed is None:
        known = ", ".join(f"{k}/{s}" for k, s in SOURCE_KEYS)
        raise DataError(f"unknown data set kind/source {kind}/{source}; known: {known}")
    unknown = sorted(set(spec) - COMMON_KEYS - allowed)
    if unknown:
        keys = ", ".join(sorted(COMMON_KEYS | allowed))
        raise DataError(f"unknown spec key(s) {unknown} for {kind}/{source}; allowed: {keys}")
    if source == "hf" and not spec.get("hf_path"):
        raise DataError(f"spec for {kind}/hf needs 'hf_path' (e.g. uoft-cs/cifar10)")
    if spec.get("channels", 3) not in (1, 3):
        raise DataError(f"channels must be 1 (grayscale) or 3 (RGB), got {spec['channels']!r}")
    val, test = _fractions(spec)
    if not (0 <= val < 1 and 0 <= test < 1 and val + test < 1):
        raise DataError(f"val_fraction={val} and test_fraction={test} must be in [0, 1) and sum < 1")
    return kind, source


def build(spec: dict[str, Any], seed: int) -> Built:
    """Build the splits of a validated ``spec`` (see the module docstring)."""
    kind, source = validate_spec(spec)
    val, test = _fractions(spec)
    if kind == "text":
        text = _pydoc_text() if source == "pydoc_topics" else _hub_text(spec)
        return _text_splits(text, val, test)
    if source == "sklearn_digits":
        from sklearn.datasets import load_digits

        digits = load_digits()
        x = digits.images.astype(np.uint8)[:, None]
        y = digits.target.astype(np.int64)
        classes = [str(c) for c in digits.target_names]
        return _image_splits(x, y, None, classes, 16, val, test, seed)
    return _hub_images(spec, val, test, seed)


def _fractions(spec: dict[str, Any]) -> tuple[float, float]:
    try:
        return (
            float(spec.get("val_fraction", DEFAULT_FRACTION)),
            float(spec.get("test_fraction", DEFAULT_FRACTION)),
        )
    except (TypeError, ValueError) as exc:
        raise DataError(f"val_fraction and test_fraction must be numbers ({one_line(exc)})") from exc


# --------------------------------------------------------------------------- images


def _hold_out(y: np.ndarray, n_held: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Seeded split of ``range(len(y))`` into sorted (kept, held), ``len(held) == n_held``.

    Stratified by ``y``; falls back to a plain seeded split when a class is too
    rare to stratify (tiny data sets).
    """
    from sklearn.model_selection import train_test_split

    idx = np.arange(len(y))
    if n_held == 0:
        return idx, idx[:0]
    try:
        kept, held = train_test_split(idx, test_size=n_held, stratify=y, random_state=seed)
    except ValueError:
        kept, held = train_test_split(idx, test_size=n_held, random_state=seed)
    return np.sort(kept), np.sort(held)


def _image_splits(
    x: np.ndarray,
    y: np.ndarray,
    test: tuple[np.ndarray, np.ndarray] | None,
    classes: list[str],
    pixel_max: int,
    val_fraction: float,
    test_fraction: float,
    seed: int,
) -> Built:
    """Hold out test (unless given) and val from ``(x, y)``; package as tensors."""
    if test is None:
        pool, held = _hold_out(y, round(test_fraction * len(y)), seed)
        test = (x[held], y[held])
    else:
        pool = np.arange(len(y))
    kept, held = _hold_out(y[pool], round(val_fraction * len(y)), seed + 1)
    parts = {"train": pool[kept], "val": pool[held]}
    if len(parts["train"]) == 0:
        raise DataError(f"no training images left after holding out val/test from {len(y)} images")
    splits = {k: _image_tensors(x[i], y[i]) for k, i in parts.items()}
    splits["test"] = _image_tensors(*test)
    meta = {
        "classes": classes,
        "num_classes": len(classes),
        "pixel_max": pixel_max,
        "image_shape": list(x.shape[1:]),
    }
    return Built(splits, meta)


def _image_tensors(x: np.ndarray, y: np.ndarray) -> dict[str, torch.Tensor]:
    return {
        "x": torch.from_numpy(np.ascontiguousarray(x, dtype=np.uint8)),
        "y": torch.from_numpy(np.ascontiguousarray(y, dtype=np.int64)),
    }


def _load_hub(spec: dict[str, Any]) -> Any:
    """``datasets.load_dataset(hf_path, hf_name)``; every failure becomes a DataError."""
    where = repr(spec["hf_path"]) + (f" ({spec['hf_name']})" if spec.get("hf_name") else "")
    try:
        import datasets
    except ImportError as exc:
        raise DataError(f"cannot load {where}: the 'datasets' package is missing; {OFFLINE_HINT}") from exc
    try:
        return datasets.load_dataset(spec["hf_path"], spec.get("hf_name"))
    except Exception as exc:  # noqa: BLE001 - any hub/cache failure is a user-facing data error
        offline = any(
            os.environ.get(v, "").lower() in {"1", "true", "yes", "on"}
            for v in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE")
        )
        why = "offline mode is on and it is not cached" if offline else "no network or not cached?"
        raise DataError(
            f"could not load {where} from the Hugging Face hub ({one_line(exc)[:200]}; {why}); "
            f"{OFFLINE_HINT}"
        ) from exc


def _hub_split(dsd: Any, split: str, spec: dict[str, Any], setting: str) -> Any:
    if split not in dsd:
        raise DataError(
            f"{spec['hf_path']!r} has no split {split!r} (has {sorted(dsd)}); set {setting} in the spec"
        )
    return dsd[split]


def _hub_column(ds: Any, key: str, spec: dict[str, Any], setting: str) -> None:
    if key not in ds.column_names:
        raise DataError(
            f"{spec['hf_path']!r} has no column {key!r} (has {ds.column_names}); set {setting} in the spec"
        )


def _hub_images(spec: dict[str, Any], val_fraction: float, test_fraction: float, seed: int) -> Built:
    import datasets

    dsd = _load_hub(spec)
    train_split, test_split = spec.get("train_split", "train"), spec.get("test_split", "test")
    x, y = _decode_images(spec, _hub_split(dsd, train_split, spec, "train_split"), train_split)
    test = _decode_images(spec, dsd[test_split], test_split) if test_split in dsd else None
    feature = dsd[train_split].features[spec.get("label_key", "label")]
    if isinstance(feature, datasets.ClassLabel):
        classes = list(feature.names)
    else:
        classes = [str(c) for c in range(int(y.max()) + 1)]
    return _image_splits(x, y, test, classes, 255, val_fraction, test_fraction, seed)


def _decode_images(spec: dict[str, Any], ds: Any, split: str) -> tuple[np.ndarray, np.ndarray]:
    """Decode a hub split into uint8 ``(N, C, H, W)`` images and int64 ``(N,)`` labels.

    Images (PIL images or arrays) are converted to RGB, or to grayscale when
    the spec says ``channels: 1``; all must have the same size.
    """
    from PIL import Image

    image_key, label_key = spec.get("image_key", "image"), spec.get("label_key", "label")
    _hub_column(ds, image_key, spec, "image_key")
    _hub_column(ds, label_key, spec, "label_key")
    where = f"{spec['hf_path']!r} split {split!r}"
    y = np.asarray(list(ds[label_key]), dtype=np.int64)
    if len(y) == 0 or (y < 0).any():
        raise DataError(
            f"{where} is empty or unlabelled (label < 0); choose labelled splits with train_split/test_split"
        )
    mode = "L" if spec.get("channels", 3) == 1 else "RGB"
    x: np.ndarray | None = None
    i = 0
    for batch in ds.select_columns([image_key]).iter(batch_size=1024):
        for image in batch[image_key]:
            if not isinstance(image, Image.Image):
                image = Image.fromarray(np.asarray(image, dtype=np.uint8))
            arr = np.asarray(image.convert(mode))
            arr = arr[None] if arr.ndim == 2 else arr.transpose(2, 0, 1)
            if x is None:
                x = np.empty((len(y), *arr.shape), dtype=np.uint8)
            elif arr.shape != x.shape[1:]:
                raise DataError(
                    f"{where}: image {i} has shape {arr.shape}, not {x.shape[1:]}; all images must have one size"
                )
            x[i] = arr
            i += 1
    assert x is not None  # y is non-empty
    return x, y


# --------------------------------------------------------------------------- text


def _pydoc_text() -> str:
    from pydoc_data.topics import topics

    return "\n".join(topics[k] for k in sorted(topics))


def _hub_text(spec: dict[str, Any]) -> str:
    """Join the hub texts with newlines, stopping at ``max_chars`` characters."""
    key, max_chars = spec.get("text_key", "text"), spec.get("max_chars")
    ds = _hub_split(_load_hub(spec), spec.get("train_split", "train"), spec, "train_split")
    _hub_column(ds, key, spec, "text_key")
    pieces: list[str] = []
    total = 0
    for batch in ds.select_columns([key]).iter(batch_size=1024):
        for text in batch[key]:
            pieces.append(text)
            total += len(text) + 1
        if max_chars is not None and total >= max_chars:
            break
    return "\n".join(pieces)[:max_chars]


def _text_splits(text: str, val_fraction: float, test_fraction: float) -> Built:
    """Byte-level tokens (id = UTF-8 byte) split into contiguous train/val/test blocks."""
    tokens = np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
    n = len(tokens)
    n_test, n_val = round(test_fraction * n), round(val_fraction * n)
    a, b = n - n_val - n_test, n - n_test
    if a <= 0:
        raise DataError(f"text has only {n} tokens: too few to split; raise max_chars")
    blocks = {"train": tokens[:a], "val": tokens[a:b], "test": tokens[b:]}
    splits = {k: {"tokens": torch.from_numpy(v.copy())} for k, v in blocks.items()}
    meta = {"vocab_size": 256, "tokenizer": "utf8-bytes", "num_chars": len(text)}
    return Built(splits, meta)
