"""One bounded loader for every file a user hands in (distlab.config.yamlio): a file over a
bound (size, depth, values, an integer's length, an alias inside itself), not a regular file,
or not YAML/JSON is one line naming it, through each command that reads such a file; and no
second YAML or JSON load path reads a user's file in src/."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

from distlab.config.yamlio import MAX_BYTES, YamlLimitError, load_user_file, loads_json_bounded

ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src")}

# one file of each kind a bound refuses, as YAML and as JSON, with the words its line says
KINDS = {
    "size": ("a: 1\n" + "#" * (MAX_BYTES + 10) + "\n", None, "over the limit of 1,048,576 bytes"),
    "depth": ("a: " + "[" * 5000 + "]" * 5000 + "\n", "[" * 5000 + "]" * 5000, "nested deeper than the limit"),
    "values": ("a: &a [" + ",".join(["1"] * 10) + "]\n" + "".join(
        f"{c}: &{c} [" + ",".join([f"*{p}"] * 10) + "]\n" for p, c in zip("abcdefgh", "bcdefghi")),
        None, "more than the limit of 200,000 values"),
    "integer": ("a: " + "9" * 5000 + "\n", '{"a": ' + "9" * 5000 + "}", "over the limit of 100 digits"),
    "recursion": ("a: &a [*a]\nb: &b {c: *b}\n", None, "inside the &a it names"),
    "syntax": ("a: [1\n", '{"a": ', "not valid"),
    "non-finite": (None, '{"a": NaN}', "holds NaN, not a finite number"),
}


def _cases():
    for kind, (y, j, words) in KINDS.items():
        if y is not None:
            yield pytest.param(kind, ".yaml", y, words, id=f"{kind}-yaml")
        if j is not None:
            yield pytest.param(kind, ".json", j, words, id=f"{kind}-json")


@pytest.mark.parametrize("kind,suffix,text,words", list(_cases()))
def test_each_bound_is_one_line_naming_the_file(tmp_path, kind, suffix, text, words):
    path = tmp_path / f"{kind}{suffix}"
    path.write_text(text)
    with pytest.raises(YamlLimitError) as e:
        load_user_file(path)
    msg = str(e.value)
    assert msg.startswith(str(path)) and words in msg and "\n" not in msg, msg
    assert len(msg) < 300


def test_what_is_not_a_regular_file_is_said_so(tmp_path):
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    for path, words in ((fifo, "a FIFO"), (tmp_path, "a directory"), (Path("/dev/zero"), "a device"),
                        (tmp_path / "nowhere.yaml", "no such file")):
        with pytest.raises(YamlLimitError, match=words):
            load_user_file(path)  # never opened for reading: a FIFO would block, /dev/zero never end


def test_json_text_from_the_command_line_has_the_same_bounds():
    for text, words in (("[" * 5000 + "]" * 5000, "nested deeper"), ("9" * 5000, "100 digits"),
                        ('{"lr": Infinity}', "Infinity")):
        with pytest.raises(YamlLimitError, match=words):
            loads_json_bounded(text, "--spec")
    assert loads_json_bounded('{"s": "[[[\\"{{"}') == {"s": '[[["{{'}  # brackets in strings do not nest


@pytest.mark.parametrize("argv", [
    ["atlas", "query", "--runs", "{d}", "--params", "1e5", "--workers", "4", "--bandwidth", "1Gbit/s",
     "--latency", "1ms", "--config", "{f}"],
    ["atlas", "query", "--runs", "{d}", "--params", "1e5", "--workers", "4", "--bandwidth", "1Gbit/s",
     "--latency", "1ms", "--efficiency", "{f}"],
    ["gpu-plan", "--configfile", "{f}"],
])
def test_every_command_reading_a_users_file_refuses_in_one_line(tmp_path, argv):
    bad = tmp_path / "rec.yaml"
    bad.write_text("a: &a [*a]\n")
    args = [w.format(f=bad, d=tmp_path) for w in argv]
    r = subprocess.run([sys.executable, "-m", "distlab", *args], env=ENV, cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    err = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(err) == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert str(bad) in err[0] and "inside the &a it names" in err[0], err


# ------------------------------------------------------------------ no second load path

LOAD = re.compile(r"\b(yaml\.safe_load|yaml\.load|json\.loads?)\(")

# Files of src/ that still parse YAML or JSON themselves, each with its count of calls and why
# none of them reads a file a user hands in: a new call in any file fails here until it is read
# through distlab.config.yamlio or listed with its reason.
REPO = "the repository's own files (config/config.yaml, workflow/schemas, claims)"
OURS = "files the workflow itself wrote (a run's manifest.json or record.json, done.json, tables' records)"
TEXT = "JSON text the code serialized itself a moment before (a spec, options, a child's reply)"
ALLOWED = {
    "runtime/forkserver.py": (2, "messages between the project's own processes on a private socket"),
    "config/bounds.py": (1, "a short value already loaded, re-read to word a type hint"),
    "config/checks.py": (4, REPO + "; a --config override word under 100 characters"),
    "scoring/paperrecord.py": (1, OURS + " (paper/record.json, which make reproduce wrote)"),
    "scoring/compare_snapshot.py": (1, OURS + " (paper/record.json as a commit holds it)"),
    "scoring/replicate.py": (1, OURS + " (the scorecard's decided_by column, which the scorecard wrote)"),
    "pgc/spec.py": (1, TEXT), "pgc/workflow.py": (1, TEXT), "pgc/regime.py": (1, OURS), "pgc/train.py": (1, OURS),
    "pipeline/jobs.py": (3, OURS + "; " + TEXT),
    "atlas/cli.py": (1, REPO), "atlas/query.py": (1, OURS), "atlas/outputs.py": (1, OURS),
    "atlas/record.py": (2, OURS), "atlas/pack.py": (3, OURS + " (the pack itself is read bounded)"),
    "atlas/profiler.py": (1, OURS), "atlas/train.py": (2, OURS),
    "placement/costs.py": (2, OURS + " (the placement profile rule's output)"),
    "placement/workflow.py": (3, REPO + "; " + TEXT), "placement/api.py": (1, REPO),
    "placement/graphfile.py": (1, OURS + " (graphs the extraction rule wrote)"),
    "placement/figures.py": (2, OURS), "placement/space.py": (1, OURS), "placement/realexec.py": (2, OURS),
    "results/tables.py": (2, OURS), "results/runs.py": (1, TEXT + " (a manifest's digest)"), "results/summarize.py": (1, OURS), "results/sweeps.py": (4, OURS),
    "data/store.py": (2, OURS + "; " + TEXT), "gpu/runner.py": (4, OURS + "; " + TEXT),
    "gpu/plan.py": (3, REPO + "; " + TEXT), "demo/bench.py": (1, OURS), "demo/workflow.py": (1, TEXT),
    "demo/train.py": (2, OURS), "local/bench.py": (2, TEXT), "local/nonident.py": (1, OURS),
    "local/figures.py": (1, OURS), "local/summary.py": (2, OURS), "local/sweep.py": (1, OURS),
    "bench/netcheck.py": (2, OURS + "; " + TEXT), "bench/techerror.py": (1, OURS),
}


def test_no_second_yaml_or_json_load_path_for_a_users_file():
    src = ROOT / "src" / "distlab"
    found = {}
    for path in sorted(src.rglob("*.py")):
        rel = path.relative_to(src).as_posix()
        if rel == "config/yamlio.py":
            continue
        n = len(LOAD.findall(path.read_text(encoding="utf-8")))
        if n:
            found[rel] = n
    unexplained = {k: v for k, v in found.items() if k not in ALLOWED or ALLOWED[k][0] != v}
    assert not unexplained, (f"YAML/JSON parsed outside distlab.config.yamlio: {unexplained}; read a user's "
                             "file with load_user_file / load_json_bounded, or list the call with its reason")
    assert set(ALLOWED) <= set(found), f"listed but gone: {set(ALLOWED) - set(found)} (drop them from ALLOWED)"
