"""The reproduction write-up, ``paper/README.md``: one page a reader reads in minutes.

For each paper (and the atlas) its question in one line, its headline claims (``headline: true``
in ``config/claims.yaml``) as a table (the paper's value, ours with its interval and unit, the
basis the row rests on, the verdict, a link to its figure), and one or two captioned figures in
the paper's figure order; one counts line over the whole scorecard
(:func:`distlab.scoring.reported.counts_line`).  Everything else goes to a page a paper,
``paper/<paper>.md`` (all its figures, captioned, and links to all its tables), and to the
scorecard (``paper/scorecard.md``, ``paper/scorecard/<paper>.md`` and the CSV).  Built from the
results alone: the scorecard CSV, the claims, and the figures and tables under ``paper/``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..results.tables import atomic_write_text, markdown_table_plain
from .basis import ARITHMETIC, CLOCK, MEASURED, TRAINED, TRAINED_CLOCK, UnknownMetric, basis
from .reported import counts_line
from .scorecard_view import short_statement, wrapped_item

STALE = "## Results made by other code"


@dataclass(frozen=True)
class Section:
    key: str      # the claims' `paper` (the scorecard's section)
    prefix: str   # the figures' and tables' file prefix under paper/
    title: str
    question: str


# each paper's question in our words (the papers and their sources: docs/<experiment>.md)
SECTIONS = (
    Section("P1", "pgc", "P1: Pipelined Gradient Coding (PGC)",
            "Does PGC take less time per step than gradient coding (GC) and DGD under stragglers, at DGD's loss?"),
    Section("P2", "placement", "P2: learned device placement (HSDAG)",
            "Does a learned placement (HSDAG) run a model faster than CPU-only, HEFT and the other placers?"),
    Section("P3", "local", "P3: local credit assignment on CPU transformers",
            "Does local credit assignment (RC, PC) train more tokens a second than backprop, at no worse a loss?"),
    Section("P4", "demo", "P4: DeMo, decoupled momentum optimization",
            "Does DeMo reach AdamW's loss while sending far fewer bytes a step?"),
    Section("atlas", "atlas", "The atlas: which data-parallel technique reaches a target loss first",
            "Which technique reaches the target loss first, by bandwidth, latency, stragglers and model size?"),
)
FOUNDATION = Section("foundation", "baseline", "Foundation: synchronous data-parallel SGD",
                     "Do the simulated and the real backends compute what single-process SGD does?")
PAGES = tuple(s.key for s in (FOUNDATION, *SECTIONS))  # paper/<key>.md, one a section
FIGURES_A_PAPER = 2

UNITS = {
    "time_per_step": "s", "time_to_threshold": "s", "time_to_target_s": "s", "total_time": "s",
    "time_wan": "s", "time_datacenter": "s", "final_test_loss": "nats", "final_val_loss": "nats",
    "final_train_loss_full": "nats", "steps_to_threshold": "steps", "steps_to_threshold_ma": "steps",
    "final_median_ms": "ms", "final_policy_ms": "ms", "latency_ms": "ms", "tokens_per_s": "tokens/s",
    "pss_mb": "MB", "rss_mb": "MB", "rss_sum_mb": "MB", "bytes_reduction_bf16": "×", "reduction_vs_bf16_ddp": "×",
}
BASIS_LABEL = {MEASURED: "measured", TRAINED: "trained", TRAINED_CLOCK: "trained × simulated clock",
               CLOCK: "simulated clock", ARITHMETIC: "arithmetic"}


def _record_note(out: Path) -> None:
    """Open the write-up ``out`` with the record check and the counts line
    (:func:`distlab.scoring.paperrecord.put_header`): whether its folder (paper/) is of this
    checkout's code tree and config, read from its record against the repository it sits in
    (the working directory when it is inside it: the workflow's case)."""
    from .paperrecord import put_header

    folder = out.parent.resolve()
    cwd = Path.cwd().resolve()
    root, paper = (cwd, str(folder.relative_to(cwd))) if folder.is_relative_to(cwd) else (folder.parent, folder.name)
    put_header(out, root, paper)


def in_figure_order(paths: list[Path]) -> list[Path]:
    """``paths`` in the papers' figure order (:func:`distlab.plotting.figure_number`: the paper's
    figure number first, fig3 before fig10; a figure it does not list after, by name)."""
    from ..plotting import figure_number

    return sorted(paths, key=figure_number)


def _caption(fig_path: Path, card: pd.DataFrame | None = None, claims: dict | None = None) -> str:
    """The caption of ``fig_path`` its figure function wrote (:func:`distlab.plotting.figure_caption`:
    ``<stem>.caption.txt`` beside it, else the one the PNG carries); for a figure without one,
    a caption built from the scorecard rows whose claims name the figure."""
    from ..plotting import figure_caption

    try:
        return " ".join(figure_caption(fig_path).split())
    except OSError:  # no caption written, or a PNG that cannot be read: the scorecard's rows say it
        pass
    rows = [] if card is None or claims is None else [
        r for _, r in card.iterrows() if claims.get(r["id"], {}).get("figure") == fig_path.stem]
    if not rows:
        return f"{fig_path.stem} (no caption; the claims it shows are in the scorecard)."
    tests = "; ".join(f"`{r['id']}` reads {r['verdict']} ({_basis(r)}, n = {int(r['n_seeds'])})" for r in rows)
    return f"{fig_path.stem}: the figure of {tests}."


def _basis(r: pd.Series) -> str:
    try:
        return BASIS_LABEL[basis(str(r["metric"]), str(r.get("measured")).strip().lower() in ("true", "1"))]
    except UnknownMetric:
        return "unknown"


def _ours(r: pd.Series, claim: dict) -> str:
    """Ours as the scorecard shows it, with what it is: a / b (a ratio row), a itself (a row
    against a constant) or a − b, and the metric's unit."""
    ours = r["ours"] if isinstance(r["ours"], str) and r["ours"] else ""
    if not ours:
        return "—"
    if claim.get("transform") == "ratio" or claim.get("test") == "band":
        return f"{ours} (a / b)"
    unit = UNITS.get(str(r["metric"]), "")
    what = "a" if "value" in claim or "value_from" in claim else "a − b"
    return f"{ours} {unit} ({what})".replace("  ", " ")


def _paper_value(v, key: str) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)) or v == "":
        return "— (ours, no paper)" if key == "atlas" else "— (an ordering)"
    return short_statement(str(v), 60)


def headline_table(card: pd.DataFrame, claims: dict[str, dict], key: str, root: Path) -> str:
    """A section's headline claims: one row each, linked to its figure (to the section's page
    where this evaluation made no such figure), with the paper's value, ours (interval and unit),
    the basis and the verdict; a claim the scorecard lacks says so."""
    rows = []
    by_id = card.set_index("id")
    for cid, c in claims.items():
        if c["paper"] != key or not c.get("headline"):
            continue
        text = short_statement(c.get("short") or c["statement"])
        fig = c.get("figure")
        there = bool(fig) and (root / "figures" / f"{fig}.png").exists()
        link = f"[{text}](figures/{fig}.png)" if there else f"[{text}]({key}.md)"
        if cid not in by_id.index:
            rows.append({"claim": link, "paper": _paper_value(c.get("paper_value"), key), "ours (95 % t CI)": "—",
                         "basis": "—", "verdict": "not in this evaluation (added after it)"})
            continue
        r = by_id.loc[cid]
        r = pd.Series({**r.to_dict(), "id": cid})
        rows.append({"claim": link, "paper": _paper_value(r["paper_value"], key), "ours (95 % t CI)": _ours(r, c),
                     "basis": _basis(r), "verdict": f"**{r['verdict']}**"})
    if not rows:
        return ""
    return markdown_table_plain(pd.DataFrame(rows))


def _figures(root: Path, prefix: str) -> list[Path]:
    return in_figure_order(sorted((root / "figures").glob(f"{prefix}_*.png")))


def _headline_figures(root: Path, claims: dict[str, dict], key: str) -> list[Path]:
    """The figures of a section's headline claims that exist, the first few, in the paper's order."""
    stems: list[str] = []
    for c in claims.values():
        fig = c.get("figure")
        if c["paper"] == key and c.get("headline") and fig and fig not in stems:
            stems.append(fig)
    found = [root / "figures" / f"{s}.png" for s in stems if (root / "figures" / f"{s}.png").exists()]
    return in_figure_order(found[:FIGURES_A_PAPER])


def _figure_block(fig: Path, card: pd.DataFrame, claims: dict) -> list[str]:
    return [f"![{fig.stem}](figures/{fig.name})", "", *wrapped_caption(_caption(fig, card, claims)), ""]


def wrapped_caption(text: str) -> list[str]:
    """A caption as an italic paragraph, wrapped (no line of the page over 300 characters)."""
    import textwrap

    return textwrap.wrap(f"*{text}*", width=160, break_long_words=False, break_on_hyphens=False)


def _section(s: Section, root: Path, card: pd.DataFrame, claims: dict) -> list[str]:
    lines = [f"## {s.title}", "", f"**Question.** {s.question}", ""]
    table = headline_table(card, claims, s.key, root)
    if table:
        lines += [table]
    if s.key == "atlas":
        lines += [_atlas_answer(card, claims), ""]
    for fig in _headline_figures(root, claims, s.key):
        lines += _figure_block(fig, card, claims)
    lines += [f"Every figure and table of this section: [{s.key}.md]({s.key}.md); every claim: "
              f"[scorecard/{s.key}.md](scorecard/{s.key}.md).", ""]
    return lines


def _atlas_answer(card: pd.DataFrame, claims: dict) -> str:
    """The atlas's answer in one line, from its headline rows: what reads reproduced, what does not."""
    rows = card[card["id"].isin([i for i, c in claims.items() if c["paper"] == "atlas" and c.get("headline")])]
    held = [short_statement(claims[i].get("short") or claims[i]["statement"], 80)
            for i in rows.loc[rows["verdict"] == "reproduced", "id"]]
    not_held = [short_statement(claims[i].get("short") or claims[i]["statement"], 80)
                for i in rows.loc[rows["verdict"] == "not reproduced", "id"]]
    text = "**Answer here.** " + ("; ".join(held) + " (reproduced)" if held else "no headline row reads reproduced")
    if not_held:
        text += "; not reproduced: " + "; ".join(not_held)
    return text + ". The map by cell: [tables/atlas_winners.md](tables/atlas_winners.md)."


def _page(s: Section, root: Path, card: pd.DataFrame, claims: dict, meta: dict | None) -> str:
    """paper/<key>.md: the section's question, every figure (captioned, in the paper's order) and
    a link to every table, and the scorecard's page of its claims."""
    lines = [f"# {s.title}", "", f"**Question.** {s.question}", "",
             f"Every claim, its test and the reason for its verdict: [scorecard/{s.key}.md](scorecard/{s.key}.md).", ""]
    part = card[card["paper"] == s.key]
    if len(part):
        lines += [counts_line(part, _verdicts()), ""]
    for fig in _figures(root, s.prefix):
        lines += _figure_block(fig, card, claims)
    tabs = sorted((root / "tables").glob(f"{s.prefix}_*.md")) + sorted((root / "tables").glob(f"{s.prefix}.md"))
    if tabs:
        lines += ["Tables:", ""] + [f"- [{t.stem}](tables/{t.name})" for t in tabs] + [""]
    if s is FOUNDATION and meta:
        lines += ["Settings of this evaluation:", "", "```json", json.dumps(meta, indent=1, sort_keys=True), "```", ""]
    return "\n".join(lines)


def _verdicts() -> tuple[str, ...]:
    from .scorecard import VERDICTS

    return VERDICTS


def _stale_parts(scorecard_csv: Path) -> list[str]:
    return [p.stem for p in sorted((scorecard_csv.parent / "scorecard").glob("*.md"))
            if STALE in p.read_text(encoding="utf-8")]


def _claims_by_id(claims_path: str | Path | None) -> dict[str, dict]:
    if claims_path is None:
        return {}
    from .claims import load_claims

    return {c["id"]: c for c in load_claims(claims_path)}


def write_report(out: str | Path, scorecard_csv: str | Path, meta: dict | None = None,
                 claims: str | Path | None = None) -> None:
    """paper/README.md (``out``) and a page a section beside it (:data:`PAGES`), from the scorecard
    CSV, the claims (their headline flags, short statements and figures) and ``paper/``."""
    from ..results.tables import read_table_checked

    out = Path(out)
    root = out.parent
    card = read_table_checked(scorecard_csv)  # cut short, or grading a run that is gone: refused
    by_id = _claims_by_id(claims)
    lines = ["# distlab: what reproduced", "",
             "Each paper's question, its headline claims and one or two of its figures.",
             "*Ours*: the paired estimate over seeds (a − b, or a / b) and its 95 % Student-t interval.",
             "*Basis*: what decides the row (measured on this machine, trained, the simulated clock, arithmetic).",
             "Every row: [scorecard.md](scorecard.md) and [scorecard.csv](scorecard.csv).", ""]
    if not (root / "scorecard.csv").is_file():  # else the header's counts line (_record_note) says it
        lines += [counts_line(card, _verdicts()), ""]
    stale = _stale_parts(Path(scorecard_csv))
    if stale:
        lines += ["Runs made by other code than this revision: " + ", ".join(
            f"[scorecard/{p}.md](scorecard/{p}.md)" for p in stale) + " (rerun them before trusting their rows).", ""]
    if meta and "seeds" in meta:
        lines += [f"Seeds: {meta['seeds']}. Foundation (the backends against single-process SGD): "
                  "[foundation.md](foundation.md).", ""]
    for s in SECTIONS:
        lines += _section(s, root, card, by_id)
    atomic_write_text(out, "\n".join(lines).rstrip() + "\n")
    _record_note(out)
    for s in (FOUNDATION, *SECTIONS):
        atomic_write_text(root / f"{s.key}.md", _page(s, root, card, by_id, meta).rstrip() + "\n")
