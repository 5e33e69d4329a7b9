"""The baseline's commands: ``python -m distlab baseline figure`` (and ``baseline-figure``),
the same step as ``distlab figures --experiment baseline``, which the rule file runs."""

from __future__ import annotations

from pathlib import Path

from ..clihelp import JSON, JSON_OPT, OUT, command


def _figure(a) -> int:
    from .figures import make

    make(a.inputs, Path(a.out_dir), a.options)
    return 0


def register(sub) -> None:
    command(sub, "baseline-figure", _figure, "the baseline's loss figure and table (from its summary tables)",
            inputs={**JSON, "help": '{"steps": path, "summary": path}'}, out_dir=OUT, options=JSON_OPT)
