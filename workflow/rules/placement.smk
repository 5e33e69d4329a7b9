# Learned device placement (P2, HSDAG): operator graphs, CPU profiles (cached data
# rules), every method on the shared simulator, the main and ablation tables,
# learning curves, one learned placement, two-CPU real execution vs the simulator.

from distlab.placement import workflow as placement_wf

PL = config.get("placement", {})
PL_DIR = f"{RESULTS}/placement"
# the paths, options and specs of the rules below (named functions of a job's wildcards among them)
PL_WF = placement_wf.PlacementRules(config, RULES)
SHARED.register("placement", PL_WF.summary_tables, PL_WF.outputs)  # none without a placement section


wildcard_constraints:
    pl_model=r"[a-z0-9_]+",
    pair=r"[a-z0-9_]+",
    pl_method=r"[a-z_]+",


rule placement_graph:
    """The operator graph of one model (torch.fx; weights not nodes)."""
    output:
        placement_wf.graph_path(PL_DIR),
    params:
        spec=PL_WF.model_spec,
    conda:
        ENV
    log:
        log_path("placement/graph_{pl_model}"),
    benchmark:
        benchmark_path("placement/graph_{pl_model}")
    threads: 1
    resources:
        mem_mb=3000,
    shell:
        "OMP_NUM_THREADS=1 python -m distlab placement-graph --spec {params.spec:q} --out {output:q} > {log:q} 2>&1"


rule placement_profile:
    """Per-operator CPU seconds of one model (median of repeats, one thread): cached data.
    It holds both cores (threads: 2) while torch uses one, so no other job shares the machine
    with the measurement (the profile moved by up to 13 % between idle runs when one did)."""
    output:
        f"{PL_DIR}/profiles/{{pl_model}}.json",
    params:
        spec=PL_WF.profile_spec,
    conda:
        ENV
    log:
        log_path("placement/profile_{pl_model}"),
    benchmark:
        benchmark_path("placement/profile_{pl_model}")
    threads: 2
    resources:
        mem_mb=3000,
        # a roofline device with measure_on_cuda is profiled on one GPU
        gpu=PL_WF.profile_gpus,
        slurm_partition=PL_WF.profile_partition,
    shell:
        "OMP_NUM_THREADS=1 python -m distlab placement-profile --spec {params.spec:q} --out {output:q} > {log:q} 2>&1"


rule placement_run:
    """One method, one model, one device pair, every seed, on the simulator (`distlab train
    --experiment placement`).  Its spec holds only its own learner's options, so a learner's
    setting reruns only that learner's runs, and names its inputs (the graph, and the stored
    profile (profile.source: stored) or this run's measurement), which the run does not record."""
    input:
        **PL_WF.scored,
    output:
        f"{PL_DIR}/runs/{{pair}}/{{pl_model}}/{{pl_method}}.json",
    params:
        spec=PL_WF.run_spec,  # a function of the wildcards only (see PlacementRules.run_spec)
    conda:
        ENV
    log:
        log_path("placement/{pair}/{pl_model}/{pl_method}"),
    benchmark:
        benchmark_path("placement/{pair}/{pl_model}/{pl_method}")
    threads: 1
    resources:
        mem_mb=1500,
        distlab_runtime=SHARED.runtime_json(),
    shell:
        "OMP_NUM_THREADS=1 python -m distlab train --experiment placement --spec {params.spec:q} "
        "--runtime {resources.distlab_runtime:q} --out {output:q} > {log:q} 2>&1"


use rule placement_run as placement_run_extra with:
    # One extra seed of one run, asked for by a claim or precondition (config
    # stats.extra_seeds): a job of its own, so the configured runs do not change.
    output:
        f"{PL_DIR}/extra/{{pair}}/{{pl_model}}/{{pl_method}}/seed{{seed}}.json",
    wildcard_constraints:
        seed="|".join(str(k) for k in (placement_wf.all_extra_seeds(PL, RULES.extra_seeds) if PL else [])) or "none",
    params:
        spec=PL_WF.extra_run_spec,
    log:
        log_path("placement/{pair}/{pl_model}/{pl_method}_seed{seed}"),
    benchmark:
        benchmark_path("placement/{pair}/{pl_model}/{pl_method}_seed{seed}")


rule placement_summarize:
    """Run files -> the summary table (one row per run and seed; the scorecard's input) and curves."""
    input:
        placement_wf.runs(PL, PL_DIR, RULES.extra_seeds),
    output:
        summary=f"{PL_DIR}/summary.csv",
        curves=f"{PL_DIR}/curves.csv",
    conda:
        ENV
    log:
        log_path("placement/summarize"),
    benchmark:
        benchmark_path("placement/summarize")
    threads: 1
    resources:
        mem_mb=2000,
    shell:
        "python -m distlab placement-summarize --runs {input:q} --summary-out {output.summary:q} "
        "--curves-out {output.curves:q} > {log:q} 2>&1"


# Main table (method x model: latency, speedup % vs CPU-only), graph sizes, convergence; and the
# ablation table (HSDAG without output shape / node id / structural features).  One rule text,
# one job a kind; the kind is a param: a rule's shell text is formatted when the job runs, when a
# loop variable named in it holds the loop's last value.
for _kind, _tables in (("main", PL_WF.tables["main"]), ("ablation", PL_WF.tables["ablation"])):
    rule:
        name:
            f"placement_table_{_kind}"
        input:
            f"{PL_DIR}/summary.csv",
        output:
            _tables,
        params:
            kind=_kind,
            options=PL_WF.options,
            out=subpath(output[0], parent=True),
        conda:
            ENV
        log:
            log_path(f"placement/table_{_kind}"),
        benchmark:
            benchmark_path(f"placement/table_{_kind}")
        threads: 1
        resources:
            mem_mb=1000,
        shell:
            "python -m distlab placement-tables --kind {params.kind} --summary {input:q} --out-dir {params.out:q} "
            "--options {params.options:q} > {log:q} 2>&1"


rule placement_fig_curves:
    """Learning curves: best latency against evaluations (default pair)."""
    input:
        curves=f"{PL_DIR}/curves.csv",
    output:
        report_figure(f"{PAPER}/figures/placement_curves.png", PL_WF.report, "placement_curves", "learning curves"),
    params:
        inputs=inputs_json,
        options=PL_WF.options,
    conda:
        ENV
    log:
        log_path("placement/fig_curves"),
    benchmark:
        benchmark_path("placement/fig_curves")
    threads: 1
    resources:
        mem_mb=1500,
    shell:
        "python -m distlab placement-figure --kind curves --inputs {params.inputs:q} --out {output:q} "
        "--options {params.options:q} > {log:q} 2>&1"


rule placement_fig_placement:
    """One learned placement (the ablated HSDAG variant, first model, default pair, first seed)."""
    input:
        run=f"{PL_DIR}/runs/{PL.get('default_pair', '')}/{PL_WF.pic_model}/{PL.get('ablation_of', 'hsdag')}.json",
        graph=placement_wf.graph_path(PL_DIR, PL_WF.pic_model),
        profile=placement_wf.profile_path(PL, PL_DIR, PL_WF.pic_model) if PL else "",
    output:
        report_figure(f"{PAPER}/figures/placement_learned.png", PL_WF.report, "placement_learned", "learned placement"),
    params:
        inputs=PL_WF.learned_inputs,
        options=PL_WF.learned_options,
    conda:
        ENV
    log:
        log_path("placement/fig_placement"),
    benchmark:
        benchmark_path("placement/fig_placement")
    threads: 1
    resources:
        mem_mb=1500,
    shell:
        "python -m distlab placement-figure --kind placement --inputs {params.inputs:q} --out {output:q} "
        "--options {params.options:q} > {log:q} 2>&1"


rule placement_real:
    """Two CPU devices (two processes, one pinned core each): every method's best placement on the
    default pair, and CPU-only, executed; measured latency against the simulator (this run's profile)."""
    input:
        graph=placement_wf.graph_path(PL_DIR),
        profile=f"{PL_DIR}/profiles/{{pl_model}}.json",
        runs=PL_WF.real_runs,
    output:
        f"{PL_DIR}/real/{{pl_model}}.json",
    params:
        spec=PL_WF.real_spec,
    conda:
        ENV
    log:
        log_path("placement/real_{pl_model}"),
    benchmark:
        benchmark_path("placement/real_{pl_model}")
    threads: 2
    resources:
        mem_mb=3000,
    shell:
        "OMP_NUM_THREADS=1 python -m distlab placement-real --spec {params.spec:q} --graph {input.graph:q} "
        "--profile {input.profile:q} --runs {input.runs:q} --out {output:q} > {log:q} 2>&1"


rule placement_table_real:
    """Simulator error against real two-CPU execution, per model and placement."""
    input:
        [f"{PL_DIR}/real/{m}.json" for m in PL.get("real", {}).get("models", [])],
    output:
        csv=PL_WF.tables["real"][0],
        md=PL_WF.tables["real"][1],
    conda:
        ENV
    log:
        log_path("placement/table_real"),
    benchmark:
        benchmark_path("placement/table_real")
    threads: 1
    resources:
        mem_mb=1000,
    shell:
        "python -m distlab placement-real-table --inputs {input:q} --out-csv {output.csv:q} "
        "--out-md {output.md:q} > {log:q} 2>&1"


rule placement_bench_sim:
    """Simulator evaluations per second on one graph (measured, never asserted)."""
    input:
        **PL_WF.scored,
    output:
        f"{RESULTS}/bench/placement_sim_{{pl_model}}.csv",
    params:
        spec=PL_WF.bench_spec,
    conda:
        ENV
    log:
        log_path("bench/placement_sim_{pl_model}"),
    benchmark:
        benchmark_path("bench/placement_sim_{pl_model}")
    threads: 1
    resources:
        mem_mb=1000,
    shell:
        "OMP_NUM_THREADS=1 python -m distlab placement-bench --spec {params.spec:q} --graph {input.graph:q} "
        "--profile {input.profile:q} --out {output:q} > {log:q} 2>&1"


rule placement:
    """Every placement run, table and figure, and this paper's scorecard rows."""
    input:
        placement_wf.outputs(PL, PAPER),
        f"{PAPER}/scorecard/P2.md",


# ---- fair comparison: can each learner's search space express HEFT's placement?


rule placement_space:
    """HEFT's placement projected onto each learner's clusters (co-location groups, or HSDAG's final
    parsing) and improved cluster by cluster: the best placement its space is shown to hold, and the
    gap to the best baseline (simulated).  The placement.<model>.<learner>_space conditions read it."""
    input:
        runs=placement_wf.space_runs(PL, PL_DIR) if PL else [],
        graphs=[placement_wf.graph_path(PL_DIR, m) for m in placement_wf.models(PL)] if PL else [],
        profiles=[placement_wf.profile_path(PL, PL_DIR, m) for m in placement_wf.models(PL)] if PL else [],
    output:
        csv=f"{PL_DIR}/space.csv",
        md=f"{PAPER}/tables/placement_space.md",
    params:
        spec=placement_wf.space_spec(PL) if PL else "{}",
        graphs=as_json({m: placement_wf.graph_path(PL_DIR, m) for m in placement_wf.models(PL)}) if PL else "{}",
        profiles=as_json({m: placement_wf.profile_path(PL, PL_DIR, m) for m in placement_wf.models(PL)}) if PL else "{}",
    conda:
        ENV
    log:
        log_path("placement/space"),
    benchmark:
        benchmark_path("placement/space")
    threads: 1
    resources:
        mem_mb=1500,
    shell:
        "OMP_NUM_THREADS=1 python -m distlab placement-space --spec {params.spec:q} --graphs {params.graphs:q} "
        "--profiles {params.profiles:q} --runs {input.runs:q} --out {output.csv:q} --md {output.md:q} > {log:q} 2>&1"


# ---- regime: where does a mixed placement pay?  The roofline GPU's conv/linear speed swept


rule placement_regime:
    """CPU-only, GPU-only, the exact serial optimum and HEFT's concurrent placement on the default pair with
    its roofline GPU's convolution / linear / matmul times scaled to 0.5x-4x the CPU's (simulated)."""
    input:
        graphs=[placement_wf.graph_path(PL_DIR, m) for m in placement_wf.models(PL)] if PL else [],
        profiles=[placement_wf.profile_path(PL, PL_DIR, m) for m in placement_wf.models(PL)] if PL else [],
    output:
        csv=f"{PL_DIR}/regime.csv",
        md=f"{PAPER}/tables/placement_regime.md",
        fig=report_figure(f"{PAPER}/figures/placement_regime.png", PL_WF.report, "placement_regime",
                          "regime: where a mixed placement pays"),
    params:
        spec=as_json({"pair": placement_wf.pair_spec(PL, PL["default_pair"]), "pair_name": PL["default_pair"],
                      "paper_pct": placement_wf.paper_speedup_pct(f"{workflow.basedir}/config/claims.yaml")})
            if PL else "{}",
        graphs=as_json({m: placement_wf.graph_path(PL_DIR, m) for m in placement_wf.models(PL)}) if PL else "{}",
        profiles=as_json({m: placement_wf.profile_path(PL, PL_DIR, m) for m in placement_wf.models(PL)}) if PL else "{}",
    conda:
        ENV
    log:
        log_path("placement/regime"),
    benchmark:
        benchmark_path("placement/regime")
    threads: 1
    resources:
        mem_mb=1500,
    shell:
        "OMP_NUM_THREADS=1 python -m distlab placement-regime --spec {params.spec:q} --graphs {params.graphs:q} "
        "--profiles {params.profiles:q} --out {output.csv:q} --md {output.md:q} --fig {output.fig:q} > {log:q} 2>&1"
