"""The end-of-run summary of the warnings jobs wrote to their logs (distlab.pipeline.runlog)."""
from __future__ import annotations

import os
import time

from distlab.pipeline.runlog import logs_since, warning_summary


def test_warnings_in_job_logs_are_counted_by_kind_and_place_for_the_run_only(tmp_path):
    logs = tmp_path / "logs"
    (logs / "atlas").mkdir(parents=True)
    old = logs / "old.log"
    old.write_text("/x/distlab/a.py:1: UserWarning: from an earlier run\n")
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    started = time.time() - 60
    (logs / "atlas/map.log").write_text(
        "start\n"
        + "/venv/src/distlab/atlas/clock.py:70: RuntimeWarning: invalid value encountered in divide\n  t = a / b\n" * 3
        + "/venv/src/distlab/atlas/figures.py:66: DtypeWarning: Columns (3) have mixed types.\n")
    (logs / "quiet.log").write_text("no warning here\n")
    found = logs_since(logs, started)
    assert old not in found and len(found) == 2
    lines = warning_summary(found, root=tmp_path)
    assert lines[0].startswith("Warnings in 1 job log(s)")
    assert lines[1:] == [
        "  logs/atlas/map.log: 3 x RuntimeWarning at atlas/clock.py:70: invalid value encountered in divide",
        "  logs/atlas/map.log: 1 x DtypeWarning at atlas/figures.py:66: Columns (3) have mixed types."]
    assert warning_summary([logs / "quiet.log"]) == []
