#!/usr/bin/env bash
# Issue 16's data budget: markov and parallel trained afresh on the ~300k-token cache
# (`dsim prepare-data --samples 5 --out .cache/dsim/data/s5`, two shards), with the shipped
# files' recipe AND schedule: 2,000 steps, then `--resume --steps 4000` (the warm restart of
# run_v2b.sh), then, in a later session, `--resume --steps 8000` (run_v2e.sh). Only the data
# differs from the shipped drafters, so each stage compares like with like
# (experiments/drafters/data300k.py holds the rule, fixed before any result).
# STAGES lists the step counts to reach in this run: a finished stage (its marker in LOGS) is
# skipped, an interrupted one resumes from the training state. Checkpoints of the comparison
# stages (4,000 and 8,000) go beside their held-out traces at temperature 1,
# experiments/drafters/data300k/KIND-STEPS.{pt,parquet}, to be committed in the session that
# made them (fp16, 11-20 MB): the machine may not keep anything untracked between sessions,
# and on 2026-12-01 it did not (the first 8,000-step files, in runs/s5/, were lost). The
# 2,000-step ones go to runs/s5/. Training states: .cache/dsim/s5-KIND.state.pt (not the
# shipped files' states). One lane per kind in KINDS, THREADS torch threads each (default 1).
set -euo pipefail
cd "$(dirname "$0")/../.."
DSIM=${DSIM:-.venv/bin/dsim}
DATA=${DATA:-.cache/dsim/data/s5}
STAGES=${STAGES:-"2000 4000"}
KINDS=${KINDS:-"markov parallel"}  # ar: 1 s/step on one thread, so THREADS=2 when it runs alone
THREADS=${THREADS:-1}  # torch threads per lane
LOGS=${LOGS:-.cache/dsim/logs}
OUT=${OUT:-experiments/drafters/data300k}  # another folder for a rerun beside the committed one
mkdir -p "$LOGS" runs/s5 "$OUT"

lane() {  # KIND: each stage trains on from the last, then collects on the held-out prompts
  for steps in $STAGES; do
    local ckpt="$OUT/$1-$steps.pt"
    [[ $steps == 2000 ]] && ckpt="runs/s5/$1-$steps.pt"
    # the checkpoint is written every 200 steps; the marker says the stage finished
    if [[ ! -f "$LOGS/s5-$1-$steps.done" ]]; then
      nice -n 5 $DSIM train --drafter "$1" --steps "$steps" --resume --threads "$THREADS" \
        --data "$DATA" --state ".cache/dsim/s5-$1.state.pt" --out "$ckpt" \
        >"$LOGS/s5-train-$1-$steps.log" 2>&1
      touch "$LOGS/s5-$1-$steps.done"
    fi
    [[ $steps == 2000 ]] && continue  # the comparison stages are 4,000 and 8,000
    [[ -f "$OUT/$1-$steps.parquet" ]] || nice -n 5 $DSIM collect --drafter "$ckpt" \
      --prompts traces/prompts/heldout.jsonl --out "$OUT/$1-$steps.parquet" \
      --max-new-tokens 64 --batch-size 24 >"$LOGS/s5-collect-$1-$steps.log" 2>&1
  done
}

for kind in $KINDS; do lane "$kind" & done
wait
