"""Write envs/distlab.yaml from the lock envs/requirements.txt.

Snakemake copies only the YAML file into its conda folder, so the YAML must
list every pinned package itself (a `-r requirements.txt` line cannot be
resolved there).  tests/test_repo.py (test_conda_environment_lists_the_lock) checks the two stay equal:

    python envs/lock2conda.py            # rewrite envs/distlab.yaml
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
HEADER = """\
# The pinned environment every rule runs in under
#   snakemake --software-deployment-method conda
# GENERATED from envs/requirements.txt by envs/lock2conda.py: do not edit by
# hand (tests/test_repo.py fails when the two differ).  The rules find the
# distlab package itself through PYTHONPATH (set in workflow/rules/common.smk).
name: distlab
channels:
  - conda-forge
  - nodefaults
dependencies:
  - python=3.11
  - pip
  - pip:
"""


def pins(lock: Path) -> list[str]:
    out = []
    for line in lock.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            out.append(line)
    return out


def render(lock: Path) -> str:
    return HEADER + "".join(f"      - {p}\n" for p in pins(lock))


def main() -> int:
    (HERE / "distlab.yaml").write_text(render(HERE / "requirements.txt"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
