# The atlas (ours): every data-parallel technique on DeMo's byte-level LM task, one job per
# technique (its lr/setting sweep, then its runs), the DDP reference against the bigram floor,
# the map (simulated and extrapolated cells), its figures.  Target: `snakemake atlas`.
import json as _atlas_json
import os as _atlas_os

ATLAS = config.get("atlas")
ATLAS_OUT = f"{RESULTS}/atlas"


rule atlas_technique:
    """One technique: its sweep (lrs x natural setting, one seed, small size, N = sweep.n_workers;
    chosen on the validation windows), then every size x N x seed at the choice, and for an
    arrival-dependent technique the straggler models of atlas.train_under."""
    input:
        data=lambda w: data_manifest(ATLAS["dataset"]),
    output:
        done=f"{ATLAS_OUT}/techniques/{{technique}}/done.json",
        choice=f"{ATLAS_OUT}/techniques/{{technique}}/choice.json",
    params:
        cfg=lambda w: _atlas_json.dumps(ATLAS),
        data=lambda w, input: _atlas_os.path.dirname(input.data),
        out=lambda w, output: _atlas_os.path.dirname(output.done),
    conda:
        ENV
    log:
        "logs/atlas/{technique}.log",
    benchmark:
        "benchmarks/atlas/{technique}.tsv"
    threads: 1
    resources:
        mem_mb=1200,
    shell:
        "OMP_NUM_THREADS=1 python -m distlab atlas technique --config {params.cfg:q} --technique {wildcards.technique} "
        "--data {params.data:q} --out {params.out:q} > {log:q} 2>&1"


rule atlas_reference:
    """The DDP reference at the reference's horizon: it must get clearly below the bigram floor."""
    input:
        data=lambda w: data_manifest(ATLAS["dataset"]),
    output:
        done=f"{ATLAS_OUT}/reference/done.json",
    params:
        cfg=lambda w: _atlas_json.dumps(ATLAS),
        data=lambda w, input: _atlas_os.path.dirname(input.data),
        out=lambda w, output: _atlas_os.path.dirname(output.done),
    conda:
        ENV
    log:
        "logs/atlas/reference.log",
    benchmark:
        "benchmarks/atlas/reference.tsv"
    threads: 1
    resources:
        mem_mb=1200,
    shell:
        "OMP_NUM_THREADS=1 python -m distlab atlas reference --config {params.cfg:q} --data {params.data:q} "
        "--out {params.out:q} > {log:q} 2>&1"


rule atlas_map:
    """The map's tables: cells, winners with intervals, crossovers, trends, the reference, the replay benchmark."""
    input:
        done=lambda w: [f"{ATLAS_OUT}/techniques/{t}/done.json" for t in (ATLAS["techniques"] if ATLAS else [])],
        reference=f"{ATLAS_OUT}/reference/done.json",
        floors=lambda w: floors_table(ATLAS["dataset"]),
    output:
        cells=f"{ATLAS_OUT}/map/cells.csv",
        winners=f"{ATLAS_OUT}/map/winners.csv",
        md=f"{ATLAS_OUT}/map/winners.md",
        crossovers=f"{ATLAS_OUT}/map/crossovers.csv",
        summary=f"{ATLAS_OUT}/map/summary.json",
        reference=f"{ATLAS_OUT}/map/reference.csv",
        ttt=f"{ATLAS_OUT}/map/ttt.csv",
    params:
        cfg=lambda w: _atlas_json.dumps(ATLAS),
        out=lambda w, output: _atlas_os.path.dirname(output.cells),
    conda:
        ENV
    log:
        "logs/atlas/map.log",
    benchmark:
        "benchmarks/atlas/map.tsv"
    threads: 1
    resources:
        mem_mb=2000,
    shell:
        "python -m distlab atlas map --config {params.cfg:q} --done {input.done:q} --reference {input.reference:q} "
        "--floors {input.floors:q} --out {params.out:q} > {log:q} 2>&1"


rule atlas_figures:
    input:
        winners=f"{ATLAS_OUT}/map/winners.csv",
        cells=f"{ATLAS_OUT}/map/cells.csv",
    output:
        strag=f"{ATLAS_OUT}/figures/winners_bandwidth_straggler.png",
        size=f"{ATLAS_OUT}/figures/winners_bandwidth_size.png",
        time=f"{ATLAS_OUT}/figures/time_vs_bandwidth.png",
    params:
        cfg=lambda w: _atlas_json.dumps(ATLAS),
        map=lambda w, input: _atlas_os.path.dirname(input.winners),
    conda:
        ENV
    log:
        "logs/atlas/figures.log",
    benchmark:
        "benchmarks/atlas/figures.tsv"
    threads: 1
    resources:
        mem_mb=1000,
    shell:
        "python -m distlab atlas figures --config {params.cfg:q} --map {params.map:q} --out-strag {output.strag:q} "
        "--out-size {output.size:q} --out-time {output.time:q} > {log:q} 2>&1"


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
        stats=lambda w: _atlas_json.dumps(config["stats"]),
    conda:
        ENV
    log:
        "logs/atlas/scorecard.log",
    benchmark:
        "benchmarks/atlas/scorecard.tsv"
    threads: 1
    resources:
        mem_mb=1000,
    shell:
        "python -m distlab scorecard --paper atlas --claims {input.claims:q} --table=atlas_ttt={input.ttt:q} "
        "--stats {params.stats:q} --md {output.md:q} --csv {output.csv:q} --conditions-csv {output.conditions:q} "
        "> {log:q} 2>&1"


rule atlas:
    """The atlas: map, tables, figures and its scorecard section."""
    input:
        rules.atlas_map.output,
        rules.atlas_figures.output,
        rules.atlas_scorecard.output,
