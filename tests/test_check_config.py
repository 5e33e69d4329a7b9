"""`distlab check-config`: a config file Snakemake refuses without naming it (empty, comments
only, a list) is named, one line each; a valid file passes; a bad key is named as the workflow's
own check names it."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _check(*files):
    return subprocess.run([sys.executable, "-m", "distlab", "check-config", *map(str, files)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_files_snakemake_refuses_without_a_name_are_named(tmp_path):
    cases = {"empty.yaml": "", "comments.yaml": "# nothing but a comment\n",
             "list.yaml": "- seeds\n- 0\n", "scalar.yaml": "seeds\n"}
    for name, text in cases.items():
        (tmp_path / name).write_text(text)
    r = _check(*(tmp_path / n for n in cases), tmp_path / "missing.yaml")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == len(cases) + 1, r.stderr
    for name in (*cases, "missing.yaml"):
        assert sum(str(tmp_path / name) in x for x in lines) == 1, (name, r.stderr)
    assert all(x.startswith("distlab: ") for x in lines)
    assert "comments only" in r.stderr and "a YAML list" in r.stderr and "no such file" in r.stderr


def test_a_valid_file_passes_and_a_bad_key_is_named(tmp_path):
    r = _check("tests/configs/tiny.yaml")
    assert r.returncode == 0, r.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("demo:\n  steps: 0\nseeds: []\n")
    r = _check(bad)
    assert r.returncode == 2
    assert "demo.steps" in r.stderr and "seeds" in r.stderr
    assert "Traceback" not in r.stderr


# ---- bounded parsing: each cap one line naming the file and the limit -------------
def _laughs(levels: int = 9) -> str:
    """A "billion laughs" file: 520 bytes whose aliases expand to 9**9 values."""
    lines = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels):
        prev, name = chr(96 + i), chr(97 + i)
        lines.append(f"{name}: &{name} [{', '.join(['*' + prev] * 9)}]")
    return "\n".join(lines) + "\n"


OVERSIZED = {
    "laughs.yaml": (lambda p: p.write_text(_laughs()), "limit of 200,000 values (aliases expanded)"),
    "deep.yaml": (lambda p: p.write_text("seeds: " + "[" * 5000 + "]" * 5000 + "\n"),
                  "nested deeper than the limit of 64 levels"),
    "big.yaml": (lambda p: p.write_bytes(b"#" * 63 + b"\n" * 1 + (b"#" * 63 + b"\n") * (50 * 2**20 // 64 - 1)),
                 "52,428,800 bytes, over the limit of 1,048,576 bytes"),
    "seeds.yaml": (lambda p: p.write_text("seeds: [" + ",".join(["0"] * 7_000_000) + "]\n"),
                   "over the limit of 1,048,576 bytes"),
}


def test_oversized_configs_are_refused_in_one_line_naming_the_file_and_the_limit(tmp_path):
    """The billion-laughs file, a list 5,000 deep, 50 MB of comments and a 7-million-element
    seed list: one line each, naming the file and its limit, without walking or parsing the
    whole (the subprocess's timeout is only a guard against a hang, not the test's measure)."""
    for name, (make, limit) in OVERSIZED.items():
        make(tmp_path / name)
    r = subprocess.run([sys.executable, "-m", "distlab", "check-config", *(str(tmp_path / n) for n in OVERSIZED)],
                       cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == len(OVERSIZED), r.stderr
    for line, (name, (_, limit)) in zip(lines, OVERSIZED.items()):
        assert line.startswith(f"distlab: {tmp_path / name}: ") and limit in line, line


def test_the_limits_are_checked_in_one_pass_over_the_parser_events(monkeypatch):
    """Linear, not exponential: the billion-laughs text is refused after reading fewer parser
    events than it has characters (counted, not timed)."""
    import yaml

    from distlab.config import yamlio

    text = _laughs()
    seen = []
    real = yaml.parse

    def counting(stream, Loader):
        for ev in real(stream, Loader=Loader):
            seen.append(ev)
            yield ev
    monkeypatch.setattr(yaml, "parse", counting)
    with pytest.raises(yamlio.YamlLimitError, match="laughs.yaml: more than the limit"):
        yamlio.loads_strict(text, "laughs.yaml")
    assert len(seen) < len(text)


def test_config_checks_stop_at_the_caps_on_data_already_loaded(tmp_path):
    """What Snakemake loaded itself (aliases shared, a deep list, --config overrides): the
    workflow's check refuses it in one line instead of walking it (no RecursionError)."""
    from distlab.config.checks import config_errors, duplicate_key_errors

    shared: list = ["x"] * 9
    for _ in range(9):
        shared = [shared] * 9
    deep: list = []
    for _ in range(5000):
        deep = [deep]
    for config in ({"seeds": [0], "x": shared}, {"seeds": deep}):
        errs = config_errors(config, ROOT / "workflow" / "schemas")
        assert len(errs) == 1 and "the configuration: " in errs[0] and "limit" in errs[0], errs
    laughs = tmp_path / "laughs.yaml"
    laughs.write_text(_laughs())
    errs = duplicate_key_errors(laughs)
    assert errs == [f"{laughs}: more than the limit of 200,000 values (aliases expanded), at line 6"]


def test_a_config_that_links_to_a_secret_is_refused_without_quoting_it(tmp_path):
    secret = tmp_path / "shadow"
    secret.write_text("root:$6$SECRETHASH:19000:0:99999:7:::\ndaemon:*:19000:0:99999:7:::\n")
    link = tmp_path / "config.yaml"
    link.symlink_to(secret)
    r = _check(link)
    assert r.returncode == 2
    assert "SECRETHASH" not in r.stderr and "daemon" not in r.stderr and "root:" not in r.stderr
    assert str(link) in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
