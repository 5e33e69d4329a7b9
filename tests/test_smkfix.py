"""Snakemake's scheduler keeps one pending re-evaluation timer (distlab.pipeline.smkfix), which the
workflow's Snakefile installs: without it every job leaves a timer that wakes a scheduling
pass every second for the rest of the run."""

from __future__ import annotations

import subprocess
import textwrap
import threading

import pytest

from conftest import ROOT, bin_path

from distlab.pipeline import smkfix


class _Scheduler:  # the two attributes the replacement touches
    def __init__(self):
        self._open_jobs = threading.Semaphore(0)


def test_one_timer_is_pending_at_a_time_and_the_chain_goes_on():
    from snakemake.scheduling.job_scheduler import JobScheduler

    assert smkfix.keep_one_reevaluation_timer() and smkfix.keep_one_reevaluation_timer()  # idempotent
    s = _Scheduler()
    for _ in range(50):  # fifty passes woken by fifty jobs ...
        JobScheduler._schedule_reevalutation(s, 0.2)
    timer = s._distlab_timer
    assert timer.daemon and timer.is_alive()
    assert s._open_jobs.acquire(timeout=5)  # ... one release, not fifty
    assert not s._open_jobs.acquire(timeout=0.5)
    # the pass that release woke asks again: a new timer starts (the slot was cleared first)
    JobScheduler._schedule_reevalutation(s, 0.05)
    assert s._distlab_timer is not None and s._distlab_timer is not timer
    assert s._open_jobs.acquire(timeout=5)


_SNAKEFILE = """
import sys, threading
sys.path.insert(0, {src!r})
{fix}

rule all:
    input: expand("out/{{i}}.txt", i=range(24))

rule a:
    output: "out/{{i}}.txt"
    shell: "echo {{wildcards.i}} > {{output}}"

onsuccess:
    n = sum(t.name.startswith("Thread-") and isinstance(t, threading.Timer) for t in threading.enumerate())
    open("timers.txt", "w").write(str(n))
"""


@pytest.mark.parametrize("fixed", [False, True])
def test_a_real_run_ends_with_one_timer_at_most(tmp_path, fixed):
    """24 quick jobs on 2 cores: unpatched, the timers pending at the end are as many as the
    passes jobs woke (well over one); patched, at most one."""
    fix = "from distlab.pipeline.smkfix import keep_one_reevaluation_timer\nkeep_one_reevaluation_timer()" if fixed else ""
    (tmp_path / "Snakefile").write_text(textwrap.dedent(_SNAKEFILE.format(src=str(ROOT / "src"), fix=fix)))
    r = subprocess.run(["snakemake", "--cores", "2", "--quiet"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=300, env={"PATH": bin_path(), "HOME": str(tmp_path)})
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    pending = int((tmp_path / "timers.txt").read_text())
    if fixed:
        assert pending <= 1, pending
    else:
        assert pending > 4, pending  # the multiplication this module mends, still in the pinned Snakemake


def test_the_workflow_installs_it():
    text = (ROOT / "Snakefile").read_text()
    assert "from distlab.pipeline.smkfix import keep_one_reevaluation_timer" in text
    assert "\nkeep_one_reevaluation_timer()\n" in text
