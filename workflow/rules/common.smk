# Helpers only: paths, parameter grids, run specs.  No rules here.
import json
import os

# The rules call the library as `python -m distlab`; with the Makefile's
# virtualenv it is installed, and in a conda env (envs/distlab.yaml) it is
# found through PYTHONPATH.
SRC = os.path.abspath(os.path.join(workflow.basedir, "src"))
shell.prefix(f'export PYTHONPATH="{SRC}${{{{PYTHONPATH:+:$PYTHONPATH}}}}"; ')
ENV = "../../envs/distlab.yaml"

RESULTS = "results"
PAPER = "paper"
SIM = "simulated"

wildcard_constraints:
    seed=r"\d+",
    dataset=r"[A-Za-z0-9_]+",


DATA_SPLITS = ("train", "val", "test")  # a prepared data set's split files, <split>.pt beside its manifest


def data_manifest(name):
    return f"{RESULTS}/data/{name}/manifest.json"


def floors_table(name):
    """The unigram/bigram floors of a text data set (rule data_floors)."""
    return f"{RESULTS}/data/{name}/floors.csv"


from distlab.clihelp import as_json
from distlab.pipeline.workflow import SharedWorkflow, benchmark_path, input_dirs, inputs_json, log_path

SHARED = SharedWorkflow(config, RESULTS)  # the shared rules' functions of a job's wildcards


def runtime_json():
    """Run-time settings (timeouts, checkpoint cadence) for `--runtime`.

    They change no result, so rules pass them as a resource
    (`resources: distlab_runtime=runtime_json()`), which is not a rerun
    trigger: editing them reruns nothing.  The run spec (`params.spec`) holds
    everything that does change results."""
    rt = config["runtime"]
    return as_json({"timeout_s": rt["timeout_s"], "job_timeout_s": rt["job_timeout_s"],
                    "checkpoint": rt["checkpoint"], "launcher": rt["launcher"]})


def data_mb(manifest):
    """Bytes of a prepared data set on disk (its split files), in MiB; 0 before it exists."""
    folder = os.path.dirname(manifest)
    total = 0
    for split in DATA_SPLITS:
        path = os.path.join(folder, f"{split}.pt")
        if os.path.exists(path):
            total += os.path.getsize(path)
    return total / 2**20


def mem_for(manifest, processes=1, base_mb=600, per_data=2.0):
    """A job's memory: each process holds the data set (plus working copies) and a model."""
    return int(processes * (base_mb + per_data * data_mb(manifest)))


def mem_of_inputs(base_mb, per_mb=4):
    """``mem_mb`` of a job that reads all its input tables into one frame (about 3x their size on
    disk, and working copies), plus ``base_mb`` for Python and pandas."""
    return lambda w, input: int(base_mb + per_mb * input.size_mb)


# A training job's batch request (profiles/slurm) from its run spec: distlab.pipeline.jobs.
from distlab.pipeline import jobs as _jobs

JOBS = config["jobs"]


def job_mem_mb(spec, manifest, base_mb=None):
    """MiB for the job: per process torch, the model's state, its activations, the data."""
    return _jobs.mem_mb(spec, manifest, base_mb or JOBS["base_mb"])


def job_runtime(rule, spec, manifest, attempt=1):
    """Minutes for the job: runs x steps x jobs.step_s[rule] (with margin), x attempt on a retry."""
    return _jobs.runtime_min(spec, manifest, JOBS, JOBS["step_s"].get(rule),
                             config["runtime"]["job_timeout_s"], attempt)


def job_gpus(spec):
    """One GPU per rank under NCCL, none otherwise."""
    return _jobs.gpus(spec)


def job_partition(spec):
    """jobs.partitions.gpu for a job with GPUs, jobs.partitions.cpu otherwise."""
    return _jobs.partition(_jobs.gpus(spec), JOBS)


def train_resources(rule, spec_of, base_mb=None, gpu=False, partition=False, runtime=True):
    """A training rule's resources from its spec (``spec_of(wildcards)``, the function its
    params.spec names, which builds a job's spec once): memory, minutes (jobs.step_s[rule]),
    with ``gpu`` its GPUs and with ``partition`` its batch partition, and the run-time settings."""

    def mem_mb(wildcards, input):
        return job_mem_mb(spec_of(wildcards), input.data, base_mb)

    def minutes(wildcards, input, attempt):
        return job_runtime(rule, spec_of(wildcards), input.data, attempt)

    def gpus(wildcards):
        return job_gpus(spec_of(wildcards))

    def slurm_partition(wildcards):
        return job_partition(spec_of(wildcards))

    out = {"mem_mb": mem_mb}
    if gpu:
        out["gpu"] = gpus
    if partition:
        out["slurm_partition"] = slurm_partition
    if runtime:
        out["runtime"] = minutes
    out["distlab_runtime"] = runtime_json()
    return out


def run_files(run):
    """A training run's files in its folder ``run``: its manifest and its metrics (the outputs of
    a job that trains one seed)."""
    return {"manifest": f"{run}/manifest.json", "metrics": f"{run}/metrics.csv"}


def seed_files(job, seeds):
    """The runs of a job that trains ``seeds`` one after another, each in ``job``/seed<k>: every
    seed's manifest, then every seed's metrics."""
    return {"manifests": [f"{job}/seed{k}/manifest.json" for k in seeds],
            "metrics": [f"{job}/seed{k}/metrics.csv" for k in seeds]}


def train_params(spec, out=None):
    """A training rule's params for `python -m distlab train`: the run spec (``spec``, the function
    of the wildcards that builds it, or its text), the folder it writes (``out``; by default the
    folder of output.manifest, a one-seed job's run folder) and the data set's folder (input.data's)."""
    return {"spec": spec, "out": subpath(output.manifest, parent=True) if out is None else out,
            "data": subpath(input.data, parent=True)}


def csv_and_beside(stem, **beside):
    """The files of a command that writes its table to ``--out <stem>.csv`` (output.csv) and more
    files beside it, each named <stem><suffix> (``md=".md"``, ``fit="_fit.csv"``)."""
    return {"csv": f"{stem}.csv", **{name: f"{stem}{suffix}" for name, suffix in beside.items()}}


def report_figure(path, category, caption, label):
    """A figure in the Snakemake report (snakemake --report): under ``category``, captioned by
    workflow/report/<caption>.rst, labelled ``label``."""
    return report(path, category=category, caption=f"../report/{caption}.rst", labels={"figure": label})


def with_report_figure(files, category, caption, label):
    """A rule's files by kind (png, csv, md), its figure, the png, in the report (report_figure)."""
    return {**files, "png": report_figure(files["png"], category, caption, label)}


def partition_for_gpus(gpus):
    """jobs.partitions.gpu for a job that claims GPUs, jobs.partitions.cpu otherwise."""
    return _jobs.partition(int(gpus), JOBS)


# Summary tables the scorecard reads, by paper: each paper's rule file calls
# register_tables(paper, {name: path}) for its own; scorecard_inputs(paper)
# gives one paper's, so a paper's target needs only its own runs.
SUMMARY_TABLES = {}
PAPER_IDS = {"foundation": "foundation", "pgc": "P1", "placement": "P2",
             "local_learning": "P3", "demo": "P4", "atlas": "atlas"}


def register_tables(paper, tables):
    if paper not in PAPER_IDS.values():
        raise ValueError(f"register_tables: unknown paper {paper!r}")
    SUMMARY_TABLES.setdefault(paper, {}).update(tables)


def scorecard_inputs(paper):
    return dict(SUMMARY_TABLES.get(paper, {}))


# Figures and tables, by paper: each paper's rule file calls
# register_outputs(paper, [paths]); `rule figures`, `rule tables` and the
# write-up gather them.
PAPER_OUTPUTS = {}


def register_outputs(paper, paths):
    if paper not in PAPER_IDS.values():
        raise ValueError(f"register_outputs: unknown paper {paper!r}")
    PAPER_OUTPUTS.setdefault(paper, []).extend(paths)


def all_outputs():
    return [f for paper in ("foundation", "P1", "P2", "P3", "P4", "atlas") for f in PAPER_OUTPUTS.get(paper, [])]


def scorecard_papers():
    """Papers with at least one registered table, in a fixed order."""
    return [p for p in ("foundation", "P1", "P2", "P3", "P4") if p in SUMMARY_TABLES]


# stats.extra_seeds: more seeds for the settings of named claims (distlab.pipeline.extra_seeds)
from distlab.pipeline.extra_seeds import for_setting as extra_for_setting

if (config.get("stats") or {}).get("extra_seeds"):
    from distlab.pipeline.extra_seeds import requests as _extra_requests
    from distlab.scoring.claims import load_claims_file as _load_claims_file

    EXTRA_SEED_REQUESTS = _extra_requests(config, *_load_claims_file(f"{workflow.basedir}/config/claims.yaml"))
else:
    EXTRA_SEED_REQUESTS = []


def stats_json():
    return as_json(config["stats"])
