# The shared baseline: synchronous data-parallel SGD against single-process SGD.
from distlab.baseline.workflow import BaselineWorkflow

wildcard_constraints:
    method=r"dgd|single",
    backend=r"simulated|gloo|nccl",

BASE = BaselineWorkflow(config, RULES)

SHARED.register("baseline", {"baseline": BASE.summary}, BASE.outputs)


rule baseline_train_sim:
    """Data-parallel SGD (or its single-process reference) on the simulated cluster."""
    input:
        data=data_manifest(config["baseline"]["dataset"]),
    output:
        **run_files(f"{RESULTS}/baseline/simulated/{{method}}/seed{{seed}}"),
    params:
        **train_params(BASE.sim_spec),
    conda:
        ENV
    log:
        log_path("baseline/simulated/{method}/seed{seed}"),
    benchmark:
        benchmark_path("baseline/simulated/{method}/seed{seed}")
    threads: 1
    resources:
        **SHARED.train_resources("baseline_train_sim", BASE.sim_spec),
    shell:
        "OMP_NUM_THREADS={threads} python -m distlab train --experiment baseline --spec {params.spec:q} "
        "--runtime {resources.distlab_runtime:q} --data {params.data:q} --out {params.out:q} > {log:q} 2>&1"


rule baseline_train_dist:
    """Data-parallel SGD, one torchrun process per worker (gloo on CPU, NCCL on GPU)."""
    input:
        data=data_manifest(config["baseline"]["dataset"]),
    output:
        **run_files(f"{RESULTS}/baseline/{{backend}}/dgd/seed{{seed}}"),
    wildcard_constraints:
        backend="gloo|nccl",
    params:
        **train_params(BASE.dist_spec),
    conda:
        ENV
    log:
        log_path("baseline/{backend}/dgd/seed{seed}"),
    benchmark:
        benchmark_path("baseline/{backend}/dgd/seed{seed}")
    threads: config["runtime"]["threads"]
    resources:
        **SHARED.train_resources("baseline_train_dist", BASE.dist_spec, gpu=True, partition=True),
    shell:
        "python -m distlab train --experiment baseline --spec {params.spec:q} --threads {threads} "
        "--runtime {resources.distlab_runtime:q} --data {params.data:q} --out {params.out:q} > {log:q} 2>&1"


rule baseline_summarize:
    input:
        runs=BASE.runs(),
        metrics=BASE.metrics(),
    output:
        steps=BASE.steps,
        summary=BASE.summary,
    conda:
        ENV
    log:
        log_path("baseline/summarize"),
    benchmark:
        benchmark_path("baseline/summarize")
    threads: 1
    resources:
        mem_mb=1000,
    shell:
        "python -m distlab summarize --runs {input.runs:q} --steps-out {output.steps:q} "
        "--summary-out {output.summary:q} > {log:q} 2>&1"


rule baseline_figures:
    input:
        steps=rules.baseline_summarize.output.steps,
        summary=rules.baseline_summarize.output.summary,
    output:
        fig=report_figure(f"{PAPER}/figures/baseline_loss.png", "Baseline", "baseline", "DGD vs single-process SGD"),
        csv=f"{PAPER}/tables/baseline.csv",
        md=f"{PAPER}/tables/baseline.md",
    params:
        inputs=inputs_json,
        out=subpath(output.fig, ancestor=2),
    conda:
        ENV
    log:
        log_path("baseline/figures"),
    benchmark:
        benchmark_path("baseline/figures")
    threads: 1
    resources:
        mem_mb=2000,
    shell:
        "python -m distlab figures --experiment baseline --inputs {params.inputs:q} --out-dir {params.out:q} "
        "> {log:q} 2>&1"


rule baseline:
    """The shared baseline experiment, through to its figure, table and scorecard rows."""
    input:
        rules.baseline_figures.output,
        f"{PAPER}/scorecard/foundation.md",
