"""Every size a user gives is bounded before it is allocated: the query's workers, a query
pack as a whole (its runs, their steps together, its byte counts and losses), timeouts.  Each
is one line naming the key, before the memory or the clock it would take."""

from __future__ import annotations

import copy
import gzip
import json
import math
import os
import subprocess
import sys

import pytest

from conftest import ROOT

from distlab.atlas import pack
from distlab.config.specs import MAX_TIMEOUT_S, SpecError, runtime_defaults

PACK = ROOT / "paper/atlas/query_pack.json.gz"
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src")}


@pytest.fixture(scope="module")
def shipped() -> dict:
    return json.loads(gzip.open(PACK).read())


def _forged(tmp_path, doc: dict, edit) -> str:
    """The shipped pack edited by ``edit(runs)``, its checksum recomputed (a forgery that passes it)."""
    body = {k: copy.deepcopy(doc[k]) for k in ("techniques", "compute", "runs")}
    body["runs"] = edit(body["runs"]) or body["runs"]
    out = tmp_path / "forged.json.gz"
    raw = json.dumps({"format": pack.FORMAT, "version": pack.VERSION, "sha256": pack._digest(body), **body})
    out.write_bytes(gzip.compress(raw.encode()))
    return str(out)


def _long(runs):
    for r in runs:
        r["steps"][0][0] = 10**5 - 1  # each run under the one-run bound; together 2e7 steps


def _copies(runs):
    one = {**runs[0], "steps": runs[0]["steps"][:1], "curve": runs[0]["curve"][:1]}
    return [one] * (pack.MAX_RUNS + 1)  # a small pack (about 3 MB unfolded) of too many runs


def _set_body(key, value):
    """``key`` set to ``value`` in the first run whose steps carry it (colls: one collective of
    ``value`` bytes)."""
    def edit(runs):
        run = next(r for r in runs if any(key in body for _, body in r["steps"]))
        for _, body in run["steps"]:
            if key in body:
                body[key] = [["all_reduce", value]] if key == "colls" else value
    return edit


def _loss(value):
    def edit(runs):
        runs[5]["curve"][1][1] = value
    return edit


@pytest.mark.parametrize("edit,words", [
    (_long, "in the pack"), (_copies, "at most 10,000 runs"),
    (_set_body("msg_bytes", 1e300), "msg_bytes = 1e+300"), (_set_body("msg_bytes", -5), "msg_bytes = -5"),
    (_set_body("colls", float("nan")), "colls entry"), (_set_body("passes", [10**9, 1]), "passes"),
    (_loss(float("nan")), "val_loss nan"), (_loss(-0.5), "val_loss -0.5"), (_loss(float("inf")), "val_loss inf"),
])
def test_a_forged_pack_with_a_valid_checksum_is_refused_by_name(tmp_path, shipped, edit, words):
    path = _forged(tmp_path, shipped, edit)
    with pytest.raises(pack.PackError) as e:
        pack.read_pack(path)
    msg = str(e.value)
    assert words in msg and "\n" not in msg and msg.startswith(path), msg


def test_the_shipped_pack_is_within_every_bound(shipped):
    _, by_job = pack.read_pack(PACK)
    assert sum(map(len, by_job.values())) == len(shipped["runs"])


def test_query_workers_are_bounded_before_anything_is_allocated(tmp_path):
    from distlab.atlas.projection import MAX_WORKERS, step_seconds

    with pytest.raises(SpecError, match="--workers: 1000000000 workers"):
        step_seconds(None, 1e6, 10**9, 0, None, 0.001, 1e9)  # refused at entry, before the pattern is read
    r = subprocess.run([sys.executable, "-m", "distlab", "atlas", "query", "--runs", str(PACK), "--params", "1e6",
                        "--workers", str(10**9), "--bandwidth", "1Gbit/s", "--latency", "1ms"],
                       env=ENV, cwd=ROOT, capture_output=True, text=True, timeout=300)
    err = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(err) == 1 and f"2 .. {MAX_WORKERS:,}" in err[0], r.stderr[-2000:]


@pytest.mark.parametrize("value", [1e300, float("inf"), float("nan"), MAX_TIMEOUT_S + 1])
def test_a_timeout_past_thirty_days_is_one_line_not_an_overflow(value):
    from distlab.runtime.launch import check_timeout, run_forked

    for key in ("timeout_s", "job_timeout_s"):
        with pytest.raises(SpecError, match=key):
            runtime_defaults({key: value})
    with pytest.raises(SpecError, match=r"runtime.job_timeout_s: .* \(0, 2,592,000\]"):
        check_timeout(value)
    with pytest.raises(SpecError, match="runtime.job_timeout_s"):
        run_forked(lambda: None, 2, 1, value)  # refused before any rank is forked
    assert check_timeout(MAX_TIMEOUT_S) == MAX_TIMEOUT_S and math.isfinite(check_timeout(60))


def test_a_batch_above_the_datas_training_rows_is_refused_at_config_check():
    import yaml

    from distlab.config import bounds
    from distlab.config.checks import ConfigError, check_config

    cfg = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    rows = bounds.train_rows(cfg, cfg["baseline"]["dataset"])
    assert rows is not None and bounds.data_size_errors(cfg) == []  # the shipped config fits its data
    cfg["baseline"]["batch_size"] = rows + 1
    cfg["pgc"]["simulation"]["batch_size"] = rows * 2
    with pytest.raises(ConfigError) as err:
        check_config(cfg, ROOT / "workflow/schemas", ROOT / "config/claims.yaml")
    text = str(err.value)
    assert f"baseline.batch_size = {rows + 1:,}: above the {rows:,} training rows" in text
    assert "pgc.simulation.batch_size" in text and "partition" in text


@pytest.mark.parametrize("flag,value,words", [("--steps", "1000000000", "--steps: 1,000,000,000; give 1 .. 1,000,000"),
                                              ("--repeats", "0", "--repeats: 0; give 1 .. 10,000")])
def test_atlas_profile_sizes_are_bounded_before_anything_runs(tmp_path, flag, value, words):
    r = subprocess.run([sys.executable, "-m", "distlab", "atlas", "profile", "--data", str(tmp_path),
                        "--out", str(tmp_path / "p.json"), flag, value],
                       env=ENV, cwd=ROOT, capture_output=True, text=True, timeout=300)
    err = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(err) == 1 and words in err[0], r.stderr[-2000:]
