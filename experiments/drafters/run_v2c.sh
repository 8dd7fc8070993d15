#!/usr/bin/env bash
# Issue 16, session 4: (1) ar continued to 4,000 steps exactly as run_v2b.sh continued markov
# and parallel (equal budget for the markov - ar claim), its held-out trace collected again;
# (2) the ablations of experiments/drafters/plan.md: markov with ONE change of the second
# recipe reverted, 2,000 steps each (the baseline is run_v2.sh's 2,000-step markov, whose
# held-out trace is ablations/markov-new-2000.parquet, copied unchanged from commit 514f693),
# collected on the same held-out prompts with the same settings. Fixed before any result:
#   loss      --loss kl=0,tv=0.9,ce=0.1                 (the first recipe's loss)
#   encoder   --block encoder --context 0               (first recipe's features and width)
#   context   --context 0                               (no attention over recent target states)
#   data      --data .cache/dsim/data/small             (~20k tokens: 172 prompts x 1 answer)
#   steps800  --steps 800                               (the first recipe's step count)
# The comparison is ablations.py: tau and first-position acceptance of each against the
# baseline, with a paired 90% bootstrap interval over sequences. Two lanes, one torch thread
# each; checkpoints go to runs/abl/ (not committed), traces to experiments/drafters/ablations/.
set -euo pipefail
cd "$(dirname "$0")/../.."
source experiments/drafters/ablate_lib.sh

lane1() {
  nice -n 5 $DSIM train --drafter ar --steps 4000 --resume --threads 1 \
    --out drafters/ar.pt >"$LOGS/train-ar-4000.log" 2>&1
  collect drafters/ar.pt traces/acceptance/smollm2-ar.parquet collect-ar-4000.log
  ablate steps800 --steps 800
  ablate context --context 0
}
lane2() {
  ablate loss --loss kl=0,tv=0.9,ce=0.1
  ablate encoder --block encoder --context 0
  ablate_data
}

lane1 &
lane2 &
wait
