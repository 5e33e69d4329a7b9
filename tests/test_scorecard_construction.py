"""Every by-construction reason in config/claims.yaml, checked against the code that makes it true.

A row labelled "by construction" is kept out of the reproduced count because the
code makes it hold whatever the data.  Each such reason is a statement about the
code, so each gets a check here that fails if the construction is broken (a
scheme charging other units, a decoder that is not exact, a payload of other
bytes).  A by-construction row without a check here fails the first test.
"""

from __future__ import annotations

import csv
import itertools
from pathlib import Path

import numpy as np
import pytest

from distlab.scoring import scorecard
from distlab.pgc import coding, regime

ROOT = Path(__file__).resolve().parents[1]
CLAIMS, _ = scorecard.load_claims_file(ROOT / "config/claims.yaml")
BY_ID = {c["id"]: c for c in CLAIMS}
N = 12  # pgc.n, the paper's 12 workers
UNIT_S = 0.5  # cluster.compute.unit_seconds of the simulated groups


def _profile() -> dict[tuple[str, int], float]:
    """Encode + decode seconds a step, per (scheme, s), from the stored coding profile."""
    with open(ROOT / "data/pgc/coding_profile.csv") as fh:
        return {(r["scheme"], int(r["s"])): float(r["encode_s"]) + float(r["decode_s"]) for r in csv.DictReader(fh)}


def _units(name: str, s: int, step: int) -> set[int]:
    sch = coding.make_scheme(name, N, s)
    return {len(sch.partitions_to_compute(w, step)) for w in range(N)}


def _wait(name: str, s: int) -> int:
    return coding.make_scheme(name, N, s).wait_for


# ------------------------------------------------------------------ the checks, one per reason


def _exact_decode(cid: str) -> None:
    """GC's decoder puts weight exactly 1/n on every partition, from any n - s workers: DGD's gradient."""
    name = BY_ID[cid]["a"]["scheme"]
    s = int(BY_ID[cid]["a"]["s"])
    sch = coding.make_scheme(name, N, s)
    rng = np.random.default_rng(0)
    subsets = [rng.permutation(N)[: N - s].tolist() for _ in range(40)]
    for received in subsets:
        np.testing.assert_allclose(sch.partition_weights(received), np.full(N, 1.0 / N), rtol=0, atol=1e-12)
    # and the decoded gradient of random per-partition gradients is their mean
    grads = {j: rng.normal(size=7) for j in range(N)}
    msgs = {w: coding.encode(sch, w, grads) for w in subsets[0]}
    np.testing.assert_allclose(coding.decode(sch, msgs), np.mean(list(grads.values()), axis=0), atol=1e-12)


def _fewer_units(slow: str, fast: str, s: int) -> None:
    """``slow`` computes more partitions a step than ``fast`` (after PGC's start-up), both wait for
    n - s, and the coding profile's seconds cannot make up a unit."""
    start = 1 if "pgc" in (slow, fast) else 0
    u_slow, u_fast = _units(slow, s, start + 3), _units(fast, s, start + 3)
    assert len(u_slow) == len(u_fast) == 1 and min(u_slow) > max(u_fast), (slow, u_slow, fast, u_fast)
    assert _wait(slow, s) == _wait(fast, s) == N - s
    prof = _profile()
    assert prof[(fast, s)] - prof[(slow, s)] < (min(u_slow) - max(u_fast)) * UNIT_S


def _same_units(a: str, b: str, s: int) -> None:
    """After start-up both compute one partition a step and wait for n - s; the start-up step and the
    coding profile's difference stay inside the row's 10 % margin of IS-SGD's step."""
    assert _units(a, s, 5) == _units(b, s, 5) == {1}
    assert _units("pgc-cr", s, 0) == {s + 1}  # PGC's start-up: all s + 1 partitions at theta_0
    assert _wait(a, s) == _wait(b, s) == N - s
    prof = _profile()
    steps = 150  # pgc.simulation.steps
    extra = abs(prof[(a, s)] - prof[(b, s)]) + s * UNIT_S / steps
    assert extra < 0.1 * UNIT_S  # IS-SGD's step is at least one unit: 10 % of it bounds the margin from below


def _fewer_waited(name: str) -> None:
    """The same units at every s, waiting for the (n - s)-th of the same delays: fewer as s grows."""
    for s in (1, 2, 3):
        assert _units(name, s, 4) == _units(name, 1, 4) and _wait(name, s) == N - s
    clock = "is-gc" if name.startswith("is-gc") else "is-sgd"
    # the clock charges the scheme's units
    assert all({regime.units(clock, s, 4)} == _units(name, s, 4) for s in (1, 2, 3))
    for seed in range(5):
        t = [regime.clock_time_per_step(clock, N, s, UNIT_S, 1.0, seed, 30) for s in (1, 2, 3)]
        assert t[0] > t[1] > t[2], (seed, t)
    prof = _profile()
    spread = max(prof[(name, s)] for s in (1, 2, 3)) - min(prof[(name, s)] for s in (1, 2, 3))
    assert spread < 0.01  # coding seconds differ by under 10 ms across s (the delays' gaps: ~0.1 s)


def _waits_for_fewer(fast: str, slow: str, s: int) -> None:
    """The same one unit a step; ``fast`` waits for n - s of the same delays, ``slow`` for all n; its
    coding seconds are not larger."""
    assert _units(fast, s, 3) == _units(slow, 0 if slow == "dgd" else s, 3) == {1}
    assert _wait(fast, s) == N - s < _wait(slow, 0 if slow == "dgd" else s) == N
    prof = _profile()
    assert prof[(fast, s)] <= prof[(slow, 0 if slow == "dgd" else s)]
    for seed in range(5):
        assert regime.clock_time_per_step("is-sgd", N, s, UNIT_S, 1.0, seed, 30) < \
            regime.clock_time_per_step("dgd", N, s, UNIT_S, 1.0, seed, 30)


def _startup_and_coding(slow: str, fast: str, s: int) -> None:
    """After start-up the same clock; ``slow`` (PGC) adds s units once and slower coding."""
    assert _units(slow, s, 5) == _units(fast, s, 5) == {1} and _wait(slow, s) == _wait(fast, s) == N - s
    assert _units(slow, s, 0) == {s + 1} and _units(fast, s, 0) == {1}
    prof = _profile()
    assert prof[(slow, s)] > prof[(fast, s)]


def _coding_only(fast: str, slow: str, s: int) -> None:
    """The same units and the same wait on the clock; the stored coding profile charges ``slow`` more."""
    assert _units(fast, s, 3) == _units(slow, s, 3) == {s + 1}
    assert _wait(fast, s) == _wait(slow, s) == N - s
    prof = _profile()
    assert prof[(fast, s)] < prof[(slow, s)]
    assert round(prof[(fast, s)], 3) == 0.057 and round(prof[(slow, s)], 3) == 0.121  # the reason's figures


def _pgc_waits_for_fewer(s: int, c: float, mu: float, steps: int) -> None:
    """After start-up PGC and DGD charge 1 unit; PGC waits for n - s of the same delays, DGD for all n;
    on the clock PGC's step is shorter, its start-up included, at the cloud runs' c and mu."""
    assert _units("pgc-cr", s, 3) == _units("dgd", 0, 3) == {1} and _units("pgc-cr", s, 0) == {s + 1}
    assert _wait("pgc-cr", s) == N - s < _wait("dgd", 0) == N
    prof = _profile()
    assert prof[("pgc-cr", s)] <= prof[("dgd", 0)]
    for seed in range(5):
        assert regime.clock_time_per_step("pgc", N, s, c, mu, seed, steps) < \
            regime.clock_time_per_step("dgd", N, s, c, mu, seed, steps)


def _sooner_by_clock(fast: str, slow: str, s: int, at_least: float) -> None:
    """On the clock ``fast``'s step is shorter than ``slow``'s by at least ``at_least`` (seed means, the
    cloud runs' c = 0.5 s and mu = 0.25 s, their ~270 steps), from the units and waits the schemes have."""
    clock = {"pgc-cr": "pgc", "pgc-fr": "pgc", "gc-cr": "gc", "gc-fr": "gc", "is-gc-cr": "is-gc", "dgd": "dgd"}
    for name in (fast, slow):
        sv = 0 if name == "dgd" else s
        assert {regime.units(clock[name], s, 5)} == _units(name, sv, 5)
        assert _wait(name, sv) == (N if name == "dgd" else N - s)
    t_fast = np.mean([regime.clock_time_per_step(clock[fast], N, s, UNIT_S, 0.25, k, 270) for k in range(3)])
    t_slow = np.mean([regime.clock_time_per_step(clock[slow], N, s, UNIT_S, 0.25, k, 270) for k in range(3)])
    assert t_slow / t_fast > at_least, (fast, slow, t_slow / t_fast)


def _our_model_bytes(cid: str) -> None:
    """The configured byte GPT's shapes give the reduction the row's reason quotes, above its floor."""
    import torch
    import yaml

    from distlab.demo.analysis import bytes_rows
    from distlab.demo.train import build_lm

    cfg = yaml.safe_load((ROOT / "config/config.yaml").read_text())["demo"]
    rows = bytes_rows(build_lm(cfg["model"], 256, torch.float32, 0), topks=(32,))
    bf16 = next(r for r in rows if r["encoding"] == "bf16 gradients")
    demo = next(r for r in rows if r["method"] == "DeMo" and r["encoding"].startswith("int64"))
    assert (bf16["params"], bf16["bytes"], demo["bytes"]) == (118528, 237056, 21888)
    assert bf16["bytes"] / demo["bytes"] > BY_ID[cid]["value"]


def _float64_identity(cid: str) -> None:
    """The baseline's test that simulated DGD and single-process SGD agree to 1e-12 at every step exists,
    and 1e-12 is far inside the row's margin."""
    text = (ROOT / "tests/test_baseline.py").read_text()
    body = text.split("def test_dgd_equals_single_process", 1)[1].split("\ndef ", 1)[0]
    assert 'np.testing.assert_allclose(a["loss"], b["loss"], rtol=0, atol=1e-12)' in body
    assert BY_ID[cid]["margin"] >= 1e6 * 1e-12


def _olmo_bytes(cid: str) -> None:
    """The reduction is arithmetic on OLMo-1B's shapes: 2 bytes a parameter against 12 bytes a kept
    coefficient, k per 64 x 64 tile; it clears the row's threshold."""
    from distlab.demo.analysis import bytes_rows
    from distlab.demo.olmo import olmo_on_meta

    c = BY_ID[cid]
    k = int(c["a"]["k"])
    rows = bytes_rows(olmo_on_meta("olmo-1b"), topks=(k,))
    params = rows[0]["params"]
    demo = next(r for r in rows if r["method"] == "DeMo" and r["encoding"].startswith("int64"))
    bf16 = next(r for r in rows if r["encoding"] == "bf16 gradients")
    assert demo["bytes"] == params // 4096 * k * 12
    ratio = bf16["bytes"] / demo["bytes"]
    assert ratio == pytest.approx(2 * 4096 / (12 * k))
    assert ratio > c["value"]


def _lock_step(cid: str) -> None:
    """The test of the parallel mode against the sequential one exists and compares parameters and
    losses to 1e-6, well inside the row's 0.001 margin (the bound on float rounding across processes)."""
    text = (ROOT / "tests/test_local_rc.py").read_text()
    assert "def test_parallel_computes_the_sequential_arithmetic" in text
    body = text.split("def test_parallel_computes_the_sequential_arithmetic", 1)[1].split("\ndef ", 1)[0]
    assert "(params_of(par) - params_of(seq)).abs().max() < 1e-6" in body
    assert 'pytest.approx(b["loss"], abs=1e-6)' in body
    assert BY_ID[cid]["margin"] >= 1e3 * 1e-6


CHECKS = {
    "pgc.fig3.same_loss_gc_fr": lambda: _exact_decode("pgc.fig3.same_loss_gc_fr"),
    "pgc.fig3.same_loss_gc_cr": lambda: _exact_decode("pgc.fig3.same_loss_gc_cr"),
    "pgc.fig7.gc_slowest": lambda: _fewer_units("gc-cr", "is-gc-cr", 2),
    "pgc.fig7.is_gc_faster_as_s_grows": lambda: _fewer_waited("is-gc-cr"),
    "pgc.fig7.is_sgd_faster_as_s_grows": lambda: _fewer_waited("is-sgd"),
    "pgc.fig7.is_sgd_faster_than_is_gc": lambda: _fewer_units("is-gc-cr", "is-sgd", 2),
    "pgc.fig7.pgc_faster_than_is_gc": lambda: _fewer_units("is-gc-cr", "pgc-cr", 2),
    "pgc.fig7.pgc_faster_than_is_gc_mean2": lambda: _fewer_units("is-gc-cr", "pgc-cr", 2),
    "pgc.fig7.pgc_close_to_is_sgd": lambda: _same_units("pgc-cr", "is-sgd", 2),
    "pgc.fig7.gc_slower_than_pgc": lambda: _fewer_units("gc-cr", "pgc-cr", 2),
    "pgc.fig7.gc_slower_than_is_sgd": lambda: _fewer_units("gc-cr", "is-sgd", 2),
    "pgc.fig7.is_sgd_faster_than_dgd": lambda: _waits_for_fewer("is-sgd", "dgd", 2),
    "pgc.fig7.is_sgd_faster_than_pgc": lambda: _startup_and_coding("pgc-cr", "is-sgd", 2),
    "pgc.fig7.pgc_fr_faster_than_is_gc_fr": lambda: _fewer_units("is-gc-fr", "pgc-fr", 2),
    "pgc.fig3.fr_faster_than_cr": lambda: _coding_only("gc-fr", "gc-cr", 2),
    "pgc.fig7.pgc_fr_close_to_is_sgd": lambda: _same_units("pgc-fr", "is-sgd", 2),
    "pgc.fig9.pgc_faster_per_step_than_dgd": lambda: _pgc_waits_for_fewer(2, UNIT_S, 0.25, 270),
    "baseline.dgd_equals_single": lambda: _float64_identity("baseline.dgd_equals_single"),
    "pgc.fig10.pgc_sooner_than_gc": lambda: _sooner_by_clock("pgc-cr", "gc-cr", 2, 1.8),
    "pgc.fig10.pgc_sooner_than_dgd": lambda: _sooner_by_clock("pgc-cr", "dgd", 2, 1.25),
    "pgc.fig10.pgc_sooner_than_is_gc": lambda: _sooner_by_clock("pgc-cr", "is-gc-cr", 2, 1.4),
    "pgc.fig10.pgc_fr_sooner_than_gc_fr": lambda: _sooner_by_clock("pgc-fr", "gc-fr", 2, 1.8),
    "demo.bytes.sim_vs_bf16_n2": lambda: _our_model_bytes("demo.bytes.sim_vs_bf16_n2"),
    "local.rc.modes_agree": lambda: _lock_step("local.rc.modes_agree"),
    "demo.bytes.olmo1b_k32": lambda: _olmo_bytes("demo.bytes.olmo1b_k32"),
    "demo.bytes.olmo1b_k1": lambda: _olmo_bytes("demo.bytes.olmo1b_k1"),
}


def test_every_by_construction_row_has_a_check():
    labelled = {c["id"] for c in CLAIMS if c.get("by_construction")}
    assert labelled == set(CHECKS), (sorted(labelled - set(CHECKS)), sorted(set(CHECKS) - labelled))


@pytest.mark.parametrize("cid", sorted(CHECKS))
def test_by_construction_reason_holds_in_the_code(cid):
    CHECKS[cid]()


def test_gc_steps_are_not_dgds_by_construction():
    """The stopping rule reads the mean loss of the workers received: GC-CR's n - s, DGD's n, so the
    step at which the threshold holds can differ; the row is tested, not labelled."""
    assert not BY_ID["pgc.fig9.gc_steps_equal_dgd"].get("by_construction")
    assert _wait("gc-cr", 2) == N - 2 and _wait("dgd", 0) == N
    # the losses two subsets would report differ although the decoded gradients agree
    rng = np.random.default_rng(1)
    losses = rng.normal(1.0, 0.1, size=N)
    some = [sorted(rng.permutation(N)[: N - 2].tolist()) for _ in range(5)]
    assert any(abs(losses[s].mean() - losses.mean()) > 1e-3 for s in some)


def test_a_broken_construction_is_caught():
    """The checks are not vacuous: a scheme pair in the wrong order, or a decoder weight off by one
    worker, fails them."""
    with pytest.raises(AssertionError):
        _fewer_units("is-sgd", "gc-cr", 2)
    sch = coding.make_scheme("is-gc-cr", N, 2)
    received = list(itertools.islice(range(N), N - 2))
    assert not np.allclose(sch.partition_weights(received), 1.0 / N)  # inexact decode: the check would fail


# ------------------------------------------------------------------ model predictions


def test_every_model_prediction_sweeps_the_clock_of_the_schemes_it_names():
    """A model-prediction row's sweep (table pgc_regime) names the clock's schemes, and the clock
    charges them what the training schemes compute: the boundary it states is the runs' own."""
    rows = [c for c in scorecard._normalize(CLAIMS) if c["model_prediction"]]
    assert {"pgc.regime.gc_slower_than_dgd", "pgc.regime.gc_grows_with_s", "pgc.fig7.gc_slower_than_dgd",
            "pgc.fig3.dgd_fastest"} <= {c["id"] for c in rows}
    for c in rows:
        mp = c["model_prediction"]
        assert mp["table"] == "pgc_regime" and mp["x"] == "c_over_mu", c["id"]
        for a, b in mp["links"]:
            for side in (a, b):
                assert side["scheme"] in regime.SCHEMES, (c["id"], side)
    for s in (1, 2, 3):
        assert {regime.units("gc", s, 3)} == _units("gc-cr", s, 3) == _units("gc-fr", s, 3)
        assert {regime.units("dgd", s, 3)} == _units("dgd", 0, 3)
