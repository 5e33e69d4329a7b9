# The cluster model held against real shaped links: `snakemake netcheck` (measured).
# Outside the default target `all` (make reproduce's budget is full); its measured time is the
# snapshot's (docs/network.md, with where it goes: the error table is 42 four-process jobs,
# mostly start-up).  Needs root and a kernel with
# network namespaces, veth, bridges and tbf; without them every row reads "not run" and why.


rule netcheck_bench:
    """Gloo p2p, all-reduce, all-gather at 10M/100M/1G/unshaped on 4 namespaced ranks: the alpha-beta fit."""
    output:
        **csv_and_beside(f"{RESULTS}/netcheck/netcheck", md=".md", fit="_fit.csv", skipped="_skipped.csv"),
    conda:
        ENV
    log:
        log_path("netcheck/bench"),
    benchmark:
        benchmark_path("netcheck/bench")
    threads: config["runtime"]["threads"]
    resources:
        mem_mb=8000,
    shell:
        "OMP_NUM_THREADS=1 python -m distlab netcheck --out {output.csv:q} > {log:q} 2>&1"


rule netcheck_error:
    """The simulator's error per technique: 4 real gloo ranks on shaped links against NetworkModel."""
    input:
        demo=data_manifest("pydoc"),
        pgc=data_manifest("digits"),
        fit=rules.netcheck_bench.output.fit,
    output:
        **csv_and_beside(f"{RESULTS}/netcheck/techerror", md=".md", png=".png", steps="_steps.csv"),
    params:
        demo=subpath(input.demo, parent=True),
        pgc=subpath(input.pgc, parent=True),
    conda:
        ENV
    log:
        log_path("netcheck/error"),
    benchmark:
        benchmark_path("netcheck/error")
    threads: config["runtime"]["threads"]
    resources:
        mem_mb=8000,
    shell:
        "OMP_NUM_THREADS=1 python -m distlab techerror --data-demo {params.demo:q} "
        "--data-pgc {params.pgc:q} --fit {input.fit:q} --out {output.csv:q} > {log:q} 2>&1"


rule netcheck:
    """The shaped benchmark and the simulator's error table (not part of `all`)."""
    input:
        rules.netcheck_bench.output,
        rules.netcheck_error.output,
