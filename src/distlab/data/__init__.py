"""Data preparation and loading.

* :func:`prepare_dataset` builds a data set once from a spec (see
  :mod:`distlab.data.sources` for the spec keys) into a directory of
  checksummed ``train.pt`` / ``val.pt`` / ``test.pt`` + ``manifest.json``
  (see :mod:`distlab.data.store` for the format).
* :func:`load_manifest` / :func:`load_split` read it back, verifying checksums.
* :func:`partition_indices`, :class:`EpochBatcher` and :func:`text_batch` give
  deterministic, stateless partitions and mini-batch streams.

Every failure a user can meet is a :class:`DataError` with a one-line message.
"""

from distlab.data.errors import DataError

# The loaders import torch; they load on first use (PEP 562), so that a process that
# only needs DataError (the CLI launching a torchrun job) does not import torch.
_LAZY = {
    "EpochBatcher": "sampling", "partition_indices": "sampling", "text_batch": "sampling",
    "content_sha256": "store", "file_sha256": "store", "load_manifest": "store",
    "load_split": "store", "prepare_dataset": "store",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"distlab.data.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'distlab.data' has no attribute {name!r}")

__all__ = [
    "DataError",
    "EpochBatcher",
    "content_sha256",
    "file_sha256",
    "load_manifest",
    "load_split",
    "partition_indices",
    "prepare_dataset",
    "text_batch",
]
