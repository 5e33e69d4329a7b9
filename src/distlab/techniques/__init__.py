"""The data-parallel techniques and their communication layer, each written once.

This package is the one home of what the papers and the atlas share about training one
model on several workers: the communication layer the techniques talk through
(:mod:`distlab.techniques.comm`: one :class:`~distlab.techniques.comm.SimComm` contract, the
same collectives in memory over the local workers of a simulated run, and one
:class:`~distlab.techniques.comm.DistComm` over torch.distributed, one worker a rank), and
the techniques themselves as they move here (DDP, DeMo and its optimizer, DiLoCo, PowerSGD,
the gradient codes, IS-SGD and their combinations).  Paper packages and the atlas import
them from here; a paper package never imports another paper's package for them.

:data:`EVAL_SEED` is the seed of the validation windows a run is evaluated on: one fixed
set of windows for every run of every technique, so that two techniques' validation losses
are measured on the same tokens.

Torch-free at import: :mod:`distlab.techniques.comm` imports torch, this module does not.
"""

EVAL_SEED = 12345

__all__ = ["DeMo", "EVAL_SEED"]


def __getattr__(name: str):
    # ``from distlab.techniques import DeMo``: the optimizer imports torch, so it is loaded on
    # first use and this package stays torch-free at import
    if name == "DeMo":
        from .demo.optim import DeMo

        return DeMo
    raise AttributeError(f"module 'distlab.techniques' has no attribute {name!r}")
