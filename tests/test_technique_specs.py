"""A technique is declared once (distlab.techniques.spec, distlab.techniques.catalogue).

* a spec lacking a part is refused where it is declared, naming the part; a name twice, too;
* the schemas' enums, the rules' wildcard constraints, the option tables, the figures' labels
  and orders and the atlas catalogue are the registries', not written again;
* a toy DeMo variant in a test-only registry goes through the workflow's jobs and specs, a
  summary table and a figure; in a copy of the repository, a DeMo variant and an atlas
  technique are one catalogue line each: Snakemake plans their jobs, runs the variant to its
  summary rows, table and figures, the atlas maps the technique in each of its tables (a
  compute profile that never measured it refuses it in one line), and a name no spec declares
  is refused in one line;
* nothing unknown passes silently: an unknown method, a variant without its encoding, a
  method in a figure's data that no registry knows are each refused by name;
* each option's default lives in one place, and DeMo's ``topk <= chunk^2`` is one check.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from conftest import ROOT

from distlab.config.checks import load_schema
from distlab.techniques import catalogue
from distlab.techniques.catalogue import METHODS, TECHNIQUES
from distlab.techniques.spec import REQUIRED, IncompleteSpec, Registry, UnknownTechnique, technique

ROOT = Path(ROOT)
SCHEMAS = ROOT / "workflow" / "schemas"
TOY = dict(name="demo-toy", kind="sync", options=("demo",), builder="distlab.techniques.demo.method:DeMoMethod",
           label="DeMo (toy)", order=6, payload="own", sweep_key=("demo", "topk"),
           args={"encoding": "compact", "mean": "all"})


def _with(*specs):
    """A test-only registry: the methods and ``specs`` (the shipped one is left as it is)."""
    return Registry("method", [*METHODS.values(), *specs])


@pytest.mark.parametrize("part", REQUIRED)
def test_a_spec_missing_a_part_is_refused_naming_it(part):
    parts = {k: v for k, v in TOY.items() if k != part}
    with pytest.raises(IncompleteSpec, match=re.escape(repr(part))):
        technique(**parts)


def test_a_spec_with_a_wrong_part_or_a_name_twice_is_refused():
    with pytest.raises(IncompleteSpec, match="kind 'async'"):
        technique(**{**TOY, "kind": "async"})
    with pytest.raises(IncompleteSpec, match="payload"):
        technique(**{**TOY, "payload": "sign"})
    with pytest.raises(IncompleteSpec, match="'demo' is registered twice"):
        _with(technique(**{**TOY, "name": "demo"}))
    with pytest.raises(IncompleteSpec, match="plot order 1"):
        _with(technique(**{**TOY, "order": 1}))


def test_the_workflow_parses_without_torch():
    """The registries, the schemas and the workflow helpers import no torch (the Snakefile
    imports them before any job)."""
    code = ("import sys; import distlab.techniques.catalogue, distlab.demo.workflow, distlab.atlas.workflow, "
            "distlab.config.checks, distlab.demo.spec; print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def _enums(node, found):
    if isinstance(node, dict):
        if "enum" in node:
            found.append(list(node["enum"]))
        for v in node.values():
            _enums(v, found)
    elif isinstance(node, list):
        for v in node:
            _enums(v, found)
    return found


def test_the_schemas_enums_are_the_registries():
    """The schema files name no technique; loaded, each registry's names are the enum."""
    demo, atlas = load_schema(SCHEMAS / "demo.schema.yaml"), load_schema(SCHEMAS / "atlas.schema.yaml")
    assert demo["definitions"]["method"]["enum"] == list(METHODS)
    assert atlas["definitions"]["technique"]["enum"] == list(TECHNIQUES)
    for name in ("demo", "atlas"):
        text = (SCHEMAS / f"{name}.schema.yaml").read_text()
        assert not re.search(r"\b(demo-compact|powersgd|pgc-fr|is-demo)\b.*\b(diloco|adamw|ddp)\b", text), name
    assert all(set(e) != set(METHODS) for e in _enums(load_schema(SCHEMAS / "config.schema.yaml"), []))


def test_a_config_naming_an_unknown_method_is_refused_by_the_schema():
    from distlab.config.checks import schema_errors
    from distlab.papers import papers

    import yaml

    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    config["demo"]["methods"] = [*config["demo"]["methods"], "demo-sign"]
    errors = schema_errors(config, SCHEMAS, papers())
    assert any(e.startswith("demo.methods") and "'demo-sign' is not one of" in e for e in errors), errors


def test_the_wildcards_and_tables_are_the_registries():
    from distlab.atlas.workflow import SETTING_KEY, AtlasRules
    from distlab.demo import spec as demo_spec

    assert set(METHODS.pattern().split("|")) == set(METHODS)
    assert re.fullmatch(AtlasRules.job_pattern(), "techniques/is-demo")
    assert not re.fullmatch(AtlasRules.job_pattern(), "techniques/is-sign")
    assert re.fullmatch(AtlasRules.job_pattern(), "reference")
    assert SETTING_KEY == {t: s.sweep_key for t, s in TECHNIQUES.items() if s.sweep_key}
    assert demo_spec.SPEC_SCHEMA["properties"]["method"]["enum"] == list(METHODS)
    # the catalogue's tables, read from the specs
    assert catalogue.CODED["is-gc"] == "is-gc-cr" and catalogue.OURS == ("diloco-demo", "is-demo")
    assert catalogue.option_sections("diloco-demo") == ("demo", "diloco") and catalogue.kind("gc-fr") == "master"
    assert [t for t in TECHNIQUES if catalogue.in_groups(t)] == ["gc-fr", "pgc-fr"]
    for rule in ("demo.smk", "atlas.smk"):
        text = (ROOT / "workflow" / "rules" / rule).read_text()
        assert "demo-compact|" not in text and "techniques/[a-z" not in text, rule


def _toy_config():
    import yaml

    config = yaml.safe_load((ROOT / "tests" / "configs" / "tiny.yaml").read_text())
    base = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    demo = {**base["demo"], **(config.get("demo") or {})}
    demo["methods"] = ["adamw", "demo-toy"]
    demo["lr"] = {**demo["lr"], "demo-toy": 0.001}
    demo["lr_from_sweep"] = False
    return {**base, **config, "demo": demo}


def test_a_toy_variant_in_a_test_registry_goes_through_jobs_table_and_figure(tmp_path):
    """The variant is its spec only: the workflow plans its jobs with its option sections,
    its path matches the rules' wildcard, the summary table and the figure label and order it."""
    import json

    from distlab.demo.analysis import results_table
    from distlab.demo.figures import figure
    from distlab.demo.workflow import SIM, DemoWorkflow

    reg = _with(technique(**TOY))
    wf = DemoWorkflow(_toy_config(), methods=reg)
    runs = wf.runs(SIM)
    toy = [r for r in runs if "/demo-toy/" in r]
    assert toy and {n for n, m in wf.sim_settings() if m == "demo-toy"} == {int(n) for n in wf.d["n_workers"]}
    method = re.search(r"/n\d+/([^/]+)/seed", toy[0]).group(1)
    assert re.fullmatch(wf.method_pattern(), method)
    spec = json.loads(wf.spec("demo-toy", 2, 0, SIM))
    assert spec["method"] == "demo-toy" and "demo" in spec and "adamw" not in spec
    with pytest.raises(UnknownTechnique, match="demo-toy"):
        DemoWorkflow(_toy_config()).spec("demo-toy", 2, 0, SIM)

    summary = pd.DataFrame([{"n_workers": 2, "method": m, "seed": s, "lr": 0.001, "steps": 4,
                             "gap_shrink_late": 0.0, "final_val_loss": 2.0 + s, "bytes_per_step": 10.0,
                             "payload_bytes_per_step": 5.0, "bytes_reduction": 1.0, "time_dc": 1.0}
                            for m in ("demo-toy", "adamw") for s in (0, 1)])
    summary.to_csv(tmp_path / "summary.csv", index=False)
    df = results_table(tmp_path / "summary.csv", tmp_path / "r.csv", tmp_path / "r.md", {"dc": {"label": "dc"}},
                       methods=reg)
    assert list(df["method"]) == ["AdamW-DDP", "DeMo (toy)"]
    steps = pd.DataFrame([{"method": m, "n_workers": 2, "seed": s, "step": k, "val_loss": 3.0 - 0.1 * k,
                           "cum_bytes": 10 * k} for m in ("adamw", "demo-toy") for s in (0, 1) for k in range(4)])
    steps.to_csv(tmp_path / "steps.csv", index=False)
    figure("loss_bytes", tmp_path / "steps.csv", tmp_path / "f.png", {}, methods=reg)
    assert (tmp_path / "f.png").read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(UnknownTechnique, match="demo-toy"):
        figure("loss_bytes", tmp_path / "steps.csv", tmp_path / "g.png", {})


def test_a_method_in_a_figures_data_without_a_label_is_refused(tmp_path):
    from distlab.demo.figures import figure, gap_figure

    steps = pd.DataFrame([{"method": m, "n_workers": 2, "backend": "simulated", "seed": 0, "step": k,
                           "val_loss": 3.0 - 0.1 * k, "cum_bytes": 10 * k}
                          for m in ("adamw", "demo-renamed") for k in range(3)])
    steps.to_csv(tmp_path / "steps.csv", index=False)
    for draw in (lambda: figure("loss_steps", tmp_path / "steps.csv", tmp_path / "a.png", {}),
                 lambda: gap_figure(tmp_path / "steps.csv", tmp_path / "b.png")):
        with pytest.raises(UnknownTechnique, match="unknown method 'demo-renamed'; known: adamw, demo"):
            draw()


def test_an_unknown_variant_is_refused_not_run_as_the_reference():
    torch = pytest.importorskip("torch")
    from distlab.techniques.demo.method import DeMoMethod
    from distlab.techniques.methods import make_method

    model = torch.nn.Linear(4, 4)
    spec = {"method": "demo-sign", "lr": 0.01}
    with pytest.raises(UnknownTechnique, match="unknown method 'demo-sign'"):
        make_method(model, 2, spec, comm=None)
    with pytest.raises(ValueError, match="'demo-sign': its spec gives no encoding"):
        DeMoMethod(model, 2, spec, comm=None)
    with pytest.raises(ValueError, match="'demo-sign': its spec gives no mean"):
        DeMoMethod(model, 2, spec, comm=None, encoding="compact")
    # an argument the builder does not take is refused, naming it
    reg = _with(technique(**{**TOY, "name": "demo-sign", "args": {"encoding": "compact", "mean": "all",
                                                                          "sign": True}}))
    with pytest.raises(TypeError, match="sign"):
        make_method(model, 2, spec, comm=None, registry=reg)
    built = make_method(model, 2, {**spec, "method": "demo-toy"}, comm=None, registry=_with(technique(**TOY)))
    assert built.opts[0].encoding == "compact" and built.opts[0].mean == "all"


def test_an_unknown_atlas_technique_is_refused_by_name():
    from distlab.atlas.workflow import techniques
    from distlab.techniques.catalogue import kind

    with pytest.raises(UnknownTechnique, match="unknown technique 'gc-xx'; known: ddp, demo"):
        kind("gc-xx")
    assert techniques({"techniques": ["is-demo", "ddp"]}) == ["is-demo", "ddp"]
    with pytest.raises(UnknownTechnique, match="'gc-xx'"):
        techniques({"techniques": ["ddp", "gc-xx"]})


def test_each_default_is_stated_once_and_the_topk_rule_checked_once():
    """No module of the techniques or the DeMo paper restates an option's default; the
    ``topk <= chunk^2`` rule is :func:`distlab.techniques.options.demo_errors`, both callers use it."""
    from distlab.demo.spec import check, check_spec
    from distlab.techniques.options import SECTIONS, demo_errors

    assert SECTIONS["demo"]["topk"].default == 32
    pattern = re.compile(r"""\.get\(["'](topk|chunk|decay|H|outer_lr|outer_momentum|rank|betas|eps)["'],""")
    files = [*sorted((ROOT / "src/distlab/techniques").rglob("*.py")), *sorted((ROOT / "src/distlab/demo").glob("*.py"))]
    offenders = [f"{f.relative_to(ROOT)}:{i}" for f in files for i, line in enumerate(f.read_text().splitlines(), 1)
                 if pattern.search(line)]
    assert offenders == [], offenders
    assert demo_errors({"topk": 4097, "chunk": 64})[0][0] == "topk" and demo_errors({"topk": 4096, "chunk": 64}) == []
    spec = {"experiment": "demo", "method": "demo", "backend": "gloo", "seed": 0, "model": {"name": "gpt"},
            "n_workers": 2, "batch_size": 2, "lr": 0.01, "steps": 4, "demo": {"topk": 4097, "chunk": 64}}
    from distlab.config.specs import SpecError

    with pytest.raises(SpecError, match="key 'demo.topk': 4097 is larger than a chunk x chunk tile"):
        check_spec(spec)
    assert any(e.startswith("demo.demo.topk: 4097") for e in check({"demo": {"demo": {"topk": 4097, "chunk": 64}}}))
    for f in (ROOT / "src/distlab/demo/spec.py",):
        tree = ast.parse(f.read_text())
        compares = [n for n in ast.walk(tree) if isinstance(n, ast.Compare) and "chunk" in ast.unparse(n)]
        assert compares == [], [ast.unparse(n) for n in compares]


def _git(tree, *args):
    return subprocess.run(["git", *args], cwd=tree, capture_output=True, text=True, check=True).stdout


# one line each, as a user adds them: a variant whose encoding and mean exist (no code), and an
# atlas technique that is DDP again under another name
NEW_METHOD = '    _demo("demo-cheap", "DeMo (compact, plain mean)", 6, encoding="compact", mean="all"),\n'
NEW_TECHNIQUE = '    _atlas("ddp-twin", "sync", "DDP again", 12, _WRAPPED, method="adamw"),\n'


def _added_in_a_copy(tmp_path) -> tuple[Path, dict]:
    """A copy of the repository under git with the two spec lines added to the catalogue (the
    only file edited), and the environment its Snakemake runs in."""
    from conftest import bin_path, tracked_copy

    tree = tracked_copy(tmp_path / "repo")
    _git(tree, "init", "-q")
    _git(tree, "add", "-A")
    _git(tree, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "as it is")
    cat = tree / "src/distlab/techniques/catalogue.py"
    text = cat.read_text()
    last_method = '              label="PowerSGD", order=5, payload="dense", sweep_key=("powersgd", "rank")),\n'
    last_tech = '"relayed", _DEMO_SWEEP, ("demo",), dep=True, method="demo", label="IS-DeMo"),\n'
    assert last_method in text and last_tech in text
    cat.write_text(text.replace(last_method, last_method + NEW_METHOD).replace(last_tech, last_tech + NEW_TECHNIQUE))
    env = {**__import__("os").environ, "PATH": bin_path(), "PYTHONPATH": str(tree / "src"),
           "HF_DATASETS_OFFLINE": "1"}
    return tree, env


def _naming(tree: Path, name: str, methods: list[str], techniques: list[str], atlas=None, **demo) -> str:
    """A config file on top of the tiny one (outside git's view) naming ``methods`` for DeMo's
    comparison and ``techniques`` for the atlas; ``atlas`` and ``demo`` further settings."""
    import yaml

    section = {"methods": methods, "lr": {m: 0.001 for m in methods}, "lr_follows": {m: "demo" for m in methods[1:]},
               **demo}
    path = tree / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"demo": section, "atlas": {"techniques": techniques, **(atlas or {})}}))
    (tree / ".git/info/exclude").open("a").write(f"{name}.yaml\n")
    return path.name


def _snakemake(tree, env, *args, timeout=600):
    """``snakemake *args`` in ``tree``; a run that executes jobs (``--cores``) forks them from one
    preloaded server (conftest's FORKSERVER, as ``make reproduce`` runs them): the server imports
    the copy's src/ (``env``'s PYTHONPATH), edited catalogue included."""
    from conftest import FORKSERVER

    server = FORKSERVER if "--cores" in args else []
    return subprocess.run([*server, "snakemake", *args], cwd=tree, env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.slow
def test_a_new_variant_and_a_new_atlas_technique_are_one_spec_line_each(tmp_path):
    """As a user adds them: one spec line each in the catalogue, and a config naming them (a
    variant whose encoding and mean exist needs no code; a new one adds its code).  The dry run
    plans their jobs; the variant runs through Snakemake to its summary rows, the results table
    under its label and the figures; a name no spec declares is refused in one line, before any
    job; and nothing but the catalogue was edited."""
    tree, env = _added_in_a_copy(tmp_path)
    tiny = ["--configfile", "tests/configs/tiny.yaml"]
    both = _naming(tree, "both", ["adamw", "demo-cheap"], ["ddp", "ddp-twin"])
    r = _snakemake(tree, env, "demo", "atlas", "-n", "--quiet", "rules", *tiny, both)
    assert r.returncode == 0, r.stderr[-3000:]
    jobs = dict(re.findall(r"^(\w+)\s+(\d+)$", r.stdout, re.M))
    # DeMo: adamw and the variant at each N (more_workers keeps its own three), the atlas: two
    # techniques and the reference
    assert int(jobs["demo_train_sim"]) == 2 + 3 and int(jobs["atlas_job"]) == 3, r.stdout

    # a name no spec declares: one line naming it, not a run without it or of another
    unknown = _naming(tree, "unknown", ["adamw", "demo-sign"], ["ddp", "ddp-twin", "gc-xx"])
    r = _snakemake(tree, env, "demo", "atlas", "-n", *tiny, unknown)
    assert r.returncode != 0 and "Job stats" not in r.stdout
    named = [line for line in (r.stdout + r.stderr).splitlines() if "demo-sign" in line or "gc-xx" in line]
    assert any("demo.methods" in line and "'demo-sign' is not one of" in line for line in named), named
    assert any("atlas.techniques" in line and "'gc-xx' is not one of" in line for line in named), named

    _runs_to_its_table_and_figures(tree, env, tiny)
    _the_atlas_maps_it(tree, env, tiny)
    # the runs' pages in paper/ (the reader's copy, versioned) aside, only the catalogue changed
    changed = sorted(line[3:] for line in _git(tree, "status", "--porcelain").splitlines())
    assert [c for c in changed if not c.startswith("paper/")] == ["src/distlab/techniques/catalogue.py"], changed
    diff = [d for d in _git(tree, "diff", "--unified=0").splitlines() if d[:1] in "+-" and d[:3] not in ("+++", "---")]
    assert diff == ["+" + NEW_METHOD.rstrip("\n"), "+" + NEW_TECHNIQUE.rstrip("\n")], diff


def _runs_to_its_table_and_figures(tree, env, tiny):
    """The variant and AdamW at N = 2 (no sweep, no real processes): Snakemake trains both,
    summarizes them, tables and draws them; the variant is in each, under its spec's label."""
    only = _naming(tree, "only", ["adamw", "demo-cheap"], ["ddp"], lr_from_sweep=False,
                   more_workers={"n_workers": [2], "methods": ["demo-cheap"]}, real={"enabled": False})
    figures = [f"paper/figures/demo_{k}.png" for k in ("loss_steps", "gap_steps", "loss_bytes")]
    targets = ["results/demo/simulated/summary.csv", "paper/tables/demo_results.md", *figures]
    r = _snakemake(tree, env, "--cores", "1", *targets, *tiny, only, timeout=900)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    summary = pd.read_csv(tree / "results/demo/simulated/summary.csv")
    rows = summary[summary["method"] == "demo-cheap"]
    assert sorted(rows["seed"]) == [0, 1] and set(rows["n_workers"]) == {2}
    assert set(summary["method"]) == {"adamw", "demo-cheap"} and rows["final_val_loss"].notna().all()
    # its payload is its own (compact top-k), not the dense gradient of a substitute
    adamw = summary[summary["method"] == "adamw"]
    assert rows["payload_bytes_per_step"].max() < adamw["payload_bytes_per_step"].min()
    assert "DeMo (compact, plain mean)" in (tree / "paper/tables/demo_results.md").read_text()
    assert all((tree / f).read_bytes()[:4] == b"\x89PNG" for f in figures)
    import json

    manifest = json.loads((tree / "results/demo/simulated/n2/demo-cheap/seed0/manifest.json").read_text())
    assert manifest["spec"]["method"] == "demo-cheap" and manifest["spec"]["demo"]["topk"] == 8


def _the_atlas_maps_it(tree, env, tiny):
    """The atlas with DDP and its twin: under the stored compute profile the twin, never
    profiled, is refused in one line naming it (no other technique's profile stands in); under
    measured compute the map has the twin's rows in each of its tables."""
    stored = _naming(tree, "stored", ["adamw"], ["ddp", "ddp-twin"])
    r = _snakemake(tree, env, "--cores", "1", "atlas_map", *tiny, stored)
    assert r.returncode != 0
    refused = (tree / "logs/atlas/techniques/ddp-twin.log").read_text().strip().splitlines()
    assert "atlas.compute_profile: size" in refused[-1] and "has no ddp-twin at N = 2" in refused[-1], refused
    measured = _naming(tree, "measured", ["adamw"], ["ddp", "ddp-twin"], atlas={"compute": "measured"})
    r = _snakemake(tree, env, "--cores", "1", "atlas_map", *tiny, measured, timeout=900)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    for table in ("steps_to_target", "ttt", "cells", "winners"):
        df = pd.read_csv(tree / f"results/atlas/map/{table}.csv")
        named = {c for c in df.columns if "technique" in c or c == "winner"}
        assert named and any((df[c] == "ddp-twin").any() for c in named), (table, named)
    steps = pd.read_csv(tree / "results/atlas/map/steps_to_target.csv")
    keys = {t: set(zip(g["n_params"], g["N"], g["seed"])) for t, g in steps.groupby("technique")}
    # every (size, N, seed) of the map's grid that DDP has (DDP's trend runs aside), none dropped
    assert keys["ddp-twin"] <= keys["ddp"] and len(keys["ddp-twin"]) == len(steps.query("technique == 'ddp-twin'"))
    assert {(n, s) for _, n, s in keys["ddp-twin"]} == {(2, 0), (2, 1), (4, 0), (4, 1)}
    assert len({p for p, _, _ in keys["ddp-twin"]}) == 2  # atlas.sizes: small and large


def test_a_workers_passes_a_step_are_its_codes_stated_once():
    """The gradient passes a worker computes a step (the atlas's clock and the GPU tier's plan)
    are its code's, read from its spec's scheme: one rule, in distlab.techniques.gradient_codes."""
    from distlab.atlas import projection
    from distlab.gpu import plan
    from distlab.techniques.gradient_codes import CodingError, make_scheme, passes_per_step

    assert projection.passes_per_step is plan.passes_per_step is catalogue.passes_per_step
    got = {t: catalogue.passes_per_step(t, 2) for t in TECHNIQUES}
    assert {t: p for t, p in got.items() if p != 1} == {"gc-fr": 3, "gc-cr": 3, "is-gc": 2}
    for scheme, s in (("gc-fr", 1), ("gc-cr", 2), ("is-gc-cr", 3), ("is-sgd", 1), ("dgd", 0)):
        assert passes_per_step(scheme, s) == make_scheme(scheme, 6, s).c
    assert passes_per_step("pgc-cr", 2) == len(make_scheme("pgc-cr", 6, 2).partitions_to_compute(0, 1)) == 1
    with pytest.raises(UnknownTechnique, match="'gc-xx'"):
        catalogue.passes_per_step("gc-xx", 1)
    with pytest.raises(CodingError, match="unknown scheme 'gc-xx'"):
        passes_per_step("gc-xx", 1)


# the literals naming two techniques or more that are not lists of the registry's: each a
# namespace or a choice of its own (the reason beside it)
NOT_THE_REGISTRY = {
    "src/distlab/techniques/gradient_codes.py": "P1's coding schemes (SCHEMES), a namespace of their own",
    "src/distlab/pgc/regime.py": "P1's coding schemes and their clock names",
    "src/distlab/pgc/figures.py": "P1's coding schemes in P1's figures",
    "src/distlab/atlas/outputs.py": "the pairs the crossover table compares, a choice",
    "src/distlab/bench/techerror.py": "the techniques the simulator-error benchmark measures, a choice",
}


def technique_lists(root: Path) -> list[str]:
    """Each literal (list, tuple, set, dict keys, ``a|b`` string) in src/ and workflow/ naming two
    registered techniques or more, outside the catalogue; the option sections' names (``demo``,
    ``diloco``, ...) are also sections of a spec, and are not counted."""
    from distlab.techniques.options import SECTIONS

    names = (set(METHODS) | set(TECHNIQUES)) - set(SECTIONS)
    out = []
    files = [root / "Snakefile", *sorted((root / "workflow").rglob("*.smk")),
             *[f for d in ("src", "workflow") for f in sorted((root / d).rglob("*.py"))]]
    for f in files:
        rel = f.relative_to(root).as_posix()
        if rel == "src/distlab/techniques/catalogue.py" or rel in NOT_THE_REGISTRY:
            continue
        text = f.read_text(encoding="utf-8")
        if f.suffix == ".py":
            groups = []
            for node in ast.walk(ast.parse(text)):
                items = (node.elts if isinstance(node, (ast.List, ast.Tuple, ast.Set))
                         else node.keys if isinstance(node, ast.Dict) else None)
                if items is not None:
                    groups.append((node.lineno, [i.value for i in items if isinstance(i, ast.Constant)]))
                elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "|" in node.value:
                    groups.append((node.lineno, node.value.split("|")))
        else:
            groups = [(i, re.findall(r'["\'|]([a-z0-9-]+)(?=["\'|])', m.group()))
                      for i, line in enumerate(text.splitlines(), 1)
                      for m in re.finditer(r'[\[\(\{][^\]\)\}]*[\]\)\}]|"[^"]*\|[^"]*"', line)]
        out += [f"{rel}:{i}" for i, strings in groups if len(names & set(strings)) >= 2]
    return out


def test_no_list_of_techniques_is_kept_outside_the_registry():
    assert technique_lists(ROOT) == []
    assert all((ROOT / f).is_file() for f in NOT_THE_REGISTRY)


def test_the_checker_finds_a_list_of_techniques(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "m.py").write_text('X = {"gc-fr": 2, "is-gc": 2}\nY = ("demo", "diloco")\nZ = "ddp|is-sgd"\n')
    (tmp_path / "workflow").mkdir()
    (tmp_path / "workflow" / "r.smk").write_text('    m="demo-compact|demo-allmean",\n')
    (tmp_path / "Snakefile").write_text("")
    assert technique_lists(tmp_path) == ["workflow/r.smk:1", "src/m.py:1", "src/m.py:3"]


def test_each_demo_encoding_is_declared_once_and_an_undeclared_one_is_refused():
    """The wire format reads each encoding's declaration (payload.ENCODINGS); a name no entry
    declares is refused by every function that reads one, never sized or packed as another."""
    torch = pytest.importorskip("torch")
    from distlab.techniques.demo import payload as pl

    assert set(pl.ENCODINGS) == {"reference", "compact"}
    sizes = {e: (pl.index_nbytes(10, e, 4096), pl.value_nbytes(10, e, torch.float32, torch.bfloat16))
             for e in pl.ENCODINGS}
    assert sizes == {"reference": (80, 40), "compact": (15, 20)}
    idx, val = torch.arange(10), torch.linspace(-1, 1, 10)
    calls = [lambda e: pl.index_nbytes(10, e, 4096), lambda e: pl.value_nbytes(10, e, torch.float32, torch.bfloat16),
             lambda e: pl.pack_indices(idx, e, 4096), lambda e: pl.pack_values(val, e, torch.bfloat16),
             lambda e: pl.unpack_indices(torch.zeros(80, dtype=torch.uint8), 10, e, 4096),
             lambda e: pl.unpack_values(torch.zeros(40, dtype=torch.uint8), 10, e, torch.float32, torch.bfloat16),
             lambda e: pl.quantize(val, e, torch.bfloat16)]
    for call in calls:
        with pytest.raises(ValueError, match="encoding must be one of \\('reference', 'compact'\\), got 'sign'"):
            call("sign")
    for e in pl.ENCODINGS:
        got = pl.unpack_indices(pl.pack_indices(idx, e, 4096), 10, e, 4096)
        assert torch.equal(got, idx)


def test_a_claim_naming_a_technique_no_registry_holds_is_refused_in_one_line(tmp_path):
    """A claim's or condition's selector reads its paper's registry (Paper.claim_registries): a
    misspelt method or technique is one line of the config check, not a row that reads "not run"."""
    import yaml

    from distlab.config.checks import ConfigError, check_config, claims_technique_errors
    from distlab.papers import papers

    claims = ROOT / "config" / "claims.yaml"
    assert claims_technique_errors(claims, papers()) == []
    text = claims.read_text()
    bad = (text.replace("    a: {method: demo-allmean, n_workers: 2}", "    a: {method: demo-allmaen, n_workers: 2}", 1)
           .replace("a: {technique: diloco-demo,", "a: {technique: diloco-dmeo,", 1)
           .replace("b: {method: demo-allmean, n_workers: 2}", "b: {method: demo-sign, n_workers: 2}", 1))
    path = tmp_path / "claims.yaml"
    path.write_text(bad)
    errors = claims_technique_errors(path, papers())
    assert len(errors) == 3 and all(e.count("\n") == 0 for e in errors), errors
    assert any("'demo-allmaen' is no registered method (adamw, demo, " in e for e in errors)
    assert any("'diloco-dmeo' is no registered technique (ddp, demo, " in e for e in errors)
    assert any("'demo-sign' is no registered method" in e for e in errors)
    # a label is a name the tables use (DeMo's bytes table): accepted
    assert "method: DeMo," in text
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    with pytest.raises(ConfigError, match="'diloco-dmeo' is no registered technique"):
        check_config(config, SCHEMAS, claims_path=path, papers=papers())
