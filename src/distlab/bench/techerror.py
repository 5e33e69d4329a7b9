"""The simulator's error per technique: real gloo runs on shaped links against the NetworkModel.

Every technique runs for real, four processes, each in a network namespace of its
own (:mod:`distlab.runtime.netns`), its link shaped by tbf, on this machine's two
cores (measured):

* AdamW-DDP, DeMo, PowerSGD: the ``demo`` experiment's gloo driver, four
  workers, the tiny GPT;
* DiLoCo: the ``atlas`` experiment's gloo driver (the demo driver runs DiLoCo on
  the simulated backend only), four workers, the same tiny GPT; started as a
  command like every run here (this shared module imports no study package) and
  read back from its ``record.json``;
* IS-SGD and PGC (``pgc-cr``): the ``pgc`` experiment's gloo driver, a master and
  three workers (four processes), logistic regression on digits.

Each run records per step its measured wall time and what it communicated (the
byte ledger's bytes, the latency-bound rounds, the collective) and computed
(``compute_s``: the rank's forward/backward; PGC: the slowest received worker's
compute and encode, the master's decode).  The prediction for the same step is
what :class:`distlab.runtime.network.NetworkModel` says for that pattern at the
nominal link rate and the model's default latency (simulated):

* demo methods: ``compute_s + rounds x latency + bytes / bandwidth`` (the ring
  rules of the ledger, i.e. ``NetworkModel.all_reduce`` / ``all_gather``);
* PGC / IS-SGD: ``broadcast(model) + compute_max + encode_max + p2p(message) +
  decode_s`` (the master's overlapping sends, as the simulator assumes).

With ``--fit`` (the shaped benchmark's ``netcheck_fit.csv``) a second prediction
replaces the nominal link by the measured one: the fitted latency and bandwidth
of the collective the technique uses at that rate (``FIT_OP``), column
``error_with_fitted_link``.

The error of a repeat is ``sum(simulated) / sum(measured) - 1`` over its steps (the
first step, with its connection set-up, is left out); the table gives the mean
over repeats and its 95 % t-interval.  **Time to the target loss** is the same
sum up to the first step whose training loss is at or below the technique's
target (the highest final loss among its runs, so every run reaches it):
measured against simulated for the same run.  The atlas's replay of a recorded run could be plugged in by
replacing :func:`predict_steps` with the replay of the same ``metrics.csv``.
"""

from __future__ import annotations

import json
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

RATES = {"10Mbit": 10e6, "100Mbit": 100e6, "1Gbit": 1e9}
# the same runs on the unshaped link: what a step costs here beyond the recorded compute and the
# network (the update's own compute, Python, 4 ranks on 2 cores), used by the calibrated prediction
REFERENCE = "unshaped"
DEMO_METHODS = {"AdamW-DDP": "adamw", "DeMo": "demo", "PowerSGD": "powersgd"}
ATLAS_METHODS = {"DiLoCo": "diloco"}
PGC_SCHEMES = {"IS-SGD": "is-sgd", "PGC": "pgc-cr"}
TINY_GPT = {"name": "gpt", "n_layer": 1, "d_model": 64, "n_head": 2, "block_size": 16}
DEFAULT_LATENCY_S = 1e-4  # NetworkModel's own default


def demo_spec(method: str, steps: int, seed: int) -> dict:
    return {"experiment": "demo", "method": method, "backend": "gloo", "seed": seed, "model": TINY_GPT,
            "n_workers": 4, "batch_size": 2, "lr": 1e-3, "steps": steps, "eval_every": steps,
            "eval_batches": 1, "dtype": "float32",
            "demo": {"topk": 8, "chunk": 64, "decay": 0.999, "weight_decay": 0.0},
            "diloco": {"H": 2, "outer_lr": 0.7, "outer_momentum": 0.9}, "powersgd": {"rank": 2},
            "cluster": {"compute": {"mode": "measured", "unit_seconds": 0.0, "scale": 1.0},
                        "network": {"latency_s": DEFAULT_LATENCY_S, "bandwidth_Bps": 1.25e9},
                        "straggler": {"model": "none"}}}


def atlas_spec(technique: str, steps: int, seed: int) -> dict:
    d = demo_spec(technique, steps, seed)
    return {"experiment": "atlas", "technique": technique, "backend": "gloo", "seed": seed, "model": TINY_GPT,
            "n_workers": 4, "batch_size": d["batch_size"], "lr": d["lr"], "steps": steps, "eval_every": steps,
            "eval_batches": 1, "diloco": d["diloco"], "cluster": d["cluster"]}


def atlas_metrics(run_dir: Path) -> pd.DataFrame:
    """An atlas gloo run's ``record.json`` as the per-step columns :func:`predict_steps` reads: the
    collectives' per-worker bytes and rounds by the ring rules of :mod:`distlab.runtime.network`."""
    from ..runtime.network import all_gather_bytes, ring_all_reduce_bytes

    rec = json.loads((Path(run_dir) / "record.json").read_text())
    n, rows = int(rec["n"]), []
    for s in rec["steps"]:
        nbytes = rounds = 0.0
        for op, b in s.get("colls", []):
            ar = op == "all_reduce"
            nbytes += ring_all_reduce_bytes(b, n) if ar else all_gather_bytes(b, n)
            rounds += 2 * (n - 1) if ar else n - 1
        rows.append({"step": s["step"], "step_time": s["step_time"], "compute_s": max(s["compute_s"]),
                     "bytes": nbytes, "rounds": rounds, "loss": s["loss"]})
    return pd.DataFrame(rows)


def pgc_spec(scheme: str, steps: int, seed: int) -> dict:
    return {"experiment": "pgc", "group": "netcheck", "scheme": scheme, "backend": "gloo",
            "n": 3, "s": 1, "seed": seed, "model": {"name": "logreg"}, "lr": 0.1, "dtype": "float64",
            "batch_size": 16, "steps": steps, "eval_every": steps,
            "cluster": {"compute": {"mode": "calibrated", "unit_seconds": 0.0},
                        "network": {"latency_s": DEFAULT_LATENCY_S, "bandwidth_Bps": 1.25e9},
                        "straggler": {"model": "none"}},
            }


# the collective whose measured alpha-beta fit (distlab.bench.netcheck) stands for a technique's traffic
FIT_OP = {"adamw": "all_reduce", "powersgd": "all_reduce", "diloco": "all_reduce", "demo": "all_gather",
          "is-sgd": "p2p", "pgc-cr": "p2p"}


def load_fits(path: Path) -> dict:
    """{(rate, op): (alpha_s, beta_Bps)} from netcheck's ``*_fit.csv`` (link rows only)."""
    f = pd.read_csv(path)
    f = f[(f.get("latency") == "link") & f["alpha_s"].notna()]
    return {(r.rate, r.op): (float(r.alpha_s), float(r.beta_Bps)) for r in f.itertuples()}


def predict_steps(m: pd.DataFrame, kind: str, rate_bps: float, n_workers: int,
                  latency_s: float = DEFAULT_LATENCY_S, fit: tuple[float, float] | None = None) -> np.ndarray:
    """NetworkModel's time (simulated) of each recorded step, from the run's own record; with
    ``fit`` = (alpha, beta) the link's measured latency and bandwidth replace the nominal ones."""
    from ..runtime.network import NetworkModel

    net = (NetworkModel(latency_s=fit[0], bandwidth_Bps=fit[1]) if fit is not None
           else NetworkModel(latency_s=latency_s, bandwidth_Bps=rate_bps / 8 if rate_bps else math.inf))
    if "rounds" in m:  # a record of collectives (demo, the atlas): its rounds and bytes
        return (m["compute_s"].to_numpy() + m["rounds"].to_numpy() * net.latency_s
                + m["bytes"].to_numpy() / net.bandwidth_Bps)
    if "compute_max" not in m:
        raise ValueError(f"techerror: the {kind} record has neither rounds (collectives) nor compute_max "
                         "(a master and its workers)")
    model_bytes = m["bytes"].to_numpy() / n_workers  # the master sends one model to each worker
    return (net.broadcast(model_bytes, n_workers) + m["compute_max"].to_numpy() + m["encode_max"].to_numpy()
            + net.p2p(model_bytes) + m["decode_s"].to_numpy())


def time_to_target(steps_df: pd.DataFrame) -> pd.DataFrame:
    """Per run (technique, rate, repeat): the measured and the simulated time (summed over the counted
    steps) until the first step whose loss is at or below the technique's target, the highest last-step
    loss among its runs (so every run reaches it)."""
    if steps_df.empty:
        return pd.DataFrame()
    keys = ["technique", "rate", "repeat"]
    runs = steps_df.sort_values("step").groupby(keys, sort=False)
    target = runs["loss"].last().groupby(level="technique").max()
    rows = []
    for (tech, label, rep), g in runs:
        hit = int(np.flatnonzero(g["loss"].to_numpy() <= target[tech])[0])
        rows.append({"technique": tech, "rate": label, "repeat": rep, "target_loss": float(target[tech]),
                     "steps_to_target": int(g["step"].iloc[hit]),
                     "measured_s": float(g["measured_s"].iloc[:hit + 1].sum()),
                     "simulated_s": float(g["simulated_s"].iloc[:hit + 1].sum())})
    return pd.DataFrame(rows)


def _ttt_summary(ttt: pd.DataFrame, tech: str, label: str) -> dict:
    g = ttt[(ttt["technique"] == tech) & (ttt["rate"] == label)] if len(ttt) else ttt
    if g.empty:
        return {}
    err = g["simulated_s"] / g["measured_s"] - 1.0
    k = len(err)
    half = _t95(k) * float(err.std(ddof=1)) / math.sqrt(k) if k > 1 else math.nan
    return {"target_loss": float(g["target_loss"].iloc[0]), "measured_to_target_s": float(g["measured_s"].mean()),
            "simulated_to_target_s": float(g["simulated_s"].mean()), "error_to_target": float(err.mean()),
            "error_to_target_ci95_lo": float(err.mean()) - half, "error_to_target_ci95_hi": float(err.mean()) + half}


def _t95(k: int) -> float:
    from scipy.stats import t

    return float(t.ppf(0.975, k - 1)) if k > 1 else math.nan


def _step_rows(m: pd.DataFrame, kind: str, bps, fit, key: dict) -> list[dict]:
    """One row per step of a shaped run's metrics ``m`` (``key``: its technique, rate and repeat):
    measured against simulated step seconds, with the nominal and the fitted link."""
    rows = []
    nw = 3 if kind == "pgc" else 4
    pred = predict_steps(m, kind, bps, nw)
    fitted = predict_steps(m, kind, bps, nw, fit=fit) if fit else np.full(len(m), np.nan)
    compute = (m["compute_s"] if kind != "pgc" else
               m["compute_max"] + m["encode_max"] + m["decode_s"]).to_numpy()
    # left out: the steps up to the first that communicates (it opens the connections;
    # DiLoCo's first synchronisation is at step H - 1)
    first = int(np.argmax(m["bytes"].to_numpy() > 0))
    for i, (meas, sim) in enumerate(zip(m["step_time"].to_numpy(), pred)):
        if i <= first:
            continue
        rows.append({**key, "step": int(m["step"].iloc[i]),
                     "measured_s": float(meas), "simulated_s": float(sim),
                     "simulated_fitted_s": float(fitted[i]), "compute_s": float(compute[i]),
                     "bytes": float(m["bytes"].iloc[i]), "loss": float(m["loss"].iloc[i]),
                     "rounds": float(m["rounds"].iloc[i]) if "rounds" in m else 2.0,
                     "rel_err": float(sim / meas - 1.0)})
    return rows


def _summary_rows(steps_df: pd.DataFrame, resid: pd.Series, ttt) -> list[dict]:
    """One row per technique x shaped rate: the simulated step time's relative error over the
    measured one (mean over repeats, t CI), with the fitted and the calibrated link."""
    summary = []
    for (tech, label), g in steps_df[steps_df["rate"] != REFERENCE].groupby(["technique", "rate"], sort=False):
        per_rep = g.groupby("repeat")[["simulated_s", "measured_s"]].sum()
        per_rep = per_rep["simulated_s"] / per_rep["measured_s"] - 1.0
        k = len(per_rep)
        mean = float(per_rep.mean())
        half = _t95(k) * float(per_rep.std(ddof=1)) / math.sqrt(k) if k > 1 else math.nan
        fe = g.groupby("repeat")[["simulated_fitted_s", "simulated_calibrated_s", "measured_s"]].sum(min_count=1)
        ce = fe["simulated_calibrated_s"] / fe["measured_s"] - 1.0
        fe = fe["simulated_fitted_s"] / fe["measured_s"] - 1.0
        summary.append({"technique": tech, "rate": label, "status": "measured vs simulated",
                        "measured_step_s": float(g["measured_s"].median()),
                        "simulated_step_s": float(g["simulated_s"].median()),
                        "compute_s": float(g["compute_s"].median()),
                        "bytes_per_step": float(g["bytes"].median()), "repeats": k,
                        "error": mean, "error_ci95_lo": mean - half, "error_ci95_hi": mean + half,
                        "over_10pct": bool(abs(mean) > 0.10),
                        "error_with_fitted_link": float(fe.mean()) if fe.notna().all() else float("nan"),
                        "error_calibrated": float(ce.mean()) if ce.notna().all() else float("nan"),
                        "residual_unshaped_s": float(resid.get(tech, float("nan"))),
                        **_ttt_summary(ttt, tech, label)})
    return summary


def run_table(data_demo: Path, data_pgc: Path, steps: int = 6, repeats: int = 2,
              rates: dict | None = None, timeout_s: float = 300.0, log=None,
              fits: dict | None = None, reference_repeats: int = 1) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per-step rows, per technique x rate summary); "not run" rows without root/kernel features.
    The unshaped reference runs (only with ``fits``) are made ``reference_repeats`` times: they give
    the calibrated prediction's residual, a median over their steps, not an error of its own."""
    from ..runtime.netns import run_shaped
    from ..runtime.netns import unavailable

    rates = RATES if rates is None else rates
    # (technique, its name in the spec, the spec builder); the experiment is the spec's own
    techs = ([(k, v, demo_spec) for k, v in DEMO_METHODS.items()] + [(k, v, atlas_spec) for k, v in ATLAS_METHODS.items()]
             + [(k, v, pgc_spec) for k, v in PGC_SCHEMES.items()])
    why = unavailable()
    if why:
        print(f"techerror: not run: {why}", file=sys.stderr)
        return pd.DataFrame(), pd.DataFrame([{"technique": t, "rate": r, "status": f"not run: {why}"}
                                             for t, _, _ in techs for r in rates])
    steps_rows = []
    with tempfile.TemporaryDirectory(prefix="distlab-techerror-") as tmp:
        for rep in range(repeats):
            ref = [(REFERENCE, None)] if fits and rep < reference_repeats else []
            for label, bps in [*rates.items(), *ref]:
                for tech, name, build in techs:  # interleaved: a passing load touches all alike
                    out = Path(tmp) / f"{name}-{label}-{rep}"
                    spec = build(name, steps, rep)
                    kind = spec["experiment"]
                    data = data_pgc if kind == "pgc" else data_demo
                    t0 = time.perf_counter()
                    with open(Path(tmp) / "job.log", "a") as jl:
                        run_shaped(["train", "--experiment", kind, "--spec", json.dumps(spec), "--data", str(data),
                                    "--out", str(out)], 4, bps, timeout_s, stream=jl)
                    wall = time.perf_counter() - t0
                    m = atlas_metrics(out) if kind == "atlas" else pd.read_csv(out / "metrics.csv")
                    fit = (fits or {}).get((label, FIT_OP[name]))
                    steps_rows += _step_rows(m, kind, bps, fit, {"technique": tech, "rate": label, "repeat": rep})
                    if log:
                        print(f"techerror: {tech} at {label} repeat {rep}: job {wall:.1f} s", file=log, flush=True)
    steps_df = pd.DataFrame(steps_rows)
    # calibrated: the fitted link plus the technique's per-step residual on the unshaped link
    # (measured minus fitted prediction there, median over its steps and repeats)
    ref = steps_df[steps_df["rate"] == REFERENCE]
    resid = (ref["measured_s"] - ref["simulated_fitted_s"]).groupby(ref["technique"]).median()
    steps_df["simulated_calibrated_s"] = steps_df["simulated_fitted_s"] + steps_df["technique"].map(resid)
    ttt = time_to_target(steps_df)
    summary = _summary_rows(steps_df, resid, ttt)
    return steps_df, pd.DataFrame(summary)


def figure(summary: pd.DataFrame, out: Path) -> None:
    """Measured against simulated step time, saved like every figure here (:func:`plots.save`:
    the legend moved off the points, the legibility check recorded in the PNG)."""
    from ..plotting import plots

    plots.set_style()
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(plots.COLUMN, 3.2))
    if "measured_step_s" in summary:
        for i, (tech, g) in enumerate(summary.dropna(subset=["measured_step_s"]).groupby("technique", sort=False)):
            colour = f"C{i}"
            ax.loglog(g["measured_step_s"], g["simulated_step_s"], "o-", color=colour,
                      label=f"{plots.name(tech)}: nominal link")
            if "error_calibrated" in g and g["error_calibrated"].notna().all():
                ax.loglog(g["measured_step_s"], g["measured_step_s"] * (1 + g["error_calibrated"]), "s--",
                          mfc="none", color=colour, label=f"{plots.name(tech)}: fitted link + residual")
        lo = float(min(summary["measured_step_s"].min(), summary["simulated_step_s"].min())) * 0.8
        hi = float(max(summary["measured_step_s"].max(), summary["simulated_step_s"].max())) * 1.25
        # the diagonal and its ±10 % band in one colour: the band reads as the diagonal's, not a series
        ax.plot([lo, hi], [lo, hi], "--", color="grey", lw=0.8, label="simulated = measured")
        ax.fill_between([lo, hi], [lo * 0.9, hi * 0.9], [lo * 1.1, hi * 1.1], color="grey", alpha=0.2,
                        label="simulated = measured ±10 %")
        ax.legend(loc="upper left", bbox_to_anchor=(0, -0.25), frameon=False)
    else:
        ax.text(0.5, 0.5, "not run: " + str(summary["status"].iloc[0]), ha="center", va="center", wrap=True,
                transform=ax.transAxes)
    ax.set_xlabel("measured step time (s)")
    ax.set_ylabel("simulated step time (s)")
    ax.set_title("Step time: measured vs simulated")
    plots.label_provenance(fig, "gloo")
    plots.label_provenance(fig, "simulated")
    repeats = int(summary["repeats"].max()) if "repeats" in summary and summary["repeats"].notna().any() else None
    plots.caption(fig, "Median step time of each technique on 4 gloo ranks over shaped links (x) against the "
                  "simulator's NetworkModel for the same steps (y), per link rate; dashed: the fitted link plus the "
                  "unshaped residual; grey: simulated = measured and its 10 % band",
                  f"{repeats} repeats a point" if repeats else "the repeats of the benchmark",
                  "none drawn: medians of repeated steps", "measured (wall clock, gloo) on x, simulated (virtual "
                  "clock) on y")
    plots.save(fig, out)


def techerror(data_demo: Path, data_pgc: Path, out: Path, steps: int = 6, repeats: int = 2,
              reference_repeats: int = 1, fit: Path | None = None) -> None:
    """The error table, its steps, figure and markdown beside ``out`` (``distlab techerror``)."""
    from ..results.tables import atomic_write_text, markdown_table

    fits = load_fits(fit) if fit else None
    steps_df, summary = run_table(data_demo, data_pgc, steps, repeats, log=sys.stderr, fits=fits,
                                  reference_repeats=reference_repeats)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    summary.to_csv(out, index=False)
    steps_df.to_csv(out.with_name(out.stem + "_steps.csv"), index=False)
    figure(summary, out.with_suffix(".png"))
    atomic_write_text(out.with_suffix(".md"),
                      "# The simulator's error per technique (measured vs simulated; 4 gloo ranks on shaped "
                      "links, 2 cores)\n\nerror = simulated / measured - 1 (mean over a repeat's steps, "
                      "95 % t-interval over repeats)\n\n" + markdown_table(summary) + "\n")
