"""Tables: CSV + GitHub Markdown (tabulate's pipe format), atomic writes, CI formatting."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from distlab.results import tables


def _df() -> pd.DataFrame:
    return pd.DataFrame({
        "scheme": ["gc|cr", "pgc"],
        "s": [1, 2],
        "time": [0.123456, math.nan],
        "ok": [True, False],
    })


def test_markdown_table_format():
    md = tables.markdown_table(_df())
    assert md.splitlines() == [
        "| scheme   |   s |   time | ok    |",
        "|:---------|----:|-------:|:------|",
        r"| gc\|cr   |   1 | 0.1235 | True  |",
        "| pgc      |   2 |        | False |",
    ]
    # a text cell that looks like a number stays as written (tabulate parses nothing)
    assert "| 1.50 |" in tables.markdown_table(pd.DataFrame({"ci": ["1.50"]}))


def test_write_table_roundtrip_and_markdown(tmp_path):
    csv, md = tmp_path / "a" / "t.csv", tmp_path / "b" / "t.md"
    tables.write_table(_df(), csv, md, floatfmt=".2f")
    back = pd.read_csv(csv)
    assert back["time"].iloc[0] == 0.123456  # CSV keeps full precision
    assert list(back.columns) == ["scheme", "s", "time", "ok"]
    assert "| gc\\|cr   |   1 |   0.12 | True  |" in md.read_text()
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["a", "b", "t.csv", "t.md"]  # no temp files left


def test_atomic_write_keeps_old_file_on_error(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        with tables.atomic_output(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("interrupted")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ((0.123, 0.1, 0.15), "0.123 [0.100, 0.150]"),
        ((-0.12, -0.15, -0.09), "-0.120 [-0.150, -0.090]"),
        ((1234.5, 1200.0, 1300.2), "1234 [1200, 1300]"),
        ((0.00012, 0.0001, 0.00015), "0.000120 [0.000100, 0.000150]"),
        ((2.0, 2.0, 2.0), "2.00 [2.00, 2.00]"),
    ],
)
def test_fmt_ci(args, expected):
    assert tables.fmt_ci(*args) == expected
