# Benchmarks: measured, never asserted; `snakemake bench`.


rule bench_calibrate:
    """What one unit of gradient-coding work costs here (ResNet-18 as in the paper, and the default CNN)."""
    output:
        f"{RESULTS}/bench/calibration.csv",
    conda:
        ENV
    log:
        log_path("bench/calibrate"),
    benchmark:
        benchmark_path("bench/calibrate")
    threads: 1
    resources:
        mem_mb=4000,
    shell:
        "OMP_NUM_THREADS=1 python -m distlab calibrate --out {output:q} > {log:q} 2>&1"


rule bench_allreduce:
    """One all-reduce on gloo, 4 processes, 1-64 MB, against memcpy bandwidth here."""
    output:
        f"{RESULTS}/bench/allreduce.csv",
    conda:
        ENV
    log:
        log_path("bench/allreduce"),
    benchmark:
        benchmark_path("bench/allreduce")
    threads: config["runtime"]["threads"]
    resources:
        mem_mb=8000,
    shell:
        "OMP_NUM_THREADS=1 python -m torch.distributed.run --standalone --nproc_per_node=4 "
        "-m distlab allreduce --sizes-mb 1 4 16 64 --repeats 5 --out {output:q} > {log:q} 2>&1"


rule bench:
    """Every benchmark: calibration, gloo all-reduce, and each paper's (DeMo optimizer and
    step costs, the placement simulator's evaluations per second)."""
    input:
        rules.bench_calibrate.output,
        rules.bench_allreduce.output,
        rules.demo_bench.output,
        expand(f"{RESULTS}/bench/placement_sim_{{m}}.csv", m=sorted(config["placement"]["models"])),
