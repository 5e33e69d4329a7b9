"""The registry of papers: the one place that lists them.

One line a paper: the module holding its ``PAPER`` (a :class:`distlab.pipeline.paper.Paper`).
``cli.py`` (trainers, spec modules, command plugins), the Snakefile (the rule files it
includes), ``workflow/rules/common.smk`` (each paper's tables and outputs, the scorecard's
sections), the config checks (each section's schema and cross-field rules) and
``scripts/snapshot.py`` read the papers here.  A new paper is its package plus one line below.

The order is the write-up's: the rule files are included, the outputs gathered and the
scorecard's sections merged in it.  A level above the paper packages (it names them), like
the dispatcher; importing it imports only the small ``paper`` modules (no torch).
"""

from __future__ import annotations

import importlib
from functools import lru_cache

from .pipeline.paper import Paper, PaperError

REGISTRY = (
    "distlab.baseline.paper",
    "distlab.pgc.paper",
    "distlab.placement.paper",
    "distlab.local.paper",
    "distlab.demo.paper",
    "distlab.atlas.paper",
)


@lru_cache(maxsize=None)
def papers() -> tuple[Paper, ...]:
    """Every registered paper, in the registry's order; names are checked to be unique."""
    out: list[Paper] = []
    for module in REGISTRY:
        paper = getattr(importlib.import_module(module), "PAPER", None)
        if not isinstance(paper, Paper):
            raise PaperError(f"{module}: PAPER is not a distlab.pipeline.paper.Paper")
        out.append(paper)
    seen: dict[str, str] = {}
    for p in out:
        for n in p.names:
            if seen.setdefault(n, p.name) != p.name:
                raise PaperError(f"the name {n!r} belongs to two papers: {seen[n]!r} and {p.name!r}")
    return tuple(out)


def paper(name: str) -> Paper:
    """The paper any of whose names (canonical, config section, scorecard section, claims
    prefix, alias) is ``name``."""
    for p in papers():
        if name in p.names:
            return p
    raise PaperError(f"no paper is named {name!r} (papers: {', '.join(p.name for p in papers())})")


def trainers() -> dict[str, Paper]:
    """``train --experiment`` values: each paper with a trainer, by its canonical name."""
    return {p.name: p for p in papers() if p.trainer}
