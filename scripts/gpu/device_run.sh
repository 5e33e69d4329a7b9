#!/usr/bin/env bash
# The GPU tier's slice on a lent GPU machine, in one command (docs/gpu.md):
#   bash scripts/gpu/device_run.sh            # writes under $OUT (or ./gpu-out)
# Carried with the work tree, where the machine lacks them: build/gpu-data (prepared data,
# `run_tier.py --prepare-only --data build/gpu-data`) and build/gpu-carry (make_carry.py), both optional.
set -u
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
[ -d build/gpu-carry ] && export PYTHONPATH="$PYTHONPATH:$PWD/build/gpu-carry"
export PYTHONDONTWRITEBYTECODE=1 HF_DATASETS_OFFLINE=1
{
  date -u
  python -V
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1
  python -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available())"
} > "$OUT/environment.txt" 2>&1
cat "$OUT/environment.txt"
DATA=()
[ -d build/gpu-data ] && DATA=(--data "$PWD/build/gpu-data")
python scripts/gpu/run_tier.py --out "$OUT" "${DATA[@]}" --slice-s "${SLICE_S:-300}" "$@" 2>&1 | tee "$OUT/run_tier.log"
exit "${PIPESTATUS[0]}"
