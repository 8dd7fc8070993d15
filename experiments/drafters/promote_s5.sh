#!/usr/bin/env bash
# Issue 16: the 300k-token drafters (run_v2f.sh) replace the shipped ones, by data300k.py's
# promotion rule: only once markov, parallel AND ar finished their 8,000-step runs. For each:
# its greedy held-out trace is collected (run_v2e.sh settings) beside the temperature-1 one in
# experiments/drafters/data300k/; then the checkpoint is copied to drafters/KIND.pt and both
# traces to traces/acceptance/smollm2-KIND{,-greedy}.parquet (the 221k-token files stay in git
# at analyze.SHIPPED_8000); then analyze.py's tables are regenerated (the drafters' latency is
# unchanged: same architectures). Refuses, touching nothing, while a run is missing, or its
# checkpoint (data300k/KIND-8000.pt, committed by the session that trained it; the first
# 8,000-step checkpoints, in the untracked runs/s5/, were lost with the machine on 2026-12-01).
# Run from the repo root: bash experiments/drafters/promote_s5.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
DSIM=${DSIM:-.venv/bin/dsim}
LOGS=${LOGS:-.cache/dsim/logs}
NEW=experiments/drafters/data300k
KINDS="markov parallel ar"

for kind in $KINDS; do
  if [[ ! -f "$NEW/$kind-8000.pt" || ! -f "$NEW/$kind-8000.parquet" ]]; then
    echo "promote_s5.sh: $kind has no committed 8,000-step checkpoint and trace in $NEW" >&2
    exit 2
  fi
done
for kind in $KINDS; do
  [[ -f "$NEW/$kind-8000-greedy.parquet" ]] || nice -n 5 $DSIM collect \
    --drafter "$NEW/$kind-8000.pt" --prompts traces/prompts/heldout.jsonl \
    --out "$NEW/$kind-8000-greedy.parquet" --max-new-tokens 64 --batch-size 24 --greedy \
    >"$LOGS/s5-collect-$kind-8000-greedy.log" 2>&1
done
for kind in $KINDS; do
  cp "$NEW/$kind-8000.pt" "drafters/$kind.pt"
  for suffix in "" -greedy; do
    for ext in parquet json; do
      cp "$NEW/$kind-8000$suffix.$ext" "traces/acceptance/smollm2-$kind$suffix.$ext"
    done
  done
done
.venv/bin/python experiments/drafters/analyze.py --skip-latency
.venv/bin/python experiments/drafters/analyze.py --skip-latency --skip-calibration --suffix=-greedy
