#!/usr/bin/env bash
# The one device call of the GPU profile study (README.md: Serving-grade profile, Engine probes),
# about 4 minutes on one H100 or H200, random weights of Qwen3-8B bf16, CUDA graphs:
#   1. the engine probes (dsim.models.engine_probes): a decode step eager against a graph replay
#      at 22 token counts (launch and padding costs), an EAGLE-3 drafter pass at R = 1..256, a
#      rejection-sampling step at R = 1..256 x K = 1, 3, 7; deadline 90 s;
#   2. the serving-grade grid, trimmed (dsim.models.serving_profile): R = 1..256 (powers of 2) x
#      q = 1, 2, 4, 8 x C = 512, 1024 (fits an H100's 80 GB as well); deadline 150 s.
# Needs python3 with CUDA torch only; writes into $OUT (default /tmp):
#   engine-probes.json, h200-qwen3-8b-serving.{csv,json}, serving.log, serving-env.txt
# Extra arguments go to both modules (e.g. --allow-math for a rerun, see the README).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-python3}
OUT=${OUT:-/tmp}
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,power.limit \
  --format=csv >"$OUT/serving-env.txt" 2>&1 || true
{
  timeout 110 "$PY" -m dsim.models.engine_probes --out "$OUT/engine-probes.json" "$@" || true
  timeout 170 "$PY" -m dsim.models.serving_profile --out "$OUT/h200-qwen3-8b-serving.csv" \
    --tokens 1,2,4,8 --contexts 512,1024 --deadline-s 150 "$@"
} 2>&1 | tee "$OUT/serving.log"
