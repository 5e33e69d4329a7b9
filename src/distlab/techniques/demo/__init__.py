"""DeMo, decoupled momentum optimization, as a reusable ``torch.optim.Optimizer``.

``from distlab.techniques.demo import DeMo``; for a model wrapped by FSDP2's ``fully_shard``,
``ShardedDeMo``.  The modules: :mod:`.optim` (the optimizer), :mod:`.optim_tiles` (its tile
layout and kernels), :mod:`.payload` (the wire format), :mod:`.transforms` (the tiled DCT),
:mod:`.fsdp` (DeMo on sharded parameters).
"""

from .fsdp import ShardedDeMo
from .optim import DeMo

__all__ = ["DeMo", "ShardedDeMo"]
