# Learned device placement (P2, HSDAG): operator graphs, CPU profiles (cached data
# rules), every method on the shared simulator, the main and ablation tables,
# learning curves, one learned placement, two-CPU real execution vs the simulator.

PL = config.get("placement", {})
PL_DIR = f"{RESULTS}/placement"


def placement_methods():
    """(pair, model, method) of every run: all methods on every pair, ablations on the default pair."""
    out = []
    for pair in PL["pairs"]:
        for model in PL["models"]:
            for m in PL["methods"]:
                out.append((pair, model, m))
            if pair == PL["default_pair"]:
                out += [(pair, model, a) for a in PL["ablations"]]
    return out


def placement_runs():
    return [f"{PL_DIR}/runs/{p}/{mo}/{me}.json" for p, mo, me in placement_methods()]


def placement_spec(pair, model, method):
    spec = {
        "method": method, "pair_name": pair, "pair": PL["pairs"][pair],
        "model_name": model, "model": PL["models"][model], "seeds": PL["seeds"],
        "single_device": PL["single_device"], "hsdag": PL["hsdag"], "rnn": PL["rnn"],
        "placeto": PL["placeto"],
    }
    return as_json(spec)


def placement_options():
    return as_json({"methods": PL["methods"], "default_pair": PL["default_pair"]})


PL_TABLES = [f"{PAPER}/tables/placement_{t}.{ext}" for t in ("main", "graphs", "convergence")
             for ext in ("csv", "md")]
PL_ABLATION = [f"{PAPER}/tables/placement_ablation.{ext}" for ext in ("csv", "md")]
PL_REAL = [f"{PAPER}/tables/placement_sim_error.{ext}" for ext in ("csv", "md")]
PL_FIGS = [f"{PAPER}/figures/placement_curves.png", f"{PAPER}/figures/placement_learned.png"]


def placement_outputs():
    out = PL_TABLES + PL_FIGS
    if PL.get("ablations"):
        out += PL_ABLATION
    if PL.get("real", {}).get("enabled", False) and PL["real"]["models"]:
        out += PL_REAL
    return out


if PL:
    register_tables("P2", {"placement": f"{PL_DIR}/summary.csv"})
    register_outputs("P2", placement_outputs())


wildcard_constraints:
    pl_model=r"[a-z0-9_]+",
    pair=r"[a-z0-9_]+",
    pl_method=r"[a-z_]+",


rule placement_graph:
    """The operator graph of one model (torch.fx; weights not nodes)."""
    output:
        f"{PL_DIR}/graphs/{{pl_model}}.json",
    params:
        spec=lambda w: as_json(PL["models"][w.pl_model]),
    conda:
        ENV
    log:
        "logs/placement/graph_{pl_model}.log",
    benchmark:
        "benchmarks/placement/graph_{pl_model}.tsv"
    threads: 1
    resources:
        mem_mb=3000,
    shell:
        "OMP_NUM_THREADS=1 python -m distlab placement-graph --spec {params.spec:q} --out {output:q} > {log:q} 2>&1"


rule placement_profile:
    """Per-operator CPU seconds of one model (median of repeats, one thread): cached data."""
    output:
        f"{PL_DIR}/profiles/{{pl_model}}.json",
    params:
        spec=lambda w: as_json({"model": PL["models"][w.pl_model], **PL["profile"]}),
    conda:
        ENV
    log:
        "logs/placement/profile_{pl_model}.log",
    benchmark:
        "benchmarks/placement/profile_{pl_model}.tsv"
    threads: 1
    resources:
        mem_mb=3000,
    shell:
        "OMP_NUM_THREADS=1 python -m distlab placement-profile --spec {params.spec:q} --out {output:q} > {log:q} 2>&1"


rule placement_run:
    """One method, one model, one device pair, every seed, on the simulator."""
    input:
        graph=f"{PL_DIR}/graphs/{{pl_model}}.json",
        profile=f"{PL_DIR}/profiles/{{pl_model}}.json",
    output:
        f"{PL_DIR}/runs/{{pair}}/{{pl_model}}/{{pl_method}}.json",
    params:
        spec=lambda w: placement_spec(w.pair, w.pl_model, w.pl_method),
    conda:
        ENV
    log:
        "logs/placement/{pair}/{pl_model}/{pl_method}.log",
    benchmark:
        "benchmarks/placement/{pair}/{pl_model}/{pl_method}.tsv"
    threads: 1
    resources:
        mem_mb=1500,
        distlab_runtime=runtime_json(),
    shell:
        "OMP_NUM_THREADS=1 python -m distlab placement-run --spec {params.spec:q} --graph {input.graph:q} "
        "--profile {input.profile:q} --out {output:q} --runtime {resources.distlab_runtime:q} > {log:q} 2>&1"


rule placement_summarize:
    """Run files -> the summary table (one row per run and seed; the scorecard's input) and curves."""
    input:
        placement_runs(),
    output:
        summary=f"{PL_DIR}/summary.csv",
        curves=f"{PL_DIR}/curves.csv",
    conda:
        ENV
    log:
        "logs/placement/summarize.log",
    benchmark:
        "benchmarks/placement/summarize.tsv"
    threads: 1
    resources:
        mem_mb=2000,
    shell:
        "python -m distlab placement-summarize --runs {input:q} --summary-out {output.summary:q} "
        "--curves-out {output.curves:q} > {log:q} 2>&1"


rule placement_table_main:
    """Main table (method x model: latency, speedup % vs CPU-only), graph sizes, convergence."""
    input:
        f"{PL_DIR}/summary.csv",
    output:
        PL_TABLES,
    params:
        options=placement_options(),
        out=f"{PAPER}/tables",
    conda:
        ENV
    log:
        "logs/placement/table_main.log",
    benchmark:
        "benchmarks/placement/table_main.tsv"
    threads: 1
    resources:
        mem_mb=1000,
    shell:
        "python -m distlab placement-tables --kind main --summary {input:q} --out-dir {params.out:q} "
        "--options {params.options:q} > {log:q} 2>&1"


rule placement_table_ablation:
    """Ablation table: HSDAG without output shape / node id / structural features."""
    input:
        f"{PL_DIR}/summary.csv",
    output:
        PL_ABLATION,
    params:
        options=placement_options(),
        out=f"{PAPER}/tables",
    conda:
        ENV
    log:
        "logs/placement/table_ablation.log",
    benchmark:
        "benchmarks/placement/table_ablation.tsv"
    threads: 1
    resources:
        mem_mb=1000,
    shell:
        "python -m distlab placement-tables --kind ablation --summary {input:q} --out-dir {params.out:q} "
        "--options {params.options:q} > {log:q} 2>&1"


rule placement_fig_curves:
    """Learning curves: best latency against evaluations (default pair)."""
    input:
        curves=f"{PL_DIR}/curves.csv",
    output:
        report(f"{PAPER}/figures/placement_curves.png", category="Device placement (HSDAG)",
               caption="../report/placement_curves.rst", labels={"figure": "learning curves"}),
    params:
        inputs=lambda w, input: as_json({"curves": input.curves}),
        options=placement_options(),
    conda:
        ENV
    log:
        "logs/placement/fig_curves.log",
    benchmark:
        "benchmarks/placement/fig_curves.tsv"
    threads: 1
    resources:
        mem_mb=1500,
    shell:
        "python -m distlab placement-figure --kind curves --inputs {params.inputs:q} --out {output:q} "
        "--options {params.options:q} > {log:q} 2>&1"


PL_PIC_MODEL = next(iter(PL["models"])) if PL else ""


rule placement_fig_placement:
    """One learned placement (HSDAG, first model, default pair, first seed) as a schedule."""
    input:
        run=f"{PL_DIR}/runs/{PL.get('default_pair', '')}/{PL_PIC_MODEL}/hsdag.json",
        graph=f"{PL_DIR}/graphs/{PL_PIC_MODEL}.json",
        profile=f"{PL_DIR}/profiles/{PL_PIC_MODEL}.json",
    output:
        report(f"{PAPER}/figures/placement_learned.png", category="Device placement (HSDAG)",
               caption="../report/placement_learned.rst", labels={"figure": "learned placement"}),
    params:
        inputs=lambda w, input: as_json({"run": input.run, "graph": input.graph}),
        options=lambda w, input: as_json({"profile": input.profile}),
    conda:
        ENV
    log:
        "logs/placement/fig_placement.log",
    benchmark:
        "benchmarks/placement/fig_placement.tsv"
    threads: 1
    resources:
        mem_mb=1500,
    shell:
        "python -m distlab placement-figure --kind placement --inputs {params.inputs:q} --out {output:q} "
        "--options {params.options:q} > {log:q} 2>&1"


rule placement_real:
    """Two CPU devices (one thread each): measured latency of three placements vs the simulator."""
    input:
        graph=f"{PL_DIR}/graphs/{{pl_model}}.json",
        profile=f"{PL_DIR}/profiles/{{pl_model}}.json",
    output:
        f"{PL_DIR}/real/{{pl_model}}.json",
    params:
        spec=lambda w: as_json({"model": PL["models"][w.pl_model], "model_name": w.pl_model,
                                "repeats": PL["real"]["repeats"], "warmup": PL["real"]["warmup"]}),
    conda:
        ENV
    log:
        "logs/placement/real_{pl_model}.log",
    benchmark:
        "benchmarks/placement/real_{pl_model}.tsv"
    threads: 2
    resources:
        mem_mb=3000,
    shell:
        "OMP_NUM_THREADS=1 python -m distlab placement-real --spec {params.spec:q} --graph {input.graph:q} "
        "--profile {input.profile:q} --out {output:q} > {log:q} 2>&1"


rule placement_table_real:
    """Simulator error against real two-CPU execution, per model and placement."""
    input:
        [f"{PL_DIR}/real/{m}.json" for m in PL.get("real", {}).get("models", [])],
    output:
        csv=PL_REAL[0],
        md=PL_REAL[1],
    conda:
        ENV
    log:
        "logs/placement/table_real.log",
    benchmark:
        "benchmarks/placement/table_real.tsv"
    threads: 1
    resources:
        mem_mb=1000,
    shell:
        "python -m distlab placement-real-table --inputs {input:q} --out-csv {output.csv:q} "
        "--out-md {output.md:q} > {log:q} 2>&1"


rule placement_bench_sim:
    """Simulator evaluations per second on one graph (measured, never asserted)."""
    input:
        graph=f"{PL_DIR}/graphs/{{pl_model}}.json",
        profile=f"{PL_DIR}/profiles/{{pl_model}}.json",
    output:
        f"{RESULTS}/bench/placement_sim_{{pl_model}}.csv",
    params:
        spec=lambda w: as_json({"pair": PL["pairs"][PL["default_pair"]], "model_name": w.pl_model,
                                **PL.get("bench", {})}),
    conda:
        ENV
    log:
        "logs/bench/placement_sim_{pl_model}.log",
    benchmark:
        "benchmarks/bench/placement_sim_{pl_model}.tsv"
    threads: 1
    resources:
        mem_mb=1000,
    shell:
        "OMP_NUM_THREADS=1 python -m distlab placement-bench --spec {params.spec:q} --graph {input.graph:q} "
        "--profile {input.profile:q} --out {output:q} > {log:q} 2>&1"


rule placement:
    """Every placement run, table and figure, and this paper's scorecard rows."""
    input:
        placement_outputs(),
        f"{PAPER}/scorecard/P2.md",
