"""The DeMo paper's name for its comparison's methods: :mod:`distlab.techniques.method`.

AdamW-DDP, DeMo (reference, compact, all-mean), PowerSGD and DiLoCo are written once in the
shared techniques package (:mod:`distlab.techniques.ddp`, :mod:`distlab.techniques.demo.method`,
:mod:`distlab.techniques.powersgd`, :mod:`distlab.techniques.diloco`), which the atlas uses too;
this module re-exports the contract and the builder (:mod:`distlab.techniques.methods`).
Nothing is defined here.
"""

from ..techniques.method import Method  # noqa: F401
from ..techniques.methods import make_method  # noqa: F401

__all__ = ["Method", "make_method"]
