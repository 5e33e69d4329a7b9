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
