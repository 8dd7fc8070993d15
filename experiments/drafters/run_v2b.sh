#!/usr/bin/env bash
# The steps ablation of issue 16: markov, parallel and ar continued from their 2,000-step
# run_v2.sh states to STEPS (4,000) with `dsim train --resume --steps STEPS`, the same data,
# recipe and extension for all three (fixed before any result). The resumed run keeps the
# optimizer state and follows the cosine of a STEPS-step schedule from step 2,000 on (the
# learning rate steps up from 10% to ~61% of its peak there: a warm restart, the same for each
# kind). Then their held-out traces at temperature 1 are collected again. rnn and mtp1 are not
# extended (their 2,000-step and 1,000-step traces stay). Two lanes, one torch thread each.
# Run from the repo root after run_v2.sh, with its training states in .cache/dsim/.
set -euo pipefail
cd "$(dirname "$0")/../.."
DSIM=${DSIM:-.venv/bin/dsim}
STEPS=${STEPS:-4000}
LOGS=${LOGS:-.cache/dsim/logs}
mkdir -p "$LOGS"

train() {  # KIND
  nice -n 5 $DSIM train --drafter "$1" --steps "$STEPS" --resume --threads 1 \
    --out "drafters/$1.pt" >"$LOGS/train-$1-$STEPS.log" 2>&1
}
collect() {  # KIND: real speculative decoding on the held-out prompts, temperature 1
  nice -n 5 $DSIM collect --drafter "drafters/$1.pt" --prompts traces/prompts/heldout.jsonl \
    --out "traces/acceptance/smollm2-$1.parquet" --max-new-tokens 64 --batch-size 24 \
    >"$LOGS/collect-$1-$STEPS.log" 2>&1
}

lane1() {
  train markov
  collect markov
  train ar
  collect ar
}
lane2() {
  train parallel
  collect parallel
}

lane1 &
lane2 &
wait
