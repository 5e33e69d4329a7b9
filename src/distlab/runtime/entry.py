"""The command line a process forked by the runtime runs, handed down by the dispatcher.

A runtime module that forks ranks which each run ``python -m distlab <argv>`` in-process
(:func:`distlab.runtime.netns.run_shaped`: the ranks share the parent's imports instead of
each starting an interpreter and importing torch) needs the dispatcher's ``main`` and
``preload``.  The dispatcher is the top layer and the runtime the bottom one, so the runtime
does not import it, neither by ``import`` nor by a module name in a string
(``tests/test_shape.py`` checks both): :mod:`distlab.cli` registers both functions here when
it is imported, as :mod:`distlab.runtime.forkserver` is handed ``main`` by its caller.

A process that never imported the dispatcher (a library user calling the runtime directly)
has no entry: :func:`main` and :func:`preload` then raise one clear ``RuntimeError`` naming
what to do, and :func:`registered` says so beforehand.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

_main: Callable[[list[str]], int | None] | None = None
_preload: Callable[[list[str]], None] | None = None


def register(main: Callable[[list[str]], int | None], preload: Callable[[list[str]], None]) -> None:
    """Make ``main(argv)`` the command a forked rank runs and ``preload(argv)`` what imports
    its modules beforehand (the dispatcher calls this when it is imported)."""
    global _main, _preload
    _main, _preload = main, preload


def registered() -> bool:
    return _main is not None


def _missing() -> RuntimeError:
    return RuntimeError("no distlab command line is registered in this process: import distlab.cli "
                        "(python -m distlab does) before forking ranks that run a distlab command")


def main(argv: Sequence[str]) -> int | None:
    """``python -m distlab *argv``, run in this process by the registered dispatcher."""
    if _main is None:
        raise _missing()
    return _main(list(argv))


def preload(argv: Sequence[str]) -> None:
    """Import here what ``python -m distlab *argv`` imports, by the registered dispatcher."""
    if _preload is None:
        raise _missing()
    _preload(list(argv))
