"""Bounds checked with the configuration, before any job (torch-free).

* :func:`memory_errors`: each training job's memory (:func:`distlab.pipeline.jobs.mem_mb`, the
  estimate a SLURM job asks for) against ``jobs.max_mem_mb``, and under NCCL each
  rank's GPU memory (:func:`distlab.pipeline.jobs.gpu_mem_mb`) against ``jobs.max_gpu_mem_mb``.
  The ceiling defaults to this machine's memory; ``max_mem_mb: slurm`` (the SLURM
  profile's) reads the largest node of the configured partitions from ``sinfo``.
  The estimate here leaves out the data set (not prepared yet at check time): the
  job's own request adds it.
* :func:`path_errors`: a data-set name or hub path that is absolute or climbs with
  ``..`` (it would reach a loader as a local folder).
* :func:`type_hint`: why ``'1e-3'`` is a string (YAML 1.1 reads a float only with a dot).

Each refusal is one line naming its key and what to write instead.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from typing import Any

import yaml

from ..pipeline import jobs as _jobs

MIB = 2**20
# a model's size keys, the batch's and the workers': what a memory refusal names
_SIZE_KEYS = ("d_model", "n_layer", "block_size", "hidden", "mlp_ratio")


def machine_mem_mb() -> int | None:
    """This machine's physical memory in MiB (None where the OS does not say)."""
    try:
        return int(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // MIB)
    except (AttributeError, ValueError, OSError):
        return None


def slurm_max_mem_mb(partitions: list[str]) -> int | None:
    """The largest node memory (MiB) of ``partitions`` by ``sinfo`` (None without sinfo)."""
    if not shutil.which("sinfo"):
        return None
    try:
        out = subprocess.run(["sinfo", "-h", "-p", ",".join(partitions), "-o", "%m"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    values = [int(m.group()) for m in re.finditer(r"\d+", out)]
    return max(values) if values else None


def gpu_mem_mb_here() -> int | None:
    """The smallest GPU's memory on this machine by ``nvidia-smi`` (None without one)."""
    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    values = [int(float(x)) for x in out.split() if x.strip()]
    return min(values) if values else None


def _ceiling(jobs: Mapping[str, Any]) -> tuple[int | None, str]:
    """(ceiling in MiB, where it comes from) for host memory."""
    value = jobs.get("max_mem_mb")
    if isinstance(value, str) and value.isdigit():  # --config 'jobs={max_mem_mb: 65536}' gives a string
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value, "jobs.max_mem_mb"
    if value == "slurm":
        parts = sorted(set((jobs.get("partitions") or {"cpu": "compute", "gpu": "gpu"}).values()))
        mb = slurm_max_mem_mb(parts)
        # off the cluster (a dry run on a laptop) there is no partition to compare with
        return mb, f"the largest node of partitions {', '.join(parts)} (sinfo; jobs.max_mem_mb: slurm)"
    return machine_mem_mb(), "this machine's memory (jobs.max_mem_mb unset)"


def _gpu_ceiling(jobs: Mapping[str, Any]) -> tuple[int | None, str]:
    value = jobs.get("max_gpu_mem_mb")
    if isinstance(value, int) and not isinstance(value, bool):
        return value, "jobs.max_gpu_mem_mb"
    return gpu_mem_mb_here(), "this machine's smallest GPU (jobs.max_gpu_mem_mb unset)"


def _as_list(x: Any) -> list:
    return list(x) if isinstance(x, list) else [x] if x is not None else []


def _ints(x: Any) -> list[int]:
    return [v for v in _as_list(x) if isinstance(v, int) and not isinstance(v, bool) and v > 0]


def training_specs(config: Mapping[str, Any]) -> list[tuple[dict, str, dict]]:
    """(the config keys that drive it: model, batch, workers; what it is; a run spec with
    every field the memory estimate reads) for the largest job of each kind planned."""
    out: list[tuple[dict, str, dict]] = []
    b = config.get("baseline")
    if isinstance(b, Mapping) and isinstance(b.get("model"), Mapping):
        for backend in _as_list(b.get("backends")) or ["simulated"]:
            out.append(({"model": "baseline.model", "batch": "baseline.batch_size",
                         "workers": "baseline.n_workers"}, f"baseline {backend} job", {
                "experiment": "baseline", "backend": backend, "model": b["model"],
                "n_workers": b.get("n_workers", 1), "batch_size": b.get("batch_size", 1),
                "dtype": b.get("dtype", "float32")}))
    p = config.get("pgc")
    if isinstance(p, Mapping) and isinstance(p.get("model"), Mapping):
        for group in ("motivating", "simulation", "cloud", "real"):
            g = p.get(group)
            if not isinstance(g, Mapping) or "batch_size" not in g:
                continue
            backends = ["simulated"] + (["gloo"] if group == "real" and g.get("enabled", True) else [])
            for backend in backends:
                real = group == "real"
                out.append(({"model": "pgc.model", "batch": f"pgc.{group}.batch_size",
                             "workers": "pgc.real.n" if real and "n" in g else "pgc.n"},
                            f"PGC {group} {backend} job", {
                    "experiment": "pgc", "backend": backend, "model": p["model"],
                    "n": g.get("n", p.get("n", 1)) if real else p.get("n", 1),
                    "batch_size": g["batch_size"], "dtype": p.get("dtype", "float32")}))
    d = config.get("demo")
    if isinstance(d, Mapping) and isinstance(d.get("model"), Mapping):
        kinds = [("demo", "simulated", d.get("n_workers"))]
        real = d.get("real")
        if isinstance(real, Mapping) and real.get("enabled", True):
            kinds.append(("demo.real", real.get("backend", "gloo"), real.get("n_workers")))
        sweep = d.get("sweep")
        if isinstance(sweep, Mapping):
            kinds.append(("demo.sweep", "simulated", sweep.get("n_workers")))
        for key, backend, workers in kinds:
            n = max(_ints(workers) or [1])
            out.append(({"model": "demo.model", "batch": "demo.batch_size", "workers": f"{key}.n_workers"},
                        f"DeMo {backend} job with {n} workers", {
                "experiment": "demo", "backend": backend, "model": d["model"], "n_workers": n,
                "batch_size": d.get("batch_size", 1), "dtype": d.get("dtype", "float32")}))
    loc = config.get("local_learning")
    if isinstance(loc, Mapping):
        base = {"experiment": "local", "batch_size": loc.get("batch_size", 1), "dtype": "float32"}
        keys = {"batch": "local_learning.batch_size", "workers": "local_learning.rc.sections"}
        for sub in ("", "rc", "pc"):
            s = loc.get(sub) if sub else loc
            if isinstance(s, Mapping) and isinstance(s.get("model"), Mapping):
                extra = ({"mode": "parallel", "concurrency": s.get("concurrency"),
                          "sections": s.get("sections", 1)} if sub == "rc" else {})
                where = f"local_learning.{sub}" if sub else "local_learning"
                out.append(({**keys, "model": f"{where}.model"}, f"{where.replace('_', '-')} job",
                            {**base, **extra, "model": s["model"]}))
    return out


def _driver(keys: dict, spec: dict, ceiling: float | None = None, need: float | None = None) -> tuple[str, str]:
    """The setting that drives the estimate (the model's size, the batch), and the processes."""
    model = spec["model"]
    nbytes = _jobs.DTYPE_BYTES.get(spec.get("dtype", "float32"), 4)
    state = _jobs.STATE_COPIES * _jobs.param_count(model) * nbytes / MIB
    acts = 0.0 if spec.get("backend") == "nccl" else \
        _jobs.per_process_batch(spec) * _jobs.activation_values(model) * nbytes / MIB
    size = [k for k in _SIZE_KEYS if isinstance(model.get(k), int)]
    if state >= acts:
        if size:
            k = max(size, key=lambda k: model[k])
            key = f"{keys['model']}.{k}"
            line = f"{key} = {model[k]}: model state {state:,.0f} MiB a process"
        else:
            key = f"{keys['model']}.name"
            line = f"{key} = {model.get('name')}: model state {state:,.0f} MiB a process"
    else:
        key = keys["batch"]
        line = f"{key} = {spec.get('batch_size')}: activations {acts:,.0f} MiB a process"
    procs = _jobs.processes(spec)
    if procs > 1:
        line += f", x {procs} processes ({keys['workers']})"
        if ceiling is not None and need is not None and need / procs <= ceiling:
            key = keys["workers"]  # one process would fit: the number of them is what is too many
            line = f"{key} = {procs} processes; {line}"
    return key, line


def memory_errors(config: Mapping[str, Any]) -> list[str]:
    """Training jobs whose estimated memory is past the ceiling, one line each."""
    jobs = config.get("jobs") if isinstance(config.get("jobs"), Mapping) else {}
    base_mb = jobs.get("base_mb", 700) if isinstance(jobs.get("base_mb"), int) else 700
    specs = training_specs(config)
    if not specs:
        return []
    ceiling, source = _ceiling(jobs)
    gpu_ceiling, gpu_source = (None, "")
    if any(s.get("backend") == "nccl" for _, _, s in specs):
        gpu_ceiling, gpu_source = _gpu_ceiling(jobs)
    out: list[tuple[int, str]] = []
    for keys, what, spec in specs:
        try:
            need = _jobs.mem_mb(spec, "", base_mb)
        except (KeyError, TypeError, ValueError):
            continue  # an ill-typed model or count: the schema's line names it
        if ceiling is not None and need > ceiling:
            key, why = _driver(keys, spec, ceiling, need)
            out.append((need, f"{key}: a {what} needs about {need:,} MiB of memory (estimated; {why}), "
                       f"over {source}: {ceiling:,} MiB; make the model or batch smaller, use fewer "
                       f"workers, or set jobs.max_mem_mb to the memory your nodes have"))
        if gpu_ceiling is not None and spec.get("backend") == "nccl":
            try:
                gneed = _jobs.gpu_mem_mb(spec)
            except (KeyError, TypeError, ValueError):
                continue
            if gneed > gpu_ceiling:
                key, why = _driver(keys, spec)
                out.append((gneed, f"{key}: a {what} needs about {gneed:,} MiB of GPU memory a rank (estimated; "
                           f"{why}), over {gpu_source}: {gpu_ceiling:,} MiB; "
                           f"make the model or batch smaller, or set jobs.max_gpu_mem_mb"))
    # one line a key: the largest job it drives
    worst: dict[str, tuple[int, str]] = {}
    for need, line in out:
        key = line.split(": ", 1)[0] + (" gpu" if "GPU memory" in line else "")
        if key not in worst or need > worst[key][0]:
            worst[key] = (need, line)
    return [line for _, line in worst.values()]


# ---- paths ---------------------------------------------------------------

# keys whose value is a name or a hub path (``owner/name``), never a local path
NAME_KEYS = ("hf_path", "hf_name", "dataset", "source", "name", "config_name", "revision", "split")


def _bad_path(value: str) -> str | None:
    if value.startswith(("/", "~")) or re.match(r"^[A-Za-z]:[\\/]", value):
        return "is an absolute path"
    if any(part == ".." for part in re.split(r"[\\/]", value)):
        return "climbs out with '..'"
    if value in (".",) or any(part == "." for part in re.split(r"[\\/]", value)):
        return "names the current folder with '.'"
    return None


def path_errors(config: Mapping[str, Any]) -> list[str]:
    """Data-set names and hub paths that are absolute or contain ``..``, one line each."""
    out: list[str] = []
    datasets = config.get("datasets")
    if isinstance(datasets, Mapping):
        for name, ds in datasets.items():
            if not isinstance(ds, Mapping):
                continue
            for k in NAME_KEYS:
                v = ds.get(k)
                why = _bad_path(v) if isinstance(v, str) else None
                if why:
                    what = "a hub path owner/name" if k == "hf_path" else "a name"
                    out.append(f"datasets.{name}.{k}: {v!r} {why}; it is {what}, not a local folder "
                               f"(write e.g. 'wikitext' or 'owner/name')")
    for section, sec in config.items():
        if section == "datasets" or not isinstance(sec, Mapping):
            continue
        out += _dataset_refs(sec, (str(section),))
    return out


def _dataset_refs(node: Any, path: tuple) -> list[str]:
    out: list[str] = []
    if isinstance(node, Mapping):
        for k, v in node.items():
            if k == "dataset" and isinstance(v, str):
                why = _bad_path(v)
                if why:
                    out.append(f"{'.'.join(path + (k,))}: {v!r} {why}; write the name of a data set "
                               f"configured under datasets")
            else:
                out += _dataset_refs(v, path + (str(k),))
    return out


# ---- data sizes ------------------------------------------------------------

def train_rows(config: Mapping[str, Any], name: Any) -> int | None:
    """Training images of data set ``name`` as the data rule will split it, where that is known
    before it runs: scikit-learn's digits (read from the copy scikit-learn ships), less the test
    and validation images held out (:func:`distlab.data.sources._image_splits`' arithmetic);
    None for a data set from the hub (its size is known once it is downloaded)."""
    spec = (config.get("datasets") or {}).get(name) if isinstance(name, str) else None
    if not isinstance(spec, Mapping) or spec.get("source") != "sklearn_digits":
        return None
    from sklearn.datasets import load_digits

    if "val_fraction" not in spec or "test_fraction" not in spec:  # the data module's default (it imports torch)
        from ..data.sources import DEFAULT_FRACTION
    n = len(load_digits().target)
    try:
        val, test = (float(spec.get(k) if k in spec else DEFAULT_FRACTION) for k in ("val_fraction", "test_fraction"))
    except (TypeError, ValueError):
        return None  # the schema names the key
    return n - round(test * n) - round(val * n)


def data_size_errors(config: Mapping[str, Any]) -> list[str]:
    """A batch larger than the training rows it is drawn from (baseline: the whole training split;
    PGC: batch_size // n a partition of train // n rows): one line naming the key, at config check
    rather than a ValueError once the job has started."""
    errors = []
    b = config.get("baseline")
    if isinstance(b, Mapping) and isinstance(b.get("batch_size"), int):
        rows = train_rows(config, b.get("dataset"))
        if rows is not None and b["batch_size"] > rows:
            errors.append(f"baseline.batch_size = {b['batch_size']:,}: above the {rows:,} training rows of "
                          f"{b.get('dataset')}; give at most {rows:,}")
    p = config.get("pgc")
    rows = train_rows(config, p.get("dataset")) if isinstance(p, Mapping) else None
    for group in ("motivating", "simulation", "cloud", "real") if rows is not None else ():
        g = p.get(group)
        if not isinstance(g, Mapping) or not isinstance(g.get("batch_size"), int):
            continue
        for n in _ints(g.get("n", p.get("n", 1)) if group == "real" else p.get("n", 1)):
            if n >= 1 and g["batch_size"] // n > rows // n:
                errors.append(f"pgc.{group}.batch_size = {g['batch_size']:,}: {g['batch_size'] // n:,} a partition "
                              f"for n = {n}, above the {rows // n:,} rows of each of {p.get('dataset')}'s "
                              f"partitions; give at most {rows // n * n:,}")
    return errors


# ---- files ---------------------------------------------------------------

def config_file_errors(path: str | os.PathLike[str]) -> list[str]:
    """A config file that holds no mapping at its top (empty, comments only, a list): one
    line naming the file (a loader would read it as nothing, or fail without the name)."""
    from .yamlio import YamlLimitError, load_user_file

    try:
        data = load_user_file(path, "config file")
    except YamlLimitError:
        return []  # over a bound, unreadable or not YAML: the duplicate-key pass names the file
    if data is None:
        return [f"{path}: the file holds no settings (empty or comments only); write keys at its top "
                f"level (e.g. 'seeds: [0, 1]') or leave the file out"]
    if not isinstance(data, Mapping):
        return [f"{path}: the file holds a {type(data).__name__}, not a mapping of settings; write keys "
                f"at its top level (e.g. 'seeds: [0, 1]')"]
    return []


# ---- wording -------------------------------------------------------------

_YAML_FLOAT_LIKE = re.compile(r"^[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?$")


def type_hint(instance: Any, expected: Any) -> str | None:
    """What to write instead when YAML read a number as a string (``1e-3``)."""
    if not isinstance(instance, str) or not _YAML_FLOAT_LIKE.match(instance.strip()):
        return None
    wanted = expected if isinstance(expected, list) else [expected]
    if not any(t in ("number", "integer") for t in wanted):
        return None
    text = instance.strip()
    try:
        as_yaml = yaml.safe_load(text)
    except yaml.YAMLError:
        as_yaml = None
    if isinstance(as_yaml, (int, float)) and not isinstance(as_yaml, bool):  # it was quoted
        return (f"{instance!r} is a string, not a number: it is quoted; write {text} without quotes")
    mant, _, exp = text.lower().partition("e")
    fixed = mant if "." in mant else mant + ".0"
    if exp:
        fixed += "e" + (exp if exp[0] in "+-" else "+" + exp)
    return (f"{instance!r} is a string, not a number: YAML reads {text} as a string (a float needs "
            f"a dot, and a sign in its exponent); write {fixed}")


def shorten(message: str, limit: int = 160) -> str:
    """One line of at most ``limit`` characters (a schema's message may quote a whole value)."""
    line = " ".join(message.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."
