"""The shared baseline: data-parallel SGD against single-process SGD."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from ..plotting import plots  # noqa: E402
from ..results.tables import read_table_checked, write_table  # noqa: E402
from ..plotting.util import ci_cell  # noqa: E402


def _run_label(df: pd.DataFrame) -> pd.Series:
    return [f"{'single process' if m == 'single' else f'DGD, {int(n)} workers'} [{b}]"
            for m, n, b in zip(df["method"], df["n_workers"], df["backend"])]


def make(inputs: dict, out_dir: Path, opts: dict) -> None:
    plots.set_style()
    steps = read_table_checked(inputs["steps"])
    summary = read_table_checked(inputs["summary"])
    steps["run"] = _run_label(steps)
    summary["run"] = _run_label(summary)
    fig, axes = plt.subplots(1, 2, figsize=(plots.PAGE, 3.0))
    plots.line_with_ci(steps, x="step", y="loss", hue="run", ax=axes[0], distinct=True)
    axes[0].set_ylabel("training loss (global mini-batch)")
    axes[0].set_title("training loss")
    # DGD's runs on both backends are the same arithmetic: their lines coincide (the title says so)
    plots.note_coinciding(axes[0], plots.coinciding(steps, "step", "loss", "run"), "losses")
    ev = steps[steps["val_acc"].notna()]
    plots.line_with_ci(ev, x="step", y="val_acc", hue="run", ax=axes[1], distinct=True)
    axes[1].set_ylabel("validation accuracy")
    axes[1].set_title("validation accuracy")
    plots.note_coinciding(axes[1], plots.coinciding(ev, "step", "val_acc", "run"), "accuracies")
    clocks = "; ".join(f"[{b}] {plots.provenance_text(b)}" for b in sorted(set(summary["backend"])))
    for b in sorted(set(summary["backend"])):
        plots.label_provenance(fig, b)
    fig.suptitle("Synchronous data-parallel SGD vs single-process SGD, same global batch")
    plots.caption(fig, "Training loss and validation accuracy against step, data-parallel SGD (DGD) on each "
                  "backend beside single-process SGD at the same global batch; no times are plotted",
                  int(summary["seed"].nunique()), plots.BAND, clocks)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    plots.save(fig, out_dir / "figures/baseline_loss.png")
    rows = []
    for run, g in summary.groupby("run"):
        rows.append({
            "run": run, "clock": g["clock"].iloc[0], "seeds": len(g),
            "final_train_loss": ci_cell(g["final_train_loss_full"])[0],
            "final_val_acc": ci_cell(g["final_val_acc"])[0],
            "time_per_step_s": ci_cell(g["time_per_step"])[0],
            "bytes_per_step_per_worker": float(g["bytes_per_step"].mean()),
            "max_param_diff_across_ranks": (float(g["params_max_abs_diff_across_ranks"].max())
                                            if "params_max_abs_diff_across_ranks" in g
                                            and g["params_max_abs_diff_across_ranks"].notna().any()
                                            else None),
        })
    write_table(pd.DataFrame(rows), out_dir / "tables/baseline.csv", out_dir / "tables/baseline.md")
