"""A refactoring changes no result: the tiny workflow's deterministic numbers, as recorded.

``tests/test_rules_unchanged.py`` holds the plan (jobs, specs, commands) to its record; this
holds what the jobs compute.  From the tiny end-to-end run (the session's ``tiny_workflow``)
it reads every number that does not depend on this machine's speed -- the final losses of
every simulated and learned run but asynchronous RC's, the bytes a step sends, a calibrated clock's time, the
graphs' sizes, the atlas's steps to its target -- and compares them with
``tests/expected/tiny_results.csv``.  Measured times, measured profiles and everything
computed from them are left out.

The tolerance is relative 1e-3: a run is bit-for-bit repeatable on one machine, but the
kernels of another CPU round differently (docs/local_learning.md), and a change of what is
computed (a learning rate, the data order, a method's update) moves these numbers by far
more.  A deliberate change of results rewrites the record with
``python tests/test_tiny_results_unchanged.py <work dir of a tiny run>`` in the same commit.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import ROOT  # noqa: E402

EXPECTED = ROOT / "tests" / "expected" / "tiny_results.csv"
RTOL = 1e-3

# table (relative to the work folder) -> (key columns, value columns); a row whose clock is
# measured keeps only its loss and byte columns (``MEASURED_ONLY``)
TABLES = {
    "results/pgc/motivating/summary.csv": (["scheme", "n", "s", "seed", "delay_mean"],
                                           ["final_loss", "final_val_loss", "bytes_per_step", "time_per_step"]),
    "results/pgc/simulation/summary.csv": (["scheme", "n", "s", "seed", "delay_mean"],
                                           ["final_loss", "final_val_loss", "bytes_per_step", "time_per_step"]),
    "results/pgc/cloud/summary.csv": (["scheme", "n", "s", "seed", "delay_mean"],
                                      ["final_loss", "final_val_loss", "bytes_per_step", "time_per_step"]),
    "results/demo/sweep/summary.csv": (["method", "n_workers", "seed", "lr"],
                                       ["final_val_loss", "final_test_loss", "bytes_per_step"]),
    "results/demo/simulated/summary.csv": (["method", "n_workers", "seed", "lr"],
                                           ["final_val_loss", "final_test_loss", "bytes_per_step"]),
    "results/demo/simulated_real/summary.csv": (["method", "n_workers", "seed", "lr"],
                                                ["final_val_loss", "final_test_loss", "bytes_per_step"]),
    "results/local/runs.csv": (["group", "method", "seed", "n_layer", "lr"],
                               ["final_val_loss", "final_test_loss", "final_train_loss"]),
    "results/placement/summary.csv": (["pair", "model", "method", "seed"], ["n_nodes", "n_edges"]),
    # steps to the target: not timed, but an arrival-dependent technique's trajectory follows the
    # measured compute (who arrives first), so only the others' are held
    "results/atlas/map/steps_to_target.csv": (["technique", "n_params", "N", "seed"], ["steps_to_target"]),
}
TIME_COLUMNS = {"time_per_step"}


def collect(work: Path) -> pd.DataFrame:
    """(table, key, column, value) of every recorded number of a tiny run in ``work``."""
    rows = []
    for rel, (keys, values) in TABLES.items():
        df = pd.read_csv(work / rel)
        if rel == "results/local/runs.csv":  # free-running sections: the order of their reports is timed
            df = df[df["method"] != "rc-async"]
        if "technique" in df:
            from distlab.atlas.spec import arrival_dependent

            df = df[~df["technique"].map(arrival_dependent)]
        for _, r in df.iterrows():
            key = ";".join(f"{k}={r[k]}" for k in keys)
            for col in values:
                if col in TIME_COLUMNS and (r.get("clock") != "simulated" or r.get("compute_mode") != "calibrated"):
                    continue  # a time from measured compute moves with the machine
                rows.append({"table": rel, "key": key, "column": col, "value": float(r[col])})
    out = pd.DataFrame(rows)
    dup = out.duplicated(["table", "key", "column"])
    assert not dup.any(), f"keys that do not identify a row: {out[dup].head().to_dict('records')}"
    return out.sort_values(["table", "key", "column"]).reset_index(drop=True)


@pytest.mark.slow
def test_the_tiny_runs_compute_what_they_computed(tiny_workflow):
    work, r = tiny_workflow
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    got = collect(work)
    want = pd.read_csv(EXPECTED)
    both = want.merge(got, on=["table", "key", "column"], how="outer", suffixes=("_want", "_got"),
                      indicator=True)
    missing = both[both["_merge"] != "both"]
    assert missing.empty, ("rows only on one side (a run added or removed: rewrite the record): "
                           f"{missing[['table', 'key', 'column', '_merge']].head(10).to_dict('records')}")
    a, b = both["value_want"].to_numpy(float), both["value_got"].to_numpy(float)
    same = np.isclose(b, a, rtol=RTOL, atol=0.0, equal_nan=True)
    moved = both.loc[~same, ["table", "key", "column", "value_want", "value_got"]]
    assert moved.empty, f"{len(moved)} numbers moved:\n{moved.head(15).to_string()}"


if __name__ == "__main__":
    collect(Path(sys.argv[1])).to_csv(EXPECTED, index=False)
    print(f"wrote {EXPECTED}")
