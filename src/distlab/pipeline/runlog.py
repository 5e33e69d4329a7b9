"""What a workflow run's jobs warned about, for the summary at the end of the run.

Each job writes its output to its own log (``logs/...``), so a NumPy ``RuntimeWarning`` or a
pandas ``DtypeWarning`` a user should see stays there.  The Snakefile's ``onsuccess`` and
``onerror`` hooks call :func:`warning_summary` on the logs written during the run and print its
lines at the end of the console: each log with its warnings counted by kind and place.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from pathlib import Path

# Python's warnings module: "<file>:<line>: <Category>Warning: <message>"
_WARNING = re.compile(r"^(?P<file>\S+?\.py):(?P<line>\d+): (?P<kind>\w*Warning): (?P<msg>.*)$")


def logs_since(folder: str | os.PathLike[str], since: float) -> list[Path]:
    """The ``*.log`` files under ``folder`` written at or after ``since`` (seconds since the epoch)."""
    root = Path(folder)
    if not root.is_dir():
        return []
    return sorted(p for p in root.rglob("*.log") if p.is_file() and p.stat().st_mtime >= since)


def _short(path: str) -> str:
    """A source path from ``distlab/`` on (or its last two parts)."""
    parts = Path(path).parts
    if "distlab" in parts:
        return "/".join(parts[parts.index("distlab") + 1:])
    return "/".join(parts[-2:])


def warnings_in(log: str | os.PathLike[str]) -> Counter:
    """Counter of (kind, place, message) for every Python warning line of ``log``."""
    found: Counter = Counter()
    try:
        text = Path(log).read_text(errors="replace")
    except OSError:
        return found
    for line in text.splitlines():
        m = _WARNING.match(line.strip())
        if m:
            found[(m["kind"], f"{_short(m['file'])}:{m['line']}", m["msg"].strip()[:80])] += 1
    return found


def warning_summary(logs, root: str | os.PathLike[str] = ".") -> list[str]:
    """Lines for the end of a run: a header, then per log with warnings one line each kind and
    place (count, kind, place, the message's start); empty when no log has one."""
    out = []
    for log in logs:
        found = warnings_in(log)
        if not found:
            continue
        try:
            name = os.path.relpath(log, root)
        except ValueError:
            name = str(log)
        for (kind, place, msg), n in sorted(found.items(), key=lambda kv: (-kv[1], kv[0])):
            out.append(f"  {name}: {n} x {kind} at {place}: {msg}")
    if out:
        n_logs = len({line.split(":", 1)[0] for line in out})
        out.insert(0, f"Warnings in {n_logs} job log(s) of this run (the jobs finished; look there for more):")
    return out


class RunWarnings:
    """The warnings summary of one Snakemake run (the Snakefile's onsuccess/onerror): the job logs
    under ``folder`` written since this object was made, their warnings printed to stderr."""

    def __init__(self, folder: str | os.PathLike[str] = "logs") -> None:
        import time

        self.folder, self.started = folder, time.time()

    def report(self) -> None:
        import sys

        for line in warning_summary(logs_since(self.folder, self.started)):
            print(line, file=sys.stderr)
