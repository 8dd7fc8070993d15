#!/usr/bin/env bash
# The reduced one-session recipe behind the dsim-drafter/2 checkpoints in drafters/ and their
# traces (issue 16; plan.md, schedule A, shortened to fit one 3-hour session on 2 cores).
# Fixed before any result: markov, parallel and ar get the same recipe and budget (STEPS,
# batch 64, lr 2e-3, warm-up, cosine to 10%, llama block, layers 2/15/final, context 16);
# rnn and mtp1 get less (RNN_STEPS, MTP1_STEPS). Two lanes, one torch thread each, niced.
# Data: `dsim prepare-data --samples 3 --shard K/2` (two processes), run before this script.
set -euo pipefail
cd "$(dirname "$0")/../.."
DSIM=${DSIM:-.venv/bin/dsim}
STEPS=${STEPS:-2000}
RNN_STEPS=${RNN_STEPS:-1000}
MTP1_STEPS=${MTP1_STEPS:-2000}
LOGS=${LOGS:-.cache/dsim/logs}
mkdir -p "$LOGS"

train() {  # KIND STEPS
  nice -n 5 $DSIM train --drafter "$1" --steps "$2" --out "drafters/$1.pt" >"$LOGS/train-$1.log" 2>&1
}
collect() {  # KIND [--greedy]: real speculative decoding on the held-out prompts
  local suffix=""
  [[ "${2:-}" == "--greedy" ]] && suffix="-greedy"
  nice -n 5 $DSIM collect --drafter "drafters/$1.pt" --prompts traces/prompts/heldout.jsonl \
    --out "traces/acceptance/smollm2-$1$suffix.parquet" --max-new-tokens 64 --batch-size 24 \
    ${2:-} >"$LOGS/collect-$1$suffix.log" 2>&1
}

lane1() {
  train markov "$STEPS"
  touch "$LOGS/markov.done"
  collect markov
  train ar "$STEPS"
  collect ar
  collect ar --greedy
}
lane2() {
  train parallel "$STEPS"
  train rnn "$RNN_STEPS"
  train mtp1 "$MTP1_STEPS"
  collect parallel
  collect parallel --greedy
  collect rnn
  collect mtp1
  while [[ ! -e "$LOGS/markov.done" ]]; do sleep 30; done
  collect markov --greedy
}

rm -f "$LOGS/markov.done"
lane1 &
lane2 &
wait
