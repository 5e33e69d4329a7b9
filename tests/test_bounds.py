"""distlab.config.bounds: memory ceilings, paths that cannot climb out, and one-line refusals,
through the checker and (one case each) through ``snakemake -n``."""

from __future__ import annotations

import copy

import pytest
import yaml

from conftest import ROOT, dry_runs
from distlab.config import bounds
from distlab.pipeline import jobs
from distlab.config.checks import config_errors

SCHEMA_DIR = ROOT / "workflow/schemas"
CLAIMS = ROOT / "config/claims.yaml"


def _default():
    return yaml.safe_load((ROOT / "config/config.yaml").read_text())


def _errors(cfg, files=()):
    return config_errors(cfg, SCHEMA_DIR, CLAIMS, config_files=files)


def test_the_shipped_configs_fit_their_ceilings():
    assert [e for e in _errors(_default()) if "MiB" in e] == []
    paper = _default()
    from snakemake.utils import update_config
    update_config(paper, yaml.safe_load((ROOT / "config/paper.yaml").read_text()))
    assert bounds.memory_errors(paper) == []


def test_a_model_past_the_memory_ceiling_is_refused_naming_d_model():
    cfg = _default()
    cfg["demo"]["model"]["d_model"] = 65536  # exactly the count limit: the count check lets it by
    cfg["jobs"]["max_mem_mb"] = 128 * 1024
    errs = _errors(cfg)
    mem = [e for e in errs if "MiB of memory" in e]
    assert len(mem) == 1, errs
    line = mem[0]
    assert line.startswith("demo.model.d_model: ")
    # the estimate the job would ask SLURM for: 4 workers of about 1.5 TB each
    spec = {"experiment": "demo", "backend": "gloo", "model": cfg["demo"]["model"], "n_workers": 4,
            "batch_size": cfg["demo"]["batch_size"], "dtype": "float32"}
    assert f"{jobs.mem_mb(spec, '', cfg['jobs']['base_mb']):,} MiB" in line
    assert "jobs.max_mem_mb" in line and "131,072 MiB" in line and "\n" not in line
    # a ceiling above the estimate lets it through
    cfg["jobs"]["max_mem_mb"] = 10**8
    assert [e for e in _errors(cfg) if "MiB of memory" in e] == []


def test_the_batch_and_the_workers_are_named_when_they_drive_the_estimate():
    cfg = _default()
    cfg["jobs"]["max_mem_mb"] = 4000
    cfg["local_learning"]["batch_size"] = 4096  # activations of a 24-layer model
    errs = [e for e in _errors(cfg) if "MiB of memory" in e]
    assert any(e.startswith("local_learning.batch_size: ") and "activations" in e for e in errs), errs
    cfg = _default()
    cfg["jobs"]["max_mem_mb"] = 3000
    cfg["pgc"]["real"]["n"] = 8  # 9 processes of ~700 MiB each
    cfg["pgc"]["real"]["s"] = 1
    errs = [e for e in _errors(cfg) if "MiB of memory" in e]
    assert any("x 9 processes (pgc.real.n)" in e for e in errs), errs


def test_the_default_ceiling_is_this_machines_memory():
    cfg = _default()
    cfg["jobs"].pop("max_mem_mb", None)
    cfg["demo"]["model"]["d_model"] = 65536
    mb = bounds.machine_mem_mb()
    line = next(e for e in _errors(cfg) if "MiB of memory" in e)
    assert f"this machine's memory (jobs.max_mem_mb unset): {mb:,} MiB" in line


def test_gpu_memory_under_nccl_is_checked_per_rank():
    cfg = _default()
    cfg["demo"]["real"]["backend"] = "nccl"
    cfg["demo"]["model"]["d_model"] = 8192  # 4 x 53 M parameters x 4 bytes x 2 layers
    cfg["jobs"].update(max_mem_mb=10**8, max_gpu_mem_mb=16 * 1024)
    spec = {"experiment": "demo", "backend": "nccl", "model": cfg["demo"]["model"], "n_workers": 4,
            "batch_size": cfg["demo"]["batch_size"], "dtype": "float32"}
    need = jobs.gpu_mem_mb(spec)
    assert need > 16 * 1024
    line = next(e for e in bounds.memory_errors(cfg) if "GPU memory" in e)
    assert line.startswith("demo.model.d_model: ") and f"{need:,} MiB of GPU memory a rank" in line
    cfg["jobs"]["max_gpu_mem_mb"] = need
    assert [e for e in bounds.memory_errors(cfg) if "GPU memory" in e] == []
    assert jobs.gpu_mem_mb({**spec, "backend": "gloo"}) == 0


@pytest.mark.parametrize("value", ["../etc", "/etc/passwd", "owner/../../x", "~/data", "./local"])
def test_a_hub_path_that_climbs_out_is_refused(value):
    cfg = _default()
    cfg["datasets"]["pydoc"]["hf_path"] = value
    errs = [e for e in _errors(cfg) if e.startswith("datasets.pydoc.hf_path")]
    assert len(errs) == 1, _errors(cfg)
    assert repr(value) in errs[0] and "owner/name" in errs[0]


@pytest.mark.parametrize("value", ["wikitext", "Salesforce/wikitext", "a.b/c-d_1"])
def test_hub_names_are_accepted(value):
    cfg = _default()
    cfg["datasets"]["pydoc"]["hf_path"] = value
    assert bounds.path_errors(cfg) == []


def test_a_dataset_reference_that_climbs_out_is_refused():
    cfg = _default()
    cfg["pgc"]["dataset"] = "../digits"
    assert any(e.startswith("pgc.dataset: '../digits' climbs out") for e in bounds.path_errors(cfg))


@pytest.mark.parametrize("text,what", [("", "no settings"), ("# only a comment\n", "no settings"),
                                       ("- a\n- b\n", "holds a list")])
def test_a_config_file_without_settings_is_refused_naming_it(tmp_path, text, what):
    path = tmp_path / "mine.yaml"
    path.write_text(text)
    errs = _errors(_default(), [str(path)])
    assert len(errs) == 1 and errs[0].startswith(f"{path}: ") and what in errs[0], errs


def test_n_zero_and_empty_seeds_give_one_line_each():
    cfg = _default()
    cfg["pgc"]["n"] = 0
    errs = _errors(cfg)
    assert errs == ["pgc.n: 0 is less than the minimum of 2"], errs
    cfg = _default()
    cfg["seeds"] = []
    errs = _errors(cfg)
    assert len(errs) == 1 and errs[0].startswith("seeds: "), errs


def test_a_yaml_string_that_looks_like_a_number_says_what_to_write():
    cfg = _default()
    cfg["pgc"]["lr"] = "1e-3"  # what YAML 1.1 reads from `lr: 1e-3`
    errs = _errors(cfg)
    assert len(errs) == 1 and errs[0].startswith("pgc.lr: "), errs
    assert "YAML reads 1e-3 as a string" in errs[0] and "write 1.0e-3" in errs[0]
    assert yaml.safe_load("x: 1.0e-3")["x"] == pytest.approx(1e-3)  # the advice holds
    assert bounds.type_hint("2e5", "integer").endswith("write 2.0e+5")
    assert yaml.safe_load("x: 2.0e+5")["x"] == 2.0e5
    assert bounds.type_hint("abc", "number") is None


def test_every_refusal_is_one_line():
    cfg = copy.deepcopy(_default())
    cfg["pgc"]["n"] = 0
    cfg["demo"]["model"]["d_model"] = 65536
    cfg["datasets"]["pydoc"]["hf_path"] = "../etc"
    for e in _errors(cfg):
        assert "\n" not in e and len(e) < 600, e


_DRY_CASES = [
    ({"demo": {"model": {"d_model": 65536}}, "jobs": {"max_mem_mb": 131072}}, "demo.model.d_model: a DeMo"),
    ({"datasets": {"pydoc": {"hf_path": "../etc"}}}, "datasets.pydoc.hf_path: '../etc' climbs out"),
]


@pytest.fixture(scope="module")
def dry_run_outputs(tmp_path_factory):
    """Every case's ``snakemake -n --configfile case.yaml``, in one interpreter."""
    d = tmp_path_factory.mktemp("bounds_cases")
    paths = []
    for i, (case, _) in enumerate(_DRY_CASES):
        paths.append(d / f"case{i}.yaml")
        paths[-1].write_text(yaml.safe_dump(case))
    return list(dry_runs(paths).values())


@pytest.mark.parametrize("i", range(len(_DRY_CASES)), ids=[e.split(":")[0] for _, e in _DRY_CASES])
def test_snakemake_dry_run_refuses(dry_run_outputs, i):
    code, out = dry_run_outputs[i]
    assert code != 0
    assert _DRY_CASES[i][1] in out
    assert "nothing was run" in out


def test_a_ceiling_given_on_the_command_line_is_read_as_the_number_it_spells():
    """Snakemake's --config 'jobs={max_mem_mb: 65536}' hands the number over as a string."""
    from distlab.config import bounds

    assert bounds._ceiling({"max_mem_mb": "65536"}) == (65536, "jobs.max_mem_mb")
    assert bounds._ceiling({"max_mem_mb": 65536}) == (65536, "jobs.max_mem_mb")
