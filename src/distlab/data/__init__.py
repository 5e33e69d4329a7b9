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
from distlab.data.sampling import EpochBatcher, partition_indices, text_batch
from distlab.data.store import content_sha256, file_sha256, load_manifest, load_split, prepare_dataset

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
