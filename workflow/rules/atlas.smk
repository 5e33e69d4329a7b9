# The atlas (ours): every data-parallel technique on DeMo's byte-level LM task, one job per
# technique (its lr/setting sweep, then its runs), the DDP reference against the bigram floor,
# the map (simulated and extrapolated cells), its figures.  Target: `snakemake atlas`.
from distlab.atlas.workflow import AtlasRules

ATLAS = config.get("atlas")
ATLAS_OUT = f"{RESULTS}/atlas"
# the rules' functions of a job's wildcards; with atlas.in_default_target the map's tables and
# figures join the scorecard and paper/ (AtlasRules.summary_tables, .outputs)
ATLAS_WF = AtlasRules(config, RULES)
SHARED.register("atlas", ATLAS_WF.summary_tables, ATLAS_WF.outputs)


rule atlas_job:
    """One technique (techniques/<name>): its sweep (lrs x natural setting, one seed, small size,
    N = sweep.n_workers; chosen on the validation windows; the lr grid widened at its edge), then
    every size x N x seed at the choice (the chosen sweep run is seed 0 of its cell), and for an
    arrival-dependent technique the straggler models of atlas.train_under.  Or the DDP reference
    (reference) at the reference's horizon: it must get clearly below the bigram floor."""
    input:
        data=ATLAS_WF.data,
        profile=ATLAS_WF.compute_profile,
    output:
        done=f"{ATLAS_OUT}/{{job}}/done.json",
    wildcard_constraints:
        job=ATLAS_WF.job_pattern(),
    params:
        cfg=ATLAS_WF.config_json,
        data=subpath(input.data, parent=True),
        out=subpath(output.done, parent=True),
        verb=ATLAS_WF.verb,
    conda:
        ENV
    log:
        log_path("atlas/{job}"),
    benchmark:
        benchmark_path("atlas/{job}")
    resources:
        mem_mb=1200,
    shell:
        "OMP_NUM_THREADS=1 python -m distlab atlas {params.verb} --config {params.cfg:q} --data {params.data:q} "
        "--out {params.out:q} > {log:q} 2>&1"


rule atlas_map:
    """The map's tables (cells, winners with intervals, crossovers, efficiency ratios, the reference, the
    replay benchmark) and its figures."""
    input:
        done=ATLAS_WF.technique_done,
        profile=ATLAS_WF.compute_profile,
        reference=f"{ATLAS_OUT}/reference/done.json",
        floors=ATLAS_WF.floors,
    output:
        cells=f"{ATLAS_OUT}/map/cells.csv",
        winners=f"{ATLAS_OUT}/map/winners.csv",
        md=f"{ATLAS_OUT}/map/winners.md",
        crossovers=f"{ATLAS_OUT}/map/crossovers.csv",
        summary=f"{ATLAS_OUT}/map/summary.json",
        reference=f"{ATLAS_OUT}/map/reference.csv",
        ttt=f"{ATLAS_OUT}/map/ttt.csv",
        strag=f"{ATLAS_OUT}/figures/winners_bandwidth_straggler.png",
        size=f"{ATLAS_OUT}/figures/winners_bandwidth_size.png",
        time=f"{ATLAS_OUT}/figures/time_vs_bandwidth.png",
    params:
        cfg=ATLAS_WF.map_config_json,
        out=subpath(output.cells, parent=True),
    conda:
        ENV
    log:
        log_path("atlas/map"),
    benchmark:
        benchmark_path("atlas/map")
    resources:
        mem_mb=2000,
    shell:
        "(python -m distlab atlas map --config {params.cfg:q} --done {input.done:q} --reference {input.reference:q} "
        "--floors {input.floors:q} --out {params.out:q} && python -m distlab atlas figures --config {params.cfg:q} "
        "--map {params.out:q} --out-strag {output.strag:q} --out-size {output.size:q} --out-time {output.time:q}) "
        "> {log:q} 2>&1"


rule atlas_query_pack:
    """The recordings `distlab atlas query` reads, in one small file with its record (the run
    folders it was made from): the results snapshot carries it (paper/atlas/), so the
    shipped atlas can be queried without make reproduce."""
    input:
        done=ATLAS_WF.technique_done,
    output:
        pack=f"{ATLAS_OUT}/query/pack.json.gz",
    params:
        cfg=ATLAS_WF.pack_config_json,
    conda:
        ENV
    log:
        log_path("atlas/query_pack"),
    benchmark:
        benchmark_path("atlas/query_pack")
    resources:
        mem_mb=1500,
    shell:
        "python -m distlab atlas pack --config {params.cfg:q} --done {input.done:q} --out {output.pack:q} > {log:q} 2>&1"


rule atlas_query_bench:
    """The query's wall time (measured) on a fixed set of representative queries, each in a fresh
    interpreter, against the runs folder and against the pack (which must answer the same)."""
    input:
        done=ATLAS_WF.technique_done,
        pack=rules.atlas_query_pack.output.pack,
        profile=ATLAS_WF.compute_profile,
        published="data/atlas/published_efficiency.yaml",
    output:
        csv=f"{ATLAS_OUT}/query/bench.csv",
        md=f"{ATLAS_OUT}/query/bench.md",
    params:
        cfg=ATLAS_WF.query_config_json,
        runs=f"{ATLAS_OUT}/techniques",
    conda:
        ENV
    log:
        log_path("atlas/query_bench"),
    benchmark:
        benchmark_path("atlas/query_bench")
    resources:
        mem_mb=1500,
    shell:
        "python -m distlab atlas query-bench --config {params.cfg:q} --runs {params.runs:q} --pack {input.pack:q} "
        "--out {output.csv:q} --md {output.md:q} > {log:q} 2>&1"


rule atlas_scorecard:
    """The atlas's claims (paper key `atlas`, marked ours in config/claims.yaml) on its table."""
    input:
        claims="config/claims.yaml",
        ttt=f"{ATLAS_OUT}/map/ttt.csv",
    output:
        md=f"{ATLAS_OUT}/scorecard.md",
        csv=f"{ATLAS_OUT}/scorecard.csv",
        conditions=f"{ATLAS_OUT}/scorecard_conditions.csv",
    params:
        stats=SHARED.stats_json(),
    conda:
        ENV
    log:
        log_path("atlas/scorecard"),
    benchmark:
        benchmark_path("atlas/scorecard")
    resources:
        mem_mb=1000,
    shell:
        "python -m distlab scorecard --paper atlas --claims {input.claims:q} --table=atlas_ttt={input.ttt:q} "
        "--stats {params.stats:q} --md {output.md:q} --csv {output.csv:q} --conditions-csv {output.conditions:q} "
        "> {log:q} 2>&1"


rule atlas:
    """The atlas: map, tables, figures and its scorecard section (where atlas.in_default_target
    puts it in the default target, the paper scorecard's atlas section, not a second scoring)."""
    input:
        rules.atlas_map.output,
        rules.atlas_query_bench.output,
        ([f"{PAPER}/scorecard/atlas.{ext}" for ext in ("md", "csv")] if ATLAS and ATLAS.get("in_default_target")
         else rules.atlas_scorecard.output),


rule atlas_paper_copy:
    """A figure or table of the map, copied into paper/ beside the papers' (atlas_<name>), where
    atlas.in_default_target makes the atlas part of the default target."""
    input:
        ATLAS_WF.map_file,
    output:
        f"{PAPER}/{{kind}}/atlas_{{name}}.{{ext}}",
    wildcard_constraints:
        kind="figures|tables",
        name="[a-z_]+",
        ext="png|md",
    conda:
        ENV
    log:
        log_path("atlas/paper_{kind}_{name}.{ext}"),
    resources:
        mem_mb=200,
    shell:
        "cp {input:q} {output:q} > {log:q} 2>&1"
