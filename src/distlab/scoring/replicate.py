"""The replicate: every decided trained verdict run again on other seeds under other kernels.

The same trained number on every machine is out of reach (the CPU's kernels round differently,
and training amplifies the difference), so a reproduction owes its readers verdicts that do not
depend on the machine.  A kernel set's rounding is worth a seed; a verdict that a fresh seed block
under another kernel set undoes was never decided.  ``make stability`` therefore ends with the
replicate (:func:`run`), fixed in config before the run (``replicate:``):

* the rows it reruns (:func:`chosen`): every row resting on trained or seeded quantities
  (:mod:`distlab.scoring.basis`: trained, trained x clock) that is decided (reproduced, not
  reproduced) or within one half-width of deciding (:func:`near_deciding`);
* on a disjoint seed block: every seed list of the config shifted by ``replicate.seed_offset``
  (:func:`shifted_seeds`, checked disjoint by :func:`check_disjoint`), which keeps every relation
  between the lists (the sweep's seeds among the comparison's, the tuning seeds apart from them);
* under the other kernel set: ``replicate.kernels`` (``ATEN_CPU_CAPABILITY=default``: ATen's
  scalar kernels) in every job's environment; each run's manifest records the kernel set it
  ran with (:func:`distlab.results.machinekind.kernel_set`);
* with the seeds its power asks for (:func:`power_table`): the pilot's interval gives the
  probability that a replicate of the same n repeats the verdict; below ``replicate.power`` the
  replicate gets the n that reaches it, within ``stats.seeds_cap`` and the row's ``planned_n``;
* in a tree of its own (``replicate.directory``), so the comparison's results stay as they are.

:func:`judge` then labels the scorecard: a replicated row whose verdict the replicate does not
repeat reads *unstable here* with both estimates; column ``replicated`` says for every decided row
whether and how it was replicated.  No pooling: the comparison's estimate stays the row's estimate.
docs/replication.md states the rule.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from .basis import TRAINED, TRAINED_CLOCK, UnknownMetric, basis
from .reported import REPORTED
from .scorecard_conditions import DECIDED_BY

DECIDED = ("reproduced", "not reproduced")
INCONCLUSIVE = "inconclusive"
UNSTABLE = "unstable here"
SEED_KEYS = ("seeds", "parallel_seeds")  # the config's seed lists (any section, any depth)
MAX_EXTRA = 50  # distlab.pipeline.extra_seeds.MAX_EXTRA: the most extra seeds a claim may ask
COMPARISON = "comparison"
# the measured rules (distlab.scoring.stability.MEASURED_RULES) whose runs also train what
# replicated rows read, so the replicate runs them for their trained quantities (their timings it
# reads for no row): the baseline's gloo DGD (its loss against single-process SGD), P3's timed
# jobs (BP's timed seed, asynchronous RC on every seed), DeMo's simulated jobs (each worker's
# compute measured, its losses trained); every other measured rule ``replicate.leave_out`` turns off
MEASURED_AND_TRAINED = ("baseline_train_dist", "local_train", "demo_train_sim")


def _num(row: Mapping, key: str) -> float:
    v = pd.to_numeric(row.get(key), errors="coerce")
    return float(v) if pd.notna(v) else math.nan


def _truthy(v: Any) -> bool:
    return v is True or str(v).strip().lower() in ("true", "1", "yes")


def trained(row: Mapping) -> bool:
    """Whether a row rests on trained or seeded quantities (its metric's basis; a measured row is
    settled by the measured reruns instead)."""
    try:
        return basis(str(row.get("metric", "")), _truthy(row.get("measured"))) in (TRAINED, TRAINED_CLOCK)
    except UnknownMetric:
        return False


def boundaries(row: Mapping) -> list[float]:
    """The values an interval must exclude for the row to decide: the margin (±margin for an
    equivalence test), 0 for a test without one."""
    margin = _num(row, "margin")
    test = row.get("test")
    if test == "equivalent":
        return [-margin, margin] if math.isfinite(margin) else []
    if test in ("less", "greater", "noninferior"):
        return [margin if math.isfinite(margin) else 0.0]
    return []


def interval(row: Mapping) -> tuple[float, float, float] | None:
    """(estimate, half-width, distance from the estimate to the nearest boundary), or None for a
    row without a finite interval of positive width or a boundary."""
    est, lo, hi = _num(row, "estimate"), _num(row, "ci_low"), _num(row, "ci_high")
    bounds = boundaries(row)
    if not bounds or not all(math.isfinite(x) for x in (est, lo, hi)) or hi <= lo:
        return None
    return est, (hi - lo) / 2, min(abs(est - b) for b in bounds)


def near_deciding(row: Mapping) -> bool:
    """An inconclusive row within one half-width of deciding: the estimate would decide it by
    moving (half-width - distance to the nearest boundary), at most one half-width, so every
    inconclusive row with a finite interval is (a row without one, such as a placement tie at
    0 [0, 0], has nothing a fresh block could move)."""
    return row.get("verdict") == INCONCLUSIVE and interval(row) is not None


def side(row: Mapping) -> str:
    """Where a row's interval lies against its boundaries: what a reported row (an estimate
    beside a test, no verdict) states, e.g. "above 0"; "across" when it straddles one."""
    iv = interval(row)
    if iv is None:
        return "no interval"
    lo, hi = _num(row, "ci_low"), _num(row, "ci_high")
    over = [("below" if hi < b else "above" if lo > b else "across") + f" {b:g}" for b in boundaries(row)]
    return "across" if any(o.startswith("across") for o in over) else ", ".join(over)


def decides(row: Mapping) -> bool:
    """A decided row, or a reported one whose interval excludes its boundaries (it states a finding)."""
    return row.get("verdict") in DECIDED or (
        row.get("verdict") == REPORTED and side(row) not in ("across", "no interval"))


def chosen(card: pd.DataFrame) -> pd.DataFrame:
    """The rows the replicate reruns: trained or seeded, and decided or near deciding, or reported
    beside a test with an interval (a finding may state it)."""
    keep = [trained(r) and (r.get("verdict") in DECIDED or near_deciding(r)
                            or (r.get("verdict") == REPORTED and interval(r) is not None))
            for r in card.to_dict("records")]
    return card[pd.Series(keep, index=card.index, dtype=bool)]


def _critical(n: int, confidence: float) -> float:
    from scipy import stats

    return float(stats.t.ppf(0.5 + confidence / 2, max(n - 1, 1)))


def decided_by(row: Mapping) -> dict | None:
    """The precondition's own test that decided the row (column ``decided_by``, written by the
    scorecard for a row a released method's failed control decides:
    :func:`distlab.scoring.scorecard_conditions.deciding_test`), or None for a row its own
    interval decides.  A row of a scorecard without the column whose reason says a precondition
    decided it gives ``{}``: decided by a precondition whose interval this scorecard does not hold."""
    raw = row.get("decided_by")
    if isinstance(raw, str) and raw.strip():
        return json.loads(raw)
    if "decided_by" not in row and DECIDED_BY in str(row.get("reason", "")):
        return {}
    return None


def _has_interval(pre: Mapping) -> bool:
    return all(k in pre for k in ("test", "estimate", "ci_low", "ci_high", "n"))


def degenerate(row: Mapping) -> bool:
    """A row whose interval has zero width (every seed gave the same difference) beside a boundary."""
    est, lo, hi = _num(row, "estimate"), _num(row, "ci_low"), _num(row, "ci_high")
    return bool(boundaries(row)) and all(math.isfinite(x) for x in (est, lo, hi)) and hi == lo


def _met_probability(pre: Mapping, confidence: float) -> float:
    """The probability that a replicate of the precondition's n meets its test (its interval of
    a − b wholly past the boundary: below −margin for ``less``, above +margin for ``greater``,
    inside ±margin for ``equivalent``), its estimate taken as the truth and its standard error
    from its interval; 0 or 1 for a zero-width interval, by where the estimate lies."""
    from scipy.stats import norm

    est, lo, hi, m = (float(pre[k]) for k in ("estimate", "ci_low", "ci_high", "margin"))
    m = m if math.isfinite(m) else 0.0  # as the condition's test shifts a: a + m < b, a - m > b
    h = (hi - lo) / 2
    z = _critical(int(pre.get("n") or 2), confidence)
    if pre.get("test") == "equivalent":
        if h <= 0:
            return float(-m < est < m)
        return max(0.0, float(norm.cdf(z * ((m - est) / h - 1)) - norm.cdf(z * ((-m - est) / h + 1))))
    toward = (-m - est) if pre.get("test") == "less" else (est - m)
    if h <= 0:
        return float(toward > 0)
    return float(norm.cdf(z * (toward / h - 1)))


def repeat_probability(row: Mapping, confidence: float = 0.95) -> float:
    """The probability that a replicate of the row's n repeats its verdict, the pilot's estimate
    taken as the truth and its spread from the interval (half-width = critical value x standard
    error of the per-seed differences' mean): decided, the replicate's interval excludes the
    boundary on the same side, Phi(z (d / h - 1)); inconclusive, it straddles the boundary again,
    Phi(z (1 - d / h)) - Phi(-z (1 + d / h)); NaN without an interval.  A row a precondition
    decided (:func:`decided_by`) repeats when the precondition is again not met: 1 - the
    probability that its own test is met (:func:`_met_probability`), NaN where the scorecard
    holds no interval of it.  A degenerate interval (:func:`degenerate`) repeats with 1: with
    the pilot's spread zero, a replicate of it gives the same interval."""
    from scipy.stats import norm

    pre = decided_by(row)
    if pre is not None:
        return 1.0 - _met_probability(pre, confidence) if _has_interval(pre) else math.nan
    if degenerate(row):
        return 1.0
    iv = interval(row)
    if iv is None:
        return math.nan
    _, h, d = iv
    z = _critical(int(_num(row, "n_seeds") or 2), confidence)
    if decides(row):
        return float(norm.cdf(z * (d / h - 1)))
    return float(norm.cdf(z * (1 - d / h)) - norm.cdf(-z * (1 + d / h)))


def probability_of(row: Mapping) -> str:
    """Which quantity a row's repeat probability is of (the power table's column ``of``)."""
    pre = decided_by(row)
    if pre is not None:
        name = pre.get("precondition", "the deciding precondition")
        return (f"precondition {name} not met again (its a - b = {pre['estimate']:.3g} [{pre['ci_low']:.3g}, "
                f"{pre['ci_high']:.3g}], n = {pre['n']}, test {pre['test']})" if _has_interval(pre) else
                f"precondition {name} not met again (no interval of its test in this scorecard)")
    if degenerate(row):
        return "a degenerate interval (zero width: every seed the same difference), repeated with probability 1"
    return "the row's own interval" if interval(row) is not None else "no interval"


def replicate_n(row: Mapping, target: float, cap: int, confidence: float = 0.95) -> int:
    """The replicate's n: the row's own, raised for a decided row whose repeat probability is
    below ``target`` to the n whose expected interval repeats it with ``target`` (the standard
    error shrinks as 1/sqrt(n)), at most ``cap`` and the row's ``planned_n``.  A row its own
    interval does not decide (a precondition decided it, or its interval has zero width) keeps
    its n: more seeds of the row's own comparison would not move what decides it."""
    from scipy.stats import norm

    n = int(_num(row, "n_seeds") or 0)
    if decided_by(row) is not None or degenerate(row):
        return n
    iv = interval(row)
    p = repeat_probability(row, confidence)
    if not decides(row) or iv is None or not p < target or n < 2:
        return n
    planned = _num(row, "planned_n")
    limit = min(cap, int(planned)) if math.isfinite(planned) else cap
    z = _critical(n, confidence)
    _, h, d = iv
    need = math.inf if d <= 0 else math.ceil(n * ((z + norm.ppf(target)) * h / (z * d)) ** 2)
    return int(max(n, min(need, limit)))


POWER_COLUMNS = ["id", "verdict", "n", "repeat_probability", "of", "replicate_n"]


def power_table(rows: pd.DataFrame, target: float, cap: int, confidence: float = 0.95) -> pd.DataFrame:
    """Per chosen row: its verdict, n, the probability that a replicate of that n repeats it, which
    quantity that probability is of (:func:`probability_of`), and the replicate's n
    (:func:`replicate_n`)."""
    out = [{"id": r["id"], "verdict": r["verdict"], "n": int(_num(r, "n_seeds") or 0),
            "repeat_probability": repeat_probability(r, confidence), "of": probability_of(r),
            "replicate_n": replicate_n(r, target, cap, confidence)} for r in rows.to_dict("records")]
    return pd.DataFrame(out, columns=POWER_COLUMNS)


# ------------------------------------------------------------------ the replicate's config

def _is_seed_list(key: Any, value: Any) -> bool:
    return key in SEED_KEYS and isinstance(value, list) and all(
        isinstance(s, int) and not isinstance(s, bool) for s in value)


def seed_lists(config: Any, path: str = "") -> dict[str, list[int]]:
    """Every seed list of the config by its dotted key (lists of integers under :data:`SEED_KEYS`)."""
    out: dict[str, list[int]] = {}
    if isinstance(config, Mapping):
        for k, v in config.items():
            key = f"{path}.{k}" if path else str(k)
            if _is_seed_list(k, v):
                out[key] = list(v)
            else:
                out.update(seed_lists(v, key))
    return out


def shifted_seeds(config: Any, offset: int) -> Any:
    """The overrides that shift every seed list by ``offset``: a nested mapping holding only the
    seed lists (Snakemake merges a config file's mappings and replaces its lists)."""
    if not isinstance(config, Mapping):
        return None
    out: dict[str, Any] = {}
    for k, v in config.items():
        if _is_seed_list(k, v):
            out[k] = [s + offset for s in v]
        else:
            sub = shifted_seeds(v, offset)
            if sub:
                out[k] = sub
    return out


def check_disjoint(config: Mapping, offset: int) -> None:
    """The replicate's seeds (every list shifted, and the extra seeds numbered after them) miss the
    comparison's (its lists and up to :data:`MAX_EXTRA` extra seeds after each): ValueError if not."""
    seeds = [s for v in seed_lists(config).values() for s in v]
    if seeds and min(seeds) + offset <= max(seeds) + MAX_EXTRA:
        raise ValueError(f"replicate.seed_offset: {offset} does not give a disjoint seed block (the config's "
                         f"seeds reach {max(seeds)}, and extra seeds up to {MAX_EXTRA} more); make it larger than "
                         f"{max(seeds) + MAX_EXTRA - min(seeds)}")


def overrides(config: Mapping, power: pd.DataFrame) -> dict:
    """The replicate's config file: every seed list shifted by ``replicate.seed_offset``,
    ``stats.extra_seeds`` raised by what the power rule adds to each row (:func:`power_table`),
    and ``replicate.leave_out`` over them (the switches that turn off the parts only measured rows
    read: the replicate runs what its rows need)."""
    offset = int(config["replicate"]["seed_offset"])
    check_disjoint(config, offset)
    extra = dict((config.get("stats") or {}).get("extra_seeds") or {})
    for r in power.to_dict("records"):
        add = int(r["replicate_n"]) - int(r["n"])
        if add > 0:
            extra[r["id"]] = min(MAX_EXTRA, int(extra.get(r["id"], 0)) + add)
    out = {**shifted_seeds(config, offset), "stats": {"extra_seeds": extra or None}}
    return _merge(out, config["replicate"].get("leave_out") or {})


# ------------------------------------------------------------------ the verdicts

def how(config: Mapping) -> str:
    """The replicate's seeds and kernel set, as the ``replicated`` column names them."""
    rep = config["replicate"]
    kernels = " ".join(f"{k}={v}" for k, v in rep["kernels"].items())
    return f"seeds shifted by {rep['seed_offset']}, {kernels}"


def _ours(row: Mapping | None) -> str:
    if row is None:
        return "absent"
    return f"{row.get('verdict')} ({row.get('ours') or 'no estimate'}, n = {int(_num(row, 'n_seeds') or 0)})"


def not_replicated(row: Mapping) -> str:
    """Column ``replicated`` of a row the replicate did not rerun: why (empty for an undecided
    row far from deciding, which states nothing)."""
    if row.get("verdict") not in DECIDED:
        return ""
    if _truthy(row.get("measured")):
        return "no: measured, settled by the measured reruns"
    return "no: neither trained nor seeded (the simulated clock or arithmetic decides it)"


def judge(card: pd.DataFrame, replicate: pd.DataFrame | None, ids: list[str], described: str) -> pd.DataFrame:
    """``card`` with column ``replicated`` and every row of ``ids`` whose verdict the replicate
    does not repeat (or does not have) relabelled *unstable here*, both estimates in its reason
    and its ``spread`` (a reported row keeps its label: it holds when its interval lies on the
    same side of its boundaries, :func:`side`, and its ``replicated`` says so either way);
    ``replicate`` None: the replicate did not run, and each chosen row says so."""
    out = card.copy()
    if "spread" not in out:
        out["spread"] = ""
    out["replicated"] = [not_replicated(r) for r in out.to_dict("records")]
    rep = {} if replicate is None else {r["id"]: r for r in replicate.to_dict("records")}
    for i in out.index[out["id"].isin(ids)]:
        row = out.loc[i].to_dict()
        if replicate is None:
            out.at[i, "replicated"] = "no: the replicate did not run (replicate.enabled false, or a dry run)"
            continue
        again = rep.get(row["id"])
        if again is not None and again.get("verdict") == row["verdict"] and (
                row["verdict"] != REPORTED or side(again) == side(row)):
            out.at[i, "replicated"] = f"held: {_ours(again)} on {described}"
            continue
        spread = f"{COMPARISON}: {_ours(row)}; replicate ({described}): {_ours(again)}"
        out.at[i, "replicated"] = f"did not hold: {_ours(again)} on {described}"
        out.at[i, "spread"] = spread
        if row["verdict"] == REPORTED:  # no verdict to undo: the finding it states did not hold
            continue
        out.at[i, "reason"] = (f"unstable here: the replicate on another seed block under another kernel set did not "
                               f"repeat the verdict ({spread}); the comparison's reason: {row.get('reason')}")
        out.at[i, "verdict"] = UNSTABLE
        if "seeds_needed" in out:
            out.at[i, "seeds_needed"] = math.nan
    return out


def report(power: pd.DataFrame, judged: pd.DataFrame, config: Mapping) -> str:
    """The stability report's replicate section: the rule, each chosen row's repeat probability
    and n, and its outcome."""
    from ..results.tables import markdown_table

    rep = config["replicate"]
    outcome = judged.set_index("id")["replicated"]
    table = power.assign(repeat_probability=power["repeat_probability"].map(
        lambda p: "" if pd.isna(p) else f"{p:.2f}"), outcome=power["id"].map(outcome))
    held = int(table["outcome"].fillna("").str.startswith("held").sum())
    return "\n".join([
        "## The replicate: another seed block under another kernel set", "",
        f"{len(power)} rows rest on trained or seeded quantities and are decided or within one half-width of "
        f"deciding; rerun on {how(config)}; {held} held. The repeat probability is that of a replicate "
        f"of the same n, from the first block's interval (column of says which: the row's own, the deciding "
        f"precondition's, or a degenerate one); below {rep['power']} the replicate's n of a row its own "
        "interval decides is raised to the n that reaches it, within stats.seeds_cap and the row's planned_n "
        "(docs/replication.md).", "",
        markdown_table(table) if len(table) else "No row to replicate.", ""])


# ------------------------------------------------------------------ the run

def _merge(base: dict, over: Mapping) -> dict:
    """Snakemake's merge of config files: mappings merged key by key, anything else replaced."""
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, Mapping) and isinstance(out.get(k), Mapping) else v
    return out


def split_configfiles(extra: list[str]) -> tuple[list[str], list[str]]:
    """(the config files named in Snakemake's ``extra`` arguments, the other arguments)."""
    from ..config.preflight import _is_configfile_option

    files, rest, taking = [], [], False
    for word in extra:
        if word.startswith("-") and word != "-":
            taking = _is_configfile_option(word) and "=" not in word
            if _is_configfile_option(word):
                files += [word.split("=", 1)[1]] if "=" in word else []
                continue
        elif taking:
            files.append(word)
            continue
        rest.append(word)
    return files, rest


def merged_config(cwd: Path, files: list[str]) -> dict:
    """config/config.yaml with the given config files over it, as Snakemake merges them."""
    from ..config.yamlio import load_file_bounded

    config: dict = {}
    for f in [cwd / "config" / "config.yaml", *(cwd / f for f in files)]:
        config = _merge(config, load_file_bounded(f) or {})
    return config


def environment(config: Mapping, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The jobs' environment: this one with the replicate's kernel set."""
    return {**(os.environ if base is None else base), **{k: str(v) for k, v in config["replicate"]["kernels"].items()}}


def prepare(cwd: Path, config: Mapping, power: pd.DataFrame) -> Path:
    """The replicate's tree (``replicate.directory``): links to the workflow's config and data
    (read by relative path) and its config file (:func:`overrides`); returns that file."""
    import yaml

    tree = cwd / config["replicate"]["directory"]
    tree.mkdir(parents=True, exist_ok=True)
    for name in ("config", "data"):
        link = tree / name
        if not link.exists():
            link.symlink_to(os.path.relpath(cwd / name, tree), target_is_directory=True)
    path = tree / "replicate.yaml"
    path.write_text(yaml.safe_dump(overrides(config, power), sort_keys=True), encoding="utf-8")
    return path


def command(cwd: Path, config: Mapping, cores: int, papers: list[str], files: list[str],
            rest: list[str], own: Path) -> list[str]:
    """The replicate's Snakemake command: the chosen rows' papers' scorecards in its own tree, the
    config files given to ``make stability`` and then the replicate's own."""
    tree = cwd / config["replicate"]["directory"]
    targets = [f"paper/scorecard/{p}.csv" for p in papers]
    return [sys.executable, "-m", "snakemake", "--snakefile", str(cwd / "Snakefile"), "--directory", str(tree),
            "--cores", str(cores), *targets, *rest,
            "--configfile", *[str((cwd / f).resolve()) for f in files], str(own.resolve())]


def run(card: pd.DataFrame, cores: int, cwd: Path, extra: list[str], dry_run: bool = False
        ) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """Choose the rows, size the replicate, run it (``dry_run``: Snakemake's dry run only) and judge
    ``card`` by it: (the judged scorecard, the power table, the merged config)."""
    files, rest = split_configfiles(extra)
    config = merged_config(cwd, files)
    rep = config["replicate"]
    rows = chosen(card)
    cap = int((config.get("stats") or {}).get("seeds_cap") or MAX_EXTRA)
    power = power_table(rows, float(rep["power"]), cap)
    if not rep.get("enabled") or rows.empty:
        return judge(card, None, list(rows["id"]), how(config)), power, config
    own = prepare(cwd, config, power)
    cmd = command(cwd, config, cores, sorted(set(rows["paper"])), files, rest + (["-n"] if dry_run else []), own)
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, cwd=cwd, check=True, env=environment(config))
    if dry_run:
        return judge(card, None, list(rows["id"]), how(config)), power, config
    from ..results.tables import read_table_checked

    tree = cwd / rep["directory"] / "paper" / "scorecard"
    again = pd.concat([read_table_checked(tree / f"{p}.csv") for p in sorted(set(rows["paper"]))], ignore_index=True)
    return judge(card, again, list(rows["id"]), how(config)), power, config
