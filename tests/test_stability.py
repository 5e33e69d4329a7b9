"""The stability report: which verdicts flipped between two runs of one commit, and whether
the claim was allowed to move (it rests on a measurement) or not (a determinism bug)."""

from __future__ import annotations

import pandas as pd

from distlab import stability


def _card(verdicts: dict[str, str], measured: set[str]) -> pd.DataFrame:
    return pd.DataFrame({"id": list(verdicts), "paper": "P1", "verdict": list(verdicts.values()),
                         "measured": [k in measured for k in verdicts], "ours": "1.0 [0.9, 1.1]"})


def test_flips_are_listed_and_a_flip_of_a_simulated_claim_is_called_a_bug():
    first = _card({"a": "reproduced", "b": "inconclusive", "c": "reproduced"}, measured={"b"})
    second = _card({"a": "reproduced", "b": "reproduced", "c": "not reproduced"}, measured={"b"})
    table = stability.compare(first, second).set_index("id")
    assert table["flipped"].to_dict() == {"a": False, "b": True, "c": True}
    text = stability.report(table.reset_index())
    assert "2 verdicts flipped" in text and "1 of claims marked measured" in text
    assert "not deterministic, which is a bug" in text
    flat = " ".join(text.split())  # tabulate pads the cells
    assert "| c |" in flat and "| b |" in flat and "| a |" not in flat


def test_no_flip_says_so_and_a_claim_present_once_counts_as_a_flip():
    same = _card({"a": "reproduced"}, set())
    assert "No verdict flipped." in stability.report(stability.compare(same, same))
    more = _card({"a": "reproduced", "z": "not run"}, set())
    table = stability.compare(same, more).set_index("id")
    assert table.loc["z", "first"] == "absent" and table.loc["z", "flipped"]


def test_measured_rules_exist_in_the_workflow():
    """Every rule the stability target forces exists (a renamed rule would be skipped silently)."""
    import subprocess
    import sys

    from conftest import ROOT

    out = subprocess.run([sys.executable, "-m", "snakemake", "--list-rules"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout.split()
    missing = [r for r in stability.MEASURED_RULES if r not in out]
    assert not missing, missing
