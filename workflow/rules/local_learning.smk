# Local credit assignment for CPU transformers (P3): backprop (BP) against
# readout-gradient consensus (RC, sections in parallel processes) on a deep GPT,
# against predictive coding (PC) on a shallower one; throughput, memory, PC's
# cost against T, the non-identifiability demonstration, the main table.

LOCAL = config["local_learning"]


wildcard_constraints:
    lgroup=r"rc|pc",
    lmethod=r"bp|rc-seq|rc-heads|rc-par|rc-async|rc-pc-T\d+|pc-fixed|pc-fixed-trunc|pc-strict",
    llr=r"[0-9.e+-]+",


from distlab.local import workflow as local_wf

# the paths, runs and specs of the rules below (named functions of a job's wildcards among them)
LOCAL_WF = local_wf.LocalRules(config, RULES)
SHARED.register("P3", LOCAL_WF.summary_tables, LOCAL_WF.outputs)


rule local_train:
    """A timed run (BP, lock-step or asynchronous parallel RC on the deep model), one seed of
    rc.parallel_seeds, the section's cores, at the method's lr (the sweep's choice)."""
    input:
        data=data_manifest(LOCAL["dataset"]),
        sweep=LOCAL_WF.timed_sweep,
    output:
        **run_files(LOCAL_WF.run),
    params:
        **train_params(LOCAL_WF.timed_spec),
    conda:
        ENV
    wildcard_constraints:
        lgroup="rc",
        lmethod="bp|rc-par|rc-async",
    log:
        log_path("local/{lgroup}/{lmethod}/seed{seed}"),
    benchmark:
        benchmark_path("local/{lgroup}/{lmethod}/seed{seed}")
    # a timed run holds every core of --cores while it runs (no other job shares them); it
    # runs resources.omp_threads threads (a resource, not a param: --cores triggers no rerun), its
    # manifest's load says what the machine did meanwhile
    threads: LOCAL_WF.timed_cores
    priority: 10  # P3's sweep -> comparison chain is the workflow's longest: started first
    resources:
        **SHARED.train_resources("local_train", LOCAL_WF.timed_spec),
        omp_threads=LOCAL_WF.timed_threads,
    shell:
        "OMP_NUM_THREADS={resources.omp_threads} python -m distlab train --experiment local --spec {params.spec:q} "
        "--runtime {resources.distlab_runtime:q} --data {params.data:q} --out {params.out:q} > {log:q} 2>&1"


ruleorder: local_train_extra > local_train


use rule local_train as local_train_extra with:
    """One extra seed of a run setting whose claim asked for more (config stats.extra_seeds):
    a job of its own, so no configured job's spec changes; the numbers the configured job
    would give that seed (BP on one thread, as its untimed seeds)."""
    wildcard_constraints:
        seed="|".join(str(k) for k in LOCAL_WF.extra_seeds) or "none",
    params:
        spec=LOCAL_WF.extra_spec,
    log:
        log_path("local/{lgroup}/{lmethod}/seed{seed}_extra"),
    benchmark:
        benchmark_path("local/{lgroup}/{lmethod}/seed{seed}_extra")
    threads: LOCAL_WF.extra_cores
    priority: 0
    resources:
        **SHARED.train_resources("local_train", LOCAL_WF.extra_spec),
        omp_threads=LOCAL_WF.extra_own_threads,


rule local_train_seeds:
    """An untimed method (sequential RC, or BP and PC on the shallow model): every seed in one
    one-thread job, one after the other (one start-up instead of one a seed); the seeds the sweep
    trained at the chosen lr are taken from it."""
    input:
        data=data_manifest(LOCAL["dataset"]),
        sweep=LOCAL_WF.job_sweep,
    output:
        **seed_files(f"{RESULTS}/local/{{lrun}}", config["seeds"]),
    wildcard_constraints:
        lrun=local_wf.UNTIMED_RUNS_ALL_SEEDS,
    params:
        **train_params(LOCAL_WF.untimed_spec, out=f"{RESULTS}/local/{{lrun}}"),
    conda:
        ENV
    log:
        log_path("local/{lrun}"),
    benchmark:
        benchmark_path("local/{lrun}")
    threads: 1
    priority: 10
    resources:
        **SHARED.train_resources("local_train_seeds", LOCAL_WF.untimed_spec),
    shell:
        "OMP_NUM_THREADS=1 python -m distlab train --experiment local --spec {params.spec:q} "
        "--runtime {resources.distlab_runtime:q} --data {params.data:q} --out {params.out:q} > {log:q} 2>&1"


use rule local_train_seeds as local_train_hybrid with:
    # the RC + PC hybrid at one T: its seeds (rc.hybrid.seeds) in one one-thread job
    output:
        **seed_files(f"{RESULTS}/local/{{lrun}}", LOCAL_WF.hybrid_seeds),
    wildcard_constraints:
        lrun=local_wf.HYBRID_RUNS,


if LOCAL_WF.bp_untimed:

    ruleorder: local_train_bp_untimed > local_train

    use rule local_train_seeds as local_train_bp_untimed with:
        """The deep model's BP on its untimed seeds (every seed but the timed ones,
        rc.parallel_seeds): all of them in one one-thread job, one after the other; the seeds
        the sweep trained at the chosen lr are taken from it."""
        input:
            data=data_manifest(LOCAL["dataset"]),
            sweep=LOCAL_WF.bp_untimed_sweep,
        output:
            **seed_files(f"{RESULTS}/local/rc/bp", LOCAL_WF.bp_untimed),
        params:
            spec=LOCAL_WF.bp_untimed_spec,
            out=seeds_folder,  # its seeds' folder (results/local/rc/bp)
        log:
            log_path("local/rc/bp_untimed"),
        benchmark:
            benchmark_path("local/rc/bp_untimed")
        resources:
            **SHARED.train_resources("local_train_seeds", LOCAL_WF.bp_untimed_spec),


if LOCAL_WF.sweep_runs:

    use rule local_train_seeds as local_train_sweep with:
        """One point of the learning-rate sweep: one method at one lr on the sweep seeds
        (sweep.seeds), untimed, one thread, at the comparison's horizon (the comparison takes these
        runs at the chosen lr as those seeds' runs)."""
        input:
            data=data_manifest(LOCAL["dataset"]),
        output:
            manifests=[f"{LOCAL_WF.sweep_root}/lr{{llr}}/{{lrun}}/seed{k}/manifest.json" for k in (LOCAL.get("sweep") or {}).get("seeds", [])],
        wildcard_constraints:
            lrun=local_wf.SWEPT_RUNS,
        params:
            spec=LOCAL_WF.sweep_spec,
            out=f"{LOCAL_WF.sweep_root}/lr{{llr}}/{{lrun}}",
        log:
            log_path("local/sweep/lr{llr}/{lrun}"),
        benchmark:
            benchmark_path("local/sweep/lr{llr}/{lrun}")
        resources:
            **SHARED.train_resources("local_train_seeds", LOCAL_WF.sweep_spec),


    use rule local_train_sweep as local_train_sweep_hybrid with:
        # the hybrid's sweep runs on its own seeds (rc.hybrid.seeds)
        output:
            manifests=[f"{LOCAL_WF.sweep_root}/lr{{llr}}/{{lrun}}/seed{k}/manifest.json"
                   for k in local_wf.sweep_seeds(LOCAL, "rc", "rc-pc-T0", config["seeds"])],
        wildcard_constraints:
            lrun=local_wf.HYBRID_RUNS,


    rule local_table_sweep:
        """The sweep's table (every lr's validation loss per method, the choice marked) and its
        choice, which every comparison run reads (followers take their leader's); and the sweep's
        runs at the choice that untimed comparison jobs take (their sweep seeds), each copied to a
        folder of its own (distlab.results.sweeps.pick), a declared input of the job that takes it."""
        input:
            LOCAL_WF.sweep_runs,
        output:
            csv=f"{PAPER}/tables/local_sweep.csv",
            md=report(f"{PAPER}/tables/local_sweep.md", category=LOCAL_WF.report,
                      caption="../report/local_sweep.rst", labels={"table": "lr sweep"}),
            choice=local_wf.choice_path(LOCAL_WF.sweep_root),
            picked=LOCAL_WF.picked_files,
        params:
            follows=as_json((LOCAL.get("sweep") or {}).get("follows") or {}),
            picks=LOCAL_WF.picks_json,
        conda:
            ENV
        log:
            log_path("local/table_sweep"),
        benchmark:
            benchmark_path("local/table_sweep")
        threads: 1
        resources:
            mem_mb=1000,
        shell:
            "python -m distlab local-sweep --runs {input:q} --follows {params.follows:q} --csv {output.csv:q} "
            "--md {output.md:q} --choice {output.choice:q} --picks {params.picks:q} > {log:q} 2>&1"


rule local_summarize:
    """Every local-learning run -> the per-step table and the runs table (the scorecard's input)."""
    input:
        runs=LOCAL_WF.runs,
        metrics=LOCAL_WF.metrics,
    output:
        steps=f"{RESULTS}/local/steps.csv",
        runs=f"{RESULTS}/local/runs.csv",
        staleness=f"{RESULTS}/local/staleness.csv",
    conda:
        ENV
    log:
        log_path("local/summarize"),
    benchmark:
        benchmark_path("local/summarize")
    threads: 1
    resources:
        mem_mb=1000,
    shell:
        "python -m distlab local-summarize --runs {input.runs:q} --steps-out {output.steps:q} "
        "--summary-out {output.runs:q} --staleness-out {output.staleness:q} > {log:q} 2>&1"


rule local_bench_throughput:
    """Tokens/s and peak RSS of BP and parallel RC: fresh processes, interleaved, repeated."""
    input:
        data=data_manifest(LOCAL["dataset"]),
    output:
        LOCAL_WF.bench["throughput"],
    params:
        options=as_json({"specs": local_wf.bench_specs(LOCAL), "repeats": LOCAL["bench"]["repeats"],
                         "warmup": LOCAL["bench"]["warmup"], "measure": LOCAL["bench"]["measure"]}),
        data=subpath(input.data, parent=True),
    conda:
        ENV
    log:
        log_path("local/bench_throughput"),
    benchmark:
        benchmark_path("local/bench_throughput")
    threads: LOCAL_WF.timed_cores  # timed: alone on --cores
    resources:
        mem_mb=LOCAL_WF.throughput_mem_mb,
    shell:
        "python -m distlab local-bench throughput --options {params.options:q} --data {params.data:q} "
        "--out {output:q} > {log:q} 2>&1"


use rule local_bench_throughput as local_bench_map with:
    """The throughput map: BP and RC (lock-step processes, asynchronous, threads) at the
    benchmark shape and with width, sections or sequence length varied one at a time."""
    output:
        LOCAL_WF.bench["map"],
    params:
        options=as_json({"specs": local_wf.map_specs(LOCAL), "repeats": LOCAL["bench"]["map"]["repeats"],
                         "warmup": LOCAL["bench"]["map"]["warmup"], "measure": LOCAL["bench"]["map"]["measure"]}),
    log:
        log_path("local/bench_map"),
    benchmark:
        benchmark_path("local/bench_map")
    resources:
        mem_mb=LOCAL_WF.map_mem_mb,


rule local_fig_throughput_map:
    """The map's figure and table: RC's tokens/s over BP's at each point, and where the
    paper's ratio holds here."""
    input:
        map=LOCAL_WF.bench["map"],
        claims="config/claims.yaml",
    output:
        fig=report_figure(LOCAL_WF.map["figure"], LOCAL_WF.report, "local_throughput_map", "throughput map"),
        csv=LOCAL_WF.map["csv"],
        md=LOCAL_WF.map["md"],
    conda:
        ENV
    log:
        log_path("local/fig_throughput_map"),
    benchmark:
        benchmark_path("local/fig_throughput_map")
    threads: 1
    resources:
        mem_mb=1000,
    shell:
        "python -m distlab local-map --input {input.map:q} --claims {input.claims:q} --out {output.fig:q} "
        "--csv {output.csv:q} --md {output.md:q} > {log:q} 2>&1"


rule local_fig_probes:
    """Per-section probe losses over training (the readout on each section's output)."""
    input:
        f"{RESULTS}/local/steps.csv",
    output:
        report_figure(LOCAL_WF.figures["probes"], LOCAL_WF.report, "local_probes", "probe losses"),
    conda:
        ENV
    log:
        log_path("local/fig_probes"),
    benchmark:
        benchmark_path("local/fig_probes")
    threads: 1
    resources:
        mem_mb=1000,
    shell:
        "python -m distlab local-figure probes --input {input:q} --out {output:q} > {log:q} 2>&1"


rule local_fig_hybrid:
    """Quality of the RC + PC hybrid against its inference iterations T (when rc.hybrid is set)."""
    input:
        f"{RESULTS}/local/runs.csv",
    output:
        report_figure(LOCAL_WF.figures.get("hybrid", f"{PAPER}/figures/local_hybrid.png"), LOCAL_WF.report, "local_hybrid",
                      "RC + PC vs T"),
    conda:
        ENV
    log:
        log_path("local/fig_hybrid"),
    benchmark:
        benchmark_path("local/fig_hybrid")
    threads: 1
    resources:
        mem_mb=1000,
    shell:
        "python -m distlab local-figure hybrid --input {input:q} --out {output:q} > {log:q} 2>&1"


rule local_bench_pc_cost:
    """PC's seconds per step against BP's, and its gradient's cosine to BP's, for each T."""
    input:
        data=data_manifest(LOCAL["dataset"]),
    output:
        LOCAL_WF.bench["pc_cost"],
    params:
        options=as_json(local_wf.pc_cost_options(LOCAL)),
        data=subpath(input.data, parent=True),
    conda:
        ENV
    log:
        log_path("local/bench_pc_cost"),
    benchmark:
        benchmark_path("local/bench_pc_cost")
    threads: LOCAL_WF.timed_cores  # timed: alone on --cores (it uses one thread)
    resources:
        mem_mb=LOCAL_WF.pc_cost_mem_mb,
    shell:
        "OMP_NUM_THREADS=1 python -m distlab local-bench pc-cost --options {params.options:q} "
        "--data {params.data:q} --out {output:q} > {log:q} 2>&1"


rule local_nonident:
    """Same output, same loss, same readout reports, different upstream credit: the toy and the
    trained BP model (seed of the first configured seed)."""
    input:
        run=f"{RESULTS}/local/rc/bp/seed{config['seeds'][0]}/manifest.json",
        data=data_manifest(LOCAL["dataset"]),
    output:
        f"{RESULTS}/local/nonident.json",
    params:
        model=LOCAL_WF.nonident_model,
        spec=as_json(LOCAL_WF.nonident_spec),
        scales=[f"{s:g}" for s in LOCAL["nonident"]["scales"]],
        data=subpath(input.data, parent=True),
    conda:
        ENV
    log:
        log_path("local/nonident"),
    benchmark:
        benchmark_path("local/nonident")
    threads: 1
    resources:
        mem_mb=1000,
    shell:
        "python -m distlab local-nonident --model {params.model:q} --spec {params.spec:q} "
        "--data {params.data:q} --scales {params.scales:q} --out {output:q} > {log:q} 2>&1"


# One figure from one table each, one job a figure: held-out loss against training tokens
# (every method, both models) and against measured training wall time; throughput and peak
# memory bars from the interleaved benchmark; PC's cost per step and gradient fidelity
# against the number of inference iterations T; the non-identifiability demonstration
# (the toy h^2 and the trained model's rescaling).
for _name, _source, _label in LOCAL_WF.figure_sources:
    rule:
        name:
            f"local_fig_{_name}"
        input:
            _source,
        output:
            report_figure(LOCAL_WF.figures[_name], LOCAL_WF.report, f"local_{_name}", _label),
        params:
            kind=_name.replace("_", "-"),
        conda:
            ENV
        log:
            log_path(f"local/fig_{_name}"),
        benchmark:
            benchmark_path(f"local/fig_{_name}")
        threads: 1
        resources:
            mem_mb=1000,
        shell:
            "python -m distlab local-figure {params.kind} --input {input:q} --out {output:q} > {log:q} 2>&1"


rule local_table:
    """The main table: one row per method, ours beside the paper's values."""
    input:
        runs=f"{RESULTS}/local/runs.csv",
        throughput=LOCAL_WF.bench["throughput"],
        claims="config/claims.yaml",
        floors=floors_table(LOCAL["dataset"]),
    output:
        csv=LOCAL_WF.tables[0],
        md=report(LOCAL_WF.tables[1], category=LOCAL_WF.report,
                  caption="../report/local_main.rst", labels={"table": "main"}),
    params:
        options=as_json({"alpha": config["stats"]["alpha"]}),
    conda:
        ENV
    log:
        log_path("local/table"),
    benchmark:
        benchmark_path("local/table")
    threads: 1
    resources:
        mem_mb=1000,
    shell:
        "python -m distlab local-table --runs {input.runs:q} --throughput {input.throughput:q} "
        "--claims {input.claims:q} --floors {input.floors:q} --options {params.options:q} "
        "--csv {output.csv:q} --md {output.md:q} "
        "> {log:q} 2>&1"


rule local_learning:
    """Every local-learning run, figure and table, and the scorecard's P3 rows."""
    input:
        list(LOCAL_WF.figures.values()) + LOCAL_WF.tables,
        f"{PAPER}/scorecard/P3.md",


rule local_map:
    """The throughput map (its own target: 28 fresh-process measurements, longer than the
    rest of local_learning on 2 cores)."""
    input:
        list(LOCAL_WF.map.values()),
