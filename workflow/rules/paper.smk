# The scorecard, the figures and tables targets, and the reproduction write-up.
# Everything here reads only the summary tables under results/.

rule scorecard_paper:
    """One paper's claims of config/claims.yaml, evaluated from that paper's tables only
    (Holm within the paper).  The atlas's section reads the map's time-to-target table where
    atlas.in_default_target puts the atlas in the default target; otherwise it has no table and
    its rows read "not run" (`snakemake atlas` evaluates them in results/atlas/scorecard.md), so
    every claim of config/claims.yaml has a row in paper/scorecard.csv."""
    input:
        claims="config/claims.yaml",
        tables=SHARED.scorecard_tables,
    output:
        md=f"{PAPER}/scorecard/{{paper}}.md",
        csv=f"{PAPER}/scorecard/{{paper}}.csv",
        conditions=f"{PAPER}/scorecard/{{paper}}_conditions.csv",
    wildcard_constraints:
        paper=SHARED.scorecard_pattern(),
    params:
        tables=SHARED.scorecard_table_args,
        stats=SHARED.stats_json(),
    conda:
        ENV
    log:
        log_path("paper/scorecard_{paper}"),
    benchmark:
        benchmark_path("paper/scorecard_{paper}")
    threads: 1
    resources:
        mem_mb=1000,
    shell:
        "python -m distlab scorecard --paper {wildcards.paper:q} --claims {input.claims:q} {params.tables:q} "
        "--stats {params.stats:q} --md {output.md:q} --csv {output.csv:q} "
        "--conditions-csv {output.conditions:q} > {log:q} 2>&1"


rule scorecard:
    """Every paper's scorecard section in one table."""
    input:
        parts=[f"{PAPER}/scorecard/{p}.csv" for p in SHARED.scorecard_papers()],
        conditions=[f"{PAPER}/scorecard/{p}_conditions.csv" for p in SHARED.scorecard_papers()],
    output:
        md=report(f"{PAPER}/scorecard.md", category="Scorecard", caption="../report/scorecard.rst"),
        csv=f"{PAPER}/scorecard.csv",
    conda:
        ENV
    log:
        log_path("paper/scorecard"),
    benchmark:
        benchmark_path("paper/scorecard")
    threads: 1
    resources:
        mem_mb=1000,
    shell:
        "python -m distlab scorecard --merge {input.parts:q} --md {output.md:q} --csv {output.csv:q} > {log:q} 2>&1"


rule figures:
    """Every figure of every paper."""
    input:
        [f for f in SHARED.all_outputs() if f.endswith(".png")],


rule tables:
    """Every table of every paper."""
    input:
        [f for f in SHARED.all_outputs() if not f.endswith(".png")],


rule paper:
    """Regenerates paper/ (figures, tables, scorecard, write-up) from the results files alone."""
    input:
        scorecard=rules.scorecard.output.csv,
        claims="config/claims.yaml",
        outputs=SHARED.all_outputs(),
    output:
        readme="paper/README.md",
        pages=SHARED.report_pages(),
    params:
        meta=as_json({"seeds": config["seeds"], "cluster": config["cluster"]}),
    conda:
        ENV
    log:
        log_path("paper/report"),
    benchmark:
        benchmark_path("paper/report")
    threads: 1
    resources:
        mem_mb=1000,
    shell:
        "python -m distlab report --out {output.readme:q} --scorecard {input.scorecard:q} --claims {input.claims:q} "
        "--meta {params.meta:q} "
        "> {log:q} 2>&1"
