"""Config files read with bounds before Snakemake parses them (``make reproduce CONFIG=...``).

Snakemake reads every ``--configfile`` with its own YAML parser before the workflow's code (and
so :func:`distlab.config.checks.check_config`) runs, and that parse has no bounds: a 50 MB file
of comments parses for minutes, a list nested 5,000 deep ends in a RecursionError traceback of
about 3,000 lines.  The Makefile's targets that start Snakemake first run::

    python -m distlab.config.preflight <snakemake's arguments>

which takes every file named by ``--configfile``/``--configfiles`` (also ``--configfile=X`` and
the option's unambiguous abbreviations) and reads it with the bounded loader
(:func:`distlab.config.yamlio.load_file_bounded`: size, nesting depth and values with aliases
expanded are capped).  A file over a cap, not YAML, or not keys at its top level is one line
naming the file, exit 2, in well under a second; the schema checks stay with the workflow
(``distlab check-config`` runs both without Snakemake).
"""

from __future__ import annotations

import sys
from pathlib import Path

PREFIX = "make"
_OPTION = "--configfiles"


def _is_configfile_option(word: str) -> bool:
    """``--configfile``, ``--configfiles`` or an abbreviation argparse would take for them
    (longer than ``--config``, which is another option)."""
    name = word.split("=", 1)[0]
    return len(name) > len("--config") and _OPTION.startswith(name)


def configfiles(args: list[str]) -> list[str]:
    """The config files Snakemake would read from ``args``: the words after a ``--configfile``
    option up to the next option (Snakemake takes them all), and ``--configfile=X``."""
    files: list[str] = []
    taking = False
    for word in args:
        if word.startswith("-") and word != "-":
            taking = False
            if _is_configfile_option(word):
                if "=" in word:
                    files.append(word.split("=", 1)[1])
                else:
                    taking = True
            continue
        if taking:
            files.append(word)
    return files


def problem(name: str) -> str | None:
    """What keeps Snakemake from reading config file ``name`` quickly and sanely, in one line
    naming the file; None when it is a bounded mapping."""
    import yaml

    from .yamlio import YamlLimitError, load_file_bounded, yaml_error_line

    path = Path(name)
    try:
        data = load_file_bounded(path)
    except YamlLimitError as e:
        return str(e)
    except OSError as e:
        return f"{name}: cannot be read ({e.strerror or e})"
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        return f"{name}: not valid YAML ({yaml_error_line(e)[:160]})"
    except RecursionError:  # a bound the loader has not caught: still one line
        return f"{name}: nested too deeply to read"
    if not isinstance(data, dict):
        return f"{name}: not keys at its top level; write `key: value` lines, for instance `seeds: [0, 1]`"
    return None


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    problems = [p for p in map(problem, configfiles(args)) if p]
    for line in problems:
        print(f"{PREFIX}: {line}", file=sys.stderr)
    return 2 if problems else 0

