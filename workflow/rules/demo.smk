# DeMo (P4): DeMo against AdamW-DDP, DiLoCo and PowerSGD on the simulated
# cluster and on real torchrun processes; loss against steps, bytes and
# simulated time; the OLMo-scale bytes table; the learning-rate sweep
# (`demo_sweep`) and the benchmarks (`demo_bench`).

from distlab.demo.workflow import SIM_REAL, DemoWorkflow

# the paths, runs and specs of the rules below (named functions of a job's wildcards among them)
P4 = DemoWorkflow(config, RULES)
SHARED.register("P4", P4.summary_tables(), P4.outputs())


wildcard_constraints:
    dmethod=P4.method_pattern(),
    dbackend=r"simulated|gloo|nccl",
    nw=r"\d+",
    lr=r"[0-9.e-]+",


rule demo_train_sim:
    """One method, N workers, every seed on the simulated cluster (measured compute, modelled
    network), one after another in one process; each seed has its own run directory.  The learning
    rate is the sweep's choice (demo.lr_from_sweep) or demo.lr.  A seed the sweep already trained at
    the chosen lr (same N and horizon) is taken from the sweep's run picked by demo_table_sweep
    (named in the spec's ``reuse``), not trained again."""
    input:
        data=data_manifest(P4.d["dataset"]),
        choice=P4.choice_input(),
        sweep=P4.reuse_input,
    output:
        **seed_files(P4.sim_job, config["seeds"]),
    params:
        **train_params(P4.seeds_spec, out=P4.sim_job),
    conda:
        ENV
    log:
        log_path(f"demo/{SIM}/n{{nw}}/{{dmethod}}"),
    benchmark:
        benchmark_path(f"demo/{SIM}/n{{nw}}/{{dmethod}}")
    threads: 1
    resources:
        **SHARED.train_resources("demo_train_sim", P4.seeds_spec, base_mb=1200),
    shell:
        "OMP_NUM_THREADS={threads} python -m distlab train --experiment demo --spec {params.spec:q} "
        "--runtime {resources.distlab_runtime:q} --data {params.data:q} --out {params.out:q} > {log:q} 2>&1"


use rule demo_train_sim as demo_train_sim_extra with:
    # One extra seed of a simulated setting whose claim asked for more (config stats.extra_seeds):
    # a job of its own, so no configured job's spec changes; the same numbers the multi-seed job
    # would give that seed.
    input:
        data=data_manifest(P4.d["dataset"]),
        choice=P4.choice_input(),
        sweep=P4.reuse_input,
    output:
        **run_files(f"{P4.sim_job}/seed{{seed}}"),
    wildcard_constraints:
        seed="|".join(str(k) for k in P4.all_extra_seeds()) or "none",
    params:
        spec=P4.extra_seed_spec,
    log:
        log_path(f"demo/{SIM}/n{{nw}}/{{dmethod}}_seed{{seed}}"),
    benchmark:
        benchmark_path(f"demo/{SIM}/n{{nw}}/{{dmethod}}_seed{{seed}}")
    resources:
        **SHARED.train_resources("demo_train_sim", P4.extra_seed_spec, base_mb=1200),


rule demo_train_real:
    """One method on N torchrun processes (gloo on CPU, NCCL on GPUs); wall-clock time."""
    input:
        data=data_manifest(P4.d["dataset"]),
        choice=P4.choice_input(),
    output:
        **run_files(P4.run.replace("{dbackend}", P4.real_backend)),
    params:
        **train_params(P4.real_spec),
    conda:
        ENV
    log:
        log_path(f"demo/{P4.real_backend}/n{{nw}}/{{dmethod}}/seed{{seed}}"),
    benchmark:
        benchmark_path(f"demo/{P4.real_backend}/n{{nw}}/{{dmethod}}/seed{{seed}}")
    threads: config["runtime"]["threads"]
    resources:
        **SHARED.train_resources("demo_train_real", P4.real_spec, base_mb=1200, gpu=True, partition=True),
    shell:
        "python -m distlab train --experiment demo --spec {params.spec:q} --runtime {resources.distlab_runtime:q} "
        "--threads {threads} --data {params.data:q} --out {params.out:q} > {log:q} 2>&1"


use rule demo_train_sim as demo_train_sweep with:
    # One point of the learning-rate sweep (simulated cluster): one method at one lr, every sweep
    # seed, at the comparison's horizon (demo.steps).
    input:
        data=data_manifest(P4.d["dataset"]),
    output:
        **seed_files(P4.sweep_job, P4.d["sweep"]["seeds"]),
    params:
        spec=P4.sweep_spec,
        out=P4.sweep_job,
    log:
        log_path("demo/sweep/lr{lr}/{dmethod}"),
    benchmark:
        benchmark_path("demo/sweep/lr{lr}/{dmethod}")
    resources:
        **SHARED.train_resources("demo_train_sweep", P4.sweep_spec, base_mb=1200),


use rule demo_train_sim as demo_train_twin with:
    # The simulated twin of one real setting (demo_train_real): its seeds and steps on the simulated
    # cluster, so the real-vs-simulated figure compares the same runs at every real N.
    input:
        data=data_manifest(P4.d["dataset"]),
        choice=P4.choice_input(),
    output:
        **seed_files(P4.twin_job, P4.d["real"]["seeds"]),
    params:
        spec=P4.twin_spec,
        out=P4.twin_job,
    log:
        log_path(f"demo/{SIM_REAL}/n{{nw}}/{{dmethod}}"),
    benchmark:
        benchmark_path(f"demo/{SIM_REAL}/n{{nw}}/{{dmethod}}")
    resources:
        **SHARED.train_resources("demo_train_sim", P4.twin_spec, base_mb=1200),


rule demo_summarize:
    """Per-step and run-level tables of one group of DeMo runs (bytes, re-timed columns)."""
    input:
        runs=P4.group_runs,
        metrics=P4.group_metrics,
    output:
        steps=P4.steps("{dgroup}"),
        summary=P4.summary("{dgroup}"),
    wildcard_constraints:
        dgroup=r"simulated|simulated_real|gloo|nccl|sweep",
    params:
        runs=run_dirs_of_runs,
        networks=P4.summary_networks,
    conda:
        ENV
    log:
        log_path("demo/{dgroup}/summarize"),
    benchmark:
        benchmark_path("demo/{dgroup}/summarize")
    threads: 1
    resources:
        mem_mb=1500,
    shell:
        "python -m distlab demo-summarize --runs {params.runs:q} --networks {params.networks:q} "
        "--steps-out {output.steps:q} --summary-out {output.summary:q} > {log:q} 2>&1"


# Validation loss against steps (every method, N = each worker count); each method's
# validation-loss gap to AdamW-DDP (paired by seed) against steps: has it stopped shrinking
# by the end?; validation loss against cumulative bytes sent per worker.  One job a figure.
for _kind, _label in P4.step_figures:
    rule:
        name:
            f"demo_fig_{_kind}"
        input:
            P4.steps(SIM),
        output:
            report_figure(f"{PAPER}/figures/demo_{_kind}.png", P4.report, f"demo_{_kind}", _label),
        params:
            kind=_kind,
            note=f"{len(config['seeds'])} seeds, 95% t band",
        conda:
            ENV
        log:
            log_path(f"demo/fig_{_kind}"),
        benchmark:
            benchmark_path(f"demo/fig_{_kind}")
        threads: 1
        resources:
            mem_mb=1500,
        shell:
            "python -m distlab demo-figure --kind {params.kind} --steps {input:q} --note {params.note:q} "
            "--out {output:q} > {log:q} 2>&1"


rule demo_fig_loss_time:
    """Validation loss against simulated time under each configured network."""
    input:
        P4.steps(SIM),
    output:
        report_figure(f"{PAPER}/figures/demo_loss_time.png", P4.report, "demo_loss_time", "loss vs simulated time"),
    params:
        networks=P4.networks,
        note=f"{len(config['seeds'])} seeds; compute measured",
    conda:
        ENV
    log:
        log_path("demo/fig_loss_time"),
    benchmark:
        benchmark_path("demo/fig_loss_time")
    threads: 1
    resources:
        mem_mb=1500,
    shell:
        "python -m distlab demo-figure --kind loss_time --steps {input:q} --networks {params.networks:q} "
        "--note {params.note:q} --out {output:q} > {log:q} 2>&1"


rule demo_fig_real:
    """Measured step time on real processes beside the simulated prediction."""
    input:
        **P4.real_vs_sim,
    output:
        report_figure(f"{PAPER}/figures/demo_real.png", P4.report, "demo_real", "real vs simulated step time"),
    conda:
        ENV
    log:
        log_path("demo/fig_real"),
    benchmark:
        benchmark_path("demo/fig_real")
    threads: 1
    resources:
        mem_mb=1500,
    shell:
        "python -m distlab demo-figure --kind real --summary {input.real:q} --sim-summary {input.sim:q} "
        "--out {output:q} > {log:q} 2>&1"


rule demo_table_results:
    """Final validation loss, bytes and times per method and N (mean [95% t CI] over seeds)."""
    input:
        P4.summary(SIM),
    output:
        csv=f"{PAPER}/tables/demo_results.csv",
        md=f"{PAPER}/tables/demo_results.md",
    params:
        networks=P4.networks,
    conda:
        ENV
    log:
        log_path("demo/table_results"),
    benchmark:
        benchmark_path("demo/table_results")
    threads: 1
    resources:
        mem_mb=1000,
    shell:
        "python -m distlab demo-table --kind results --summary {input:q} --networks {params.networks:q} "
        "--csv {output.csv:q} --md {output.md:q} > {log:q} 2>&1"


rule demo_table_real:
    """Real processes: measured step time, ranks identical, bytes; simulated prediction beside."""
    input:
        **P4.real_vs_sim,
    output:
        f"{PAPER}/tables/demo_real.md",
    conda:
        ENV
    log:
        log_path("demo/table_real"),
    benchmark:
        benchmark_path("demo/table_real")
    threads: 1
    resources:
        mem_mb=1000,
    shell:
        "python -m distlab demo-table --kind real --summary {input.real:q} --sim-summary {input.sim:q} "
        "--md {output:q} > {log:q} 2>&1"


rule demo_bytes_table:
    """DeMo and AdamW-DDP bytes per step at OLMo-300M/1B shapes (meta device), k = 32 and 1."""
    input:
        claims="config/claims.yaml",
    output:
        csv=f"{PAPER}/tables/demo_bytes.csv",
        md=f"{PAPER}/tables/demo_bytes.md",
    params:
        chunk=P4.d["demo"]["chunk"],
    conda:
        ENV
    log:
        log_path("demo/bytes_table"),
    benchmark:
        benchmark_path("demo/bytes_table")
    threads: 1
    resources:
        mem_mb=1000,
    shell:
        "python -m distlab demo-bytes --claims {input.claims:q} --claim-id demo.bytes.olmo1b_k32 "
        "--chunk {params.chunk} --topk 32 1 --csv {output.csv:q} --md {output.md:q} > {log:q} 2>&1"


rule demo_table_sweep:
    """The learning-rate sweep: final loss on the validation split per method and lr; the lowest mean
    per method is the choice (followers such as demo-compact take their leader's); and the sweep's
    runs at the choice that comparison jobs take (their seeds, same N and horizon), each copied to a
    folder of its own (distlab.results.sweeps.pick), a declared input of the job that takes it."""
    input:
        summary=P4.summary("sweep"),
        runs=P4.runs("sweep"),
    output:
        md=f"{PAPER}/tables/demo_sweep.md",
        choice=P4.lr_choice,
        picked=P4.picked_files(),
    params:
        follows=as_json(P4.d.get("lr_follows", {})),
        picks=P4.picks_json,
    conda:
        ENV
    log:
        log_path("demo/table_sweep"),
    benchmark:
        benchmark_path("demo/table_sweep")
    threads: 1
    resources:
        mem_mb=1000,
    shell:
        "python -m distlab demo-table --kind sweep --summary {input.summary:q} --follows {params.follows:q} "
        "--choice {output.choice:q} --picks {params.picks:q} --md {output.md:q} > {log:q} 2>&1"


rule demo_bench:
    """Optimizer step vs torch AdamW, whole step vs AdamW-DDP on 2 gloo processes, payload bytes,
    tokens/s and peak RSS (measured; under `snakemake demo_bench`, reported, never asserted)."""
    input:
        data=data_manifest(P4.d["dataset"]),
    output:
        **csv_and_beside(f"{RESULTS}/demo/bench/bench", md=".md"),
    params:
        spec=P4.bench_spec(),
        data=subpath(input.data, parent=True),
    conda:
        ENV
    log:
        log_path("demo/bench"),
    benchmark:
        benchmark_path("demo/bench")
    threads: config["runtime"]["threads"]
    resources:
        mem_mb=6000,
    shell:
        "python -m distlab demo-bench --spec {params.spec:q} --data {params.data:q} --threads {threads} "
        "--out {output.csv:q} > {log:q} 2>&1"


use rule demo_bench as demo_bench_gpu with:
    # On a machine with a GPU (outside `all`; `snakemake --cores all demo_bench_gpu`): the whole training
    # step of DeMo against AdamW-DDP's on NCCL, one process per GPU (at most 2; on one GPU the run is world
    # size 1: the step without its collective), the default and the large model (measured; reported,
    # never asserted).  Without a GPU it writes its rows as "not run: no GPU".
    output:
        **csv_and_beside(f"{RESULTS}/demo/bench/bench_gpu", md=".md"),
    params:
        spec=P4.bench_spec(gpu=True),
        data=subpath(input.data, parent=True),
    log:
        log_path("demo/bench_gpu"),
    benchmark:
        benchmark_path("demo/bench_gpu")


rule demo_sweep:
    """The learning-rate sweep (its chosen values are in config/config.yaml demo.lr)."""
    input:
        f"{PAPER}/tables/demo_sweep.md",


rule demo:
    """Every DeMo run, figure and table, and the scorecard's P4 rows."""
    input:
        P4.figures + P4.tables + P4.real_out,
        f"{PAPER}/scorecard/P4.md",
