# The toy paper: one run a seed, its summary, its table.
from distlab.toy.workflow import ToyWorkflow

TOY = ToyWorkflow(config, RESULTS, PAPER)
SHARED.register("toy", TOY.tables, TOY.outputs)


rule toy_train:
    output:
        **run_files(f"{RESULTS}/toy/seed{{seed}}"),
    params:
        spec=TOY.spec,
        out=TOY.run_dir,
    log:
        log_path("toy/seed{seed}"),
    shell:
        "python -m distlab train --experiment toy --spec {params.spec:q} --out {params.out:q} > {log:q} 2>&1"


rule toy_summarize:
    input:
        TOY.manifests,
    output:
        TOY.summary,
    params:
        runs=input_dirs,
    log:
        log_path("toy/summarize"),
    shell:
        "python -m distlab toy summarize --runs {params.runs:q} --out {output:q} > {log:q} 2>&1"


rule toy_table:
    input:
        TOY.summary,
    output:
        TOY.table,
    log:
        log_path("toy/table"),
    shell:
        "python -m distlab toy table --summary {input:q} --out {output:q} > {log:q} 2>&1"
