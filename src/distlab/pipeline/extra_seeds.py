"""Extra seeds for named claims, on request, without rerunning anything else.

An inconclusive row of the scorecard says how many seeds would decide it.  To
run them, name the claim and how many seeds to add in the config::

    stats:
      extra_seeds: {pgc.fig9.pgc_fewer_steps_than_dgd: 5}

A precondition (a name under ``conditions:``) can be named the same way: a
negative control that is inconclusive gets its seeds like a claim.
The settings a claim compares (its ``a``/``b`` selections, or every setting
of its ``chain``) then get that many more seeds, numbered after the
configured ones; every other run keeps its seeds.  A paper's workflow asks
:func:`for_setting` which extra seeds one of its settings needs and runs them
as jobs of their own, so no existing job's spec changes and nothing reruns
but the new runs and what reads them (summaries, figures, the scorecard).
Torch-free: the Snakefile imports it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

MAX_EXTRA = 50  # more than this many extra seeds for one claim is a typo, not a request


def requests(config: Mapping[str, Any], claims: Iterable[Mapping[str, Any]],
             conditions: Mapping[str, Mapping[str, Any]] | None = None) -> list[tuple[str, list[dict], int]]:
    """``(table, selections, count)`` for every claim (or precondition, by its name in
    ``conditions``) named in ``stats.extra_seeds``.

    Raises ValueError naming the key for an unknown id or a bad count.
    """
    wanted = dict((config.get("stats") or {}).get("extra_seeds") or {})
    by_id = {**{k: {"id": k, **v} for k, v in (conditions or {}).items()}, **{c["id"]: c for c in claims}}
    out = []
    for cid, count in wanted.items():
        if cid not in by_id:
            raise ValueError(f"stats.extra_seeds: no claim or condition {cid!r} in config/claims.yaml")
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_EXTRA:
            raise ValueError(f"stats.extra_seeds.{cid}: must be an integer from 1 to {MAX_EXTRA}, got {count!r}")
        c = by_id[cid]
        sides = list(c.get("chain") or [])
        for key in ("a", "b"):
            if isinstance(c.get(key), Mapping):
                sides.append(dict(c[key]))
        out.append((c["table"], sides, count))
    return out


def _same(x: Any, y: Any) -> bool:
    try:
        return float(x) == float(y)
    except (TypeError, ValueError):
        return str(x) == str(y)


def matches(selection: Mapping[str, Any], setting: Mapping[str, Any]) -> bool:
    """Whether a claim's selection can pick rows of ``setting`` (keys the setting does not
    name are not constraints here: such a selection matches, and the run is made)."""
    return all(_same(v, setting[k]) for k, v in selection.items() if k in setting)


def for_setting(reqs: list[tuple[str, list[dict], int]], base_seeds: list[int], table: str,
                setting: Mapping[str, Any]) -> list[int]:
    """The extra seeds one setting of ``table`` needs: after ``base_seeds``, as many as the
    largest request whose selections match it."""
    count = max((n for t, sides, n in reqs if t == table and any(matches(s, setting) for s in sides)),
                default=0)
    start = max(base_seeds) + 1 if base_seeds else 0
    return list(range(start, start + count))
