"""Snakemake's scheduler keeps one pending re-evaluation timer (distlab.pipeline.smkfix), which the
workflow's Snakefile installs: without it every job leaves a timer that wakes a scheduling
pass every second for the rest of the run.  The hook patches only the Snakemake it was written
for; any other gets one line on stderr and no patch."""

from __future__ import annotations

import io
import re
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


def _original():
    from snakemake.scheduling.job_scheduler import JobScheduler

    m = JobScheduler._schedule_reevalutation
    return getattr(m, "__wrapped__", m)


def test_it_was_written_for_the_pinned_snakemake():
    """Bumping the pin without reading the new scheduler fails here: add the version to
    WRITTEN_FOR only after checking its schedule and _schedule_reevalutation."""
    import snakemake

    pin = re.search(r"^snakemake==(\S+)$", (ROOT / "envs" / "requirements.txt").read_text(), re.M).group(1)
    assert pin in smkfix.WRITTEN_FOR
    assert snakemake.__version__ == pin  # the environment the tests run in is the pinned one
    assert smkfix.refusal(pin, _original()) is None


def test_it_refuses_another_version_a_missing_method_or_other_code():
    assert "Snakemake 9.99.0 is not a version it was written for (9.27.1" in smkfix.refusal("9.99.0", _original())
    assert "has no JobScheduler._schedule_reevalutation" in smkfix.refusal("9.27.1", None)

    def _schedule_reevalutation(self, delay):  # another body: an asyncio call, say
        self._loop.call_later(delay, self._open_jobs.release)

    assert "is not the code it was written for" in smkfix.refusal("9.27.1", _schedule_reevalutation)


def test_another_version_is_left_unpatched_with_one_line(monkeypatch):
    import snakemake
    from snakemake.scheduling.job_scheduler import JobScheduler

    original = _original()
    monkeypatch.setattr(JobScheduler, "_schedule_reevalutation", original)
    monkeypatch.setattr(snakemake, "__version__", "10.0.0")
    err = io.StringIO()
    assert smkfix.keep_one_reevaluation_timer(stream=err) is False
    assert JobScheduler._schedule_reevalutation is original
    lines = err.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].startswith("distlab: Snakemake's scheduler left unpatched: Snakemake 10.0.0")


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


_HOOK = "from distlab.pipeline.smkfix import keep_one_reevaluation_timer\nkeep_one_reevaluation_timer()"


@pytest.mark.parametrize("fixed", [False, True, "refused"])
def test_a_real_run_ends_with_one_timer_at_most(tmp_path, fixed):
    """24 quick jobs on 2 cores: unpatched, the timers pending at the end are as many as the
    passes jobs woke (well over one); patched, at most one; under a Snakemake the hook was not
    written for (a version set here), unpatched, with its one line, and the run succeeds."""
    fix = {False: "", True: _HOOK, "refused": f"import snakemake\nsnakemake.__version__ = '9.99.0'\n{_HOOK}"}[fixed]
    (tmp_path / "Snakefile").write_text(textwrap.dedent(_SNAKEFILE.format(src=str(ROOT / "src"), fix=fix)))
    r = subprocess.run(["snakemake", "--cores", "2", "--quiet"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=300, env={"PATH": bin_path(), "HOME": str(tmp_path)})
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    pending = int((tmp_path / "timers.txt").read_text())
    refused = [ln for ln in r.stderr.splitlines() if "scheduler left unpatched" in ln]
    assert len(refused) == (1 if fixed == "refused" else 0), r.stderr[-2000:]
    if fixed is True:
        assert pending <= 1, pending
    else:
        assert pending > 4, pending  # the multiplication this module mends, still in the pinned Snakemake


def test_the_workflow_installs_it():
    text = (ROOT / "Snakefile").read_text()
    assert "from distlab.pipeline.smkfix import keep_one_reevaluation_timer" in text
    assert "\nkeep_one_reevaluation_timer()\n" in text
