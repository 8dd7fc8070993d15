#!/usr/bin/env bash
# Issue 16's step budget: markov, parallel and ar continued from their 4,000-step states
# (run_v2b.sh / run_v2c.sh) to STEPS (8,000), `dsim train --resume --steps STEPS`, the same data,
# recipe and extension for the three (fixed before any result). As in run_v2b.sh the resumed
# run keeps the optimizer and follows the cosine of a STEPS-step schedule from step 4,000 on
# (a warm restart: the learning rate steps up from 10% to ~55% of its peak, the same for each
# kind). Checkpoints go to runs/v2e/ (not drafters/, which the validation reads while this
# runs); their held-out traces, temperature 1 and greedy, to experiments/drafters/steps8000/.
# Three lanes, one torch thread each, niced. The rule for what they replace is in
# experiments/drafters/steps8000.py. Run from the repo root.
set -euo pipefail
cd "$(dirname "$0")/../.."
DSIM=${DSIM:-.venv/bin/dsim}
STEPS=${STEPS:-8000}
LOGS=${LOGS:-.cache/dsim/logs}
OUT=experiments/drafters/steps8000
mkdir -p "$LOGS" runs/v2e "$OUT"

lane() {  # KIND: train on, then collect on the held-out prompts (run_v2.sh settings)
  nice -n 5 $DSIM train --drafter "$1" --steps "$STEPS" --resume --threads 1 \
    --out "runs/v2e/$1.pt" >"$LOGS/train-$1-$STEPS.log" 2>&1
  for mode in --no-greedy --greedy; do
    local suffix=""
    [[ $mode == --greedy ]] && suffix="-greedy"
    nice -n 5 $DSIM collect --drafter "runs/v2e/$1.pt" --prompts traces/prompts/heldout.jsonl \
      --out "$OUT/$1$suffix.parquet" --max-new-tokens 64 --batch-size 24 $mode \
      >"$LOGS/collect-$1$suffix-$STEPS.log" 2>&1
  done
}

lane markov &
lane parallel &
lane ar &
wait
