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
from collections.abc import Iterator, Sequence
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


def markdown_table_plain(df: pd.DataFrame, floatfmt: str = ".4g") -> str:
    """``df`` as a GitHub-flavoured Markdown table without padding: each cell as written, so a
    row's length is its content's (a long cell does not widen every other row); numeric columns
    right-aligned by the separator row.  Cells as :func:`markdown_table` writes them."""
    numeric = [pd.api.types.is_numeric_dtype(df[c]) and not pd.api.types.is_bool_dtype(df[c]) for c in df.columns]

    def row(cells) -> str:
        return "| " + " | ".join(cells) + " |"

    lines = [row(_cell(c, floatfmt) for c in df.columns),
             "|" + "|".join("--:" if n else "---" for n in numeric) + "|"]
    lines += [row(_cell(v, floatfmt) for v in r) for r in df.itertuples(index=False, name=None)]
    return "\n".join(lines) + "\n"


class NoSpace(ResultError):
    """A table or its record could not be written for want of space: one line naming it."""


@contextmanager
def _space_checked(path: str | os.PathLike[str]) -> Iterator[None]:
    """A full disk (or quota) while ``path`` is written is one :class:`NoSpace` line."""
    import errno

    try:
        yield
    except OSError as e:
        if e.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
            raise NoSpace(f"{path}: no space left on its device ({e.strerror}); free space and rerun: "
                          f"neither it nor its record was replaced (the earlier ones, if any, are kept)"
                          ) from None
        raise


def write_table(
    df: pd.DataFrame,
    csv_path: str | os.PathLike[str],
    md_path: str | os.PathLike[str] | None = None,
    floatfmt: str = ".4g",
) -> None:
    """Write ``df`` as CSV (full precision, no index) and optionally as Markdown."""
    with _space_checked(csv_path), atomic_output(csv_path) as tmp:
        df.to_csv(tmp, index=False)
    if md_path is not None:
        with _space_checked(md_path):
            atomic_write_text(md_path, markdown_table(df, floatfmt))


RECORD_SUFFIX = ".record.json"


def record_path(path: str | os.PathLike[str]) -> Path:
    """Where the record of a summary table lies: beside it, ``<name>.record.json``."""
    p = Path(path)
    return p.with_name(p.name + RECORD_SUFFIX)


def _record_text(path: str | os.PathLike[str], data: bytes, df: pd.DataFrame,
                 runs: Sequence[str | os.PathLike[str]]) -> str:
    import hashlib
    import json

    base = Path(path).resolve().parent
    rel = [os.path.relpath(Path(r).resolve(), base) for r in runs]
    record = {"sha256": hashlib.sha256(data).hexdigest(), "rows": int(len(df)),
              "columns": [str(c) for c in df.columns], "runs_base": "table", "runs": rel}
    return json.dumps(record, indent=1) + "\n"


def write_table_record(path: str | os.PathLike[str], df: pd.DataFrame,
                       runs: list[str | os.PathLike[str]] = ()) -> None:
    """Record what a summary table at ``path`` holds: its SHA-256, rows, columns and the runs it
    summarises (run folders, their ``manifest.json``, or a run's own file), so a reader notices
    a table cut short, edited or rewritten partly, and a run that has vanished since
    (:func:`read_table_checked`).  Runs are stored relative to the table's folder, so the record
    holds wherever the results tree is moved or read from."""
    with _space_checked(record_path(path)):
        atomic_write_text(record_path(path), _record_text(path, Path(path).read_bytes(), df, runs))


def write_checked_table(df: pd.DataFrame, path: str | os.PathLike[str],
                        runs: list[str | os.PathLike[str]] = ()) -> None:
    """Write ``df`` (parquet for ``.parquet``/``.pq``, else CSV) and its record
    (:func:`write_table_record`) naming the runs it was made from: what every summary table a
    scorecard or a figure reads is written with.

    Both are written to temporary files first, so a full disk (one :class:`NoSpace` line)
    replaces neither; the record is then renamed into place before the table, so a table is
    never left without the record of its own bytes (a stop between the two renames leaves a
    record the old table does not match, which its readers refuse)."""
    suffix = Path(path).suffix.lower()
    with _space_checked(path), atomic_output(path) as tmp:
        if suffix in (".parquet", ".pq"):
            df.to_parquet(tmp, index=False)
        else:
            df.to_csv(tmp, index=False)
        text = _record_text(path, tmp.read_bytes(), df, runs)
        with atomic_output(record_path(path)) as rec_tmp:
            rec_tmp.write_text(text, encoding="utf-8")


def _run_present(run: Path) -> bool:
    """A run a record names still exists: a folder holding its ``manifest.json``, or the run's
    own file (its ``manifest.json``, or a run file such as placement's)."""
    if run.is_dir():
        return (run / "manifest.json").is_file()
    return run.is_file()


def table_errors(path: str | os.PathLike[str]) -> list[str]:
    """What is wrong with a table a rule reads, one line each naming the file: missing; a CSV
    whose last line is unfinished (cut mid-line); with a record (:func:`write_table_record`),
    content that is not what was written (rows, columns, checksum) or a run it summarises
    that is gone."""
    import hashlib
    import json

    p = Path(path)
    fix = "rerun the rule that writes it (snakemake --forcerun <rule>, or delete it and run again)"
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        return [f"{p}: missing; {fix}"]
    except IsADirectoryError:
        return [f"{p}: a folder, not a table; {fix}"]
    if p.suffix.lower() == ".csv" and data and not data.endswith(b"\n"):
        return [f"{p}: truncated ({len(data)} bytes, its last line unfinished); {fix}"]
    rec_path = record_path(p)
    if not rec_path.exists():
        return []
    try:
        rec = json.loads(rec_path.read_text(encoding="utf-8"))
        expected = str(rec["sha256"])
        runs = [str(r) for r in rec.get("runs", [])]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return [f"{rec_path}: unreadable record of {p}; {fix}"]
    out = []
    if hashlib.sha256(data).hexdigest() != expected:
        n = max(0, data.count(b"\n") - 1) if p.suffix.lower() == ".csv" else "?"
        out.append(f"{p}: not the table its rule wrote ({n} rows now, {rec.get('rows')} written; "
                   f"truncated or edited); {fix}")
    base = p.resolve().parent if rec.get("runs_base") == "table" else Path()
    gone = [os.path.normpath(base / r) for r in runs if not _run_present(base / r)]
    if gone:
        out.append(f"{p}: {len(gone)} of the {len(runs)} runs it summarises are gone "
                   f"(first: {gone[0]}); rerun them (snakemake --forcerun <rule>) before trusting it")
    return out


def recorded_runs(path: str | os.PathLike[str]) -> list[Path]:
    """The runs the record of the table at ``path`` names (none without a record), as paths
    that hold from here: what a table made from this one records in turn (the scorecard's)."""
    import json

    rec_path = record_path(path)
    try:
        rec = json.loads(rec_path.read_text(encoding="utf-8"))
        runs = [str(r) for r in rec.get("runs", [])]
    except FileNotFoundError:
        return []
    except (OSError, ValueError, TypeError, AttributeError):
        raise ResultError(f"{rec_path}: unreadable record of {path}; rerun the rule that writes it "
                          "(snakemake --forcerun <rule>)") from None
    base = Path(path).resolve().parent if rec.get("runs_base") == "table" else Path()
    return [Path(os.path.normpath(base / r)) for r in runs]


def read_table_checked(path: str | os.PathLike[str]) -> pd.DataFrame:
    """A CSV or parquet table (by suffix) after :func:`table_errors`; its first problem raises
    :class:`ResultError`, one line naming the file."""
    errs = table_errors(path)
    if errs:
        raise ResultError(errs[0])
    suffix = Path(path).suffix.lower()
    if suffix not in (".parquet", ".pq", ".csv"):
        raise ResultError(f"cannot read {path}: expected .csv or .parquet")
    try:
        return pd.read_parquet(path) if suffix != ".csv" else pd.read_csv(path)
    except (ValueError, OSError) as e:  # empty, unparsable (pandas' and pyarrow's are ValueErrors)
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ResultError(f"{path}: unreadable ({first}); rerun the rule that writes it "
                          "(snakemake --forcerun <rule>)") from None


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


def record_graded_runs(csv_out: str | os.PathLike[str], df: pd.DataFrame,
                       sources: Sequence[str | os.PathLike[str]]) -> None:
    """A scorecard's record: its checksum and every run the tables it graded were made from
    (their own records), so a reader of the scorecard (the merge, the report, the snapshot)
    refuses it once one of those runs has vanished (:func:`read_table_checked`)."""
    runs = list(dict.fromkeys(r for s in sources for r in recorded_runs(s)))
    write_table_record(csv_out, df, runs)
