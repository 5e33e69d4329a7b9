"""Tests for distlab.data: preparation, atomicity, checksums, hub path, sampling."""

from __future__ import annotations

import os
import shutil

os.environ["HF_DATASETS_OFFLINE"] = "1"  # never touch the network, even by accident

import datasets
import numpy as np
import pytest
import torch
from PIL import Image

from distlab.data import (
    DataError,
    EpochBatcher,
    load_manifest,
    load_split,
    partition_indices,
    prepare_dataset,
    text_batch,
)
from distlab.data import store

DIGITS = {"name": "digits", "kind": "image", "source": "sklearn_digits", "val_fraction": 0.1, "test_fraction": 0.2}
PYDOC = {"name": "pydoc", "kind": "text", "source": "pydoc_topics", "val_fraction": 0.1, "test_fraction": 0.1}
CIFAR = {
    "name": "cifar10",
    "kind": "image",
    "source": "hf",
    "hf_path": "uoft-cs/cifar10",
    "hf_name": None,
    "image_key": "img",
    "label_key": "label",
    "val_fraction": 0.2,
}


@pytest.fixture(scope="module")
def digits_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("data") / "digits"
    prepare_dataset(DIGITS, out, seed=0)
    return out


@pytest.fixture(scope="module")
def pydoc_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("data") / "pydoc"
    prepare_dataset(PYDOC, out, seed=0)
    return out


def test_digits_splits(digits_dir):
    manifest = load_manifest(digits_dir)
    sizes = {s: manifest["splits"][s]["size"] for s in ("train", "val", "test")}
    assert sum(sizes.values()) == 1797
    assert sizes == {"train": 1258, "val": 180, "test": 359}
    assert manifest["pixel_max"] == 16 and manifest["num_classes"] == 10
    assert manifest["splits"]["train"]["tensors"]["x"] == {"shape": [1258, 1, 8, 8], "dtype": "uint8"}
    assert {"torch", "numpy", "scikit-learn", "python"} <= set(manifest["versions"])
    raw = torch.load(digits_dir / "train.pt", weights_only=True)
    assert raw["x"].dtype == torch.uint8 and raw["x"].max() == 16
    parts = {s: load_split(digits_dir, s) for s in ("train", "val", "test")}
    x, y = parts["train"]["x"], parts["train"]["y"]
    assert x.dtype == torch.float32 and x.shape == (1258, 1, 8, 8) and 0 <= x.min() and x.max() == 1
    assert y.dtype == torch.int64
    freqs = {s: np.bincount(p["y"].numpy(), minlength=10) / len(p["y"]) for s, p in parts.items()}
    assert np.abs(freqs["test"] - freqs["train"]).max() < 0.01  # stratified
    assert np.abs(freqs["val"] - freqs["train"]).max() < 0.02
    from sklearn.datasets import load_digits

    def rows(x: np.ndarray, y: np.ndarray) -> list[bytes]:
        return sorted(xi.tobytes() + bytes([yi]) for xi, yi in zip(x.astype(np.uint8), y))

    digits = load_digits()
    split_rows = rows(np.concatenate([p["x"].numpy() * 16 for p in parts.values()]).round(),
                      np.concatenate([p["y"].numpy() for p in parts.values()]))
    assert split_rows == rows(digits.images.reshape(-1, 1, 8, 8), digits.target)  # an exact partition


def test_pydoc_splits_are_contiguous(pydoc_dir):
    from pydoc_data.topics import topics

    stream = "\n".join(topics[k] for k in sorted(topics)).encode()
    parts = [load_split(pydoc_dir, s)["tokens"] for s in ("train", "val", "test")]
    assert sum(len(p) for p in parts) == len(stream) > 400_000
    assert all(p.dtype == torch.int64 for p in parts)
    assert torch.equal(torch.cat(parts), torch.tensor(list(stream)))
    assert abs(len(parts[2]) - 0.1 * len(stream)) <= 1 and len(parts[1]) == len(parts[2])
    manifest = load_manifest(pydoc_dir)
    assert manifest["vocab_size"] == 256
    assert manifest["splits"]["train"]["tensors"]["tokens"]["dtype"] == "uint8"


def test_determinism(tmp_path, digits_dir):
    same = prepare_dataset(DIGITS, tmp_path / "same", seed=0)
    other = prepare_dataset(DIGITS, tmp_path / "other", seed=1)
    ref = load_manifest(digits_dir)
    for split in ("train", "val", "test"):
        assert same["splits"][split]["content_sha256"] == ref["splits"][split]["content_sha256"]
        assert other["splits"][split]["content_sha256"] != ref["splits"][split]["content_sha256"]
    assert not torch.equal(load_split(tmp_path / "other", "test")["y"], load_split(digits_dir, "test")["y"])


def test_reuse_and_rebuild(tmp_path, monkeypatch):
    out = tmp_path / "digits"
    first = prepare_dataset(DIGITS, out, seed=0)
    stamp = os.stat(out / "train.pt").st_mtime_ns
    monkeypatch.setattr(store, "build", lambda *a: pytest.fail("rebuilt a valid data set"))
    assert prepare_dataset(DIGITS, out, seed=0) == first
    assert os.stat(out / "train.pt").st_mtime_ns == stamp
    monkeypatch.undo()
    second = prepare_dataset(DIGITS, out, seed=3)  # another seed replaces the stale build
    assert second["seed"] == 3 and load_manifest(out)["seed"] == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["digits"]


def test_failure_mid_write_leaves_nothing(tmp_path, monkeypatch):
    calls = []
    real_save = store._save_split

    def failing_save(tensors, path):
        calls.append(path.name)
        if len(calls) == 2:
            raise OSError("disk full")
        real_save(tensors, path)

    monkeypatch.setattr(store, "_save_split", failing_save)
    with pytest.raises(OSError, match="disk full"):
        prepare_dataset(DIGITS, tmp_path / "digits", seed=0)
    assert calls == ["train.pt", "val.pt"]
    assert list(tmp_path.iterdir()) == []


def test_corrupt_file(tmp_path, digits_dir):
    out = tmp_path / "digits"
    shutil.copytree(digits_dir, out)
    data = bytearray((out / "val.pt").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (out / "val.pt").write_bytes(bytes(data))
    with pytest.raises(DataError, match="corrupt") as err:
        load_split(out, "val")
    assert "\n" not in str(err.value) and "snakemake --cores 1 data" in str(err.value)
    (out / "test.pt").write_bytes(b"not a torch file")
    with pytest.raises(DataError, match=r"corrupt \(torch.load failed"):
        load_split(out, "test", verify=False)


def test_missing_manifest(tmp_path):
    with pytest.raises(DataError, match="not prepared; rebuild it with `snakemake --cores 1 data`"):
        load_split(tmp_path, "train")


@pytest.mark.parametrize(
    "spec",
    [
        {"kind": "image", "source": "mnist_from_space"},
        {"kind": "audio", "source": "hf", "hf_path": "x/y"},
        {"kind": "image", "source": "sklearn_digits", "val_fracton": 0.1},
        {"kind": "image", "source": "sklearn_digits", "val_fraction": 0.6, "test_fraction": 0.5},
        {"kind": "image", "source": "hf"},
        {"kind": "image", "source": "sklearn_digits", "val_fraction": "a tenth"},
        ["not", "a", "mapping"],
    ],
)
def test_bad_spec(tmp_path, spec):
    with pytest.raises(DataError):
        prepare_dataset(spec, tmp_path / "x", seed=0)
    assert list(tmp_path.iterdir()) == []


def _tiny_image_hub(n_train: int = 40, n_test: int = 10) -> datasets.DatasetDict:
    rng = np.random.default_rng(0)
    features = datasets.Features(
        {"img": datasets.Image(), "label": datasets.ClassLabel(names=["cat", "dog"])}
    )

    def split(n: int) -> datasets.Dataset:
        images = [Image.fromarray(rng.integers(0, 256, (4, 4, 3), dtype=np.uint8)) for _ in range(n)]
        return datasets.Dataset.from_dict({"img": images, "label": [i % 2 for i in range(n)]}, features=features)

    return datasets.DatasetDict({"train": split(n_train), "test": split(n_test)})


def test_hub_images(tmp_path, monkeypatch):
    hub = _tiny_image_hub()
    seen = []
    monkeypatch.setattr(datasets, "load_dataset", lambda path, name=None: seen.append((path, name)) or hub)
    manifest = prepare_dataset(CIFAR, tmp_path / "cifar10", seed=0)
    assert seen == [("uoft-cs/cifar10", None)]
    assert {s: manifest["splits"][s]["size"] for s in ("train", "val", "test")} == {"train": 32, "val": 8, "test": 10}
    assert manifest["classes"] == ["cat", "dog"] and manifest["pixel_max"] == 255
    assert manifest["image_shape"] == [3, 4, 4]
    test = load_split(tmp_path / "cifar10", "test")
    expected = np.stack([np.asarray(im) for im in hub["test"]["img"]]).transpose(0, 3, 1, 2) / 255
    assert torch.allclose(test["x"], torch.from_numpy(expected).float())
    assert test["y"].tolist() == hub["test"]["label"]
    assert load_split(tmp_path / "cifar10", "val")["y"].bincount().tolist() == [4, 4]  # stratified


def test_hub_images_without_test_split_and_as_arrays(tmp_path, monkeypatch):
    gray = datasets.Dataset.from_dict(
        {"image": [np.full((5, 5), i, dtype=np.uint8) for i in range(20)], "label": [i % 4 for i in range(20)]}
    )
    monkeypatch.setattr(datasets, "load_dataset", lambda path, name=None: datasets.DatasetDict({"train": gray}))
    spec = {"name": "g", "kind": "image", "source": "hf", "hf_path": "me/gray", "channels": 1, "test_fraction": 0.2}
    manifest = prepare_dataset(spec, tmp_path / "g", seed=0)
    assert [manifest["splits"][s]["size"] for s in ("train", "val", "test")] == [14, 2, 4]
    assert manifest["image_shape"] == [1, 5, 5] and manifest["num_classes"] == 4
    test = load_split(tmp_path / "g", "test")
    assert torch.equal(test["x"][:, 0, 0, 0] * 255, test["x"][:, 0, 4, 4] * 255)
    assert torch.equal((test["x"][:, 0, 0, 0] * 255).round().long() % 4, test["y"])  # pixel value i, label i % 4
    spec["channels"] = 3
    assert prepare_dataset(spec, tmp_path / "rgb", seed=0)["image_shape"] == [3, 5, 5]


def test_hub_text(tmp_path, monkeypatch):
    stories = datasets.Dataset.from_dict({"text": [f"Once upon a time {i}." for i in range(100)]})
    monkeypatch.setattr(datasets, "load_dataset", lambda path, name=None: datasets.DatasetDict({"train": stories}))
    spec = {"name": "ts", "kind": "text", "source": "hf", "hf_path": "roneneldan/TinyStories", "max_chars": 500}
    manifest = prepare_dataset(spec, tmp_path / "ts", seed=0)
    assert manifest["num_chars"] == 500
    tokens = torch.cat([load_split(tmp_path / "ts", s)["tokens"] for s in ("train", "val", "test")])
    assert bytes(tokens.tolist()).decode() == "\n".join(stories["text"])[:500]


def test_hub_offline_and_bad_columns(tmp_path, monkeypatch):
    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'uoft-cs/cifar10' on the Hub (LocalEntryNotFoundError)\nmore")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(DataError, match="could not load 'uoft-cs/cifar10' from the Hugging Face hub") as err:
        prepare_dataset(CIFAR, tmp_path / "cifar10", seed=0)
    message = str(err.value)
    assert "\n" not in message and "offline" in message and "HF_DATASETS_CACHE" in message
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: _tiny_image_hub())
    with pytest.raises(DataError, match="no column 'pixels'.*set image_key"):
        prepare_dataset({**CIFAR, "image_key": "pixels"}, tmp_path / "cifar10", seed=0)
    with pytest.raises(DataError, match="no split 'training'.*set train_split"):
        prepare_dataset({**CIFAR, "train_split": "training"}, tmp_path / "cifar10", seed=0)
    unlabelled = _tiny_image_hub()
    unlabelled["test"] = unlabelled["test"].cast_column("label", datasets.Value("int64")).map(lambda r: {"label": -1})
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: unlabelled)
    with pytest.raises(DataError, match="split 'test' is empty or unlabelled"):
        prepare_dataset(CIFAR, tmp_path / "cifar10", seed=0)
    assert list(tmp_path.iterdir()) == []


def test_partition_indices():
    parts = partition_indices(103, 4, seed=7)
    assert [len(p) for p in parts] == [25] * 4
    joined = np.concatenate(parts)
    assert len(np.unique(joined)) == 100 and joined.max() < 103
    assert all(np.array_equal(a, b) for a, b in zip(parts, partition_indices(103, 4, seed=7)))
    assert not np.array_equal(parts[0], partition_indices(103, 4, seed=8)[0])
    with pytest.raises(ValueError):
        partition_indices(3, 4, seed=0)


def test_epoch_batcher_is_pure_and_covers_epochs():
    indices = np.arange(100, 160)
    a, b = EpochBatcher(indices, 12, seed=1, stream_id=2), EpochBatcher(indices, 12, seed=1, stream_id=2)
    steps = [7, 0, 3, 12, 7, 1]  # out of order: no iterator state
    assert all(np.array_equal(a.batch(s), b.batch(s)) for s in steps)
    for epoch in range(3):
        drawn = np.concatenate([a.batch(s) for s in range(5 * epoch, 5 * epoch + 5)])
        assert sorted(drawn) == list(indices)
    assert not np.array_equal(a.batch(0), a.batch(5))  # reshuffled each epoch
    assert not np.array_equal(a.batch(0), EpochBatcher(indices, 12, seed=1, stream_id=3).batch(0))
    uneven = EpochBatcher(indices, 16, seed=0)
    assert uneven.steps_per_epoch == 3
    epoch = np.concatenate([uneven.batch(s) for s in range(3)])
    assert len(np.unique(epoch)) == 48


def test_text_batch():
    tokens = torch.arange(1000) % 256
    x, y = text_batch(tokens, block_size=16, batch_size=4, seed=0, stream_id=1, step=5)
    assert x.shape == y.shape == (4, 16) and x.dtype == torch.int64
    assert torch.equal(x[:, 1:], y[:, :-1])
    x2, y2 = text_batch(tokens, 16, 4, seed=0, stream_id=1, step=5)
    assert torch.equal(x, x2) and torch.equal(y, y2)
    assert not torch.equal(x, text_batch(tokens, 16, 4, seed=0, stream_id=1, step=6)[0])
    with pytest.raises(ValueError):
        text_batch(tokens[:16], 16, 4, 0, 0, 0)
