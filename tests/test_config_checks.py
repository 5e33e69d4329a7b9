"""Malformed configurations as users write them: every one is refused before
any job starts, and the refusal names the key.

Each case mutates the shipped default config; it must be refused either by
Snakemake's schema validation or by ``distlab.config.checks`` (strict types,
cross-field rules, claims), the two steps the Snakefile runs at parse time.
One case per kind also goes through ``snakemake -n`` to show the whole path.
"""

from __future__ import annotations

import copy
import math

import pytest
import yaml
from conftest import ROOT, dry_runs
from distlab.config.checks import ConfigError, check_config, config_errors, validate_defaults

SCHEMA_DIR = ROOT / "workflow/schemas"
CLAIMS = ROOT / "config/claims.yaml"


def _default():
    return yaml.safe_load((ROOT / "config/config.yaml").read_text())


def _set(path, value):
    def mutate(c):
        *head, last = path
        node = c
        for k in head:
            node = node[k]
        node[last] = value
    return mutate


def _del(path):
    def mutate(c):
        *head, last = path
        node = c
        for k in head:
            node = node[k]
        del node[last]
    return mutate


def _refusal(cfg) -> str:
    """The error text of the first step that refuses ``cfg``; '' if accepted."""
    try:
        validate_defaults(copy.deepcopy(cfg), SCHEMA_DIR)  # as the Snakefile: each paper's schema too
    except Exception as e:  # snakemake's WorkflowError wraps the jsonschema error
        return str(e)
    return "\n".join(config_errors(cfg, SCHEMA_DIR, CLAIMS))


P = ["pgc"]
SIM = ["pgc", "simulation"]
CASES = [
    # (id, mutation, text the refusal must contain)
    ("lr-nan", _set(P + ["lr"], math.nan), "pgc.lr"),
    ("lr-inf", _set(P + ["lr"], math.inf), "pgc.lr"),
    ("lr-negative", _set(P + ["lr"], -0.1), "lr"),
    ("lr-string", _set(P + ["lr"], "0.1"), "lr"),
    ("baseline-lr-nan", _set(["baseline", "lr"], math.nan), "baseline.lr"),
    ("n-float", _set(P + ["n"], 4.0), "pgc.n"),
    ("n-string", _set(P + ["n"], "twelve"), "n"),
    ("n-one", _set(P + ["n"], 1), "n"),
    ("seeds-float", _set(["seeds"], [0.0, 1.0]), "seeds"),
    ("seeds-duplicate", _set(["seeds"], [0, 0, 1]), "seeds"),
    ("seeds-negative", _set(["seeds"], [-1]), "seeds"),
    ("seeds-empty", _set(["seeds"], []), "seeds"),
    ("s-float", _set(SIM + ["s"], [1.0]), "pgc.simulation.s"),
    ("s-duplicate", _set(SIM + ["s"], [1, 1]), "s"),
    ("s-equals-n", _set(SIM + ["s"], [12]), "pgc.simulation.s"),
    ("s-above-n", _set(SIM + ["s"], [13]), "pgc.simulation.s"),
    ("fr-divisibility", _set(SIM + ["s"], [4]), "fractional repetition"),
    ("cloud-s-equals-n", _set(P + ["cloud", "s"], 12), "pgc.cloud.s"),
    ("real-s-equals-n", _set(P + ["real", "s"], 4), "pgc.real.s"),
    ("c-above-n", _set(P + ["motivating", "c"], [2, 13]), "pgc.motivating.c"),
    ("c-duplicate", _set(P + ["motivating", "c"], [2, 2]), "c"),
    ("c-one", _set(P + ["motivating", "c"], [1]), "c"),
    ("delay-tiny-ok-path", _set(SIM + ["delay_means"], [1.0, 0.0]), "delay_means"),
    ("delay-duplicate", _set(SIM + ["delay_means"], [1.0, 1.0]), "delay_means"),
    ("delay-nan", _set(SIM + ["delay_means"], [math.nan]), "delay_means"),
    ("batch-not-divisible", _set(SIM + ["batch_size"], 100), "pgc.simulation.batch_size"),
    ("baseline-batch-not-divisible", _set(["baseline", "batch_size"], 66), "baseline.batch_size"),
    ("real-batch-not-divisible", _set(P + ["real", "batch_size"], 50), "pgc.real.batch_size"),
    ("scheme-unknown", _set(SIM + ["schemes"], ["pgc-xx"]), "pgc-xx"),
    ("scheme-duplicate", _set(SIM + ["schemes"], ["dgd", "dgd"]), "schemes"),
    ("slow-worker-out-of-range", _set(["baseline", "straggler"],
                                      {"model": "persistent", "slowdown": 2.0, "slow_workers": [7]}),
     "baseline.straggler.slow_workers"),
    ("slow-worker-duplicate", _set(["baseline", "straggler"],
                                   {"model": "persistent", "slowdown": 2.0, "slow_workers": [1, 1]}),
     "slow_workers"),
    ("persistent-without-slow", _set(["baseline", "straggler"], {"model": "persistent", "slowdown": 2.0}),
     "slow_workers"),
    ("straggler-model-unknown", _set(["baseline", "straggler"], {"model": "gamma"}), "gamma"),
    ("dataset-missing", _set(P + ["dataset"], "cifar10"), "pgc.dataset"),
    ("dataset-hyphenated", _set(["datasets"], {**_default()["datasets"], "my-digits": {
        "kind": "image", "source": "sklearn_digits"}}), "my-digits"),
    ("dataset-injection", _set(P + ["dataset"], "x||touch FILE||"), "x||touch FILE||"),
    ("image-model-on-text", _set(P + ["dataset"], "pydoc"), "pgc.dataset"),
    ("baseline-dataset-missing", _set(["baseline", "dataset"], "mnist"), "baseline.dataset"),
    ("workers-zero", _set(["baseline", "n_workers"], 0), "n_workers"),
    ("workers-float", _set(["baseline", "n_workers"], 4.0), "baseline.n_workers"),
    ("backend-unknown", _set(["baseline", "backends"], ["mpi"]), "mpi"),
    ("backend-duplicate", _set(["baseline", "backends"], ["gloo", "gloo"]), "backends"),
    ("alpha-out-of-range", _set(["stats", "alpha"], 0.9), "alpha"),
    ("alpha-nan", _set(["stats", "alpha"], math.nan), "stats.alpha"),
    ("compute-mode-unknown", _set(["cluster", "compute", "mode"], "guess"), "guess"),
    ("bandwidth-zero", _set(["cluster", "network", "bandwidth_Bps"], 0), "bandwidth_Bps"),
    ("bandwidth-inf", _set(["cluster", "network", "bandwidth_Bps"], math.inf), "cluster.network.bandwidth_Bps"),
    ("timeout-zero", _set(["runtime", "timeout_s"], 0), "timeout_s"),
    ("threads-float", _set(["runtime", "threads"], 2.0), "runtime.threads"),
    ("unknown-top-key", _set(["pgcc"], {}), "pgcc"),
    ("unknown-nested-key", _set(SIM + ["stepz"], 5), "stepz"),
    ("missing-required", _del(SIM + ["steps"]), "steps"),
    ("missing-section", _del(["stats"]), "stats"),
    ("threshold-negative", _set(P + ["cloud", "threshold"], {"loss": -1.0}), "loss"),
    ("val-fraction-too-big", _set(["datasets", "digits", "val_fraction"], 0.7), "val_fraction"),
    ("hf-path-injection", _set(["datasets", "digits"], {"kind": "image", "source": "hf",
                                                        "hf_path": "a; rm -rf /"}), "hf_path"),
]


def test_the_shipped_default_is_accepted():
    assert _refusal(_default()) == ""


def test_the_cases_cover_what_users_got_wrong():
    assert len(CASES) >= 46
    assert len({c[0] for c in CASES}) == len(CASES)


@pytest.mark.parametrize("name,mutate,key", CASES, ids=[c[0] for c in CASES])
def test_malformed_config_is_refused_naming_the_key(name, mutate, key):
    cfg = _default()
    mutate(cfg)
    text = _refusal(cfg)
    assert text, f"{name}: accepted"
    assert key in text, f"{name}: refusal does not name {key!r}:\n{text}"


def test_every_problem_is_listed_at_once():
    cfg = _default()
    cfg["pgc"]["simulation"]["s"] = [12]
    cfg["baseline"]["batch_size"] = 66
    with pytest.raises(ConfigError) as err:
        check_config(cfg, SCHEMA_DIR, CLAIMS)
    assert "2 problem(s)" in str(err.value)
    assert "pgc.simulation.s" in str(err.value) and "baseline.batch_size" in str(err.value)


def test_a_claims_typo_is_refused_with_the_config(tmp_path):
    doc = yaml.safe_load(CLAIMS.read_text())
    claims = doc["claims"]
    claims[0]["tset"] = "less"
    bad = tmp_path / "claims.yaml"
    bad.write_text(yaml.safe_dump(doc))
    errors = config_errors(_default(), SCHEMA_DIR, bad)
    assert any("tset" in e and claims[0]["id"] in e for e in errors)
    doc = yaml.safe_load(CLAIMS.read_text())
    doc["claims"].append(dict(doc["claims"][0]))
    bad.write_text(yaml.safe_dump(doc))
    assert any("duplicated id" in e for e in config_errors(_default(), SCHEMA_DIR, bad))
    # a precondition that names no condition, and a duplicated key, are refused too
    doc = yaml.safe_load(CLAIMS.read_text())
    doc["claims"][0]["preconditions"] = ["no.such.condition"]
    bad.write_text(yaml.safe_dump(doc))
    assert any("no.such.condition" in e and doc["claims"][0]["id"] in e
               for e in config_errors(_default(), SCHEMA_DIR, bad))
    bad.write_text(CLAIMS.read_text().replace("claims:\n", "claims:\n- id: x\n  id: y\n", 1))
    assert any("claims.0.id: duplicate key" in e for e in config_errors(_default(), SCHEMA_DIR, bad))


_DRY = ["lr-nan", "s-equals-n", "slow-worker-out-of-range", "n-float"]


@pytest.fixture(scope="module")
def dry_run_outputs(tmp_path_factory):
    """Each case of ``_DRY`` through ``snakemake -n --configfile``, all in one interpreter."""
    d = tmp_path_factory.mktemp("config_cases")
    paths = {}
    for name in _DRY:
        cfg = _default()
        {c[0]: c[1] for c in CASES}[name](cfg)
        paths[name] = d / f"{name}.yaml"
        paths[name].write_text(yaml.safe_dump(cfg))
    runs = dry_runs(paths.values(), timeout=600)
    return {name: runs[str(path)] for name, path in paths.items()}


@pytest.mark.slow
@pytest.mark.parametrize("name", _DRY)
def test_snakemake_refuses_before_any_job(dry_run_outputs, name):
    key = {c[0]: c[2] for c in CASES}[name]
    code, out = dry_run_outputs[name]
    assert code != 0
    assert key in out
    assert "Job stats" not in out


def test_extra_seeds_must_name_existing_claims():
    cfg = _default()
    cfg["stats"]["extra_seeds"] = {"no.such.claim": 3, "pgc.fig9.pgc_fewer_steps_than_dgd": 2}
    errors = config_errors(cfg, SCHEMA_DIR, CLAIMS)
    assert errors == [f"stats.extra_seeds.no.such.claim: no claim or condition with this id in {CLAIMS}"]
    cfg["stats"]["extra_seeds"] = {"pgc.fig9.pgc_fewer_steps_than_dgd": 2000}
    assert any("stats.extra_seeds" in e for e in config_errors(cfg, SCHEMA_DIR, CLAIMS))


def test_a_stored_coding_profile_must_hold_every_setting_the_config_runs():
    """pgc.coding.source: stored reads data/pgc/coding_profile.csv: the default config's
    settings are all there; a setting it lacks (s = 5) is refused before any job, named."""
    cfg = _default()
    assert cfg["pgc"]["coding"]["source"] == "stored"
    assert not [e for e in config_errors(cfg, SCHEMA_DIR, CLAIMS) if "coding" in e]
    cfg["pgc"]["cloud"]["s"] = 5
    cfg["pgc"]["cloud"]["schemes"] = [x for x in cfg["pgc"]["cloud"]["schemes"] if not x.endswith("-fr")]
    errs = [e for e in config_errors(cfg, SCHEMA_DIR, CLAIMS) if "coding" in e]
    assert len(errs) == 1 and errs[0].startswith("pgc.coding.source: stored, but data/pgc/coding_profile.csv")
    assert "pgc-cr n=12 s=5" in errs[0] and "s=1" not in errs[0]
    cfg["pgc"]["coding"]["source"] = "measured"  # this run measures its own: nothing to hold
    assert not [e for e in config_errors(cfg, SCHEMA_DIR, CLAIMS) if "coding" in e]


def test_the_stored_coding_profile_is_a_profile_the_rule_writes():
    import pandas as pd

    from distlab.pgc.coding_cost import PROFILE_COLUMNS

    t = pd.read_csv(ROOT / "data/pgc/coding_profile.csv")
    assert tuple(t.columns) == PROFILE_COLUMNS
    assert (t[["encode_s", "decode_s"]] > 0).all().all()
    for x in ("encode", "decode"):
        assert (t[f"{x}_lo"] <= t[f"{x}_s"]).all() and (t[f"{x}_s"] <= t[f"{x}_hi"]).all()
    assert not t.duplicated(["scheme", "n", "s", "numel", "dtype"]).any()
