"""What a reader sees first: the measured PGC-against-GC claim graded from the real runs'
table, the compact scorecard Markdown, and the one-page write-up paper/README.md."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from conftest import ROOT
from distlab.scoring import scorecard
from distlab.scoring.claims import load_claims

STATS = {"alpha": 0.05, "bootstrap": {"n_resamples": 2000, "seed": 0, "confidence": 0.95}}
REAL_CLAIM = "pgc.real.pgc_faster_than_gc_measured"


def _real_claims() -> list[dict]:
    """P1's claims on the real gloo runs, as config/claims.yaml states them."""
    return [c for c in load_claims(ROOT / "config/claims.yaml") if c["table"] == "pgc_real"]


def _real_table(pgc_minus_gc: float, noise: float, seeds: int = 3) -> pd.DataFrame:
    """A real-runs summary (one row a scheme and seed): GC-CR's step time per seed, PGC-CR's
    ``pgc_minus_gc`` away from it with per-seed ``noise``, DGD slower than both."""
    rng = np.random.default_rng(7)
    rows = []
    for seed in range(seeds):
        gc = 0.08 + rng.normal(0, 0.005)
        for scheme, t in (("gc-cr", gc), ("pgc-cr", gc + pgc_minus_gc + rng.normal(0, noise)),
                          ("dgd", gc + 0.04), ("is-sgd", gc - 0.001)):
            rows.append({"scheme": scheme, "backend": "gloo", "seed": seed, "s": 1, "time_per_step": t})
    return pd.DataFrame(rows)


def _graded(table: pd.DataFrame) -> pd.Series:
    df = scorecard.evaluate_claims(_real_claims(), {"pgc_real": table}, STATS).set_index("id")
    return df.loc[REAL_CLAIM]


def test_the_measured_pgc_against_gc_claim_is_a_headline_p1_test_on_the_real_runs():
    (c,) = [c for c in _real_claims() if c["id"] == REAL_CLAIM]
    assert (c["paper"], c["test"], c["metric"], c["measured"]) == ("P1", "less", "time_per_step", True)
    assert c["a"] == {"scheme": "pgc-cr", "backend": "gloo"} and c["b"] == {"scheme": "gc-cr", "backend": "gloo"}
    assert c["headline"] is True and "stragglers" in c["statement"] and "ours" in c["threshold"]


@pytest.mark.parametrize("diff, noise, verdict", [
    (-0.02, 0.0005, "reproduced"),        # PGC clearly faster on every seed
    (+0.02, 0.0005, "not reproduced"),    # PGC clearly slower: the interval excludes a gain
    (-0.0007, 0.004, "inconclusive"),     # a hair apart, as on the real runs: undecided
])
def test_the_measured_pgc_against_gc_claim_reads_its_verdict_from_the_real_runs(diff, noise, verdict):
    row = _graded(_real_table(diff, noise))
    assert row["verdict"] == verdict, row["reason"]
    assert row["n_seeds"] == 3 and bool(row["measured"]) is True
    assert row["ours"]  # the paired difference and its interval are shown
    # in P1's Holm family with the DGD row: its adjusted p is at least its raw p
    assert row["p_holm"] >= row["p_value"]


# ------------------------------------------------------------------ the scorecard's Markdown

LONG = " ".join(["a long reason that a table cell would stretch the page with"] * 40)


def _card() -> pd.DataFrame:
    """A synthetic scorecard: every paper's rows, long statements and reasons, one chain."""
    rows = []
    papers = [("foundation", "baseline"), ("P1", "pgc"), ("P2", "placement"), ("P3", "local"),
              ("P4", "demo"), ("atlas", "atlas")]
    verdicts = ["reproduced", "not reproduced", "inconclusive", "not testable here", "by construction"]
    for k, (paper, prefix) in enumerate(papers):
        for j, v in enumerate(verdicts):
            rows.append({c: np.nan for c in scorecard.COLUMNS} | {
                "id": f"{prefix}.claim{j}", "paper": paper, "statement": f"{prefix} claim {j}: " + LONG[:300],
                "source": "Sec. 6.2, Fig. 7", "metric": "time_per_step", "test": "less", "expected": "holds",
                "ours": "-0.0397 [-0.0534, -0.0260] → -0.290 [-0.303, -0.276]" if j == 4 else "-0.0397 [-0.0534, -0.0260]",
                "n_seeds": 3, "p_value": 0.003, "p_holm": 0.02, "measured": j == 0, "verdict": v,
                "reason": LONG, "preconditions": LONG[:500] if j == 3 else "", "threshold": LONG[:400]})
    return pd.DataFrame(rows, columns=list(scorecard.COLUMNS)).astype({"n_seeds": int})


def _conditions() -> pd.DataFrame:
    return pd.DataFrame([{"name": "pgc.floor", "kind": "floor", "statement": LONG, "measured": LONG[:300],
                          "status": "met"}])


def _longest(text: str) -> int:
    return max(len(line) for line in text.splitlines())


def test_the_scorecard_markdown_is_compact_unpadded_and_short_lined(tmp_path):
    card = _card()
    scorecard.write_scorecard(card, tmp_path / "s.md", tmp_path / "s.csv", conditions=_conditions())
    text = (tmp_path / "s.md").read_text()
    assert _longest(text) <= 300
    assert "  " not in text.replace("\n\n", "\n")  # no padding: no run of spaces anywhere
    assert "| id | verdict | ours (95 % t CI) | statement |" in text
    assert LONG not in text and LONG[:300] not in text  # reasons and long statements: the CSV
    table = [line for line in text.splitlines() if line.startswith("| `")]
    assert len(table) == len(card)
    for line, (_, r) in zip(table, card.iterrows()):
        cells = line.strip("| ").split(" | ")
        assert cells[:3] == [f"`{r['id']}`", r["verdict"], r["ours"]]
        assert len(cells[3].removesuffix(" [measured]")) <= 120 and cells[3].endswith(("…", "… [measured]"))
    assert pd.read_csv(tmp_path / "s.csv")["reason"].tolist() == [LONG] * len(card)  # in full


def test_a_papers_page_keeps_every_long_cell_wrapped_in_a_list(tmp_path):
    card = _card()
    scorecard.write_scorecard(card, tmp_path / "P1.md", tmp_path / "P1.csv", conditions=_conditions(),
                              details=True)
    text = (tmp_path / "P1.md").read_text()
    assert _longest(text) <= 300
    words = " ".join(text.split())
    assert words.count(f"why: {LONG}") == len(card)  # every reason in full, wrapped
    assert "## Preconditions and negative controls" in text and f"**pgc.floor** (floor): met. {LONG}" in words
