"""paper/'s record checked on read (distlab.scoring.paperrecord.check, in a temporary git
repository), and one source for every count: the committed paper/ and the README count the
verdicts of the one settled scorecard, paper/scorecard.csv, the same way everywhere.

How counts are read from a page, whatever the page's format: every line that starts
``**N claims:**`` (the counts line :func:`distlab.scoring.paperrecord.line` writes, as the
scorecard does) is parsed by :func:`distlab.scoring.paperrecord.parse_line`; the README's verdict
table by its own parser (scripts/snapshot.py ``parse_table``); the record by its ``verdicts``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter

import pytest

from conftest import ROOT

from distlab.scoring import paperrecord as pr

sys.path.insert(0, str(ROOT / "scripts"))
import snapshot  # noqa: E402

ENV = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
       "GIT_COMMITTER_EMAIL": "t@t"}


def _git(repo, *args):
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True, env=ENV).stdout.strip()


def _commit(repo, msg):
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", msg, "--allow-empty")
    return _git(repo, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path):
    """A repository whose paper/ records the commit it was made at."""
    repo = tmp_path / "repo"
    for d in ("src", "config", "paper", "docs"):
        (repo / d).mkdir(parents=True)
    (repo / "src/code.py").write_text("x = 1\n")
    (repo / "config/config.yaml").write_text("seeds: [0]\n")
    _git(repo, "init", "-q")
    made = _commit(repo, "code")
    (repo / "paper/record.json").write_text(json.dumps(
        {"commit": made, "dirty": False, "exit_code": 0, "config": {"files": [], "overrides": []}}))
    _commit(repo, "paper/ of the code")
    return repo, made


def _record(repo, **changes):
    path = repo / "paper/record.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def test_a_paper_of_heads_tree_says_nothing_and_a_docs_only_commit_keeps_it_so(repo):
    repo, _ = repo
    assert pr.check(repo).same and pr.banner(repo) == ""
    (repo / "docs/page.md").write_text("words\n")  # not a path that decides results
    _commit(repo, "docs")
    assert pr.check(repo).same


@pytest.mark.parametrize("path", ["src/code.py", "config/config.yaml", "data/x.csv", "workflow/r.smk", "Snakefile"])
def test_a_commit_that_changes_what_decides_results_makes_paper_another_trees(repo, path):
    repo, made = repo
    (repo / path).parent.mkdir(parents=True, exist_ok=True)
    (repo / path).write_text("changed\n")
    _commit(repo, "a change")
    c = pr.check(repo)
    top = path.split("/")[0] + ("/" if "/" in path else "")
    assert c.state == pr.OTHER and c.commit == made and top in c.why[0], c.why
    assert pr.banner(repo).startswith("**paper/ is of another code tree") and made[:10] in pr.banner(repo)


def test_a_commit_not_in_the_clone_a_missing_record_or_commit_cannot_be_checked(repo):
    repo, _ = repo
    _record(repo, commit="0" * 40)  # a shallow clone's, or another repository's
    c = pr.check(repo)
    assert c.state == pr.UNCHECKED and "not in this clone" in c.why[0]
    _record(repo, commit=None)
    assert pr.check(repo).state == pr.UNCHECKED and "no commit" in pr.banner(repo)
    (repo / "paper/record.json").unlink()
    assert pr.check(repo).state == pr.UNCHECKED and "missing" in pr.banner(repo)


def test_a_dirty_run_or_a_config_of_its_own_says_so(repo):
    repo, _ = repo
    _record(repo, dirty=True)
    assert pr.check(repo).state == pr.UNCHECKED and "uncommitted changes" in pr.banner(repo)
    sha = __import__("hashlib").sha256(b"seeds: [0]\n").hexdigest()
    _record(repo, dirty=False, config={"files": [{"path": "config/config.yaml", "sha256": sha}],
                                       "overrides": ["seeds=[1]"]})
    c = pr.check(repo)
    assert c.state == pr.OTHER and "config/config.yaml (unchanged)" in c.why[0] and "seeds=[1]" in c.why[1]
    (repo / "config/config.yaml").write_text("seeds: [2]\n")  # edited since, uncommitted
    assert "(changed since)" in pr.check(repo).why[0]


def test_a_runs_dirty_flag_counts_only_uncommitted_changes_in_what_decides_results(repo):
    """A run records ``dirty`` from the paths that decide results (the tuple paper/'s record
    compares too): a run rewriting paper/ or an edited page of docs/ leaves it false, an edit
    under src/ or config/ makes it true, whichever folder of the tree asks."""
    from distlab.results.runs import DECIDING, git_revision, uncommitted

    repo, _ = repo
    assert pr.DECIDING is DECIDING
    (repo / "docs/page.md").write_text("a page\n")
    head = _commit(repo, "docs")
    assert git_revision(repo) == {"commit": head, "dirty": False}
    (repo / "paper/record.json").write_text("{}")
    (repo / "docs/page.md").write_text("the page rewritten\n")
    assert git_revision(repo) == {"commit": head, "dirty": False}
    assert git_revision(repo / "paper") == {"commit": head, "dirty": False}
    assert uncommitted(repo) == 0  # the count make reproduce and make stability record
    for path in ("src/code.py", "config/config.yaml"):
        (repo / path).write_text((repo / path).read_text() + "# changed\n")
        assert git_revision(repo / "docs") == {"commit": head, "dirty": True}, path
        assert uncommitted(repo) == 1
        _git(repo, "checkout", "--", path)
    assert git_revision(repo)["dirty"] is False


def test_compare_snapshot_says_when_paper_is_of_another_tree(repo, capsys):
    """``distlab compare-snapshot`` opens with the record check of the paper/ it compares."""
    from distlab.scoring.compare_snapshot import record_lines

    repo, _ = repo
    assert record_lines(repo / "paper") == []
    (repo / "src/code.py").write_text("x = 2\n")
    _commit(repo, "code again")
    assert record_lines(repo / "paper")[0].startswith("**paper/ is of another code tree")


def test_the_write_up_header_is_put_once_and_refreshed(repo):
    repo, _ = repo
    page = repo / "paper/README.md"
    page.write_text("# write-up\n\nbody\n")
    (repo / "paper/scorecard.csv").write_text("id,paper,verdict\na,P1,reproduced\nb,P2,reported (not a test)\n")
    assert pr.put_header(page, repo)
    text = page.read_text()
    assert text.startswith("# write-up\n\n<!-- record -->\n**1 claims:** 1 reproduced") and text.endswith("body\n")
    assert not pr.put_header(page, repo)  # the same again: unchanged
    (repo / "src/code.py").write_text("x = 3\n")
    _commit(repo, "more code")
    assert pr.put_header(page, repo) and page.read_text().count("<!-- record -->") == 1
    assert "another code tree" in page.read_text().split("<!-- /record -->")[0]


def test_a_counts_line_reads_back_as_the_scorecard_counts_it():
    import pandas as pd

    card = pd.DataFrame({"paper": ["P1", "P1", "P2", "P2"],
                         "verdict": ["reproduced", "unstable here", "not run", "reported (not a test)"]})
    got = pr.parse_line(pr.line(card))
    assert got["claims"] == 3 and got["reproduced"] == 1 and got["unstable here"] == 1
    assert got["not run"] == 1 and got["reported"] == 1 and got["inconclusive"] == 0
    whole, per = pr.tally(card)
    assert whole == per["P1"] + per["P2"] and per["P2"]["reported (not a test)"] == 1
    # a page's citation of where the line comes from is not a count
    cited = pr.line(card.iloc[:2]) + " (settled over 3 evaluations by `make stability`; `paper/scorecard.csv`)"
    assert pr.parse_line(cited) == pr.parse_line(pr.line(card.iloc[:2]))
    assert pr.parse_line(cited)["unstable here"] == 1


# ------------------------------------------------------------------ the committed paper/ and README

def _whole_counts() -> Counter:
    return pr.counts_of_card(pr.read_card(ROOT / "paper/scorecard.csv"))


def _positive(c: Counter) -> Counter:
    return Counter({k: v for k, v in c.items() if v})


def test_the_scorecard_page_and_the_write_up_count_what_the_scorecard_csv_counts():
    whole = _positive(_whole_counts())
    for page in ("paper/scorecard.md", "paper/README.md"):
        found = pr.lines_in((ROOT / page).read_text(encoding="utf-8"))
        assert found, f"{page}: no counts line ('**N claims:** ...', distlab.scoring.paperrecord.line)"
        for c in found:
            assert _positive(c) == whole, f"{page} counts {dict(c)}, paper/scorecard.csv {dict(whole)}"


def test_each_papers_page_counts_its_rows_and_the_pages_sum_to_the_whole():
    card = pr.read_card(ROOT / "paper/scorecard.csv")
    _, per = pr.lines(card)
    total = Counter()
    for paper, expected in per.items():
        page = ROOT / "paper/scorecard" / f"{paper}.md"
        found = pr.lines_in(page.read_text(encoding="utf-8"))
        assert len(found) == 1, f"{page.name}: {len(found)} counts lines"
        assert _positive(found[0]) == _positive(pr.parse_line(expected)), f"{page.name}: {dict(found[0])}"
        total += found[0]
    assert _positive(total) == _positive(_whole_counts())


def test_the_readme_table_and_the_record_count_what_the_scorecard_csv_counts():
    whole, per = pr.tally(pr.read_card(ROOT / "paper/scorecard.csv"))
    table, _ = snapshot.parse_table((ROOT / "README.md").read_text(encoding="utf-8"))
    for paper in set(per) | set(table):
        mine = {v: per.get(paper, Counter())[v] for v in snapshot.VERDICTS}
        assert table.get(paper) == mine, f"README.md, {paper}: {table.get(paper)} against {mine}"
    rec = json.loads((ROOT / "paper/record.json").read_text())
    assert rec["verdicts"] == dict(whole)
    assert rec["claims"] + rec["reported"] == sum(whole.values())


def test_a_clones_committed_paper_is_emptied_and_the_dry_run_then_plans_every_run(tmp_path):
    """A fresh clone holds the committed paper/; Snakemake would take its pages for done and plan
    none of the runs behind them.  make reproduce's first step empties it, after which the tiny
    config's dry run plans exactly the recorded jobs (tests/expected/dryrun_tiny.txt)."""
    import shutil

    from conftest import tracked_copy
    from test_rules_unchanged import EXPECTED, dry_run

    work = tracked_copy(tmp_path / "repo")
    for f in _git(ROOT, "ls-files", "paper").split():
        (work / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / f, work / f)
    assert (work / "paper/scorecard.csv").exists()
    expected = (EXPECTED / "dryrun_tiny.txt").read_text().split("\n\n")
    tiny = ["--configfile", "tests/configs/tiny.yaml"]
    # make dryrun, the committed paper/ still there: its rules forced, the same plan
    force = snapshot.forcerun(work, work / "paper", work / "results/reproduce.json", tiny)
    assert force[0] == "--forcerun" and "scorecard" in force and "paper" in force
    assert dry_run(work, [*force, *tiny]) == expected
    assert snapshot.main(["--root", str(work), "clear"]) == 0
    assert {p.name for p in (work / "paper").iterdir()} <= set(snapshot.APART)  # measured apart: kept
    assert snapshot.forcerun(work, work / "paper", work / "results/reproduce.json", tiny) == []
    assert dry_run(work, tiny) == expected


def test_the_committed_pages_say_what_the_record_check_says_now():
    """The write-up's first lines and the README's verdict block carry the record check of the
    committed paper/ against this checkout (refreshed by `python scripts/snapshot.py blocks`)."""
    said = pr.banner(ROOT).strip()
    top = (ROOT / "paper/README.md").read_text(encoding="utf-8").split(pr.HEADER_END)[0]
    block = (ROOT / "README.md").read_text(encoding="utf-8").split(snapshot.BEGIN)[1].split(snapshot.END)[0]
    assert top.startswith("# ") and pr.HEADER_BEGIN in top[:200]
    if said:
        assert said in top and said in block, "run python scripts/snapshot.py blocks"
    else:
        assert "**paper/ is of" not in top + block and "**Whether paper/" not in top + block


def test_the_job_seconds_block_sums_each_parts_benchmarks_and_a_note_follows_the_runs_time(tmp_path):
    """``run jobs``: job-seconds per paper from the benchmark files (a file Snakemake left empty or
    cut is not counted); ``snapshot.py note`` adds a sentence the run's block shows after its time."""
    bench = tmp_path / "benchmarks"
    for rel, s in [("pgc/a.tsv", 10.0), ("pgc/sub/b.tsv", 5.0), ("demo/c.tsv", 5.0), ("data/d.tsv", 0.0)]:
        (bench / rel).parent.mkdir(parents=True, exist_ok=True)
        (bench / rel).write_text(f"s\th:m:s\n{s}\t0:00:10\n")
    (bench / "demo" / "cut.tsv").write_text("s\th:m:s\n")
    text = snapshot.jobs_block(tmp_path)
    lines = text.splitlines()
    pgc = next(ln for ln in lines if "Pipelined Gradient Coding" in ln)
    demo = next(ln for ln in lines if "DeMo" in ln)
    assert "| 2 | 15 | 75 % |" in pgc and "| 1 | 5 | 25 % |" in demo
    assert "| **all jobs** | 4 | 20 | 100 % |" in text
    assert lines.index(pgc) < lines.index(demo), "parts in the papers' order"
    with pytest.raises(snapshot.Refused):
        snapshot.jobs_block(tmp_path / "nothing")

    record = tmp_path / "reproduce.json"
    with pytest.raises(snapshot.Refused):
        snapshot.add_note(record, "no record yet")
    record.write_text(json.dumps({"commit": "abc", "start_utc": "2026-01-01T00:00:00", "wall_s": 600.0,
                                  "cores_used": 2, "exit_code": 0}))
    snapshot.add_note(record, "  resumed   after a stop ")
    assert json.loads(record.read_text())["notes"] == ["resumed after a stop."]
    (tmp_path / "record.json").write_text(record.read_text())
    assert snapshot.run_block(tmp_path).rstrip().endswith("measured). resumed after a stop.")
