# Pipelined Gradient Coding (P1): every scheme on the simulated cluster, the
# real backend under torchrun, Figs. 3 and 7-10, the regime map, the delay
# trace fit, and the time-to-target table.  One rule per figure: a figure
# needs only its own runs.  Helpers live in distlab.pgc.workflow (torch-free).
#
# A simulated job runs every seed of one (group, s, delay, scheme) setting in
# one process (one Python/torch start-up instead of one per seed); each seed
# still gets its own run directory and manifest.  Real (gloo) jobs are one
# torchrun job per seed.
from distlab.pgc.workflow import PGCWorkflow

wildcard_constraints:
    s=r"\d+",
    delay=r"[0-9.]+(e[-+]?[0-9]+)?",
    scheme=r"[a-z-]+",
    group=r"motivating|simulation|cloud|real",


# the paths, runs and specs of the rules below (named functions of a job's wildcards among them)
P1 = PGCWorkflow(config, RULES)
SHARED.register("pgc", P1.tables(), P1.outputs())


rule pgc_coding_profile:
    """Encoding and decoding seconds of every scheme and s (measured once, interleaved rounds,
    median and its CI): the stored profile every simulated job's clock reads.  It holds both
    cores (threads: 2) while torch uses one, so no other job shares the machine with it."""
    output:
        P1.coding_profile,
    params:
        options=P1.coding_profile_options() if P1.profiles_coding() else "{}",
    conda:
        ENV
    log:
        log_path("pgc/coding_profile"),
    benchmark:
        benchmark_path("pgc/coding_profile")
    threads: 2
    resources:
        mem_mb=3000,
    shell:
        "OMP_NUM_THREADS=1 python -m distlab pgc coding-profile --options {params.options:q} "
        "--out {output:q} > {log:q} 2>&1"


rule pgc_train_sim:
    """Every seed of one scheme and setting on the simulated cluster (virtual clock)."""
    input:
        data=P1.group_data_manifest,
        coding=P1.coding_input,
    output:
        **seed_files(P1.sim_job, config["seeds"]),
    wildcard_constraints:
        group="motivating|simulation|cloud",
    params:
        **train_params(P1.sim_spec, out=P1.sim_job),
    conda:
        ENV
    log:
        log_path("pgc/{group}/s{s}/d{delay}/simulated/{scheme}"),
    benchmark:
        benchmark_path("pgc/{group}/s{s}/d{delay}/simulated/{scheme}")
    threads: 1
    # torch, the data set, and the coding-cost vectors (measured: 1.15 GB at ResNet-18's size)
    resources:
        **SHARED.train_resources("pgc_train_sim", P1.sim_spec, base_mb=1300),
    shell:
        "OMP_NUM_THREADS={threads} python -m distlab train --experiment pgc --spec {params.spec:q} "
        "--runtime {resources.distlab_runtime:q} --data {params.data:q} --out {params.out:q} > {log:q} 2>&1"


use rule pgc_train_sim as pgc_train_sim_extra with:
    # One extra seed of a setting whose claim asked for more (config stats.extra_seeds): a job
    # of its own, so the configured seeds' jobs do not change; the same numbers the multi-seed
    # job would give that seed.
    output:
        **run_files(f"{P1.sim_job}/seed{{seed}}"),
    wildcard_constraints:
        group="motivating|simulation|cloud",
        seed="|".join(str(k) for k in P1.all_extra_seeds()) or "none",
    params:
        spec=P1.extra_seed_spec,
    log:
        log_path("pgc/{group}/s{s}/d{delay}/simulated/{scheme}_seed{seed}"),
    benchmark:
        benchmark_path("pgc/{group}/s{s}/d{delay}/simulated/{scheme}_seed{seed}")
    resources:
        **SHARED.train_resources("pgc_train_sim_extra", P1.extra_seed_spec, base_mb=1300, runtime=False),


rule pgc_train_real:
    """A master and n workers under torchrun on gloo, injected delays as real sleeps."""
    input:
        data=P1.group_data_manifest,
    output:
        **run_files(f"{P1.setting}/gloo/{{scheme}}/seed{{seed}}"),
    wildcard_constraints:
        group="real",
    params:
        **train_params(P1.real_spec),
    conda:
        ENV
    log:
        log_path("pgc/{group}/s{s}/d{delay}/gloo/{scheme}/seed{seed}"),
    benchmark:
        benchmark_path("pgc/{group}/s{s}/d{delay}/gloo/{scheme}/seed{seed}")
    threads: config["runtime"]["threads"]
    resources:
        **SHARED.train_resources("pgc_train_real", P1.real_spec, gpu=True),
    shell:
        "python -m distlab train --experiment pgc --spec {params.spec:q} --runtime {resources.distlab_runtime:q} "
        "--threads {threads} --data {params.data:q} --out {params.out:q} > {log:q} 2>&1"


use rule pgc_train_sim as pgc_train_sim_real with:
    # The simulator's prediction of each real run, charged with the compute and coding costs
    # that run's workers and master measured.
    input:
        data=P1.group_data_manifest,
        measured=[f"{P1.setting}/gloo/{{scheme}}/seed{k}/manifest.json" for k in config["pgc"]["real"]["seeds"]],
    output:
        **seed_files(P1.sim_job, config["pgc"]["real"]["seeds"]),
    wildcard_constraints:
        group="real",
    params:
        spec=P1.sim_real_spec,
    resources:
        **SHARED.train_resources("pgc_train_sim_real", P1.sim_real_spec, base_mb=1300),


rule pgc_summarize:
    """Per-step (parquet) and run-level (CSV) tables of one experiment group."""
    input:
        runs=P1.group_inputs,
        metrics=P1.group_metrics,
    output:
        steps=P1.steps("{group}"),
        summary=P1.summary("{group}"),
    conda:
        ENV
    log:
        log_path("pgc/{group}/summarize"),
    benchmark:
        benchmark_path("pgc/{group}/summarize")
    threads: 1
    resources:
        mem_mb=mem_of_inputs(400),  # the metrics CSVs become one frame
    shell:
        "python -m distlab pgc summarize --runs {input.runs:q} --steps-out {output.steps:q} "
        "--summary-out {output.summary:q} > {log:q} 2>&1"


# Figs. 3 and 7-10: one rule, one job a figure, each on its own table.  Fig. 3: DGD against
# GC-FR/GC-CR with c partitions a worker; Fig. 7: time per step of every scheme against s;
# Fig. 8: training loss against steps; Fig. 9: time per step and steps to the loss threshold
# (both rules); Fig. 10: training loss against (simulated) time.
for _fig, _table, _group in P1.FIGURES:
    rule:
        name:
            f"pgc_{_fig}"
        input:
            **{_table: P1.table(_table, _group)},
        output:
            report_figure(P1.fig[_fig], P1.report, f"pgc_{_fig}", P1.figure_label(_fig)),
        params:
            name=_fig,
            inputs=inputs_json,
            options=P1.options(),
        conda:
            ENV
        log:
            log_path(f"pgc/{_fig}"),
        benchmark:
            benchmark_path(f"pgc/{_fig}")
        threads: 1
        resources:
            mem_mb=mem_of_inputs(500),
        shell:
            "python -m distlab pgc figure {params.name} --inputs {params.inputs:q} --options {params.options:q} "
            "--out {output:q} > {log:q} 2>&1"


# Time and steps to the loss threshold per scheme, both threshold rules (the cloud group); work
# per worker-step of each scheme, and the simulator's own overhead (the simulation group).  One
# rule text, one job a table; the table's name is a param (a shell text is formatted when the job
# runs, when a loop variable named in it holds the loop's last value).
for _tab, _group in (("time_to_target", "cloud"), ("compute", "simulation")):
    rule:
        name:
            f"pgc_table_{_tab}"
        input:
            summary=P1.summary(_group),
        output:
            P1.tab[_tab],
        params:
            tab=_tab,
            inputs=inputs_json,
        conda:
            ENV
        log:
            log_path(f"pgc/{_tab}"),
        benchmark:
            benchmark_path(f"pgc/{_tab}")
        threads: 1
        resources:
            mem_mb=mem_of_inputs(500),
        shell:
            "python -m distlab pgc figure {params.tab} --inputs {params.inputs:q} --out {output:q} > {log:q} 2>&1"


rule pgc_real_vs_sim:
    """Measured time per step on gloo beside the simulator's calibrated prediction."""
    input:
        summary=P1.summary("real"),
    output:
        **with_report_figure(P1.real_out, P1.report, "pgc_real", "real vs simulated"),
    params:
        inputs=inputs_json,
        options=P1.options(),
    conda:
        ENV
    log:
        log_path("pgc/real_vs_sim"),
    benchmark:
        benchmark_path("pgc/real_vs_sim")
    threads: 1
    resources:
        mem_mb=mem_of_inputs(500),
    shell:
        "python -m distlab pgc figure real_vs_sim --inputs {params.inputs:q} --options {params.options:q} "
        "--out {output.png:q} {output.md:q} > {log:q} 2>&1"


rule pgc_regime:
    """Where the paper's Fig. 7 orderings hold, over c/mu and s, from the clock alone."""
    input:
        unit_cost=P1.unit_cost_runs(),
    output:
        **with_report_figure(P1.regime_out, P1.report, "pgc_regime", "regime map"),
    params:
        options=P1.regime_options(),
    conda:
        ENV
    log:
        log_path("pgc/regime"),
    benchmark:
        benchmark_path("pgc/regime")
    threads: 1
    resources:
        mem_mb=1000,
    shell:
        "python -m distlab pgc regime --options {params.options:q} --csv {output.csv:q} "
        "--md {output.md:q} --png {output.png:q} --unit-cost {input.unit_cost:q} > {log:q} 2>&1"


rule pgc_regime_crosscheck:
    """The regime map's clock against training: clock-only time per step beside the
    trained Fig. 7 runs', seed by seed; the gap is the coding time they charge."""
    input:
        summary=P1.summary("simulation"),
    output:
        **P1.crosscheck_out,
    params:
        options=P1.crosscheck_options(),
    conda:
        ENV
    log:
        log_path("pgc/regime_crosscheck"),
    benchmark:
        benchmark_path("pgc/regime_crosscheck")
    threads: 1
    resources:
        mem_mb=mem_of_inputs(500),
    shell:
        "python -m distlab pgc regime-crosscheck --summary {input.summary:q} --options {params.options:q} "
        "--md {output.md:q} > {log:q} 2>&1"


rule pgc_trace_fit:
    """How well exponential and Pareto delays fit the delay trace recorded on gloo."""
    input:
        trace=P1.trace,
    output:
        **with_report_figure(P1.trace_out, P1.report, "pgc_trace", "delay trace fit"),
    conda:
        ENV
    log:
        log_path("pgc/trace_fit"),
    benchmark:
        benchmark_path("pgc/trace_fit")
    threads: 1
    resources:
        mem_mb=800,
    shell:
        "python -m distlab pgc trace-fit --trace {input.trace:q} --csv {output.csv:q} "
        "--md {output.md:q} --png {output.png:q} > {log:q} 2>&1"


rule pgc:
    """Every PGC experiment, figure and table, and the P1 scorecard."""
    input:
        P1.outputs(),
        f"{PAPER}/scorecard/P1.md",
