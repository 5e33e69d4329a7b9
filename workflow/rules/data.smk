rule prepare_data:
    """Builds one data set once, with seeded train/val/test splits and a manifest of checksums."""
    output:
        manifest=data_manifest("{dataset}"),
        **{split: f"{RESULTS}/data/{{dataset}}/{split}.pt" for split in DATA_SPLITS},
    params:
        spec=SHARED.dataset_spec,
        seed=config["data_seed"],
        out=SHARED.dataset_dir,
    conda:
        ENV
    log:
        log_path("data/{dataset}"),
    benchmark:
        benchmark_path("data/{dataset}")
    threads: 1
    resources:
        mem_mb=SHARED.dataset_mem_mb,  # a hub image set is decoded in full once
    shell:
        "python -m distlab prepare-data --spec {params.spec:q} --out {params.out:q} --seed {params.seed:q} "
        "> {log:q} 2>&1"


rule data:
    """Every configured data set."""
    input:
        [data_manifest(name) for name in config["datasets"]],


rule data_floors:
    """Unigram and bigram cross-entropy floors of a text data set, fitted on its train split.

    A language model's quality claims are testable only once its held-out loss
    is below the bigram floor by a stated margin (config/claims.yaml: conditions)."""
    input:
        manifest=data_manifest("{dataset}"),
    output:
        floors_table("{dataset}"),
    params:
        data=SHARED.dataset_dir,
    conda:
        ENV
    log:
        log_path("data/{dataset}_floors"),
    benchmark:
        benchmark_path("data/{dataset}_floors")
    threads: 1
    resources:
        mem_mb=1000,
    shell:
        "python -m distlab data-floors --data {params.data:q} --out {output:q} > {log:q} 2>&1"


# the language-model papers' quality conditions read their data set's floors
SHARED.register_floors()
