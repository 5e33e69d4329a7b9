"""Reproduction scorecard: test each paper claim against our run-level results.

A claim compares two settings ``a`` and ``b`` of one results table (or each
consecutive pair of a ``chain`` of settings), paired by seed:

* ``less`` / ``greater``: one-sided paired t test of a < b (a > b).
  Reproduced if p < alpha; not reproduced if the opposite one-sided test
  rejects, or the mean difference points the wrong way with n >= 5.
* ``noninferior``: paired non-inferiority t test with the claim's margin.
  Not reproduced if the BCa CI of a - b lies wholly beyond the margin.
* ``equivalent``: TOST with bounds (-margin, +margin).  Not reproduced if the
  CI of a - b lies wholly outside the bounds.

Anything else is *inconclusive*; claims whose table has not been produced are
*not run*.  A chain holds only if every link holds (intersection-union test,
so the chain's p-value is the largest link p-value, with no multiplicity
penalty).  The Wilcoxon signed-rank p-value of the same hypothesis is reported
alongside as a distribution-free cross-check; it does not enter the verdict.

Tests are always on the paired differences a - b (a relative margin is
``margin × |mean(b)|``); ``transform: ratio`` only changes what ``ours``,
``estimate`` and ``ci_*`` report (the mean of a/b with its BCa CI).
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

VERDICTS = ("reproduced", "not reproduced", "inconclusive", "by construction", "not run")
TESTS = ("less", "greater", "noninferior", "equivalent")
PAPERS = ("P1", "P2", "P3", "P4", "foundation")
TRANSFORMS = ("diff", "ratio")
REQUIRED_KEYS = ("id", "paper", "source", "statement", "table", "metric", "test")
OPTIONAL_KEYS = (
    "paper_value", "a", "b", "value", "chain", "margin", "margin_relative", "higher_is_better",
    "transform", "by_construction", "tested_at",
)
COLUMNS = (
    "id", "paper", "statement", "source", "metric", "test", "paper_value", "ours", "estimate",
    "ci_low", "ci_high", "n_seeds", "p_value", "p_holm", "p_wilcoxon", "margin", "tested_at",
    "verdict", "reason",
)
# a/b selections name table columns; `value` compares a with a constant instead of b
VALUE = "__value__"


class ClaimError(ValueError):
    """A claim is malformed or cannot be evaluated against its table."""


# ----------------------------------------------------------------------------
# Claims and settings
# ----------------------------------------------------------------------------


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
        if not isinstance(claim[key], str) or not claim[key].strip():
            raise bad(key, "must be a non-empty string")
    if claim["paper"] not in PAPERS:
        raise bad("paper", f"{claim['paper']!r} is not one of {PAPERS}")
    test = claim["test"]
    if test not in TESTS:
        raise bad("test", f"{test!r} is not one of {TESTS}")
    pv = claim.get("paper_value")
    if pv is not None and (isinstance(pv, bool) or not isinstance(pv, (int, float, str))):
        raise bad("paper_value", "must be a number, a string or null")

    has_pair, has_chain = "a" in claim or "b" in claim or "value" in claim, "chain" in claim
    if has_pair == has_chain:
        raise bad("chain" if has_chain else "a", "give exactly one of a/b, a/value or chain")
    if has_pair and "value" in claim:
        v = claim["value"]
        if "b" in claim:
            raise bad("value", "give b or value, not both")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise bad("value", "must be a finite number")
        if not isinstance(claim.get("a"), Mapping) or not claim["a"]:
            raise bad("a", "must be a non-empty mapping of column: value")
        links = [(dict(claim["a"]), {VALUE: float(v)})]
    elif has_pair:
        for key in ("a", "b"):
            if not isinstance(claim.get(key), Mapping) or not claim[key]:
                raise bad(key, "must be a non-empty mapping of column: value")
        links = [(dict(claim["a"]), dict(claim["b"]))]
    else:
        chain = claim["chain"]
        if (
            not isinstance(chain, Sequence) or isinstance(chain, str) or len(chain) < 2
            or not all(isinstance(s, Mapping) and s for s in chain)
        ):
            raise bad("chain", "must be a list of at least 2 non-empty mappings")
        links = [(dict(x), dict(y)) for x, y in zip(chain[:-1], chain[1:])]

    margin = claim.get("margin")
    if test in ("noninferior", "equivalent"):
        if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not margin >= 0:
            raise bad("margin", f"test {test!r} needs a number >= 0")
    elif margin is not None or "margin_relative" in claim:
        raise bad("margin" if margin is not None else "margin_relative",
                  f"only applies to noninferior/equivalent, not {test!r}")
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
    construction = claim.get("by_construction", False)
    if not isinstance(construction, bool):
        raise bad("by_construction", "must be true or false")
    tested_at = claim.get("tested_at", "")
    if not isinstance(tested_at, str):
        raise bad("tested_at", "must be a string (the setting the claim is tested at, e.g. c/mu = 0.5)")

    return {
        **{k: claim[k] for k in REQUIRED_KEYS},
        "paper_value": pv,
        "links": links,
        "is_chain": has_chain,
        "margin": None if margin is None else float(margin),
        "margin_relative": relative,
        "higher_is_better": hib,
        "transform": transform,
        "by_construction": construction,
        "tested_at": tested_at,
    }


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


def validate_claims(claims: Sequence[Any]) -> None:
    """Raise :class:`ClaimError` naming the claim id and key if any claim is malformed.

    Claims follow the schema of ``config/claims.yaml``; ids must be unique.
    """
    _normalize(claims)


def load_claims(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Read and validate claims from YAML (a list, or a mapping with key ``claims``)."""
    data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    if isinstance(data, Mapping) and "claims" in data:
        data = data["claims"]
    claims = data if data is not None else []
    validate_claims(claims)
    return list(claims)


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


def _num(x: float) -> str:
    return f"{x:.3g}"


def _link_label(a: Mapping[str, Any], b: Mapping[str, Any]) -> str:
    if VALUE in b:
        return f"{','.join(f'{k}={v}' for k, v in a.items())} vs {_num(b[VALUE])}"
    keys = [k for k in dict.fromkeys([*a, *b]) if a.get(k) != b.get(k)] or list(a)
    side = lambda s: ",".join(f"{k}={s.get(k)}" for k in keys)  # noqa: E731
    return f"{side(a)} vs {side(b)}"


def _directional(claim: dict[str, Any], a: np.ndarray, b: np.ndarray, dci: stats.CI,
                 alpha: float) -> tuple[float, float, str, str]:
    """``less``/``greater``: (p, Wilcoxon p, verdict, why)."""
    test = claim["test"]
    main = stats.paired_t(a, b, test)
    other = stats.paired_t(a, b, "greater" if test == "less" else "less")
    p_w = stats.wilcoxon(a, b, test).p_value
    wrong_way = dci.estimate > 0 if test == "less" else dci.estimate < 0
    p, name = main.p_value, f"paired t (a {'<' if test == 'less' else '>'} b)"
    if p < alpha:
        return p, p_w, "reproduced", f"{name} p = {p:.2g} < {alpha:g}"
    if other.p_value < alpha:
        return p, p_w, "not reproduced", f"opposite direction: paired t p = {other.p_value:.2g} < {alpha:g}"
    if wrong_way and len(a) >= 5:
        return p, p_w, "not reproduced", f"mean in the wrong direction with n = {len(a)} (p = {p:.2g})"
    return p, p_w, "inconclusive", f"{name} p = {p:.2g} ≥ {alpha:g}"


def _with_margin(claim: dict[str, Any], a: np.ndarray, b: np.ndarray, dci: stats.CI,
                 alpha: float) -> tuple[float, float, str, str]:
    """``noninferior``/``equivalent``: (p, Wilcoxon p, verdict, why)."""
    margin = claim["margin"] * (abs(float(np.mean(b))) if claim["margin_relative"] else 1.0)
    m_txt = f"margin {_num(margin)}"
    if claim["margin_relative"]:
        m_txt += f" = {_num(claim['margin'])} × |mean b|"
    # Wilcoxon versions of the same hypotheses, on the margin-shifted differences
    w_above = stats.wilcoxon(a + margin, b, "greater").p_value  # H1: a - b > -margin
    w_below = stats.wilcoxon(a - margin, b, "less").p_value  # H1: a - b < +margin
    if claim["test"] == "noninferior":
        hib = claim["higher_is_better"]
        p = stats.noninferiority(a, b, margin, higher_is_better=hib).p_value
        p_w = w_above if hib else w_below
        beyond = dci.high <= -margin if hib else dci.low >= margin
        name, outside = "non-inferiority t", f"CI wholly beyond {'−' if hib else '+'}{m_txt}"
    else:
        p = stats.tost(a, b, margin).p_value
        p_w = max(w_above, w_below)
        beyond = dci.high <= -margin or dci.low >= margin
        name, outside = "TOST", f"CI wholly outside ±{m_txt}"
    if p < alpha:
        return p, p_w, "reproduced", f"{name} ({m_txt}) p = {p:.2g} < {alpha:g}"
    if beyond:
        return p, p_w, "not reproduced", f"{outside} (p = {p:.2g})"
    return p, p_w, "inconclusive", f"{name} ({m_txt}) p = {p:.2g} ≥ {alpha:g}"


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
    p, p_w, verdict, why = judge(claim, a, b, dci, cfg.alpha)
    reason = f"mean a−b = {_num(dci.estimate)} [{_num(dci.low)}, {_num(dci.high)}], {why}"
    ours = fmt_ci(shown.estimate, shown.low, shown.high)
    return _Link(label, len(a), ours, shown, p, p_w, verdict, reason)


def _row(claim: dict[str, Any], **values: Any) -> dict[str, Any]:
    """A scorecard row; unset results are empty/NaN (for claims that were not run)."""
    base = {k: claim[k] for k in ("id", "paper", "statement", "source", "metric", "test",
                                  "paper_value", "tested_at")}
    empty = {"ours": "", "estimate": math.nan, "ci_low": math.nan, "ci_high": math.nan,
             "n_seeds": 0, "p_value": math.nan, "p_holm": math.nan, "p_wilcoxon": math.nan}
    margin = math.nan if claim["margin"] is None else claim["margin"]
    return {**base, **empty, "margin": margin, **values}


def _largest(values: Sequence[float]) -> float:
    """Largest value, or NaN if any is NaN (a link that could not be tested)."""
    return math.nan if any(math.isnan(v) for v in values) else max(values)


def _pair(table: pd.DataFrame, metric: str, a: Mapping[str, Any], b: Mapping[str, Any]) -> pd.DataFrame:
    """Seeds with a's metric and b's (or the constant ``value``)."""
    if VALUE not in b:
        return stats.pair_by_seed(table, metric, a, b)
    paired = stats.pair_by_seed(table, metric, a, a)
    paired["b"] = b[VALUE]
    paired.attrs[VALUE] = b[VALUE]
    return paired


def _evaluate_claim(claim: dict[str, Any], tables: Mapping[str, pd.DataFrame],
                    cfg: StatsSettings) -> dict[str, Any]:
    table = tables.get(claim["table"])
    if table is None:
        return _row(claim, verdict="not run", reason=f"table {claim['table']!r} not available")
    try:
        pairs = [_pair(table, claim["metric"], a, b) for a, b in claim["links"]]
    except stats.EmptySelectionError as err:
        return _row(claim, verdict="not run", reason=str(err))
    except ValueError as err:
        raise ClaimError(f"claim {claim['id']!r}: {err}") from err
    links = [
        _evaluate_link(claim, paired, _link_label(a, b), cfg)
        for paired, (a, b) in zip(pairs, claim["links"])
    ]

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
    )


def evaluate_claims(
    claims: Sequence[Mapping[str, Any]],
    tables: Mapping[str, pd.DataFrame],
    stats_cfg: Mapping[str, Any],
) -> pd.DataFrame:
    """Evaluate every claim against ``tables`` (name -> tidy run-level table).

    ``stats_cfg`` is ``{"alpha": ..., "bootstrap": {"n_resamples", "seed",
    "confidence"}}``.  Returns one row per claim, in claim order, with the
    columns of :data:`COLUMNS`.  For a chain, ``estimate``/``ci_*`` belong to
    the decisive link (the first failing one, else the weakest one),
    ``n_seeds`` is the smallest link n and the p-values are the largest.
    """
    cfg = StatsSettings.from_config(stats_cfg)
    checked = _normalize(list(claims))
    rows = [_evaluate_claim(c, tables, cfg) for c in checked]
    df = pd.DataFrame(rows, columns=list(COLUMNS))
    df = _holm_within_papers(df, checked, cfg.alpha)
    return df.astype({"n_seeds": int})


def _holm_within_papers(df: pd.DataFrame, claims: Sequence[dict[str, Any]], alpha: float) -> pd.DataFrame:
    """Holm-adjust the p-values of each paper's tested claims; judge by the adjusted value.

    The family is a paper's claims that were tested (a p-value) and do not
    hold by construction.  A claim reproduced at its raw p-value but not at
    its adjusted one becomes inconclusive; "not reproduced" verdicts rest on
    the opposite test or the CI and are left as they are.  Claims that hold
    by the construction of the simulator are labelled so and kept out of the
    reproduced count.
    """
    df = df.copy()
    construction = {c["id"] for c in claims if c["by_construction"]}
    in_family = df["p_value"].notna() & ~df["id"].isin(construction)
    for _, idx in df[in_family].groupby("paper").groups.items():
        df.loc[idx, "p_holm"] = stats.holm(df.loc[idx, "p_value"].to_numpy(float))
    for i in df.index[in_family]:
        if df.at[i, "verdict"] == "reproduced" and not df.at[i, "p_holm"] < alpha:
            df.at[i, "verdict"] = "inconclusive"
            df.at[i, "reason"] = (f"{df.at[i, 'reason']}; Holm-adjusted within {df.at[i, 'paper']}: "
                                  f"p = {df.at[i, 'p_holm']:.2g} ≥ {alpha:g}")
    for i in df.index[df["id"].isin(construction) & (df["verdict"] != "not run")]:
        df.at[i, "reason"] = f"holds by construction of the simulated clock (was: {df.at[i, 'verdict']}); {df.at[i, 'reason']}"
        df.at[i, "verdict"] = "by construction"
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
) -> None:
    """Write the scorecard as Markdown (verdict counts + summary table) and CSV (all columns).

    ``stale`` lists runs made by other code than the current revision (or a
    dirty tree); they are named under the table so that stale results show.
    """
    counts = df["verdict"].value_counts()
    tally = " · ".join(f"{int(counts.get(v, 0))} {v}" for v in VERDICTS)

    def figure(r: pd.Series) -> str:
        pv = r["paper_value"]
        missing = pv is None or (isinstance(pv, float) and math.isnan(pv))
        return f"{r['paper']}: {r['source']}" + ("" if missing else f"; paper: {pv}")

    def pvals(r: pd.Series) -> str:
        if pd.isna(r["p_value"]):
            return ""
        adj = "" if pd.isna(r["p_holm"]) else f" / {r['p_holm']:.2g}"
        return f"{r['p_value']:.2g}{adj}"

    def statement(r: pd.Series) -> str:
        at = r.get("tested_at")
        where = f" (tested at {at})" if isinstance(at, str) and at else ""
        return f"`{r['id']}`: {r['statement']}{where}"

    view = pd.DataFrame({
        "claim": [statement(r) for _, r in df.iterrows()],
        "paper's figure": [figure(r) for _, r in df.iterrows()],
        "ours (95 % t CI)": df["ours"].fillna(""),
        "seeds": df["n_seeds"].astype(int),
        "p raw / Holm": [pvals(r) for _, r in df.iterrows()],
        "verdict": df["verdict"],
        "reason": df["reason"],
    })
    notes = ("p-values: one-sided paired t (or non-inferiority / TOST) on per-seed differences; "
             "Holm-adjusted within each paper, and the verdict uses the adjusted value. "
             "Intervals: Student-t over seeds.")
    text = f"# {title}\n\n**{len(df)} claims:** {tally}\n\n{notes}\n\n{markdown_table(view)}"
    if stale is not None and len(stale):
        text += ("\n\n## Results made by other code\n\nThese runs were recorded at another revision "
                 "than the current one, or from a tree with uncommitted changes; rerun them "
                 "(`snakemake --forcerun <rule>`) before trusting the rows that use them.\n\n"
                 + markdown_table(stale))
    atomic_write_text(md_path, text)
    write_table(df, csv_path)


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
) -> pd.DataFrame:
    """Load claims and summary tables (CSV or parquet by suffix), evaluate, write, return.

    With ``paper``, only that paper's claims are evaluated (its own tables
    suffice): the scorecard section a paper's target needs.
    """
    from .runs import git_revision

    tables = {name: _read_table(p) for name, p in summaries.items()}
    claims = load_claims(claims_path)
    if paper is not None:
        claims = [c for c in claims if c["paper"] == paper]
    df = evaluate_claims(claims, tables, stats_cfg)
    title = "Reproduction scorecard" + (f": {paper}" if paper else "")
    write_scorecard(df, md_out, csv_out, title=title,
                    stale=stale_runs(tables, git_revision()["commit"]))
    return df


def merge_scorecards(parts: Sequence[str | os.PathLike[str]], md_out: str | os.PathLike[str],
                     csv_out: str | os.PathLike[str]) -> pd.DataFrame:
    """One scorecard from the per-paper sections (each already Holm-adjusted within its paper)."""
    frames = [pd.read_csv(p) for p in parts]
    df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=list(COLUMNS))
    df = df.astype({"n_seeds": int})
    stale_parts = []
    for p in parts:
        md = Path(p).with_suffix(".md")
        if md.exists() and "## Results made by other code" in md.read_text(encoding="utf-8"):
            stale_parts.append(Path(p).stem)
    stale = pd.DataFrame({"table": [f"see paper/scorecard/{s}.md" for s in stale_parts],
                          "run": "", "seed": "", "commit": "", "dirty": ""}) if stale_parts else None
    write_scorecard(df, md_out, csv_out, stale=stale)
    return df
