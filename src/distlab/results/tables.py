"""Result tables: CSV for machines, GitHub-flavoured Markdown for people.

All writers are atomic (write a temporary file in the target directory, then
``os.replace``) so an interrupted Snakemake job never leaves a half-written
output that looks complete.  Markdown is laid out by ``DataFrame.to_markdown``
(tabulate, pinned in the lock); the cells are formatted here first (floats with
``floatfmt``, missing values empty, ``|`` escaped), so tabulate never re-parses a
text cell that looks like a number.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..data.errors import DataError


class ResultError(DataError):
    """A run's or a table's files are missing, truncated or not what their writer wrote; the
    message is one line naming the file and how to make it again."""


@contextmanager
def atomic_output(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; move it into place on success.

    Parent directories are created.  On error the temporary file is removed and
    ``path`` is left untouched.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    with atomic_output(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def _cell(value: Any, floatfmt: str) -> str:
    if value is None or (pd.api.types.is_scalar(value) and pd.isna(value)):
        return ""
    if isinstance(value, (float, np.floating)):
        text = format(float(value), floatfmt)
    else:
        text = str(value)
    return text.replace("|", r"\|").replace("\r\n", " ").replace("\n", " ")


def markdown_table(df: pd.DataFrame, floatfmt: str = ".4g") -> str:
    """Render ``df`` (without its index) as a GitHub-flavoured Markdown table.

    Numeric columns are right-aligned, floats use ``floatfmt``, missing values
    are empty cells and ``|`` is escaped.
    """
    align = ["right" if pd.api.types.is_numeric_dtype(df[c]) and not pd.api.types.is_bool_dtype(df[c])
             else "left" for c in df.columns]
    cells = pd.DataFrame([[_cell(v, floatfmt) for v in row] for row in df.itertuples(index=False, name=None)],
                         columns=[_cell(c, floatfmt) for c in df.columns], dtype=object)
    return cells.to_markdown(index=False, tablefmt="pipe", colalign=align, disable_numparse=True) + "\n"


def write_table(
    df: pd.DataFrame,
    csv_path: str | os.PathLike[str],
    md_path: str | os.PathLike[str] | None = None,
    floatfmt: str = ".4g",
) -> None:
    """Write ``df`` as CSV (full precision, no index) and optionally as Markdown."""
    with atomic_output(csv_path) as tmp:
        df.to_csv(tmp, index=False)
    if md_path is not None:
        atomic_write_text(md_path, markdown_table(df, floatfmt))


RECORD_SUFFIX = ".record.json"


def record_path(path: str | os.PathLike[str]) -> Path:
    """Where the record of a summary table lies: beside it, ``<name>.record.json``."""
    p = Path(path)
    return p.with_name(p.name + RECORD_SUFFIX)


def write_table_record(path: str | os.PathLike[str], df: pd.DataFrame, runs: list[str | os.PathLike[str]]) -> None:
    """Record what a summary table at ``path`` holds: its SHA-256, rows, columns and the run
    folders it summarises, so a reader notices a table cut short, edited or rewritten partly,
    and a run that has vanished since (:func:`read_table_checked`)."""
    import hashlib
    import json

    data = Path(path).read_bytes()
    record = {"sha256": hashlib.sha256(data).hexdigest(), "rows": int(len(df)),
              "columns": [str(c) for c in df.columns], "runs": [str(r) for r in runs]}
    atomic_write_text(record_path(path), json.dumps(record, indent=1) + "\n")


def table_errors(path: str | os.PathLike[str]) -> list[str]:
    """What is wrong with a table a rule reads, one line each naming the file: missing; a CSV
    whose last line is unfinished (cut mid-line); with a record (:func:`write_table_record`),
    content that is not what was written (rows, columns, checksum) or a run folder it
    summarises that is gone."""
    import hashlib
    import json

    p = Path(path)
    fix = "rerun the rule that writes it (snakemake --forcerun <rule>, or delete it and run again)"
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        return [f"{p}: missing; {fix}"]
    if p.suffix.lower() == ".csv" and data and not data.endswith(b"\n"):
        return [f"{p}: truncated ({len(data)} bytes, its last line unfinished); {fix}"]
    rec_path = record_path(p)
    if not rec_path.exists():
        return []
    try:
        rec = json.loads(rec_path.read_text(encoding="utf-8"))
        expected = str(rec["sha256"])
    except (OSError, ValueError, KeyError, TypeError):
        return [f"{rec_path}: unreadable record of {p}; {fix}"]
    out = []
    if hashlib.sha256(data).hexdigest() != expected:
        n = max(0, data.count(b"\n") - 1)
        out.append(f"{p}: not the table its rule wrote ({n} rows now, {rec.get('rows')} written; "
                   f"truncated or edited); {fix}")
    gone = [r for r in rec.get("runs", []) if not (Path(r) / "manifest.json").is_file()
            and not (Path(r).name == "manifest.json" and Path(r).is_file())]
    if gone:
        out.append(f"{p}: {len(gone)} of the {len(rec.get('runs', []))} runs it summarises are gone "
                   f"(first: {gone[0]}); rerun them (snakemake --forcerun <rule>) before trusting it")
    return out


def read_table_checked(path: str | os.PathLike[str]) -> pd.DataFrame:
    """A CSV or parquet table (by suffix) after :func:`table_errors`; its first problem raises
    :class:`ResultError`, one line naming the file."""
    errs = table_errors(path)
    if errs:
        raise ResultError(errs[0])
    suffix = Path(path).suffix.lower()
    if suffix in (".parquet", ".pq"):
        return pd.read_parquet(path)
    if suffix == ".csv":
        return pd.read_csv(path)
    raise ResultError(f"cannot read {path}: expected .csv or .parquet")


def fmt_ci(est: float, lo: float, hi: float, digits: int = 3) -> str:
    """Format an estimate with its interval, e.g. ``"0.123 [0.100, 0.150]"``.

    All three numbers share one number of decimals, chosen so the largest
    magnitude shows ``digits`` significant digits.
    """
    values = [float(v) for v in (est, lo, hi)]
    finite = [abs(v) for v in values if math.isfinite(v) and v != 0]
    if finite:
        decimals = min(12, max(0, digits - 1 - math.floor(math.log10(max(finite)))))
    else:
        decimals = digits
    e_txt, lo_txt, hi_txt = (f"{v:.{decimals}f}" for v in values)
    return f"{e_txt} [{lo_txt}, {hi_txt}]"
