#!/usr/bin/env bash
# The one device call of the serving-grade profile (README.md, Serving-grade profile): Qwen3-8B
# bf16 on one H200, R = 1..256 (powers of 2) x q = 1..8 x C = 512, 1024, 2048, random weights,
# CUDA graphs. Needs python3 with CUDA torch only; writes into $OUT (default /tmp):
#   h200-qwen3-8b-serving.{csv,json}, serving.log, serving-env.txt
# Extra arguments go to dsim.models.serving_profile (e.g. --allow-math for a rerun, see the README).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-python3}
OUT=${OUT:-/tmp}
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,power.limit \
  --format=csv >"$OUT/serving-env.txt" 2>&1 || true
timeout 285 "$PY" -m dsim.models.serving_profile \
  --out "$OUT/h200-qwen3-8b-serving.csv" "$@" 2>&1 | tee "$OUT/serving.log"
