"""The memory accounting counts a page that several processes share once."""

from __future__ import annotations

import os
import signal
import sys
import time

import numpy as np
import pytest

from distlab.local import memory

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/<pid>/smaps_rollup")


def test_a_page_shared_by_a_forked_child_is_counted_once():
    mb = 96
    buf = np.ones(mb * 2**20 // 8)  # touched: resident in this process
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child maps the same pages (copy-on-write, never written) and waits
        os.close(r)
        os.write(w, b"x")
        time.sleep(60)
        os._exit(0)
    try:
        os.close(w)
        os.read(r, 1)
        parent, child = memory.rollup(), memory.rollup(pid)
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    assert buf.sum() > 0
    # both processes have the buffer resident: summed RSS counts it twice
    assert parent["rss_mb"] >= mb and child["rss_mb"] >= mb
    rss_sum = parent["rss_mb"] + child["rss_mb"]
    both = memory.combine([dict(parent, peak_rss_mb=parent["rss_mb"]),
                           dict(child, peak_rss_mb=child["rss_mb"])])
    # PSS splits every shared page between the two: the sum is one copy, not two
    assert both["pss_mb"] <= parent["rss_mb"] + 8  # the child's own pages are a few MB
    assert rss_sum - both["pss_mb"] >= mb - 8
    # nothing the child has is its own beyond a few pages; the parent's buffer is not unique to it
    assert child["uss_mb"] < 16 and parent["uss_mb"] < parent["rss_mb"] - mb + 8
    assert both["max_rss_mb"] == max(parent["rss_mb"], child["rss_mb"])


def test_a_missing_process_reads_as_nan():
    got = memory.rollup(2**22 + 12345)
    assert all(v != v for v in got.values())


def test_the_main_table_shows_memory_as_pss_and_as_summed_rss_beside_each_other(tmp_path):
    """The two measures of RC's memory over BP's side by side (PSS, tested by
    local.rc.memory; peak RSS summed, shown by local.rc.memory_rss), each the ratio of the
    means paired by repeat, as the scorecard's rows give it."""
    import pandas as pd

    from distlab.local.figures import main_table

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    thr = pd.DataFrame([{"method": m, "seed": k, "n_layer": 24, "tokens_per_s": 100.0 + k,
                         "pss_mb": {"bp": 1000.0, "rc-par": 1300.0}[m] + 10 * k,
                         "max_rss_mb": 1100.0, "rss_sum_mb": {"bp": 1100.0, "rc-par": 3100.0}[m] + 10 * k}
                        for k in range(3) for m in ("bp", "rc-par")])
    runs = pd.DataFrame([{"group": "rc", "n_layer": 24, "method": m, "seed": k, "final_test_loss": 1.8 + 0.01 * k,
                          "tokens_per_s": 1.0, "pss_mb": 1.0, "max_rss_mb": 1.0, "timed": True}
                         for k in range(3) for m in ("bp", "rc-par")])
    thr.to_csv(tmp_path / "thr.csv", index=False)
    runs.to_csv(tmp_path / "runs.csv", index=False)
    df = main_table(tmp_path / "runs.csv", tmp_path / "thr.csv", os.path.join(root, "config/claims.yaml"),
                    {"alpha": 0.05}, tmp_path / "t.csv", tmp_path / "t.md").set_index("method")
    rc = df.loc["RC (parallel, lock-step)"]
    assert rc["pss_ratio_vs_bp"].startswith("1.30 [")  # 1310 / 1010, every repeat's difference 300
    assert rc["rss_sum_ratio_vs_bp"].startswith("2.80 [")  # 3110 / 1110
    assert rc["bench_rss_sum_mb"] == 3110.0 and rc["bench_pss_mb"] == 1310.0
