"""DeMo (P4): decoupled momentum optimization, its baselines and its experiments.

``from distlab.demo import DeMo`` gives the optimizer; the trainer for both
backends is :mod:`distlab.demo.train`.
"""

from .optim import DeMo

__all__ = ["DeMo"]
