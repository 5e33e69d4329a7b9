"""Tiled DCT-II transforms and top-k selection, batched over every tile.

Every parameter is seen as a matrix (the *documented reshape*):

* a 0-D tensor as ``(1, 1)``; a 1-D tensor of length ``L`` as ``(1, L)``;
* a 2-D tensor as itself;
* a tensor of 3 or more dimensions (a conv kernel ``(out, in, kh, kw)``) as
  ``(shape[0], prod(shape[1:]))``: one row per output channel.

Each matrix dimension ``n`` is cut into chunks of ``chunk_for(n, target)``
elements, the largest divisor of ``n`` not above ``target`` (so a prime
dimension gives chunk 1, as in the reference).  A ``(R, C)`` matrix with
chunks ``(n1, n2)`` is ``(R/n1) * (C/n2)`` tiles of ``n1 x n2``; a 1-D
parameter (row chunk 1) is ``L/n2`` chunks of ``n2``, which is the
reference's 1-D treatment.  The 2-D orthonormal DCT-II of a tile ``T`` is
``D1 @ T @ D2.T`` (``D`` the orthonormal DCT-II matrix), its inverse
``D1.T @ C @ D2``.

:func:`dct2` and :func:`idct2` act on a batch of tiles ``(..., n1, n2)``
(the tile-layout statement the tests check the optimizer against); the
optimizer applies the same two products to each parameter in its own
``(rows, cols)`` layout, without copying it into tiles (see
:mod:`distlab.techniques.demo.optim`).  Bases are cached per ``(n, dtype, device)``.  The bases are computed from the closed form in
float64 and cast to the parameter's dtype (the reference builds them through
an FFT in torch's default dtype, float32, before the cast; in float64 runs
ours is the exact basis, the reference's carries float32 rounding).
"""

from __future__ import annotations

import math
from functools import lru_cache

import torch


def chunk_for(n: int, target: int) -> int:
    """Largest divisor of ``n`` that is at most ``target`` (``n`` itself if ``n <= target``)."""
    if n < 1 or target < 1:
        raise ValueError(f"chunk_for needs n >= 1 and target >= 1, got n={n}, target={target}")
    if n <= target:
        return n
    best = 1
    for d in range(1, math.isqrt(n) + 1):
        if n % d == 0:
            for c in (d, n // d):
                if best < c <= target:
                    best = c
    return best


def matrix_shape(shape: torch.Size | tuple[int, ...]) -> tuple[int, int]:
    """The ``(rows, cols)`` matrix a parameter of ``shape`` is transformed as."""
    shape = tuple(int(s) for s in shape)
    if len(shape) == 0:
        return 1, 1
    if len(shape) == 1:
        return 1, shape[0]
    if len(shape) == 2:
        return shape[0], shape[1]
    return shape[0], math.prod(shape[1:])


def tile_shape(shape, target: int) -> tuple[int, int]:
    """The ``(n1, n2)`` tile of a parameter of ``shape`` for chunk target ``target``."""
    r, c = matrix_shape(shape)
    return chunk_for(r, target), chunk_for(c, target)


def clamp_topk(topk: int, tile_numel: int) -> int:
    """The reference's clamp: at least 1, at most the tile's size."""
    return max(1, min(int(topk), int(tile_numel)))


@lru_cache(maxsize=None)
def _dct_matrix_f64(n: int) -> torch.Tensor:
    k = torch.arange(n, dtype=torch.float64)[:, None]
    j = torch.arange(n, dtype=torch.float64)[None, :]
    d = torch.cos(math.pi * (2 * j + 1) * k / (2 * n))
    d[0] *= math.sqrt(1.0 / n)
    d[1:] *= math.sqrt(2.0 / n)
    return d


_BASES: dict[tuple[int, torch.dtype, torch.device], torch.Tensor] = {}


def dct_matrix(n: int, dtype: torch.dtype, device: torch.device | str = "cpu") -> torch.Tensor:
    """Orthonormal DCT-II matrix ``D`` (``D @ x`` is the DCT of ``x``), cached."""
    key = (int(n), dtype, torch.device(device))
    if key not in _BASES:
        _BASES[key] = _dct_matrix_f64(int(n)).to(dtype=dtype, device=key[2]).contiguous()
    return _BASES[key]


def to_tiles(x: torch.Tensor, n1: int, n2: int) -> torch.Tensor:
    """A view of matrix-shaped ``x`` (``R x C``) as ``(R/n1, C/n2, n1, n2)`` tiles (no copy)."""
    r, c = matrix_shape(x.shape)
    return x.view(r // n1, n1, c // n2, n2).permute(0, 2, 1, 3)


def dct2(tiles: torch.Tensor, d1: torch.Tensor | None, d2: torch.Tensor) -> torch.Tensor:
    """2-D DCT of a batch of tiles ``(..., n1, n2)``; ``d1 = None`` when ``n1 == 1``."""
    out = torch.matmul(tiles, d2.T)
    # d1 @ out as one (T*n2, n1) x (n1, n1) product rather than T small ones
    return out if d1 is None else torch.matmul(out.transpose(-1, -2), d1.T).transpose(-1, -2)


def idct2(coeffs: torch.Tensor, d1: torch.Tensor | None, d2: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`dct2`."""
    out = torch.matmul(coeffs, d2)
    return out if d1 is None else torch.matmul(out.transpose(-1, -2), d1).transpose(-1, -2)
