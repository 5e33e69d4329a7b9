"""paper/'s assembly (scripts/snapshot.py, the end of make reproduce) and a `snakemake netcheck` run: copied into the
snapshot with when it ran against the reproduce run, refused when older than that run,
and the `netcheck` blocks saying "not run in this snapshot" without one.  A fake
results/netcheck/ beside the fake paper/ tree of tests/test_docs.py; nothing is run."""

from __future__ import annotations

import csv
import json
import os

import pytest
from test_docs import RESULTS, ROOT, fake_repo, quoted_numbers, run_snapshot, snapshot  # noqa: F401  (a fixture)

BLOCKS = "".join(f"<!-- snapshot:netcheck {a} -->\n<!-- /snapshot -->\n\n" for a in ("status", "time", "fit", "error"))
PAGE = "# Network\n\nWhat is measured and how.\n\n" + BLOCKS


def _csv(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list({k: None for r in rows for k in r}))
        w.writeheader()
        w.writerows(rows)


def fake_netcheck(repo, error=True):
    """results/netcheck/ and benchmarks/netcheck/ as `snakemake netcheck` writes them."""
    out = repo / "results/netcheck"
    _csv(out / "netcheck.csv", [
        {"rate": "10Mbit", "nominal_bps": 1e7, "latency": "link", "op": "p2p", "size_bytes": 4096,
         "median_s": 0.01, "model_rounds": 2, "model_bytes": 4096, "achieved_Bps": 409600.0},
        {"rate": "10Mbit", "nominal_bps": 1e7, "latency": "link", "op": "p2p", "size_bytes": 1048576,
         "median_s": 0.9, "model_rounds": 2, "model_bytes": 1048576, "achieved_Bps": 1.1875e6},
    ])
    _csv(out / "netcheck_fit.csv", [
        {"rate": "-", "latency": "-", "op": "namespaces setup / teardown (4 ranks)", "status": "measured",
         "setup_s": 0.123, "teardown_s": 0.006},
        {"rate": "10Mbit", "latency": "link", "op": "p2p", "status": "measured", "points": 2,
         "alpha_s": 0.00123, "beta_Bps": 1.2e6, "fit_rms_rel_err": 0.04, "achieved_over_nominal": 0.96},
        {"rate": "100Mbit", "latency": "injected 2 ms/round", "op": "ring_all_reduce_injected",
         "status": "measured", "points": 2, "alpha_s": 0.0021, "beta_Bps": 1.1e7, "fit_rms_rel_err": 0.1,
         "achieved_over_nominal": 0.88, "model_err_mean": -0.087, "model_err_maxabs": 0.36},
    ])
    _csv(out / "netcheck_skipped.csv", [{"rate": "10Mbit", "op": "p2p", "size_bytes": 4194304, "reason": "r"}])
    (out / "netcheck.md").write_text("# Gloo on shaped links (measured)\n")
    bench = repo / "benchmarks/netcheck"
    bench.mkdir(parents=True, exist_ok=True)
    tsv = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"
    (bench / "bench.tsv").write_text(tsv + "93.4\t0:01:33\t1\t1\t1\t1\t0\t0\t187.5\t160.2\n")
    if error:
        _csv(out / "techerror.csv", [
            {"technique": "AdamW-DDP", "rate": "10Mbit", "status": "measured vs simulated",
             "measured_step_s": 0.3875, "simulated_step_s": 0.3272, "repeats": 2, "error": -0.17,
             "error_ci95_lo": -0.26, "error_ci95_hi": -0.08, "error_with_fitted_link": -0.05,
             "error_calibrated": -0.01, "measured_to_target_s": 1.61, "error_to_target": -0.19,
             "error_to_target_ci95_lo": -0.3, "error_to_target_ci95_hi": -0.08},
            {"technique": "PGC", "rate": "100Mbit", "status": "measured vs simulated",
             "measured_step_s": 0.0089, "simulated_step_s": 0.0021, "repeats": 2, "error": -0.76,
             "error_ci95_lo": -0.84, "error_ci95_hi": -0.68, "error_with_fitted_link": -0.70,
             "error_calibrated": 0.75},
        ])
        _csv(out / "techerror_steps.csv", [{"technique": "PGC", "rate": "100Mbit", "measured_s": 0.009}])
        (out / "techerror.md").write_text("# The simulator's error per technique\n")
        (out / "techerror.png").write_bytes(b"png")
        (bench / "error.tsv").write_text(tsv + "990.0\t0:16:30\t1\t1\t1\t1\t0\t0\t150.0\t1500.0\n")
    return out


def blocks_of(text):
    return {m.group(3): m.group(4) for m in snapshot.BLOCK.finditer(text)}


def test_a_netcheck_run_after_the_reproduce_is_copied_and_fills_its_blocks(fake_repo):
    repo, _, head = fake_repo
    (repo / "docs/network.md").write_text(PAGE)
    fake_netcheck(repo)
    assert run_snapshot(repo) == 0
    res = repo / "paper"
    for name in ("netcheck.csv", "netcheck.md", "netcheck_fit.csv", "netcheck_skipped.csv",
                 "techerror.csv", "techerror.md", "techerror_steps.csv"):
        assert (res / "netcheck" / name).read_text() == (repo / "results/netcheck" / name).read_text()
    assert (res / "netcheck/techerror.png").read_bytes() == b"png"
    assert (res / "benchmarks/netcheck/bench.tsv").exists() and (res / "benchmarks/netcheck/error.tsv").exists()
    assert (res / "benchmarks/pgc/run.tsv").exists()  # the other benchmarks as before
    nc = json.loads((res / "record.json").read_text())["netcheck"]
    assert nc["run"] is True and nc["when"] == "after make reproduce"  # the fake reproduce ran in 1970
    assert nc["reproduce_utc"] == ["1970-01-01T00:16:40Z", "1970-01-01T00:26:40Z"]
    assert set(nc["rules"]) == {"netcheck_bench", "netcheck_error"}
    assert nc["rules"]["netcheck_error"]["benchmark"] == "error.tsv"
    assert nc["written_utc"][0] >= "2000" and "reproduce run's" in nc["tree"]
    page = (repo / "docs/network.md").read_text()
    got = blocks_of(page)
    assert "Part of this snapshot (measured)" in got["status"] and "after make reproduce" in got["status"]
    assert "| `netcheck_bench` | 93 s (1.6 min) | 160 s | 188 % |" in got["time"]
    assert "| `netcheck_error` | 990 s (16.5 min) | 1500 s | 150 % |" in got["time"]
    assert "| 10Mbit | link | p2p | 2 | 1.23 | 1.2 | 0.96 | 0.95 (1 MB) | 4 % |  |" in got["fit"]
    assert "| -9 % / 36 % |" in got["fit"] and "0.123 s / 0.006 s (measured)" in got["fit"]
    assert "| AdamW-DDP | 10Mbit | 387.5 | 327.2 | -17 % [-26, -8] | -5 % | -1 % | 1.61 s | -19 % [-30, -8] |" \
        in got["error"]
    assert "| PGC | 100Mbit | 8.9 | 2.1 | -76 % [-84, -68] | -70 % | +75 % |  |  |" in got["error"]
    assert "Within 10 %: 0 of 2 cells at the nominal link, 1 with the fitted link, 1 calibrated" in got["error"]
    assert "](../paper/netcheck/techerror.png)" in got["error"]  # relative to docs/
    assert snapshot.NOT_RUN not in page and quoted_numbers(page) == []
    assert snapshot.fill_blocks(page, res) == page  # `snapshot.py blocks` keeps them


def test_without_netcheck_the_snapshot_and_its_blocks_say_not_run(fake_repo):
    repo, _, _ = fake_repo
    (repo / "docs/network.md").write_text(PAGE)
    # an earlier snapshot's netcheck, and a benchmark of a netcheck whose tables are gone
    (repo / "paper/netcheck").mkdir()
    (repo / "paper/netcheck/techerror.csv").write_text("old\n")
    (repo / "benchmarks/netcheck").mkdir(parents=True)
    (repo / "benchmarks/netcheck/bench.tsv").write_text("s\n1\n")
    assert run_snapshot(repo) == 0
    res = repo / "paper"
    assert not (res / "netcheck").exists() and not (res / "benchmarks/netcheck").exists()
    nc = json.loads((res / "record.json").read_text())["netcheck"]
    assert nc == {"run": False, "status": "netcheck: not run in this snapshot"}
    got = blocks_of((repo / "docs/network.md").read_text())
    assert set(got) == {"status", "time", "fit", "error"}
    assert all(text.startswith("netcheck: not run in this snapshot") for text in got.values()), got


def test_a_record_of_before_netcheck_reads_not_run(tmp_path):
    (tmp_path / "record.json").write_text(json.dumps({"commit": "x"}))
    for arg in ("status", "time", "fit", "error"):
        assert snapshot.netcheck_block(arg, tmp_path).startswith(snapshot.NOT_RUN)
    with pytest.raises(snapshot.Refused, match="unknown netcheck block"):
        snapshot.netcheck_block("pilot", tmp_path)


def test_netcheck_outputs_older_than_the_reproduce_run_are_left_out(fake_repo):
    """Another run's netcheck: the record says why it was left out, and paper/ holds none of it."""
    repo, _, _ = fake_repo
    out = fake_netcheck(repo)
    os.utime(out / "techerror.md", (500, 500))  # before the fake reproduce's start (1000)
    (repo / "paper/netcheck").mkdir()
    (repo / "paper/netcheck/techerror.csv").write_text("an earlier run's\n")
    assert run_snapshot(repo) == 0
    nc = json.loads((repo / "paper/record.json").read_text())["netcheck"]
    assert nc["run"] is False and "before make reproduce started" in nc["left_out"] and "another run's" in nc["left_out"]
    assert not (repo / "paper/netcheck").exists() and not (repo / "paper/benchmarks/netcheck").exists()
    assert run_snapshot(repo, "--without-netcheck") == 0
    nc = json.loads((repo / "paper/record.json").read_text())["netcheck"]
    assert nc["run"] is False and nc["left_out"] == "--without-netcheck"


def test_a_netcheck_run_during_the_reproduce_is_flagged_and_an_incomplete_one_refused(fake_repo, capsys):
    repo, _, _ = fake_repo
    out = fake_netcheck(repo, error=False)
    for p in [*out.iterdir(), repo / "benchmarks/netcheck/bench.tsv"]:
        os.utime(p, (1200, 1200))  # between the fake reproduce's start (1000) and end (1600)
    (repo / "docs/network.md").write_text(PAGE)
    assert run_snapshot(repo) == 0
    nc = json.loads((repo / "paper/record.json").read_text())["netcheck"]
    assert nc["when"].startswith("during make reproduce") and nc["rules"]["netcheck_error"] == snapshot.NOT_RUN
    got = blocks_of((repo / "docs/network.md").read_text())
    assert "during make reproduce" in got["status"] and "| `netcheck_error` | not run in this snapshot |" in got["time"]
    assert got["error"].startswith("netcheck: not run in this snapshot (rule `netcheck_error`)")
    assert "| 10Mbit | link | p2p |" in got["fit"]
    _csv(out / "netcheck_fit.csv", [{"rate": "10Mbit", "latency": "link", "op": "p2p",
                                     "status": "not run: needs root"}])
    assert run_snapshot(repo) == 0
    got = blocks_of((repo / "docs/network.md").read_text())
    assert got["status"].startswith("Part of this snapshot, but nothing measured: `netcheck_bench`'s rows "
                                    "read \"not run: needs root\"")
    assert "| 10Mbit | link | p2p | not run: needs root |" in got["fit"]
    (out / "netcheck_skipped.csv").unlink()
    assert run_snapshot(repo) == 2
    assert "incomplete (missing netcheck_skipped.csv)" in capsys.readouterr().err



def test_the_network_page_takes_its_figures_from_the_snapshot():
    """docs/network.md quotes the netcheck run through the snapshot's blocks (filled from
    paper/ as test_docs checks), none typed by hand."""
    page = (ROOT / "docs/network.md").read_text(encoding="utf-8")
    assert set(blocks_of(page)) >= {"status", "time", "fit", "error"}
    assert snapshot.fill_blocks(page, RESULTS) == page
