"""Every figure prints: a column (3.5 in) or a page (7 in) wide at its saved resolution, no text
under 8 points at that size, no more than six data lines a panel, the papers' names for methods (no internal id in any text a reader
sees), and a caption beside it naming its seeds, its interval and its basis (simulated,
measured or extrapolated).

The static test finds every function of the project that saves a figure and requires it to
give the figure a caption, so a new figure without one fails; the unit tests build figures from
inputs shaped like the workflow's; the end-to-end test reads every figure of the tiny run.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from PIL import Image

from conftest import ROOT, write_local_figure_inputs

from distlab.plotting import captions, names, plots, style

SRC = ROOT / "src/distlab"
MAX_LINES = 6  # data lines a panel draws; more go to a table or another panel
CLOCK = re.compile(r"\b(simulated|measured|extrapolated)\b", re.I)


def print_problems(png: Path) -> list[str]:
    """What keeps the figure at ``png`` out of a paper: its width, its smallest text, an internal
    id in its texts, a caption missing or silent on seeds, interval or basis."""
    im = Image.open(png)
    problems = []
    dpi = im.info.get("dpi", (0, 0))[0]
    width = im.size[0] / dpi if dpi else 0.0
    if not any(abs(width - w) < 1.5 / max(dpi, 1) for w in (style.COLUMN, style.PAGE)):
        problems.append(f"{width:.2f} in wide at {dpi:.0f} dpi, not a column or a page")
    shown = json.loads(im.text.get("distlab:print", "{}"))
    if not shown:
        problems.append("no record of its texts")
    elif shown["min_pt"] < style.MIN_PT:
        problems.append(f"a text at {shown['min_pt']:g} pt")
    if shown.get("lines_per_panel", 0) > MAX_LINES:
        problems.append(f"{shown['lines_per_panel']} lines in a panel (at most {MAX_LINES}: the rest to a table)")
    if shown.get("cropped"):
        problems.append("what it draws is wider than its print width: cut")
    ids = sorted({i for t in shown.get("texts", []) for i in names.internal_ids_in(t)})
    if ids:
        problems.append(f"internal ids shown: {ids}")
    try:
        text = captions.figure_caption(png)
    except FileNotFoundError:
        return problems + ["no caption"]
    parts = re.fullmatch(r"(?s)(.+)\. Basis: (.+)\. Seeds: (.+)\. Interval: (.+)\.", text)
    if parts is None or not CLOCK.search(parts.group(2)) or not parts.group(3).strip() or not parts.group(4).strip():
        problems.append(f"caption without seeds, interval or basis: {text!r}")
    return problems


# ------------------------------------------------------------------ every figure has a caption

def _figure_functions() -> dict[str, set[str]]:
    """Every function under src/distlab (outside plotting) that saves a figure (calls
    ``plots.save``), with the calls it makes."""
    found = {}
    for path in sorted(SRC.rglob("*.py")):
        if "plotting" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef):
                continue
            calls = {n.func.attr for n in ast.walk(node) if isinstance(n, ast.Call)
                     and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name)
                     and n.func.value.id == "plots"}
            if "save" in calls:
                found[f"{path.relative_to(SRC)}:{node.name}"] = calls
    return found


def test_every_function_that_saves_a_figure_gives_it_a_caption():
    functions = _figure_functions()
    assert len(functions) >= 20, sorted(functions)  # the figure modules were found
    missing = sorted(f for f, calls in functions.items() if "caption" not in calls)
    assert not missing, f"figures saved without a caption: {missing}"


def test_every_figure_the_workflow_writes_has_its_place_in_the_papers_order():
    dry = (ROOT / "tests/expected/dryrun_tiny.txt").read_text()
    written = set(re.findall(r"paper/figures/([\w-]+)\.png", dry))
    assert written and not written - set(captions.FIGURES), written - set(captions.FIGURES)
    order = sorted((Path(f"paper/figures/{n}.png") for n in written), key=captions.figure_number)
    stems = [p.stem for p in order]
    assert stems.index("pgc_fig3") < stems.index("pgc_fig7") < stems.index("pgc_fig10")  # 3 before 10
    assert stems.index("pgc_fig10") < stems.index("placement_curves") < stems.index("local_loss_tokens")


def test_a_figure_is_saved_at_print_size_with_its_caption(tmp_path):
    """A figure drawn too wide, with a 6-point label and an internal id as a legend entry, is
    saved a page wide with the label at 8 points; the id is reported; the caption is written."""
    plots.set_style()
    fig, ax = plt.subplots(figsize=(11, 4))
    ax.plot([0, 1], [0, 1], label="hsdag_corrected")
    ax.plot([0, 1], [1, 0], label=plots.name("rc-async"))
    ax.set_xlabel("x", fontsize=6)
    ax.set(ylabel="y", title="t")
    ax.legend()
    plots.label_provenance(fig, "simulated")
    plots.caption(fig, "Two lines", 3, plots.BAND, "simulated (virtual clock)")
    out = plots.save(fig, tmp_path / "pgc_fig7.png")
    problems = print_problems(out)
    assert problems == ["internal ids shown: ['hsdag_corrected']"], problems
    assert Image.open(out).size[0] == round(style.PAGE * style.DPI)
    assert captions.figure_caption(out) == ("P1 Fig. 7 (reproduced). Two lines. Basis: simulated (virtual clock). "
                                            "Seeds: 3 seeds. Interval: " + plots.BAND + ".")
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.plot([0, 1], [0, 1])
    ax.set(xlabel="x", ylabel="y", title="t (measured)")
    out = plots.save(fig, tmp_path / "small.png")  # no caption given: reported
    assert Image.open(out).size[0] == round(style.COLUMN * style.DPI)
    assert print_problems(out) == ["no caption"]


def test_more_than_six_lines_a_panel_are_reported_and_error_bars_are_not_lines(tmp_path):
    plots.set_style()
    fig, (crowded, bars) = plt.subplots(1, 2, figsize=(plots.PAGE, 2.5))
    x = np.arange(5.0)
    for k in range(7):
        crowded.plot(x, x + k)
    df = pd.DataFrame({"m": list("abcdefgh") * 3, "seed": np.repeat([0, 1, 2], 8), "t": np.arange(24.0) + 1})
    plots.bar_with_ci(df, "m", "t", None, ax=bars, positive=True)  # eight bars, eight error bars
    for ax in (crowded, bars):
        ax.set(xlabel="x", ylabel="y", title="t (simulated)")
    plots.caption(fig, "Lines and bars", 3, plots.BARS, "simulated")
    out = plots.save(fig, tmp_path / "f.png")
    assert print_problems(out) == ["7 lines in a panel (at most 6: the rest to a table)"]


def test_the_names_are_the_papers():
    assert plots.name("hsdag_corrected") == "HSDAG" and plots.name("rc-async") == "RC (asynchronous)"
    assert plots.name("gc-cr") == "GC-CR" and plots.name("adamw") == "AdamW (DDP)" and plots.name("ddp") == "AdamW (DDP)"
    assert plots.name("hsdag_const") == "HSDAG (as released), constant reward"
    assert names.internal_ids_in("RC (asynchronous) beside rc-async and gc-fr") == ["gc-fr", "rc-async"]
    assert names.internal_ids_in("GC-CR, HSDAG, DeMo, one-thread, GPU-only") == []
    assert names.internal_ids_in("bp-9thread beside rc-new") == ["bp-9thread", "rc-new"]  # no name yet: reported


# ------------------------------------------------------------------ figures from inputs like the workflow's

def _demo_figures(tmp_path) -> list[Path]:
    from distlab.demo.figures import figure, gap_figure, real_figure

    steps = pd.read_csv(ROOT / "tests/data/demo_tiny_steps.csv")
    if "backend" not in steps:  # the evaluation rows' backend, as the workflow's table has it
        steps["backend"] = "simulated"
    steps.to_csv(tmp_path / "steps.csv", index=False)
    nets = {"datacenter": {"label": "100 Gbit/s datacenter"}, "wan": {"label": "1 Gbit/s WAN, 20 ms"}}
    outs = []
    for kind in ("loss_steps", "loss_bytes", "loss_time"):
        outs.append(tmp_path / f"demo_{kind}.png")
        figure(kind, tmp_path / "steps.csv", outs[-1], nets, "compute measured")
    outs.append(tmp_path / "demo_gap_steps.png")
    gap_figure(tmp_path / "steps.csv", outs[-1])
    real = pd.DataFrame([{"method": m, "n_workers": n, "seed": s, "step_time_median": v, "backend": "gloo"}
                         for m, n, vals in [("adamw", 2, (0.0093, 0.0109)), ("demo", 4, (0.0216, 0.0272))]
                         for s, v in enumerate(vals)])
    sim = real.assign(step_time_median=real.step_time_median * 1.1).drop(columns="backend")
    real.to_csv(tmp_path / "real.csv", index=False)
    sim.to_csv(tmp_path / "sim.csv", index=False)
    outs.append(tmp_path / "demo_real.png")
    real_figure(tmp_path / "real.csv", tmp_path / "sim.csv", outs[-1])
    return outs


def _other_figures(tmp_path) -> list[Path]:
    from distlab.bench import techerror
    from distlab.local import figures as lf
    from distlab.pgc import figures as pf

    write_local_figure_inputs(tmp_path)
    steps = pd.DataFrame([{"scheme": sch, "s": s, "delay_mean": 1.0, "seed": seed, "step": step,
                           "train_loss_full": 2.2 * np.exp(-1.3 * (step / 150) ** 2) * (1 + 0.01 * seed)}
                          for sch, s in [("dgd", 0), ("gc-fr", 1), ("pgc-fr", 1), ("is-gc-cr", 1)]
                          for seed in range(2) for step in range(0, 151, 25)])
    shapes = pd.DataFrame([{"method": m, "point": pt, "seed": seed, "tokens_per_s": tps * (1 + 0.02 * seed),
                            "d_model": int(pt[1:3]), "block_size": 32, "sections": 4 if m != "bp" else 0,
                            "load_1min": 1.0}
                           for pt in ("d32-K4-T32", "d64-K4-T32") for seed in range(2)
                           for m, tps in (("bp", 100.0), ("rc-par", 150.0))])
    shapes.to_csv(tmp_path / "map.csv", index=False)
    outs = [tmp_path / f"{n}.png" for n in ("local_throughput_memory", "local_nonident", "pgc_fig8",
                                            "local_throughput_map", "techerror", "techerror_not_run")]
    lf.throughput_memory(tmp_path / "tp.csv", outs[0])
    lf.nonident_figure(tmp_path / "nonident.json", outs[1])
    pf.fig8(steps, outs[2], {})
    lf.throughput_map(tmp_path / "map.csv", outs[3], target=1.38)
    techerror.figure(pd.read_csv(ROOT / "tests/data/netcheck_techerror.csv"), outs[4])
    techerror.figure(pd.DataFrame({"status": ["not run: no root"]}), outs[5])
    return outs


def test_figures_from_inputs_like_the_workflows_print(tmp_path):
    outs = _demo_figures(tmp_path) + _other_figures(tmp_path)
    bad = {p.name: print_problems(p) for p in outs if print_problems(p)}
    assert not bad, bad
    real = captions.figure_caption(tmp_path / "demo_real.png")
    assert "measured (wall clock, gloo) or simulated" in real  # each bar's basis
    assert "IS-GC-CR" not in json.loads(Image.open(tmp_path / "pgc_fig8.png").text["distlab:print"])["texts"]


@pytest.mark.slow
def test_every_figure_of_the_tiny_run_prints(tiny_workflow):
    work, r = tiny_workflow
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    figures = sorted((work / "paper/figures").glob("*.png"))
    assert len(figures) >= 20
    bad = {p.name: print_problems(p) for p in figures if print_problems(p)}
    assert not bad, bad
    assert {p.stem for p in figures} <= set(captions.FIGURES)
