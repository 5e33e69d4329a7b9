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


# ------------------------------------------------------------------ the write-up, paper/README.md

def _claims_yaml(card: pd.DataFrame, path) -> dict[str, dict]:
    """Claims for the synthetic scorecard's rows: two headline rows a section, P1's linked to its
    Figs. 10 and 3 in that order (the page must show Fig. 3 first)."""
    import yaml

    figs = {"pgc.claim0": "pgc_fig10", "pgc.claim1": "pgc_fig3"}
    claims = []
    for _, r in card.iterrows():
        prefix, j = r["id"].split(".claim")
        c = {"id": r["id"], "paper": r["paper"], "source": "Sec. 1", "statement": r["statement"],
             "table": "t", "metric": "time_per_step", "test": "less", "a": {"m": "x"}, "b": {"m": "y"}}
        if j in ("0", "1") and prefix != "baseline":
            c |= {"headline": True, "short": f"{prefix} headline {j}", "figure": figs.get(r["id"], f"{prefix}_main")}
        claims.append(c)
    path.write_text(yaml.safe_dump({"claims": claims}, sort_keys=False))
    return {c["id"]: c for c in claims}


def _paper_tree(tmp_path):
    """paper/ with the synthetic scorecard, its claims, and figures (one with a caption beside it)."""
    from distlab.results.tables import write_table

    root = tmp_path / "paper"
    (root / "figures").mkdir(parents=True)
    (root / "tables").mkdir()
    card = _card()
    write_table(card, root / "scorecard.csv")
    claims = _claims_yaml(card, tmp_path / "claims.yaml")
    for stem in ("pgc_fig10", "pgc_fig3", "pgc_fig7", "pgc_real_vs_sim", "placement_main", "local_main",
                 "demo_main", "atlas_main", "baseline_loss"):
        (root / "figures" / f"{stem}.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    (root / "figures" / "pgc_fig3.caption.txt").write_text("Fig. 3: loss against steps, 5 seeds, 95 % t bands.\n")
    (root / "tables" / "pgc_compute.md").write_text("| a |\n|---|\n| 1 |\n")
    return root, card, claims


def test_the_write_up_is_one_short_page_of_headline_claims_and_figures(tmp_path):
    from distlab.scoring.report import write_report
    from distlab.scoring.reported import counts_line

    root, card, claims = _paper_tree(tmp_path)
    write_report(root / "README.md", root / "scorecard.csv", {"seeds": [0, 1, 2]}, tmp_path / "claims.yaml")
    text = (root / "README.md").read_text()
    assert _longest(text) <= 300 and len(text) < 15_000
    counts = [line.split(" (`")[0] for line in text.splitlines() if "claims:**" in line]
    assert counts == [counts_line(card, scorecard.VERDICTS)]  # one counts line, the scorecard's
    # the record check opens the page: this paper/ has no record, so nothing vouches for its tree
    assert text.index("**Whether paper/ is of this code tree cannot be checked**") < text.index("claims:**")
    assert "paper/record.json is missing" in text
    heads = [c for c in claims.values() if c.get("headline")]
    assert len(heads) == 10
    for c in heads:  # every headline row, linked to its figure, with its verdict
        (line,) = [x for x in text.splitlines() if f"[{c['short']}](figures/{c['figure']}.png)" in x]
        assert f"**{card.set_index('id').loc[c['id'], 'verdict']}**" in line
    assert LONG[:60] not in text  # no reasons, no long statements
    assert text.index("figures/pgc_fig3.png)\n") < text.index("figures/pgc_fig10.png)\n")  # the paper's order
    assert "*Fig. 3: loss against steps, 5 seeds, 95 % t bands.*" in text  # the caption beside the figure
    assert "`pgc.claim0` reads reproduced" in text  # Fig. 10's caption, built from its row
    assert text.count("![") == 2 + 4  # P1's two figures, one a section for the others
    assert "## The atlas" in text and "**Answer here.**" in text
    (root / "figures" / "demo_main.png").unlink()  # a figure this evaluation did not make:
    write_report(root / "README.md", root / "scorecard.csv", None, tmp_path / "claims.yaml")
    text = (root / "README.md").read_text()
    assert "[demo headline 0](P4.md)" in text and "figures/demo_main.png" not in text  # its page instead


def test_each_sections_page_holds_all_its_figures_in_the_papers_order(tmp_path):
    from distlab.scoring.report import PAGES, write_report

    root, card, _ = _paper_tree(tmp_path)
    write_report(root / "README.md", root / "scorecard.csv", None, tmp_path / "claims.yaml")
    assert {p.stem for p in root.glob("*.md")} == {"README", *PAGES}
    page = (root / "P1.md").read_text()
    shown = [line.split("(figures/")[1][:-1] for line in page.splitlines() if line.startswith("![")]
    assert shown == ["pgc_fig3.png", "pgc_fig7.png", "pgc_fig10.png", "pgc_real_vs_sim.png"]
    assert "[pgc_compute](tables/pgc_compute.md)" in page and "scorecard/P1.md" in page
    assert _longest(page) <= 300
