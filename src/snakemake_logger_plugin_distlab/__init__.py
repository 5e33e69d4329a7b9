"""A console a person can follow: one line per finished job and the run's progress.

Snakemake's own console prints each job's block (rule, every input and output, resources) and,
with ``--printshellcmds``, its whole command: on ``make reproduce`` some 5,500 lines.  This
logger plugin (``snakemake --logger distlab``; ``make reproduce`` uses it) prints instead, per
finished job, one line::

    [ 12/311   4%] pgc_train_sim  s=1 scheme=gc-fr   23.1 s

(jobs done of all, the rule, its wildcards, the seconds since it started), and appends the job's
full command to the end of its own log (``# command: ...``).  A failed job gets its rule,
wildcards, log and command; every other message (the job counts at the start, warnings, errors,
the summary at the end) passes as Snakemake words it, less the scheduler's "Select jobs to
execute..." and "Execute N jobs..." chatter.  In a dry run it prints what Snakemake would.

Found by Snakemake's plugin registry by its module name (``snakemake_logger_plugin_*``) on the
path of the environment the project is installed in.
"""

from __future__ import annotations

import logging
import re
import sys
import time
from dataclasses import dataclass
from typing import Optional

from snakemake_interface_logger_plugins.base import LogHandlerBase
from snakemake_interface_logger_plugins.common import LogEvent
from snakemake_interface_logger_plugins.settings import LogHandlerSettingsBase

_CHATTER = re.compile(r"^(Select jobs to execute\.\.\.|Execute \d+ jobs\.\.\.|\[\w{3} \w{3} +\d+ [\d:]+ \d{4}\])$")


@dataclass
class LogHandlerSettings(LogHandlerSettingsBase):
    pass


def _wildcards(wc) -> str:
    items = dict(wc or {}).items()
    return " ".join(f"{k}={v}" for k, v in items)


def _files(value) -> list[str]:
    if not value:
        return []
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    return [str(v) for v in value]


class LogHandler(LogHandlerBase):
    def __post_init__(self) -> None:
        self.stream = sys.stdout if getattr(self.common_settings, "stdout", False) else sys.stderr
        self.jobs: dict[int, dict] = {}
        self.finished: list[int] = []
        self.last_job: Optional[int] = None
        self.dryrun = bool(getattr(self.common_settings, "dryrun", False))
        if self.dryrun:  # a dry run lists the jobs as Snakemake does
            from snakemake.logging import DefaultFilter, DefaultFormatter

            self.setFormatter(DefaultFormatter(self.common_settings.quiet, self.common_settings.show_failed_logs))
            c = self.common_settings  # as Snakemake's own stream handler (LoggerManager._default_filter)
            self.addFilter(DefaultFilter(c.quiet, c.debug_dag, c.verbose, c.dryrun, c.printshellcmds))

    @property
    def writes_to_stream(self) -> bool:
        return True

    @property
    def writes_to_file(self) -> bool:
        return False

    @property
    def has_filter(self) -> bool:
        return True

    @property
    def has_formatter(self) -> bool:
        return True

    @property
    def needs_rulegraph(self) -> bool:
        return False

    def _write(self, text: str) -> None:
        self.stream.write(text + "\n")
        self.stream.flush()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            if self.dryrun:
                text = self.format(record)
                if text and text != "None":
                    self._write(text)
                return
            self._emit(record)
        except Exception:  # a console line must never stop the run
            self.handleError(record)

    def _emit(self, record: logging.LogRecord) -> None:
        event = getattr(record, "event", None)
        if event == LogEvent.JOB_INFO:
            jobid = getattr(record, "jobid", None)
            self.jobs[jobid] = {"rule": getattr(record, "rule_name", "?"),
                                "wildcards": _wildcards(getattr(record, "wildcards", None)),
                                "log": _files(getattr(record, "log", None)), "start": time.monotonic()}
            self.last_job = jobid
            return
        if event == LogEvent.SHELLCMD:  # follows its job's JOB_INFO
            if self.last_job in self.jobs:
                self.jobs[self.last_job]["command"] = getattr(record, "shellcmd", None) or record.getMessage()
            return
        if event == LogEvent.JOB_FINISHED:
            self.finished.append(getattr(record, "job_id", None))
            return
        if event == LogEvent.PROGRESS:
            done, total = getattr(record, "done", 0), getattr(record, "total", 0)
            for jobid in self.finished or [None]:
                self._finished_line(jobid, done, total)
            self.finished = []
            return
        if event == LogEvent.JOB_ERROR:
            job = self.jobs.get(getattr(record, "jobid", None), {})
            rule = getattr(record, "rule_name", None) or job.get("rule", "?")
            self._write(f"ERROR in rule {rule} {_wildcards(getattr(record, 'wildcards', None)) or job.get('wildcards', '')}"
                        .rstrip())
            for log in _files(getattr(record, "log", None)) or job.get("log", []):
                self._write(f"    log: {log}")
            if job.get("command"):
                self._write(f"    command: {job['command']}")
            return
        if event in (LogEvent.RESOURCES_INFO, LogEvent.JOB_STARTED, LogEvent.RULEGRAPH, LogEvent.DEBUG_DAG):
            return
        if record.msg is None:
            return
        text = record.getMessage().rstrip()
        if not text or _CHATTER.match(text.strip()):
            return
        if record.levelno >= logging.WARNING and not text.lower().startswith(("warning", "error")):
            text = f"{record.levelname}: {text}"
        self._write(text)

    def _finished_line(self, jobid, done: int, total: int) -> None:
        pct = 100 * done // total if total else 100
        job = self.jobs.pop(jobid, None)
        if job is None:
            self._write(f"[{done:>{len(str(total))}}/{total} {pct:3d}%]")
            return
        secs = time.monotonic() - job["start"]
        self._write(f"[{done:>{len(str(total))}}/{total} {pct:3d}%] {job['rule']}"
                    + (f"  {job['wildcards']}" if job["wildcards"] else "") + f"  {secs:.1f} s")
        command = job.get("command")
        if command and job["log"]:  # the full command, at the end of the job's own log
            try:
                with open(job["log"][0], "a") as fh:
                    fh.write(f"\n# command: {command.strip()}\n")
            except OSError:
                pass
