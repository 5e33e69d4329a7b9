"""DeMo, decoupled momentum optimization, as a reusable ``torch.optim.Optimizer``.

``from distlab.techniques.demo import DeMo``; the modules: :mod:`.optim` (the optimizer),
:mod:`.optim_tiles` (its tile layout and kernels), :mod:`.payload` (the wire format),
:mod:`.transforms` (the tiled DCT).
"""

from .optim import DeMo

__all__ = ["DeMo"]
