"""Thresholds in config/claims.yaml recomputed from the numbers their rows quote.

Every ``threshold:`` text states the source's numbers and the arithmetic that
gives the margin or constant; here every "A op B ... = C" it writes is evaluated,
and the rows whose margin or value the issue found wrong are rederived from the
quoted numbers, so a threshold edited without its arithmetic (or the reverse) fails.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from distlab.scoring import scorecard

ROOT = Path(__file__).resolve().parents[1]
CLAIMS, CONDITIONS = scorecard.load_claims_file(ROOT / "config/claims.yaml")
BY_ID = {c["id"]: c for c in CLAIMS}
NUM = r"\d[\d,]*(?:\.\d+)?"
EXPR = re.compile(rf"(?<![\w.,/-])({NUM}(?:\s*[x/*]\s*{NUM})+)\s*=\s*({NUM})\s*(%|x)?")


def _f(text: str) -> float:
    return float(text.replace(",", ""))


def _evaluate(expr: str) -> float:
    parts = re.split(r"\s*([x/*])\s*", expr)
    value = _f(parts[0])
    for op, num in zip(parts[1::2], parts[2::2]):
        value = value / _f(num) if op == "/" else value * _f(num)
    return value


def _equations():
    texts = [(c["id"], c.get("threshold") or "") for c in CLAIMS]
    texts += [(name, c.get("threshold") or "") for name, c in CONDITIONS.items()]
    for cid, text in texts:
        for m in EXPR.finditer(text):
            yield cid, m.group(0), m.group(1), m.group(2), m.group(3)


EQUATIONS = list(_equations())


def test_the_threshold_texts_carry_arithmetic():
    ids = {cid for cid, *_ in EQUATIONS}
    assert {"demo.bytes.olmo1b_k32", "demo.bytes.olmo1b_k1", "demo.loss.noninferior_n2",
            "local.rc.memory", "demo.bytes.sim_vs_bf16_n2"} <= ids


@pytest.mark.parametrize(("cid", "text", "expr", "result", "unit"), EQUATIONS,
                         ids=[f"{e[0]}:{e[1]}" for e in EQUATIONS])
def test_every_equation_in_a_threshold_is_right(cid, text, expr, result, unit):
    got = _evaluate(expr) * (100 if unit == "%" else 1)
    digits = len(result.split(".")[1]) if "." in result else 0
    # right to the printed digits (half a unit of the last one), with a hair for float noise
    assert abs(got - _f(result)) <= 0.5 * 10 ** -digits * 1.0001 + 1e-12, f"{cid}: {text} gives {got}"


def test_olmo_byte_thresholds_are_the_source_numbers_like_with_like():
    bf16_mb = 2 * 1_176_764_416 / 1e6  # the paper's DDP figure at exactly 2 bytes a parameter
    assert round(bf16_mb, 1) == 2353.5 and round(2353.5 / 2416.6, 3) == 0.974
    k32, k1 = BY_ID["demo.bytes.olmo1b_k32"], BY_ID["demo.bytes.olmo1b_k1"]
    # "~110 MB" at two significant digits admits up to 115 MB; "3.44 MB" up to 3.45
    assert abs(k32["value"] - 2353.5 / 115) < 0.01
    assert abs(k1["value"] - 2353.5 / 3.45) < 0.01
    assert "702" in k1["paper_value"] and "22.0" in k32["paper_value"]
    assert f"{k32['value']:g}x" in k32["statement"] or f"{k32['value']:.1f}x" in k32["statement"]
    assert f"{k1['value']:g}x" in k1["statement"]


def test_sim_bytes_threshold_is_what_our_shapes_allow():
    c = BY_ID["demo.bytes.sim_vs_bf16_n2"]
    assert c["value"] == math.floor(21.7 / 2) and "10.8" in c["threshold"]


def test_demo_loss_margin_against_the_papers_edge():
    c = BY_ID["demo.loss.noninferior_n2"]
    edge = (2.73 - 2.63) / 2.73
    assert c["margin"] / 1.75 < edge  # the margin is a smaller share of our loss than the paper's edge of its
    assert "1.74-1.83" in c["threshold"] and "~2.0" not in c["threshold"]


def test_relative_margins_give_the_quoted_ratios():
    # a/b > r <=> a - b > (r - 1) x |mean b|
    # 'about 1.38x': a two-sided band, the same factor (1.1) down and up, so symmetric in the log-ratio tested
    for cid in ("local.rc.throughput", "local.rc.throughput_async"):
        c = BY_ID[cid]
        low, high = c["band"]
        assert c["test"] == "band" and "margin" not in c
        assert low == pytest.approx(c["paper_value"] / 1.1, abs=5e-5) and high == pytest.approx(c["paper_value"] * 1.1)
        assert math.log(c["paper_value"]) - math.log(low) == pytest.approx(math.log(high) - math.log(c["paper_value"]),
                                                                             abs=1e-4)
    assert 1 + BY_ID["local.rc.memory"]["margin"] == pytest.approx(4 / 2)
    # 'almost three times slower': one band row 2.5 < BP/PC < 3, the allowance of rounding to 3 below it
    cost = BY_ID["local.pc.cost"]
    assert cost["test"] == "band" and cost["band"] == [3 - 0.5, 3] and cost["paper_value"] == 3
    assert "local.pc.cost_upper" not in BY_ID


def test_strict_standards_have_no_invented_margin():
    c = BY_ID["local.rc.noninferior"]
    assert c["margin"] == 0 and c["expected"] == "fails" and "strict" in c["threshold"]
    # one hypothesis (RC - BP > 0), one row: the gap and strict-equivalence rows tested it again
    assert "local.rc.gap" not in BY_ID and "local.rc.equivalent" not in BY_ID


def test_tested_at_seed_ranges_match_the_config():
    """A row's "seeds 0-N" is what the config runs: the configured seeds, plus stats.extra_seeds for
    rows comparing the settings of a claim named there (DeMo at N = 2: 5 + 5)."""
    import yaml

    cfg = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    base = len(cfg["seeds"])
    extra = cfg["stats"].get("extra_seeds") or {}
    boosted: dict[frozenset, int] = {}
    for cid, k in extra.items():
        if cid in BY_ID:
            for side in ("a", "b"):
                boosted[frozenset(BY_ID[cid][side].items())] = k
    checked = 0
    for c in CLAIMS:
        m = re.search(r"compared on the whole test split, seeds 0-(\d+)", c.get("tested_at", ""))
        if not m or "b" not in c:
            continue
        ka, kb = (boosted.get(frozenset(c[s].items()), 0) for s in ("a", "b"))
        assert int(m.group(1)) + 1 == base + min(ka, kb), c["id"]
        checked += 1
    assert checked >= 5
    assert "seeds 0-4" in BY_ID["demo.loss.noninferior_n2"]["tested_at"]


def test_a_planned_n_is_what_the_config_runs():
    """planned_n, fixed before the run, is the configured seeds plus the row's stats.extra_seeds: the
    scorecard then refuses the row only if seeds are added without changing the plan."""
    import yaml

    cfg = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    extra = cfg["stats"].get("extra_seeds") or {}
    planned = {c["id"]: c["planned_n"] for c in CLAIMS if c.get("planned_n")}
    assert {"pgc.fig9.pgc_fewer_steps_than_dgd", "demo.loss.noninferior_n2"} <= set(planned)
    for cid, n in planned.items():
        assert n == len(cfg["seeds"]) + extra.get(cid, 0), cid
    assert set(extra) <= set(planned)  # every claim given seeds has its plan
