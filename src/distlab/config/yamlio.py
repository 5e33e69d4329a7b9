"""YAML reading that refuses what PyYAML lets through silently or slowly.

* A duplicated key: PyYAML keeps the last of two equal keys in one mapping, so a
  config with ``steps:`` written twice runs with whichever came last.
  :func:`load_yaml_strict` refuses it, naming the key and both lines.
* A file that is too big, nested too deep, or whose aliases expand to too many
  nodes (a "billion laughs" file of 500 bytes expands to 10**9): each is refused
  before anything walks it, in one line naming the file and the limit
  (:func:`check_yaml_limits`).  The check streams the parser's events once, so
  its cost is linear in the file's size, which is capped first (by ``stat``,
  before the file is read).
* An error never quotes the file's lines (PyYAML's messages do): a config that
  is a link to a secret file is refused without printing the secret.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

MAX_BYTES = 1 << 20          # config/claims.yaml, the largest, is 150 KB
MAX_DEPTH = 64               # the configs nest at most 6 deep
MAX_NODES = 200_000          # scalars and collections, every alias expanded


class DuplicateKeyError(yaml.constructor.ConstructorError):
    """A mapping holds the same key twice."""


class YamlLimitError(yaml.YAMLError):
    """A YAML file or text over one of the caps; its message is one line naming it."""


_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


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


def yaml_error_line(e: BaseException) -> str:
    """A YAML error in one line, its place (line, column) and problem, never the file's text."""
    if isinstance(e, YamlLimitError):
        return str(e)
    if isinstance(e, yaml.MarkedYAMLError):
        mark = e.problem_mark or e.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        what = " ".join(str(x) for x in (e.context, e.problem) if x) or type(e).__name__
        return where + " ".join(what.split())
    if isinstance(e, UnicodeDecodeError):
        return f"not UTF-8 text (byte {e.start})"
    return type(e).__name__


def check_yaml_limits(text: str, name: str = "<text>") -> None:
    """Raise :class:`YamlLimitError` (one line naming ``name`` and the limit) when ``text``
    nests deeper than :data:`MAX_DEPTH` or holds more than :data:`MAX_NODES` nodes with
    every alias expanded.  One pass over the parser's events, nothing built: linear time
    however the aliases multiply.  A syntax error is left to the loader (it raises)."""
    if len(text) > MAX_BYTES:
        raise YamlLimitError(f"{name}: {len(text):,} characters, over the limit of {MAX_BYTES:,} "
                             f"for a config file")
    sizes: dict[str, int] = {}      # anchor -> nodes it stands for, expanded
    stack: list[tuple[str | None, int]] = []
    total = 0
    try:
        for ev in _events(text, name):
            if isinstance(ev, yaml.ScalarEvent):
                total += 1
                if ev.anchor:
                    sizes[ev.anchor] = 1
            elif isinstance(ev, yaml.AliasEvent):
                total += sizes.get(ev.anchor, 1)
            elif isinstance(ev, yaml.CollectionStartEvent):
                stack.append((ev.anchor, total))
                total += 1
                if len(stack) > MAX_DEPTH:
                    raise YamlLimitError(f"{name}: nested deeper than the limit of {MAX_DEPTH} levels "
                                         f"(line {ev.start_mark.line + 1})")
            elif isinstance(ev, yaml.CollectionEndEvent):
                anchor, start = stack.pop()
                if anchor:
                    sizes[anchor] = total - start
            else:
                continue
            if total > MAX_NODES:
                raise YamlLimitError(f"{name}: more than the limit of {MAX_NODES:,} values (aliases "
                                     f"expanded), at line {ev.start_mark.line + 1}")
    except YamlLimitError:
        raise
    except yaml.YAMLError as e:
        if "maximum nesting depth" in str(e):  # libyaml's own cap (1,000) came first
            raise YamlLimitError(f"{name}: nested deeper than the limit of {MAX_DEPTH} levels") from None
        raise


def check_tree_limits(obj: Any, name: str = "the configuration") -> None:
    """The caps of :func:`check_yaml_limits` on data already loaded (Snakemake's own reading
    of a config file, ``--config`` overrides): a walk that stops at :data:`MAX_NODES` nodes
    (objects shared by aliases counted each time) or :data:`MAX_DEPTH` levels, so its cost
    is bounded however the data is shaped."""
    todo: list[tuple[Any, int]] = [(obj, 0)]
    seen = 0
    while todo:
        x, depth = todo.pop()
        seen += 1
        if seen > MAX_NODES:
            raise YamlLimitError(f"{name}: more than the limit of {MAX_NODES:,} values")
        if depth > MAX_DEPTH:
            raise YamlLimitError(f"{name}: nested deeper than the limit of {MAX_DEPTH} levels")
        if isinstance(x, dict):
            if len(x) > MAX_NODES:
                raise YamlLimitError(f"{name}: more than the limit of {MAX_NODES:,} values")
            todo.extend((v, depth + 1) for v in x.values())
        elif isinstance(x, (list, tuple)):
            if len(x) > MAX_NODES:
                raise YamlLimitError(f"{name}: more than the limit of {MAX_NODES:,} values")
            todo.extend((v, depth + 1) for v in x)


def _events(text: str, name: str):
    """The parser's events, stopping (one line) once there are more than the caps allow."""
    for i, ev in enumerate(yaml.parse(text, Loader=_Loader)):
        if i > 4 * MAX_NODES:
            raise YamlLimitError(f"{name}: more than the limit of {MAX_NODES:,} values")
        yield ev


def read_yaml_text(path: str | os.PathLike[str]) -> str:
    """A YAML file's text, refused (:class:`YamlLimitError`) over :data:`MAX_BYTES` before it
    is read, or when it is not a regular file."""
    p = Path(path)
    st = p.stat()
    if not p.is_file():
        raise YamlLimitError(f"{path}: not a regular file")
    if st.st_size > MAX_BYTES:
        raise YamlLimitError(f"{path}: {st.st_size:,} bytes, over the limit of {MAX_BYTES:,} "
                             f"bytes for a config file")
    with open(p, "rb") as f:
        raw = f.read(MAX_BYTES + 1)
    if len(raw) > MAX_BYTES:  # it grew since
        raise YamlLimitError(f"{path}: over the limit of {MAX_BYTES:,} bytes for a config file")
    return raw.decode("utf-8")


def safe_load_bounded(text: str, name: str = "<text>") -> Any:
    """``yaml.safe_load`` of ``text`` after :func:`check_yaml_limits`."""
    check_yaml_limits(text, name)
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - a safe loader


def load_file_bounded(path: str | os.PathLike[str]) -> Any:
    """``yaml.safe_load`` of a file within the caps (:func:`read_yaml_text`, :func:`check_yaml_limits`)."""
    return safe_load_bounded(read_yaml_text(path), str(path))


def loads_strict(text: str, name: str = "<text>") -> Any:
    """Parse YAML text within the caps, refusing duplicate keys at any level."""
    check_yaml_limits(text, name)
    return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass


def load_yaml_strict(path: str | os.PathLike[str]) -> Any:
    """Read a YAML file within the caps, refusing duplicate keys at any level."""
    return loads_strict(read_yaml_text(path), str(path))
