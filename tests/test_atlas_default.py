"""The sanity an expert checks, on the default atlas's own results: ``python -m distlab atlas
query`` against the pack the results snapshot carries (``paper/atlas/query_pack.json.gz``:
every recording of the last ``make reproduce``'s atlas, :mod:`distlab.atlas.pack`), with the
default configuration.

* At >= 100 Gbit/s and a small model DDP's communication is a small part of its time, and no
  technique beats DDP by more than DDP's communication plus the compute it saves to the target
  (its steps to the target times the compute each step cannot avoid, against DDP's).
* At <= 1 Gbit/s and >= 1e9 parameters DDP is not first.
* No technique wins where its interval overlaps the leader's without the query saying "tie".

Skipped, saying so, only where the snapshot has no atlas pack (a snapshot made before
make reproduce puts it in paper/atlas/): the committed paper/ carries it.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys

import pandas as pd
import pytest

from conftest import ROOT, bin_path

PACK = ROOT / "paper" / "atlas" / "query_pack.json.gz"
ENV = {**os.environ, "PATH": bin_path(), "PYTHONPATH": str(ROOT / "src")}

pytestmark = pytest.mark.skipif(
    not PACK.is_file(),
    reason=f"{PACK.relative_to(ROOT)} missing: this results snapshot does not carry the atlas's pack "
           "(make reproduce)")


def query(*args: str, fmt: str = "csv"):
    r = subprocess.run([sys.executable, "-m", "distlab", "atlas", "query", "--runs", str(PACK),
                        "--config", str(ROOT / "config/config.yaml"), "--format", fmt, *args],
                       env=ENV, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    return pd.read_csv(io.StringIO(r.stdout)) if fmt == "csv" else r.stdout


@pytest.mark.parametrize("bw", ["100Gbit/s", "400Gbit/s"])
@pytest.mark.parametrize("cell", [("21984", "4"), ("1e5", "4", "--device", "cpu")],
                         ids=["measured cell (replay)", "near the runs (projected, fit)"])
def test_at_100gbit_and_a_small_model_no_compressor_beats_ddp_by_more_than_the_compute_it_saves(bw, cell):
    df = query("--params", cell[0], "--workers", cell[1], *cell[2:], "--bandwidth", bw, "--latency", "10us")
    ddp = df[df.technique == "ddp"].iloc[0]
    comm = ddp["time_s"] - ddp["compute_to_target_s"]
    # DDP at this bandwidth: its compute and a little communication
    assert 0 <= comm <= 0.10 * ddp["time_s"], ddp.to_dict()
    rows = df[(df.technique != "ddp") & df["valid"]]
    assert len(rows) >= 10
    for _, r in rows.iterrows():
        gain = ddp["time_s"] - r["time_s"]
        saved = ddp["compute_to_target_s"] - r["compute_to_target_s"]
        assert gain <= comm + saved + 1e-9 * ddp["time_s"], r.to_dict()


@pytest.mark.parametrize("args", [
    ("--params", "1e9", "--workers", "8", "--bandwidth", "1Gbit/s", "--latency", "1ms", "--efficiency", "published"),
    ("--params", "1e9", "--workers", "64", "--bandwidth", "100Mbit/s", "--latency", "30ms", "--device", "h100",
     "--efficiency", "published"),
    ("--params", "1e10", "--workers", "8", "--bandwidth", "1Gbit/s", "--latency", "1ms", "--device", "h100",
     "--efficiency", "published"),
    # a pessimistic ratio given by the user: DiLoCo twice DDP's steps, DeMo 1.5 times
    ("--params", "1e9", "--workers", "8", "--bandwidth", "1Gbit/s", "--latency", "10us", "--device", "h100",
     "--efficiency", "diloco=2,demo=1.5"),
], ids=["1e9 N8 1Gbit cpu", "1e9 N64 100Mbit h100", "1e10 N8 1Gbit h100", "1e9 N8 1Gbit h100 user ratios"])
def test_at_1gbit_and_1e9_parameters_ddp_is_not_first(args):
    """DDP leads only where the techniques cheaper per step have no ratio (listed apart, each with
    the step ratio under which it would lead)."""
    df = query(*args)
    apart = df[~df["ranked"].astype(bool)]
    assert df.iloc[0]["technique"] != "ddp" or (apart["break_even_ratio"] > 1).any(), \
        df[["technique", "time_s", "basis", "break_even_ratio"]]


@pytest.mark.parametrize("args", [
    ("--params", "21984", "--workers", "4", "--bandwidth", "10Mbit/s", "--latency", "1ms"),
    ("--params", "21984", "--workers", "4", "--bandwidth", "10Gbit/s", "--latency", "1ms"),
    ("--params", "7920", "--workers", "2", "--bandwidth", "1Gbit/s", "--latency", "10us"),
    ("--params", "1e5", "--workers", "8", "--bandwidth", "1Gbit/s", "--latency", "1ms", "--device", "cpu"),
])
def test_no_technique_wins_inside_the_leaders_interval_without_tie(args):
    from distlab.atlas.query import overlaps_leader

    df = query(*args)
    lead = df.iloc[0]
    overlapping = [overlaps_leader(r, lead) for _, r in df.iloc[1:].iterrows()]
    assert list(df["tie"].iloc[1:].astype(bool)) == overlapping, df[["technique", "lo_s", "hi_s", "tie"]]
    assert bool(lead["tie"]) == any(overlapping)
    text = query(*args, fmt="table")
    first = text.splitlines()[3]  # the header lines, the column heads, then rank 1
    assert first.split()[:2] == ["1", lead["technique"]]
    assert (" tie " in first) == any(overlapping), first
    if any(overlapping):
        assert "tie: the interval reaches the leader's" in text
