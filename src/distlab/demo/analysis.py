"""DeMo results: run-level tables and the bytes table (the figures: :mod:`.figures`).

Everything here reads run directories or the tables made from them; nothing
trains.  Simulated times under another network are recomputed from what
each step recorded (``compute_s``, ``rounds``, ``bytes``):
``compute + rounds * latency + bytes / bandwidth`` (the alpha-beta model of
:mod:`distlab.runtime.network`, ring collectives).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from ..results.runs import write_csv
from ..techniques.catalogue import METHODS
from ..scoring.stats import t_interval
from ..results.summarize import collect
from ..results.tables import atomic_write_text, markdown_table, read_table_checked

RUN_KEYS = ["method", "n_workers", "backend", "seed", "lr"]


# ------------------------------------------------------------------ tables

def summarize(run_dirs: list[str | Path], networks: dict) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per-step and run-level tables of DeMo runs, with bytes and re-timed columns."""
    steps, runs = collect(run_dirs)
    steps = steps.sort_values(RUN_KEYS + ["step"]).reset_index(drop=True)
    keys = [steps[k] for k in RUN_KEYS]
    # a row's validation loss is measured at the model the step starts from, so its
    # cumulative bytes and times are those before the step
    steps["cum_bytes"] = steps["bytes"].groupby(keys, sort=False).cumsum() - steps["bytes"]
    steps["cum_payload_bytes"] = steps["payload_bytes"].groupby(keys, sort=False).cumsum() - steps["payload_bytes"]
    for name, net in networks.items():
        t = steps["compute_s"] + steps["rounds"] * float(net["latency_s"]) + steps["bytes"] / float(net["bandwidth_Bps"])
        steps[f"step_time_{name}"] = t
        steps[f"time_{name}"] = t.groupby(keys, sort=False).cumsum() - t
    agg = steps.groupby(RUN_KEYS, sort=False).agg(
        payload_bytes_per_step=("payload_bytes", "mean"),
        compute_per_step=("compute_s", "mean"),
        **{f"time_{n}": (f"step_time_{n}", "sum") for n in networks},
        step_time_median=("step_time", lambda s: float(np.median(s.iloc[1:] if len(s) > 1 else s))),
    ).reset_index()
    runs = runs.merge(agg, on=RUN_KEYS, how="left")
    base = runs[runs["method"] == "adamw"][["n_workers", "backend", "seed", "bytes_per_step",
                                             "payload_bytes_per_step", "step_time_median"]]
    base = base.rename(columns={"bytes_per_step": "_ab", "payload_bytes_per_step": "_ap",
                                "step_time_median": "_at"})
    # one AdamW run per (N, backend, seed); a sweep has several (one per lr): the bytes agree, keep one
    base = base.drop_duplicates(subset=["n_workers", "backend", "seed"])
    runs = runs.merge(base, on=["n_workers", "backend", "seed"], how="left")
    runs["bytes_reduction"] = runs["_ab"] / runs["bytes_per_step"]
    # like with like against the paper's DDP figure (~2 bytes a parameter): AdamW's fp32 payload
    # (gradients and the 4-byte loss) counted at 2 bytes an element
    runs["bytes_reduction_bf16"] = (runs["_ap"] / 2) / runs["payload_bytes_per_step"]
    runs["payload_reduction"] = runs["_ap"] / runs["payload_bytes_per_step"]
    runs["step_time_vs_adamw"] = runs["step_time_median"] / runs["_at"]
    runs = runs.drop(columns=["_ab", "_ap", "_at"])
    # the evaluation after the last step (on the curve's windows) closes each curve
    curve_col = "final_curve_val_loss" if "final_curve_val_loss" in runs else "final_val_loss"
    last = steps.groupby(RUN_KEYS, sort=False).tail(1).copy()
    last = last.merge(runs[RUN_KEYS + [curve_col]], on=RUN_KEYS, how="left")
    last["step"] += 1
    last["val_loss"] = last.pop(curve_col)
    last["cum_bytes"] += last["bytes"]
    last["cum_payload_bytes"] += last["payload_bytes"]
    for name in networks:
        last[f"time_{name}"] += last[f"step_time_{name}"]
    for col in ("loss", "bytes", "payload_bytes", "step_time", "compute_s", "rounds", *[f"step_time_{n}" for n in networks]):
        if col in last:
            last[col] = np.nan
    steps = pd.concat([steps, last], ignore_index=True).sort_values(RUN_KEYS + ["step"]).reset_index(drop=True)
    return steps, _gaps(steps, runs)


LATE = 2 / 3  # the horizon check looks at the last third of training


def _gaps(steps: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """Per run, against AdamW-DDP of the same N, backend and seed (lr: AdamW's own, the one run):

    * ``gap_test`` = final test loss - AdamW's; ``gap_val`` likewise on the validation split;
    * ``late_val_drop`` = the curve's validation loss at the first evaluation at or after
      2/3 of the steps minus its last value (how much it still fell in the last third);
    * ``gap_shrink_late`` = ``late_val_drop`` - AdamW's: how much the gap to AdamW shrank over the
      last third of training (near 0 once the comparison is past its horizon)."""
    ev = steps[steps["val_loss"].notna()]
    drops = []
    for key, g in ev.groupby(RUN_KEYS, sort=False):
        g = g.sort_values("step")
        end = int(g["step"].max())
        late = g[g["step"] >= LATE * end]
        drops.append({**dict(zip(RUN_KEYS, key)), "late_val_drop":
                      float(late["val_loss"].iloc[0] - g["val_loss"].iloc[-1]) if len(late) else np.nan,
                      "late_from_step": int(late["step"].iloc[0]) if len(late) else -1})
    runs = runs.merge(pd.DataFrame(drops), on=RUN_KEYS, how="left")
    cols = [c for c in ("final_test_loss", "final_val_loss", "late_val_drop") if c in runs]
    base = runs[runs["method"] == "adamw"][["n_workers", "backend", "seed", *cols]]
    base = base.drop_duplicates(subset=["n_workers", "backend", "seed"]).rename(columns={c: f"_a_{c}" for c in cols})
    runs = runs.merge(base, on=["n_workers", "backend", "seed"], how="left")
    if "final_test_loss" in runs:
        runs["gap_test"] = runs["final_test_loss"] - runs["_a_final_test_loss"]
    runs["gap_val"] = runs["final_val_loss"] - runs["_a_final_val_loss"]
    runs["gap_shrink_late"] = runs["late_val_drop"] - runs["_a_late_val_drop"]
    return runs.drop(columns=[f"_a_{c}" for c in cols])


def main_summarize(run_dirs, networks: dict, steps_out, summary_out) -> None:
    from ..results.tables import write_checked_table

    steps, runs = summarize(run_dirs, networks)
    # each with its record (the runs it summarises): readers refuse it cut short or a run gone
    write_checked_table(steps, steps_out, list(run_dirs))
    write_checked_table(runs, summary_out, list(run_dirs))


def _ci(values) -> str:
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if not len(v):
        return "n/a"
    ci = t_interval(v)
    return f"{ci.estimate:.4g} [{ci.low:.4g}, {ci.high:.4g}]" if ci.low != ci.high else f"{ci.estimate:.4g}"


def results_table(summary: str | Path, out_csv, out_md, networks: dict, methods=METHODS) -> pd.DataFrame:
    """One row per (method, N): final validation loss, bytes, times (mean [95 % t CI] over seeds)."""
    s = read_table_checked(summary)
    rows = []
    for (n, method), g in s.groupby(["n_workers", "method"], sort=True):
        row = {"N": int(n), "method": methods.label(method), "seeds": len(g),
               "lr": float(g["lr"].iloc[0]),
               "steps": int(g["steps"].iloc[0]),
               "final test loss": _ci(g["final_test_loss"]) if "final_test_loss" in g else "n/a",
               "gap to AdamW (test)": _ci(g["gap_test"]) if "gap_test" in g else "n/a",
               "gap shrink, last third": _ci(g["gap_shrink_late"]),
               "final val loss": _ci(g["final_val_loss"]),
               "wire bytes/step": f"{g['bytes_per_step'].mean():.4g}",
               "payload bytes/step": f"{g['payload_bytes_per_step'].mean():.4g}",
               "fewer bytes than AdamW": f"{g['bytes_reduction'].mean():.3g}x"}
        for name, net in networks.items():
            row[f"time, {net['label']} (s)"] = _ci(g[f"time_{name}"])
        rows.append(row)
    df = pd.DataFrame(rows)
    df["_o"] = df["method"].map({m.label: m.order for m in methods.values()})
    df = df.sort_values(["N", "_o"]).drop(columns="_o")
    write_csv(df, out_csv)
    atomic_write_text(out_md, "# DeMo and baselines (simulated cluster; times simulated)\n\n"
                      "Mean [95 % t interval over seeds].  Losses in nats/byte on the whole test (and "
                      "validation) split after the last step; each method at its learning rate (lr).  Gap: "
                      "paired by seed with AdamW-DDP; its shrink over the last third of training is measured "
                      "on the validation curve.  Bytes per worker per step (wire: the ring collective's; "
                      "payload: what the worker contributes).\n\n" + markdown_table(df))
    return df


def real_table(real_summary, sim_summary, out_md, methods=METHODS) -> pd.DataFrame:
    """Measured step time on real processes beside the simulated prediction of the same runs
    (``sim_summary``: each real setting's simulated twin, the same seeds, steps and lr)."""
    r = read_table_checked(real_summary)
    s = read_table_checked(sim_summary)
    rows = []
    for (n, method), g in r.groupby(["n_workers", "method"], sort=True):
        sim = s[(s["n_workers"] == n) & (s["method"] == method) & s["seed"].isin(g["seed"])]
        rows.append({"N": int(n), "method": methods.label(method), "seeds": len(g),
                     "measured step (s, median)": _ci(g["step_time_median"]),
                     "vs AdamW-DDP (measured)": _ci(g["step_time_vs_adamw"]),
                     "simulated step (s, median)": _ci(sim["step_time_median"]) if len(sim) else "n/a",
                     "params identical across ranks": bool((g["params_max_abs_diff_across_ranks"] == 0).all()),
                     "wire bytes/step": f"{g['bytes_per_step'].mean():.4g}"})
    df = pd.DataFrame(rows)
    atomic_write_text(out_md, "# DeMo on real processes (measured) beside the simulated prediction\n\n"
                      "Measured: wall-clock time per step of the real processes (median over a run's "
                      "steps after the first; mean [95 % t CI] over seeds).  Simulated: the same setting, seeds, steps "
                      "and learning rate trained on the simulated cluster (each worker's compute as "
                      "measured there, the network modelled): what the simulator predicts for these "
                      "runs.\n\n" + markdown_table(df))
    return df


def sweep_table(summary, out_md, choice_out=None, follows: dict | None = None, methods=METHODS) -> pd.DataFrame:
    """Final loss on the validation split per method and learning rate (mean [95 % t CI] over the
    sweep's seeds); the lowest mean per method is its choice, written to ``choice_out`` as
    ``{method: lr}`` with each follower (``follows``: {follower: leader}) at its leader's value."""
    s = read_table_checked(summary)
    rows = []
    for (method, lr), g in s.groupby(["method", "lr"], sort=True):
        rows.append({"method": method, "lr": lr, "seeds": len(g), "steps": int(g["steps"].iloc[0]),
                     "final val loss": _ci(g["final_val_loss"]), "_mean": g["final_val_loss"].mean()})
    df = pd.DataFrame(rows)
    best = df.loc[df.groupby("method")["_mean"].idxmin()]
    chosen = {str(r["method"]): float(r["lr"]) for _, r in best.iterrows()}
    for follower, leader in (follows or {}).items():
        if leader not in chosen:
            raise ValueError(f"lr_follows: {follower} follows {leader!r}, which the sweep did not run")
        chosen[follower] = chosen[leader]
    df["best"] = df.index.isin(best.index)
    # a choice on its grid's edge is not bracketed: the best lr may lie beyond it
    lo, hi = df.groupby("method")["lr"].transform("min"), df.groupby("method")["lr"].transform("max")
    df["edge"] = ""
    df.loc[df["best"] & (lo < hi) & (df["lr"] == lo), "edge"] = "lower"
    df.loc[df["best"] & (lo < hi) & (df["lr"] == hi), "edge"] = "upper"
    edges = {str(m): e for m, e in df.loc[df["edge"] != "", ["method", "edge"]].itertuples(index=False)}
    df["method"] = df["method"].map(methods.label)
    df = df.drop(columns="_mean")
    if choice_out is not None:
        atomic_write_text(choice_out, json.dumps(chosen, indent=1, sort_keys=True) + "\n")
    atomic_write_text(out_md, "# Learning-rate sweep (simulated cluster)\n\nFinal loss on the whole "
                      "validation split (nats/byte); the lowest mean per method is marked and is the "
                      "learning rate of that method's runs (the comparison itself is on the test split).  "
                      f"Followers: {follows or {}}.\n\nChosen: {chosen}\n\n"
                      + (f"Not bracketed (the choice at its grid's edge; a better lr may lie beyond it): "
                         f"{edges}.\n\n" if edges else "Every choice is bracketed (inside its grid).\n\n")
                      + markdown_table(df))
    return df


# ------------------------------------------------------------------ bytes table

def bytes_rows(model, topks=(32, 1), chunk: int = 64) -> list[dict]:
    """DeMo payload per worker per step for ``model``'s real shapes (meta device is fine)."""
    import torch

    from ..techniques.demo import payload as pl
    from ..techniques.demo.transforms import clamp_topk, tile_shape

    groups: dict[tuple[int, int], int] = {}
    n_params = 0
    for p in model.parameters():
        n1, n2 = tile_shape(p.shape, chunk)
        groups[(n1, n2)] = groups.get((n1, n2), 0) + max(1, p.numel()) // (n1 * n2)
        n_params += p.numel()
    ddp, demo = METHODS.label("adamw"), METHODS.label("demo")
    rows = [{"method": ddp, "k": None, "encoding": "fp32 gradients", "bytes": 4 * n_params},
            {"method": ddp, "k": None, "encoding": "bf16 gradients", "bytes": 2 * n_params}]
    # fp32 parameters, bf16 values where the encoding sends its own (the payload model's sizes)
    what = {"reference": "int64 index + fp32 value", "compact": "12-bit index + bf16 value"}
    for k in topks:
        for enc in pl.ENCODINGS:
            total = 0
            for (n1, n2), tiles in groups.items():
                cnt = tiles * clamp_topk(k, n1 * n2)
                total += pl.index_nbytes(cnt, enc, n1 * n2) + pl.value_nbytes(cnt, enc, torch.float32, torch.bfloat16)
            rows.append({"method": demo, "k": k, "encoding": what[enc], "bytes": total})
    return [{**r, "params": n_params} for r in rows]


def bytes_table(out_csv, out_md, claims_path, claim_id: str, topks=(32, 1), chunk: int = 64) -> pd.DataFrame:
    """DeMo and AdamW-DDP bytes per worker per step for OLMo-300M and OLMo-1B shapes."""
    from .olmo import olmo_on_meta

    rows = []
    for size in ("olmo-300m", "olmo-1b"):
        for r in bytes_rows(olmo_on_meta(size), topks, chunk):
            rows.append({"model": size, **r, "MB": r["bytes"] / 1e6})
    df = pd.DataFrame(rows)
    for size in ("olmo-300m", "olmo-1b"):
        sel = df["model"] == size
        for dt, col in (("fp32", "reduction_vs_fp32_ddp"), ("bf16", "reduction_vs_bf16_ddp")):
            ref = float(df[sel & (df["encoding"] == f"{dt} gradients")]["bytes"].iloc[0])
            df.loc[sel, col] = ref / df.loc[sel, "bytes"]
    df["seed"] = 0  # arithmetic, not a run: one row per setting (the scorecard pairs rows by seed)
    df["fewer than fp32 AdamW-DDP"] = df["reduction_vs_fp32_ddp"]
    df["fewer than bf16 AdamW-DDP"] = df["reduction_vs_bf16_ddp"]
    from ..results.tables import write_checked_table

    # arithmetic, no run: its record still lets the scorecard refuse it cut short or edited
    write_checked_table(df.drop(columns=["fewer than fp32 AdamW-DDP", "fewer than bf16 AdamW-DDP"]), out_csv)
    from ..scoring.claims import load_claims

    claims = load_claims(claims_path)
    paper = next((c.get("paper_value") for c in claims if c.get("id") == claim_id), None)
    view = df.assign(k=df["k"].map(lambda v: "" if v is None or (isinstance(v, float) and math.isnan(v)) else int(v)),
                     MB=df["MB"].map(lambda v: f"{v:.4g}"),
                     **{c: df[c].map(lambda v: f"{v:.1f}x") for c in ("fewer than fp32 AdamW-DDP",
                                                                       "fewer than bf16 AdamW-DDP")})
    text = ("# Bytes per worker per step: DeMo and AdamW-DDP at OLMo scale (arithmetic, not a run)\n\n"
            "Shapes from the models built on the `meta` device (OLMo-1B: 1,176,764,416 parameters).  "
            "Accounting rule: the payload one worker contributes per step (for a ring all-gather each "
            "worker forwards (N-1) such payloads; a ring all-reduce sends 2(N-1)/N times the gradient). "
            f"DeMo tiles are {chunk}x{chunk} (chunk = largest divisor of each dimension <= {chunk}); "
            "the reference encoding is int64 index + fp32 value (12 bytes a coefficient), ours packs "
            "12-bit indices with bf16 values (3.5 bytes); 1 MB = 10^6 bytes.\n\n"
            + markdown_table(view[["model", "params", "method", "k", "encoding", "MB",
                                   "fewer than bf16 AdamW-DDP", "fewer than fp32 AdamW-DDP"]])
            + (f"\n\nThe paper (`{claim_id}` in config/claims.yaml): {paper}\n" if paper else "\n"))
    atomic_write_text(out_md, text)
    return df
