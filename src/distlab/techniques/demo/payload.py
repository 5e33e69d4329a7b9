"""What a DeMo worker puts on the wire each step, as one byte buffer.

Two encodings of the kept DCT coefficients (index within its tile, value):

* ``reference`` — what the reference implementation sends: int64 indices and
  values in the parameter's dtype (12 bytes a coefficient in float32).
* ``compact`` — indices packed in the fewest of 12, 16 or 32 bits that hold
  the tile's positions (a 64x64 tile has 4096, so 12 bits: two indices in
  three bytes), values in bfloat16 (default) or float16: 3.5 bytes a
  coefficient in float32.  The value is rounded *before* it leaves the local
  momentum, so the rounding error stays in ``delta`` (error feedback).

A worker's buffer is ``[presence bitmask][group 0 indices][group 0 values]
[group 1 ...]``; the bitmask says, per parameter, whether this worker sent
it (a parameter whose ``grad`` is None on this worker is sent as zeros with
its bit clear, and the receivers ignore it).  Every worker's buffer has the
same length, so one all-gather carries all parameters.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch



@dataclass(frozen=True)
class Encoding:
    """How a payload's indices and values go on the wire."""

    int64_index: bool  # each index an int64 as is; False: packed in index_bits(tile) bits
    own_values: bool   # values in the run's value_dtype; False: the parameters' dtype


# each encoding declared once; every function below reads its declaration (an encoding no entry
# declares is refused by name, never handled as another)
ENCODINGS = {"reference": Encoding(int64_index=True, own_values=False),
             "compact": Encoding(int64_index=False, own_values=True)}


def encoding_of(name: str) -> Encoding:
    try:
        return ENCODINGS[name]
    except KeyError:
        raise ValueError(f"DeMo: encoding must be one of {tuple(ENCODINGS)}, got {name!r}") from None
VALUE_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}


def _fresh(buf: torch.Tensor) -> torch.Tensor:
    """A contiguous copy at storage offset 0, which a dtype view of bytes needs."""
    return torch.empty(buf.shape, dtype=buf.dtype, device=buf.device).copy_(buf)


def index_bits(tile_numel: int) -> int:
    """Bits of a compact index for a tile of ``tile_numel`` positions."""
    if tile_numel <= 1 << 12:
        return 12
    if tile_numel <= 1 << 16:
        return 16
    return 32


def index_nbytes(count: int, encoding: str, tile_numel: int) -> int:
    if encoding_of(encoding).int64_index:
        return 8 * count
    bits = index_bits(tile_numel)
    if bits == 12:
        return 3 * ((count + 1) // 2)
    return count * bits // 8


def value_nbytes(count: int, encoding: str, param_dtype: torch.dtype, value_dtype: torch.dtype) -> int:
    dt = value_dtype if encoding_of(encoding).own_values else param_dtype
    return count * torch.empty((), dtype=dt).element_size()


def pack_indices(idx: torch.Tensor, encoding: str, tile_numel: int) -> torch.Tensor:
    """Flat int64 indices -> bytes (uint8) in ``encoding``."""
    idx = idx.reshape(-1)
    if encoding_of(encoding).int64_index:
        return idx.to(torch.int64).contiguous().view(torch.uint8)
    bits = index_bits(tile_numel)
    if bits == 16:
        return idx.to(torch.int32).to(torch.uint16).contiguous().view(torch.uint8) \
            if hasattr(torch, "uint16") else idx.to(torch.int16).contiguous().view(torch.uint8)
    if bits == 32:
        return idx.to(torch.int32).contiguous().view(torch.uint8)
    if idx.numel() % 2:
        idx = torch.cat([idx, idx.new_zeros(1)])
    a, b = idx[0::2], idx[1::2]
    out = torch.stack([a & 0xFF, (a >> 8) | ((b & 0xF) << 4), b >> 4], dim=1)
    return out.to(torch.uint8).reshape(-1)


def unpack_indices(buf: torch.Tensor, count: int, encoding: str, tile_numel: int) -> torch.Tensor:
    """Inverse of :func:`pack_indices`: ``count`` int64 indices (``buf`` is uint8, maybe (N, bytes))."""
    lead = buf.shape[:-1]
    if encoding_of(encoding).int64_index:
        return _fresh(buf).view(torch.int64).reshape(*lead, count)
    bits = index_bits(tile_numel)
    if bits == 16:
        if hasattr(torch, "uint16"):
            return _fresh(buf).view(torch.uint16).to(torch.int64).reshape(*lead, count)
        return _fresh(buf).view(torch.int16).to(torch.int64).reshape(*lead, count) & 0xFFFF
    if bits == 32:
        return _fresh(buf).view(torch.int32).to(torch.int64).reshape(*lead, count)
    t = buf.reshape(*lead, -1, 3).to(torch.int64)
    a = t[..., 0] | ((t[..., 1] & 0xF) << 8)
    b = (t[..., 1] >> 4) | (t[..., 2] << 4)
    return torch.stack([a, b], dim=-1).reshape(*lead, -1)[..., :count]


def pack_values(val: torch.Tensor, encoding: str, value_dtype: torch.dtype) -> torch.Tensor:
    v = val.reshape(-1)
    if encoding_of(encoding).own_values:
        v = v.to(value_dtype)
    return v.contiguous().view(torch.uint8)


def unpack_values(buf: torch.Tensor, count: int, encoding: str, param_dtype: torch.dtype,
                  value_dtype: torch.dtype) -> torch.Tensor:
    lead = buf.shape[:-1]
    dt = value_dtype if encoding_of(encoding).own_values else param_dtype
    return _fresh(buf).view(dt).reshape(*lead, count).to(param_dtype)


def quantize(val: torch.Tensor, encoding: str, value_dtype: torch.dtype) -> torch.Tensor:
    """The value the receivers will decode (identity for an encoding of the parameters' dtype)."""
    if encoding_of(encoding).own_values:
        return val.to(value_dtype).to(val.dtype)
    return val


def mask_nbytes(n_params: int) -> int:
    return math.ceil(n_params / 8)


def pack_mask(present: list[bool]) -> torch.Tensor:
    bits = torch.tensor(present + [False] * (-len(present) % 8), dtype=torch.uint8).reshape(-1, 8)
    weights = torch.tensor([1, 2, 4, 8, 16, 32, 64, 128], dtype=torch.uint8)
    return (bits * weights).sum(1).to(torch.uint8)


def unpack_mask(buf: torch.Tensor, n_params: int) -> torch.Tensor:
    """(N, nbytes) uint8 -> (N, n_params) bool."""
    shifts = torch.arange(8, dtype=torch.uint8, device=buf.device)
    bits = (buf.unsqueeze(-1) >> shifts) & 1
    return bits.reshape(*buf.shape[:-1], -1)[..., :n_params].bool()
