"""Summary tables and figures of the placement experiment (from run files only)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from distlab.scoring import stats
from distlab.results.tables import fmt_ci, write_table

CONTROL = "_const"


def label(method: str) -> str:
    """A method's name in tables and figures: controls say what they are."""
    if method.endswith(CONTROL):
        return f"{method[: -len(CONTROL)]} (control: constant reward)"
    return method


def device_label(dev: dict[str, Any], i: int = 0) -> str:
    """A device's name with how its times are known: a roofline device is *modelled*."""
    name = dev.get("name", f"device {i}")
    return f"{name} (modelled)" if dev.get("kind") == "roofline" else f"{name} (profiled)"


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
            rows.append({**key, "latency_ms": r["latency_s"] * 1e3,
                         "final_median_ms": r.get("final_median_s", r["latency_s"]) * 1e3,
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
    return df, pd.concat(curves, ignore_index=True)


def _ci_text(x: pd.Series, digits: int = 3) -> str:
    ci = stats.t_interval(x.to_numpy(float))
    return fmt_ci(ci.estimate, ci.low, ci.high, digits)


def main_table(df: pd.DataFrame, methods: tuple[str, ...]) -> pd.DataFrame:
    """method × model: latency (ms) and speedup % against CPU-only, mean [95 % t CI] over seeds;
    every learner with its constant-reward control on the next row."""
    out = []
    for pair in sorted(df.pair.unique()):
        for m in [x for x in methods if x in set(df.method)]:
            row: dict[str, Any] = {"pair": pair, "devices": df[df.pair == pair].devices.iloc[0]
                                   if "devices" in df else "", "method": label(m)}
            for model in sorted(df.model.unique()):
                s = df[(df.pair == pair) & (df.method == m) & (df.model == model)]
                if s.empty:
                    continue
                row[f"{model} latency ms"] = _ci_text(s.latency_ms)
                row[f"{model} speedup %"] = _ci_text(s.speedup_pct)
            if len(row) > 3:  # a method that does not run on this pair has no row
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
    g = df.groupby("model")[["n_nodes", "n_edges", "n_groups"]].first().reset_index()
    return g


def convergence_table(df: pd.DataFrame, pair: str, methods: list[str]) -> pd.DataFrame:
    """Evaluations to come within 1 % of the run's own best: random search, every learner and
    its constant-reward control (next row)."""
    keep = [m for m in methods if m == "random" or m not in ("cpu_only", "gpu_only", "heft")]
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
    df = pd.read_csv(summary)
    out = Path(out_dir)
    methods = tuple(opts["methods"])
    write_table(main_table(df, methods), out / "placement_main.csv", out / "placement_main.md")
    write_table(graph_table(df), out / "placement_graphs.csv", out / "placement_graphs.md")
    write_table(convergence_table(df, opts["default_pair"], list(methods)), out / "placement_convergence.csv",
                out / "placement_convergence.md")
    write_table(learning_table(df, list(opts.get("learners", [])), list(opts.get("controls", []))),
                out / "placement_learning.csv", out / "placement_learning.md")
    write_table(headline_table(df), out / "placement_headline.csv", out / "placement_headline.md")


def write_ablation(summary: str | Path, out_dir: str | Path, opts: dict[str, Any]) -> None:
    df = pd.read_csv(summary)
    out = Path(out_dir)
    write_table(ablation_table(df, opts["default_pair"], opts["ablation_of"], opts["ablations"]),
                out / "placement_ablation.csv",
                out / "placement_ablation.md")


def fig_curves(curves: str | Path, out: str | Path, opts: dict[str, Any]) -> None:
    import matplotlib.pyplot as plt

    from distlab.plotting import plots

    plots.set_style()
    c = pd.read_csv(curves)
    learners = list(opts.get("learners", []))
    shown = ["random"] + [x for m in learners for x in (m, m + CONTROL)]
    c = c[(c.pair == opts["default_pair"]) & c.method.isin(shown)]
    models = sorted(c.model.unique())
    fig, axes = plt.subplots(1, len(models), figsize=(5.0 * len(models), 3.8), squeeze=False)
    colours = {m: f"C{i}" for i, m in enumerate(["random"] + learners)}
    for ax, model in zip(axes[0], models):
        for method in shown:
            s = c[(c.model == model) & (c.method == method)]
            if s.empty:
                continue
            piv = s.pivot(index="evaluation", columns="seed", values="best_ms")
            mean = piv.mean(1)
            base = method[: -len(CONTROL)] if method.endswith(CONTROL) else method
            ax.plot(piv.index, mean, label=label(method), color=colours.get(base),
                    linestyle="--" if method.endswith(CONTROL) else "-")
            if piv.shape[1] > 1:
                cis = [stats.t_interval(row.dropna().to_numpy()) for _, row in piv.iterrows()]
                ax.fill_between(piv.index, [ci.low for ci in cis], [ci.high for ci in cis], alpha=0.2)
        ax.set_xscale("log")
        ax.set_title(model)
        ax.set_xlabel("evaluations")
        ax.set_ylabel("best latency so far (ms)")
        plots.label_provenance(ax, "simulated", "2nd device modelled; dashed: control")
    axes[0][0].legend(fontsize=6)
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
    fig, ax = plt.subplots(figsize=(9, 3.2))
    names = [device_label(d, i) for i, d in enumerate(res["spec"]["pair"]["devices"])]
    colors = ["tab:blue", "tab:orange", "tab:green", "tab:red"]
    for d in range(prob.n_devices):
        idx = np.nonzero(place == d)[0]
        ax.barh([d] * len(idx), (tr.finish - tr.start)[idx] * 1e3, left=tr.start[idx] * 1e3,
                color=colors[d % 4], edgecolor="k", linewidth=0.2, label=f"{names[d]} ({len(idx)} ops)")
    for v, src, dst, t0, t1 in tr.transfers:
        ax.barh(prob.n_devices + src, (t1 - t0) * 1e3, left=t0 * 1e3, color="0.5", height=0.5)
    ax.set_yticks(list(range(prob.n_devices)) + [prob.n_devices + d for d in range(prob.n_devices)])
    ax.set_yticklabels(names + [f"bus from {n}" for n in names])
    ax.set_xlabel("simulated time (ms)")
    ax.set_title(f"{res['spec']['method']} placement, {res['spec']['model_name']} on {res['spec']['pair_name']}: "
                 f"{tr.latency * 1e3:.1f} ms (seed {row['seed']})")
    ax.legend(fontsize=8, loc="upper right")
    plots.label_provenance(ax, "simulated", "best placement of one seed")
    plots.save(fig, out)
