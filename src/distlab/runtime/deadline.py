"""A wall-clock deadline for a job that runs in this process (a simulated run).

Real jobs are killed by their launcher after ``runtime.job_timeout_s``
(:mod:`distlab.runtime.launch`); :func:`job_deadline` gives simulated jobs the
same limit.  At the deadline a ``SIGALRM`` raises :class:`JobTimeout` in the
main thread, so the run unwinds through its ``finally`` blocks and its last
checkpoint stays for a rerun; should the process not return to Python code
within ``grace_s`` (a long native call), a watchdog thread prints the same
line and ends the process with exit code 124.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from contextlib import contextmanager
from typing import Iterator


class JobTimeout(BaseException):
    """The job ran past its deadline (a BaseException, so no ``except Exception`` swallows it)."""


_deferred = {"depth": 0, "pending": None}  # inside deadline_deferred(): the timeout waits


@contextmanager
def deadline_deferred() -> Iterator[None]:
    """A section the deadline does not interrupt (a checkpoint being put in place): a
    deadline that falls inside raises :class:`JobTimeout` when the section ends.

    (Blocking SIGALRM would not do: the kernel hands a process's signal to any thread
    that does not block it, and Python runs the handler in the main thread anyway.)"""
    _deferred["depth"] += 1
    try:
        yield
    except BaseException:
        _deferred["depth"] -= 1
        raise
    _deferred["depth"] -= 1
    if _deferred["depth"] == 0 and _deferred["pending"] is not None:
        message, _deferred["pending"] = _deferred["pending"], None
        raise JobTimeout(message)


def _message(what: str, timeout_s: float) -> str:
    return (f"{what} ran past {timeout_s:g} s and was stopped (runtime.job_timeout_s); "
            f"its last checkpoint, if any, is kept: a rerun continues from it")


@contextmanager
def job_deadline(timeout_s: float | None, what: str = "simulated job", grace_s: float = 30.0) -> Iterator[None]:
    """Raise :class:`JobTimeout` in the body once ``timeout_s`` wall seconds have passed.

    No deadline when ``timeout_s`` is None or not positive, or outside the main thread
    (signals reach only the main thread)."""
    if not timeout_s or timeout_s <= 0 or threading.current_thread() is not threading.main_thread():
        yield
        return
    message = _message(what, float(timeout_s))
    state = {"active": True}  # False once the body is over: a late alarm or watchdog does nothing

    def on_alarm(signum, frame):  # noqa: ARG001
        if not state["active"]:
            return
        if _deferred["depth"]:
            _deferred["pending"] = message
            return
        raise JobTimeout(message)

    def hard_exit() -> None:
        if not state["active"]:
            return
        print(f"distlab: {message} (killed: it did not return to Python within {grace_s:g} s)",
              file=sys.stderr, flush=True)
        os._exit(124)

    previous = signal.signal(signal.SIGALRM, on_alarm)
    watchdog = threading.Timer(float(timeout_s) + grace_s, hard_exit)
    watchdog.daemon = True
    watchdog.start()
    try:
        # armed inside the try: a deadline shorter than the set-up still unwinds through finally
        signal.setitimer(signal.ITIMER_REAL, float(timeout_s))
        yield
    finally:
        try:
            signal.setitimer(signal.ITIMER_REAL, 0)
        finally:
            # the first statement here is a plain store: no signal handler runs before it,
            # and from it on a late alarm is a no-op, so the rest always runs
            state["active"] = False
            signal.signal(signal.SIGALRM, previous)
            watchdog.cancel()
            _deferred["pending"] = None
