"""The papers, for the levels above the paper packages: found, not listed.

Each paper is its package: ``distlab/<package>/paper.py`` and the ``PAPER`` there (a
:class:`distlab.pipeline.paper.Paper`), found by :func:`distlab.pipeline.paper.registered`,
the one way to the papers (the shared modules below read the same objects through
:func:`distlab.pipeline.paper.find`).  ``cli.py`` (trainers, spec modules, command plugins),
the Snakefile (the rule files it includes), ``workflow/rules/common.smk`` (each paper's tables
and outputs, the scorecard's sections), the config checks and ``scripts/snapshot.py`` read them
here.  A new paper is its package and nothing else.

The order is the write-up's (each ``Paper.order``): the rule files are included, the outputs
gathered and the scorecard's sections merged in it.  Importing this imports only the small
``paper`` modules (no torch).
"""

from __future__ import annotations

from .pipeline.paper import Paper, PaperError, registered


def papers() -> tuple[Paper, ...]:
    """Every paper, in the write-up's order; names and orders are checked to be unique."""
    return registered()


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
