"""The rule files may be reshaped (shared rules, spec builders moved into the papers'
``workflow.py``) but a user must see the same workflow: on the tiny config a dry run plans
the same jobs, with the same wildcards, inputs, outputs, logs, resources and shell commands
(the shell command carries the run spec, the rerun trigger of a job), as recorded in
``tests/expected/``.

A deliberate change of a rule (a new job, a changed spec) rewrites the record with
``python tests/test_rules_unchanged.py`` and commits it with the change, so the diff of the
record shows what changed for a user (``--default`` also writes the default config's
record, kept out of the repository for its size, to compare by hand)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import ROOT, bin_path, tracked_copy  # noqa: E402

EXPECTED = ROOT / "tests" / "expected"
# (record name, extra snakemake arguments)
CASES = {"dryrun_tiny": ["--configfile", "tests/configs/tiny.yaml"]}
KEPT = ("input:", "output:", "log:", "benchmark:", "wildcards:", "resources:")


def test_no_shell_text_is_an_f_string():
    """Snakemake formats a rule's shell text when the job runs, in the rule file's globals: an
    f-string naming a loop variable (rules defined in a loop) prints the right command in a dry
    run and runs the loop's last value (placement_table_main ran ``--kind loss_bytes``, the last
    value of a loop in another rule file).  A rule passes such a value through ``params``."""
    import re

    offenders = []
    for path in sorted((ROOT / "workflow" / "rules").glob("*.smk")):
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            if re.match(r"\s*shell:\s*$", line):
                j = i + 1
                while j < len(lines) and re.match(r"\s*[fr]?[\"']", lines[j]):
                    if re.match(r"\s*f[\"']", lines[j]):
                        offenders.append(f"{path.name}:{j + 1}")
                    j += 1
    assert not offenders, f"shell texts written as f-strings: {offenders}"


def test_the_rules_helpers_are_named_functions_of_the_workflow_modules():
    """What the rule files call with a job's wildcards is a named function (no lambda, see
    test_shape.py), callable outside Snakemake: the shared helpers, and a registration of
    nothing (a paper without its config section) adds no scorecard part."""
    from types import SimpleNamespace

    import yaml

    from distlab.pipeline.workflow import (SharedWorkflow, benchmark_path, input_dirs, inputs_json, log_path,
                                           mem_of_inputs)

    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    from distlab.papers import papers

    shared = SharedWorkflow(cfg, str(ROOT), papers=papers())
    assert (log_path("data/{dataset}"), benchmark_path("data/{dataset}")) == (
        "logs/data/{dataset}.log", "benchmarks/data/{dataset}.tsv")
    w = SimpleNamespace(dataset="digits", paper="P1")
    assert shared.dataset_dir(w) == "results/data/digits"
    assert '"name": "digits"' in shared.dataset_spec(w)
    mem = mem_of_inputs(400)
    assert mem.__name__ == "mem_mb" and mem(w, SimpleNamespace(size_mb=10)) == 440
    assert input_dirs(w, ["a/b/manifest.json", "c/manifest.json"]) == ["a/b", "c"]
    assert inputs_json(w, {"b": "y", "a": "x"}) == '{"a": "x", "b": "y"}'
    shared.register("P2", None, None)
    shared.register("P1", {"t": "results/t.csv"}, ["paper/f.png"])
    # the atlas's section is scored without tables (its rows read "not run")
    assert shared.scorecard_papers() == ["P1", "atlas"] and shared.all_outputs() == ["paper/f.png"]
    assert shared.scorecard_table_args(w) == ["--table=t=results/t.csv"]
    assert shared.extra_seed_requests, "the default config's stats.extra_seeds asks for seeds"


def planned_jobs(text: str) -> list[str]:
    """The jobs of a ``snakemake -n -p`` output, one block of text each, sorted: the rule's
    name, the fields in KEPT (``tmpdir`` dropped from resources: it names this machine) and
    the shell command.  Job ids, reasons and timestamps are left out."""
    jobs, cur = [], None
    for line in text.splitlines():
        head = line.split(" ", 1)
        if line.endswith(":") and head[0] in ("rule", "localrule", "checkpoint") and len(head) == 2:
            cur = [line]
            jobs.append(cur)
        elif cur is not None and line.strip().startswith(KEPT):
            field = line.strip()
            if field.startswith("resources:"):  # in name order: the order they are declared in is no change
                parts = field[len("resources:"):].strip().split(", ")
                field = "resources: " + ", ".join(sorted(p for p in parts if p and not p.startswith("tmpdir=")))
            cur.append("    " + field)
        elif cur is not None and line.startswith("Shell command: "):
            cur.append("    " + line)
        elif not line.strip():
            cur = None
    return sorted("\n".join(j) for j in jobs)


def dry_run(work: Path, args: list[str]) -> list[str]:
    env = {**os.environ, "PATH": bin_path(), "HF_DATASETS_OFFLINE": "1"}
    r = subprocess.run(["snakemake", "-n", "-p", *args], cwd=work, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return planned_jobs(r.stdout)


@pytest.mark.parametrize("name", sorted(CASES))
def test_dry_run_plans_the_recorded_jobs(clean_tree, name):
    expected = (EXPECTED / f"{name}.txt").read_text().split("\n\n")
    got = dry_run(clean_tree, CASES[name])
    assert len(got) > 100
    missing = sorted(set(expected) - set(got))
    extra = sorted(set(got) - set(expected))
    assert not missing and not extra, (
        f"{len(missing)} recorded jobs not planned, {len(extra)} planned jobs not recorded; "
        f"first missing:\n{missing[:1]}\nfirst extra:\n{extra[:1]}")
    assert got == expected


if __name__ == "__main__":  # rewrite the records from the working tree
    import tempfile

    cases = dict(CASES, **({"dryrun_default": []} if "--default" in sys.argv else {}))
    with tempfile.TemporaryDirectory() as tmp:
        work = tracked_copy(Path(tmp))
        for name, args in cases.items():
            jobs = dry_run(work, args)
            (EXPECTED / f"{name}.txt").write_text("\n\n".join(jobs))
            print(f"{name}: {len(jobs)} jobs")
