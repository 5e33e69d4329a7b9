"""What the machine was doing while a timed job ran: the load average and the job's CPU time.

A measured throughput is only this machine's when the job had its cores to itself.  A timed
rule therefore holds every core of ``--cores`` while it runs (:func:`exclusive_threads`, its
Snakemake ``threads``; its own thread count is the spec's), and its run keeps, in its
manifest's ``load``, what it saw (:class:`LoadWatch`):

* ``cores``: the CPUs its process could run on;
* ``load_start``: the 1-minute load average when it started;
* ``load_end``: the load average at its end over the window nearest its wall time (1, 5 or
  15 minutes; ``load_window_min`` names it), so a run of several minutes reads its own span;
* ``cpu_s`` and ``wall_s``: the CPU time (user + system, the job's process and the processes
  it started and waited for) and the wall time between, and ``cpu_per_wall`` their ratio: a
  job of two threads that got 1.0 CPU-second a second shared its cores;
* ``others_cpu_per_wall``: the CPU time every other process of the machine used over the run
  (the machine's busy time from ``/proc/stat`` less the job's own), per second of the run: how
  many cores other work took from it (absent where ``/proc/stat`` is not there).

:func:`saw_load_above_cores` reads one such record: the scorecard can mark a measured row
whose run shared the machine.  The load average counts the job's own runnable processes, so a
job of more processes than cores (P3's RC runs its sections as processes) reads above its cores
alone; where the record has it, the mark reads ``others_cpu_per_wall`` instead (above
:data:`OTHERS_MAX`).
"""

from __future__ import annotations

import os
import resource
import time

WINDOWS_MIN = (1, 5, 15)  # os.getloadavg()'s windows
# other processes' CPU over a run, in cores, above which the run shared the machine: Snakemake's
# own polling and the system's daemons stay far below a quarter of a core
OTHERS_MAX = 0.25


def _cpu_s() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def machine_busy_s(stat: str = "/proc/stat") -> float | None:
    """CPU seconds every process of the machine has used since boot (the ``cpu`` line of
    ``/proc/stat``: user, nice, system, irq, softirq, steal); None where it cannot be read."""
    try:
        with open(stat, encoding="ascii") as f:
            fields = f.readline().split()
        if fields[0] != "cpu":
            return None
        user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[1:9])
        return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


class LoadWatch:
    """Started when a run starts; :meth:`summary` at its end (JSON-able)."""

    def __init__(self) -> None:
        self.t0, self.cpu0, self.busy0 = time.monotonic(), _cpu_s(), machine_busy_s()
        self.load0 = os.getloadavg()[0]
        self.cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1

    def summary(self) -> dict[str, float]:
        wall = time.monotonic() - self.t0
        cpu = _cpu_s() - self.cpu0
        busy = machine_busy_s()
        loads = os.getloadavg()
        # the window nearest the run's length (in minutes, on a log scale)
        k = min(range(len(WINDOWS_MIN)), key=lambda i: abs(_log(WINDOWS_MIN[i]) - _log(max(wall, 1.0) / 60)))
        out = {"cores": self.cores, "load_start": round(self.load0, 2), "load_end": round(loads[k], 2),
               "load_window_min": WINDOWS_MIN[k], "cpu_s": round(cpu, 3), "wall_s": round(wall, 3),
               "cpu_per_wall": round(cpu / wall, 3) if wall > 0 else float("nan")}
        if busy is not None and self.busy0 is not None and wall > 0:
            # the clock ticks of /proc/stat round each process's time: never below zero
            out["others_cpu_per_wall"] = round(max(0.0, busy - self.busy0 - cpu) / wall, 3)
        return out


def _log(x: float) -> float:
    import math

    return math.log(max(x, 1e-9))


def saw_load_above_cores(load: dict | None, cores: int | None = None) -> bool:
    """Whether a run whose manifest's ``load`` is ``load`` shared the machine: other processes
    took more than :data:`OTHERS_MAX` cores over its run (``others_cpu_per_wall``); in a record
    without it, a load average above the ``cores`` it held (by default the CPUs its process could
    run on, ``load["cores"]``) at its start or over its run.  False for a run that kept no record."""
    if not load:
        return False
    if load.get("others_cpu_per_wall") is not None:  # other processes' CPU over the run, in cores
        return float(load["others_cpu_per_wall"]) > OTHERS_MAX
    cores = int(load.get("cores", 1)) if cores is None else cores  # an older record: the load average
    return max(float(load.get("load_start", 0.0)), float(load.get("load_end", 0.0))) > cores


def _local_cores(workflow) -> int | None:
    """``--cores`` of a run on this machine; None on a cluster executor or without it."""
    try:
        plugin = getattr(workflow.executor_plugin, "name", None)
        cores = workflow.cores
    except Exception:  # no --cores given (a dry run, a lint)
        return None
    if plugin not in (None, "local", "dryrun", "touch") or not isinstance(cores, int):
        return None
    return cores


def own_threads(workflow, threads: int) -> int:
    """The threads a timed job runs (its ``OMP_NUM_THREADS``): the spec's, at most ``--cores``
    (as Snakemake scales a rule's ``threads`` down to them)."""
    cores = _local_cores(workflow)
    return threads if cores is None else min(threads, cores)


def exclusive_threads(workflow, threads: int) -> int:
    """A timed rule's Snakemake ``threads``: every core of ``--cores`` on one machine, so no
    other job shares them while it runs (the job's own thread count is its spec's, passed
    apart); on a cluster executor the job gets a node slice of its own and asks for
    ``threads``."""
    cores = _local_cores(workflow)
    return threads if cores is None else max(threads, cores)
