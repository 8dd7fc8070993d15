#!/usr/bin/env bash
# depth.py's runs: markov with a 4-layer block on the 363k-token cache, trained to each step
# count in STAGES (2,000 from scratch, then `--resume` warm restarts, as run_v2f.sh does), each
# stage collected on the held-out prompts at temperature 1; and the 2-layer baseline at 2,000
# steps (the rerun's first stage, runs/s5/markov-2000.pt) collected the same way. Traces go to
# experiments/drafters/depth/ (committed); checkpoints to runs/depth/ (not committed: depth.py
# ships nothing). THREADS torch threads (default 2: the run is alone on the machine).
set -euo pipefail
cd "$(dirname "$0")/../.."
DSIM=${DSIM:-.venv/bin/dsim}
STAGES=${STAGES:-2000}
THREADS=${THREADS:-2}
LOGS=.cache/dsim/logs
OUT=experiments/drafters/depth
mkdir -p "$LOGS" runs/depth "$OUT"

collect() {  # CHECKPOINT TRACE
  [[ -f "$2" ]] || $DSIM collect --drafter "$1" --prompts traces/prompts/heldout.jsonl \
    --out "$2" --max-new-tokens 64 --batch-size 24 >"$LOGS/depth-collect-$(basename "$2").log" 2>&1
}

for steps in $STAGES; do
  ckpt="runs/depth/markov-L4-$steps.pt"
  if [[ ! -f "$LOGS/depth-L4-$steps.done" ]]; then
    $DSIM train --drafter markov --steps "$steps" --resume --threads "$THREADS" \
      --parallel-layers 4 --data .cache/dsim/data/s5 --state .cache/dsim/depth-markov-L4.state.pt \
      --out "$ckpt" >"$LOGS/depth-train-L4-$steps.log" 2>&1
    touch "$LOGS/depth-L4-$steps.done"
  fi
  collect "$ckpt" "$OUT/markov-L4-$steps.parquet"
  [[ $steps == 2000 ]] && collect runs/s5/markov-2000.pt "$OUT/markov-L2-2000.parquet"
done
