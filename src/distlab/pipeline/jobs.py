"""What a batch job asks the scheduler for, from its run spec alone (torch-free).

The workflow's training rules pass their run spec here (``distlab.pipeline.workflow``:
``SharedWorkflow.train_resources``, ``job_mem_mb``, ``job_runtime``), so a SLURM job's request
follows its configuration:

* **GPUs and partition**: one GPU per rank under NCCL, none otherwise; a job with GPUs
  goes to the configured GPU partition, every other job to the CPU partition.
* **memory** (host): per process, the interpreter and torch (``base_mb``), the model's
  state (weights, gradients and two optimizer moments, at the spec's dtype) and, except
  under NCCL (on the GPU then), the activations a backward pass keeps for the process's
  share of the batch; plus the data set, which every process holds.  The parameter counts are exact for the models of
  ``distlab.models`` and the DeMo OLMo (``tests/test_jobs.py`` checks them against torch);
  the activation counts are estimates (values kept per sample, stated below).
* **runtime**: start-up plus ``margin`` x runs x steps x the stated seconds per step of
  that rule (``jobs.step_s`` in the configuration); a retried job (``attempt`` > 1)
  gets ``attempt`` times as long, and resumes from its checkpoint.  Without a stated
  step time a real job gets ``runtime.job_timeout_s``, after which it stops itself.
"""
from __future__ import annotations

import json
import math
import os

from .paper import find

MIB = 2**20
DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}
# weights, gradients and Adam's two moments (SGD needs fewer: an upper bound)
STATE_COPIES = 4
VOCAB = 256  # byte tokens


def param_count(model: dict, num_classes: int = 10, in_channels: int = 3, in_features: int = 64) -> int:
    """Parameters of ``model`` (a spec's model section), without building it."""
    name = model["name"]
    if name in ("gpt", "olmo"):
        d, L, T = int(model["d_model"]), int(model["n_layer"]), int(model["block_size"])
        emb = VOCAB * d + T * d  # token table (tied to the head) and positions
        if name == "gpt":  # two LayerNorms, qkv and proj with bias, 4d MLP with bias
            return emb + L * (12 * d * d + 13 * d) + 2 * d
        r = int(model.get("mlp_ratio", 8))  # OLMo: no biases, SwiGLU halves the MLP's output
        return emb + L * (4 * d * d + r * d * d + (r * d // 2) * d)
    if name == "resnet18":
        k = 3 if model.get("small_input") else 7
        # torchvision's ResNet-18 without its 7x7 RGB stem and its 1000-class head
        body = 11_689_512 - 64 * 3 * 49 - (512 * 1000 + 1000)
        return body + 64 * in_channels * k * k + 512 * num_classes + num_classes
    if name == "cnn":
        pooled = 4  # distlab.models.cnn pools any image down to at most 4x4
        return (in_channels * 16 * 9 + 16) + (16 * 32 * 9 + 32) + (32 * pooled * pooled * 64 + 64) \
            + (64 * num_classes + num_classes)
    if name in ("mlp", "logreg"):
        widths = [in_features] + [int(h) for h in (model.get("hidden", (128, 64)) if name == "mlp" else ())]
        widths.append(num_classes)
        return sum(a * b + b for a, b in zip(widths, widths[1:]))
    raise ValueError(f"param_count: unknown model {name!r}")


def activation_values(model: dict, image_hw: int | None = None, in_features: int = 64) -> int:
    """Values a backward pass keeps per sample (an estimate).

    Transformers: per layer and token, (6 + 2 x mlp ratio) x d (the normalised inputs,
    q, k, v, the attention output, the MLP's hidden activations before and after the
    nonlinearity), plus the logits and their softmax.  ResNet-18: each convolution's
    output, its batch norm's and its ReLU's (3 values per output element).  The CNN:
    the same for its two convolutions.  MLP / logistic regression: each layer's width
    twice."""
    name = model["name"]
    if name in ("gpt", "olmo"):
        d, L, T = int(model["d_model"]), int(model["n_layer"]), int(model["block_size"])
        r = 4 if name == "gpt" else int(model.get("mlp_ratio", 8))
        return L * T * (6 + 2 * r) * d + 2 * T * VOCAB
    if name == "resnet18":
        small = bool(model.get("small_input"))
        hw = (image_hw or (32 if small else 224)) ** 2
        stem = 64 * hw if small else 64 * hw // 4
        body = hw if small else hw // 16  # after the stride-2 stem and the max-pool
        # four stages of four convolutions: 64, 128, 256, 512 channels at 1, 1/4, 1/16, 1/64 the area
        stages = 4 * (64 * body + 128 * body // 4 + 256 * body // 16 + 512 * body // 64)
        return 3 * (stem + stages)
    if name == "cnn":
        hw = (image_hw or 8) ** 2
        return 3 * (16 * hw + 32 * hw // 4)
    if name in ("mlp", "logreg"):
        hidden = [int(h) for h in model.get("hidden", (128, 64))] if name == "mlp" else []
        return 2 * (in_features + sum(hidden))
    raise ValueError(f"activation_values: unknown model {name!r}")


def data_shape(manifest: str) -> dict:
    """What the prepared data set says of its samples (empty before it exists)."""
    if not manifest or not os.path.exists(manifest):
        return {}
    with open(manifest) as f:
        m = json.load(f)
    out = {}
    if m.get("num_classes"):
        out["num_classes"] = int(m["num_classes"])
    shape = m.get("image_shape")
    if shape:
        out["in_channels"], out["image_hw"] = int(shape[0]), int(shape[-1])
        out["in_features"] = int(math.prod(shape))
    return out


def _spec(spec: str | dict) -> dict:
    return json.loads(spec) if isinstance(spec, str) else dict(spec)


def processes(spec: str | dict) -> int:
    """Processes a job starts: 1 on the simulated backend, else its ranks (PGC: a master and n)."""
    s = _spec(spec)
    if s["experiment"] != "local" and s.get("backend", "simulated") == "simulated":
        return 1
    if s["experiment"] == "pgc":
        return int(s["n"]) + 1
    if s["experiment"] == "local":  # parallel RC: a process per section and the driver
        return int(s["sections"]) + 1 if s.get("mode") == "parallel" and s.get("concurrency") == "process" else 1
    return int(s.get("n_workers", 1))


def gpus(spec: str | dict) -> int:
    """One GPU per rank under NCCL, none otherwise."""
    s = _spec(spec)
    return processes(s) if s.get("backend") == "nccl" else 0


def per_process_batch(spec: str | dict) -> int:
    """Samples one process runs a backward pass on at once.

    A paper whose ``batch_size`` is each worker's (its ``Paper.batch_per_worker``: DeMo, local
    learning) runs it in every process; the others' (the baseline's, PGC's) is the step's
    global batch, split over the workers on real ranks (the simulator may hold the whole
    step's)."""
    s = _spec(spec)
    batch = int(s.get("batch_size", 1))
    paper = find(s["experiment"])
    if (paper is not None and paper.batch_per_worker) or s.get("backend", "simulated") == "simulated":
        return batch
    workers = int(s.get("n_workers", s.get("n", 1)))
    return max(1, batch // workers)


def mem_mb(spec: str | dict, manifest: str, base_mb: int, data_copies: float = 2.0) -> int:
    """Memory of the whole job: each process holds torch, the model's state, its
    activations and the data set (``data_copies`` copies of its files' size)."""
    s = _spec(spec)
    shape = data_shape(manifest)
    model = s["model"]
    nbytes = DTYPE_BYTES[s.get("dtype", "float32")]
    params = param_count(model, shape.get("num_classes", 10), shape.get("in_channels", 3),
                         shape.get("in_features", 64))
    acts = activation_values(model, shape.get("image_hw"), shape.get("in_features", 64))
    state_mb = STATE_COPIES * params * nbytes / MIB
    # under NCCL the activations live in GPU memory; the host keeps the model's state
    # (built there, and gathered there for a checkpoint)
    act_mb = 0.0 if s.get("backend") == "nccl" else per_process_batch(s) * acts * nbytes / MIB
    data = data_copies * data_files_mb(manifest)
    return int(math.ceil(processes(s) * (base_mb + state_mb + act_mb + data)))


def gpu_mem_mb(spec: str | dict, manifest: str = "", context_mb: int = 500) -> int:
    """GPU memory of one rank under NCCL: the CUDA context (``context_mb``), the model's
    state and the activations of the rank's share of the batch (0 off NCCL)."""
    s = _spec(spec)
    if s.get("backend") != "nccl":
        return 0
    shape = data_shape(manifest) if manifest else {}
    model = s["model"]
    nbytes = DTYPE_BYTES[s.get("dtype", "float32")]
    params = param_count(model, shape.get("num_classes", 10), shape.get("in_channels", 3),
                         shape.get("in_features", 64))
    acts = activation_values(model, shape.get("image_hw"), shape.get("in_features", 64))
    return int(math.ceil(context_mb + (STATE_COPIES * params + per_process_batch(s) * acts) * nbytes / MIB))


def data_files_mb(manifest: str) -> float:
    """Bytes of a prepared data set's split files, in MiB; 0 before it exists."""
    if not manifest:
        return 0.0
    folder = os.path.dirname(manifest)
    total = 0
    for split in ("train", "val", "test"):
        path = os.path.join(folder, f"{split}.pt")
        if os.path.exists(path):
            total += os.path.getsize(path)
    return total / MIB


def steps(spec: str | dict, manifest: str) -> int | None:
    """Steps of one run: the spec's ``steps``, or its epochs over the prepared training
    split (None before the data exists)."""
    s = _spec(spec)
    if "steps" in s:
        return int(s["steps"])
    if "epochs" in s and os.path.exists(manifest):
        with open(manifest) as f:
            m = json.load(f)
        n_train = int(m["splits"]["train"]["size"])
        return int(s["epochs"]) * math.ceil(n_train / int(s["batch_size"]))
    return None


def runs(spec: str | dict) -> int:
    """Runs one job does one after the other (a simulated job runs every seed)."""
    s = _spec(spec)
    return len(s["seeds"]) if "seeds" in s else 1


def runtime_min(spec: str | dict, manifest: str, jobs: dict, step_s: float | None, job_timeout_s: float,
                attempt: int = 1) -> int:
    """Minutes to ask for: start-up + margin x runs x steps x step time; ``attempt`` times
    that on a retry.  Without a stated step time (or before an epoch-based run's data
    exists), the job's own time limit ``job_timeout_s``."""
    n = steps(spec, manifest)
    if step_s is None or n is None:
        base = job_timeout_s / 60.0
    else:
        base = jobs["startup_min"] + jobs["margin"] * runs(spec) * n * float(step_s) / 60.0
    return int(math.ceil(base * max(1, int(attempt))))


def partition(n_gpus: int, jobs: dict) -> str:
    """The GPU partition for a job with GPUs, the CPU partition for every other."""
    return jobs["partitions"]["gpu" if n_gpus > 0 else "cpu"]
