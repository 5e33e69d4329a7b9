"""A version-checked hook on Snakemake's job scheduler: keep it to one pending re-evaluation
timer (the Snakefile calls :func:`keep_one_reevaluation_timer` when it is parsed, so every run
of this workflow has it, or says in one line why not).

**The upstream problem** (Snakemake 9.27.1, ``snakemake/scheduling/job_scheduler.py``).  With a
job rate limit, which local runs have too (``--max-jobs-per-timespan`` defaults to 100/1s),
each scheduling pass of ``JobScheduler.schedule`` ends by calling the private
``JobScheduler._schedule_reevalutation`` (Snakemake's spelling), which starts a new
``threading.Timer`` that releases the scheduler's semaphore one timespan later, so that jobs
held back by the limit are looked at again.  That release runs another pass, which starts
another timer; and every pass woken by something else (a job that finished) starts one more.
So the timers are never fewer than the passes that were ever woken by a job: after n jobs
about n of them fire every second, each running a full pass and starting a thread.  In one
``make reproduce`` of this workflow (311 jobs, 2 cores) Snakemake's main process had used
607 s of CPU after 43 minutes and had created some 250,000 threads, while the jobs it waited
for shared the same two cores.  No report of it was found among Snakemake's GitHub issues
(snakemake/snakemake) when this hook was written; the paragraph above is the report to file.

**The replacement** starts a timer only when none is pending (a pass within one timespan is
all the limiter asks for) and clears the slot just before the timer releases the semaphore, so
the chain goes on with exactly one timer; the timer is a daemon thread, so it never holds up
Snakemake's exit.  It changes when the scheduler looks again, never which jobs run or what
they compute.

**The version check.**  The hook replaces a private method, written against its code in the
Snakemake versions of :data:`WRITTEN_FOR` (the pinned ``snakemake==9.27.1`` of
``envs/requirements.txt``).  Under any other version, or where the method is missing or its
code is not the one read (:data:`FINGERPRINT`), it does not patch and prints one line on
stderr saying so (:func:`refusal` gives the reason).  It warns rather than stops the
workflow: without the patch a run computes the same results and only its scheduler spends
more CPU, and a newer Snakemake may have mended the timers itself; patching a private method
it was not written for could break scheduling silently.  To take a new Snakemake, read its
``schedule`` and ``_schedule_reevalutation``, then add its version to :data:`WRITTEN_FOR`
(``tests/test_smkfix.py`` checks the timers in a real run of the installed version).
"""

from __future__ import annotations

import inspect
import sys
import threading

WRITTEN_FOR = ("9.27.1",)
# what the replaced method's code must contain: one new Timer a call, releasing the semaphore
FINGERPRINT = ("threading.Timer(", "self._open_jobs.release()")
_MARK = "_distlab_one_timer"


def refusal(version: str | None, method) -> str | None:
    """Why the hook does not patch ``method`` of Snakemake ``version`` (None: it may)."""
    if method is None:
        return f"Snakemake {version} has no JobScheduler._schedule_reevalutation"
    if version not in WRITTEN_FOR:
        return (f"Snakemake {version} is not a version it was written for "
                f"({', '.join(WRITTEN_FOR)}; pinned in envs/requirements.txt)")
    try:
        source = inspect.getsource(method)
    except (OSError, TypeError):
        return f"the code of Snakemake {version}'s JobScheduler._schedule_reevalutation cannot be read"
    if not all(part in source for part in FINGERPRINT):
        return f"Snakemake {version}'s JobScheduler._schedule_reevalutation is not the code it was written for"
    return None


def keep_one_reevaluation_timer(stream=None) -> bool:
    """Patch ``JobScheduler._schedule_reevalutation`` once, if :func:`refusal` finds no reason
    not to; whether the patch is in place.  A refusal prints one line on ``stream`` (stderr)."""
    try:
        import snakemake
        from snakemake.scheduling.job_scheduler import JobScheduler
    except ImportError:  # not inside Snakemake: nothing to mend
        return False
    current = getattr(JobScheduler, "_schedule_reevalutation", None)
    if getattr(current, _MARK, False):
        return True
    why = refusal(getattr(snakemake, "__version__", None), current)
    if why:
        print(f"distlab: Snakemake's scheduler left unpatched: {why}; the results are the same, its "
              f"scheduler may use more CPU (distlab/pipeline/smkfix.py)", file=stream or sys.stderr)
        return False
    lock = threading.Lock()

    def _schedule_reevalutation(self, delay) -> None:
        with lock:
            if getattr(self, "_distlab_timer", None) is not None:
                return  # one is pending: the pass it brings is the re-evaluation asked for

            def fire():
                with lock:
                    self._distlab_timer = None
                self._open_jobs.release()

            timer = threading.Timer(delay, fire)
            timer.daemon = True
            self._distlab_timer = timer
            timer.start()

    setattr(_schedule_reevalutation, _MARK, True)
    _schedule_reevalutation.__wrapped__ = current  # Snakemake's own, for a test or an undo
    JobScheduler._schedule_reevalutation = _schedule_reevalutation
    return True
