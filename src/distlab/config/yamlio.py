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
* An alias inside the collection it names (``a: &a [*a]``, 25 bytes: a structure that
  contains itself, whose first walk ends in a RecursionError) and an integer of more than
  :data:`MAX_INT_DIGITS` digits (Python refuses to read 5,000 as a traceback) are refused in
  the same pass, by name.
* JSON files a user hands in (packs, plans, profiles, metadata) go through the same caps
  (:func:`load_json_bounded`): size before reading, nesting depth in one linear scan before
  parsing, values, integer length, and NaN or Infinity refused by name.
* What is not a regular file (a directory, a FIFO, ``/dev/zero``) is said to be so, never "no
  such file", and is never read.
* An error never quotes the file's lines (PyYAML's messages do): a config that
  is a link to a secret file is refused without printing the secret.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import yaml

MAX_BYTES = 1 << 20          # config/claims.yaml, the largest, is 150 KB
MAX_DEPTH = 64               # the configs nest at most 6 deep
MAX_NODES = 200_000          # scalars and collections, every alias expanded
MAX_INT_DIGITS = 100         # an integer's digits: a count or a seed has at most 20
_INT_LIKE = re.compile(r"[-+]?(0[xob])?[0-9_a-fA-F:]+")


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
                _check_scalar(ev, name)
            elif isinstance(ev, yaml.AliasEvent):
                if any(a == ev.anchor for a, _ in stack):
                    raise YamlLimitError(f"{name}: the alias *{ev.anchor} at line {ev.start_mark.line + 1} "
                                         f"is inside the &{ev.anchor} it names (a value that contains itself)")
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


def _check_scalar(ev, name: str) -> None:
    """A plain scalar that reads as an integer of more than :data:`MAX_INT_DIGITS` digits."""
    v = ev.value
    if not ev.style and len(v) > MAX_INT_DIGITS and _INT_LIKE.fullmatch(v):
        raise YamlLimitError(f"{name}: an integer of {len(v):,} characters at line {ev.start_mark.line + 1}, "
                             f"over the limit of {MAX_INT_DIGITS} digits")


def check_tree_limits(obj: Any, name: str = "the configuration", max_nodes: int = MAX_NODES) -> None:
    """The caps of :func:`check_yaml_limits` on data already loaded (Snakemake's own reading
    of a config file, ``--config`` overrides): a walk that stops at :data:`MAX_NODES` nodes
    (objects shared by aliases counted each time) or :data:`MAX_DEPTH` levels, so its cost
    is bounded however the data is shaped."""
    todo: list[tuple[Any, int]] = [(obj, 0)]
    seen = 0
    while todo:
        x, depth = todo.pop()
        seen += 1
        if seen > max_nodes:
            raise YamlLimitError(f"{name}: more than the limit of {max_nodes:,} values")
        if depth > MAX_DEPTH:
            raise YamlLimitError(f"{name}: nested deeper than the limit of {MAX_DEPTH} levels")
        if isinstance(x, dict):
            if len(x) > max_nodes:
                raise YamlLimitError(f"{name}: more than the limit of {max_nodes:,} values")
            todo.extend((v, depth + 1) for v in x.values())
        elif isinstance(x, (list, tuple)):
            if len(x) > max_nodes:
                raise YamlLimitError(f"{name}: more than the limit of {max_nodes:,} values")
            todo.extend((v, depth + 1) for v in x)


def _events(text: str, name: str):
    """The parser's events, stopping (one line) once there are more than the caps allow."""
    for i, ev in enumerate(yaml.parse(text, Loader=_Loader)):
        if i > 4 * MAX_NODES:
            raise YamlLimitError(f"{name}: more than the limit of {MAX_NODES:,} values")
        yield ev


def _regular_file(path: str | os.PathLike[str], max_bytes: int, what: str) -> Path:
    """``path`` as a regular file within ``max_bytes``, else one line saying what it is."""
    import stat

    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise YamlLimitError(f"{path}: no such file") from None
    except OSError as e:
        raise YamlLimitError(f"{path}: cannot be read ({e.strerror or type(e).__name__})") from None
    if not stat.S_ISREG(st.st_mode):
        kind = ("a directory" if stat.S_ISDIR(st.st_mode) else "a FIFO (named pipe)" if stat.S_ISFIFO(st.st_mode)
                else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else "a socket or special file")
        raise YamlLimitError(f"{path}: {kind}, not a regular file; give the path of a {what}")
    if st.st_size > max_bytes:
        raise YamlLimitError(f"{path}: {st.st_size:,} bytes, over the limit of {max_bytes:,} bytes for a {what}")
    return p


def read_bounded_bytes(path: str | os.PathLike[str], max_bytes: int = MAX_BYTES, what: str = "config file") -> bytes:
    """A regular file's bytes, refused (:class:`YamlLimitError`, one line) when it is not a regular
    file or is over ``max_bytes``, checked before it is read and again while reading."""
    p = _regular_file(path, max_bytes, what)
    with open(p, "rb") as f:
        raw = f.read(max_bytes + 1)
    if len(raw) > max_bytes:  # it grew since
        raise YamlLimitError(f"{path}: over the limit of {max_bytes:,} bytes for a {what}")
    return raw


def read_yaml_text(path: str | os.PathLike[str]) -> str:
    """A YAML file's text, refused (:class:`YamlLimitError`) over :data:`MAX_BYTES` before it
    is read, or when it is not a regular file."""
    raw = read_bounded_bytes(path)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise YamlLimitError(f"{path}: not UTF-8 text (byte {e.start})") from None


_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')  # a JSON string, escapes included
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


def check_json_limits(text: str, name: str = "<text>") -> None:
    """Nesting deeper than :data:`MAX_DEPTH`, found before any parser recurses into it (strings
    removed, then the brackets' running depth; linear):
    :class:`YamlLimitError`, one line."""
    import numpy as np

    brackets = np.frombuffer(_NOT_BRACKET.sub("", _JSON_STRING.sub("", text)).encode("ascii"), np.uint8)
    opens = (brackets == ord("[")) | (brackets == ord("{"))
    if brackets.size and int(np.cumsum(np.where(opens, 1, -1)).max()) > MAX_DEPTH:
        raise YamlLimitError(f"{name}: nested deeper than the limit of {MAX_DEPTH} levels")


def loads_json_bounded(text: str, name: str = "<text>", allow_nonfinite: bool = False,
                       max_chars: int = MAX_BYTES * 64, max_nodes: int = MAX_NODES) -> Any:
    """``json.loads`` within the caps: depth (:func:`check_json_limits`), integer length, values
    (:func:`check_tree_limits`), and NaN or Infinity refused by name unless ``allow_nonfinite``."""
    import json

    if len(text) > max_chars:
        raise YamlLimitError(f"{name}: {len(text):,} characters, over the limit of {max_chars:,}")
    check_json_limits(text, name)

    def integer(s: str) -> int:
        if len(s.lstrip("-")) > MAX_INT_DIGITS:
            raise YamlLimitError(f"{name}: an integer of {len(s):,} digits, over the limit of {MAX_INT_DIGITS} digits")
        return int(s)

    def constant(s: str) -> float:
        if not allow_nonfinite:
            raise YamlLimitError(f"{name}: holds {s}, not a finite number")
        return float(s)

    try:
        data = json.loads(text, parse_int=integer, parse_constant=constant)
    except json.JSONDecodeError as e:
        raise YamlLimitError(f"{name}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    check_tree_limits(data, name, max_nodes)
    return data


def load_json_bounded(path: str | os.PathLike[str], max_bytes: int = MAX_BYTES, what: str = "JSON file",
                      allow_nonfinite: bool = False) -> Any:
    """A JSON file a user hands in, read within the caps (:func:`read_bounded_bytes`,
    :func:`loads_json_bounded`); every refusal is a :class:`YamlLimitError` of one line naming it."""
    raw = read_bounded_bytes(path, max_bytes, what)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise YamlLimitError(f"{path}: not UTF-8 text (byte {e.start})") from None
    return loads_json_bounded(text, str(path), allow_nonfinite)


def load_user_file(path: str | os.PathLike[str], what: str = "file") -> Any:
    """A YAML or JSON file a user names (``.json``: JSON, else YAML), read within the caps; any
    problem is one :class:`YamlLimitError` line naming the file (not valid YAML or JSON included)."""
    if str(path).endswith(".json"):
        return load_json_bounded(path, what=what)
    try:
        return load_file_bounded(path)
    except YamlLimitError:
        raise
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise YamlLimitError(f"{path}: not valid YAML ({yaml_error_line(e)[:160]})") from None
    except RecursionError:
        raise YamlLimitError(f"{path}: nested too deeply to read") from None


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
