"""Whether SLURM's client tools are here, in one line (torch-free, Snakemake-free).

profiles/slurm submits every job through the Snakemake SLURM executor plugin, which calls
``sbatch`` to submit, ``squeue`` or ``sacct`` to follow a job, and ``sinfo``/``scontrol`` to
read the cluster.  Two ways it fails on a machine without them, both with a traceback or a
run of retries rather than a reason:

* no SLURM tool at all: the plugin loads, and each submission fails three times
  (``No such file or directory: 'sacct'``) before Snakemake gives up;
* ``sinfo`` without ``squeue`` and ``sacct`` (a partial install): importing the plugin raises
  ``Neither 'sacct' nor 'squeue' commands are available``, and since Snakemake imports every
  installed executor plugin when it starts, *every* ``snakemake`` command fails, local runs too.

:func:`client_problem` names what is missing in one line; the Snakefile asks it before a run
under the SLURM executor, the Makefile (:func:`main`) before any ``snakemake``, and the test suite to skip what needs a SLURM client.
"""

from __future__ import annotations

import os
import shutil
import sys

# what the SLURM executor plugin calls: submit, follow (either one), read the cluster
CLIENT_TOOLS = ("sbatch", "squeue", "sacct", "sinfo", "scontrol")
INSTALL = ("install SLURM's client tools (Debian/Ubuntu: apt-get install slurm-client; "
           "as root, scripts/slurm_up.sh installs and starts a one-node cluster)")


def found(path: str | None = None) -> dict[str, str | None]:
    """Each of :data:`CLIENT_TOOLS` and where ``path`` (default: $PATH) has it, or None."""
    path = os.environ.get("PATH", "") if path is None else path
    return {tool: shutil.which(tool, path=path) for tool in CLIENT_TOOLS}


def plugin_import_problem(path: str | None = None) -> str | None:
    """The one line for a PATH on which importing the SLURM executor plugin fails (``sinfo``
    without ``squeue`` or ``sacct``), else None."""
    have = found(path)
    if have["sinfo"] and not (have["squeue"] or have["sacct"]):
        return (f"SLURM's sinfo is on PATH ({have['sinfo']}) but neither squeue nor sacct is, so "
                "Snakemake's SLURM executor plugin cannot be imported and every snakemake command fails: "
                f"{INSTALL}, or take that sinfo off PATH")
    return None


def client_problem(path: str | None = None) -> str | None:
    """One line naming what is missing for submitting through SLURM on ``path``, else None."""
    have = found(path)
    missing = [t for t in CLIENT_TOOLS if not have[t]]
    if len(missing) == len(CLIENT_TOOLS):
        return f"SLURM is not installed here (none of {', '.join(CLIENT_TOOLS)} on PATH): {INSTALL}"
    broken = plugin_import_problem(path)
    if broken:
        return broken
    need = [t for t in ("sbatch", "sinfo", "scontrol") if not have[t]]
    if not (have["squeue"] or have["sacct"]):
        need.append("squeue or sacct")
    if need:
        return f"SLURM's client is incomplete here ({', '.join(need)} not on PATH): {INSTALL}"
    return None


def main(argv: list[str] | None = None) -> int:
    """``main([--client])`` (the Makefile's check): exit 2 with one line where every
    ``snakemake`` would fail on importing the SLURM plugin (with ``--client``: where SLURM's
    client is missing or incomplete), else 0 silently."""
    argv = sys.argv[1:] if argv is None else argv
    if argv not in ([], ["--client"]):
        print("usage: main([] or ['--client'])", file=sys.stderr)
        return 2
    problem = client_problem() if argv else plugin_import_problem()
    if problem:
        print(problem, file=sys.stderr)
        return 2
    return 0
