"""Code a newcomer can hold: no function of ``src/`` is longer than 80 lines.

A function is counted from its ``def`` (decorators aside) to its last line, docstring and
comments included, as ``ast`` reads it.  The few functions still longer are listed below
with their length today: the test fails if one of them grows, and says when one has been
split so that its entry can go.
"""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

from conftest import ROOT

SRC = Path(ROOT) / "src"
LIMIT = 80

# "path relative to src/:function" -> (its length today, why it is still long)
LONG = {
    "distlab/placement/sim.py:_run_ready": (95, "the simulator's event loop, its innermost loop: written flat, "
                                                "as a call per event costs time on every placement evaluated"),
}


def function_lengths(root: Path = SRC) -> dict[str, int]:
    """``path:function`` -> lines, for every function (nested ones included) under ``root``."""
    out: dict[str, int] = {}
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                key = f"{path.relative_to(root).as_posix()}:{node.name}"
                out[key] = max(out.get(key, 0), node.end_lineno - node.lineno + 1)
    return out


def test_the_count_reads_a_function_from_def_to_its_last_line(tmp_path):
    (tmp_path / "m.py").write_text("def f():\n    x = 1\n\n    return x\n\n\nclass C:\n    def g(self):\n        pass\n")
    assert function_lengths(tmp_path) == {"m.py:f": 4, "m.py:g": 2}


def test_no_function_is_over_80_lines_unless_listed_with_its_reason():
    lengths = function_lengths()
    over = {k: n for k, n in lengths.items() if n > LIMIT and k not in LONG}
    assert not over, f"functions over {LIMIT} lines (split them into named helpers): {over}"


def test_a_listed_long_function_does_not_grow():
    lengths = function_lengths()
    for k, (n, why) in sorted(LONG.items()):  # shown with -s: what is still long, and why
        print(f"{k}: {lengths.get(k)} lines (listed at {n}): {why}")
    grown = {k: (lengths[k], n) for k, (n, _) in LONG.items() if k in lengths and lengths[k] > n}
    assert not grown, f"listed long functions grew (now, listed): {grown}"


def test_every_listed_function_is_still_there_and_still_long():
    lengths = function_lengths()
    stale = [k for k in LONG if lengths.get(k, 0) <= LIMIT]
    assert not stale, f"split or gone: remove them from LONG: {stale}"
    assert all(reason.strip() for _, reason in LONG.values())


# a list of names written in a script and in src/ at once, with why the script cannot import it
RESTATED = {
    "scripts/gpu/run_tier.py": {("auto", "cpu", "cuda"): "its parser is built before it checks that torch "
                                                         "is installed, and the device names' home imports torch"},
}


def _string_lists(path: Path) -> set[tuple[str, ...]]:
    """The literal tuples, lists and sets of three strings or more in ``path``, sorted."""
    out = set()
    for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(n, (ast.Tuple, ast.List, ast.Set)) and len(n.elts) >= 3 and \
                all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in n.elts):
            out.add(tuple(sorted(e.value for e in n.elts)))
    return out


def test_no_script_restates_a_list_of_names_that_src_holds():
    """A script imports the verdicts, methods or columns it shares with ``src/`` (it has
    ``src/`` on its path), so the two cannot drift apart."""
    in_src = set().union(*(_string_lists(p) for p in sorted(SRC.rglob("*.py"))))
    restated = {}
    for path in sorted((Path(ROOT) / "scripts").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        allowed = {tuple(sorted(k)) for k in RESTATED.get(rel, {})}
        same = sorted((_string_lists(path) & in_src) - allowed)
        if same:
            restated[rel] = same
    assert not restated, f"lists restated from src/ (import them): {restated}"


HELPER_CALL = re.compile(r"^\w+ = (?:[\w.]+\.)?(\w+(?:Rules|Workflow))\((.*)\)\s*$", re.M)


def test_every_papers_rule_helper_is_built_the_same_way():
    """The rule files build each paper's helper as ``Helper(config, RULES)``, the one contract
    of ``distlab.pipeline.workflow.RulesContext`` (the shared helper aside: it makes RULES)."""
    import importlib
    import inspect

    calls = {}
    for path in sorted((Path(ROOT) / "workflow" / "rules").glob("*.smk")):
        for cls, args in HELPER_CALL.findall(path.read_text(encoding="utf-8")):
            if cls != "SharedWorkflow":
                calls[f"{path.name}:{cls}"] = args
    assert len(calls) >= 6, calls  # one a paper, the baseline and the atlas
    assert {k: a for k, a in calls.items() if a != "config, RULES"} == {}
    for key in calls:
        cls = key.split(":")[1]
        mod = next(m for m in ("atlas", "baseline", "demo", "local", "pgc", "placement")
                   if hasattr(importlib.import_module(f"distlab.{m}.workflow"), cls))
        params = list(inspect.signature(getattr(importlib.import_module(f"distlab.{mod}.workflow"), cls)).parameters)
        assert params[:2] == ["config", "context"], (cls, params)


# "issue <n>", "Issues <n>", "#<n>": a ticket's number tells a reader nothing; say the behaviour
ISSUE_NUMBER = re.compile(r"\bissues?\s*#?\d+\b|(?<![\w&#/])#\d{1,4}(?![\w])", re.I)


def test_the_issue_number_pattern_finds_tickets_and_not_colours_or_formats():
    n = 31  # written apart, so this file cites no number itself
    tickets = [f"see issue {n}", f"Issue {n}'s measure", f"(#{n}, item 4)", f"issues {n}"]
    others = ["a colour #000080", "claim #{index}", "step #", "the issue is the lock"]
    assert [t for t in tickets + others if ISSUE_NUMBER.search(t)] == tickets


def test_no_file_under_src_tests_scripts_or_workflow_cites_an_issue_number():
    """Code, tests, scripts and rules say what a behaviour is, not which ticket asked for it."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "src", "tests", "scripts", "workflow",
                             "Snakefile"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    cites = []
    for name in listed:
        try:
            text = (Path(ROOT) / name).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):  # binary files (figures, checkpoints): no prose
            continue
        cites += [f"{name}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}" for m in ISSUE_NUMBER.finditer(text)]
    assert not cites, f"issue numbers cited (say the behaviour instead): {cites}"
