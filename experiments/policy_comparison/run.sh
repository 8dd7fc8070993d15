#!/usr/bin/env bash
# Reproduces experiments/policy_comparison/ (issue 3 evidence). Run from the repo root:
#   bash experiments/policy_comparison/run.sh
set -euo pipefail
DIR=experiments/policy_comparison
BIN=.venv/bin
# An over-confident drafter (logits 2x too sharp), recorded, then calibrated by STS.
$BIN/dsim synth-acceptance --acceptance 'preset:dspark:chat[overconf=2]' --gamma 7 \
    --sequences 400 --rounds 96 --seed 0 --out $DIR/chat_overconf2.parquet
$BIN/dsim calibrate $DIR/chat_overconf2.parquet --out $DIR/calibration
$BIN/python $DIR/compare.py
