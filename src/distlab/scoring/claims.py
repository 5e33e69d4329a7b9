"""The claims of ``config/claims.yaml``: read, checked and normalized (torch- and
pandas-free).  The scorecard (:mod:`distlab.scoring.scorecard`) evaluates them; the config check
(:mod:`distlab.config.checks`) and the rule files read them through here, so that reading the
claims needs none of the evaluation.

A claim names its paper, source, statement, table, metric and test and compares
settings ``a`` and ``b`` (or a ``chain``, a constant ``value``, a scalar ``value_from``);
``conditions`` are the preconditions claims may name.  Every problem raises
:class:`ClaimError` naming the claim id (or condition) and key.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

TESTS = ("less", "greater", "noninferior", "equivalent", "band")
EXPECTED = ("holds", "fails")
# a claim's ``paper``: a registered paper's scorecard section (distlab.papers; the config check,
# which has the registry, refuses one that is none: distlab.config.checks.claims_paper_errors)
PAPER_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
TRANSFORMS = ("diff", "ratio")
REQUIRED_KEYS = ("id", "paper", "source", "statement", "table", "metric", "test")
OPTIONAL_KEYS = (
    "paper_value", "a", "b", "value", "value_from", "chain", "margin", "margin_relative",
    "higher_is_better", "transform", "by_construction", "tested_at", "threshold", "expected",
    "preconditions", "measured", "not_testable", "band", "model_prediction", "planned_n", "report_only",
    "headline", "short", "figure",
)
# the write-up's table (paper/README.md) shows a statement in at most this many characters: a longer
# statement gives ``short``, its reading for that table (the full text stays in the CSV)
SHORT_MAX = 120
MODEL_KEYS = ("reason", "x", "table", "metric", "a", "b", "chain", "at")
COND_KINDS = ("floor", "control", "horizon", "reach", "other")
COND_TESTS = ("less", "greater", "equivalent", "each_at_least", "each_at_most", "bound_reaches")
COND_KEYS = ("kind", "statement", "table", "metric", "a", "test", "b", "value", "value_from", "margin",
             "threshold", "factor", "reach", "blocks", "released", "testable_with")
# when a condition not met blocks a claim (docs/conventions.md, "Preconditions"): "always"; "shortfall",
# a handicap (the worst relative value over the runs, e.g. a search space's gap to the best baseline)
# that blocks only an outcome against the claim no larger than the handicap x |mean b|; "improvement",
# a ceiling in % (e.g. the exact optimum's headroom over a single device) that blocks only a claim of
# an improvement larger than it; "learning", a learner's learning (docs/preconditions.md): as the claim's a,
# the method's own, it blocks always; as the claim's b, an opponent or baseline, its failure moves b one
# way (:func:`learning_shift`) and blocks only an outcome on the side that move favours
BLOCKS = ("always", "shortfall", "improvement", "learning")
# the tests that say which way learning moves a learner's metric (down for these, up for the others)
LEARNING_LOWERS = ("less", "each_at_most")
LEARNING_TESTS = ("less", "greater", "each_at_least", "each_at_most")
# a/b selections name table columns; `value` compares a with a constant instead of b
VALUE = "__value__"
VALUE_FROM = "__value_from__"


class ClaimError(ValueError):
    """A claim is malformed or cannot be evaluated against its table."""


# ----------------------------------------------------------------------------
# Claims and settings
# ----------------------------------------------------------------------------


def _is_number(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)


def _check_value_from(vf: Any, bad) -> dict[str, Any]:
    """``value_from: {table, metric, where}``: one scalar read from a results table."""
    if not isinstance(vf, Mapping) or set(vf) - {"table", "metric", "where"} or not {"table", "metric"} <= set(vf):
        raise bad("value_from", "must be a mapping with table, metric and optional where")
    for key in ("table", "metric"):
        if not isinstance(vf[key], str) or not vf[key].strip():
            raise bad("value_from", f"{key} must be a non-empty string")
    where = vf.get("where", {})
    if not isinstance(where, Mapping):
        raise bad("value_from", "where must be a mapping of column: value")
    return {"table": vf["table"], "metric": vf["metric"], "where": dict(where)}


def _check_sides(obj: Mapping[str, Any], bad, allow_chain: bool) -> tuple[list, bool]:
    """(links, is_chain) from a/b, a/value, a/value_from or chain."""
    sides = [k for k in ("b", "value", "value_from") if k in obj]
    has_pair, has_chain = "a" in obj or bool(sides), allow_chain and "chain" in obj
    if has_pair == has_chain or (has_pair and len(sides) != 1):
        raise bad("chain" if has_chain else "a",
                  "give exactly one of a/b, a/value, a/value_from" + (" or chain" if allow_chain else ""))
    if has_chain:
        chain = obj["chain"]
        if (
            not isinstance(chain, Sequence) or isinstance(chain, str) or len(chain) < 2
            or not all(isinstance(s, Mapping) and s for s in chain)
        ):
            raise bad("chain", "must be a list of at least 2 non-empty mappings")
        return [(dict(x), dict(y)) for x, y in zip(chain[:-1], chain[1:])], True
    if not isinstance(obj.get("a"), Mapping) or not obj["a"]:
        raise bad("a", "must be a non-empty mapping of column: value")
    if "value" in obj:
        if not _is_number(obj["value"]):
            raise bad("value", "must be a finite number")
        return [(dict(obj["a"]), {VALUE: float(obj["value"])})], False
    if "value_from" in obj:
        return [(dict(obj["a"]), {VALUE_FROM: _check_value_from(obj["value_from"], bad)})], False
    if not isinstance(obj.get("b"), Mapping) or not obj["b"]:
        raise bad("b", "must be a non-empty mapping of column: value")
    return [(dict(obj["a"]), dict(obj["b"]))], False


def _check_text(obj: Mapping[str, Any], key: str, bad, why: str) -> str:
    v = obj.get(key)
    if not isinstance(v, str) or not v.strip():
        raise bad(key, why)
    return v


def _check_margin(claim: Mapping[str, Any], test: str, bad) -> tuple[Any, Any, bool]:
    """(margin, higher_is_better, margin_relative) of a claim, each checked against its test."""
    margin = claim.get("margin")
    if test == "band" and margin is not None:
        raise bad("margin", "test 'band' takes its bounds from band: [low, high], not a margin")
    if test in ("noninferior", "equivalent"):
        if not _is_number(margin) or not margin >= 0:
            raise bad("margin", f"test {test!r} needs a number >= 0")
    elif margin is not None and (not _is_number(margin) or not margin >= 0):
        raise bad("margin", "must be a number >= 0")
    if "margin_relative" in claim and margin is None:
        raise bad("margin_relative", "applies only with a margin")
    hib = claim.get("higher_is_better")
    if test == "noninferior":
        if not isinstance(hib, bool):
            raise bad("higher_is_better", "noninferior needs true or false")
    elif hib is not None:
        raise bad("higher_is_better", f"only applies to noninferior, not {test!r}")
    relative = claim.get("margin_relative", False)
    if not isinstance(relative, bool):
        raise bad("margin_relative", "must be true or false")
    return margin, hib, relative


def _check_notes(claim: Mapping[str, Any], margin, band, bad) -> tuple[Any, str, Any]:
    """(by_construction, tested_at, threshold): the texts that say how a row is read; a margin
    or a constant needs its threshold's source."""
    construction = claim.get("by_construction", "")
    if construction is not None and not isinstance(construction, str):
        raise bad("by_construction", "must say what makes the row hold whatever the data (a string)")
    tested_at = claim.get("tested_at", "")
    if not isinstance(tested_at, str):
        raise bad("tested_at", "must be a string (the setting the claim is tested at, e.g. c/mu = 0.5)")
    threshold = claim.get("threshold", "")
    if margin is not None or "value" in claim or band:
        _check_text(claim, "threshold", bad, "a margin or a constant needs the source's numbers and the "
                    "arithmetic that gives it (a non-empty string)")
    elif not isinstance(threshold, str):
        raise bad("threshold", "must be a string")
    return construction, tested_at, threshold


def _check_claim(claim: Any, index: int) -> dict[str, Any]:
    """Validate one claim and return it with defaults filled in."""
    if not isinstance(claim, Mapping):
        raise ClaimError(f"claim #{index}: expected a mapping, got {type(claim).__name__}")
    cid = claim.get("id")
    if not isinstance(cid, str) or not cid.strip():
        raise ClaimError(f"claim #{index}: bad key 'id': must be a non-empty string")

    def bad(key: str, why: str) -> ClaimError:
        return ClaimError(f"claim {cid!r}: bad key {key!r}: {why}")

    for key in claim:
        if key not in REQUIRED_KEYS + OPTIONAL_KEYS:
            raise bad(key, f"unknown key (allowed: {', '.join(REQUIRED_KEYS + OPTIONAL_KEYS)})")
    for key in REQUIRED_KEYS:
        if key not in claim:
            raise bad(key, "missing")
        _check_text(claim, key, bad, "must be a non-empty string")
    if not PAPER_NAME.fullmatch(claim["paper"]):
        raise bad("paper", f"{claim['paper']!r} is not a paper's scorecard section (P1, foundation, ...)")
    test = claim["test"]
    if test not in TESTS:
        raise bad("test", f"{test!r} is not one of {TESTS}")
    pv = claim.get("paper_value")
    if pv is not None and (isinstance(pv, bool) or not isinstance(pv, (int, float, str))):
        raise bad("paper_value", "must be a number, a string or null")
    links, is_chain = _check_sides(claim, bad, allow_chain=True)

    band = _check_band(claim, test, is_chain, bad)
    margin, hib, relative = _check_margin(claim, test, bad)
    transform = claim.get("transform", "diff")
    if transform not in TRANSFORMS:
        raise bad("transform", f"{transform!r} is not one of {TRANSFORMS}")
    construction, tested_at, threshold = _check_notes(claim, margin, band, bad)
    expected = claim.get("expected", "holds")
    if expected not in EXPECTED:
        raise bad("expected", f"{expected!r} is not one of {EXPECTED} (what the source found)")
    pre, scopes = _check_preconditions(claim.get("preconditions", []), bad)
    planned = claim.get("planned_n")
    if planned is not None and (isinstance(planned, bool) or not isinstance(planned, int) or planned < 2):
        raise bad("planned_n", "must be an integer >= 2 (the seeds or repeats the row's power calculation "
                  "asked for, fixed before the run)")
    model = _check_model_prediction(claim.get("model_prediction"), claim, test, bad)
    if model and construction:
        raise bad("model_prediction", "a row is either by construction or a model prediction, not both")
    measured = claim.get("measured", False)
    if not isinstance(measured, bool):
        raise bad("measured", "must be true or false")
    not_testable = claim.get("not_testable", "")
    if not isinstance(not_testable, str):
        raise bad("not_testable", "must say why the claim cannot be tested here (a string)")
    report_only = _check_report_only(claim, bad)
    headline, short = _check_headline(claim, bad)

    return {
        **{k: claim[k] for k in REQUIRED_KEYS},
        "paper_value": pv,
        "links": links,
        "is_chain": is_chain,
        "margin": None if margin is None else float(margin),
        "margin_relative": relative,
        "higher_is_better": hib,
        "transform": transform,
        "by_construction": (construction or "").strip(),
        "tested_at": tested_at,
        "threshold": (threshold or "").strip(),
        "expected": expected,
        "preconditions": list(pre),
        "precondition_scopes": scopes,
        "measured": measured,
        "not_testable": not_testable.strip(),
        "band": band,
        "model_prediction": model,
        "planned_n": planned,
        "report_only": report_only,
        "headline": headline,
        "short": short,
    }


def _check_headline(claim: Mapping[str, Any], bad) -> tuple[bool, str]:
    """``headline: true`` puts the row in the write-up's table of headline claims (the few a reader
    of paper/README.md sees first); ``short`` is its statement in at most :data:`SHORT_MAX` characters;
    ``figure`` the stem of the figure that shows it (the write-up links the row to it)."""
    headline = claim.get("headline", False)
    if not isinstance(headline, bool):
        raise bad("headline", "must be true or false")
    if headline and claim.get("report_only"):
        raise bad("headline", "a reported row is not a test: it cannot be a headline claim")
    short = claim.get("short", "")
    if not isinstance(short, str) or ("short" in claim and not short.strip()):
        raise bad("short", "must be the statement in a few words (a non-empty string)")
    if len(short.strip()) > SHORT_MAX:
        raise bad("short", f"must be at most {SHORT_MAX} characters, not {len(short.strip())}")
    figure = claim.get("figure")
    if figure is not None and (not isinstance(figure, str) or not re.fullmatch(r"[A-Za-z0-9_]+", figure)):
        raise bad("figure", "must be the stem of the figure that shows the row (paper/figures/<stem>.png)")
    return headline, short.strip()


def _check_report_only(claim: Mapping[str, Any], bad) -> str:
    """``report_only``: why the row is shown beside a test and is not one (a non-empty string;
    :mod:`distlab.scoring.reported`).  Such a row has no verdict, so nothing that shapes one
    goes with it: not ``expected: fails``, ``by_construction``, ``model_prediction``,
    ``not_testable`` or ``planned_n``."""
    why = claim.get("report_only")
    if why is None:
        return ""
    if not isinstance(why, str) or not why.strip():
        raise bad("report_only", "must say why the row is reported beside a test and is not one (a string)")
    for key in ("by_construction", "model_prediction", "not_testable", "planned_n"):
        if claim.get(key):
            raise bad("report_only", f"a reported row is not a test: it takes no {key}")
    if claim.get("expected", "holds") != "holds":
        raise bad("report_only", "a reported row has no verdict to read against the source: drop expected")
    return why.strip()


def _check_band(claim: Mapping[str, Any], test: str, is_chain: bool, bad) -> tuple[float, float] | None:
    """``test: band`` ("about X"): ``band: [low, high]``, the ratios a / b the source's wording
    allows (0 < low < high), tested on the paired log-ratios log a - log b."""
    if test != "band":
        if "band" in claim:
            raise bad("band", "only test 'band' takes it")
        return None
    band = claim.get("band")
    if (not isinstance(band, Sequence) or isinstance(band, str) or len(band) != 2
            or not all(_is_number(x) for x in band) or not 0 < band[0] < band[1]):
        raise bad("band", "test 'band' needs [low, high] with 0 < low < high (the ratios a / b allowed)")
    if is_chain or "b" not in claim:
        raise bad("band", "test 'band' compares two settings a and b (a ratio): give a and b")
    return float(band[0]), float(band[1])


def _check_preconditions(pre: Any, bad) -> tuple[list[str], dict[str, tuple[str, dict]]]:
    """Precondition names, each a string or ``{name, where}``: the condition evaluated only on the
    rows of the cell the claim compares (``where`` is added to the condition's selection).

    Returns the keys the claim's results are looked up by (``name`` or ``name[k=v,...]``) and,
    for each scoped key, ``(name, where)``."""
    if not isinstance(pre, Sequence) or isinstance(pre, str):
        raise bad("preconditions", "must be a list of condition names (or {name, where} mappings)")
    keys, scopes = [], {}
    for item in pre:
        if isinstance(item, str) and item:
            keys.append(item)
            continue
        if (not isinstance(item, Mapping) or set(item) != {"name", "where"} or not isinstance(item["name"], str)
                or not item["name"] or not isinstance(item["where"], Mapping) or not item["where"]):
            raise bad("preconditions", "each entry must be a condition name or {name: <condition>, "
                      "where: {column: value, ...}} (the cell the claim compares)")
        key = scoped_key(item["name"], item["where"])
        keys.append(key)
        scopes[key] = (item["name"], dict(item["where"]))
    if len(set(keys)) != len(keys):
        raise bad("preconditions", "names a condition twice")
    return keys, scopes


def scoped_key(name: str, where: Mapping[str, Any]) -> str:
    """The name a precondition scoped to one cell is listed under: ``name[k=v,...]``."""
    return f"{name}[{','.join(f'{k}={v}' for k, v in where.items())}]"


def _check_model_prediction(mp: Any, claim: Mapping[str, Any], test: str, bad) -> dict[str, Any] | None:
    """``model_prediction``: the simulated clock (or the arithmetic) fixes the row's outcome as a
    function of a swept setting ``x`` (e.g. c/mu): the row states where the model makes it hold,
    computed from a sweep table of the clock, and never enters a Holm family.

    ``{reason, x, [table, metric, a/b or chain], [at]}``: the sweep's table, metric and sides
    default to the claim's own; ``at`` is the x of the row's own runs (then its data are tested
    and checked against the model's prediction there); without ``at`` the row is the map itself.
    """
    if mp is None:
        return None
    if not isinstance(mp, Mapping):
        raise bad("model_prediction", "must be a mapping {reason, x, [table, metric, a/b or chain, at]}")
    for key in mp:
        if key not in MODEL_KEYS:
            raise bad("model_prediction", f"unknown key {key!r} (allowed: {', '.join(MODEL_KEYS)})")
    for key in ("reason", "x"):
        if not isinstance(mp.get(key), str) or not mp[key].strip():
            raise bad("model_prediction", f"{key} must be a non-empty string")
    if test not in ("less", "greater"):
        raise bad("model_prediction", f"a model prediction is an ordering (test less or greater), not {test!r}")
    if any(k in mp for k in ("a", "b", "chain")):
        links, _ = _check_sides(mp, lambda k, why: bad("model_prediction", f"{k}: {why}"), allow_chain=True)
    else:
        links, _ = _check_sides(claim, bad, allow_chain=True)
    if any(VALUE in b or VALUE_FROM in b for _, b in links):
        raise bad("model_prediction", "the sweep compares settings (a/b or chain), not a constant")
    at = mp.get("at")
    if at is not None and not _is_number(at):
        raise bad("model_prediction", "at must be a number (the x of the row's own runs)")
    return {"reason": mp["reason"].strip(), "x": mp["x"], "table": mp.get("table", claim.get("table")),
            "metric": mp.get("metric", claim.get("metric")), "links": links,
            "at": None if at is None else float(at)}


def _check_condition(name: Any, cond: Any) -> dict[str, Any]:
    """Validate one named precondition."""
    if not isinstance(name, str) or not name.strip():
        raise ClaimError(f"condition {name!r}: the name must be a non-empty string")

    def bad(key: str, why: str) -> ClaimError:
        return ClaimError(f"condition {name!r}: bad key {key!r}: {why}")

    if not isinstance(cond, Mapping):
        raise ClaimError(f"condition {name!r}: expected a mapping, got {type(cond).__name__}")
    for key in cond:
        if key not in COND_KEYS:
            raise bad(key, f"unknown key (allowed: {', '.join(COND_KEYS)})")
    for key in ("kind", "statement", "table", "metric", "test"):
        _check_text(cond, key, bad, "missing or not a non-empty string")
    if cond["kind"] not in COND_KINDS:
        raise bad("kind", f"{cond['kind']!r} is not one of {COND_KINDS}")
    if cond["test"] not in COND_TESTS:
        raise bad("test", f"{cond['test']!r} is not one of {COND_TESTS}")
    links, _ = _check_sides(cond, bad, allow_chain=False)
    if cond["test"].startswith("each_") and "b" in cond:
        raise bad("b", f"test {cond['test']!r} compares each row with a constant: give value or value_from")
    margin = cond.get("margin", 0.0)
    if not _is_number(margin) or margin < 0:
        raise bad("margin", "must be a number >= 0")
    if cond["test"] == "equivalent" and not margin > 0:
        raise bad("margin", "test 'equivalent' needs a margin > 0 (the band around 0 the difference must lie in)")
    if ("margin" in cond or "value" in cond):
        _check_text(cond, "threshold", bad, "a margin or a constant needs the arithmetic that gives it")
    return {"name": name, "kind": cond["kind"], "statement": cond["statement"], "table": cond["table"],
            "metric": cond["metric"], "test": cond["test"], "a": links[0][0], "b": links[0][1],
            "margin": float(margin), "threshold": str(cond.get("threshold", "")).strip(),
            **_check_bound(cond, bad), **_check_blocks(cond, bad)}


def _check_blocks(cond: Mapping[str, Any], bad) -> dict[str, Any]:
    """``blocks`` (one of :data:`BLOCKS`, default "always"), ``released`` (a control condition on a
    method run as its source released it, at the source's settings or the largest budget this
    machine affords: what makes not learning a finding, stated) and ``testable_with`` (what would
    make a blocked row testable: the budget, device, core count or data)."""
    blocks = cond.get("blocks", "always")
    if blocks not in BLOCKS:
        raise bad("blocks", f"{blocks!r} is not one of {BLOCKS}")
    need = {"shortfall": "each_at_most", "improvement": "each_at_least"}.get(blocks)
    if need and cond["test"] != need:
        raise bad("blocks", f"{blocks!r} reads the worst value over the runs: it needs test {need!r}")
    if blocks == "learning" and cond["test"] not in LEARNING_TESTS:
        raise bad("blocks", f"'learning' reads which way learning moves the learner's metric: it needs a test "
                  f"of {LEARNING_TESTS}, not {cond['test']!r}")
    released = cond.get("released", "")
    if released != "" and (not isinstance(released, str) or not released.strip()):
        raise bad("released", "must state how the method was run as its source released it (a string)")
    if released and (cond["kind"] != "control" or blocks != "always"):
        raise bad("released", "only a control condition (kind control, blocks always) takes it")
    testable_with = cond.get("testable_with", "")
    if not isinstance(testable_with, str):
        raise bad("testable_with", "must say what would make a blocked row testable (a string)")
    return {"blocks": blocks, "released": released.strip(), "testable_with": testable_with.strip()}


def _check_bound(cond: Mapping[str, Any], bad) -> dict[str, Any]:
    """``test: bound_reaches`` (out of reach named): ``factor`` x a / b, paired by seed,
    is an upper bound this machine puts on the claim's ratio; ``reach`` is the ratio the claim needs.
    Returns the two numbers ({} for the other tests, which take neither key)."""
    if cond["test"] != "bound_reaches":
        for key in ("factor", "reach"):
            if key in cond:
                raise bad(key, "only test 'bound_reaches' takes it")
        return {}
    if "b" not in cond:
        raise bad("b", "test 'bound_reaches' needs a and b (the bound is factor x a / b by seed)")
    for key in ("factor", "reach"):
        if not _is_number(cond.get(key)) or cond[key] <= 0:
            raise bad(key, "test 'bound_reaches' needs a number > 0")
    _check_text(cond, "threshold", bad, "a bound needs the arithmetic that gives it")
    return {"factor": float(cond["factor"]), "reach": float(cond["reach"])}


def _normalize(claims: Sequence[Any]) -> list[dict[str, Any]]:
    """Validated claims with defaults filled and a/b or chain turned into ``links``."""
    if isinstance(claims, (str, Mapping)) or not isinstance(claims, Sequence):
        raise ClaimError("claims must be a list of mappings")
    checked = [_check_claim(c, i) for i, c in enumerate(claims)]
    seen: set[str] = set()
    for c in checked:
        if c["id"] in seen:
            raise ClaimError(f"claim {c['id']!r}: bad key 'id': duplicated id")
        seen.add(c["id"])
    return checked


def _normalize_conditions(conditions: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    if conditions is None:
        return {}
    if not isinstance(conditions, Mapping):
        raise ClaimError("conditions must be a mapping of name: condition")
    return {name: _check_condition(name, c) for name, c in conditions.items()}


def learner_side(links: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]],
                 learner: Mapping[str, Any]) -> str | None:
    """Which side of a one-comparison claim a learning condition's learner (its selection ``a``) is:
    "a" (the method), "b" (the opponent or baseline), or None.  A side is the learner's when every key
    the two share agrees and the learner names every key on which a and b differ."""
    if len(links) != 1:
        return None
    a, b = links[0]
    compared = {k for k in set(a) & set(b) if a[k] != b[k]}
    sides = [name for name, side in (("a", a), ("b", b))
             if compared <= set(learner) and set(learner) & set(side)
             and all(side[k] == v for k, v in learner.items() if k in side)]
    return sides[0] if len(sides) == 1 else None


def learning_shift(claim: Mapping[str, Any], learns_test: str, learns_metric: str) -> int:
    """Which way an opponent's (the claim's b) not learning moves the row's test: +1 toward the claim,
    -1 against it, 0 where that has no direction (another metric, or a two-sided test: equivalent,
    band).  A learner that does not learn ends on the far side of where learning takes its metric:
    higher when learning lowers it (:data:`LEARNING_LOWERS`); a higher b lowers a - b, which favours a
    claim that a is lower (``less``, ``noninferior`` with lower better)."""
    if learns_metric != claim["metric"] or claim["test"] not in ("less", "greater", "noninferior"):
        return 0
    b_rises = learns_test in LEARNING_LOWERS
    lower_favours = claim["test"] == "less" or (claim["test"] == "noninferior" and not claim["higher_is_better"])
    return 1 if b_rises == lower_favours else -1


def _check_references(claims: Sequence[dict[str, Any]], conditions: Mapping[str, Any]) -> None:
    """Every precondition a claim names is defined; a learning condition's learner is one side of the
    claim's single comparison (what its failure can explain depends on which)."""
    for c in claims:
        for key in c["preconditions"]:
            name = c["precondition_scopes"].get(key, (key,))[0]
            if name not in conditions:
                raise ClaimError(f"claim {c['id']!r}: bad key 'preconditions': no condition named {name!r} "
                                 f"(defined: {', '.join(sorted(conditions)) or 'none'})")
            cond = conditions[name]
            if cond.get("blocks") == "learning" and learner_side(c["links"], cond.get("a") or {}) is None:
                raise ClaimError(f"claim {c['id']!r}: bad key 'preconditions': {name!r} guards a learner's "
                                 "learning (blocks: learning), but its selection a is neither side of the "
                                 "claim's one comparison (a, the method, or b, the opponent)")


def scoped_conditions(claims: Sequence[Mapping[str, Any]], conditions: Mapping[str, Any]) -> dict[str, Any]:
    """The raw conditions, plus one per scoped precondition of ``claims`` (normalized claims):
    the named condition with ``where`` added to its selection ``a`` (and ``b`` when it is one),
    listed under its scoped key; so a claim about one cell is blocked only by that cell's runs."""
    out = dict(conditions)
    for c in claims:
        for key, (name, where) in c.get("precondition_scopes", {}).items():
            base = dict(conditions[name])
            base["a"] = {**dict(base["a"]), **where}
            if isinstance(base.get("b"), Mapping):
                base["b"] = {**dict(base["b"]), **where}
            cell = ", ".join(f"{k} = {v}" for k, v in where.items())
            base["statement"] = f"{base['statement']} (scoped to the compared cell: {cell})"
            out[key] = base
    return out


def validate_claims(claims: Sequence[Any], conditions: Mapping[str, Any] | None = None) -> None:
    """Raise :class:`ClaimError` naming the claim id (or condition) and key if anything is malformed.

    Claims follow the schema of ``config/claims.yaml``; ids must be unique and
    every precondition a claim names must be defined in ``conditions``.
    """
    _check_references(_normalize(claims), _normalize_conditions(conditions))


def load_claims_file(path: str | os.PathLike[str]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Read and validate ``(claims, conditions)`` from YAML.

    The file is a mapping ``{conditions: {...}, claims: [...]}``, or a bare list
    of claims (no conditions).  Duplicate keys are refused at any level.
    """
    from ..config.yamlio import load_yaml_strict

    data = load_yaml_strict(path)
    conditions: dict[str, Any] = {}
    if isinstance(data, Mapping):
        extra = set(data) - {"claims", "conditions"}
        if extra:
            raise ClaimError(f"{path}: unknown top-level keys {sorted(extra)} (allowed: claims, conditions)")
        conditions = dict(data.get("conditions") or {})
        data = data.get("claims")
    claims = data if data is not None else []
    validate_claims(claims, conditions)
    return list(claims), conditions


def load_claims(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Read and validate the claims (and their conditions) from YAML; return the claims."""
    return load_claims_file(path)[0]
