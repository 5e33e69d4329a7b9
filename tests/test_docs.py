"""What a reader sees: the snapshot in paper/ is the current claims' and of an
ancestor of HEAD, the README's verdict table is the snapshot's counts, the pages name
only paths that exist, quote no hand-typed number of ours (the README stays one short page; the
docs pages are split by purpose, not trimmed to a length); and
paper/ assembled by scripts/snapshot.py (the end of make reproduce) in a fake repository."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
import snapshot  # noqa: E402

RESULTS = ROOT / "paper"
README = (ROOT / "README.md").read_text(encoding="utf-8")
PAGES = sorted((ROOT / "docs").glob("*.md"))
# what the workflow writes: named in the docs, never versioned
OUTPUTS = ("results/", "logs/", "benchmarks/", "paper/", ".venv/", ".snakemake/", "report.html")


def git(*args, cwd=ROOT):
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)


def tracked_files() -> set[str]:
    return set(git("ls-files").stdout.split())


def snapshot_verdicts() -> dict[str, tuple[str, str]]:
    return snapshot.read_verdicts(RESULTS / "scorecard.csv")


# ------------------------------------------------------------------ the snapshot itself

def claims_not_in_the_snapshot() -> set[str]:
    """The claim ids config/claims.yaml has now and had not at the snapshot's commit: claims
    added after that evaluation, which its scorecard cannot hold (listed, not exempted by name)."""
    import yaml

    rec = json.loads((RESULTS / "record.json").read_text())
    then = git("show", f"{rec['commit']}:config/claims.yaml")
    assert then.returncode == 0, f"config/claims.yaml at the snapshot's commit {rec['commit'][:10]}: {then.stderr}"
    data = yaml.safe_load(then.stdout)
    old = {c["id"] for c in (data.get("claims") if isinstance(data, dict) else data) or []}
    from distlab.scoring.scorecard import load_claims

    return {c["id"] for c in load_claims(ROOT / "config/claims.yaml")} - old


def test_the_snapshots_claim_ids_equal_the_claims():
    """Fails until `make reproduce` ran after a claim was removed or renamed in
    config/claims.yaml; a claim added after paper/'s commit is listed as not in this
    evaluation (its claims.yaml then had no such id) until the next one."""
    from distlab.scoring.scorecard import load_claims

    ours = {c["id"] for c in load_claims(ROOT / "config/claims.yaml")}
    snap = set(snapshot_verdicts())
    not_in_snapshot = claims_not_in_the_snapshot()
    assert snap == ours - not_in_snapshot, (
        f"paper/ is stale: missing {sorted(ours - snap - not_in_snapshot)[:10]}, "
        f"gone {sorted(snap - ours)[:10]}; run make reproduce "
        f"(not in this evaluation, added after its commit: {sorted(not_in_snapshot)})")


def test_the_snapshots_commit_is_recorded_and_an_ancestor_of_head():
    rec = json.loads((RESULTS / "record.json").read_text())
    assert re.fullmatch(r"[0-9a-f]{40}", rec["commit"]), rec["commit"]
    r = git("merge-base", "--is-ancestor", rec["commit"], "HEAD")
    assert r.returncode == 0, f"snapshot commit {rec['commit'][:10]} is not an ancestor of HEAD"
    # rows reported beside a test (distlab.scoring.reported) are in the scorecard, not among the claims
    assert rec["claims"] + rec.get("reported", 0) == len(snapshot_verdicts())
    assert rec["verdicts"] == dict(Counter(v for _, v in snapshot_verdicts().values()))


def test_the_readmes_verdict_table_equals_the_snapshots_counts():
    table, findings = snapshot.parse_table(README)
    card = snapshot.counts(snapshot_verdicts())
    rec = json.loads((RESULTS / "record.json").read_text())
    # a finding cites only rows that held: with no replicate behind paper/, none is stated, and the line says why
    replicated = (((rec.get("stability") or {}).get("replicate")) or {}).get("run")
    assert set(table) == set(snapshot.PAPERS)
    for paper, got in table.items():
        assert got == {v: card[paper][v] for v in snapshot.VERDICTS}, paper
        if replicated:
            assert findings[paper], f"README: no 'what it found' for {paper}"
        else:
            assert not findings[paper], f"README: a finding for {paper}, but no row of paper/ is replicated"
    assert (snapshot.NO_FINDINGS in README) is not bool(replicated)
    assert f"`{rec['commit'][:10]}`" in README.split(snapshot.BEGIN, 1)[1].split(snapshot.END)[0]


def test_every_figure_the_readme_shows_is_in_the_snapshot():
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", README)
    assert len(images) >= 3
    for img in images:
        assert img.startswith("paper/figures/") and (ROOT / img).is_file(), img


# ------------------------------------------------------------------ the pages

def top_level() -> set[str]:
    return {f.split("/", 1)[0] for f in tracked_files()} | {p.rstrip("/").split("/")[0] for p in OUTPUTS}


def named_paths(page: Path, at: Path | None = None) -> set[str]:
    """Repository paths a page names: backticked ones that start at a top-level entry of
    the repository (not `owner/repo` of a source, a claim id or a run name), and its links
    (relative to the page, or to ``at``, the place in the repository it stands for)."""
    text = page.read_text(encoding="utf-8")
    text = re.sub(r"```.*?```", "", text, flags=re.S)  # command lines name outputs and options
    out = set()
    roots = top_level()
    for p in re.findall(r"`([A-Za-z0-9_.-]+/[A-Za-z0-9_./-]*)`", text):
        if p.split("/", 1)[0] in roots:
            out.add(p)
    for link in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        if "://" in link or link.startswith("mailto:"):
            continue
        out.add(os.path.normpath(os.path.relpath((at or page).parent / link, ROOT)))
    return out


def is_named_in_repo(path: str, files: set[str]) -> bool:
    path = path.rstrip("/")
    return path in files or any(f.startswith(path + "/") for f in files)


@pytest.mark.parametrize("page", [ROOT / "README.md", *PAGES], ids=lambda p: p.name)
def test_every_path_a_page_names_is_in_the_repository(page):
    files = tracked_files()
    missing = []
    for p in sorted(named_paths(page)):
        if p.startswith(OUTPUTS) or any(ch in p for ch in "*<>{}") or p.startswith(("http", "torch.")):
            continue
        if not is_named_in_repo(p, files):
            missing.append(p)
    assert not missing, f"{page.name} names paths not in git ls-files: {missing}"


def docs_index(readme: str) -> str:
    """The README's index of the docs pages: its "Where the rest lives" section."""
    return readme.split("\n## Where the rest lives\n", 1)[1].split("\n## ", 1)[0]


def test_the_readmes_index_links_every_docs_page():
    """A page no index names is a page no reader finds: each docs/*.md is linked from the
    README's index (the links resolve: the path test above)."""
    linked = {os.path.normpath(link) for link in re.findall(r"\]\(([^)#\s]+)", docs_index(README))}
    missing = [p.relative_to(ROOT).as_posix() for p in PAGES if p.relative_to(ROOT).as_posix() not in linked]
    assert not missing, f"README's docs index does not link {missing}"


def test_the_index_check_sees_an_unlinked_page():
    readme = "# x\n\n## Where the rest lives\n\n| a | [pgc](docs/pgc.md) |\n\n## Tests\n[demo](docs/demo.md)\n"
    index = docs_index(readme)
    assert "docs/pgc.md" in index and "docs/demo.md" not in index


NUMBER = re.compile(r"(?<![\w.-])\d+(?:[.,]\d+)*(?:\s?(?:%|×|ms|s|min|nats|GB|MB))?(?![\w×]|[.,]\d)")


def outside_generated(text: str) -> str:
    """The text less what scripts/snapshot.py writes: the README's verdict table and the pages'
    generated blocks."""
    if snapshot.BEGIN in text and snapshot.END in text:
        text = text.split(snapshot.BEGIN)[0] + text.split(snapshot.END)[-1]
    return snapshot.BLOCK.sub("", text)


def quoted_numbers(text: str) -> list[str]:
    """Numbers in prose: outside the generated table and blocks, code, paths, links and
    version strings; shapes (32×32) and names (P1, 24-layer, 2-core) are not results."""
    text = outside_generated(text)
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    text = re.sub(r"`[^`]*`", "", text)
    text = re.sub(r"\]\([^)]*\)", "]", text)
    text = re.sub(r"\d+×\d+|\d+(?:\.\d+){2,}|\b\d+-(?:core|layer|node|GPU)\b", "", text)
    return [m.group(0) for m in NUMBER.finditer(text)]


def value(number: str) -> float:
    return float(re.sub(r"[^\d.]", "", number.replace(",", "")))


def config_values() -> set[float]:
    """Every number config/*.yaml holds: the settings, and the papers' figures each claim
    names (`paper_value`, its `source`, its threshold's arithmetic): not results of ours."""
    text = "\n".join(p.read_text(encoding="utf-8") for p in sorted((ROOT / "config").glob("*.yaml")))
    return {value(n) for n in re.findall(r"(?<![\w.])\d+(?:,\d{3})*(?:\.\d+)?", text)}


def results_sections(text: str) -> str:
    """The page's "Results" sections (a `## Results...` heading to the next `## `)."""
    parts = re.split(r"(?m)^(?=## )", text)
    return "\n".join(p for p in parts if re.match(r"## Results\b", p))


# a sentence that reports a run of ours: a number with a unit beside words of our runs
OURS = re.compile(r"\b(?:measured|took|takes|on this (?:machine|CPU|\S+ machine)|at commit|our runs? "
                  r"(?:gave|show|reach)|we (?:got|measured|found))\b", re.I)
WITH_UNIT = re.compile(r"\d\s?(?:%|×|ms|s|min|nats|GB|MB)$")


def stray_results(text: str, allowed: set[float]) -> list[str]:
    """Numbers of ours a page quotes outside the generated blocks: any number of its
    Results sections, and any number with a unit in a sentence that reports a run of ours,
    unless config/*.yaml holds it (a setting or a paper's figure)."""
    stray = [n for n in quoted_numbers(results_sections(text)) if value(n) not in allowed]
    prose = re.sub(r"```.*?```", "", outside_generated(text), flags=re.S)
    for sentence in re.split(r"(?<=[.;:])\s+(?=[A-Z(*`])|\n\s*\n|\n\s*[*-] ", prose):
        if OURS.search(sentence):
            stray += [n for n in quoted_numbers(sentence)
                      if WITH_UNIT.search(n) and value(n) not in allowed]
    return stray


def test_the_readme_quotes_no_number_of_ours_outside_the_generated_table():
    found = [n for n in quoted_numbers(README) if not re.fullmatch(r"[0-9]", n)]
    assert not found, f"README quotes numbers outside the generated table: {found}"


# every page but the changelog (dated history, not results): a page added later is checked too
RESULT_PAGES = ["README.md", *(p.relative_to(ROOT).as_posix() for p in PAGES if p.name != "CHANGELOG.md")]


@pytest.mark.parametrize("page", [ROOT / p for p in RESULT_PAGES], ids=lambda p: p.name)
def test_no_page_quotes_a_result_of_ours_outside_a_generated_block(page):
    """A result of ours sits in a block scripts/snapshot.py writes (`<!-- snapshot:KIND ARG -->`)
    or is a link to the snapshot; the papers' figures and the settings are in config/*.yaml."""
    stray = stray_results(page.read_text(encoding="utf-8"), config_values())
    assert not stray, f"{page.name} quotes numbers of ours by hand: {stray}"


@pytest.mark.parametrize("page", [ROOT / "README.md", *PAGES], ids=lambda p: p.name)
def test_every_generated_block_is_the_snapshots(page):
    """The blocks hold what scripts/snapshot.py writes from paper/ now: a page edited by
    hand, or a snapshot regenerated without them, fails here."""
    text = page.read_text(encoding="utf-8")
    assert snapshot.fill_blocks(text, RESULTS) == text, (
        f"{page.name}: a generated block differs from paper/; run python scripts/snapshot.py blocks")


def test_the_number_check_sees_a_hand_typed_result():
    text = "intro\n<!-- verdicts:begin -->\n| 12 |\n<!-- verdicts:end -->\nDeMo is 1.8× faster, 414 s."
    assert quoted_numbers(text) == ["1.8×", "414 s"]
    assert quoted_numbers("ImageNet 32×32 and CIFAR-10, torch 2.14.1, a 2-core CPU, `results/x1.5`") == []
    allowed = {4.0, 0.05}
    page = ("# P\n\n## Decisions\n\nThe paper's lr is 4e-4 over 4 workers.  The run took 17.4 s "
            "on this machine.\n\n## Results\n\n<!-- snapshot:counts P1 -->\n**9 claims:** 3 reproduced\n"
            "<!-- /snapshot -->\nDeMo is 1.8× faster; the margin is 0.05.\n\n## At the paper's scale\n\n"
            "Eight nodes, 64 GPUs.\n")
    assert stray_results(page, allowed) == ["1.8×", "17.4 s"]
    assert stray_results(page.replace("17.4 s", "4 s").replace("1.8×", "0.05"), allowed) == []


def test_make_snapshot_rewrites_the_generated_blocks(tmp_path):
    dest = tmp_path / "results"
    (dest / "scorecard").mkdir(parents=True)
    (dest / "tables").mkdir()
    (dest / "scorecard/P1.md").write_text("# P1\n\n**3 claims:** 2 reproduced · 1 inconclusive\n")
    (dest / "tables/t.md").write_text("| a |\n|--:|\n| 7 |\n")
    page = ("x\n<!-- snapshot:counts P1 -->\nold\n<!-- /snapshot -->\ny\n"
            "<!-- snapshot:table t -->\n<!-- /snapshot -->\n")
    got = snapshot.fill_blocks(page, dest)
    assert "**3 claims:** 2 reproduced · 1 inconclusive (`paper/scorecard/P1.md`)\n" in got
    assert "old" not in got and "| 7 |\n\n(`paper/tables/t.md`)\n<!-- /snapshot -->" in got
    assert snapshot.fill_blocks(got, dest) == got and quoted_numbers(got) == []
    with pytest.raises(snapshot.Refused, match="missing"):
        snapshot.fill_blocks("<!-- snapshot:table nothere -->\n<!-- /snapshot -->", dest)


def test_the_path_check_sees_a_missing_file(tmp_path):
    page = tmp_path / "zz-not-a-page.md"  # read as if it stood in docs/, without writing there
    page.write_text("See `src/distlab/nothere.py`, [x](../config/nothere.yaml), `bloc97/DeMo`, "
                    "`config/claims.yaml` and [y](pgc.md).")
    got = named_paths(page, at=ROOT / "docs" / page.name)
    files = tracked_files()
    assert {p for p in got if not is_named_in_repo(p, files)} == {"src/distlab/nothere.py",
                                                                  "config/nothere.yaml"}


# ------------------------------------------------------------------ paper/ assembled in a fake repository

def _write_card(path: Path, rows: list[tuple[str, str, str]], stale: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "paper", "statement", "metric", "measured", "verdict"])
        for cid, paper, verdict in rows:
            w.writerow([cid, paper, "s", "final_test_loss", False, verdict])
    text = "# Reproduction scorecard\n"
    if stale:
        text += "\n" + snapshot.STALE + "\n\n| table | run |\n"
    path.with_suffix(".md").write_text(text)


PLANNED = ("paper/scorecard.csv", "paper/scorecard.md", "paper/scorecard/P1.csv", "paper/scorecard/P1.md",
           "paper/figures/pgc_fig7.png",
           "paper/tables/pgc.md", "paper/README.md")


def run_snapshot(repo: Path, *extra: str) -> int:
    """scripts/snapshot.py in the fake repository, the workflow's outputs listed in planned.txt
    (what snakemake --summary lists in a real checkout)."""
    return snapshot.main(["--root", str(repo), "--planned", str(repo / "planned.txt"), *extra])


@pytest.fixture
def fake_repo(tmp_path):
    """A git repository with a README table, a committed paper/ of an earlier commit and a run of
    HEAD that rewrote part of paper/ (the workflow's outputs in planned.txt)."""
    repo = tmp_path / "repo"
    (repo / "paper").mkdir(parents=True)
    (repo / "docs").mkdir()
    (repo / "src/distlab/pgc").mkdir(parents=True)
    readme = README.split(snapshot.BEGIN)[0] + snapshot.BEGIN + README.split(snapshot.BEGIN, 1)[1]
    (repo / "README.md").write_text(readme)
    old = [("a.one", "P1", "reproduced"), ("a.two", "P1", "inconclusive"), ("b.one", "P2", "reproduced"),
           ("gone", "P4", "not run")]
    _write_card(repo / "paper/scorecard.csv", old)
    (repo / "paper/figures").mkdir()
    (repo / "paper/figures/old.png").write_bytes(b"old")
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}

    def commit(msg):
        subprocess.run(["git", "add", "-A"], cwd=repo, check=True, env=env)
        subprocess.run(["git", "commit", "-qm", msg, "--allow-empty"], cwd=repo, check=True, env=env)
        return git("rev-parse", "HEAD", cwd=repo).stdout.strip()

    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    (repo / ".gitignore").write_text("/results/\n/benchmarks/\n/planned.txt\n")
    first = commit("first")
    (repo / "paper/record.json").write_text(json.dumps({"commit": first}))
    (repo / "src/distlab/pgc/coding.py").write_text("x = 1\n")
    head = commit("pgc: a change that moves a verdict")
    new = [("a.one", "P1", "not reproduced"), ("a.two", "P1", "inconclusive"),
           ("b.one", "P2", "not testable here"), ("c.new", "P3", "reproduced")]
    _write_card(repo / "paper/scorecard.csv", new)
    _write_card(repo / "paper/scorecard/P1.csv", new[:2])
    (repo / "paper/figures/pgc_fig7.png").write_bytes(b"png")
    (repo / "paper/tables").mkdir()
    (repo / "paper/tables/pgc.md").write_text("| a |\n")
    (repo / "paper/README.md").write_text("# write-up\n")
    (repo / "benchmarks/pgc").mkdir(parents=True)
    (repo / "benchmarks/pgc/run.tsv").write_text("s\n1.0\n")
    (repo / "planned.txt").write_text("\n".join(PLANNED) + "\n")
    rc = snapshot.main(["record", "--out", str(repo / "results/reproduce.json"), "--start", "1000",
                        "--end", "1600", "--rc", "0", "--commit", head, "--dirty", "0",
                        "--load-start", "0.5 0.4 0.3", "--cores", "2"])
    assert rc == 0
    return repo, first, head


def test_the_same_run_assembled_again_keeps_the_committed_comparison(fake_repo):
    """paper/ committed, then assembled again from the same run (as after make stability): the
    evaluation it follows is still the earlier commit's, not itself ("no change")."""
    repo, first, head = fake_repo
    assert run_snapshot(repo) == 0
    res = repo / "paper"
    changes, prev = (res / "verdict_changes.md").read_text(), (res / "previous_verdicts.csv").read_text()
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True, env=env)
    subprocess.run(["git", "commit", "-qm", "paper/ of head"], cwd=repo, check=True, env=env)
    assert run_snapshot(repo) == 0
    assert (res / "previous_verdicts.csv").read_text() == prev and f"`{first[:10]}..{head[:10]}`" in changes
    assert (res / "verdict_changes.md").read_text() == changes
    assert json.loads((res / "record.json").read_text())["verdict_changes"] == 4


def test_the_record_holds_the_run_and_the_machine(fake_repo):
    repo, _, head = fake_repo
    rec = json.loads((repo / "results/reproduce.json").read_text())
    assert rec["commit"] == head and rec["dirty"] is False and rec["exit_code"] == 0
    assert rec["wall_s"] == 600.0 and rec["load_start"] == [0.5, 0.4, 0.3]
    assert rec["start_utc"] == "1970-01-01T00:16:40Z" and rec["end_utc"] == "1970-01-01T00:26:40Z"
    assert rec["machine"]["cores"] == os.cpu_count() and rec["machine"]["isa"] in ("avx512", "avx2", "sse", None)
    assert rec["machine"]["kind"] and rec["config"] == {"files": [], "overrides": []}


def test_paper_is_made_wholly_of_the_run_keeps_previous_verdicts_and_lists_the_changes(fake_repo):
    repo, first, head = fake_repo
    (repo / "paper/gpu").mkdir()
    (repo / "paper/gpu/README.md").write_text("the GPU tier's own evaluation\n")
    (repo / "paper/rulebench").mkdir()
    (repo / "paper/rulebench/rulebench.csv").write_text("rule,s\n")
    assert run_snapshot(repo) == 0
    res = repo / "paper"
    # made apart (scripts/gpu/run_tier.py, scripts/rulebench.py), each with its own machine and date
    assert (res / "gpu/README.md").exists() and (res / "rulebench/rulebench.csv").exists()
    assert (res / "figures/pgc_fig7.png").read_bytes() == b"png"
    assert not (res / "figures/old.png").exists()  # the earlier run's figure: not of this evaluation, removed
    assert (res / "tables/pgc.md").exists() and (res / "scorecard/P1.csv").exists()
    assert (res / "README.md").read_text().startswith("# write-up\n\n<!-- record -->\n")
    assert (res / "benchmarks/pgc/run.tsv").exists()
    snap = json.loads((res / "record.json").read_text())
    assert snap["commit"] == head and snap["previous_commit"] == first and snap["wall_s"] == 600.0
    assert snap["claims"] == 4 and snap["verdict_changes"] == 4 and snap["stale_removed"] == 1
    prev = list(csv.DictReader((res / "previous_verdicts.csv").open()))
    assert {(r["id"], r["verdict"], r["commit"]) for r in prev} >= {("a.one", "reproduced", first)}
    changes = (res / "verdict_changes.md").read_text()
    assert f"`{first[:10]}..{head[:10]}`" in changes
    assert "| `a.one` | reproduced | not reproduced |" in changes
    assert "| `b.one` | reproduced | not testable here |" in changes
    assert "| `c.new` | — | reproduced |" in changes and "| `gone` | not run | — |" in changes
    assert "`a.two`" not in changes  # unchanged
    assert "pgc: a change that moves a verdict" in changes  # the commit that touched P1's code
    table, findings = snapshot.parse_table((repo / "README.md").read_text())
    assert table["P1"]["not reproduced"] == 1 and table["P1"]["inconclusive"] == 1
    assert table["P2"]["not testable here"] == 1 and table["P3"]["reproduced"] == 1
    assert sum(table["P4"].values()) == 0
    _, before = snapshot.parse_table(README)
    assert findings == before  # the words are kept, the counts rewritten
    # paper/ of HEAD: no page says it is of another tree
    assert "another code tree" not in (repo / "README.md").read_text() + (res / "README.md").read_text()


def test_paper_of_another_tree_a_dirty_run_or_a_config_of_its_own_says_so_at_its_top(fake_repo):
    """Made, not refused: the record says what the run was, and the write-up and the README's
    table say at once that paper/ is not of this checkout's tree or default configuration."""
    repo, first, _ = fake_repo
    path = repo / "results/reproduce.json"
    rec = json.loads(path.read_text())
    for other, said in (({"commit": first}, "whose src/ differ"), ({"dirty": True}, "uncommitted changes"),
                        ({"exit_code": 1}, "exited 1"),
                        ({"config": {"files": [{"path": "mine.yaml", "sha256": "0"}], "overrides": []}},
                         "config file mine.yaml (absent here)")):
        path.write_text(json.dumps({**rec, **other}))
        assert run_snapshot(repo) == 0
        top = (repo / "paper/README.md").read_text().split("<!-- /record -->")[0]
        assert said in top and said in (repo / "README.md").read_text(), top
        assert "**4 claims:**" in top and json.loads((repo / "paper/record.json").read_text())["commit"] == (
            other.get("commit") or rec["commit"])
    path.write_text(json.dumps(rec))  # the run of HEAD again: the pages say nothing of another tree
    assert run_snapshot(repo) == 0
    assert "<!-- record -->\n**4 claims:**" in (repo / "paper/README.md").read_text()


def test_paper_is_emptied_before_a_run_unless_it_is_of_this_checkouts_last_run(fake_repo):
    repo, _, _ = fake_repo
    assert run_snapshot(repo) == 0  # paper/ assembled from the recorded run
    assert snapshot.main(["--root", str(repo), "clear"]) == 0
    assert (repo / "paper/scorecard.csv").exists()  # kept: Snakemake goes on from it
    path = repo / "results/reproduce.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "start_utc": "2100-01-01T00:00:00Z"}))
    (repo / "paper/gpu").mkdir()
    (repo / "paper/gpu/README.md").write_text("the GPU tier's own evaluation\n")
    assert snapshot.main(["--root", str(repo), "clear"]) == 0
    assert [p.name for p in (repo / "paper").iterdir()] == ["gpu"]  # kept: an evaluation of its own
    shutil.rmtree(repo / "paper/gpu")
    path.unlink()  # a fresh clone: no run of its own yet
    subprocess.run(["git", "checkout", "--", "paper"], cwd=repo, check=True)
    assert snapshot.main(["--root", str(repo), "clear"]) == 0 and not any((repo / "paper").iterdir())


def test_make_reproduce_records_its_own_run(fake_repo, tmp_path):
    """The Makefile's recipe, with a stand-in snakemake that fails: the record says so and
    make exits with snakemake's code."""
    repo, _, head = fake_repo
    shutil.copy(ROOT / "Makefile", repo / "Makefile")
    (repo / "scripts").mkdir()
    shutil.copy(ROOT / "scripts/snapshot.py", repo / "scripts/snapshot.py")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    # a wrapper, not a symlink: a symlinked venv python loses its venv (and distlab, which the
    # recipe's SLURM-tools check imports before snakemake runs)
    (bindir / "python").write_text(f"#!/bin/sh\nexec {sys.executable} \"$@\"\n")
    (bindir / "python").chmod(0o755)
    (bindir / "snakemake").write_text("#!/bin/sh\nexit 3\n")
    (bindir / "snakemake").chmod(0o755)
    (repo / "src/distlab/pgc/coding.py").write_text("x = 2\n")  # a tracked file changed
    r = subprocess.run(["make", "reproduce", f"BIN={bindir}", "STAMP=", "CORES=2", "JOBS_VIA="], cwd=repo,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "Error 3" in r.stderr, r.stderr  # make reports the recipe's code
    rec = json.loads((repo / "results/reproduce.json").read_text())
    assert rec["exit_code"] == 3 and rec["cores_used"] == 2 and rec["wall_s"] >= 0
    assert rec["dirty"] is True and rec["commit"] == head
    # the committed paper/ (another run's) was emptied before Snakemake started: none of its pages
    # passes for this run's
    assert not (repo / "paper/scorecard.csv").exists() and not (repo / "paper/figures/pgc_fig7.png").exists()
