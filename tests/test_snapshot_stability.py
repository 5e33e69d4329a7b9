"""A measured verdict that does not survive `make stability`'s reruns reads "unstable
here" in the snapshot: the settled scorecard (paper/scorecard_stable.csv, written by
distlab.scoring.stability) becomes paper/scorecard.csv with each such row's spread, the
README's table and the per-paper counts count it in a column of its own, and an `unstable`
block lists the rows.  Crafted scorecards in the fake repository of tests/test_docs.py."""

from __future__ import annotations

import csv
import json
import time

import pandas as pd
import pytest
from conftest import ROOT
from test_docs import fake_repo, run_snapshot, snapshot  # noqa: F401  (a fixture)

from distlab.scoring import paperrecord, stability


NUMERIC = ("p_", "estimate", "ci_", "threshold", "margin", "seeds_needed", "planned_n", "paper_value")


def _card(rows, ours=None):
    """One evaluation's scorecard: (id, paper, verdict) rows, each with an estimate, and every
    other column the scorecard has (the committed one's) empty."""
    card = pd.DataFrame({"id": [r[0] for r in rows], "paper": [r[1] for r in rows],
                         "statement": "s", "verdict": [r[2] for r in rows], "measured": True,
                         "ours": ours or [f"{i}.0 [0, 1]" for i in range(len(rows))], "reason": "r"})
    for col in pd.read_csv(ROOT / "paper/scorecard.csv", nrows=0).columns:
        if col not in card:
            card[col] = 3 if col == "n_seeds" else float("nan") if col.startswith(NUMERIC) else ""
    return card


# the fake repo's paper/scorecard.csv: a.one (P1) not reproduced, a.two (P1) inconclusive,
# b.one (P2) not testable here, c.new (P3) reproduced; in the 2nd of 3 evaluations a.one and
# c.new read otherwise
FIRST = [("a.one", "P1", "not reproduced"), ("a.two", "P1", "inconclusive"),
         ("b.one", "P2", "not testable here"), ("c.new", "P3", "reproduced")]
SECOND = [("a.one", "P1", "reproduced"), ("a.two", "P1", "inconclusive"),
          ("b.one", "P2", "not testable here"), ("c.new", "P3", "inconclusive")]


def _settle(repo, frames=None, settled=None):
    """paper/scorecard_stable.csv (and the comparison) as `make stability` writes them, after
    paper/scorecard.csv (``settled``: that scorecard, as the replicate judged it)."""
    frames = frames or [_card(FIRST), _card(SECOND, ours=["1.5 [1, 2]", "1.0 [0, 1]", "", "0.2 [-1, 1]"]),
                        _card(FIRST)]
    settled = stability.settle(frames) if settled is None else settled
    paper = repo / "paper"
    time.sleep(0.01)
    settled.to_csv(paper / "scorecard_stable.csv", index=False)
    (paper / "scorecard_stable.md").write_text("# settled\n\n**4 claims:** ...\n")
    (paper / "stability.md").write_text("# Stability\n")
    stability.compare_runs(frames).to_csv(paper / "stability.csv", index=False)
    # make stability then rewrites paper/'s scorecard from the settled one (stability.settle_paper)
    paperrecord.write_settled(settled, paper)
    return settled


def _page(repo):
    page = repo / "docs/local_learning.md"
    page.write_text("# P3\n\n<!-- snapshot:counts P3 -->\n<!-- /snapshot -->\n\n"
                    "<!-- snapshot:unstable all -->\n<!-- /snapshot -->\n")
    return page


def test_the_snapshot_carries_unstable_here_with_its_spread(fake_repo):
    repo, _, _ = fake_repo
    (repo / "paper/scorecard/P1.csv.record.json").write_text("{}\n")
    _settle(repo)
    page = _page(repo)
    assert run_snapshot(repo) == 0
    res = repo / "paper"
    rows = {r["id"]: r for r in csv.DictReader((res / "scorecard.csv").open())}
    assert rows["a.one"]["verdict"] == rows["c.new"]["verdict"] == "unstable here"
    assert rows["a.one"]["spread"] == ("run 1: not reproduced (0.0 [0, 1]); run 2: reproduced (1.5 [1, 2]); "
                                       "run 3: not reproduced (0.0 [0, 1])")
    assert rows["a.two"]["verdict"] == "inconclusive" and rows["a.two"]["spread"] == ""
    assert (res / "scorecard.md").read_text().startswith("# Reproduction scorecard, settled over 3 evaluations")
    assert "**4 claims:** 0 reproduced" in (res / "scorecard.md").read_text()
    assert (res / "stability.md").exists() and (res / "stability.csv").exists()
    assert (res / "scorecard_stable.csv").exists() and (res / "scorecard/P1.csv.record.json").exists()
    snap = json.loads((res / "record.json").read_text())
    assert snap["stability"]["run"] is True and snap["stability"]["evaluations"] == 3
    assert snap["stability"]["unstable"] == 2 and snap["stability"]["unstable_by_paper"] == {"P1": 1, "P3": 1}
    assert snap["verdicts"]["unstable here"] == 2
    # the README's table: a column of its own, per paper and in all
    readme = (repo / "README.md").read_text()
    table, _ = snapshot.parse_table(readme)
    assert table["P1"]["unstable here"] == 1 and table["P1"]["not reproduced"] == 0
    assert table["P3"]["unstable here"] == 1 and table["P3"]["reproduced"] == 0
    assert "| not run | unstable here | what it found |" in readme
    assert "settled over 3 evaluations by `make stability` (2 unstable here" in readme
    # the page's blocks: the section's counts and the rows with their spread
    text = page.read_text()
    assert "**1 claims:** 0 reproduced · 0 not reproduced · 0 inconclusive" in text
    assert "1 unstable here (settled over 3 evaluations" in text
    assert "| `c.new` | run 1: reproduced (3.0 [0, 1]); run 2: inconclusive (0.2 [-1, 1]); run 3: reproduced" in text
    assert "| `a.one` |" in text
    # the verdict changes compare settled verdicts
    assert "| `a.one` | reproduced | unstable here |" in (res / "verdict_changes.md").read_text()


def test_without_a_stability_run_the_column_reads_zero_and_the_blocks_say_so(fake_repo):
    repo, _, _ = fake_repo
    page = repo / "docs/local_learning.md"
    page.write_text("# P3\n\n<!-- snapshot:unstable P3 -->\n<!-- /snapshot -->\n")
    assert run_snapshot(repo) == 0
    res = repo / "paper"
    snap = json.loads((res / "record.json").read_text())
    assert snap["stability"] == {"run": False, "status": snapshot.NO_STABILITY}
    table, _ = snapshot.parse_table((repo / "README.md").read_text())
    assert all(t["unstable here"] == 0 for t in table.values())
    assert snapshot.NO_STABILITY in (repo / "README.md").read_text()
    assert f"<!-- snapshot:unstable P3 -->\n{snapshot.NO_STABILITY}.\n<!-- /snapshot -->" in page.read_text()
    assert not (res / "stability.md").exists() and "spread" not in (res / "scorecard.csv").read_text()


def test_a_reproduce_without_the_replicate_states_no_finding_and_still_assembles_paper(fake_repo):
    """make reproduce alone settles nothing: the README's findings (a settled evaluation's) are
    emptied, with the reason in the summary line, and the snapshot succeeds (it does not refuse
    the run because its rows were not yet replicated)."""
    repo, _, _ = fake_repo
    _findings(repo, {"P1": "PGC needs more steps (`a.one`).", "P3": "RC is reproduced (`c.new`)."})
    assert run_snapshot(repo) == 0
    readme = (repo / "README.md").read_text()
    _, findings = snapshot.parse_table(readme)
    assert findings and not any(findings.values())
    assert snapshot.NO_FINDINGS in readme and "(`a.one`)" not in readme
    assert (repo / "paper/record.json").exists()
    # the write-up's top says it is of one evaluation, once, and a rerun of the blocks changes nothing
    page = repo / "paper/README.md"
    top = page.read_text()
    assert top.count("**Not settled.**") == 1 and top.index("<!-- /record -->") < top.index("**Not settled.**")
    assert snapshot.main(["--root", str(repo), "blocks"]) == 0 and page.read_text() == top


def test_a_settled_write_up_says_so_with_its_counts(fake_repo):
    repo, _, _ = fake_repo
    _replicated(repo)
    assert run_snapshot(repo) == 0
    top = (repo / "paper/README.md").read_text()
    assert "**Not settled.**" not in top
    assert "**Settled.** Measured verdicts agree over 2 evaluations or read *unstable here* (1 of them); trained " \
           "verdicts replicated on another seed block under another kernel set: 2 held, 1 did not" in top


def test_a_stability_run_older_than_the_reproduce_run_or_of_other_claims_is_left_out(fake_repo):
    """Another run's settled scorecard: the record says it was left out, and its files leave paper/."""
    repo, _, _ = fake_repo
    _settle(repo)
    stable = repo / "paper/scorecard_stable.csv"
    rec = json.loads((repo / "results/reproduce.json").read_text())
    (repo / "results/reproduce.json").write_text(json.dumps({**rec, "start_utc": "2100-01-01T00:00:00Z"}))
    assert run_snapshot(repo) == 0
    snap = json.loads((repo / "paper/record.json").read_text())
    assert snap["stability"]["run"] is False and "before make reproduce started" in snap["stability"]["left_out"]
    assert not stable.exists() and not (repo / "paper/stability.md").exists()
    (repo / "results/reproduce.json").write_text(json.dumps(rec))
    _settle(repo)
    assert run_snapshot(repo, "--without-stability") == 0
    snap = json.loads((repo / "paper/record.json").read_text())
    assert snap["stability"]["run"] is False and snap["stability"]["left_out"] == "--without-stability"
    _settle(repo, [_card(FIRST[:3]), _card(SECOND[:3]), _card(FIRST[:3])])
    paperrecord.write_settled(stability.settle([_card(FIRST)] * 2), repo / "paper")  # the whole card again
    assert run_snapshot(repo) == 0
    assert "grades 3 claims, paper/scorecard.csv 4" in json.loads((repo / "paper/record.json").read_text())[
        "stability"]["left_out"]


def test_the_settled_paper_pages_keep_each_claims_reason(fake_repo):
    """`make stability` rewrites a paper's page from the settled scorecard as the `paper` rule
    writes it: below the compact table, each claim with its reason in full (an unstable row's
    spread among them), and no line of the page over 300 characters."""
    repo, _, _ = fake_repo
    frames = [_card(FIRST), _card(SECOND, ours=["1.5 [1, 2]", "1.0 [0, 1]", "", "0.2 [-1, 1]"]), _card(FIRST)]
    for f in frames:
        f["reason"] = [f"because {i} " + "word " * 60 for i in f["id"]]
    _settle(repo, frames)
    page = (repo / "paper/scorecard/P1.md").read_text()
    head, _, details = page.partition("## Each claim")
    assert details, "the settled P1 page has no per-claim details"
    for cid in ("a.one", "a.two"):
        assert f"**`{cid}`" in details
        assert f"because {cid}" in " ".join(details.split()) and f"because {cid}" not in head
    assert "run 2: reproduced" in " ".join(details.split())  # a.one is unstable: its spread is its reason
    assert max(len(line) for line in page.splitlines()) <= 300


def test_make_stabilitys_record_names_its_run_and_commit(fake_repo):
    repo, _, head = fake_repo
    _settle(repo)
    assert run_snapshot(repo, "--stability-commit", head, "--stability-start", "2000") == 0
    by = json.loads((repo / "paper/record.json").read_text())["stability"]["settled_by"]
    assert by["commit"] == head and by["dirty"] is False and by["start_utc"] == "1970-01-01T00:33:20Z"


def test_the_readme_table_is_read_by_its_header_an_older_table_has_no_unstable_column():
    old = (snapshot.BEGIN + " -->\n| paper | reproduced | not reproduced | inconclusive | not testable here "
           "| by construction | not run | what it found |\n|---|\n"
           "| [P4 DeMo](docs/demo.md) | 1 | 0 | 3 | 5 | 3 | 2 | words |\n" + snapshot.END)
    table, findings = snapshot.parse_table(old)
    assert table["P4"] == {"reproduced": 1, "not reproduced": 0, "inconclusive": 3, "not testable here": 5,
                           "by construction": 3, "not run": 2, "unstable here": 0}
    assert findings["P4"] == "words"
    card = {"P4": snapshot.Counter({"reproduced": 1, "unstable here": 2})}
    new = snapshot.BEGIN + " -->\n" + snapshot.verdict_table(card, findings) + "\n" + snapshot.END
    assert snapshot.parse_table(new)[0]["P4"]["unstable here"] == 2 and snapshot.parse_table(new)[1]["P4"] == "words"


@pytest.mark.parametrize("reason,spread", [
    ("unstable here: the verdict is not the same in 3 evaluations of this commit (run 1: reproduced (1); "
     "run 2: inconclusive (2); run 3: reproduced (1)); first run's reason: r",
     "run 1: reproduced (1); run 2: inconclusive (2); run 3: reproduced (1)"),
    ("r", ""),
])
def test_an_older_settled_card_without_the_spread_column_has_it_read_from_the_reason(reason, spread):
    assert snapshot.spread_of({"verdict": "unstable here", "reason": reason}) == spread
    assert snapshot.spread_of({"verdict": "reproduced", "reason": reason}) == ""


def test_a_scorecard_grading_a_vanished_run_never_reaches_the_snapshot(fake_repo, capsys):
    """The scorecard's record names the runs it graded; one deleted since, the snapshot
    refuses in one line (no override), and so it does for a scorecard edited after its rule."""
    from distlab.results.tables import write_table_record

    repo, _, _ = fake_repo
    runs = [repo / f"results/pgc/seed{s}" for s in (0, 1)]
    for r in runs:
        r.mkdir(parents=True)
        (r / "manifest.json").write_text("{}")
    card = repo / "paper/scorecard.csv"
    write_table_record(card, pd.read_csv(card), runs)
    assert run_snapshot(repo) == 0
    (runs[1] / "manifest.json").unlink()
    assert run_snapshot(repo) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{card}: 1 of the 2 runs it summarises are gone (first: {runs[1]}" in err[0]
    (runs[1] / "manifest.json").write_text("{}")
    card.write_text(card.read_text().replace("not reproduced", "reproduced"))
    assert run_snapshot(repo) == 2
    assert "not the table its rule wrote" in capsys.readouterr().err


def _trained(rows, estimates):
    """One evaluation's scorecard of trained rows (losses, a one-sided test at 0)."""
    card = _card(rows, ours=[f"{e} [{e - 0.5}, {e + 0.5}]" for e in estimates])
    return card.assign(measured=False, metric="final_test_loss", test="less", margin=float("nan"), n_seeds=5,
                       planned_n=float("nan"), estimate=estimates, ci_low=[e - 0.5 for e in estimates],
                       ci_high=[e + 0.5 for e in estimates])


def _replicated(repo):
    """paper/scorecard_stable.csv with the replicate's verdicts: a.one (not reproduced) and a.two
    (inconclusive, within one half-width of deciding) held, c.new (reproduced) came out
    inconclusive on the other seed block; b.one (no estimate) was not replicated."""
    from distlab.scoring import replicate

    first = _trained(FIRST, [1.0, 0.2, float("nan"), -1.0])
    settled = stability.settle([first, first])
    again = _trained([FIRST[0], FIRST[1], FIRST[3][:2] + ("inconclusive",)], [0.9, 0.1, -0.3])
    judged = replicate.judge(settled, again, list(replicate.chosen(settled)["id"]), "seeds shifted by 1000")
    _settle(repo, [first, first], settled=judged)
    return judged


def _findings(repo, cells: dict[str, str]):
    """The README table's last column: ``cells`` by paper label prefix, every other one empty."""
    readme = repo / "README.md"
    lines = []
    for line in readme.read_text().splitlines():
        if line.startswith("| ["):
            parts = line.split("|")
            label = parts[1].strip()
            parts[-2] = " " + next((t for k, t in cells.items() if label.startswith(f"[{k} ")), "") + " "
            line = "|".join(parts)
        lines.append(line)
    readme.write_text("\n".join(lines) + "\n")


def test_the_readme_states_no_finding_whose_row_did_not_hold_in_the_replicate(fake_repo, capsys):
    repo, _, _ = fake_repo
    judged = _replicated(repo).set_index("id")
    assert judged.at["c.new", "verdict"] == "unstable here" and judged.at["a.one", "replicated"].startswith("held")
    _findings(repo, {"P1": "PGC needs more steps (`a.one`).", "P3": "RC is reproduced (`c.new`)."})
    assert run_snapshot(repo) == 2
    err = capsys.readouterr().err
    assert "`c.new`, which reads unstable here" in err and "replicate (seeds shifted by 1000)" in err
    assert "`a.one`" not in err
    _findings(repo, {"P1": "PGC needs more steps (`a.one`).", "P3": "Not stated."})
    assert run_snapshot(repo) == 2
    assert "P3: the finding cites no scorecard row" in capsys.readouterr().err
    _findings(repo, {"P1": "PGC needs more steps (`a.one`)."})
    page = repo / "docs/pgc.md"
    page.write_text("<!-- snapshot:finding a.one -->\n<!-- /snapshot -->\n\n"
                    "<!-- snapshot:unstable all -->\n<!-- /snapshot -->\n")
    assert run_snapshot(repo) == 0
    assert "| `c.new` | comparison: reproduced (-1.0 [-1.5, -0.5], n = 5); replicate (seeds shifted by 1000): " \
           "inconclusive (-0.3 [-0.8, 0.2], n = 5) |" in page.read_text()
    assert "(1 unstable here, settled over 2 evaluations and the replicate by `make stability`" in page.read_text()
    readme = (repo / "README.md").read_text()
    assert "2 held, 1 did not (unstable here); the findings cite only rows that held" in readme
    assert "`a.one`: 1.0 [0.5, 1.5], not reproduced (held: not reproduced (0.9 [0.4, 1.4], n = 5)" in page.read_text()
    snap = json.loads((repo / "paper/record.json").read_text())
    assert snap["stability"]["replicate"] == {"run": True, "held": 2, "did_not_hold": 1}
    assert snap["machine"]["kind"]["torch"]
    page.write_text("<!-- snapshot:finding c.new -->\n<!-- /snapshot -->\n")
    assert run_snapshot(repo) == 2
    assert "finding c.new: not stated: it reads unstable here" in capsys.readouterr().err


def test_a_reported_finding_that_did_not_hold_in_the_replicate_is_not_stated():
    row = {"id": "demo.ablation.x", "verdict": "reported (not a test)", "metric": "final_test_loss",
           "measured": "False", "test": "greater", "margin": "", "estimate": "0.058", "ci_low": "0.012",
           "ci_high": "0.105", "n_seeds": "5", "planned_n": "",
           "replicated": "did not hold: reported (not a test) (0.023 [-0.010, 0.057], n = 5) on x",
           "spread": "comparison: 0.058 [0.012, 0.105]; replicate (x): 0.023 [-0.010, 0.057]"}
    assert snapshot.not_held(row) == ("did not hold in the replicate (comparison: 0.058 [0.012, 0.105]; "
                                      "replicate (x): 0.023 [-0.010, 0.057])")
    with pytest.raises(snapshot.Refused, match="P4: the finding cites `demo.ablation.x`, which did not hold"):
        snapshot.check_findings({"P4": "The per-index mean ends higher (`demo.ablation.x`)."}, [row], True)
    assert snapshot.not_held({**row, "replicated": "held: ...", "spread": ""}) is None
