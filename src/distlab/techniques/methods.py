"""The synchronous methods by name: :func:`make_method` builds the method a run spec's
``method`` names, from its spec in :data:`distlab.techniques.catalogue.METHODS` (the contract
is :class:`distlab.techniques.method.Method`)."""

from __future__ import annotations

from torch import nn

from .catalogue import METHODS
from .method import Method


def make_method(model: nn.Module, n_local: int, spec: dict, comm, registry=METHODS) -> Method:
    """The method ``spec["method"]`` names, over ``n_local`` workers of ``model``, given its
    spec's fixed arguments (a DeMo variant's encoding); an unknown name is refused naming it."""
    method = registry[spec["method"]]
    return method.build()(model, n_local, spec, comm, **method.args)
