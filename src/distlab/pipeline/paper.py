"""The contract every paper package keeps: one :class:`Paper` object, and the typed protocols of
the modules it names.

A paper package (``distlab.pgc``, ``distlab.local``, ..., the baseline's ``distlab.baseline``)
exports ``PAPER`` from its ``paper`` module: its one canonical name and the other names the
project gives it (its config section, its scorecard section, its claims' id prefix), its rule
file, its config schema, its trainer and torch-free spec module, its command plugin, its
summarize and figure steps and its page, and its place in the write-up.  The papers are found,
not listed (:func:`registered`: each ``distlab/<package>/paper.py``); ``cli.py``, the
Snakefile, ``common.smk`` (:class:`SharedWorkflow`) and the config checks read them through
:mod:`distlab.papers`, the shared modules through :func:`find`, and no list of papers is kept.

The modules a paper names are checked against the protocols below (``isinstance`` of a
``runtime_checkable`` protocol), not with ``hasattr`` at each use:

* :class:`Trainer`: ``SPEC_SCHEMA`` and ``run_simulated(spec, data_dir, out_dir, runtime)``;
  :class:`DistributedTrainer` adds ``run_distributed`` (a real backend: gloo, nccl);
  optional, each its own protocol: :class:`CountsProcesses` (``nprocs(spec)``),
  :class:`CountsWork` (``work(spec)``), :class:`LosesRanks` (``expendable_ranks(spec)``); and two
  flags, ``NEEDS_DATA`` (default True) and ``SETS_THREADS`` (default False);
* :class:`SpecModule`: a torch-free ``SPEC_SCHEMA`` and ``nprocs(spec)``, so the process that
  validates a spec and launches torchrun never imports torch;
* :class:`ConfigCheck`: ``CONFIG_SECTION`` and ``check(config) -> ["key: why", ...]``;
* :class:`CliPlugin`: ``register(subparsers)``, adding ``python -m distlab <paper> <verb>``.

Torch-free and import-light: a ``Paper`` holds module names, imported only when used.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from types import ModuleType
from typing import Any, Generic, Mapping, Protocol, runtime_checkable

__all__ = ["CliPlugin", "ConfigCheck", "CountsProcesses", "CountsWork", "LosesRanks", "DistributedTrainer", "Paper",
           "PaperError", "SpecModule", "Trainer", "discovered", "find", "registered"]


class PaperError(ValueError):
    """A registered paper does not keep the contract (a module missing or of the wrong shape)."""


@runtime_checkable
class Trainer(Protocol):
    SPEC_SCHEMA: dict

    def run_simulated(self, spec: dict, data_dir: Any, out_dir: Any, runtime: dict) -> Any: ...


@runtime_checkable
class DistributedTrainer(Trainer, Protocol):
    def run_distributed(self, spec: dict, data_dir: Any, out_dir: Any, runtime: dict) -> Any: ...


@runtime_checkable
class CountsProcesses(Protocol):
    """A trainer or spec module whose real job runs other than one process per worker."""

    def nprocs(self, spec: dict) -> int: ...


@runtime_checkable
class CountsWork(Protocol):
    """A trainer whose deadline scales with steps other than its spec's steps x runs."""

    def work(self, spec: dict) -> int: ...


@runtime_checkable
class LosesRanks(Protocol):
    """A trainer whose job survives some ranks dying (PGC: up to s workers)."""

    def expendable_ranks(self, spec: dict) -> tuple[tuple[int, ...], int]: ...


@runtime_checkable
class SpecModule(Protocol):
    SPEC_SCHEMA: dict

    def nprocs(self, spec: dict) -> int: ...


@runtime_checkable
class ConfigCheck(Protocol):
    CONFIG_SECTION: str

    def check(self, config: Mapping) -> list[str]: ...


@runtime_checkable
class CliPlugin(Protocol):
    def register(self, sub: Any) -> None: ...


def _members(protocol: type) -> set[str]:
    """The names a protocol asks for (its annotations and methods, its bases' included)."""
    out: set[str] = set()
    for base in protocol.__mro__:
        if base in (Protocol, Generic, object):
            continue
        out |= set(getattr(base, "__annotations__", {}))
        out |= {n for n, v in vars(base).items() if callable(v) and not n.startswith("_")}
    return out


def _load(module: str, protocol: type, what: str, paper: str) -> ModuleType:
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as e:
        raise PaperError(f"paper {paper!r}: its {what} {module} is not installed ({e})") from e
    if not isinstance(mod, protocol):
        missing = [n for n in _members(protocol) if not hasattr(mod, n)]
        raise PaperError(f"paper {paper!r}: its {what} {module} does not keep the {protocol.__name__} "
                         f"contract{' (missing ' + ', '.join(sorted(missing)) + ')' if missing else ''}")
    return mod


@dataclass(frozen=True)
class Paper:
    """One paper of the project, and every name the code knows it by.

    ``name`` is canonical: the package (``distlab.<name>`` unless ``package`` says otherwise),
    ``python -m distlab train --experiment <name>`` and ``python -m distlab <name> <verb>``.
    The others are what a file outside the code spells: ``section`` (config/config.yaml),
    ``scorecard`` (the claims' ``paper:`` field and the scorecard's section), ``claims_prefix``
    (the first part of its claim ids)."""

    name: str
    title: str                          # the write-up's label
    scorecard: str                      # claims' `paper:` and paper/scorecard/<scorecard>.md
    section: str                        # its config section
    claims_prefix: str                  # config/claims.yaml ids start with "<prefix>."
    rule_file: str                      # its Snakemake rules, relative to the repository
    doc: str                            # its page, relative to the repository
    order: int                          # its place in the write-up: rule files, outputs, scorecard sections
    package: str = ""                   # default distlab.<name>
    schema: str | None = None           # its section's JSON schema file (None: in config.schema.yaml)
    trainer: str | None = None          # module of its trainer (Trainer)
    spec_module: str | None = None      # torch-free SPEC_SCHEMA and nprocs (SpecModule)
    config_check: str | None = None     # CONFIG_SECTION and check(config) (ConfigCheck)
    cli: str | None = None              # register(subparsers) (CliPlugin)
    summarize: tuple[str, ...] = ()     # its summarize step: the command's words after `distlab`
    figures: tuple[str, ...] = ()       # its figure step: the command's words after `distlab`
    code: tuple[str, ...] = ()          # folders whose commits may explain its verdicts
    text_floors: bool = False           # its claims' conditions read its text data set's n-gram floors
    scored_without_tables: bool = False  # its scorecard section exists even without tables ("not run")
    aliases: tuple[str, ...] = field(default=())  # other spellings in use (wildcard values, file names)
    # (selector key, technique registry): its claims' selectors under that key name a registered
    # technique (distlab.techniques.catalogue.REGISTRIES), its name or its label; the config check refuses others
    claim_registries: tuple[tuple[str, str], ...] = ()
    # what the shared modules read of a paper by its spec's `experiment` (through find(), below)
    device_default: str = "cpu"         # a simulated spec without `device` runs there (distlab.runtime.device)
    batch_per_worker: bool = False      # its spec's batch_size is each worker's, not the step's (pipeline.jobs)
    gpu_tier_device: bool = False       # the GPU tier's --device overrides its section's device (scripts/gpu)
    config_required: bool = False       # every configuration has its section (the schema requires it)

    def __post_init__(self) -> None:
        if not self.package:
            object.__setattr__(self, "package", f"distlab.{self.name}")

    @property
    def names(self) -> tuple[str, ...]:
        """Every name of the paper, the canonical one first."""
        return tuple(dict.fromkeys((self.name, self.section, self.scorecard, self.claims_prefix,
                                    *self.aliases)))

    def trainer_module(self) -> ModuleType:
        """Its trainer, imported (torch, for most): a :class:`Trainer`."""
        if self.trainer is None:
            raise PaperError(f"paper {self.name!r} has no trainer")
        return _load(self.trainer, Trainer, "trainer", self.name)

    def spec_module_loaded(self) -> ModuleType | None:
        """Its torch-free spec module (a :class:`SpecModule`), or None."""
        return None if self.spec_module is None else _load(self.spec_module, SpecModule, "spec module", self.name)

    def config_checker(self) -> ModuleType | None:
        """Its config cross-field rules (a :class:`ConfigCheck`), or None."""
        return None if self.config_check is None else _load(self.config_check, ConfigCheck, "config check",
                                                            self.name)

    def cli_plugin(self) -> ModuleType | None:
        """Its command plugin (a :class:`CliPlugin`), or None."""
        return None if self.cli is None else _load(self.cli, CliPlugin, "command plugin", self.name)

    def modules(self) -> tuple[str, ...]:
        """The modules it names (the fork server preloads them)."""
        return tuple(m for m in (self.trainer, self.spec_module, self.config_check, self.cli) if m)


# the contract's own module matches distlab/*/paper.py and is no paper
_CONTRACT = "pipeline"


@lru_cache(maxsize=None)
def registered() -> tuple[Paper, ...]:
    """Every paper: each package's ``distlab/<package>/paper.py`` and its ``PAPER``, found, not
    listed, in the write-up's order (``Paper.order``).  The one way to the papers: the registry
    (:mod:`distlab.papers`), the shared modules (:func:`find`) and the config checks read it.

    A ``paper.py`` without a ``PAPER``, two papers of one order or one name are refused."""
    import distlab

    out: list[Paper] = []
    for root in distlab.__path__:
        for f in sorted(Path(root).glob("*/paper.py")):
            if f.parent.name == _CONTRACT:
                continue
            module = f"distlab.{f.parent.name}.paper"
            paper = getattr(importlib.import_module(module), "PAPER", None)
            if not isinstance(paper, Paper):
                raise PaperError(f"{module}: PAPER is not a distlab.pipeline.paper.Paper")
            out.append(paper)
    out.sort(key=lambda p: p.order)
    for a, b in zip(out, out[1:]):
        if a.order == b.order:
            raise PaperError(f"papers {a.name!r} and {b.name!r} take the same order {a.order}")
    seen: dict[str, str] = {}
    for p in out:
        for n in p.names:
            if seen.setdefault(n, p.name) != p.name:
                raise PaperError(f"the name {n!r} belongs to two papers: {seen[n]!r} and {p.name!r}")
    return tuple(out)


@lru_cache(maxsize=None)
def discovered() -> dict[str, Paper]:
    """The papers of :func:`registered` by each of their names."""
    return {n: p for p in registered() for n in p.names}


def find(name: str) -> Paper | None:
    """The paper any of whose names is ``name`` (a spec's ``experiment``), or None."""
    return discovered().get(name)
