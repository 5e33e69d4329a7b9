#!/usr/bin/env bash
# P2 on a real CPU + CUDA pair: CPU-only, GPU-only, HEFT, the exact serial optimum and HSDAG
# corrected's placement (searched on the cpu_h200 pair's measured per-operator costs) executed on
# this machine's CPU and GPU one operator after another (the paper's HETERO scenario), each against
# the simulator's serial estimate.  Self-contained: python (torch, torchvision, networkx, pandas,
# pyyaml) and this repository; no Snakemake.  About 1-2 minutes on one H200 host.
#
#   OUT=/some/dir scripts/gpu/placement_realexec.sh        # results under $OUT
#
# Writes $OUT/placement_realexec.csv and .md (one row per model and placement: measured median
# ms, its IQR, the simulated ms, the simulator's error), $OUT/env.txt (torch, CUDA device, CPU)
# and $OUT/log.txt.  Without CUDA every row reads "not run: no GPU".
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-results/gpu}"
mkdir -p "$OUT"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
export OMP_NUM_THREADS=1   # the CPU side is one core, as the profiles were measured
python - > "$OUT/env.txt" 2>&1 <<'PY' || true
import os, platform, torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())
if torch.cuda.is_available():
    print("device", torch.cuda.get_device_name(0))
print("cpu", platform.processor() or platform.machine(), "cores", os.cpu_count())
PY
timeout 540 python -m distlab placement-realexec-cuda --config config/config.yaml --pair cpu_h200 \
    --models ${MODELS:-inception_v3 resnet50 bert} --repeats "${REPEATS:-10}" --warmup "${WARMUP:-3}" \
    --budget "${BUDGET:-200}" --out "$OUT/placement_realexec.csv" --md "$OUT/placement_realexec.md" \
    2>&1 | tee "$OUT/log.txt"
