"""The GPU tier's plan: every job ``config/gpu.yaml`` runs, with its estimated GPU- and core-seconds.

The jobs are the workflow's own run specs (built by each paper's spec builders from the merged
configuration, so a job here is the job ``snakemake --configfile config/gpu.yaml`` runs):

* ``gpu`` — simulated runs whose workers compute on the device one after another (the atlas's
  technique runs and sweeps, DeMo's four methods at N = 2 and 4);
* ``cpu`` — real runs that need the host's cores: PGC's n = 12 gloo processes (n + 1 with the
  master) and P3's throughput benchmark with one core per section.

Estimates (seconds of wall time on the tier's host):

* a GPU job: steps x the sum over workers of one worker's step (forward + backward of its
  passes) + the update + evaluations.  One worker's step is *measured* where a calibration
  (:func:`calibrate`, run first by ``scripts/gpu/run_tier.py`` on the device) holds the model
  and batch, else *extrapolated* from ``gpu_tier.device`` (assumed FLOP rate, memory bandwidth and
  kernel-launch cost, stated in config/gpu.yaml) and the model's parameter count;
* a CPU job: from the step costs measured on the reference 2-core machine (``jobs.step_s``, the
  local benchmark's tick), *extrapolated* to a process a core.

Every row says which.  Nothing here measures a claim: it sizes the tier.
"""

from __future__ import annotations

import copy
import itertools
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import SimpleNamespace

import yaml

from ..config.specs import SpecError
from ..config.yamlio import YamlLimitError, load_user_file
from ..techniques.catalogue import passes_per_step  # a worker's gradient passes a step, by technique

ROOT = Path(__file__).resolve().parents[3]
VOCAB = 256


def merge(base: dict, over: dict) -> dict:
    """``over`` merged into a copy of ``base`` key by key (nested mappings merged, anything else
    replaced): what ``snakemake --configfile`` does with an overlay."""
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def load_config(overlays: list[str | Path], root: str | Path = ROOT) -> dict:
    """config/config.yaml with each overlay merged over it, in order."""
    cfg = yaml.safe_load((Path(root) / "config" / "config.yaml").read_text())
    for path in overlays:
        try:
            data = load_user_file(path, "config file")
        except YamlLimitError as e:  # over a bound, not a regular file, not YAML: one line naming it
            raise SpecError(f"--configfile: {e}") from None
        if not isinstance(data, dict):
            raise SpecError(f"--configfile: {path}: not keys at its top level")
        cfg = merge(cfg, data)
    if "gpu_tier" not in cfg:
        raise SpecError("gpu plan: the merged configuration has no gpu_tier: section (give --configfile config/gpu.yaml)")
    return cfg


# ------------------------------------------------------------------ model arithmetic

def n_params(model: dict) -> int:
    """Parameters of a GPT config (exact: the library's model built on the meta device)."""
    import torch

    from ..models import build_model

    cfg = {k: v for k, v in model.items() if k != "name"}
    with torch.device("meta"):
        m = build_model("gpt", vocab_size=VOCAB, **cfg)
    return sum(p.numel() for p in m.parameters())


_PARAMS: dict[str, int] = {}


def params_of(model: dict) -> int:
    key = json.dumps(model, sort_keys=True)
    if key not in _PARAMS:
        _PARAMS[key] = n_params(model)
    return _PARAMS[key]


def model_key(model: dict, batch: int) -> str:
    """One calibration entry's key: the model's shape and the batch (windows a worker-step)."""
    return f"L{model.get('n_layer', 2)}-d{model.get('d_model', 64)}-T{model.get('block_size', 32)}-b{batch}"


def worker_step_s(model: dict, batch: int, dev: dict, calibration: dict | None) -> tuple[float, str]:
    """Seconds of one worker's forward + backward + its share of the update, and its label."""
    key = model_key(model, batch)
    if calibration and key in calibration.get("worker_step_s", {}):
        return float(calibration["worker_step_s"][key]), "measured"
    P = params_of(model)
    tokens = batch * int(model.get("block_size", 32))
    flops = 6.0 * P * tokens
    layers = int(model.get("n_layer", 2))
    s = (flops / float(dev["fp32_flops"]) + P * float(dev["update_bytes_per_param"]) / float(dev["mem_Bps"])
         + float(dev["launch_s"]) * (int(dev["kernels_per_layer"]) * layers + int(dev["kernels_fixed"])))
    return s, "extrapolated"


# ------------------------------------------------------------------ jobs

@dataclass
class Job:
    section: str
    name: str
    resource: str                     # gpu | cpu
    command: list = field(default_factory=list)   # `python -m distlab ...` arguments ({data}, {out} filled in)
    data: str = ""                    # the data set it reads
    est_s: float = 0.0                # wall seconds on the tier's host
    gpu_s: float = 0.0
    core_s: float = 0.0
    label: str = "extrapolated"
    priority: int = 1                 # 0: in the runner's slice (seed 0: every atlas technique and size at the
                                      # largest N, at the sweep grid's first lr; DeMo's methods at each N)

    def row(self) -> dict:
        d = asdict(self)
        d.pop("command")
        return d


def _train(experiment: str, spec: dict) -> list:
    return ["train", "--experiment", experiment, "--spec", json.dumps(spec, sort_keys=True)]


def _gpu_run_s(model, batch, n, passes, steps, eval_every, eval_batches, dev, cal, final_tokens=0):
    w, label = worker_step_s(model, batch, dev, cal)
    evals = math.ceil(steps / max(1, eval_every)) + 1
    fwd = w / 3.0  # a forward pass is about a third of forward + backward
    tokens = batch * int(model.get("block_size", 32))
    final = fwd * final_tokens / tokens if final_tokens else 0.0
    return steps * n * passes * w + evals * eval_batches * fwd + final + float(dev["run_start_s"]), label


def atlas_jobs(cfg: dict, dev: dict, cal: dict | None) -> list[Job]:
    from ..atlas import workflow as aw

    a = cfg["atlas"]
    out = []
    for t in aw.techniques(a):
        lr = a["sweep"]["lrs"][0]
        specs = [("sweep/" + lab, s) for lab, s in aw.sweep_specs(a, t)]
        specs += [("run/" + lab, s) for lab, s in aw.run_specs(a, t, lr, None)]
        for lab, spec in specs:
            n, steps = int(spec["n_workers"]), int(spec["steps"])
            passes = passes_per_step(t, int(spec.get("s", 0)))
            est, label = _gpu_run_s(spec["model"], int(spec["batch_size"]), n, passes,
                                    steps, int(spec["eval_every"]), int(spec["eval_batches"]), dev, cal)
            seed0 = lab.endswith("seed0") and "/none/" in lab
            out.append(Job("atlas", f"atlas/{t}/{lab}", "gpu", _train("atlas", spec), a["dataset"], est, est, est,
                           label, 0 if seed0 and f"/n{max(a['n_workers'])}/" in lab else 1))
    for lab, spec in aw.reference_specs(a):
        est, label = _gpu_run_s(spec["model"], int(spec["batch_size"]), int(spec["n_workers"]), 1,
                                int(spec["steps"]), int(spec["eval_every"]), int(spec["eval_batches"]), dev, cal)
        out.append(Job("atlas", f"atlas/reference/{lab}", "gpu", _train("atlas", spec), a["dataset"], est, est, est,
                       label))
    return out


def demo_jobs(cfg: dict, dev: dict, cal: dict | None) -> list[Job]:
    from ..demo.workflow import DemoWorkflow

    d = cfg["demo"]
    wf = DemoWorkflow(cfg)
    out = []
    final_tokens = int(cfg["gpu_tier"].get("demo_final_tokens", 46000))
    for method, n, seed in itertools.product(d["methods"], d["n_workers"], cfg["seeds"]):
        spec = json.loads(wf.spec(method, n, seed, "simulated"))
        est, label = _gpu_run_s(spec["model"], int(spec["batch_size"]), int(n), 1, int(spec["steps"]),
                                int(spec["eval_every"]), int(spec["eval_batches"]), dev, cal, final_tokens)
        out.append(Job("demo", f"demo/n{n}/{method}/seed{seed}", "gpu", _train("demo", spec), d["dataset"],
                       est, est, est, label, 0 if seed == cfg["seeds"][0] else 1))
    return out


def pgc_jobs(cfg: dict) -> list[Job]:
    from ..pgc.workflow import PGCWorkflow

    p, r = cfg["pgc"], cfg["pgc"]["real"]
    if not r.get("enabled", True):
        return []
    wf = PGCWorkflow(cfg)
    step_s = float(cfg["jobs"]["step_s"]["pgc_train_real"])
    out = []
    for (s, delay, scheme), seed in itertools.product(wf.settings("real"), r["seeds"]):
        w = SimpleNamespace(group="real", s=s, delay=delay, scheme=scheme, seed=seed)
        spec = json.loads(wf.real_spec(w))
        procs = int(r["n"]) + 1  # the master and n workers, a core each
        wall = int(r["steps"]) * step_s + float(cfg["gpu_tier"]["cpu"]["process_start_s"])
        out.append(Job("pgc", f"pgc/real/n{r['n']}/{scheme}/seed{seed}", "cpu", _train("pgc", spec), p["dataset"],
                       wall, 0.0, wall * procs, "extrapolated", 0 if seed == r["seeds"][0] else 1))
    return out


def local_jobs(cfg: dict) -> list[Job]:
    from ..local import workflow as lw

    c = cfg["local_learning"]
    b = c["bench"]
    cpu = cfg["gpu_tier"]["cpu"]
    m, ref = b["model"], cpu["local_tick_ref"]
    # one tick's work scales with layers x width^2 x tokens (the reference: a tick measured at its shape)
    work = m["n_layer"] * m["d_model"] ** 2 * m["block_size"] * b["batch_size"]
    ref_work = ref["n_layer"] * ref["d_model"] ** 2 * ref["block_size"] * ref["batch_size"]
    tick = float(ref["tick_s"]) * work / ref_work
    runs = len(b["methods"]) * int(b["repeats"])
    wall = runs * ((int(b["warmup"]) + int(b["measure"])) * tick + float(cpu["process_start_s"]))
    options = {"specs": lw.bench_specs(c), "repeats": b["repeats"], "warmup": b["warmup"], "measure": b["measure"]}
    cores = int(c["rc"]["sections"]) + 1
    return [Job("local", "local/bench_throughput", "cpu",
                ["local-bench", "throughput", "--options", json.dumps(options, sort_keys=True)], c["dataset"],
                wall, 0.0, wall * cores, "extrapolated", 0)]


def plan(cfg: dict, calibration: dict | None = None) -> list[Job]:
    """The tier's jobs in the order the runner takes them: the slice's (priority 0) first."""
    g = cfg["gpu_tier"]
    dev = g["device"]
    jobs: list[Job] = []
    for section in g["sections"]:
        if section == "atlas":
            jobs += atlas_jobs(cfg, dev, calibration)
        elif section == "demo":
            jobs += demo_jobs(cfg, dev, calibration)
        elif section == "pgc":
            jobs += pgc_jobs(cfg)
        elif section == "local":
            jobs += local_jobs(cfg)
        else:
            raise SpecError(f"gpu_tier.sections: unknown section {section!r} (atlas, demo, pgc, local)")
    return sorted(jobs, key=lambda j: j.priority)  # stable: the sections' order within a priority


def totals(jobs: list[Job]) -> dict:
    gpu = sum(j.gpu_s for j in jobs)
    cpu_wall = sum(j.est_s for j in jobs if j.resource == "cpu")
    return {"jobs": len(jobs), "gpu_s": gpu, "core_s": sum(j.core_s for j in jobs), "cpu_wall_s": cpu_wall,
            "wall_s": gpu + cpu_wall, "measured": sum(j.label == "measured" for j in jobs)}


def models(cfg: dict) -> list[tuple[dict, int]]:
    """Every distinct (model, batch) the tier's GPU jobs train: what a calibration measures."""
    seen, out = set(), []
    a, d = cfg["atlas"], cfg["demo"]
    pairs = [(m, int(a["batch_size"])) for m in a["sizes"].values()] if "atlas" in cfg["gpu_tier"]["sections"] else []
    if "demo" in cfg["gpu_tier"]["sections"]:
        pairs.append((d["model"], int(d["batch_size"])))
    for m, b in pairs:
        k = model_key(m, b)
        if k not in seen:
            seen.add(k)
            out.append((dict(m), b))
    return out


def format_plan(jobs: list[Job], cfg: dict, calibration: dict | None = None) -> str:
    """The dry run's text: one line per (section, resource) group, the models, the totals."""
    g = cfg["gpu_tier"]
    lines = [f"GPU tier plan: {len(jobs)} jobs; budget {g['budget_s']:.0f} s of wall time on one "
             f"{g['device']['name']} host ({g['cores']} cores); estimates "
             + ("from this device's calibration where measured" if calibration else
                "extrapolated from the assumed device constants (gpu_tier.device); no calibration")]
    lines.append(f"{'section':8} {'resource':8} {'jobs':>5} {'slice':>5} {'GPU-s':>9} {'core-s':>9} {'wall-s':>9}  label")
    for (sec, res), grp in itertools.groupby(sorted(jobs, key=lambda j: (j.section, j.resource)),
                                             key=lambda j: (j.section, j.resource)):
        grp = list(grp)
        labels = sorted({j.label for j in grp})
        lines.append(f"{sec:8} {res:8} {len(grp):5d} {sum(j.priority == 0 for j in grp):5d} "
                     f"{sum(j.gpu_s for j in grp):9.1f} {sum(j.core_s for j in grp):9.1f} "
                     f"{sum(j.est_s for j in grp):9.1f}  {'/'.join(labels)}")
    dev = g["device"]
    for m, b in models(cfg):
        s, label = worker_step_s(m, b, dev, calibration)
        lines.append(f"model {model_key(m, b)}: {params_of(m) / 1e6:.2f} M parameters, one worker-step "
                     f"{s * 1e3:.2f} ms ({label})")
    t = totals(jobs)
    verdict = "within" if t["wall_s"] <= float(g["budget_s"]) else "OVER"
    lines.append(f"total: {t['gpu_s']:.1f} GPU-s, {t['core_s']:.1f} core-s, {t['wall_s']:.1f} s wall "
                 f"(GPU jobs one after another, then the CPU jobs): {verdict} the budget of {g['budget_s']:.0f} s")
    return "\n".join(lines)


# ------------------------------------------------------------------ shrinking (the suite's CPU run)

TINY = {"name": "gpt", "n_layer": 1, "d_model": 8, "n_head": 2, "block_size": 16}


def shrink(cfg: dict, steps: int = 4) -> dict:
    """The same tier at toy size on the CPU: tiny models, ``steps`` steps, one seed, device cpu,
    PGC's real run at n = 3, P3's benchmark at a toy shape with two sections."""
    c = copy.deepcopy(cfg)
    c["seeds"] = c["seeds"][:1]
    a = c["atlas"]
    a.update(device="cpu", steps=steps, eval_every=2, eval_batches=1, batch_size=2, seeds=[0],
             sizes={k: dict(TINY) for k in a["sizes"]})
    a["diloco"] = {**a["diloco"], "H": 2}
    a["demo"] = {**a["demo"], "chunk": 8, "topk": 4}
    a["sweep"] = {**a["sweep"], "settings": {}}
    a["headline"] = {**a.get("headline", {}), "seeds": []} if a.get("headline") else a.get("headline")
    a["reference"] = {**a["reference"], "seeds": [0], "steps": steps, "eval_batches": 1}
    a["train_under"] = {**a["train_under"], "seeds": [0]}
    d = c["demo"]
    d.update(device="cpu", steps=steps, eval_every=2, eval_batches=1, batch_size=2, model=dict(TINY))
    d["diloco"] = {**d["diloco"], "H": 2}
    d["demo"] = {**d["demo"], "chunk": 8, "topk": 4}
    r = c["pgc"]["real"]
    r.update(n=3, s=1, seeds=r["seeds"][:1], steps=2, batch_size=12)
    b = c["local_learning"]["bench"]
    b.update(model={"name": "gpt", "n_layer": 4, "n_head": 2, "d_model": 16, "block_size": 16}, batch_size=2,
             repeats=1, warmup=1, measure=2)
    c["local_learning"]["rc"] = {**c["local_learning"]["rc"], "sections": 2}
    return c
