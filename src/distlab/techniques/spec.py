"""Torch-free: a technique declared once, as one :class:`TechniqueSpec` in a :class:`Registry`.

A spec holds every part the workflow, the figures and the drivers read of a technique: its
name, kind, the option sections it reads (their defaults and bounds are
:mod:`distlab.techniques.options`), its builder (``"module:attribute"``, imported on first use
so that the workflow parses without torch, and the builder's fixed arguments), its label and
plot order, its payload model and its sweep key.  The schemas' enums, the rules' wildcard
constraints, the option tables, the figures' labels and orders and the atlas catalogue are
read from the registries of :mod:`distlab.techniques.catalogue`.

A spec that lacks a part is refused where it is declared, naming the part; a name no registry
holds is refused where it is looked up, naming it and the names known.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

KINDS = ("sync", "master")
# how a step's message is sized: the full gradient, a format of the technique's own (DeMo's
# compressed payload), or its own format relayed by a master to every worker
PAYLOADS = ("dense", "own", "relayed")
REQUIRED = ("name", "kind", "options", "builder", "label", "order", "payload", "sweep_key")


class IncompleteSpec(ValueError):
    """A technique's spec lacks a part, or gives one that cannot be right."""


class UnknownTechnique(KeyError):
    """A name no registry holds; the message names it and the names known."""

    def __str__(self) -> str:  # KeyError quotes its argument; this one is a sentence
        return str(self.args[0])


@dataclass(frozen=True)
class TechniqueSpec:
    name: str
    kind: str                          # how the step is timed: KINDS
    options: tuple[str, ...]           # the option sections its run reads (distlab.techniques.options)
    builder: str | Callable            # "module:attribute", imported on first use, or the callable
    label: str                         # its name in every figure and table
    order: int                         # its place in every figure and table (and its colour)
    payload: str                       # PAYLOADS
    sweep_key: tuple[str, str] | None  # (section, option) its natural sweep varies; None: none
    args: Mapping[str, Any] = field(default_factory=dict)  # the builder's fixed arguments
    what: str = ""
    arrival_dependent: bool = False    # its trajectory depends on which workers arrive first
    overlapped: bool = False           # its collectives are released during the backward pass

    def build(self) -> Callable:
        """The builder itself (its module imported now)."""
        if callable(self.builder):
            return self.builder
        module, _, attr = self.builder.partition(":")
        return getattr(importlib.import_module(module), attr)


def technique(**parts) -> TechniqueSpec:
    """A spec from its parts; one missing, or of the wrong shape, is refused naming it."""
    name = parts.get("name", "<unnamed>")
    for part in REQUIRED:
        if part not in parts:
            raise IncompleteSpec(f"technique {name!r}: its spec has no {part!r}")
    problems = {
        "name": not (isinstance(name, str) and re.fullmatch(r"[a-z][a-z0-9-]*", name)),
        "kind": parts["kind"] not in KINDS,
        "payload": parts["payload"] not in PAYLOADS,
        "label": not (isinstance(parts["label"], str) and parts["label"]),
        "order": not isinstance(parts["order"], int) or isinstance(parts["order"], bool),
        "builder": not (callable(parts["builder"]) or re.fullmatch(r"[\w.]+:\w+", str(parts["builder"]))),
        "sweep_key": parts["sweep_key"] is not None and len(tuple(parts["sweep_key"])) != 2,
    }
    for part, bad in problems.items():
        if bad:
            raise IncompleteSpec(f"technique {name!r}: {part} {parts[part]!r} is not valid")
    parts["options"] = tuple(parts["options"])
    parts["sweep_key"] = tuple(parts["sweep_key"]) if parts["sweep_key"] is not None else None
    return TechniqueSpec(**parts)


class Registry(Mapping):
    """Technique specs by name, each registered once; iterated in plot order."""

    def __init__(self, what: str, specs=()) -> None:
        self.what = what
        self._specs: dict[str, TechniqueSpec] = {}
        for s in specs:
            self.register(s)

    def register(self, spec: TechniqueSpec) -> TechniqueSpec:
        if spec.name in self._specs:
            raise IncompleteSpec(f"{self.what}: {spec.name!r} is registered twice")
        if any(s.order == spec.order for s in self._specs.values()):
            raise IncompleteSpec(f"{self.what}: {spec.name!r} takes the plot order {spec.order} of another")
        self._specs[spec.name] = spec
        self._specs = dict(sorted(self._specs.items(), key=lambda kv: kv[1].order))
        return spec

    def __getitem__(self, name: str) -> TechniqueSpec:
        try:
            return self._specs[name]
        except (KeyError, TypeError):
            raise UnknownTechnique(f"unknown {self.what} {name!r}; known: {', '.join(self._specs)}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._specs)

    def __len__(self) -> int:
        return len(self._specs)

    def names(self) -> list[str]:
        return list(self._specs)

    def label(self, name: str) -> str:
        return self[name].label

    def position(self, name: str) -> int:
        """Its index in plot order (its colour ``C<position>``)."""
        self[name]  # refuses an unknown name
        return self.names().index(name)

    def pattern(self) -> str:
        """A wildcard constraint matching exactly the registered names (a name is ``[a-z0-9-]``
        only, and Snakemake anchors the whole path, so the names need no escaping)."""
        return "|".join(self._specs)
