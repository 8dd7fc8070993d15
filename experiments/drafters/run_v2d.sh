#!/usr/bin/env bash
# Issue 16, session 5: the two ablations run_v2c.sh planned but did not reach (stopped for time),
# with exactly its settings (markov, 2,000 steps, one torch thread, one change each, the same
# held-out collection). Fixed before any result, as in run_v2c.sh:
#   context   --context 0                               (no attention over recent target states)
#   data      --data .cache/dsim/data/small             (~20k tokens: 172 prompts x 1 answer)
# The comparison is ablations.py, unchanged. Two lanes, one torch thread each.
set -euo pipefail
cd "$(dirname "$0")/../.."
source experiments/drafters/ablate_lib.sh

lane1() {
  ablate context --context 0
}
lane2() {
  ablate_data
}

lane1 &
lane2 &
wait
