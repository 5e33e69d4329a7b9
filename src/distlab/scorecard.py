"""Reproduction scorecard: test each paper claim against our run-level results.

A claim compares two settings ``a`` and ``b`` of one results table (or each
consecutive pair of a ``chain`` of settings, or ``a`` against a constant
``value`` or a scalar read from another table, ``value_from``), paired by seed:

* ``less`` / ``greater``: one-sided paired t test of a < b (a > b); with a
  ``margin`` m, of a - b < -m (a - b > m).  Reproduced if p < alpha; not
  reproduced if the opposite one-sided test rejects, or the mean difference
  points the wrong way with n >= 5.
* ``noninferior``: paired non-inferiority t test with the claim's margin.
  Not reproduced if the CI of a - b lies wholly beyond the margin.
* ``equivalent``: TOST with bounds (-margin, +margin).  Not reproduced if the
  CI of a - b lies wholly outside the bounds.

Anything else is *inconclusive*, with the number of seeds that would decide it
at the observed effect and spread (power 0.8); claims whose table has not been
produced are *not run*.  A chain holds only if every link holds
(intersection-union test, so the chain's p-value is the largest link p-value,
with no multiplicity penalty).  The Wilcoxon signed-rank p-value of the same
hypothesis is reported alongside as a distribution-free cross-check; it does
not enter the verdict.

What makes a verdict mean something:

* ``expected``: what the source found.  ``holds`` (default) or ``fails`` (the
  source reports that this test fails): then "reproduced" means our test
  fails conclusively too, and "not reproduced" that ours holds.
* ``preconditions``: names of ``conditions`` (a top-level mapping of
  ``config/claims.yaml``) under which the claim is testable at all -- a
  language model below its data's bigram floor, a learner ahead of its
  negative control of equal budget, an optimizer run past its horizon.  Each
  is computed from results and shown with its measured value; when one is not
  met the verdict is *not testable here*, counted apart.
* ``threshold``: every margin or constant carries the source's numbers and the
  arithmetic that gives it, shown in the row.
* ``by_construction``: the reason a row holds whatever the data (a string);
  such rows are labelled so and kept out of the reproduced count.

Tests are always on the paired differences a - b (a relative margin is
``margin × |mean(b)|``); ``transform: ratio`` only changes what ``ours``,
``estimate`` and ``ci_*`` report (the mean of a/b with its t CI).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from distlab import stats
from distlab.tables import atomic_write_text, fmt_ci, markdown_table, write_table

VERDICTS = ("reproduced", "not reproduced", "inconclusive", "not testable here", "by construction",
            "not run")
TESTS = ("less", "greater", "noninferior", "equivalent")
EXPECTED = ("holds", "fails")
PAPERS = ("P1", "P2", "P3", "P4", "foundation", "atlas")
TRANSFORMS = ("diff", "ratio")
REQUIRED_KEYS = ("id", "paper", "source", "statement", "table", "metric", "test")
OPTIONAL_KEYS = (
    "paper_value", "a", "b", "value", "value_from", "chain", "margin", "margin_relative",
    "higher_is_better", "transform", "by_construction", "tested_at", "threshold", "expected",
    "preconditions", "measured",
)
COLUMNS = (
    "id", "paper", "statement", "source", "metric", "test", "expected", "paper_value", "threshold",
    "ours", "estimate", "ci_low", "ci_high", "n_seeds", "p_value", "p_holm", "p_wilcoxon", "margin",
    "tested_at", "preconditions", "measured", "verdict", "reason", "seeds_needed",
)
COND_KINDS = ("floor", "control", "horizon", "other")
COND_TESTS = ("less", "greater", "each_at_least", "each_at_most")
COND_KEYS = ("kind", "statement", "table", "metric", "a", "test", "b", "value", "value_from", "margin",
             "threshold")
COND_COLUMNS = ("name", "kind", "statement", "measured", "status")
POWER = 0.8  # the power at which seeds_needed is computed
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
    if claim["paper"] not in PAPERS:
        raise bad("paper", f"{claim['paper']!r} is not one of {PAPERS}")
    test = claim["test"]
    if test not in TESTS:
        raise bad("test", f"{test!r} is not one of {TESTS}")
    pv = claim.get("paper_value")
    if pv is not None and (isinstance(pv, bool) or not isinstance(pv, (int, float, str))):
        raise bad("paper_value", "must be a number, a string or null")
    links, is_chain = _check_sides(claim, bad, allow_chain=True)

    margin = claim.get("margin")
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
    transform = claim.get("transform", "diff")
    if transform not in TRANSFORMS:
        raise bad("transform", f"{transform!r} is not one of {TRANSFORMS}")
    construction = claim.get("by_construction", "")
    if construction is not None and not isinstance(construction, str):
        raise bad("by_construction", "must say what makes the row hold whatever the data (a string)")
    tested_at = claim.get("tested_at", "")
    if not isinstance(tested_at, str):
        raise bad("tested_at", "must be a string (the setting the claim is tested at, e.g. c/mu = 0.5)")
    threshold = claim.get("threshold", "")
    if margin is not None or "value" in claim:
        _check_text(claim, "threshold", bad, "a margin or a constant needs the source's numbers and the "
                    "arithmetic that gives it (a non-empty string)")
    elif not isinstance(threshold, str):
        raise bad("threshold", "must be a string")
    expected = claim.get("expected", "holds")
    if expected not in EXPECTED:
        raise bad("expected", f"{expected!r} is not one of {EXPECTED} (what the source found)")
    pre = claim.get("preconditions", [])
    if not isinstance(pre, Sequence) or isinstance(pre, str) or not all(isinstance(x, str) and x for x in pre):
        raise bad("preconditions", "must be a list of condition names")
    if len(set(pre)) != len(pre):
        raise bad("preconditions", "names a condition twice")
    measured = claim.get("measured", False)
    if not isinstance(measured, bool):
        raise bad("measured", "must be true or false")

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
        "measured": measured,
    }


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
    if ("margin" in cond or "value" in cond):
        _check_text(cond, "threshold", bad, "a margin or a constant needs the arithmetic that gives it")
    return {"name": name, "kind": cond["kind"], "statement": cond["statement"], "table": cond["table"],
            "metric": cond["metric"], "test": cond["test"], "a": links[0][0], "b": links[0][1],
            "margin": float(margin), "threshold": str(cond.get("threshold", "")).strip()}


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


def _check_references(claims: Sequence[dict[str, Any]], conditions: Mapping[str, Any]) -> None:
    for c in claims:
        for name in c["preconditions"]:
            if name not in conditions:
                raise ClaimError(f"claim {c['id']!r}: bad key 'preconditions': no condition named {name!r} "
                                 f"(defined: {', '.join(sorted(conditions)) or 'none'})")


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
    from .yamlio import load_yaml_strict

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


@dataclass(frozen=True)
class StatsSettings:
    """Significance level and bootstrap settings, parsed from the config's ``stats``."""

    alpha: float
    n_resamples: int = 9999
    seed: int = 0
    confidence: float = 0.95

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> StatsSettings:
        boot = dict(cfg.get("bootstrap") or {})
        if "alpha" not in cfg or set(boot) - {"n_resamples", "seed", "confidence"}:
            raise ValueError(
                "stats config needs 'alpha' and optional bootstrap keys "
                f"n_resamples/seed/confidence; got {dict(cfg)}"
            )
        settings = cls(
            alpha=float(cfg["alpha"]),
            n_resamples=int(boot.get("n_resamples", cls.n_resamples)),
            seed=int(boot.get("seed", cls.seed)),
            confidence=float(boot.get("confidence", cls.confidence)),
        )
        if not (0 < settings.alpha < 1 and 0 < settings.confidence < 1 and settings.n_resamples > 0):
            raise ValueError(f"stats config out of range: {settings}")
        return settings


# ----------------------------------------------------------------------------
# Evaluation
# ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Link:
    """Outcome of one a-vs-b comparison."""

    label: str
    n: int
    ours: str
    shown: stats.CI | None  # CI of the claim's transform
    p_value: float
    p_wilcoxon: float
    verdict: str
    reason: str
    seeds_needed: float = math.nan  # seeds that would decide an inconclusive link (power 0.8)


class _NotRun(Exception):
    """A table (or a row of one) that a claim or condition needs has not been produced."""


def _num(x: float) -> str:
    return f"{x:.3g}"


def _link_label(a: Mapping[str, Any], b: Mapping[str, Any]) -> str:
    if VALUE in b:
        return f"{','.join(f'{k}={v}' for k, v in a.items())} vs {_num(b[VALUE])}"
    keys = [k for k in dict.fromkeys([*a, *b]) if a.get(k) != b.get(k)] or list(a)
    side = lambda s: ",".join(f"{k}={s.get(k)}" for k in keys)  # noqa: E731
    return f"{side(a)} vs {side(b)}"


def seeds_needed(d: np.ndarray, alpha: float, power: float = POWER) -> float:
    """Seeds a one-sided paired t test needs to reject at ``alpha`` with ``power``,
    if the mean and spread of the (margin-shifted) differences ``d`` are the truth.

    ``d`` is oriented so that the hypothesis to show is mean(d) > 0; an estimate
    on the wrong side (or no spread) gives NaN: no number of seeds decides it
    that way.
    """
    d = np.asarray(d, float)
    mean, sd = float(np.mean(d)), float(np.std(d, ddof=1)) if d.size > 1 else math.nan
    if not (mean > 0 and sd > 0 and math.isfinite(sd)):
        return math.nan
    from statsmodels.stats.power import TTestPower

    try:
        n = TTestPower().solve_power(effect_size=mean / sd, alpha=alpha, power=power, alternative="larger")
    except (ValueError, RuntimeError):
        return math.nan
    n = float(np.squeeze(n))
    return float(max(2, math.ceil(n))) if math.isfinite(n) else math.nan


def _directional(claim: dict[str, Any], a: np.ndarray, b: np.ndarray, dci: stats.CI,
                 alpha: float) -> tuple[float, float, str, str, float]:
    """``less``/``greater`` (with an optional margin): (p, Wilcoxon p, verdict, why, seeds needed)."""
    test = claim["test"]
    m = _margin(claim, b)
    # a - b < -m  <=>  (a + m) - b < 0;   a - b > m  <=>  (a - m) - b > 0
    shifted = a + m if test == "less" else a - m
    main = stats.paired_t(shifted, b, test)
    other = stats.paired_t(shifted, b, "greater" if test == "less" else "less")
    p_w = stats.wilcoxon(shifted, b, test).p_value
    d = shifted - b
    wrong_way = float(np.mean(d)) > 0 if test == "less" else float(np.mean(d)) < 0
    rel = "<" if test == "less" else ">"
    shown_bound = f"a − b {rel} {'−' if test == 'less' else ''}{_num(m)}" if m else f"a {rel} b"
    p, name = main.p_value, f"paired t ({shown_bound})"
    if p < alpha:
        return p, p_w, "reproduced", f"{name} p = {p:.2g} < {alpha:g}", math.nan
    if other.p_value < alpha:
        return p, p_w, "not reproduced", f"opposite direction: paired t p = {other.p_value:.2g} < {alpha:g}", math.nan
    if wrong_way and len(a) >= 5:
        return p, p_w, "not reproduced", f"mean in the wrong direction with n = {len(a)} (p = {p:.2g})", math.nan
    toward = -d if test == "less" else d
    n = seeds_needed(toward if float(np.mean(toward)) > 0 else -toward, alpha)
    return p, p_w, "inconclusive", f"{name} p = {p:.2g} ≥ {alpha:g}", n


def _margin(claim: dict[str, Any], b: np.ndarray) -> float:
    if claim["margin"] is None:
        return 0.0
    return claim["margin"] * (abs(float(np.mean(b))) if claim["margin_relative"] else 1.0)


def _with_margin(claim: dict[str, Any], a: np.ndarray, b: np.ndarray, dci: stats.CI,
                 alpha: float) -> tuple[float, float, str, str, float]:
    """``noninferior``/``equivalent``: (p, Wilcoxon p, verdict, why, seeds needed)."""
    margin = _margin(claim, b)
    m_txt = f"margin {_num(margin)}"
    if claim["margin_relative"]:
        m_txt += f" = {_num(claim['margin'])} × |mean b|"
    # Wilcoxon versions of the same hypotheses, on the margin-shifted differences
    w_above = stats.wilcoxon(a + margin, b, "greater").p_value  # H1: a - b > -margin
    w_below = stats.wilcoxon(a - margin, b, "less").p_value  # H1: a - b < +margin
    d = a - b
    if claim["test"] == "noninferior":
        hib = claim["higher_is_better"]
        p = stats.noninferiority(a, b, margin, higher_is_better=hib).p_value
        p_w = w_above if hib else w_below
        beyond = dci.high <= -margin if hib else dci.low >= margin
        name, outside = "non-inferiority t", f"CI wholly beyond {'−' if hib else '+'}{m_txt}"
        toward = d + margin if hib else margin - d
    else:
        p = stats.tost(a, b, margin).p_value
        p_w = max(w_above, w_below)
        beyond = dci.high <= -margin or dci.low >= margin
        name, outside = "TOST", f"CI wholly outside ±{m_txt}"
        # the binding side: the bound the mean is nearer to
        toward = d + margin if float(np.mean(d)) < 0 else margin - d
    if p < alpha:
        return p, p_w, "reproduced", f"{name} ({m_txt}) p = {p:.2g} < {alpha:g}", math.nan
    if beyond:
        return p, p_w, "not reproduced", f"{outside} (p = {p:.2g})", math.nan
    n = seeds_needed(toward if float(np.mean(toward)) > 0 else -toward, alpha)
    return p, p_w, "inconclusive", f"{name} ({m_txt}) p = {p:.2g} ≥ {alpha:g}", n


def _evaluate_link(claim: dict[str, Any], paired: pd.DataFrame, label: str,
                   cfg: StatsSettings) -> _Link:
    """Test one a-vs-b pair; the verdict's CI is the t interval of the mean of a - b."""
    a, b = paired["a"].to_numpy(float), paired["b"].to_numpy(float)
    if len(a) < 2:
        return _Link(label, len(a), "", None, math.nan, math.nan, "inconclusive", "n < 2")
    dci = stats.t_interval(a - b, cfg.confidence)
    if claim["transform"] == "ratio":
        if np.any(b == 0):
            raise ClaimError(f"claim {claim['id']!r}: transform ratio with b = 0 ({label})")
        shown = stats.t_interval(a / b, cfg.confidence)
    elif VALUE in paired.attrs:
        shown = stats.t_interval(a, cfg.confidence)  # a itself, beside the constant
    else:
        shown = dci
    judge = _directional if claim["test"] in ("less", "greater") else _with_margin
    p, p_w, verdict, why, n_more = judge(claim, a, b, dci, cfg.alpha)
    reason = f"mean a−b = {_num(dci.estimate)} [{_num(dci.low)}, {_num(dci.high)}], {why}"
    ours = fmt_ci(shown.estimate, shown.low, shown.high)
    return _Link(label, len(a), ours, shown, p, p_w, verdict, reason, n_more)


def _row(claim: dict[str, Any], **values: Any) -> dict[str, Any]:
    """A scorecard row; unset results are empty/NaN (for claims that were not run)."""
    base = {k: claim[k] for k in ("id", "paper", "statement", "source", "metric", "test", "expected",
                                  "paper_value", "threshold", "tested_at", "measured")}
    empty = {"ours": "", "estimate": math.nan, "ci_low": math.nan, "ci_high": math.nan,
             "n_seeds": 0, "p_value": math.nan, "p_holm": math.nan, "p_wilcoxon": math.nan,
             "preconditions": "", "seeds_needed": math.nan}
    margin = math.nan if claim["margin"] is None else claim["margin"]
    return {**base, **empty, "margin": margin, **values}


def _largest(values: Sequence[float]) -> float:
    """Largest value, or NaN if any is NaN (a link that could not be tested)."""
    return math.nan if any(math.isnan(v) for v in values) else max(values)


def _scalar(spec: Mapping[str, Any], tables: Mapping[str, pd.DataFrame]) -> float:
    """The single value ``spec`` (``value_from``) names in a results table."""
    table = tables.get(spec["table"])
    if table is None:
        raise _NotRun(f"table {spec['table']!r} not available")
    try:
        rows = stats.select(table, spec["where"]) if spec["where"] else table
    except stats.EmptySelectionError as err:
        raise _NotRun(str(err)) from err
    if spec["metric"] not in rows.columns:
        raise ValueError(f"value_from: table {spec['table']!r} has no column {spec['metric']!r}")
    values = rows[spec["metric"]].dropna().unique()
    if len(values) != 1:
        raise ValueError(f"value_from: {spec['table']}[{spec['where']}].{spec['metric']} gives "
                         f"{len(values)} distinct values, not one")
    return float(values[0])


def _resolve(b: Mapping[str, Any], tables: Mapping[str, pd.DataFrame]) -> Mapping[str, Any]:
    """``b`` with a ``value_from`` replaced by its value."""
    if VALUE_FROM in b:
        return {VALUE: _scalar(b[VALUE_FROM], tables)}
    return b


def _pair(table: pd.DataFrame, metric: str, a: Mapping[str, Any], b: Mapping[str, Any]) -> pd.DataFrame:
    """Seeds with a's metric and b's (or the constant ``value``)."""
    if VALUE not in b:
        return stats.pair_by_seed(table, metric, a, b)
    paired = stats.pair_by_seed(table, metric, a, a)
    paired["b"] = b[VALUE]
    paired.attrs[VALUE] = b[VALUE]
    return paired


# ---------------------------------------------------------------- conditions


@dataclass(frozen=True)
class ConditionResult:
    """A precondition evaluated on results: met, not met, or not run (with what was measured)."""

    name: str
    kind: str
    statement: str
    status: str  # "met" | "not met" | "not run"
    measured: str

    def line(self) -> str:
        return f"{self.name}: {self.status} ({self.measured})"


def evaluate_condition(cond: dict[str, Any], tables: Mapping[str, pd.DataFrame],
                       cfg: StatsSettings) -> ConditionResult:
    """Evaluate one validated condition (see :func:`_check_condition`)."""
    def result(status: str, measured: str) -> ConditionResult:
        return ConditionResult(cond["name"], cond["kind"], cond["statement"], status, measured)

    table = tables.get(cond["table"])
    if table is None:
        return result("not run", f"table {cond['table']!r} not available")
    try:
        b = _resolve(cond["b"], tables)
        m, test = cond["margin"], cond["test"]
        if test.startswith("each_"):
            rows = stats.select(table, cond["a"])
            if cond["metric"] not in rows.columns:
                raise ValueError(f"table {cond['table']!r} has no column {cond['metric']!r}")
            vals = rows[cond["metric"]].to_numpy(float)
            if vals.size == 0:
                return result("not run", f"no rows of {cond['table']!r} match {cond['a']}")
            bound = b[VALUE] + m if test == "each_at_least" else b[VALUE] - m
            worst = float(np.nanmin(vals) if test == "each_at_least" else np.nanmax(vals))
            ok = not np.isnan(vals).any() and (worst >= bound if test == "each_at_least" else worst <= bound)
            sign = "≥" if test == "each_at_least" else "≤"
            what = "min" if test == "each_at_least" else "max"
            text = f"{what} {cond['metric']} over {len(vals)} runs = {_num(worst)}, needs {sign} {_num(bound)}"
            return result("met" if ok else "not met", text + (f" ({cond['threshold']})" if cond["threshold"] else ""))
        paired = _pair(table, cond["metric"], cond["a"], b)
    except (_NotRun, stats.EmptySelectionError) as err:
        return result("not run", str(err))
    a_, b_ = paired["a"].to_numpy(float), paired["b"].to_numpy(float)
    if len(a_) < 2:
        return result("not met", f"n = {len(a_)} < 2 seeds")
    shifted = a_ + m if test == "less" else a_ - m
    p = stats.paired_t(shifted, b_, test).p_value
    dci = stats.t_interval(a_ - b_, cfg.confidence)
    aci = stats.t_interval(a_, cfg.confidence)
    other = f"{_num(b[VALUE])}" if VALUE in b else f"b (mean {_num(float(np.mean(b_)))})"
    rel = "<" if test == "less" else ">"
    bound = f" {'−' if test == 'less' else '+'} {_num(m)}" if m else ""
    text = (f"a = {fmt_ci(aci.estimate, aci.low, aci.high)} vs {other}; a − b = "
            f"{_num(dci.estimate)} [{_num(dci.low)}, {_num(dci.high)}], needs a {rel} b{bound}: "
            f"paired t p = {p:.2g}, n = {len(a_)}")
    return result("met" if p < cfg.alpha else "not met", text)


def evaluate_conditions(conditions: Mapping[str, Any], tables: Mapping[str, pd.DataFrame],
                        stats_cfg: Mapping[str, Any]) -> dict[str, ConditionResult]:
    """Every condition, evaluated: name -> :class:`ConditionResult`."""
    cfg = StatsSettings.from_config(stats_cfg)
    checked = _normalize_conditions(conditions)
    out = {}
    for name, cond in checked.items():
        try:
            out[name] = evaluate_condition(cond, tables, cfg)
        except ValueError as err:
            raise ClaimError(f"condition {name!r}: {err}") from err
    return out


def conditions_frame(results: Mapping[str, ConditionResult]) -> pd.DataFrame:
    return pd.DataFrame([{"name": r.name, "kind": r.kind, "statement": r.statement,
                          "measured": r.measured, "status": r.status} for r in results.values()],
                        columns=list(COND_COLUMNS))


# ---------------------------------------------------------------- claims


def _evaluate_claim(claim: dict[str, Any], tables: Mapping[str, pd.DataFrame],
                    cfg: StatsSettings) -> dict[str, Any]:
    table = tables.get(claim["table"])
    if table is None:
        return _row(claim, verdict="not run", reason=f"table {claim['table']!r} not available")
    try:
        resolved = [(a, _resolve(b, tables)) for a, b in claim["links"]]  # value_from read once
        pairs = [_pair(table, claim["metric"], a, b) for a, b in resolved]
    except (stats.EmptySelectionError, _NotRun) as err:
        return _row(claim, verdict="not run", reason=str(err))
    except ValueError as err:
        raise ClaimError(f"claim {claim['id']!r}: {err}") from err
    links = [_evaluate_link(claim, paired, _link_label(a, b), cfg) for paired, (a, b) in zip(pairs, resolved)]

    verdicts = [lk.verdict for lk in links]
    if all(v == "reproduced" for v in verdicts):
        verdict = "reproduced"
    elif "not reproduced" in verdicts:
        verdict = "not reproduced"
    else:
        verdict = "inconclusive"
    if verdict == "not reproduced":
        key = next(lk for lk in links if lk.verdict == "not reproduced")
    else:  # the weakest link: untestable first, then the largest p-value
        key = max(links, key=lambda lk: (math.isnan(lk.p_value), lk.p_value))
    reason = key.reason
    if claim["is_chain"]:
        ok = verdicts.count("reproduced")
        reason = f"{ok}/{len(links)} links hold; {key.label}: {reason}"
    shown = key.shown
    undecided = [lk.seeds_needed for lk in links if lk.verdict == "inconclusive"]
    return _row(
        claim,
        ours=" → ".join(lk.ours or "n/a" for lk in links),
        estimate=shown.estimate if shown else math.nan,
        ci_low=shown.low if shown else math.nan,
        ci_high=shown.high if shown else math.nan,
        n_seeds=min(lk.n for lk in links),
        p_value=_largest([lk.p_value for lk in links]),
        p_wilcoxon=_largest([lk.p_wilcoxon for lk in links]),
        verdict=verdict,
        reason=reason,
        seeds_needed=_largest(undecided) if undecided and verdict == "inconclusive" else math.nan,
    )


def evaluate_claims(
    claims: Sequence[Mapping[str, Any]],
    tables: Mapping[str, pd.DataFrame],
    stats_cfg: Mapping[str, Any],
    conditions: Mapping[str, Any] | None = None,
    condition_results: Mapping[str, ConditionResult] | None = None,
) -> pd.DataFrame:
    """Evaluate every claim against ``tables`` (name -> tidy run-level table).

    ``stats_cfg`` is ``{"alpha": ..., "bootstrap": {"n_resamples", "seed",
    "confidence"}}``.  ``conditions`` are the named preconditions the claims
    refer to (evaluated here unless ``condition_results`` are given).  Returns
    one row per claim, in claim order, with the columns of :data:`COLUMNS`.
    For a chain, ``estimate``/``ci_*`` belong to the decisive link (the first
    failing one, else the weakest one), ``n_seeds`` is the smallest link n and
    the p-values are the largest.

    The order of judgement: the test's own outcome; Holm within each paper
    (over the claims that are testable and not by construction); then the
    source's polarity (``expected: fails`` swaps reproduced and not
    reproduced); then preconditions (one not met: *not testable here*; one
    not run: *not run*); then ``by_construction``.
    """
    cfg = StatsSettings.from_config(stats_cfg)
    checked = _normalize(list(claims))
    conds = _normalize_conditions(conditions)
    _check_references(checked, conds)
    if condition_results is None:
        condition_results = evaluate_conditions(conditions or {}, tables, stats_cfg)
    rows = [_evaluate_claim(c, tables, cfg) for c in checked]
    df = pd.DataFrame(rows, columns=list(COLUMNS))
    blocked = {c["id"]: _blocking(c, condition_results) for c in checked}
    for i, c in enumerate(checked):
        df.at[i, "preconditions"] = "; ".join(condition_results[n].line() for n in c["preconditions"])
    df = _holm_within_papers(df, checked, cfg.alpha, blocked)
    df = _apply_polarity(df, checked)
    df = _apply_preconditions(df, checked, blocked)
    df = _apply_construction(df, checked)
    return df.astype({"n_seeds": int})


def _blocking(claim: dict[str, Any], results: Mapping[str, ConditionResult]) -> tuple[str, str] | None:
    """(verdict, reason) when a precondition keeps the claim from being tested, else None."""
    for status, verdict in (("not run", "not run"), ("not met", "not testable here")):
        bad = [results[n] for n in claim["preconditions"] if results[n].status == status]
        if bad:
            what = "; ".join(f"precondition {r.name} {status}: {r.measured}" for r in bad)
            return verdict, what
    return None


def _holm_within_papers(df: pd.DataFrame, claims: Sequence[dict[str, Any]], alpha: float,
                        blocked: Mapping[str, Any] | None = None) -> pd.DataFrame:
    """Holm-adjust the p-values of each paper's tested claims; judge by the adjusted value.

    The family is a paper's claims that were tested (a p-value), whose
    preconditions hold and that do not hold by construction.  A claim whose
    test held at its raw p-value but not at its adjusted one becomes
    inconclusive; "not reproduced" outcomes rest on the opposite test or the
    CI and are left as they are.
    """
    df = df.copy()
    blocked = blocked or {}
    out = {c["id"] for c in claims if c["by_construction"] or blocked.get(c["id"])}
    in_family = df["p_value"].notna() & ~df["id"].isin(out)
    for _, idx in df[in_family].groupby("paper").groups.items():
        df.loc[idx, "p_holm"] = stats.holm(df.loc[idx, "p_value"].to_numpy(float))
    for i in df.index[in_family]:
        if df.at[i, "verdict"] == "reproduced" and not df.at[i, "p_holm"] < alpha:
            df.at[i, "verdict"] = "inconclusive"
            df.at[i, "reason"] = (f"{df.at[i, 'reason']}; Holm-adjusted within {df.at[i, 'paper']}: "
                                  f"p = {df.at[i, 'p_holm']:.2g} ≥ {alpha:g}")
    return df


def _apply_polarity(df: pd.DataFrame, claims: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """``expected: fails``: the source found the test fails, so ours failing reproduces it."""
    swap = {"reproduced": "not reproduced", "not reproduced": "reproduced"}
    for i, c in enumerate(claims):
        if c["expected"] != "fails" or df.at[i, "verdict"] == "not run":
            continue
        v = df.at[i, "verdict"]
        ours = {"reproduced": "our test holds", "not reproduced": "our test fails conclusively",
                "inconclusive": "our test is inconclusive"}[v]
        df.at[i, "verdict"] = swap.get(v, v)
        df.at[i, "reason"] = f"the source reports this test fails; {ours}: {df.at[i, 'reason']}"
    return df


def _apply_preconditions(df: pd.DataFrame, claims: Sequence[dict[str, Any]],
                         blocked: Mapping[str, Any]) -> pd.DataFrame:
    for i, c in enumerate(claims):
        hit = blocked.get(c["id"])
        if hit is None or df.at[i, "verdict"] == "not run":
            continue
        verdict, why = hit
        df.at[i, "reason"] = f"{why} (would have been: {df.at[i, 'verdict']}; {df.at[i, 'reason']})"
        df.at[i, "verdict"] = verdict
        df.at[i, "seeds_needed"] = math.nan
    return df


def _apply_construction(df: pd.DataFrame, claims: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """Rows that hold whatever the data are labelled so, with what makes them hold."""
    for i, c in enumerate(claims):
        if not c["by_construction"] or df.at[i, "verdict"] in ("not run", "not testable here"):
            continue
        df.at[i, "reason"] = (f"holds by construction: {c['by_construction']} (was: {df.at[i, 'verdict']}); "
                              f"{df.at[i, 'reason']}")
        df.at[i, "verdict"] = "by construction"
        df.at[i, "seeds_needed"] = math.nan
    return df


# ----------------------------------------------------------------------------
# Output
# ----------------------------------------------------------------------------


def write_scorecard(
    df: pd.DataFrame,
    md_path: str | os.PathLike[str],
    csv_path: str | os.PathLike[str],
    title: str = "Reproduction scorecard",
    stale: pd.DataFrame | None = None,
    conditions: pd.DataFrame | None = None,
    conditions_csv: str | os.PathLike[str] | None = None,
) -> None:
    """Write the scorecard as Markdown (verdict counts, the claims, the preconditions and
    negative controls) and CSV (all columns; the conditions in ``conditions_csv``).

    ``stale`` lists runs made by other code than the current revision (or a
    dirty tree); they are named under the table so that stale results show.
    """
    counts = df["verdict"].value_counts()
    tally = " · ".join(f"{int(counts.get(v, 0))} {v}" for v in VERDICTS)
    tested = int(sum(counts.get(v, 0) for v in ("reproduced", "not reproduced", "inconclusive")))

    def figure(r: pd.Series) -> str:
        pv = r["paper_value"]
        missing = pv is None or (isinstance(pv, float) and math.isnan(pv))
        text = f"{r['paper']}: {r['source']}" + ("" if missing else f"; paper: {pv}")
        if r.get("expected") == "fails":
            text += "; the source reports this test **fails**"
        th = r.get("threshold")
        if isinstance(th, str) and th:
            text += f"; threshold: {th}"
        return text

    def pvals(r: pd.Series) -> str:
        if pd.isna(r["p_value"]):
            return ""
        adj = "" if pd.isna(r["p_holm"]) else f" / {r['p_holm']:.2g}"
        return f"{r['p_value']:.2g}{adj}"

    def statement(r: pd.Series) -> str:
        at = r.get("tested_at")
        where = f" (tested at {at})" if isinstance(at, str) and at else ""
        mark = " [measured]" if bool(r.get("measured")) is True else ""
        return f"`{r['id']}`: {r['statement']}{where}{mark}"

    def why(r: pd.Series) -> str:
        text = str(r["reason"])
        n = r.get("seeds_needed")
        if r["verdict"] == "inconclusive" and n is not None and not pd.isna(n):
            text += f"; about {int(n)} seeds would decide it at the observed effect and spread (power {POWER:g})"
        return text

    def pre(r: pd.Series) -> str:
        v = r.get("preconditions")
        return v if isinstance(v, str) else ""

    view = pd.DataFrame({
        "claim": [statement(r) for _, r in df.iterrows()],
        "paper's figure": [figure(r) for _, r in df.iterrows()],
        "ours (95 % t CI)": df["ours"].fillna(""),
        "seeds": df["n_seeds"].astype(int),
        "p raw / Holm": [pvals(r) for _, r in df.iterrows()],
        "preconditions": [pre(r) for _, r in df.iterrows()],
        "verdict": df["verdict"],
        "reason": [why(r) for _, r in df.iterrows()],
    })
    notes = ("p-values: one-sided paired t (or non-inferiority / TOST) on per-seed differences; "
             "Holm-adjusted within each paper over the testable claims, and the verdict uses the "
             "adjusted value. Intervals: Student-t over seeds. A claim is *not testable here* when a "
             "precondition (the method below its data's floor, ahead of its negative control, past "
             "its horizon) is not met: it is neither reproduced nor not reproduced. "
             f"{tested} of {len(df)} claims were testable and tested.")
    text = f"# {title}\n\n**{len(df)} claims:** {tally}\n\n{notes}\n\n{markdown_table(view)}"
    if conditions is not None and len(conditions):
        text += ("\n\n## Preconditions and negative controls\n\nEach condition is computed from the "
                 "results; a claim that names one is tested only where it is met.\n\n"
                 + markdown_table(conditions[list(COND_COLUMNS)]))
    if stale is not None and len(stale):
        text += ("\n\n## Results made by other code\n\nThese runs were recorded at another revision "
                 "than the current one, or from a tree with uncommitted changes; rerun them "
                 "(`snakemake --forcerun <rule>`) before trusting the rows that use them.\n\n"
                 + markdown_table(stale))
    atomic_write_text(md_path, text)
    write_table(df, csv_path)
    if conditions_csv is not None:
        frame = conditions if conditions is not None else pd.DataFrame(columns=list(COND_COLUMNS))
        write_table(frame, conditions_csv)


def _read_table(path: str | os.PathLike[str]) -> pd.DataFrame:
    suffix = Path(path).suffix.lower()
    if suffix == ".csv":
        return pd.read_csv(path)
    if suffix in (".parquet", ".pq"):
        return pd.read_parquet(path)
    raise ValueError(f"cannot read {path}: expected .csv or .parquet")


def stale_runs(tables: Mapping[str, pd.DataFrame], current: str | None) -> pd.DataFrame:
    """Runs of the summary tables whose recorded code differs from ``current``.

    Reads the ``git_commit`` and ``git_dirty`` columns a summary table carries
    (one row per run); tables without them are skipped, and so is everything
    when there is no current revision to compare with (a tree outside git).
    """
    rows = []
    if not current:
        return pd.DataFrame(rows, columns=["table", "run", "seed", "commit", "dirty"])
    for name, t in tables.items():
        if "git_commit" not in t.columns:
            continue
        dirty = t["git_dirty"].fillna(False).astype(bool) if "git_dirty" in t.columns else False
        other = t["git_commit"].astype(str) != str(current)
        bad = t[other | dirty]
        for _, r in bad.iterrows():
            rows.append({"table": name, "run": r.get("run", ""), "seed": r.get("seed", ""),
                         "commit": str(r["git_commit"])[:10],
                         "dirty": bool(r.get("git_dirty", False))})
    return pd.DataFrame(rows, columns=["table", "run", "seed", "commit", "dirty"])


def main_scorecard(
    claims_path: str | os.PathLike[str],
    summaries: Mapping[str, str | os.PathLike[str]],
    stats_cfg: Mapping[str, Any],
    md_out: str | os.PathLike[str],
    csv_out: str | os.PathLike[str],
    paper: str | None = None,
    conditions_out: str | os.PathLike[str] | None = None,
) -> pd.DataFrame:
    """Load claims and summary tables (CSV or parquet by suffix), evaluate, write, return.

    With ``paper``, only that paper's claims (and the conditions they name)
    are evaluated (its own tables suffice): the scorecard section a paper's
    target needs.
    """
    from .runs import git_revision

    tables = {name: _read_table(p) for name, p in summaries.items()}
    claims, conditions = load_claims_file(claims_path)
    if paper is not None:
        claims = [c for c in claims if c["paper"] == paper]
    used = {n for c in claims for n in c.get("preconditions", [])}
    conditions = {n: c for n, c in conditions.items() if n in used}
    results = evaluate_conditions(conditions, tables, stats_cfg)
    df = evaluate_claims(claims, tables, stats_cfg, conditions, results)
    title = "Reproduction scorecard" + (f": {paper}" if paper else "")
    write_scorecard(df, md_out, csv_out, title=title,
                    stale=stale_runs(tables, git_revision()["commit"]),
                    conditions=conditions_frame(results), conditions_csv=conditions_out)
    return df


def merge_scorecards(parts: Sequence[str | os.PathLike[str]], md_out: str | os.PathLike[str],
                     csv_out: str | os.PathLike[str]) -> pd.DataFrame:
    """One scorecard from the per-paper sections (each already Holm-adjusted within its paper).

    Each part ``X.csv`` may have its conditions beside it in ``X_conditions.csv``.
    """
    frames = [pd.read_csv(p) for p in parts]
    df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=list(COLUMNS))
    df = df.astype({"n_seeds": int})
    conds, stale_parts = [], []
    for p in parts:
        side = Path(p).with_name(f"{Path(p).stem}_conditions.csv")
        if side.exists() and side.stat().st_size:
            conds.append(pd.read_csv(side))
        md = Path(p).with_suffix(".md")
        if md.exists() and "## Results made by other code" in md.read_text(encoding="utf-8"):
            stale_parts.append(Path(p).stem)
    stale = pd.DataFrame({"table": [f"see paper/scorecard/{s}.md" for s in stale_parts],
                          "run": "", "seed": "", "commit": "", "dirty": ""}) if stale_parts else None
    conditions = pd.concat(conds, ignore_index=True) if conds else None
    write_scorecard(df, md_out, csv_out, stale=stale, conditions=conditions)
    return df
