"""Torch-free: the JSON-Schemas of the techniques' option sections, for every run spec that
carries them (DeMo's paper and the atlas).

* ``DECAY_FACTOR``: a factor in [0, 1) (a momentum or a decay);
* ``DEMO_COMPRESSION``: DeMo's ``topk``, ``chunk`` and ``decay`` (the properties), and
  ``DEMO_OPTIONS`` the ``demo`` section (those plus ``weight_decay``, ``value_dtype``);
* ``DILOCO_OPTIONS``: DiLoCo's ``H``, ``outer_lr``, ``outer_momentum``;
* ``POWERSGD_OPTIONS``: PowerSGD's ``rank``;
* ``ADAMW_OPTIONS``: AdamW's ``betas``, ``eps``, ``weight_decay``.
"""

from __future__ import annotations

from ..config import specs

DECAY_FACTOR = {"type": "number", "minimum": 0, "exclusiveMaximum": 1}
DEMO_COMPRESSION = {"topk": specs.POS_INT, "chunk": specs.POS_INT, "decay": DECAY_FACTOR}
DEMO_OPTIONS = {"type": "object", "additionalProperties": False, "properties": {
    **DEMO_COMPRESSION, "weight_decay": specs.NONNEG_NUM, "value_dtype": {"enum": ["bfloat16", "float16"]}}}
DILOCO_OPTIONS = {"type": "object", "additionalProperties": False, "properties": {
    "H": specs.POS_INT, "outer_lr": specs.POS_NUM, "outer_momentum": DECAY_FACTOR}}
POWERSGD_OPTIONS = {"type": "object", "additionalProperties": False, "properties": {"rank": specs.POS_INT}}
ADAMW_OPTIONS = {"type": "object", "additionalProperties": False, "properties": {
    "betas": {"type": "array", "minItems": 2, "maxItems": 2, "items": DECAY_FACTOR},
    "eps": specs.POS_NUM, "weight_decay": specs.NONNEG_NUM}}
