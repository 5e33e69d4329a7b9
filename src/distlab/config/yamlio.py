"""YAML reading that refuses what PyYAML lets through silently: a duplicated key.

PyYAML keeps the last of two equal keys in one mapping, so a config with
``steps:`` written twice (or two ``demo:`` sections) runs with whichever came
last.  :func:`load_yaml_strict` refuses it, naming the key and both lines.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml


class DuplicateKeyError(yaml.constructor.ConstructorError):
    """A mapping holds the same key twice."""


class _StrictLoader(yaml.SafeLoader):
    pass


def _mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: dict[Any, yaml.Node] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            first = seen.get(key)
        except TypeError:  # an unhashable key: PyYAML's own error follows
            continue
        if first is not None:
            raise DuplicateKeyError(
                None, None,
                f"duplicate key {key!r} (first at line {first.start_mark.line + 1}, "
                f"again at line {key_node.start_mark.line + 1})", key_node.start_mark)
        seen[key] = key_node
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def loads_strict(text: str) -> Any:
    """Parse YAML text, refusing duplicate keys at any level."""
    return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass


def load_yaml_strict(path: str | os.PathLike[str]) -> Any:
    """Read a YAML file, refusing duplicate keys at any level."""
    return loads_strict(Path(path).read_text(encoding="utf-8"))
