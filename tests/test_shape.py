"""The package shape and the import layers of docs/design.md, enforced.

Every paper package under ``src/distlab/`` (found, not listed: a fifth one is held to the
same rules) has the five modules with their roles, its ``spec.py`` imports no torch, and
the imports of ``src/distlab`` (read with ``ast``, imports inside functions included) form
no circle and never reach up a layer:

    shared modules  <  paper packages  <  study packages  <  the CLI dispatcher

Shared modules import no paper or study package; a paper package imports shared modules
and itself, never another paper's package or a study; a study package may import paper
packages; only the dispatcher (``distlab/cli.py``, ``distlab/__main__.py``, and the registry of
papers ``distlab/papers.py``) imports a study.

An import by a module name in a string counts as an import: a string constant of the code
(docstrings aside) that is a distlab module's name (``importlib.import_module("distlab.cli")``,
``runpy.run_module``, ``[sys.executable, "-m", "distlab.local.bench"]``, ``"distlab.cli:main"``)
is an edge of the graph like an ``import`` statement.  The top-level entry ``-m distlab`` names
the package itself, the command line every process may start.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

SRC = Path(ROOT) / "src"
PKG = SRC / "distlab"

# Subpackages of distlab that are shared (used by every paper) or studies across papers;
# every other subpackage is a paper package and must have the paper shape.
SHARED_PACKAGES = {"bench", "config", "data", "models", "pipeline", "plotting", "results", "runtime",
                   "scoring", "techniques", "train"}
STUDY_PACKAGES = {"atlas", "gpu"}   # gpu: the GPU tier, jobs of every paper (docs/gpu.md)
# the registry of papers (distlab.papers) hands every paper package up: it sits with the dispatcher
DISPATCHER = {"distlab.cli", "distlab.__main__", "distlab.papers"}
PAPER_MODULES = ("paper", "spec", "train", "workflow", "figures", "cli")  # paper: its PAPER (distlab.papers)


def _subpackages() -> list[str]:
    return sorted(d.name for d in PKG.iterdir()
                  if d.is_dir() and d.name.isidentifier() and any(d.glob("*.py")))


def paper_packages() -> list[str]:
    return [n for n in _subpackages() if n not in SHARED_PACKAGES | STUDY_PACKAGES]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in PKG.rglob("*.py")}


def import_graph() -> dict[str, set[str]]:
    """distlab module -> the distlab modules it imports (anywhere in the file)."""
    mods = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        is_pkg = path.name == "__init__.py"
        package = name if is_pkg else name.rpartition(".")[0]
        out: set[str] = set()
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
                out |= {t for t in targets if t in mods}
                out |= {t.rpartition(".")[0] for t in targets if t not in mods and t.rpartition(".")[0] in mods}
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[:len(base) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    if sub in mods:
                        out.add(sub)  # from package import submodule
                    elif target in mods:
                        out.add(target)
        out |= string_imports(tree, mods)
        out.discard(name)
        graph[name] = out
    return graph


MODULE_STRING = re.compile(r"distlab(?:\.[A-Za-z_]\w*)+(?::[A-Za-z_]\w*)?")


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the docstring nodes (and other bare string statements) of ``tree``."""
    return {id(n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)}


def string_imports(tree: ast.AST, mods) -> set[str]:
    """The distlab modules named by a whole string constant of ``tree`` (docstrings aside): the
    longest module prefix of ``distlab.a.b[.attr][:func]``."""
    docs = _docstrings(tree)
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            if MODULE_STRING.fullmatch(node.value):
                parts = node.value.split(":")[0].split(".")
                for k in range(len(parts), 1, -1):
                    if ".".join(parts[:k]) in mods:
                        out.add(".".join(parts[:k]))
                        break
    return out


def layer(module: str) -> tuple[int, str]:
    """(rank, package): 0 shared, 1 a paper package, 2 a study, 3 the dispatcher."""
    if module in DISPATCHER:
        return 3, ""
    parts = module.split(".")
    if len(parts) < 2 or parts[1] in SHARED_PACKAGES or not (PKG / parts[1]).is_dir():
        return 0, ""
    if parts[1] in STUDY_PACKAGES:
        return 2, parts[1]
    return 1, parts[1]


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    sys.setrecursionlimit(max(10000, sys.getrecursionlimit()))

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    bad = []
    for src, targets in sorted(graph.items()):
        rank, pkg = layer(src)
        for dst in sorted(targets):
            drank, dpkg = layer(dst)
            if rank == 3:
                continue  # the dispatcher may import every package
            if drank > rank:
                bad.append(f"{src} -> {dst}: a lower layer imports a higher one")
            elif drank == rank == 1 and dpkg != pkg:
                bad.append(f"{src} -> {dst}: a paper package imports another paper's")
    return bad


# ------------------------------------------------------------------ the checker itself
def test_the_graph_sees_imports_inside_functions_and_relative_ones():
    g = import_graph()
    assert "distlab.pgc.workflow" in g["distlab.pgc.spec"]     # inside a function, relative
    assert "distlab.config.specs" in g["distlab.config.checks"]  # module level, relative
    assert "distlab.scoring.claims" in g["distlab.scoring.scorecard"]
    assert "distlab.local.rc" in g["distlab.local.processes"]  # from .rc import (...)
    assert "distlab.runtime.launch" in g["distlab.local.processes"]  # from ..runtime.launch import


def test_the_graph_reads_module_names_in_strings_but_not_in_docstrings():
    mods = {"distlab.cli": None, "distlab.local.bench": None, "distlab.runtime.netns": None}
    code = ('"""Runs distlab.cli."""\n'
            'import importlib, runpy, sys\n'
            'def f():\n'
            '    """See distlab.runtime.netns."""\n'
            '    importlib.import_module("distlab.cli").main([])\n'
            '    runpy.run_module("distlab.local.bench")\n'
            '    return [sys.executable, "-m", "distlab", "train"], "see distlab.cli for more"\n')
    assert string_imports(ast.parse(code), mods) == {"distlab.cli", "distlab.local.bench"}
    assert string_imports(ast.parse('X = "distlab.cli:main"'), mods) == {"distlab.cli"}
    assert string_imports(ast.parse('X = "distlab.cli.preload"'), mods) == {"distlab.cli"}
    g = import_graph()
    assert "distlab.pgc.train" in g["distlab.pgc.paper"]  # only named in its Paper, loaded by importlib
    assert g["distlab.papers"] == {"distlab.pipeline.paper"}  # the papers are found, named nowhere
    assert "distlab.cli" not in g["distlab.runtime.netns"]  # the dispatcher is handed down (runtime.entry)
    # a runtime module that named the dispatcher in a string would reach up a layer
    assert layer_violations({"distlab.runtime.netns": {"distlab.cli"}}) == [
        "distlab.runtime.netns -> distlab.cli: a lower layer imports a higher one"]


def test_the_checks_catch_a_circle_and_an_import_upwards():
    g = {"distlab.a": {"distlab.b"}, "distlab.b": {"distlab.c"}, "distlab.c": {"distlab.a"},
         "distlab.d": set()}
    assert circles(g) == [["distlab.a", "distlab.b", "distlab.c"]]
    assert circles({"distlab.a": {"distlab.b"}, "distlab.b": set()}) == []
    up = {"distlab.config.checks": {"distlab.pgc.workflow"}, "distlab.pgc.train": {"distlab.demo.optim"},
          "distlab.pgc.spec": {"distlab.config.specs"}, "distlab.cli": {"distlab.pgc.cli"}}
    assert layer_violations(up) == [
        "distlab.config.checks -> distlab.pgc.workflow: a lower layer imports a higher one",
        "distlab.pgc.train -> distlab.demo.optim: a paper package imports another paper's"]


# ------------------------------------------------------------------ the rules
def test_there_are_paper_packages_and_each_has_the_shape():
    papers = paper_packages()
    assert {"pgc", "placement", "local", "demo"} <= set(papers)
    missing = [f"distlab/{p}/{m}.py" for p in papers for m in PAPER_MODULES if not (PKG / p / f"{m}.py").is_file()]
    assert not missing, f"paper packages without their module: {missing}"


def test_no_circle_in_the_imports():
    assert circles(import_graph()) == []


def test_no_import_reaches_up_a_layer_or_across_papers():
    assert layer_violations(import_graph()) == []


def test_no_shared_module_names_a_paper_package_even_in_a_string():
    """A shared module finds paper packages (distlab.config.checks.paper_checks), it does not name
    one: no ``"distlab.<paper>"`` in the text of a shared module."""
    papers = paper_packages()
    bad = []
    for name, path in _modules().items():
        if layer(name)[0] == 0:
            text = path.read_text(encoding="utf-8")
            bad += [f"{name}: names distlab.{p}" for p in papers if f'"distlab.{p}.' in text or f"'distlab.{p}." in text]
    assert not bad


@pytest.mark.parametrize("paper", paper_packages())
def test_a_paper_spec_imports_no_torch(paper):
    code = (f"import sys; import distlab.{paper}.spec as s; "
            f"assert 'torch' not in sys.modules, 'torch imported'; "
            f"assert callable(getattr(s, 'check', None)) and isinstance(s.CONFIG_SECTION, str)")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                       env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr


def test_the_config_checker_finds_every_paper_check():
    from distlab.config.checks import paper_checks

    from distlab.papers import papers

    found = paper_checks()
    # every registered paper or study that names a config check (the atlas among them), by both ways
    # of finding them, and every paper package's
    assert set(found) == {p.section for p in papers() if p.config_check} == set(paper_checks(papers()))
    for paper in paper_packages():
        mod = __import__(f"distlab.{paper}.spec", fromlist=["check"])
        assert found[mod.CONFIG_SECTION] is mod.check


# ------------------------------------------------------------------ one shared techniques package
# A class deriving from one of these is a technique (a method, a step of the atlas's drivers, an
# optimizer): it lives in distlab/techniques/ and nowhere else.
TECHNIQUE_BASES = {"Method", "Technique", "Wrapped", "Optimizer"}


def class_definitions() -> list[tuple[str, str, set[str]]]:
    """(module, class name, the last names of its bases) of every class of ``src/distlab``."""
    out = []
    for name, path in sorted(_modules().items()):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.ClassDef):
                out.append((name, node.name, {ast.unparse(b).rpartition(".")[2] for b in node.bases}))
    return out


def cross_paper_imports(graph: dict[str, set[str]]) -> list[str]:
    """Edges from a paper package, or from the atlas, to another paper package (an ``import`` or a
    module name in a string: :func:`import_graph` holds both)."""
    bad = []
    for src, targets in sorted(graph.items()):
        rank, pkg = layer(src)
        if rank == 1 or pkg == "atlas":
            bad += [f"{src} -> {dst}" for dst in sorted(targets) if layer(dst)[0] == 1 and layer(dst)[1] != pkg]
    return bad


def test_the_cross_paper_check_sees_imports_and_strings():
    g = {"distlab.atlas.train": {"distlab.pgc.coding"}, "distlab.pgc.train": {"distlab.pgc.spec"},
         "distlab.demo.train": {"distlab.techniques.method"}, "distlab.local.bench": {"distlab.demo.spec"}}
    assert cross_paper_imports(g) == ["distlab.atlas.train -> distlab.pgc.coding",
                                      "distlab.local.bench -> distlab.demo.spec"]
    mods = {"distlab.pgc.coding": None}
    assert string_imports(ast.parse('m = importlib.import_module("distlab.pgc.coding")'), mods) == {"distlab.pgc.coding"}


def test_no_paper_package_and_not_the_atlas_imports_another_paper_package():
    """The papers and the atlas share techniques through distlab.techniques, never through another
    paper's package; the atlas does not even name a paper's module in its text."""
    assert cross_paper_imports(import_graph()) == []
    named = [f"{p.relative_to(SRC)}: distlab.{paper}" for p in sorted((PKG / "atlas").rglob("*.py"))
             for paper in paper_packages() if re.search(rf"distlab\.{paper}\b", p.read_text(encoding="utf-8"))]
    assert not named, f"the atlas names a paper's module: {named}"


def test_no_technique_class_is_defined_twice_or_outside_the_techniques_package():
    defs = class_definitions()
    where: dict[str, list[str]] = {}
    for module, cls, _ in defs:
        where.setdefault(cls, []).append(module)
    shared = {cls for module, cls, _ in defs if module.startswith("distlab.techniques")}
    assert {"SimComm", "DistComm", "DeMo", "DeMoMethod", "AdamWDDP", "PowerSGD", "DiLoCo", "Scheme", "CodedWorker",
            "DiLoCoDeMo", "ISDeMo", "Coded", "Wrapped", "Technique", "Method"} <= shared
    twice = {cls: where[cls] for cls in sorted(shared) if len(where[cls]) > 1}
    assert not twice, f"technique classes defined more than once: {twice}"
    outside = [f"{module}.{cls}({', '.join(sorted(bases))})" for module, cls, bases in defs
               if not module.startswith("distlab.techniques") and bases & TECHNIQUE_BASES]
    assert not outside, f"techniques defined outside distlab/techniques/: {outside}"


# ------------------------------------------------------------------ one entry point, short files
MAX_LINES = 650
RULE_FILES = sorted((Path(ROOT) / "workflow" / "rules").glob("*.smk")) + [Path(ROOT) / "Snakefile"]


def test_no_source_file_is_over_650_lines():
    long = {str(p.relative_to(SRC)): n for p in sorted(PKG.rglob("*.py"))
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"over {MAX_LINES} lines (split by what the parts do): {long}"


def test_the_rules_run_the_cli_only_as_python_m_distlab_verb():
    """One entry point: a rule's shell text runs ``python -m distlab <verb>`` (under torchrun
    too: ``-m distlab <verb>``), never a submodule as a script (``python -m distlab.pgc``)."""
    bad, verbs = [], 0
    for path in RULE_FILES:
        for k, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if line.lstrip().startswith("#"):
                continue  # a comment, not a command
            for m in re.finditer(r"-m\s+(distlab\S*)", line):
                verbs += 1
                if m.group(1) != "distlab" or not re.match(r"-m\s+distlab\s+[a-z]", line[m.start():]):
                    bad.append(f"{path.name}:{k}: {line.strip()}")
            for m in re.finditer(r"python\s+-m\s+(\S+)", line):
                if m.group(1) not in ("distlab", "torch.distributed.run"):
                    bad.append(f"{path.name}:{k}: python -m {m.group(1)}")
    assert verbs > 20, "no rule calls the CLI: the pattern is wrong"
    assert not bad, "entry points other than `python -m distlab <verb>`:\n" + "\n".join(bad)


# Not yet a verb: local learning's throughput child (distlab.local.bench, started by its
# `local-bench throughput`) measures its own memory (PSS, RSS); started through the dispatcher
# it would also hold every package's parser, so moving it changes what it measures.
SCRIPT_EXCEPTIONS = {"distlab.local.bench"}


def test_no_module_of_distlab_runs_as_a_script():
    """No ``if __name__ == "__main__"`` below ``distlab/__main__.py`` and ``distlab/cli.py``:
    every command is a verb of ``python -m distlab``."""
    bad = [str(p.relative_to(SRC)) for p in sorted(PKG.rglob("*.py"))
           if p.name != "__main__.py" and _module_name(p) not in DISPATCHER | SCRIPT_EXCEPTIONS
           and re.search(r"^if __name__ == .__main__.:", p.read_text(encoding="utf-8"), re.M)]
    assert not bad, f"modules run as scripts: {bad}"


# ------------------------------------------------------------------ rules read as rules
# A rule file holds rules.  A function a rule calls with a job's wildcards (an input function,
# params, threads, resources) is a named function of its paper's ``workflow.py`` (the
# baseline's: distlab/baseline/workflow.py, the atlas's: distlab/atlas/workflow.py) or of
# distlab/pipeline/workflow.py (the shared rules, the registries, the path helpers), where a
# reader finds it by name and a test can call it; so is the rule files' other Python.
SMK_FILES = sorted((Path(ROOT) / "workflow" / "rules").glob("*.smk"))
# Python lines the rule files may hold in all: imports, the workflow objects, registrations and
# the heads of the loops and conditions that define rules (reached: 35, from 228 by this count)
MAX_RULE_PYTHON_LINES = 35
SNAKEMAKE_BLOCK = re.compile(r"(rule\b|use rule\b|checkpoint\b|ruleorder:|wildcard_constraints:|localrules:|"
                             r"include:|configfile:|onstart:|onsuccess:|onerror:|module\b|report:|envvars:|"
                             r"container:)")


def rule_file_python_lines(text: str) -> list[int]:
    """The numbers of a rule file's Python lines: every line that is neither blank, a comment,
    nor inside a Snakemake block (a rule, ``use rule``, ``ruleorder:``, ``wildcard_constraints:``
    and the like, with everything indented under it).  The head of a ``for`` or ``if`` around
    rules counts; the rules under it do not."""
    out, block = [], None
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        indent = len(line) - len(line.lstrip())
        if block is not None and indent > block:
            continue
        block = None
        if SNAKEMAKE_BLOCK.match(stripped):
            block = indent
            continue
        out.append(number)
    return out


def test_the_python_line_count_reads_rules_and_python_apart():
    text = ("import os\n\nX = 1  # a constant\n# a comment\nrule a:\n    input:\n        lambda w: 1,\n"
            "for k in (1, 2):\n    rule:\n        name:\n            f'b{k}'\n    Y = k\n"
            "use rule a as c with:\n    threads: 2\nwildcard_constraints:\n    seed=r'\\d+',\n")
    assert rule_file_python_lines(text) == [1, 3, 8, 12]


def test_no_lambda_in_the_rule_files():
    import io
    import tokenize

    found = [f"{path.name}:{tok.start[0]}" for path in SMK_FILES
             for tok in tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline)
             if tok.type == tokenize.NAME and tok.string == "lambda"]
    assert len(SMK_FILES) >= 10
    assert not found, f"lambdas in rule files (name the function in a workflow module): {found}"


def test_the_rule_files_hold_little_python():
    lines = {path.name: len(rule_file_python_lines(path.read_text(encoding="utf-8"))) for path in SMK_FILES}
    assert sum(lines.values()) <= MAX_RULE_PYTHON_LINES, (
        f"{sum(lines.values())} Python lines in the rule files, at most {MAX_RULE_PYTHON_LINES} "
        f"(move helpers into the workflow modules): {lines}")


def test_every_log_and_benchmark_path_comes_from_the_shared_helper():
    """``log: log_path("<job>")`` and ``benchmark: benchmark_path("<job>")``
    (distlab.pipeline.workflow): one place says where logs and benchmarks go."""
    bad, seen = [], 0
    for path in SMK_FILES:
        lines = path.read_text(encoding="utf-8").splitlines()
        for k, line in enumerate(lines[:-1]):
            key = line.strip()
            if key in ("log:", "benchmark:"):
                seen += 1
                helper = "log_path(" if key == "log:" else "benchmark_path("
                if not lines[k + 1].strip().startswith(helper):
                    bad.append(f"{path.name}:{k + 2}: {lines[k + 1].strip()}")
    assert seen > 100
    assert not bad, f"log or benchmark paths written out: {bad}"
