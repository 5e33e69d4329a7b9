# Pipelined Gradient Coding (P1): every scheme on the simulated cluster, the
# real backend under torchrun, Figs. 3 and 7-10, the regime map, the delay
# trace fit, and the time-to-target table.  One rule per figure: a figure
# needs only its own runs.
#
# A simulated job runs every seed of one (group, s, delay, scheme) setting in
# one process (one Python/torch start-up instead of one per seed); each seed
# still gets its own run directory and manifest.  Real (gloo) jobs are one
# torchrun job per seed.

PGC = config["pgc"]
PGC_SIM_GROUPS = ["motivating", "simulation", "cloud"]
PGC_SETTING = f"{RESULTS}/pgc/{{group}}/s{{s}}/d{{delay}}"


def pgc_real_enabled():
    return PGC["real"].get("enabled", True)


def pgc_seeds(group):
    return PGC["real"]["seeds"] if group == "real" else config["seeds"]


def pgc_settings(group):
    """(s, delay, scheme) of every simulated job of a group."""
    g = PGC[group]
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


def pgc_run_dir(group, s, delay, backend, scheme, seed):
    return f"{RESULTS}/pgc/{group}/s{s}/d{delay}/{backend}/{scheme}/seed{seed}"


def pgc_group_runs(group):
    """Run manifests of one experiment group (simulated, and gloo for `real`)."""
    backends = ["gloo", SIM] if group == "real" else [SIM]
    return [f"{pgc_run_dir(group, s, d, b, scheme, seed)}/manifest.json"
            for s, d, scheme in pgc_settings(group) for b in backends for seed in pgc_seeds(group)]


def pgc_run_spec(w, backend, seeds=None):
    """The run spec of one job: everything that changes its results."""
    g = PGC[w.group]
    straggler = dict(g.get("straggler") or {"model": "exponential", "mean": float(w.delay)})
    n = g["n"] if w.group == "real" else PGC["n"]
    compute = config["cluster"]["compute"]
    if w.group == "real":  # placeholder: the prediction is charged with the gloo run's measured costs
        compute = {"mode": "calibrated", "unit_seconds": 0.0}
    cluster = cluster_spec(straggler, compute)
    if w.group != "real" and PGC.get("coding"):
        cluster["coding"] = PGC["coding"]
    spec = {
        "experiment": "pgc", "group": w.group, "scheme": w.scheme, "backend": backend,
        "n": n, "s": int(w.s), "model": PGC["model"], "lr": PGC["lr"],
        "dtype": PGC["dtype"], "code_seed": PGC["code_seed"], "eval_every": PGC["eval_every"],
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
    if w.group == "real" and backend == SIM:
        spec["calibrate_from"] = pgc_run_dir(w.group, w.s, w.delay, "gloo", w.scheme, "{seed}")
    return as_json(spec)


def pgc_data(w):
    return data_manifest(PGC[w.group].get("dataset", PGC["dataset"]))


def pgc_summary(group):
    return f"{RESULTS}/pgc/{group}/summary.csv"


def pgc_steps(group):
    return f"{RESULTS}/pgc/{group}/steps.parquet"


PGC_FIG = {k: f"{PAPER}/figures/pgc_{k}.png" for k in ("fig3", "fig7", "fig8", "fig9", "fig10")}
PGC_TAB = {k: [f"{PAPER}/tables/pgc_{k}.csv", f"{PAPER}/tables/pgc_{k}.md"]
           for k in ("time_to_target", "compute")}
PGC_REAL_OUT = [f"{PAPER}/figures/pgc_real_vs_sim.png", f"{PAPER}/tables/pgc_real_vs_sim.md"]
PGC_REGIME_OUT = [f"{PAPER}/figures/pgc_regime.png", f"{RESULTS}/pgc/regime/summary.csv",
                  f"{PAPER}/tables/pgc_regime.md"]
PGC_TRACE = "data/traces/gloo_delays.csv"
PGC_TRACE_OUT = [f"{PAPER}/figures/pgc_trace_fit.png", f"{PAPER}/tables/pgc_trace_fit.csv",
                 f"{PAPER}/tables/pgc_trace_fit.md"]


def pgc_paper_outputs():
    out = list(PGC_FIG.values()) + [f for v in PGC_TAB.values() for f in v]
    out += PGC_REGIME_OUT[:1] + PGC_REGIME_OUT[2:] + PGC_TRACE_OUT
    if pgc_real_enabled():
        out += PGC_REAL_OUT
    return out


def pgc_tables():
    t = {f"pgc_{g}": pgc_summary(g) for g in PGC_SIM_GROUPS}
    if pgc_real_enabled():
        t["pgc_real"] = pgc_summary("real")
    t["pgc_regime"] = PGC_REGIME_OUT[1]
    return t


def pgc_options(**extra):
    return as_json({"n": PGC["n"], "cloud_s": PGC["cloud"]["s"],
                    "threshold": PGC["cloud"]["threshold"],
                    "unit_seconds": config["cluster"]["compute"]["unit_seconds"],
                    "compute_mode": config["cluster"]["compute"]["mode"], **extra})


register_tables("P1", pgc_tables())
register_outputs("P1", pgc_paper_outputs())


rule pgc_train_sim:
    """Every seed of one scheme and setting on the simulated cluster (virtual clock)."""
    input:
        data=pgc_data,
    output:
        manifests=[f"{PGC_SETTING}/simulated/{{scheme}}/seed{k}/manifest.json" for k in config["seeds"]],
        metrics=[f"{PGC_SETTING}/simulated/{{scheme}}/seed{k}/metrics.csv" for k in config["seeds"]],
    wildcard_constraints:
        group="motivating|simulation|cloud",
    params:
        spec=lambda w: pgc_run_spec(w, SIM, seeds=config["seeds"]),
        out=f"{PGC_SETTING}/simulated/{{scheme}}",
        data=lambda w, input: os.path.dirname(input.data),
    conda:
        ENV
    log:
        "logs/pgc/{group}/s{s}/d{delay}/simulated/{scheme}.log",
    benchmark:
        "benchmarks/pgc/{group}/s{s}/d{delay}/simulated/{scheme}.tsv"
    threads: 1
    resources:
        mem_mb=lambda w, input: mem_for(input.data, 1),
        distlab_runtime=runtime_json(),
    shell:
        "OMP_NUM_THREADS={threads} python -m distlab train --experiment pgc --spec {params.spec:q} "
        "--runtime {resources.distlab_runtime:q} --data {params.data:q} --out {params.out:q} > {log:q} 2>&1"


rule pgc_train_real:
    """A master and n workers under torchrun on gloo, injected delays as real sleeps."""
    input:
        data=pgc_data,
    output:
        manifest=f"{PGC_SETTING}/gloo/{{scheme}}/seed{{seed}}/manifest.json",
        metrics=f"{PGC_SETTING}/gloo/{{scheme}}/seed{{seed}}/metrics.csv",
    wildcard_constraints:
        group="real",
    params:
        spec=lambda w: pgc_run_spec(w, "gloo"),
        out=subpath(output.manifest, parent=True),
        data=lambda w, input: os.path.dirname(input.data),
    conda:
        ENV
    log:
        "logs/pgc/{group}/s{s}/d{delay}/gloo/{scheme}/seed{seed}.log",
    benchmark:
        "benchmarks/pgc/{group}/s{s}/d{delay}/gloo/{scheme}/seed{seed}.tsv"
    threads: config["runtime"]["threads"]
    resources:
        mem_mb=lambda w, input: mem_for(input.data, PGC["real"]["n"] + 1),
        gpu=0,
        distlab_runtime=runtime_json(),
    shell:
        "python -m distlab train --experiment pgc --spec {params.spec:q} --runtime {resources.distlab_runtime:q} "
        "--threads {threads} --data {params.data:q} --out {params.out:q} > {log:q} 2>&1"


rule pgc_train_sim_real:
    """The simulator's prediction of each real run, charged with the compute and
    coding costs that run's workers and master measured."""
    input:
        data=pgc_data,
        measured=[f"{PGC_SETTING}/gloo/{{scheme}}/seed{k}/manifest.json" for k in PGC["real"]["seeds"]],
    output:
        manifests=[f"{PGC_SETTING}/simulated/{{scheme}}/seed{k}/manifest.json" for k in PGC["real"]["seeds"]],
        metrics=[f"{PGC_SETTING}/simulated/{{scheme}}/seed{k}/metrics.csv" for k in PGC["real"]["seeds"]],
    wildcard_constraints:
        group="real",
    params:
        spec=lambda w: pgc_run_spec(w, SIM, seeds=PGC["real"]["seeds"]),
        out=f"{PGC_SETTING}/simulated/{{scheme}}",
        data=lambda w, input: os.path.dirname(input.data),
    conda:
        ENV
    log:
        "logs/pgc/{group}/s{s}/d{delay}/simulated/{scheme}.log",
    benchmark:
        "benchmarks/pgc/{group}/s{s}/d{delay}/simulated/{scheme}.tsv"
    threads: 1
    resources:
        mem_mb=lambda w, input: mem_for(input.data, 1),
        distlab_runtime=runtime_json(),
    shell:
        "OMP_NUM_THREADS={threads} python -m distlab train --experiment pgc --spec {params.spec:q} "
        "--runtime {resources.distlab_runtime:q} --data {params.data:q} --out {params.out:q} > {log:q} 2>&1"


rule pgc_summarize:
    """Per-step (parquet) and run-level (CSV) tables of one experiment group."""
    input:
        lambda w: pgc_group_runs(w.group),
    output:
        steps=f"{RESULTS}/pgc/{{group}}/steps.parquet",
        summary=f"{RESULTS}/pgc/{{group}}/summary.csv",
    conda:
        ENV
    log:
        "logs/pgc/{group}/summarize.log",
    benchmark:
        "benchmarks/pgc/{group}/summarize.tsv"
    threads: 1
    resources:
        # the metrics CSVs become one frame (about 3x their size on disk), plus pandas
        mem_mb=lambda w, input: int(400 + 4 * input.size_mb),
    shell:
        "python -m distlab.pgc summarize --runs {input:q} --steps-out {output.steps:q} "
        "--summary-out {output.summary:q} > {log:q} 2>&1"


def _pgc_figure_rule_mem(w, input):
    return int(500 + 4 * input.size_mb)


rule pgc_fig3:
    """Fig. 3: DGD against GC-FR/GC-CR with c partitions a worker."""
    input:
        summary=pgc_summary("motivating"),
    output:
        report(PGC_FIG["fig3"], category="Pipelined Gradient Coding",
               caption="../report/pgc_fig3.rst", labels={"figure": "Fig. 3"}),
    params:
        inputs=lambda w, input: as_json(dict(input.items())),
        options=pgc_options(),
    conda:
        ENV
    log:
        "logs/pgc/fig3.log",
    benchmark:
        "benchmarks/pgc/fig3.tsv"
    threads: 1
    resources:
        mem_mb=_pgc_figure_rule_mem,
    shell:
        "python -m distlab.pgc figure fig3 --inputs {params.inputs:q} --options {params.options:q} "
        "--out {output:q} > {log:q} 2>&1"


rule pgc_fig7:
    """Fig. 7: time per step of every scheme against s."""
    input:
        summary=pgc_summary("simulation"),
    output:
        report(PGC_FIG["fig7"], category="Pipelined Gradient Coding",
               caption="../report/pgc_fig7.rst", labels={"figure": "Fig. 7"}),
    params:
        inputs=lambda w, input: as_json(dict(input.items())),
        options=pgc_options(),
    conda:
        ENV
    log:
        "logs/pgc/fig7.log",
    benchmark:
        "benchmarks/pgc/fig7.tsv"
    threads: 1
    resources:
        mem_mb=_pgc_figure_rule_mem,
    shell:
        "python -m distlab.pgc figure fig7 --inputs {params.inputs:q} --options {params.options:q} "
        "--out {output:q} > {log:q} 2>&1"


rule pgc_fig8:
    """Fig. 8: training loss against steps."""
    input:
        steps=pgc_steps("simulation"),
    output:
        report(PGC_FIG["fig8"], category="Pipelined Gradient Coding",
               caption="../report/pgc_fig8.rst", labels={"figure": "Fig. 8"}),
    params:
        inputs=lambda w, input: as_json(dict(input.items())),
        options=pgc_options(),
    conda:
        ENV
    log:
        "logs/pgc/fig8.log",
    benchmark:
        "benchmarks/pgc/fig8.tsv"
    threads: 1
    resources:
        mem_mb=_pgc_figure_rule_mem,
    shell:
        "python -m distlab.pgc figure fig8 --inputs {params.inputs:q} --options {params.options:q} "
        "--out {output:q} > {log:q} 2>&1"


rule pgc_fig9:
    """Fig. 9: time per step and steps to the loss threshold (both rules)."""
    input:
        summary=pgc_summary("cloud"),
    output:
        report(PGC_FIG["fig9"], category="Pipelined Gradient Coding",
               caption="../report/pgc_fig9.rst", labels={"figure": "Fig. 9"}),
    params:
        inputs=lambda w, input: as_json(dict(input.items())),
        options=pgc_options(),
    conda:
        ENV
    log:
        "logs/pgc/fig9.log",
    benchmark:
        "benchmarks/pgc/fig9.tsv"
    threads: 1
    resources:
        mem_mb=_pgc_figure_rule_mem,
    shell:
        "python -m distlab.pgc figure fig9 --inputs {params.inputs:q} --options {params.options:q} "
        "--out {output:q} > {log:q} 2>&1"


rule pgc_fig10:
    """Fig. 10: training loss against (simulated) time."""
    input:
        steps=pgc_steps("cloud"),
    output:
        report(PGC_FIG["fig10"], category="Pipelined Gradient Coding",
               caption="../report/pgc_fig10.rst", labels={"figure": "Fig. 10"}),
    params:
        inputs=lambda w, input: as_json(dict(input.items())),
        options=pgc_options(),
    conda:
        ENV
    log:
        "logs/pgc/fig10.log",
    benchmark:
        "benchmarks/pgc/fig10.tsv"
    threads: 1
    resources:
        mem_mb=_pgc_figure_rule_mem,
    shell:
        "python -m distlab.pgc figure fig10 --inputs {params.inputs:q} --options {params.options:q} "
        "--out {output:q} > {log:q} 2>&1"


rule pgc_table_time_to_target:
    """Time and steps to the loss threshold per scheme, both threshold rules."""
    input:
        summary=pgc_summary("cloud"),
    output:
        PGC_TAB["time_to_target"],
    params:
        inputs=lambda w, input: as_json(dict(input.items())),
    conda:
        ENV
    log:
        "logs/pgc/time_to_target.log",
    benchmark:
        "benchmarks/pgc/time_to_target.tsv"
    threads: 1
    resources:
        mem_mb=_pgc_figure_rule_mem,
    shell:
        "python -m distlab.pgc figure time_to_target --inputs {params.inputs:q} --out {output:q} > {log:q} 2>&1"


rule pgc_table_compute:
    """Work per worker-step of each scheme, and the simulator's own overhead."""
    input:
        summary=pgc_summary("simulation"),
    output:
        PGC_TAB["compute"],
    params:
        inputs=lambda w, input: as_json(dict(input.items())),
    conda:
        ENV
    log:
        "logs/pgc/compute.log",
    benchmark:
        "benchmarks/pgc/compute.tsv"
    threads: 1
    resources:
        mem_mb=_pgc_figure_rule_mem,
    shell:
        "python -m distlab.pgc figure compute --inputs {params.inputs:q} --out {output:q} > {log:q} 2>&1"


rule pgc_real_vs_sim:
    """Measured time per step on gloo beside the simulator's calibrated prediction."""
    input:
        summary=pgc_summary("real"),
    output:
        png=report(PGC_REAL_OUT[0], category="Pipelined Gradient Coding",
                   caption="../report/pgc_real.rst", labels={"figure": "real vs simulated"}),
        md=PGC_REAL_OUT[1],
    params:
        inputs=lambda w, input: as_json(dict(input.items())),
        options=pgc_options(),
    conda:
        ENV
    log:
        "logs/pgc/real_vs_sim.log",
    benchmark:
        "benchmarks/pgc/real_vs_sim.tsv"
    threads: 1
    resources:
        mem_mb=_pgc_figure_rule_mem,
    shell:
        "python -m distlab.pgc figure real_vs_sim --inputs {params.inputs:q} --options {params.options:q} "
        "--out {output.png:q} {output.md:q} > {log:q} 2>&1"


rule pgc_regime:
    """Where the paper's Fig. 7 orderings hold, over c/mu and s, from the clock alone."""
    input:
        unit_cost=[f"{pgc_run_dir('real', PGC['real']['s'], _fmt(PGC['real']['straggler'].get('mean', 0.0)), 'gloo', sc, k)}/manifest.json"
                   for sc in PGC["real"]["schemes"] if sc != "dgd" for k in PGC["real"]["seeds"][:1]]
        if pgc_real_enabled() else [],
    output:
        png=report(PGC_REGIME_OUT[0], category="Pipelined Gradient Coding",
                   caption="../report/pgc_regime.rst", labels={"figure": "regime map"}),
        csv=PGC_REGIME_OUT[1],
        md=PGC_REGIME_OUT[2],
    params:
        options=as_json({**PGC["regime"], "n": PGC["n"], "seeds": config["seeds"],
                         "network": config["cluster"]["network"],
                         "default_unit_seconds": config["cluster"]["compute"]["unit_seconds"],
                         "default_delay_means": PGC["simulation"]["delay_means"]}),
    conda:
        ENV
    log:
        "logs/pgc/regime.log",
    benchmark:
        "benchmarks/pgc/regime.tsv"
    threads: 1
    resources:
        mem_mb=1000,
    shell:
        "python -m distlab.pgc regime --options {params.options:q} --csv {output.csv:q} "
        "--md {output.md:q} --png {output.png:q} --unit-cost {input.unit_cost:q} > {log:q} 2>&1"


rule pgc_trace_fit:
    """How well exponential and Pareto delays fit the delay trace recorded on gloo."""
    input:
        trace=PGC_TRACE,
    output:
        png=report(PGC_TRACE_OUT[0], category="Pipelined Gradient Coding",
                   caption="../report/pgc_trace.rst", labels={"figure": "delay trace fit"}),
        csv=PGC_TRACE_OUT[1],
        md=PGC_TRACE_OUT[2],
    conda:
        ENV
    log:
        "logs/pgc/trace_fit.log",
    benchmark:
        "benchmarks/pgc/trace_fit.tsv"
    threads: 1
    resources:
        mem_mb=800,
    shell:
        "python -m distlab.pgc trace-fit --trace {input.trace:q} --csv {output.csv:q} "
        "--md {output.md:q} --png {output.png:q} > {log:q} 2>&1"


rule pgc:
    """Every PGC experiment, figure and table, and the P1 scorecard."""
    input:
        pgc_paper_outputs(),
        f"{PAPER}/scorecard/P1.md",
