"""The floors a language model must get below before its quality claims mean anything.

A byte-level model that has learned only how often each byte occurs scores the
unigram cross-entropy of the held-out bytes; one that has learned only which
byte follows which scores the bigram cross-entropy.  Both models are fitted on
the train split (counts with add-alpha smoothing over the 256 byte values; alpha
chosen on the validation split from a fixed grid) and scored on every split, in
nats per byte.  A model's held-out loss is compared with the bigram floor of
the same split (``config/claims.yaml``: conditions of kind ``floor``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

VOCAB = 256
ALPHAS = (1.0, 0.3, 0.1, 0.03, 0.01)  # add-alpha smoothing; the val split picks one
COLUMNS = ("dataset", "split", "n_bytes", "unigram_nats", "bigram_nats", "unigram_alpha", "bigram_alpha")


def _unigram(train: np.ndarray, alpha: float) -> np.ndarray:
    counts = np.bincount(train, minlength=VOCAB).astype(np.float64) + alpha
    return np.log(counts / counts.sum())


def _bigram(train: np.ndarray, alpha: float) -> np.ndarray:
    counts = np.zeros((VOCAB, VOCAB))
    np.add.at(counts, (train[:-1], train[1:]), 1.0)
    counts += alpha
    return np.log(counts / counts.sum(axis=1, keepdims=True))


def unigram_nats(train: np.ndarray, held: np.ndarray, alpha: float) -> float:
    """Cross-entropy (nats/byte) of ``held`` under the add-alpha unigram model of ``train``."""
    return float(-_unigram(train, alpha)[held].mean())


def bigram_nats(train: np.ndarray, held: np.ndarray, alpha: float) -> float:
    """Cross-entropy (nats/byte) of ``held[1:]`` given the previous byte, add-alpha bigram of ``train``."""
    logp = _bigram(train, alpha)
    return float(-logp[held[:-1], held[1:]].mean())


def _best_alpha(score, train: np.ndarray, val: np.ndarray) -> float:
    return min(ALPHAS, key=lambda a: score(train, val, a))


def floors(splits: dict[str, np.ndarray], dataset: str) -> pd.DataFrame:
    """One row per held-out split (every split but train) with both floors."""
    train = np.asarray(splits["train"], dtype=np.int64)
    if train.size < 2 or train.min() < 0 or train.max() >= VOCAB:
        raise ValueError(f"{dataset}: the train split must hold at least 2 byte tokens in [0, {VOCAB})")
    val = np.asarray(splits.get("val", splits["train"]), dtype=np.int64)
    a1 = _best_alpha(unigram_nats, train, val)
    a2 = _best_alpha(bigram_nats, train, val)
    rows = []
    for split, tokens in splits.items():
        if split == "train":
            continue
        held = np.asarray(tokens, dtype=np.int64)
        rows.append({"dataset": dataset, "split": split, "n_bytes": int(held.size),
                     "unigram_nats": unigram_nats(train, held, a1),
                     "bigram_nats": bigram_nats(train, held, a2),
                     "unigram_alpha": a1, "bigram_alpha": a2})
    return pd.DataFrame(rows, columns=list(COLUMNS))


def floors_of_prepared(data_dir: str | Path) -> pd.DataFrame:
    """The floors of a prepared text data set (its manifest names it and its splits)."""
    from .store import load_manifest, load_split

    manifest = load_manifest(data_dir)
    if manifest["kind"] != "text":
        raise ValueError(f"{data_dir}: floors are defined for text data sets, not {manifest['kind']!r}")
    splits = {s: load_split(data_dir, s)["tokens"].numpy() for s in manifest["splits"]}
    return floors(splits, manifest["name"])
