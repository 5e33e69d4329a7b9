"""Keep Snakemake's job scheduler to one pending re-evaluation timer (the Snakefile calls
:func:`keep_one_reevaluation_timer` when it is parsed, so every run of this workflow has it).

With a job rate limit, which local runs have too (``--max-jobs-per-timespan`` defaults to
100/1s), each scheduling pass of Snakemake 9's ``JobScheduler.schedule`` ends by starting a
``threading.Timer`` that releases the scheduler's semaphore one timespan later, so that jobs
held back by the limit are looked at again.  That release runs another pass, which starts
another timer; and every pass woken by something else (a job that finished) starts one more.
So the timers are never fewer than the passes that were ever woken by a job: after n jobs
about n of them fire every second, each running a full pass and starting a thread.  In one
``make reproduce`` of this workflow (311 jobs, 2 cores) Snakemake's main process had used
607 s of CPU after 43 minutes and had created some 250,000 threads, while the jobs it waited
for shared the same two cores.

The replacement starts a timer only when none is pending (a pass within one timespan is all
the limiter asks for) and clears the slot just before the timer releases the semaphore, so the
chain goes on with exactly one timer; the timer is a daemon thread, so it never holds up
Snakemake's exit.  Where Snakemake has no such method (another version), nothing is changed.
"""

from __future__ import annotations

import threading

_MARK = "_distlab_one_timer"


def keep_one_reevaluation_timer() -> bool:
    """Patch ``JobScheduler._schedule_reevalutation`` (Snakemake's spelling) once; whether the
    patch is in place."""
    try:
        from snakemake.scheduling.job_scheduler import JobScheduler
    except ImportError:  # not inside Snakemake, or another layout: nothing to mend
        return False
    current = getattr(JobScheduler, "_schedule_reevalutation", None)
    if current is None:
        return False
    if getattr(current, _MARK, False):
        return True
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
    JobScheduler._schedule_reevalutation = _schedule_reevalutation
    return True
