# Pipelined Gradient Coding (P1): every scheme on the simulated cluster, the
# real backend under torchrun, Figs. 3 and 7-10, and the time-to-target table.

PGC_RUN = f"{RESULTS}/pgc/{{group}}/s{{s}}/d{{delay}}/{{backend}}/{{scheme}}/seed{{seed}}"


rule pgc_train_sim:
    """One scheme, one setting, one seed on the simulated cluster (virtual clock)."""
    input:
        data=lambda w: data_manifest(pgc_dataset(w.group)),
    output:
        manifest=f"{PGC_RUN}/manifest.json".replace("{backend}", "simulated"),
        metrics=f"{PGC_RUN}/metrics.csv".replace("{backend}", "simulated"),
    params:
        spec=lambda w: pgc_spec(w, "simulated"),
        out=subpath(output.manifest, parent=True),
        data=subpath(input.data, parent=True),
    conda:
        ENV
    log:
        "logs/pgc/{group}/s{s}/d{delay}/simulated/{scheme}/seed{seed}.log",
    benchmark:
        "benchmarks/pgc/{group}/s{s}/d{delay}/simulated/{scheme}/seed{seed}.tsv"
    threads: 1
    resources:
        mem_mb=2000,
    shell:
        "OMP_NUM_THREADS={threads} python -m distlab train --experiment pgc --spec {params.spec:q} "
        "--data {params.data} --out {params.out} > {log} 2>&1"


rule pgc_train_real:
    """A master and n workers under torchrun on gloo, injected delays as real sleeps."""
    input:
        data=lambda w: data_manifest(pgc_dataset(w.group)),
    output:
        manifest=f"{PGC_RUN}/manifest.json".replace("{backend}", "gloo"),
        metrics=f"{PGC_RUN}/metrics.csv".replace("{backend}", "gloo"),
    params:
        spec=lambda w: pgc_spec(w, "gloo"),
        out=subpath(output.manifest, parent=True),
        data=subpath(input.data, parent=True),
    conda:
        ENV
    log:
        "logs/pgc/{group}/s{s}/d{delay}/gloo/{scheme}/seed{seed}.log",
    benchmark:
        "benchmarks/pgc/{group}/s{s}/d{delay}/gloo/{scheme}/seed{seed}.tsv"
    threads: config["runtime"]["threads"]
    resources:
        mem_mb=1000 * (config["pgc"]["real"]["n"] + 1),
    shell:
        "python -m distlab train --experiment pgc --spec {params.spec:q} --threads {threads} "
        "--data {params.data} --out {params.out} > {log} 2>&1"


rule pgc_summarize:
    """Per-step and run-level tables of one experiment group."""
    input:
        lambda w: pgc_runs(w.group),
    output:
        steps=f"{RESULTS}/pgc/{{group}}/steps.csv",
        summary=f"{RESULTS}/pgc/{{group}}/summary.csv",
    conda:
        ENV
    log:
        "logs/pgc/{group}/summarize.log",
    benchmark:
        "benchmarks/pgc/{group}/summarize.tsv"
    threads: 1
    resources:
        mem_mb=2000,
    shell:
        "python -m distlab summarize --runs {input} --steps-out {output.steps} "
        "--summary-out {output.summary} > {log} 2>&1"


rule pgc_figures:
    """The paper's Figs. 3, 7-10, the real-vs-simulated figure and the tables."""
    input:
        **{f"{g}_{kind}": f"{RESULTS}/pgc/{g}/{kind}.csv"
           for g in pgc_summaries() for kind in ("steps", "summary")},
    output:
        fig3=report(f"{PAPER}/figures/pgc_fig3.png", category="Pipelined Gradient Coding",
                    caption="../report/pgc_fig3.rst", labels={"figure": "Fig. 3"}),
        fig7=report(f"{PAPER}/figures/pgc_fig7.png", category="Pipelined Gradient Coding",
                    caption="../report/pgc_fig7.rst", labels={"figure": "Fig. 7"}),
        fig8=report(f"{PAPER}/figures/pgc_fig8.png", category="Pipelined Gradient Coding",
                    caption="../report/pgc_fig8.rst", labels={"figure": "Fig. 8"}),
        fig9=report(f"{PAPER}/figures/pgc_fig9.png", category="Pipelined Gradient Coding",
                    caption="../report/pgc_fig9.rst", labels={"figure": "Fig. 9"}),
        fig10=report(f"{PAPER}/figures/pgc_fig10.png", category="Pipelined Gradient Coding",
                     caption="../report/pgc_fig10.rst", labels={"figure": "Fig. 10"}),
        tables=PGC_TABLES,
        real=[report(f, category="Pipelined Gradient Coding", caption="../report/pgc_real.rst",
                     labels={"figure": "real vs simulated"}) if f.endswith(".png") else f
              for f in (PGC_REAL if config["pgc"]["real"].get("enabled", True) else [])],
    params:
        inputs=lambda w, input: as_json(dict(input.items())),
        options=as_json({"n": config["pgc"]["n"], "cloud_s": config["pgc"]["cloud"]["s"],
                         "threshold": config["pgc"]["cloud"]["threshold"],
                         "unit_seconds": config["cluster"]["compute"]["unit_seconds"],
                         "compute_mode": config["cluster"]["compute"]["mode"]}),
        out=lambda w, output: os.path.dirname(os.path.dirname(output.fig3)),
    conda:
        ENV
    log:
        "logs/pgc/figures.log",
    benchmark:
        "benchmarks/pgc/figures.tsv"
    threads: 1
    resources:
        mem_mb=2000,
    shell:
        "python -m distlab figures --experiment pgc --inputs {params.inputs:q} --options {params.options:q} "
        "--out-dir {params.out} > {log} 2>&1"


rule pgc:
    """Every PGC experiment, figure and table (and the scorecard's PGC rows)."""
    input:
        pgc_outputs(),
        f"{PAPER}/scorecard.md",
