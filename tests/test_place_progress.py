"""A placement search with a large budget reports its progress in a few lines (one each tenth
of the budget spent), not one line an episode; the learner's own lines stay at DEBUG."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import torch
from torch import nn

from distlab.placement import api
from distlab.placement.train import BudgetProgress


def test_one_info_line_a_tenth_of_the_budget_whatever_the_number_of_updates(caplog):
    problem = SimpleNamespace(history=[], budget=1_000_000, best=0.0031)
    progress = BudgetProgress(problem, "user M hsdag seed 0")
    caplog.set_level(logging.DEBUG, logger="distlab.placement")
    for update in range(20_000):  # 50 evaluations an update
        problem.history.extend([0.0] * 50)
        progress(f"update {update}")
    info = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    debug = [r for r in caplog.records if r.levelno == logging.DEBUG]
    assert len(info) == 10 and len(debug) == 20_000
    assert info[0] == "user M hsdag seed 0: 100000 of 1000000 evaluations (10%), best 3.100 ms"
    assert info[-1].startswith("user M hsdag seed 0: 1000000 of 1000000 evaluations (100%)")


def test_place_with_a_learner_logs_a_few_progress_lines(caplog):
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    caplog.set_level(logging.INFO, logger="distlab.placement")
    opts = {"samples": 4, "lr": 0.01, "advantage": "normalised", "hidden": 8, "gcn_layers": 1, "max_levels": 1}
    api.place(model, (torch.randn(2, 8),), method="hsdag_corrected", budget=120, options=opts, repeats=1)
    lines = [r.getMessage() for r in caplog.records if r.name == "distlab.placement" and r.levelno >= logging.INFO]
    progress = [ln for ln in lines if " evaluations (" in ln]
    assert 1 <= len(progress) <= 10 and len(lines) <= 11, lines
    assert not any(ln.split(": ", 1)[1].startswith("episode ") for ln in lines)
