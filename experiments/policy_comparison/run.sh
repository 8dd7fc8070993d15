#!/usr/bin/env bash
# Reproduces experiments/policy_comparison/ on every engine (README.md). Run from the repo root:
#   bash experiments/policy_comparison/run.sh        (BIN=/path/to/venv/bin to use another venv)
set -euo pipefail
DIR=experiments/policy_comparison
BIN=${BIN:-.venv/bin}
# An over-confident drafter (logits 2x too sharp), recorded, then calibrated by STS.
$BIN/dsim synth-acceptance --acceptance 'preset:dspark:chat[overconf=2]' --gamma 7 \
    --sequences 400 --rounds 96 --seed 0 --out $DIR/chat_overconf2.parquet
$BIN/dsim calibrate $DIR/chat_overconf2.parquet --out $DIR/calibration
for engine in vllm gpu-only sglang vllm-2023; do
    $BIN/python $DIR/compare.py --engine $engine
done
for engine in vllm sglang; do  # dspark's ragged verify penalty bracket: none and twice the prior
    for penalty in 0 0.381; do
        $BIN/python $DIR/compare.py --engine $engine --ragged-penalty $penalty
    done
done
