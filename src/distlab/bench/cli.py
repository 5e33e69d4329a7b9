"""The benchmarks' commands, verbs of ``python -m distlab`` (registered through ``register``):

  python -m distlab calibrate --out CSV [--repeats 5 --warmup 2 --threads 1]
  python -m distlab allreduce --out CSV [--sizes-mb 1 4 16 64 --repeats 5 ...]   (under torchrun)
  python -m distlab netcheck --out CSV [--nprocs 4 --max-point-s 1.5 --inject-ms 2]
  python -m distlab techerror --data-demo DIR --data-pgc DIR --out CSV [--fit FIT.csv ...]

Measured, never asserted: what they write is what this machine did.  ``netcheck`` starts its
ranks as ``python -m distlab netcheck --worker ...`` (an internal form of the same verb).
"""

from __future__ import annotations

import argparse

from ..clihelp import OUT, PATH, PATH_OPT, command
from ..config.specs import SpecError


def cmd_calibrate(a: argparse.Namespace) -> None:
    from .calibrate import calibrate

    calibrate(a.out, repeats=a.repeats, warmup=a.warmup, threads=a.threads)


def cmd_allreduce(a: argparse.Namespace) -> None:
    from .allreduce import allreduce

    allreduce(a.out, sizes_mb=a.sizes_mb, repeats=a.repeats, warmup=a.warmup, backend=a.backend)


def cmd_netcheck(a: argparse.Namespace) -> None:
    from . import netcheck

    if a.worker:
        if not (a.sync and a.phases):
            raise SpecError("netcheck --worker: needs --sync and --phases")
        netcheck.worker(a.sync, a.out, a.phases)
        return
    netcheck.netcheck(a.out, nprocs=a.nprocs, max_point_s=a.max_point_s, inject_ms=a.inject_ms)


def cmd_techerror(a: argparse.Namespace) -> None:
    from .techerror import techerror

    techerror(a.data_demo, a.data_pgc, a.out, steps=a.steps, repeats=a.repeats,
              reference_repeats=a.reference_repeats, fit=a.fit)


def _int(default: int, help: str | None = None) -> dict:
    return {"type": int, "default": default, **({"help": help} if help else {})}


def _float(default: float) -> dict:
    return {"type": float, "default": default}


def register(sub: argparse._SubParsersAction) -> None:
    command(sub, "calibrate", cmd_calibrate, "measure the unit compute cost of the calibrated cluster model",
            out=OUT, repeats=_int(5), warmup=_int(2), threads=_int(1))
    command(sub, "allreduce", cmd_allreduce, "gloo/nccl all-reduce bandwidth against memcpy (run under torchrun)",
            sizes_mb={"type": float, "nargs": "+", "default": [1, 4, 16, 64]}, repeats=_int(5), warmup=_int(2),
            backend={"default": "auto"}, out=OUT)
    q = command(sub, "netcheck", cmd_netcheck, "gloo collectives on shaped links against the alpha-beta model "
                "(needs root)", out=OUT, nprocs=_int(4), max_point_s=_float(1.5), inject_ms=_float(2.0))
    # the ranks' own form of the verb (run_bench starts them): not for a user
    q.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    q.add_argument("--sync", help=argparse.SUPPRESS)
    q.add_argument("--phases", help=argparse.SUPPRESS)
    command(sub, "techerror", cmd_techerror, "the simulator's error per technique on shaped links (needs root)",
            data_demo=PATH, data_pgc=PATH,
            out={**OUT, "help": "summary CSV; .md, _steps.csv and .png beside it"},
            steps=_int(6), repeats=_int(2),
            reference_repeats=_int(1, "repeats of the unshaped reference runs"),
            fit={**PATH_OPT, "help": "netcheck's *_fit.csv: adds the error with the measured link"})

