#!/usr/bin/env bash
# Reproduces the engine brackets of experiments/sla_tiers/ (README.md). Run from the repo root:
#   bash experiments/sla_tiers/run.sh        (BIN=/path/to/venv/bin to use another venv)
set -euo pipefail
DIR=experiments/sla_tiers
BIN=${BIN:-.venv/bin}
$BIN/python $DIR/configs.py
for sweep in vllm gpu-only sglang vllm-2023 vllm-ragged0 vllm-ragged0.381 sglang-ragged0 \
    sglang-ragged0.381; do
    $BIN/python experiments/closed_loop.py $DIR/engines/$sweep.toml --out $DIR/$sweep --jobs 1
done
$BIN/python $DIR/brackets.py
