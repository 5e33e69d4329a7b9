"""Summary tables and figures of the placement experiment (from run files only)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from distlab.scoring import stats
from distlab.results.tables import fmt_ci, read_table_checked, write_table

from .workflow import scenario

CONTROL = "_const"


def label(method: str) -> str:
    """A method's name in tables and figures: controls say what they are."""
    if method.endswith(CONTROL):
        return f"{method[: -len(CONTROL)]} (control: constant reward)"
    return method


def device_label(dev: dict[str, Any], i: int = 0) -> str:
    """A device's name with how its times are known: a roofline device is *modelled*."""
    name = dev.get("name", f"device {i}")
    if dev.get("kind") == "roofline":
        return f"{name} (modelled)"
    return f"{name} (measured on the CPU's host)" if dev.get("kind") == "measured_cuda" else f"{name} (profiled)"


def summarize(run_files: list[str | Path]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(summary: one row per run and seed, curves: best latency after each evaluation)."""
    rows, curves = [], []
    for f in run_files:
        res = json.loads(Path(f).read_text())
        spec = res["spec"]
        for r in res["rows"]:
            key = {"pair": spec["pair_name"], "model": spec["model_name"], "method": spec["method"],
                   "seed": int(r["seed"])}
            devices = " + ".join(device_label(d, i) for i, d in enumerate(spec["pair"]["devices"]))
            order = spec.get("sim_order", "topological")
            final = r.get("final_median_s", r["latency_s"])
            rows.append({**key, "scenario": scenario(order), "sim_order": order,
                         "latency_ms": r["latency_s"] * 1e3,
                         "final_median_ms": final * 1e3,
                         # the final policy: its most likely placement where the run scored it
                         # (final_greedy), else the median of its last 10 % of samples
                         "final_policy_ms": r.get("final_greedy_s", final) * 1e3,
                         "groups_optimum_ms": r.get("groups_optimum_s", np.nan) * 1e3,
                         "evaluations": r["evaluations"],
                         "evals_to_1pct": r["evals_to_1pct"], "frac_on_device1": r["frac_on_device1"],
                         "clusters_mean": r["clusters_mean"], "n_nodes": res["n_nodes"],
                         "n_edges": res["n_edges"], "n_groups": res["n_groups"], "wall_s": r["wall_s"],
                         "clock": res["clock"], "devices": devices})
            c = np.asarray(r["curve"]) * 1e3
            curves.append(pd.DataFrame({**key, "evaluation": np.arange(1, len(c) + 1), "best_ms": c}))
    df = pd.DataFrame(rows)
    if df.empty:
        raise ValueError("placement summary: no runs")
    dup = df.duplicated(["pair", "model", "method", "seed"])
    if dup.any():
        raise ValueError(f"placement summary: duplicate runs {df[dup][['pair', 'model', 'method', 'seed']].values.tolist()}")
    cpu = df[df.method == "cpu_only"].groupby(["pair", "model"]).latency_ms.mean()
    ref = [cpu.get((p, m), np.nan) for p, m in zip(df.pair, df.model)]
    df["speedup_pct"] = (np.asarray(ref) / df.latency_ms - 1.0) * 100.0
    df = add_optimum_columns(df)
    return df, pd.concat(curves, ignore_index=True)


def add_optimum_columns(df: pd.DataFrame) -> pd.DataFrame:
    """Columns against the serial optimum of each (pair, model) (NaN where no optimum ran):

    * ``headroom_pct``: how much faster the exact optimum is than the faster single device,
      ``min(CPU-only, GPU-only) / optimum - 1`` in %: 0 when no placement beats a single device;
    * ``optimum_gain_pct``: the optimum's speedup over CPU-only, ``CPU-only / optimum - 1`` in %;
    * ``frac_of_optimum``: the share of the optimum's gain over CPU-only a row's final policy
      reaches, ``(CPU-only - final policy) / (CPU-only - optimum)`` (NaN without a gain)."""
    df = df.copy()
    mean = df.groupby(["pair", "model", "method"]).latency_ms.mean()

    def get(p, m, method):
        return float(mean.get((p, m, method), np.nan))

    head, gain, frac = [], [], []
    for p, m, fin in zip(df.pair, df.model, df.final_policy_ms):
        opt, c, g = get(p, m, "optimum"), get(p, m, "cpu_only"), get(p, m, "gpu_only")
        single = np.nanmin([c, g]) if not (np.isnan(c) and np.isnan(g)) else np.nan
        head.append((single / opt - 1.0) * 100.0 if opt > 0 else np.nan)
        gain.append((c / opt - 1.0) * 100.0 if opt > 0 else np.nan)
        frac.append((c - fin) / (c - opt) if opt > 0 and c - opt > 1e-9 * c else np.nan)
    df["headroom_pct"], df["optimum_gain_pct"], df["frac_of_optimum"] = head, gain, frac
    return df


def optimum_table(df: pd.DataFrame, learners: list[str]) -> pd.DataFrame:
    """P2 as a whole, one row per serial pair and model: CPU-only, GPU-only, HEFT (timed serially),
    the exact optimum over operators and over the co-location groups, the headroom, random search
    at the learners' budget (its best), and each learner's best and final policy with the share of
    the optimum's gain over CPU-only its final policy reaches and its final speedup over CPU-only
    (means over seeds).  The optimum's speedup over CPU-only is the most any placement reaches on
    the pair: a claimed speedup above it cannot hold there, whatever the learner."""
    out = []
    ser = df[df.scenario == "serial"] if "scenario" in df else df.iloc[:0]
    for (pair, model), s in ser.groupby(["pair", "model"]):
        if "optimum" not in set(s.method):
            continue
        m = s.groupby("method")
        row: dict[str, Any] = {"pair": pair, "model": model, "scenario": "serial"}
        for meth in ("cpu_only", "gpu_only", "heft", "optimum"):
            if meth in m.groups:
                row[f"{meth} ms"] = float(m.get_group(meth).latency_ms.mean())
        row["optimum over groups ms"] = float(m.get_group("optimum").groups_optimum_ms.mean())
        row["headroom %"] = float(s.headroom_pct.iloc[0])
        row["optimum speedup over CPU-only %"] = float(s.optimum_gain_pct.iloc[0])
        row["no headroom"] = bool(row["headroom %"] < 1.0)
        if "random" in m.groups:
            row["random best ms"] = float(m.get_group("random").latency_ms.mean())
        for lr in learners:
            if lr in m.groups:
                g = m.get_group(lr)
                row[f"{lr} best ms"] = float(g.latency_ms.mean())
                row[f"{lr} final policy ms"] = float(g.final_policy_ms.mean())
                row[f"{lr} share of optimum's gain"] = float(g.frac_of_optimum.mean())
                if "cpu_only ms" in row:
                    row[f"{lr} final speedup over CPU-only %"] = (row["cpu_only ms"] / row[f"{lr} final policy ms"]
                                                                   - 1) * 100
        out.append(row)
    return pd.DataFrame(out)


def _ci_text(x: pd.Series, digits: int = 3) -> str:
    ci = stats.t_interval(x.to_numpy(float))
    return fmt_ci(ci.estimate, ci.low, ci.high, digits)


def main_table(df: pd.DataFrame, methods: tuple[str, ...]) -> pd.DataFrame:
    """method × model: latency (ms) and speedup % against CPU-only, mean [95 % t CI] over seeds;
    every learner with its constant-reward control on the next row."""
    out = []
    for pair in sorted(df.pair.unique()):
        for m in [x for x in methods if x in set(df.method)]:
            row: dict[str, Any] = {"pair": pair, "scenario": df[df.pair == pair].scenario.iloc[0]
                                   if "scenario" in df else "", "devices": df[df.pair == pair].devices.iloc[0]
                                   if "devices" in df else "", "method": label(m)}
            for model in sorted(df.model.unique()):
                s = df[(df.pair == pair) & (df.method == m) & (df.model == model)]
                if s.empty:
                    continue
                row[f"{model} latency ms"] = _ci_text(s.latency_ms)
                row[f"{model} speedup %"] = _ci_text(s.speedup_pct)
            if len(row) > 4:  # a method that does not run on this pair has no row
                out.append(row)
    return pd.DataFrame(out)


def ablation_table(df: pd.DataFrame, pair: str, base: str, ablations: list[str]) -> pd.DataFrame:
    """The ablated learner (``base``, the variant that learns), its control, and each ablation:
    best latency and the final policy's median latency."""
    keep = [base, base + CONTROL] + list(ablations)
    sub = df[(df.pair == pair) & df.method.isin(keep)]
    out = []
    for m in keep:
        row: dict[str, Any] = {"method": label(m)}
        for model in sorted(sub.model.unique()):
            s = sub[(sub.method == m) & (sub.model == model)]
            if not s.empty:
                row[f"{model} latency ms"] = _ci_text(s.latency_ms)
                row[f"{model} final policy ms"] = _ci_text(s.final_median_ms)
        out.append(row)
    return pd.DataFrame(out)


def learning_table(df: pd.DataFrame, learners: list[str], controls: list[str]) -> pd.DataFrame:
    """Does each learner learn?  Its final policy's median latency (last 10 % of its samples)
    and its best, beside its constant-reward control's, paired by seed (difference, 95 % t CI)."""
    out = []
    for pair in sorted(df.pair.unique()):
        for m in [x for x in learners if x in controls]:
            for model in sorted(df.model.unique()):
                a = df[(df.pair == pair) & (df.model == model) & (df.method == m)].set_index("seed")
                b = df[(df.pair == pair) & (df.model == model) & (df.method == m + CONTROL)].set_index("seed")
                seeds = a.index.intersection(b.index)
                if seeds.empty:
                    continue
                row: dict[str, Any] = {"pair": pair, "learner": m, "model": model, "seeds": len(seeds)}
                for col, name in (("final_median_ms", "final policy ms"), ("latency_ms", "best ms")):
                    row[f"{name}"] = _ci_text(a.loc[seeds, col])
                    row[f"control {name}"] = _ci_text(b.loc[seeds, col])
                    row[f"{name} minus control"] = _ci_text(a.loc[seeds, col] - b.loc[seeds, col])
                out.append(row)
    return pd.DataFrame(out)


def graph_table(df: pd.DataFrame) -> pd.DataFrame:
    """Per model: operators, edges, and the co-location groups the placers see: with one virtual
    weight node per weighted operator (the paper's graphs, partition ``coarsen``: the CPU-only
    row's count) and, where the ablation ran, without weight nodes (``*_weightless``)."""
    g = df.groupby("model")[["n_nodes", "n_edges"]].first()
    paper = df[df.method == "cpu_only"].groupby("model").n_groups.first()
    g["groups (weight nodes, paper-like)"] = paper
    weightless = df[df.method.str.endswith("_weightless")].groupby("model").n_groups.first()
    if not weightless.empty:
        g["groups (no weight nodes, ablation)"] = weightless
    return g.reset_index()


def convergence_table(df: pd.DataFrame, pair: str, methods: list[str]) -> pd.DataFrame:
    """Evaluations to come within 1 % of the run's own best: random search, every learner and
    its constant-reward control (next row)."""
    keep = [m for m in methods if m == "random" or m not in ("cpu_only", "gpu_only", "heft", "optimum")]
    sub = df[(df.pair == pair) & df.method.isin(keep)]
    t = (sub.groupby(["model", "method"]).evals_to_1pct.agg(["mean", "min", "max"])
         .reset_index().rename(columns={"mean": "evals_to_1pct_mean", "min": "min", "max": "max"}))
    t["order"] = [keep.index(m) for m in t.method]
    t = t.sort_values(["model", "order"]).drop(columns="order")
    t["method"] = [label(m) for m in t.method]
    return t.reset_index(drop=True)


def headline_table(df: pd.DataFrame) -> pd.DataFrame:
    """The two figures of the paper's abstract, computed on ours (per pair): HSDAG's largest
    speedup over CPU-only across models, and its largest speedup over another baseline
    (``T_baseline / T_hsdag - 1``, seed means).  The paper's values are in config/claims.yaml."""
    out = []
    means = df.groupby(["pair", "model", "method"]).latency_ms.mean()
    for pair in sorted(df.pair.unique()):
        m = means.loc[pair]
        for variant in ("hsdag", "hsdag_const", "hsdag_corrected", "hsdag_corrected_const", "hsdag_fine",
                        "hsdag_fine_const"):
            if variant not in m.index.get_level_values("method"):
                continue
            best_cpu, best_other = (-np.inf, ""), (-np.inf, "")
            for model in m.index.get_level_values("model").unique():
                if (model, variant) not in m.index:
                    continue
                h = m.loc[(model, variant)]
                for other, t in m.loc[model].items():
                    if other.startswith("hsdag") or other.endswith(CONTROL):
                        continue
                    sp = (t / h - 1) * 100
                    if other == "cpu_only" and sp > best_cpu[0]:
                        best_cpu = (sp, model)
                    if other != "cpu_only" and sp > best_other[0]:
                        best_other = (sp, f"{model} vs {other}")
            out.append({"pair": pair, "variant": label(variant), "largest speedup over CPU-only %": best_cpu[0],
                        "model (CPU-only)": best_cpu[1], "largest speedup over another baseline %": best_other[0],
                        "model vs baseline": best_other[1]})
    return pd.DataFrame(out)


def write_tables(summary: str | Path, out_dir: str | Path, opts: dict[str, Any]) -> None:
    df = read_table_checked(summary)
    out = Path(out_dir)
    methods = tuple(opts["methods"])
    write_table(main_table(df, methods), out / "placement_main.csv", out / "placement_main.md")
    write_table(graph_table(df), out / "placement_graphs.csv", out / "placement_graphs.md")
    write_table(convergence_table(df, opts["default_pair"], list(methods)), out / "placement_convergence.csv",
                out / "placement_convergence.md")
    write_table(learning_table(df, list(opts.get("learners", [])), list(opts.get("controls", []))),
                out / "placement_learning.csv", out / "placement_learning.md")
    write_table(headline_table(df), out / "placement_headline.csv", out / "placement_headline.md")
    write_table(optimum_table(df, list(opts.get("learners", []))), out / "placement_optimum.csv",
                out / "placement_optimum.md")


def write_ablation(summary: str | Path, out_dir: str | Path, opts: dict[str, Any]) -> None:
    df = read_table_checked(summary)
    out = Path(out_dir)
    write_table(ablation_table(df, opts["default_pair"], opts["ablation_of"], opts["ablations"]),
                out / "placement_ablation.csv",
                out / "placement_ablation.md")


def _curve(ax, c: pd.DataFrame, method: str, colour, dashed: bool) -> pd.DataFrame | None:
    """One method's best latency so far against evaluations: the mean over seeds, and its 95 % t
    band in the line's colour; the drawn means (for :func:`plots.coinciding`)."""
    from distlab.plotting import plots

    s = c[c.method == method]
    if s.empty:
        return None
    piv = s.pivot(index="evaluation", columns="seed", values="best_ms")
    mean = piv.mean(1)
    ax.plot(piv.index, mean, color=colour, linestyle="--" if dashed else "-", linewidth=1.2)
    if piv.shape[1] > 1:
        cis = [stats.t_interval(row.dropna().to_numpy()) for _, row in piv.iterrows()]
        ax.fill_between(piv.index, [ci.low for ci in cis], [ci.high for ci in cis], color=colour, alpha=0.15,
                        linewidth=0)
    return pd.DataFrame({"evaluation": piv.index, "ms": mean.to_numpy(), "method": plots.name(method)})


def fig_curves(curves: str | Path, out: str | Path, opts: dict[str, Any]) -> None:
    """Best latency so far against evaluations, a row per model: the learners beside random
    search (left) and the same learners' constant-reward controls (right), each with its band."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    from distlab.plotting import plots

    plots.set_style()
    c = read_table_checked(curves)
    learners = list(opts.get("learners", []))
    c = c[(c.pair == opts["default_pair"]) & c.method.isin(["random"] + [x for m in learners for x in (m, m + CONTROL)])]
    models = sorted(c.model.unique())
    bases = [m for m in ["random"] + learners if c.method.str.startswith(m).any()]
    palette = ["C7", "C0", "C2", "C3", "C4", "C9", "C1", "C5", "C6", "C8"]
    colours = {m: palette[i % len(palette)] for i, m in enumerate(bases)}
    fig, axes = plt.subplots(len(models), 2, figsize=(plots.PAGE, 1.9 * len(models) + 1.2), squeeze=False,
                             sharey="row", layout="constrained")
    for row, model in zip(axes, models):
        m = c[c.model == model]
        for ax, control in zip(row, (False, True)):
            drawn = [_curve(ax, m, b if b == "random" or not control else b + CONTROL, colours[b], control)
                     for b in bases]
            drawn = [d for d in drawn if d is not None]
            ax.set_xscale("log")
            ax.set(title=f"{plots.name(model)}: {'constant-reward controls' if control else 'learners'}",
                   xlabel="evaluations" if model == models[-1] else "", ylabel="best latency (ms)" if not control else "")
            if drawn:  # curves drawn over each other (two HSDAG variants finding one placement) said so
                plots.note_coinciding(ax, plots.coinciding(pd.concat(drawn), "evaluation", "ms", "method", tol=0.005),
                                      wrap=45)
    handles = [Line2D([], [], color=colours[b], linewidth=1.4, label=plots.name(b)) for b in bases]
    handles += [Line2D([], [], color="0.3", linestyle="--", label="dashed: constant reward (control)")]
    seeds = c.seed.nunique()
    if seeds > 1:
        handles.append(Patch(facecolor="0.3", alpha=0.2, label="band: 95% t interval over seeds"))
    fig.legend(handles=handles, loc="outside lower center", ncol=3, frameon=False)
    plots.label_provenance(fig, "simulated")
    plots.caption(fig, f"Best latency found so far against the number of placements evaluated, on "
                  f"{plots.name(opts['default_pair'])}, per model: each learner (reward = latency) beside random search (left) "
                  f"and the same learner rewarded with a constant (right); the second device's times are modelled",
                  int(seeds), plots.BAND, "simulated (virtual clock; second device modelled)")
    fig.suptitle("Placement search: best latency against evaluations")
    plots.save(fig, out)


def fig_placement(run_file: str | Path, graph_file: str | Path, out: str | Path,
                  opts: dict[str, Any]) -> None:
    """The best HSDAG placement of the first seed: operators in topological
    order, coloured by device, with their simulated start and finish."""
    import matplotlib.pyplot as plt

    from distlab.plotting import plots

    from . import costs
    from .graphs import load_graph
    from .problem import Problem

    plots.set_style()
    res = json.loads(Path(run_file).read_text())
    graph = load_graph(graph_file)
    prof = costs.load_profile(opts["profile"], graph)
    prob = Problem.build(graph, res["spec"]["pair"], prof, 1,
                         cuda=costs.load_cuda_profile(opts["profile"], graph),
                         order=res["spec"].get("sim_order", "topological"))
    row = res["rows"][0]
    tr = prob.sim.trace(np.asarray(row["placement"]))
    place = np.asarray(row["placement"])
    fig, ax = plt.subplots(figsize=(plots.PAGE, 2.6))
    names = [device_label(d, i) for i, d in enumerate(res["spec"]["pair"]["devices"])]
    colors = ["tab:blue", "tab:orange", "tab:green", "tab:red"]
    idle = []
    for d in range(prob.n_devices):
        idx = np.nonzero(place == d)[0]
        if len(idx) == 0:  # a device given no operator has nothing to draw or key: said in the title
            idle.append(names[d])
            continue
        ax.barh([d] * len(idx), (tr.finish - tr.start)[idx] * 1e3, left=tr.start[idx] * 1e3,
                color=colors[d % 4], edgecolor="k", linewidth=0.2, label=f"{names[d]} ({len(idx)} ops)")
    for v, src, dst, t0, t1 in tr.transfers:
        ax.barh(prob.n_devices + src, (t1 - t0) * 1e3, left=t0 * 1e3, color="0.5", height=0.5)
    ax.set_yticks(list(range(prob.n_devices)) + [prob.n_devices + d for d in range(prob.n_devices)])
    ax.set_yticklabels(names + [f"bus from {n}" for n in names])
    ax.set_xlabel("simulated time (ms)")
    ax.set_title(f"{plots.name(res['spec']['method'])} placement, {plots.name(res['spec']['model_name'])} on "
                 f"{plots.name(res['spec']['pair_name'])}: "
                 f"{tr.latency * 1e3:.1f} ms (seed {row['seed']})"
                 + (f"\nno operator placed on {', '.join(idle)}" if idle else ""))
    ax.legend(loc="upper right")
    plots.label_provenance(ax, "simulated")
    plots.caption(fig, f"The best placement {plots.name(res['spec']['method'])} found for "
                  f"{plots.name(res['spec']['model_name'])}: each operator's simulated start and finish on its device, in "
                  f"topological order, and the transfers on the bus", f"one seed (seed {row['seed']}), by design",
                  "none: one placement, no spread to show", "simulated (virtual clock)")
    plots.save(fig, out)
