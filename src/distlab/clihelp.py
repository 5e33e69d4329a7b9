"""What every ``distlab`` command line shares: JSON arguments, output paths, one error contract.

A rule passes its settings as JSON (``--spec '{...}'``, ``--options '{...}'``), built by the
paper's ``workflow.py`` with :func:`as_json` (keys sorted: the same spec is the same text,
so Snakemake's params trigger reruns only on a real change), and read back here with
:func:`json_arg`.  An output path is :func:`out_path` (a :class:`~pathlib.Path`).

The error contract: a mistake a user can make (a bad spec, missing data, a malformed
graph) ends the command with one line on stderr, ``distlab: <what and where>``, and exit
status 2; anything else is a bug and keeps its traceback.  :func:`call` runs a command under
that contract; a command names its own error types with ``set_defaults(errors=...)`` or with
:func:`guard`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

PREFIX = "distlab"


def as_json(obj: Any) -> str:
    """The JSON text of a spec or options, keys sorted (one setting, one text)."""
    return json.dumps(obj, sort_keys=True)


def json_arg(text: str) -> Any:
    """argparse ``type=`` of a JSON argument; invalid JSON is a usage error naming why."""
    from .config.yamlio import YamlLimitError, loads_json_bounded

    try:
        return loads_json_bounded(text, "the argument")
    except YamlLimitError as e:  # not JSON, nested too deep, an integer too long, NaN: one line
        raise argparse.ArgumentTypeError(str(e)) from None


def out_path(text: str) -> Path:
    """argparse ``type=`` of an output path (its folder is made by the writer)."""
    if not text:
        raise argparse.ArgumentTypeError("an output path may not be empty")
    return Path(text)


# What an option of :func:`command` takes, by kind: a JSON document (required, or ``{}``
# when not given), a path (an input, an output), several paths.
JSON = {"type": json_arg, "required": True}
JSON_OPT = {"type": json_arg, "default": {}}
PATH = {"type": Path, "required": True}
OUT = {"type": out_path, "required": True}
PATHS = {"nargs": "+", "required": True}
PATH_OPT = {"type": Path}
OUT_OPT = {"type": out_path}


def command(sub: argparse._SubParsersAction, name: str, func: Callable[[argparse.Namespace], int | None],
            help: str, **options: dict) -> argparse.ArgumentParser:
    """One subcommand from a table of its options: ``steps_out=OUT`` is ``--steps-out``, a
    required output path; a value is a kind above or argparse's own keywords (a dict)."""
    q = sub.add_parser(name, help=help)
    for key, kind in options.items():
        kind = dict(kind)
        if isinstance(kind.get("default"), (dict, list)):
            kind["default"] = type(kind["default"])(kind["default"])  # a command's own, not shared
        q.add_argument(f"--{key.replace('_', '-')}", **kind)
    q.set_defaults(func=func)
    return q


def user_errors() -> tuple[type[BaseException], ...]:
    """The errors every command reports in one line: a bad spec or setting, missing data."""
    from .data.errors import DataError
    from .config.specs import SpecError

    return (SpecError, DataError)


def fail(message: object, what: str = "") -> int:
    """Print the one line of the error contract; return its exit status, 2."""
    text = " ".join(str(message).splitlines()) or type(message).__name__
    print(f"{PREFIX}: {what + ': ' if what else ''}{text}", file=sys.stderr)
    return 2


def call(func: Callable[[argparse.Namespace], int | None], args: argparse.Namespace,
         errors: Iterable[type[BaseException]] = ()) -> int:
    """Run one command: its status (0 for None), or the one line and 2 on a user's error
    (:func:`user_errors`, ``errors`` and the command's own ``args.errors``)."""
    caught = (*user_errors(), *errors, *getattr(args, "errors", ()))
    try:
        return func(args) or 0
    except caught as e:
        return fail(e, getattr(args, "error_context", ""))


def guard(errors: Callable[[], Iterable[type[BaseException]]]):
    """Decorate a command so that the error types ``errors()`` returns (imported when the
    command runs, not when the parser is built) end it under the contract too."""
    def wrap(fn: Callable[[argparse.Namespace], int | None]):
        def wrapped(a: argparse.Namespace) -> int:
            kinds = tuple(errors())
            try:
                return fn(a) or 0
            except kinds as e:
                return fail(e, getattr(a, "error_context", ""))
        wrapped.__doc__, wrapped.__name__ = fn.__doc__, fn.__name__
        return wrapped
    return wrap
