"""The paper contract and its registry (distlab.pipeline.paper, distlab.papers).

* every registered paper keeps the contract: its modules keep their protocols, its rule file,
  schema and page exist, its config section is in config/config.yaml, its claims prefix has
  rows in config/claims.yaml, its summarize and figure steps are commands of ``distlab``;
* no hand-kept list of papers is left in src/, scripts/, workflow/ or the Snakefile: no list,
  tuple, set or dict literal (and no ``a|b`` pattern) holding the names of two papers, outside
  the registry itself;
* the papers are found one way (each ``distlab/<package>/paper.py``,
  :func:`distlab.pipeline.paper.registered`): the registry, the shared modules' lookup, the
  config checks and the command line see a new package through it, and nothing lists them;
* a seventh, toy paper (tests/toy_paper/toy: its trainer, spec, command plugin, rule file,
  schema and config section) joins a copy of the repository as its package alone, and
  ``snakemake`` runs it through to its summary and table; nothing else changes.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, bin_path, tracked_copy

from distlab.papers import paper, papers
from distlab.pipeline.paper import (CliPlugin, ConfigCheck, DistributedTrainer, Paper, PaperError, SpecModule,
                                    Trainer)

ROOT = Path(ROOT)
TOY = Path(__file__).parent / "toy_paper" / "toy"


# ------------------------------------------------------------------ (a) the contract
def test_the_registry_holds_every_paper_once_with_distinct_names():
    ps = papers()
    assert [p.name for p in ps] == ["baseline", "pgc", "placement", "local", "demo", "atlas"]
    assert all(isinstance(p, Paper) for p in ps) and [p.order for p in ps] == sorted(p.order for p in ps)
    # the four names P3 had, one object
    assert paper("local") is paper("local_learning") is paper("P3")
    assert paper("foundation").name == "baseline"
    with pytest.raises(PaperError, match="no paper is named 'P9'"):
        paper("P9")


def test_every_paper_package_is_registered():
    from test_shape import STUDY_PACKAGES, paper_packages

    registered = {p.package for p in papers()}
    assert {f"distlab.{n}" for n in [*paper_packages(), *STUDY_PACKAGES - {"gpu"}]} <= registered


@pytest.mark.parametrize("p", papers(), ids=lambda p: p.name)
def test_a_paper_keeps_the_contract(p):
    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    claims = yaml.safe_load((ROOT / "config" / "claims.yaml").read_text())["claims"]
    assert (ROOT / p.rule_file).is_file() and (ROOT / p.doc).is_file()
    assert p.schema is None or (ROOT / p.schema).is_file()
    assert all((ROOT / c).is_dir() for c in p.code) and p.package.startswith("distlab.")
    assert p.section in cfg, f"config/config.yaml has no {p.section}: section"
    mine = [c for c in claims if c["id"].startswith(p.claims_prefix + ".")]
    assert mine and {c["paper"] for c in mine} == {p.scorecard}
    if p.trainer:  # imports torch for most: the contract is the module's shape
        assert isinstance(p.trainer_module(), Trainer)
    if p.spec_module:
        assert isinstance(p.spec_module_loaded(), SpecModule)
    if p.config_check:
        mod = p.config_checker()
        assert isinstance(mod, ConfigCheck) and mod.CONFIG_SECTION == p.section
    if p.cli:
        assert isinstance(p.cli_plugin(), CliPlugin)
    from distlab.cli import build_parser

    for words in (p.summarize, p.figures):  # each step is a command of `distlab`
        assert words
        r = subprocess.run([sys.executable, "-m", "distlab", *words, "--help"], capture_output=True, text=True,
                           cwd=ROOT, timeout=120)
        assert r.returncode == 0, (words, r.stderr[-400:])
    assert build_parser()  # every plugin registers


def test_every_paper_verb_has_the_nested_form_and_the_flat_one_still_answers():
    from distlab.cli import build_parser

    parser = build_parser()
    top = next(a for a in parser._actions if a.dest == "command").choices
    for p in papers():
        flat = [c for c in top if c.startswith(p.name + "-")]
        if flat:
            nested = next(a for a in top[p.name]._actions if a.dest == f"{p.name}_verb").choices
            assert {f"{p.name}-{v}" for v in nested} == set(flat)
            assert all(nested[c[len(p.name) + 1:]] is top[c] for c in flat)
    args = parser.parse_args(["demo", "table", "--kind", "results", "--summary", "s.csv", "--md", "t.md"])
    assert args.func is parser.parse_args(["demo-table", "--kind", "results", "--summary", "s.csv",
                                           "--md", "t.md"]).func


def test_the_protocols_refuse_a_module_without_the_contract(tmp_path, monkeypatch):
    (tmp_path / "halftrainer.py").write_text("SPEC_SCHEMA = {}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    bad = Paper(name="half", title="t", scorecard="H", section="half", claims_prefix="half", rule_file="x.smk",
                doc="d", order=9, trainer="halftrainer")
    with pytest.raises(PaperError, match="does not keep the Trainer contract.*run_simulated"):
        bad.trainer_module()
    import distlab.pgc.train as pgc_train
    import distlab.local.train as local_train

    assert isinstance(pgc_train, DistributedTrainer)
    assert isinstance(local_train, Trainer)


def test_the_config_check_refuses_a_claim_of_no_registered_paper(tmp_path):
    from distlab.config.checks import claims_paper_errors

    path = tmp_path / "claims.yaml"
    text = (ROOT / "config" / "claims.yaml").read_text()
    path.write_text(text.replace("paper: P2", "paper: P9", 1))
    errors = claims_paper_errors(path, papers())
    assert len(errors) == 1 and "'P9' is not a registered paper's scorecard section" in errors[0]
    assert claims_paper_errors(ROOT / "config" / "claims.yaml", papers()) == []


# ------------------------------------------------------------------ (b) no other list of papers
def _owner() -> dict[str, str]:
    return {n: p.name for p in papers() for n in p.names}


def _papers_in(strings, owner) -> set[str]:
    return {owner[s] for s in strings if s in owner}


def python_lists(text: str, owner) -> list[tuple[int, list[str]]]:
    """Literals (list, tuple, set, a dict's keys) and ``a|b`` patterns naming two papers or more."""
    out = []
    for node in ast.walk(ast.parse(text)):
        items = (node.elts if isinstance(node, (ast.List, ast.Tuple, ast.Set))
                 else node.keys if isinstance(node, ast.Dict) else None)
        if items is not None:
            ps = _papers_in([i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)], owner)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "|" in node.value:
            ps = _papers_in(node.value.split("|"), owner)
        else:
            continue
        if len(ps) >= 2:
            out.append((node.lineno, sorted(ps)))
    return out


def snakemake_lists(text: str, owner) -> list[tuple[int, list[str]]]:
    """The same in a Snakemake file (not Python that ``ast`` reads): a bracketed literal or a
    quoted ``a|b`` pattern on one line naming two papers or more."""
    out = []
    for i, line in enumerate(text.splitlines(), 1):
        for m in re.finditer(r'[\[\(\{][^\]\)\}]*[\]\)\}]|"[^"]*\|[^"]*"', line):
            ps = _papers_in(re.findall(r'["\'|]([A-Za-z0-9_]+)(?=["\'|])', m.group()), owner)
            if len(ps) >= 2:
                out.append((i, sorted(ps)))
    return out


def paper_lists(root: Path) -> list[str]:
    owner, out = _owner(), []
    files = [root / "Snakefile", *sorted((root / "workflow").rglob("*.smk"))]
    files += [f for d in ("src", "scripts", "workflow") for f in sorted((root / d).rglob("*.py"))]
    for f in files:
        rel = f.relative_to(root).as_posix()
        if rel == "src/distlab/papers.py":
            continue  # the registry
        text = f.read_text(encoding="utf-8")
        found = python_lists(text, owner) if f.suffix == ".py" else snakemake_lists(text, owner)
        out += [f"{rel}:{line}: {', '.join(ps)}" for line, ps in found]
    return out


def test_the_checker_finds_a_list_of_papers():
    owner = _owner()
    assert python_lists('X = ("P1", "P3")\nY = {"pgc": 1, "demo": 2}\nZ = "foundation|P1"\n', owner) == [
        (1, ["local", "pgc"]), (2, ["demo", "pgc"]), (3, ["baseline", "pgc"])]
    assert python_lists('X = ("demo", "adamw")\nY = {"experiment": "atlas", "demo": {}}\n', owner) == []
    assert snakemake_lists('    paper="foundation|P1|P2",\n', owner) == [(1, ["baseline", "pgc", "placement"])]


def test_no_hand_kept_list_of_papers_outside_the_registry():
    """None is left, and none may come back: what a shared module reads of a paper by a spec's
    experiment (the device a spec without ``device`` runs on, whether its batch is each worker's)
    and what the GPU tier overrides are fields of its Paper; the simulator-error benchmark reads
    the experiment from each technique's spec and the record's shape from its columns."""
    assert paper_lists(ROOT) == []


def test_the_config_schema_names_no_paper_its_sections_come_from_the_registry():
    """config.schema.yaml holds the shared sections; each paper's section is its Paper.schema,
    joined when the schema is assembled (no second list of the papers' schemas)."""
    from distlab.config.checks import config_schema, paper_schemas

    schema_dir = ROOT / "workflow" / "schemas"
    own = yaml.safe_load((schema_dir / "config.schema.yaml").read_text())["properties"]
    with_files = [p for p in papers() if p.schema]
    assert with_files and not [p.section for p in with_files if p.section in own]
    assert all(p.section in own for p in papers() if not p.schema)  # the baseline's section is shared
    whole = config_schema(schema_dir, papers())["properties"]
    assert {s: whole[s]["$ref"] for s in paper_schemas(papers(), schema_dir)} == {
        p.section: (ROOT / p.schema).resolve().as_uri() for p in with_files}
    assert [p.section for p in papers() if p.config_required] == ["pgc"]  # required, as before
    assert config_schema(schema_dir, papers())["required"][-1] == "pgc" and "pgc" not in own
    from distlab.config.checks import validate_defaults

    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    # one validation from the assembled root, as when config.schema.yaml named the paper files: the
    # defaults filled are the same (pgc's stragglers, a $ref back into the root, stay as written;
    # the baseline's get theirs): the recorded job specs (test_rules_unchanged) depend on it
    validate_defaults(cfg, schema_dir, papers())
    assert cfg["pgc"]["cloud"]["straggler"] == yaml.safe_load((ROOT / "config" / "config.yaml").read_text())[
        "pgc"]["cloud"]["straggler"] and cfg["baseline"]["straggler"]["shape"] == 2.5
    del cfg["pgc"]
    with pytest.raises(Exception, match="'pgc' is a required property"):
        validate_defaults(cfg, schema_dir, papers())
    # a caller without the registry finds the same papers by their packages
    assert paper_schemas(None, schema_dir) == paper_schemas(papers(), schema_dir)


def test_the_shared_modules_find_the_registrys_papers_by_their_fields():
    from distlab.pipeline import jobs
    from distlab.pipeline.paper import discovered, find

    # found by its package's paper.py, the registry's own objects, under every name
    assert {id(p) for p in discovered().values()} == {id(p) for p in papers()}
    assert all(find(n) is p for p in papers() for n in p.names) and find("P9") is None
    assert {p.name for p in papers() if p.batch_per_worker} == {"demo", "local"}
    assert {p.name: p.device_default for p in papers() if p.device_default != "cpu"} == {"demo": "auto"}
    assert {p.section for p in papers() if p.gpu_tier_device} == {"atlas", "demo"}
    # the fields' defaults: a paper that names none keeps the step's batch and the CPU
    toy = Paper(name="t", title="t", scorecard="T", section="t", claims_prefix="t", rule_file="x", doc="d", order=9)
    assert (toy.device_default, toy.batch_per_worker, toy.gpu_tier_device) == ("cpu", False, False)
    real = {"backend": "gloo", "batch_size": 8, "n_workers": 4}
    assert jobs.per_process_batch({**real, "experiment": "demo"}) == 8
    assert jobs.per_process_batch({**real, "experiment": "baseline"}) == 2
    assert jobs.per_process_batch({**real, "experiment": "no-such-paper"}) == 2


# ------------------------------------------------------------------ (c) one way to the papers
def _found_with(monkeypatch, root: Path) -> None:
    """The papers as if the packages under ``root`` were distlab's (the discovery's caches emptied
    before and after, so that no other test sees them)."""
    import distlab
    from distlab.pipeline import paper as contract

    for f in (contract.registered, contract.discovered):
        f.cache_clear()
    monkeypatch.setattr(distlab, "__path__", [*distlab.__path__, str(root)])


@pytest.fixture
def found(monkeypatch):
    from distlab.pipeline import paper as contract

    yield lambda root: _found_with(monkeypatch, root)
    monkeypatch.undo()
    for f in (contract.registered, contract.discovered):
        f.cache_clear()
    for name in [m for m in sys.modules if m.startswith(("distlab.toy", "distlab.broken"))]:
        del sys.modules[name]


def test_a_new_paper_package_is_found_by_every_consumer_through_one_path(tmp_path, found):
    from distlab.cli import build_parser
    from distlab.config.checks import paper_checks, paper_schemas
    from distlab.papers import trainers
    from distlab.pipeline.paper import discovered, find, registered

    shutil.copytree(TOY, tmp_path / "toy", ignore=shutil.ignore_patterns("__pycache__"))
    found(tmp_path)
    toy = find("toy")
    assert toy is not None and toy.order == 6
    assert [p.name for p in papers()] == ["baseline", "pgc", "placement", "local", "demo", "atlas", "toy"]
    assert papers() is registered() and paper("TOY") is toy and trainers()["toy"] is toy
    assert {discovered()[n] for n in toy.names} == {toy}
    assert paper_checks()["toy"] is toy.config_checker().check  # the config checks, without the registry
    assert paper_schemas(None, ROOT / "workflow" / "schemas")["toy"] == ROOT / "src/distlab/toy/toy.schema.yaml"
    top = next(a for a in build_parser()._actions if a.dest == "command").choices
    assert "toy" in top and "toy" in next(a for a in top["train"]._actions if a.dest == "experiment").choices


def test_a_paper_module_without_its_paper_or_an_order_taken_twice_is_refused(tmp_path, found):
    from distlab.pipeline.paper import registered

    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "__init__.py").write_text("")
    (tmp_path / "broken" / "paper.py").write_text("PAPER = None\n")
    found(tmp_path)
    with pytest.raises(PaperError, match="distlab.broken.paper: PAPER is not a distlab.pipeline.paper.Paper"):
        registered()
    text = (TOY / "paper.py").read_text().replace("order=6", "order=4")
    shutil.copytree(TOY, tmp_path / "toy", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "toy" / "paper.py").write_text(text)
    shutil.rmtree(tmp_path / "broken")
    registered.cache_clear()
    with pytest.raises(PaperError, match="papers 'demo' and 'toy' take the same order 4"):
        registered()


# ------------------------------------------------------------------ (d) a seventh paper
def _git(tree: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", *args], cwd=tree, env=env, capture_output=True, text=True, check=True).stdout


@pytest.mark.slow
def test_a_toy_paper_runs_end_to_end_as_its_package_alone(tmp_path):
    tree = tracked_copy(tmp_path / "repo")
    _git(tree, "init", "-q")
    _git(tree, "add", "-A")
    _git(tree, "commit", "-qm", "the repository as it is")
    # the toy's package, and nothing else: it is found, not listed
    shutil.copytree(TOY, tree / "src" / "distlab" / "toy", ignore=shutil.ignore_patterns("__pycache__"))

    env = {**os.environ, "PATH": bin_path(), "PYTHONPATH": str(tree / "src")}
    targets = ["results/toy/summary.csv", "paper/tables/toy.md"]
    r = subprocess.run(["snakemake", "--cores", "2", *targets, "--configfile", "src/distlab/toy/config.yaml"],
                       cwd=tree, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    summary = (tree / "results/toy/summary.csv").read_text().splitlines()
    assert summary[0] == "seed,final_loss" and [row.split(",")[0] for row in summary[1:]] == ["0", "1"]
    assert all(0 < float(row.split(",")[1]) < 0.5 for row in summary[1:])  # 20 steps at lr 0.1 from loss 0.5
    assert "final loss (simulated)" in (tree / "paper/tables/toy.md").read_text()
    assert (tree / "results/toy/seed1/metrics.csv").is_file()

    # what changed: the toy's package (new files) and what its run wrote into paper/ (the reader's
    # copy, versioned), nothing else tracked
    status = _git(tree, "status", "--porcelain", "--untracked-files=all").splitlines()
    changed = sorted(line[3:] for line in status)
    assert "paper/tables/toy.md" in changed
    assert [c for c in changed if not c.startswith(("src/distlab/toy/", "paper/"))] == [], changed

    # the toy is a paper like the others: its train command, its nested verbs, the config check
    assert "toy" in subprocess.run([sys.executable, "-m", "distlab", "train", "--help"], cwd=tree, env=env,
                                   capture_output=True, text=True).stdout
    bad = subprocess.run([sys.executable, "-m", "distlab", "check-config", "src/distlab/toy/config.yaml"],
                         cwd=tree, env=env, capture_output=True, text=True)
    assert bad.returncode == 0, bad.stderr
    (tree / "toy_bad.yaml").write_text("toy:\n  steps: 20\n  lr: 2.0\n  typo: 1\n")
    bad = subprocess.run([sys.executable, "-m", "distlab", "check-config", "toy_bad.yaml"],
                         cwd=tree, env=env, capture_output=True, text=True)
    assert bad.returncode == 2 and "toy: Additional properties are not allowed ('typo'" in bad.stderr, bad.stderr
