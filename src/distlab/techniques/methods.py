"""The synchronous methods by name: :func:`make_method` builds the method a run spec's
``method`` names (``adamw``, ``demo``, ``demo-compact``, ``demo-allmean``, ``powersgd``,
``diloco``; the contract is :class:`distlab.techniques.method.Method`)."""

from __future__ import annotations

from torch import nn

from .ddp import AdamWDDP
from .demo.method import DeMoMethod
from .diloco import DiLoCo
from .method import Method
from .powersgd import PowerSGD


def make_method(model: nn.Module, n_local: int, spec: dict, comm) -> Method:
    """The method ``spec["method"]`` names, over ``n_local`` workers of ``model``."""
    cls = {"adamw": AdamWDDP, "demo": DeMoMethod, "demo-compact": DeMoMethod, "demo-allmean": DeMoMethod,
           "powersgd": PowerSGD,
           "diloco": DiLoCo}[spec["method"]]
    return cls(model, n_local, spec, comm)
