"""DeMo's (P4) workflow helpers (torch-free): run paths, run specs, the registered tables
and outputs, from the workflow config.  ``workflow/rules/demo.smk`` holds the rules only
and calls these (``P4 = DemoWorkflow(config, RULES)``)."""

from __future__ import annotations

import json

from ..clihelp import as_json
from ..pipeline.extra_seeds import for_setting
from ..pipeline.workflow import RulesContext
from ..techniques.catalogue import METHODS
from ..techniques.options import SECTIONS

SIM = "simulated"
SIM_REAL = "simulated_real"  # the real runs' simulated twins: same methods, N, seeds, steps and lr


class DemoWorkflow:
    def __init__(self, config: dict, context: RulesContext | None = None, *, methods=METHODS) -> None:
        ctx = context or RulesContext()
        results, paper = ctx.results, ctx.paper
        self.config = config
        self.methods = methods  # the methods' specs: each one's option sections, the wildcard's values
        self.d = d = config["demo"]
        self.extra = list(ctx.extra_seeds)  # stats.extra_seeds requests (distlab.pipeline.extra_seeds.requests)
        self.results, self.paper = results, paper
        self._job_specs: dict = {}
        self.run = f"{results}/demo/{{dbackend}}/n{{nw}}/{{dmethod}}/seed{{seed}}"
        self.sim_job = f"{results}/demo/{SIM}/n{{nw}}/{{dmethod}}"    # a simulated job: every seed below it
        self.sweep_job = f"{results}/demo/sweep/lr{{lr}}/{{dmethod}}"  # a sweep job: every sweep seed below it
        self.twin_job = f"{results}/demo/{SIM_REAL}/n{{nw}}/{{dmethod}}"  # a real setting's simulated twin
        self.lr_choice = f"{results}/demo/sweep/chosen_lr.json"       # the sweep's choice (validation split)
        self.picked = f"{results}/demo/sweep/chosen"  # the sweep's runs at the choice the comparison takes
        self.from_sweep = bool(d.get("lr_from_sweep", False))
        self.networks = as_json(d["networks"])
        self.real_enabled = d["real"]["enabled"]
        self.real_backend = d["real"]["backend"]
        self.figures = [f"{paper}/figures/demo_{k}.png" for k in ("loss_steps", "gap_steps", "loss_bytes", "loss_time")]
        self.tables = [f"{paper}/tables/demo_results.csv", f"{paper}/tables/demo_results.md",
                       *([f"{paper}/tables/demo_sweep.md"] if self.from_sweep else []),
                       f"{paper}/tables/demo_bytes.csv", f"{paper}/tables/demo_bytes.md"]
        self.real_out = ([f"{paper}/figures/demo_real.png", f"{paper}/tables/demo_real.md"]
                         if self.real_enabled else [])
        self.report = "DeMo"  # the report's category of P4's figures
        # demo_fig_real's and demo_table_real's inputs: the real runs and their simulated twins (same
        # seeds, steps, lr)
        self.real_vs_sim = {"real": self.summary(self.real_backend), "sim": self.summary(SIM_REAL)}
        # the figures drawn from the simulated steps table, one job a figure: (kind, label)
        self.step_figures = (("loss_steps", "loss vs steps"), ("gap_steps", "gap to AdamW vs steps"),
                             ("loss_bytes", "loss vs bytes"))

    def method_pattern(self) -> str:
        """The ``dmethod`` wildcard's constraint: the registered methods."""
        return self.methods.pattern()

    # ------------------------------------------------------------ registered
    def summary(self, group: str) -> str:
        """The run-level table of a group of runs (simulated, the real backend, sweep; rule demo_summarize)."""
        return f"{self.results}/demo/{group}/summary.csv"

    def steps(self, group: str) -> str:
        """The per-step table of a group of runs (rule demo_summarize)."""
        return f"{self.results}/demo/{group}/steps.csv"

    def summary_tables(self) -> dict:
        """The scorecard's tables of P4 (``register_tables``)."""
        return {"demo_sim": self.summary(SIM),
                "demo_bytes": f"{self.paper}/tables/demo_bytes.csv",
                **({"demo_real": self.summary(self.real_backend)} if self.real_enabled else {})}

    def outputs(self) -> list[str]:
        """P4's figures and tables (``register_outputs``)."""
        return self.figures + self.tables + self.real_out

    # ------------------------------------------------------------ settings
    def lr(self, method, lr=None):
        """A run's learning rate: the sweep point's, the sweep's choice on the validation split
        (read by the job from ``lr_choice``, an input of its rule), or the configured value."""
        if lr is not None:
            return float(lr)
        if self.from_sweep:
            return {"sweep": self.lr_choice, "method": method}
        return float(self.d["lr"][method])

    def choice_input(self) -> list[str]:
        return [self.lr_choice] if self.from_sweep else []

    def sim_settings(self) -> list[tuple[int, str]]:
        """(N, method) of every simulated job: methods x n_workers, and more_workers' methods x its N."""
        d = self.d
        out = [(int(n), m) for n in d["n_workers"] for m in d["methods"]]
        more = d.get("more_workers") or {}
        out += [(int(n), m) for n in more.get("n_workers", []) for m in more.get("methods", [])
                if (int(n), m) not in out]
        return out

    def reusable(self, method, n) -> list[int]:
        """The seeds whose comparison run of (method, N) is the sweep's run at the chosen lr: the lr
        is the sweep's choice, the method was swept at this N, and the sweep ran the comparison's
        horizon, so for the sweep's seeds among the configured ones the comparison at the chosen lr
        is the sweep's run at that lr (the same computation).  Empty otherwise."""
        sw = self.d.get("sweep") or {}
        same = (self.from_sweep and method in sw.get("methods", []) and int(n) == int(sw.get("n_workers", -1))
                and int(sw.get("steps", -1)) == int(self.d["steps"]))
        mine = [int(k) for k in self.config["seeds"]]
        return [int(s) for s in sw.get("seeds", []) if int(s) in mine] if same else []

    def sweep_lrs(self, method) -> list[float]:
        """The lrs the sweep trains ``method`` at: the shared grid ``sweep.lrs`` and the method's
        own further points ``sweep.lrs_extra`` (a grid extended past an edge its choice sat on,
        so that the choice can be bracketed): the grid's order, then the method's own."""
        sw = self.d.get("sweep") or {}
        extra = (sw.get("lrs_extra") or {}).get(method, [])
        return list(dict.fromkeys(float(x) for x in [*sw.get("lrs", []), *extra]))

    def picked_run(self, method, seed) -> str:
        """The folder rule demo_table_sweep copies the sweep's run of (method, seed) at the chosen lr to."""
        return f"{self.picked}/{method}/seed{int(seed)}"

    def reuse(self, method, n, seeds) -> dict:
        """A comparison spec's ``reuse``: {seed: picked folder} of its seeds the sweep trained."""
        return {str(s): self.picked_run(method, s) for s in self.reusable(method, n)
                if int(s) in [int(k) for k in seeds]}

    def picks(self) -> list[dict]:
        """What rule demo_table_sweep picks: each reused (method, seed) with the sweep's run of it at
        every swept lr and the folder it goes to (distlab.results.sweeps.pick)."""
        sw = self.d.get("sweep") or {}
        methods = sorted({m for n, m in self.sim_settings() if self.reusable(m, n)})
        return [{"key": m, "out": self.picked_run(m, s),
                 "runs": {f"{lr:g}": f"{self.results}/demo/sweep/lr{lr:g}/{m}/seed{s}" for lr in self.sweep_lrs(m)}}
                for m in methods for s in self.reusable(m, sw["n_workers"])]

    def picked_files(self) -> list[str]:
        """rule demo_table_sweep's picked runs (each folder's metrics, then its manifest)."""
        return [f"{p['out']}/{name}" for p in self.picks() for name in ("metrics.csv", "manifest.json")]

    def picks_json(self, w=None) -> str:
        return as_json(self.picks())

    def reuse_input(self, w) -> list[str]:
        """The picked sweep runs a comparison job takes (rule demo_table_sweep's outputs): of its
        seeds (an extra seed's job: of its one seed)."""
        seeds = [int(w.seed)] if "seed" in dict(w.items()) else self.config["seeds"]
        return [f"{d}/manifest.json" for d in self.reuse(w.dmethod, w.nw, seeds).values()]

    def summary_networks(self, w) -> str:
        """demo_summarize's networks: the configured ones; none for the sweep (its table compares
        validation losses, and its summary feeds the lr choice: a network changes no choice)."""
        return "{}" if w.dgroup == "sweep" else self.networks

    def extra_seeds(self, n, method) -> list[int]:
        """Extra seeds of one simulated setting whose claim asked for more (config stats.extra_seeds),
        numbered after config seeds; each runs in a job of its own (demo_train_sim_extra)."""
        return for_setting(self.extra, self.config["seeds"], "demo_sim", {"method": method, "n_workers": int(n)})

    def all_extra_seeds(self) -> list[int]:
        """Every extra seed of any simulated setting (the extra-seed rule's wildcard values)."""
        return sorted({k for n, m in self.sim_settings() for k in self.extra_seeds(n, m)})

    # ------------------------------------------------------------ specs
    def sim_spec(self, method, n, seeds) -> str:
        """The spec of a simulated comparison job (its seeds; the picked sweep runs it takes)."""
        return self.spec(method, n, None, SIM, seeds=seeds, reuse=self.reuse(method, n, seeds))

    def spec(self, method, n, seed, backend, lr=None, steps=None, seeds=None, reuse=None, full=False) -> str:
        """The run spec of one run, or with ``seeds`` (simulated) of every seed of one job: what
        the run computes and nothing else (the option sections of its own method, the cluster
        on the simulated backend only; ``full``: every section, the benchmark's)."""
        d = self.d
        own = set(self.methods[method].options) if not full else set(SECTIONS)
        spec = {
            "experiment": "demo", "method": method, "backend": backend,
            **({"seeds": [int(k) for k in seeds]} if seeds is not None else {"seed": int(seed)}),
            "model": d["model"], "n_workers": int(n), "batch_size": d["batch_size"],
            "lr": self.lr(method, lr),
            "steps": int(steps or d["steps"]), "eval_every": d["eval_every"],
            "eval_batches": d["eval_batches"], "dtype": d.get("dtype", "float32"),
            **{k: d[k] for k in SECTIONS if k in own},
            **({"cluster": {"compute": d["compute"], "network": self.config["cluster"]["network"],
                            "straggler": {"model": "none"}}} if backend == SIM or full else {}),
            **({"reuse": reuse} if reuse else {}),
            # the simulated workers' device, where the config names one (config/gpu.yaml)
            **({"device": d["device"]} if "device" in d and backend == SIM else {}),
        }
        return as_json(spec)

    # the spec of each training rule's job, a named function of its wildcards, built once a job
    # (the rule's params and its resources read the same text)
    def _once(self, kind: str, w, build) -> str:
        fields = dict(w.items()) if hasattr(w, "items") else vars(w)  # Snakemake's wildcards, or any namespace
        key = (kind, tuple(sorted((k, str(v)) for k, v in fields.items())))
        if key not in self._job_specs:
            self._job_specs[key] = build()
        return self._job_specs[key]

    def seeds_spec(self, w) -> str:
        """demo_train_sim: every configured seed of one method and N, simulated."""
        return self._once("sim", w, lambda: self.sim_spec(w.dmethod, w.nw, self.config["seeds"]))

    def extra_seed_spec(self, w) -> str:
        """demo_train_sim_extra: one extra seed of one method and N, simulated."""
        return self._once("extra", w, lambda: self.sim_spec(w.dmethod, w.nw, [int(w.seed)]))

    def real_spec(self, w) -> str:
        """The spec of one real run (its request, too: distlab.pipeline.jobs)."""
        return self._once("real", w, lambda: self.spec(w.dmethod, w.nw, w.seed, self.real_backend,
                                                       steps=self.d["real"]["steps"]))

    def twin_spec(self, w) -> str:
        """The simulated twin of one real setting (every real seed, the real runs' steps): what the
        simulator predicts for the very runs the real jobs measure (demo_fig_real, demo_table_real)."""
        real = self.d["real"]
        return self._once("twin", w, lambda: self.spec(w.dmethod, w.nw, None, SIM, steps=real["steps"],
                                                       seeds=real["seeds"]))

    def twin_settings(self) -> list[tuple[int, str]]:
        """(N, method) of every real setting, each with a simulated twin job."""
        real = self.d["real"]
        return [(int(n), m) for n in real["n_workers"] for m in real["methods"]]

    def sweep_spec(self, w) -> str:
        """The spec of one sweep job (every sweep seed of one method and rate)."""
        sw = self.d["sweep"]
        return self._once("sweep", w, lambda: self.spec(w.dmethod, sw["n_workers"], None, SIM, lr=w.lr,
                                                        steps=sw["steps"], seeds=sw["seeds"]))

    # ------------------------------------------------------------ runs
    def runs(self, group) -> list[str]:
        d, r = self.d, self.results
        if group == SIM:
            return [f"{r}/demo/{SIM}/n{n}/{m}/seed{s}/manifest.json"
                    for n, m in self.sim_settings() for s in [*self.config["seeds"], *self.extra_seeds(n, m)]]
        if group == "sweep":
            sw = d["sweep"]
            lrs = dict.fromkeys(lr for m in sw["methods"] for lr in self.sweep_lrs(m))  # the grid's first
            return [f"{r}/demo/sweep/lr{lr:g}/{m}/seed{s}/manifest.json"
                    for lr in lrs for m in sw["methods"] if lr in self.sweep_lrs(m) for s in sw["seeds"]]
        real = d["real"]  # the real backend's runs, or (SIM_REAL) their simulated twins
        return [f"{r}/demo/{group}/n{n}/{m}/seed{s}/manifest.json"
                for n in real["n_workers"] for m in real["methods"] for s in real["seeds"]]

    def group_runs(self, w) -> list[str]:
        """demo_summarize's inputs: the manifests of the group of runs the ``dgroup`` wildcard names."""
        return self.runs(w.dgroup)

    def group_metrics(self, w) -> list[str]:
        """demo_summarize's other inputs: the metrics beside the group's run manifests."""
        from ..pipeline.workflow import metrics_beside

        return metrics_beside(self.group_runs(w))

    def bench_spec(self, gpu: bool = False) -> str:
        """demo_bench's spec (``gpu``: demo_bench_gpu's, the whole step on NCCL): the benchmark's
        models and step counts, and a two-worker gloo run's spec."""
        d = self.d
        out = {"model": d["model"], "large_model": d["bench"]["large_model"], "steps": d["bench"]["steps"],
               "lr": d["lr"]["demo"], "demo": d["demo"],
               "run": json.loads(self.spec("demo", 2, 0, "gloo", lr=d["lr"]["demo"], full=True))}
        if gpu:
            return as_json({**out, "parts": ["whole step"], "backend": "nccl"})
        return as_json({**out, "repeats": d["bench"]["repeats"]})
