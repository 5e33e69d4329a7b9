"""Steps to target as a step-efficiency ratio against DDP, with prediction intervals.

The atlas answers two questions apart.  *Time per step* comes from the clock
(the replay, or :mod:`distlab.atlas.projection`); *steps to target* comes as a ratio

    r_t = (steps of technique t to the target) / (steps of DDP to the same target)

measured on the atlas's own no-straggler runs, paired by seed (both see the same
data windows), at every measured (model size, worker count).  Per seed the
observation is ``log r``; a cell's ratio is the geometric mean over its seeds with a
t-interval; at a measured cell the query uses its prediction interval for one more seed,
``t s sqrt(1 + 1/n)``.  Between and near the measured cells the ratio at a query point is the
least-squares fit ``log r = a + b log P + c log N`` over every seed's observation
(a term only where its variable takes two values or more), and its interval is the
fit's *prediction* interval ``t s sqrt(1 + x0' (X'X)^-1 x0)``, which widens with the
query's distance from the measured points (its leverage).

No answer beyond the evidence (:func:`evidence_distance`, in decades outside the
measured range of sizes and of worker counts):

* within ``NEAR`` (10x): the fit above;
* beyond it a ratio the user supplies (``--efficiency ddp=1,diloco=1.9`` or a YAML
  file of the same mapping), or, where opted into or beyond 10x but within ``FAR``
  (100x), a published ratio shipped with its citation (:func:`published`,
  data/atlas/published_efficiency.yaml); a
  technique with neither is not ranked: the query and the map list it apart with its time per
  step and the step ratio it would need to beat the leader (basis ``none``);
* beyond ``FAR`` the query refuses unless ``--efficiency`` is given.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
# Student's t quantile as scipy.stats.t.ppf computes it (stdtrit), without importing scipy.stats
# (about a second of the query's start)
from scipy.special import stdtrit

from ..config.specs import SpecError

NEAR = 1.0   # decades: up to 10x outside the measured sizes / worker counts the measured fit is used
FAR = 2.0    # decades: beyond 100x the query needs --efficiency

# Published step-efficiency ratios (steps of the technique / steps of data-parallel AdamW to the
# same loss), each with its citation, what the source reports and how the ratio follows: a data file
# (data/atlas/published_efficiency.yaml), read and checked by :func:`published`.
PUBLISHED_PATH = "data/atlas/published_efficiency.yaml"
PUBLISHED_KEYS = {"ratio", "lo", "hi", "source", "reports", "reading"}


def check_published(raw, where: str = PUBLISHED_PATH) -> dict[str, dict]:
    """The published ratios of ``raw`` (the file's mapping) after checking every entry:
    :class:`SpecError` naming the first bad key (an unknown key or technique, a ratio that is not a
    positive finite number, an interval that does not hold the ratio, a missing citation)."""
    from .spec import TECHNIQUES

    if not isinstance(raw, dict):
        raise SpecError(f"{where}: must hold a mapping technique: {{ratio, lo, hi, source, reports, reading}}")
    out = {}
    for t, e in raw.items():
        if t not in TECHNIQUES:
            raise SpecError(f"{where}: {t!r}: unknown technique; known: {', '.join(TECHNIQUES)}")
        if not isinstance(e, dict):
            raise SpecError(f"{where}: {t}: must be a mapping of {', '.join(sorted(PUBLISHED_KEYS))}")
        unknown = sorted(set(e) - PUBLISHED_KEYS)
        if unknown:
            raise SpecError(f"{where}: {t}.{unknown[0]}: unknown key; use {', '.join(sorted(PUBLISHED_KEYS))}")
        missing = sorted(PUBLISHED_KEYS - set(e))
        if missing:
            raise SpecError(f"{where}: {t}.{missing[0]}: missing")
        for k in ("ratio", "lo", "hi"):
            v = e[k]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (np.isfinite(v) and v > 0):
                raise SpecError(f"{where}: {t}.{k}: must be a positive finite number, got {v!r}")
        if not e["lo"] <= e["ratio"] <= e["hi"]:
            raise SpecError(f"{where}: {t}: need lo <= ratio <= hi, got {e['lo']} / {e['ratio']} / {e['hi']}")
        for k in ("source", "reports", "reading"):
            if not isinstance(e[k], str) or not e[k].strip():
                raise SpecError(f"{where}: {t}.{k}: must be a non-empty text")
        out[t] = {"ratio": float(e["ratio"]), "lo": float(e["lo"]), "hi": float(e["hi"]),
                  "source": f"{e['source']}: {e['reports']}; {e['reading']}"}
    return out


def published(path=None) -> dict[str, dict]:
    """technique -> {ratio, lo, hi, source}: the shipped published ratios (:data:`PUBLISHED_PATH`
    from the project's root, or ``path``), read with the bounded strict YAML loader and checked."""
    from .profile import ROOT

    p = Path(path) if path is not None else ROOT / PUBLISHED_PATH
    try:
        mtime = p.stat().st_mtime
    except OSError as e:
        raise SpecError(f"{p}: cannot read the published ratios ({e.strerror})") from None
    return dict(_published(str(p), mtime))


@functools.lru_cache(maxsize=4)
def _published(path: str, mtime: float) -> dict[str, dict]:
    import yaml

    from ..config.yamlio import YamlLimitError, load_yaml_strict, yaml_error_line

    try:
        raw = load_yaml_strict(path)
    except OSError as e:
        raise SpecError(f"{path}: cannot read the published ratios ({e.strerror})") from None
    except (YamlLimitError, yaml.YAMLError, UnicodeDecodeError) as e:
        raise SpecError(f"{path}: {yaml_error_line(e)}") from None
    return check_published(raw, path)


@dataclass
class CellRatio:
    """The measured ratio at one (size, N): geometric mean over seeds and its 95 % t-interval."""

    technique: str
    n_params: int
    N: int
    seeds: int
    ratio: float
    lo: float             # 95 % t-interval of the geometric mean over seeds
    hi: float
    ddp_steps: float
    pred_lo: float = float("nan")    # 95 % prediction interval for one more seed: t s sqrt(1 + 1/n)
    pred_hi: float = float("nan")


@dataclass
class RatioFit:
    """``log r = x . coef`` over the observations ``X`` (rows: seeds x cells), with what the
    prediction interval needs."""

    technique: str
    terms: tuple[str, ...]            # subset of ("logP", "logN") beside the intercept
    coef: np.ndarray
    xtx_inv: np.ndarray
    sigma: float                      # residual standard error (log ratio); nan with no dof
    dof: int
    points: list[tuple[int, int]] = field(default_factory=list)

    def design(self, P: float, N: float) -> np.ndarray:
        x = [1.0]
        if "logP" in self.terms:
            x.append(np.log(P))
        if "logN" in self.terms:
            x.append(np.log(N))
        return np.array(x)

    def predict(self, P: float, N: float, confidence: float = 0.95) -> tuple[float, float, float]:
        """(ratio, lo, hi): the fitted ratio and its prediction interval at (P, N)."""
        x = self.design(P, N)
        m = float(x @ self.coef)
        if self.dof < 1 or not np.isfinite(self.sigma):
            return float(np.exp(m)), 0.0, float("inf")
        se = self.sigma * np.sqrt(1.0 + float(x @ self.xtx_inv @ x))
        h = float(stdtrit(self.dof, 0.5 + confidence / 2)) * se
        return float(np.exp(m)), float(np.exp(m - h)), float(np.exp(m + h))


def fit_log_ratio(technique: str, obs: list[tuple[float, float, float]]) -> RatioFit | None:
    """Fit ``log r`` on (P, N, r) observations; None without a finite observation."""
    obs = [(P, N, r) for P, N, r in obs if np.isfinite(r) and r > 0]
    if not obs:
        return None
    a = np.array(obs, dtype=float)
    terms = tuple(t for t, col in (("logP", 0), ("logN", 1)) if len(np.unique(a[:, col])) >= 2)
    cols = [np.ones(len(a))] + [np.log(a[:, {"logP": 0, "logN": 1}[t]]) for t in terms]
    X = np.column_stack(cols)
    y = np.log(a[:, 2])
    coef, *_ = np.linalg.lstsq(X, y, rcond=None)
    dof = len(a) - X.shape[1]
    sigma = float(np.sqrt(((X @ coef - y) ** 2).sum() / dof)) if dof > 0 else float("nan")
    return RatioFit(technique, terms, coef, np.linalg.pinv(X.T @ X), sigma, dof,
                    sorted({(int(P), int(N)) for P, N, _ in obs}))


def _seed_steps(recs, target: float) -> dict:
    """(technique, n_params, N) -> {seed: steps to target (inf: never within the run)} over
    the no-straggler runs."""
    out: dict = {}
    for r in recs:
        if r.straggler.get("model") != "none":
            continue
        k = r.steps_to_target(target)
        out.setdefault((r.technique, r.n_params, r.n), {})[r.seed] = float("inf") if k is None else float(k)
    return out


def measured_ratios(recs, target: float) -> tuple[list[CellRatio], dict[str, list[tuple[float, float, float]]]]:
    """Every measured cell's ratio per technique, and every seed's observation (P, N, r) per
    technique for the fit.  A seed where DDP never reaches the target gives no observation; one
    where the technique never does gives r = inf (the cell's ratio is then inf)."""
    steps = _seed_steps(recs, target)
    cells, obs = [], {}
    for (t, P, N), by_seed in sorted(steps.items()):
        ddp = steps.get(("ddp", P, N), {})
        rs = []
        for seed, k in sorted(by_seed.items()):
            kd = ddp.get(seed)
            if kd is None or not np.isfinite(kd):
                continue
            rs.append(k / kd)
            obs.setdefault(t, []).append((float(P), float(N), k / kd))
        if not rs:
            continue
        x = np.array(rs)
        kd_mean = float(np.mean([v for v in ddp.values() if np.isfinite(v)]))
        if not np.all(np.isfinite(x)):
            cells.append(CellRatio(t, P, N, len(x), np.inf, np.inf, np.inf, kd_mean))
            continue
        lx = np.log(x)
        m = float(lx.mean())
        q = float(stdtrit(len(x) - 1, 0.975)) if len(x) > 1 else np.inf
        sd = float(lx.std(ddof=1)) if len(x) > 1 else np.inf
        h = q * sd / np.sqrt(len(x)) if len(x) > 1 else np.inf
        hp = q * sd * np.sqrt(1 + 1 / len(x)) if len(x) > 1 else np.inf
        cells.append(CellRatio(t, P, N, len(x), float(np.exp(m)), float(np.exp(m - h)), float(np.exp(m + h)),
                               kd_mean, float(np.exp(m - hp)), float(np.exp(m + hp))))
    return cells, obs


def evidence_distance(P: float, N: float, sizes, workers) -> tuple[float, float]:
    """Decades by which (P, N) lies outside the measured sizes and worker counts (0 inside)."""
    lp, ln = np.log10(P), np.log10(N)
    s, w = np.log10(np.asarray(sizes, float)), np.log10(np.asarray(workers, float))
    return (float(max(0.0, lp - s.max(), s.min() - lp)), float(max(0.0, ln - w.max(), w.min() - ln)))


def parse_efficiency(text: str | None) -> dict[str, float]:
    """``name=ratio,...`` or a YAML file of that mapping, or ``published`` (the shipped ratios);
    :class:`SpecError` naming ``--efficiency`` on a bad value."""
    if text is None:
        return {}
    if text.strip() == "published":
        return {k: v["ratio"] for k, v in published().items()}  # (the query passes use_published instead)
    p = Path(text)
    if "=" not in text and p.suffix in (".yaml", ".yml", ".json") or p.is_file():
        from ..config.yamlio import YamlLimitError, load_user_file

        try:
            raw = load_user_file(p, "efficiency file")
        except YamlLimitError as e:  # over a bound, not a regular file, not YAML or JSON: one line
            raise SpecError(f"--efficiency: {e}") from None
        if not isinstance(raw, dict):
            raise SpecError(f"--efficiency: {text!r} must hold a mapping technique: ratio")
        items = list(raw.items())
    else:
        items = []
        for part in text.split(","):
            if "=" not in part:
                raise SpecError(f"--efficiency: cannot read {part!r}; write e.g. diloco=1.9,demo=1.1")
            k, v = part.split("=", 1)
            items.append((k.strip(), v.strip()))
    from .spec import TECHNIQUES

    out = {}
    for k, v in items:
        if k not in TECHNIQUES:
            raise SpecError(f"--efficiency: unknown technique {k!r}; known: {', '.join(TECHNIQUES)}")
        try:
            r = float(v)
        except (TypeError, ValueError):
            raise SpecError(f"--efficiency: {k}: ratio {v!r} is not a number") from None
        if not (np.isfinite(r) and r > 0):
            raise SpecError(f"--efficiency: {k}: ratio must be a positive finite number, got {v!r}")
        out[k] = r
    return out


@dataclass
class Efficiency:
    """The ratio a query uses for one technique, its interval and what it rests on."""

    ratio: float
    lo: float
    hi: float
    basis: str          # measured cell / fit / user / published / none (steps unknown: not ranked)
    detail: str
    spread: str = "95 % prediction interval"   # what [lo, hi] is, or why there is none


def efficiency_at(technique: str, P: float, N: int, cells: list[CellRatio], fits: dict[str, RatioFit],
                  sizes, workers, user: dict[str, float], use_published: bool) -> Efficiency:
    """The ratio for ``technique`` at (P, N) by the rules of the module docstring (the caller has
    already refused a query beyond FAR without ``--efficiency``)."""
    if technique == "ddp":
        return Efficiency(1.0, 1.0, 1.0, "reference", "DDP itself: the ratio's denominator", "exact: the reference")
    if technique in user:
        r = user[technique]
        return Efficiency(r, r, r, "user", "given with --efficiency", "none: given without one")
    own = [c for c in cells if c.technique == technique]
    if own:  # the technique's own evidence: the sizes and N where its ratio was measured
        sizes, workers = sorted({c.n_params for c in own}), sorted({c.N for c in own})
    dP, dN = evidence_distance(P, N, sizes, workers)
    d = max(dP, dN)
    if d <= NEAR:
        here = [c for c in cells if c.technique == technique and c.n_params == int(P) and c.N == int(N)]
        if here:
            c = here[0]
            return Efficiency(c.ratio, c.pred_lo, c.pred_hi, "measured",
                              f"measured at this size and N over {c.seeds} seed(s) (prediction interval "
                              f"for a new seed; the mean's: [{c.lo:.3g}, {c.hi:.3g}])")
        f = fits.get(technique)
        if f is not None and not any(c.technique == technique and not np.isfinite(c.ratio) for c in cells):
            r, lo, hi = f.predict(P, N)
            return Efficiency(r, lo, hi, "fit", f"fitted on {len(f.points)} measured cell(s), "
                                                f"{dP:.2g} decades outside the sizes, {dN:.2g} outside N")
        if any(c.technique == technique and not np.isfinite(c.ratio) for c in cells):
            return Efficiency(np.inf, np.inf, np.inf, "measured", "did not reach the target within the horizon "
                                                                   "at a measured cell", "none: never reached")
    shipped = published()
    if technique in shipped and (use_published or d <= FAR):
        p = shipped[technique]
        one = p["lo"] == p["ratio"] == p["hi"]
        return Efficiency(p["ratio"], p["lo"], p["hi"], "published", p["source"],
                          "none: a published ratio from one run" if one else "the source's range")
    # ratio 1 is no evidence: neither the query nor the map ranks on it (both list the technique apart)
    return Efficiency(1.0, np.nan, np.nan, "none", "no ratio this far from the runs: steps to target unknown",
                      "none: steps to target unknown")
