#!/usr/bin/env bash
# depth.py's runs: markov with a block of each depth in LAYERS (default 4) on the 363k-token
# cache, seed SEED (default 0), trained to each step count in STAGES (2,000 from scratch, then
# `--resume` warm restarts, as run_v2f.sh does), each stage collected on the held-out prompts at
# temperature 1; one lane per depth, THREADS torch threads each (default 2: one lane alone on
# the machine). Seed 0's 2-layer run is the rerun's first stage (runs/s5/markov-2000.pt), only
# collected here. Traces go to experiments/drafters/depth/ (committed); checkpoints to
# runs/depth/ (not committed: depth.py ships nothing).
set -euo pipefail
cd "$(dirname "$0")/../.."
DSIM=${DSIM:-.venv/bin/dsim}
STAGES=${STAGES:-2000}
LAYERS=${LAYERS:-4}
SEED=${SEED:-0}
THREADS=${THREADS:-2}
LOGS=.cache/dsim/logs
OUT=experiments/drafters/depth
mkdir -p "$LOGS" runs/depth "$OUT"
SUFFIX=$([[ $SEED == 0 ]] || echo "-s$SEED")  # seed 0's files keep their first names

collect() {  # CHECKPOINT TRACE
  [[ -f "$2" ]] || $DSIM collect --drafter "$1" --prompts traces/prompts/heldout.jsonl \
    --out "$2" --max-new-tokens 64 --batch-size 24 >"$LOGS/depth-collect-$(basename "$2").log" 2>&1
}

lane() {  # LAYERS
  local name="markov-L$1$SUFFIX"
  for steps in $STAGES; do
    local ckpt="runs/depth/$name-$steps.pt"
    if [[ ! -f "$LOGS/depth-L$1$SUFFIX-$steps.done" ]]; then
      $DSIM train --drafter markov --steps "$steps" --resume --threads "$THREADS" --seed "$SEED" \
        --parallel-layers "$1" --data .cache/dsim/data/s5 \
        --state ".cache/dsim/depth-$name.state.pt" --out "$ckpt" \
        >"$LOGS/depth-train-L$1$SUFFIX-$steps.log" 2>&1
      touch "$LOGS/depth-L$1$SUFFIX-$steps.done"
    fi
    collect "$ckpt" "$OUT/$name-$steps.parquet"
  done
}

for layers in $LAYERS; do
  [[ $SEED == 0 && $layers == 2 ]] || lane "$layers" &  # seed 0's 2-layer run is the rerun's
done
if [[ $SEED == 0 && " $STAGES " == *" 2000 "* ]]; then
  collect runs/s5/markov-2000.pt "$OUT/markov-L2-2000.parquet"
fi
wait
