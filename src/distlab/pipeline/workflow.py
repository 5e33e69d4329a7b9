"""What the rule files share (torch-free; workflow/rules/common.smk imports ``__all__``).

A rule file holds rules; a function a rule calls with a job's wildcards (an input function,
params, threads, resources) is a named function here or in its paper's ``workflow.py`` (the
baseline's ``distlab/baseline/workflow.py``, the atlas's ``distlab/atlas/workflow.py``), so a reader
finds it by name and a test can call it.  Here:

* the constants every rule file reads (``RESULTS``, ``PAPER``, ``SIM``, ``ENV``) and the paths of
  a data set, a run, a job's log and benchmark (``log_path``, ``benchmark_path``);
* the params that pass a rule's inputs on to its command (``inputs_json``, ``input_dirs``,
  ``train_params``) and the figures' report entries (``report_figure``);
* :class:`SharedWorkflow`, bound to the config: the shared rules' functions of a job's wildcards
  (data sets, scorecard), a training job's resources and batch request (distlab.pipeline.jobs),
  the run-time settings, stats.extra_seeds's requests, and the registries of each paper's
  summary tables and outputs.

The log and benchmark lines of a rule come from ``log_path``/``benchmark_path`` rather than a
template rule: Snakemake 9.27.1's ``use rule ... with:`` cannot replace a rule's ``shell``, so a
template would hold the lines only for rules that share a command; a global ``conda:`` activates
the environment in Snakemake's own process, not in each job, so ``conda: ENV`` stays per rule.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable

from ..clihelp import as_json
from . import jobs as _jobs

__all__ = ["RESULTS", "PAPER", "SIM", "ENV", "DATA_SPLITS", "RulesContext", "SharedWorkflow", "as_json",
           "benchmark_path", "seeds_folder", "csv_and_beside", "data_manifest", "floors_table", "input_dirs",
           "inputs_json", "log_path", "mem_for", "mem_of_inputs", "metrics_beside", "report_figure",
           "run_dirs_of_runs", "run_files", "seed_files", "train_params", "with_report_figure"]

RESULTS, PAPER, SIM = "results", "paper", "simulated"  # the results, the write-up, the simulated backend
ENV = "../../envs/distlab.yaml"  # every rule's conda environment (relative to workflow/rules/)
DATA_SPLITS = ("train", "val", "test")  # a prepared data set's split files, <split>.pt beside its manifest


def log_path(job: str) -> str:
    """The log of a job named ``job`` (``data/{dataset}``): ``logs/<job>.log``."""
    return f"logs/{job}.log"


def benchmark_path(job: str) -> str:
    """The benchmark table of a job named ``job``: ``benchmarks/<job>.tsv``."""
    return f"benchmarks/{job}.tsv"


def data_manifest(name: str, results: str = RESULTS) -> str:
    return f"{results}/data/{name}/manifest.json"


def floors_table(name: str, results: str = RESULTS) -> str:
    """The unigram/bigram floors of a text data set (rule data_floors)."""
    return f"{results}/data/{name}/floors.csv"


def data_mb(manifest: str) -> float:
    """Bytes of a prepared data set on disk (its split files), in MiB; 0 before it exists."""
    folder = os.path.dirname(manifest)
    total = 0
    for split in DATA_SPLITS:
        path = os.path.join(folder, f"{split}.pt")
        if os.path.exists(path):
            total += os.path.getsize(path)
    return total / 2**20


def mem_for(manifest: str, processes: int = 1, base_mb: int = 600, per_data: float = 2.0) -> int:
    """A job's memory: each process holds the data set (plus working copies) and a model."""
    return int(processes * (base_mb + per_data * data_mb(manifest)))


def mem_of_inputs(base_mb: int, per_mb: int = 4):
    """``mem_mb`` of a job that reads all its input tables into one frame (about 3x their size on
    disk, and working copies), plus ``base_mb`` for Python and pandas."""

    def mem_mb(wildcards, input) -> int:
        return int(base_mb + per_mb * input.size_mb)

    return mem_mb


def run_files(run: str) -> dict[str, str]:
    """A training run's files in its folder ``run``: its manifest and its metrics (the outputs of
    a job that trains one seed)."""
    return {"manifest": f"{run}/manifest.json", "metrics": f"{run}/metrics.csv"}


def seed_files(job: str, seeds) -> dict[str, list[str]]:
    """The runs of a job that trains ``seeds`` one after another, each in ``job``/seed<k>: every
    seed's manifest, then every seed's metrics."""
    return {"manifests": [f"{job}/seed{k}/manifest.json" for k in seeds],
            "metrics": [f"{job}/seed{k}/metrics.csv" for k in seeds]}


def seeds_folder(wildcards, output) -> str:
    """The folder holding a multi-seed job's seed<k> run folders, from its first manifest
    (a param inferred from the outputs, as Snakemake's linter asks of a path prefix)."""
    import os

    return os.path.dirname(os.path.dirname(output.manifests[0]))


def train_params(spec, out=None) -> dict:
    """A training rule's params for `python -m distlab train`: the run spec (``spec``, the function
    of the wildcards that builds it, or its text), the folder it writes (``out``; by default the
    folder of output.manifest, a one-seed job's run folder) and the data set's folder (input.data's)."""
    from snakemake.ioutils import rule_item_factory, subpath

    output, input = rule_item_factory("output"), rule_item_factory("input")
    return {"spec": spec, "out": subpath(output.manifest, parent=True) if out is None else out,
            "data": subpath(input.data, parent=True)}


def csv_and_beside(stem: str, **beside: str) -> dict[str, str]:
    """The files of a command that writes its table to ``--out <stem>.csv`` (output.csv) and more
    files beside it, each named <stem><suffix> (``md=".md"``, ``fit="_fit.csv"``)."""
    return {"csv": f"{stem}.csv", **{name: f"{stem}{suffix}" for name, suffix in beside.items()}}


def report_figure(path: str, category: str, caption: str, label: str):
    """A figure in the Snakemake report (snakemake --report): under ``category``, captioned by
    workflow/report/<caption>.rst, labelled ``label``."""
    from snakemake.io import report

    return report(path, category=category, caption=f"../report/{caption}.rst", labels={"figure": label})


def with_report_figure(files: dict, category: str, caption: str, label: str) -> dict:
    """A rule's files by kind (png, csv, md), its figure, the png, in the report (report_figure)."""
    return {**files, "png": report_figure(files["png"], category, caption, label)}


def inputs_json(wildcards, input) -> str:
    """A figure or summary command's ``--inputs``: the rule's named inputs as JSON."""
    return as_json(dict(input.items()))


def metrics_beside(manifests) -> list[str]:
    """The metrics file beside each run manifest: a summarize rule's inputs with the manifests,
    so an edit of a run's metrics makes its summary out of date (and the summarizer, checking the
    run's seal, names the edited file)."""
    return [os.path.join(os.path.dirname(f), "metrics.csv") for f in manifests]


def run_dirs_of_runs(wildcards, input) -> list[str]:
    """The run folders of a rule's ``runs`` input (its manifests), the metrics beside them left out."""
    return input_dirs(wildcards, input.runs)


def input_dirs(wildcards, input) -> list[str]:
    """The folder of each of the rule's input files (run folders from their manifests)."""
    return [os.path.dirname(f) for f in input]


@dataclass
class RulesContext:
    """What every paper's rule helper is built from besides the config, one contract for all:
    ``Helper(config, context)``.  Without a context (a test, the GPU tier's planner) the helper
    reads the defaults: the usual folders, no extra seeds, no Snakemake."""

    results: str = RESULTS
    paper: str = PAPER
    extra_seeds: list = field(default_factory=list)  # stats.extra_seeds's requests (SharedWorkflow)
    workflow: Any = None  # Snakemake's: the --cores a timed job holds (distlab.runtime.machine_load)
    partition_for_gpus: Callable[[Any], str] | None = None  # a job's batch partition (SharedWorkflow)

    def data_manifest(self, name: str) -> str:
        return data_manifest(name, self.results)

    def floors_table(self, name: str) -> str:
        return floors_table(name, self.results)


class SharedWorkflow:
    """The shared rules' functions of a job's wildcards (data sets, scorecard), bound to the
    config; the rule files' registries of summary tables and paper outputs."""

    def __init__(self, config: dict[str, Any], basedir: str, results: str = RESULTS, papers=()) -> None:
        # papers: the registry's (distlab.papers.papers(), handed in by common.smk: a shared
        # module names no paper), in the write-up's order
        self.config, self.results, self.papers = config, results, tuple(papers)
        self.jobs = config["jobs"]
        # The rules call the library as `python -m distlab`; with the Makefile's virtualenv it is
        # installed, and in a conda env (envs/distlab.yaml) it is found through PYTHONPATH.
        src = os.path.abspath(os.path.join(basedir, "src"))
        self.shell_prefix = f'export PYTHONPATH="{src}${{{{PYTHONPATH:+:$PYTHONPATH}}}}"; '
        self.extra_seed_requests = self._extra_seed_requests(f"{basedir}/config/claims.yaml")
        # summary tables the scorecard reads, by paper (scorecard_inputs(paper): one paper's, so a
        # paper's target needs only its own runs); figures and tables, by paper (`rule figures`,
        # `rule tables` and the write-up gather them)
        self.summary_tables: dict[str, dict[str, str]] = {}
        self.paper_outputs: dict[str, list[str]] = {}

    def _extra_seed_requests(self, claims_file: str) -> list:
        """stats.extra_seeds: the extra seeds named claims ask of their settings
        (distlab.pipeline.extra_seeds); none without the key (config/claims.yaml is then not read)."""
        if not (self.config.get("stats") or {}).get("extra_seeds"):
            return []
        from ..scoring.claims import load_claims_file
        from .extra_seeds import requests

        return requests(self.config, *load_claims_file(claims_file))

    # -- registries: each paper's rule file registers its own tables and outputs
    def paper(self, name: str):
        """The registered paper any of whose names is ``name`` (distlab.pipeline.paper.Paper)."""
        for p in self.papers:
            if name in p.names:
                return p
        raise ValueError(f"unknown paper {name!r} (registered: {', '.join(p.name for p in self.papers)})")

    def _scorecard_id(self, name: str) -> str:
        return self.paper(name).scorecard

    def register(self, paper: str, tables: dict[str, str] | None = None, outputs=None) -> None:
        """A paper's summary tables (the scorecard's inputs) and its figures and tables; ``paper``
        is any of its names (its canonical name, config section or scorecard section)."""
        if tables is not None:
            self.register_tables(paper, tables)
        if outputs is not None:
            self.register_outputs(paper, outputs)

    def register_tables(self, paper: str, tables: dict[str, str]) -> None:
        self.summary_tables.setdefault(self._scorecard_id(paper), {}).update(tables)

    def register_floors(self) -> None:
        """The language-model papers' quality conditions read their text data set's floors."""
        for paper in self.papers:
            if not paper.text_floors:
                continue
            section = paper.section
            name = (self.config.get(section) or {}).get("dataset")
            if section in self.config and self.config["datasets"].get(name, {}).get("kind") == "text":
                self.register_tables(paper.scorecard, {f"floors_{name}": floors_table(name, self.results)})

    def scorecard_inputs(self, paper: str) -> dict[str, str]:
        return dict(self.summary_tables.get(paper, {}))

    def register_outputs(self, paper: str, paths) -> None:
        self.paper_outputs.setdefault(self._scorecard_id(paper), []).extend(paths)

    def all_outputs(self) -> list[str]:
        """Every paper's figures and tables, in the registry's order."""
        return [f for paper in self.papers for f in self.paper_outputs.get(paper.scorecard, [])]

    @staticmethod
    def report_pages() -> list[str]:
        """The write-up's pages beside paper/README.md, one a section (distlab.scoring.report.PAGES)."""
        from ..scoring.report import PAGES

        return [f"paper/{page}.md" for page in PAGES]

    def scorecard_papers(self) -> list[str]:
        """The scorecard's sections, in the registry's order: each paper with at least one
        registered table, and those scored without tables (their rows then read "not run")."""
        return [p.scorecard for p in self.papers if p.scorecard in self.summary_tables or p.scored_without_tables]

    def scorecard_pattern(self) -> str:
        """The ``paper`` wildcard's values: every registered paper's scorecard section."""
        return "|".join(p.scorecard for p in self.papers)

    def scorecard_tables(self, wildcards) -> list[str]:
        """scorecard_paper's inputs: the tables the paper of the ``paper`` wildcard registered."""
        return list(self.scorecard_inputs(wildcards.paper).values())

    def scorecard_table_args(self, wildcards) -> list[str]:
        """scorecard_paper's ``--table=<name>=<path>`` arguments, one a registered table."""
        return [f"--table={k}={v}" for k, v in self.scorecard_inputs(wildcards.paper).items()]

    # -- run-time settings and a training job's batch request (profiles/slurm): distlab.pipeline.jobs
    def runtime_json(self) -> str:
        """Run-time settings (timeouts, checkpoint cadence) for `--runtime`.

        They change no result, so rules pass them as a resource
        (`resources: distlab_runtime=runtime_json()`), which is not a rerun
        trigger: editing them reruns nothing.  The run spec (`params.spec`) holds
        everything that does change results."""
        rt = self.config["runtime"]
        return as_json({"timeout_s": rt["timeout_s"], "job_timeout_s": rt["job_timeout_s"],
                        "checkpoint": rt["checkpoint"], "launcher": rt["launcher"]})

    def stats_json(self) -> str:
        """The statistics settings a scorecard reads: ``stats`` without ``extra_seeds``, which
        adds training runs (their summaries are the scorecard's input files, so a changed
        request reruns only the scorecards whose tables change)."""
        return as_json({k: v for k, v in self.config["stats"].items() if k != "extra_seeds"})

    def job_mem_mb(self, spec, manifest, base_mb=None) -> int:
        """MiB for the job: per process torch, the model's state, its activations, the data."""
        return _jobs.mem_mb(spec, manifest, base_mb or self.jobs["base_mb"])

    def job_runtime(self, rule, spec, manifest, attempt=1):
        """Minutes for the job: runs x steps x jobs.step_s[rule] (with margin), x attempt on a retry."""
        return _jobs.runtime_min(spec, manifest, self.jobs, self.jobs["step_s"].get(rule),
                                 self.config["runtime"]["job_timeout_s"], attempt)

    def context(self, workflow=None) -> RulesContext:
        """The context every paper's rule helper is built with (common.smk's ``RULES``)."""
        return RulesContext(self.results, PAPER, list(self.extra_seed_requests), workflow, self.partition_for_gpus)

    def partition_for_gpus(self, gpus) -> str:
        """jobs.partitions.gpu for a job that claims GPUs, jobs.partitions.cpu otherwise."""
        return _jobs.partition(int(gpus), self.jobs)

    def train_resources(self, rule, spec_of, base_mb=None, gpu=False, partition=False, runtime=True) -> dict:
        """A training rule's resources from its spec (``spec_of(wildcards)``, the function its
        params.spec names, which builds a job's spec once): memory, minutes (jobs.step_s[rule]),
        with ``gpu`` its GPUs and with ``partition`` its batch partition, and the run-time settings."""

        def mem_mb(wildcards, input):
            return self.job_mem_mb(spec_of(wildcards), input.data, base_mb)

        def minutes(wildcards, input, attempt):
            return self.job_runtime(rule, spec_of(wildcards), input.data, attempt)

        def gpus(wildcards):
            return _jobs.gpus(spec_of(wildcards))  # one GPU per rank under NCCL, none otherwise

        def slurm_partition(wildcards):
            return _jobs.partition(_jobs.gpus(spec_of(wildcards)), self.jobs)

        out: dict[str, Any] = {"mem_mb": mem_mb}
        if gpu:
            out["gpu"] = gpus
        if partition:
            out["slurm_partition"] = slurm_partition
        if runtime:
            out["runtime"] = minutes
        out["distlab_runtime"] = self.runtime_json()
        return out

    # -- data sets (workflow/rules/data.smk)
    def dataset_dir(self, wildcards) -> str:
        """The folder of the data set named by the ``dataset`` wildcard."""
        return f"{self.results}/data/{wildcards.dataset}"

    def dataset_spec(self, wildcards) -> str:
        """prepare_data's spec: the data set's config section and its name."""
        return as_json({"name": wildcards.dataset, **self.config["datasets"][wildcards.dataset]})

    def dataset_mem_mb(self, wildcards) -> int:
        """The embedded sets are small; a hub image set is decoded in full once (uint8)."""
        return 16000 if self.config["datasets"][wildcards.dataset]["source"] == "hf" else 2000
