# The scorecard, the figures and tables targets, and the reproduction write-up.
# Everything here reads only the summary tables under results/.


rule scorecard:
    """Every claim of config/claims.yaml evaluated from the results tables."""
    input:
        claims="config/claims.yaml",
        tables=list(summary_tables().values()),
    output:
        md=report(f"{PAPER}/scorecard.md", category="Scorecard", caption="../report/scorecard.rst"),
        csv=f"{PAPER}/scorecard.csv",
    params:
        tables=" ".join(f"--table {k}={v}" for k, v in summary_tables().items()),
        stats=stats_json(),
    conda:
        ENV
    log:
        "logs/paper/scorecard.log",
    benchmark:
        "benchmarks/paper/scorecard.tsv"
    threads: 1
    resources:
        mem_mb=1000,
    shell:
        "python -m distlab scorecard --claims {input.claims} {params.tables} --stats {params.stats:q} "
        "--md {output.md} --csv {output.csv} > {log} 2>&1"


rule figures:
    """Every figure of every paper."""
    input:
        [f for f in pgc_outputs() + BASELINE_OUT if f.endswith(".png")],


rule tables:
    """Every table of every paper."""
    input:
        [f for f in pgc_outputs() + BASELINE_OUT if not f.endswith(".png")],


rule paper:
    """Regenerates paper/ (figures, tables, scorecard, write-up) from the results files alone."""
    input:
        scorecard=rules.scorecard.output.csv,
        outputs=pgc_outputs() + BASELINE_OUT,
    output:
        "paper/README.md",
    params:
        meta=as_json({"seeds": config["seeds"], "cluster": config["cluster"]}),
    conda:
        ENV
    log:
        "logs/paper/report.log",
    benchmark:
        "benchmarks/paper/report.tsv"
    threads: 1
    resources:
        mem_mb=1000,
    shell:
        "python -m distlab report --out {output} --scorecard {input.scorecard} --meta {params.meta:q} > {log} 2>&1"
