"""DeMo (P4): decoupled momentum optimization, its baselines and its experiments.

``from distlab.demo import DeMo`` gives the optimizer; the trainer for both
backends is :mod:`distlab.demo.train`.
"""

__all__ = ["DeMo"]


def __getattr__(name: str):
    # imported on first use, so that the torch-free parts (checks, workflow helpers)
    # load without torch when the Snakefile checks the configuration
    if name == "DeMo":
        from ..techniques.demo.optim import DeMo

        return DeMo
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
