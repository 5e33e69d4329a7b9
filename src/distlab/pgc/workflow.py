"""PGC's workflow helpers (torch-free): run paths, job settings, run specs,
outputs and summary tables, from the workflow config.  ``workflow/rules/pgc.smk``
holds the rules only and calls these.

A simulated job runs every seed of one (group, s, delay, scheme) setting in
one process; real (gloo) jobs are one torchrun job per seed.
"""

from __future__ import annotations

import json

from ..clihelp import as_json
from ..pipeline.extra_seeds import for_setting
from ..pipeline.workflow import RulesContext

SIM = "simulated"
SIM_GROUPS = ("motivating", "simulation", "cloud")


def _fmt(x) -> str:
    return f"{float(x):g}"


# The coding profile versioned with the code (coding.source: stored): measured by the rule
# pgc_coding_profile on the default config's settings and copied here.
STORED_CODING_PROFILE = "data/pgc/coding_profile.csv"


def stored_profile_gaps(path: str, settings: list[dict], numel: int, dtype: str) -> list[str]:
    """The settings (``{scheme, n, s}``) the stored profile at ``path`` has no row for."""
    import csv

    try:
        with open(path, newline="") as f:
            have = {(r["scheme"], int(r["n"]), int(r["s"]), int(r["numel"]), r["dtype"]) for r in csv.DictReader(f)}
    except OSError:
        return [f"{path} is missing"]
    return [f"{st['scheme']} n={st['n']} s={st['s']}" for st in settings
            if (st["scheme"], int(st["n"]), int(st["s"]), int(numel), dtype) not in have]


class PGCWorkflow:
    # the figures of the paper drawn from one table each: (figure, table kind, group)
    FIGURES = (("fig3", "summary", "motivating"), ("fig7", "summary", "simulation"),
               ("fig8", "steps", "simulation"), ("fig9", "summary", "cloud"), ("fig10", "steps", "cloud"))

    def __init__(self, config: dict, context: RulesContext | None = None) -> None:
        ctx = context or RulesContext()
        results, paper = ctx.results, ctx.paper
        self.config = config
        self._specs: dict[tuple, str] = {}  # run_spec's, by job
        # stats.extra_seeds requests (distlab.pipeline.extra_seeds.requests): more seeds for named claims
        self.extra = list(ctx.extra_seeds)
        self.p = config["pgc"]
        self.results, self.paper = results, paper
        self.setting = f"{results}/pgc/{{group}}/s{{s}}/d{{delay}}"
        self.sim_job = f"{self.setting}/simulated/{{scheme}}"  # a simulated job: every seed of a setting below it
        self.report = "Pipelined Gradient Coding"  # the report's category of P1's figures
        self.fig = {k: f"{paper}/figures/pgc_{k}.png" for k in ("fig3", "fig7", "fig8", "fig9", "fig10")}
        self.tab = {k: [f"{paper}/tables/pgc_{k}.csv", f"{paper}/tables/pgc_{k}.md"]
                    for k in ("time_to_target", "compute")}
        # the files of the one-job figures and tables, by kind (the rules' output names)
        self.real_out = {"png": f"{paper}/figures/pgc_real_vs_sim.png", "md": f"{paper}/tables/pgc_real_vs_sim.md"}
        self.regime_out = {"png": f"{paper}/figures/pgc_regime.png", "csv": f"{results}/pgc/regime/summary.csv",
                           "md": f"{paper}/tables/pgc_regime.md"}
        self.crosscheck_out = {"csv": f"{paper}/tables/pgc_regime_crosscheck.csv",
                               "md": f"{paper}/tables/pgc_regime_crosscheck.md"}
        self.trace = "data/traces/gloo_delays.csv"
        self.coding_profile = f"{results}/pgc/coding_profile.csv"   # what pgc_coding_profile measures
        self.stored_coding_profile = STORED_CODING_PROFILE
        self.trace_out = {"png": f"{paper}/figures/pgc_trace_fit.png", "csv": f"{paper}/tables/pgc_trace_fit.csv",
                          "md": f"{paper}/tables/pgc_trace_fit.md"}

    # ------------------------------------------------------------ settings
    def real_enabled(self) -> bool:
        return self.p["real"].get("enabled", True)

    def seeds(self, group: str) -> list[int]:
        return self.p["real"]["seeds"] if group == "real" else self.config["seeds"]

    def settings(self, group: str) -> list[tuple[int, str, str]]:
        """(s, delay, scheme) of every job of a group."""
        g = self.p[group]
        out = []
        if group == "motivating":
            d = _fmt(g["straggler"].get("mean", 0.0))
            for scheme in g["schemes"]:
                for s in ([0] if scheme == "dgd" else [c - 1 for c in g["c"]]):
                    out.append((s, d, scheme))
        elif group == "simulation":
            for d in g["delay_means"]:
                for scheme in g["schemes"]:
                    # dgd holds one partition and waits for every worker: it does not depend on s
                    for s in ([0] if scheme == "dgd" else g["s"]):
                        out.append((s, _fmt(d), scheme))
        else:  # cloud, real
            d = _fmt(g["straggler"].get("mean", 0.0))
            for scheme in g["schemes"]:
                out.append((0 if scheme == "dgd" else g["s"], d, scheme))
        return out

    def extra_seeds(self, group: str, s, delay, scheme: str) -> list[int]:
        """Seeds a simulated setting runs beyond the configured ones, for claims named in
        ``stats.extra_seeds`` (each in a job of its own: no existing job changes)."""
        if group not in SIM_GROUPS:
            return []
        setting = {"scheme": scheme, "s": int(s), "delay_mean": float(delay)}
        return for_setting(self.extra, self.config["seeds"], f"pgc_{group}", setting)

    def all_extra_seeds(self) -> list[int]:
        """Every extra seed of any setting (the extra-seed rule's wildcard values)."""
        return sorted({k for g in SIM_GROUPS for s, d, sc in self.settings(g)
                       for k in self.extra_seeds(g, s, d, sc)})

    def run_dir(self, group, s, delay, backend, scheme, seed) -> str:
        return f"{self.results}/pgc/{group}/s{s}/d{delay}/{backend}/{scheme}/seed{seed}"

    def group_inputs(self, w) -> list[str]:
        """pgc_summarize's inputs: the run manifests of the group the ``group`` wildcard names."""
        return self.group_runs(w.group)

    def group_metrics(self, w) -> list[str]:
        """pgc_summarize's other inputs: the metrics beside the group's run manifests."""
        from ..pipeline.workflow import metrics_beside

        return metrics_beside(self.group_inputs(w))

    def group_runs(self, group: str) -> list[str]:
        """Run manifests of one experiment group (simulated, and gloo for `real`)."""
        backends = ["gloo", SIM] if group == "real" else [SIM]
        return [f"{self.run_dir(group, s, d, b, scheme, seed)}/manifest.json"
                for s, d, scheme in self.settings(group) for b in backends
                for seed in self.seeds(group) + self.extra_seeds(group, s, d, scheme)]

    def dataset(self, group: str) -> str:
        return self.p[group].get("dataset", self.p["dataset"])

    def group_data_manifest(self, w) -> str:
        """The data manifest of a job's group (its wildcards): its input."""
        return self.data_manifest(w.group)

    def coding_input(self, w) -> list[str]:
        """The coding profile a simulated job reads, when there is one: its input."""
        return self.coding_inputs()

    def data_manifest(self, group: str) -> str:
        return f"{self.results}/data/{self.dataset(group)}/manifest.json"

    # ------------------------------------------------------------ specs
    def run_spec(self, w, backend: str, seeds=None) -> str:
        """The run spec of one job: everything that changes its results.  Built once a job
        (its params, mem_mb and runtime all ask for it): kept by the job's wildcards."""
        fields = dict(w.items()) if hasattr(w, "items") else vars(w)  # Snakemake's wildcards, or any namespace
        key = (tuple(sorted((k, str(v)) for k, v in fields.items())), backend,
               None if seeds is None else tuple(int(k) for k in seeds))
        if key not in self._specs:
            self._specs[key] = self._run_spec(w, backend, seeds)
        return self._specs[key]

    # the spec of each training rule's job, a named function of its wildcards
    def sim_spec(self, w) -> str:
        """pgc_train_sim: every configured seed of a setting, simulated."""
        return self.run_spec(w, SIM, seeds=self.config["seeds"])

    def extra_seed_spec(self, w) -> str:
        """pgc_train_sim_extra: one extra seed of a setting, simulated."""
        return self.run_spec(w, SIM, seeds=[int(w.seed)])

    def real_spec(self, w) -> str:
        """pgc_train_real: one seed on gloo."""
        return self.run_spec(w, "gloo")

    def sim_real_spec(self, w) -> str:
        """pgc_train_sim_real: the simulator's prediction of the real runs' seeds."""
        return self.run_spec(w, SIM, seeds=self.p["real"]["seeds"])

    def _run_spec(self, w, backend: str, seeds=None) -> str:
        g = self.p[w.group]
        straggler = dict(g.get("straggler") or {"model": "exponential", "mean": float(w.delay)})
        n = g["n"] if w.group == "real" else self.p["n"]
        compute = self.config["cluster"]["compute"]
        if w.group == "real":  # placeholder: the prediction is charged with the gloo run's measured costs
            compute = {"mode": "calibrated", "unit_seconds": 0.0}
        cluster = {"compute": compute, "network": self.config["cluster"]["network"], "straggler": straggler}
        if w.group != "real" and self.p.get("coding"):
            cluster["coding"] = self.coding_spec()
        spec = {
            "experiment": "pgc", "group": w.group, "scheme": w.scheme, "backend": backend,
            "n": n, "s": int(w.s), "model": self.p["model"], "lr": self.p["lr"],
            "dtype": self.p["dtype"], "code_seed": self.p["code_seed"], "eval_every": self.p["eval_every"],
            "batch_size": g["batch_size"], "cluster": cluster,
        }
        if seeds is None:
            spec["seed"] = int(w.seed)
        else:
            spec["seeds"] = [int(x) for x in seeds]
        if "epochs" in g:
            spec["epochs"] = g["epochs"]
        else:
            spec["steps"] = g["steps"]
        if "threshold" in g:
            spec["threshold"] = g["threshold"]
        if "device" in self.p and backend == SIM:  # the workers' device, where the config names one
            spec["device"] = self.p["device"]
        if w.group == "real" and backend == SIM:
            spec["calibrate_from"] = self.run_dir(w.group, w.s, w.delay, "gloo", w.scheme, "{seed}")
        return as_json(spec)

    def profiles_coding(self) -> bool:
        """``coding: {mode: measured}``: measured once, for every setting, into a stored profile
        (rule pgc_coding_profile) that every simulated job reads, so the simulated clock is a
        deterministic function of the spec and that file, not of the load a job met.  Without
        ``numel`` (the model's own size, known only once it is built) each job measures its own."""
        c = self.p.get("coding") or {}
        return c.get("mode") == "measured" and "numel" in c

    def coding_profile_path(self) -> str:
        """The profile the simulated jobs read: this run's measurement (rule pgc_coding_profile)
        or, with ``coding.source: stored``, the one versioned with the code, after checking it
        holds every setting of the config (else one line naming the missing settings)."""
        if (self.p.get("coding") or {}).get("source", "measured") != "stored":
            return self.coding_profile
        if getattr(self, "_stored_checked", False):  # every simulated job asks: read the file once
            return self.stored_coding_profile
        o = json.loads(self.coding_profile_options())
        gaps = stored_profile_gaps(self.stored_coding_profile, o["settings"], o["numel"], o["dtype"])
        if gaps:
            raise ValueError(f"pgc.coding.source: stored: {self.stored_coding_profile} has no row for "
                             f"{', '.join(gaps)} (numel {o['numel']}, {o['dtype']}); set source: measured, "
                             f"or run the rule pgc_coding_profile and copy its output there")
        self._stored_checked = True
        return self.stored_coding_profile

    def coding_spec(self) -> dict:
        """The coding settings a simulated job's spec carries.  With a stored profile
        (:meth:`profiles_coding`) the job reads the profile, an input file of its rule: not
        ``source`` (where it comes from) nor ``rounds`` (how often the measurement repeats
        each setting, which only rule pgc_coding_profile reads), so changing those reruns the
        measurement alone, and the jobs only where the profile it writes differs."""
        c = {k: v for k, v in self.p["coding"].items() if k != "source"}
        if self.profiles_coding():
            c.pop("rounds", None)
            c["mode"] = "profile"
            c["profile"] = self.coding_profile_path()
        return c

    def coding_inputs(self) -> list[str]:
        return [self.coding_profile_path()] if self.profiles_coding() else []

    def coding_profile_options(self) -> str:
        settings = sorted({(scheme, int(s)) for g in SIM_GROUPS for s, _, scheme in self.settings(g)})
        return as_json({"settings": [{"scheme": sc, "n": self.p["n"], "s": s, "code_seed": self.p["code_seed"]}
                                     for sc, s in settings],
                        "numel": self.p["coding"]["numel"], "dtype": self.p["dtype"],
                        "rounds": self.p["coding"].get("rounds", 9)})

    # ------------------------------------------------------------ outputs
    def summary(self, group: str) -> str:
        return f"{self.results}/pgc/{group}/summary.csv"

    def steps(self, group: str) -> str:
        return f"{self.results}/pgc/{group}/steps.parquet"

    def table(self, kind: str, group: str) -> str:
        """A group's ``summary`` (run-level CSV) or ``steps`` (per-step parquet) table."""
        return {"summary": self.summary, "steps": self.steps}[kind](group)

    @staticmethod
    def figure_label(fig: str) -> str:
        """``fig3`` -> ``Fig. 3`` (the report's label)."""
        return f"Fig. {fig.removeprefix('fig')}"

    def outputs(self) -> list[str]:
        out = list(self.fig.values()) + [f for v in self.tab.values() for f in v]
        out += [self.regime_out["png"], self.regime_out["md"], *self.crosscheck_out.values(),
                *self.trace_out.values()]
        if self.real_enabled():
            out += self.real_out.values()
        return out

    def tables(self) -> dict[str, str]:
        t = {f"pgc_{g}": self.summary(g) for g in SIM_GROUPS}
        if self.real_enabled():
            t["pgc_real"] = self.summary("real")
        t["pgc_regime"] = self.regime_out["csv"]
        return t

    def unit_cost_runs(self) -> list[str]:
        """One gloo run per coded scheme: their measured unit compute marks the regime map."""
        if not self.real_enabled():
            return []
        r = self.p["real"]
        d = _fmt(r["straggler"].get("mean", 0.0))
        return [f"{self.run_dir('real', r['s'], d, 'gloo', sc, r['seeds'][0])}/manifest.json"
                for sc in r["schemes"] if sc != "dgd"]

    def options(self, **extra) -> str:
        return as_json({"n": self.p["n"], "cloud_s": self.p["cloud"]["s"],
                        "threshold": self.p["cloud"]["threshold"],
                        "unit_seconds": self.config["cluster"]["compute"]["unit_seconds"],
                        "compute_mode": self.config["cluster"]["compute"]["mode"], **extra})

    def crosscheck_options(self) -> str:
        g = self.p["simulation"]
        return as_json({"network": self.config["cluster"]["network"], "steps": g["steps"]})

    def regime_options(self) -> str:
        return as_json({**self.p["regime"], "n": self.p["n"], "seeds": self.config["seeds"],
                        "network": self.config["cluster"]["network"],
                        "default_unit_seconds": self.config["cluster"]["compute"]["unit_seconds"],
                        "default_delay_means": self.p["simulation"]["delay_means"]})
