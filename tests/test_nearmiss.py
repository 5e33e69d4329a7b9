"""A key the schema does not allow is named with the known key it looks like: a look-alike
letter (Cyrillic, Greek, fullwidth) folded to ASCII first, then a near-miss by spelling; a
non-ASCII key always names its odd character."""

from __future__ import annotations

import pytest
import yaml

from conftest import ROOT
from distlab.config.checks import schema_errors
from distlab.config.nearmiss import describe, fold
from distlab.config.specs import SpecError, check


def _config() -> dict:
    return yaml.safe_load((ROOT / "config/config.yaml").read_text(encoding="utf-8"))


def test_a_cyrillic_letter_in_a_config_key_is_named_as_the_key_it_imitates():
    cfg = _config()
    cfg["\u0455eeds"] = cfg.pop("seeds")
    errors = schema_errors(cfg, ROOT / "workflow/schemas")
    line = next(e for e in errors if "\u0455eeds" in e)
    assert "'ѕeeds' is 'seeds' written with 'ѕ' (U+0455 CYRILLIC SMALL LETTER DZE) at position 0" in line
    assert "\n" not in line


@pytest.mark.parametrize("key, says", [
    ("ѕteps", "is 'steps' written with 'ѕ' (U+0455"),
    ("ｓｔｅｐｓ", "is 'steps' written with 'ｓ' (U+FF53"),
    ("stеps", "is 'steps' written with 'е' (U+0435"),     # Cyrillic ie
    ("stepz", "did you mean 'steps'?"),
    ("stέps", "is 'steps' written with 'έ'"),             # Greek epsilon with tonos
    ("größe", "holds 'ö' (U+00F6"),
])
def test_each_kind_of_near_miss_in_a_run_spec(key, says):
    schema = {"type": "object", "properties": {"steps": {"type": "integer"}, "seed": {"type": "integer"}},
              "additionalProperties": False}
    with pytest.raises(SpecError) as e:
        check({"seed": 0, key: 3}, schema, "baseline spec")
    assert says in str(e.value) and "\n" not in str(e.value)


def test_an_unknown_ascii_key_like_no_known_one_gets_no_guess():
    assert describe("zzqq", ["steps", "seeds"]) == ""
    assert fold("ѕеeds") == "seeds" and fold("seeds") == "seeds"
