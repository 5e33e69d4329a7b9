"""The atlas's query pack (distlab.atlas.pack), the query's benchmark (distlab.atlas.querybench),
the snapshot's atlas part (scripts/snapshot.py: check_atlas) and the published ratios' data file
(data/atlas/published_efficiency.yaml, distlab.atlas.efficiency.published).

The pack must give the query exactly the recordings the runs folder gives (field for field, and
the same printed answer), refuse an edited, cut or partial pack in one line, and the snapshot must
copy it only when its record holds (its checksum, its runs present)."""

from __future__ import annotations

import gzip
import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys

import pytest
import yaml

from conftest import ROOT, bin_path, build_test_atlas

from distlab.atlas.efficiency import check_published, published
from distlab.atlas.pack import STEP_KEYS, PackError, read_pack, write_pack
from distlab.atlas.profile import apply as apply_profile
from distlab.atlas.query import QueryError, check_complete
from distlab.config.specs import SpecError

ENV = {**os.environ, "PATH": bin_path(), "HF_DATASETS_OFFLINE": "1", "PYTHONPATH": str(ROOT / "src")}
TECHS = ["ddp", "diloco", "gc-fr", "is-sgd"]   # sync, sync with a cycle, master, arrival-dependent


@pytest.fixture(scope="module")
def atlas(tmp_path_factory, pydoc_dir):
    """(runs dir, config path, section, pack path): the default sizes and N, 4 techniques (is-sgd
    also under its straggler model), 2 seeds, 20 steps, the target the highest loss every run reaches."""
    root = tmp_path_factory.mktemp("atlaspack")
    a = yaml.safe_load((ROOT / "config/config.yaml").read_text())["atlas"]
    a = {**a, "techniques": TECHS, "steps": 20, "eval_every": 5, "seeds": [0, 1],
         "train_under": {**a["train_under"], "seeds": [0]}}
    a.pop("headline", None)
    a.pop("trend", None)
    cfg = build_test_atlas(root, a, pydoc_dir, 0.03)
    pack = root / "query" / "pack.json.gz"
    info = write_pack([root / "techniques" / t / "done.json" for t in TECHS], pack)
    assert info["runs"] == sum(len(json.loads((root / "techniques" / t / "done.json").read_text())["runs"])
                               for t in TECHS)
    return root / "techniques", cfg, a, pack


def _query(runs, cfg, *args):
    return subprocess.run([sys.executable, "-m", "distlab", "atlas", "query", "--runs", str(runs),
                           "--config", str(cfg), *args], env=ENV, capture_output=True, text=True, timeout=300)


def _one_line_exit_2(r, key: str) -> None:
    assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-2000:]
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and key in lines[0] and "Traceback" not in r.stderr, r.stderr


def test_the_pack_gives_the_runs_folders_recordings_field_for_field(atlas):
    runs, _, a, pack = atlas
    direct = apply_profile(check_complete(a, runs), a)
    packed = apply_profile(check_complete(a, pack), a)
    assert len(direct) == len(packed) > 0
    keys = ("step", "val_loss", "compute_s", "master_s") + STEP_KEYS
    for d, p in zip(direct, packed):
        for f in ("technique", "kind", "n", "seed", "flops_per_pass", "straggler", "network", "n_params", "spec",
                  "path"):
            assert getattr(d, f) == getattr(p, f), f
        assert len(d.steps) == len(p.steps)
        for sd, sp in zip(d.steps, p.steps):
            assert {k: sd.get(k) for k in keys} == {k: sp.get(k) for k in keys}
    # the steps are run-length encoded: far fewer entries than steps for a sync technique
    with gzip.open(pack) as f:
        doc = json.loads(f.read())
    ddp = [e for e in doc["runs"] if e["technique"] == "ddp"]
    assert all(len(e["steps"]) < 20 for e in ddp)


@pytest.mark.parametrize("args", [
    ("--params", "21984", "--workers", "4", "--bandwidth", "1Gbit/s", "--latency", "1ms"),
    ("--params", "1e5", "--workers", "8", "--bandwidth", "10Mbit/s", "--latency", "1ms", "--stragglers", "exp:0.02"),
], ids=["replay", "projected"])
def test_the_query_answers_the_same_from_the_pack(atlas, args):
    runs, cfg, _, pack = atlas
    a, b = _query(runs, cfg, *args), _query(pack, cfg, *args)
    assert a.returncode == b.returncode == 0, a.stderr[-1000:] + b.stderr[-1000:]
    assert a.stdout == b.stdout and "technique" in a.stdout


def test_an_edited_cut_foreign_or_partial_pack_is_refused(atlas, tmp_path):
    runs, cfg, a, pack = atlas
    args = ("--params", "21984", "--workers", "4", "--bandwidth", "1Gbit/s", "--latency", "1ms")
    with gzip.open(pack) as f:
        doc = json.loads(f.read())
    edited = json.loads(json.dumps(doc))
    edited["runs"][0]["curve"][-1][1] -= 0.5
    bad = tmp_path / "edited.json.gz"
    bad.write_bytes(gzip.compress(json.dumps(edited).encode()))
    _one_line_exit_2(_query(bad, cfg, *args), "checksum")
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(pack.read_bytes()[: pack.stat().st_size // 2])
    _one_line_exit_2(_query(cut, cfg, *args), "unreadable")
    other = tmp_path / "other.json.gz"
    other.write_bytes(gzip.compress(b'{"runs": []}'))
    _one_line_exit_2(_query(other, cfg, *args), "not an atlas query pack")
    _one_line_exit_2(_query(tmp_path / "none.json.gz", cfg, *args), "missing")
    part = tmp_path / "partial.json.gz"
    write_pack([runs / t / "done.json" for t in TECHS[:-1]], part)
    _one_line_exit_2(_query(part, cfg, *args), "partial")
    # a pack of stored compute cannot answer for a measured atlas
    with pytest.raises(QueryError, match="measured"):
        check_complete({**a, "compute": "measured"}, pack)
    with pytest.raises(PackError, match="stored or measured"):
        write_pack([runs / "ddp" / "done.json"], tmp_path / "x.json.gz", "wrong")


def test_a_pack_that_unfolds_without_bound_is_refused(atlas, tmp_path, monkeypatch):
    """A crafted pack carries a valid checksum too: its size unfolded and its run-length counts
    are bounded, each refused in one line before anything is built from it."""
    from distlab.atlas import pack as packmod

    _, _, _, pack = atlas
    monkeypatch.setattr(packmod, "MAX_BYTES", 1000)  # the real bound, 64 MiB, is too big to build here
    with pytest.raises(PackError, match="unfolds to more than"):
        read_pack(pack)
    monkeypatch.undo()
    with gzip.open(pack) as f:
        doc = json.loads(f.read())
    doc["runs"][0]["steps"][0][0] = 10**12  # one run-length entry of 10^12 steps
    body = {k: doc[k] for k in ("techniques", "compute", "runs")}
    doc["sha256"] = packmod._digest(body)
    bad = tmp_path / "long.json.gz"
    bad.write_bytes(gzip.compress(json.dumps(doc).encode()))
    with pytest.raises(PackError, match=r"run 0 .*a step count outside 1 \.\. 100,000"):
        read_pack(bad)


def test_the_query_benchmark_times_each_query_on_both_and_checks_they_agree(atlas, tmp_path, monkeypatch):
    from distlab.atlas import querybench
    import pandas as pd

    runs, cfg, _, pack = atlas
    monkeypatch.setenv("PYTHONPATH", str(ROOT / "src"))
    monkeypatch.setattr(querybench, "QUERIES", (
        ("measured cell", ("--params", "21984", "--workers", "4", "--bandwidth", "10Gbit/s", "--latency", "1ms"), 0),
        ("far, refused", ("--params", "1e9", "--workers", "8", "--bandwidth", "10Gbit/s", "--latency", "10us"), 2),
    ))
    df = querybench.bench(str(cfg), str(runs), str(pack), tmp_path / "bench.csv", tmp_path / "bench.md")
    back = pd.read_csv(tmp_path / "bench.csv")
    assert list(back["exit"]) == [0, 2] and back["as_expected"].all() and back["pack_same_answer"].all()
    assert (back["seconds_runs"] > 0).all() and (back["seconds_pack"] > 0).all()  # measured, not asserted on
    assert back["answer"].iloc[1] == "refused (--params/--workers)" and back["answer"].iloc[0] in TECHS + [
        f"{t} (tie)" for t in TECHS]
    md = (tmp_path / "bench.md").read_text()
    assert "**measured**" in md and "each exit as expected" in md and len(df) == 2


def _snapshot_module():
    spec = importlib.util.spec_from_file_location("snapshot_script", ROOT / "scripts" / "snapshot.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_snapshot_carries_the_pack_only_as_its_record_holds(atlas, tmp_path):
    snap = _snapshot_module()
    runs, _, _, pack = atlas
    rec = {"start_utc": "2000-01-01T00:00:00Z", "end_utc": "2100-01-01T00:00:00Z"}
    q = pack.parent
    assert snap.check_atlas(rec, tmp_path / "nothing")[0] == {"run": False, "status": snap.NO_ATLAS}
    (q / "bench.csv").write_text("query,seconds_runs\nx,1.0\n")
    with pytest.raises(snap.Refused, match="incomplete"):
        snap.check_atlas(rec, q)
    (q / "bench.md").write_text("| query |\n")
    meta, files = snap.check_atlas(rec, q)
    assert meta["run"] and meta["runs"] > 0 and meta["when"] == "during make reproduce"
    dest = tmp_path / "docs"
    snap.copy_atlas(dest, files)
    assert sorted(p.name for p in (dest / "atlas").iterdir()) == ["query_bench.csv", "query_bench.md",
                                                                   "query_pack.json.gz"]
    assert read_pack(dest / "atlas" / "query_pack.json.gz")[0]["techniques"] == TECHS
    # a run the pack was made from is gone: refused, naming the pack
    gone = json.loads((runs / "gc-fr" / "done.json").read_text())["runs"][0]
    shutil.move(gone, tmp_path / "moved")
    try:
        with pytest.raises(snap.Refused, match="pack.json.gz: 1 of the"):
            snap.check_atlas(rec, q)
    finally:
        shutil.move(tmp_path / "moved", gone)
    # the pack rewritten by hand: not what its rule wrote
    saved = pack.read_bytes()
    try:
        pack.write_bytes(gzip.compress(gzip.decompress(saved)))
        with pytest.raises(snap.Refused, match="not the table its rule wrote"):
            snap.check_atlas(rec, q)
    finally:
        pack.write_bytes(saved)


# ------------------------------------------------------------------ the published ratios

def test_the_shipped_published_ratios_load_with_their_citations():
    p = published()
    assert set(p) == {"demo"}
    d = p["demo"]
    assert d["lo"] <= d["ratio"] <= d["hi"] and "arXiv 2411.19870" in d["source"] and "2.63" in d["source"]


GOOD = {"ratio": 1.0, "lo": 0.9, "hi": 1.1, "source": "a paper", "reports": "what it reports", "reading": "how"}


@pytest.mark.parametrize("entry,key", [
    ({"demo": {**GOOD, "year": 2024}}, "demo.year: unknown key"),
    ({"sparseloco": GOOD}, "'sparseloco': unknown technique"),
    ({"demo": {**GOOD, "ratio": -1.0}}, "demo.ratio: must be a positive finite number"),
    ({"demo": {**GOOD, "hi": math.nan}}, "demo.hi: must be a positive finite number"),
    ({"demo": {**GOOD, "lo": 0.0}}, "demo.lo: must be a positive finite number"),
    ({"demo": {**GOOD, "ratio": True}}, "demo.ratio: must be a positive finite number"),
    ({"demo": {**GOOD, "lo": 1.05}}, "need lo <= ratio <= hi"),
    ({"demo": {k: v for k, v in GOOD.items() if k != "source"}}, "demo.source: missing"),
    ({"demo": {**GOOD, "source": " "}}, "demo.source: must be a non-empty text"),
    (["demo"], "must hold a mapping"),
])
def test_a_bad_published_ratio_is_refused_naming_its_key(entry, key):
    with pytest.raises(SpecError, match=key.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        check_published(entry, "published.yaml")


def test_the_published_file_is_read_with_the_bounded_strict_loader(tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text("demo:\n  ratio: 1.0\n  ratio: 0.5\n  lo: 1.0\n  hi: 1.0\n  source: a\n  reports: b\n  reading: c\n")
    with pytest.raises(SpecError, match="duplicate key 'ratio'"):
        published(f)
    f.write_text("demo:\n  ratio: .nan\n  lo: 1.0\n  hi: 1.0\n  source: a\n  reports: b\n  reading: c\n")
    with pytest.raises(SpecError, match="demo.ratio"):
        published(f)
    with pytest.raises(SpecError, match="cannot read"):
        published(tmp_path / "none.yaml")
