"""Every technique by its name behind the step interface of :mod:`distlab.techniques.step`:
:func:`make_technique` builds any technique of :data:`distlab.techniques.catalogue.TECHNIQUES`
(the atlas's drivers call it); the synchronous methods alone are
:func:`distlab.techniques.methods.make_method`."""

from __future__ import annotations

from .catalogue import CODED
from .combinations import DiLoCoDeMo, ISDeMo
from .step import Coded, Technique, Wrapped


def make_technique(name, model, n, local, spec, comm, train, block, bs, device) -> Technique:
    """The technique ``name`` (:data:`distlab.techniques.catalogue.TECHNIQUES`) over ``n`` workers,
    ``local`` of them in this process."""
    cls = {"diloco-demo": DiLoCoDeMo, "is-demo": ISDeMo}.get(name)
    if cls is None:
        cls = Coded if name in CODED else Wrapped
    return cls(name, model, n, local, spec, comm, train, block, bs, device)
