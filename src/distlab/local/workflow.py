"""Run specs of the local-learning workflow, from the ``local_learning`` config section.

Torch-free: the rule file imports it at parse time, and the tests build the very specs
the rules pass (``distlab train --experiment local --spec ...``).
"""

from __future__ import annotations

import os

from ..clihelp import as_json
from ..pipeline.workflow import RulesContext, mem_for
from ..runtime.machine_load import exclusive_threads, own_threads

GROUPS = ("rc", "pc")


PARALLEL = ("rc-par", "rc-thread", "rc-async")
LOCKSTEP = ("rc-par", "rc-thread")  # parallel RC that computes the sequential mode's numbers


def timed(group: str, method: str) -> bool:
    """Jobs whose wall time is compared (BP and parallel RC on the deep model) get the
    section's ``threads`` cores; every other job runs on one.  BP is timed on the timed
    seeds only (:func:`timed_seeds`); its other seeds run untimed (:func:`untimed_bp_seeds`)."""
    return group == "rc" and method in ("bp", "rc-par", "rc-async")


def timed_seeds(c: dict, seeds: list[int]) -> list[int]:
    """BP's timed seeds: ``rc.parallel_seeds`` when given (lock-step parallel RC runs only
    these; BP gets a timed job on these, the curves of the loss-vs-time figure), else all
    (asynchronous RC runs every seed, timed: :func:`seeds_of`)."""
    return list(c["rc"].get("parallel_seeds") or seeds)


def untimed_bp_seeds(c: dict, seeds: list[int]) -> list[int]:
    """The deep model's BP seeds that are not timed: one one-thread job trains them all (their
    numbers are the statistics' and do not depend on the thread count beyond float rounding;
    a two-thread job each would hold both cores for ~1.5x the CPU of one thread)."""
    timed_ = set(timed_seeds(c, seeds))
    return [int(s) for s in seeds if s not in timed_]


def untimed_bp_spec(c: dict, seeds: list[int], sweep_root: str | None = None) -> dict:
    """The one job of :func:`untimed_bp_seeds`: BP on one thread, every listed seed."""
    out = dict(spec(c, "rc", "bp", seeds[0], threads=1), timed=False)
    if sweep_root and from_sweep(c):  # built timed above (BP's timed seeds): add the sweep's part
        out["lr"] = lr_of(c, "rc", "bp", sweep_root)
    out.pop("seed")
    out["seeds"] = [int(s) for s in seeds]
    return _with_reuse(out, c, "rc", "bp", out["seeds"], sweep_root)


def extra_seeds(c: dict, reqs: list, seeds: list[int], group: str, method: str) -> list[int]:
    """Seeds a run setting gets beyond the configured ones for claims named in
    ``stats.extra_seeds`` (``reqs``: :func:`distlab.pipeline.extra_seeds.requests`); the local claims
    select runs of the ``local_runs`` table by ``group`` and ``method``."""
    from ..pipeline.extra_seeds import for_setting

    return for_setting(reqs, list(seeds), "local_runs", {"group": group, "method": method})


def all_extra_seeds(c: dict, reqs: list, seeds: list[int]) -> list[int]:
    """Every extra seed of any run setting (the extra-seed rule's wildcard values)."""
    return sorted({k for g in GROUPS for m in methods_of(c, g) for k in extra_seeds(c, reqs, seeds, g, m)})


def extra_spec(c: dict, group: str, method: str, seed: int, sweep_root: str | None = None) -> dict:
    """The spec of one extra seed's job (a job of its own): the configured run's spec for that
    seed; BP on one thread, as the untimed BP job trains it (extra seeds are statistics)."""
    out = spec(c, group, method, seed, threads=1 if method == "bp" else None, sweep_root=sweep_root)
    return dict(out, timed=False) if method == "bp" else out


def extra_threads(c: dict, group: str, method: str) -> int:
    """Cores an extra seed's job holds: the timed parallel modes their ``threads``, else one."""
    return int(c["threads"]) if group == "rc" and method in PARALLEL else 1


def hybrid_methods(c: dict) -> list[str]:
    """The RC + PC hybrid's methods, one per T of ``rc.hybrid.T``: ``rc-pc-T<n>``."""
    return [f"rc-pc-T{int(T)}" for T in (c["rc"].get("hybrid") or {}).get("T", [])]


def spec(c: dict, group: str, method: str, seed: int, threads: int | None = None,
         sweep_root: str | None = None) -> dict:
    """The run spec of ``method`` in ``group`` (``rc``: the deep model, ``pc``: the shallow one).
    With ``sweep_root`` (a comparison run) and ``lr_from_sweep``, the lr is the sweep's choice
    for the method (:func:`lr_of`); otherwise ``lr``."""
    g = c[group]
    out = {
        "experiment": "local", "group": group, "seed": int(seed), "dataset": c["dataset"],
        "model": dict(g["model"]), "batch_size": c["batch_size"], "steps": c["steps"],
        "lr": lr_of(c, group, method, sweep_root),
        "lr_warmup": int(c.get("lr_warmup", 0)),
        "betas": list(c.get("betas", [0.9, 0.95])), "weight_decay": c.get("weight_decay", 0.0),
        "warmup_steps": c.get("warmup_steps", 10), "eval_every": c["eval_every"],
        "eval": dict(c["eval"]),
        "threads": int(threads or (c["threads"] if timed(group, method) else 1)),
        # whether the run's clock is compared (the loss-vs-time figure, the table's tokens/s)
        "timed": timed(group, method),
    }
    if method == "bp":
        out.update(method="bp", save_model=(group == "rc"))
        if group == "rc":  # probes at RC's section boundaries (BP trains the whole network)
            out.update(sections=g["sections"])
    elif method.startswith("rc-pc-T"):  # the hybrid: lock-step chain, error from above
        h = g["hybrid"]
        out.update(method="rc", sections=g["sections"], delay=0, mode="sequential",
                   feedback={"T": int(method[len("rc-pc-T"):]), "eta": h["eta"], "gamma": h["gamma"]})
    elif method == "rc-heads":  # the ablation: a head per section instead of the consensus
        out.update(method="rc", sections=g["sections"], delay=g["delay"], mode="sequential",
                   heads="separate")
    elif method.startswith("rc"):
        mode = {"rc-par": "parallel", "rc-thread": "parallel", "rc-async": "async"}.get(method, "sequential")
        out.update(method="rc", sections=g["sections"], delay=g["delay"], mode=mode)
        if mode != "sequential":
            out.update(threads=1, worker_threads=g.get("worker_threads", 1))
        if mode == "parallel":
            out.update(concurrency="thread" if method == "rc-thread" else g["concurrency"])
        if mode == "async":
            out.update(staleness_bound=int(g.get("staleness_bound", g["sections"])))
    elif method.startswith("pc-"):
        variant = method.split("-")[1]  # pc-fixed, pc-fixed-trunc (the same rule, fewer T), pc-strict
        out.update(method="pc", variant=variant, pc={"T": g["T"], **g["variants"][variant]})
    else:
        raise ValueError(f"local_learning.{group}.methods: unknown method {method!r}")
    return _with_reuse(out, c, group, method, [int(seed)], sweep_root)


def _with_reuse(out: dict, c: dict, group: str, method: str, job_seeds: list[int], sweep_root: str | None) -> dict:
    """``out`` with ``reuse`` (:func:`reuse_map`) where an untimed job takes sweep runs."""
    if out["timed"]:
        return out
    reuse = reuse_map(c, group, method, job_seeds, sweep_root)
    return dict(out, reuse=reuse) if reuse else out


# (group, method) pairs of the untimed jobs, as the rule's wildcard ``lrun`` = "group/method"
UNTIMED_RUNS_ALL_SEEDS = r"rc/rc-seq|rc/rc-heads|pc/bp|pc/pc-fixed|pc/pc-fixed-trunc|pc/pc-strict"
HYBRID_RUNS = r"rc/rc-pc-T\d+"  # rc.hybrid.seeds
UNTIMED_RUNS = f"{UNTIMED_RUNS_ALL_SEEDS}|{HYBRID_RUNS}"
SWEPT_RUNS = f"{UNTIMED_RUNS_ALL_SEEDS}|rc/bp"  # the sweep's wildcard ``lrun`` (the hybrid's: its own rule)


def seeds_spec(c: dict, group: str, method: str, seeds: list[int], sweep_root: str | None = None) -> dict:
    """One untimed job for every seed of ``method`` (one process start-up, not one a seed)."""
    if timed(group, method):
        raise ValueError(f"{group}/{method} is timed: one job a seed")
    out = spec(c, group, method, seeds[0], sweep_root=sweep_root)
    out.pop("seed")
    out.pop("reuse", None)
    out["seeds"] = [int(s) for s in seeds]
    return _with_reuse(out, c, group, method, out["seeds"], sweep_root)


def untimed_job_spec(c: dict, run: str, seeds: list[int], sweep_root: str | None = None) -> dict:
    """:func:`seeds_spec` of the rule's wildcard ``run`` = "group/method" (its seeds)."""
    group, method = run.split("/")
    return seeds_spec(c, group, method, seeds_of(c, group, method, seeds), sweep_root)


def seeds_of(c: dict, group: str, method: str, seeds: list[int]) -> list[int]:
    """Every configured seed, except for the lock-step parallel RC (processes or threads):
    ``rc.parallel_seeds`` when given (its numbers are the sequential mode's; its runs are there
    to be timed).  Asynchronous RC, the source's method, computes numbers of its own and is
    compared with BP on the comparison's seeds (local.rc.noninferior): every seed, a timed
    job each."""
    if group == "rc" and method in LOCKSTEP:
        return list(c["rc"].get("parallel_seeds") or seeds)
    if group == "rc" and method.startswith("rc-pc-T"):
        return list((c["rc"].get("hybrid") or {}).get("seeds") or seeds)
    return list(seeds)


def methods_of(c: dict, group: str) -> list[str]:
    return list(c[group]["methods"]) + (hybrid_methods(c) if group == "rc" else [])


def run_dirs(c: dict, seeds: list[int], results: str = "results", reqs: list | None = None) -> list[str]:
    """Every run's manifest: the configured seeds, then the extra seeds of ``reqs``."""
    return [f"{results}/local/{group}/{m}/seed{s}/manifest.json"
            for group in GROUPS for m in methods_of(c, group)
            for s in seeds_of(c, group, m, seeds) + extra_seeds(c, reqs or [], seeds, group, m)]


# What a timed step does not depend on.  The benchmarks (throughput, its map, PC's cost) time
# training steps of their own count and evaluate nothing, so a run's length and evaluation are
# not theirs; the optimizer's values change no operation a step dispatches, so the benchmarks
# step one fixed AdamW (PC's cost at lr 0, which leaves the weights as they are).  Their specs
# carry neither: changing the runs' lr, steps or evaluation reruns no benchmark.
NOT_TIMED = ("steps", "warmup_steps", "eval_every", "eval", "save_model")
TIMING_OPTIMIZER = {"lr": 1e-3, "lr_warmup": 0, "betas": [0.9, 0.95], "weight_decay": 0.0}


def timing_spec(s: dict) -> dict:
    """A run spec as a benchmark takes it: without :data:`NOT_TIMED`, the optimizer's values
    replaced by :data:`TIMING_OPTIMIZER`."""
    return {**{k: v for k, v in s.items() if k not in NOT_TIMED}, **TIMING_OPTIMIZER}


def bench_specs(c: dict) -> dict[str, dict]:
    """The throughput benchmark's specs: the deep model's methods at the benchmark shape."""
    b = c["bench"]
    out = {}
    for m in b["methods"]:
        if m == "bp-1thread":  # BP on one core: what RC's sections are each given
            s = spec(c, "rc", "bp", 0, threads=1)
        else:
            s = spec(c, "rc", m, 0, threads=c["threads"])
        s.update(model=dict(b["model"]), batch_size=b["batch_size"])
        out[m] = timing_spec(s)
    return out


def map_specs(c: dict) -> dict[str, dict]:
    """The throughput map: every method of ``bench.map.methods`` at the benchmark shape and at
    each value of ``bench.map`` varied one at a time (model width, sections K, sequence length);
    keys ``<method>@d<width>-K<sections>-T<length>``."""
    b, grid = c["bench"], c["bench"]["map"]
    base = {"d_model": b["model"]["d_model"], "sections": c["rc"]["sections"],
            "block_size": b["model"]["block_size"]}
    points = [dict(base)]
    for key in ("d_model", "sections", "block_size"):
        for v in grid.get(key, []):
            p = dict(base, **{key: v})
            if p not in points:
                points.append(p)
    out = {}
    for p in points:
        for m in grid["methods"]:
            s = spec(c, "rc", m, 0, threads=c["threads"])
            model = dict(b["model"], d_model=p["d_model"], block_size=p["block_size"])
            s.update(model=model, batch_size=b["batch_size"])
            if s["method"] == "rc":
                s["sections"] = p["sections"]
                if s.get("mode") == "async":
                    s["staleness_bound"] = p["sections"]
            out[f"{m}@d{p['d_model']}-K{p['sections']}-T{p['block_size']}"] = timing_spec(s)
    return out


def pc_cost_options(c: dict) -> dict:
    b, g = c["bench"], c["pc"]
    return {"spec": timing_spec(spec(c, "pc", "bp", 0, threads=1)), "T": list(b["pc_T"]),
            "variants": dict(g["variants"]), "warmup": b["pc_warmup"], "measure": b["pc_measure"],
            "repeats": b["pc_repeats"], "training_T": g["T"]}


# ------------------------------------------------------------------ the learning-rate sweep
# Every method at its own lr, chosen on the validation split (local_learning.sweep): the sweep
# trains each swept method at each of its lrs on the sweep seeds; the choice file maps
# "<group>/<method>" to the lr of the lowest worst-seed validation loss (distlab.local.summary);
# the comparison runs read it when they start and take from the sweep the seeds it trained at
# the chosen lr (distlab.local.sweep).


def from_sweep(c: dict) -> bool:
    return bool(c.get("lr_from_sweep")) and bool(c.get("sweep"))


def sweep_key(group: str, method: str) -> str:
    return f"{group}/{method}"


def swept(c: dict, group: str, method: str) -> bool:
    """Whether the sweep trains ``method`` itself: it has lrs and follows no other method
    (``follows`` wins, so a config merged over another can make a swept method a follower)."""
    sw, key = c.get("sweep") or {}, sweep_key(group, method)
    return key in (sw.get("lrs") or {}) and key not in (sw.get("follows") or {})


def leader(c: dict, group: str, method: str) -> str:
    """The sweep key whose choice the method takes: its own, or the one it follows
    (``sweep.follows``: the lock-step parallel RC computes the sequential RC's updates)."""
    key = sweep_key(group, method)
    return ((c.get("sweep") or {}).get("follows") or {}).get(key, key)


def lr_of(c: dict, group: str, method: str, sweep_root: str | None = None):
    """A comparison run's lr: the sweep's choice (read by the job from the choice file) when
    ``lr_from_sweep``, else the configured ``lr``."""
    if sweep_root and from_sweep(c):
        return {"sweep": choice_path(sweep_root), "key": leader(c, group, method)}
    return c["lr"]


def choice_path(sweep_root: str) -> str:
    return f"{sweep_root}/chosen_lr.json"


def sweep_seeds(c: dict, group: str, method: str, seeds: list[int]) -> list[int]:
    """The seeds the sweep trains a method on: ``sweep.seeds``; for the RC + PC hybrid those of
    them among its own seeds (rc.hybrid.seeds), or its own where none is (the default config's
    one seed a T: a figure, no claim)."""
    sw = [int(s) for s in (c.get("sweep") or {}).get("seeds", [])]
    if group == "rc" and method.startswith("rc-pc-T"):
        own = seeds_of(c, group, method, seeds)
        return [s for s in sw if s in own] or own
    return sw


def sweep_lrs(c: dict, group: str, method: str) -> list[float]:
    return [float(x) for x in c["sweep"]["lrs"][sweep_key(group, method)]]


def sweep_points(c: dict) -> list[tuple[str, str, float]]:
    """(group, method, lr) of every sweep job."""
    if not from_sweep(c):
        return []
    return [(g, m, lr) for g in GROUPS for m in methods_of(c, g) if swept(c, g, m) for lr in sweep_lrs(c, g, m)]


def sweep_runs(c: dict, seeds: list[int], sweep_root: str) -> list[str]:
    """Every sweep run's manifest (the sweep table's input)."""
    return [f"{sweep_root}/lr{lr:g}/{g}/{m}/seed{s}/manifest.json"
            for g, m, lr in sweep_points(c) for s in sweep_seeds(c, g, m, seeds)]


def sweep_spec(c: dict, group: str, method: str, lr, seeds: list[int]) -> dict:
    """One sweep job: the method's untimed one-thread spec at ``lr``, on its sweep seeds; equal,
    but for where the lr came from, to the comparison run of those seeds at that lr."""
    ss = sweep_seeds(c, group, method, seeds)
    out = untimed_bp_spec(c, ss) if (group, method) == ("rc", "bp") else seeds_spec(c, group, method, ss)
    return dict(out, lr=float(lr))


def picked_run(sweep_root: str, group: str, method: str, seed: int) -> str:
    """The folder rule local_table_sweep copies the sweep's run of (method, seed) at the chosen lr to."""
    return f"{sweep_root}/chosen/{group}/{method}/seed{int(seed)}"


def reused_seeds(c: dict, group: str, method: str, seeds: list[int]) -> list[int]:
    """The seeds whose untimed comparison run of a swept method is the sweep's run at the chosen
    lr (the sweep trains at the comparison's horizon, one thread, on its seeds): the sweep seeds
    among the method's untimed seeds (the deep model's BP: its untimed seeds only)."""
    if not (from_sweep(c) and swept(c, group, method)) or (timed(group, method) and method != "bp"):
        return []
    untimed = untimed_bp_seeds(c, seeds) if (group, method) == ("rc", "bp") else seeds_of(c, group, method, seeds)
    return [s for s in sweep_seeds(c, group, method, seeds) if int(s) in [int(k) for k in untimed]]


def reuse_map(c: dict, group: str, method: str, job_seeds: list[int], sweep_root: str | None) -> dict:
    """An untimed comparison spec's ``reuse``: {seed: picked folder} of the job's seeds the sweep
    trained (a swept method; its picks: :func:`picks`)."""
    if not (sweep_root and from_sweep(c) and swept(c, group, method)):
        return {}
    sw = sweep_seeds(c, group, method, job_seeds)
    return {str(s): picked_run(sweep_root, group, method, s) for s in job_seeds if int(s) in sw}


def picks(c: dict, seeds: list[int], sweep_root: str) -> list[dict]:
    """What rule local_table_sweep picks: each reused (method, seed) with the sweep's run of it at
    every swept lr and the folder it goes to (distlab.results.sweeps.pick)."""
    return [{"key": sweep_key(g, m), "out": picked_run(sweep_root, g, m, s),
             "runs": {f"{lr:g}": f"{sweep_root}/lr{lr:g}/{g}/{m}/seed{s}" for lr in sweep_lrs(c, g, m)}}
            for g, m in dict.fromkeys((g, m) for g, m, _ in sweep_points(c))
            for s in reused_seeds(c, g, m, seeds)]


def sweep_inputs(c: dict, group: str, method: str, job_seeds: list[int], seeds: list[int],
                 sweep_root: str) -> list[str]:
    """What a comparison job reads from the sweep: the choice, and the picked runs its spec's
    ``reuse`` names (rule local_table_sweep's outputs)."""
    if not from_sweep(c):
        return []
    mine = [s for s in reused_seeds(c, group, method, seeds) if int(s) in [int(k) for k in job_seeds]]
    return [choice_path(sweep_root)] + [f"{picked_run(sweep_root, group, method, s)}/manifest.json" for s in mine]


def sweep_problems(c: dict, seeds: list[int]) -> list[str]:
    """The sweep's cross-field problems (``"key: why"``): every method of a run swept or
    following a swept one, sweep seeds among the configured seeds, leaders swept."""
    if not c.get("lr_from_sweep"):
        return []
    sw, S = c.get("sweep") or {}, "local_learning.sweep"
    if not sw:
        return ["local_learning.lr_from_sweep: true, but there is no local_learning.sweep"]
    out = [f"{S}.seeds: {s} is not among the configured seeds" for s in sw.get("seeds", []) if s not in seeds]
    runs = {sweep_key(g, m): (g, m) for g in GROUPS for m in methods_of(c, g)}
    for k in sorted(runs):  # lrs of a method not configured here are unused (a merged config)
        lead = leader(c, *runs[k])
        if lead != k and (lead not in runs or not swept(c, *runs[lead])):
            out.append(f"{S}.follows.{k}: follows {lead}, which is not swept here")
        elif lead == k and not swept(c, *runs[k]):
            out.append(f"{S}: {k} is neither swept (lrs) nor follows a swept method")
    return out


def sweep_job_spec(c: dict, run: str, lr, seeds: list[int]) -> dict:
    """:func:`sweep_spec` of the sweep rule's wildcard ``run`` = "group/method"."""
    group, method = run.split("/")
    return sweep_spec(c, group, method, lr, seeds)


def job_sweep_inputs(c: dict, run: str, seeds: list[int], sweep_root: str) -> list[str]:
    """:func:`sweep_inputs` of an untimed job of every seed (wildcard ``run`` = "group/method")."""
    group, method = run.split("/")
    return sweep_inputs(c, group, method, seeds_of(c, group, method, seeds), seeds, sweep_root)


class LocalRules:
    """workflow/rules/local_learning.smk's functions of a job's wildcards, bound to the config's
    ``local_learning`` section ``c``, the configured ``seeds``, the sweep's folder and the deep
    model's untimed BP seeds, and to the ``context`` every paper's helper is built with
    (distlab.pipeline.workflow.RulesContext).  A job's params.spec and the spec its resources are
    sized from are one and the same (one function, built once a job)."""

    def __init__(self, config: dict, context: RulesContext | None = None) -> None:
        ctx = context or RulesContext()
        c, seeds, results, paper, reqs = config["local_learning"], config["seeds"], ctx.results, ctx.paper, ctx.extra_seeds
        self.c, self.seeds = c, seeds
        self.workflow = ctx.workflow  # Snakemake's: the --cores a timed job holds (distlab.runtime.machine_load)
        self.run = f"{results}/local/{{lgroup}}/{{lmethod}}/seed{{seed}}"  # a one-seed run's folder
        self.report = "Local credit assignment"  # the report's category of P3's figures and tables
        self.figures = {name: f"{paper}/figures/local_{name}.png"
                        for name in ("loss_tokens", "loss_time", "throughput_memory", "pc_cost", "nonident",
                                     "probes", "hybrid")
                        if name != "hybrid" or (c["rc"].get("hybrid") or {}).get("T")}  # rc.hybrid: optional
        self.map = {"figure": f"{paper}/figures/local_throughput_map.png",
                    "csv": f"{paper}/tables/local_throughput_map.csv",
                    "md": f"{paper}/tables/local_throughput_map.md"}
        self.sweep_root = f"{results}/local/sweep"  # the lr sweep: lr<lr>/<group>/<method>/seed<k>, chosen_lr.json
        self.tables = [f"{paper}/tables/local_main.csv", f"{paper}/tables/local_main.md"]
        self.bench = {"throughput": f"{results}/local/bench/throughput.csv",
                      "pc_cost": f"{results}/local/bench/pc_cost.csv",
                      "map": f"{results}/local/bench/map.csv"}
        self.runs = run_dirs(c, seeds, results, reqs or [])
        self.metrics = [f"{r.rsplit('/', 1)[0]}/metrics.csv" for r in self.runs]  # local_summarize's too
        self.bp_untimed = untimed_bp_seeds(c, seeds)
        self.extra_seeds = all_extra_seeds(c, reqs or [], seeds)
        self.hybrid_seeds = seeds_of(c, "rc", "rc-pc-T0", seeds)  # rc.hybrid.seeds
        self.sweep_runs = sweep_runs(c, seeds, self.sweep_root)
        self.picks = picks(c, seeds, self.sweep_root)  # the sweep runs comparison jobs take
        self.picked_files = [f"{p['out']}/{name}" for p in self.picks for name in ("metrics.csv", "manifest.json")]
        self._job_specs: dict = {}
        if self.sweep_runs:  # every method at its own lr, chosen on the validation split
            self.tables += [f"{paper}/tables/local_sweep.csv", f"{paper}/tables/local_sweep.md"]
        # what the demonstration reads: the trained model's shape and data (the model itself is
        # its rule's input), the sections whose reports are compared
        self.nonident_spec = {k: v for k, v in spec(c, "rc", "bp", seeds[0]).items()
                              if k in ("experiment", "dataset", "model", "seed", "batch_size")}
        self.nonident_spec["sections"] = c["rc"]["sections"]
        # the scorecard's tables; the paper's outputs (the throughput map is its own target, rule local_map)
        benched = c["bench"].get("enabled", True)  # false (the replicate's leave_out): their rows not run
        self.summary_tables = {"local_runs": f"{results}/local/runs.csv",
                               **({"local_throughput": self.bench["throughput"],
                                   "local_pc_cost": self.bench["pc_cost"]} if benched else {}),
                               "local_staleness": f"{results}/local/staleness.csv"}
        self.outputs = list(self.figures.values()) + self.tables
        # the figures drawn from one table each, one job a figure: (name, table, label)
        self.figure_sources = (("loss_tokens", f"{results}/local/steps.csv", "loss vs tokens"),
                               ("loss_time", f"{results}/local/steps.csv", "loss vs wall time"),
                               ("throughput_memory", self.bench["throughput"], "throughput and memory"),
                               ("pc_cost", self.bench["pc_cost"], "PC cost vs T"),
                               ("nonident", f"{results}/local/nonident.json", "non-identifiability"))

    # Each training rule's params.spec and the spec its resources are sized from are one function
    # of the job's wildcards (built once a job): one spec per job, the whole of what it computes.
    def _once(self, kind: str, w, build) -> str:
        fields = dict(w.items()) if hasattr(w, "items") else vars(w)  # Snakemake's wildcards, or any namespace
        key = (kind, tuple(sorted((k, str(v)) for k, v in fields.items())))
        if key not in self._job_specs:
            self._job_specs[key] = as_json(build())
        return self._job_specs[key]

    # -- local_train: one timed run
    def timed_sweep(self, w) -> list[str]:
        return sweep_inputs(self.c, w.lgroup, w.lmethod, [int(w.seed)], self.seeds, self.sweep_root)

    def timed_spec(self, w) -> str:
        return self._once("timed", w, lambda: spec(self.c, w.lgroup, w.lmethod, w.seed, sweep_root=self.sweep_root))

    # -- local_train_extra: one extra seed a claim asked for
    def extra_spec(self, w) -> str:
        return self._once("extra", w, lambda: extra_spec(self.c, w.lgroup, w.lmethod, int(w.seed), self.sweep_root))

    def extra_threads(self, w) -> int:
        return extra_threads(self.c, w.lgroup, w.lmethod)

    # a timed job alone on its cores: its rule's threads hold all of --cores, it runs its own
    def timed_cores(self, w) -> int:
        return exclusive_threads(self.workflow, int(self.c["threads"]))

    def timed_threads(self, w) -> int:
        return own_threads(self.workflow, int(self.c["threads"]))

    def extra_cores(self, w) -> int:
        return exclusive_threads(self.workflow, self.extra_threads(w))

    def extra_own_threads(self, w) -> int:
        return own_threads(self.workflow, self.extra_threads(w))

    # -- local_train_seeds (and the hybrid's): an untimed method's seeds in one job
    def job_sweep(self, w) -> list[str]:
        return job_sweep_inputs(self.c, w.lrun, self.seeds, self.sweep_root)

    def untimed_spec(self, w) -> str:
        return self._once("untimed", w, lambda: untimed_job_spec(self.c, w.lrun, self.seeds, self.sweep_root))

    # -- local_train_bp_untimed: the deep model's BP on its untimed seeds
    def bp_untimed_sweep(self, w) -> list[str]:
        return sweep_inputs(self.c, "rc", "bp", self.bp_untimed, self.seeds, self.sweep_root)

    def bp_untimed_spec(self, w) -> str:
        return self._once("bp_untimed", w, lambda: untimed_bp_spec(self.c, self.bp_untimed, self.sweep_root))

    # -- local_train_sweep: one lr of the sweep
    def sweep_spec(self, w) -> str:
        return self._once("sweep", w, lambda: sweep_job_spec(self.c, w.lrun, w.llr, self.seeds))

    # -- local_table_sweep: the sweep's runs at the choice that comparison jobs take
    def picks_json(self, w=None) -> str:
        return as_json(self.picks)

    # -- the benchmarks' memory: each process holds the data set and a model
    def throughput_mem_mb(self, w, input) -> int:
        """BP and the RC sections' processes, and the parent."""
        return mem_for(input.data, self.c["rc"]["sections"] + 1, base_mb=900)

    def map_mem_mb(self, w, input) -> int:
        """The map's largest section count, and the parent."""
        sections = self.c["bench"]["map"].get("sections", []) + [self.c["rc"]["sections"]]
        return mem_for(input.data, max(sections) + 1, base_mb=900)

    def pc_cost_mem_mb(self, w, input) -> int:
        return mem_for(input.data, 1, base_mb=900)

    @staticmethod
    def nonident_model(w, input) -> str:
        """The trained BP model beside the run's manifest."""
        return os.path.join(os.path.dirname(input.run), "model.pt")
