"""Every technique by its name behind the step interface of :mod:`distlab.techniques.step`:
:func:`make_technique` builds any technique of :data:`distlab.techniques.catalogue.TECHNIQUES`
(the atlas's drivers call it) from its spec; the synchronous methods alone are
:func:`distlab.techniques.methods.make_method`."""

from __future__ import annotations

from .catalogue import TECHNIQUES
from .step import Technique


def make_technique(name, model, n, local, spec, comm, train, block, bs, device, registry=TECHNIQUES) -> Technique:
    """The technique ``name`` over ``n`` workers, ``local`` of them in this process: its spec's
    builder with the spec's fixed arguments (a sync method's name, a code's scheme)."""
    tech = registry[name]
    return tech.build()(name, model, n, local, spec, comm, train, block, bs, device, **tech.args)
