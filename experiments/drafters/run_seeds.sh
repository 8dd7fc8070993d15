#!/usr/bin/env bash
# seeds.py's runs: KIND (default ar) trained to 2,000 steps on the 363k-token cache with each
# seed in SEEDS (default "0 1"), depth.py's recipe and schedule otherwise, one lane of one
# torch thread per seed, each collected on the held-out prompts at temperature 1. Traces go to
# experiments/drafters/seeds/ (committed); checkpoints to runs/seeds/ (not committed: seeds.py
# reads only the traces).
set -euo pipefail
cd "$(dirname "$0")/../.."
DSIM=${DSIM:-.venv/bin/dsim}
KIND=${KIND:-ar}
SEEDS=${SEEDS:-"0 1"}
LOGS=.cache/dsim/logs
OUT=experiments/drafters/seeds
mkdir -p "$LOGS" runs/seeds "$OUT"

lane() {  # SEED
  local name="$KIND-s$1-2000"
  if [[ ! -f "$LOGS/seeds-$name.done" ]]; then
    $DSIM train --drafter "$KIND" --steps 2000 --resume --threads 1 --seed "$1" \
      --data .cache/dsim/data/s5 --state ".cache/dsim/seeds-$KIND-s$1.state.pt" \
      --out "runs/seeds/$name.pt" >"$LOGS/seeds-train-$name.log" 2>&1
    touch "$LOGS/seeds-$name.done"
  fi
  [[ -f "$OUT/$name.parquet" ]] || $DSIM collect --drafter "runs/seeds/$name.pt" \
    --prompts traces/prompts/heldout.jsonl --out "$OUT/$name.parquet" --max-new-tokens 64 \
    --batch-size 24 >"$LOGS/seeds-collect-$name.log" 2>&1
}

for seed in $SEEDS; do lane "$seed" & done
wait
