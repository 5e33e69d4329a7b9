"""A summary table and its record are written both or neither: a full disk while either is
written is one line and replaces nothing; the record is put in place before the table, so a
table is never left without the record of its own bytes."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pandas as pd
import pytest

from distlab.data.errors import DataError
from distlab.results import tables
from distlab.results.tables import record_path, table_errors, write_checked_table


def _full(*a, **k):
    raise OSError(errno.ENOSPC, "No space left on device")


def _old_table(tmp_path: Path) -> tuple[Path, bytes, bytes]:
    path = tmp_path / "summary.csv"
    write_checked_table(pd.DataFrame({"seed": [0, 1], "loss": [0.5, 0.25]}), path)
    return path, path.read_bytes(), record_path(path).read_bytes()


@pytest.mark.parametrize("where", ["table", "record"])
def test_a_full_disk_replaces_neither_and_is_one_line(tmp_path, monkeypatch, where):
    path, table0, record0 = _old_table(tmp_path)
    if where == "table":
        monkeypatch.setattr("pandas.DataFrame.to_csv", _full)
    else:
        real = Path.write_text

        def record_full(self, *a, **k):
            if ".record.json" in self.name:
                _full()
            return real(self, *a, **k)

        monkeypatch.setattr(Path, "write_text", record_full)
    with pytest.raises(tables.NoSpace) as e:
        write_checked_table(pd.DataFrame({"seed": [0, 1, 2], "loss": [0.5, 0.25, 0.1]}), path)
    msg = str(e.value)
    assert isinstance(e.value, DataError) and "\n" not in msg  # the CLI's one-line user error
    assert msg.startswith(f"{path}: no space left on its device") and "neither it nor its record" in msg
    assert path.read_bytes() == table0 and record_path(path).read_bytes() == record0
    assert table_errors(path) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.csv", "summary.csv.record.json"]


def test_the_record_is_in_place_before_the_table(tmp_path, monkeypatch):
    """Stopped between the two renames (here: the table's rename fails), the record names the
    new table, so the old one left under its name is refused by its readers, never trusted."""
    path, table0, _ = _old_table(tmp_path)
    real = os.replace

    def table_rename_fails(src, dst):
        if Path(dst) == path:
            raise OSError(errno.EIO, "Input/output error")
        return real(src, dst)

    monkeypatch.setattr(tables.os, "replace", table_rename_fails)
    with pytest.raises(OSError):
        write_checked_table(pd.DataFrame({"seed": [7]}), path)
    assert path.read_bytes() == table0
    errors = table_errors(path)
    assert len(errors) == 1 and "not the table its rule wrote" in errors[0]
    monkeypatch.setattr(tables.os, "replace", real)
    write_checked_table(pd.DataFrame({"seed": [7]}), path)
    assert table_errors(path) == [] and pd.read_csv(path)["seed"].tolist() == [7]
