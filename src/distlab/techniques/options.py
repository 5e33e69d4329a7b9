"""Torch-free: the techniques' option sections, each option's default and bounds stated once.

:data:`SECTIONS` holds, per section (``demo``, ``diloco``, ``powersgd``, ``adamw``), each
option's default and its JSON-Schema; :func:`value` is what a builder reads (the run spec's
value, else the default), :func:`section_schema` what a spec schema validates, and
:func:`demo_errors` the one rule between DeMo's options (``topk <= chunk^2``), next to them.
The named schemas (``DEMO_OPTIONS``, ``DILOCO_OPTIONS``, ...) are the sections' schemas.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ..config import specs

DECAY_FACTOR = {"type": "number", "minimum": 0, "exclusiveMaximum": 1}


class Option(NamedTuple):
    default: Any
    schema: dict


SECTIONS: dict[str, dict[str, Option]] = {
    # DeMo (Peng et al., 2024): top-k of each chunk x chunk DCT tile of the decoupled momentum
    "demo": {"topk": Option(32, specs.POS_INT), "chunk": Option(64, specs.POS_INT),
             "decay": Option(0.999, DECAY_FACTOR), "weight_decay": Option(0.0, specs.NONNEG_NUM),
             "value_dtype": Option("bfloat16", {"enum": ["bfloat16", "float16"]})},
    # DiLoCo (Douillard et al., 2023): H inner steps, outer Nesterov SGD
    "diloco": {"H": Option(10, specs.POS_INT), "outer_lr": Option(0.7, specs.POS_NUM),
               "outer_momentum": Option(0.9, DECAY_FACTOR)},
    # PowerSGD (Vogels et al., 2019): the rank of the low-rank factors
    "powersgd": {"rank": Option(4, specs.POS_INT)},
    "adamw": {"betas": Option((0.9, 0.95), {"type": "array", "minItems": 2, "maxItems": 2, "items": DECAY_FACTOR}),
              "eps": Option(1e-8, specs.POS_NUM), "weight_decay": Option(0.0, specs.NONNEG_NUM)},
}


def value(spec: dict, section: str, key: str) -> Any:
    """Option ``key`` of ``section`` in a run spec, or its default."""
    default = SECTIONS[section][key].default  # an option no section declares is refused here
    return (spec.get(section) or {}).get(key, default)


def defaults(section: str) -> dict[str, Any]:
    return {k: o.default for k, o in SECTIONS[section].items()}


def section_schema(section: str, keys=None) -> dict:
    """The JSON-Schema of ``section`` (``keys``: of those options only)."""
    props = {k: o.schema for k, o in SECTIONS[section].items() if keys is None or k in keys}
    return {"type": "object", "additionalProperties": False, "properties": props}


def demo_errors(section: dict) -> list[tuple[str, str]]:
    """DeMo's rule between its options, as (option, why): the top-k of a tile fits in the tile
    (the optimizer would silently cap it)."""
    topk, chunk = (section or {}).get("topk"), (section or {}).get("chunk")
    if isinstance(topk, int) and isinstance(chunk, int) and chunk > 0 and topk > chunk * chunk:
        return [("topk", f"{topk} is larger than a chunk x chunk tile ({chunk}^2 = {chunk * chunk}); "
                         f"the optimizer would silently cap it at the tile's size")]
    return []


DEMO_COMPRESSION = section_schema("demo", ("topk", "chunk", "decay"))["properties"]
DEMO_OPTIONS = section_schema("demo")
DILOCO_OPTIONS = section_schema("diloco")
POWERSGD_OPTIONS = section_schema("powersgd")
ADAMW_OPTIONS = section_schema("adamw")
