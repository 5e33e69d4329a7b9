"""P2 as a whole: one table per serial pair and model with the exact optimum, the single devices,
HEFT, random search at the learners' budget and each learner's best and final policy."""

from __future__ import annotations

import pandas as pd
import pytest

from distlab.placement.figures import add_optimum_columns, optimum_table


def _summary() -> pd.DataFrame:
    rows = []
    for seed in range(3):
        for method, best, final in (("cpu_only", 12.5, 12.5), ("gpu_only", 15.0, 15.0), ("optimum", 8.0, 8.0),
                                    ("heft", 9.5, 9.5), ("random", 10.0 + seed, 10.0 + seed),
                                    ("hsdag", 11.0, 12.5), ("hsdag_corrected", 9.0, 10.0 + 0.5 * seed)):
            rows.append({"pair": "cpu_igpu", "model": "resnet50", "method": method, "seed": seed,
                         "scenario": "serial", "latency_ms": best, "final_median_ms": final,
                         "final_policy_ms": final, "groups_optimum_ms": 8.5, "clock": "simulated"})
    return add_optimum_columns(pd.DataFrame(rows))


def test_the_p2_table_has_every_answer_to_the_papers_question():
    tab = optimum_table(_summary(), ["hsdag", "hsdag_corrected"]).iloc[0]
    assert (tab["cpu_only ms"], tab["gpu_only ms"], tab["heft ms"], tab["optimum ms"]) == (12.5, 15.0, 9.5, 8.0)
    assert tab["random best ms"] == pytest.approx(11.0)   # random search's best, mean over seeds
    assert (tab["hsdag best ms"], tab["hsdag final policy ms"]) == (11.0, 12.5)
    assert tab["hsdag_corrected final policy ms"] == pytest.approx(10.5)
    # what of a claimed speedup holds: the pair allows at most the optimum's 56.25 % over CPU-only;
    # the released learner ends on CPU-only (0 %), the corrected one at 12.5 / 10.5 - 1
    assert tab["optimum speedup over CPU-only %"] == pytest.approx(56.25)
    assert tab["hsdag final speedup over CPU-only %"] == pytest.approx(0.0)
    assert tab["hsdag_corrected final speedup over CPU-only %"] == pytest.approx((12.5 / 10.5 - 1) * 100)
