#!/usr/bin/env python3
"""Copy Snakemake and what it imports from this environment into one folder to carry to a lent
GPU machine that lacks them (docs/gpu.md): ``PYTHONPATH=<folder>:src python -m snakemake ...``.

    python scripts/gpu/make_carry.py build/gpu-carry            # copy, then check the import
    python scripts/gpu/make_carry.py build/gpu-carry --check    # only check an existing folder

Left out: ``pulp`` (36 MB of bundled solvers; the tier's runs use ``--scheduler greedy``) and the
packages a torch install already has (``--have``, default: jinja2 markupsafe typing_extensions
filelock).  Compiled packages are copied as built here (CPython 3.11, x86-64 Linux): the script
lists them, and the folder is only good for the same Python minor version (docs/gpu.md says how
to build one for another with ``pip install --target``).  The folder's size is printed; the
work tree and the carried folders must stay under 64 MiB together.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

SKIP = {"pulp"}
HAVE = ["jinja2", "markupsafe", "typing-extensions", "filelock"]


def _key(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(root: str = "snakemake") -> list:
    """The distributions ``root`` requires (no extras, no Windows or old-Python markers)."""
    seen, out, todo = set(), [], [root]
    while todo:
        name = todo.pop()
        k = _key(name)
        if k in seen:
            continue
        seen.add(k)
        try:
            d = distribution(name)
        except PackageNotFoundError:
            continue
        out.append(d)
        for req in d.requires or []:
            if "extra ==" in req:
                continue
            if ";" in req:
                marker = req.split(";", 1)[1]
                if "python_version <" in marker or "win32" in marker or "Windows" in marker:
                    continue
            todo.append(re.match(r"[A-Za-z0-9_.\-]+", req).group(0))
    return out


def copy(dest: Path, have: list[str], only: list[str] | None = None) -> tuple[int, list[str]]:
    """Copy the closure less ``pulp`` and ``have`` (or, with ``only``, just those) into ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    skip = SKIP | {_key(h) for h in have}
    size, native = 0, []
    for d in closure():
        name = _key(d.metadata["Name"])
        if (only is None and name in skip) or (only is not None and name not in {_key(o) for o in only}):
            continue
        base = Path(d.locate_file(""))
        for f in d.files or []:
            rel = Path(str(f))
            if rel.parts[0] == ".." or rel.suffix == ".pyc" or "__pycache__" in rel.parts:
                continue  # scripts outside site-packages, byte code
            src = base / rel
            if not src.is_file():
                continue
            out = dest / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, out)
            size += src.stat().st_size
            if rel.suffix == ".so":
                native.append(str(rel))
    return size, native


def check(dest: Path, have: list[str]) -> int:
    """Import Snakemake from the folder: ``python -S`` (no site-packages) with PYTHONPATH = the folder,
    then a stand-in for the target's torch install holding only the ``have`` packages."""
    import tempfile

    code = ("import snakemake, snakemake.api, yaml, jsonschema; "
            "print('snakemake', snakemake.__version__, 'imports from', snakemake.__file__)")
    with tempfile.TemporaryDirectory() as side:
        copy(Path(side), [], only=have)
        r = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True,
                           env={"PYTHONPATH": f"{dest.resolve()}:{side}", "PYTHONDONTWRITEBYTECODE": "1"})
    print((r.stdout + r.stderr).strip())
    return r.returncode


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dest", type=Path)
    p.add_argument("--have", nargs="*", default=HAVE, help="packages the target already has (not copied)")
    p.add_argument("--check", action="store_true", help="only check an existing folder")
    a = p.parse_args()
    if not a.check:
        if a.dest.exists():
            shutil.rmtree(a.dest)
        size, native = copy(a.dest, a.have)
        print(f"{a.dest}: {size / 2**20:.1f} MiB; compiled files (CPython {sys.version_info.major}."
              f"{sys.version_info.minor} only): {len(native)}")
        for n in native:
            print(f"  {n}")
    return check(a.dest, a.have)


if __name__ == "__main__":
    sys.exit(main())
