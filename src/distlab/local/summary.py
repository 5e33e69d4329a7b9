"""Run directories of the local-learning experiment -> tidy tables.

* steps table: every run's per-step rows, with ``group``, ``method``, ``seed``;
* runs table (the scorecard's input): one row per run with the held-out
  losses, the run's own measured tokens/s and training seconds, and its memory:
  PSS and USS summed over its processes (each page once), the peak RSS of its
  largest process, and the old upper bound (peak RSS summed);
* staleness table: one row per section of every asynchronous run (readout
  staleness of the applied reports, reports dropped, activation age).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from ..results.runs import check_sealed, provenance

from ..results.runs import write_csv
from ..runtime.machine_load import saw_load_above_cores


def collect(run_dirs: list[Path]) -> tuple[pd.DataFrame, pd.DataFrame]:
    steps, runs, _ = collect_all(run_dirs)
    return steps, runs


def collect_all(run_dirs: list[Path]) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    steps, runs, stale = [], [], []
    for d in run_dirs:
        d = Path(d)
        if d.name == "manifest.json":
            d = d.parent
        manifest = json.loads((d / "manifest.json").read_text())
        check_sealed(d, manifest)  # manifest and metrics as the run wrote them, else one line naming the file
        spec = manifest["spec"]
        metrics = pd.read_csv(d / "metrics.csv")
        keys = {"group": spec.get("group", ""), "method": manifest["method"], "seed": int(spec["seed"]),
                "n_layer": int(spec["model"]["n_layer"])}
        timed = bool(spec.get("timed", False))  # a run whose clock is compared
        steps.append(metrics.assign(**{k: v for k, v in keys.items() if k != "method"}, timed=timed))
        runs.append({
            **keys,
            "lr": float(spec["lr"]),  # the method's own (the sweep's choice where lr_from_sweep)
            "reused": bool(manifest.get("reused_from")),  # taken from the sweep, not retrained
            "final_val_loss": float(manifest["final"]["val_loss"]),
            "final_test_loss": float(manifest["final"]["test_loss"]),
            "final_train_loss": float(metrics["loss"].tail(max(1, len(metrics) // 10)).mean()),
            "tokens_per_s": float(manifest["tokens_per_s"]),
            "train_s": float(manifest["train_s"]),
            **{k: float(v) for k, v in manifest["memory"].items()},
            "processes": int(manifest.get("processes", 1)),
            "timed": timed,
            "loaded": saw_load_above_cores(manifest.get("load")),  # its run saw a load above its cores
            "feedback_T": int(spec["feedback"]["T"]) if "feedback" in spec else -1,
            "steps": int(spec["steps"]),
            "tokens": int(metrics["tokens"].iloc[-1]),
            "late_val_drop": late_val_drop(metrics),
            **provenance(manifest),  # git_commit, git_dirty: the scorecard lists runs of other code
        })
        for st in manifest.get("staleness") or []:
            stale.append({**keys, **st})
    if not runs:
        raise ValueError("local summarize: no runs given")
    runs_df = pd.DataFrame(runs).sort_values(["group", "method", "seed"]).reset_index(drop=True)
    dup = runs_df.duplicated(["group", "method", "seed"])
    if dup.any():
        raise ValueError(f"local summarize: duplicate runs {runs_df[dup][['group', 'method', 'seed']].to_dict('records')}")
    runs_df["gap_shrink_late"] = gap_shrink_late(runs_df)
    stale_df = pd.DataFrame(stale, columns=["group", "method", "seed", "n_layer", "section", "bound",
                                            "applied", "dropped", "readout_staleness_mean",
                                            "readout_staleness_max", "activation_age_mean",
                                            "activation_age_max", "updates"])
    return pd.concat(steps, ignore_index=True), runs_df, stale_df


LATE = 2 / 3  # the horizon check looks at the last third of training, as DeMo's does


def late_val_drop(metrics: pd.DataFrame) -> float:
    """How much the validation loss still fell over the last third: its value at the first
    evaluation at or after 2/3 of the steps minus the last one (NaN without two evaluations)."""
    ev = metrics[metrics["val_loss"].notna()].sort_values("step") if "val_loss" in metrics else metrics.iloc[:0]
    late = ev[ev["step"] >= LATE * ev["step"].max()] if len(ev) else ev
    return float(late["val_loss"].iloc[0] - late["val_loss"].iloc[-1]) if len(late) >= 2 else float("nan")


def gap_shrink_late(runs: pd.DataFrame) -> pd.Series:
    """How much a run's gap to BP (same group and seed) shrank over the last third: its
    ``late_val_drop`` minus BP's (0 for BP itself; NaN where the group has no BP run)."""
    bp = runs[runs["method"] == "bp"].set_index(["group", "seed"])["late_val_drop"]
    keys = pd.MultiIndex.from_frame(runs[["group", "seed"]])
    return pd.Series(runs["late_val_drop"].to_numpy() - bp.reindex(keys).to_numpy(), index=runs.index)


def summarize(run_dirs: list[Path], steps_out: Path, summary_out: Path,
              staleness_out: Path | None = None) -> None:
    from ..results.tables import write_checked_table

    steps, runs, stale = collect_all(run_dirs)
    # each with its record (the runs it summarises): readers refuse it cut short or a run gone
    write_checked_table(steps, steps_out, run_dirs)
    write_checked_table(runs, summary_out, run_dirs)
    if staleness_out is not None:
        write_checked_table(stale, staleness_out, run_dirs)


# ------------------------------------------------------------------ the learning-rate sweep

def sweep_rows(run_dirs: list[Path]) -> pd.DataFrame:
    """One row per sweep run: its ``key`` ("<group>/<method>", the run directory's two parents
    above ``seed<k>``), lr, seed and final validation loss (the choice's split)."""
    rows = []
    for d in run_dirs:
        d = Path(d).parent if Path(d).name == "manifest.json" else Path(d)
        man = json.loads((d / "manifest.json").read_text())
        spec = man["spec"]
        rows.append({"key": f"{d.parent.parent.name}/{d.parent.name}", "lr": float(spec["lr"]),
                     "seed": int(spec["seed"]), "final_val_loss": float(man["final"]["val_loss"])})
    if not rows:
        raise ValueError("local sweep: no runs given")
    return pd.DataFrame(rows)


def choose(rows: pd.DataFrame) -> pd.DataFrame:
    """Per key and lr: the mean, spread and worst seed of the validation loss; ``chosen`` marks,
    per key, the lr of the lowest worst-seed loss (ties: the lower mean, then the lower lr).
    The worst seed, not the mean, so that an lr where one seed goes astray (the rounding of
    another machine's kernels can be enough) is not chosen on the others' strength."""
    g = rows.groupby(["key", "lr"])["final_val_loss"]
    t = pd.DataFrame({"seeds": g.size(), "mean": g.mean(), "sd": g.std(ddof=1), "worst": g.max(),
                      "best": g.min()}).reset_index()
    t = t.sort_values(["key", "worst", "mean", "lr"]).reset_index(drop=True)
    t["chosen"] = ~t.duplicated("key")
    t = t.sort_values(["key", "lr"]).reset_index(drop=True)
    # a choice on its grid's edge is not bracketed: the best lr may lie beyond it
    lrs = t.groupby("key")["lr"]
    lo, hi = lrs.transform("min"), lrs.transform("max")
    t["edge"] = ""
    t.loc[t["chosen"] & (lo < hi) & (t["lr"] == lo), "edge"] = "lower"
    t.loc[t["chosen"] & (lo < hi) & (t["lr"] == hi), "edge"] = "upper"
    return t


def _mark(r) -> str:
    if not r.chosen:
        return ""
    return f"**chosen** ({r.edge} edge of the grid)" if r.edge else "**chosen**"


def sweep_table(run_dirs: list[Path], out_md: Path, out_csv: Path, choice_out: Path,
                follows: dict | None = None) -> dict:
    """The sweep's table (every lr's validation loss per method, the choice marked) and the
    choice file ``{key: lr}``, each follower (``follows``: {key: leader}) at its leader's lr."""
    from ..results.tables import atomic_write_text

    t = choose(sweep_rows(run_dirs))
    chosen = {k: float(lr) for k, lr in t.loc[t["chosen"], ["key", "lr"]].itertuples(index=False)}
    for key, lead in (follows or {}).items():
        if lead not in chosen:
            raise ValueError(f"local sweep: {key} follows {lead!r}, which the sweep did not run")
        chosen[key] = chosen[lead]
    write_csv(t, out_csv)
    lines = ["# P3 learning-rate sweep (measured training runs; validation split)", "",
             "Final validation loss (nats/byte) of every swept lr per method over the sweep seeds: mean, "
             "sample sd, best and worst seed.  The marked lr (the lowest worst-seed loss) is the lr of "
             "that method's comparison runs, whose quality is then compared on the test split; the sweep's "
             "runs at the chosen lr are those seeds' comparison runs.  A choice on its grid's edge is "
             "marked: it is not bracketed, and a better lr may lie beyond it.", "",
             f"Followers (take their leader's choice): {dict(follows or {})}", "",
             "| method | lr | seeds | mean | sd | best | worst | chosen |", "|---|---|---|---|---|---|---|---|"]
    for r in t.itertuples(index=False):
        sd = "n/a" if pd.isna(r.sd) else f"{r.sd:.3f}"
        lines.append(f"| {r.key} | {r.lr:g} | {r.seeds} | {r.mean:.3f} | {sd} | {r.best:.3f} | "
                     f"{r.worst:.3f} | {_mark(r)} |")
    atomic_write_text(out_md, "\n".join(lines) + "\n")
    atomic_write_text(choice_out, json.dumps(chosen, indent=1, sort_keys=True) + "\n")
    return chosen
