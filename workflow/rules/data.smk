rule prepare_data:
    """Builds one data set once, with seeded train/val/test splits and a manifest of checksums."""
    output:
        manifest=f"{RESULTS}/data/{{dataset}}/manifest.json",
        train=f"{RESULTS}/data/{{dataset}}/train.pt",
        val=f"{RESULTS}/data/{{dataset}}/val.pt",
        test=f"{RESULTS}/data/{{dataset}}/test.pt",
    params:
        spec=lambda w: as_json({"name": w.dataset, **config["datasets"][w.dataset]}),
        seed=config["data_seed"],
        out=lambda w: f"{RESULTS}/data/{w.dataset}",
    conda:
        ENV
    log:
        "logs/data/{dataset}.log",
    benchmark:
        "benchmarks/data/{dataset}.tsv"
    threads: 1
    resources:
        # the embedded sets are small; a hub image set is decoded in full once (uint8)
        mem_mb=lambda w: 16000 if config["datasets"][w.dataset]["source"] == "hf" else 2000,
    shell:
        "python -m distlab prepare-data --spec {params.spec:q} --out {params.out:q} --seed {params.seed:q} "
        "> {log:q} 2>&1"


rule data:
    """Every configured data set."""
    input:
        [data_manifest(name) for name in config["datasets"]],
