"""Figures and the main table of the local-learning experiment (one function per figure).

Every figure is stamped *measured* (wall clock on this machine) with the
number of seeds or repeats; bands and error bars are per-seed confidence
intervals.
"""

from __future__ import annotations

import os

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from ..plotting import plots
from ..plotting.names import LOCAL
from ..scoring import stats
from ..scoring.scorecard_links import ratio_interval
from ..results.tables import fmt_ci, read_table_checked, write_table

ORDER = ["bp", "rc-seq", "rc-heads", "rc-par", "rc-async", "rc-thread", "pc-fixed", "pc-fixed-trunc", "pc-strict"]
NAMES = LOCAL  # the papers' names, one mapping for every figure and table (distlab.plotting.names)


def _name(method: str) -> str:
    if method.startswith("rc-pc-T"):
        return f"RC + PC feedback, T = {method[len('rc-pc-T'):]}"
    return NAMES.get(method, method)


BARS_T = "error bars: 95 % Student-t interval of the mean over seeds"
LOSS_UNIT = "nats/byte"  # the model reads bytes (a vocabulary of 256): a token is a byte


def _order(present) -> list[str]:
    present = list(dict.fromkeys(present))
    rest = sorted((m for m in present if m not in ORDER),
                  key=lambda m: (not m.startswith("rc-pc-T"), int(m[7:]) if m[7:].isdigit() else 0, m))
    return [m for m in ORDER if m in present] + rest


def _groups(steps: pd.DataFrame) -> list[str]:
    return sorted(steps["group"].unique(), key=lambda g: -int(steps[steps.group == g].n_layer.iloc[0]))


def _common_x(d: pd.DataFrame, x: str, every: bool) -> pd.DataFrame:
    """Each method's runs on one x grid where its seeds were evaluated at different x (every
    method's, ``every``; times always differ): free-running RC's sections count their tokens
    apart, so a mean over seeds at each of its x values would join one seed's point to
    another's and draw a sawtooth, each with a one-seed interval.  Nothing is extrapolated
    (:func:`distlab.plotting.util.on_grid`)."""
    from ..plotting.util import on_grid

    parts = []
    for _, g in d.groupby("method", sort=False):
        apart = len({tuple(sorted(r[x])) for _, r in g.groupby("seed")}) > 1
        parts.append(on_grid(g, x, "val_loss", ["method", "seed"], points=60) if every or apart
                     else g[["method", "seed", x, "val_loss"]])
    return pd.concat(parts, ignore_index=True) if parts else d


def _loss_curves(steps: pd.DataFrame, x: str, xlabel: str, out: Path, note: str) -> None:
    plots.set_style()
    ev = steps.dropna(subset=["val_loss"])
    if x == "time":  # the deep model's untimed runs (sequential RC: parallel RC's arithmetic on one
        # core; BP's untimed seeds; the hybrid, the heads ablation) have clocks that are not compared;
        # the shallow model's runs are all one-thread runs, compared with each other
        untimed = ev.method.eq("rc-seq") if "timed" not in ev else (ev.group.eq("rc") & ~ev.timed.astype(bool))
        ev = ev[~untimed]
    groups = _groups(ev)
    fig, axes = plt.subplots(len(groups), 1, figsize=(plots.PAGE, 2.6 * len(groups) + 0.4), squeeze=False)
    axes = axes.T
    seeds = []
    for ax, g in zip(axes[0], groups):
        d = ev[ev.group == g]
        n_seeds = d.seed.nunique()
        d = _common_x(d, x, every=x == "time")
        seeds.append(n_seeds)
        order = [plots.name(m) for m in _order(d.method)]
        d = d.assign(method=d.method.map(plots.name))
        plots.line_with_ci(d, x, "val_loss", "method", ax=ax, hue_order=order)
        title = f"{int(ev[ev.group == g].n_layer.iloc[0])}-layer model"
        # a method evaluated at one point only (free-running RC: its sections share no step to
        # evaluate at, so it is evaluated once, at its end) is one dot: drawn large and said so
        palette = sns.color_palette(n_colors=len(order))
        single = [m for m in order if d[d.method == m][x].nunique() == 1]
        for m in single:
            pt = d[d.method == m]
            ax.plot([pt[x].mean()], [pt["val_loss"].mean()], marker="D", markersize=8, linestyle="none",
                    color=palette[order.index(m)], markeredgecolor="k", markeredgewidth=0.6, zorder=5)
        if single:
            title += f"\n{', '.join(single)}: evaluated once, at its end (the diamond)"
        ax.set_title(title)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(f"held-out loss ({LOSS_UNIT})")
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
    plots.label_provenance(fig, "measured")
    plots.caption(fig, f"Held-out loss against {xlabel}, per model depth; {note}",
                  " and ".join(f"{n} seed{'s' * (n != 1)}" for n in dict.fromkeys(seeds)),
                  plots.BAND + " (none where a method has one seed)",
                  "measured losses" + (" and wall clock (this machine)" if x == "time" else
                                       "; the x axis counts training bytes, no clock"))
    plots.save(fig, out)


def loss_vs_tokens(steps_csv: Path, out: Path) -> None:
    _loss_curves(read_table_checked(steps_csv), "tokens", "training tokens (bytes)", out,
                 "a method whose seeds were evaluated at different token counts (free-running RC) is put on "
                 "a common token grid first, over the span all its seeds cover")


def loss_vs_time(steps_csv: Path, out: Path) -> None:
    _loss_curves(read_table_checked(steps_csv), "time", "training wall time (s, evaluation excluded)",
                 out, "runs without comparable clocks are left out")


def throughput_memory(throughput_csv: Path, out: Path) -> None:
    df = read_table_checked(throughput_csv)
    plots.set_style()
    fig, axes = plt.subplots(1, 2, figsize=(plots.PAGE, 3.0), layout="constrained")
    df = df.assign(method=df.method.map(plots.name))
    order = list(dict.fromkeys(df.method))
    plots.bar_with_ci(df, "method", "tokens_per_s", None, ax=axes[0], order=order, positive=True)
    axes[0].set_ylabel("training tokens / s")
    mem = pd.concat([df.assign(measure="PSS summed (each page once)", mb=df["pss_mb"]),
                     df.assign(measure="peak RSS of the largest process", mb=df["max_rss_mb"]),
                     df.assign(measure="peak RSS summed (pages counted per process)", mb=df["rss_sum_mb"])])
    plots.bar_with_ci(mem, "method", "mb", "measure", ax=axes[1], order=order, positive=True)
    axes[1].set_ylabel("memory (MiB)")
    axes[1].legend(loc="upper left", bbox_to_anchor=(0, -0.3), frameon=False)
    for ax in axes:
        ax.set_xlabel("")
        ax.tick_params(axis="x", rotation=30)
        for t in ax.get_xticklabels():
            t.set_ha("right")
            t.set_rotation_mode("anchor")
    plots.label_provenance(fig, "measured")
    plots.caption(fig, "Training throughput (tokens a second) and peak memory by method (PSS summed counts each page "
                  "once; RSS summed counts shared pages per process)", f"{df.seed.nunique()} interleaved repeats",
                  plots.BARS_POSITIVE.replace("seeds", "repeats"), "measured (wall clock, this machine)")
    fig.suptitle("Training throughput and peak memory by method")
    plots.save(fig, out)


def pc_cost(pc_csv: Path, out: Path) -> None:
    df = read_table_checked(pc_csv)
    df = df[df["method"] != "bp"]  # PC's rows carry the ratio to the BP measured beside them
    plots.set_style()
    fig, axes = plt.subplots(1, 2, figsize=(plots.PAGE, 2.6))
    for v, d in df.groupby("variant"):
        d = d.groupby("T", as_index=False)[["cost_ratio", "grad_cosine"]].median().sort_values("T")
        axes[0].plot(d["T"], d["cost_ratio"], marker="o", label=v)
        axes[1].plot(d["T"], d["grad_cosine"], marker="o", label=v)
    axes[0].axhline(1.0, color="0.5", lw=0.8, ls="--")
    axes[0].set_ylabel("seconds per step / BP's")
    axes[1].set_ylabel("cosine(PC gradient, BP gradient)")
    axes[1].set_ylim(-0.05, 1.05)
    for ax in axes:
        ax.set_xlabel("inference iterations T")
        ax.legend(title="PC variant")
    plots.label_provenance(fig, "measured")
    plots.caption(fig, f"Predictive coding's cost per step over BP's and the cosine of its gradient to BP's against "
                  f"the inference iterations T, {int(df.n_layer.iloc[0])}-layer model; each point the median of "
                  f"the repeats", f"{df['seed'].nunique() if 'seed' in df else 1} seed(s); medians of repeated steps",
                  "none drawn: medians of repeated measurements", "measured (wall clock, this machine)")
    fig.suptitle("Predictive coding against the number of inference iterations T")
    plots.save(fig, out)


def nonident_figure(json_path: Path, out: Path) -> None:
    import json

    res = json.loads(Path(json_path).read_text())  # nonident.py's output (that module imports torch)
    plots.set_style()
    fig, axes = plt.subplots(1, 2, figsize=(plots.PAGE, 3.0))
    ax = axes[0]
    h = np.linspace(-1.4, 1.4, 200)
    toy = res["toy"]
    y = 0.25  # the toy's target, as in nonident.toy
    ax.plot(h, (h**2 - y) ** 2, color="0.3")
    for r in toy:
        ax.annotate("", xy=(r["h"] - 0.15 * np.sign(r["upstream_grad"]), r["loss"]),
                    xytext=(r["h"], r["loss"]), arrowprops={"arrowstyle": "->", "color": "C3"})
        ax.plot([r["h"]], [r["loss"]], "o", color="C0")
        ax.text(r["h"], r["loss"] + 0.12, f"dL/da={r['readout_grad']:.2f}\ndL/dh={r['upstream_grad']:.2f}",
                ha="center")
    ax.set_xlabel("internal state h")
    ax.set_ylabel(f"loss L = (a·h² − y)²,  a = 1, y = {y:g}")
    ax.set_title("toy: same output and dL/da, opposite dL/dh")
    m = pd.DataFrame(res["model"])
    ax = axes[1]
    long = pd.concat([
        m.assign(quantity="readout report", value=m["report_rel_diff"]),
        m.assign(quantity="dL/dh at the section's output", value=m["state_grad_rel_diff"]),
        m.assign(quantity="section's weight gradient", value=m["section_grad_rel_diff"]),
    ])
    long["scale"] = long["scale"].map(lambda s: f"s = {s:g}")
    import seaborn as sns
    sns.barplot(data=long, x="scale", y="value", hue="quantity", ax=ax, errorbar=None)
    ax.set_yscale("symlog", linthresh=1e-4)
    ax.set_ylim(0, 3 * max(1e-3, float(long["value"].max())))
    ax.set_ylabel("relative change vs the trained model")
    ax.set_xlabel("residual stream rescaled by s (same function)")
    ax.set_title(f"trained {res['source']['n_layer']}-layer GPT, {res['source']['sections']} sections")
    ax.legend(loc="upper left", bbox_to_anchor=(0, -0.3), frameon=False)
    # no clock is involved: the figure's title says the numbers are computed, not timed
    fig.suptitle("Same function, different credit (measured: exact arithmetic, no timing)")
    plots.caption(fig, "Left: a toy whose two states give the same output and readout gradient but opposite "
                  "upstream gradients; right: the relative change of the readout report, the upstream gradient and "
                  "the section's weight gradient when the trained model's residual stream is rescaled by s (the "
                  "same function)", "one trained model, one held-out batch", "none: exact arithmetic, no spread",
                  "measured (computed exactly; no timing)")
    plots.save(fig, out)


def probes(steps_csv: Path, out: Path) -> None:
    """Per-section probe losses (the readout on each section's output, validation windows)
    over training, one panel per method of the deep model, then one panel per method with
    recorded cosines of each section's gradient to BP's on the same batch and weights (BP's
    own would be 1, so it has none)."""
    steps = read_table_checked(steps_csv)
    cols = sorted((c for c in steps.columns if c.startswith("probe") and c[5:].isdigit()),
                  key=lambda c: int(c[5:]))
    d = steps[steps.group == "rc"].dropna(subset=cols[:1])
    methods = [m for m in _order(d.method) if m not in ("rc-par", "rc-thread", "rc-async")]
    coss = sorted((c for c in steps.columns if c.startswith("cos") and c[3:].isdigit()),
                  key=lambda c: int(c[3:]))
    rc = steps[steps.group == "rc"]
    with_cos = [m for m in methods if any(c in rc and rc.loc[rc.method == m, c].notna().any() for c in coss)]
    plots.set_style()
    n = len(methods) + len(with_cos)
    cols_n = min(n, 2)
    fig, grid = plt.subplots(-(-n // cols_n), cols_n, figsize=(plots.PAGE, 2.4 * -(-n // cols_n) + 0.5),
                             squeeze=False, layout="constrained")
    axes = grid.ravel()
    for ax in axes[n:]:
        ax.set_visible(False)
    for j, m in enumerate(methods):
        ax = axes[j]
        if j:
            ax.sharey(axes[0])
        dm = d[d.method == m]
        long = pd.concat([dm.assign(section=f"section {c[5:]}", loss=dm[c]) for c in cols
                          if dm[c].notna().any()])
        plots.line_with_ci(long, "step", "loss", "section", ax=ax)
        ax.set_title(f"{_name(m)}: probe losses")
        ax.set_xlabel("step")
        ax.set_ylabel(f"probe loss ({LOSS_UNIT})")
        ax.legend(ncol=2)
    for k, m in enumerate(with_cos):
        ax = axes[len(methods) + k]
        dc = rc[rc.method == m]
        have = [c for c in coss if c in dc and dc[c].notna().any()]
        long = pd.concat([dc.dropna(subset=[c]).assign(section=f"section {c[3:]}", cos=lambda x, c=c: x[c])
                          for c in have])
        plots.line_with_ci(long, "step", "cos", "section", ax=ax)
        ax.axhline(1.0, color="0.5", lw=0.8, ls="--")
        ax.set_title(f"{_name(m)}: cosine to BP's gradient")
        ax.set_xlabel("step")
        ax.set_ylabel("cos(section's grad., BP's)")
        ax.legend(ncol=2)
    plots.label_provenance(fig, "measured")
    plots.caption(fig, "Per-section probe losses over training (the readout applied to each section's output, on "
                  "validation windows) and, where recorded, the cosine of each section's gradient to BP's on the "
                  "same batch and weights (dashed: BP's own, 1)", int(d.seed.nunique()), plots.BAND,
                  "measured losses and gradients; no clock")
    fig.suptitle("Per-section probes over training, deep model")
    plots.save(fig, out)


def hybrid_vs_T(runs_csv: Path, out: Path) -> None:
    """Quality of the RC + PC hybrid against its inference iterations T, beside BP and RC."""
    runs = read_table_checked(runs_csv)
    g = runs[runs.group == "rc"]
    h = g[g.method.str.startswith("rc-pc-T")]
    plots.set_style()
    fig, ax = plt.subplots(figsize=(plots.COLUMN, 2.8))
    if len(h):
        agg = h.groupby("feedback_T").final_test_loss.agg(["mean", "std", "count"]).reset_index()
        half = [stats.t_interval(h[h.feedback_T == T].final_test_loss.to_numpy()) for T in agg.feedback_T]
        ax.errorbar(agg.feedback_T, agg["mean"], yerr=[[m - c.low for m, c in zip(agg["mean"], half)],
                                                      [c.high - m for m, c in zip(agg["mean"], half)]],
                    marker="o", capsize=3, label="RC + PC feedback (lock-step chain)")
    for m, style in (("bp", "--"), ("rc-seq", ":")):
        r = g[g.method == m]
        if len(r):
            ax.axhline(r.final_test_loss.mean(), ls=style, color="0.3", lw=1,
                       label=f"{_name(m)} ({len(r)} seeds)")
    ax.set_xlabel("PC inference iterations T")
    ax.set_ylabel(f"held-out test loss ({LOSS_UNIT})")
    ax.set_title("RC + PC hybrid against T")
    ax.legend(loc="upper left", bbox_to_anchor=(0, -0.25), frameon=False)
    plots.label_provenance(ax, "measured")
    plots.caption(fig, "Held-out test loss of the RC + PC hybrid against its PC inference iterations T (T >= K "
                  "gives the exact backprop error), beside BP's and sequential RC's means (lines)",
                  int(h.seed.nunique()) if len(h) else 0, BARS_T, "measured losses; no clock")
    plots.save(fig, out)


def map_ratios(map_csv: Path) -> pd.DataFrame:
    """RC's throughput over BP's at every point of the map (paired by repeat)."""
    df = read_table_checked(map_csv)
    rows = []
    for point, d in df.groupby("point", sort=False):
        for m in [m for m in d.method.unique() if m != "bp"]:
            p = stats.pair_by_seed(d, "tokens_per_s", {"method": m}, {"method": "bp"})
            r = (p["a"] / p["b"]).to_numpy()
            first = d.iloc[0]
            pair = d[d.method.isin([m, "bp"])]
            rows.append({"point": point, "d_model": int(first.d_model), "sections": int(d[d.method == m].sections.iloc[0]),
                         "block_size": int(first.block_size), "method": m, "ratio_vs_bp": float(np.mean(r)),
                         "repeats": len(r), "bp_tokens_per_s": float(p["b"].mean()),
                         "tokens_per_s": float(p["a"].mean()),
                         # the highest 1-min load average at the pair's measurements (a shared machine
                         # starves BP's two threads far more than RC's one-thread processes)
                         "max_load_1min": float(pair.load_1min.max()) if "load_1min" in pair else float("nan")})
    return pd.DataFrame(rows)


def throughput_map(map_csv: Path, out: Path, table_csv: Path | None = None, table_md: Path | None = None,
                   target: float | None = None) -> None:
    r = map_ratios(map_csv)
    if table_csv is not None:
        t = r.assign(at_least_target=(r.ratio_vs_bp >= target) if target else None)
        write_table(t, table_csv, table_md)
    plots.set_style()
    fig, ax = plt.subplots(figsize=(plots.PAGE, 3.0))
    import seaborn as sns
    sns.barplot(data=r.assign(method=r.method.map(plots.name)), x="point", y="ratio_vs_bp", hue="method", ax=ax,
                errorbar=None)
    ax.axhline(1.0, color="0.5", lw=0.8)
    if target:
        ax.axhline(target, color="C3", lw=1, ls="--", label=f"paper: {target:g}x")
    ax.set_ylabel("tokens/s over BP's (BP on all cores)")
    ax.set_xlabel("d = width, K = sections, T = sequence length (24 layers)")
    ax.tick_params(axis="x", rotation=25)
    ax.legend()
    ax.set_title("RC's throughput over BP's across shapes")
    reps = int(r.repeats.min()) if len(r) else 0
    note = f"mean of {reps} interleaved repeats a point"
    if len(r) and r.max_load_1min.notna().any():
        note += f"; load average {r.max_load_1min.min():.1f}-{r.max_load_1min.max():.1f} on {os.cpu_count()} cores"
    plots.label_provenance(ax, "measured")
    plots.caption(fig, f"RC's training throughput over BP's (BP on all cores) at each model shape, 24 layers; {note}",
                  f"{reps} interleaved repeats a point", "none drawn: each bar is the mean of the paired ratios "
                  "(the table holds them)", "measured (wall clock, this machine)")
    plots.save(fig, out)


# ----------------------------------------------------------------------- main table


def _p3_claims(claims_path: Path) -> dict[str, dict]:
    from ..scoring.claims import load_claims

    claims = load_claims(claims_path)
    return {c["id"]: c for c in claims if c.get("paper") == "P3"}


def _margin(claims: dict[str, dict], group: str) -> float:
    """The non-inferiority margin declared in the claims file for this group's test."""
    cid = f"local.{group}.noninferior"
    if cid not in claims or "margin" not in claims[cid]:
        raise ValueError(f"config/claims.yaml: claim {cid!r} with a margin is needed for the main table")
    return float(claims[cid]["margin"])


def _paired(df: pd.DataFrame, metric: str, a: str, b: str) -> pd.DataFrame:
    return stats.pair_by_seed(df, metric, {"method": a}, {"method": b})


def _throughput_columns(row: dict, thr: pd.DataFrame, method: str, tm: str | None, r: pd.DataFrame) -> None:
    """The benchmark's columns of ``row`` (throughput and memory over BP's), when the
    benchmark measured the method ``tm`` and BP at the runs' depth."""
    if not (tm in set(thr.method) and "bp" in set(thr.method) and int(r.n_layer.iloc[0]) == int(thr.n_layer.iloc[0])):
        return
    p = stats.pair_by_seed(thr, "tokens_per_s", {"method": tm}, {"method": "bp"})
    rc = stats.t_interval((p["a"] / p["b"]).to_numpy())
    row["throughput_ratio_vs_bp"] = fmt_ci(rc.estimate, rc.low, rc.high)
    row["bench_pss_mb"] = float(thr[thr.method == tm].pss_mb.median())
    row["bench_max_rss_mb"] = float(thr[thr.method == tm].max_rss_mb.median())
    # memory as both measures, each over BP's (paired by repeat, the ratio of the means as
    # the scorecard's rows): PSS (each page once; local.rc.memory, tested) and the peak
    # RSS summed over processes (a shared page once per process; local.rc.memory_rss, shown)
    for col, metric in (("pss_ratio_vs_bp", "pss_mb"), ("rss_sum_ratio_vs_bp", "rss_sum_mb")):
        if metric in thr:
            q = stats.pair_by_seed(thr, metric, {"method": tm}, {"method": "bp"})
            qi = ratio_interval(stats.t_interval((q["a"] - q["b"]).to_numpy()), float(q["b"].mean()))
            row[col] = fmt_ci(qi.estimate, qi.low, qi.high)
    if "rss_sum_mb" in thr:
        row["bench_rss_sum_mb"] = float(thr[thr.method == tm].rss_sum_mb.median())
    if method == "rc-par" and "bp-1thread" in set(thr.method):
        # the ratio's two factors: RC's parallel speed-up over BP on one core (at most
        # the cores it has), and BP's own speed-up from that core to the timed jobs' cores
        for col, (a, b) in (("rc_par_vs_bp_1thread", (tm, "bp-1thread")),
                            ("bp_vs_bp_1thread", ("bp", "bp-1thread"))):
            q = stats.pair_by_seed(thr, "tokens_per_s", {"method": a}, {"method": b})
            qi = stats.t_interval((q["a"] / q["b"]).to_numpy())
            row[col] = fmt_ci(qi.estimate, qi.low, qi.high)


def _loss_columns(row: dict, g: pd.DataFrame, method: str, claims: dict, group: str, alpha: float) -> None:
    """The held-out loss against BP's (paired by seed): the difference, and with two seeds or
    more the non-inferiority and TOST verdicts at the group's margin."""
    p = _paired(g, "final_test_loss", method, "bp") if method != "bp" and "bp" in set(g.method) else None
    if p is not None and len(p) < 2:  # one seed (the hybrid's, a timed parallel run's)
        d = (p["a"] - p["b"]).to_numpy()
        row["loss_minus_bp"] = f"{float(d[0]):+.3f} (one seed)" if len(d) else ""
    elif p is not None:
        margin = _margin(claims, group)
        ni = stats.noninferiority(p["a"], p["b"], margin, higher_is_better=False)
        eq = stats.tost(p["a"], p["b"], margin)
        d = stats.t_interval((p["a"] - p["b"]).to_numpy())
        row["loss_minus_bp"] = fmt_ci(d.estimate, d.low, d.high)
        row["noninferior_p"] = ni.p_value
        row["tost_p"] = eq.p_value
        row["verdict"] = (("non-inferior" if ni.p_value < alpha else "non-inferiority not shown")
                          + "; " + ("equivalent" if eq.p_value < alpha else "equivalence not shown")
                          + f" (margin {margin:g} nats, α {alpha:g})")


def main_table(runs_csv: Path, throughput_csv: Path, claims_path: Path, options: dict,
               csv_out: Path, md_out: Path, floors_csv: Path | None = None) -> pd.DataFrame:
    """One row per method: throughput ratio to BP (CI over repeats), memory, held-out loss
    (CI over seeds) and its distance to the data's bigram floor (test split), the
    non-inferiority and TOST verdicts against BP, and the paper's values."""
    runs = read_table_checked(runs_csv)
    floor = None
    if floors_csv is not None:
        f = read_table_checked(floors_csv)
        floor = float(f[f.split == "test"].bigram_nats.iloc[0])
    thr = read_table_checked(throughput_csv)
    claims = _p3_claims(claims_path)
    paper = {cid: c.get("paper_value") for cid, c in claims.items()}
    alpha = float(options["alpha"])
    rows = []
    thr_of = {"rc-par": "rc-par", "rc-async": "rc-async", "bp": "bp", "rc-seq": "rc-seq"}
    for group in sorted(runs.group.unique()):
        g = runs[runs.group == group]
        for method in _order(g.method):
            r = g[g.method == method]
            ci = stats.t_interval(r["final_test_loss"].to_numpy())
            row = {"group": group, "n_layer": int(r.n_layer.iloc[0]), "method": _name(method),
                   "seeds": len(r), "test_loss": fmt_ci(ci.estimate, ci.low, ci.high)}
            if "lr" in r:  # each method's own (the sweep's choice on the validation split)
                row["lr"] = "/".join(f"{x:g}" for x in sorted(r["lr"].unique()))
            if floor is not None:
                fl = stats.t_interval(r["final_test_loss"].to_numpy() - floor)
                row["minus_bigram_floor"] = fmt_ci(fl.estimate, fl.low, fl.high)
            rt = r[r.timed.astype(bool)] if "timed" in r and r.timed.astype(bool).any() else r
            row.update({"run_tokens_per_s": float(rt.tokens_per_s.median()),
                        "run_pss_mb": float(r.pss_mb.median()),
                        "run_max_rss_mb": float(r.max_rss_mb.median())})
            _throughput_columns(row, thr, method, thr_of.get(method), r)
            _loss_columns(row, g, method, claims, group, alpha)
            key = {"rc-par": "local.rc.throughput", "rc-async": "local.rc.noninferior",
                   "pc-fixed-trunc": "local.pc.noninferior", "pc-fixed": "local.pc.noninferior",
                   "pc-strict": "local.pc.noninferior"}.get(method)
            if key and key in paper:
                row["paper"] = _paper_text(method, paper)
            rows.append(row)
    df = pd.DataFrame(rows)
    write_table(df, csv_out, md_out)
    return df


def _paper_text(method: str, paper: dict) -> str:
    bits = []
    for cid, label in (("local.rc.throughput", "throughput ×"), ("local.rc.memory", "peak memory"),
                       ("local.rc.noninferior", "quality"), ("local.pc.cost", "PC cost ×"),
                       ("local.pc.noninferior", "quality")):
        if cid in paper and paper[cid] is not None:
            if method.startswith("rc") and cid.startswith("local.rc"):
                bits.append(f"{label} {paper[cid]}")
            if method.startswith("pc") and cid.startswith("local.pc"):
                bits.append(f"{label} {paper[cid]}")
    return "; ".join(bits)
