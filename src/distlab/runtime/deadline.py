"""A wall-clock deadline for a job that runs in this process (a simulated run).

Real jobs are killed by their launcher after ``runtime.job_timeout_s``
(:mod:`distlab.runtime.launch`); :func:`job_deadline` gives simulated jobs the
same limit.  Given the job's ``work`` (the steps its spec runs, all runs together),
the deadline scales with it, as a cluster job's runtime does (:mod:`distlab.pipeline.jobs`):
each step the trainer completes (:func:`progress`, called by
``distlab.results.checkpoint.Checkpointer.maybe_save``) moves it to the first step's time plus
``margin`` x work x the mean step time measured so far, never sooner than
``timeout_s`` after the start.  A loaded machine's slow steps lengthen it; a job
that stops making steps (hung) meets it and is stopped, named with its last step.  At the deadline a ``SIGALRM`` raises :class:`JobTimeout` in the
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

DEFAULT_MARGIN = 2.0  # as jobs.margin's default: a job may take twice its measured pace
# for tests only: seconds each step sleeps (a slowed machine), the step at which it hangs
_TEST_SLEEP = "DISTLAB_TEST_STEP_SLEEP_S"
_TEST_HANG = "DISTLAB_TEST_HANG_AT_STEP"
# a rank started by torchrun (not forked) finds its launcher's step file here (8 bytes a rank)
STEPS_FILE = "DISTLAB_STEPS_FILE"


class _Pace:
    """The scaled deadline of the job running now (None outside a scaled job_deadline)."""

    def __init__(self, floor_s: float, work: int, margin: float) -> None:
        import time

        self.start = time.monotonic()
        self.floor_s, self.work, self.margin = floor_s, max(1, int(work)), margin
        self.first: float | None = None
        self.steps = self.base = 0
        self.deadline = self.start + floor_s

    def tick(self, now: float, n: int = 1) -> float:
        self.steps += n
        if self.first is None:  # the first call starts the clock the pace is measured on
            self.first, self.base = now, self.steps
        elif self.steps > self.base:
            mean = (now - self.first) / (self.steps - self.base)
            self.deadline = max(self.start + self.floor_s, self.first + self.margin * self.work * mean)
        return self.deadline


_pace: dict[str, _Pace | None] = {"now": None}
# in a forked rank: (shared memory, slot) where it counts its steps for the launcher
_shared: dict[str, object] = {"mem": None, "slot": 0}


def count_steps_into(mem, slot: int) -> None:
    """This process (a forked rank) counts its steps into ``mem`` (8 bytes a slot)."""
    _shared["mem"], _shared["slot"] = mem, slot


def _attach_from_env() -> None:
    """A rank of a torchrun job: count its steps into the file its launcher named in
    ``DISTLAB_STEPS_FILE``, slot ``RANK`` (once; nothing when either is missing)."""
    _shared["tried"] = True
    path, rank = os.environ.get(STEPS_FILE), os.environ.get("RANK")
    if not path or rank is None:
        return
    import mmap

    try:
        with open(path, "r+b") as f:
            mem = mmap.mmap(f.fileno(), 0)
    except (OSError, ValueError):
        return  # no launcher listening: the job just has no paced deadline
    if 8 * (int(rank) + 1) <= len(mem):
        count_steps_into(mem, int(rank))


def steps_file(path, n: int):
    """Create the step file of an ``n``-rank job at ``path`` and map it: what
    :func:`steps_counted` reads while the ranks (told ``DISTLAB_STEPS_FILE``) count."""
    import mmap

    with open(path, "w+b") as f:
        f.write(b"\0" * (8 * n))
        f.flush()
        return mmap.mmap(f.fileno(), 0)


def steps_counted(mem, n: int) -> int:
    """The most steps any of ``n`` slots of ``mem`` counted."""
    import struct

    return max(struct.unpack_from(f"{n}q", mem, 0)) if n else 0


def make_pace(floor_s: float, work: int | None, margin: float = DEFAULT_MARGIN) -> _Pace | None:
    return _Pace(floor_s, work, margin) if work else None


def pace_message(what: str, timeout_s: float, pace: _Pace | None) -> str:
    return _message(what, timeout_s, pace)


def progress(n: int = 1) -> None:
    """``n`` steps done (a search's evaluations): the scaled deadline (if any) moves with
    the measured pace."""
    import time

    sleep = os.environ.get(_TEST_SLEEP)
    if sleep:
        time.sleep(float(sleep))
    if _shared["mem"] is None and not _shared.get("tried"):
        _attach_from_env()
    mem = _shared["mem"]
    if mem is not None:
        import struct

        off = 8 * int(_shared["slot"])
        hang = os.environ.get(_TEST_HANG)
        done = struct.unpack_from("q", mem, off)[0]
        if hang and done + 1 >= int(hang):
            while True:  # a hung step, for tests: only the launcher's deadline ends it
                time.sleep(0.05)
        struct.pack_into("q", mem, off, done + n)
    pace = _pace["now"]
    if pace is None:
        return
    hang = os.environ.get(_TEST_HANG)
    if hang and pace.steps + 1 >= int(hang):
        while True:  # a hung step, for tests: only the deadline ends it
            time.sleep(0.05)
    deadline = pace.tick(time.monotonic(), n)
    left = deadline - time.monotonic()
    if left > 0:
        signal.setitimer(signal.ITIMER_REAL, left)


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


def _message(what: str, timeout_s: float, pace: _Pace | None = None) -> str:
    import time

    if pace is None:
        return (f"{what} ran past {timeout_s:g} s and was stopped (runtime.job_timeout_s); "
                f"its last checkpoint, if any, is kept: a rerun continues from it")
    ran = time.monotonic() - pace.start
    return (f"{what} ran past {ran:.0f} s and was stopped at step {pace.steps} of {pace.work}: its "
            f"deadline is {pace.margin:g} x the steps x the step time measured so far, at least "
            f"runtime.job_timeout_s = {timeout_s:g} s (hung, or far slower than its own pace); its last "
            f"checkpoint, if any, is kept: a rerun continues from it")


@contextmanager
def job_deadline(timeout_s: float | None, what: str = "simulated job", grace_s: float = 30.0,
                 work: int | None = None, margin: float = DEFAULT_MARGIN) -> Iterator[None]:
    """Raise :class:`JobTimeout` in the body once ``timeout_s`` wall seconds have passed,
    or, given ``work`` (the steps the job runs), once its scaled deadline has (see the
    module's note).

    No deadline when ``timeout_s`` is None or not positive, or outside the main thread
    (signals reach only the main thread)."""
    if not timeout_s or timeout_s <= 0 or threading.current_thread() is not threading.main_thread():
        yield
        return
    pace = _Pace(float(timeout_s), work, margin) if work else None
    state = {"active": True}  # False once the body is over: a late alarm or watchdog does nothing

    def message_now() -> str:
        return _message(what, float(timeout_s), pace)

    def on_alarm(signum, frame):  # noqa: ARG001
        if not state["active"]:
            return
        if _deferred["depth"]:
            _deferred["pending"] = message_now()
            return
        raise JobTimeout(message_now())

    def hard_exit() -> None:
        import time

        # a scaled deadline moves: the watchdog waits for the current one plus the grace
        while pace is not None and state["active"] and time.monotonic() < pace.deadline + grace_s:
            if stop.wait(min(1.0, max(0.01, pace.deadline + grace_s - time.monotonic()))):
                return
        if not state["active"]:
            return
        print(f"distlab: {message_now()} (killed: it did not return to Python within {grace_s:g} s)",
              file=sys.stderr, flush=True)
        os._exit(124)

    stop = threading.Event()
    previous = signal.signal(signal.SIGALRM, on_alarm)
    watchdog = threading.Timer(float(timeout_s) + grace_s, hard_exit)
    watchdog.daemon = True
    watchdog.start()
    _pace["now"] = pace
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
            _pace["now"] = None
            stop.set()
            signal.signal(signal.SIGALRM, previous)
            watchdog.cancel()
            _deferred["pending"] = None
