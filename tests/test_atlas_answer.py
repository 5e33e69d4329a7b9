"""The atlas query's answer at real sizes: no technique is ranked without a step-efficiency ratio,
a projected time per step carries the spread of the clock's assumptions (MFU, the link's achieved
fraction), and the break-even against DDP reads as one phrase of a known shape."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from conftest import ROOT

from distlab.atlas.projection import LINK_RANGE, MFU_RANGE, ClockSettings, Pattern, step_interval, step_seconds
from distlab.atlas.query import BE_GRID, _break_even, break_even_phrase, format_ranking, rank

PACK = ROOT / "paper/atlas/query_pack.json.gz"
H100 = 989e12


@pytest.fixture(scope="module")
def shipped():
    """(recordings, atlas section) of the shipped pack."""
    from distlab.atlas.profile import apply as apply_profile
    from distlab.atlas.query import check_complete

    a = yaml.safe_load((ROOT / "config/config.yaml").read_text())["atlas"]
    return apply_profile(check_complete(a, PACK), a), a


def _rank(shipped, bw_bits, user=None, published=True, **clock):
    recs, a = shipped
    cs = ClockSettings(flops_per_s=H100, tokens=65536, dtype="bf16", **{"mfu": 0.5, **clock})
    return rank(recs, a, 1e9, 8, bw_bits / 8, 1e-3, {"model": "none"}, 1, cs, user, use_published=published)


# ------------------------------------------------------------------ no rank without steps

@pytest.mark.parametrize("bw_bits", [4e11, 1e9, 1e8])
def test_a_technique_with_no_ratio_is_never_ranked(shipped, bw_bits):
    df, info = _rank(shipped, bw_bits)
    none = df[df["basis"] == "none"]
    assert len(none) >= 5  # 4e3x outside the sizes only DDP and the published DeMo have a ratio
    assert not none["ranked"].any() and not none["tie"].any()
    assert np.isinf(none["time_s"]).all() and none["steps"].isna().all()
    ranked = df[df["ranked"]]
    assert set(ranked["basis"]) <= {"reference", "measured", "fit", "user", "published"}
    assert list(ranked.index) == list(range(len(ranked)))  # the ranked come first, then those apart
    assert (np.diff(ranked["time_s"].to_numpy()) >= 0).all()
    # each one apart names the step ratio under which it would match the leader
    lead = df.iloc[0]
    need = lead["time_s"] / (none["per_step_s"] * info["K"])
    assert none["break_even_ratio"].to_numpy() == pytest.approx(need.to_numpy())
    text = format_ranking(df, info)
    body, apart = text.split("\nnot ranked:")
    for t in none["technique"]:
        assert f" {t} " not in body.split("\n\n")[0]   # not in the ranked table
        assert f"matches {lead['technique']} if its steps/DDP <=" in apart


def test_a_ratio_given_by_the_user_ranks_a_technique_naming_its_basis(shipped):
    df, _ = _rank(shipped, 1e9, user={"diloco": 1.9})
    d = df[df.technique == "diloco"].iloc[0]
    assert d["ranked"] and d["basis"] == "user" and d["ratio_spread"] == "none: given without one"
    assert np.isfinite(d["time_s"])


# ------------------------------------------------------------------ the interval says what it rests on

DDP_PAT = Pattern("ddp", 1, [[("all_reduce", 4.0)]])


def test_an_interval_widens_with_the_mfu_range_and_the_link_range():
    P, N, lat, bw = 1e9, 8, 1e-3, 1.25e8
    exact = ClockSettings(flops_per_s=H100, mfu=0.5, tokens=65536)
    central = step_seconds(DDP_PAT, P, N, 0, exact, [lat], [bw])[0]
    assert step_interval(DDP_PAT, P, N, 0, exact, lat, bw) == pytest.approx((central, central))
    widths = []
    for lo in (0.45, 0.3, MFU_RANGE[0]):
        cs = ClockSettings(flops_per_s=H100, mfu=0.5, tokens=65536, mfu_range=(lo, 0.5))
        a, b = step_interval(DDP_PAT, P, N, 0, cs, lat, bw)
        assert a == pytest.approx(central) and b > central
        widths.append(b - a)
    assert widths == sorted(widths) and widths[0] > 0
    # the link's achieved fraction below its nominal rate widens it too
    cs = ClockSettings(flops_per_s=H100, mfu=0.5, tokens=65536, link_range=LINK_RANGE)
    a, b = step_interval(DDP_PAT, P, N, 0, cs, lat, bw)
    assert a == pytest.approx(central) and b > central


def test_the_shipped_answer_carries_the_clock_spread_and_says_when_a_ratio_has_none(shipped):
    narrow, _ = _rank(shipped, 1e9, mfu_range=(0.4, 0.4))
    wide, info = _rank(shipped, 1e9, mfu_range=MFU_RANGE, link_range=LINK_RANGE)
    for t in ("ddp", "demo"):
        n, w = narrow[narrow.technique == t].iloc[0], wide[wide.technique == t].iloc[0]
        assert n["per_step_lo_s"] == pytest.approx(n["per_step_hi_s"])       # --mfu alone: exact clock
        assert w["hi_s"] - w["lo_s"] > 0 and w["per_step_lo_s"] < w["per_step_hi_s"]
    demo = wide[wide.technique == "demo"].iloc[0]
    assert demo["basis"] == "published" and demo["ratio_spread"] == "none: a published ratio from one run"
    text = format_ranking(wide, info)
    assert "(one run)" in text and "[1, 1]" not in text
    assert "MFU 0.2..0.5" in text and "of its nominal bandwidth" in text and "PaLM" in text


# ------------------------------------------------------------------ break-even that reads

GRID_BITS = BE_GRID * 8


def _times(compute, comm_bytes):
    """Seconds per step on the grid: compute plus bytes over the link (the clock's two terms)."""
    return compute + comm_bytes / BE_GRID


@pytest.mark.parametrize("tech,phrase", [
    (_times(1.2, 1e6), "faster below"),         # more compute, less traffic than DDP
    (_times(0.8, 1e10), "faster above"),        # less compute, more traffic
    (_times(2.0, 1e12), "never faster in 8 kbit/s..80 Tbit/s"),
    (_times(0.5, 1e6), "always faster in 8 kbit/s..80 Tbit/s"),
])
def test_every_monotone_break_even_shape(tech, phrase):
    ddp = _times(1.0, 1e9)
    out = _break_even({"ddp": ddp, "x": tech})["x"]
    assert out.startswith(phrase), out
    if phrase.startswith(("faster below", "faster above")):
        # the crossing where the two clocks are equal: compute gap x bandwidth = traffic gap
        x = float(out.split()[2]) * {"kbit/s": 1e3, "Mbit/s": 1e6, "Gbit/s": 1e9, "Tbit/s": 1e12}[out.split()[3]]
        cross = 8 * abs(1e9 - (1e6 if phrase == "faster below" else 1e10)) / abs(1.0 - (1.2 if "below" in phrase
                                                                                          else 0.8))
        step = GRID_BITS[1] / GRID_BITS[0]
        assert cross / step <= x <= cross * step


def _rate(text: str) -> float:
    v, u = text.split()
    return float(v) * {"bit/s": 1, "kbit/s": 1e3, "Mbit/s": 1e6, "Gbit/s": 1e9, "Tbit/s": 1e12}[u]


def _near(text: str, bits: float) -> bool:
    """Within one grid step of ``bits`` (the phrase reads a crossing between two grid points)."""
    step = GRID_BITS[1] / GRID_BITS[0]
    return bits / step <= _rate(text) <= bits * step


def test_a_between_shape_and_several_spans_read_as_one_phrase():
    faster = (GRID_BITS > 1e6) & (GRID_BITS < 1e9)
    out = break_even_phrase(faster)
    lo, hi = out.removeprefix("faster between ").split(" and ")
    assert _near(lo, 1e6) and _near(hi, 1e9), out
    # a constructed clock faster only in the middle reads the same way
    ddp = _times(1.0, 1e9)
    tech = np.where(faster, ddp * 0.9, ddp * 1.1)
    assert _break_even({"ddp": ddp, "x": tech})["x"] == out
    two = break_even_phrase((GRID_BITS < 1e5) | (GRID_BITS > 1e12))
    below, above = two.removeprefix("faster below ").split(" and above ")
    assert _near(below, 1e5) and _near(above, 1e12), two


def test_a_technique_without_a_ratio_is_compared_at_ddps_steps_and_says_so():
    ddp = _times(1.0, 1e9)
    out = _break_even({"ddp": ddp, "x": _times(1.2, 1e6)}, per_step=frozenset({"x"}))["x"]
    assert out.startswith("at DDP's steps, faster below")


def test_a_tie_compares_the_techniques_at_the_same_mfu_and_link():
    from distlab.atlas.query import overlaps_leader

    def row(p_lo, p_hi, r=1.0, r_lo=1.0, r_hi=1.0):
        return {"ranked": True, "valid": True, "per_step_lo_s": p_lo, "per_step_hi_s": p_hi, "ratio": r,
                "ratio_lo": r_lo, "ratio_hi": r_hi, "lo_s": p_lo * r_lo, "hi_s": p_hi * r_hi}

    lead = row(0.9, 1.8)
    slower = row(1.0, 2.0)       # slower at both corners: not a tie, though the intervals overlap
    assert slower["lo_s"] <= lead["hi_s"] and not overlaps_leader(slower, lead)
    assert overlaps_leader(row(1.0, 1.7), lead)              # faster at the slow corner: the order flips
    assert overlaps_leader(row(1.0, 2.0, r_lo=0.8), lead)     # the ratio's interval reaches the leader
    assert not overlaps_leader({**row(0.5, 0.6), "ranked": False}, lead)


def test_the_shipped_answer_at_1gbit_ranks_demo_before_ddp_without_a_tie(shipped):
    df, _ = _rank(shipped, 1e9, mfu_range=MFU_RANGE, link_range=LINK_RANGE)
    ranked = df[df["ranked"]]
    assert list(ranked["technique"][:2]) == ["demo", "ddp"]
    ddp = ranked.iloc[1]
    assert ddp["lo_s"] <= ranked.iloc[0]["hi_s"] and not ddp["tie"]   # the clock's spread is common to both
