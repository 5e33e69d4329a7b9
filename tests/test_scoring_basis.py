"""What the verdicts rest on: of the rows that read reproduced or not reproduced, how many rest on
measured or trained quantities and how many on the simulated clock (distlab.scoring.basis),
written into the README's verdict block by the snapshot."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from test_docs import fake_repo, run_snapshot, snapshot  # noqa: F401  (a fixture)

from distlab.scoring import basis
from distlab.scoring.claims import load_claims

ROOT = Path(__file__).resolve().parents[1]


def test_every_claim_metric_has_a_basis():
    metrics = {c["metric"] for c in load_claims(ROOT / "config" / "claims.yaml")}
    missing = sorted(m for m in metrics if m not in basis.METRIC_BASIS)
    assert not missing, f"metrics without a basis in distlab.scoring.basis: {missing}"


def test_measured_wins_over_the_metric():
    assert basis.basis("time_per_step", measured=True) == basis.MEASURED
    assert basis.basis("time_per_step", measured=False) == basis.CLOCK
    assert basis.basis("time_to_target_s", measured=False) == basis.TRAINED_CLOCK
    assert basis.basis("final_test_loss", measured=False) == basis.TRAINED
    with pytest.raises(basis.UnknownMetric):
        basis.basis("made_up_metric", measured=False)


def test_only_decided_rows_count():
    rows = [{"metric": "final_test_loss", "measured": "False", "verdict": "reproduced"},
            {"metric": "time_per_step", "measured": "True", "verdict": "not reproduced"},
            {"metric": "time_per_step", "measured": "False", "verdict": "by construction"},
            {"metric": "time_to_threshold", "measured": "False", "verdict": "not reproduced"},
            {"metric": "total_time", "measured": "False", "verdict": "reproduced"},
            {"metric": "final_test_loss", "measured": "False", "verdict": "inconclusive"}]
    c = basis.decided_by_basis(rows)
    assert c == Counter({basis.TRAINED: 1, basis.MEASURED: 1, basis.TRAINED_CLOCK: 1, basis.CLOCK: 1})
    text = basis.sentence(c)
    assert "Of the 4 rows" in text and "3 rest on measured or trained quantities" in text
    assert "1 on the simulated clock alone" in text


def test_snapshot_writes_the_basis_into_the_readme(fake_repo):
    root, _, _ = fake_repo
    assert run_snapshot(root) == 0
    snap = json.loads((root / "paper/record.json").read_text())
    decided = sum(1 for v in snap["verdicts"] for _ in range(snap["verdicts"][v])
                  if v in basis.DECIDED)
    assert sum(snap["decided_basis"].values()) == decided
    readme = (root / "README.md").read_text()
    assert f"Of the {decided} rows that read reproduced or not reproduced" in readme


def test_the_snapshot_names_the_reported_verdict_as_the_scorecard_does():
    from distlab.scoring.reported import REPORTED

    assert snapshot.REPORTED == REPORTED
